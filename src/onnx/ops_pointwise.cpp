// ONNX pointwise ops as kiln's: activations, unary math, broadcasting binary math, Clip.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "fold.h"
#include "importer.h"
#include "ops/registry.h"

namespace kiln::onnx_import {
namespace {

// ONNX op type -> kiln unary op of the same formula.
// A unary op of a constant, folded (the shape arithmetic of exported graphs: Neg of an int64 size, ...);
// false when `kiln_op` is not one folded here.
bool fold_unary(std::string_view kiln_op, Const& c) {
  auto f = [&](auto op) {
    for (double& v : c.floats) v = op(v);
  };
  for (int64_t v : c.ints) {
    if (v == std::numeric_limits<int64_t>::min() && (kiln_op == "neg" || kiln_op == "abs")) return false;
  }
  if (kiln_op == "neg") {
    for (int64_t& v : c.ints) v = -v;
    for (double& v : c.floats) v = -v;
  } else if (kiln_op == "abs") {
    for (int64_t& v : c.ints) v = v < 0 ? -v : v;
    for (double& v : c.floats) v = std::abs(v);
  } else if (!c.is_int() && kiln_op == "sqrt") {
    f([](double v) { return std::sqrt(v); });
  } else if (!c.is_int() && kiln_op == "reciprocal") {
    f([](double v) { return 1.0 / v; });
  } else {
    return false;
  }
  normalize_to_type(c);
  return true;
}

Handler unary(std::string kiln_op) {
  return [kiln_op](Importer& imp, const onnx::NodeProto& n) -> Status {
    if (const Const* c = imp.constant(n.input(0))) {
      Const folded = *c;
      if (fold_unary(kiln_op, folded)) {
        imp.set_const(n.output(0), std::move(folded));
        return {};
      }
    }
    KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
    return imp.set_output(n, 0, imp.g.unary(kiln_op, x, {}, imp.node_name(n)));
  };
}

Status leaky_relu(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  return imp.set_output(n, 0, imp.g.leaky_relu(x, attr_float(n, "alpha", 0.01), imp.node_name(n)));
}

Status elu(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  return imp.set_output(n, 0, imp.g.elu(x, attr_float(n, "alpha", 1.0), imp.node_name(n)));
}

// Selu: gamma * elu(x, alpha).
Status selu(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  const double alpha = attr_float(n, "alpha", 1.67326319217681884765625);
  const double gamma = attr_float(n, "gamma", 1.05070102214813232421875);
  Tensor e = imp.g.elu(x, alpha, imp.node_name(n, "elu"));
  return imp.set_output(n, 0, imp.g.mul(e, gamma, imp.node_name(n)));
}

// HardSigmoid: max(0, min(1, alpha x + beta)); kiln's hardsigmoid is alpha 1/6, beta 1/2 (PyTorch's).
Status hard_sigmoid(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  const double alpha = attr_float(n, "alpha", 0.2), beta = attr_float(n, "beta", 0.5);
  if (std::abs(alpha - 1.0 / 6.0) < 1e-7 && beta == 0.5) {
    return imp.set_output(n, 0, imp.g.hardsigmoid(x, imp.node_name(n)));
  }
  Tensor s = imp.g.mul(x, alpha, imp.node_name(n, "scale"));
  Tensor b = imp.g.add(s, beta, imp.node_name(n, "shift"));
  return imp.set_output(n, 0, imp.g.clamp(b, 0.0, 1.0, imp.node_name(n)));
}

Status softplus(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  // ONNX's Softplus has no threshold: log(1 + e^x) differs from x by under e^-40 past kiln's cut at 40.
  return imp.set_output(n, 0, imp.g.softplus(x, 1.0, 40.0, imp.node_name(n)));
}

// PRelu: x >= 0 ? x : slope * x == relu(x) + slope * min(x, 0), slope broadcast.
Status prelu(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  KILN_ASSIGN_OR_RETURN(Tensor slope, imp.input(n, 1));
  // Before opset 7 a 1-D slope is per channel (dim 1), not NumPy-aligned with the last dim.
  const Shape xs = imp.g.shape(x), ss = imp.g.shape(slope);
  if (imp.opset() < 7 && ss.rank() == 1 && xs.rank() > 2 && ss[0] == xs[1]) {
    std::vector<int64_t> dims(static_cast<size_t>(xs.rank() - 1), 1);
    dims[0] = ss[0];
    slope = imp.g.reshape(slope, dims, imp.node_name(n, "per_channel"));
  }
  Tensor pos = imp.g.relu(x, imp.node_name(n, "relu"));
  Tensor neg = imp.g.minimum(x, 0.0, imp.node_name(n, "min"));
  Tensor scaled = imp.g.mul(neg, slope, imp.node_name(n, "slope"));
  return imp.set_output(n, 0, imp.g.add(pos, scaled, imp.node_name(n)));
}

std::string_view kiln_binary(std::string_view onnx_op) {
  if (onnx_op == "Add" || onnx_op == "Sum" || onnx_op == "Mean") return "add";
  if (onnx_op == "Sub") return "sub";
  if (onnx_op == "Mul") return "mul";
  if (onnx_op == "Div") return "div";
  if (onnx_op == "Pow") return "pow";
  if (onnx_op == "Max") return "maximum";
  return "minimum";
}

// One binary step of `n` on operands named `a` and `b`, folded when both are constants. A one-element
// constant no higher in rank than the other side becomes the op's number attribute.
Status binary_step(Importer& imp, const onnx::NodeProto& n, const std::string& a, const std::string& b,
                   const std::string& out, bool last) {
  const Const* ca = imp.constant(a);
  const Const* cb = imp.constant(b);
  const std::string op = n.op_type() == "Sum" || n.op_type() == "Mean" ? "Add" : n.op_type();
  if (ca && cb) {
    auto folded = fold_binary(op, *ca, *cb);
    if (!folded.ok()) {
      return folded.status().code() == StatusCode::unsupported ? imp.refuse(n, folded.status().message())
                                                               : imp.error(n, folded.status().message());
    }
    imp.set_const(out, std::move(folded).value());
    return {};
  }
  onnx::NodeProto step;
  step.set_op_type(n.op_type());
  step.add_input(a);
  step.add_input(b);
  step.add_output(out);
  const std::string name = last ? imp.node_name(n) : imp.node_name(n, "step");
  auto scalar_fits = [&](const Const* c, const std::string& other) {
    if (!c || c->numel() != 1 || c->is_int()) return false;
    auto t = imp.input(step, other == a ? 0 : 1);
    return t.ok() && static_cast<int>(c->dims.size()) <= imp.g.shape(*t).rank();
  };
  const std::string_view kop = kiln_binary(n.op_type());
  Tensor y;
  if (scalar_fits(cb, a)) {
    KILN_ASSIGN_OR_RETURN(Tensor ta, imp.input(step, 0));
    y = imp.g.binary(kop, ta, cb->at(0), name);
  } else if (scalar_fits(ca, b)) {
    KILN_ASSIGN_OR_RETURN(Tensor tb, imp.input(step, 1));
    y = imp.g.binary(kop, ca->at(0), tb, name);
  } else {
    KILN_ASSIGN_OR_RETURN(Tensor ta, imp.input(step, 0));
    KILN_ASSIGN_OR_RETURN(Tensor tb, imp.input(step, 1));
    y = imp.g.binary(kop, ta, tb, name);
  }
  return imp.set_output(step, 0, y);
}

// Opset 6 and older: `broadcast` 1 aligns B with A's dims from `axis` on (default: B's dims are A's last);
// B gets trailing dims of 1 so that NumPy broadcasting (kiln's) aligns it the same way.
Status legacy_broadcast(Importer& imp, const onnx::NodeProto& n) {
  std::vector<int64_t> a_dims, b_dims;
  if (const Const* c = imp.constant(n.input(0))) {
    a_dims = c->dims;
  } else {
    KILN_ASSIGN_OR_RETURN(Tensor a, imp.input(n, 0));
    a_dims = imp.g.shape(a).to_vector();
  }
  const std::string b_name = n.input(1);
  if (const Const* c = imp.constant(b_name)) {
    b_dims = c->dims;
  } else {
    KILN_ASSIGN_OR_RETURN(Tensor b, imp.input(n, 1));
    b_dims = imp.g.shape(b).to_vector();
  }
  const auto ra = static_cast<int64_t>(a_dims.size()), rb = static_cast<int64_t>(b_dims.size());
  const int64_t axis = attr_int(n, "axis", ra - rb);
  if (axis < 0 || axis + rb > ra)
    return imp.error(n, fmt::format("broadcast axis {} does not fit B of rank {}", axis, rb));
  std::vector<int64_t> dims = b_dims;
  dims.resize(static_cast<size_t>(ra - axis), 1);
  const std::string aligned = n.output(0) + "/aligned_b";  // per node: B may be read by others, aligned otherwise
  if (const Const* c = imp.constant(b_name)) {
    Const moved = *c;
    moved.dims = dims;
    imp.set_const(aligned, std::move(moved));
  } else {
    KILN_ASSIGN_OR_RETURN(Tensor b, imp.input(n, 1));
    imp.set_tensor(aligned, imp.g.reshape(b, dims, imp.node_name(n, "align")));
  }
  return binary_step(imp, n, n.input(0), aligned, n.output(0), true);
}

// Add, Sub, ... and the variadic Max, Min, Sum, Mean (folded left to right).
Status binary(Importer& imp, const onnx::NodeProto& n) {
  if (n.input_size() == 0) return imp.error(n, "no inputs");
  if (n.input_size() == 1) {
    if (const Const* c = imp.constant(n.input(0))) {
      imp.set_const(n.output(0), *c);
      return {};
    }
    KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
    return imp.set_output(n, 0, imp.g.identity(x, imp.node_name(n)));
  }
  if (imp.opset() < 7 && attr_int(n, "broadcast", 0) != 0 && n.input_size() == 2) return legacy_broadcast(imp, n);
  std::string acc = n.input(0);
  const bool mean = n.op_type() == "Mean";
  for (int i = 1; i < n.input_size(); ++i) {
    const bool last = i + 1 == n.input_size() && !mean;
    const std::string out = last ? n.output(0) : n.output(0) + fmt::format("/acc{}", i);
    KILN_RETURN_IF_ERROR(binary_step(imp, n, acc, n.input(i), out, last));
    acc = out;
  }
  if (mean) {
    onnx::NodeProto step;
    step.set_op_type(n.op_type());
    step.add_input(acc);
    KILN_ASSIGN_OR_RETURN(Tensor total, imp.input(step, 0));
    return imp.set_output(n, 0, imp.g.mul(total, 1.0 / n.input_size(), imp.node_name(n)));
  }
  return {};
}

// Clip: bounds as attributes before opset 11, as optional constant inputs from 11.
Status clip(Importer& imp, const onnx::NodeProto& n) {
  KILN_ASSIGN_OR_RETURN(Tensor x, imp.input(n, 0));
  std::optional<double> lo, hi;
  if (imp.opset() < 11) {
    if (find_attr(n, "min")) lo = attr_float(n, "min", 0);
    if (find_attr(n, "max")) hi = attr_float(n, "max", 0);
  } else {
    if (Importer::has_input(n, 1)) {
      KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 1, "min"));
      if (c->numel() != 1) return imp.error(n, "min must hold one value");
      lo = c->at(0);
    }
    if (Importer::has_input(n, 2)) {
      KILN_ASSIGN_OR_RETURN(const Const* c, imp.const_input(n, 2, "max"));
      if (c->numel() != 1) return imp.error(n, "max must hold one value");
      hi = c->at(0);
    }
  }
  const double inf = std::numeric_limits<double>::infinity();
  if (lo && *lo == -inf) lo.reset();
  if (hi && *hi == inf) hi.reset();
  if (!lo && !hi) return imp.set_output(n, 0, imp.g.identity(x, imp.node_name(n)));
  if (lo == 0.0 && hi == 6.0) return imp.set_output(n, 0, imp.g.relu6(x, imp.node_name(n)));
  if (lo == 0.0 && !hi) return imp.set_output(n, 0, imp.g.relu(x, imp.node_name(n)));
  return imp.set_output(n, 0, imp.g.clamp(x, lo, hi, imp.node_name(n)));
}

}  // namespace

void add_pointwise_handlers(HandlerTable& t) {
  // The ops that are kiln's one to one: the registry's onnx column.
  for (const OpDef& def : op_registry()) {
    if (!def.onnx.empty()) t[std::string(def.onnx)] = unary(std::string(def.name));
  }
  t["LeakyRelu"] = leaky_relu;
  t["Elu"] = elu;
  t["Selu"] = selu;
  t["HardSigmoid"] = hard_sigmoid;
  t["Softplus"] = softplus;
  t["PRelu"] = prelu;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean"}) t[op] = binary;
  t["Clip"] = clip;
}

}  // namespace kiln::onnx_import
