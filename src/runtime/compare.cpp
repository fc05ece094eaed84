#include "kiln/compare.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/id_tables.h"

namespace kiln {

Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::f32: return {1e-4, 1e-5};
    case DType::f16: return {1e-2, 1e-2};
    case DType::bf16: return {6e-2, 6e-2};
  }
  return {};
}

Tolerance output_tolerance_for(DType t) {
  Tolerance tol = tolerance_for(t);
  tol.scaled = true;
  return tol;
}

Tolerance output_tolerance_for(const Graph& g, Tensor t) {
  // Precision order bf16 < f16 < f32, by tolerance (their element bounds grow in that order).
  auto coarser = [](DType a, DType b) { return tolerance_for(a).rtol >= tolerance_for(b).rtol ? a : b; };
  DType worst = g.tensor(t).dtype;
  PerTensor<bool> seen(g.tensors().size(), false);
  std::vector<Tensor> pending{t};
  seen[t] = true;
  while (!pending.empty()) {  // every tensor the output is computed from
    const TensorInfo& info = g.tensor(pending.back());
    pending.pop_back();
    worst = coarser(worst, info.dtype);
    if (info.producer < 0) continue;
    for (const auto& port : g.node(info.producer).inputs) {
      for (Tensor in : port) {
        if (!in.valid() || seen[in]) continue;
        seen[in] = true;
        pending.push_back(in);
      }
    }
  }
  return output_tolerance_for(worst);
}

Comparison compare_tensors(const HostTensor& got, const HostTensor& want, Tolerance tol) {
  Comparison c;
  if (got.shape != want.shape) {
    c.ok = false;
    c.problem = fmt::format("shape {} where the reference has {}", got.shape.to_string(), want.shape.to_string());
    return c;
  }
  double ref_sq = 0, err_sq = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.data[static_cast<size_t>(i)], b = want.data[static_cast<size_t>(i)];
    if (!std::isfinite(a) || !std::isfinite(b)) continue;
    ref_sq += b * b;
    err_sq += (a - b) * (a - b);
    ++finite;
  }
  c.ref_rms = finite > 0 ? std::sqrt(ref_sq / static_cast<double>(finite)) : 0;
  c.rel_l2 = ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : 0;
  const double scale = tol.scaled ? c.ref_rms : 0;
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
    const double excess = err / (tol.atol + tol.rtol * (std::fabs(b) + scale));
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
  if (tol.scaled && c.rel_l2 > tol.rtol) {
    c.ok = false;
    if (c.problem.empty()) c.problem = fmt::format("relative L2 error {:.3g}, above {:g}", c.rel_l2, tol.rtol);
  }
  return c;
}

}  // namespace kiln
