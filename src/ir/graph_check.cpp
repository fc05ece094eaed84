// Shape inference of one node, and checking a whole graph (Graph::check, verify, format_diagnostic).
#include "kiln/graph.h"

#include <set>

#include <fmt/format.h>

#include "ir/names.h"
#include "ops/registry.h"

namespace kiln {

void Graph::infer(int32_t idx) {
  Node& n = nodes_[static_cast<size_t>(idx)];
  n.infer_errors.clear();
  for (Tensor t : n.outputs) tensors_[static_cast<size_t>(t.id)].inferred = false;
  if (!n.op || !n.build_errors.empty()) return;
  for (const auto& port : n.inputs) {
    for (Tensor t : port) {
      // An input whose shape is unknown was already reported where it was made.
      if (!tensors_[static_cast<size_t>(t.id)].inferred) return;
    }
  }
  const OpDef& def = op_def(*n.op);
  InferCtx ctx(def, n, tensors_);
  def.infer(ctx);
  if (!ctx.failed() && ctx.outputs().size() != n.outputs.size()) {
    KILN_CHECK(false,
               fmt::format("shape rule of {} set {} of {} outputs", def.name, ctx.outputs().size(), n.outputs.size()));
  }
  if (ctx.failed()) {
    for (Diagnostic& d : ctx.errors()) {
      d.node = idx;
      n.infer_errors.push_back(std::move(d));
    }
    return;
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    TensorInfo& t = tensors_[static_cast<size_t>(n.outputs[k].id)];
    const TensorInfo& o = ctx.outputs()[k];
    t.shape = o.shape;
    t.dtype = o.dtype;
    if (!layout_given_[static_cast<size_t>(n.outputs[k].id)]) t.layout = o.layout;
    t.inferred = true;
  }
}
std::vector<Diagnostic> Graph::check() {
  if (verified_) return {};
  KILN_CHECK(log_matches_nodes(),
             "graph: the operand log is out of step with the nodes (a pass edited nodes "
             "without GraphEditor)");
  for (size_t i = 0; i < nodes_.size(); ++i) infer(static_cast<int32_t>(i));
  std::vector<Diagnostic> out = graph_errors_;
  if (std::string p = name_problem(name_); !p.empty()) out.push_back({-1, "name", "graph " + p});
  for (const Node& n : nodes_) {
    out.insert(out.end(), n.build_errors.begin(), n.build_errors.end());
    const size_t from = out.size();
    out.insert(out.end(), n.infer_errors.begin(), n.infer_errors.end());
    if (symbolic_) say_bottom_values(out, from);  // a shape rule failed at this graph's own numbers: say them
  }
  if (outputs_.empty()) out.push_back({-1, "outputs", "the graph has no outputs"});
  std::set<int32_t> listed;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const TensorInfo& t = tensors_[static_cast<size_t>(outputs_[k].id)];
    std::string where = fmt::format("outputs/{}", k);
    if (t.kind != TensorKind::intermediate) {
      out.push_back({-1, where,
                     fmt::format("output '{}' is a graph {}; outputs must be produced by a node", t.name,
                                 tensor_kind_name(t.kind))});
    }
    if (!listed.insert(outputs_[k].id).second) {
      out.push_back({-1, where, fmt::format("output '{}' is listed twice", t.name)});
    }
    if (t.inferred && layout_given_[static_cast<size_t>(outputs_[k].id)] && layout_rank(t.layout) > 0 &&
        layout_rank(t.layout) != t.shape.rank()) {
      out.push_back({-1, where,
                     fmt::format("output '{}': layout {} needs {} dims, got {}", t.name, layout_name(t.layout),
                                 layout_rank(t.layout), t.shape.to_string())});
    }
  }
  // A symbolic graph holds at the bottom of its ranges (just inferred); it must hold over them too.
  if (symbolic_ && out.empty()) out = check_over_ranges();
  verified_ = out.empty();
  return out;
}

std::string Graph::format_diagnostic(const Graph& g, const Diagnostic& d) {
  if (d.node < 0) return d.message;
  const Node& n = g.node(d.node);
  std::string who = fmt::format("node '{}' ({})", n.name, n.op_text);
  if (d.field.rfind("inputs/", 0) == 0) return fmt::format("{} input '{}': {}", who, d.field.substr(7), d.message);
  if (d.field.rfind("outputs/", 0) == 0) return fmt::format("{} output '{}': {}", who, d.field.substr(8), d.message);
  return fmt::format("{}: {}", who, d.message);
}

Status Graph::verify() {
  std::vector<Diagnostic> ds = check();
  if (ds.empty()) return {};
  std::string msg;
  for (size_t i = 0; i < ds.size(); ++i) msg += (i ? "\n" : "") + format_diagnostic(*this, ds[i]);
  return invalid_argument(std::move(msg));
}

}  // namespace kiln
