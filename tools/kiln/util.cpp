// Argument parsing and printing helpers shared by the commands.
#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "cli.h"

namespace kiln::cli {

std::optional<std::string> Args::get(std::string_view flag) const {
  for (const auto& [f, v] : options) {
    if (f == flag) return v;
  }
  return std::nullopt;
}

std::optional<UsageError> parse_args(std::string_view command, const std::vector<std::string>& argv,
                                     const std::vector<std::string_view>& value_flags, Args& out,
                                     const std::vector<std::string_view>& switches) {
  auto known = [&](std::string_view f) {
    return std::find(value_flags.begin(), value_flags.end(), f) != value_flags.end();
  };
  auto is_switch = [&](std::string_view f) { return std::find(switches.begin(), switches.end(), f) != switches.end(); };
  auto list = [&] {
    std::string s;
    for (auto f : value_flags) s += (s.empty() ? "" : ", ") + std::string(f);
    for (auto f : switches) s += (s.empty() ? "" : ", ") + std::string(f);
    return s.empty() ? std::string("none") : s;
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      continue;
    }
    if (a.size() < 2 || a[0] != '-') {  // "-" alone is a positional argument (a file name)
      out.positional.push_back(a);
      continue;
    }
    std::string flag = a;
    std::optional<std::string> value;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    if (is_switch(flag)) {
      if (value) return UsageError{fmt::format("option '{}' takes no value", flag)};
      if (out.get(flag)) return UsageError{fmt::format("option '{}' given twice", flag)};
      out.options.emplace_back(flag, "");
      continue;
    }
    if (!known(flag)) {
      return UsageError{fmt::format("unknown option '{}' for 'kiln {}' (its options: {})", flag, command, list())};
    }
    if (!value) {
      if (i + 1 >= argv.size()) return UsageError{fmt::format("option '{}' needs a value", flag)};
      value = argv[++i];
    }
    if (out.get(flag)) return UsageError{fmt::format("option '{}' given twice", flag)};
    out.options.emplace_back(flag, *value);
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
  std::string lead = source.empty() ? std::string() : fmt::format("{}: ", source);
  size_t start = 0;
  while (start <= message.size()) {
    size_t end = message.find('\n', start);
    if (end == std::string_view::npos) end = message.size();
    std::string_view line = message.substr(start, end - start);
    if (!line.empty() || start == 0) {
      bool named = lead.empty() || line.substr(0, lead.size()) == lead;
      fmt::print(stderr, "error: {}{}\n", terminal_safe(named ? "" : lead), terminal_safe(line));
    }
    start = end + 1;
  }
}

void print_error(const Status& s, std::string_view source) { print_error(s.message(), source); }

void print_table(const std::vector<std::vector<std::string>>& rows, int indent) {
  fmt::print("{}", render_table(rows, indent));
}

}  // namespace kiln::cli
