// ONNX's data-movement ops: Transpose, Concat, Slice, Split, Pad and Cast (Reshape, Flatten, Squeeze,
// Unsqueeze: ops_reshape.cpp; (Resize and Upsample: ops_resize.cpp). Each folds when its data input is a constant (the
// shape chains exporters emit) and otherwise becomes the kiln op.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "importer.h"

namespace kiln::onnx_import {

// The dims of input 0, constant or tensor.
Result<std::vector<int64_t>> dims_of(Importer& imp, const onnx::NodeProto& n) {
  if (const Const* c = imp.constant(n.input(0))) return c->dims;
  KILN_ASSIGN_OR_RETURN(Tensor t, imp.input(n, 0));
  return imp.g.shape(t).to_vector();
}

namespace {

using TP = onnx::TensorProto;

// Element strides of row-major dims.
std::vector<int64_t> strides_of(const std::vector<int64_t>& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

// out[idx] = c[map(idx)] for every output index, row-major; `source` gives the input flat index.
template <class F>
Result<Const> gather_const(const Const& c, std::vector<int64_t> dims, F source) {
  Const out;
  out.elem_type = c.elem_type;
  out.dims = dims;
  const int64_t count = out.numel();
  if (count > kFoldElements) return unsupported("the constant is too large to fold");
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    const auto s = static_cast<size_t>(source(idx));
    if (c.is_int()) {
      out.ints.push_back(c.ints[s]);
    } else {
      out.floats.push_back(c.floats[s]);
    }
    for (size_t k = dims.size(); k-- > 0;) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

Status transpose(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> in, dims_of(imp, n));
  std::vector<int64_t> perm = attr_ints(n, "perm");
  if (perm.empty()) {
    for (size_t i = in.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  if (perm.size() != in.size())
    return imp.error(n, fmt::format("perm has {} values for rank {}", perm.size(), in.size()));
  std::vector<bool> seen(in.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(in.size()) || seen[static_cast<size_t>(p)]) {
      return imp.error(n,
                       fmt::format("perm [{}] is not a permutation of the {} dims", fmt::join(perm, ", "), in.size()));
    }
    seen[static_cast<size_t>(p)] = true;
  }
  if (const Const* c = imp.constant(n.input(0))) {
    std::vector<int64_t> dims;
    for (int64_t p : perm) {
      dims.push_back(in[static_cast<size_t>(p)]);
    }
    const auto st = strides_of(in);
    auto folded = gather_const(*c, dims, [&](const std::vector<int64_t>& idx) {
      int64_t s = 0;
      for (size_t k = 0; k < idx.size(); ++k) s += idx[k] * st[static_cast<size_t>(perm[k])];
      return s;
    });
    if (!folded.ok()) return imp.refuse(n, folded.status().message());
    imp.set_const(n.output(0), std::move(folded).value());
    return {};
  }
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  return imp.set_output(n, 0, imp.g.transpose(x, perm, imp.node_name(n)));
}

Status concat(Importer& imp, const onnx::NodeProto& n) {
  bool all_const = true;
  for (int i = 0; i < n.input_size(); ++i) all_const = all_const && imp.constant(n.input(i));
  const int64_t axis_attr = attr_int(n, "axis", 1);
  if (all_const && n.input_size() > 0) {
    const Const* first = imp.constant(n.input(0));
    const auto rank = static_cast<int64_t>(first->dims.size());
    auto axis = normalize_axis(axis_attr, rank);
    if (!axis) return imp.error(n, fmt::format("axis {} out of range for rank {}", axis_attr, rank));
    Const out = *first;
    out.ints.clear();
    out.floats.clear();
    const size_t ax = static_cast<size_t>(*axis);
    out.dims[ax] = 0;
    for (int i = 0; i < n.input_size(); ++i) {
      const Const* c = imp.constant(n.input(i));
      if (c->dims.size() != first->dims.size()) return imp.error(n, "inputs of different ranks");
      for (size_t d = 0; d < c->dims.size(); ++d) {
        if (d != ax && c->dims[d] != first->dims[d]) return imp.error(n, "inputs differ in a dim other than the axis");
      }
      out.dims[ax] += c->dims[ax];
    }
    if (out.numel() > kFoldElements) return imp.refuse(n, "the constant is too large to fold");
    if (out.numel() == 0) {  // empty: no loop over the other dims, which may be large
      imp.set_const(n.output(0), std::move(out));
      return {};
    }
    const int64_t outer = dims_product(first->dims, 0, ax);
    for (int64_t o = 0; o < outer; ++o) {
      for (int i = 0; i < n.input_size(); ++i) {
        const Const* c = imp.constant(n.input(i));
        const int64_t chunk = dims_product(c->dims, ax, c->dims.size());
        for (int64_t k = 0; k < chunk; ++k) {
          const auto s = static_cast<size_t>(o * chunk + k);
          if (out.is_int()) {
            out.ints.push_back(c->is_int() ? c->ints[s] : float_to_int(c->floats[s]));
          } else {
            out.floats.push_back(c->at(s));
          }
        }
      }
    }
    imp.set_const(n.output(0), std::move(out));
    return {};
  }
  std::vector<Tensor> xs;
  for (int i = 0; i < n.input_size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, imp.input(n, i));
    xs.push_back(t);
  }
  const int rank = xs.empty() ? 0 : imp.g.shape(xs[0]).rank();
  auto axis = normalize_axis(axis_attr, rank);
  if (!axis) return imp.error(n, fmt::format("axis {} out of range for rank {}", axis_attr, rank));
  if (xs.size() == 1) return imp.set_output(n, 0, imp.g.identity(xs[0], imp.node_name(n)));
  return imp.set_output(n, 0, imp.g.concat(xs, *axis, imp.node_name(n)));
}

// Per dim of a slice: the first index, the step and the count.
struct SliceRanges {
  std::vector<int64_t> first, step, count;
  bool whole(size_t k, int64_t dim) const { return first[k] == 0 && step[k] == 1 && count[k] == dim; }
};

using RangesAt = std::function<Result<SliceRanges>(const std::vector<int64_t>& dims)>;

// A kiln slice of `x` taking `r` of its dims (its dims with the open dims at the bottom of their ranges), and
// what `ranges_at` gives for its dims in each other world of the open dims (Importer::worlds). A dim that every
// world takes whole follows the open dims (written as ends past any size: kiln's slice clamps, as Python's
// does); one the worlds take differently would be right at one binding only: refused.
Result<Tensor> slice_following(Importer& imp, const onnx::NodeProto& n, Tensor x, const SliceRanges& r,
                               const RangesAt& ranges_at, std::string name) {
  const Shape bottom = imp.g.shape(x);
  std::vector<int64_t> ends(r.first.size());
  for (size_t k = 0; k < ends.size(); ++k) ends[k] = r.first[k] + (r.count[k] - 1) * r.step[k] + 1;
  for (int w = 1; w <= imp.worlds(); ++w) {
    auto dims = imp.g.shape_at(x, imp.world_bindings(w));
    if (!dims.ok()) return imp.refuse(n, dims.status().message());
    auto there = ranges_at(dims->to_vector());
    if (!there.ok()) {
      return imp.refuse(n, fmt::format("with the open dims at {}: {}", bindings_text(imp.world_bindings(w)),
                                       there.status().message()));
    }
    for (size_t k = 0; k < ends.size(); ++k) {
      if (there->first[k] == r.first[k] && there->step[k] == r.step[k] && there->count[k] == r.count[k]) continue;
      const auto d = static_cast<int>(k);
      if (!r.whole(k, bottom[d]) || !there->whole(k, (*dims)[d])) {
        return imp.refuse(n, fmt::format("it takes part of dim {}, whose size varies with the model's open dims "
                                         "({}): fix the inputs' shapes with --shape",
                                         k, imp.open_dims()));
      }
      ends[k] = std::numeric_limits<int32_t>::max();
    }
  }
  return imp.g.slice(x, r.first, std::move(ends), r.step, std::move(name));
}

Status slice(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> in, dims_of(imp, n));
  const auto rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (imp.opset() < 10) {
    starts = attr_ints(n, "starts");
    ends = attr_ints(n, "ends");
    axes = attr_ints(n, "axes");
  } else {
    KILN_ASSIGN_OR_RETURN(const Const* s, imp.const_input(n, 1, "starts", true));
    KILN_ASSIGN_OR_RETURN(const Const* e, imp.const_input(n, 2, "ends", true));
    starts = s->ints;
    ends = e->ints;
    if (Importer::has_input(n, 3)) {
      KILN_ASSIGN_OR_RETURN(const Const* a, imp.const_input(n, 3, "axes", true));
      axes = a->ints;
    }
    if (Importer::has_input(n, 4)) {
      KILN_ASSIGN_OR_RETURN(const Const* st, imp.const_input(n, 4, "steps", true));
      steps = st->ints;
    }
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return imp.error(n, "starts, ends, axes and steps differ in length");
  }
  // Per dim: first index, step, count (ONNX's clamping rules), for the dims `in`.
  auto ranges_of = [&](const std::vector<int64_t>& in) -> Result<SliceRanges> {
    std::vector<int64_t> first(in.size(), 0), step(in.size(), 1), count(in);
    std::vector<bool> sliced(in.size(), false);  // ONNX: "Behavior is undefined if an axis is repeated"
    for (size_t k = 0; k < axes.size(); ++k) {
      auto a = normalize_axis(axes[k], rank);
      if (!a) return imp.error(n, fmt::format("axis {} out of range for rank {}", axes[k], rank));
      if (sliced[static_cast<size_t>(*a)]) {
        return imp.error(n, fmt::format("axes [{}] name dim {} twice", fmt::join(axes, ", "), *a));
      }
      sliced[static_cast<size_t>(*a)] = true;
      const int64_t d = in[static_cast<size_t>(*a)], s = steps[k];
      if (s == 0) return imp.error(n, "a step is 0");
      int64_t b = starts[k], e = ends[k];
      if (b < 0) b += d;
      if (e < 0 && e > std::numeric_limits<int64_t>::min() / 2) e += d;
      if (s > 0) {
        b = std::clamp<int64_t>(b, 0, d);
        e = std::clamp<int64_t>(e, 0, d);
      } else {
        b = std::clamp<int64_t>(b, 0, d - 1);
        e = std::clamp<int64_t>(e, -1, d - 1);
      }
      if (s == std::numeric_limits<int64_t>::min()) return imp.error(n, "a step is INT64_MIN");
      if (d == 0) {  // nothing to slice (and no valid index to clamp to)
        count[static_cast<size_t>(*a)] = 0;
        continue;
      }
      const int64_t len = s > 0 ? (e > b ? (e - b - 1) / s + 1 : 0) : (b > e ? (b - e - 1) / -s + 1 : 0);
      first[static_cast<size_t>(*a)] = b;
      step[static_cast<size_t>(*a)] = s;
      count[static_cast<size_t>(*a)] = len;
    }
    return SliceRanges{first, step, count};
  };
  KILN_ASSIGN_OR_RETURN(const SliceRanges r, ranges_of(in));
  const std::vector<int64_t>&first = r.first, &step = r.step, &count = r.count;
  if (const Const* c = imp.constant(n.input(0))) {  // may be empty: constants may have zero dims
    const auto st = strides_of(in);
    auto folded = gather_const(*c, count, [&](const std::vector<int64_t>& idx) {
      int64_t s = 0;
      for (size_t k = 0; k < idx.size(); ++k) s += (first[k] + idx[k] * step[k]) * st[k];
      return s;
    });
    if (!folded.ok()) return imp.refuse(n, folded.status().message());
    imp.set_const(n.output(0), std::move(folded).value());
    return {};
  }
  for (size_t k = 0; k < in.size(); ++k) {
    if (count[k] == 0) return imp.refuse(n, "the slice is empty: kiln's tensors have no zero dims");
    if (step[k] < 0) return imp.refuse(n, "a negative step (kiln's slice steps are positive)");
  }
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  KILN_ASSIGN_OR_RETURN(Tensor y, slice_following(imp, n, x, r, ranges_of, imp.node_name(n)));
  return imp.set_output(n, 0, y);
}

// Split: one slice per output along `axis`; sizes from `split` (an attribute before opset 13, an optional
// constant input from 13) or equal parts.
Status split(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> in, dims_of(imp, n));
  auto axis = normalize_axis(attr_int(n, "axis", 0), static_cast<int64_t>(in.size()));
  if (!axis) return imp.error(n, fmt::format("axis {} out of range for rank {}", attr_int(n, "axis", 0), in.size()));
  const auto ax = static_cast<size_t>(*axis);
  std::vector<int64_t> sizes = imp.opset() < 13 ? attr_ints(n, "split") : std::vector<int64_t>{};
  if (imp.opset() >= 13 && Importer::has_input(n, 1)) {
    KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 1, "split", true));
    sizes = c->ints;
  }
  const int outs = n.output_size();
  const bool equal_parts = sizes.empty();
  if (sizes.empty()) {
    if (outs == 0 || in[ax] % outs != 0)
      return imp.error(n, fmt::format("dim {} does not split into {} equal parts", in[ax], outs));
    sizes.assign(static_cast<size_t>(outs), in[ax] / outs);
  }
  int64_t total = 0;
  for (int64_t v : sizes) {
    auto sum = v > 0 ? checked_int('+', total, v) : std::nullopt;
    if (!sum) return imp.error(n, fmt::format("split sizes [{}] are not positive", fmt::join(sizes, ", ")));
    total = *sum;
  }
  if (total != in[ax]) {
    return imp.error(
        n, fmt::format("split sizes [{}] add up to {}, not the dim's {}", fmt::join(sizes, ", "), total, in[ax]));
  }
  if (static_cast<int>(sizes.size()) != outs)
    return imp.error(n, fmt::format("{} split sizes for {} outputs", sizes.size(), outs));
  int64_t start = 0;
  for (int k = 0; k < outs; ++k) {
    onnx::NodeProto part;
    part.set_op_type("Slice");
    part.add_input(n.input(0));
    part.add_output(n.output(k));
    std::vector<int64_t> first(in.size(), 0), ends(in), steps(in.size(), 1);
    first[ax] = start;
    ends[ax] = start + sizes[static_cast<size_t>(k)];
    start = ends[ax];
    if (ends[ax] > in[ax] || sizes[static_cast<size_t>(k)] <= 0)
      return imp.refuse(n, "split sizes do not fit the dim (or one is 0)");
    if (n.output(k).empty()) continue;
    if (const Const* c = imp.constant(n.input(0))) {
      std::vector<int64_t> dims = in;
      dims[ax] = sizes[static_cast<size_t>(k)];
      const auto st = strides_of(in);
      auto folded = gather_const(*c, dims, [&](const std::vector<int64_t>& idx) {
        int64_t s = 0;
        for (size_t d = 0; d < idx.size(); ++d) s += (first[d] + idx[d]) * st[d];
        return s;
      });
      if (!folded.ok()) return imp.refuse(n, folded.status().message());
      imp.set_const(n.output(k), std::move(folded).value());
      continue;
    }
    KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
    SliceRanges r{first, steps, in};
    r.count[ax] = sizes[static_cast<size_t>(k)];
    // In another world of the open dims: the other dims whole, the axis split the same way (equal parts of the
    // dim there, or the sizes given).
    const RangesAt there = [&](const std::vector<int64_t>& dims) -> Result<SliceRanges> {
      SliceRanges t{first, steps, dims};
      const int64_t part_size = equal_parts ? dims[ax] / outs : sizes[static_cast<size_t>(k)];
      t.first[ax] = equal_parts ? part_size * k : first[ax];
      t.count[ax] = part_size;
      return t;
    };
    KILN_ASSIGN_OR_RETURN(Tensor y, slice_following(imp, n, x, r, there, imp.node_name(part)));
    KILN_RETURN_IF_ERROR(imp.set_output(part, 0, y));
  }
  return {};
}

// Pad: kiln has no pad op; a constant Pad that pads nothing (exporters emit these before pools) passes through.
Status pad(Importer& imp, const onnx::NodeProto& n) {
  std::vector<int64_t> pads;
  std::string mode = attr_string(n, "mode", "constant");
  if (imp.opset() < 11) {
    pads = attr_ints(n, imp.opset() < 2 ? "paddings" : "pads");
  } else {
    KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 1, "pads", true));
    pads = c->ints;
  }
  for (int64_t p : pads) {
    if (p != 0)
      return imp.refuse(n, fmt::format("padding by [{}] ({} mode): kiln has no pad op (only a Pad of zeros is "
                                       "imported)",
                                       fmt::join(pads, ", "), mode));
  }
  if (const Const* c = imp.constant(n.input(0))) {
    imp.set_const(n.output(0), *c);
    return {};
  }
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  imp.set_tensor(n.output(0), x);
  return {};
}

Status cast(Importer& imp, const onnx::NodeProto& n) {
  const auto to = static_cast<int32_t>(attr_int(n, "to", TP::FLOAT));
  if (const Const* c = imp.constant(n.input(0))) {
    Const out = *c;
    out.elem_type = to;
    if (!Const::is_float_type(to) && !c->is_int()) {  // float -> integer: truncation; -> bool: nonzero
      out.ints.clear();
      for (double v : c->floats) out.ints.push_back(to == TP::BOOL ? (v != 0 || std::isnan(v)) : float_to_int(v));
      out.floats.clear();
    } else if (Const::is_float_type(to) && c->is_int()) {
      out.floats.assign(c->ints.begin(), c->ints.end());
      out.ints.clear();
    }
    normalize_to_type(out);
    imp.set_const(n.output(0), std::move(out));
    return {};
  }
  auto dtype = elem_dtype(to);
  if (!dtype)
    return imp.refuse(n, fmt::format("cast to {}: kiln's tensors are float, float16 or bfloat16", elem_type_name(to)));
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  if (imp.g.dtype(x) == *dtype) return imp.set_output(n, 0, imp.g.identity(x, imp.node_name(n)));
  return imp.set_output(n, 0, imp.g.cast(x, *dtype, imp.node_name(n)));
}

}  // namespace

void add_data_handlers(HandlerTable& t) {
  t["Transpose"] = transpose;
  t["Concat"] = concat;
  t["Slice"] = slice;
  t["Cast"] = cast;
  t["Split"] = split;
  t["Pad"] = pad;
}

}  // namespace kiln::onnx_import
