// The generic node builder (Graph::add_node, which every typed builder and the JSON loader call) and the
// passes' builder of nodes already known to be valid (Graph::append_verified_node).
#include "kiln/graph.h"

#include <fmt/format.h>

#include "ir/names.h"
#include "ops/registry.h"

namespace kiln {

namespace {

// "unknown op 'x'; valid ops: ..." for an op the registry does not have.
std::string unknown_op_message(std::string_view op) {
  std::vector<std::string> valid;
  for (const OpDef& d : op_registry()) valid.emplace_back(d.name);
  return fmt::format("unknown op '{}'; valid ops: {}", op, fmt::join(valid, ", "));
}

// Checks the tensors given per input port against the op's ports: unknown ports, a port given twice, the
// wrong number of tensors, invalid handles (entries of `inputs` with such a problem are not bound), and
// ports neither given nor optional (nor given as a scalar attribute). Each problem is appended to `errors`
// for node `idx`. Returns, per entry of `inputs`, the index of the port it binds, or -1 when it is not
// bound. Kept apart from add_node because it needs nothing of the graph but its tensor count.
std::vector<int> check_input_ports(const OpDef& def, const PortInputs& inputs, const Attrs& attrs, size_t tensor_count,
                                   int32_t idx, std::vector<Diagnostic>& errors) {
  auto err = [&](std::string field, std::string msg) { errors.push_back({idx, std::move(field), std::move(msg)}); };
  std::vector<int> bound(inputs.size(), -1);
  std::vector<bool> seen(def.inputs.size(), false);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto& [port, ts] = inputs[k];
    int pi = def.input_index(port);
    if (pi < 0) {
      std::vector<std::string> valid;
      for (const PortSpec& p : def.inputs) valid.push_back(fmt::format("'{}'", p.name));
      err(fmt::format("inputs/{}", port),
          fmt::format("unknown input port '{}': {} takes {}", port, def.name, fmt::join(valid, ", ")));
      continue;
    }
    const PortSpec& spec = def.inputs[static_cast<size_t>(pi)];
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
      if (!t.valid() || static_cast<size_t>(t.id) >= tensor_count) {
        err(fmt::format("inputs/{}", port), "invalid tensor handle (an earlier builder call failed)");
        ok = false;
        break;
      }
    }
    if (ok) bound[k] = pi;
  }
  for (size_t pi = 0; pi < def.inputs.size(); ++pi) {
    const PortSpec& spec = def.inputs[pi];
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
  return bound;
}

}  // namespace

std::string Graph::unique_node_name(std::string_view op) {
  for (size_t k = nodes_.size();; ++k) {
    std::string n = fmt::format("{}{}_{}", name_scope_, op, k);
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
  if (std::string p = name_problem(n.name); !p.empty()) err("name", "node " + p);
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
      // The producer may be this node (two of its outputs given one name), which is not in nodes_ yet.
      std::string by = prev.producer == idx ? std::string("this node")
                       : prev.producer >= 0
                           ? fmt::format("node '{}'", nodes_[static_cast<size_t>(prev.producer)].name)
                           : fmt::format("the declaration in tensors (as {})", tensor_kind_name(prev.kind));
      err(fmt::format("outputs/{}", port),
          fmt::format("tensor '{}' is produced twice: already produced by {}", tname, by));
      tname.clear();
    } else if (std::string p = name_problem(tname); !p.empty()) {
      err(fmt::format("outputs/{}", port), "tensor " + p);
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
    err("op", unknown_op_message(op));
    for (const auto& [port, tname] : output_names) make_output(port, tname);
    push_node();
    return nodes_.back().outputs;
  }
  n.op = def->id;
  n.inputs.resize(def->inputs.size());

  const std::vector<int> bound = check_input_ports(*def, inputs, attrs, tensors_.size(), idx, n.build_errors);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (bound[k] < 0) continue;
    const PortSpec& spec = def->inputs[static_cast<size_t>(bound[k])];
    const std::vector<Tensor>& ts = inputs[k].second;
    n.inputs[static_cast<size_t>(bound[k])] = ts;
    // A 4-D weight declared without a layout is a KCRS conv weight.
    for (Tensor t : ts) {
      TensorInfo& info = tensors_[static_cast<size_t>(t.id)];
      if (spec.weight4d && !layout_given_[static_cast<size_t>(t.id)] && info.kind != TensorKind::intermediate &&
          info.shape.rank() == 4) {
        info.layout = Layout::KCRS;
      }
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

std::vector<Tensor> Graph::append_verified_node(Node proto, NodeInputs inputs, std::vector<TensorInfo> output_types,
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

}  // namespace kiln
