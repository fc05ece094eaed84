// The optimizer step as graph ops, and a session that runs training steps (docs/training.md, "Optimizer").
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/engine.h"
#include "kiln/host_tensor.h"

namespace kiln {

// SGD as PyTorch's torch.optim.SGD: g = grad + weight_decay · p; v = momentum · v + g (v = g at the first step,
// whose state is zero: the same, as PyTorch's buffer starts as g); update = nesterov ? g + momentum · v : v;
// p = p − lr · update.
struct SgdOptions {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0;
};
// AdamW as torch.optim.AdamW: p = p · (1 − lr · weight_decay); m = β1 m + (1 − β1) g; v = β2 v + (1 − β2) g²;
// p = p − lr / (1 − β1^t) · m / (√v / √(1 − β2^t) + ε).
struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, weight_decay = 0.01;
};
using OptimizerOptions = std::variant<SgdOptions, AdamWOptions>;

// The names the step graph uses.
inline std::string updated_name(const std::string& parameter) { return "new/" + parameter; }
inline std::string state_name(const std::string& parameter, const char* slot) {
  return "state/" + parameter + "/" + slot;
}
inline std::string updated_state_name(const std::string& parameter, const char* slot) {
  return "new_state/" + parameter + "/" + slot;
}
// The state slots of an optimizer, in order: SGD {"momentum"}, AdamW {"m", "v"}.
std::vector<const char*> optimizer_slots(const OptimizerOptions& o);
// The step's scalar inputs: SGD {"optimizer/lr"}; AdamW {"optimizer/lr", "optimizer/step_size" (lr / (1 − β1^t)),
// "optimizer/rsqrt_bias2" (1 / √(1 − β2^t))}. Scalars (shape []), so that a learning-rate schedule compiles nothing.
std::vector<std::string> optimizer_scalars(const OptimizerOptions& o);
// Their values at step t (1-based).
TensorMap optimizer_scalar_values(const OptimizerOptions& o, double lr, int64_t t);

// The training graph with one optimizer step appended: for every parameter p (its gradient `grad/p`), its state
// as inputs (`state/p/<slot>`, of p's shape and dtype) and its updated value and state as outputs (`new/p`,
// `new_state/p/<slot>`), computed by pointwise ops that fuse with the gradient's producer where they can. Fails on
// a training graph without `grad/p` for a parameter, and on an option out of range (a negative momentum or weight
// decay, β outside [0, 1), ε ≤ 0), naming it.
Result<Graph> with_optimizer_step(const Training& training, const OptimizerOptions& o);

// Runs training steps of one graph on one device: the forward graph's backward (kiln::backward), one optimizer
// step appended, compiled once. The session holds the parameters and the optimizer state between steps and
// feeds each step's updated values to the next (host tensors: each step uploads them and reads them back).
class TrainingSession {
 public:
  // `parameters` gives every parameter of `forward` a value (missing ones, or ones of another shape, are an error
  // naming them). A learning rate that is not finite or not positive fails at step().
  static Result<TrainingSession> create(Engine& engine, const Graph& forward, const std::string& loss,
                                        OptimizerOptions optimizer, TensorMap parameters);
  // One step on `batch` (every input of the forward graph): returns the loss before the update. The batch's
  // shapes must be the graph's (an error names the input).
  Result<double> step(const TensorMap& batch, double lr);
  const TensorMap& parameters() const { return params_; }
  int64_t steps() const { return t_; }
  const Graph& step_graph() const { return graph_; }

 private:
  TrainingSession(Engine& e, Graph g, Executable exe, std::string loss, OptimizerOptions o, TensorMap params,
                  TensorMap state, std::vector<std::string> inputs);
  Engine* engine_;
  Graph graph_;
  Executable exe_;
  std::string loss_;
  OptimizerOptions opt_;
  TensorMap params_, state_;
  std::vector<std::string> inputs_;  // the forward graph's inputs
  int64_t t_ = 0;
};

}  // namespace kiln
