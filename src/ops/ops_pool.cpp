// Pooling: max_pool2d, avg_pool2d (PyTorch's output size, padding and divisor rules), global pools.
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "ops/registry.h"
#include "ops/vjp.h"

namespace kiln {

namespace {

// PyTorch's pooling_output_shape: with ceil_mode the last window must start inside the input or the
// leading padding. nullopt on an int64 overflow, which infer_pool2d's bounds (every attribute at most
// kMaxKernelInt, `in` at most kMaxElements) rule out; checked all the same.
std::optional<int64_t> pool_out(int64_t in, int64_t k, int64_t s, int64_t pad_lo, int64_t pad_hi, bool ceil_mode) {
  int64_t num = 0, last = 0, start = 0;
  if (!checked_add(in, pad_lo, &num) || !checked_add(num, pad_hi, &num) || !checked_sub(num, k, &num) ||
      (ceil_mode && !checked_add(num, s - 1, &num)))
    return std::nullopt;
  int64_t out = num / s - (num % s < 0 ? 1 : 0) + 1;
  if (ceil_mode) {
    if (!checked_mul(out - 1, s, &last) || !checked_add(in, pad_lo, &start)) return std::nullopt;
    if (last >= start) --out;
  }
  return out;
}

// The kernel computes each window's rows (columns) p * SH - PT to p * SH - PT + KH in int (templates/kiln/pool.cuh).
// Without ceil_mode every window ends inside the padded input; with it the last may end past it.
bool expect_window_ends(InferCtx& c, std::string_view dim, int64_t out, int64_t k, int64_t s, int64_t pad_lo) {
  int64_t end = 0;
  if (checked_mul(out - 1, s, &end) && checked_sub(end, pad_lo, &end) && checked_add(end, k, &end) &&
      end <= kMaxKernelInt)
    return true;
  c.fail_attr("stride", fmt::format("the last window along {} ends at {} ((output - 1) * stride - padding + kernel), "
                                    "which exceeds {}, the most the generated kernels' 32-bit int coordinates hold",
                                    dim, end, kMaxKernelInt));
  return false;
}

// The average's divisor, the window clipped to the padded input (count_include_pad) or to the input, is an int
// in the kernel, which computes the padded count either way (pool.cuh's `padded`): a larger one overflowed there
// (NaN), and beyond int64 on ref (inf), where the answer is about 0.
bool expect_divisor_fits(InferCtx& c, const PoolWindow& w, const Shape& x) {
  const int64_t eh = std::min(w.kh, x[2] + w.pt + w.pb), ew = std::min(w.kw, x[3] + w.pl + w.pr);
  int64_t most = 0;
  if (checked_mul(eh, ew, &most) && most <= kMaxKernelInt) return true;
  c.fail_attr("kernel", fmt::format("the {}x{} window averages up to {} elements (clipped to the padded input): "
                                    "expected at most {}, the generated kernels' divisor being a 32-bit int",
                                    w.kh, w.kw, most, kMaxKernelInt));
  return false;
}

// The pooled shape of input x under the node's window attributes (the forward's and its gradients'), or nullopt
// with the failure recorded.
std::optional<Shape> pooled_shape(InferCtx& c) {
  if (!c.expect_rank("x", 4, "[N, C, H, W]")) return std::nullopt;
  const TensorInfo& x = c.in("x");
  if (!is_activation_layout(x.layout)) {
    c.fail_input("x", fmt::format("expected layout NCHW or NHWC, got {}", layout_name(x.layout)));
    return std::nullopt;
  }
  for (std::string_view a : {"kernel", "stride"}) {
    if (c.has_attr(a) && !c.expect_kernel_ints(a, 1)) return std::nullopt;
  }
  PoolWindow w = pool_window(c.node().attrs);
  const int64_t pads[4] = {w.pt, w.pl, w.pb, w.pr};
  const int64_t kdim[4] = {w.kh, w.kw, w.kh, w.kw};
  for (int i = 0; i < 4; ++i) {
    if (pads[i] < 0 || pads[i] > kdim[i] / 2) {
      c.fail_attr("padding", fmt::format("expected values between 0 and half the kernel ({}), got {}",
                                         attr_value_to_string(c.attr_ints("kernel")),
                                         attr_value_to_string(c.attr_ints("padding"))));
      return std::nullopt;
    }
  }
  if (!expect_padded_extent(c, "H", x.shape[2], w.pt, w.pb) || !expect_padded_extent(c, "W", x.shape[3], w.pl, w.pr))
    return std::nullopt;
  const bool ceil_mode = c.attr_bool("ceil_mode");
  const std::optional<int64_t> P = pool_out(x.shape[2], w.kh, w.sh, w.pt, w.pb, ceil_mode);
  const std::optional<int64_t> Q = pool_out(x.shape[3], w.kw, w.sw, w.pl, w.pr, ceil_mode);
  if (!P || !Q) {
    c.fail("the output size overflows int64");
    return std::nullopt;
  }
  if (*P < 1 || *Q < 1) {
    c.fail(fmt::format("the {}x{} window does not fit the {}x{} input: output would be {}x{}", w.kh, w.kw, x.shape[2],
                       x.shape[3], *P, *Q));
    return std::nullopt;
  }
  if (!expect_window_ends(c, "H", *P, w.kh, w.sh, w.pt) || !expect_window_ends(c, "W", *Q, w.kw, w.sw, w.pl))
    return std::nullopt;
  const bool avg = c.def().id == OpId::avg_pool2d || c.def().id == OpId::avg_pool2d_grad;
  if (avg && !expect_divisor_fits(c, w, x.shape)) return std::nullopt;
  return Shape{x.shape[0], x.shape[1], *P, *Q};
}

void infer_pool2d(InferCtx& c) {
  if (const std::optional<Shape> y = pooled_shape(c)) c.set_output(*y, c.in("x").dtype, c.in("x").layout);
}

// max_pool2d_grad / avg_pool2d_grad: dx of x's shape from dy of the pooled shape.
void infer_pool2d_grad(InferCtx& c) {
  const std::optional<Shape> y = pooled_shape(c);
  if (!y || !c.expect_rank("dy", 4, "[N, C, P, Q]") || !c.expect_same_dtype("dy", "x")) return;
  if (c.in("dy").shape != *y) {
    c.fail_input("dy", fmt::format("expected {} (the pooled shape of input 'x' {}), got {}", y->to_string(),
                                   c.in("x").shape.to_string(), c.in("dy").shape.to_string()));
    return;
  }
  c.set_output(c.in("x").shape, c.in("x").dtype, c.in("x").layout);
}

// Window (p, q) of an H x W input clipped to it, [h0, h1) x [w0, w1), and the average's divisor: the window
// clipped to the padded input (count_include_pad) or to the input (PyTorch's rule).
struct Clipped {
  int64_t h0, h1, w0, w1, divisor;
};
Clipped clip(const PoolWindow& w, int64_t p, int64_t q, int64_t H, int64_t W, bool include_pad) {
  int64_t h0 = p * w.sh - w.pt, w0 = q * w.sw - w.pl;
  int64_t h1 = std::min(h0 + w.kh, H + w.pb), w1 = std::min(w0 + w.kw, W + w.pr);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H), w1 = std::min(w1, W);
  return {h0, h1, w0, w1, include_pad ? padded : (h1 - h0) * (w1 - w0)};
}

void ref_pool2d(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const PoolWindow w = pool_window(c.node.attrs);
  const bool is_max = def.id == OpId::max_pool2d;
  const bool include_pad = !is_max && c.attr_bool("count_include_pad");
  const int64_t NC = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3], P = y.shape[2], Q = y.shape[3];
  for (int64_t nc = 0; nc < NC; ++nc) {
    const double* in = &x.data[static_cast<size_t>(nc * H * W)];
    double* out = &y.data[static_cast<size_t>(nc * P * Q)];
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t q = 0; q < Q; ++q) {
        const auto [h0, h1, w0, w1, divisor] = clip(w, p, q, H, W, include_pad);
        double acc = is_max ? -INFINITY : 0.0;
        for (int64_t ih = h0; ih < h1; ++ih) {
          for (int64_t iw = w0; iw < w1; ++iw) {
            const double v = in[ih * W + iw];
            acc = is_max ? (std::isnan(v) || v > acc ? v : acc) : acc + v;
          }
        }
        if (!is_max) acc /= static_cast<double>(divisor);
        out[p * Q + q] = acc;
      }
    }
  }
}

// dx = Σ over windows of dy: each window's max (the first in scan order; a NaN, the last NaN: the forward's
// rule, PyTorch's index) gets its dy; an average spreads dy / divisor over the window.
void ref_pool2d_grad(const OpDef& def, RefCtx& c) {
  const HostTensor& dy = c.in(def, "dy");
  const HostTensor& x = c.in(def, "x");
  HostTensor& dx = c.out();
  const PoolWindow w = pool_window(c.node.attrs);
  const bool is_max = def.id == OpId::max_pool2d_grad;
  const bool include_pad = !is_max && c.attr_bool("count_include_pad");
  const int64_t NC = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3], P = dy.shape[2], Q = dy.shape[3];
  std::fill(dx.data.begin(), dx.data.end(), 0.0);
  for (int64_t nc = 0; nc < NC; ++nc) {
    const double* in = &x.data[static_cast<size_t>(nc * H * W)];
    const double* g = &dy.data[static_cast<size_t>(nc * P * Q)];
    double* out = &dx.data[static_cast<size_t>(nc * H * W)];
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t q = 0; q < Q; ++q) {
        const auto [h0, h1, w0, w1, divisor] = clip(w, p, q, H, W, include_pad);
        const double d = g[p * Q + q];
        if (is_max) {
          int64_t arg = h0 * W + w0;
          double acc = -INFINITY;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw)
              if (std::isnan(in[ih * W + iw]) || in[ih * W + iw] > acc) acc = in[ih * W + iw], arg = ih * W + iw;
          out[arg] += d;
        } else {
          const double share = d / static_cast<double>(divisor);
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) out[ih * W + iw] += share;
        }
      }
    }
  }
}

void infer_global_pool(InferCtx& c) {
  if (!c.expect_rank("x", 4, "[N, C, H, W]")) return;
  const TensorInfo& x = c.in("x");
  c.set_output(Shape{x.shape[0], x.shape[1], 1, 1}, x.dtype, propagate_layout(x, 4));
}

// A channel reduction (OpDef::channel_reduction) of [N, C, H, W]: per image [N, C, 1, 1] in x's dtype (a
// mean stays in range), over every image [terms, C] in f32 (sums of N·H·W values, and of their squares,
// overflow and lose too much in 16 bits).
void infer_channel_reduction(InferCtx& c) {
  if (!c.expect_rank("x", 4, "[N, C, H, W]")) return;
  const TensorInfo& x = c.in("x");
  const ChannelReduction& red = *c.def().channel_reduction;
  if (red.per_image) {
    c.set_output(Shape{x.shape[0], x.shape[1], 1, 1}, x.dtype, propagate_layout(x, 4));
  } else {
    c.set_output(Shape{static_cast<int64_t>(red.terms.size()), x.shape[1]}, DType::f32, Layout::row_major);
  }
}

void ref_global_pool(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const bool is_max = def.id == OpId::global_max_pool;
  const int64_t NC = x.shape[0] * x.shape[1], HW = x.shape[2] * x.shape[3];
  for (int64_t nc = 0; nc < NC; ++nc) {
    const double* in = &x.data[static_cast<size_t>(nc * HW)];
    double acc = is_max ? -INFINITY : 0.0;
    for (int64_t i = 0; i < HW; ++i) acc = is_max ? (std::isnan(in[i]) || in[i] > acc ? in[i] : acc) : acc + in[i];
    y.data[static_cast<size_t>(nc)] = is_max ? acc : acc / static_cast<double>(HW);
  }
}

// Batch-norm statistics: per channel, the sum and the sum of squares over N, H, W (output rows 0 and 1).
void ref_channel_stats(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const int64_t N = x.shape[0], C = x.shape[1], HW = x.shape[2] * x.shape[3];
  for (int64_t ch = 0; ch < C; ++ch) {
    double sum = 0.0, squares = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const double* in = &x.data[static_cast<size_t>((n * C + ch) * HW)];
      for (int64_t i = 0; i < HW; ++i) sum += in[i], squares += in[i] * in[i];
    }
    y.data[static_cast<size_t>(ch)] = sum;
    y.data[static_cast<size_t>(C + ch)] = squares;
  }
}

// ---- reduce_sum, reduce_mean over any axes ----
// The reduced axes (normalized, ascending; every axis when `axes` is empty), or nullopt after reporting.
std::optional<std::vector<int>> reduced_axes(InferCtx& c, int rank) {
  std::vector<int> axes;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : c.attr_ints("axes")) {
    if (a < -rank || a >= rank) {
      c.fail_attr("axes", fmt::format("axis {} is outside the {} dims of input 'x' (expected -{} to {})", a, rank, rank,
                                      rank - 1));
      return std::nullopt;
    }
    const int ax = static_cast<int>(a < 0 ? a + rank : a);
    if (seen[static_cast<size_t>(ax)]) {
      c.fail_attr("axes", fmt::format("axis {} is named twice", ax));
      return std::nullopt;
    }
    seen[static_cast<size_t>(ax)] = true;
  }
  for (int d = 0; d < rank; ++d)
    if (seen[static_cast<size_t>(d)] || c.attr_ints("axes").empty()) axes.push_back(d);
  return axes;
}

void infer_reduce(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  const auto axes = reduced_axes(c, x.shape.rank());
  if (!axes) return;
  const bool keep = c.attr_bool("keepdims");
  std::vector<int64_t> out;
  for (int d = 0; d < x.shape.rank(); ++d) {
    const bool reduced = std::find(axes->begin(), axes->end(), d) != axes->end();
    if (!reduced) out.push_back(x.shape[d]);
    if (reduced && keep) out.push_back(1);
  }
  const Shape shape(std::move(out));
  // A 4-D result of a 4-D input keeps its layout (as a layout pass that ran the op on NHWC data would).
  const Layout layout = shape.rank() == 4 && x.shape.rank() == 4 ? x.layout : default_layout_for_rank(shape.rank());
  c.set_output(shape, x.dtype, layout);
}

void ref_reduce(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const int rank = x.shape.rank();
  const std::vector<bool> reduced = reduced_dims(c.node, rank);
  std::vector<double> sum(y.data.size(), 0.0);
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (size_t e = 0; e < x.data.size(); ++e) {
    int64_t o = 0;  // the output's row-major index: the kept dims' coordinates
    for (int d = 0; d < rank; ++d)
      if (!reduced[static_cast<size_t>(d)]) o = o * x.shape[d] + idx[static_cast<size_t>(d)];
    sum[static_cast<size_t>(o)] += x.data[e];
    for (int d = rank - 1; d >= 0 && ++idx[static_cast<size_t>(d)] == x.shape[d]; --d) idx[static_cast<size_t>(d)] = 0;
  }
  const double count = static_cast<double>(x.data.size()) / static_cast<double>(std::max<size_t>(y.data.size(), 1));
  for (size_t o = 0; o < y.data.size(); ++o) y.data[o] = def.id == OpId::reduce_mean ? sum[o] / count : sum[o];
}

std::vector<AttrSpec> pool_attrs(bool avg) {
  std::vector<AttrSpec> a{
      {.name = "kernel", .type = AttrType::ints, .sizes = {2}},
      {.name = "stride", .type = AttrType::ints, .optional = true, .sizes = {2}},
      {.name = "padding", .type = AttrType::ints, .default_value = std::vector<int64_t>{0, 0}, .sizes = {2, 4}},
      {.name = "ceil_mode", .type = AttrType::bool_, .default_value = false},
  };
  if (avg) a.push_back({.name = "count_include_pad", .type = AttrType::bool_, .default_value = true});
  return a;
}

OpDef pool_row(OpId id, FusionKind kind, InferFn infer, RefFn ref, std::vector<AttrSpec> attrs,
               std::string_view summary) {
  return OpDef{.id = id,
               .name = op_name(id),
               .kind = kind,
               .inputs = {{.name = "x"}},
               .outputs = {{.name = "y"}},
               .attrs = std::move(attrs),
               .infer = infer,
               .ref = ref,
               .summary = summary,
               .anchors = GroupKind::pool};
}

}  // namespace

PoolWindow pool_window(const Attrs& a) {
  const auto& k = std::get<std::vector<int64_t>>(a.at("kernel"));
  auto it = a.find("stride");
  const auto& s = it != a.end() ? std::get<std::vector<int64_t>>(it->second) : k;
  const auto& p = std::get<std::vector<int64_t>>(a.at("padding"));
  if (p.size() == 2) return {k[0], k[1], s[0], s[1], p[0], p[1], p[0], p[1]};
  return {k[0], k[1], s[0], s[1], p[0], p[1], p[2], p[3]};
}

std::vector<bool> reduced_dims(const Node& n, int rank) {
  const auto& axes = std::get<std::vector<int64_t>>(n.attrs.at("axes"));
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  return reduced;
}

std::vector<OpDef> pool_rows() {
  std::vector<OpDef> r;
  r.push_back(pool_row(OpId::max_pool2d, FusionKind::window, infer_pool2d, ref_pool2d, pool_attrs(false),
                       "max over each window; padding never wins"));
  r.back().vjp = vjp::pool2d;
  r.push_back(pool_row(OpId::avg_pool2d, FusionKind::window, infer_pool2d, ref_pool2d, pool_attrs(true),
                       "mean over each window; divisor as PyTorch (count_include_pad, ceil_mode)"));
  r.back().vjp = vjp::pool2d;
  for (const OpId id : {OpId::max_pool2d_grad, OpId::avg_pool2d_grad}) {
    const bool avg = id == OpId::avg_pool2d_grad;
    r.push_back(OpDef{.id = id,
                      .name = op_name(id),
                      .kind = FusionKind::opaque,
                      .inputs = {{.name = "dy"}, {.name = "x"}},
                      .outputs = {{.name = "y"}},
                      .attrs = pool_attrs(avg),
                      .infer = infer_pool2d_grad,
                      .ref = ref_pool2d_grad,
                      .summary = avg ? "avg_pool2d's gradient: dy / divisor spread over each window (x: the "
                                       "forward's input, for its shape)"
                                     : "max_pool2d's gradient: dy to each window's max (the first; a NaN wins) "
                                       "of the forward's input x"});
  }
  r.push_back(pool_row(OpId::global_avg_pool, FusionKind::reduction, infer_channel_reduction, ref_global_pool, {},
                       "mean over H, W: [N, C, H, W] -> [N, C, 1, 1]"));
  r.back().channel_reduction = ChannelReduction{.per_image = true, .terms = {"v"}, .finish = "sum / count"};
  r.back().vjp = vjp::global_avg_pool;
  r.push_back(pool_row(OpId::global_max_pool, FusionKind::reduction, infer_global_pool, ref_global_pool, {},
                       "max over H, W: [N, C, H, W] -> [N, C, 1, 1]"));
  r.push_back(pool_row(OpId::channel_stats, FusionKind::reduction, infer_channel_reduction, ref_channel_stats, {},
                       "per-channel sum and sum of squares over N, H, W: [N, C, H, W] -> [2, C] f32 "
                       "(batch-norm statistics)"));
  r.back().channel_reduction = ChannelReduction{.per_image = false, .terms = {"v", "v * v"}, .finish = "sum"};
  r.back().vjp = vjp::channel_stats;
  const std::vector<AttrSpec> reduce_attrs{
      {.name = "axes", .type = AttrType::ints, .default_value = std::vector<int64_t>{}},
      {.name = "keepdims", .type = AttrType::bool_, .default_value = false}};
  r.push_back(pool_row(OpId::reduce_sum, FusionKind::reduction, infer_reduce, ref_reduce, reduce_attrs,
                       "sum over `axes` (every axis when empty); `keepdims` keeps them as 1s"));
  r.back().axis_reduction = ChannelReduction{.per_image = false, .terms = {"v"}, .finish = "sum"};
  r.back().vjp = vjp::reduce_sum;
  r.push_back(pool_row(OpId::reduce_mean, FusionKind::reduction, infer_reduce, ref_reduce, reduce_attrs,
                       "mean over `axes` (every axis when empty); `keepdims` keeps them as 1s"));
  r.back().axis_reduction = ChannelReduction{.per_image = false, .terms = {"v"}, .finish = "sum / count"};
  r.back().vjp = vjp::reduce_mean;
  return r;
}

}  // namespace kiln
