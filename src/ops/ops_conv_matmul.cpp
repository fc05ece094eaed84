// Anchor ops: conv2d and matmul. Shape rules and f64 reference implementations.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "ops/conv_window.h"
#include "ops/registry.h"
#include "ops/vjp.h"

namespace kiln {

namespace {

void infer_conv2d(InferCtx& c) {
  if (!c.expect_rank("x", 4, "[N, C, H, W]") || !c.expect_rank("w", 4, "[K, C/groups, R, S]")) return;
  const TensorInfo& x = c.in("x");
  const TensorInfo& w = c.in("w");
  if (!is_activation_layout(x.layout)) {
    c.fail_input("x", fmt::format("expected layout NCHW or NHWC, got {}", layout_name(x.layout)));
    return;
  }
  if (!is_weight_layout(w.layout)) {
    c.fail_input("w", fmt::format("expected layout KCRS or KRSC, got {}", layout_name(w.layout)));
    return;
  }
  if (!c.expect_same_dtype("w", "x")) return;
  if (!c.expect_kernel_ints("stride", 1) || !c.expect_kernel_ints("dilation", 1) || !c.expect_kernel_ints("padding", 0))
    return;
  const int64_t groups = c.attr_int("groups");
  const int64_t C = x.shape[1], K = w.shape[0];
  if (groups < 1 || C % groups != 0 || K % groups != 0) {
    c.fail_attr("groups", fmt::format("expected a positive divisor of C = {} and K = {}, got {}", C, K, groups));
    return;
  }
  if (w.shape[1] != C / groups) {
    c.fail_input("w", fmt::format("expected dim 1 (C/groups) = {} for C = {}, groups = {}, got {}", C / groups, C,
                                  groups, w.shape.to_string()));
    return;
  }
  if (c.has("bias") && !c.expect_vector("bias", K, "one value per output channel K")) return;
  auto pad = pad4(c.attr_ints("padding"));
  const auto& st = c.attr_ints("stride");
  const auto& dl = c.attr_ints("dilation");
  // The kernels compute input coordinates p * SH - PT + r * DH in int; each lies within the padded input.
  if (!expect_padded_extent(c, "H", x.shape[2], pad[0], pad[2]) ||
      !expect_padded_extent(c, "W", x.shape[3], pad[1], pad[3]))
    return;
  const std::optional<int64_t> P = conv_out(x.shape[2], pad[0], pad[2], w.shape[2], st[0], dl[0]);
  const std::optional<int64_t> Q = conv_out(x.shape[3], pad[1], pad[3], w.shape[3], st[1], dl[1]);
  if (!P || !Q || *P <= 0 || *Q <= 0) {
    c.fail(fmt::format(
        "the {}x{} kernel (dilation {}x{}) does not fit the {}x{} input with padding {}: {}", w.shape[2], w.shape[3],
        dl[0], dl[1], x.shape[2], x.shape[3], attr_value_to_string(c.attr_ints("padding")),
        P && Q ? fmt::format("output would be {}x{}", *P, *Q) : std::string("its dilated extent is beyond int64")));
    return;
  }
  c.set_output(Shape{x.shape[0], K, *P, *Q}, x.dtype, x.layout);
}

void ref_conv2d(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  const HostTensor& w = c.in(def, "w");
  const HostTensor* bias = c.maybe(def, "bias");
  HostTensor& y = c.out();
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t K = w.shape[0], Cg = w.shape[1], R = w.shape[2], S = w.shape[3];
  const int64_t P = y.shape[2], Q = y.shape[3];
  const int64_t G = c.attr_int("groups"), Kg = K / G;
  auto pad = pad4(c.attr_ints("padding"));
  const int64_t sh = c.attr_ints("stride")[0], sw = c.attr_ints("stride")[1];
  const int64_t dh = c.attr_ints("dilation")[0], dw = c.attr_ints("dilation")[1];
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) {
      double* out = &y.data[static_cast<size_t>(((n * K + k) * P) * Q)];
      // The bias is added after the sum (not used as its start), so that conv2d with a bias gives exactly
      // what conv2d followed by bias_add gives: the planner splits one into the other.
      std::fill(out, out + P * Q, 0.0);
      const int64_t g = k / Kg;
      for (int64_t cg = 0; cg < Cg; ++cg) {
        const double* in = &x.data[static_cast<size_t>(((n * C + g * Cg + cg) * H) * W)];
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t s = 0; s < S; ++s) {
            const double wv = w.data[static_cast<size_t>(((k * Cg + cg) * R + r) * S + s)];
            // Output columns q whose input column q*sw - left + s*dw lies in [0, W).
            const int64_t off = s * dw - pad[1];
            int64_t q_lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
            int64_t q_hi = (W - 1 - off) < 0 ? -1 : std::min(Q - 1, (W - 1 - off) / sw);
            for (int64_t p = 0; p < P; ++p) {
              const int64_t ih = p * sh - pad[0] + r * dh;
              if (ih < 0 || ih >= H) continue;
              const double* row = in + ih * W + off;
              double* orow = out + p * Q;
              for (int64_t q = q_lo; q <= q_hi; ++q) orow[q] += wv * row[q * sw];
            }
          }
        }
      }
      if (bias) {
        for (int64_t i = 0; i < P * Q; ++i) out[i] += bias->data[static_cast<size_t>(k)];
      }
    }
  }
}

// matmul: a [..., M, K] (or [..., K, M] with transpose_a), b [..., K, N] (or [..., N, K]), batch dims broadcast.
void infer_matmul(InferCtx& c) {
  if (!c.expect_min_rank("a", 2) || !c.expect_min_rank("b", 2) || !c.expect_same_dtype("b", "a")) return;
  const Shape& a = c.in("a").shape;
  const Shape& b = c.in("b").shape;
  const bool ta = c.attr_bool("transpose_a"), tb = c.attr_bool("transpose_b");
  const int64_t M = ta ? a[a.rank() - 1] : a[a.rank() - 2];
  const int64_t Ka = ta ? a[a.rank() - 2] : a[a.rank() - 1];
  const int64_t Kb = tb ? b[b.rank() - 1] : b[b.rank() - 2];
  const int64_t N = tb ? b[b.rank() - 2] : b[b.rank() - 1];
  if (Ka != Kb) {
    c.fail_input("b", fmt::format("expected K = {} (from a {}{}), got {} (from b {}{})", Ka, a.to_string(),
                                  ta ? " transposed" : "", Kb, b.to_string(), tb ? " transposed" : ""));
    return;
  }
  Shape ab(std::vector<int64_t>(a.dims().begin(), a.dims().end() - 2));
  Shape bb(std::vector<int64_t>(b.dims().begin(), b.dims().end() - 2));
  auto batch = broadcast_shapes(ab, bb);
  if (!batch) {
    c.fail_input("b",
                 fmt::format("batch dims {} do not broadcast with a's batch dims {}", bb.to_string(), ab.to_string()));
    return;
  }
  if (c.has("bias") && !c.expect_vector("bias", N, "one value per output column N")) return;
  std::vector<int64_t> out = batch->to_vector();
  out.push_back(M);
  out.push_back(N);
  c.set_output(Shape(std::move(out)), c.in("a").dtype, Layout::row_major);
}

void ref_matmul(const OpDef& def, RefCtx& c) {
  const HostTensor& a = c.in(def, "a");
  const HostTensor& b = c.in(def, "b");
  const HostTensor* bias = c.maybe(def, "bias");
  HostTensor& y = c.out();
  const bool ta = c.attr_bool("transpose_a"), tb = c.attr_bool("transpose_b");
  const int ra = a.shape.rank(), rb = b.shape.rank(), ry = y.shape.rank();
  const int64_t M = y.shape[ry - 2], N = y.shape[ry - 1];
  const int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  // Element strides of the logical [M, K] and [K, N] views.
  const int64_t a_rows = a.shape[ra - 2] * a.shape[ra - 1], b_rows = b.shape[rb - 2] * b.shape[rb - 1];
  const int64_t sam = ta ? 1 : K, sak = ta ? M : 1;
  const int64_t sbk = tb ? 1 : N, sbn = tb ? K : 1;
  const int batch_rank = ry - 2;
  int64_t batches = 1;
  for (int i = 0; i < batch_rank; ++i) batches *= y.shape[i];
  std::vector<int64_t> idx(static_cast<size_t>(batch_rank), 0);
  for (int64_t bi = 0; bi < batches; ++bi) {
    // Map the output batch index to a's and b's (broadcast dims of size 1 stay at 0).
    int64_t aoff = 0, boff = 0, amul = 1, bmul = 1;
    for (int i = batch_rank - 1; i >= 0; --i) {
      int ia = ra - 2 - (batch_rank - i), ib = rb - 2 - (batch_rank - i);
      if (ia >= 0) {
        aoff += (a.shape[ia] == 1 ? 0 : idx[static_cast<size_t>(i)]) * amul;
        amul *= a.shape[ia];
      }
      if (ib >= 0) {
        boff += (b.shape[ib] == 1 ? 0 : idx[static_cast<size_t>(i)]) * bmul;
        bmul *= b.shape[ib];
      }
    }
    const double* A = &a.data[static_cast<size_t>(aoff * a_rows)];
    const double* B = &b.data[static_cast<size_t>(boff * b_rows)];
    double* Y = &y.data[static_cast<size_t>(bi * M * N)];
    for (int64_t m = 0; m < M; ++m) {
      double* yrow = Y + m * N;
      for (int64_t n = 0; n < N; ++n) yrow[n] = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double av = A[m * sam + k * sak];
        const double* brow = B + k * sbk;
        for (int64_t n = 0; n < N; ++n) yrow[n] += av * brow[n * sbn];
      }
      if (bias) {  // after the sum, as bias_add would (see conv2d)
        for (int64_t n = 0; n < N; ++n) yrow[n] += bias->data[static_cast<size_t>(n)];
      }
    }
    for (int i = batch_rank - 1; i >= 0; --i) {
      if (++idx[static_cast<size_t>(i)] < y.shape[i]) break;
      idx[static_cast<size_t>(i)] = 0;
    }
  }
}

int64_t matmul_fan_in(const Shape& b, const Attrs& attrs) {
  if (b.rank() < 2) return 1;
  return std::get<bool>(attrs.at("transpose_b")) ? b[b.rank() - 1] : b[b.rank() - 2];
}

}  // namespace

std::vector<OpDef> conv_matmul_rows() {
  std::vector<OpDef> rows;
  rows.push_back(OpDef{
      .id = OpId::conv2d,
      .name = "conv2d",
      .kind = FusionKind::anchor,
      .inputs = {{.name = "x"},
                 {.name = "w", .weight4d = true, .fan_in = conv_weight_fan_in},
                 {.name = "bias", .optional = true}},
      .outputs = {{.name = "y"}},
      .attrs = conv_window_attrs(),
      .infer = infer_conv2d,
      .ref = ref_conv2d,
      .summary = "2-D convolution (cross-correlation), grouped and depthwise, optional bias",
      .anchors = GroupKind::conv,
      .vjp = vjp::conv2d,
  });
  rows.push_back(OpDef{
      .id = OpId::matmul,
      .name = "matmul",
      .kind = FusionKind::anchor,
      .inputs = {{.name = "a"}, {.name = "b", .fan_in = matmul_fan_in}, {.name = "bias", .optional = true}},
      .outputs = {{.name = "y"}},
      .attrs = {{.name = "transpose_a", .type = AttrType::bool_, .default_value = false},
                {.name = "transpose_b", .type = AttrType::bool_, .default_value = false}},
      .infer = infer_matmul,
      .ref = ref_matmul,
      .summary = "batched matrix product with broadcast batch dims, optional transposes and bias [N]",
      .row_major_only = true,
      .anchors = GroupKind::matmul,
      .vjp = vjp::matmul,
  });
  return rows;
}

}  // namespace kiln
