// Graph storage: tensors and nodes, copies, lookups by name, the operand log, and equality.
// The rest of Graph lives by concern: graph_name_index.cpp (the name index), graph_declare.cpp (declaring
// tensors and outputs), graph_add_node.cpp (the generic node builder), graph_check.cpp (inference and
// verification).
#include "kiln/graph.h"

#include <algorithm>

#include <fmt/format.h>

#include "kiln/host_tensor.h"

namespace kiln {

std::string attr_value_to_string(const AttrValue& v) {
  struct Visitor {
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return fmt::format("{}", d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return fmt::format("\"{}\"", s); }
    std::string operator()(const std::vector<int64_t>& l) const { return fmt::format("[{}]", fmt::join(l, ", ")); }
    std::string operator()(const std::vector<double>& l) const { return fmt::format("[{}]", fmt::join(l, ", ")); }
  };
  return std::visit(Visitor{}, v);
}

std::string_view tensor_kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::input: return "input";
    case TensorKind::parameter: return "parameter";
    case TensorKind::intermediate: return "intermediate";
  }
  return "?";
}

std::optional<TensorKind> parse_tensor_kind(std::string_view name) {
  if (name == "input") return TensorKind::input;
  if (name == "parameter") return TensorKind::parameter;
  return std::nullopt;
}

const TensorInfo& Graph::tensor(Tensor t) const {
  KILN_CHECK(t.id >= 0 && static_cast<size_t>(t.id) < tensors_.size(), fmt::format("invalid tensor handle {}", t.id));
  return tensors_[static_cast<size_t>(t.id)];
}
std::optional<Tensor> Graph::find_tensor(std::string_view name) const {
  const int32_t i = tensor_by_name_.find(name, tensors_);
  if (i < 0) return std::nullopt;
  return Tensor{i};
}

Status Graph::set_value(Tensor t, std::shared_ptr<const HostTensor> value) {
  if (!t.valid() || static_cast<size_t>(t.id) >= tensors_.size())
    return invalid_argument("set_value: invalid tensor handle");
  const TensorInfo& info = tensors_[static_cast<size_t>(t.id)];
  if (info.kind != TensorKind::parameter) {
    return invalid_argument(fmt::format("set_value: tensor '{}' is {}, only a parameter has values", info.name,
                                        tensor_kind_name(info.kind)));
  }
  if (!value || value->shape != info.shape || value->dtype != info.dtype || value->numel() != info.shape.numel()) {
    return invalid_argument(fmt::format(
        "set_value: parameter '{}': expected a {} {} value, got {}", info.name, info.shape.to_string(),
        dtype_name(info.dtype),
        value ? value->shape.to_string() + " " + std::string(dtype_name(value->dtype)) : std::string("none")));
  }
  values_.insert_or_assign(info.name, std::move(value));
  return {};
}

const HostTensor* Graph::value(std::string_view tensor_name) const {
  auto it = values_.find(tensor_name);
  return it == values_.end() ? nullptr : it->second.get();
}

Graph::Graph(const Graph& o)
    : name_(o.name_),
      outputs_(o.outputs_),
      graph_errors_(o.graph_errors_),
      binding_(o.binding_),
      verified_(o.verified_),
      log_(o.log_),
      tensor_by_name_(o.tensor_by_name_),
      node_by_name_(o.node_by_name_),
      values_(o.values_),
      symbolic_(o.symbolic_) {
  const size_t t = o.tensors_.size(), n = o.nodes_.size();
  tensors_.reserve(2 * t + 16);
  tensors_.insert(tensors_.end(), o.tensors_.begin(), o.tensors_.end());
  layout_given_.reserve(2 * t + 16);
  layout_given_.insert(layout_given_.end(), o.layout_given_.begin(), o.layout_given_.end());
  nodes_.reserve(2 * n + 16);
  nodes_.insert(nodes_.end(), o.nodes_.begin(), o.nodes_.end());
}

void Graph::log_node(const Node& n) {
  log_.ops.push_back(n.op);
  for (const auto& port : n.inputs) log_.ins.insert(log_.ins.end(), port.begin(), port.end());
  log_.in_start.push_back(static_cast<int32_t>(log_.ins.size()));
  log_.outs.insert(log_.outs.end(), n.outputs.begin(), n.outputs.end());
  log_.out_start.push_back(static_cast<int32_t>(log_.outs.size()));
}

bool Graph::log_matches_nodes() const {
  if (log_.ops.size() != nodes_.size() || log_.in_start.size() != nodes_.size() + 1 ||
      log_.out_start.size() != nodes_.size() + 1)
    return false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (log_.ops[i] != n.op) return false;
    size_t k = static_cast<size_t>(log_.in_start[i]);
    for (const auto& port : n.inputs)
      for (Tensor t : port)
        if (k >= static_cast<size_t>(log_.in_start[i + 1]) || log_.ins[k++] != t) return false;
    if (k != static_cast<size_t>(log_.in_start[i + 1])) return false;
    k = static_cast<size_t>(log_.out_start[i]);
    for (Tensor t : n.outputs)
      if (k >= static_cast<size_t>(log_.out_start[i + 1]) || log_.outs[k++] != t) return false;
    if (k != static_cast<size_t>(log_.out_start[i + 1])) return false;
  }
  return true;
}

Graph& Graph::operator=(const Graph& o) {
  if (this != &o) *this = Graph(o);
  return *this;
}

void Graph::reserve(size_t tensors, size_t nodes) {
  tensors_.reserve(tensors);
  layout_given_.reserve(tensors);
  tensor_by_name_.reserve(tensors);
  nodes_.reserve(nodes);
  node_by_name_.reserve(nodes);
}

std::optional<int32_t> Graph::find_node(std::string_view name) const {
  const int32_t i = node_by_name_.find(name, nodes_);
  if (i < 0) return std::nullopt;
  return i;
}

std::vector<Tensor> Graph::bound_tensors() const {
  std::vector<Tensor> r;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].kind != TensorKind::intermediate) r.push_back(Tensor{static_cast<int32_t>(i)});
  }
  return r;
}
// Structural equality that does not depend on declaration order: tensors are matched by name (so a
// graph whose parameters were declared between its nodes equals itself after a JSON round trip), nodes
// by position, and every tensor reference by the name it resolves to.
bool Graph::operator==(const Graph& o) const {
  if (name_ != o.name_ || tensors_.size() != o.tensors_.size() || nodes_.size() != o.nodes_.size() ||
      outputs_.size() != o.outputs_.size()) {
    return false;
  }
  auto same_tensor = [&](Tensor a, Tensor b) {
    const TensorInfo &x = tensors_[static_cast<size_t>(a.id)], &y = o.tensors_[static_cast<size_t>(b.id)];
    return x.name == y.name && x.shape == y.shape && x.dtype == y.dtype && x.layout == y.layout && x.kind == y.kind &&
           x.producer == y.producer;
  };
  auto same_list = [&](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_tensor(a[i], b[i])) return false;
    }
    return true;
  };
  for (const TensorInfo& t : tensors_) {
    auto other = o.find_tensor(t.name);
    auto mine = find_tensor(t.name);
    if (!other || !mine || !same_tensor(*mine, *other)) return false;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node &a = nodes_[i], &b = o.nodes_[i];
    if (a.name != b.name || a.op != b.op || a.attrs != b.attrs || a.inputs.size() != b.inputs.size() ||
        !same_list(a.outputs, b.outputs)) {
      return false;
    }
    for (size_t p = 0; p < a.inputs.size(); ++p) {
      if (!same_list(a.inputs[p], b.inputs[p])) return false;
    }
  }
  // The same symbols and symbolic inputs (by name: tensor ids may differ).
  if (dim_ranges().size() != o.dim_ranges().size()) return false;
  for (const auto& [name, r] : dim_ranges()) {
    auto it = o.dim_ranges().find(name);
    if (it == o.dim_ranges().end() || it->second.min != r.min || it->second.max != r.max) return false;
  }
  for (const TensorInfo& t : tensors_) {
    if (symbolic_shape(*find_tensor(t.name)) != o.symbolic_shape(*o.find_tensor(t.name))) return false;
  }
  return same_list(outputs_, o.outputs_);
}

}  // namespace kiln
