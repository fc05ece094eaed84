// The erf-GELU pattern: Div(x, √2) | Mul(x, 1/√2) -> Erf -> Add(·, 1) -> Mul with x -> Mul with 0.5 (in
// either order of the last two multiplications), every intermediate read once.
#include "onnx_patterns.h"

#include <algorithm>
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

  std::map<std::string, std::vector<int>> readers_of;  // node indices reading a name, each once

  Index(const onnx::GraphProto& g, const Importer& i) : graph(g), imp(i) {
    for (int k = 0; k < g.node_size(); ++k) {
      for (const auto& o : g.node(k).output()) producer[o] = k;
      for (const auto& in : g.node(k).input()) {
        ++uses[in];
        auto& r = readers_of[in];
        if (r.empty() || r.back() != k) r.push_back(k);
      }
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
    // One value, of rank 0 or 1: a higher-rank one would have widened the subgraph's output rank.
    if (const Const* c = imp.constant(name)) {
      if (c->numel() == 1 && !c->is_int() && c->dims.size() <= 1) return c->at(0);
      return std::nullopt;
    }
    const onnx::NodeProto* n = node_of(name);
    if (!n || n->op_type() != "Constant") return std::nullopt;
    const auto* a = find_attr(*n, "value");
    if (!a) return std::nullopt;
    auto c = tensor_to_const(a->t(), "");
    if (!c.ok() || c->numel() != 1 || c->is_int() || c->dims.size() > 1) return std::nullopt;
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
    auto it = readers_of.find(name);
    if (it == readers_of.end() || it->second.empty()) return nullptr;
    *index = it->second.front();
    return &graph.node(*index);
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

// Every node reading `name`, by index.
std::vector<int> readers(const Index& ix, const std::string& name) {
  auto it = ix.readers_of.find(name);
  return it == ix.readers_of.end() ? std::vector<int>{} : it->second;
}

// The layer norm that exporters write below opset 17 (PyTorch's F.layer_norm, ConvNeXt's LayerNorm2d):
//   m = ReduceMean(x, axes); d = x - m; v = ReduceMean(d ^ 2, axes); y = d / Sqrt(v + eps) [* gamma] [+ beta]
// around ReduceMean node `r`. It becomes one LayerNormalization (kiln_axes: the reduced axes, which must be
// the trailing ones; checked against the rank when the node is imported).
std::optional<std::pair<std::set<int>, onnx::NodeProto>> match_layer_norm(const Index& ix, int r) {
  const onnx::NodeProto& rm1 = ix.graph.node(r);
  const std::vector<int64_t> axes = attr_ints(rm1, "axes");
  if (rm1.input_size() != 1 || axes.empty() || attr_int(rm1, "keepdims", 1) != 1) return std::nullopt;
  const std::string& x = rm1.input(0);
  int k = -1;
  const onnx::NodeProto* sub = ix.consumer(rm1.output(0), &k);
  if (!sub || sub->op_type() != "Sub" || sub->input_size() != 2 || sub->input(0) != x) return std::nullopt;
  std::set<int> nodes{r, k};
  const std::string d = sub->output(0);
  const std::vector<int> d_readers = readers(ix, d);
  if (d_readers.size() != 2 || ix.outputs.count(d)) return std::nullopt;
  const onnx::NodeProto *pow = nullptr, *div = nullptr;
  for (int i : d_readers) {
    const onnx::NodeProto& n = ix.graph.node(i);
    if (n.op_type() == "Pow" && n.input_size() == 2 && n.input(0) == d && ix.scalar(n.input(1)) == 2.0) pow = &n;
    if (n.op_type() == "Div" && n.input_size() == 2 && n.input(0) == d) div = &n;
    nodes.insert(i);
  }
  if (!pow || !div) return std::nullopt;
  const onnx::NodeProto* rm2 = ix.consumer(pow->output(0), &k);
  if (!rm2 || rm2->op_type() != "ReduceMean" || attr_ints(*rm2, "axes") != axes || attr_int(*rm2, "keepdims", 1) != 1) {
    return std::nullopt;
  }
  nodes.insert(k);
  const onnx::NodeProto* add = ix.consumer(rm2->output(0), &k);
  if (!add || add->op_type() != "Add" || add->input_size() != 2 || add->input(0) != rm2->output(0)) return std::nullopt;
  const std::optional<double> eps = ix.scalar(add->input(1));
  if (!eps) return std::nullopt;
  nodes.insert(k);
  const onnx::NodeProto* sqrt = ix.consumer(add->output(0), &k);
  if (!sqrt || sqrt->op_type() != "Sqrt") return std::nullopt;
  nodes.insert(k);
  int div_index = -1;
  if (ix.consumer(sqrt->output(0), &div_index) != div || div->input(1) != sqrt->output(0)) return std::nullopt;
  std::string y = div->output(0), gamma, beta;
  // The affine part, when the weights are constants.
  const onnx::NodeProto* mul = ix.consumer(y, &k);
  if (mul && mul->op_type() == "Mul" && mul->input_size() == 2 && mul->input(0) == y &&
      ix.imp.constant(mul->input(1))) {
    nodes.insert(k);
    gamma = mul->input(1);
    y = mul->output(0);
    const onnx::NodeProto* bias = ix.consumer(y, &k);
    if (bias && bias->op_type() == "Add" && bias->input_size() == 2 && bias->input(0) == y &&
        ix.imp.constant(bias->input(1))) {
      nodes.insert(k);
      beta = bias->input(1);
      y = bias->output(0);
    }
  }
  onnx::NodeProto ln;
  ln.set_op_type("LayerNormalization");
  ln.set_name(rm1.name().empty() ? y : rm1.name());
  ln.add_input(x);
  ln.add_input(gamma);
  ln.add_input(beta);
  ln.add_output(y);
  auto* a = ln.add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(*std::min_element(axes.begin(), axes.end()));
  a = ln.add_attribute();
  a->set_name("epsilon");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(static_cast<float>(round_to_dtype(*eps, DType::f32)));  // representable: a defined conversion
  a = ln.add_attribute();  // the reduced axes, checked against the rank when the node is imported
  a->set_name("kiln_axes");
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : axes) a->add_ints(x);
  return std::make_pair(nodes, ln);
}

}  // namespace

std::vector<onnx::NodeProto> rewrite_patterns(const Importer& imp, const onnx::GraphProto& graph) {
  Index ix(graph, imp);
  std::set<int> removed;
  std::map<int, onnx::NodeProto> placed;  // a Gelu at the position of its pattern's last node
  for (int k = 0; k < graph.node_size(); ++k) {
    if (removed.count(k)) continue;
    std::optional<std::pair<std::set<int>, onnx::NodeProto>> m;
    if (graph.node(k).op_type() == "Erf") m = match_gelu(ix, k);
    if (graph.node(k).op_type() == "ReduceMean") m = match_layer_norm(ix, k);
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
