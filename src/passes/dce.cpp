#include "passes/dce.h"

namespace kiln {

Status eliminate_dead_code(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  PerTensor<bool> live_tensor(g.tensors().size(), false);
  for (Tensor t : g.outputs()) live_tensor[t] = true;
  PerIndex<bool> live_node(g.nodes().size(), false);
  bool any_dead = false;
  // Nodes are in topological order, so one backward sweep finds everything that reaches an output.
  for (int32_t i = static_cast<int32_t>(g.nodes().size()) - 1; i >= 0; --i) {
    for (Tensor t : uses.outputs(i)) live_node[i] = live_node[i] || live_tensor[t];
    if (!live_node[i]) {
      any_dead = true;
      continue;
    }
    for (Tensor t : uses.inputs(i)) live_tensor[t] = true;
  }
  if (!any_dead) return {};
  Rewriter rw(g, Rewriter::consume);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes().size()); ++i) {
    if (live_node[i]) rw.copy(i);
  }
  g = rw.finish();
  ctx.graph_changed(g, rw.take_uses(g));
  return {};
}

}  // namespace kiln
