#include "support/env.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

namespace kiln::support {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Result<bool> parse_bool(std::string_view text, std::string_view what) {
  for (const char* t : {"1", "true", "yes", "on", "TRUE", "True", "YES", "Yes", "ON", "On"}) {
    if (text == t) return true;
  }
  for (const char* f : {"0", "false", "no", "off", "FALSE", "False", "NO", "No", "OFF", "Off"}) {
    if (text == f) return false;
  }
  return invalid_argument(fmt::format("{}='{}': expected 1 or 0 (true/false, yes/no, on/off)", what, text));
}

Result<bool> env_bool(const char* name, bool fallback) {
  auto v = env_string(name);
  return v ? parse_bool(*v, name) : Result<bool>(fallback);
}

Result<int64_t> parse_size(std::string_view text, std::string_view what, std::string_view if_not_positive) {
  auto bad = [&](std::string_view why) {
    return invalid_argument(
        fmt::format("{}='{}': {} (expected bytes or a number with K, M, G or T, e.g. 500M)", what, text, why));
  };
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range) return bad("too large");
  if (ec != std::errc() || end == text.data()) return bad("not a size");
  std::string unit(end, static_cast<size_t>(text.data() + text.size() - end));
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  // Binary units throughout: "1G" is what people mean for a cache limit, and what human_bytes() prints.
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  const char* letters = "KMGT";
  for (int i = 0; i < 4; ++i) {
    const std::string l(1, letters[i]);
    if (unit == l || unit == l + "B" || unit == l + "IB") shift = 10 * (i + 1);
  }
  if (shift < 0) return bad("unknown unit");
  if (n <= 0)
    return bad(if_not_positive.empty() ? "must be positive" : fmt::format("must be positive ({})", if_not_positive));
  if (n > (std::numeric_limits<int64_t>::max() >> shift)) return bad("too large");
  return n << shift;
}

Result<int64_t> env_size(const char* name, int64_t fallback) {
  auto v = env_string(name);
  return v ? parse_size(*v, name) : Result<int64_t>(fallback);
}

Result<int64_t> parse_int_at_least(std::string_view text, std::string_view what, int64_t least) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < least || text.starts_with('-')) {
    const std::string expected = least == 1   ? "a positive integer"
                                 : least == 0 ? "a non-negative integer"
                                              : fmt::format("an integer >= {}", least);
    return invalid_argument(fmt::format("{}='{}': expected {}", what, text, expected));
  }
  return n;
}

Result<int64_t> parse_positive_int(std::string_view text, std::string_view what) {
  return parse_int_at_least(text, what, 1);
}

Result<int64_t> env_positive_int(const char* name, int64_t fallback) {
  auto v = env_string(name);
  return v ? parse_positive_int(*v, name) : Result<int64_t>(fallback);
}

}  // namespace kiln::support
