// The convolution's two backward ops, what cuDNN calls dgrad and wgrad: shape rules and f64 references.
//   conv2d_dgrad: dx = ∂L/∂x of y = conv2d(x, w) from dy = ∂L/∂y and w, a strided, dilated, grouped transposed
//     convolution. x's spatial size is an attribute (input_size): with a stride above 1, several sizes give
//     the same output size.
//   conv2d_wgrad: dw = ∂L/∂w from x and dy, a reduction over every image and output pixel. The filter's
//     size is an attribute (filter_size).
// Both take conv2d's window attributes (stride, padding, dilation, groups) with the forward conv's values.
#include <fmt/format.h>

#include "ops/conv_window.h"
#include "ops/registry.h"

namespace kiln {

namespace {

// The sizes of one conv, from whichever of x, w, y the op has.
struct Window {
  int64_t N, C, H, W, K, R, S, P, Q, G;
  std::array<int64_t, 4> pad;
  int64_t sh, sw, dh, dw;
};

Window window_of(const RefCtx& c, int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                 int64_t P, int64_t Q) {
  const auto& st = c.attr_ints("stride");
  const auto& dl = c.attr_ints("dilation");
  return {N, C, H, W, K, R, S, P, Q, c.attr_int("groups"), pad4(c.attr_ints("padding")), st[0], st[1], dl[0], dl[1]};
}

// Calls f(dy_index, x_index, w_index) for every product of the forward conv, x, w and dy in their logical
// NCHW / KCRS order: the one loop both references run (dgrad sums into x, wgrad into w).
template <class F>
void for_each_product(const Window& v, F&& f) {
  const int64_t Kg = v.K / v.G, Cg = v.C / v.G;
  for (int64_t n = 0; n < v.N; ++n)
    for (int64_t k = 0; k < v.K; ++k) {
      const int64_t g = k / Kg;
      for (int64_t p = 0; p < v.P; ++p)
        for (int64_t q = 0; q < v.Q; ++q) {
          const size_t yi = static_cast<size_t>(((n * v.K + k) * v.P + p) * v.Q + q);
          for (int64_t r = 0; r < v.R; ++r) {
            const int64_t ih = p * v.sh - v.pad[0] + r * v.dh;
            if (ih < 0 || ih >= v.H) continue;
            for (int64_t s = 0; s < v.S; ++s) {
              const int64_t iw = q * v.sw - v.pad[1] + s * v.dw;
              if (iw < 0 || iw >= v.W) continue;
              for (int64_t c = 0; c < Cg; ++c) {
                const size_t xi = static_cast<size_t>(((n * v.C + g * Cg + c) * v.H + ih) * v.W + iw);
                const size_t wi = static_cast<size_t>(((k * Cg + c) * v.R + r) * v.S + s);
                f(yi, xi, wi);
              }
            }
          }
        }
    }
}

// The window attributes as conv2d's shape rule checks them, and `size` (input_size, filter_size): two
// positive ints.
bool expect_window(InferCtx& c, std::string_view size) {
  return c.expect_kernel_ints("stride", 1) && c.expect_kernel_ints("dilation", 1) &&
         c.expect_kernel_ints("padding", 0) && c.expect_kernel_ints(size, 1);
}

// dy's spatial size is what conv2d gives for an H x W input and an R x S filter; else a failure naming dy.
bool expect_conv_output(InferCtx& c, const Shape& dy, int64_t H, int64_t W, int64_t R, int64_t S) {
  const auto pad = pad4(c.attr_ints("padding"));
  const auto& st = c.attr_ints("stride");
  const auto& dl = c.attr_ints("dilation");
  for (const auto& [dim, in, lo, hi] : {std::tuple{"H", H, pad[0], pad[2]}, std::tuple{"W", W, pad[1], pad[3]}}) {
    int64_t padded = 0;
    if (!checked_add(in, lo, &padded) || !checked_add(padded, hi, &padded) || padded > kMaxKernelInt) {
      c.fail_attr("padding", fmt::format("the padded input's {} ({} + {} + {}) exceeds {}, the most the generated "
                                         "kernels' 32-bit int coordinates hold",
                                         dim, in, lo, hi, kMaxKernelInt));
      return false;
    }
  }
  const std::optional<int64_t> P = conv_out(H, pad[0], pad[2], R, st[0], dl[0]);
  const std::optional<int64_t> Q = conv_out(W, pad[1], pad[3], S, st[1], dl[1]);
  if (!P || !Q || *P <= 0 || *Q <= 0) {
    c.fail(fmt::format("the {}x{} kernel (dilation {}x{}) does not fit the {}x{} input with padding {}", R, S, dl[0],
                       dl[1], H, W, attr_value_to_string(c.attr_ints("padding"))));
    return false;
  }
  if (dy[2] != *P || dy[3] != *Q) {
    c.fail_input("dy", fmt::format("expected spatial size {}x{} (conv2d's output for a {}x{} input and a {}x{} "
                                   "kernel with these stride, padding and dilation), got {}",
                                   *P, *Q, H, W, R, S, dy.to_string()));
    return false;
  }
  return true;
}

bool expect_activation(InferCtx& c, std::string_view port) {
  if (is_activation_layout(c.in(port).layout)) return true;
  c.fail_input(port, fmt::format("expected layout NCHW or NHWC, got {}", layout_name(c.in(port).layout)));
  return false;
}

void infer_conv2d_dgrad(InferCtx& c) {
  if (!c.expect_rank("dy", 4, "[N, K, P, Q]") || !c.expect_rank("w", 4, "[K, C/groups, R, S]")) return;
  if (!expect_activation(c, "dy")) return;
  if (!is_weight_layout(c.in("w").layout)) {
    c.fail_input("w", fmt::format("expected layout KCRS or KRSC, got {}", layout_name(c.in("w").layout)));
    return;
  }
  if (!c.expect_same_dtype("w", "dy") || !expect_window(c, "input_size")) return;
  const Shape dy = c.in("dy").shape, w = c.in("w").shape;
  const int64_t K = dy[1], groups = c.attr_int("groups");
  if (w[0] != K) {
    c.fail_input("w", fmt::format("expected dim 0 (K) = {}, dy's channels, got {}", K, w.to_string()));
    return;
  }
  if (groups < 1 || K % groups != 0) {
    c.fail_attr("groups", fmt::format("expected a positive divisor of K = {}, got {}", K, groups));
    return;
  }
  const auto& hw = c.attr_ints("input_size");
  const Shape dx{dy[0], w[1] * groups, hw[0], hw[1]};
  if (Status st = validate_shape(dx); !st.ok()) {
    c.fail_attr("input_size", fmt::format("dx would be {}: {}", dx.to_string(), st.message()));
    return;
  }
  if (!expect_conv_output(c, dy, hw[0], hw[1], w[2], w[3])) return;
  c.set_output(dx, c.in("dy").dtype, c.in("dy").layout);
}

void ref_conv2d_dgrad(const OpDef& def, RefCtx& c) {
  const HostTensor& dy = c.in(def, "dy");
  const HostTensor& w = c.in(def, "w");
  HostTensor& dx = c.out();
  const Window v = window_of(c, dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3], w.shape[0], w.shape[2], w.shape[3],
                             dy.shape[2], dy.shape[3]);
  std::fill(dx.data.begin(), dx.data.end(), 0.0);
  for_each_product(v, [&](size_t yi, size_t xi, size_t wi) { dx.data[xi] += dy.data[yi] * w.data[wi]; });
}

void infer_conv2d_wgrad(InferCtx& c) {
  if (!c.expect_rank("x", 4, "[N, C, H, W]") || !c.expect_rank("dy", 4, "[N, K, P, Q]")) return;
  if (!expect_activation(c, "x") || !expect_activation(c, "dy")) return;
  if (!c.expect_same_dtype("dy", "x") || !expect_window(c, "filter_size")) return;
  const Shape x = c.in("x").shape, dy = c.in("dy").shape;
  if (dy[0] != x[0]) {
    c.fail_input("dy", fmt::format("expected dim 0 (N) = {}, x's batch, got {}", x[0], dy.to_string()));
    return;
  }
  const int64_t C = x[1], K = dy[1], groups = c.attr_int("groups");
  if (groups < 1 || C % groups != 0 || K % groups != 0) {
    c.fail_attr("groups", fmt::format("expected a positive divisor of C = {} and K = {}, got {}", C, K, groups));
    return;
  }
  const auto& rs = c.attr_ints("filter_size");
  const Shape dw{K, C / groups, rs[0], rs[1]};
  if (Status st = validate_shape(dw); !st.ok()) {
    c.fail_attr("filter_size", fmt::format("dw would be {}: {}", dw.to_string(), st.message()));
    return;
  }
  if (!expect_conv_output(c, dy, x[2], x[3], rs[0], rs[1])) return;
  // KCRS, the layout a weight declared without one has (the gradient of a KRSC weight is converted to it).
  c.set_output(dw, c.in("x").dtype, Layout::KCRS);
}

void ref_conv2d_wgrad(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  const HostTensor& dy = c.in(def, "dy");
  HostTensor& dw = c.out();
  const Window v = window_of(c, x.shape[0], x.shape[1], x.shape[2], x.shape[3], dw.shape[0], dw.shape[2], dw.shape[3],
                             dy.shape[2], dy.shape[3]);
  std::fill(dw.data.begin(), dw.data.end(), 0.0);
  for_each_product(v, [&](size_t yi, size_t xi, size_t wi) { dw.data[wi] += dy.data[yi] * x.data[xi]; });
}

}  // namespace

std::vector<OpDef> conv_grad_rows() {
  const auto window = [](std::string_view size) {
    std::vector<AttrSpec> a = conv_window_attrs();
    a.push_back({.name = size, .type = AttrType::ints, .sizes = {2}});
    return a;
  };
  std::vector<OpDef> rows;
  rows.push_back(OpDef{
      .id = OpId::conv2d_dgrad,
      .name = "conv2d_dgrad",
      .kind = FusionKind::anchor,
      .inputs = {{.name = "dy"}, {.name = "w", .weight4d = true, .fan_in = conv_weight_fan_in}},
      .outputs = {{.name = "y"}},
      .attrs = window("input_size"),
      .infer = infer_conv2d_dgrad,
      .ref = ref_conv2d_dgrad,
      .summary = "conv2d's gradient with respect to x (a transposed convolution), for an input of `input_size`",
      .anchors = GroupKind::dgrad,
  });
  rows.push_back(OpDef{
      .id = OpId::conv2d_wgrad,
      .name = "conv2d_wgrad",
      .kind = FusionKind::anchor,
      .inputs = {{.name = "x"}, {.name = "dy"}},
      .outputs = {{.name = "y"}},
      .attrs = window("filter_size"),
      .infer = infer_conv2d_wgrad,
      .ref = ref_conv2d_wgrad,
      .summary = "conv2d's gradient with respect to w (KCRS), for a filter of `filter_size`",
      .anchors = GroupKind::wgrad,
  });
  return rows;
}

}  // namespace kiln
