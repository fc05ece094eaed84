// canonicalize: one way to say each thing, so that fusion and codegen see few patterns.
//
// Needs: a verified graph. Guarantees, with the same results under the reference backend:
//  - conv2d's and matmul's own bias become a separate bias_add (along the channel axis, or the last axis
//    for matmul), so every bias is the same epilogue operation;
//  - identity ops and casts to the tensor's own dtype disappear (unless they write a graph output);
//  - cast(cast(x, t1), t2) reads x directly when t1 holds every value of x's dtype (f32, or x's own).
// batch_norm stays one per-channel pointwise op: its scale and shift are computed from scale, shift,
// mean, var and epsilon inside the kernel, so the graph's inputs stay what the user binds. Chains of scalar
// operations are not folded: reassociating them would change results (a binary op with two scalar
// operands is rejected by verify, so there is no all-constant node to fold).
#pragma once

#include "passes/pass.h"

namespace kiln {
Status canonicalize(Graph& g, PassContext& ctx);
}
