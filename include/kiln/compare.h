// Comparing a backend's outputs with the reference's: what `kiln run --check` prints and every test of
// generated code asserts.
//
// An element passes when |got - ref| <= atol + rtol * |ref|, (rtol, atol) by the data dtype. The reference
// computes in f64 and rounds only at casts and graph outputs; kernels compute in f32 and store every
// intermediate that crosses a kernel boundary in its dtype, so f16/bf16 graphs get one rounding (2^-11
// resp. 2^-8 relative) per kernel boundary on top of the output's:
//   f32   rtol 1e-4  atol 1e-5
//   f16   rtol 1e-2  atol 1e-2
//   bf16  rtol 6e-2  atol 6e-2
// A NaN where the reference has none (or the other way round), or a differing infinity, always fails.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/host_tensor.h"

namespace kiln {

struct Tolerance {
  double rtol = 1e-4, atol = 1e-5;
};
Tolerance tolerance_for(DType t);

struct Comparison {
  bool ok = true;
  double max_abs_error = 0;
  double max_rel_error = 0;   // |got - ref| / max(|ref|, atol), the worst element
  double worst_excess = 0;    // the worst element's error in units of its tolerance (ok: <= 1)
  int64_t worst_index = -1;   // logical (row-major) index of the worst element
  int64_t nan_mismatches = 0;
  std::string problem;        // "" when ok, else the first reason: shape, NaN, infinity or the worst element
};

Comparison compare_tensors(const HostTensor& got, const HostTensor& want, Tolerance tol);

}  // namespace kiln
