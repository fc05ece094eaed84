// JSON values read as attribute values and integers (src/json only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/attrs.h"
#include "ops/registry.h"

namespace kiln::json_detail {

using json = nlohmann::json;

// Whether a JSON value has the kind of value an attribute takes (an integer where an int is expected,
// any number where a float is, ...); list lengths and string choices are not looked at.
bool json_kind_fits(const AttrSpec& s, const json& v);

// An integer JSON value as int64_t, or why it is not one.
std::optional<int64_t> as_int64(const json& v, std::string* why);

// A JSON attribute value as an AttrValue; on failure `why` says why and `where` gets the path suffix of
// the offending part ("" or "/<k>" for a list element).
std::optional<AttrValue> to_attr_value(const json& v, std::string* why, std::string* where);

}  // namespace kiln::json_detail
