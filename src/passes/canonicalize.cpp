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

// The anchor's own bias becomes a bias_add after it, in place (GraphEditor): the anchor writes a new tensor
// `<y>.nobias` and the bias_add writes the old output, which keeps its name, type and readers. Rebuilding
// the graph for this cost most of the planning time of a 100k-node graph whose convolutions carry biases.
void split_biases(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  std::vector<int32_t> anchors;  // nodes with their own bias, in order
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const OpDef& def = op_def(uses.op(i));
    if (def.kind != FusionKind::anchor) continue;
    const int port = def.input_index("bias");
    if (port >= 0 && !g.nodes()[i].inputs[static_cast<size_t>(port)].empty())
      anchors.push_back(static_cast<int32_t>(i));
  }
  if (anchors.empty()) return;

  GraphEditor ed(g);
  size_t next = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(ed.old_node_count()); ++i) {
    const OpId op = uses.op(i);
    if (next == anchors.size() || anchors[next] != i) {
      ed.record(i, op, uses.inputs(i), uses.outputs(i));
      continue;
    }
    ++next;
    const OpDef& def = op_def(op);
    Node& n = ed.node(i);
    auto& bias_port = n.inputs[static_cast<size_t>(def.input_index("bias"))];
    const Tensor bias = bias_port[0];
    bias_port.clear();
    const Tensor y = n.outputs[0];
    const Tensor sum = ed.new_output(i, ed.fresh_name(g.tensor(y).name + ".nobias"));
    // The sum has the layout the anchor's shape rule gives (x's for a conv, row-major for a matmul), not
    // the old output's: a graph output declared in another layout keeps that declaration on `y` alone.
    const bool matmul = def.anchors == GroupKind::matmul;
    ed.tensor(sum).layout = matmul ? Layout::row_major : g.tensor(n.inputs[0][0]).layout;
    ed.record(i);
    // Along the channel axis (the last one for matmul).
    const int64_t axis = matmul ? -1 : 1;
    ed.record(ed.add_known_writing(i + 1, OpId::bias_add, {{sum}, {bias}}, {{"axis", axis}},
                                   ed.fresh_name(n.name + ".bias"), y));
  }
  ctx.graph_changed(g, ed.commit());
}

enum class Action : uint8_t { keep, drop, read_through_cast };

// Identities and casts to the tensor's own dtype go; a cast of a widening cast reads the original. These
// drop nodes and rewire their readers, so the graph is rebuilt (a Rewriter) — only when there is one.
void drop_identities_and_casts(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  // Decide first, so that a graph already in canonical form is not rebuilt.
  std::vector<Action> action(g.nodes().size(), Action::keep);
  bool any = false;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const OpId op = uses.op(i);
    if (op != OpId::identity && op != OpId::cast) continue;
    const Node& n = g.nodes()[i];
    const bool writes_output = uses.is_output(uses.outputs(i)[0]);
    if (is_cast_to_self_or_identity(g, op, n) && !writes_output) {
      action[i] = Action::drop;
    } else if (op == OpId::cast && g.tensor(n.inputs[0][0]).producer >= 0) {
      const TensorInfo& xi = g.tensor(n.inputs[0][0]);
      const Node& p = g.node(xi.producer);
      if (*p.op == OpId::cast && holds_all_of(xi.dtype, g.tensor(p.inputs[0][0]).dtype))
        action[i] = Action::read_through_cast;
    }
    any = any || action[i] != Action::keep;
  }
  if (!any) return;

  Rewriter rw(g, Rewriter::consume);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes().size()); ++i) {
    const Node& n = g.node(i);
    switch (action[static_cast<size_t>(i)]) {
      case Action::keep: rw.copy(i); break;
      case Action::drop: rw.set_map(n.outputs[0], rw.map(n.inputs[0][0])); break;
      case Action::read_through_cast: {
        const Node& p = g.node(g.tensor(n.inputs[0][0]).producer);
        rw.copy_with(i, {{rw.map(p.inputs[0][0])}});
        break;
      }
    }
  }
  g = rw.finish();
  ctx.graph_changed(g, rw.take_uses(g));
}

}  // namespace

Status canonicalize(Graph& g, PassContext& ctx) {
  split_biases(g, ctx);
  drop_identities_and_casts(g, ctx);
  return {};
}

}  // namespace kiln
