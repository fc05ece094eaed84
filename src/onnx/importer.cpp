// The importer's state: values by ONNX name, names for kiln nodes, errors that name the ONNX node.
#include "importer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kiln::onnx_import {

const Const* Importer::constant(const std::string& name) const { return world_constant(name, world_); }

const Const* Importer::world_constant(const std::string& name, int w) const {
  if (w > 0 && static_cast<size_t>(w) <= world_consts_.size()) {
    const auto& mine = world_consts_[static_cast<size_t>(w - 1)];
    if (auto it = mine.find(name); it != mine.end()) return &it->second;
  }
  auto it = consts_.find(name);
  return it == consts_.end() ? nullptr : &it->second;
}

void Importer::set_const(const std::string& name, Const c) {
  if (world_ > 0) {
    world_consts_[static_cast<size_t>(world_ - 1)].insert_or_assign(name, std::move(c));
    return;
  }
  tensors_.erase(name);
  for (auto& w : world_consts_) w.erase(name);
  if (auto it = materialized_.find(name); it != materialized_.end()) materialized_.erase(it);
  consts_.insert_or_assign(name, std::move(c));
}

int Importer::worlds() {
  if (!g.is_symbolic()) return 0;
  if (world_dims_.empty()) {
    // Symbol i of k (in name order) at lo + (hi - lo)(i + 1)/(k + 2) ascending, (k - i)/(k + 2) descending (at
    // least lo + 1 where the range allows): values apart from the ends and from each other.
    const DimRanges& ranges = g.dim_ranges();
    const auto k = static_cast<int64_t>(ranges.size());
    DimBindings up, down;
    int64_t i = 0;
    for (const auto& entry : ranges) {  // (not a structured binding: clang cannot capture one in a lambda)
      const DimRange& r = entry.second;
      auto at = [&](int64_t part) {
        return std::min(r.max, r.min + std::max<int64_t>(1, (r.max - r.min) * part / (k + 2)));
      };
      up[entry.first] = at(i + 1);
      down[entry.first] = at(k - i);
      ++i;
    }
    world_dims_ = {range_ends(ranges, true), up, down};
    world_consts_.resize(world_dims_.size());
  }
  return static_cast<int>(world_dims_.size());
}

const DimBindings& Importer::world_bindings(int w) {
  KILN_CHECK(w >= 1 && w <= worlds(), "no such world of the open dims");
  return world_dims_[static_cast<size_t>(w - 1)];
}

std::string Importer::open_dims() const {
  std::string dims;
  for (const auto& [name, r] : g.dim_ranges()) dims += (dims.empty() ? "" : ", ") + name;
  return dims;
}

void Importer::keep_varying(const std::vector<std::string>& outputs) {
  for (const std::string& name : outputs) {
    auto bottom = consts_.find(name);
    if (bottom == consts_.end()) continue;
    const Const& b = bottom->second;
    bool same = true;
    for (const auto& w : world_consts_) {
      auto it = w.find(name);
      if (it == w.end()) continue;
      const Const& a = it->second;
      same = same && a.elem_type == b.elem_type && a.dims == b.dims && a.ints == b.ints && a.floats == b.floats;
    }
    if (same) {
      for (auto& w : world_consts_) w.erase(name);
    }
  }
}

std::string Importer::describe(const onnx::NodeProto& node) const {
  const std::string& name =
      node.name().empty() ? (node.output_size() > 0 ? node.output(0) : node.op_type()) : node.name();
  return fmt::format("node '{}' ({}, opset {})", name, node.op_type(), opset_);
}

Status Importer::error(const onnx::NodeProto& node, std::string_view message) const {
  return invalid_argument(fmt::format("{}: {}", describe(node), message));
}

Status Importer::refuse(const onnx::NodeProto& node, std::string_view message) const {
  return unsupported(fmt::format("{}: {}", describe(node), message));
}

std::string Importer::node_name(const onnx::NodeProto& node, std::string_view suffix) {
  std::string base = node.output_size() > 0 && !node.output(0).empty() ? node.output(0) : node.op_type();
  if (!suffix.empty()) base += fmt::format("/{}", suffix);
  std::string name = base;
  // Node names and tensor names must not collide with any tensor of the graph: a node's output tensor takes
  // its name.
  for (int i = 1; g.find_node(name) || g.find_tensor(name); ++i) name = fmt::format("{}_{}", base, i);
  return name;
}

Result<Tensor> Importer::input(const onnx::NodeProto& node, int i) {
  if (!has_input(node, i)) return error(node, fmt::format("input {} is missing", i));
  const std::string& name = node.input(i);
  if (auto it = tensors_.find(name); it != tensors_.end()) return it->second;
  if (auto it = materialized_.find(name); it != materialized_.end()) return it->second;
  const Const* c = constant(name);
  if (!c) return error(node, fmt::format("input '{}' is not produced by any earlier node", name));
  // A constant read as a tensor: a parameter that holds the constant's values.
  auto dtype = elem_dtype(c->elem_type);
  if (!dtype) {
    return refuse(
        node, fmt::format("input '{}' is a constant of type {}: kiln's tensors are float, float16 or bfloat16", name,
                          elem_type_name(c->elem_type)));
  }
  for (int64_t d : c->dims) {
    if (d == 0)
      return refuse(node, fmt::format("input '{}' is an empty constant: kiln's tensors have no zero dims", name));
  }
  std::string pname = name;
  for (char& ch : pname) {
    if (ch == '/' || ch == '\\') ch = '.';  // parameter names are .npy file names (kiln import --weights)
  }
  if (pname.empty() || pname == "." || pname == "..") pname = "constant";
  const std::string base = pname;
  for (int k = 1; g.find_tensor(pname) || g.find_node(pname); ++k) pname = fmt::format("{}_{}", base, k);
  Tensor t = g.parameter(pname, Shape(c->dims), *dtype);
  KILN_RETURN_IF_ERROR(g.set_value(t, std::make_shared<HostTensor>(const_to_host(*c, *dtype))));
  materialized_.emplace(name, t);
  return t;
}

Result<const Const*> Importer::const_input(const onnx::NodeProto& node, int i, std::string_view what, bool integer) {
  if (!has_input(node, i)) return error(node, fmt::format("input {} ({}) is missing", i, what));
  const Const* c = constant(node.input(i));
  if (!c) {
    return refuse(node, fmt::format("input {} ({}, '{}') is computed at run time; kiln needs it constant", i, what,
                                    node.input(i)));
  }
  if (integer && !c->is_int()) {
    return error(node,
                 fmt::format("input {} ({}) is {}, expected an integer tensor", i, what, elem_type_name(c->elem_type)));
  }
  return c;
}

std::optional<std::string> Importer::node_problem() const {
  for (size_t k = node_start_; k < g.nodes().size(); ++k) {
    const Node& n = g.nodes()[k];
    if (!n.build_errors.empty()) return n.build_errors.front().message;
    if (!n.infer_errors.empty()) return n.infer_errors.front().message;
    for (Tensor t : n.outputs) {
      // Its inputs had no shape: a problem reported where they were made, and no shape to go on with.
      if (!g.tensor(t).inferred) return fmt::format("kiln node '{}' has an input without a shape", n.name);
    }
  }
  return std::nullopt;
}

Status Importer::set_output(const onnx::NodeProto& node, int k, Tensor t) {
  if (auto p = node_problem()) return refuse(node, *p);  // a valid model kiln cannot express
  if (!t.valid()) return error(node, "kiln could not build the node");
  if (k < node.output_size() && !node.output(k).empty()) set_tensor(node.output(k), t);
  return {};
}

// ---- attributes ----

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, std::string_view name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t attr_int(const onnx::NodeProto& n, std::string_view name, int64_t fallback) {
  const auto* a = find_attr(n, name);
  return a ? a->i() : fallback;
}

double attr_float(const onnx::NodeProto& n, std::string_view name, double fallback) {
  const auto* a = find_attr(n, name);
  return a ? static_cast<double>(a->f()) : fallback;
}

std::string attr_string(const onnx::NodeProto& n, std::string_view name, std::string fallback) {
  const auto* a = find_attr(n, name);
  return a ? a->s() : fallback;
}

std::vector<int64_t> attr_ints(const onnx::NodeProto& n, std::string_view name, std::vector<int64_t> fallback) {
  const auto* a = find_attr(n, name);
  if (!a) return fallback;
  return {a->ints().begin(), a->ints().end()};
}

std::vector<double> attr_floats(const onnx::NodeProto& n, std::string_view name) {
  const auto* a = find_attr(n, name);
  if (!a) return {};
  return {a->floats().begin(), a->floats().end()};
}

int64_t dims_product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  for (size_t i = from; i < to && i < dims.size(); ++i) {
    if (dims[i] == 0) return 0;  // before any overflow check: [2^40, 2^40, 0] holds nothing
  }
  int64_t p = 1;
  for (size_t i = from; i < to && i < dims.size(); ++i) {
    if (dims[i] < 0) return kFoldLimit + 1;  // not a size: as large as too large
    if (dims[i] != 0 && p > (kFoldLimit + 1) / dims[i]) return kFoldLimit + 1;
    p *= dims[i];
  }
  return std::min(p, kFoldLimit + 1);
}

int64_t float_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

bool dims_bounded(const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kFoldLimit) return false;
    if (d == 0) continue;
    if (p > kFoldLimit / d) return false;
    p *= d;
  }
  return true;
}

std::optional<int64_t> checked_int(char op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case '+': return __builtin_add_overflow(a, b, &r) ? std::nullopt : std::optional<int64_t>(r);
    case '-': return __builtin_sub_overflow(a, b, &r) ? std::nullopt : std::optional<int64_t>(r);
    case '*': return __builtin_mul_overflow(a, b, &r) ? std::nullopt : std::optional<int64_t>(r);
    case '/':
      if (b == 0 || (a == std::numeric_limits<int64_t>::min() && b == -1)) return std::nullopt;
      return a / b;
    default: return std::nullopt;
  }
}

std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

const HandlerTable& handlers() {
  static const HandlerTable table = [] {
    HandlerTable t;
    add_fold_handlers(t);
    add_pointwise_handlers(t);
    add_nn_handlers(t);
    add_data_handlers(t);
    add_reshape_handlers(t);
    add_resize_handlers(t);
    return t;
  }();
  return table;
}

}  // namespace kiln::onnx_import
