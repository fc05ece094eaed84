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
//
// A whole network's outputs (`kiln run --check`, output_tolerance_for) are judged on their scale as well:
// rounding error accumulated over depth is proportional to the magnitudes that met in each sum, not to the
// value that came out, so an output element near zero in a tensor of large values carries an absolute
// error of order u * rms(ref). There an element passes when
//   |got - ref| <= atol + rtol * (|ref| + rms(ref))
// and the whole tensor must also pass ||got - ref||_2 <= rtol * ||ref||_2 (relative L2). Measured: PyTorch's
// own f32 forward against its f64 one has max |err| / rms <= 1.0e-5 and relative L2 <= 2.6e-6 on nine
// torchvision models (docs/cli.md), 10x and 40x inside the f32 bounds; a conv reading one tap off misses
// them by orders of magnitude (tests/test_compare.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"

namespace kiln {

struct Tolerance {
  double rtol = 1e-4, atol = 1e-5;
  // Judge on the tensor's scale too (above): atol + rtol * (|ref| + rms(ref)) per element, and a relative
  // L2 error of at most rtol.
  bool scaled = false;
};
// Element by element, for one kernel's or op's result (every test of generated code).
Tolerance tolerance_for(DType t);
// On the tensor's scale, for a network's outputs (`kiln run --check`).
Tolerance output_tolerance_for(DType t);
// The same for output `t` of `g`, by the least precise dtype its value passes through: an f32 output
// computed from f16 or bf16 values (a cast back to f32, channel_stats of a bf16 conv) carries their
// rounding, not f32's.
Tolerance output_tolerance_for(const Graph& g, Tensor t);

struct Comparison {
  bool ok = true;
  double max_abs_error = 0;
  double max_rel_error = 0;  // |got - ref| / max(|ref|, atol), the worst element
  double worst_excess = 0;   // the worst element's error in units of its tolerance (ok: <= 1)
  double rel_l2 = 0;         // ||got - ref||_2 / ||ref||_2 over the finite elements (0 when ref is all 0)
  double ref_rms = 0;        // rms(ref) over the finite elements
  int64_t worst_index = -1;  // logical (row-major) index of the worst element
  int64_t nan_mismatches = 0;
  std::string problem;  // "" when ok, else the first reason: shape, NaN, infinity or the worst element
};

Comparison compare_tensors(const HostTensor& got, const HostTensor& want, Tolerance tol);

}  // namespace kiln
