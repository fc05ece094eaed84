// Graph storage, the generic node builder, and verification.
#include "kiln/graph.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "ops/registry.h"

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

// ---- the name index --------------------------------------------------------------------------------------
uint32_t Graph::NameIndex::hash(std::string_view name) {
  return static_cast<uint32_t>(std::hash<std::string_view>{}(name));
}

void Graph::NameIndex::insert(uint32_t h, int32_t index) {
  if ((used_ + 1) * 2 > slots_.size()) rehash(std::max<size_t>(16, slots_.size() * 2));
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].index != kEmpty) i = (i + 1) & mask;
  slots_[i] = {h, index};
  ++used_;
}

void Graph::NameIndex::reserve(size_t n) {
  size_t want = 16;
  while (want < 2 * n) want *= 2;
  if (want > slots_.size()) rehash(want);
}

void Graph::NameIndex::renumber(const std::vector<int32_t>& perm) {
  for (Slot& s : slots_)
    if (s.index >= 0) s.index = perm[static_cast<size_t>(s.index)];
}

// Moves the live entries into `slots` slots (their stored hashes give their places; erased ones are dropped).
void Graph::NameIndex::rehash(size_t slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot{});
  used_ = 0;
  for (const Slot& s : old) {
    if (s.index >= 0) insert(s.hash, s.index);
  }
}

std::optional<Tensor> Graph::find_tensor(std::string_view name) const {
  const int32_t i = tensor_by_name_.find(name, tensors_);
  if (i < 0) return std::nullopt;
  return Tensor{i};
}

Graph::Graph(const Graph& o)
    : name_(o.name_),
      outputs_(o.outputs_),
      graph_errors_(o.graph_errors_),
      verified_(o.verified_),
      log_(o.log_),
      tensor_by_name_(o.tensor_by_name_),
      node_by_name_(o.node_by_name_) {
  const size_t t = o.tensors_.size(), n = o.nodes_.size();
  tensors_.reserve(t + t / 4 + 16);
  tensors_.insert(tensors_.end(), o.tensors_.begin(), o.tensors_.end());
  layout_given_.reserve(t + t / 4 + 16);
  layout_given_.insert(layout_given_.end(), o.layout_given_.begin(), o.layout_given_.end());
  nodes_.reserve(n + n / 4 + 16);
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

// ---- declaring tensors --------------------------------------------------------------------------------
Tensor Graph::declare(std::string name, Shape shape, DType dtype, std::optional<Layout> layout, TensorKind kind) {
  verified_ = false;
  Tensor t{static_cast<int32_t>(tensors_.size())};
  std::string where = fmt::format("tensors/{}", t.id);
  if (name.empty()) graph_errors_.push_back({-1, where + "/name", "a tensor needs a non-empty name"});
  Status st = validate_shape(shape);
  if (!st.ok()) graph_errors_.push_back({-1, where + "/shape", fmt::format("tensor '{}': {}", name, st.message())});
  if (layout && layout_rank(*layout) > 0 && layout_rank(*layout) != shape.rank()) {
    graph_errors_.push_back({-1, where + "/layout",
                             fmt::format("tensor '{}': layout {} needs {} dims, got {}", name, layout_name(*layout),
                                         layout_rank(*layout), shape.to_string())});
  }
  if (!name.empty()) {
    if (tensor_by_name_.find(name, tensors_) >= 0) {
      graph_errors_.push_back({-1, where + "/name", fmt::format("duplicate tensor name '{}'", name)});
    } else {
      tensor_by_name_.insert(NameIndex::hash(name), t.id);
    }
  }
  TensorInfo info;
  info.name = std::move(name);
  info.layout = layout.value_or(default_layout_for_rank(shape.rank()));
  info.shape = std::move(shape);
  info.dtype = dtype;
  info.kind = kind;
  info.inferred = st.ok();
  tensors_.push_back(std::move(info));
  layout_given_.push_back(layout.has_value());
  return t;
}

Tensor Graph::declare_bound(const TensorInfo& info) {
  verified_ = false;
  Tensor t{static_cast<int32_t>(tensors_.size())};
  tensor_by_name_.insert(NameIndex::hash(info.name), t.id);
  tensors_.push_back(info);
  tensors_.back().producer = -1;
  tensors_.back().inferred = true;
  layout_given_.push_back(true);
  return t;
}

Tensor Graph::input(std::string name, Shape shape, DType dtype, std::optional<Layout> layout) {
  return declare(std::move(name), std::move(shape), dtype, layout, TensorKind::input);
}

Tensor Graph::parameter(std::string name, Shape shape, DType dtype, std::optional<Layout> layout) {
  return declare(std::move(name), std::move(shape), dtype, layout, TensorKind::parameter);
}

void Graph::output(Tensor t, std::string rename, std::optional<Layout> layout) {
  verified_ = false;
  std::string where = fmt::format("outputs/{}", outputs_.size());
  if (!t.valid() || static_cast<size_t>(t.id) >= tensors_.size()) {
    graph_errors_.push_back({-1, where, "output is an invalid tensor handle (an earlier builder call failed)"});
    return;
  }
  TensorInfo& info = tensors_[static_cast<size_t>(t.id)];
  if (!rename.empty() && rename != info.name) {
    if (tensor_by_name_.find(rename, tensors_) >= 0) {
      graph_errors_.push_back(
          {-1, where, fmt::format("cannot rename output '{}' to '{}': the name is taken", info.name, rename)});
    } else {
      tensor_by_name_.erase(info.name, tensors_);
      tensor_by_name_.insert(NameIndex::hash(rename), t.id);
      info.name = std::move(rename);
    }
  }
  if (layout) {
    info.layout = *layout;
    layout_given_[static_cast<size_t>(t.id)] = true;
  }
  outputs_.push_back(t);
}

// ---- the generic node builder -------------------------------------------------------------------------
std::string Graph::unique_node_name(std::string_view op) {
  for (size_t k = nodes_.size();; ++k) {
    std::string n = fmt::format("{}_{}", op, k);
    if (node_by_name_.find(n, nodes_) < 0 && tensor_by_name_.find(n, tensors_) < 0) return n;
  }
}

std::vector<Tensor> Graph::add_node(std::string_view op, const PortInputs& inputs, Attrs attrs, std::string name,
                                    const std::vector<std::pair<std::string, std::string>>& output_names) {
  verified_ = false;
  const int32_t idx = static_cast<int32_t>(nodes_.size());
  Node n;
  n.op_text = std::string(op);
  n.name = name.empty() ? unique_node_name(op) : std::move(name);
  auto err = [&](std::string field, std::string msg) {
    n.build_errors.push_back({idx, std::move(field), std::move(msg)});
  };
  // The node is indexed once it is in nodes_ (the index reads names from there).
  const bool fresh_name = node_by_name_.find(n.name, nodes_) < 0;
  if (!fresh_name) {
    err("name", fmt::format("duplicate node name '{}' (also node #{})", n.name, node_by_name_.find(n.name, nodes_)));
  }
  auto push_node = [&] {
    const uint32_t h = NameIndex::hash(n.name);
    nodes_.push_back(std::move(n));
    log_node(nodes_.back());
    if (fresh_name) node_by_name_.insert(h, idx);
  };

  // A fresh output tensor; a name already in use is reported and the tensor stays anonymous.
  auto make_output = [&](std::string_view port, std::string tname) {
    Tensor t{static_cast<int32_t>(tensors_.size())};
    if (const int32_t prev_id = tensor_by_name_.find(tname, tensors_); prev_id >= 0) {
      const TensorInfo& prev = tensors_[static_cast<size_t>(prev_id)];
      std::string by = prev.producer >= 0
                           ? fmt::format("node '{}'", nodes_[static_cast<size_t>(prev.producer)].name)
                           : fmt::format("the declaration in tensors (as {})", tensor_kind_name(prev.kind));
      err(fmt::format("outputs/{}", port),
          fmt::format("tensor '{}' is produced twice: already produced by {}", tname, by));
      tname.clear();
    } else {
      tensor_by_name_.insert(NameIndex::hash(tname), t.id);
    }
    TensorInfo info;
    info.name = std::move(tname);
    info.kind = TensorKind::intermediate;
    info.producer = idx;
    tensors_.push_back(std::move(info));
    layout_given_.push_back(false);
    n.outputs.push_back(t);
  };

  const OpDef* def = find_op(op);
  if (!def) {
    std::vector<std::string> valid;
    for (const OpDef& d : op_registry()) valid.emplace_back(d.name);
    err("op", fmt::format("unknown op '{}'; valid ops: {}", op, fmt::join(valid, ", ")));
    for (const auto& [port, tname] : output_names) make_output(port, tname);
    push_node();
    return nodes_.back().outputs;
  }
  n.op = def->id;
  n.inputs.resize(def->inputs.size());

  std::vector<bool> seen(def->inputs.size(), false);
  for (const auto& [port, ts] : inputs) {
    int pi = def->input_index(port);
    if (pi < 0) {
      std::vector<std::string> valid;
      for (const PortSpec& p : def->inputs) valid.push_back(fmt::format("'{}'", p.name));
      err(fmt::format("inputs/{}", port),
          fmt::format("unknown input port '{}': {} takes {}", port, def->name, fmt::join(valid, ", ")));
      continue;
    }
    const PortSpec& spec = def->inputs[static_cast<size_t>(pi)];
    if (seen[static_cast<size_t>(pi)]) {
      err(fmt::format("inputs/{}", port), fmt::format("input '{}' given twice", port));
      continue;
    }
    seen[static_cast<size_t>(pi)] = true;
    if (!spec.list && ts.size() != 1) {
      err(fmt::format("inputs/{}", port), fmt::format("expected one tensor, got {}", ts.size()));
      continue;
    }
    if (spec.list && ts.empty()) {
      err(fmt::format("inputs/{}", port), "expected a list of at least one tensor, got an empty list");
      continue;
    }
    bool ok = true;
    for (Tensor t : ts) {
      if (!t.valid() || static_cast<size_t>(t.id) >= tensors_.size()) {
        err(fmt::format("inputs/{}", port), "invalid tensor handle (an earlier builder call failed)");
        ok = false;
        break;
      }
    }
    if (!ok) continue;
    n.inputs[static_cast<size_t>(pi)] = ts;
    // A 4-D weight declared without a layout is a KCRS conv weight.
    for (Tensor t : ts) {
      TensorInfo& info = tensors_[static_cast<size_t>(t.id)];
      if (spec.weight4d && !layout_given_[static_cast<size_t>(t.id)] && info.kind != TensorKind::intermediate &&
          info.shape.rank() == 4) {
        info.layout = Layout::KCRS;
      }
    }
  }
  for (size_t pi = 0; pi < def->inputs.size(); ++pi) {
    const PortSpec& spec = def->inputs[pi];
    bool as_attr = spec.scalar_attr && attrs.count(std::string(spec.name));
    if (seen[pi] && as_attr) {
      err(fmt::format("inputs/{}", spec.name),
          fmt::format("input '{}' is given both as a tensor and as a scalar attribute", spec.name));
    } else if (!seen[pi] && !as_attr && !spec.optional) {
      err(fmt::format("inputs/{}", spec.name),
          spec.scalar_attr
              ? fmt::format("missing input '{}' (a tensor, or a number as attribute '{}')", spec.name, spec.name)
              : fmt::format("missing input '{}'", spec.name));
    }
  }
  n.attrs = normalize_attrs(*def, attrs, n.build_errors, idx);

  for (const auto& [port, tname] : output_names) {
    if (def->output_index(port) < 0) {
      err(fmt::format("outputs/{}", port), fmt::format("unknown output port '{}': {} writes 'y'", port, def->name));
    }
  }
  for (const PortSpec& out : def->outputs) {
    std::string tname;
    for (const auto& [port, given] : output_names) {
      if (port == out.name) tname = given;
    }
    if (tname.empty()) {
      tname = def->outputs.size() == 1 ? n.name : fmt::format("{}.{}", n.name, out.name);
      if (tensor_by_name_.find(tname, tensors_) >= 0) tname = fmt::format("{}.{}", n.name, out.name);
    }
    make_output(out.name, std::move(tname));
  }
  push_node();
  infer(idx);
  return nodes_.back().outputs;
}

std::vector<Tensor> Graph::append_verified_node(Node proto, std::vector<std::vector<Tensor>> inputs,
                                                std::vector<TensorInfo> output_types,
                                                std::vector<std::string> output_names) {
  verified_ = false;
  const int32_t idx = static_cast<int32_t>(nodes_.size());
  Node n;
  n.name = std::move(proto.name);
  n.op = proto.op;
  n.op_text = std::move(proto.op_text);
  n.inputs = std::move(inputs);
  n.attrs = std::move(proto.attrs);
  n.outputs.reserve(output_types.size());
  KILN_CHECK(node_by_name_.find(n.name, nodes_) < 0, fmt::format("pass created a second node '{}'", n.name));
  const uint32_t node_hash = NameIndex::hash(n.name);
  for (size_t k = 0; k < output_types.size(); ++k) {
    Tensor t{static_cast<int32_t>(tensors_.size())};
    TensorInfo info = std::move(output_types[k]);
    info.name = std::move(output_names[k]);
    info.kind = TensorKind::intermediate;
    info.producer = idx;
    info.inferred = true;
    KILN_CHECK(tensor_by_name_.find(info.name, tensors_) < 0,
               fmt::format("pass created a second tensor '{}'", info.name));
    tensor_by_name_.insert(NameIndex::hash(info.name), t.id);
    tensors_.push_back(std::move(info));
    layout_given_.push_back(false);
    n.outputs.push_back(t);
  }
  nodes_.push_back(std::move(n));
  log_node(nodes_.back());
  node_by_name_.insert(node_hash, idx);
  return nodes_.back().outputs;
}

void Graph::infer(int32_t idx) {
  Node& n = nodes_[static_cast<size_t>(idx)];
  n.infer_errors.clear();
  for (Tensor t : n.outputs) tensors_[static_cast<size_t>(t.id)].inferred = false;
  if (!n.op || !n.build_errors.empty()) return;
  for (const auto& port : n.inputs) {
    for (Tensor t : port) {
      // An input whose shape is unknown was already reported where it was made.
      if (!tensors_[static_cast<size_t>(t.id)].inferred) return;
    }
  }
  const OpDef& def = op_def(*n.op);
  InferCtx ctx(def, n, tensors_);
  def.infer(ctx);
  if (!ctx.failed() && ctx.outputs().size() != n.outputs.size()) {
    KILN_CHECK(false,
               fmt::format("shape rule of {} set {} of {} outputs", def.name, ctx.outputs().size(), n.outputs.size()));
  }
  if (ctx.failed()) {
    for (Diagnostic& d : ctx.errors()) {
      d.node = idx;
      n.infer_errors.push_back(std::move(d));
    }
    return;
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    TensorInfo& t = tensors_[static_cast<size_t>(n.outputs[k].id)];
    const TensorInfo& o = ctx.outputs()[k];
    t.shape = o.shape;
    t.dtype = o.dtype;
    if (!layout_given_[static_cast<size_t>(n.outputs[k].id)]) t.layout = o.layout;
    t.inferred = true;
  }
}

// ---- checking -----------------------------------------------------------------------------------------
std::vector<Diagnostic> Graph::check() {
  if (verified_) return {};
  KILN_CHECK(log_matches_nodes(),
             "graph: the operand log is out of step with the nodes (a pass edited nodes "
             "without GraphEditor)");
  for (size_t i = 0; i < nodes_.size(); ++i) infer(static_cast<int32_t>(i));
  std::vector<Diagnostic> out = graph_errors_;
  for (const Node& n : nodes_) {
    out.insert(out.end(), n.build_errors.begin(), n.build_errors.end());
    out.insert(out.end(), n.infer_errors.begin(), n.infer_errors.end());
  }
  if (outputs_.empty()) out.push_back({-1, "outputs", "the graph has no outputs"});
  std::set<int32_t> listed;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const TensorInfo& t = tensors_[static_cast<size_t>(outputs_[k].id)];
    std::string where = fmt::format("outputs/{}", k);
    if (t.kind != TensorKind::intermediate) {
      out.push_back({-1, where,
                     fmt::format("output '{}' is a graph {}; outputs must be produced by a node", t.name,
                                 tensor_kind_name(t.kind))});
    }
    if (!listed.insert(outputs_[k].id).second) {
      out.push_back({-1, where, fmt::format("output '{}' is listed twice", t.name)});
    }
    if (t.inferred && layout_given_[static_cast<size_t>(outputs_[k].id)] && layout_rank(t.layout) > 0 &&
        layout_rank(t.layout) != t.shape.rank()) {
      out.push_back({-1, where,
                     fmt::format("output '{}': layout {} needs {} dims, got {}", t.name, layout_name(t.layout),
                                 layout_rank(t.layout), t.shape.to_string())});
    }
  }
  verified_ = out.empty();
  return out;
}

std::string Graph::format_diagnostic(const Graph& g, const Diagnostic& d) {
  if (d.node < 0) return d.message;
  const Node& n = g.nodes()[static_cast<size_t>(d.node)];
  std::string who = fmt::format("node '{}' ({})", n.name, n.op_text);
  if (d.field.rfind("inputs/", 0) == 0) return fmt::format("{} input '{}': {}", who, d.field.substr(7), d.message);
  if (d.field.rfind("outputs/", 0) == 0) return fmt::format("{} output '{}': {}", who, d.field.substr(8), d.message);
  return fmt::format("{}: {}", who, d.message);
}

Status Graph::verify() {
  std::vector<Diagnostic> ds = check();
  if (ds.empty()) return {};
  std::string msg;
  for (size_t i = 0; i < ds.size(); ++i) msg += (i ? "\n" : "") + format_diagnostic(*this, ds[i]);
  return invalid_argument(std::move(msg));
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
  return same_list(outputs_, o.outputs_);
}

}  // namespace kiln
