#include "kiln/compare.h"

#include <cmath>

#include <fmt/format.h>

namespace kiln {

Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::f32: return {1e-4, 1e-5};
    case DType::f16: return {1e-2, 1e-2};
    case DType::bf16: return {6e-2, 6e-2};
  }
  return {};
}

Comparison compare_tensors(const HostTensor& got, const HostTensor& want, Tolerance tol) {
  Comparison c;
  if (got.shape != want.shape) {
    c.ok = false;
    c.problem = fmt::format("shape {} where the reference has {}", got.shape.to_string(), want.shape.to_string());
    return c;
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.data[static_cast<size_t>(i)], b = want.data[static_cast<size_t>(i)];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) {
        if (c.nan_mismatches++ == 0 && c.problem.empty())
          c.problem = fmt::format("element {} is {} where the reference has {}", i, a, b);
        c.ok = false;
      }
      continue;
    }
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b) {
        if (c.problem.empty()) c.problem = fmt::format("element {} is {} where the reference has {}", i, a, b);
        c.ok = false;
      }
      continue;
    }
    const double err = std::fabs(a - b);
    c.max_abs_error = std::max(c.max_abs_error, err);
    c.max_rel_error = std::max(c.max_rel_error, err / std::max(std::fabs(b), tol.atol));
    const double excess = err / (tol.atol + tol.rtol * std::fabs(b));
    if (excess > c.worst_excess) {
      c.worst_excess = excess;
      c.worst_index = i;
    }
  }
  if (c.worst_excess > 1.0) {
    c.ok = false;
    if (c.problem.empty()) {
      const auto w = static_cast<size_t>(c.worst_index);
      c.problem = fmt::format("element {} is {} where the reference has {} ({:.3g}x the tolerance)", c.worst_index,
                              got.data[w], want.data[w], c.worst_excess);
    }
  }
  return c;
}

}  // namespace kiln
