// kiln's log: what the planner planned, which kernels were compiled or loaded from the cache, and why. Off
// but for warnings by default; KILN_LOG_LEVEL=error|warn|info|debug (or `kiln -v`, -vv, -q, --log-level)
// turns it up or down. Lines go to stderr as "kiln: info: ..." unless a sink is set (Python's module routes
// them to its `logging`). Cheap when a level is off: the message is not even formatted.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "kiln/status.h"

namespace kiln {

enum class LogLevel { error, warn, info, debug };

std::string_view log_level_name(LogLevel level);  // "error", "warn", "info", "debug"
std::optional<LogLevel> parse_log_level(std::string_view text);

// The current level: set_log_level's, else KILN_LOG_LEVEL's (read once, at first use; a bad value is warned
// about once and ignored), else warn.
LogLevel log_level();
void set_log_level(LogLevel level);
// KILN_LOG_LEVEL read now and applied: an error naming the variable and its value when it is not a level
// (what `kiln` reports as a usage error).
Status log_level_from_env();
bool log_enabled(LogLevel level);

// Where log lines go (one call per line, from any thread, serialized); an empty function restores stderr.
void set_log_sink(std::function<void(LogLevel, std::string_view)> sink);
void log_message(LogLevel level, std::string_view message);

}  // namespace kiln
