// The reference implementation of every op, checked against hand-computed values.
//
// Each registry row has an entry in the table below: small graphs built with the C++ builder, bound to small
// non-trivial inputs (negative values, values at the edges of each op's definition), run on the reference
// backend, and compared with literal values computed by hand from the op's PyTorch definition (the formula
// is written next to each case). Nothing here calls kiln's own code to compute an expected value.
//
// A test iterates over kiln::op_registry() and fails naming every op without a case, so an op cannot be
// added without a hand-computed test.
//
// Tolerance: graph outputs are rounded to their storage dtype (f32), so an element passes when
// |got - want| <= 1e-6 * max(1, |want|) (1e-6 absolute for small values, relative for large ones);
// infinities and NaN must match exactly, and cast results are compared exactly.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/reference.h"
#include "ops/registry.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kTol = 1e-6;

// ---- helpers ------------------------------------------------------------------------------------------

HostTensor T(Shape s, std::vector<double> v, DType dt = DType::f32) {
  HostTensor t(std::move(s), dt);
  EXPECT_EQ(t.data.size(), v.size()) << "test bug: wrong number of values for shape " << t.shape.to_string();
  t.data = std::move(v);
  t.data.resize(static_cast<size_t>(t.shape.numel()), 0.0);
  return t;
}

// Verifies `g`, runs the reference on `in` and returns its outputs; reports a failure (and returns an empty
// map) when either step fails.
TensorMap eval(Graph& g, const TensorMap& in) {
  Status st = g.verify();
  if (!st.ok()) {
    ADD_FAILURE() << "verify failed: " << st.message();
    return {};
  }
  auto r = run_reference(g, in);
  if (!r.ok()) {
    ADD_FAILURE() << "run_reference failed: " << r.status().message();
    return {};
  }
  return std::move(r).value();
}

bool close(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  if (!std::isfinite(got)) return false;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

std::string list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%.10g", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

// Checks output `name` of `out`: its shape, dtype and every value against `want`.
void expect_output(const TensorMap& out, const std::string& name, const Shape& shape, const std::vector<double>& want,
                   double tol = kTol, DType dtype = DType::f32) {
  auto it = out.find(name);
  if (it == out.end()) {
    ADD_FAILURE() << "no output named '" << name << "'";
    return;
  }
  const HostTensor& got = it->second;
  EXPECT_EQ(got.shape, shape) << "output '" << name << "' has shape " << got.shape.to_string() << ", expected "
                              << shape.to_string();
  EXPECT_EQ(got.dtype, dtype) << "output '" << name << "' has dtype " << dtype_name(got.dtype);
  ASSERT_EQ(got.data.size(), want.size()) << "output '" << name << "'";
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(close(got.data[i], want[i], tol))
        << "output '" << name << "' element " << i << ": got " << got.data[i] << ", expected " << want[i]
        << "\n  got:      " << list(got.data) << "\n  expected: " << list(want);
  }
}

// The common case: one input "x" of `shape`, one op, output "y" of the same shape.
void check_unary(const std::string& label, const std::function<Tensor(Graph&, Tensor)>& op, const Shape& shape,
                 const std::vector<double>& x, const std::vector<double>& want, double tol = kTol) {
  SCOPED_TRACE(label);
  Graph g(label);
  Tensor in = g.input("x", shape);
  g.output(op(g, in), "y");
  expect_output(eval(g, {{"x", T(shape, x)}}), "y", shape, want, tol);
}

// Two inputs "a" and "b", one binary op, output "y".
void check_binary(const std::string& label, const std::function<Tensor(Graph&, Tensor, Tensor)>& op, const Shape& sa,
                  const std::vector<double>& a, const Shape& sb, const std::vector<double>& b, const Shape& sy,
                  const std::vector<double>& want) {
  SCOPED_TRACE(label);
  Graph g(label);
  Tensor ta = g.input("a", sa);
  Tensor tb = g.input("b", sb);
  g.output(op(g, ta, tb), "y");
  expect_output(eval(g, {{"a", T(sa, a)}, {"b", T(sb, b)}}), "y", sy, want);
}

// ---- anchors ------------------------------------------------------------------------------------------

void case_conv2d() {
  // y[n,k,p,q] = bias[k] + sum_{c,r,s} x[n, g*C/G + c, p*sh - pad_top + r*dh, q*sw - pad_left + s*dw] * w[k,c,r,s]
  // x (1x1x3x3):  1  2  0      w (1x1x2x2):  1  -1
  //              -1  3  1                    2  0.5
  //               2 -2  1
  const std::vector<double> x{1, 2, 0, -1, 3, 1, 2, -2, 1};
  const std::vector<double> w{1, -1, 2, 0.5};
  {
    // stride 1, no padding, bias 0.5:
    // y00 = 1*1 + 2*-1 + -1*2 + 3*.5 + .5 = -1;   y01 = 2*1 + 0*-1 + 3*2 + 1*.5 + .5 = 9
    // y10 = -1*1 + 3*-1 + 2*2 + -2*.5 + .5 = -0.5; y11 = 3*1 + 1*-1 + -2*2 + 1*.5 + .5 = -1
    SCOPED_TRACE("conv2d 2x2 stride 1 with bias");
    Graph g;
    Tensor tx = g.input("x", {1, 1, 3, 3});
    Tensor tw = g.parameter("w", {1, 1, 2, 2});
    Tensor tb = g.parameter("b", {1});
    g.output(g.conv2d(tx, tw, tb), "y");
    expect_output(eval(g, {{"x", T({1, 1, 3, 3}, x)}, {"w", T({1, 1, 2, 2}, w)}, {"b", T({1}, {0.5})}}), "y",
                  {1, 1, 2, 2}, {-1, 9, -0.5, -1});
  }
  {
    // stride 2, padding 1, no bias: output (3 + 2 - 2) / 2 + 1 = 2 per dim.
    // y00: rows -1..0, cols -1..0 -> x00*w11 = 0.5
    // y01: rows -1..0, cols 1..2  -> x01*w10 + x02*w11 = 4 + 0 = 4
    // y10: rows 1..2, cols -1..0  -> x10*w01 + x20*w11 = 1 + 1 = 2
    // y11: rows 1..2, cols 1..2   -> 3*1 + 1*-1 + -2*2 + 1*.5 = -1.5
    SCOPED_TRACE("conv2d 2x2 stride 2 padding 1");
    Graph g;
    Tensor tx = g.input("x", {1, 1, 3, 3});
    Tensor tw = g.parameter("w", {1, 1, 2, 2});
    g.output(g.conv2d(tx, tw, {.stride = {2, 2}, .padding = {1, 1}}), "y");
    expect_output(eval(g, {{"x", T({1, 1, 3, 3}, x)}, {"w", T({1, 1, 2, 2}, w)}}), "y", {1, 1, 2, 2},
                  {0.5, 4, 2, -1.5});
  }
  {
    // dilation 2: the 2x2 kernel touches the corners: 1*1 + 0*-1 + 2*2 + 1*.5 = 5.5
    SCOPED_TRACE("conv2d dilation 2");
    Graph g;
    Tensor tx = g.input("x", {1, 1, 3, 3});
    Tensor tw = g.parameter("w", {1, 1, 2, 2});
    g.output(g.conv2d(tx, tw, {.dilation = {2, 2}}), "y");
    expect_output(eval(g, {{"x", T({1, 1, 3, 3}, x)}, {"w", T({1, 1, 2, 2}, w)}}), "y", {1, 1, 1, 1}, {5.5});
  }
  {
    // asymmetric padding [top, left, bottom, right] = [0, 1, 0, 0], 1x2 kernel [1, -1]:
    // y[p,q] = x[p, q-1] - x[p, q] with x[p,-1] = 0 -> output 3x3
    // row 0: 0-1, 1-2, 2-0 = -1, -1, 2; row 1: 0+1, -1-3, 3-1 = 1, -4, 2; row 2: -2, 2+2, -2-1 = -2, 4, -3
    SCOPED_TRACE("conv2d asymmetric padding");
    Graph g;
    Tensor tx = g.input("x", {1, 1, 3, 3});
    Tensor tw = g.parameter("w", {1, 1, 1, 2});
    g.output(g.conv2d(tx, tw, {.padding = {0, 1, 0, 0}}), "y");
    expect_output(eval(g, {{"x", T({1, 1, 3, 3}, x)}, {"w", T({1, 1, 1, 2}, {1, -1})}}), "y", {1, 1, 3, 3},
                  {-1, -1, 2, 1, -4, 2, -2, 4, -3});
  }
  {
    // groups 2, 1x1 kernels: channel 0 scaled by 2, channel 1 by -3, plus bias [1, -1].
    // x ch0 = [1, -2, 0.5, 4], ch1 = [3, 0, -1, 2] -> y ch0 = [3, -3, 2, 9], ch1 = [-10, -1, 2, -7]
    SCOPED_TRACE("conv2d groups 2");
    Graph g;
    Tensor tx = g.input("x", {1, 2, 2, 2});
    Tensor tw = g.parameter("w", {2, 1, 1, 1});
    Tensor tb = g.parameter("b", {2});
    g.output(g.conv2d(tx, tw, tb, {.groups = 2}), "y");
    expect_output(eval(g, {{"x", T({1, 2, 2, 2}, {1, -2, 0.5, 4, 3, 0, -1, 2})},
                           {"w", T({2, 1, 1, 1}, {2, -3})},
                           {"b", T({2}, {1, -1})}}),
                  "y", {1, 2, 2, 2}, {3, -3, 2, 9, -10, -1, 2, -7});
  }
  {
    // Two input channels summed by one output channel, 1x1: y = 1*ch0 + 0.5*ch1
    SCOPED_TRACE("conv2d channel sum");
    Graph g;
    Tensor tx = g.input("x", {1, 2, 1, 2});
    Tensor tw = g.parameter("w", {1, 2, 1, 1});
    g.output(g.conv2d(tx, tw), "y");
    expect_output(eval(g, {{"x", T({1, 2, 1, 2}, {1, -2, 4, 6})}, {"w", T({1, 2, 1, 1}, {1, 0.5})}}), "y", {1, 1, 1, 2},
                  {3, 1});
  }
}

void case_matmul() {
  // y[m,n] = bias[n] + sum_k a[m,k] b[k,n]
  // a = [[1, 2, 3], [4, 5, 6]], b = [[1, -1], [0, 2], [-2, 0.5]]
  // y00 = 1 + 0 - 6 = -5, y01 = -1 + 4 + 1.5 = 4.5, y10 = 4 + 0 - 12 = -8, y11 = -4 + 10 + 3 = 9
  const std::vector<double> a{1, 2, 3, 4, 5, 6}, at{1, 4, 2, 5, 3, 6};
  const std::vector<double> b{1, -1, 0, 2, -2, 0.5}, bt{1, 0, -2, -1, 2, 0.5};
  const std::vector<double> want{-5, 4.5, -8, 9};
  struct V {
    const char* label;
    bool ta, tb;
  };
  for (V v : {V{"plain", false, false}, V{"transpose_a", true, false}, V{"transpose_b", false, true},
              V{"transpose both", true, true}}) {
    SCOPED_TRACE(v.label);
    Graph g;
    const Shape sa = v.ta ? Shape{3, 2} : Shape{2, 3};
    const Shape sb = v.tb ? Shape{2, 3} : Shape{3, 2};
    Tensor ta = g.input("a", sa);
    Tensor tb = g.input("b", sb);
    g.output(g.matmul(ta, tb, {.transpose_a = v.ta, .transpose_b = v.tb}), "y");
    expect_output(eval(g, {{"a", T(sa, v.ta ? at : a)}, {"b", T(sb, v.tb ? bt : b)}}), "y", {2, 2}, want);
  }
  {
    // with bias [0.5, -1]: [-4.5, 3.5, -7.5, 8]
    SCOPED_TRACE("bias");
    Graph g;
    Tensor ta = g.input("a", {2, 3});
    Tensor tb = g.parameter("b", {3, 2});
    Tensor tc = g.parameter("c", {2});
    g.output(g.matmul(ta, tb, tc), "y");
    expect_output(eval(g, {{"a", T({2, 3}, a)}, {"b", T({3, 2}, b)}, {"c", T({2}, {0.5, -1})}}), "y", {2, 2},
                  {-4.5, 3.5, -7.5, 8});
  }
  {
    // batch broadcasting: a [2, 1, 2] (rows [1, 2] and [-1, 3]) x b [2, 2] = [[1, 2], [3, 4]]
    // y0 = [1 + 6, 2 + 8] = [7, 10]; y1 = [-1 + 9, -2 + 12] = [8, 10]
    SCOPED_TRACE("batch broadcast of b");
    Graph g;
    Tensor ta = g.input("a", {2, 1, 2});
    Tensor tb = g.input("b", {2, 2});
    g.output(g.matmul(ta, tb), "y");
    expect_output(eval(g, {{"a", T({2, 1, 2}, {1, 2, -1, 3})}, {"b", T({2, 2}, {1, 2, 3, 4})}}), "y", {2, 1, 2},
                  {7, 10, 8, 10});
  }
  {
    // a [1, 2] = [2, -1] broadcast against b [2, 2, 1] (batches [1, 3] and [0.5, 4]) with transpose_b as well:
    // with transpose_b, b batch i is [1 x 2] read as [2 x 1]; y = a . b_i: 2*1 - 3 = -1; 2*0.5 - 4 = -3
    SCOPED_TRACE("batch broadcast of a, transpose_b");
    Graph g;
    Tensor ta = g.input("a", {1, 2});
    Tensor tb = g.input("b", {2, 1, 2});
    g.output(g.matmul(ta, tb, {.transpose_b = true}), "y");
    expect_output(eval(g, {{"a", T({1, 2}, {2, -1})}, {"b", T({2, 1, 2}, {1, 3, 0.5, 4})}}), "y", {2, 1, 1}, {-1, -3});
  }
}

// ---- per-channel and normalization --------------------------------------------------------------------

void case_bias_add() {
  // y = x + bias[c], c the index along `axis`
  {
    // axis -1 on [2, 3]: x = [1, -2, 3, 0.5, 0, -1], bias = [10, -20, 0.25]
    SCOPED_TRACE("axis -1");
    Graph g;
    Tensor x = g.input("x", {2, 3});
    Tensor b = g.parameter("b", {3});
    g.output(g.bias_add(x, b, -1), "y");
    expect_output(eval(g, {{"x", T({2, 3}, {1, -2, 3, 0.5, 0, -1})}, {"b", T({3}, {10, -20, 0.25})}}), "y", {2, 3},
                  {11, -22, 3.25, 10.5, -20, -0.75});
  }
  {
    // default axis 1 on NCHW [1, 2, 1, 2]: x = [1, 2 | 3, 4], bias = [-1, 0.5]
    SCOPED_TRACE("axis 1, 4-D");
    Graph g;
    Tensor x = g.input("x", {1, 2, 1, 2});
    Tensor b = g.parameter("b", {2});
    g.output(g.bias_add(x, b), "y");
    expect_output(eval(g, {{"x", T({1, 2, 1, 2}, {1, 2, 3, 4})}, {"b", T({2}, {-1, 0.5})}}), "y", {1, 2, 1, 2},
                  {0, 1, 3.5, 4.5});
  }
  {
    // axis 1 on [2, 2, 2] (x = 0..7), bias [100, 200]: y[i, j, k] = x[i, j, k] + bias[j]
    SCOPED_TRACE("axis 1, 3-D");
    Graph g;
    Tensor x = g.input("x", {2, 2, 2});
    Tensor b = g.parameter("b", {2});
    g.output(g.bias_add(x, b, 1), "y");
    expect_output(eval(g, {{"x", T({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})}, {"b", T({2}, {100, 200})}}), "y", {2, 2, 2},
                  {100, 101, 202, 203, 104, 105, 206, 207});
  }
}

void case_batch_norm() {
  // y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + shift[c], eps = 1e-5
  // x [1, 2, 1, 2] = [1, 2 | -1, 3]; scale = [2, 0.5], shift = [0.1, -1], mean = [1.5, 0], var = [0.25, 4]
  // c0: (1 - 1.5) / sqrt(0.25001) * 2 + 0.1 = -1.899960001;  (2 - 1.5) / sqrt(0.25001) * 2 + 0.1 = 2.099960001
  // c1: -1 / sqrt(4.00001) * 0.5 - 1 = -1.249999688;          3 / sqrt(4.00001) * 0.5 - 1 = -0.2500009375
  Graph g;
  Tensor x = g.input("x", {1, 2, 1, 2});
  Tensor s = g.parameter("s", {2}), b = g.parameter("b", {2}), m = g.parameter("m", {2}), v = g.parameter("v", {2});
  g.output(g.batch_norm(x, s, b, m, v), "y");
  expect_output(eval(g, {{"x", T({1, 2, 1, 2}, {1, 2, -1, 3})},
                         {"s", T({2}, {2, 0.5})},
                         {"b", T({2}, {0.1, -1})},
                         {"m", T({2}, {1.5, 0})},
                         {"v", T({2}, {0.25, 4})}}),
                "y", {1, 2, 1, 2}, {-1.899960001, 2.099960001, -1.249999688, -0.2500009375});
}

void case_layer_norm() {
  // y = (x - mean) / sqrt(var + eps) * scale + shift; mean and biased var over the trailing normalized_ndim dims
  {
    // normalized_ndim 2 on [2, 2, 2]: rows [1, -2, 3, 0.5] and [-1, 4, 2, 2]
    // row 0: mean 0.625, var 3.296875; row 1: mean 1.75, var 3.1875; eps 1e-5
    // scale [[1, 2], [-0.5, 1.5]], shift [[0, 0.5], [1, -1]]
    // e.g. y000 = (1 - 0.625) / sqrt(3.296885) * 1 + 0 = 0.21055839
    SCOPED_TRACE("normalized_ndim 2, affine");
    Graph g;
    Tensor x = g.input("x", {2, 2, 2});
    Tensor s = g.parameter("s", {2, 2}), b = g.parameter("b", {2, 2});
    g.output(g.layer_norm(x, {.scale = s, .shift = b, .normalized_ndim = 2}), "y");
    expect_output(
        eval(g, {{"x", T({2, 2, 2}, {1, -2, 3, 0.5, -1, 4, 2, 2})},
                 {"s", T({2, 2}, {1, 2, -0.5, 1.5})},
                 {"b", T({2, 2}, {0, 0.5, 1, -1})}}),
        "y", {2, 2, 2},
        {0.21055839, -2.44781746, 0.333231765, -1.105279195, -1.540305676, 3.020500198, 0.9299861056, -0.7899583169});
  }
  {
    // normalized_ndim 1 (default), no affine, on [2, 3]: rows [1, -2, 3] (mean 2/3, var 38/9), [0.5, -1, 4]
    SCOPED_TRACE("normalized_ndim 1, no affine");
    Graph g;
    Tensor x = g.input("x", {2, 3});
    g.output(g.layer_norm(x), "y");
    expect_output(eval(g, {{"x", T({2, 3}, {1, -2, 3, 0.5, -1, 4})}}), "y", {2, 3},
                  {0.162221229, -1.297769832, 1.135548603, -0.3182225511, -1.034223291, 1.352445842});
  }
}

void case_group_norm() {
  // y = (x - mean_g) / sqrt(var_g + eps) * scale[c] + shift[c], statistics per (n, group) over its channels and
  // spatial positions. x [1, 4, 1, 2] = [1, 2 | -1, 0.5 || 3, -3 | 0, 4], groups 2:
  // group 0 = [1, 2, -1, 0.5] (mean 0.625, var 1.171875); group 1 = [3, -3, 0, 4] (mean 1, var 7.5)
  // scale [1, 2, 0.5, -1], shift [0.5, 0, -0.5, 1]; e.g. y0 = 0.375 / sqrt(1.171885) + 0.5 = 0.8464086835
  Graph g;
  Tensor x = g.input("x", {1, 4, 1, 2});
  Tensor s = g.parameter("s", {4}), b = g.parameter("b", {4});
  g.output(g.group_norm(x, 2, {.scale = s, .shift = b}), "y");
  expect_output(eval(g, {{"x", T({1, 4, 1, 2}, {1, 2, -1, 0.5, 3, -3, 0, 4})},
                         {"s", T({4}, {1, 2, 0.5, -1})},
                         {"b", T({4}, {0.5, 0, -0.5, 1})}}),
                "y", {1, 4, 1, 2},
                {0.8464086835, 1.770165173, -3.00220859, -0.2309391223, -0.1348518718, -1.230296256, 1.365148128,
                 -0.09544438471});
}

void case_instance_norm() {
  // y = (x - mean_{n,c}) / sqrt(var_{n,c} + eps) * scale[c] + shift[c], statistics over H, W per (n, c)
  {
    // x [1, 2, 1, 3] = [1, 2, 4 | -1, 0.5, -3], scale [2, -1], shift [0, 0.25], eps 1e-5
    // c0: mean 7/3, var 14/9; c1: mean -7/6, var 73/36
    SCOPED_TRACE("affine");
    Graph g;
    Tensor x = g.input("x", {1, 2, 1, 3});
    Tensor s = g.parameter("s", {2}), b = g.parameter("b", {2});
    g.output(g.instance_norm(x, {.scale = s, .shift = b}), "y");
    expect_output(
        eval(g, {{"x", T({1, 2, 1, 3}, {1, 2, 4, -1, 0.5, -3})}, {"s", T({2}, {2, -1})}, {"b", T({2}, {0, 0.25})}}),
        "y", {1, 2, 1, 3}, {-2.138083063, -0.5345207657, 2.672603829, 0.133752644, -0.9124735598, 1.528720916});
  }
  {
    // batch 2, one channel, no affine, eps 0.1: n0 = [1, 3, 5, 7] (mean 4, var 5) -> (x - 4) / sqrt(5.1);
    // n1 = [-2, 2, 0, 0] (mean 0, var 2) -> x / sqrt(2.1)
    SCOPED_TRACE("batch 2, epsilon 0.1");
    Graph g;
    Tensor x = g.input("x", {2, 1, 2, 2});
    g.output(g.instance_norm(x, {.epsilon = 0.1}), "y");
    expect_output(eval(g, {{"x", T({2, 1, 2, 2}, {1, 3, 5, 7, -2, 2, 0, 0})}}), "y", {2, 1, 2, 2},
                  {-1.328422328, -0.4428074428, 0.4428074428, 1.328422328, -1.380131119, 1.380131119, 0, 0});
  }
}

void case_rms_norm() {
  // y = x / sqrt(mean(x^2) + eps) * scale + shift over the trailing normalized_ndim dims, eps 1e-5
  {
    // [2, 3] rows [1, -2, 3] (mean square 14/3) and [0.5, 0.5, -1] (mean square 0.5), scale [1, 0.5, 2]
    SCOPED_TRACE("normalized_ndim 1, scale");
    Graph g;
    Tensor x = g.input("x", {2, 3});
    Tensor s = g.parameter("s", {3});
    g.output(g.rms_norm(x, {.scale = s}), "y");
    expect_output(eval(g, {{"x", T({2, 3}, {1, -2, 3, 0.5, 0.5, -1})}, {"s", T({3}, {1, 0.5, 2})}}), "y", {2, 3},
                  {0.4629095539, -0.4629095539, 2.777457323, 0.7070997102, 0.3535498551, -2.828398841});
  }
  {
    // normalized_ndim 2 on [2, 2, 2], shift only [[0.5, -0.5], [0, 1]]:
    // row 0 = [1, -2, 3, 0.5] (mean square 3.5625), row 1 = [0, 2, -1, 1] (mean square 1.5)
    SCOPED_TRACE("normalized_ndim 2, shift");
    Graph g;
    Tensor x = g.input("x", {2, 2, 2});
    Tensor b = g.parameter("b", {2, 2});
    g.output(g.rms_norm(x, {.shift = b, .normalized_ndim = 2}), "y");
    expect_output(eval(g, {{"x", T({2, 2, 2}, {1, -2, 3, 0.5, 0, 2, -1, 1})}, {"b", T({2, 2}, {0.5, -0.5, 0, 1})}}),
                  "y", {2, 2, 2},
                  {1.029812199, -1.559624398, 1.589436598, 1.2649061, 0.5, 1.132987719, -0.8164938593, 1.816493859});
  }
}

void case_softmax() {
  // y_i = exp(x_i) / sum_j exp(x_j) along `axis`; x [2, 3] = [[1, 2, 3], [-1, 0, 5]]
  const std::vector<double> x{1, 2, 3, -1, 0, 5};
  // axis -1: rows e^[0, 1, 2] / (1 + e + e^2) and e^[-6, -5, 0] / (e^-6 + e^-5 + 1)
  check_unary("axis -1", [](Graph& g, Tensor t) { return g.softmax(t, -1); }, {2, 3}, x,
              {0.09003057317, 0.2447284711, 0.6652409558, 0.002456114904, 0.006676412513, 0.9908674726});
  check_unary("axis 1", [](Graph& g, Tensor t) { return g.softmax(t, 1); }, {2, 3}, x,
              {0.09003057317, 0.2447284711, 0.6652409558, 0.002456114904, 0.006676412513, 0.9908674726});
  // axis 0: columns (1, -1), (2, 0), (3, 5): sigmoid(2), sigmoid(2), sigmoid(-2) for the first row
  check_unary("axis 0", [](Graph& g, Tensor t) { return g.softmax(t, 0); }, {2, 3}, x,
              {0.880797078, 0.880797078, 0.119202922, 0.119202922, 0.119202922, 0.880797078});
  // large values must not overflow: softmax([1000, 1001, 999]) = softmax([1, 2, 0])
  check_unary("large values", [](Graph& g, Tensor t) { return g.softmax(t); }, {1, 3}, {1000, 1001, 999},
              {0.2447284711, 0.6652409558, 0.09003057317});
  // a middle axis of [2, 2, 1]: pairs (x[i, 0, 0], x[i, 1, 0]) = (0, ln 3) -> (0.25, 0.75); (2, 2) -> (0.5, 0.5)
  check_unary("middle axis", [](Graph& g, Tensor t) { return g.softmax(t, 1); }, {2, 2, 1},
              {0, 1.0986122886681098, 2, 2}, {0.25, 0.75, 0.5, 0.5});
}

// ---- unary pointwise ----------------------------------------------------------------------------------

void case_relu() {
  // max(x, 0)
  check_unary("relu", [](Graph& g, Tensor t) { return g.relu(t); }, {5}, {-2, -0.5, 0, 0.5, 3}, {0, 0, 0, 0.5, 3});
}

void case_relu6() {
  // min(max(x, 0), 6)
  check_unary("relu6", [](Graph& g, Tensor t) { return g.relu6(t); }, {5}, {-1, 0, 3, 6, 7.5}, {0, 0, 3, 6, 6});
}

void case_clamp() {
  // min(max(x, min), max)
  check_unary("clamp [-1, 2]", [](Graph& g, Tensor t) { return g.clamp(t, -1.0, 2.0); }, {5}, {-3, -1, 0.5, 2, 5},
              {-1, -1, 0.5, 2, 2});
  check_unary("clamp min only", [](Graph& g, Tensor t) { return g.clamp(t, 0.0, std::nullopt); }, {3}, {-3, 0.5, 100},
              {0, 0.5, 100});
  check_unary("clamp max only", [](Graph& g, Tensor t) { return g.clamp(t, std::nullopt, 1.0); }, {3}, {-3, 0.5, 100},
              {-3, 0.5, 1});
  // min > max: torch.clamp sets every element to max
  check_unary("clamp min > max", [](Graph& g, Tensor t) { return g.clamp(t, 2.0, 1.0); }, {3}, {-3, 1.5, 100},
              {1, 1, 1});
}

void case_leaky_relu() {
  // x >= 0 ? x : alpha * x
  check_unary("alpha 0.1", [](Graph& g, Tensor t) { return g.leaky_relu(t, 0.1); }, {4}, {-2, -0.5, 0, 1.5},
              {-0.2, -0.05, 0, 1.5});
  check_unary("default alpha 0.01", [](Graph& g, Tensor t) { return g.leaky_relu(t); }, {2}, {-3, 2}, {-0.03, 2});
}

void case_elu() {
  // x > 0 ? x : alpha * (exp(x) - 1)
  // alpha 1: e^-2 - 1 = -0.8646647168, e^-0.5 - 1 = -0.3934693403
  check_unary("alpha 1", [](Graph& g, Tensor t) { return g.elu(t); }, {4}, {-2, -0.5, 0, 1.5},
              {-0.8646647168, -0.3934693403, 0, 1.5});
  check_unary("alpha 0.5", [](Graph& g, Tensor t) { return g.elu(t, 0.5); }, {4}, {-2, -0.5, 0, 1.5},
              {-0.4323323584, -0.1967346701, 0, 1.5});
}

void case_sigmoid() {
  // 1 / (1 + exp(-x))
  check_unary("sigmoid", [](Graph& g, Tensor t) { return g.sigmoid(t); }, {4}, {-3, -0.5, 0, 2},
              {0.04742587318, 0.3775406688, 0.5, 0.880797078});
}

void case_tanh() {
  check_unary("tanh", [](Graph& g, Tensor t) { return g.tanh(t); }, {4}, {-1.5, 0, 0.25, 2},
              {-0.9051482536, 0, 0.2449186624, 0.9640275801});
}

void case_gelu() {
  // 0.5 x (1 + erf(x / sqrt(2))) = x * Phi(x): Phi(1) = 0.8413447461, -2 * Phi(-2) = -0.0455002639
  check_unary("gelu", [](Graph& g, Tensor t) { return g.gelu(t); }, {5}, {-2, -0.5, 0, 1, 3},
              {-0.0455002639, -0.1542687694, 0, 0.8413447461, 2.995950306});
}

void case_gelu_tanh() {
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); differs from gelu in the 4th digit
  check_unary("gelu_tanh", [](Graph& g, Tensor t) { return g.gelu_tanh(t); }, {5}, {-2, -0.5, 0, 1, 3},
              {-0.04540230591, -0.1542859902, 0, 0.8411919906, 2.996362608});
}

void case_silu() {
  // x * sigmoid(x)
  check_unary("silu", [](Graph& g, Tensor t) { return g.silu(t); }, {5}, {-2, -0.5, 0, 1, 3},
              {-0.238405844, -0.1887703344, 0, 0.7310585786, 2.85772238});
}

void case_hardswish() {
  // x * relu6(x + 3) / 6: 0 for x <= -3, x for x >= 3; -1 -> -1 * 2 / 6, 1 -> 1 * 4 / 6
  check_unary("hardswish", [](Graph& g, Tensor t) { return g.hardswish(t); }, {7}, {-4, -3, -1, 0, 1, 3, 4},
              {0, 0, -0.3333333333, 0, 0.6666666667, 3, 4});
}

void case_hardsigmoid() {
  // relu6(x + 3) / 6
  check_unary("hardsigmoid", [](Graph& g, Tensor t) { return g.hardsigmoid(t); }, {7}, {-4, -3, -1, 0, 1, 3, 4},
              {0, 0, 0.3333333333, 0.5, 0.6666666667, 1, 1});
}

void case_softplus() {
  // beta x > threshold ? x : log(1 + exp(beta x)) / beta
  // defaults (beta 1, threshold 20): log(1 + e^-2) = 0.126928011, log 2, log(1 + e) = 1.313261688; 25 > 20 -> 25
  check_unary("defaults", [](Graph& g, Tensor t) { return g.softplus(t); }, {4}, {-2, 0, 1, 25},
              {0.126928011, 0.6931471806, 1.313261688, 25});
  // beta 2, threshold 5: log(1 + e^-2) / 2, log(1 + e) / 2, beta x = 5 is not above the threshold:
  // log(1 + e^5) / 2 = 2.503357674; beta x = 6 > 5 -> x = 3
  check_unary("beta 2, threshold 5", [](Graph& g, Tensor t) { return g.softplus(t, 2.0, 5.0); }, {4}, {-1, 0.5, 2.5, 3},
              {0.06346400552, 0.6566308438, 2.503357674, 3});
}

void case_mish() {
  // x * tanh(softplus(x)), softplus with beta 1, threshold 20
  check_unary("mish", [](Graph& g, Tensor t) { return g.mish(t); }, {5}, {-2, -0.5, 0, 1, 3},
              {-0.2525014827, -0.2207437747, 0, 0.8650983883, 2.986535005});
}

void case_softsign() {
  // x / (1 + |x|): -3 / 4, -0.5 / 1.5, 0, 1 / 2, 9 / 10
  check_unary("softsign", [](Graph& g, Tensor t) { return g.unary("softsign", t); }, {5}, {-3, -0.5, 0, 1, 9},
              {-0.75, -0.3333333333333333, 0, 0.5, 0.9});
}

void case_exp() {
  check_unary("exp", [](Graph& g, Tensor t) { return g.exp(t); }, {4}, {-2, 0, 0.5, 3},
              {0.1353352832, 1, 1.648721271, 20.08553692});
}

void case_log() {
  // natural log of positives: ln 0.25 = -2 ln 2, ln 1 = 0
  check_unary("log", [](Graph& g, Tensor t) { return g.log(t); }, {4}, {0.25, 1, 2.5, 10},
              {-1.386294361, 0, 0.9162907319, 2.302585093});
}

void case_sqrt() {
  check_unary("sqrt", [](Graph& g, Tensor t) { return g.sqrt(t); }, {4}, {0.25, 1, 2, 9}, {0.5, 1, 1.414213562, 3});
}

void case_rsqrt() {
  // 1 / sqrt(x)
  check_unary("rsqrt", [](Graph& g, Tensor t) { return g.rsqrt(t); }, {4}, {0.25, 1, 2, 16},
              {2, 1, 0.7071067812, 0.25});
}

void case_abs() {
  check_unary("abs", [](Graph& g, Tensor t) { return g.abs(t); }, {4}, {-2.5, 0, 3, -0.125}, {2.5, 0, 3, 0.125});
}

void case_neg() {
  check_unary("neg", [](Graph& g, Tensor t) { return g.neg(t); }, {4}, {-2.5, 0, 3, -0.125}, {2.5, 0, -3, 0.125});
}

void case_reciprocal() {
  // 1 / x, including negatives
  check_unary("reciprocal", [](Graph& g, Tensor t) { return g.reciprocal(t); }, {4}, {-4, -0.5, 0.25, 3},
              {-0.25, -2, 4, 0.3333333333});
}

void case_identity() {
  check_unary("identity", [](Graph& g, Tensor t) { return g.identity(t); }, {2, 2}, {-1.5, 0, 2.75, 1e-3},
              {-1.5, 0, 2.75, 1e-3});
}

// ---- binary pointwise ---------------------------------------------------------------------------------

const std::vector<double> k23{1, 2, 3, 4, 5, 6};  // [[1, 2, 3], [4, 5, 6]]

void case_add() {
  auto add = [](Graph& g, Tensor a, Tensor b) { return g.add(a, b); };
  // [2, 3] + [3]: b broadcast over rows
  check_binary("[2,3] + [3]", add, {2, 3}, k23, {3}, {10, 20, 30}, {2, 3}, {11, 22, 33, 14, 25, 36});
  // [3] + [2, 3]: the first operand broadcast
  check_binary("[3] + [2,3]", add, {3}, {10, 20, 30}, {2, 3}, k23, {2, 3}, {11, 22, 33, 14, 25, 36});
  // [2, 3] + [2, 1]: b broadcast over columns
  check_binary("[2,3] + [2,1]", add, {2, 3}, k23, {2, 1}, {100, 200}, {2, 3}, {101, 102, 103, 204, 205, 206});
  // [2, 1] + [1, 3] -> [2, 3], both broadcast
  check_binary("[2,1] + [1,3]", add, {2, 1}, {0.5, -1}, {1, 3}, {1, 2, 3}, {2, 3}, {1.5, 2.5, 3.5, 0, 1, 2});
  // [2, 1, 2] + [3, 1] -> [2, 3, 2]: y[i, j, k] = a[i, 0, k] + b[j, 0]
  check_binary("[2,1,2] + [3,1]", add, {2, 1, 2}, {1, 2, 3, 4}, {3, 1}, {10, 20, 30}, {2, 3, 2},
               {11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34});
  check_unary("x + 0.5", [](Graph& g, Tensor t) { return g.add(t, 0.5); }, {2, 3}, k23, {1.5, 2.5, 3.5, 4.5, 5.5, 6.5});
  check_unary("-1 + x", [](Graph& g, Tensor t) { return g.add(-1.0, t); }, {2, 3}, k23, {0, 1, 2, 3, 4, 5});
}

void case_sub() {
  auto sub = [](Graph& g, Tensor a, Tensor b) { return g.sub(a, b); };
  check_binary("[2,3] - [2,1]", sub, {2, 3}, k23, {2, 1}, {100, 200}, {2, 3}, {-99, -98, -97, -196, -195, -194});
  // operand order matters: [3] - [2, 3]
  check_binary("[3] - [2,3]", sub, {3}, {10, 20, 30}, {2, 3}, k23, {2, 3}, {9, 18, 27, 6, 15, 24});
  check_unary("2 - x", [](Graph& g, Tensor t) { return g.sub(2.0, t); }, {2, 3}, k23, {1, 0, -1, -2, -3, -4});
  check_unary("x - 2", [](Graph& g, Tensor t) { return g.sub(t, 2.0); }, {2, 3}, k23, {-1, 0, 1, 2, 3, 4});
}

void case_mul() {
  auto mul = [](Graph& g, Tensor a, Tensor b) { return g.mul(a, b); };
  // [2, 1] * [3] -> outer product [2, 3]: a = [2, -3], b = [1, 0.5, -4]
  check_binary("[2,1] * [3]", mul, {2, 1}, {2, -3}, {3}, {1, 0.5, -4}, {2, 3}, {2, 1, -8, -3, -1.5, 12});
  check_binary("same shape", mul, {2, 2}, {1, -2, 3, 0.5}, {2, 2}, {-1, -1, 2, 4}, {2, 2}, {-1, 2, 6, 2});
  check_unary("x * -2", [](Graph& g, Tensor t) { return g.mul(t, -2.0); }, {2, 3}, k23, {-2, -4, -6, -8, -10, -12});
}

void case_div() {
  auto div = [](Graph& g, Tensor a, Tensor b) { return g.div(a, b); };
  check_binary("[2,3] / [3]", div, {2, 3}, k23, {3}, {2, -4, 0.5}, {2, 3}, {0.5, -0.5, 6, 2, -1.25, 12});
  check_binary("[2,3] / [2,1]", div, {2, 3}, k23, {2, 1}, {-2, 8}, {2, 3}, {-0.5, -1, -1.5, 0.5, 0.625, 0.75});
  check_unary("x / 4", [](Graph& g, Tensor t) { return g.div(t, 4.0); }, {2, 3}, k23, {0.25, 0.5, 0.75, 1, 1.25, 1.5});
  check_unary("1 / x", [](Graph& g, Tensor t) { return g.div(1.0, t); }, {3}, {-4, -0.5, 2}, {-0.25, -2, 0.5});
  check_unary("3 / x", [](Graph& g, Tensor t) { return g.div(3.0, t); }, {3}, {-4, -0.5, 2}, {-0.75, -6, 1.5});
}

void case_maximum() {
  auto mx = [](Graph& g, Tensor a, Tensor b) { return g.maximum(a, b); };
  check_binary("[2,3] vs [3]", mx, {2, 3}, {1, -2, 3, -4, 5, -6}, {3}, {0, 0, 4}, {2, 3}, {1, 0, 4, 0, 5, 4});
  check_unary("max(x, -1)", [](Graph& g, Tensor t) { return g.maximum(t, -1.0); }, {2, 3}, {1, -2, 3, -4, 5, -6},
              {1, -1, 3, -1, 5, -1});
  // torch.maximum propagates NaN
  check_unary("NaN propagates", [](Graph& g, Tensor t) { return g.maximum(t, 0.0); }, {2}, {kNaN, 1}, {kNaN, 1});
}

void case_minimum() {
  auto mn = [](Graph& g, Tensor a, Tensor b) { return g.minimum(a, b); };
  check_binary("[2,3] vs [3]", mn, {2, 3}, {1, -2, 3, -4, 5, -6}, {3}, {0, 0, 4}, {2, 3}, {0, -2, 3, -4, 0, -6});
  check_unary("min(2, x)", [](Graph& g, Tensor t) { return g.minimum(2.0, t); }, {2, 3}, {1, -2, 3, -4, 5, -6},
              {1, -2, 2, -4, 2, -6});
  check_unary("NaN propagates", [](Graph& g, Tensor t) { return g.minimum(0.0, t); }, {2}, {1, kNaN}, {0, kNaN});
}

void case_pow() {
  auto pw = [](Graph& g, Tensor a, Tensor b) { return g.pow(a, b); };
  // positive bases with fractional and negative exponents: 0.25^0.5 = 0.5, 2^3 = 8, 9^-0.5 = 1/3,
  // 1.5^2.5 = 2.755675961
  check_binary("same shape", pw, {4}, {0.25, 2, 9, 1.5}, {4}, {0.5, 3, -0.5, 2.5}, {4},
               {0.5, 8, 0.3333333333, 2.755675961});
  // [2, 2] ^ [2]: [[4, 9], [0.25, 16]] ^ [0.5, -1] = [[2, 1/9], [0.5, 1/16]]
  check_binary("[2,2] ^ [2]", pw, {2, 2}, {4, 9, 0.25, 16}, {2}, {0.5, -1}, {2, 2}, {2, 0.1111111111, 0.5, 0.0625});
  check_unary("x ^ 2", [](Graph& g, Tensor t) { return g.pow(t, 2.0); }, {3}, {0.5, 1.5, 3}, {0.25, 2.25, 9});
  check_unary("2 ^ x", [](Graph& g, Tensor t) { return g.pow(2.0, t); }, {3}, {0.5, 1.5, 3},
              {1.414213562, 2.828427125, 8});
}

// ---- pooling ------------------------------------------------------------------------------------------

// x [1, 1, 4, 4]:
//    1  -2   3  0.5
//   -1   4   2  -3
//    0   5  -4   1
//    2 -0.5  6  -6
const std::vector<double> k4x4{1, -2, 3, 0.5, -1, 4, 2, -3, 0, 5, -4, 1, 2, -0.5, 6, -6};
// x [1, 1, 5, 5] = -12 .. 12 in row-major order
std::vector<double> ramp5x5() {
  std::vector<double> v;
  for (int i = 0; i < 25; ++i) v.push_back(i - 12);
  return v;
}

void case_max_pool2d() {
  auto pool = [](Pool2dOptions o) { return [o](Graph& g, Tensor t) { return g.max_pool2d(t, o); }; };
  // kernel 2, stride 2: max of each 2x2 block
  {
    SCOPED_TRACE("kernel 2");
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool({.kernel = {2, 2}})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, k4x4)}}), "y", {1, 1, 2, 2}, {4, 3, 5, 6});
  }
  {
    // kernel 3, stride 2, padding 1 on all-negative values (-10 - i): padding never wins.
    // out = floor((4 + 2 - 3) / 2) + 1 = 2; windows rows/cols {-1..1} and {1..3}:
    // y00 = max(x[0..1][0..1]) = -10, y01 = max(x[0..1][1..3]) = -11, y10 = -14, y11 = -15
    SCOPED_TRACE("padding never wins");
    std::vector<double> neg;
    for (int i = 0; i < 16; ++i) neg.push_back(-10 - i);
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool({.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, neg)}}), "y", {1, 1, 2, 2}, {-10, -11, -14, -15});
  }
  {
    // ceil_mode: out = ceil((4 + 2 - 3) / 2) + 1 = 3 (the last window starts at 3, inside the input);
    // windows rows {-1..1}, {1..3}, {3..5}
    SCOPED_TRACE("ceil_mode");
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool({.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, k4x4)}}), "y", {1, 1, 3, 3}, {4, 4, 0.5, 5, 6, 1, 2, 6, -6});
  }
  {
    // 5x5, kernel 2, stride 2, ceil_mode: out 3, the last row/column windows hold one row/column
    SCOPED_TRACE("ceil_mode 5x5");
    Graph g;
    Tensor x = g.input("x", {1, 1, 5, 5});
    g.output(pool({.kernel = {2, 2}, .ceil_mode = true})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 5, 5}, ramp5x5())}}), "y", {1, 1, 3, 3}, {-6, -4, -3, 4, 6, 7, 9, 11, 12});
  }
  {
    // 5x5 without ceil_mode: out = floor(3 / 2) + 1 = 2
    SCOPED_TRACE("floor 5x5");
    Graph g;
    Tensor x = g.input("x", {1, 1, 5, 5});
    g.output(pool({.kernel = {2, 2}})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 5, 5}, ramp5x5())}}), "y", {1, 1, 2, 2}, {-6, -4, 4, 6});
  }
  {
    // non-square kernel 1x2 stride [1, 2] on 2 channels [1, 2, 1, 4]: ch0 = [1, -2, 3, 0.5] -> [1, 3];
    // ch1 = [-1, -4, -2, -3] -> [-1, -2]
    SCOPED_TRACE("1x2 kernel, two channels");
    Graph g;
    Tensor x = g.input("x", {1, 2, 1, 4});
    g.output(pool({.kernel = {1, 2}, .stride = {1, 2}})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 2, 1, 4}, {1, -2, 3, 0.5, -1, -4, -2, -3})}}), "y", {1, 2, 1, 2},
                  {1, 3, -1, -2});
  }
}

void case_avg_pool2d() {
  // mean over each window, divisor as PyTorch's avg_pool2d: with h0 = p*s - pad, h1 = min(h0 + k, H + pad)
  // (same for w), the divisor is (h1 - h0) * (w1 - w0) with count_include_pad, else the number of input
  // elements in the window. Windows of ceil_mode that run past H + pad count only up to H + pad.
  auto pool = [](Pool2dOptions o) { return [o](Graph& g, Tensor t) { return g.avg_pool2d(t, o); }; };
  const Pool2dOptions k3s2p1{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  {
    // kernel 2, stride 2: (1 - 2 - 1 + 4) / 4 = 0.5, (3 + 0.5 + 2 - 3) / 4 = 0.625, (0 + 5 + 2 - 0.5) / 4 = 1.625,
    // (-4 + 1 + 6 - 6) / 4 = -0.75
    SCOPED_TRACE("kernel 2");
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool({.kernel = {2, 2}})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, k4x4)}}), "y", {1, 1, 2, 2}, {0.5, 0.625, 1.625, -0.75});
  }
  {
    // count_include_pad: every window's divisor is 9. Window sums: y00 = 1 - 2 - 1 + 4 = 2; y01 = -2 + 3 + 0.5 + 4 +
    // 2 - 3 = 4.5; y10 = -1 + 4 + 0 + 5 + 2 - 0.5 = 9.5; y11 = 4 + 2 - 3 + 5 - 4 + 1 - 0.5 + 6 - 6 = 4.5
    SCOPED_TRACE("padding, count_include_pad");
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool(k3s2p1)(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, k4x4)}}), "y", {1, 1, 2, 2}, {2.0 / 9, 0.5, 9.5 / 9, 0.5});
  }
  {
    // without count_include_pad the divisors are 4, 6, 6, 9
    SCOPED_TRACE("padding, count_include_pad false");
    Pool2dOptions o = k3s2p1;
    o.count_include_pad = false;
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool(o)(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, k4x4)}}), "y", {1, 1, 2, 2}, {0.5, 0.75, 9.5 / 6, 0.5});
  }
  {
    // ceil_mode, count_include_pad: out 3x3; windows starting at 3 end at min(6, 4 + 1) = 5, so the last
    // row/column of windows spans 2 of the padded extent: divisors by rows [9, 9, 6; 9, 9, 6; 6, 6, 4]
    // sums: row 0: 2, 4.5, (0.5 - 3) = -2.5; row 1: 9.5, 4.5, (-3 + 1 - 6) = -8; row 2: (2 - 0.5) = 1.5,
    // (-0.5 + 6 - 6) = -0.5, -6
    SCOPED_TRACE("ceil_mode, count_include_pad");
    Pool2dOptions o = k3s2p1;
    o.ceil_mode = true;
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool(o)(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, k4x4)}}), "y", {1, 1, 3, 3},
                  {2.0 / 9, 4.5 / 9, -2.5 / 6, 9.5 / 9, 4.5 / 9, -8.0 / 6, 1.5 / 6, -0.5 / 6, -6.0 / 4});
  }
  {
    // ceil_mode without count_include_pad: divisors are the input counts by rows [4, 6, 2; 6, 9, 3; 2, 3, 1]
    SCOPED_TRACE("ceil_mode, count_include_pad false");
    Pool2dOptions o = k3s2p1;
    o.ceil_mode = true;
    o.count_include_pad = false;
    Graph g;
    Tensor x = g.input("x", {1, 1, 4, 4});
    g.output(pool(o)(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 4, 4}, k4x4)}}), "y", {1, 1, 3, 3},
                  {2.0 / 4, 4.5 / 6, -2.5 / 2, 9.5 / 6, 4.5 / 9, -8.0 / 3, 1.5 / 2, -0.5 / 3, -6.0});
  }
  {
    // 5x5 ramp (-12..12), kernel 2, stride 2, ceil_mode, no padding: the windows past the input's end hold
    // 2 or 1 values and divide by that even with count_include_pad (there is no padding to count):
    // y00 = (-12 - 11 - 7 - 6) / 4 = -9; y02 = (-8 - 3) / 2 = -5.5; y22 = 12 / 1
    SCOPED_TRACE("ceil_mode 5x5 no padding");
    Graph g;
    Tensor x = g.input("x", {1, 1, 5, 5});
    g.output(pool({.kernel = {2, 2}, .ceil_mode = true})(g, x), "y");
    expect_output(eval(g, {{"x", T({1, 1, 5, 5}, ramp5x5())}}), "y", {1, 1, 3, 3},
                  {-9, -7, -5.5, 1, 3, 4.5, 8.5, 10.5, 12});
  }
}

void case_global_avg_pool() {
  // mean over H, W: ch0 = [1, 2, 3, -2] -> 1; ch1 = [-1, -5, 0.5, 4] -> -0.375; n1 ch0 = [2, 2, 2, 3] -> 2.25,
  // n1 ch1 = [-4, -4, -4, -4] -> -4
  Graph g;
  Tensor x = g.input("x", {2, 2, 2, 2});
  g.output(g.global_avg_pool(x), "y");
  expect_output(eval(g, {{"x", T({2, 2, 2, 2}, {1, 2, 3, -2, -1, -5, 0.5, 4, 2, 2, 2, 3, -4, -4, -4, -4})}}), "y",
                {2, 2, 1, 1}, {1, -0.375, 2.25, -4});
}

void case_global_max_pool() {
  // max over H, W; an all-negative channel keeps its largest value
  Graph g;
  Tensor x = g.input("x", {2, 2, 2, 2});
  g.output(g.global_max_pool(x), "y");
  expect_output(eval(g, {{"x", T({2, 2, 2, 2}, {1, 2, 3, -2, -1, -5, 0.5, 4, 2, 2, 2, 3, -3, -1, -2, -4})}}), "y",
                {2, 2, 1, 1}, {3, 4, 3, -1});
}

void case_channel_stats() {
  // per channel over both images: ch0 = [1, 2, 3, -2, 2, 2, 2, 3] -> sum 13, squares 1+4+9+4+4+4+4+9 = 39;
  // ch1 = [-1, -5, 0.5, 4, -4, -4, -4, -4] -> sum -17.5, squares 1+25+0.25+16+64 = 106.25
  Graph g;
  Tensor x = g.input("x", {2, 2, 2, 2});
  g.output(g.unary("channel_stats", x), "y");
  expect_output(eval(g, {{"x", T({2, 2, 2, 2}, {1, 2, 3, -2, -1, -5, 0.5, 4, 2, 2, 2, 3, -4, -4, -4, -4})}}), "y",
                {2, 2}, {13, -17.5, 39, 106.25});
}

void case_reduce_sum() {
  // x = [[1, 2, 3], [-4, 0.5, 6]]: over axis 0 [-3, 2.5, 9]; over axis -1 kept [[6], [2.5]]; over all, the
  // scalar 8.5.
  const HostTensor x = T({2, 3}, {1, 2, 3, -4, 0.5, 6});
  Graph g;
  Tensor in = g.input("x", {2, 3});
  g.output(g.reduce_sum(in, {0}), "a");
  g.output(g.reduce_sum(in, {-1}, true), "b");
  g.output(g.reduce_sum(in), "c");
  const TensorMap out = eval(g, {{"x", x}});
  expect_output(out, "a", {3}, {-3, 2.5, 9});
  expect_output(out, "b", {2, 1}, {6, 2.5});
  expect_output(out, "c", {}, {8.5});
}

void case_reduce_mean() {
  // x [2, 2, 2] = [[[1, 2], [3, -2]], [[-1, -5], [0.5, 4]]]: over axes 0 and 2 (kept: axis 1): row 0 of both
  // images [1, 2, -1, -5] -> -0.75, row 1 [3, -2, 0.5, 4] -> 1.375; over all: 2.5 / 8.
  Graph g;
  Tensor in = g.input("x", {2, 2, 2});
  g.output(g.reduce_mean(in, {0, 2}), "a");
  g.output(g.reduce_mean(in, {}, true), "b");
  const TensorMap out = eval(g, {{"x", T({2, 2, 2}, {1, 2, 3, -2, -1, -5, 0.5, 4})}});
  expect_output(out, "a", {2}, {-0.75, 1.375});
  expect_output(out, "b", {1, 1, 1}, {0.3125});
}

// conv2d_dgrad: dy [1, 2; 3, 4] through a 2x2 filter [1, 10; 100, 1000] onto 3x3 (each dx pixel sums the taps
// that reach it); a 1x1 filter of 5 at stride 2 onto 3x3 and 4x4 (the pixels no window starts at get 0).
void case_conv2d_dgrad() {
  Graph g;
  const Tensor dy = g.input("dy", {1, 1, 2, 2});
  g.output(g.conv2d_dgrad(dy, g.parameter("w", {1, 1, 2, 2}), {3, 3}), "a");
  g.output(g.conv2d_dgrad(dy, g.parameter("v", {1, 1, 1, 1}), {3, 3}, {.stride = {2, 2}}), "b");
  g.output(g.conv2d_dgrad(dy, g.parameter("v2", {1, 1, 1, 1}), {4, 4}, {.stride = {2, 2}}), "c");
  const TensorMap out = eval(g, {{"dy", T({1, 1, 2, 2}, {1, 2, 3, 4})},
                                 {"w", T({1, 1, 2, 2}, {1, 10, 100, 1000})},
                                 {"v", T({1, 1, 1, 1}, {5})},
                                 {"v2", T({1, 1, 1, 1}, {5})}});
  expect_output(out, "a", {1, 1, 3, 3}, {1, 12, 20, 103, 1234, 2040, 300, 3400, 4000});
  expect_output(out, "b", {1, 1, 3, 3}, {5, 0, 10, 0, 0, 0, 15, 0, 20});
  expect_output(out, "c", {1, 1, 4, 4}, {5, 0, 10, 0, 0, 0, 0, 0, 15, 0, 20, 0, 0, 0, 0, 0});
}

// conv2d_wgrad: x = 1..9 (3x3), dy = [1, 0; 0, 2]: dw[r][s] = x[r][s] + 2 x[1 + r][1 + s].
void case_conv2d_wgrad() {
  Graph g;
  g.output(g.conv2d_wgrad(g.input("x", {1, 1, 3, 3}), g.input("dy", {1, 1, 2, 2}), {2, 2}), "dw");
  const TensorMap out =
      eval(g, {{"x", T({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})}, {"dy", T({1, 1, 2, 2}, {1, 0, 0, 2})}});
  expect_output(out, "dw", {1, 1, 2, 2}, {11, 14, 20, 23});
}

// max_pool2d_grad: x [1, 5, 2, 2; 3, 0, 2, 1], 2x2 windows at stride 2: the first window's max is 5 (0, 1); the
// second's three 2s tie and the first of them (0, 2) takes dy. avg_pool2d_grad: two 2x2 windows at stride 1 over
// 2x3 spread dy = [4, 8] as 1 and 2 per element, the middle column taking both.
void case_pool2d_grads() {
  Graph g;
  const Attrs k2{{"kernel", std::vector<int64_t>{2, 2}}};
  g.output(g.add_node("max_pool2d_grad", {{"dy", {g.input("dm", {1, 1, 1, 2})}}, {"x", {g.input("xm", {1, 1, 2, 4})}}},
                      k2)[0],
           "max");
  Attrs s1 = k2;
  s1["stride"] = std::vector<int64_t>{1, 1};
  g.output(g.add_node("avg_pool2d_grad", {{"dy", {g.input("da", {1, 1, 1, 2})}}, {"x", {g.input("xa", {1, 1, 2, 3})}}},
                      s1)[0],
           "avg");
  const TensorMap out = eval(g, {{"dm", T({1, 1, 1, 2}, {10, 20})},
                                 {"xm", T({1, 1, 2, 4}, {1, 5, 2, 2, 3, 0, 2, 1})},
                                 {"da", T({1, 1, 1, 2}, {4, 8})},
                                 {"xa", T({1, 1, 2, 3}, {9, 9, 9, 9, 9, 9})}});
  expect_output(out, "max", {1, 1, 2, 4}, {0, 10, 20, 0, 0, 0, 0, 0});
  expect_output(out, "avg", {1, 1, 2, 3}, {1, 3, 2, 1, 3, 2});
}

void case_expand() {
  // [2, 1] -> [2, 2, 3]: each row's value along the new dims; [3] -> [2, 3]: the row repeated.
  Graph g;
  g.output(g.expand(g.input("a", {2, 1}), {2, 2, 3}), "ya");
  g.output(g.expand(g.input("b", {3}), {2, 3}), "yb");
  const TensorMap out = eval(g, {{"a", T({2, 1}, {5, -1})}, {"b", T({3}, {1, 2, 3})}});
  expect_output(out, "ya", {2, 2, 3}, {5, 5, 5, -1, -1, -1, 5, 5, 5, -1, -1, -1});
  expect_output(out, "yb", {2, 3}, {1, 2, 3, 1, 2, 3});
}

// ---- the activations' backward ops (a = dy, b = the forward's x or y) -----------------------------------

void check_grad_op(const char* op, const std::vector<double>& b, const std::vector<double>& want) {
  auto f = [op](Graph& g, Tensor dy, Tensor x) { return g.binary(op, dy, x); };
  check_binary(op, f, {4}, {2, -1, 0.5, 3}, {4}, b, {4}, want);
}

// relu at x = [-1, 0, 2, 1e-3]: 0 at 0 (PyTorch's choice) and below.
void case_relu_grad() { check_grad_op("relu_grad", {-1, 0, 2, 1e-3}, {0, 0, 0.5, 3}); }
// sigmoid at its output y = [0.5, 0.25, 0.9, 0.1]: y (1 - y) = [0.25, 0.1875, 0.09, 0.09].
void case_sigmoid_grad() { check_grad_op("sigmoid_grad", {0.5, 0.25, 0.9, 0.1}, {0.5, -0.1875, 0.045, 0.27}); }
// tanh at its output y = [0, 0.5, -0.5, 0.9]: 1 - y^2 = [1, 0.75, 0.75, 0.19].
void case_tanh_grad() { check_grad_op("tanh_grad", {0, 0.5, -0.5, 0.9}, {2, -0.75, 0.375, 0.57}); }
// gelu at x = [0, 1, -1, 2]: Phi(x) + x phi(x) = [0.5, 1.0833155, -0.0833155, 1.0852318], times dy.
void case_gelu_grad() {
  check_grad_op("gelu_grad", {0, 1, -1, 2}, {1, -1.0833154705876864, -0.041657735293843146, 3.255695403234591});
}
// silu at x = [0, 1, -2, 3]: s (1 + x (1 - s)), s = sigmoid(x): [0.5, 0.9276705, -0.0907842, 1.0881041], times dy.
void case_silu_grad() {
  check_grad_op("silu_grad", {0, 1, -2, 3}, {1, -0.9276705118714869, -0.04539212439244773, 3.264312318045508});
}

// ---- data movement ------------------------------------------------------------------------------------

void case_layout_convert() {
  // Values are kept in logical dims: a layout conversion changes only the memory order.
  const std::vector<double> v{1, -2, 3, 4, 5, -6, 7, 8, -9, 10, 11, 12};
  {
    SCOPED_TRACE("NCHW -> NHWC");
    Graph g;
    Tensor x = g.input("x", {1, 2, 2, 3});
    g.output(g.layout_convert(x, Layout::NHWC), "y");
    expect_output(eval(g, {{"x", T({1, 2, 2, 3}, v)}}), "y", {1, 2, 2, 3}, v);
  }
  {
    SCOPED_TRACE("NHWC -> NCHW");
    Graph g;
    Tensor x = g.input("x", {1, 2, 2, 3}, DType::f32, Layout::NHWC);
    g.output(g.layout_convert(x, Layout::NCHW), "y");
    expect_output(eval(g, {{"x", T({1, 2, 2, 3}, v)}}), "y", {1, 2, 2, 3}, v);
  }
  {
    SCOPED_TRACE("KCRS -> KRSC");
    Graph g;
    Tensor w = g.parameter("w", {2, 3, 1, 2}, DType::f32, Layout::KCRS);
    g.output(g.layout_convert(w, Layout::KRSC), "y");
    expect_output(eval(g, {{"w", T({2, 3, 1, 2}, v)}}), "y", {2, 3, 1, 2}, v);
  }
}

void case_reshape() {
  // Same values in row-major order; one dim may be -1.
  {
    SCOPED_TRACE("[2,3] -> [3,-1] shape");
    Graph g;
    Tensor x = g.input("x", {2, 3});
    g.output(g.reshape(x, {3, -1}), "y");
    expect_output(eval(g, {{"x", T({2, 3}, {1, -2, 3, 4, -5, 6})}}), "y", {3, 2}, {1, -2, 3, 4, -5, 6});
  }
  {
    SCOPED_TRACE("[1,2,2,2] -> [-1]");
    Graph g;
    Tensor x = g.input("x", {1, 2, 2, 2});
    g.output(g.reshape(x, {-1}), "y");
    expect_output(eval(g, {{"x", T({1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, -7})}}), "y", {8}, {0, 1, 2, 3, 4, 5, 6, -7});
  }
  {
    SCOPED_TRACE("[6] -> [1,-1,2]");
    Graph g;
    Tensor x = g.input("x", {6});
    g.output(g.reshape(x, {1, -1, 2}), "y");
    expect_output(eval(g, {{"x", T({6}, {9, 8, 7, 6, 5, 4})}}), "y", {1, 3, 2}, {9, 8, 7, 6, 5, 4});
  }
}

void case_transpose() {
  // output dim k is input dim perm[k]: y[i_0, ..] = x[j] with j[perm[k]] = i_k
  {
    // [2, 3] perm [1, 0]: [[1, 2, 3], [4, 5, 6]] -> [[1, 4], [2, 5], [3, 6]]
    SCOPED_TRACE("2-D");
    Graph g;
    Tensor x = g.input("x", {2, 3});
    g.output(g.transpose(x, {1, 0}), "y");
    expect_output(eval(g, {{"x", T({2, 3}, k23)}}), "y", {3, 2}, {1, 4, 2, 5, 3, 6});
  }
  // x [2, 3, 2] holds its own flat index: x[a, b, c] = 6a + 2b + c
  const std::vector<double> iota12{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  {
    // perm [2, 0, 1] -> [2, 2, 3]: y[i, j, k] = x[j, k, i] = 6j + 2k + i
    SCOPED_TRACE("perm [2, 0, 1]");
    Graph g;
    Tensor x = g.input("x", {2, 3, 2});
    g.output(g.transpose(x, {2, 0, 1}), "y");
    expect_output(eval(g, {{"x", T({2, 3, 2}, iota12)}}), "y", {2, 2, 3}, {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11});
  }
  {
    // perm [1, 2, 0] -> [3, 2, 2]: y[i, j, k] = x[k, i, j] = 6k + 2i + j
    SCOPED_TRACE("perm [1, 2, 0]");
    Graph g;
    Tensor x = g.input("x", {2, 3, 2});
    g.output(g.transpose(x, {1, 2, 0}), "y");
    expect_output(eval(g, {{"x", T({2, 3, 2}, iota12)}}), "y", {3, 2, 2}, {0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11});
  }
  {
    // NCHW -> NHWC order as a transpose: [1, 2, 2, 2] perm [0, 2, 3, 1]: y[0, h, w, c] = x[0, c, h, w] = 4c + 2h + w
    SCOPED_TRACE("perm [0, 2, 3, 1]");
    Graph g;
    Tensor x = g.input("x", {1, 2, 2, 2});
    g.output(g.transpose(x, {0, 2, 3, 1}), "y");
    expect_output(eval(g, {{"x", T({1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})}}), "y", {1, 2, 2, 2},
                  {0, 4, 1, 5, 2, 6, 3, 7});
  }
  {
    // identity permutation
    SCOPED_TRACE("perm [0, 1]");
    Graph g;
    Tensor x = g.input("x", {2, 3});
    g.output(g.transpose(x, {0, 1}), "y");
    expect_output(eval(g, {{"x", T({2, 3}, k23)}}), "y", {2, 3}, k23);
  }
}

void case_concat() {
  {
    // axis 0: [1, 2] = [1, 2] and [2, 2] = [3, 4, 5, 6] -> [3, 2]
    SCOPED_TRACE("axis 0");
    Graph g;
    Tensor a = g.input("a", {1, 2}), b = g.input("b", {2, 2});
    g.output(g.concat({a, b}, 0), "y");
    expect_output(eval(g, {{"a", T({1, 2}, {1, 2})}, {"b", T({2, 2}, {3, 4, 5, 6})}}), "y", {3, 2}, {1, 2, 3, 4, 5, 6});
  }
  {
    // axis 1 (default): [2, 1] = [[1], [2]] and [2, 2] = [[3, 4], [5, 6]] -> [[1, 3, 4], [2, 5, 6]]
    SCOPED_TRACE("axis 1");
    Graph g;
    Tensor a = g.input("a", {2, 1}), b = g.input("b", {2, 2});
    g.output(g.concat({a, b}), "y");
    expect_output(eval(g, {{"a", T({2, 1}, {1, 2})}, {"b", T({2, 2}, {3, 4, 5, 6})}}), "y", {2, 3}, {1, 3, 4, 2, 5, 6});
  }
  {
    // axis -1, three inputs [2, 1] each: [[1], [2]], [[3], [4]], [[-5], [-6]] -> [[1, 3, -5], [2, 4, -6]]
    SCOPED_TRACE("axis -1, three inputs");
    Graph g;
    Tensor a = g.input("a", {2, 1}), b = g.input("b", {2, 1}), c = g.input("c", {2, 1});
    g.output(g.concat({a, b, c}, -1), "y");
    expect_output(eval(g, {{"a", T({2, 1}, {1, 2})}, {"b", T({2, 1}, {3, 4})}, {"c", T({2, 1}, {-5, -6})}}), "y",
                  {2, 3}, {1, 3, -5, 2, 4, -6});
  }
  {
    // channels of NCHW, batch 2: a [2, 1, 1, 2] = [n0: 7, 8 | n1: 9, 10], b [2, 2, 1, 2] = [n0: 1..4 | n1: 5..8]
    // -> per n: a's channel then b's two channels
    SCOPED_TRACE("NCHW channels, batch 2");
    Graph g;
    Tensor a = g.input("a", {2, 1, 1, 2}), b = g.input("b", {2, 2, 1, 2});
    g.output(g.concat({a, b}, 1), "y");
    expect_output(eval(g, {{"a", T({2, 1, 1, 2}, {7, 8, 9, 10})}, {"b", T({2, 2, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}}),
                  "y", {2, 3, 1, 2}, {7, 8, 1, 2, 3, 4, 9, 10, 5, 6, 7, 8});
  }
  {
    // the last axis of a 3-D tensor: [1, 2, 1] + [1, 2, 2] -> [1, 2, 3]
    SCOPED_TRACE("axis 2 of 3-D");
    Graph g;
    Tensor a = g.input("a", {1, 2, 1}), b = g.input("b", {1, 2, 2});
    g.output(g.concat({a, b}, 2), "y");
    expect_output(eval(g, {{"a", T({1, 2, 1}, {-1, -2})}, {"b", T({1, 2, 2}, {1, 2, 3, 4})}}), "y", {1, 2, 3},
                  {-1, 1, 2, -2, 3, 4});
  }
}

void case_slice() {
  // x[starts:ends:steps] per dim with Python's rules; x [3, 4] holds 0..11 (x[r, c] = 4r + c)
  const std::vector<double> iota12{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  struct S {
    const char* label;
    std::vector<int64_t> starts, ends, steps;
    Shape shape;
    std::vector<double> want;
  };
  const S cases[] = {
      // rows -2: (= 1..2), columns 0:4:2 (= 0, 2)
      {"negative start, step 2", {-2, 0}, {3, 4}, {1, 2}, {2, 2}, {4, 6, 8, 10}},
      // rows 0:-1 (= 0, 1), columns 1:-1 (= 1, 2)
      {"negative ends", {0, 1}, {-1, -1}, {}, {2, 2}, {1, 2, 5, 6}},
      // out-of-range bounds clamp: rows 0:100:2 (= 0, 2), columns -100:100:3 (= 0, 3)
      {"clamped bounds, steps 2 and 3", {0, -100}, {100, 100}, {2, 3}, {2, 2}, {0, 3, 8, 11}},
      // row -1 (= 2), columns -3:-1 (= 1, 2)
      {"last row", {-1, -3}, {3, -1}, {1, 1}, {1, 2}, {9, 10}},
      // columns 1:4:2 (= 1, 3) of every row
      {"odd columns", {0, 1}, {3, 4}, {1, 2}, {3, 2}, {1, 3, 5, 7, 9, 11}},
  };
  for (const S& s : cases) {
    SCOPED_TRACE(s.label);
    Graph g;
    Tensor x = g.input("x", {3, 4});
    g.output(g.slice(x, s.starts, s.ends, s.steps), "y");
    expect_output(eval(g, {{"x", T({3, 4}, iota12)}}), "y", s.shape, s.want);
  }
}

void case_upsample2d() {
  // torch.nn.functional.interpolate. Source index scale: align_corners ? (in - 1) / (out - 1)
  // : (scale given ? 1 / scale : in / out).
  // nearest: src = min(floor(dst * scale), in - 1).
  // bilinear, align_corners false: src = max(0, (dst + 0.5) * scale - 0.5); true: src = dst * scale;
  //   i0 = floor(src), i1 = min(i0 + 1, in - 1), weights (1 - l, l) with l = src - i0.
  auto run = [](const std::string& label, Shape in, const std::vector<double>& x, Upsample2dOptions o, Shape out,
                const std::vector<double>& want) {
    SCOPED_TRACE(label);
    Graph g;
    Tensor t = g.input("x", in);
    g.output(g.upsample2d(t, o), "y");
    expect_output(eval(g, {{"x", T(in, x)}}), "y", out, want);
  };
  const std::vector<double> x22{1, 2, 3, 4};            // [[1, 2], [3, 4]]
  const std::vector<double> x23{1, -2, 0.5, 3, 4, -1};  // [[1, -2, 0.5], [3, 4, -1]]
  run("nearest scale 2", {1, 1, 2, 2}, x22, {.scale = {2, 2}}, {1, 1, 4, 4},
      {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // size 3x5 from 2x3: rows floor(p * 2/3) = 0, 0, 1; columns floor(q * 3/5) = 0, 0, 1, 1, 2
  run("nearest size 3x5", {1, 1, 2, 3}, x23, {.size = {3, 5}}, {1, 1, 3, 5},
      {1, 1, -2, -2, 0.5, 1, 1, -2, -2, 0.5, 3, 3, 4, 4, -1});
  // scale (1.5, 2) on 2x3: out 3x6; rows floor(p / 1.5) = 0, 0, 1; columns floor(q / 2)
  run("nearest scale (1.5, 2)", {1, 1, 2, 3}, x23, {.scale = {1.5, 2}}, {1, 1, 3, 6},
      {1, 1, -2, -2, 0.5, 0.5, 1, 1, -2, -2, 0.5, 0.5, 3, 3, 4, 4, -1, -1});
  // bilinear, scale 2, align_corners false: sources -0.25 (clamped to 0), 0.25, 0.75, 1.25 (i1 clamped)
  run("bilinear scale 2", {1, 1, 2, 2}, x22, {.scale = {2, 2}, .mode = "bilinear"}, {1, 1, 4, 4},
      {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
  // bilinear, size 3x3, align_corners true: sources 0, 0.5, 1
  run("bilinear align_corners size 3x3", {1, 1, 2, 2}, x22, {.size = {3, 3}, .mode = "bilinear", .align_corners = true},
      {1, 1, 3, 3}, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
  // bilinear, 2x3 -> 3x5, align_corners false: row sources 0 (clamped), 0.5, 1; column sources 0 (clamped), 0.4, 1,
  // 1.6, 2 (i1 clamped). e.g. y[1, 1] = 0.5 * (0.6 * 1 + 0.4 * -2) + 0.5 * (0.6 * 3 + 0.4 * 4) = 1.6
  run("bilinear 2x3 -> 3x5", {1, 1, 2, 3}, x23, {.size = {3, 5}, .mode = "bilinear"}, {1, 1, 3, 5},
      {1, -0.2, -2, -0.5, 0.5, 2, 1.6, 1, 0.25, -0.25, 3, 3.4, 4, 1, -1});
  // align_corners true: row sources 0, 0.5, 1; column sources 0, 0.5, 1, 1.5, 2
  run("bilinear align_corners 2x3 -> 3x5", {1, 1, 2, 3}, x23,
      {.size = {3, 5}, .mode = "bilinear", .align_corners = true}, {1, 1, 3, 5},
      {1, -0.5, -2, -0.75, 0.5, 2, 1.5, 1, 0.375, -0.25, 3, 3.5, 4, 1.5, -1});
  // two channels are independent: nearest scale 2 along W only, 1 along H
  run("nearest two channels", {1, 2, 1, 2}, {1, 2, -3, -4}, {.scale = {1, 2}}, {1, 2, 1, 4},
      {1, 1, 2, 2, -3, -3, -4, -4});
}

void case_cast() {
  auto run = [](const std::string& label, DType from, DType to, const std::vector<double>& x,
                const std::vector<double>& want) {
    SCOPED_TRACE(label);
    const Shape s{static_cast<int64_t>(x.size())};
    Graph g;
    Tensor t = g.input("x", s, from);
    g.output(g.cast(t, to), "y");
    expect_output(eval(g, {{"x", T(s, x, from)}}), "y", s, want, /*tol=*/0.0, to);
  };
  const double u11 = std::ldexp(1.0, -11), u8 = std::ldexp(1.0, -8);
  // f16 (10 mantissa bits, max 65504): 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even -> 1;
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even) -> 1 + 2^-9;
  // 65519 < 65520 (halfway to 65536) -> 65504; 65520 ties to even -> 65536 -> overflow to inf;
  // 0.1 -> 1638 * 2^-14 = 0.0999755859375; 2^-25 is halfway between 0 and the smallest subnormal 2^-24 -> 0;
  // 3 * 2^-25 is halfway between 2^-24 (odd) and 2^-23 (even) -> 2^-23
  run("f32 -> f16", DType::f32, DType::f16,
      {1 + u11, 1 + 3 * u11, 65504, 65519, 65520, -65520, 0.1f, std::ldexp(1.0, -25), 3 * std::ldexp(1.0, -25), -2.5},
      {1, 1 + std::ldexp(1.0, -9), 65504, 65504, kInf, -kInf, 0.0999755859375, 0, std::ldexp(1.0, -23), -2.5});
  // bf16 (7 mantissa bits): 1 + 2^-8 ties to even -> 1; 1 + 3 * 2^-8 -> 1 + 2^-6; just above halfway rounds up;
  // 0.1f = 0x3DCCCCCD -> 0x3DCD = 205 / 128 * 2^-4 = 0.10009765625; FLT_MAX rounds up to inf
  run("f32 -> bf16", DType::f32, DType::bf16,
      {1 + u8, 1 + 3 * u8, -(1 + u8), 1 + u8 + std::ldexp(1.0, -20), 0.1f, FLT_MAX, 3.0},
      {1, 1 + std::ldexp(1.0, -6), -1, 1 + std::ldexp(1.0, -7), 0.10009765625, kInf, 3.0});
  // widening is exact: f16 1/3 = 0.333251953125
  run("f16 -> f32", DType::f16, DType::f32, {1.5, -0.333251953125, 65504}, {1.5, -0.333251953125, 65504});
  // bf16 -> f16: 0.10009765625 is 1.6015625 * 2^-4, exactly representable in f16
  run("bf16 -> f16", DType::bf16, DType::f16, {0.10009765625, -3, 256}, {0.10009765625, -3, 256});
}

// ---- the table ----------------------------------------------------------------------------------------

const std::map<std::string, std::function<void()>>& reference_cases() {
  static const std::map<std::string, std::function<void()>> table{
      {"conv2d", case_conv2d},
      {"matmul", case_matmul},
      {"bias_add", case_bias_add},
      {"batch_norm", case_batch_norm},
      {"layer_norm", case_layer_norm},
      {"group_norm", case_group_norm},
      {"instance_norm", case_instance_norm},
      {"rms_norm", case_rms_norm},
      {"softmax", case_softmax},
      {"relu", case_relu},
      {"relu6", case_relu6},
      {"clamp", case_clamp},
      {"leaky_relu", case_leaky_relu},
      {"elu", case_elu},
      {"sigmoid", case_sigmoid},
      {"tanh", case_tanh},
      {"gelu", case_gelu},
      {"gelu_tanh", case_gelu_tanh},
      {"silu", case_silu},
      {"hardswish", case_hardswish},
      {"hardsigmoid", case_hardsigmoid},
      {"softplus", case_softplus},
      {"mish", case_mish},
      {"softsign", case_softsign},
      {"exp", case_exp},
      {"log", case_log},
      {"sqrt", case_sqrt},
      {"rsqrt", case_rsqrt},
      {"abs", case_abs},
      {"neg", case_neg},
      {"reciprocal", case_reciprocal},
      {"identity", case_identity},
      {"add", case_add},
      {"sub", case_sub},
      {"mul", case_mul},
      {"div", case_div},
      {"maximum", case_maximum},
      {"minimum", case_minimum},
      {"pow", case_pow},
      {"max_pool2d", case_max_pool2d},
      {"avg_pool2d", case_avg_pool2d},
      {"global_avg_pool", case_global_avg_pool},
      {"global_max_pool", case_global_max_pool},
      {"channel_stats", case_channel_stats},
      {"reduce_sum", case_reduce_sum},
      {"reduce_mean", case_reduce_mean},
      {"layout_convert", case_layout_convert},
      {"reshape", case_reshape},
      {"transpose", case_transpose},
      {"concat", case_concat},
      {"slice", case_slice},
      {"upsample2d", case_upsample2d},
      {"cast", case_cast},
      {"relu_grad", case_relu_grad},
      {"sigmoid_grad", case_sigmoid_grad},
      {"tanh_grad", case_tanh_grad},
      {"gelu_grad", case_gelu_grad},
      {"silu_grad", case_silu_grad},
      {"expand", case_expand},
      {"conv2d_dgrad", case_conv2d_dgrad},
      {"conv2d_wgrad", case_conv2d_wgrad},
      {"max_pool2d_grad", case_pool2d_grads},
      {"avg_pool2d_grad", case_pool2d_grads},
  };
  return table;
}

TEST(OpReference, EveryRegistryOpHasAHandComputedCase) {
  std::string missing;
  for (const OpDef& def : op_registry()) {
    if (!reference_cases().count(std::string(def.name))) missing += " " + std::string(def.name);
  }
  EXPECT_TRUE(missing.empty()) << "ops without a hand-computed reference case in tests/test_ops_reference.cpp:"
                               << missing;
  EXPECT_EQ(op_registry().size(), static_cast<size_t>(kOpCount));
}

TEST(OpReference, EveryCaseNamesARegistryOp) {
  for (const auto& [name, fn] : reference_cases()) {
    EXPECT_NE(find_op(name), nullptr) << "case '" << name << "' names no op of the registry";
  }
}

std::vector<std::string> registry_op_names() {
  std::vector<std::string> names;
  for (const OpDef& def : op_registry()) names.emplace_back(def.name);
  return names;
}

class OpReferenceHandComputed : public ::testing::TestWithParam<std::string> {};

TEST_P(OpReferenceHandComputed, Matches) {
  auto it = reference_cases().find(GetParam());
  ASSERT_NE(it, reference_cases().end()) << "no hand-computed case for op '" << GetParam() << "'";
  it->second();
}

INSTANTIATE_TEST_SUITE_P(OpReference, OpReferenceHandComputed, ::testing::ValuesIn(registry_op_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- domains ------------------------------------------------------------------------------------------

// Outside the ops' domains the reference follows IEEE arithmetic, as PyTorch does.
TEST(OpReference, DomainEdgesFollowIeee) {
  check_unary("log(0), log(-1)", [](Graph& g, Tensor t) { return g.log(t); }, {2}, {0, -1}, {-kInf, kNaN});
  check_unary("sqrt(-1)", [](Graph& g, Tensor t) { return g.sqrt(t); }, {2}, {-1, 0}, {kNaN, 0});
  check_unary("rsqrt(0)", [](Graph& g, Tensor t) { return g.rsqrt(t); }, {1}, {0}, {kInf});
  check_unary("reciprocal(+-0)", [](Graph& g, Tensor t) { return g.reciprocal(t); }, {2}, {0.0, -0.0}, {kInf, -kInf});
  check_unary("pow(negative, fraction)", [](Graph& g, Tensor t) { return g.pow(t, 0.5); }, {2}, {-4, 4}, {kNaN, 2});
  check_unary("exp overflows in f32", [](Graph& g, Tensor t) { return g.exp(t); }, {1}, {100}, {kInf});
}

// ---- random inputs ------------------------------------------------------------------------------------

// A graph whose inputs feed ports with every value domain.
Graph domain_graph() {
  Graph g("domains");
  Tensor x = g.input("x", {2, 4, 3, 3});
  Tensor s = g.parameter("scale", {4}), b = g.parameter("shift", {4}), m = g.parameter("mean", {4});
  Tensor v = g.parameter("var", {4});
  Tensor y = g.batch_norm(x, s, b, m, v);
  Tensor p = g.input("p", {2, 4, 3, 3});
  Tensor q = g.input("q", {2, 4, 3, 3});
  Tensor d = g.input("d", {4, 1, 1});
  y = g.add(y, g.log(p));
  y = g.add(y, g.reciprocal(q));
  y = g.div(y, d);
  g.output(y, "y");
  return g;
}

TEST(OpReference, RandomInputsRespectDomainsAndSeeds) {
  Graph g = domain_graph();
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  const TensorMap a = random_inputs(g, 1), a2 = random_inputs(g, 1), b = random_inputs(g, 2);
  ASSERT_EQ(a.size(), 8u);
  for (const char* name : {"x", "scale", "shift", "mean", "var", "p", "q", "d"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(a.count(name));
    const HostTensor& t = a.at(name);
    EXPECT_EQ(t.shape, g.shape(*g.find_tensor(name)));
    EXPECT_EQ(t.dtype, DType::f32);
    // deterministic for a seed, different for another seed
    EXPECT_EQ(t.data, a2.at(name).data);
    EXPECT_NE(t.data, b.at(name).data);
    // never all zeros
    bool any_nonzero = false;
    for (double v : t.data) any_nonzero |= v != 0.0;
    EXPECT_TRUE(any_nonzero);
    for (double v : t.data) EXPECT_EQ(v, static_cast<double>(static_cast<float>(v))) << "not an f32 value";
  }
  // batch_norm's var, log's x: positive, in [0.5, 1.5]
  for (const char* name : {"var", "p"}) {
    for (const TensorMap* m : {&a, &b}) {
      for (double v : m->at(name).data) {
        EXPECT_GE(v, 0.5) << name;
        EXPECT_LE(v, 1.5) << name;
      }
    }
  }
  // reciprocal's x, div's b: nonzero, |v| in [0.5, 1]
  for (const char* name : {"q", "d"}) {
    for (const TensorMap* m : {&a, &b}) {
      for (double v : m->at(name).data) {
        EXPECT_GE(std::fabs(v), 0.5) << name;
        EXPECT_LE(std::fabs(v), 1.0) << name;
      }
    }
  }
  // unconstrained tensors: in [-1, 1], both signs present
  for (const char* name : {"x", "mean"}) {
    for (double v : a.at(name).data) {
      EXPECT_GE(v, -1.0) << name;
      EXPECT_LE(v, 1.0) << name;
    }
  }
  bool neg = false, pos = false;
  for (double v : a.at("x").data) {
    neg |= v < 0;
    pos |= v > 0;
  }
  EXPECT_TRUE(neg && pos) << "x (72 values) should hold both signs";
  // different tensors of the same shape get different values
  EXPECT_NE(a.at("scale").data, a.at("shift").data);
  // and the graph runs on them to finite values
  auto r = run_reference(g, a);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (double v : r->at("y").data) EXPECT_TRUE(std::isfinite(v));
}

TEST(OpReference, RandomTensorIsDeterministicAndRoundedToItsDtype) {
  const Shape s{3, 5, 7};
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    for (ValueDomain d : {ValueDomain::any, ValueDomain::positive, ValueDomain::nonzero}) {
      HostTensor t = random_tensor(s, dt, 7, 3, d);
      EXPECT_EQ(t.shape, s);
      EXPECT_EQ(t.dtype, dt);
      EXPECT_EQ(t.data, random_tensor(s, dt, 7, 3, d).data);
      EXPECT_NE(t.data, random_tensor(s, dt, 8, 3, d).data);
      EXPECT_NE(t.data, random_tensor(s, dt, 7, 4, d).data);
      for (double v : t.data) {
        EXPECT_EQ(v, round_to_dtype(v, dt));
        if (d == ValueDomain::positive) {
          EXPECT_GT(v, 0.0);
        }
        if (d == ValueDomain::nonzero) {
          EXPECT_NE(v, 0.0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
