// ONNX ops that only ever compute constants at import time: Constant, Shape, Size, Gather, Range,
// ConstantOfShape, and arithmetic on constants (the shape chains exporters emit). Identity and Dropout
// pass their input through, constant or not.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "fold.h"
#include "importer.h"

namespace kiln::onnx_import {
namespace {

using TP = onnx::TensorProto;

Const int_const(std::vector<int64_t> dims, std::vector<int64_t> values) {
  Const c;
  c.elem_type = TP::INT64;
  c.dims = std::move(dims);
  c.ints = std::move(values);
  return c;
}

Status constant(Importer& imp, const onnx::NodeProto& n) {
  if (const auto* a = find_attr(n, "value")) {
    KILN_ASSIGN_OR_RETURN(Const c, tensor_to_const(a->t(), ""));
    imp.set_const(n.output(0), std::move(c));
    return {};
  }
  if (const auto* a = find_attr(n, "value_float")) {
    Const c;
    c.floats = {a->f()};
    imp.set_const(n.output(0), std::move(c));
    return {};
  }
  if (const auto* a = find_attr(n, "value_floats")) {
    Const c;
    c.dims = {a->floats_size()};
    c.floats.assign(a->floats().begin(), a->floats().end());
    imp.set_const(n.output(0), std::move(c));
    return {};
  }
  if (const auto* a = find_attr(n, "value_int")) {
    imp.set_const(n.output(0), int_const({}, {a->i()}));
    return {};
  }
  if (const auto* a = find_attr(n, "value_ints")) {
    imp.set_const(n.output(0), int_const({a->ints_size()}, {a->ints().begin(), a->ints().end()}));
    return {};
  }
  return imp.refuse(n, "only a dense tensor, float or int value is supported (not a sparse or string one)");
}

// Identity and inference-mode Dropout: the output is the input.
Status pass_through(Importer& imp, const onnx::NodeProto& n) {
  if (n.op_type() == "Dropout") {
    if (n.output_size() > 1 && imp.used(n.output(1))) return imp.refuse(n, "the mask output is not supported");
    if (Importer::has_input(n, 2)) {
      const Const* training = imp.constant(n.input(2));
      if (!training) return imp.refuse(n, "training_mode computed at run time");
      if (training->numel() > 0 && training->at(0) != 0) return imp.refuse(n, "training_mode is true");
    }
  }
  if (const Const* c = imp.constant(n.input(0))) {
    imp.set_const(n.output(0), *c);
    return {};
  }
  KILN_ASSIGN_OR_RETURN(Tensor t, imp.input(n, 0));
  imp.set_tensor(n.output(0), t);
  return {};
}

// The dims of input 0: a constant's, or a tensor's. In a graph with open dims (symbols) a tensor's are at the
// bottom of their ranges, and in the importer's other worlds at their values (Importer::varies says how they
// are used: a value that differs between them is never taken for a constant).
Result<std::vector<int64_t>> dims_here(Importer& imp, const onnx::NodeProto& n) {
  if (const Const* c = imp.constant(n.input(0))) return c->dims;
  KILN_ASSIGN_OR_RETURN(Tensor t, imp.input(n, 0));
  if (imp.world() == 0) return imp.g.shape(t).to_vector();
  auto there = imp.g.shape_at(t, imp.world_bindings(imp.world()));
  if (!there.ok()) return imp.refuse(n, there.status().message());
  return there->to_vector();
}

Status shape(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, dims_here(imp, n));
  const auto rank = static_cast<int64_t>(dims.size());
  int64_t start = attr_int(n, "start", 0), end = attr_int(n, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> v(dims.begin() + start, dims.begin() + end);
  imp.set_const(n.output(0), int_const({static_cast<int64_t>(v.size())}, v));
  return {};
}

Status size(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, dims_here(imp, n));
  const int64_t count = dims_product(dims);
  if (count > kFoldLimit) return imp.refuse(n, "the input is too large");
  imp.set_const(n.output(0), int_const({}, {count}));
  return {};
}

Status gather(Importer& imp, const onnx::NodeProto& n) {
  const Const* data = imp.constant(n.input(0));
  if (!data) return imp.refuse(n, "gathering from a tensor computed at run time is not supported (only constants)");
  KILN_ASSIGN_OR_RETURN(const Const* idx, imp.const_input(n, 1, "indices", true));
  const auto rank = static_cast<int64_t>(data->dims.size());
  auto axis = normalize_axis(attr_int(n, "axis", 0), rank);
  if (!axis) return imp.error(n, fmt::format("axis {} out of range for rank {}", attr_int(n, "axis", 0), rank));
  Const out;
  out.elem_type = data->elem_type;
  out.dims.assign(data->dims.begin(), data->dims.begin() + *axis);
  out.dims.insert(out.dims.end(), idx->dims.begin(), idx->dims.end());
  out.dims.insert(out.dims.end(), data->dims.begin() + *axis + 1, data->dims.end());
  if (out.numel() > kFoldElements || !dims_bounded(out.dims))
    return imp.refuse(n, "the gathered constant is too large to fold");
  if (out.numel() == 0) {  // empty: no loop over the other dims
    imp.set_const(n.output(0), std::move(out));
    return {};
  }
  const int64_t outer = dims_product(data->dims, 0, static_cast<size_t>(*axis));
  const int64_t inner = dims_product(data->dims, static_cast<size_t>(*axis) + 1, data->dims.size());
  const int64_t len = data->dims[static_cast<size_t>(*axis)];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < idx->numel(); ++k) {
      int64_t j = idx->is_int() ? idx->ints[static_cast<size_t>(k)] : float_to_int(idx->floats[static_cast<size_t>(k)]);
      if (j < 0) j += len;
      if (j < 0 || j >= len) {  // an integer index printed as one (INT64_MIN is no -9.2e+18)
        const auto i = static_cast<size_t>(k);
        const std::string shown = idx->is_int() ? fmt::format("{}", idx->ints[i]) : fmt::format("{}", idx->floats[i]);
        return imp.error(n, fmt::format("index {} out of range for a dim of {}", shown, len));
      }
      for (int64_t i = 0; i < inner; ++i) {
        const auto src = static_cast<size_t>((o * len + j) * inner + i);
        if (data->is_int()) {
          out.ints.push_back(data->ints[src]);
        } else {
          out.floats.push_back(data->floats[src]);
        }
      }
    }
  }
  imp.set_const(n.output(0), std::move(out));
  return {};
}

Status constant_of_shape(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(const Const* shp, imp.const_input(n, 0, "shape", true));
  Const out;
  out.elem_type = TP::FLOAT;
  double v = 0;
  if (const auto* a = find_attr(n, "value")) {
    KILN_ASSIGN_OR_RETURN(Const c, tensor_to_const(a->t(), ""));
    if (c.numel() != 1) return imp.error(n, "value must hold one element");
    out.elem_type = c.elem_type;
    v = c.at(0);
  }
  out.dims = shp->ints;
  for (int64_t d : out.dims) {
    if (d < 0) return imp.error(n, fmt::format("shape [{}] has a negative dim", fmt::join(out.dims, ", ")));
  }
  if (!dims_bounded(out.dims)) return imp.refuse(n, "the constant is too large to fold");
  const int64_t count = out.numel();
  if (count < 0 || count > kFoldElements) return imp.refuse(n, "the constant is too large to fold");
  if (out.is_int()) {
    out.ints.assign(static_cast<size_t>(count), float_to_int(v));
  } else {
    out.floats.assign(static_cast<size_t>(count), v);
  }
  imp.set_const(n.output(0), std::move(out));
  return {};
}

Status range(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(const Const* start, imp.const_input(n, 0, "start"));
  KILN_ASSIGN_OR_RETURN(const Const* limit, imp.const_input(n, 1, "limit"));
  KILN_ASSIGN_OR_RETURN(const Const* delta, imp.const_input(n, 2, "delta"));
  if (start->numel() != 1 || limit->numel() != 1 || delta->numel() != 1)
    return imp.error(n, "start, limit and delta must be scalars");
  const double s = start->at(0), l = limit->at(0), d = delta->at(0);
  if (d == 0) return imp.error(n, "delta is 0");
  const double steps = std::max(0.0, std::ceil((l - s) / d));
  if (!(steps <= static_cast<double>(kFoldElements)))
    return imp.refuse(n, "the range is too large to fold");  // NaN too
  const auto count = static_cast<int64_t>(steps);
  Const out;
  out.elem_type = start->elem_type;
  out.dims = {count};
  for (int64_t i = 0; i < count; ++i) {
    if (out.is_int()) {
      const int64_t s0 = start->is_int() ? start->ints[0] : float_to_int(s);
      const int64_t d0 = delta->is_int() ? delta->ints[0] : float_to_int(d);
      auto step = checked_int('*', i, d0);
      auto v = step ? checked_int('+', s0, *step) : std::nullopt;
      if (!v) return imp.error(n, "the range overflows int64");
      out.ints.push_back(*v);
    } else {
      out.floats.push_back(s + static_cast<double>(i) * d);
    }
  }
  imp.set_const(n.output(0), std::move(out));
  return {};
}

}  // namespace

std::optional<std::vector<int64_t>> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Result<Const> fold_binary(std::string_view op, const Const& a, const Const& b) {
  auto dims = broadcast_dims(a.dims, b.dims);
  if (!dims) return invalid_argument("the constants' shapes do not broadcast");
  Const out;
  out.elem_type = a.elem_type;
  out.dims = *dims;
  const int64_t count = out.numel();
  if (count > kFoldElements) return unsupported("the constant is too large to fold");
  const auto rank = out.dims.size();
  // Index of an output element in an operand broadcast to the output's dims.
  auto source = [&](const Const& c, int64_t flat) {
    int64_t idx = 0, stride = 1;
    for (size_t k = rank; k-- > 0;) {
      const int64_t d = out.dims[k];
      const int64_t coord = flat % d;
      flat /= d;
      const size_t ck = k + c.dims.size();
      if (ck >= rank) {
        const int64_t cd = c.dims[ck - rank];
        idx += (cd == 1 ? 0 : coord) * stride;
        stride *= cd;
      }
    }
    return static_cast<size_t>(idx);
  };
  const bool known = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Max" || op == "Min" ||
                     (op == "Pow" && !out.is_int());
  if (!known)
    return unsupported(fmt::format("{} of {} constants is not folded", op, out.is_int() ? "integer" : "float"));
  const char sym = op == "Add" ? '+' : op == "Sub" ? '-' : op == "Mul" ? '*' : '/';
  for (int64_t i = 0; i < count; ++i) {
    const size_t ia = source(a, i), ib = source(b, i);
    if (out.is_int()) {
      const int64_t x = a.is_int() ? a.ints[ia] : float_to_int(a.floats[ia]);
      const int64_t y = b.is_int() ? b.ints[ib] : float_to_int(b.floats[ib]);
      const std::optional<int64_t> r = op == "Max"   ? std::max(x, y)
                                       : op == "Min" ? std::min(x, y)
                                                     : checked_int(sym, x, y);
      if (!r) return invalid_argument(fmt::format("{} of integer constants overflows (or divides by zero)", op));
      out.ints.push_back(*r);
    } else {
      const double x = a.at(ia), y = b.at(ib);
      const double nan = std::numeric_limits<double>::quiet_NaN();  // Max and Min propagate NaN (fmax drops it)
      double r = op == "Max"   ? (std::isnan(x) || std::isnan(y) ? nan : std::max(x, y))
                 : op == "Min" ? (std::isnan(x) || std::isnan(y) ? nan : std::min(x, y))
                 : op == "Pow" ? std::pow(x, y)
                 : sym == '+'  ? x + y
                 : sym == '-'  ? x - y
                 : sym == '*'  ? x * y
                               : x / y;
      out.floats.push_back(r);
    }
  }
  normalize_to_type(out);
  return out;
}

void add_fold_handlers(HandlerTable& t) {
  t["Constant"] = constant;
  t["Identity"] = pass_through;
  t["Dropout"] = pass_through;
  t["Shape"] = shape;
  t["Size"] = size;
  t["Gather"] = gather;
  t["ConstantOfShape"] = constant_of_shape;
  t["Range"] = range;
}

}  // namespace kiln::onnx_import
