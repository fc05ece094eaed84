// The two criteria of include/kiln/compare.h: element by element (one kernel's result) and on the tensor's
// scale (a network's outputs, `kiln run --check`): the scaled one accepts f32 rounding accumulated over
// depth around large values, and still fails a planted bug, a convolution reading its taps one row off.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kiln/compare.h"
#include "kiln/engine.h"
#include "kiln/graph.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

HostTensor tensor_of(std::vector<double> v) {
  HostTensor t(Shape{static_cast<int64_t>(v.size())}, DType::f32);
  t.data = std::move(v);
  return t;
}

TEST(CompareTensors, ScaledToleranceJudgesAnElementNearZeroOnItsTensorsScale) {
  // Values of order 1e4 and one that cancelled to ~0: f32 rounding left 2e-3 on it (a relative 2e-7 of
  // the tensor's scale), 200x the element-wise atol.
  const HostTensor want = tensor_of({1.5e4, -2.0e4, 1e-3, 3.0e4});
  const HostTensor got = tensor_of({1.5e4 + 1e-3, -2.0e4, 1e-3 + 2e-3, 3.0e4 - 2e-3});
  const Comparison strict = compare_tensors(got, want, tolerance_for(DType::f32));
  EXPECT_FALSE(strict.ok);
  EXPECT_GT(strict.worst_excess, 100);
  const Comparison scaled = compare_tensors(got, want, output_tolerance_for(DType::f32));
  EXPECT_TRUE(scaled.ok) << scaled.problem;
  EXPECT_NEAR(scaled.ref_rms, std::sqrt((1.5e4 * 1.5e4 + 4e8 + 1e-6 + 9e8) / 4), 1e-6);
  EXPECT_LT(scaled.rel_l2, 1e-6);
  EXPECT_GT(scaled.rel_l2, 0);

  // The same element off by 1 % of the scale fails, naming it.
  HostTensor wrong = got;
  wrong.data[2] = 250;
  const Comparison bad = compare_tensors(wrong, want, output_tolerance_for(DType::f32));
  EXPECT_FALSE(bad.ok);
  EXPECT_EQ(bad.worst_index, 2);
  EXPECT_NE(bad.problem.find("element 2 is 250"), std::string::npos) << bad.problem;

  // Errors spread thinly over every element: each within its bound, the sum of them not.
  HostTensor drift = want;
  for (double& v : drift.data) v *= 1 + 1.5e-4;
  const Comparison l2 = compare_tensors(drift, want, output_tolerance_for(DType::f32));
  EXPECT_FALSE(l2.ok);
  EXPECT_NE(l2.problem.find("relative L2 error 0.00015, above 0.0001"), std::string::npos) << l2.problem;
}

// `layers` 3x3 convs with bias and relu, 8 channels at 12x12, on inputs of order `scale`; `shifted` reads
// the taps of conv `shifted` one row lower (its padding moved down: the off-by-one a kernel bug makes).
Graph deep_net(int layers, int shifted = -1) {
  Graph g("deep");
  Tensor x = g.input("x", {1, 8, 12, 12});
  for (int i = 0; i < layers; ++i) {
    Tensor w = g.parameter("w" + std::to_string(i), {8, 8, 3, 3});
    Tensor b = g.parameter("b" + std::to_string(i), {8});
    Conv2dOptions o{.padding = i == shifted ? std::vector<int64_t>{0, 1, 2, 1} : std::vector<int64_t>{1, 1}};
    x = g.relu(g.conv2d(x, w, b, o));
  }
  g.output(x, "y");
  return g;
}

// A network output's tolerance is that of the least precise dtype its value is computed through: f32
// computed from f16 values carries f16's rounding; an f32 graph keeps f32's; what the output does not depend
// on does not count.
TEST(CompareTensors, OutputToleranceFollowsTheLeastPreciseDtypeUpstream) {
  Graph g("mixed");
  const Tensor x = g.input("x", {2, 8, 4, 4}, DType::bf16);
  const Tensor f = g.input("f", {2, 8, 4, 4});
  g.output(g.unary("channel_stats", g.relu(x)), "stats");              // f32, from bf16 values
  g.output(g.cast(g.cast(f, DType::f16), DType::f32), "through_f16");  // f32 -> f16 -> f32
  g.output(g.relu(f), "plain");                                        // f32 throughout
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  const auto tol = [&](std::string_view name) { return output_tolerance_for(g, *g.find_tensor(name)); };
  EXPECT_EQ(tol("stats").rtol, tolerance_for(DType::bf16).rtol);
  EXPECT_EQ(tol("through_f16").rtol, tolerance_for(DType::f16).rtol);
  EXPECT_EQ(tol("plain").rtol, tolerance_for(DType::f32).rtol);
  EXPECT_TRUE(tol("plain").scaled);
}

TEST(CompareTensors, ADeepF32NetworkPassesAndAConvOneTapOffFails) {
  constexpr int kLayers = 12;
  Graph good = deep_net(kLayers);
  ASSERT_TRUE(good.verify().ok());
  TensorMap in = random_inputs(good, 3);
  for (double& v : in.at("x").data) v *= 1000;  // outputs of order 1e3..1e5: f32 error far above atol 1e-5
  auto want = run_reference(good, in);
  ASSERT_TRUE(want.ok()) << want.status().message();

  // The generated kernels in f32 on the emulator: the scaled criterion passes them.
  auto engine = Engine::open(DeviceKind::emu);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto exe = engine->compile(good);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  auto got = run_on_host_tensors(*engine, *exe, in);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const Comparison c = compare_tensors(got->at("y"), want->at("y"), output_tolerance_for(DType::f32));
  EXPECT_TRUE(c.ok) << c.problem;
  EXPECT_GT(c.ref_rms, 1.0);
  EXPECT_GT(c.rel_l2, 0);  // f32 did round: the comparison is not of equal tensors

  // One conv (the middle one) reading its taps one row off: far outside, both per element and in L2.
  auto wrong = run_reference(deep_net(kLayers, kLayers / 2), in);
  ASSERT_TRUE(wrong.ok()) << wrong.status().message();
  const Comparison bug = compare_tensors(wrong->at("y"), want->at("y"), output_tolerance_for(DType::f32));
  EXPECT_FALSE(bug.ok);
  EXPECT_GT(bug.worst_excess, 100);
  EXPECT_GT(bug.rel_l2, 1e-2);
}

}  // namespace
}  // namespace kiln
