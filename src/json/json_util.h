// Small helpers shared by the JSON loader and saver (src/json only; the only place that knows nlohmann).
#pragma once

#include <string>
#include <string_view>

namespace kiln::json_detail {

inline constexpr std::string_view kFormatName = "kiln.graph";
inline constexpr int kFormatVersion = 1;

// One reference token of a JSON pointer (RFC 6901): '~' -> "~0", '/' -> "~1".
inline std::string pointer_token(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  for (char c : s) {
    if (c == '~') {
      r += "~0";
    } else if (c == '/') {
      r += "~1";
    } else {
      r += c;
    }
  }
  return r;
}

}  // namespace kiln::json_detail
