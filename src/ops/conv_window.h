// What every conv row shares (conv2d, conv2d_dgrad, conv2d_wgrad): the window attributes, the padding's four
// sides, the output extent of a window, the weights' fan-in.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/types.h"
#include "ops/registry.h"

namespace kiln {

// Padding as [top, left, bottom, right] from [ph, pw] or [top, left, bottom, right].
inline std::array<int64_t, 4> pad4(const std::vector<int64_t>& p) {
  if (p.size() == 2) return {p[0], p[1], p[0], p[1]};
  return {p[0], p[1], p[2], p[3]};
}

// Output extent of a sliding window, floor((in + pads - dilation * (k - 1) - 1) / stride) + 1: <= 0 when the
// window does not fit (the division rounds down, not toward zero, so a window larger than the padded input
// gives <= 0 whatever the stride); nullopt when the dilated window's extent overflows int64 (then it fits no
// input). The attributes are at most kMaxKernelInt and `in` at most kMaxElements, so only that extent (a
// dilation times a weight dim) can overflow, but every step is checked.
inline std::optional<int64_t> conv_out(int64_t in, int64_t pad_lo, int64_t pad_hi, int64_t k, int64_t stride,
                                       int64_t dilation) {
  int64_t padded = 0, reach = 0, span = 0;
  if (!checked_add(in, pad_lo, &padded) || !checked_add(padded, pad_hi, &padded) ||
      !checked_mul(dilation, k - 1, &reach) || !checked_sub(padded, reach, &span) || !checked_sub(span, 1, &span))
    return std::nullopt;
  return span / stride - (span % stride < 0 ? 1 : 0) + 1;  // <= span + 1 <= padded
}

// conv2d's window attributes, which its gradients take with the forward's values.
inline std::vector<AttrSpec> conv_window_attrs() {
  return {{.name = "stride", .type = AttrType::ints, .default_value = std::vector<int64_t>{1, 1}, .sizes = {2}},
          {.name = "padding", .type = AttrType::ints, .default_value = std::vector<int64_t>{0, 0}, .sizes = {2, 4}},
          {.name = "dilation", .type = AttrType::ints, .default_value = std::vector<int64_t>{1, 1}, .sizes = {2}},
          {.name = "groups", .type = AttrType::int_, .default_value = int64_t{1}}};
}

// Products each output of a conv with weight `w` [K, C/groups, R, S] sums over (PortSpec::fan_in).
inline int64_t conv_weight_fan_in(const Shape& w, const Attrs&) { return w.rank() == 4 ? w.numel() / w[0] : 1; }

}  // namespace kiln
