// The log's level and sink (include/kiln/log.h).
#include "kiln/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "support/env.h"

namespace kiln {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}
std::function<void(LogLevel, std::string_view)>& sink() {
  static std::function<void(LogLevel, std::string_view)> s;
  return s;
}

// -1: not decided yet (KILN_LOG_LEVEL is read at the first use).
std::atomic<int> current{-1};

// KILN_LOG_LEVEL's level, none when it is not set, an error naming the value when it is not a level: what
// the library's first use (which warns and takes warn) and log_level_from_env (the CLI: a usage error) read.
Result<std::optional<LogLevel>> env_log_level() {
  auto text = support::env_string("KILN_LOG_LEVEL");
  if (!text) return std::optional<LogLevel>{};
  if (auto l = parse_log_level(*text)) return l;
  return invalid_argument(fmt::format("KILN_LOG_LEVEL='{}': expected error, warn, info or debug", *text));
}

int from_env_once() {
  static const int level = [] {
    auto l = env_log_level();
    if (!l.ok()) {
      std::fprintf(stderr, "kiln: warn: %s; using warn\n", l.status().message().c_str());
      return static_cast<int>(LogLevel::warn);
    }
    return static_cast<int>(l->value_or(LogLevel::warn));
  }();
  return level;
}

}  // namespace

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  for (LogLevel l : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug})
    if (text == log_level_name(l)) return l;
  if (text == "warning") return LogLevel::warn;
  return std::nullopt;
}

LogLevel log_level() {
  int l = current.load(std::memory_order_relaxed);
  if (l < 0) {
    int expected = -1;
    current.compare_exchange_strong(expected, from_env_once());
    l = current.load(std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(l);
}

void set_log_level(LogLevel level) { current.store(static_cast<int>(level), std::memory_order_relaxed); }

Status log_level_from_env() {
  KILN_ASSIGN_OR_RETURN(const std::optional<LogLevel> l, env_log_level());
  if (l) set_log_level(*l);
  return {};
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(log_level()); }

void set_log_sink(std::function<void(LogLevel, std::string_view)> s) {
  std::lock_guard lock(sink_mutex());
  sink() = std::move(s);
}

void log_message(LogLevel level, std::string_view message) {
  std::lock_guard lock(sink_mutex());
  if (sink()) {
    sink()(level, message);
    return;
  }
  fmt::print(stderr, "kiln: {}: {}\n", log_level_name(level), message);
}

}  // namespace kiln
