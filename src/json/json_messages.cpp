// How the JSON loader shows values and choices in its messages.
#include "json/json_messages.h"

#include <fmt/format.h>

#include "kiln/types.h"

namespace kiln::json_detail {

std::string printable(std::string_view s) {
  std::string r;
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f) {
      r += fmt::format("\\x{:02x}", c);
    } else {
      r += static_cast<char>(c);
    }
  }
  return r;
}

std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  constexpr size_t kMax = 60;
  if (s.size() > kMax) {
    size_t cut = kMax - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    s = s.substr(0, cut) + "...";
  }
  return s;
}

std::string quoted_list(const std::vector<std::string_view>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += fmt::format("{}'{}'", i ? ", " : "", names[i]);
  return s;
}

std::string valid_layouts() {
  std::vector<std::string_view> v;
  for (int i = 0; i < kLayoutCount; ++i) v.push_back(layout_name(static_cast<Layout>(i)));
  return quoted_list(v);
}

std::string valid_dtypes() {
  std::vector<std::string_view> v;
  for (int i = 0; i < kDTypeCount; ++i) v.push_back(dtype_name(static_cast<DType>(i)));
  return quoted_list(v);
}

}  // namespace kiln::json_detail
