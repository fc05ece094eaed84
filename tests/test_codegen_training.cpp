// Training graphs (kiln::backward) on the test device against ref: the backward's kernels (the activations'
// *_grad ops, matmuls over transposed operands, reductions for bias gradients and the loss) compute what the
// f64 reference does, on random inputs, for every output: the loss and each parameter's gradient.
#include <gtest/gtest.h>

#include <string>

#include "codegen_check.h"
#include "kiln/autodiff.h"

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

}  // namespace
}  // namespace kiln
