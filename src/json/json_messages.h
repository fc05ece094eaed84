// How the JSON loader shows values and choices in its messages (src/json only).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::json_detail {

using json = nlohmann::json;

// A load reports at most this many problems (and duplicate keys), then says how many more there are.
inline constexpr size_t kMaxErrorLines = 50;

// Escapes control bytes and bytes outside ASCII (text of unknown encoding, such as nlohmann's "last read").
std::string printable(std::string_view s);

// A JSON value as it appears in "got ..." (compact, at most ~60 characters).
std::string shown(const json& v);

// 'a', 'b', 'c': the choices a message lists.
std::string quoted_list(const std::vector<std::string_view>& names);
std::string valid_layouts();
std::string valid_dtypes();

}  // namespace kiln::json_detail
