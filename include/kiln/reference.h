// The reference backend (`ref`): runs a verified graph op by op on the CPU in f64. The oracle for every
// test of generated code.
#pragma once

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/status.h"

namespace kiln {

// Runs `g` on `inputs` (every graph input and parameter by name, in logical dims, shapes and dtypes as
// declared; no unknown names). Returns the graph outputs by name. Values are computed in f64; `cast`
// rounds to its target dtype and graph outputs are rounded to their storage dtype, as a kernel's store
// would. Fails with a Status for an unverified graph or a wrong binding.
Result<TensorMap> run_reference(const Graph& g, const TensorMap& inputs);

struct ReferenceOptions {
  // Inputs and outputs rounded to their storage dtype, as a device holds them (the default). Off: f64 from
  // the inputs given to the outputs returned, what a finite-difference check of gradients needs (a step of
  // 1e-6 is lost in an f32 rounding).
  bool round_to_storage = true;
};
Result<TensorMap> run_reference(const Graph& g, const TensorMap& inputs, const ReferenceOptions& options);

// Checks bindings against a graph's inputs and parameters: every one bound, no unknown names, shapes and
// dtypes as declared. Shared by every backend.
Status check_bindings(const Graph& g, const TensorMap& inputs);

}  // namespace kiln
