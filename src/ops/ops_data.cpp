// Data movement: layout_convert, reshape, transpose, concat, slice, upsample2d, cast.
// All work on logical dims; a layout is only a memory order, so layout_convert is a copy here.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ops/registry.h"
#include "ops/vjp.h"

namespace kiln {

namespace {

void ref_copy(const OpDef& def, RefCtx& c) { c.out().data = c.in(def, "x").data; }

// ---- layout_convert ----
void infer_layout_convert(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  const Layout to = *parse_layout(c.attr_str("to"));
  if (!c.expect_rank("x", 4)) return;
  const bool same_family = (is_activation_layout(x.layout) && is_activation_layout(to)) ||
                           (is_weight_layout(x.layout) && is_weight_layout(to));
  if (!same_family) {
    c.fail_attr("to", fmt::format("cannot convert input 'x' from {} to {}: expected {}", layout_name(x.layout),
                                  layout_name(to), is_weight_layout(x.layout) ? "KCRS or KRSC" : "NCHW or NHWC"));
    return;
  }
  c.set_output(x.shape, x.dtype, to);
}

// ---- reshape ----
void infer_reshape(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  std::vector<int64_t> dims = c.attr_ints("shape");
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1 && infer_at < 0) {
      infer_at = static_cast<int>(i);
    } else if (dims[i] < 1 || !checked_mul(known, dims[i], &known)) {
      c.fail_attr("shape",
                  fmt::format("expected positive dims and at most one -1, got {}", attr_value_to_string(dims)));
      return;
    }
  }
  const int64_t n = x.shape.numel();
  if (infer_at >= 0 ? n % known != 0 : known != n) {  // [] is the scalar: one element
    c.fail_attr("shape", fmt::format("expected a shape of {} elements (input 'x' {}), got {}", n, x.shape.to_string(),
                                     attr_value_to_string(dims)));
    return;
  }
  if (infer_at >= 0) dims[static_cast<size_t>(infer_at)] = n / known;
  Shape out(std::move(dims));
  c.set_output(out, x.dtype, default_layout_for_rank(out.rank()));
}

// ---- transpose ----
void infer_transpose(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  // A scalar has no dims to permute (perm [] would be an identity, and no kernel family copies a rank-0
  // tensor): refused at validation rather than planned into a kernel no backend runs.
  if (x.shape.rank() == 0) {
    c.fail_input("x", "expected at least 1 dim (a scalar has no dims to permute), got []");
    return;
  }
  const auto& perm = c.attr_ints("perm");
  std::vector<bool> seen(static_cast<size_t>(x.shape.rank()), false);
  bool ok = static_cast<int>(perm.size()) == x.shape.rank();
  for (int64_t p : perm) {
    if (!ok || p < 0 || p >= x.shape.rank() || seen[static_cast<size_t>(p)]) {
      ok = false;
      break;
    }
    seen[static_cast<size_t>(p)] = true;
  }
  if (!ok) {
    c.fail_attr("perm", fmt::format("expected a permutation of 0..{} (input 'x' {}), got {}", x.shape.rank() - 1,
                                    x.shape.to_string(), attr_value_to_string(perm)));
    return;
  }
  std::vector<int64_t> out;
  for (int64_t p : perm) out.push_back(x.shape[static_cast<int>(p)]);
  c.set_output(Shape(std::move(out)), x.dtype, default_layout_for_rank(x.shape.rank()));
}

std::optional<StridedView> view_transpose(const Node& n, const Shape&, const Shape&, const std::vector<int64_t>& in) {
  StridedView v;
  for (int64_t p : std::get<std::vector<int64_t>>(n.attrs.at("perm"))) v.strides.push_back(in[static_cast<size_t>(p)]);
  return v;
}

std::optional<StridedView> view_same(const Node&, const Shape&, const Shape&, const std::vector<int64_t>& in) {
  return StridedView{0, in};
}

// A reshape reads its input's memory in place when each run of output dims that multiplies to a run of
// input dims finds that run contiguous in memory (every dim's stride is the next one's times its size,
// dims of size 1 aside): as torch.Tensor.view. Runs are matched from the innermost dims outwards; within a
// run the output dims get strides in row-major order over the run's innermost stride.
std::optional<StridedView> view_reshape(const Node&, const Shape& in, const Shape& out,
                                        const std::vector<int64_t>& in_strides) {
  std::vector<int64_t> strides(static_cast<size_t>(out.rank()), 0);
  if (in.numel() == 0) return StridedView{0, layout_strides(out, Layout::row_major)};
  int od = out.rank() - 1;
  int64_t base = in.rank() > 0 ? in_strides.back() : 1;  // the stride of the run's innermost element
  int64_t in_run = 1, out_run = 1;                       // elements of the run so far, input and output side
  for (int d = in.rank() - 1; d >= 0; --d) {
    in_run *= in[d];
    // The run ends below dim d unless dim d-1 continues it contiguously (or has size 1).
    const bool continues = d > 0 && (in[d - 1] == 1 || in_strides[static_cast<size_t>(d - 1)] == in_run * base);
    if (continues) continue;
    while (od >= 0 && (out_run < in_run || out[od] == 1)) {
      strides[static_cast<size_t>(od)] = out_run * base;
      out_run *= out[od];
      --od;
    }
    if (out_run != in_run) return std::nullopt;
    if (d > 0) {
      base = in_strides[static_cast<size_t>(d - 1)];
      in_run = out_run = 1;
    }
  }
  for (; od >= 0; --od) {  // leading output dims of size 1
    if (out[od] != 1) return std::nullopt;
    strides[static_cast<size_t>(od)] = out_run * base;
  }
  return StridedView{0, std::move(strides)};
}

void ref_transpose(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const auto& perm = c.attr_ints("perm");
  const auto xs = row_major_strides(x.shape);
  const int rank = y.shape.rank();
  std::vector<int64_t> src_stride(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i)
    src_stride[static_cast<size_t>(i)] = xs[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t off = 0;
  for (size_t i = 0; i < y.data.size(); ++i) {
    y.data[i] = x.data[static_cast<size_t>(off)];
    for (int d = rank - 1; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      off += src_stride[du];
      if (++idx[du] < y.shape[d]) break;
      off -= src_stride[du] * y.shape[d];
      idx[du] = 0;
    }
  }
}

// ---- concat ----
void infer_concat(InferCtx& c) {
  const int n = c.count("xs");
  const TensorInfo& x0 = c.in("xs", 0);
  if (x0.shape.rank() == 0) {  // scalars have no axis to join along
    c.fail_input("xs", fmt::format("expected tensors of at least 1 dim, xs[0] is {}", x0.shape.to_string()));
    return;
  }
  auto axis = normalize_axis(c.attr_int("axis"), x0.shape.rank());
  if (!axis) {
    c.fail_attr("axis", fmt::format("expected an axis in [{}, {}) for xs[0] {}, got {}", -x0.shape.rank(),
                                    x0.shape.rank(), x0.shape.to_string(), c.attr_int("axis")));
    return;
  }
  Shape out = x0.shape;
  for (int k = 1; k < n; ++k) {
    const TensorInfo& xk = c.in("xs", k);
    bool ok = xk.shape.rank() == x0.shape.rank();
    for (int d = 0; ok && d < x0.shape.rank(); ++d) ok = d == *axis || xk.shape[d] == x0.shape[d];
    if (!ok) {
      c.fail_input("xs", fmt::format("xs[{}] {}: expected the dims of xs[0] {} except along axis {}", k,
                                     xk.shape.to_string(), x0.shape.to_string(), *axis));
      return;
    }
    if (xk.dtype != x0.dtype) {
      c.fail_input("xs", fmt::format("xs[{}]: expected dtype {} (the dtype of xs[0]), got {}", k, dtype_name(x0.dtype),
                                     dtype_name(xk.dtype)));
      return;
    }
    if (!checked_add(out[*axis], xk.shape[*axis], &out[*axis])) {
      c.fail_input("xs", "the concatenated axis overflows");
      return;
    }
  }
  c.set_output(out, x0.dtype, propagate_layout(x0, out.rank()));
}

void ref_concat(const OpDef& def, RefCtx& c) {
  HostTensor& y = c.out();
  const int axis = *normalize_axis(c.attr_int("axis"), y.shape.rank());
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= y.shape[i];
  for (int i = axis + 1; i < y.shape.rank(); ++i) inner *= y.shape[i];
  const int port = def.input_index("xs");
  size_t o = 0;
  for (int64_t b = 0; b < outer; ++b) {
    for (const HostTensor* x : c.inputs[static_cast<size_t>(port)]) {
      const int64_t chunk = x->shape[axis] * inner;
      const double* src = &x->data[static_cast<size_t>(b * chunk)];
      std::copy(src, src + chunk, &y.data[o]);
      o += static_cast<size_t>(chunk);
    }
  }
}

}  // namespace

// ---- slice: Python semantics (negative indices count from the end, bounds clamp), positive steps ----

std::vector<SliceRange> slice_ranges(const Shape& s, const Attrs& a) {
  const auto& starts = std::get<std::vector<int64_t>>(a.at("starts"));
  const auto& ends = std::get<std::vector<int64_t>>(a.at("ends"));
  auto it = a.find("steps");
  std::vector<SliceRange> r;
  for (int d = 0; d < s.rank(); ++d) {
    const auto du = static_cast<size_t>(d);
    const int64_t n = s[d];
    const int64_t step = it == a.end() ? 1 : std::get<std::vector<int64_t>>(it->second)[du];
    auto clampi = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
    const int64_t b = clampi(starts[du]), e = clampi(ends[du]);
    // ceil((e - b) / step) without e - b + step - 1, which overflows for a step near 2^63.
    r.push_back({b, step, e > b ? (e - b - 1) / step + 1 : 0});
  }
  return r;
}

namespace {

// A slice is its input's elements from each start, every step: base Σ start·stride, strides stride·step.
std::optional<StridedView> view_slice(const Node& n, const Shape& in, const Shape&, const std::vector<int64_t>& s) {
  StridedView v;
  const std::vector<SliceRange> ranges = slice_ranges(in, n.attrs);
  for (size_t d = 0; d < ranges.size(); ++d) {
    v.base += ranges[d].start * s[d];
    v.strides.push_back(ranges[d].step * s[d]);
  }
  return v;
}

void infer_slice(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  // A scalar has no dims to slice (starts [] would keep it whole, and no kernel family copies a rank-0
  // tensor): refused at validation rather than planned into a kernel no backend runs.
  if (x.shape.rank() == 0) {
    c.fail_input("x", "expected at least 1 dim (a scalar has no dims to slice), got []");
    return;
  }
  for (std::string_view a : {"starts", "ends", "steps"}) {
    if (c.has_attr(a) && static_cast<int>(c.attr_ints(a).size()) != x.shape.rank()) {
      c.fail_attr(a, fmt::format("expected {} values (one per dim of input 'x' {}), got {}", x.shape.rank(),
                                 x.shape.to_string(), attr_value_to_string(c.attr_ints(a))));
      return;
    }
  }
  if (c.has_attr("steps")) {
    for (int64_t s : c.attr_ints("steps")) {
      if (s < 1) {
        c.fail_attr("steps",
                    fmt::format("expected positive steps, got {}", attr_value_to_string(c.attr_ints("steps"))));
        return;
      }
    }
  }
  std::vector<int64_t> out;
  for (const SliceRange& r : slice_ranges(x.shape, c.node().attrs)) out.push_back(r.size);
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 0) {
      c.fail(fmt::format("slice of input 'x' {} is empty along dim {} (starts {}, ends {})", x.shape.to_string(), d,
                         attr_value_to_string(c.attr_ints("starts")), attr_value_to_string(c.attr_ints("ends"))));
      return;
    }
  }
  c.set_output(Shape(std::move(out)), x.dtype, propagate_layout(x, x.shape.rank()));
}

void ref_slice(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const auto ranges = slice_ranges(x.shape, c.node.attrs);
  const auto xs = row_major_strides(x.shape);
  const int rank = y.shape.rank();
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < y.data.size(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) {
      const auto du = static_cast<size_t>(d);
      off += (ranges[du].start + idx[du] * ranges[du].step) * xs[du];
    }
    y.data[i] = x.data[static_cast<size_t>(off)];
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < y.shape[d]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
}

// ---- upsample2d: PyTorch's interpolate (nearest; bilinear with and without align_corners) ----
void infer_upsample2d(InferCtx& c) {
  if (!c.expect_rank("x", 4, "[N, C, H, W]")) return;
  const TensorInfo& x = c.in("x");
  const bool has_scale = c.has_attr("scale"), has_size = c.has_attr("size");
  if (has_scale == has_size) {
    c.fail(has_scale ? "give either attribute 'scale' or 'size', not both" : "needs attribute 'scale' or 'size'");
    return;
  }
  if (c.attr_bool("align_corners") && c.attr_str("mode") != "bilinear") {
    c.fail_attr("align_corners", "expected false: align_corners applies to mode \"bilinear\" only");
    return;
  }
  int64_t P, Q;
  if (has_scale) {
    const auto& s = c.attr_floats("scale");
    if (s[0] <= 0 || s[1] <= 0) {
      c.fail_attr("scale", fmt::format("expected positive factors, got {}", attr_value_to_string(s)));
      return;
    }
    const double ph = std::floor(static_cast<double>(x.shape[2]) * s[0]);
    const double qw = std::floor(static_cast<double>(x.shape[3]) * s[1]);
    // Checked in double before converting: converting a double beyond int64 is undefined (scale 1e300 was
    // refused as giving an empty output, a reason read from that).
    if (static_cast<double>(x.shape[0]) * static_cast<double>(x.shape[1]) * ph * qw >
        static_cast<double>(kMaxElements)) {
      c.fail_attr("scale", fmt::format("expected factors that give at most 2^48 output elements, got {}: an output "
                                       "of {} x {} for input 'x' {}",
                                       attr_value_to_string(s), ph, qw, x.shape.to_string()));
      return;
    }
    P = static_cast<int64_t>(ph);
    Q = static_cast<int64_t>(qw);
    if (P < 1 || Q < 1) {
      c.fail_attr("scale", fmt::format("scales {} give an empty output for input 'x' {}", attr_value_to_string(s),
                                       x.shape.to_string()));
      return;
    }
  } else {
    const auto& s = c.attr_ints("size");
    if (s[0] < 1 || s[1] < 1) {
      c.fail_attr("size", fmt::format("expected positive sizes, got {}", attr_value_to_string(s)));
      return;
    }
    P = s[0];
    Q = s[1];
  }
  c.set_output(Shape{x.shape[0], x.shape[1], P, Q}, x.dtype, x.layout);
}

// Source coordinate scale as PyTorch computes it: 1/scale when a scale was given, in/out otherwise.
double src_scale(const RefCtx& c, int dim, int64_t in, int64_t out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  if (c.has_attr("scale")) return 1.0 / c.attr_floats("scale")[static_cast<size_t>(dim)];
  return static_cast<double>(in) / static_cast<double>(out);
}

void ref_upsample2d(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  const int64_t NC = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3], P = y.shape[2], Q = y.shape[3];
  const bool bilinear = c.attr_str("mode") == "bilinear";
  const bool ac = c.attr_bool("align_corners");
  const double rh = src_scale(c, 0, H, P, ac), rw = src_scale(c, 1, W, Q, ac);
  for (int64_t nc = 0; nc < NC; ++nc) {
    const double* in = &x.data[static_cast<size_t>(nc * H * W)];
    double* out = &y.data[static_cast<size_t>(nc * P * Q)];
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t q = 0; q < Q; ++q) {
        if (!bilinear) {
          int64_t h = std::min(static_cast<int64_t>(std::floor(static_cast<double>(p) * rh)), H - 1);
          int64_t w = std::min(static_cast<int64_t>(std::floor(static_cast<double>(q) * rw)), W - 1);
          out[p * Q + q] = in[h * W + w];
          continue;
        }
        double sh = ac ? static_cast<double>(p) * rh : std::max(0.0, (static_cast<double>(p) + 0.5) * rh - 0.5);
        double sw = ac ? static_cast<double>(q) * rw : std::max(0.0, (static_cast<double>(q) + 0.5) * rw - 0.5);
        int64_t h0 = std::min(static_cast<int64_t>(sh), H - 1), w0 = std::min(static_cast<int64_t>(sw), W - 1);
        int64_t h1 = std::min(h0 + 1, H - 1), w1 = std::min(w0 + 1, W - 1);
        double lh = sh - static_cast<double>(h0), lw = sw - static_cast<double>(w0);
        out[p * Q + q] = (1 - lh) * ((1 - lw) * in[h0 * W + w0] + lw * in[h0 * W + w1]) +
                         lh * ((1 - lw) * in[h1 * W + w0] + lw * in[h1 * W + w1]);
      }
    }
  }
}

// ---- cast ----
void infer_cast(InferCtx& c) {
  const TensorInfo& x = c.in("x");
  c.set_output(x.shape, *parse_dtype(c.attr_str("to")), x.layout);
}

void ref_cast(const OpDef& def, RefCtx& c) {
  const HostTensor& x = c.in(def, "x");
  HostTensor& y = c.out();
  for (size_t i = 0; i < x.data.size(); ++i) y.data[i] = round_to_dtype(x.data[i], y.dtype);
}

OpDef row(OpId id, FusionKind kind, std::vector<PortSpec> inputs, std::vector<AttrSpec> attrs, InferFn infer, RefFn ref,
          std::string_view summary, bool row_major_only = false) {
  return OpDef{.id = id,
               .name = op_name(id),
               .kind = kind,
               .inputs = std::move(inputs),
               .outputs = {{.name = "y"}},
               .attrs = std::move(attrs),
               .infer = infer,
               .ref = ref,
               .summary = summary,
               .row_major_only = row_major_only};
}

}  // namespace

std::vector<OpDef> data_movement_rows() {
  using F = FusionKind;
  std::vector<OpDef> r;
  r.push_back(row(OpId::layout_convert, F::layout, {{.name = "x"}},
                  {{.name = "to", .type = AttrType::string, .choices = {"NCHW", "NHWC", "KCRS", "KRSC"}}},
                  infer_layout_convert, ref_copy, "same values, memory order `to` (NCHW<->NHWC, KCRS<->KRSC)"));
  r.back().view = view_same;
  r.back().store_view = true;
  r.push_back(row(OpId::reshape, F::layout, {{.name = "x"}}, {{.name = "shape", .type = AttrType::ints}}, infer_reshape,
                  ref_copy, "same values in row-major order, new dims (one may be -1)", true));
  r.back().view = view_reshape;
  r.back().store_view = true;
  r.back().vjp = vjp::reshape;
  OpDef transpose =
      row(OpId::transpose, F::layout, {{.name = "x"}}, {{.name = "perm", .type = AttrType::ints}}, infer_transpose,
          ref_transpose, "y[i_perm[0], ...] = x[i_0, ...]: output dim k is input dim perm[k]");
  transpose.view = view_transpose;
  transpose.vjp = vjp::transpose;
  transpose.store_view = true;
  r.push_back(std::move(transpose));
  r.push_back(row(OpId::concat, F::opaque, {{.name = "xs", .list = true}},
                  {{.name = "axis", .type = AttrType::int_, .default_value = int64_t{1}}}, infer_concat, ref_concat,
                  "joins xs along axis"));
  r.back().vjp = vjp::concat;
  r.push_back(row(OpId::slice, F::layout, {{.name = "x"}},
                  {{.name = "starts", .type = AttrType::ints},
                   {.name = "ends", .type = AttrType::ints},
                   {.name = "steps", .type = AttrType::ints, .optional = true}},
                  infer_slice, ref_slice, "x[starts:ends:steps] per dim, Python index rules"));
  r.back().view = view_slice;  // a load transform of a pointwise group (fusion_loads.cpp); never a store transform
  r.back().vjp = vjp::slice;
  r.push_back(row(OpId::upsample2d, F::opaque, {{.name = "x"}},
                  {{.name = "scale", .type = AttrType::floats, .optional = true, .sizes = {2}},
                   {.name = "size", .type = AttrType::ints, .optional = true, .sizes = {2}},
                   {.name = "mode",
                    .type = AttrType::string,
                    .default_value = std::string("nearest"),
                    .choices = {"nearest", "bilinear"}},
                   {.name = "align_corners", .type = AttrType::bool_, .default_value = false}},
                  infer_upsample2d, ref_upsample2d, "resize H, W as torch.nn.functional.interpolate"));
  r.push_back(row(OpId::cast, F::pointwise, {{.name = "x"}},
                  {{.name = "to", .type = AttrType::string, .choices = {"f32", "f16", "bf16"}}}, infer_cast, ref_cast,
                  "x rounded to dtype `to` (nearest even)"));
  r.back().vjp = vjp::cast;
  r.back().device_fn = "kiln::op::identity";  // the rounding is the store's (or, inside a kernel, the flag's)
  r.back().rounds_to_output_dtype = true;
  return r;
}

}  // namespace kiln
