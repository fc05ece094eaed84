// Logging from inside kiln (include/kiln/log.h): KILN_LOG(info, "planned '{}': {} kernels", ...). The
// arguments are formatted only when the level is on.
#pragma once

#include <fmt/format.h>

#include "kiln/log.h"

#define KILN_LOG(level, ...)                                                    \
  do {                                                                          \
    if (::kiln::log_enabled(::kiln::LogLevel::level))                           \
      ::kiln::log_message(::kiln::LogLevel::level, ::fmt::format(__VA_ARGS__)); \
  } while (0)
