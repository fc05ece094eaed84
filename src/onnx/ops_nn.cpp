// ONNX's convolution, matmul, normalization, softmax and pooling ops as kiln's.
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "importer.h"

namespace kiln::onnx_import {
namespace {

// [top, left, bottom, right] for a 2-D window from `pads` or `auto_pad` (ONNX's rule for SAME_UPPER/LOWER:
// output ceil(in / stride), the odd padding at the end resp. the start).
Result<std::vector<int64_t>> window_pads(Importer& imp, const onnx::NodeProto& n, const Shape& x,
                                         const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                                         const std::vector<int64_t>& dilation, const std::vector<int64_t>& pads) {
  // Window sizes, strides and dilations within kiln's own limits before any arithmetic with them.
  constexpr int64_t kMax = int64_t{1} << 20;
  for (const auto* v : {&kernel, &stride, &dilation}) {
    for (int64_t x : *v) {
      if (x < 1 || x > kMax)
        return imp.refuse(n, fmt::format("a kernel size, stride or dilation of {} (kiln's are 1 to 2^20)", x));
    }
  }
  if (kernel.size() != 2 || stride.size() != 2 || dilation.size() != 2)
    return imp.error(n, "a 2-D window needs 2 values each");
  const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    if (pads.size() != 4) return imp.error(n, fmt::format("pads has {} values, expected 4", pads.size()));
    return pads;
  }
  if (auto_pad == "VALID") return std::vector<int64_t>{0, 0, 0, 0};
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    return imp.error(n, fmt::format("auto_pad '{}' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER", auto_pad));
  }
  std::vector<int64_t> begin(2), end(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x[2 + i], s = stride[static_cast<size_t>(i)];
    const int64_t out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>(
        0, (out - 1) * s + (kernel[static_cast<size_t>(i)] - 1) * dilation[static_cast<size_t>(i)] + 1 - in);
    begin[static_cast<size_t>(i)] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    end[static_cast<size_t>(i)] = total - begin[static_cast<size_t>(i)];
  }
  return std::vector<int64_t>{begin[0], begin[1], end[0], end[1]};
}

// A 1-D window op ([N, C, L] input) as the 2-D one on [N, C, 1, L]: attributes gain a leading H entry (kernel
// 1, stride 1, dilation 1, no padding) and the result is reshaped back to [N, C', L'].
struct Lifted {
  bool one_d = false;
  Tensor x;
  std::vector<int64_t> strides, dilations, pads;
};

Result<Lifted> lift_1d(Importer& imp, const onnx::NodeProto& n, Tensor x) {
  Lifted l{false, x, attr_ints(n, "strides", {1, 1}), attr_ints(n, "dilations", {1, 1}),
           attr_ints(n, "pads", {0, 0, 0, 0})};
  const Shape s = imp.g.shape(x);
  if (s.rank() != 3) return l;
  l.one_d = true;
  KILN_ASSIGN_OR_RETURN(l.x, reshape_following(
                                 imp, n, x,
                                 [](const std::vector<int64_t>& d) -> Result<std::vector<int64_t>> {
                                   return std::vector<int64_t>{d[0], d[1], 1, d[2]};
                                 },
                                 imp.node_name(n, "as2d")));
  const std::vector<int64_t> st = attr_ints(n, "strides", {1}), dl = attr_ints(n, "dilations", {1});
  if (st.size() != 1 || dl.size() != 1) return imp.error(n, "strides and dilations of a 1-D window need 1 value");
  l.strides = {1, st[0]};
  l.dilations = {1, dl[0]};
  const std::vector<int64_t> p = attr_ints(n, "pads", {0, 0});
  if (p.size() != 2) return imp.error(n, fmt::format("pads has {} values, expected 2", p.size()));
  l.pads = {0, p[0], 0, p[1]};
  return l;
}

// The 2-D result `y` of a lifted op as output 0 ([N, C', 1, L'] -> [N, C', L']).
Status finish_1d(Importer& imp, const onnx::NodeProto& n, Tensor y) {
  if (auto p = imp.node_problem()) return imp.refuse(n, *p);
  KILN_ASSIGN_OR_RETURN(Tensor out, reshape_following(
                                        imp, n, y,
                                        [](const std::vector<int64_t>& d) -> Result<std::vector<int64_t>> {
                                          return std::vector<int64_t>{d[0], d[1], d[3]};
                                        },
                                        imp.node_name(n)));
  return imp.set_output(n, 0, out);
}

Status require_rank4(Importer& imp, const onnx::NodeProto& n, Tensor x, std::string_view what) {
  const int rank = imp.g.shape(x).rank();
  if (rank == 4) return {};
  return imp.refuse(
      n, fmt::format("{} on a rank-{} input: kiln's {} are 2-D (inputs [N, C, H, W])", n.op_type(), rank, what));
}

// Outputs past the first (BatchNormalization's running stats, MaxPool's indices, LayerNormalization's mean)
// are training or bookkeeping outputs kiln does not compute.
Status only_first_output(Importer& imp, const onnx::NodeProto& n) {
  for (int k = 1; k < n.output_size(); ++k) {
    if (imp.used(n.output(k))) return imp.refuse(n, fmt::format("output {} ('{}') is not supported", k, n.output(k)));
  }
  return {};
}

Status conv(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x0, imp.input(n, 0));
  KILN_ASSIGN_OR_RETURN(Lifted l, lift_1d(imp, n, x0));
  KILN_RETURN_IF_ERROR(require_rank4(imp, n, l.x, "convolutions"));
  Tensor w;
  const Const* cw = imp.constant(n.input(1));
  if (l.one_d && cw) {  // [K, C/g, k] -> [K, C/g, 1, k], reshaped here: the weight stays a parameter
    if (cw->dims.size() != 3) return imp.error(n, fmt::format("weight of rank {}, expected 3", cw->dims.size()));
    const std::string lifted = n.input(1) + "/2d";
    if (!imp.known(lifted)) {
      Const c4 = *cw;
      c4.dims = {cw->dims[0], cw->dims[1], 1, cw->dims[2]};
      imp.set_const(lifted, std::move(c4));
    }
    onnx::NodeProto read = n;  // errors name the Conv
    read.set_input(1, lifted);
    KILN_ASSIGN_OR_RETURN(w, imp.input(read, 1));
  } else {
    KILN_ASSIGN_OR_RETURN(w, imp.input(n, 1));
    if (l.one_d) {
      const Shape s3 = imp.g.shape(w);
      if (s3.rank() != 3) return imp.error(n, fmt::format("weight of rank {}, expected 3", s3.rank()));
      w = imp.g.reshape(w, {s3[0], s3[1], 1, s3[2]}, imp.node_name(n, "w2d"));
    }
  }
  const Shape ws = imp.g.shape(w);
  if (ws.rank() != 4) return imp.error(n, fmt::format("weight of rank {}, expected 4", ws.rank()));
  const std::vector<int64_t> kernel{ws[2], ws[3]};
  // kernel_shape is optional (ONNX infers it from W), but when given it must agree with W: a model that
  // says otherwise is malformed, and silently taking the weight's would hide it.
  if (const auto ks = attr_ints(n, "kernel_shape"); !ks.empty()) {
    const std::vector<int64_t> from_w = l.one_d ? std::vector<int64_t>{ws[3]} : kernel;
    if (ks != from_w) {
      return imp.error(n, fmt::format("kernel_shape [{}] contradicts the weight's spatial dims [{}]",
                                      fmt::join(ks, ", "), fmt::join(from_w, ", ")));
    }
  }
  Conv2dOptions o;
  o.stride = l.strides;
  o.dilation = l.dilations;
  o.groups = attr_int(n, "group", 1);
  if (o.stride.size() != 2 || o.dilation.size() != 2) return imp.error(n, "strides and dilations need 2 values");
  KILN_ASSIGN_OR_RETURN(o.padding, window_pads(imp, n, imp.g.shape(l.x), kernel, o.stride, o.dilation, l.pads));
  const std::string name = l.one_d ? imp.node_name(n, "conv2d") : imp.node_name(n);
  Tensor y;
  if (Importer::has_input(n, 2)) {
    KILN_ASSIGN_OR_RETURN(Tensor b, imp.input(n, 2));
    y = imp.g.conv2d(l.x, w, b, o, name);
  } else {
    y = imp.g.conv2d(l.x, w, o, name);
  }
  return l.one_d ? finish_1d(imp, n, y) : imp.set_output(n, 0, y);
}

// ONNX's ConvTranspose is the gradient of a conv with respect to its input: kiln's conv2d_dgrad with dy = X and
// w = W ([C_in, C_out/group, kH, kW] is the weight of the conv from C_out to C_in channels), for the output size
// H_out = stride (H − 1) + output_padding + dilation (kH − 1) + 1 − pads. output_shape (or SAME padding) sets
// the pads as ONNX's rule does: the total split evenly, SAME_UPPER's odd one at the end, otherwise at the start.
Status conv_transpose(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  KILN_RETURN_IF_ERROR(require_rank4(imp, n, x, "transposed convolutions"));
  KILN_ASSIGN_OR_RETURN(Tensor w, imp.input(n, 1));
  const Shape xs = imp.g.shape(x), ws = imp.g.shape(w);
  if (ws.rank() != 4) return imp.error(n, fmt::format("weight of rank {}, expected 4", ws.rank()));
  if (ws[0] != xs[1])
    return imp.error(
        n, fmt::format("weight {} has dim 0 {}, expected the input's {} channels", ws.to_string(), ws[0], xs[1]));
  const std::vector<int64_t> kernel{ws[2], ws[3]};
  if (const auto ks = attr_ints(n, "kernel_shape"); !ks.empty() && ks != kernel)
    return imp.error(n, fmt::format("kernel_shape [{}] contradicts the weight's spatial dims [{}]", fmt::join(ks, ", "),
                                    fmt::join(kernel, ", ")));
  Conv2dOptions o;
  o.stride = attr_ints(n, "strides", {1, 1});
  o.dilation = attr_ints(n, "dilations", {1, 1});
  o.groups = attr_int(n, "group", 1);
  const std::vector<int64_t> out_pad = attr_ints(n, "output_padding", {0, 0});
  std::vector<int64_t> pads = attr_ints(n, "pads", {0, 0, 0, 0});
  KILN_RETURN_IF_ERROR(window_pads(imp, n, xs, kernel, o.stride, o.dilation, {0, 0, 0, 0}).status());
  if (out_pad.size() != 2 || pads.size() != 4) return imp.error(n, "output_padding needs 2 values and pads 4");
  const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
  std::vector<int64_t> out_shape = attr_ints(n, "output_shape");
  if (out_shape.size() == 4) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (!out_shape.empty() && out_shape.size() != 2)
    return imp.error(n, fmt::format("output_shape has {} values, expected 2 (or 4)", out_shape.size()));
  if (auto_pad == "VALID") pads = {0, 0, 0, 0};
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "NOTSET" && auto_pad != "VALID")
    return imp.error(n, fmt::format("auto_pad '{}' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER", auto_pad));
  std::vector<int64_t> size(2);
  for (size_t i = 0; i < 2; ++i) {
    const int64_t natural = o.stride[i] * (xs[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * o.dilation[i] + 1;
    if (!out_shape.empty() || same) {
      const int64_t want = !out_shape.empty() ? out_shape[i] : xs[2 + i] * o.stride[i];
      // ONNX's reference splits with Python's floor division, so a negative total (an output larger than the
      // natural one) is negative padding: at the end, rows no window reaches (zero before the bias); at the start,
      // a shift kiln does not take.
      const int64_t total = natural - want, half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[i + 2] = total - pads[i];
      if (pads[i] < 0)
        return imp.refuse(n, fmt::format("an output of {} along dim {} needs negative padding at the start ({})", want,
                                         i + 2, pads[i]));
    }
    if (out_pad[i] < 0 || out_pad[i] >= o.stride[i])
      return imp.refuse(n, fmt::format("output_padding {} at stride {} (kiln's conv2d_dgrad takes 0 to stride - 1)",
                                       out_pad[i], o.stride[i]));
    size[i] = natural - pads[i] - pads[i + 2];
    if (size[i] < 1) return imp.error(n, fmt::format("the output would be {} along dim {}", size[i], i + 2));
    if (pads[i] < 0 || pads[i + 2] < 0) {
      if (!out_shape.empty() || same) {
        pads[i + 2] = std::max<int64_t>(pads[i + 2], 0);  // the extra rows at the end (above)
      } else {
        return imp.error(n, fmt::format("pads [{}] are negative", fmt::join(pads, ", ")));
      }
    }
  }
  o.padding = pads;
  Tensor y = imp.g.conv2d_dgrad(x, w, size, o, imp.node_name(n, Importer::has_input(n, 2) ? "dgrad" : ""));
  if (Importer::has_input(n, 2)) {
    KILN_ASSIGN_OR_RETURN(Tensor b, imp.input(n, 2));
    y = imp.g.bias_add(y, b, 1, imp.node_name(n));
  }
  return imp.set_output(n, 0, y);
}

Status batch_norm(Importer& imp, const onnx::NodeProto& n) {
  KILN_RETURN_IF_ERROR(only_first_output(imp, n));
  if (attr_int(n, "training_mode", 0) != 0) return imp.refuse(n, "training_mode is not supported (inference only)");
  if (attr_int(n, "spatial", 1) != 1) return imp.refuse(n, "spatial 0 (statistics per element) is not supported");
  if (imp.opset() < 7 && attr_int(n, "is_test", 0) == 0) {
    return imp.refuse(n, "is_test 0 (training: the batch's statistics) is not supported");
  }
  Tensor in[5];
  for (int i = 0; i < 5; ++i) {
    KILN_ASSIGN_OR_RETURN(in[i], imp.input(n, i));
  }
  return imp.set_output(
      n, 0, imp.g.batch_norm(in[0], in[1], in[2], in[3], in[4], attr_float(n, "epsilon", 1e-5), imp.node_name(n)));
}

Status pool(Importer& imp, const onnx::NodeProto& n) {
  KILN_RETURN_IF_ERROR(only_first_output(imp, n));
  KILN_ASSIGN_OR_RETURN(Tensor x0, imp.input(n, 0));
  KILN_ASSIGN_OR_RETURN(Lifted l, lift_1d(imp, n, x0));
  KILN_RETURN_IF_ERROR(require_rank4(imp, n, l.x, "pools"));
  Pool2dOptions o;
  o.kernel = attr_ints(n, "kernel_shape");
  if (l.one_d && o.kernel.size() == 1) o.kernel.insert(o.kernel.begin(), 1);
  if (o.kernel.size() != 2) return imp.error(n, "kernel_shape needs 2 values");
  o.stride = l.strides;
  if (l.dilations != std::vector<int64_t>{1, 1}) return imp.refuse(n, "dilated pooling is not supported");
  if (attr_int(n, "storage_order", 0) != 0) return imp.refuse(n, "storage_order 1 is not supported");
  o.ceil_mode = attr_int(n, "ceil_mode", 0) != 0;
  KILN_ASSIGN_OR_RETURN(o.padding, window_pads(imp, n, imp.g.shape(l.x), o.kernel, o.stride, l.dilations, l.pads));
  const std::string name = l.one_d ? imp.node_name(n, "pool2d") : imp.node_name(n);
  Tensor y;
  if (n.op_type() == "MaxPool") {
    y = imp.g.max_pool2d(l.x, o, name);
  } else {
    o.count_include_pad = attr_int(n, "count_include_pad", 0) != 0;
    y = imp.g.avg_pool2d(l.x, o, name);
  }
  return l.one_d ? finish_1d(imp, n, y) : imp.set_output(n, 0, y);
}

Status global_pool(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  KILN_RETURN_IF_ERROR(require_rank4(imp, n, x, "pools"));
  if (n.op_type() == "GlobalMaxPool") return imp.set_output(n, 0, imp.g.global_max_pool(x, imp.node_name(n)));
  return imp.set_output(n, 0, imp.g.global_avg_pool(x, imp.node_name(n)));
}

// ReduceMean / ReduceMax over H and W of a 4-D tensor are global pools (what exporters write for them).
Status reduce(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  const Shape s = imp.g.shape(x);
  std::vector<int64_t> axes = attr_ints(n, "axes");
  if (Importer::has_input(n, 1)) {
    KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 1, "axes", true));
    axes = c->ints;
  }
  for (int64_t& a : axes) {
    auto v = normalize_axis(a, s.rank());
    if (!v) return imp.error(n, fmt::format("axis {} out of range for rank {}", a, s.rank()));
    a = *v;
  }
  std::sort(axes.begin(), axes.end());
  if (s.rank() != 4 || axes != std::vector<int64_t>{2, 3}) {
    return imp.refuse(n, fmt::format("only a reduction over axes [2, 3] of a 4-D tensor is supported (got axes [{}] "
                                     "of rank {})",
                                     fmt::join(axes, ", "), s.rank()));
  }
  const bool keep = attr_int(n, "keepdims", 1) != 0;
  const std::string pname = keep ? imp.node_name(n) : imp.node_name(n, "pool");
  Tensor y = n.op_type() == "ReduceMax" ? imp.g.global_max_pool(x, pname) : imp.g.global_avg_pool(x, pname);
  if (keep) return imp.set_output(n, 0, y);
  if (auto p = imp.node_problem()) return imp.refuse(n, *p);
  KILN_ASSIGN_OR_RETURN(Tensor out, reshape_following(
                                        imp, n, y,
                                        [](const std::vector<int64_t>& d) -> Result<std::vector<int64_t>> {
                                          return std::vector<int64_t>{d[0], d[1]};
                                        },
                                        imp.node_name(n)));
  return imp.set_output(n, 0, out);
}

// Gemm: alpha * op(A) @ op(B) + beta * C.
Status gemm(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor a, imp.input(n, 0));
  KILN_ASSIGN_OR_RETURN(Tensor b, imp.input(n, 1));
  if (imp.g.shape(a).rank() != 2 || imp.g.shape(b).rank() != 2) return imp.error(n, "A and B must be 2-D");
  const double alpha = attr_float(n, "alpha", 1.0), beta = attr_float(n, "beta", 1.0);
  MatmulOptions o{.transpose_a = attr_int(n, "transA", 0) != 0, .transpose_b = attr_int(n, "transB", 0) != 0};
  const bool has_c = Importer::has_input(n, 2) && beta != 0;
  const int64_t cols = imp.g.shape(b)[o.transpose_b ? 0 : 1];
  const Const* cc = has_c ? imp.constant(n.input(2)) : nullptr;
  const bool c_is_bias = has_c && alpha == 1.0 && beta == 1.0 && cc && cc->dims == std::vector<int64_t>{cols};
  if (c_is_bias) {
    KILN_ASSIGN_OR_RETURN(Tensor c, imp.input(n, 2));
    return imp.set_output(n, 0, imp.g.matmul(a, b, c, o, imp.node_name(n)));
  }
  const bool more = alpha != 1.0 || has_c;
  Tensor y = imp.g.matmul(a, b, o, more ? imp.node_name(n, "matmul") : imp.node_name(n));
  if (alpha != 1.0) y = imp.g.mul(y, alpha, has_c ? imp.node_name(n, "alpha") : imp.node_name(n));
  if (has_c) {
    KILN_ASSIGN_OR_RETURN(Tensor c, imp.input(n, 2));
    if (beta != 1.0) c = imp.g.mul(c, beta, imp.node_name(n, "beta"));
    y = imp.g.add(y, c, imp.node_name(n));
  }
  return imp.set_output(n, 0, y);
}

// MatMul with NumPy's rules: a 1-D operand gets a dim of 1 (prepended to A, appended to B), removed after.
Status matmul(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor a, imp.input(n, 0));
  KILN_ASSIGN_OR_RETURN(Tensor b, imp.input(n, 1));
  const Shape sa = imp.g.shape(a), sb = imp.g.shape(b);
  if (sa.rank() == 0 || sb.rank() == 0) return imp.error(n, "MatMul of a scalar");
  const bool a1 = sa.rank() == 1, b1 = sb.rank() == 1;
  // A 1-D operand is a matrix of one row (a) or one column (b), dropped from the result again; the reshapes
  // follow the open dims.
  using V = std::vector<int64_t>;
  if (a1) {
    KILN_ASSIGN_OR_RETURN(a, reshape_following(
                                 imp, n, a,
                                 [](const V& d) -> Result<V> {
                                   return V{1, d[0]};
                                 },
                                 imp.node_name(n, "a2d")));
  }
  if (b1) {
    KILN_ASSIGN_OR_RETURN(b, reshape_following(
                                 imp, n, b,
                                 [](const V& d) -> Result<V> {
                                   return V{d[0], 1};
                                 },
                                 imp.node_name(n, "b2d")));
  }
  if (!a1 && !b1) return imp.set_output(n, 0, imp.g.matmul(a, b, {}, imp.node_name(n)));
  Tensor y = imp.g.matmul(a, b, {}, imp.node_name(n, "matmul"));
  if (auto p = imp.node_problem()) return imp.refuse(n, *p);
  KILN_ASSIGN_OR_RETURN(Tensor out, reshape_following(
                                        imp, n, y,
                                        [&](const V& d) -> Result<V> {
                                          V dims = d;
                                          if (b1) dims.pop_back();
                                          if (a1) dims.erase(dims.end() - (b1 ? 1 : 2));
                                          return dims;
                                        },
                                        imp.node_name(n)));
  return imp.set_output(n, 0, out);
}

// Softmax and LogSoftmax. Before opset 13 the input is flattened to 2-D at `axis` (default 1) and
// normalized over the second dim: a reshape around kiln's softmax over the last dim.
Status softmax(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  const Shape s = imp.g.shape(x);
  const bool old = imp.opset() < 13;
  const bool log = n.op_type() == "LogSoftmax";
  auto axis = normalize_axis(attr_int(n, "axis", old ? 1 : -1), s.rank());
  if (!axis)
    return imp.error(n, fmt::format("axis {} out of range for rank {}", attr_int(n, "axis", old ? 1 : -1), s.rank()));
  auto finish = [&](Tensor y, bool last) -> Status {
    if (!log) return imp.set_output(n, 0, y);
    return imp.set_output(n, 0, imp.g.log(y, last ? imp.node_name(n) : imp.node_name(n, "log")));
  };
  if (!old || *axis == s.rank() - 1) {
    if (!log) return imp.set_output(n, 0, imp.g.softmax(x, *axis, imp.node_name(n)));
    return finish(imp.g.softmax(x, *axis, imp.node_name(n, "softmax")), true);
  }
  // Softmax before opset 13: over the dims from `axis` on, flattened; the reshapes follow the open dims.
  const auto at = static_cast<size_t>(*axis);
  KILN_ASSIGN_OR_RETURN(Tensor flat,
                        reshape_following(
                            imp, n, x,
                            [at](const std::vector<int64_t>& d) -> Result<std::vector<int64_t>> {
                              return std::vector<int64_t>{dims_product(d, 0, at), dims_product(d, at, d.size())};
                            },
                            imp.node_name(n, "flatten")));
  Tensor y = imp.g.softmax(flat, -1, imp.node_name(n, "softmax"));
  if (log) y = imp.g.log(y, imp.node_name(n, "log"));
  if (auto p = imp.node_problem()) return imp.refuse(n, *p);
  // Back to x's dims: x's own in every world of the open dims.
  const WorldDimsRule x_there = [&](const std::vector<int64_t>&, int w) -> Result<std::vector<int64_t>> {
    auto t = imp.g.shape_at(x, imp.world_bindings(w));
    if (!t.ok()) return t.status();
    return t->to_vector();
  };
  KILN_ASSIGN_OR_RETURN(
      Tensor out,
      reshape_following(
          imp, n, y, [&](const std::vector<int64_t>&) -> Result<std::vector<int64_t>> { return s.to_vector(); },
          imp.node_name(n), &x_there));
  return imp.set_output(n, 0, out);
}

Status layer_norm(Importer& imp, const onnx::NodeProto& n) {
  KILN_RETURN_IF_ERROR(only_first_output(imp, n));
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  const int rank = imp.g.shape(x).rank();
  auto axis = normalize_axis(attr_int(n, "axis", -1), rank);
  if (!axis) return imp.error(n, fmt::format("axis {} out of range for rank {}", attr_int(n, "axis", -1), rank));
  NormOptions o{.epsilon = attr_float(n, "epsilon", 1e-5), .normalized_ndim = rank - *axis};
  // From kiln's pattern of a written-out layer norm (onnx_patterns.cpp): the reduced axes, normalized, must be
  // exactly the trailing ones from `axis` on.
  if (const auto* listed = find_attr(n, "kiln_axes")) {
    std::vector<int64_t> axes;
    for (int64_t a : listed->ints()) {
      auto v = normalize_axis(a, rank);
      if (!v) return imp.error(n, fmt::format("axis {} out of range for rank {}", a, rank));
      axes.push_back(*v);
    }
    std::sort(axes.begin(), axes.end());
    std::vector<int64_t> trailing;
    for (int64_t k = *axis; k < rank; ++k) trailing.push_back(k);
    if (axes != trailing) {
      return imp.refuse(n, fmt::format("a layer norm over axes [{}] of a rank-{} tensor: kiln normalizes trailing axes",
                                       fmt::join(axes, ", "), rank));
    }
  }
  if (Importer::has_input(n, 1)) {  // required by ONNX; absent in kiln's own LayerNorm pattern without affine
    KILN_ASSIGN_OR_RETURN(o.scale, imp.input(n, 1));
  }
  if (Importer::has_input(n, 2)) {
    KILN_ASSIGN_OR_RETURN(o.shift, imp.input(n, 2));
  }
  return imp.set_output(n, 0, imp.g.layer_norm(x, o, imp.node_name(n)));
}

Status instance_norm(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  NormOptions o{.epsilon = attr_float(n, "epsilon", 1e-5)};
  KILN_ASSIGN_OR_RETURN(o.scale, imp.input(n, 1));
  KILN_ASSIGN_OR_RETURN(o.shift, imp.input(n, 2));
  return imp.set_output(n, 0, imp.g.instance_norm(x, o, imp.node_name(n)));
}

}  // namespace

void add_nn_handlers(HandlerTable& t) {
  t["Conv"] = conv;
  t["ConvTranspose"] = conv_transpose;
  t["BatchNormalization"] = batch_norm;
  t["MaxPool"] = pool;
  t["AveragePool"] = pool;
  t["GlobalAveragePool"] = global_pool;
  t["GlobalMaxPool"] = global_pool;
  t["ReduceMean"] = reduce;
  t["ReduceMax"] = reduce;
  t["Gemm"] = gemm;
  t["MatMul"] = matmul;
  t["Softmax"] = softmax;
  t["LogSoftmax"] = softmax;
  t["LayerNormalization"] = layer_norm;
  t["InstanceNormalization"] = instance_norm;
}

}  // namespace kiln::onnx_import
