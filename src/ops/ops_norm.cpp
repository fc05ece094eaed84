// Normalizations and softmax: layer_norm, group_norm, instance_norm, rms_norm, softmax.
// The reference computes mean and (biased) variance in f64 by two passes, as PyTorch defines them.
#include <cmath>

#include <fmt/format.h>

#include "ops/registry.h"
#include "ops/vjp.h"

namespace kiln {

namespace {

bool check_epsilon(InferCtx& c) {
  if (c.attr_float("epsilon") >= 0) return true;
  c.fail_attr("epsilon", fmt::format("expected a non-negative number, got {}", c.attr_float("epsilon")));
  return false;
}

// Optional affine parameters must have shape `expect`.
bool check_affine(InferCtx& c, const Shape& expect, std::string_view what) {
  for (std::string_view p : {"scale", "shift"}) {
    if (c.has(p) && c.in(p).shape != expect) {
      c.fail_input(p,
                   fmt::format("expected shape {} ({}), got {}", expect.to_string(), what, c.in(p).shape.to_string()));
      return false;
    }
  }
  return true;
}

// layer_norm and rms_norm normalize over the trailing `normalized_ndim` dims.
void infer_trailing_norm(InferCtx& c) {
  if (!c.expect_min_rank("x", 1)) return;  // a scalar has no trailing dims to normalize
  const TensorInfo& x = c.in("x");
  const int64_t nd = c.attr_int("normalized_ndim");
  if (nd < 1 || nd > x.shape.rank()) {
    c.fail_attr("normalized_ndim", fmt::format("expected 1 to {} (the rank of input 'x' {}), got {}", x.shape.rank(),
                                               x.shape.to_string(), nd));
    return;
  }
  Shape trailing(std::vector<int64_t>(x.shape.dims().end() - nd, x.shape.dims().end()));
  if (!check_epsilon(c) || !check_affine(c, trailing, "the normalized trailing dims of x")) return;
  c.set_output(x.shape, x.dtype, x.layout);
}

// Normalizes each of `rows` contiguous rows of `cols` values; parameters index by position in the row
// (`param_of(col)`) or by row (`param_of` given the row): see callers.
void ref_trailing_norm(const OpDef& def, RefCtx& c, bool rms) {
  const HostTensor& x = c.in(def, "x");
  const HostTensor* scale = c.maybe(def, "scale");
  const HostTensor* shift = c.maybe(def, "shift");
  HostTensor& y = c.out();
  const int64_t nd = c.attr_int("normalized_ndim");
  int64_t cols = 1;
  for (int i = x.shape.rank() - static_cast<int>(nd); i < x.shape.rank(); ++i) cols *= x.shape[i];
  const int64_t rows = x.numel() / cols;
  const double eps = c.attr_float("epsilon");
  for (int64_t r = 0; r < rows; ++r) {
    const double* in = &x.data[static_cast<size_t>(r * cols)];
    double* out = &y.data[static_cast<size_t>(r * cols)];
    double mean = 0, var = 0;
    if (rms) {
      for (int64_t i = 0; i < cols; ++i) var += in[i] * in[i];
      var /= static_cast<double>(cols);
    } else {
      for (int64_t i = 0; i < cols; ++i) mean += in[i];
      mean /= static_cast<double>(cols);
      for (int64_t i = 0; i < cols; ++i) var += (in[i] - mean) * (in[i] - mean);
      var /= static_cast<double>(cols);
    }
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < cols; ++i) {
      double v = (in[i] - mean) * inv;
      if (scale) v *= scale->data[static_cast<size_t>(i)];
      if (shift) v += shift->data[static_cast<size_t>(i)];
      out[i] = v;
    }
  }
}

void ref_layer_norm(const OpDef& def, RefCtx& c) { ref_trailing_norm(def, c, false); }
void ref_rms_norm(const OpDef& def, RefCtx& c) { ref_trailing_norm(def, c, true); }

// group_norm and instance_norm: x [N, C, ...], statistics per (n, group of channels) over channels x spatial.
void infer_channel_group_norm(InferCtx& c) {
  if (!c.expect_min_rank("x", 2)) return;
  const TensorInfo& x = c.in("x");
  const int64_t C = x.shape[1];
  if (c.def().id == OpId::group_norm) {
    const int64_t g = c.attr_int("groups");
    if (g < 1 || C % g != 0) {
      c.fail_attr("groups", fmt::format("expected a positive divisor of C = {} (input 'x' {}), got {}", C,
                                        x.shape.to_string(), g));
      return;
    }
  }
  if (!check_epsilon(c) || !check_affine(c, Shape{C}, "one value per channel C")) return;
  c.set_output(x.shape, x.dtype, x.layout);
}

void ref_channel_group_norm(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  const HostTensor* scale = c.maybe(def, "scale");
  const HostTensor* shift = c.maybe(def, "shift");
  HostTensor& y = c.out();
  const int64_t N = x.shape[0], C = x.shape[1];
  const int64_t G = def.id == OpId::group_norm ? c.attr_int("groups") : C;
  const int64_t spatial = x.numel() / (N * C), Cg = C / G, count = Cg * spatial;
  const double eps = c.attr_float("epsilon");
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      const int64_t base = (n * C + g * Cg) * spatial;  // a group's channels are contiguous in NCHW order
      const double* in = &x.data[static_cast<size_t>(base)];
      double mean = 0, var = 0;
      for (int64_t i = 0; i < count; ++i) mean += in[i];
      mean /= static_cast<double>(count);
      for (int64_t i = 0; i < count; ++i) var += (in[i] - mean) * (in[i] - mean);
      var /= static_cast<double>(count);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t i = 0; i < count; ++i) {
        const auto ch = static_cast<size_t>(g * Cg + i / spatial);
        double v = (in[i] - mean) * inv;
        if (scale) v *= scale->data[ch];
        if (shift) v += shift->data[ch];
        y.data[static_cast<size_t>(base + i)] = v;
      }
    }
  }
}

void infer_softmax(InferCtx& c) {
  if (!c.expect_min_rank("x", 1)) return;  // a scalar has no axis
  const TensorInfo& x = c.in("x");
  if (!normalize_axis(c.attr_int("axis"), x.shape.rank())) {
    c.fail_attr("axis", fmt::format("expected an axis in [{}, {}) for input 'x' {}, got {}", -x.shape.rank(),
                                    x.shape.rank(), x.shape.to_string(), c.attr_int("axis")));
    return;
  }
  c.set_output(x.shape, x.dtype, x.layout);
}

void ref_softmax(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const int axis = *normalize_axis(c.attr_int("axis"), x.shape.rank());
  int64_t inner = 1, outer = 1;
  for (int i = axis + 1; i < x.shape.rank(); ++i) inner *= x.shape[i];
  for (int i = 0; i < axis; ++i) outer *= x.shape[i];
  const int64_t L = x.shape[axis];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < inner; ++k) {
      auto at = [&](int64_t l) { return static_cast<size_t>((o * L + l) * inner + k); };
      double mx = -INFINITY;
      for (int64_t l = 0; l < L; ++l) mx = std::max(mx, x.data[at(l)]);
      double sum = 0;
      for (int64_t l = 0; l < L; ++l) sum += std::exp(x.data[at(l)] - mx);
      for (int64_t l = 0; l < L; ++l) y.data[at(l)] = std::exp(x.data[at(l)] - mx) / sum;
    }
  }
}

OpDef norm_row(OpId id, InferFn infer, RefFn ref, std::vector<AttrSpec> extra, std::string_view summary) {
  // The kernels hold epsilon as a constexpr float (EPS): it must be an f32.
  std::vector<AttrSpec> attrs{{.name = "epsilon", .type = AttrType::float_, .default_value = 1e-5, .f32 = true}};
  for (AttrSpec& a : extra) attrs.push_back(std::move(a));
  return OpDef{.id = id,
               .name = op_name(id),
               .kind = FusionKind::reduction,
               .inputs = {{.name = "x"}, {.name = "scale", .optional = true}, {.name = "shift", .optional = true}},
               .outputs = {{.name = "y"}},
               .attrs = std::move(attrs),
               .infer = infer,
               .ref = ref,
               .summary = summary,
               .anchors = GroupKind::norm};
}

}  // namespace

std::vector<OpDef> norm_rows() {
  std::vector<OpDef> r;
  AttrSpec ndim{.name = "normalized_ndim", .type = AttrType::int_, .default_value = int64_t{1}};
  // Norms over trailing dims read rows of the row-major order: the layout pass gives them row-major 4-D
  // inputs (a [N, H, W, C] view of NHWC data is one already; NHWC would make each row a strided walk).
  r.push_back(norm_row(OpId::layer_norm, infer_trailing_norm, ref_layer_norm, {ndim},
                       "(x - mean) / sqrt(var + eps) * scale + shift over the trailing normalized_ndim dims"));
  r.back().row_major_only = true;
  r.back().vjp = vjp::layer_norm;
  r.push_back(norm_row(OpId::group_norm, infer_channel_group_norm, ref_channel_group_norm,
                       {{.name = "groups", .type = AttrType::int_}},
                       "(x - mean) / sqrt(var + eps) * scale[c] + shift[c], statistics per (n, group)"));
  r.back().vjp = vjp::group_norm;
  r.push_back(norm_row(OpId::instance_norm, infer_channel_group_norm, ref_channel_group_norm, {},
                       "(x - mean) / sqrt(var + eps) * scale[c] + shift[c], statistics per (n, c)"));
  r.back().vjp = vjp::group_norm;
  r.push_back(norm_row(OpId::rms_norm, infer_trailing_norm, ref_rms_norm, {ndim},
                       "x / sqrt(mean(x^2) + eps) * scale + shift over the trailing normalized_ndim dims"));
  r.back().row_major_only = true;
  r.back().vjp = vjp::rms_norm;
  r.push_back(OpDef{.id = OpId::softmax,
                    .name = "softmax",
                    .kind = FusionKind::reduction,
                    .inputs = {{.name = "x"}},
                    .outputs = {{.name = "y"}},
                    .attrs = {{.name = "axis", .type = AttrType::int_, .default_value = int64_t{-1}}},
                    .infer = infer_softmax,
                    .ref = ref_softmax,
                    .summary = "exp(x - max) / sum(exp(x - max)) along axis",
                    .anchors = GroupKind::norm,
                    .vjp = vjp::softmax});
  return r;
}

}  // namespace kiln
