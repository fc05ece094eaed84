// conv2d's gradient kernels (codegen/family_conv_grad.cpp, templates/kiln/conv2d_grad.cuh) against ref on random
// inputs: dgrad and wgrad alone under every window attribute, in f32 (SIMT), f16 and bf16 (tensor cores);
// wgrad's pixels split over blocks, deterministic under every block schedule; dgrad with the forward's ReLU
// backward fused in its epilogue; a small CNN's training graph end to end.
#include <gtest/gtest.h>

#include <optional>

#include "codegen_check.h"
#include "kiln/autodiff.h"
#include "kiln/emu_plan.h"

namespace kiln {
namespace {

using testing::details_of;
using testing::expect_plan_matches_ref;

struct GradCase {
  int64_t N = 2, C = 16, H = 9, W = 9, K = 24, R = 3, S = 3;
  Conv2dOptions o{.padding = {1, 1}};
  DType dtype = DType::f32;
};

// The forward conv's output size for the case.
std::pair<int64_t, int64_t> out_size(const GradCase& c) {
  Graph g;
  const Tensor y =
      g.conv2d(g.input("x", {c.N, c.C, c.H, c.W}), g.parameter("w", {c.K, c.C / c.o.groups, c.R, c.S}), c.o);
  return {g.shape(y)[2], g.shape(y)[3]};
}

Graph dgrad_graph(const GradCase& c) {
  const auto [P, Q] = out_size(c);
  Graph g("dgrad");
  g.output(g.conv2d_dgrad(g.input("dy", {c.N, c.K, P, Q}, c.dtype),
                          g.parameter("w", {c.K, c.C / c.o.groups, c.R, c.S}, c.dtype), {c.H, c.W}, c.o),
           "dx");
  return g;
}

Graph wgrad_graph(const GradCase& c) {
  const auto [P, Q] = out_size(c);
  Graph g("wgrad");
  g.output(g.conv2d_wgrad(g.input("x", {c.N, c.C, c.H, c.W}, c.dtype), g.input("dy", {c.N, c.K, P, Q}, c.dtype),
                          {c.R, c.S}, c.o),
           "dw");
  return g;
}

std::vector<GradCase> window_cases() {
  std::vector<GradCase> cs;
  cs.push_back({});  // 3x3, padding 1
  GradCase s;        // stride 2 (taps without an output pixel), asymmetric padding, a 7x7 input
  s.H = s.W = 7, s.R = s.S = 2, s.o = {.stride = {2, 2}, .padding = {1, 0, 0, 1}};
  cs.push_back(s);
  GradCase d;  // dilation, a rectangular filter and stride, two groups
  d.C = 32, d.K = 48, d.R = 2, d.o = {.stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}, .groups = 2};
  cs.push_back(d);
  GradCase p;  // 1x1 at stride 2, channels no multiple of a vector
  p.C = 6, p.K = 10, p.R = p.S = 1, p.o = {.stride = {2, 2}};
  cs.push_back(p);
  GradCase dw;  // depthwise 3x3 at stride 2 (the direct kernels: one channel per group)
  dw.C = dw.K = 16, dw.o = {.stride = {2, 2}, .padding = {1, 1}, .groups = 16};
  cs.push_back(dw);
  GradCase dw7;  // depthwise 7x7, ConvNeXt's, on 24 channels
  dw7.C = dw7.K = 24, dw7.R = dw7.S = 7, dw7.o = {.padding = {3, 3}, .groups = 24};
  cs.push_back(dw7);
  return cs;
}

TEST(CodegenConvGrad, DgradMatchesReference) {
  uint64_t seed = 900;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (GradCase c : window_cases()) {
      c.dtype = t;
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " seed " << seed);
      const auto r = expect_plan_matches_ref(dgrad_graph(c), t, seed++);
      const auto cfg = details_of<codegen::ConvGradConfig>(r.plan);
      ASSERT_EQ(cfg.size(), 1u);
      EXPECT_FALSE(cfg[0].wgrad);
      EXPECT_EQ(cfg[0].depthwise, c.o.groups == c.C && c.C == c.K);
      if (!cfg[0].depthwise) {
        EXPECT_EQ(cfg[0].tiles.main_loop == codegen::MainLoop::tensor_core, t != DType::f32);
      }
    }
  }
}

TEST(CodegenConvGrad, WgradMatchesReference) {
  uint64_t seed = 920;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (GradCase c : window_cases()) {
      c.dtype = t;
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " seed " << seed);
      const auto r = expect_plan_matches_ref(wgrad_graph(c), t, seed++);
      const auto cfg = details_of<codegen::ConvGradConfig>(r.plan);
      ASSERT_EQ(cfg.size(), 1u);
      EXPECT_TRUE(cfg[0].wgrad);
      EXPECT_EQ(cfg[0].depthwise, c.o.groups == c.C && c.C == c.K);
    }
  }
}

// A wgrad of 2 x 32 x 32 pixels into a 3x3 filter of 32 x 32 channels is a few output tiles: its 2048 pixels are
// split over blocks (grid z), each summing its range into a partial tile, the last summing them in split order.
// The same bits under the forward, reverse and random block schedules, and ref's values on every run of one
// Executable (the counters are zero at each).
TEST(CodegenConvGrad, WgradSplitsPixelsDeterministically) {
  GradCase c;
  c.C = 32, c.K = 32, c.H = c.W = 32, c.dtype = DType::bf16;
  const Graph g = wgrad_graph(c);
  auto plan = plan_graph(g);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const auto cfg = details_of<codegen::ConvGradConfig>(*plan);
  ASSERT_EQ(cfg.size(), 1u);
  EXPECT_GT(cfg[0].tiles.splits, 4);
  const TensorMap inputs = random_inputs(g, 940);
  std::optional<TensorMap> first;
  for (const emu::Schedule s : {emu::Schedule::forward, emu::Schedule::reverse, emu::Schedule::random}) {
    SCOPED_TRACE(emu::schedule_name(s));
    EmuPlanOptions eo;
    eo.launch.schedule = s;
    eo.launch.seed = 11;
    eo.launch.checked = true;
    auto got = run_plan_emu(*plan, inputs, eo);
    ASSERT_TRUE(got.ok()) << got.status().message();
    if (!first) {
      first = *got;
      continue;
    }
    EXPECT_TRUE(first->at("dw").data == got->at("dw").data) << "outputs differ between block schedules";
  }
  testing::expect_every_run_matches_ref(g, DType::bf16, {941, 942});
}

// The ReLU's backward fused into dgrad's epilogue (cuDNN's "dgrad + dReLU"): one kernel computes
// relu_grad(dgrad(dy, w), x).
TEST(CodegenConvGrad, DgradTakesTheReluBackwardAsItsEpilogue) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("dgrad_drelu");
    const Tensor x = g.input("x", {2, 16, 8, 8}, t);
    const Tensor dx = g.conv2d_dgrad(g.input("dy", {2, 32, 8, 8}, t), g.parameter("w", {32, 16, 3, 3}, t), {8, 8},
                                     {.padding = {1, 1}});
    g.output(g.binary("relu_grad", dx, x), "dx");
    const auto r = expect_plan_matches_ref(g, t, 950);
    EXPECT_EQ(details_of<codegen::ConvGradConfig>(r.plan).size(), 1u);
    EXPECT_EQ(r.plan.kernel_count(), 1) << "the ReLU backward runs in dgrad's epilogue";
  }
}

// A small CNN (conv + ReLU, a strided conv with bias, global pool, linear, mean-squared error): its training
// graph's every gradient on the test device against ref.
TEST(CodegenConvGrad, SmallCnnTrainingGraphMatchesReference) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("cnn_train");
    const Tensor x = g.input("x", {4, 3, 12, 12}, t);
    Tensor h = g.relu(g.conv2d(x, g.parameter("c1.w", {16, 3, 3, 3}, t), {.padding = {1, 1}}));
    h = g.relu(g.conv2d(h, g.parameter("c2.w", {32, 16, 3, 3}, t), g.parameter("c2.b", {32}, t),
                        {.stride = {2, 2}, .padding = {1, 1}}));
    h = g.reshape(g.global_avg_pool(h), {4, 32});
    const Tensor d = g.sub(g.matmul(h, g.parameter("fc.w", {32, 10}, t)), g.input("target", {4, 10}, t));
    g.output(g.reduce_mean(g.mul(d, d)), "loss");
    Result<Training> tr = backward(g, "loss");
    ASSERT_TRUE(tr.ok()) << tr.status().message();
    ASSERT_TRUE(tr->warnings.empty());
    const auto r = expect_plan_matches_ref(tr->graph, t, 960);
    size_t dgrads = 0, wgrads = 0;
    for (const codegen::ConvGradConfig& c : details_of<codegen::ConvGradConfig>(r.plan)) (c.wgrad ? wgrads : dgrads)++;
    EXPECT_EQ(dgrads, 1u) << "the first conv's input needs no gradient";
    EXPECT_EQ(wgrads, 2u);
  }
}

// max_pool2d_grad and avg_pool2d_grad (codegen/family_pool_grad.cpp) against ref in f32 and f16, channels-last
// and NCHW: overlapping 3x3 windows at stride 2 with padding and ceil_mode, and 2x2 averages with ceil_mode not
// counting the padding.
TEST(CodegenConvGrad, PoolGradientsMatchReference) {
  uint64_t seed = 980;
  for (DType t : {DType::f32, DType::f16}) {
    for (LayoutPolicy layout : {LayoutPolicy::automatic, LayoutPolicy::nchw}) {
      Graph g("pool_grads");
      const Tensor x = g.input("x", {2, 8, 9, 9}, t);
      const Attrs mp{{"kernel", std::vector<int64_t>{3, 3}},
                     {"stride", std::vector<int64_t>{2, 2}},
                     {"padding", std::vector<int64_t>{1, 1}},
                     {"ceil_mode", true}};
      g.output(g.add_node("max_pool2d_grad", {{"dy", {g.input("dm", {2, 8, 5, 5}, t)}}, {"x", {x}}}, mp)[0], "dmax");
      const Attrs ap{{"kernel", std::vector<int64_t>{2, 2}},
                     {"stride", std::vector<int64_t>{2, 2}},
                     {"ceil_mode", true},
                     {"count_include_pad", false}};
      g.output(g.add_node("avg_pool2d_grad", {{"dy", {g.input("da", {2, 8, 5, 5}, t)}}, {"x", {x}}}, ap)[0], "davg");
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " seed " << seed);
      PlanOptions o;
      o.layout = layout;
      expect_plan_matches_ref(g, t, seed++, o);
    }
  }
}

// A CNN with a max pool and an average pool trains against ref: their gradients in the backward.
TEST(CodegenConvGrad, CnnWithPoolsTrainingGraphMatchesReference) {
  Graph g("pool_cnn_train");
  const Tensor x = g.input("x", {2, 4, 12, 12});
  Tensor h = g.relu(g.conv2d(x, g.parameter("c1.w", {16, 4, 3, 3}), {.padding = {1, 1}}));
  h = g.max_pool2d(h, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  h = g.avg_pool2d(g.conv2d(h, g.parameter("c2.w", {16, 16, 3, 3}), {.padding = {1, 1}}), {.kernel = {2, 2}});
  g.output(g.reduce_mean(g.mul(h, h)), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  expect_plan_matches_ref(tr->graph, DType::f32, 990);
}

// Training-mode batch norm where the channels equal the width (C = W = 8): its mean and variance, computed by
// [C] ops, must reach batch_norm as channel operands from memory; merged into batch_norm's pointwise group they
// were read at the element's NumPy-broadcast coordinate, along W (a wrong answer, found training a CNN).
TEST(CodegenConvGrad, TrainingBatchNormReadsItsStatisticsPerChannel) {
  Graph g("bn_c_eq_w");
  const BatchNormTraining bn =
      g.batch_norm_training(g.relu(g.input("x", {4, 8, 5, 8})), g.parameter("scale", {8}), g.parameter("shift", {8}),
                            g.input("running_mean", {8}), g.input("running_var", {8}));
  g.output(bn.y, "y");
  g.output(bn.running_var, "running_var_out");
  expect_plan_matches_ref(g, DType::f32, 975);
}

// Conv + batch norm in training mode + ReLU twice, then global pool, linear and MSE: the training graph's loss,
// gradients and updated running statistics against ref. The first BN's statistics are the first conv's reduction
// epilogue (cuDNN's genstats): no kernel reads that conv's output only to sum it.
TEST(CodegenConvGrad, ConvBatchNormBlockTrainsAgainstReference) {
  Graph g("conv_bn_train");
  const Tensor x = g.input("x", {4, 8, 8, 8});
  Tensor h = x;
  for (const char* b : {"b1", "b2"}) {
    const std::string n(b);
    const Tensor c = g.conv2d(h, g.parameter(n + ".w", {16, g.shape(h)[1], 3, 3}), {.padding = {1, 1}});
    const BatchNormTraining bn =
        g.batch_norm_training(c, g.parameter(n + ".scale", {16}), g.parameter(n + ".shift", {16}),
                              g.input(n + ".running_mean", {16}), g.input(n + ".running_var", {16}), 0.1, 1e-5, n);
    g.output(bn.running_mean, n + ".new_running_mean");
    g.output(bn.running_var, n + ".new_running_var");
    h = g.relu(bn.y);
  }
  const Tensor d = g.sub(g.matmul(g.reshape(g.global_avg_pool(h), {4, 16}), g.parameter("fc.w", {16, 5})),
                         g.input("target", {4, 5}));
  g.output(g.reduce_mean(g.mul(d, d)), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  ASSERT_TRUE(tr->warnings.empty()) << tr->warnings.front();
  const auto r = expect_plan_matches_ref(tr->graph, DType::f32, 970);
  int genstats = 0;
  for (const Group& grp : r.plan.groups) genstats += grp.kind == GroupKind::conv && grp.roles.reduction >= 0;
  EXPECT_EQ(genstats, 2) << "each BN's statistics in its conv's epilogue";
}

}  // namespace
}  // namespace kiln
