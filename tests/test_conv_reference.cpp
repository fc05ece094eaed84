// conv2d and matmul references checked against independent direct formulas written here.
//
// Inputs are random (kiln::random_tensor, f32, so already exactly representable in the declared dtype); the
// expected output is computed in f64 by a naive loop over every output element and every term of its sum,
// written straight from the definition:
//   conv2d: y[n,k,p,q] = bias[k] + sum_{c,r,s} x[n, g*Cg + c, p*sh - pad_top + r*dh, q*sw - pad_left + s*dw]
//                                              * w[k, c, r, s],  g = k / (K / groups), Cg = C / groups,
//           terms outside the input are zero (zero padding);
//   matmul: y[..., m, n] = bias[n] + sum_k op(a)[..., m, k] * op(b)[..., k, n], op the optional transpose,
//           batch dims broadcast NumPy-style.
// Output shapes are stated by hand in each case.
//
// Tolerance: run_reference computes in f64 and rounds its outputs to f32, so the comparison allows f32
// rounding: ||got - want||_2 <= 1e-6 * ||want||_2 (relative L2), and every element within
// 1e-6 * max(1, |want|).
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

constexpr double kRelL2 = 1e-6;
constexpr double kElemTol = 1e-6;

void expect_close(const HostTensor& got, const Shape& shape, const std::vector<double>& want) {
  ASSERT_EQ(got.shape, shape) << "got " << got.shape.to_string() << ", expected " << shape.to_string();
  EXPECT_EQ(got.dtype, DType::f32);
  ASSERT_EQ(got.data.size(), want.size());
  double diff2 = 0, want2 = 0;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = got.data[i] - want[i];
    diff2 += d * d;
    want2 += want[i] * want[i];
    if (!(std::fabs(d) <= kElemTol * std::max(1.0, std::fabs(want[i]))) && reported++ < 10) {
      ADD_FAILURE() << "element " << i << ": got " << got.data[i] << ", expected " << want[i];
    }
  }
  EXPECT_GT(want2, 0.0) << "test bug: the expected output is all zeros";
  EXPECT_LE(std::sqrt(diff2), kRelL2 * std::sqrt(want2)) << "relative L2 error " << std::sqrt(diff2 / want2);
}

// ---- conv2d -------------------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  int64_t N, C, H, W, K, R, S;
  Conv2dOptions o;
  bool bias;
  Shape out;  // [N, K, P, Q], stated by hand
  Layout x_layout = Layout::NCHW;
  Layout w_layout = Layout::KCRS;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

std::vector<double> direct_conv2d(const ConvCase& cc, const HostTensor& x, const HostTensor& w, const HostTensor* b) {
  const int64_t N = cc.N, C = cc.C, H = cc.H, W = cc.W, K = cc.K, R = cc.R, S = cc.S;
  const int64_t P = cc.out[2], Q = cc.out[3];
  const int64_t G = cc.o.groups, Cg = C / G, Kg = K / G;
  const auto& pd = cc.o.padding;
  const int64_t pad_top = pd[0], pad_left = pd[1];
  const int64_t sh = cc.o.stride[0], sw = cc.o.stride[1], dh = cc.o.dilation[0], dw = cc.o.dilation[1];
  auto X = [&](int64_t n, int64_t c, int64_t h, int64_t ww) {
    return x.data[static_cast<size_t>(((n * C + c) * H + h) * W + ww)];
  };
  auto Wt = [&](int64_t k, int64_t c, int64_t r, int64_t s) {
    return w.data[static_cast<size_t>(((k * Cg + c) * R + r) * S + s)];
  };
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t g = k / Kg;
          double acc = b ? b->data[static_cast<size_t>(k)] : 0.0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t s = 0; s < S; ++s) {
                const int64_t ih = p * sh - pad_top + r * dh;
                const int64_t iw = q * sw - pad_left + s * dw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;  // zero padding
                acc += X(n, g * Cg + c, ih, iw) * Wt(k, c, r, s);
              }
          y.push_back(acc);
        }
  return y;
}

std::vector<ConvCase> conv_cases() {
  using L = Layout;
  return {
      // P = (H + pt + pb - dh (R - 1) - 1) / sh + 1, rounded down.
      {"plain_3x3_pad1", 1, 3, 6, 5, 4, 3, 3, {.padding = {1, 1}}, true, {1, 4, 6, 5}},
      {"plain_3x3_no_bias", 1, 3, 6, 5, 4, 3, 3, {.padding = {1, 1}}, false, {1, 4, 6, 5}},
      {"stride2_pad1", 1, 3, 7, 6, 4, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, true, {1, 4, 4, 3}},
      {"stride_2x1", 1, 2, 6, 6, 3, 3, 3, {.stride = {2, 1}, .padding = {1, 1}}, false, {1, 3, 3, 6}},
      // [top, left, bottom, right] = [1, 0, 2, 1]: P = 5 + 3 - 3 + 1 = 6, Q = 6 + 1 - 3 + 1 = 5
      {"asymmetric_pad_1_0_2_1", 1, 2, 5, 6, 3, 3, 3, {.padding = {1, 0, 2, 1}}, true, {1, 3, 6, 5}},
      // [0, 2, 1, 0] with stride 2: P = (6 + 1 - 3) / 2 + 1 = 3, Q = (7 + 2 - 3) / 2 + 1 = 4
      {"asymmetric_pad_stride2", 2, 2, 6, 7, 2, 3, 3, {.stride = {2, 2}, .padding = {0, 2, 1, 0}}, false, {2, 2, 3, 4}},
      // dilation 2, pad 2: effective 5x5, P = 7 + 4 - 5 + 1 = 7
      {"dilation2_pad2", 1, 2, 7, 7, 3, 3, 3, {.padding = {2, 2}, .dilation = {2, 2}}, true, {1, 3, 7, 7}},
      // dilation 2, no padding: P = 9 - 5 + 1 = 5, Q = 8 - 5 + 1 = 4
      {"dilation2_valid", 1, 2, 9, 8, 2, 3, 3, {.dilation = {2, 2}}, false, {1, 2, 5, 4}},
      // dilation [3, 1], stride [1, 2], pad [3, 1]: P = 8 + 6 - 7 + 1 = 8, Q = (8 + 2 - 3) / 2 + 1 = 4
      {"dilation_3x1_stride_1x2",
       1,
       2,
       8,
       8,
       2,
       3,
       3,
       {.stride = {1, 2}, .padding = {3, 1}, .dilation = {3, 1}},
       true,
       {1, 2, 8, 4}},
      {"groups2", 1, 4, 5, 5, 6, 3, 3, {.padding = {1, 1}, .groups = 2}, true, {1, 6, 5, 5}},
      {"groups2_batch2_stride2",
       2,
       4,
       6,
       6,
       4,
       3,
       3,
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 2},
       false,
       {2, 4, 3, 3}},
      {"depthwise_K_eq_C", 1, 4, 6, 6, 4, 3, 3, {.padding = {1, 1}, .groups = 4}, true, {1, 4, 6, 6}},
      {"depthwise_K_eq_2C", 1, 3, 6, 5, 6, 3, 3, {.padding = {1, 1}, .groups = 3}, true, {1, 6, 6, 5}},
      {"depthwise_stride2",
       2,
       4,
       7,
       7,
       4,
       3,
       3,
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 4},
       false,
       {2, 4, 4, 4}},
      {"pointwise_1x1", 1, 8, 4, 5, 5, 1, 1, {}, true, {1, 5, 4, 5}},
      {"pointwise_1x1_stride2", 2, 6, 7, 6, 4, 1, 1, {.stride = {2, 2}}, false, {2, 4, 4, 3}},
      // the ResNet stem shape, small spatial: 7x7 stride 2 pad 3: P = (16 + 6 - 7) / 2 + 1 = 8
      {"stem_7x7_stride2_pad3", 1, 3, 16, 16, 8, 7, 7, {.stride = {2, 2}, .padding = {3, 3}}, false, {1, 8, 8, 8}},
      {"stem_7x7_odd_input", 1, 3, 15, 13, 4, 7, 7, {.stride = {2, 2}, .padding = {3, 3}}, true, {1, 4, 8, 7}},
      {"kernel_1x3", 1, 3, 5, 6, 4, 1, 3, {.padding = {0, 1}}, true, {1, 4, 5, 6}},
      {"kernel_3x1", 1, 3, 5, 6, 4, 3, 1, {.padding = {1, 0}}, false, {1, 4, 5, 6}},
      {"kernel_1x3_stride2", 1, 2, 6, 7, 3, 1, 3, {.stride = {2, 2}}, true, {1, 3, 3, 3}},
      {"batch2", 2, 3, 5, 5, 4, 3, 3, {.padding = {1, 1}}, true, {2, 4, 5, 5}},
      // output sizes that round down: (8 - 3) / 2 + 1 = 3 (2.5 rounded down)
      {"rounds_down_8_k3_s2", 1, 2, 8, 8, 3, 3, 3, {.stride = {2, 2}}, true, {1, 3, 3, 3}},
      // (9 + 1 - 5) / 3 + 1 = 2 (1.67 rounded down); (10 + 1 - 3) / 2 + 1 = 5
      {"rounds_down_dilated",
       1,
       2,
       9,
       10,
       2,
       3,
       2,
       {.stride = {3, 2}, .padding = {0, 1, 1, 0}, .dilation = {2, 2}},
       false,
       {1, 2, 2, 5}},
      // kernel as large as the padded input: one output
      {"kernel_covers_input", 1, 2, 3, 3, 2, 5, 5, {.padding = {1, 1}}, true, {1, 2, 1, 1}},
      // memory layouts do not change logical values
      {"nhwc_krsc", 1, 3, 5, 4, 4, 3, 3, {.padding = {1, 1}}, true, {1, 4, 5, 4}, L::NHWC, L::KRSC},
      {"nhwc_kcrs_grouped",
       2,
       4,
       5,
       5,
       4,
       3,
       3,
       {.stride = {2, 2}, .padding = {1, 1}, .groups = 2},
       false,
       {2, 4, 3, 3},
       L::NHWC,
       L::KCRS},
  };
}

class ConvReferenceCases : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvReferenceCases, MatchesDirectFormula) {
  const ConvCase& cc = GetParam();
  const Shape xs{cc.N, cc.C, cc.H, cc.W}, ws{cc.K, cc.C / cc.o.groups, cc.R, cc.S}, bs{cc.K};
  Graph g(cc.name);
  Tensor x = g.input("x", xs, DType::f32, cc.x_layout);
  Tensor w = g.parameter("w", ws, DType::f32, cc.w_layout);
  Tensor y;
  if (cc.bias) {
    Tensor b = g.parameter("b", bs);
    y = g.conv2d(x, w, b, cc.o);
  } else {
    y = g.conv2d(x, w, cc.o);
  }
  g.output(y, "y");
  Status st = g.verify();
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(g.shape(y), cc.out) << "inferred " << g.shape(y).to_string();

  TensorMap in;
  in["x"] = random_tensor(xs, DType::f32, 42, 1);
  in["w"] = random_tensor(ws, DType::f32, 42, 2);
  if (cc.bias) in["b"] = random_tensor(bs, DType::f32, 42, 3);
  auto r = run_reference(g, in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<double> want = direct_conv2d(cc, in["x"], in["w"], cc.bias ? &in["b"] : nullptr);
  expect_close(r->at("y"), cc.out, want);
}

INSTANTIATE_TEST_SUITE_P(ConvReference, ConvReferenceCases, ::testing::ValuesIn(conv_cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) { return info.param.name; });

// The direct formula itself, on values small enough to check by hand: x [1, 1, 2, 3] = [[1, 2, 3], [4, 5, 6]],
// w [1, 1, 2, 2] = [[1, 0], [0, -1]], padding [0, 0, 0, 1] (right only): y = x[p, q] - x[p+1, q+1], zero outside:
// y = [1 - 5, 2 - 6, 3 - 0] = [-4, -4, 3]
TEST(ConvReference, DirectFormulaByHand) {
  ConvCase cc{"hand", 1, 1, 2, 3, 1, 2, 2, {.padding = {0, 0, 0, 1}}, false, {1, 1, 1, 3}};
  HostTensor x({1, 1, 2, 3}, DType::f32), w({1, 1, 2, 2}, DType::f32);
  x.data = {1, 2, 3, 4, 5, 6};
  w.data = {1, 0, 0, -1};
  EXPECT_EQ(direct_conv2d(cc, x, w, nullptr), (std::vector<double>{-4, -4, 3}));

  Graph g;
  Tensor tx = g.input("x", {1, 1, 2, 3});
  Tensor tw = g.parameter("w", {1, 1, 2, 2});
  g.output(g.conv2d(tx, tw, cc.o), "y");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto r = run_reference(g, {{"x", x}, {"w", w}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_close(r->at("y"), {1, 1, 1, 3}, {-4, -4, 3});
}

// A kernel that does not fit the padded input leaves no valid output position: PyTorch rejects it
// ("Kernel size can't be greater than actual input size"), and so must the shape rule, whatever the stride.
// With stride 2, H = 3, R = 4: (3 - 4) / 2 + 1 rounds toward zero to 1 instead of down to 0.
TEST(ConvReference, KernelLargerThanInputIsRejected) {
  struct V {
    const char* label;
    int64_t H, R, stride, dilation;
  };
  for (V v : {V{"stride 1", 3, 4, 1, 1}, V{"stride 2", 3, 4, 2, 1}, V{"stride 3, dilation 3", 5, 3, 3, 3}}) {
    SCOPED_TRACE(v.label);
    Graph g;
    Tensor x = g.input("x", {1, 1, v.H, v.H});
    Tensor w = g.parameter("w", {1, 1, v.R, v.R});
    g.output(g.conv2d(x, w, {.stride = {v.stride, v.stride}, .dilation = {v.dilation, v.dilation}}), "y");
    Status st = g.verify();
    EXPECT_FALSE(st.ok()) << "a " << v.R << "x" << v.R << " kernel (dilation " << v.dilation << ") on a " << v.H << "x"
                          << v.H << " input was accepted, output " << g.shape(*g.find_tensor("y")).to_string();
  }
}

// ---- matmul -------------------------------------------------------------------------------------------

struct MatmulCase {
  std::string name;
  Shape a, b;  // as stored (transposed operands already in their stored order)
  bool ta, tb, bias;
  Shape out;  // stated by hand
};

void PrintTo(const MatmulCase& c, std::ostream* os) { *os << c.name; }

std::vector<double> direct_matmul(const MatmulCase& mc, const HostTensor& a, const HostTensor& b,
                                  const HostTensor* bias) {
  const Shape& out = mc.out;
  const int ro = out.rank(), ra = mc.a.rank();
  const int64_t M = out[ro - 2], N = out[ro - 1];
  const int64_t K = mc.ta ? mc.a[ra - 2] : mc.a[ra - 1];
  // Row-major offset of an element of `t` (dims `s`) from the output's batch index, broadcasting dims of 1.
  auto offset = [&](const Shape& s, const std::vector<int64_t>& batch, int64_t i, int64_t j) {
    const int r = s.rank();
    int64_t off = 0;
    for (int d = 0; d < r - 2; ++d) {
      const int od = d + (ro - 2) - (r - 2);  // right-aligned output batch dim
      const int64_t idx = s[d] == 1 ? 0 : batch[static_cast<size_t>(od)];
      off = off * s[d] + idx;
    }
    return (off * s[r - 2] + i) * s[r - 1] + j;
  };
  int64_t batches = 1;
  for (int d = 0; d < ro - 2; ++d) batches *= out[d];
  std::vector<double> y;
  std::vector<int64_t> batch(static_cast<size_t>(ro - 2), 0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rem = bi;
    for (int d = ro - 3; d >= 0; --d) {
      batch[static_cast<size_t>(d)] = rem % out[d];
      rem /= out[d];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = bias ? bias->data[static_cast<size_t>(n)] : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = a.data[static_cast<size_t>(mc.ta ? offset(mc.a, batch, k, m) : offset(mc.a, batch, m, k))];
          const double bv = b.data[static_cast<size_t>(mc.tb ? offset(mc.b, batch, n, k) : offset(mc.b, batch, k, n))];
          acc += av * bv;
        }
        y.push_back(acc);
      }
  }
  return y;
}

std::vector<MatmulCase> matmul_cases() {
  return {
      {"plain_2x3_3x4", {2, 3}, {3, 4}, false, false, false, {2, 4}},
      {"bias", {2, 3}, {3, 4}, false, false, true, {2, 4}},
      {"transpose_a", {3, 2}, {3, 4}, true, false, false, {2, 4}},
      {"transpose_b", {2, 3}, {4, 3}, false, true, true, {2, 4}},
      {"transpose_both", {3, 2}, {4, 3}, true, true, true, {2, 4}},
      {"vector_dot", {1, 7}, {7, 1}, false, false, false, {1, 1}},
      {"fully_connected", {4, 16}, {10, 16}, false, true, true, {4, 10}},
      // batch broadcasting: [2, 1] with [3] -> [2, 3]
      {"batch_2x1_vs_3", {2, 1, 3, 4}, {3, 4, 5}, false, false, false, {2, 3, 3, 5}},
      {"batch_2x1_vs_3_bias", {2, 1, 3, 4}, {3, 4, 5}, false, false, true, {2, 3, 3, 5}},
      {"batch_2x1_vs_3_transpose_a", {2, 1, 4, 3}, {3, 4, 5}, true, false, false, {2, 3, 3, 5}},
      {"batch_2x1_vs_3_transpose_b", {2, 1, 3, 4}, {3, 5, 4}, false, true, true, {2, 3, 3, 5}},
      {"batch_2x1_vs_1x3", {2, 1, 3, 4}, {1, 3, 4, 5}, false, false, true, {2, 3, 3, 5}},
      {"batch_1_vs_4", {1, 2, 3}, {4, 3, 2}, false, false, false, {4, 2, 2}},
      {"batched_a_2d_b", {5, 3, 4}, {4, 2}, false, false, true, {5, 3, 2}},
      {"2d_a_batched_b", {4, 3}, {2, 3, 5}, false, false, false, {2, 4, 5}},
      {"same_batch", {3, 2, 4}, {3, 4, 2}, false, false, false, {3, 2, 2}},
      {"batch_rank3_both_transposed", {2, 1, 2, 4, 3}, {3, 1, 5, 4}, true, true, true, {2, 3, 2, 3, 5}},
  };
}

class MatmulReferenceCases : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulReferenceCases, MatchesDirectFormula) {
  const MatmulCase& mc = GetParam();
  const Shape bias_shape{mc.out[mc.out.rank() - 1]};
  Graph g(mc.name);
  Tensor a = g.input("a", mc.a);
  Tensor b = g.input("b", mc.b);
  Tensor y = mc.bias ? g.matmul(a, b, g.parameter("bias", bias_shape), {.transpose_a = mc.ta, .transpose_b = mc.tb})
                     : g.matmul(a, b, {.transpose_a = mc.ta, .transpose_b = mc.tb});
  g.output(y, "y");
  Status st = g.verify();
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(g.shape(y), mc.out) << "inferred " << g.shape(y).to_string();

  TensorMap in;
  in["a"] = random_tensor(mc.a, DType::f32, 7, 1);
  in["b"] = random_tensor(mc.b, DType::f32, 7, 2);
  if (mc.bias) in["bias"] = random_tensor(bias_shape, DType::f32, 7, 3);
  auto r = run_reference(g, in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_close(r->at("y"), mc.out, direct_matmul(mc, in["a"], in["b"], mc.bias ? &in["bias"] : nullptr));
}

INSTANTIATE_TEST_SUITE_P(MatmulReference, MatmulReferenceCases, ::testing::ValuesIn(matmul_cases()),
                         [](const ::testing::TestParamInfo<MatmulCase>& info) { return info.param.name; });

// The direct formula on a case checked by hand: a [2, 1, 2] = rows [1, 2], [-1, 3]; b [2, 2, 1] with
// transpose_b: b0 = [[1, 0]] read as [[1], [0]] (N = 1, K = 2), b1 = [[2, -1]] -> [[2], [-1]].
// Output [2, 2, 1, 1]: y[i, j] = a_i . b_j: (1, 2).(1, 0) = 1, (1, 2).(2, -1) = 0, (-1, 3).(1, 0) = -1,
// (-1, 3).(2, -1) = -5
TEST(MatmulReference, DirectFormulaByHand) {
  MatmulCase mc{"hand", {2, 1, 1, 2}, {2, 1, 2}, false, true, false, {2, 2, 1, 1}};
  HostTensor a(mc.a, DType::f32), b(mc.b, DType::f32);
  a.data = {1, 2, -1, 3};
  b.data = {1, 0, 2, -1};
  EXPECT_EQ(direct_matmul(mc, a, b, nullptr), (std::vector<double>{1, 0, -1, -5}));

  Graph g;
  Tensor ta = g.input("a", mc.a);
  Tensor tb = g.input("b", mc.b);
  g.output(g.matmul(ta, tb, {.transpose_b = true}), "y");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto r = run_reference(g, {{"a", a}, {"b", b}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_close(r->at("y"), mc.out, {1, 0, -1, -5});
}

}  // namespace
}  // namespace kiln
