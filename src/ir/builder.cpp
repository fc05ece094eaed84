// The typed builder methods: each one names its op's ports and attributes and calls add_node.
#include "kiln/graph.h"

namespace kiln {

namespace {
Tensor first(const std::vector<Tensor>& ts) { return ts.empty() ? Tensor{} : ts[0]; }

}  // namespace

Tensor Graph::conv2d(Tensor x, Tensor w, const Conv2dOptions& o, std::string name) {
  return first(add_node("conv2d", {{"x", {x}}, {"w", {w}}},
                        {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}},
                        std::move(name)));
}

Tensor Graph::conv2d(Tensor x, Tensor w, Tensor bias, const Conv2dOptions& o, std::string name) {
  return first(add_node("conv2d", {{"x", {x}}, {"w", {w}}, {"bias", {bias}}},
                        {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}},
                        std::move(name)));
}

Tensor Graph::conv2d_dgrad(Tensor dy, Tensor w, std::vector<int64_t> input_size, const Conv2dOptions& o,
                           std::string name) {
  return first(add_node("conv2d_dgrad", {{"dy", {dy}}, {"w", {w}}},
                        {{"stride", o.stride},
                         {"padding", o.padding},
                         {"dilation", o.dilation},
                         {"groups", o.groups},
                         {"input_size", std::move(input_size)}},
                        std::move(name)));
}

Tensor Graph::conv2d_wgrad(Tensor x, Tensor dy, std::vector<int64_t> filter_size, const Conv2dOptions& o,
                           std::string name) {
  return first(add_node("conv2d_wgrad", {{"x", {x}}, {"dy", {dy}}},
                        {{"stride", o.stride},
                         {"padding", o.padding},
                         {"dilation", o.dilation},
                         {"groups", o.groups},
                         {"filter_size", std::move(filter_size)}},
                        std::move(name)));
}

Tensor Graph::matmul(Tensor a, Tensor b, const MatmulOptions& o, std::string name) {
  return first(add_node("matmul", {{"a", {a}}, {"b", {b}}},
                        {{"transpose_a", o.transpose_a}, {"transpose_b", o.transpose_b}}, std::move(name)));
}

Tensor Graph::matmul(Tensor a, Tensor b, Tensor bias, const MatmulOptions& o, std::string name) {
  return first(add_node("matmul", {{"a", {a}}, {"b", {b}}, {"bias", {bias}}},
                        {{"transpose_a", o.transpose_a}, {"transpose_b", o.transpose_b}}, std::move(name)));
}

Tensor Graph::bias_add(Tensor x, Tensor bias, int64_t axis, std::string name) {
  return first(add_node("bias_add", {{"x", {x}}, {"bias", {bias}}}, {{"axis", axis}}, std::move(name)));
}

Tensor Graph::batch_norm(Tensor x, Tensor scale, Tensor shift, Tensor mean, Tensor var, double epsilon,
                         std::string name) {
  return first(add_node("batch_norm",
                        {{"x", {x}}, {"scale", {scale}}, {"shift", {shift}}, {"mean", {mean}}, {"var", {var}}},
                        {{"epsilon", epsilon}}, std::move(name)));
}

namespace {
PortInputs norm_inputs(Tensor x, const NormOptions& o) {
  PortInputs in{{"x", {x}}};
  if (o.scale.valid()) in.push_back({"scale", {o.scale}});
  if (o.shift.valid()) in.push_back({"shift", {o.shift}});
  return in;
}
}  // namespace

BatchNormTraining Graph::batch_norm_training(Tensor x, Tensor scale, Tensor shift, Tensor running_mean,
                                             Tensor running_var, double momentum, double epsilon, std::string name) {
  const std::string base = name.empty() ? unique_node_name("batch_norm_training") : name;
  const Shape xs = shape(x);  // a copy: adding nodes may move the graph's tensors
  const DType t = tensor(x).dtype;
  const int64_t C = xs[1], count = xs[0] * xs[2] * xs[3];
  const Tensor stats = unary("channel_stats", x, {}, base + ".stats");  // [2, C] f32
  const auto row = [&](int64_t i, const char* what) {
    return reshape(slice(stats, {i, 0}, {i + 1, C}), {C}, base + what);
  };
  const double inv = 1.0 / static_cast<double>(count);
  BatchNormTraining out;
  out.mean = mul(row(0, ".sum"), inv, base + ".mean");
  const Tensor mean_sq = mul(row(1, ".sum_sq"), inv, base + ".mean_sq");
  out.var = sub(mean_sq, mul(out.mean, out.mean), base + ".var");
  // batch_norm's statistics in x's dtype (its gradients then are too).
  const auto as_x = [&](Tensor v) { return t == DType::f32 ? v : cast(v, t); };
  out.y = batch_norm(x, scale, shift, as_x(out.mean), as_x(out.var), epsilon, base);
  const double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
  out.running_mean = add(mul(running_mean, 1.0 - momentum), as_x(mul(out.mean, momentum)), base + ".running_mean");
  out.running_var = add(mul(running_var, 1.0 - momentum), as_x(mul(out.var, momentum * unbias)), base + ".running_var");
  return out;
}

Tensor Graph::layer_norm(Tensor x, const NormOptions& o, std::string name) {
  return first(add_node("layer_norm", norm_inputs(x, o),
                        {{"epsilon", o.epsilon}, {"normalized_ndim", o.normalized_ndim}}, std::move(name)));
}

Tensor Graph::group_norm(Tensor x, int64_t groups, const NormOptions& o, std::string name) {
  return first(
      add_node("group_norm", norm_inputs(x, o), {{"epsilon", o.epsilon}, {"groups", groups}}, std::move(name)));
}

Tensor Graph::instance_norm(Tensor x, const NormOptions& o, std::string name) {
  return first(add_node("instance_norm", norm_inputs(x, o), {{"epsilon", o.epsilon}}, std::move(name)));
}

Tensor Graph::rms_norm(Tensor x, const NormOptions& o, std::string name) {
  return first(add_node("rms_norm", norm_inputs(x, o), {{"epsilon", o.epsilon}, {"normalized_ndim", o.normalized_ndim}},
                        std::move(name)));
}

Tensor Graph::softmax(Tensor x, int64_t axis, std::string name) {
  return first(add_node("softmax", {{"x", {x}}}, {{"axis", axis}}, std::move(name)));
}

// ---- unary ----
Tensor Graph::unary(std::string_view op, Tensor x, Attrs attrs, std::string name) {
  return first(add_node(op, {{"x", {x}}}, std::move(attrs), std::move(name)));
}
Tensor Graph::relu(Tensor x, std::string name) { return unary("relu", x, {}, std::move(name)); }
Tensor Graph::relu6(Tensor x, std::string name) { return unary("relu6", x, {}, std::move(name)); }
Tensor Graph::clamp(Tensor x, std::optional<double> min, std::optional<double> max, std::string name) {
  Attrs a;
  if (min) a["min"] = *min;
  if (max) a["max"] = *max;
  return unary("clamp", x, std::move(a), std::move(name));
}
Tensor Graph::leaky_relu(Tensor x, double alpha, std::string name) {
  return unary("leaky_relu", x, {{"alpha", alpha}}, std::move(name));
}
Tensor Graph::elu(Tensor x, double alpha, std::string name) {
  return unary("elu", x, {{"alpha", alpha}}, std::move(name));
}
Tensor Graph::sigmoid(Tensor x, std::string name) { return unary("sigmoid", x, {}, std::move(name)); }
Tensor Graph::tanh(Tensor x, std::string name) { return unary("tanh", x, {}, std::move(name)); }
Tensor Graph::gelu(Tensor x, std::string name) { return unary("gelu", x, {}, std::move(name)); }
Tensor Graph::gelu_tanh(Tensor x, std::string name) { return unary("gelu_tanh", x, {}, std::move(name)); }
Tensor Graph::silu(Tensor x, std::string name) { return unary("silu", x, {}, std::move(name)); }
Tensor Graph::hardswish(Tensor x, std::string name) { return unary("hardswish", x, {}, std::move(name)); }
Tensor Graph::hardsigmoid(Tensor x, std::string name) { return unary("hardsigmoid", x, {}, std::move(name)); }
Tensor Graph::softplus(Tensor x, double beta, double threshold, std::string name) {
  return unary("softplus", x, {{"beta", beta}, {"threshold", threshold}}, std::move(name));
}
Tensor Graph::mish(Tensor x, std::string name) { return unary("mish", x, {}, std::move(name)); }
Tensor Graph::exp(Tensor x, std::string name) { return unary("exp", x, {}, std::move(name)); }
Tensor Graph::log(Tensor x, std::string name) { return unary("log", x, {}, std::move(name)); }
Tensor Graph::sqrt(Tensor x, std::string name) { return unary("sqrt", x, {}, std::move(name)); }
Tensor Graph::rsqrt(Tensor x, std::string name) { return unary("rsqrt", x, {}, std::move(name)); }
Tensor Graph::abs(Tensor x, std::string name) { return unary("abs", x, {}, std::move(name)); }
Tensor Graph::neg(Tensor x, std::string name) { return unary("neg", x, {}, std::move(name)); }
Tensor Graph::reciprocal(Tensor x, std::string name) { return unary("reciprocal", x, {}, std::move(name)); }
Tensor Graph::identity(Tensor x, std::string name) { return unary("identity", x, {}, std::move(name)); }

// ---- binary ----
Tensor Graph::binary(std::string_view op, Tensor a, Tensor b, std::string name) {
  return first(add_node(op, {{"a", {a}}, {"b", {b}}}, {}, std::move(name)));
}
Tensor Graph::binary(std::string_view op, Tensor a, double b, std::string name) {
  return first(add_node(op, {{"a", {a}}}, {{"b", b}}, std::move(name)));
}
Tensor Graph::binary(std::string_view op, double a, Tensor b, std::string name) {
  return first(add_node(op, {{"b", {b}}}, {{"a", a}}, std::move(name)));
}

// ---- pooling ----
namespace {
Attrs pool_attrs(const Pool2dOptions& o, bool avg) {
  Attrs a{{"kernel", o.kernel},
          {"stride", o.stride.empty() ? o.kernel : o.stride},
          {"padding", o.padding},
          {"ceil_mode", o.ceil_mode}};
  if (avg) a["count_include_pad"] = o.count_include_pad;
  return a;
}
}  // namespace

Tensor Graph::max_pool2d(Tensor x, const Pool2dOptions& o, std::string name) {
  return first(add_node("max_pool2d", {{"x", {x}}}, pool_attrs(o, false), std::move(name)));
}
Tensor Graph::avg_pool2d(Tensor x, const Pool2dOptions& o, std::string name) {
  return first(add_node("avg_pool2d", {{"x", {x}}}, pool_attrs(o, true), std::move(name)));
}
Tensor Graph::global_avg_pool(Tensor x, std::string name) { return unary("global_avg_pool", x, {}, std::move(name)); }
Tensor Graph::global_max_pool(Tensor x, std::string name) { return unary("global_max_pool", x, {}, std::move(name)); }
Tensor Graph::reduce_sum(Tensor x, std::vector<int64_t> axes, bool keepdims, std::string name) {
  return unary("reduce_sum", x, {{"axes", std::move(axes)}, {"keepdims", keepdims}}, std::move(name));
}
Tensor Graph::reduce_mean(Tensor x, std::vector<int64_t> axes, bool keepdims, std::string name) {
  return unary("reduce_mean", x, {{"axes", std::move(axes)}, {"keepdims", keepdims}}, std::move(name));
}

// ---- data movement ----
Tensor Graph::layout_convert(Tensor x, Layout to, std::string name) {
  return unary("layout_convert", x, {{"to", std::string(layout_name(to))}}, std::move(name));
}
Tensor Graph::reshape(Tensor x, std::vector<int64_t> shape, std::string name) {
  return unary("reshape", x, {{"shape", std::move(shape)}}, std::move(name));
}
Tensor Graph::transpose(Tensor x, std::vector<int64_t> perm, std::string name) {
  return unary("transpose", x, {{"perm", std::move(perm)}}, std::move(name));
}
Tensor Graph::concat(const std::vector<Tensor>& xs, int64_t axis, std::string name) {
  return first(add_node("concat", {{"xs", xs}}, {{"axis", axis}}, std::move(name)));
}
Tensor Graph::slice(Tensor x, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> steps,
                    std::string name) {
  Attrs a{{"starts", std::move(starts)}, {"ends", std::move(ends)}};
  if (!steps.empty()) a["steps"] = std::move(steps);
  return unary("slice", x, std::move(a), std::move(name));
}
Tensor Graph::upsample2d(Tensor x, const Upsample2dOptions& o, std::string name) {
  Attrs a{{"mode", o.mode}, {"align_corners", o.align_corners}};
  if (!o.scale.empty()) a["scale"] = o.scale;
  if (!o.size.empty()) a["size"] = o.size;
  return unary("upsample2d", x, std::move(a), std::move(name));
}
Tensor Graph::expand(Tensor x, std::vector<int64_t> shape, std::string name) {
  return unary("expand", x, {{"shape", std::move(shape)}}, std::move(name));
}
Tensor Graph::cast(Tensor x, DType to, std::string name) {
  return unary("cast", x, {{"to", std::string(dtype_name(to))}}, std::move(name));
}

}  // namespace kiln
