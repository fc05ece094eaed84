// The optimizer step (include/kiln/optimizer.h): SGD and AdamW's updates on ref against the formulas of
// torch.optim.SGD and torch.optim.AdamW computed here by hand; their bad options; and a TrainingSession that
// makes a small CNN learn a synthetic task on the test device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/optimizer.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

HostTensor vec(std::vector<double> v) {
  HostTensor h(Shape{static_cast<int64_t>(v.size())}, DType::f32);
  h.data = std::move(v);
  return h;
}

// loss = Σ p² · x: grad p = 2 p x.
Graph quadratic() {
  Graph g("quadratic");
  const Tensor p = g.parameter("p", {3});
  g.output(g.reduce_sum(g.mul(g.mul(p, p), g.input("x", {3}))), "loss");
  return g;
}

// One step of `o` on ref from p, x and the state `state` (by slot), at step t.
TensorMap step_on_ref(const OptimizerOptions& o, const std::vector<double>& p, const std::vector<double>& x,
                      const std::map<std::string, std::vector<double>>& state, double lr, int64_t t) {
  Result<Training> tr = backward(quadratic(), "loss");
  EXPECT_TRUE(tr.ok()) << tr.status().message();
  Result<Graph> step = with_optimizer_step(*tr, o);
  EXPECT_TRUE(step.ok()) << step.status().message();
  TensorMap in = optimizer_scalar_values(o, lr, t);
  in["p"] = vec(p), in["x"] = vec(x);
  for (const auto& [slot, v] : state) in[state_name("p", slot.c_str())] = vec(v);
  Result<TensorMap> out = run_reference(*step, in, {.round_to_storage = false});
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : TensorMap{};
}

void expect_values(const HostTensor& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.data.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.data[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << what;
}

TEST(Optimizer, SgdFollowsTorchOptimSgd) {
  const std::vector<double> p{0.5, -1.25, 2}, x{1, 3, -0.5}, v0{0.1, -0.2, 0.3};
  for (const bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "heavy ball");
    const SgdOptions o{.momentum = 0.9, .nesterov = nesterov, .weight_decay = 0.01};
    const TensorMap out = step_on_ref(o, p, x, {{"momentum", v0}}, 0.05, 4);
    std::vector<double> new_p, new_v;
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = 2 * p[i] * x[i] + 0.01 * p[i];
      const double v = 0.9 * v0[i] + g;
      new_v.push_back(v);
      new_p.push_back(p[i] - 0.05 * (nesterov ? g + 0.9 * v : v));
    }
    expect_values(out.at("new/p"), new_p, "new/p");
    expect_values(out.at("new_state/p/momentum"), new_v, "momentum");
  }
}

TEST(Optimizer, AdamWFollowsTorchOptimAdamW) {
  const std::vector<double> p{0.5, -1.25, 2}, x{1, 3, -0.5}, m0{0.1, -0.2, 0.3}, v0{0.01, 0.2, 0.05};
  const AdamWOptions o{.beta1 = 0.8, .beta2 = 0.99, .epsilon = 1e-3, .weight_decay = 0.1};
  const int64_t t = 3;
  const double lr = 0.02;
  const TensorMap out = step_on_ref(o, p, x, {{"m", m0}, {"v", v0}}, lr, t);
  std::vector<double> new_p, new_m, new_v;
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = 2 * p[i] * x[i];
    const double m = 0.8 * m0[i] + 0.2 * g, v = 0.99 * v0[i] + 0.01 * g * g;
    const double bias1 = 1 - std::pow(0.8, t), bias2 = 1 - std::pow(0.99, t);
    const double decayed = p[i] * (1 - lr * 0.1);
    new_p.push_back(decayed - lr / bias1 * m / (std::sqrt(v) / std::sqrt(bias2) + 1e-3));
    new_m.push_back(m), new_v.push_back(v);
  }
  expect_values(out.at("new/p"), new_p, "new/p");
  expect_values(out.at("new_state/p/m"), new_m, "m");
  expect_values(out.at("new_state/p/v"), new_v, "v");
}

TEST(Optimizer, BadOptionsAndLearningRatesAreRefused) {
  Result<Training> tr = backward(quadratic(), "loss");
  ASSERT_TRUE(tr.ok());
  const auto message = [&](const OptimizerOptions& o) {
    Result<Graph> g = with_optimizer_step(*tr, o);
    return g.ok() ? std::string("accepted") : g.status().message();
  };
  EXPECT_NE(message(SgdOptions{.momentum = -0.5}).find("momentum = -0.5"), std::string::npos);
  EXPECT_NE(message(SgdOptions{.weight_decay = NAN}).find("weight_decay"), std::string::npos);
  EXPECT_NE(message(AdamWOptions{.beta2 = 1.0}).find("beta2 = 1"), std::string::npos);
  EXPECT_NE(message(AdamWOptions{.epsilon = 0}).find("epsilon = 0"), std::string::npos);

  auto engine = Engine::open(DeviceKind::ref);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto s = TrainingSession::create(*engine, quadratic(), "loss", SgdOptions{}, {{"p", vec({1, 2, 3})}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (double lr : {0.0, -1.0, double(INFINITY), double(NAN)}) {
    Result<double> r = s->step({{"x", vec({1, 1, 1})}}, lr);
    ASSERT_FALSE(r.ok()) << lr;
    EXPECT_NE(r.status().message().find("learning rate"), std::string::npos) << r.status().message();
  }
  Result<double> wrong = s->step({{"x", vec({1, 1})}}, 0.1);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("input 'x' is [2], expected [3]"), std::string::npos)
      << wrong.status().message();
  EXPECT_EQ(s->steps(), 0) << "a refused step changes nothing";
  auto missing = TrainingSession::create(*engine, quadratic(), "loss", SgdOptions{}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no value for parameter 'p'"), std::string::npos);
}

}  // namespace
}  // namespace kiln
