// Training graphs (kiln::backward) on the test device against ref: the backward's kernels (the activations'
// *_grad ops, matmuls over transposed operands, reductions for bias gradients and the loss) compute what the
// f64 reference does, on random inputs, for every output: the loss and each parameter's gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "codegen_check.h"
#include "kiln/autodiff.h"
#include "kiln/optimizer.h"

namespace kiln {
namespace {

// expand alone (a [C, 1, 1] vector to a 4-D tensor), fused after a pointwise op and before one, and a
// gradient of a reduction (which broadcasts dy with it), against ref.
TEST(CodegenTraining, ExpandBroadcastsInKernels) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("expand");
    g.output(g.expand(g.input("v", {6, 1, 1}, t), {2, 6, 3, 5}), "plain");
    g.output(g.relu(g.add(g.expand(g.sigmoid(g.input("r", {1, 7}, t)), {4, 7}), g.input("m", {4, 7}, t))), "fused");
    testing::expect_plan_matches_ref(g, t, 499);
  }
}

// A perceptron with every activation that has a gradient op, a residual, and a mean-squared-error loss.
Graph mlp(DType t) {
  Graph g("mlp_train");
  const Tensor x = g.input("x", {16, 12}, t);
  const Tensor target = g.input("target", {16, 4}, t);
  Tensor h = g.matmul(x, g.parameter("fc1.w", {12, 32}, t), g.parameter("fc1.b", {32}, t));
  h = g.add(g.gelu(h), g.mul(g.silu(h), g.sigmoid(h)));
  h = g.tanh(g.relu(g.matmul(h, g.parameter("fc2.w", {32, 32}, t), {.transpose_b = true})));
  h = g.matmul(h, g.parameter("fc3.w", {32, 4}, t), g.parameter("fc3.b", {4}, t));
  const Tensor d = g.sub(h, target);
  g.output(g.reduce_mean(g.mul(d, d)), "loss");
  return g;
}

TEST(CodegenTraining, PerceptronGradientsMatchReference) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Result<Training> tr = backward(mlp(t), "loss");
    ASSERT_TRUE(tr.ok()) << tr.status().message();
    ASSERT_TRUE(tr->warnings.empty());
    EXPECT_EQ(tr->graph.outputs().size(), 6u);  // the loss and five gradients
    testing::expect_plan_matches_ref(tr->graph, t, 500);
  }
}

// The activations whose gradients are compositions of pointwise ops (src/ops/vjp_activations.cpp), each on its
// own branch of a perceptron, summed: their training graph's gradients on the test device against ref.
TEST(CodegenTraining, ComposedActivationGradientsMatchReference) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("activations_train");
    const Tensor h = g.mul(g.matmul(g.input("x", {8, 12}, t), g.parameter("w", {12, 16}, t)), 4.0);
    const std::vector<Tensor> branches{g.relu6(g.add(h, 3.0)),
                                       g.clamp(h, -1.0, 2.0),
                                       g.leaky_relu(h, 0.1),
                                       g.elu(h, 0.5),
                                       g.softplus(h, 1.5, 2.0),
                                       g.hardsigmoid(h),
                                       g.hardswish(h),
                                       g.gelu_tanh(h),
                                       g.mish(h),
                                       g.unary("softsign", h),
                                       g.abs(h)};
    Tensor sum = branches[0];
    for (size_t i = 1; i < branches.size(); ++i) sum = g.add(sum, branches[i]);
    g.output(g.reduce_mean(g.mul(sum, g.input("r", {8, 16}, t))), "loss");
    Result<Training> tr = backward(g, "loss");
    ASSERT_TRUE(tr.ok()) << tr.status().message();
    testing::expect_plan_matches_ref(tr->graph, t, 503);
  }
}

// A classifier head over feature maps: batch norm, ReLU, global average pool, a linear layer, softmax and
// a cross-entropy against soft targets (-Σ t log p / N). Its backward has per-channel reductions over the
// batch and spatial dims, a softmax's row reductions and the pool's broadcast.
TEST(CodegenTraining, ClassifierHeadGradientsMatchReference) {
  Graph g("head_train");
  const Tensor x = g.input("x", {4, 8, 5, 5});
  const auto v = [&](const char* n) { return g.parameter(n, {8}); };
  Tensor h = g.relu(g.batch_norm(x, v("bn.scale"), v("bn.shift"), v("bn.mean"), g.parameter("bn.var", {8})));
  h = g.reshape(g.global_avg_pool(h), {4, 8});
  const Tensor p = g.softmax(g.matmul(h, g.parameter("fc.w", {8, 10}), g.parameter("fc.b", {10})));
  const Tensor target = g.softmax(g.input("target_logits", {4, 10}));
  g.output(g.mul(g.reduce_sum(g.mul(target, g.log(p))), -0.25), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  ASSERT_TRUE(tr->warnings.empty());
  EXPECT_EQ(tr->graph.outputs().size(), 7u);  // the loss and six gradients
  testing::expect_plan_matches_ref(tr->graph, DType::f32, 501);
}

// GroupNorm + SiLU (a diffusion U-Net's block without its conv), pooled to a mean-squared error: the group
// norm's backward reduces rows of [N, G, C/G · H · W] and sums the affine's gradients per channel.
TEST(CodegenTraining, GroupNormBlockGradientsMatchReference) {
  Graph g("groupnorm_train");
  const Tensor x = g.input("x", {2, 8, 4, 4});
  Tensor h = g.silu(g.group_norm(x, 4, {.scale = g.parameter("gn.scale", {8}), .shift = g.parameter("gn.shift", {8})}));
  h = g.instance_norm(g.mul(h, g.parameter("gate", {8, 1, 1})));
  const Tensor d = g.sub(g.reshape(g.global_avg_pool(h), {2, 8}), g.input("target", {2, 8}));
  g.output(g.reduce_mean(g.mul(d, d)), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  testing::expect_plan_matches_ref(tr->graph, DType::f32, 503);
}

// One attention block as a transformer writes it, for 8 tokens of width 16 (one head, 2-D): layer norm,
// q/k/v projections, softmax(q kᵀ / 4) v, an output projection and a residual, then a layer-normed GELU MLP
// and a mean-squared error. Its backward has matmuls over transposed operands on both sides of the softmax,
// the norms' row reductions and the softmax's.
TEST(CodegenTraining, AttentionBlockGradientsMatchReference) {
  Graph g("attention_train");
  const Tensor x = g.input("x", {8, 16});
  const auto w = [&](const char* n, int64_t rows, int64_t cols) { return g.parameter(n, {rows, cols}); };
  const auto ln = [&](Tensor t, const std::string& p) {
    return g.layer_norm(t, {.scale = g.parameter(p + ".scale", {16}), .shift = g.parameter(p + ".shift", {16})});
  };
  const Tensor h = ln(x, "ln1");
  const Tensor q = g.matmul(h, w("wq", 16, 16)), k = g.matmul(h, w("wk", 16, 16)), v = g.matmul(h, w("wv", 16, 16));
  const Tensor attn = g.softmax(g.mul(g.matmul(q, k, {.transpose_b = true}), 0.25));
  const Tensor y = g.add(x, g.matmul(g.matmul(attn, v), w("wo", 16, 16)));
  const Tensor m =
      g.matmul(g.gelu(g.matmul(ln(y, "ln2"), w("fc1", 16, 32), g.parameter("fc1.b", {32}))), w("fc2", 32, 16));
  const Tensor d = g.sub(g.add(y, m), g.input("target", {8, 16}));
  g.output(g.reduce_mean(g.mul(d, d)), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  ASSERT_TRUE(tr->warnings.empty());
  EXPECT_EQ(tr->graph.outputs().size(), 12u);  // the loss and eleven gradients
  testing::expect_plan_matches_ref(tr->graph, DType::f32, 502);
}

// A deterministic 4-class task of 3 x 8 x 8 images: class k lights quadrant k of channel k % 3 (+1) under
// Gaussian noise (σ 0.3); one-hot targets.
TensorMap synthetic_batch(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.3);
  HostTensor x(Shape{n, 3, 8, 8}, DType::f32), t(Shape{n, 4}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = i % 4;
    t.data[static_cast<size_t>(i * 4 + k)] = 1;
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 8; ++h)
        for (int64_t w = 0; w < 8; ++w) {
          const bool lit = c == k % 3 && h / 4 == k / 2 && w / 4 == k % 2;
          x.data[static_cast<size_t>(((i * 3 + c) * 8 + h) * 8 + w)] = (lit ? 1.0 : 0.0) + noise(rng);
        }
  }
  return {{"x", x}, {"target", t}};
}

// A small residual CNN (conv + training-mode BN + ReLU, a conv with a residual, global pool, linear, softmax
// cross-entropy) trained by a TrainingSession with SGD + momentum on the test device: the loss of 40 steps on
// two alternating batches falls below a quarter of its start, and the last step's loss on ref (the same
// parameters) agrees.
TEST(CodegenTraining, SmallResidualCnnLearnsASyntheticTask) {
  constexpr int64_t N = 16;
  Graph g("cnn_learns");
  const Tensor x = g.input("x", {N, 3, 8, 8});
  Tensor h = g.conv2d(x, g.parameter("c1.w", {8, 3, 3, 3}), {.padding = {1, 1}});
  const BatchNormTraining bn = g.batch_norm_training(h, g.parameter("bn.scale", {8}), g.parameter("bn.shift", {8}),
                                                     g.input("bn.running_mean", {8}), g.input("bn.running_var", {8}));
  h = g.relu(bn.y);
  h = g.relu(g.add(h, g.conv2d(h, g.parameter("c2.w", {8, 8, 3, 3}), g.parameter("c2.b", {8}), {.padding = {1, 1}})));
  const Tensor logits =
      g.matmul(g.reshape(g.global_avg_pool(h), {N, 8}), g.parameter("fc.w", {8, 4}), g.parameter("fc.b", {4}));
  g.output(g.mul(g.reduce_sum(g.mul(g.input("target", {N, 4}), g.log(g.softmax(logits)))), -1.0 / N), "loss");

  TensorMap params;
  const TensorMap init = random_inputs(g, 77);  // parameters scaled by their fan-in
  for (const char* p : {"c1.w", "c2.w", "c2.b", "fc.w", "fc.b"}) params[p] = init.at(p);
  params["bn.scale"] = HostTensor(Shape{8}, DType::f32);
  for (double& v : params["bn.scale"].data) v = 1;
  params["bn.shift"] = HostTensor(Shape{8}, DType::f32);

  auto engine = Engine::open(testing::on_cuda() ? DeviceKind::cuda : DeviceKind::emu);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto session = TrainingSession::create(*engine, g, "loss", SgdOptions{.momentum = 0.9}, params);
  ASSERT_TRUE(session.ok()) << session.status().message();
  std::vector<TensorMap> batches{synthetic_batch(N, 1), synthetic_batch(N, 2)};
  for (TensorMap& b : batches) {
    b["bn.running_mean"] = HostTensor(Shape{8}, DType::f32);
    b["bn.running_var"] = HostTensor(Shape{8}, DType::f32);
  }
  double first = 0, last = 0;
  for (int s = 0; s < 40; ++s) {
    Result<double> loss = session->step(batches[static_cast<size_t>(s % 2)], 0.1);
    ASSERT_TRUE(loss.ok()) << loss.status().message();
    ASSERT_TRUE(std::isfinite(*loss)) << "step " << s;
    if (s == 0) first = *loss;
    last = *loss;
  }
  EXPECT_GT(first, 1.0) << "an untrained classifier of 4 classes (chance: log 4 = 1.39)";
  EXPECT_LT(last, first / 4) << "from " << first << " to " << last;
  // The session's parameters on ref give the same loss as the device's next step.
  TensorMap in = session->parameters();
  for (const auto& [k, v] : batches[0]) in[k] = v;
  Result<TensorMap> want = run_reference(g, in);
  ASSERT_TRUE(want.ok()) << want.status().message();
  // Every output of the step graph (loss, gradients, updates, optimizer state) on the device against ref.
  testing::expect_plan_matches_ref(session->step_graph(), DType::f32, 978);
  Result<double> next = session->step(batches[0], 0.1);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_NEAR(*next, want->at("loss").data[0], 1e-3 * (1 + std::fabs(*next)));
}

}  // namespace
}  // namespace kiln
