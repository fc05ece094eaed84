// Rewrites of ONNX node patterns into single ops kiln has, before the nodes are imported.
#pragma once

#include <vector>

#include "importer.h"

namespace kiln::onnx_import {

// The graph's nodes in order, with each erf-based GELU (x * 0.5 * (1 + Erf(x / sqrt(2))), as PyTorch exports
// nn.GELU below opset 20) replaced by one Gelu node, and each layer norm written out in ReduceMean / Sub / Pow /
// Sqrt / Div (below opset 17) by one LayerNormalization. Constants are looked up in `imp` (initializers) and in
// the graph's Constant nodes.
std::vector<onnx::NodeProto> rewrite_patterns(const Importer& imp, const onnx::GraphProto& graph);

}  // namespace kiln::onnx_import
