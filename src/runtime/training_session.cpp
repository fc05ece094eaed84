// TrainingSession (include/kiln/optimizer.h): the step graph compiled once, parameters and optimizer state carried
// from each step's outputs to the next step's inputs.
#include <cmath>

#include <fmt/format.h>

#include "kiln/optimizer.h"

namespace kiln {

TrainingSession::TrainingSession(Engine& e, Graph g, Executable exe, std::string loss, OptimizerOptions o,
                                 TensorMap params, TensorMap state, std::vector<std::string> inputs)
    : engine_(&e),
      graph_(std::move(g)),
      exe_(std::move(exe)),
      loss_(std::move(loss)),
      opt_(std::move(o)),
      params_(std::move(params)),
      state_(std::move(state)),
      inputs_(std::move(inputs)) {}

namespace {

// `value` has the tensor's shape, else an error naming it as `what`.
Status expect_shape(const std::string& what, const std::string& name, const HostTensor& value, const Shape& shape) {
  if (value.shape == shape) return {};
  return invalid_argument(
      fmt::format("training: {} '{}' is {}, expected {}", what, name, value.shape.to_string(), shape.to_string()));
}

}  // namespace

Result<TrainingSession> TrainingSession::create(Engine& engine, const Graph& forward, const std::string& loss,
                                                OptimizerOptions optimizer, TensorMap parameters) {
  KILN_ASSIGN_OR_RETURN(Training tr, backward(forward, loss));
  KILN_ASSIGN_OR_RETURN(Graph step, with_optimizer_step(tr, optimizer));
  TensorMap params, state;
  std::vector<std::string> inputs;
  for (Tensor t : forward.bound_tensors()) {
    const TensorInfo& ti = forward.tensor(t);
    if (ti.kind != TensorKind::parameter) {
      inputs.push_back(ti.name);
      continue;
    }
    auto it = parameters.find(ti.name);
    if (it == parameters.end())
      return invalid_argument(fmt::format("training: no value for parameter '{}' {}", ti.name, ti.shape.to_string()));
    KILN_RETURN_IF_ERROR(expect_shape("parameter", ti.name, it->second, ti.shape));
    params[ti.name] = it->second;
    for (const char* slot : optimizer_slots(optimizer))
      state[state_name(ti.name, slot)] = HostTensor(ti.shape, ti.dtype);
  }
  KILN_ASSIGN_OR_RETURN(Executable exe, engine.compile(step));
  return TrainingSession(engine, std::move(step), std::move(exe), loss, std::move(optimizer), std::move(params),
                         std::move(state), std::move(inputs));
}

Result<double> TrainingSession::step(const TensorMap& batch, double lr) {
  if (!std::isfinite(lr) || lr <= 0)
    return invalid_argument(fmt::format("training: the learning rate {} is not a finite number above 0", lr));
  TensorMap in = params_;
  for (const auto& [k, v] : state_) in[k] = v;
  for (const std::string& name : inputs_) {
    auto it = batch.find(name);
    if (it == batch.end()) return invalid_argument(fmt::format("training: the batch has no input '{}'", name));
    const std::optional<Tensor> t = graph_.find_tensor(name);
    KILN_RETURN_IF_ERROR(expect_shape("input", name, it->second, graph_.shape(*t)));
    in[name] = it->second;
  }
  for (auto& [k, v] : optimizer_scalar_values(opt_, lr, t_ + 1)) in[k] = std::move(v);
  KILN_ASSIGN_OR_RETURN(TensorMap out, run_on_host_tensors(*engine_, exe_, in));
  const double loss = out.at(loss_).data[0];
  for (auto& [name, value] : params_) {
    value = std::move(out.at(updated_name(name)));
    for (const char* slot : optimizer_slots(opt_))
      state_[state_name(name, slot)] = std::move(out.at(updated_state_name(name, slot)));
  }
  ++t_;
  return loss;
}

}  // namespace kiln
