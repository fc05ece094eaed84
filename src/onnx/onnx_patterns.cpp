// The erf-GELU pattern: Div(x, √2) | Mul(x, 1/√2) -> Erf -> Add(·, 1) -> Mul with x -> Mul with 0.5 (in
// either order of the last two multiplications), every intermediate read once.
#include "onnx_patterns.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace kiln::onnx_import {
namespace {

struct Index {
  const onnx::GraphProto& graph;
  const Importer& imp;
  std::map<std::string, int> producer;
  std::map<std::string, int> uses;
  std::set<std::string> outputs;

  Index(const onnx::GraphProto& g, const Importer& i) : graph(g), imp(i) {
    for (int k = 0; k < g.node_size(); ++k) {
      for (const auto& o : g.node(k).output()) producer[o] = k;
      for (const auto& in : g.node(k).input()) ++uses[in];
    }
    for (const auto& o : g.output()) outputs.insert(o.name());
  }
  const onnx::NodeProto* node_of(const std::string& name) const {
    auto it = producer.find(name);
    return it == producer.end() ? nullptr : &graph.node(it->second);
  }
  // Read by exactly one node and not a graph output: safe to fold into a pattern.
  bool private_value(const std::string& name) const {
    auto it = uses.find(name);
    return it != uses.end() && it->second == 1 && !outputs.count(name);
  }
  std::optional<double> scalar(const std::string& name) const {
    if (const Const* c = imp.constant(name)) {
      if (c->numel() == 1 && !c->is_int()) return c->at(0);
      return std::nullopt;
    }
    const onnx::NodeProto* n = node_of(name);
    if (!n || n->op_type() != "Constant") return std::nullopt;
    const auto* a = find_attr(*n, "value");
    if (!a) return std::nullopt;
    auto c = tensor_to_const(a->t(), "");
    if (!c.ok() || c->numel() != 1 || c->is_int()) return std::nullopt;
    return c->at(0);
  }
  // For a two-input node, the input that is not the constant `want` (nullopt when neither is).
  std::optional<std::string> other_than(const onnx::NodeProto& n, double want, bool commutes) const {
    if (n.input_size() != 2) return std::nullopt;
    auto near = [&](const std::string& s) {
      auto v = scalar(s);
      return v && std::abs(*v - want) <= 1e-4 * std::abs(want);
    };
    if (near(n.input(1))) return n.input(0);
    if (commutes && near(n.input(0))) return n.input(1);
    return std::nullopt;
  }
  // The single node reading `name`.
  const onnx::NodeProto* consumer(const std::string& name, int* index) const {
    if (!private_value(name)) return nullptr;
    for (int k = 0; k < graph.node_size(); ++k) {
      for (const auto& in : graph.node(k).input()) {
        if (in == name) {
          *index = k;
          return &graph.node(k);
        }
      }
    }
    return nullptr;
  }
};

// Matches the GELU around Erf node `e`; returns the replaced node indices and the Gelu node.
std::optional<std::pair<std::set<int>, onnx::NodeProto>> match_gelu(const Index& ix, int e) {
  const onnx::NodeProto& erf = ix.graph.node(e);
  if (erf.input_size() != 1 || !ix.private_value(erf.input(0))) return std::nullopt;
  const onnx::NodeProto* scale = ix.node_of(erf.input(0));
  if (!scale) return std::nullopt;
  std::optional<std::string> x;
  if (scale->op_type() == "Div") x = ix.other_than(*scale, std::sqrt(2.0), false);
  if (scale->op_type() == "Mul") x = ix.other_than(*scale, 1.0 / std::sqrt(2.0), true);
  if (!x) return std::nullopt;
  std::set<int> nodes{ix.producer.at(erf.input(0)), e};
  int k = -1;
  const onnx::NodeProto* add = ix.consumer(erf.output(0), &k);
  if (!add || add->op_type() != "Add" || !ix.other_than(*add, 1.0, true)) return std::nullopt;
  nodes.insert(k);
  const onnx::NodeProto* m1 = ix.consumer(add->output(0), &k);
  if (!m1 || m1->op_type() != "Mul" || m1->input_size() != 2) return std::nullopt;
  nodes.insert(k);
  const std::string other = m1->input(0) == add->output(0) ? m1->input(1) : m1->input(0);
  std::string y;
  if (other == *x) {  // (x * (1 + erf)) * 0.5
    const onnx::NodeProto* m2 = ix.consumer(m1->output(0), &k);
    if (!m2 || m2->op_type() != "Mul" || !ix.other_than(*m2, 0.5, true)) return std::nullopt;
    nodes.insert(k);
    y = m2->output(0);
  } else {  // (x * 0.5) * (1 + erf)
    const onnx::NodeProto* half = ix.node_of(other);
    if (!half || half->op_type() != "Mul" || !ix.private_value(other) || ix.other_than(*half, 0.5, true) != *x) {
      return std::nullopt;
    }
    nodes.insert(ix.producer.at(other));
    y = m1->output(0);
  }
  onnx::NodeProto gelu;
  gelu.set_op_type("Gelu");
  gelu.set_name(erf.name().empty() ? y : erf.name());
  gelu.add_input(*x);
  gelu.add_output(y);
  return std::make_pair(nodes, gelu);
}

}  // namespace

std::vector<onnx::NodeProto> rewrite_patterns(const Importer& imp, const onnx::GraphProto& graph) {
  Index ix(graph, imp);
  std::set<int> removed;
  std::map<int, onnx::NodeProto> placed;  // a Gelu at the position of its pattern's last node
  for (int k = 0; k < graph.node_size(); ++k) {
    if (graph.node(k).op_type() != "Erf" || removed.count(k)) continue;
    auto m = match_gelu(ix, k);
    if (!m) continue;
    bool overlaps = false;
    for (int i : m->first) overlaps = overlaps || removed.count(i);
    if (overlaps) continue;
    removed.insert(m->first.begin(), m->first.end());
    placed.emplace(*m->first.rbegin(), m->second);
  }
  std::vector<onnx::NodeProto> out;
  out.reserve(static_cast<size_t>(graph.node_size()));
  for (int k = 0; k < graph.node_size(); ++k) {
    if (auto it = placed.find(k); it != placed.end()) out.push_back(it->second);
    if (!removed.count(k)) out.push_back(graph.node(k));
  }
  return out;
}

}  // namespace kiln::onnx_import
