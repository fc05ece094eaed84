// Saving graphs as canonical JSON text.
//
// The text depends only on what Graph::operator== compares, so equal graphs save to the same bytes and
// load -> save -> load -> save is byte-stable:
//   - keys in a fixed order: format, version, name, tensors, nodes, outputs;
//   - every tensor declaration with all five fields (name, shape, dtype, layout, kind);
//   - node inputs in the op's port order (list ports as arrays), outputs in port order, attributes in the
//     op's schema order, every attribute the node holds (they are normalized: defaults filled in);
//     floats as JSON floats (1.0), integers as integers; "attrs" left out when a node has none;
//   - an output as a plain name, or as {"name", "layout"} when its layout differs from the layout its
//     producer's shape rule gives it (that is, when it was set explicitly), so that loading restores it.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "json/json_util.h"
#include "kiln/json.h"
#include "ops/registry.h"
#include "support/atomic_file.h"

namespace kiln {

namespace {

using ojson = nlohmann::ordered_json;

ojson attr_to_json(const AttrValue& v) {
  struct Visitor {
    ojson operator()(int64_t i) const { return ojson(i); }
    ojson operator()(double d) const { return ojson(d); }
    ojson operator()(bool b) const { return ojson(b); }
    ojson operator()(const std::string& s) const { return ojson(s); }
    ojson operator()(const std::vector<int64_t>& l) const {
      ojson a = ojson::array();
      for (int64_t i : l) a.push_back(i);
      return a;
    }
    ojson operator()(const std::vector<double>& l) const {
      ojson a = ojson::array();
      for (double d : l) a.push_back(d);
      return a;
    }
  };
  return std::visit(Visitor{}, v);
}

// The layout a graph output has when the file does not say: the one its producer's shape rule gives it.
Layout natural_layout(const Graph& g, Tensor t) {
  const TensorInfo& info = g.tensor(t);
  const Layout fallback = default_layout_for_rank(info.shape.rank());
  if (info.producer < 0) return info.layout;
  const Node& n = g.node(info.producer);
  if (!n.op || !n.build_errors.empty()) return fallback;
  for (const auto& port : n.inputs) {
    for (Tensor in : port) {
      if (!g.tensor(in).inferred) return fallback;
    }
  }
  const OpDef& def = op_def(*n.op);
  InferCtx ctx(def, n, g.tensors());
  def.infer(ctx);
  if (ctx.failed()) return fallback;
  for (size_t k = 0; k < n.outputs.size() && k < ctx.outputs().size(); ++k) {
    if (n.outputs[k] == t) return ctx.outputs()[k].layout;
  }
  return fallback;
}

}  // namespace

std::string graph_to_json(const Graph& g) {
  ojson root = ojson::object();
  root["format"] = json_detail::kFormatName;
  root["version"] = json_detail::kFormatVersion;
  root["name"] = g.name();
  if (g.is_symbolic()) {
    ojson dims = ojson::object();
    for (const auto& [name, r] : g.dim_ranges()) dims[name] = {r.min, r.max};
    root["dims"] = std::move(dims);
  }

  ojson tensors = ojson::array();
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    ojson o = ojson::object();
    o["name"] = info.name;
    ojson shape = ojson::array();
    if (auto sym = g.symbolic_shape(t)) {  // a fixed dim stays a number, a symbolic one is its text
      for (const DimExpr& d : *sym) d.is_constant() ? shape.push_back(*d.constant()) : shape.push_back(d.to_string());
    } else {
      for (int64_t d : info.shape.dims()) shape.push_back(d);
    }
    o["shape"] = std::move(shape);
    o["dtype"] = dtype_name(info.dtype);
    o["layout"] = layout_name(info.layout);
    o["kind"] = tensor_kind_name(info.kind);
    tensors.push_back(std::move(o));
  }
  root["tensors"] = std::move(tensors);

  auto tensor_name = [&](Tensor t) -> const std::string& { return g.tensor(t).name; };
  ojson nodes = ojson::array();
  for (const Node& n : g.nodes()) {
    ojson o = ojson::object();
    o["op"] = n.op ? std::string(op_name(*n.op)) : n.op_text;
    o["name"] = n.name;
    ojson inputs = ojson::object();
    ojson outputs = ojson::object();
    ojson attrs = ojson::object();
    if (n.op) {
      const OpDef& def = op_def(*n.op);
      for (size_t p = 0; p < def.inputs.size() && p < n.inputs.size(); ++p) {
        const std::vector<Tensor>& ts = n.inputs[p];
        if (ts.empty()) continue;
        std::string port(def.inputs[p].name);
        if (def.inputs[p].list) {
          ojson list = ojson::array();
          for (Tensor t : ts) list.push_back(tensor_name(t));
          inputs[port] = std::move(list);
        } else {
          inputs[port] = tensor_name(ts[0]);
        }
      }
      for (size_t p = 0; p < def.outputs.size() && p < n.outputs.size(); ++p) {
        outputs[std::string(def.outputs[p].name)] = tensor_name(n.outputs[p]);
      }
      for (const AttrSpec& spec : def.attrs) {
        auto it = n.attrs.find(std::string(spec.name));
        if (it != n.attrs.end()) attrs[it->first] = attr_to_json(it->second);
      }
    }
    // Whatever the schema does not list (nothing, in a verified graph), in name order.
    for (const auto& [name, value] : n.attrs) {
      if (!attrs.contains(name)) attrs[name] = attr_to_json(value);
    }
    if (!n.op) {
      for (size_t p = 0; p < n.outputs.size(); ++p)
        outputs[p == 0 ? "y" : fmt::format("y{}", p)] = tensor_name(n.outputs[p]);
    }
    o["inputs"] = std::move(inputs);
    o["outputs"] = std::move(outputs);
    if (!attrs.empty()) o["attrs"] = std::move(attrs);
    nodes.push_back(std::move(o));
  }
  root["nodes"] = std::move(nodes);

  ojson outputs = ojson::array();
  for (Tensor t : g.outputs()) {
    const TensorInfo& info = g.tensor(t);
    if (info.layout == natural_layout(g, t)) {
      outputs.push_back(info.name);
    } else {
      ojson o = ojson::object();
      o["name"] = info.name;
      o["layout"] = layout_name(info.layout);
      outputs.push_back(std::move(o));
    }
  }
  root["outputs"] = std::move(outputs);

  // Names are the user's bytes; text that is not UTF-8 is replaced rather than thrown on.
  return root.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

Status save_graph(const Graph& g, const std::string& path) {
  return support::write_file_atomic(path, graph_to_json(g));
}

}  // namespace kiln
