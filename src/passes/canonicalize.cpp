#include "passes/canonicalize.h"

#include "ops/registry.h"

namespace kiln {

namespace {

// Whether every value of dtype `from` is exactly representable in `to`.
bool holds_all_of(DType to, DType from) { return to == from || to == DType::f32; }

// `op` is n's op (from Uses: most nodes are decided without reading the node).
bool is_cast_to_self_or_identity(const Graph& g, OpId op, const Node& n) {
  if (op == OpId::identity) return true;
  if (op != OpId::cast) return false;
  return g.tensor(n.inputs[0][0]).dtype == g.tensor(n.outputs[0]).dtype;
}

}  // namespace

enum class Action : uint8_t { keep, drop, read_through_cast, split_bias };

Status canonicalize(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  // Decide first, so that a graph already in canonical form is not rebuilt.
  std::vector<Action> action(g.nodes().size(), Action::keep);
  bool any = false;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    const OpId op = uses.op(i);
    const OpDef& def = op_def(op);
    const bool writes_output = uses.is_output[static_cast<size_t>(uses.outputs(i)[0].id)];
    const int bias_port = def.input_index("bias");
    if (is_cast_to_self_or_identity(g, op, n) && !writes_output) {
      action[i] = Action::drop;
    } else if (op == OpId::cast && g.tensor(n.inputs[0][0]).producer >= 0) {
      const TensorInfo& xi = g.tensor(n.inputs[0][0]);
      const Node& p = g.nodes()[static_cast<size_t>(xi.producer)];
      if (*p.op == OpId::cast && holds_all_of(xi.dtype, g.tensor(p.inputs[0][0]).dtype))
        action[i] = Action::read_through_cast;
    } else if (def.kind == FusionKind::anchor && bias_port >= 0 && !n.inputs[static_cast<size_t>(bias_port)].empty()) {
      action[i] = Action::split_bias;
    }
    any = any || action[i] != Action::keep;
  }
  if (!any) return {};

  Rewriter rw(g, Rewriter::consume);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes().size()); ++i) {
    const Node& n = g.nodes()[static_cast<size_t>(i)];
    const OpDef& def = op_def(*n.op);
    const Tensor y = n.outputs[0];
    switch (action[static_cast<size_t>(i)]) {
      case Action::keep: rw.copy(i); break;
      case Action::drop: rw.set_map(y, rw.map(n.inputs[0][0])); break;
      case Action::read_through_cast: {
        const Node& p = g.nodes()[static_cast<size_t>(g.tensor(n.inputs[0][0]).producer)];
        rw.copy_with(i, {{rw.map(p.inputs[0][0])}});
        break;
      }
      case Action::split_bias: {
        // The anchor without its bias, then a bias_add along the channel axis (the last one for matmul).
        const int bias_port = def.input_index("bias");
        std::vector<std::vector<Tensor>> ins;
        for (const auto& port : n.inputs) {
          std::vector<Tensor> ts;
          for (Tensor t : port) ts.push_back(rw.map(t));
          ins.push_back(std::move(ts));
        }
        const Tensor bias = ins[static_cast<size_t>(bias_port)][0];
        ins[static_cast<size_t>(bias_port)].clear();
        const Tensor sum = rw.copy_with(i, std::move(ins), {rw.fresh_name(g.tensor(y).name + ".nobias")})[0];
        const int64_t axis = def.family == "matmul" ? -1 : 1;
        rw.set_map(y, rw.add("bias_add", {{"x", {sum}}, {"bias", {bias}}}, {{"axis", axis}},
                             rw.fresh_name(n.name + ".bias"), g.tensor(y).name));
        break;
      }
    }
  }
  g = rw.finish();
  ctx.graph_changed(g, rw.take_uses(g));
  return {};
}

}  // namespace kiln
