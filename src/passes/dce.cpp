#include "passes/dce.h"

namespace kiln {

Status eliminate_dead_code(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  std::vector<bool> live_tensor(g.tensors().size(), false);
  for (Tensor t : g.outputs()) live_tensor[static_cast<size_t>(t.id)] = true;
  std::vector<bool> live_node(g.nodes().size(), false);
  bool any_dead = false;
  // Nodes are in topological order, so one backward sweep finds everything that reaches an output.
  for (int32_t i = static_cast<int32_t>(g.nodes().size()) - 1; i >= 0; --i) {
    for (Tensor t : uses.outputs(i))
      live_node[static_cast<size_t>(i)] = live_node[static_cast<size_t>(i)] || live_tensor[static_cast<size_t>(t.id)];
    if (!live_node[static_cast<size_t>(i)]) {
      any_dead = true;
      continue;
    }
    for (Tensor t : uses.inputs(i)) live_tensor[static_cast<size_t>(t.id)] = true;
  }
  if (!any_dead) return {};
  Rewriter rw(g, Rewriter::consume);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes().size()); ++i) {
    if (live_node[static_cast<size_t>(i)]) rw.copy(i);
  }
  g = rw.finish();
  ctx.graph_changed(g, rw.take_uses(g));
  return {};
}

}  // namespace kiln
