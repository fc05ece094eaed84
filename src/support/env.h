// Reading kiln's environment variables. Every bad value is an error that names the variable and the value
// ("KILN_CACHE_MAX_SIZE='lots': not a size ..."): a program silently configured otherwise than asked is
// worse than one that refuses to start. An empty variable counts as unset everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/status.h"

namespace kiln::support {

// The value of `name`, or nothing when it is unset or empty.
std::optional<std::string> env_string(const char* name);

// 1/0, true/false, yes/no, on/off (lower, upper or capitalized). Errors name `what` and the text.
Result<bool> parse_bool(std::string_view text, std::string_view what);
// The variable as a boolean; `fallback` when unset or empty.
Result<bool> env_bool(const char* name, bool fallback = false);

// A positive size in bytes: plain bytes or a number with K, M, G or T (binary units; "KB" and "KiB" are
// the same as "K"): "2G" -> 2147483648. Errors name `what` and the text; `if_not_positive` is added to the
// error for 0 or a negative number (to say what to do instead, e.g. how to turn a cache off).
Result<int64_t> parse_size(std::string_view text, std::string_view what = "size",
                           std::string_view if_not_positive = {});
// The variable as a size; `fallback` when unset or empty.
Result<int64_t> env_size(const char* name, int64_t fallback);

// A decimal integer >= `least` (least >= 0; no sign, no unit, no spaces). Errors name `what`, the text and the bound.
Result<int64_t> parse_int_at_least(std::string_view text, std::string_view what, int64_t least);
// parse_int_at_least(text, what, 1): "expected a positive integer".
Result<int64_t> parse_positive_int(std::string_view text, std::string_view what);
// The variable as a positive integer; `fallback` when unset or empty.
Result<int64_t> env_positive_int(const char* name, int64_t fallback);

}  // namespace kiln::support
