// kiln::backward (include/kiln/autodiff.h): the training graph of a graph and a scalar loss, by reverse-mode
// differentiation with each op's vector-Jacobian rule from its registry row (OpDef::vjp).
//
// The training graph is a copy of the forward graph (same tensors and nodes, so every rule can read the
// forward values it needs) followed by the backward: for each node in reverse order whose output has a
// gradient, its rule adds the nodes computing the gradients of its inputs. Only inputs on a path from a
// parameter get one (VjpCtx::wants), and gradients of a tensor read twice are summed.
#include "kiln/autodiff.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "ops/registry.h"

namespace kiln {

// ---- VjpCtx ----------------------------------------------------------------------------------------------

Tensor VjpCtx::in(std::string_view port, int k) const {
  const int p = op_def(*node_.op).input_index(port);
  KILN_CHECK(p >= 0, fmt::format("op {} has no port '{}'", op_name(*node_.op), port));
  const auto& ts = node_.inputs[static_cast<size_t>(p)];
  return k < static_cast<int>(ts.size()) ? ts[static_cast<size_t>(k)] : Tensor{};
}

double VjpCtx::scalar(std::string_view port) const { return std::get<double>(node_.attrs.at(std::string(port))); }

bool VjpCtx::wants(std::string_view port, int k) const {
  const Tensor t = in(port, k);
  return t.valid() && needs && needs(t);
}

void VjpCtx::grad(std::string_view port, Tensor dx, int k) {
  if (wants(port, k)) grads.emplace_back(in(port, k), dx);
}

Tensor VjpCtx::sum_to(Tensor t, Shape to) {
  const Shape from = g_.shape(t);
  if (from == to) return t;
  const int off = from.rank() - to.rank();
  std::vector<int64_t> axes;
  for (int d = 0; d < from.rank(); ++d)
    if (d < off || (to[d - off] == 1 && from[d] != 1)) axes.push_back(d);
  const Tensor s = axes.empty() ? t : g_.reduce_sum(t, axes);
  return g_.shape(s) == to ? s : g_.reshape(s, to.to_vector());
}

// ---- the engine ------------------------------------------------------------------------------------------

namespace {

// Every parameter's gradient as an output `grad/<name>`: a tensor of its own (an identity where the gradient is a
// tensor of the forward or another parameter's too), zero where the loss does not reach it (with a warning).
void add_gradient_outputs(const Graph& g, std::string_view loss, size_t nt, const std::map<int32_t, Tensor>& grad,
                          Training& out) {
  Graph& T = out.graph;
  std::vector<bool> taken(T.tensors().size(), false);
  for (Tensor o : T.outputs()) taken[static_cast<size_t>(o.id)] = true;
  for (Tensor p : g.bound_tensors()) {
    const TensorInfo& pi = g.tensor(p);
    if (pi.kind != TensorKind::parameter) continue;
    const std::string name = "grad/" + pi.name;
    auto it = grad.find(p.id);
    Tensor dp;
    if (it == grad.end()) {
      out.warnings.push_back(
          fmt::format("parameter '{}' does not reach the loss '{}': its gradient is zero", pi.name, loss));
      dp = T.mul(p, 0.0, name + ".zero");
    } else {
      dp = it->second;
      if (static_cast<size_t>(dp.id) < nt || taken[static_cast<size_t>(dp.id)]) dp = T.identity(dp, name + ".copy");
    }
    taken.resize(T.tensors().size(), false);
    taken[static_cast<size_t>(dp.id)] = true;
    T.output(dp, name);
  }
}

}  // namespace

Result<Training> backward(const Graph& forward, std::string_view loss) {
  if (forward.is_symbolic()) return invalid_argument("backward: bind the graph's symbolic dims first (Graph::bind)");
  Graph g = forward;  // verified (inferred) here
  if (Status st = g.verify(); !st.ok()) return st;
  const std::optional<Tensor> found = g.find_tensor(loss);
  if (!found) return invalid_argument(fmt::format("backward: the graph has no tensor named '{}' (the loss)", loss));
  const Tensor L = *found;
  if (g.shape(L).numel() != 1) {
    return invalid_argument(
        fmt::format("backward: the loss '{}' is {}, expected a scalar (one element): reduce it "
                    "with reduce_mean or reduce_sum",
                    loss, g.shape(L).to_string()));
  }
  const size_t nt = g.tensors().size();
  // Tensors that depend on a parameter (forward sweep) and tensors the loss depends on (backward sweep): a
  // gradient flows exactly through tensors that are both.
  std::vector<bool> from_param(nt, false), to_loss(nt, false);
  for (size_t t = 0; t < nt; ++t) from_param[t] = g.tensors()[t].kind == TensorKind::parameter;
  for (const Node& n : g.nodes()) {
    bool any = false;
    for (const auto& port : n.inputs)
      for (Tensor t : port) any = any || from_param[static_cast<size_t>(t.id)];
    for (Tensor t : n.outputs) from_param[static_cast<size_t>(t.id)] = any;
  }
  to_loss[static_cast<size_t>(L.id)] = true;
  for (size_t i = g.nodes().size(); i-- > 0;) {
    const Node& n = g.node(static_cast<int32_t>(i));
    bool any = false;
    for (Tensor t : n.outputs) any = any || to_loss[static_cast<size_t>(t.id)];
    if (!any) continue;
    for (const auto& port : n.inputs)
      for (Tensor t : port) to_loss[static_cast<size_t>(t.id)] = true;
  }
  const auto needs = [&](Tensor t) {
    return static_cast<size_t>(t.id) < nt && from_param[static_cast<size_t>(t.id)] &&
           to_loss[static_cast<size_t>(t.id)];
  };

  Training out{g, {}};
  Graph& T = out.graph;
  std::map<int32_t, Tensor> grad;  // forward tensor id -> its gradient so far
  // dL/dL = 1, of the loss's shape: 0 * L + 1 (no constant tensors: the training graph binds what the
  // forward binds).
  grad[L.id] = T.add(T.mul(L, 0.0, "grad/seed.zero"), 1.0, "grad/seed");
  for (size_t i = g.nodes().size(); i-- > 0;) {
    const Node& n = g.node(static_cast<int32_t>(i));
    const Tensor y = n.outputs[0];
    const auto dy = grad.find(y.id);
    if (dy == grad.end() || !needs(y)) continue;
    const OpDef& def = op_def(*n.op);
    if (def.vjp == nullptr || n.outputs.size() != 1) {
      return unsupported(
          fmt::format("backward: node '{}' ({}) is on the path from a parameter to the loss '{}', and "
                      "op {} has no gradient rule yet",
                      n.name, def.name, loss, def.name));
    }
    VjpCtx ctx(T, n, dy->second);
    ctx.needs = needs;
    T.set_name_scope("grad/" + n.name + "/");  // `kiln plan` shows whose backward a node is
    def.vjp(ctx);
    T.set_name_scope({});
    if (!ctx.refused.empty()) {
      return unsupported(fmt::format("backward: node '{}' ({}) is on the path from a parameter to the loss '{}': {}",
                                     n.name, def.name, loss, ctx.refused));
    }
    for (const auto& [x, dx] : ctx.grads) {
      KILN_CHECK(T.shape(dx) == g.shape(x), fmt::format("the gradient rule of {} gave input '{}' a gradient of {}",
                                                        def.name, g.tensor(x).name, T.shape(dx).to_string()));
      auto it = grad.find(x.id);
      if (it == grad.end()) {
        grad[x.id] = dx;
      } else {  // a tensor read twice: its gradients summed
        T.set_name_scope("grad/" + g.tensor(x).name + "/sum/");
        it->second = T.add(it->second, dx);
        T.set_name_scope({});
      }
    }
  }
  add_gradient_outputs(g, loss, nt, grad, out);
  if (Status st = T.verify(); !st.ok()) return st;
  return out;
}

}  // namespace kiln
