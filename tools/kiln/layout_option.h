// The --layout option shared by `kiln plan`, `kiln run` and `kiln prewarm`.
#pragma once

#include <optional>
#include <string_view>

#include "kiln/plan.h"

namespace kiln::cli {

inline std::optional<LayoutPolicy> parse_layout_policy(std::string_view s) {
  if (s == "auto") return LayoutPolicy::automatic;
  if (s == "nchw") return LayoutPolicy::nchw;
  if (s == "nhwc") return LayoutPolicy::nhwc;
  return std::nullopt;
}

}  // namespace kiln::cli
