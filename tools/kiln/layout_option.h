// The --layout option shared by `kiln plan`, `kiln run` and `kiln prewarm`.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "kiln/plan.h"

namespace kiln::cli {

inline std::optional<LayoutPolicy> parse_layout_policy(std::string_view s) {
  if (s == "auto") return LayoutPolicy::automatic;
  if (s == "nchw") return LayoutPolicy::nchw;
  if (s == "nhwc") return LayoutPolicy::nhwc;
  return std::nullopt;
}

// The one message for a bad --layout value, whichever command got it.
inline std::string layout_usage_message(std::string_view s) {
  return fmt::format("unknown --layout '{}': expected auto, nchw or nhwc", s);
}

}  // namespace kiln::cli
