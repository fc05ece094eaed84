// Graph <-> bytes (src/ir/graph_codec.h). The layout: name, binding flag, tensors, nodes, outputs, each list
// a u64 count then its items; enums as their underlying value, checked against their counts on reading.
#include "ir/graph_codec.h"

#include <fmt/format.h>

#include "ops/registry.h"

namespace kiln {
namespace {

constexpr int kMaxCodecRank = 16;

void write_attr(support::ByteWriter& w, const AttrValue& v) {
  w.u8(static_cast<uint8_t>(v.index()));
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          w.i64(x);
        } else if constexpr (std::is_same_v<T, double>) {
          w.f64(x);
        } else if constexpr (std::is_same_v<T, bool>) {
          w.boolean(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          w.bytes(x);
        } else {
          w.u64(x.size());
          for (auto e : x) {
            if constexpr (std::is_same_v<T, std::vector<int64_t>>)
              w.i64(e);
            else
              w.f64(e);
          }
        }
      },
      v);
}

bool read_attr(support::ByteReader& r, AttrValue& v) {
  uint8_t index = 0;
  if (!r.u8(index)) return false;
  switch (index) {
    case 0: {
      int64_t x = 0;
      if (!r.i64(x)) return false;
      v = x;
      return true;
    }
    case 1: {
      double x = 0;
      if (!r.f64(x)) return false;
      v = x;
      return true;
    }
    case 2: {
      bool x = false;
      if (!r.boolean(x)) return false;
      v = x;
      return true;
    }
    case 3: {
      std::string x;
      if (!r.bytes(x)) return false;
      v = std::move(x);
      return true;
    }
    case 4:
    case 5: {
      uint64_t n = 0;
      if (!r.count(n, 8)) return false;
      std::vector<int64_t> ints;
      std::vector<double> floats;
      for (uint64_t i = 0; i < n; ++i) {
        if (index == 4 && !r.i64(ints.emplace_back())) return false;
        if (index == 5 && !r.f64(floats.emplace_back())) return false;
      }
      if (index == 4)
        v = std::move(ints);
      else
        v = std::move(floats);
      return true;
    }
    default: return r.fail();
  }
}

void write_tensors(support::ByteWriter& w, std::span<const Tensor> ts) {
  w.u64(ts.size());
  for (Tensor t : ts) w.i32(t.id);
}

// Reads a list of tensor ids, each below `limit`.
template <class List>
bool read_tensors(support::ByteReader& r, List& out, size_t limit) {
  uint64_t n = 0;
  if (!r.count(n, 4)) return false;
  for (uint64_t i = 0; i < n; ++i) {
    int32_t id = -1;
    if (!r.i32(id)) return false;
    if (id < 0 || static_cast<size_t>(id) >= limit) return r.fail();
    out.push_back(Tensor{id});
  }
  return true;
}

Status malformed(std::string_view what) {
  return Status(StatusCode::invalid_argument, fmt::format("malformed graph in a plan entry: {}", what));
}

// The node's ports and attributes are those its op's registry row defines (what the code reading a node
// assumes without checking: a missing attribute or port would stop kiln, not fail a read).
Status check_against_registry(const Node& n, int32_t index) {
  const OpDef& def = op_def(*n.op);
  if (n.inputs.size() != def.inputs.size() || n.outputs.size() != def.outputs.size()) {
    return malformed(fmt::format("node '{}' ({}): {} input and {} output ports, its op has {} and {}", n.name,
                                 op_name(*n.op), n.inputs.size(), n.outputs.size(), def.inputs.size(),
                                 def.outputs.size()));
  }
  for (size_t k = 0; k < def.inputs.size(); ++k) {
    const PortSpec& spec = def.inputs[k];
    const size_t given = n.inputs[k].size();
    // A port that may be given as a number instead (a binary op's mul(x, 2.0)) holds none then.
    const bool absent_ok = spec.optional || (spec.scalar_attr && n.attrs.count(std::string(spec.name)) != 0);
    if ((!spec.list && given > 1) || (!absent_ok && given == 0)) {
      return malformed(fmt::format("node '{}': port '{}' holds {} tensors", n.name, spec.name, given));
    }
  }
  std::vector<Diagnostic> errors;
  if (normalize_attrs(def, n.attrs, errors, index) != n.attrs || !errors.empty()) {
    return malformed(fmt::format("node '{}': attributes that are not its op's, normalized", n.name));
  }
  return {};
}

}  // namespace

bool GraphCodec::write(const Graph& g, support::ByteWriter& w) {
  if (g.symbolic_ || !g.graph_errors_.empty()) return false;
  for (const TensorInfo& t : g.tensors_) {
    if (t.shape.rank() > kMaxCodecRank) return false;  // read() refuses it
  }
  for (const Node& n : g.nodes_) {
    if (!n.op || !n.build_errors.empty() || !n.infer_errors.empty()) return false;
  }
  w.bytes(g.name_);
  w.boolean(g.binding_);
  w.u64(g.tensors_.size());
  for (size_t i = 0; i < g.tensors_.size(); ++i) {
    const TensorInfo& t = g.tensors_[i];
    w.bytes(t.name);
    w.u8(static_cast<uint8_t>(t.shape.rank()));
    for (int64_t d : t.shape.dims()) w.i64(d);
    w.u8(static_cast<uint8_t>(t.dtype));
    w.u8(static_cast<uint8_t>(t.layout));
    w.u8(static_cast<uint8_t>(t.kind));
    w.i32(t.producer);
    w.boolean(t.inferred);
    w.boolean(i < g.layout_given_.size() && g.layout_given_[i]);
  }
  w.u64(g.nodes_.size());
  for (const Node& n : g.nodes_) {
    w.bytes(n.name);
    w.u32(static_cast<uint32_t>(*n.op));
    w.bytes(n.op_text);
    w.u64(n.inputs.size());
    for (const PortTensors& port : n.inputs) write_tensors(w, {port.begin(), port.end()});
    write_tensors(w, {n.outputs.begin(), n.outputs.end()});
    w.u64(n.attrs.size());
    for (const auto& [name, value] : n.attrs) {
      w.bytes(name);
      write_attr(w, value);
    }
  }
  write_tensors(w, g.outputs_);
  return true;
}

Result<Graph> GraphCodec::read(support::ByteReader& r) {
  Graph g;
  uint64_t n_tensors = 0;
  if (!r.bytes(g.name_) || !r.boolean(g.binding_) || !r.count(n_tensors, 24)) return malformed("header");
  g.tensors_.resize(n_tensors);
  g.layout_given_.resize(n_tensors);
  g.tensor_by_name_.reserve(n_tensors);
  for (size_t i = 0; i < n_tensors; ++i) {
    TensorInfo& t = g.tensors_[i];
    uint8_t rank = 0, dtype = 0, layout = 0, kind = 0;
    bool given = false;
    if (!r.bytes(t.name) || !r.u8(rank) || rank > kMaxCodecRank) return malformed(fmt::format("tensor {}", i));
    std::vector<int64_t> dims(rank);
    for (int64_t& d : dims) {
      if (!r.i64(d) || d < 0) return malformed(fmt::format("tensor '{}': its dims", t.name));
    }
    t.shape = Shape(dims);
    if (!r.u8(dtype) || !r.u8(layout) || !r.u8(kind) || !r.i32(t.producer) || !r.boolean(t.inferred) ||
        !r.boolean(given) || dtype >= kDTypeCount || layout >= kLayoutCount ||
        kind > static_cast<uint8_t>(TensorKind::intermediate)) {
      return malformed(fmt::format("tensor '{}'", t.name));
    }
    t.dtype = static_cast<DType>(dtype), t.layout = static_cast<Layout>(layout), t.kind = static_cast<TensorKind>(kind);
    g.layout_given_[i] = given;
    if (g.tensor_by_name_.find(t.name, g.tensors_) >= 0) return malformed(fmt::format("tensor '{}' twice", t.name));
    g.tensor_by_name_.insert(Graph::NameIndex::hash(t.name), static_cast<int32_t>(i));
  }
  uint64_t n_nodes = 0;
  if (!r.count(n_nodes, 40)) return malformed("node count");
  g.nodes_.resize(n_nodes);
  g.node_by_name_.reserve(n_nodes);
  for (size_t i = 0; i < n_nodes; ++i) {
    Node& n = g.nodes_[i];
    uint32_t op = 0;
    uint64_t ports = 0, attrs = 0;
    if (!r.bytes(n.name) || !r.u32(op) || op >= static_cast<uint32_t>(kOpCount) || !r.bytes(n.op_text) ||
        !r.count(ports, 8)) {
      return malformed(fmt::format("node {}", i));
    }
    n.op = static_cast<OpId>(op);
    for (uint64_t p = 0; p < ports; ++p) {
      if (!read_tensors(r, n.inputs.emplace_back(), n_tensors))
        return malformed(fmt::format("node '{}': inputs", n.name));
    }
    if (!read_tensors(r, n.outputs, n_tensors) || !r.count(attrs, 9)) {
      return malformed(fmt::format("node '{}': outputs", n.name));
    }
    for (uint64_t a = 0; a < attrs; ++a) {
      std::string name;
      AttrValue value;
      if (!r.bytes(name) || !read_attr(r, value) || !n.attrs.emplace(std::move(name), std::move(value)).second) {
        return malformed(fmt::format("node '{}': attributes", n.name));
      }
    }
    if (Status bad = check_against_registry(n, static_cast<int32_t>(i)); !bad.ok()) return bad;
    for (Tensor t : n.outputs) {
      if (g.tensors_[static_cast<size_t>(t.id)].producer != static_cast<int32_t>(i)) {
        return malformed(fmt::format("node '{}': output '{}' has another producer", n.name, g.tensors_[t.id].name));
      }
    }
    if (g.node_by_name_.find(n.name, g.nodes_) >= 0) return malformed(fmt::format("node '{}' twice", n.name));
    g.node_by_name_.insert(Graph::NameIndex::hash(n.name), static_cast<int32_t>(i));
    g.log_node(n);
  }
  if (!read_tensors(r, g.outputs_, n_tensors)) return malformed("outputs");
  for (const TensorInfo& t : g.tensors_) {
    if (t.producer < -1 || t.producer >= static_cast<int32_t>(n_nodes) ||
        (t.producer == -1) != (t.kind != TensorKind::intermediate)) {
      return malformed(fmt::format("tensor '{}': its producer", t.name));
    }
  }
  return g;
}

}  // namespace kiln
