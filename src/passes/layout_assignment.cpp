#include "passes/layout_assignment.h"

#include <array>
#include <vector>

#include <fmt/format.h>

#include "ops/registry.h"

namespace kiln {

namespace {

bool is_4d_activation(const TensorInfo& t) { return t.shape.rank() == 4 && is_activation_layout(t.layout); }

// Two layouts order a tensor's elements identically when every permuted dim but one has extent 1.
bool same_order(const TensorInfo& t, Layout a, Layout b) {
  if (a == b) return true;
  if (t.shape.rank() != 4) return false;
  return t.shape[2] * t.shape[3] == 1 || t.shape[1] == 1;
}

// Whether the graph has work that wants NHWC: a convolution, a pooling, or a normalization of 4-D data.
bool wants_nhwc(const Graph& g, const Uses& uses) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const OpDef& def = op_def(uses.op(i));
    const bool sensitive =
        def.kind == FusionKind::anchor || def.kind == FusionKind::window || def.kind == FusionKind::reduction;
    if (sensitive && !def.row_major_only && g.tensor(uses.outputs(i)[0]).shape.rank() == 4) return true;
  }
  return false;
}

std::string_view lower_layout(Layout l) {
  switch (l) {
    case Layout::NCHW: return "nchw";
    case Layout::NHWC: return "nhwc";
    case Layout::KCRS: return "kcrs";
    case Layout::KRSC: return "krsc";
    case Layout::row_major: return "row_major";
  }
  return "?";
}

}  // namespace

Status assign_layouts(Graph& g, PassContext& ctx) {
  const LayoutPolicy policy = ctx.options.layout;
  const Uses& uses = ctx.uses(g);
  const bool nhwc = policy == LayoutPolicy::nhwc || (policy == LayoutPolicy::automatic && wants_nhwc(g, uses));
  if (!nhwc) return {};

  Rewriter rw(g, Rewriter::consume);
  // (new tensor, layout) -> its conversion, by tensor id: a flat table instead of a std::map, whose node per
  // conversion (one per conv weight, tens of thousands at 100k nodes) cost cache misses and allocations.
  std::vector<std::array<Tensor, kLayoutCount>> converted;
  // A new tensor in layout `to`: itself, or one shared conversion (reading through an earlier conversion
  // instead of converting a conversion).
  auto convert = [&](Tensor t, Layout to) -> Tensor {
    const Graph& ng = rw.graph();
    if (same_order(ng.tensor(t), ng.tensor(t).layout, to)) return t;
    if (converted.size() <= static_cast<size_t>(t.id)) converted.resize(ng.tensors().size());
    Tensor& slot = converted[static_cast<size_t>(t.id)][static_cast<size_t>(to)];
    if (slot.valid()) return slot;
    Tensor src = t;
    const TensorInfo& ti = ng.tensor(t);
    if (ti.producer >= 0 && *ng.nodes()[static_cast<size_t>(ti.producer)].op == OpId::layout_convert) {
      Tensor inner = ng.nodes()[static_cast<size_t>(ti.producer)].inputs[0][0];
      if (same_order(ng.tensor(inner), ng.tensor(inner).layout, to)) return slot = inner;
      src = inner;
    }
    const std::string name = rw.fresh_name(fmt::format("{}.{}", ng.tensor(src).name, lower_layout(to)));
    TensorInfo type = ng.tensor(src);  // same dims and dtype, the new order
    type.layout = to;
    Tensor out = rw.add_known(OpId::layout_convert, {{src}}, {{"to", std::string(layout_name(to))}}, name,
                              std::move(type), name);
    return slot = out;  // `converted` is only resized above, so `slot` still refers into it
  };

  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes().size()); ++i) {
    const Node& n = g.nodes()[static_cast<size_t>(i)];
    const OpDef& def = op_def(*n.op);
    const TensorInfo& out = g.tensor(n.outputs[0]);
    // The node's own input lists, mapped in place (no new lists for each node of a big graph).
    std::vector<std::vector<Tensor>> ins = rw.take_inputs(i);
    for (size_t p = 0; p < ins.size(); ++p) {
      for (Tensor& t : ins[p]) {
        Tensor m = rw.map(t);
        const TensorInfo& mi = rw.graph().tensor(m);
        if (*n.op == OpId::layout_convert) {
          // A user's conversion converts from whatever it is given.
        } else if (def.inputs[p].weight4d && mi.layout == Layout::KCRS) {
          m = convert(m, Layout::KRSC);
        } else if (is_4d_activation(mi)) {
          m = convert(m, def.row_major_only ? Layout::NCHW : Layout::NHWC);
        }
        t = m;
      }
    }
    // The output takes NHWC when the op runs on NHWC activations (what its shape rule would infer; the
    // pipeline's verify-after-pass re-infers and compares in tests).
    const bool out_4d = is_4d_activation(out);
    const Layout declared = out.layout;
    TensorInfo type = rw.take_type(n.outputs[0]);  // from here on, `out` has no shape
    bool reads_nhwc = false;
    for (const auto& port : ins)
      for (Tensor t : port)
        reads_nhwc =
            reads_nhwc || (rw.graph().tensor(t).shape.rank() == 4 && rw.graph().tensor(t).layout == Layout::NHWC);
    if (!def.row_major_only && def.kind != FusionKind::layout && out_4d && reads_nhwc) type.layout = Layout::NHWC;
    const bool boundary = uses.is_output[static_cast<size_t>(n.outputs[0].id)] && out_4d;
    std::string out_name = out.name;
    if (boundary) out_name = rw.fresh_name(fmt::format("{}.{}", out.name, lower_layout(type.layout)));
    std::vector<std::string> names(1);
    names[0] = std::move(out_name);
    std::vector<TensorInfo> types(1);
    types[0] = std::move(type);
    const Tensor y = rw.copy_with(i, std::move(ins), std::move(names), std::move(types))[0];
    // The output's declared layout (finish() gives the tensor back its own name, converted or not).
    if (boundary) rw.set_map(n.outputs[0], convert(y, declared));
  }
  Graph result = rw.finish();
  g = std::move(result);
  ctx.graph_changed(g, rw.take_uses(g));
  return {};
}

}  // namespace kiln
