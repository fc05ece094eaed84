// Pointwise ops: unary math and activations, binary math with NumPy broadcasting, bias_add, batch_norm.
// Each unary/binary row carries its scalar function; one shared shape rule and reference loop serve them.
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "ops/registry.h"
#include "ops/vjp.h"

namespace kiln {

namespace {

// ---- scalar functions (PyTorch's definitions; see docs/ops.md) ----
double sigmoid_f(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus_f(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}
double relu6_f(double x) { return x < 0 ? 0.0 : (x > 6 ? 6.0 : x); }

double u_relu(double x, const double*) { return x < 0 ? 0.0 : x; }
double u_relu6(double x, const double*) { return relu6_f(x); }
double u_clamp(double x, const double* p) {
  if (!std::isnan(p[0]) && x < p[0]) x = p[0];
  if (!std::isnan(p[1]) && x > p[1]) x = p[1];
  return x;
}
double u_leaky_relu(double x, const double* p) { return x >= 0 ? x : p[0] * x; }
double u_elu(double x, const double* p) { return x > 0 ? x : p[0] * (std::exp(x) - 1.0); }
double u_sigmoid(double x, const double*) { return sigmoid_f(x); }
double u_tanh(double x, const double*) { return std::tanh(x); }
double u_gelu(double x, const double*) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }
double u_gelu_tanh(double x, const double*) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double u_silu(double x, const double*) { return x * sigmoid_f(x); }
double u_hardswish(double x, const double*) { return x * relu6_f(x + 3.0) / 6.0; }
double u_hardsigmoid(double x, const double*) { return relu6_f(x + 3.0) / 6.0; }
double u_softplus(double x, const double* p) { return softplus_f(x, p[0], p[1]); }
double u_mish(double x, const double*) { return x * std::tanh(softplus_f(x, 1.0, 20.0)); }
double u_softsign(double x, const double*) { return x / (1.0 + std::fabs(x)); }
double u_exp(double x, const double*) { return std::exp(x); }
double u_log(double x, const double*) { return std::log(x); }
double u_sqrt(double x, const double*) { return std::sqrt(x); }
double u_rsqrt(double x, const double*) { return 1.0 / std::sqrt(x); }
double u_abs(double x, const double*) { return std::fabs(x); }
double u_neg(double x, const double*) { return -x; }
double u_reciprocal(double x, const double*) { return 1.0 / x; }
double u_identity(double x, const double*) { return x; }

double b_add(double a, double b) { return a + b; }
double b_sub(double a, double b) { return a - b; }
double b_mul(double a, double b) { return a * b; }
double b_div(double a, double b) { return a / b; }
// torch.maximum/minimum propagate NaN.
double b_maximum(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double b_minimum(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }
double b_pow(double a, double b) { return std::pow(a, b); }

// ---- unary ----
void infer_unary(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  if (c.def().id == OpId::clamp && !c.has_attr("min") && !c.has_attr("max")) {
    c.fail("clamp needs attribute 'min', 'max' or both");
    return;
  }
  c.set_output(x.shape, x.dtype, x.layout);
}

void ref_unary(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  std::vector<double> p = unary_param_values(def, c.node.attrs);
  p.resize(2, NAN);
  for (size_t i = 0; i < x.data.size(); ++i) y.data[i] = def.unary(x.data[i], p.data());
}

// The row with its one-to-one ONNX op (OpDef::onnx).
OpDef onnx_op(OpDef d, std::string_view onnx) {
  d.onnx = onnx;
  return d;
}

OpDef unary_row(OpId id, UnaryFn fn, std::string_view device_fn, std::string_view summary,
                std::vector<AttrSpec> attrs = {}, std::vector<std::string_view> params = {},
                ValueDomain domain = ValueDomain::any) {
  return OpDef{.id = id,
               .name = op_name(id),
               .kind = FusionKind::pointwise,
               .inputs = {{.name = "x", .domain = domain}},
               .outputs = {{.name = "y"}},
               .attrs = std::move(attrs),
               .infer = infer_unary,
               .ref = ref_unary,
               .unary = fn,
               .unary_params = std::move(params),
               .device_fn = device_fn,
               .summary = summary};
}

// A parameter the kernels take as an f32 literal; beyond the f32 range it would change the op's meaning
// there (leaky_relu's alpha * x for a small negative x, softplus's beta * 0) or not compile (AttrSpec::f32).
AttrSpec float_attr(std::string_view name, double def) {
  return {.name = name, .type = AttrType::float_, .default_value = def, .f32 = true};
}

// ---- binary, NumPy broadcasting; a missing tensor operand is the scalar attribute of the same name ----
void infer_binary(InferCtx& c) {
  const bool ha = c.has("a"), hb = c.has("b");
  if (!ha && !hb) {
    c.fail("at least one of 'a' and 'b' must be a tensor (both are scalar attributes)");
    return;
  }
  if (ha && hb) {
    const TensorInfo& a = c.in("a");
    const TensorInfo& b = c.in("b");
    if (!c.expect_same_dtype("b", "a")) return;
    auto s = broadcast_shapes(a.shape, b.shape);
    if (!s) {
      c.fail_input(
          "b", fmt::format("shape {} does not broadcast with input 'a' {}", b.shape.to_string(), a.shape.to_string()));
      return;
    }
    // The layout of the operand that has the output's shape (a first), else of the higher-rank one.
    const TensorInfo& big = a.shape == *s ? a : b.shape == *s ? b : (a.shape.rank() >= b.shape.rank() ? a : b);
    c.set_output(*s, a.dtype, propagate_layout(big, s->rank()));
    return;
  }
  const TensorInfo& t = ha ? c.in("a") : c.in("b");
  c.set_output(t.shape, t.dtype, t.layout);
}

// Offsets of a broadcast operand for each element of the output, in output order.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(static_cast<size_t>(out.rank()), 0);
  auto rm = row_major_strides(in);
  for (int i = 0; i < in.rank(); ++i) {
    int o = out.rank() - in.rank() + i;
    st[static_cast<size_t>(o)] = in[i] == 1 ? 0 : rm[static_cast<size_t>(i)];
  }
  return st;
}

// ---- expand: x broadcast (NumPy rules) to `shape` ----
void infer_expand(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  const Shape to(c.attr_ints("shape"));
  // Positive dims and at most kMaxElements elements (a shape from an attribute: its count could overflow).
  if (Status st = validate_shape(to); !st.ok()) {
    c.fail_attr("shape", fmt::format("{} is no shape to broadcast to: {}", to.to_string(), st.message()));
    return;
  }
  if (broadcast_shapes(x.shape, to) != std::optional<Shape>(to)) {
    c.fail_attr("shape", fmt::format("input 'x' {} does not broadcast to {} (NumPy rules: trailing dims equal or 1)",
                                     x.shape.to_string(), to.to_string()));
    return;
  }
  c.set_output(to, x.dtype, propagate_layout(x, to.rank()));
}

void ref_expand(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const std::vector<int64_t> st = broadcast_strides(x.shape, y.shape);
  std::vector<int64_t> idx(static_cast<size_t>(y.shape.rank()), 0);
  for (size_t e = 0; e < y.data.size(); ++e) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
    y.data[e] = x.data[static_cast<size_t>(off)];
    for (int d = y.shape.rank() - 1; d >= 0 && ++idx[static_cast<size_t>(d)] == y.shape[d]; --d)
      idx[static_cast<size_t>(d)] = 0;
  }
}

void ref_binary(const OpDef& def, RefCtx& c) {
  HostTensor& y = c.out();
  const HostTensor* a = c.maybe(def, "a");
  const HostTensor* b = c.maybe(def, "b");
  const double sa = a ? 0.0 : c.attr_float("a");
  const double sb = b ? 0.0 : c.attr_float("b");
  const auto as =
      a ? broadcast_strides(a->shape, y.shape) : std::vector<int64_t>(static_cast<size_t>(y.shape.rank()), 0);
  const auto bs =
      b ? broadcast_strides(b->shape, y.shape) : std::vector<int64_t>(static_cast<size_t>(y.shape.rank()), 0);
  const int rank = y.shape.rank();
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t ao = 0, bo = 0;
  for (size_t i = 0; i < y.data.size(); ++i) {
    y.data[i] = def.binary(a ? a->data[static_cast<size_t>(ao)] : sa, b ? b->data[static_cast<size_t>(bo)] : sb);
    for (int d = rank - 1; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      ao += as[du];
      bo += bs[du];
      if (++idx[du] < y.shape[d]) break;
      ao -= as[du] * y.shape[d];
      bo -= bs[du] * y.shape[d];
      idx[du] = 0;
    }
  }
}

// ---- per-channel ops ----
void infer_bias_add(InferCtx& c) {
  if (!c.expect_min_rank("x", 1)) return;
  const TensorInfo& x = c.in("x");
  auto axis = normalize_axis(c.attr_int("axis"), x.shape.rank());
  if (!axis) {
    c.fail_attr("axis", fmt::format("expected an axis in [{}, {}) for input 'x' {}, got {}", -x.shape.rank(),
                                    x.shape.rank(), x.shape.to_string(), c.attr_int("axis")));
    return;
  }
  if (!c.expect_vector("bias", x.shape[*axis], fmt::format("one value per index of axis {}", *axis))) return;
  c.set_output(x.shape, x.dtype, x.layout);
}

// Calls f(channel, i) for every element i of a tensor with dims `s`, `channel` being its index along `axis`.
template <class F>
void for_each_channel(const Shape& s, int axis, F f) {
  int64_t inner = 1, outer = 1;
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  for (int i = 0; i < axis; ++i) outer *= s[i];
  const int64_t C = s[axis];
  size_t i = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t k = 0; k < inner; ++k) f(static_cast<size_t>(ch), i++);
}

void ref_bias_add(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  const HostTensor& bias = c.in(def, "bias");
  HostTensor& y = c.out();
  int axis = *normalize_axis(c.attr_int("axis"), x.shape.rank());
  for_each_channel(x.shape, axis, [&](size_t ch, size_t i) { y.data[i] = x.data[i] + bias.data[ch]; });
}

void infer_batch_norm(InferCtx& c) {
  if (!c.expect_min_rank("x", 2)) return;
  const TensorInfo& x = c.in("x");
  const int64_t C = x.shape[1];
  for (std::string_view p : {"scale", "shift", "mean", "var"}) {
    if (!c.expect_vector(p, C, "one value per channel C")) return;
  }
  if (c.attr_float("epsilon") < 0) {
    c.fail_attr("epsilon", fmt::format("expected a non-negative number, got {}", c.attr_float("epsilon")));
    return;
  }
  c.set_output(x.shape, x.dtype, x.layout);
}

void ref_batch_norm(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  const auto& scale = c.in(def, "scale").data;
  const auto& shift = c.in(def, "shift").data;
  const auto& mean = c.in(def, "mean").data;
  const auto& var = c.in(def, "var").data;
  const double eps = c.attr_float("epsilon");
  HostTensor& y = c.out();
  for_each_channel(x.shape, 1, [&](size_t ch, size_t i) {
    y.data[i] = (x.data[i] - mean[ch]) / std::sqrt(var[ch] + eps) * scale[ch] + shift[ch];
  });
}

}  // namespace

OpDef binary_row(OpId id, BinaryFn fn, std::string_view device_fn, std::string_view summary, ValueDomain a_domain,
                 ValueDomain b_domain) {
  return OpDef{.id = id,
               .name = op_name(id),
               .kind = FusionKind::pointwise,
               .inputs = {{.name = "a", .scalar_attr = true, .domain = a_domain},
                          {.name = "b", .scalar_attr = true, .domain = b_domain}},
               .outputs = {{.name = "y"}},
               // A scalar operand is an f32 literal in the kernels: beyond the f32 range it would be an
               // infinity (0 * 1e39 is 0 on ref, NaN in a kernel).
               .attrs = {{.name = "a", .type = AttrType::float_, .optional = true, .f32 = true},
                         {.name = "b", .type = AttrType::float_, .optional = true, .f32 = true}},
               .infer = infer_binary,
               .ref = ref_binary,
               .binary = fn,
               .device_fn = device_fn,
               .summary = summary};
}

namespace {

// add, sub, mul, div, maximum, minimum, pow.
std::vector<OpDef> binary_arithmetic_rows() {
  using V = ValueDomain;
  return {with_vjp(binary_row(OpId::add, b_add, "kiln::op::add", "a + b"), vjp::add),
          with_vjp(binary_row(OpId::sub, b_sub, "kiln::op::sub", "a - b"), vjp::sub),
          with_vjp(binary_row(OpId::mul, b_mul, "kiln::op::mul", "a * b"), vjp::mul),
          with_vjp(binary_row(OpId::div, b_div, "kiln::op::div", "a / b", V::any, V::nonzero), vjp::div),
          binary_row(OpId::maximum, b_maximum, "kiln::op::maximum", "max(a, b), NaN if either is NaN"),
          binary_row(OpId::minimum, b_minimum, "kiln::op::minimum", "min(a, b), NaN if either is NaN"),
          binary_row(OpId::pow, b_pow, "kiln::op::pow_", "a ^ b", V::positive)};
}

}  // namespace

std::vector<OpDef> pointwise_rows() {
  using V = ValueDomain;
  std::vector<OpDef> r;
  r.push_back(OpDef{.id = OpId::bias_add,
                    .name = "bias_add",
                    .kind = FusionKind::pointwise,
                    .inputs = {{.name = "x"}, {.name = "bias", .channel_vector = true}},
                    .outputs = {{.name = "y"}},
                    .attrs = {{.name = "axis", .type = AttrType::int_, .default_value = int64_t{1}}},
                    .infer = infer_bias_add,
                    .ref = ref_bias_add,
                    .device_fn = "kiln::op::add",
                    .summary = "y = x + bias[c], c the index along `axis`",
                    .vjp = vjp::bias_add});
  r.push_back(OpDef{.id = OpId::batch_norm,
                    .name = "batch_norm",
                    .kind = FusionKind::pointwise,
                    .inputs = {{.name = "x"},
                               {.name = "scale", .channel_vector = true},
                               {.name = "shift", .channel_vector = true},
                               {.name = "mean", .channel_vector = true},
                               {.name = "var", .domain = V::positive, .channel_vector = true}},
                    .outputs = {{.name = "y"}},
                    .attrs = {float_attr("epsilon", 1e-5)},
                    .infer = infer_batch_norm,
                    .ref = ref_batch_norm,
                    .device_fn = "kiln::op::batch_norm",
                    .device_params = {"epsilon"},
                    .summary = "inference batch norm over channel axis 1",
                    .vjp = vjp::batch_norm});
  r.push_back(with_vjp(onnx_op(unary_row(OpId::relu, u_relu, "kiln::op::relu", "max(x, 0)"), "Relu"), vjp::relu));
  r.push_back(with_vjp(unary_row(OpId::relu6, u_relu6, "kiln::op::relu6", "min(max(x, 0), 6)"), vjp::relu6));
  // clamp's bounds may lie beyond the f32 range (no AttrSpec::f32): the kernel then holds an infinity
  // (float_literal spells it), which bounds no f32 value, as the f64 bound bounds none on ref.
  r.push_back(unary_row(OpId::clamp, u_clamp, "kiln::op::clamp", "min(max(x, min), max); either bound may be absent",
                        {{.name = "min", .type = AttrType::float_, .optional = true},
                         {.name = "max", .type = AttrType::float_, .optional = true}},
                        {"min", "max"}));
  r.back().vjp = vjp::clamp;
  r.push_back(unary_row(OpId::leaky_relu, u_leaky_relu, "kiln::op::leaky_relu", "x >= 0 ? x : alpha * x",
                        {float_attr("alpha", 0.01)}, {"alpha"}));
  r.back().vjp = vjp::leaky_relu;
  r.push_back(unary_row(OpId::elu, u_elu, "kiln::op::elu", "x > 0 ? x : alpha * (exp(x) - 1)",
                        {float_attr("alpha", 1.0)}, {"alpha"}));
  r.back().vjp = vjp::elu;
  r.push_back(with_vjp(
      onnx_op(unary_row(OpId::sigmoid, u_sigmoid, "kiln::op::sigmoid", "1 / (1 + exp(-x))"), "Sigmoid"), vjp::sigmoid));
  r.push_back(with_vjp(onnx_op(unary_row(OpId::tanh, u_tanh, "kiln::op::tanh_", "tanh(x)"), "Tanh"), vjp::tanh));
  r.push_back(with_vjp(onnx_op(unary_row(OpId::gelu, u_gelu, "kiln::op::gelu", "0.5 x (1 + erf(x / sqrt(2)))"), "Gelu"),
                       vjp::gelu));
  r.push_back(unary_row(OpId::gelu_tanh, u_gelu_tanh, "kiln::op::gelu_tanh",
                        "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"));
  r.back().vjp = vjp::gelu_tanh;
  r.push_back(with_vjp(unary_row(OpId::silu, u_silu, "kiln::op::silu", "x * sigmoid(x)"), vjp::silu));
  r.push_back(
      onnx_op(unary_row(OpId::hardswish, u_hardswish, "kiln::op::hardswish", "x * relu6(x + 3) / 6"), "HardSwish"));
  r.back().vjp = vjp::hardswish;
  r.push_back(with_vjp(unary_row(OpId::hardsigmoid, u_hardsigmoid, "kiln::op::hardsigmoid", "relu6(x + 3) / 6"),
                       vjp::hardsigmoid));
  r.push_back(unary_row(OpId::softplus, u_softplus, "kiln::op::softplus",
                        "beta x > threshold ? x : log(1 + exp(beta x)) / beta",
                        {float_attr("beta", 1.0), float_attr("threshold", 20.0)}, {"beta", "threshold"}));
  r.back().vjp = vjp::softplus;
  r.push_back(
      with_vjp(onnx_op(unary_row(OpId::mish, u_mish, "kiln::op::mish", "x * tanh(softplus(x))"), "Mish"), vjp::mish));
  r.push_back(onnx_op(unary_row(OpId::softsign, u_softsign, "kiln::op::softsign", "x / (1 + |x|)"), "Softsign"));
  r.back().vjp = vjp::softsign;
  r.push_back(with_vjp(onnx_op(unary_row(OpId::exp, u_exp, "kiln::op::exp_", "exp(x)"), "Exp"), vjp::exp));
  r.push_back(
      with_vjp(onnx_op(unary_row(OpId::log, u_log, "kiln::op::log_", "log(x)", {}, {}, V::positive), "Log"), vjp::log));
  r.push_back(with_vjp(
      onnx_op(unary_row(OpId::sqrt, u_sqrt, "kiln::op::sqrt_", "sqrt(x)", {}, {}, V::positive), "Sqrt"), vjp::sqrt));
  r.push_back(
      with_vjp(unary_row(OpId::rsqrt, u_rsqrt, "kiln::op::rsqrt", "1 / sqrt(x)", {}, {}, V::positive), vjp::rsqrt));
  r.push_back(with_vjp(onnx_op(unary_row(OpId::abs, u_abs, "kiln::op::abs_", "|x|"), "Abs"), vjp::abs));
  r.push_back(with_vjp(onnx_op(unary_row(OpId::neg, u_neg, "kiln::op::neg", "-x"), "Neg"), vjp::neg));
  r.push_back(
      with_vjp(onnx_op(unary_row(OpId::reciprocal, u_reciprocal, "kiln::op::reciprocal", "1 / x", {}, {}, V::nonzero),
                       "Reciprocal"),
               vjp::reciprocal));
  r.push_back(with_vjp(unary_row(OpId::identity, u_identity, "kiln::op::identity", "x"), vjp::identity));
  // A pointwise op whose output is larger than its input: the kernels load x broadcast, as any operand.
  r.push_back(OpDef{.id = OpId::expand,
                    .name = "expand",
                    .kind = FusionKind::pointwise,
                    .inputs = {{.name = "x"}},
                    .outputs = {{.name = "y"}},
                    .attrs = {{.name = "shape", .type = AttrType::ints}},
                    .infer = infer_expand,
                    .ref = ref_expand,
                    .device_fn = "kiln::op::identity",
                    .summary = "x broadcast to `shape` (NumPy rules: trailing dims equal or 1)",
                    .vjp = vjp::expand});
  for (OpDef& b : binary_arithmetic_rows()) r.push_back(std::move(b));
  return r;
}

}  // namespace kiln
