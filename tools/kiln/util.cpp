// Argument parsing and printing helpers shared by the commands.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "cli.h"
#include "support/lines.h"

namespace kiln::cli {

std::optional<std::string> Args::get(std::string_view flag) const {
  for (const auto& [f, v] : options) {
    if (f == flag) return v;
  }
  return std::nullopt;
}

namespace {
// A line for the terminal: control bytes (a name's ESC or NUL, which the graph check refuses but quotes)
// spelled \xNN, so that an error message cannot drive the terminal.
std::string terminal_safe(std::string_view line) {
  std::string out;
  for (const char ch : line) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out;
}
}  // namespace

void print_error(std::string_view message, std::string_view source) {
  std::vector<std::string> lines = support::lines_naming(message, source);
  if (lines.empty()) lines.push_back(source.empty() ? "unknown error" : std::string(source));
  for (const std::string& line : lines) fmt::print(stderr, "error: {}\n", terminal_safe(line));
}

void print_error(const Status& s, std::string_view source) { print_error(s.message(), source); }

void print_table(const std::vector<std::vector<std::string>>& rows, int indent) {
  fmt::print("{}", render_table(rows, indent));
}

}  // namespace kiln::cli
