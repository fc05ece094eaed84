// The optimizer step appended to a training graph (include/kiln/optimizer.h): pointwise ops per parameter,
// whose inputs are the parameter, its gradient, its state and the step's scalars.
#include <cmath>

#include <fmt/format.h>

#include "kiln/optimizer.h"

namespace kiln {

std::vector<const char*> optimizer_slots(const OptimizerOptions& o) {
  if (std::holds_alternative<SgdOptions>(o)) return {"momentum"};
  return {"m", "v"};
}

std::vector<std::string> optimizer_scalars(const OptimizerOptions& o) {
  if (std::holds_alternative<SgdOptions>(o)) return {"optimizer/lr"};
  return {"optimizer/lr", "optimizer/step_size", "optimizer/rsqrt_bias2"};
}

TensorMap optimizer_scalar_values(const OptimizerOptions& o, double lr, int64_t t) {
  const auto scalar = [](double v) {
    HostTensor h(Shape{}, DType::f32);
    h.data[0] = v;
    return h;
  };
  TensorMap m{{"optimizer/lr", scalar(lr)}};
  if (const AdamWOptions* a = std::get_if<AdamWOptions>(&o)) {
    const double bias1 = 1 - std::pow(a->beta1, static_cast<double>(t));
    const double bias2 = 1 - std::pow(a->beta2, static_cast<double>(t));
    m["optimizer/step_size"] = scalar(lr / bias1);
    m["optimizer/rsqrt_bias2"] = scalar(1 / std::sqrt(bias2));
  }
  return m;
}

namespace {

Status check_options(const OptimizerOptions& o) {
  const auto bad = [](const char* what, double v, const char* want) {
    return invalid_argument(fmt::format("optimizer: {} = {} is out of range: expected {}", what, v, want));
  };
  if (const SgdOptions* s = std::get_if<SgdOptions>(&o)) {
    if (!(s->momentum >= 0 && s->momentum < 1)) return bad("momentum", s->momentum, "a number in [0, 1)");
    if (!(s->weight_decay >= 0) || !std::isfinite(s->weight_decay))
      return bad("weight_decay", s->weight_decay, "a finite number >= 0");
    if (s->nesterov && s->momentum == 0) return bad("momentum", 0, "above 0 with Nesterov momentum");
    return {};
  }
  const AdamWOptions& a = std::get<AdamWOptions>(o);
  if (!(a.beta1 >= 0 && a.beta1 < 1)) return bad("beta1", a.beta1, "a number in [0, 1)");
  if (!(a.beta2 >= 0 && a.beta2 < 1)) return bad("beta2", a.beta2, "a number in [0, 1)");
  if (!(a.epsilon > 0) || !std::isfinite(a.epsilon)) return bad("epsilon", a.epsilon, "a finite number > 0");
  if (!(a.weight_decay >= 0) || !std::isfinite(a.weight_decay))
    return bad("weight_decay", a.weight_decay, "a finite number >= 0");
  return {};
}

}  // namespace

Result<Graph> with_optimizer_step(const Training& training, const OptimizerOptions& o) {
  KILN_RETURN_IF_ERROR(check_options(o));
  Graph g = training.graph;
  std::vector<Tensor> scalars;
  for (const std::string& n : optimizer_scalars(o)) scalars.push_back(g.input(n, Shape{}));
  const Tensor lr = scalars[0];
  std::vector<Tensor> params;
  for (Tensor t : g.bound_tensors())
    if (g.tensor(t).kind == TensorKind::parameter) params.push_back(t);
  for (Tensor p : params) {
    const std::string name = g.tensor(p).name;  // copies: adding nodes may move the graph's tensors
    const Shape shape = g.shape(p);
    const DType dt = g.tensor(p).dtype;
    const Layout layout = g.tensor(p).layout;  // the state in the parameter's layout (a conv weight's KCRS)
    const auto state = [&](const char* slot) { return g.input(state_name(name, slot), shape, dt, layout); };
    const std::optional<Tensor> grad = g.find_tensor("grad/" + name);
    if (!grad) return invalid_argument(fmt::format("optimizer: parameter '{}' has no gradient 'grad/{}'", name, name));
    g.set_name_scope("step/" + name + "/");
    // The scalars in the parameter's dtype (a binary op's operands share one).
    const auto s = [&](Tensor v) { return dt == DType::f32 ? v : g.cast(v, dt); };
    if (const SgdOptions* sgd = std::get_if<SgdOptions>(&o)) {
      Tensor d = *grad;
      if (sgd->weight_decay != 0) d = g.add(d, g.mul(p, sgd->weight_decay));
      Tensor update = d;
      if (sgd->momentum != 0) {
        const Tensor v = g.add(g.mul(state("momentum"), sgd->momentum), d);
        g.output(v, updated_state_name(name, "momentum"));
        update = sgd->nesterov ? g.add(d, g.mul(v, sgd->momentum)) : v;
      } else {  // no state to keep, but the same inputs and outputs as with momentum
        const Tensor v = state("momentum");
        g.output(g.mul(v, 0.0), updated_state_name(name, "momentum"));
      }
      g.output(g.sub(p, g.mul(update, s(lr))), updated_name(name));
    } else {
      const AdamWOptions& a = std::get<AdamWOptions>(o);
      const Tensor m = g.add(g.mul(state("m"), a.beta1), g.mul(*grad, 1 - a.beta1));
      const Tensor v = g.add(g.mul(state("v"), a.beta2), g.mul(g.mul(*grad, *grad), 1 - a.beta2));
      g.output(m, updated_state_name(name, "m"));
      g.output(v, updated_state_name(name, "v"));
      const Tensor decayed = a.weight_decay != 0 ? g.sub(p, g.mul(g.mul(p, s(lr)), a.weight_decay)) : p;
      const Tensor denom = g.add(g.mul(g.sqrt(v), s(scalars[2])), a.epsilon);
      g.output(g.sub(decayed, g.mul(g.div(m, denom), s(scalars[1]))), updated_name(name));
    }
    g.set_name_scope({});
  }
  KILN_RETURN_IF_ERROR(g.verify());
  return g;
}

}  // namespace kiln
