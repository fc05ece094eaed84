#include "passes/layout_assignment.h"

#include <algorithm>
#include <array>
#include <span>
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

// The layout of a transpose's 4-D output that stores it as the same bytes as its input (NHWC [N, C, H, W]
// permuted by [0, 2, 3, 1] is row-major [N, H, W, C], and back), else NCHW: then a reader's view of it is
// strided, or the transpose moves memory.
Layout view_layout(const Node& n, const TensorInfo& x, const TensorInfo& y) {
  const auto strides = op_def(*n.op).view(n, x.shape, y.shape, layout_strides(x.shape, x.layout));
  for (Layout l : {Layout::NCHW, Layout::NHWC}) {
    if (strides && layout_strides(y.shape, l) == strides->strides) return l;
  }
  return Layout::NCHW;
}

// Whether op `n` (with a view) reads its input `x`, in x's layout, as a strided view (a transpose always;
// a reshape when the layout keeps the dims it merges or splits contiguous).
bool reads_as_view(const Node& n, const TensorInfo& x, const TensorInfo& y) {
  return op_def(*n.op).view(n, x.shape, y.shape, layout_strides(x.shape, x.layout)).has_value();
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

// The layout conversions assignment adds, one per (tensor, layout) pair, shared by all their readers.
// A class of its own (it was a lambda in assign_layouts) so that the pass reads as its loop over nodes.
class Conversions {
 public:
  Conversions(Graph& g, GraphEditor& ed, size_t old_tensors) : g_(g), ed_(ed), converted_(old_tensors) {}

  // Tensor `t` in layout `to`, for a reader that is old node `before`: itself, or one shared conversion
  // (reading through an earlier conversion instead of converting a conversion).
  Tensor convert(Tensor t, Layout to, int32_t before) {
    const TensorInfo& ti = g_.tensor(t);
    if (same_order(ti, ti.layout, to)) return t;
    if (converted_.size() <= static_cast<size_t>(t.id)) converted_.resize(g_.tensors().size());
    Tensor& slot = converted_[t][static_cast<size_t>(to)];
    if (slot.valid()) return slot;
    Tensor src = t;
    if (ti.producer >= 0 && *ed_.node(ti.producer).op == OpId::layout_convert) {
      Tensor inner = ed_.node(ti.producer).inputs[0][0];
      if (same_order(g_.tensor(inner), g_.tensor(inner).layout, to)) return slot = inner;
      src = inner;
    }
    const std::string name = ed_.fresh_name(fmt::format("{}.{}", g_.tensor(src).name, lower_layout(to)));
    TensorInfo type = g_.tensor(src);  // same dims and dtype, the new order
    type.layout = to;
    const Tensor out = ed_.add_known(before, OpId::layout_convert, {{src}}, {{"to", std::string(layout_name(to))}},
                                     name, std::move(type), name);  // `ti` is stale from here (tensors grew)
    ed_.record(g_.tensor(out).producer);
    slot = out;  // `converted_` did not grow since `slot` was taken
    return out;
  }

 private:
  Graph& g_;
  GraphEditor& ed_;
  // (tensor, layout) -> its conversion, by tensor id: a flat table instead of a std::map, whose node per
  // conversion (one per conv weight, tens of thousands at 100k nodes) cost cache misses and allocations.
  PerTensor<std::array<Tensor, kLayoutCount>> converted_;
};

}  // namespace

Status assign_layouts(Graph& g, PassContext& ctx) {
  const LayoutPolicy policy = ctx.options.layout;
  const Uses& uses = ctx.uses(g);
  const bool nhwc = policy == LayoutPolicy::nhwc || (policy == LayoutPolicy::automatic && wants_nhwc(g, uses));
  if (!nhwc) return {};

  // In place: every node and tensor stays where it is, retyped and rewired; conversions are added before
  // their first reader (rebuilding the graph cost most of the planning time of a 100k-node graph).
  GraphEditor ed(g);
  Conversions conversions(g, ed, g.tensors().size());

  // The old nodes' operands are read from Uses (flat arrays, built before the edit); a node itself is
  // touched only to rewire it, or to learn its ports when one of them takes a weight. At 100k nodes, chasing
  // every node's port vectors was most of this pass's time (cache misses, not work).
  const int32_t nodes = static_cast<int32_t>(ed.old_node_count());
  std::vector<Tensor> ins;  // node i's inputs after this pass, ports flattened as in Uses
  for (int32_t i = 0; i < nodes; ++i) {
    const OpId op = uses.op(i);
    const OpDef& def = op_def(op);
    const std::span<const Tensor> old_ins = uses.inputs(i);
    ins.assign(old_ins.begin(), old_ins.end());
    // What node i reads `t` as; `weight` for a port that takes a 4-D weight.
    auto wanted = [&](Tensor t, bool weight) {
      const TensorInfo& ti = g.tensor(t);
      // A transpose reads any layout through its view; a reshape the layouts it is a view of.
      if (def.store_view && reads_as_view(ed.node(i), ti, g.tensor(uses.outputs(i)[0]))) return t;
      if (weight && ti.layout == Layout::KCRS) return conversions.convert(t, Layout::KRSC, i);
      if (is_4d_activation(ti)) return conversions.convert(t, def.row_major_only ? Layout::NCHW : Layout::NHWC, i);
      return t;
    };
    if (op != OpId::layout_convert) {  // a user's conversion converts from whatever it is given
      const bool has_weight =
          std::any_of(def.inputs.begin(), def.inputs.end(), [](const PortSpec& p) { return p.weight4d; });
      if (has_weight) {
        size_t k = 0;
        const Node& n = ed.node(i);
        for (size_t p = 0; p < n.inputs.size(); ++p)
          for (size_t j = 0; j < n.inputs[p].size(); ++j, ++k) ins[k] = wanted(ins[k], def.inputs[p].weight4d);
      } else {
        for (Tensor& t : ins) t = wanted(t, false);
      }
      if (!std::equal(ins.begin(), ins.end(), old_ins.begin())) {
        size_t k = 0;
        for (auto& port : ed.node(i).inputs)
          for (Tensor& t : port) t = ins[k++];
      }
    }
    // The output takes NHWC when the op runs on NHWC activations (what its shape rule would infer; the
    // pipeline's verify-after-pass re-infers and compares in tests).
    const std::span<const Tensor> outs = uses.outputs(i);
    const Tensor y = outs[0];
    const bool out_4d = is_4d_activation(g.tensor(y));
    const Layout declared = g.tensor(y).layout;
    bool reads_nhwc = false;
    for (Tensor t : ins)
      reads_nhwc = reads_nhwc || (g.tensor(t).shape.rank() == 4 && g.tensor(t).layout == Layout::NHWC);
    if (!def.row_major_only && def.kind != FusionKind::layout && out_4d && reads_nhwc)
      ed.tensor(y).layout = Layout::NHWC;
    if (def.store_view && op != OpId::layout_convert && out_4d) {
      ed.tensor(y).layout = view_layout(ed.node(i), g.tensor(ins[0]), g.tensor(y));
      ed.set_layout_given(y, true);  // verify keeps it (the shape rule says row-major)
    }
    ed.record(i, op, ins, outs);
    // A graph output keeps its name and declared layout: when the node now writes another order, its
    // tensor is renamed and a conversion writes the declared one under the output's name; when the two
    // orders are the same bytes (H·W = 1 or C = 1), the tensor simply keeps the declared layout.
    if (uses.is_output(y) && out_4d && same_order(g.tensor(y), g.tensor(y).layout, declared)) {
      ed.tensor(y).layout = declared;
      ed.set_layout_given(y, true);  // verify keeps it (the op's shape rule would say NHWC)
    } else if (uses.is_output(y) && out_4d) {
      const std::string out_name = g.tensor(y).name;
      ed.rename(y, ed.fresh_name(fmt::format("{}.{}", out_name, lower_layout(g.tensor(y).layout))));
      ed.set_layout_given(y, false);
      const Tensor back = conversions.convert(y, declared, i + 1);
      ed.rename(back, out_name);
      ed.set_layout_given(back, true);
      ed.replace_output(y, back);
    }
  }
  ctx.graph_changed(g, ed.commit());
  return {};
}

}  // namespace kiln
