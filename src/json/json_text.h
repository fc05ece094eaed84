// Step 1 of loading a graph from JSON: the raw text, checked and parsed (src/json only).
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "kiln/json.h"
#include "kiln/status.h"

namespace kiln::json_detail {

// The text as a JSON value: refused when over the size limit, nested deeper than allowed (checked before
// parsing, so deep input cannot exhaust the stack), not JSON, holding a NUL byte or a duplicate object key
// (each named by its path).
Result<nlohmann::json> parse_text(std::string_view text, std::string_view source, const JsonLoadOptions& options);

}  // namespace kiln::json_detail
