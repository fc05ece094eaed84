#include "ir/names.h"

#include <fmt/format.h>

namespace kiln {

namespace {
bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }
}  // namespace

std::string printable_name(std::string_view name) {
  std::string out;
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_control(c)) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string name_problem(std::string_view name) {
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (is_control(c))
      return fmt::format("name '{}' holds the control byte 0x{:02x} at byte {}: names may not hold control bytes",
                         printable_name(name), c, i);
  }
  return {};
}

}  // namespace kiln
