// kiln::backward (include/kiln/autodiff.h): every op's vector-Jacobian rule against central finite
// differences of the f64 reference (gradcheck), and the training graph's errors and warnings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/autodiff.h"
#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// Values for every input and parameter: uniform in [-1, -0.2] U [0.2, 1] (away from relu's kink and from
// zero for div), or in [0.5, 1.5] for tensors whose name starts with "pos" (log, sqrt, rsqrt).
TensorMap values_for(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mag(0.2, 1.0), pos(0.5, 1.5);
  TensorMap m;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& ti = g.tensor(t);
    HostTensor h(ti.shape, ti.dtype);
    const bool positive = ti.name.rfind("pos", 0) == 0;
    for (double& v : h.data) v = positive ? pos(rng) : ((rng() & 1) ? mag(rng) : -mag(rng));
    m[ti.name] = std::move(h);
  }
  return m;
}

double loss_at(const Graph& g, const TensorMap& in) {
  Result<TensorMap> out = run_reference(g, in, {.round_to_storage = false});
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? out->at("loss").data[0] : NAN;
}

// `build` makes y from parameters (and inputs); the loss is Σ y · r with r a random input of y's shape, so
// that dL/dy is random too. Every parameter's gradient from the training graph (run on ref) is compared with
// (L(p + h) - L(p - h)) / 2h, element by element, all in f64 (ReferenceOptions::round_to_storage off):
// |analytic - numeric| <= 1e-6 (1 + |numeric|).
void gradcheck(const std::string& label, const std::function<Tensor(Graph&)>& build, uint64_t seed = 1) {
  SCOPED_TRACE(label);
  Graph g(label);
  const Tensor y = build(g);
  const Tensor r = g.input("r", g.shape(y));
  g.output(g.reduce_sum(g.mul(y, r)), "loss");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  EXPECT_TRUE(tr->warnings.empty()) << tr->warnings.front();
  TensorMap in = values_for(g, seed);
  Result<TensorMap> grads = run_reference(tr->graph, in, {.round_to_storage = false});
  ASSERT_TRUE(grads.ok()) << grads.status().message();
  int checked = 0;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& ti = g.tensor(t);
    if (ti.kind != TensorKind::parameter) continue;
    const HostTensor& analytic = grads->at("grad/" + ti.name);
    ASSERT_EQ(analytic.shape, ti.shape) << ti.name;
    for (size_t i = 0; i < analytic.data.size(); ++i) {
      constexpr double h = 1e-6;
      const double v = in[ti.name].data[i];
      in[ti.name].data[i] = v + h;
      const double up = loss_at(g, in);
      in[ti.name].data[i] = v - h;
      const double down = loss_at(g, in);
      in[ti.name].data[i] = v;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic.data[i], numeric, 1e-6 * (1 + std::fabs(numeric))) << ti.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Autodiff, ActivationsMatchFiniteDifferences) {
  const std::vector<std::pair<std::string, std::function<Tensor(Graph&, Tensor)>>> ops{
      {"relu", [](Graph& g, Tensor x) { return g.relu(x); }},
      {"sigmoid", [](Graph& g, Tensor x) { return g.sigmoid(x); }},
      {"tanh", [](Graph& g, Tensor x) { return g.tanh(x); }},
      {"gelu", [](Graph& g, Tensor x) { return g.gelu(x); }},
      {"silu", [](Graph& g, Tensor x) { return g.silu(x); }},
      {"exp", [](Graph& g, Tensor x) { return g.exp(x); }},
      {"neg", [](Graph& g, Tensor x) { return g.neg(x); }},
      {"reciprocal", [](Graph& g, Tensor x) { return g.reciprocal(x); }},
      {"identity", [](Graph& g, Tensor x) { return g.identity(x); }},
      // Piecewise ones on values scaled past their breakpoints (x · 5: relu6's 0 and 6, hardswish's ±3).
      {"relu6", [](Graph& g, Tensor x) { return g.relu6(g.mul(x, 7.0)); }},
      {"clamp", [](Graph& g, Tensor x) { return g.clamp(x, -0.5, 0.25); }},
      {"clamp below", [](Graph& g, Tensor x) { return g.clamp(x, -0.5, std::nullopt); }},
      {"leaky_relu", [](Graph& g, Tensor x) { return g.leaky_relu(x, 0.2); }},
      {"elu", [](Graph& g, Tensor x) { return g.elu(x, 0.7); }},
      {"softplus", [](Graph& g, Tensor x) { return g.softplus(g.mul(x, 5.0), 2.0, 3.0); }},
      {"hardsigmoid", [](Graph& g, Tensor x) { return g.hardsigmoid(g.mul(x, 5.0)); }},
      {"hardswish", [](Graph& g, Tensor x) { return g.hardswish(g.mul(x, 5.0)); }},
      {"gelu_tanh", [](Graph& g, Tensor x) { return g.gelu_tanh(g.mul(x, 3.0)); }},
      {"mish", [](Graph& g, Tensor x) { return g.mish(g.mul(x, 3.0)); }},
      {"softsign", [](Graph& g, Tensor x) { return g.unary("softsign", g.mul(x, 3.0)); }},
      {"abs", [](Graph& g, Tensor x) { return g.abs(x); }},
  };
  for (const auto& entry : ops) {  // (no structured binding: clang does not capture one in a lambda)
    const auto& op = entry.second;
    gradcheck(entry.first, [&](Graph& g) { return op(g, g.parameter("p", {2, 3, 4})); });
  }
  for (const char* name : {"log", "sqrt", "rsqrt"}) {
    gradcheck(name, [&](Graph& g) { return g.unary(name, g.parameter("pos", {3, 5})); });
  }
}

TEST(Autodiff, BinaryOpsSumTheirGradientOverBroadcastDims) {
  for (const char* op : {"add", "sub", "mul", "div"}) {
    gradcheck(std::string(op) + " [2,3,4] . [3,1]", [&](Graph& g) {
      return g.binary(op, g.parameter("a", {2, 3, 4}), g.parameter("b", {3, 1}));
    });
    gradcheck(std::string(op) + " [4] . [2,3,4]", [&](Graph& g) {
      return g.binary(op, g.parameter("a", {4}), g.parameter("b", {2, 3, 4}));
    });
    gradcheck(std::string(op) + " with a number", [&](Graph& g) {
      const Tensor p = g.parameter("p", {2, 5});
      return g.binary(op, g.binary(op, p, 1.5), g.binary(op, -0.75, p));  // both sides as numbers
    });
  }
  // A tensor read twice: the two gradients are summed.
  gradcheck("x * x + x", [](Graph& g) {
    const Tensor x = g.parameter("x", {6});
    return g.add(g.mul(x, x), x);
  });
  gradcheck("bias_add axis 1 and -1", [](Graph& g) {
    const Tensor x = g.parameter("x", {2, 3, 4});
    return g.bias_add(g.bias_add(x, g.parameter("b1", {3}), 1), g.parameter("b2", {4}), -1);
  });
}

TEST(Autodiff, MatmulGradientsAreMatmulsForEveryTranspose) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      gradcheck(fmt::format("matmul ta={} tb={}", ta, tb), [&](Graph& g) {
        const Tensor a = g.parameter("a", ta ? Shape{4, 3} : Shape{3, 4});
        const Tensor b = g.parameter("b", tb ? Shape{5, 4} : Shape{4, 5});
        return g.matmul(a, b, g.parameter("bias", {5}), {.transpose_a = ta, .transpose_b = tb});
      });
    }
  }
  // Batched, with the second operand broadcast over the batch: its gradient sums the batch.
  gradcheck("batched matmul", [](Graph& g) { return g.matmul(g.parameter("a", {2, 3, 4}), g.parameter("b", {4, 5})); });
}

// conv2d's gradients (conv2d_dgrad, conv2d_wgrad, the bias's sum) under every window attribute: strides whose
// windows skip input pixels (7x7 at stride 2 with a 2x2 filter: the last row and column are read by none),
// asymmetric padding, dilation, groups, a KRSC weight (its gradient converted back to KRSC).
TEST(Autodiff, ConvGradientsMatchFiniteDifferences) {
  gradcheck("conv2d 3x3 pad 1 with bias", [](Graph& g) {
    return g.conv2d(g.parameter("x", {2, 3, 5, 5}), g.parameter("w", {4, 3, 3, 3}), g.parameter("b", {4}),
                    {.padding = {1, 1}});
  });
  gradcheck("conv2d stride 2, skipped pixels, asymmetric padding", [](Graph& g) {
    return g.conv2d(g.parameter("x", {1, 2, 7, 7}), g.parameter("w", {3, 2, 2, 2}),
                    {.stride = {2, 2}, .padding = {1, 0, 0, 1}});
  });
  gradcheck("conv2d dilated, grouped, KRSC", [](Graph& g) {
    return g.conv2d(g.parameter("x", {2, 4, 6, 6}), g.parameter("w", {6, 2, 2, 3}, DType::f32, Layout::KRSC),
                    {.stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}, .groups = 2});
  });
}

// Batch norm in training mode (channel_stats, the [C] statistics, batch_norm): its gradient, composed from
// those ops' rules (channel_stats's, slice's), against finite differences, through x, scale and shift.
TEST(Autodiff, TrainingBatchNormMatchesFiniteDifferences) {
  gradcheck("batch_norm_training", [](Graph& g) {
    const BatchNormTraining bn =
        g.batch_norm_training(g.parameter("x", {3, 4, 3, 2}), g.parameter("scale", {4}), g.parameter("shift", {4}),
                              g.input("running_mean", {4}), g.input("running_var", {4}));
    return bn.y;
  });
  gradcheck("slice of two dims", [](Graph& g) { return g.slice(g.parameter("x", {4, 5, 3}), {1, 0, -2}, {3, 5, 3}); });
}

// A slice with a step has no gradient rule yet: refused naming the node.
TEST(Autodiff, SteppedSliceIsRefusedNamingTheNode) {
  Graph g("stepped");
  g.output(g.reduce_sum(g.slice(g.parameter("p", {6}), {0}, {6}, {2}, "every_other")), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_FALSE(tr.ok());
  EXPECT_NE(tr.status().message().find("node 'every_other' (slice)"), std::string::npos) << tr.status().message();
  EXPECT_NE(tr.status().message().find("step above 1"), std::string::npos) << tr.status().message();
}

// The window pools' gradients (max_pool2d_grad, avg_pool2d_grad) under padding, ceil_mode and both divisors.
// Random values have one max per window, which a step of 1e-6 does not move.
TEST(Autodiff, WindowPoolsMatchFiniteDifferences) {
  gradcheck("max_pool2d 3x3 s2 pad 1 ceil", [](Graph& g) {
    return g.max_pool2d(g.parameter("x", {2, 2, 7, 7}),
                        {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true});
  });
  gradcheck("max_pool2d overlapping 2x2 s1", [](Graph& g) {
    return g.max_pool2d(g.parameter("x", {1, 3, 4, 5}), {.kernel = {2, 2}, .stride = {1, 1}});
  });
  for (const bool include_pad : {true, false}) {
    gradcheck(include_pad ? "avg_pool2d counting padding" : "avg_pool2d not counting padding", [&](Graph& g) {
      return g.avg_pool2d(
          g.parameter("x", {2, 2, 6, 5}),
          {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .count_include_pad = include_pad});
    });
  }
}

TEST(Autodiff, DataOpsAndReductions) {
  gradcheck("reshape", [](Graph& g) { return g.reshape(g.parameter("x", {2, 3, 4}), {6, -1}); });
  gradcheck("transpose", [](Graph& g) { return g.transpose(g.parameter("x", {2, 3, 4}), {2, 0, 1}); });
  gradcheck("reduce_sum axes", [](Graph& g) { return g.reduce_sum(g.parameter("x", {2, 3, 4}), {0, 2}); });
  gradcheck("reduce_sum keepdims", [](Graph& g) { return g.reduce_sum(g.parameter("x", {2, 3, 4}), {-1}, true); });
  gradcheck("reduce_mean", [](Graph& g) { return g.reduce_mean(g.parameter("x", {2, 3, 4}), {1}); });
  gradcheck("reduce_mean to a scalar", [](Graph& g) { return g.reduce_mean(g.parameter("x", {3, 4})); });
}

TEST(Autodiff, NormsAndPooling) {
  gradcheck("global_avg_pool", [](Graph& g) { return g.global_avg_pool(g.parameter("x", {2, 3, 4, 5})); });
  gradcheck("softmax last axis", [](Graph& g) { return g.softmax(g.parameter("x", {3, 7})); });
  gradcheck("softmax axis 0", [](Graph& g) {
    return g.unary("softmax", g.parameter("x", {4, 3}), {{"axis", int64_t{0}}});
  });
  // Inference batch norm: every operand is a parameter here, and each gets its gradient (var kept positive).
  gradcheck("batch_norm", [](Graph& g) {
    const auto v = [&](const char* n) { return g.parameter(n, {3}); };
    return g.batch_norm(g.parameter("x", {2, 3, 4, 2}), v("scale"), v("shift"), v("mean"), g.parameter("pos_var", {3}),
                        1e-3);
  });
  gradcheck("batch_norm of a matrix", [](Graph& g) {
    const auto v = [&](const char* n) { return g.parameter(n, {5}); };
    return g.batch_norm(g.parameter("x", {4, 5}), v("scale"), v("shift"), v("mean"), g.parameter("pos_var", {5}));
  });
}

TEST(Autodiff, TrailingNormsConcatAndCast) {
  gradcheck("layer_norm", [](Graph& g) {
    return g.layer_norm(g.parameter("x", {3, 2, 5}),
                        {.scale = g.parameter("scale", {5}), .shift = g.parameter("shift", {5}), .epsilon = 1e-3});
  });
  gradcheck("layer_norm over two dims, no affine", [](Graph& g) {
    return g.layer_norm(g.parameter("x", {3, 2, 4}), {.normalized_ndim = 2});
  });
  gradcheck("rms_norm", [](Graph& g) {
    return g.rms_norm(g.parameter("x", {4, 6}), {.scale = g.parameter("scale", {6}), .epsilon = 1e-3});
  });
  gradcheck("group_norm", [](Graph& g) {
    return g.group_norm(g.parameter("x", {2, 6, 3, 2}), 3,
                        {.scale = g.parameter("scale", {6}), .shift = g.parameter("shift", {6}), .epsilon = 1e-3});
  });
  gradcheck("instance_norm, no affine", [](Graph& g) { return g.instance_norm(g.parameter("x", {2, 3, 5})); });
  gradcheck("concat", [](Graph& g) {
    const Tensor a = g.parameter("a", {2, 3, 4}), b = g.input("b", {2, 1, 4}), c = g.parameter("c", {2, 2, 4});
    return g.add(g.concat({a, b, c}, 1), g.concat({c, b, a}, -2));
  });
  // cast: the gradient goes back through the cast to the input's dtype (a finite difference through an f16
  // rounding is noise, so the rule is checked by value: grad/p = r rounded to f16).
  Graph g("cast");
  const Tensor p = g.parameter("p", {5}, DType::f16);
  const Tensor r = g.input("r", {5});
  g.output(g.reduce_sum(g.mul(g.cast(p, DType::f32), r)), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  EXPECT_EQ(tr->graph.dtype(*tr->graph.find_tensor("grad/p")), DType::f16);
  const TensorMap in = values_for(g, 9);
  Result<TensorMap> out = run_reference(tr->graph, in);
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(out->at("grad/p").data[i], round_to_dtype(in.at("r").data[i], DType::f16));
}

// A two-layer perceptron with a mean-squared-error loss, the way a user writes one.
Graph mlp() {
  Graph g("mlp");
  const Tensor x = g.input("x", {8, 6});
  const Tensor target = g.input("target", {8, 3});
  Tensor h = g.gelu(g.matmul(x, g.parameter("fc1.w", {6, 16}), g.parameter("fc1.b", {16})));
  h = g.matmul(h, g.parameter("fc2.w", {16, 3}), g.parameter("fc2.b", {3}));
  const Tensor d = g.sub(h, target);
  g.output(g.reduce_mean(g.mul(d, d)), "loss");
  return g;
}

TEST(Autodiff, MlpWithMeanSquaredErrorMatchesFiniteDifferences) {
  // gradcheck's loss is Σ y · r over the MSE: d(loss)/d(mse) = r, a random scalar.
  gradcheck("mlp", [](Graph& g) {
    const Tensor x = g.input("x", {8, 6});
    const Tensor target = g.input("target", {8, 3});
    Tensor h = g.silu(g.matmul(x, g.parameter("fc1.w", {6, 16}), g.parameter("fc1.b", {16})));
    h = g.matmul(h, g.parameter("fc2.w", {16, 3}), g.parameter("fc2.b", {3}));
    const Tensor d = g.sub(h, target);
    return g.reduce_mean(g.mul(d, d));
  });
  Result<Training> tr = backward(mlp(), "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  for (const char* p : {"fc1.w", "fc1.b", "fc2.w", "fc2.b"}) {
    const std::optional<Tensor> t = tr->graph.find_tensor(std::string("grad/") + p);
    ASSERT_TRUE(t.has_value()) << p;
    EXPECT_EQ(tr->graph.shape(*t), tr->graph.shape(*tr->graph.find_tensor(p))) << p;
  }
}

// ---- bad input ---------------------------------------------------------------------------------------------

TEST(Autodiff, ALossThatIsNoScalarIsRefusedByName) {
  Graph g("not_scalar");
  g.output(g.relu(g.parameter("p", {2, 3})), "y");
  Result<Training> tr = backward(g, "y");
  ASSERT_FALSE(tr.ok());
  EXPECT_THAT(tr.status().message(), HasSubstr("the loss 'y' is [2, 3], expected a scalar"));
  Result<Training> unknown = backward(g, "nope");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("no tensor named 'nope'"));
}

TEST(Autodiff, AnOpWithoutAGradientRuleOnThePathIsNamed) {
  Graph g("no_rule");
  const Tensor p = g.parameter("p", {1, 2, 4, 4});
  g.output(g.reduce_sum(g.global_max_pool(p, "pool")), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_FALSE(tr.ok());
  EXPECT_THAT(tr.status().message(), HasSubstr("node 'pool' (global_max_pool)"));
  EXPECT_THAT(tr.status().message(), HasSubstr("no gradient rule"));
  // Off the path (an input's branch), the same op is no problem.
  Graph h("off_path");
  const Tensor x = h.input("x", {1, 2, 4, 4});
  h.output(h.global_max_pool(x, "pool"), "pooled");
  h.output(h.reduce_sum(h.mul(h.parameter("q", {1, 2, 4, 4}), x)), "loss");
  EXPECT_TRUE(backward(h, "loss").ok());
}

TEST(Autodiff, AParameterTheLossDoesNotReachGetsAZeroGradientAndAWarning) {
  Graph g("unreached");
  const Tensor p = g.parameter("p", {3});
  g.output(g.relu(g.parameter("other", {3})), "side");
  g.output(g.reduce_sum(g.mul(p, p)), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_TRUE(tr.ok()) << tr.status().message();
  ASSERT_EQ(tr->warnings.size(), 1u);
  EXPECT_THAT(tr->warnings[0], HasSubstr("parameter 'other' does not reach the loss 'loss'"));
  Result<TensorMap> out = run_reference(tr->graph, values_for(g, 3));
  ASSERT_TRUE(out.ok()) << out.status().message();
  for (double v : out->at("grad/other").data) EXPECT_EQ(v, 0.0);
  EXPECT_NE(out->at("grad/p").data[0], 0.0);
}

TEST(Autodiff, SymbolicGraphsAreBoundFirst) {
  Graph g("symbolic");
  const Tensor x = g.symbolic_input("x", {g.dim("N", 1, 8), 3});
  g.output(g.reduce_sum(g.mul(x, g.parameter("w", {3}))), "loss");
  Result<Training> tr = backward(g, "loss");
  ASSERT_FALSE(tr.ok());
  EXPECT_THAT(tr.status().message(), HasSubstr("bind"));
  Result<Graph> bound = g.bind({{"N", 4}});
  ASSERT_TRUE(bound.ok());
  EXPECT_TRUE(backward(*bound, "loss").ok());
}

}  // namespace
}  // namespace kiln
