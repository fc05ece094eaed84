// layout assignment: the memory order of every intermediate, and conversions only at the boundaries.
//
// Needs: a verified, canonical graph. Guarantees, with the same logical values:
//  - under LayoutPolicy::automatic, when the graph has a convolution, a pooling or a normalization over
//    4-D activations, every 4-D activation intermediate is NHWC (the order tensor-core convolutions read);
//    LayoutPolicy::nhwc does so for any graph; LayoutPolicy::nchw leaves everything NCHW;
//  - ops that read row-major logical order (reshape, transpose, matmul: OpDef::row_major_only) get NCHW
//    inputs; a 4-D tensor with H·W = 1 or C = 1 is the same in both orders and needs no conversion;
//  - graph inputs and outputs keep their declared layouts: one layout_convert per (tensor, layout) where
//    a boundary is crossed, shared by all readers; back-to-back conversions cancel;
//  - KCRS conv weights read by NHWC convolutions get one KCRS -> KRSC layout_convert each, which the
//    fusion pass marks as a weight transform (run once per bound weight, not per run).
#pragma once

#include "passes/pass.h"

namespace kiln {
Status assign_layouts(Graph& g, PassContext& ctx);
}
