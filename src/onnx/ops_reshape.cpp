// ONNX's Reshape, Flatten, Squeeze and Unsqueeze: a constant's dims change (the shape chains exporters
// emit), a tensor becomes a kiln reshape, whose dims follow the graph's symbolic dims (reshaped_by).
#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "importer.h"

namespace kiln::onnx_import {

Result<Tensor> reshape_following(Importer& imp, const onnx::NodeProto& n, Tensor x, const DimsRule& rule,
                                 std::string name, const WorldDimsRule* world_rule) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out, rule(imp.g.shape(x).to_vector()));
  int varying = -1;
  for (int w = 1; w <= imp.worlds(); ++w) {
    const DimBindings& at = imp.world_bindings(w);
    auto in_there = imp.g.shape_at(x, at);
    if (!in_there.ok()) return imp.refuse(n, in_there.status().message());
    auto there = world_rule ? (*world_rule)(in_there->to_vector(), w) : rule(in_there->to_vector());
    if (!there.ok()) {
      return Status(there.status().code(),
                    fmt::format("{} (with the open dims at {})", there.status().message(), bindings_text(at)));
    }
    if (there->size() != out.size()) {
      return imp.refuse(n, fmt::format("its output has rank {} with the open dims at the bottom of their ranges and "
                                       "{} at {}: fix the inputs' shapes with --shape",
                                       out.size(), there->size(), bindings_text(at)));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == (*there)[i] || static_cast<int>(i) == varying) continue;
      if (varying >= 0) {
        return imp.refuse(n, fmt::format("output dims {} and {} both vary with the open dims, which a reshape "
                                         "cannot say: fix the inputs' shapes with --shape",
                                         std::min<size_t>(static_cast<size_t>(varying), i),
                                         std::max<size_t>(static_cast<size_t>(varying), i)));
      }
      varying = static_cast<int>(i);
    }
  }
  if (varying >= 0) out[static_cast<size_t>(varying)] = -1;
  return imp.g.reshape(x, std::move(out), std::move(name));
}

namespace {

// Output 0 is input 0 with new dims: a constant keeps its values, a tensor becomes a kiln reshape.
Status reshaped(Importer& imp, const onnx::NodeProto& n, std::vector<int64_t> dims) {
  if (const Const* c = imp.constant(n.input(0))) {
    Const out = *c;
    out.dims = std::move(dims);
    imp.set_const(n.output(0), std::move(out));
    return {};
  }
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  return imp.set_output(n, 0, imp.g.reshape(x, std::move(dims), imp.node_name(n)));
}

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) { return dims_product(d, from, to); }

// Output 0 is input 0 with the dims `rule` gives for its dims (a constant's dims change; a tensor is
// reshape_following's reshape).
Status reshaped_by(Importer& imp, const onnx::NodeProto& n, const DimsRule& rule,
                   const WorldDimsRule* world_rule = nullptr) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> in, dims_of(imp, n));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> out, rule(in));
  if (imp.constant(n.input(0)) || !imp.g.is_symbolic()) return reshaped(imp, n, std::move(out));
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  KILN_ASSIGN_OR_RETURN(Tensor y, reshape_following(imp, n, x, rule, imp.node_name(n), world_rule));
  return imp.set_output(n, 0, y);
}

Result<std::vector<int64_t>> reshape_dims(Importer& imp, const onnx::NodeProto& n, const std::vector<int64_t>& in,
                                          std::vector<int64_t> shape);
Result<std::vector<int64_t>> squeeze_dims(Importer& imp, const onnx::NodeProto& n, const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& axes);
Result<std::vector<int64_t>> unsqueeze_dims(Importer& imp, const onnx::NodeProto& n, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& axes);

Status reshape(Importer& imp, const onnx::NodeProto& n) {
  std::vector<int64_t> target;
  if (imp.opset() < 5) {
    target = attr_ints(n, "shape");
  } else {
    KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 1, "shape", true));
    target = c->ints;
  }
  // In each world of the open dims, the shape there (the same, unless it varies with them).
  const WorldDimsRule there = [&](const std::vector<int64_t>& in, int w) -> Result<std::vector<int64_t>> {
    if (imp.opset() < 5) return reshape_dims(imp, n, in, target);
    return reshape_dims(imp, n, in, imp.world_constant(n.input(1), w)->ints);
  };
  return reshaped_by(
      imp, n, [&](const std::vector<int64_t>& in) { return reshape_dims(imp, n, in, target); }, &there);
}

Result<std::vector<int64_t>> reshape_dims(Importer& imp, const onnx::NodeProto& n, const std::vector<int64_t>& in,
                                          std::vector<int64_t> shape) {
  const bool allow_zero = attr_int(n, "allowzero", 0) != 0;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= in.size())
        return imp.error(n, fmt::format("shape[{}] is 0 (copy) but the input has rank {}", i, in.size()));
      shape[i] = in[i];
    } else if (shape[i] == -1) {
      if (infer >= 0) return imp.error(n, "shape has more than one -1");
      infer = static_cast<int>(i);
    } else if (shape[i] <= 0) {
      return imp.refuse(n, fmt::format("shape[{}] is {}: kiln's dims are positive", i, shape[i]));
    }
  }
  const int64_t total = product(in, 0, in.size());
  if (total > kFoldLimit) return imp.refuse(n, "the input is too large");
  if (infer >= 0) {
    shape[static_cast<size_t>(infer)] = 1;
    const int64_t known = product(shape, 0, shape.size());
    if (known == 0 || total % known != 0) {
      return imp.error(n, fmt::format("cannot reshape [{}] to [{}]", fmt::join(in, ", "), fmt::join(shape, ", ")));
    }
    shape[static_cast<size_t>(infer)] = total / known;
  }
  if (!dims_bounded(shape) || product(shape, 0, shape.size()) != total) {
    return imp.error(n, fmt::format("cannot reshape [{}] to [{}]", fmt::join(in, ", "), fmt::join(shape, ", ")));
  }
  return shape;
}

Status flatten(Importer& imp, const onnx::NodeProto& n) {
  return reshaped_by(imp, n, [&](const std::vector<int64_t>& in) -> Result<std::vector<int64_t>> {
    const auto rank = static_cast<int64_t>(in.size());
    int64_t axis = attr_int(n, "axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank)
      return imp.error(n, fmt::format("axis {} out of range for rank {}", attr_int(n, "axis", 1), rank));
    return std::vector<int64_t>{product(in, 0, static_cast<size_t>(axis)),
                                product(in, static_cast<size_t>(axis), in.size())};
  });
}

// Squeeze / Unsqueeze axes: an attribute before opset 13, an optional constant input from 13.
Result<std::vector<int64_t>> axes_of(Importer& imp, const onnx::NodeProto& n) {
  if (imp.opset() < 13) return attr_ints(n, "axes");
  if (!Importer::has_input(n, 1)) return std::vector<int64_t>{};
  KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 1, "axes", true));
  return c->ints;
}

Status squeeze(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(imp, n));
  return reshaped_by(imp, n, [&](const std::vector<int64_t>& in) { return squeeze_dims(imp, n, in, axes); });
}

Result<std::vector<int64_t>> squeeze_dims(Importer& imp, const onnx::NodeProto& n, const std::vector<int64_t>& in,
                                          const std::vector<int64_t>& axes) {
  std::vector<bool> drop(in.size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
  }
  for (int64_t a : axes) {
    auto v = normalize_axis(a, static_cast<int64_t>(in.size()));
    if (!v || in[static_cast<size_t>(*v)] != 1)
      return imp.error(n, fmt::format("cannot squeeze axis {} of [{}]", a, fmt::join(in, ", ")));
    drop[static_cast<size_t>(*v)] = true;
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!drop[i]) out.push_back(in[i]);
  }
  return out;
}

Status unsqueeze(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_of(imp, n));
  return reshaped_by(imp, n, [&](const std::vector<int64_t>& in) { return unsqueeze_dims(imp, n, in, axes); });
}

Result<std::vector<int64_t>> unsqueeze_dims(Importer& imp, const onnx::NodeProto& n, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& axes) {
  const auto rank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    auto v = normalize_axis(a, rank);
    if (!v || inserted[static_cast<size_t>(*v)])
      return imp.error(n, fmt::format("invalid axis {} for output rank {}", a, rank));
    inserted[static_cast<size_t>(*v)] = true;
  }
  std::vector<int64_t> out;
  size_t k = 0;
  for (int64_t i = 0; i < rank; ++i) out.push_back(inserted[static_cast<size_t>(i)] ? 1 : in[k++]);
  return out;
}

}  // namespace

void add_reshape_handlers(HandlerTable& t) {
  t["Reshape"] = reshape;
  t["Flatten"] = flatten;
  t["Squeeze"] = squeeze;
  t["Unsqueeze"] = unsqueeze;
}

}  // namespace kiln::onnx_import
