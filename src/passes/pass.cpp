// Uses and Rewriter: the shared machinery of the passes.
#include "passes/pass.h"

#include <fmt/format.h>

namespace kiln {

Uses::Uses(const Graph& g)
    : is_output_(g.tensors().size(), false),
      start_(g.tensors().size() + 1, 0),
      in_start_(g.log_.in_start),
      out_start_(g.log_.out_start),
      ins_(g.log_.ins),
      outs_(g.log_.outs),
      ops_(g.log_.ops) {
  KILN_CHECK(in_start_.size() == g.nodes().size() + 1 && out_start_.size() == g.nodes().size() + 1 &&
                 ops_.size() == g.nodes().size(),
             "Uses: the graph's operand log does not match its nodes");
  index_readers(g);
}

void Uses::index_readers(const Graph& g) {
  const size_t nn = in_start_.size() - 1;
  for (Tensor t : ins_) ++start_[static_cast<size_t>(t.id) + 1];
  for (size_t t = 0; t < g.tensors().size(); ++t) start_[t + 1] += start_[t];
  readers_.resize(static_cast<size_t>(start_.back()));
  std::vector<int32_t> fill(start_.begin(), start_.end() - 1);
  for (size_t i = 0; i < nn; ++i)
    for (Tensor t : inputs(i))
      readers_[static_cast<size_t>(fill[static_cast<size_t>(t.id)]++)] = static_cast<int32_t>(i);
  for (Tensor t : g.outputs()) is_output_[t] = true;
  producer_.assign(g.tensors().size(), -1);
  for (int32_t i = 0; i < static_cast<int32_t>(nn); ++i)
    for (Tensor t : outputs(i)) producer_[t] = i;
}

const Uses& PassContext::uses(const Graph& g) {
  if (uses_ && uses_of_ == &g) {
    // A pass that rebuilt the graph without calling graph_changed() would hand stale facts to the next.
    KILN_CHECK(uses_->node_count() == g.nodes().size() && uses_->tensor_count() == g.tensors().size(),
               "PassContext::uses: the graph changed but no pass called graph_changed()");
    return *uses_;
  }
  uses_.emplace(g);
  uses_of_ = &g;
  return *uses_;
}

Rewriter::Rewriter(const Graph& old) : old_(old), g_(old.name()), map_(old.tensors().size()) {
  // Passes add a few nodes at most per node (conversions): room for a third more avoids regrowing.
  g_.reserve(old.tensors().size() * 4 / 3 + 16, old.nodes().size() * 4 / 3 + 16);
  for (size_t t = 0; t < old.tensors().size(); ++t) {
    const TensorInfo& info = old.tensors()[t];
    if (info.kind != TensorKind::intermediate) set_map(Tensor{static_cast<int32_t>(t)}, g_.declare_bound(info));
  }
}

Rewriter::Rewriter(Graph& old, Consume) : Rewriter(static_cast<const Graph&>(old)) { consumed_ = &old; }

void Rewriter::copy(int32_t i) { copy_with(i, {}, {}); }

std::vector<Tensor> Rewriter::copy_with(int32_t i, NodeInputs inputs, std::vector<std::string> names,
                                        std::vector<TensorInfo> types) {
  const Node& n = old_.node(i);
  if (inputs.empty()) {
    inputs.reserve(n.inputs.size());
    for (const auto& port : n.inputs) {
      std::vector<Tensor> ts;
      ts.reserve(port.size());
      for (Tensor t : port) ts.push_back(map(t));
      inputs.push_back(std::move(ts));
    }
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (types.size() <= k) types.push_back(take_type(n.outputs[k]));
    if (names.size() <= k) names.push_back(old_.tensor(n.outputs[k]).name);
  }
  Node proto;
  proto.name = n.name;  // the old graph's name index still reads it
  proto.op = n.op;
  if (consumed_) {
    Node& mine = consumed_->nodes_[static_cast<size_t>(i)];
    proto.op_text = std::move(mine.op_text);
    proto.attrs = std::move(mine.attrs);
  } else {
    proto.op_text = n.op_text;
    proto.attrs = n.attrs;
  }
  std::vector<Tensor> outs =
      g_.append_verified_node(std::move(proto), std::move(inputs), std::move(types), std::move(names));
  for (size_t k = 0; k < outs.size(); ++k) set_map(n.outputs[k], outs[k]);
  return outs;
}

NodeInputs Rewriter::take_inputs(int32_t i) {
  if (consumed_) return std::move(consumed_->nodes_[static_cast<size_t>(i)].inputs);
  return old_.node(i).inputs;
}

TensorInfo Rewriter::take_type(Tensor t) {
  const TensorInfo& info = old_.tensor(t);
  TensorInfo type;
  type.shape = consumed_ ? std::move(consumed_->tensors_[static_cast<size_t>(t.id)].shape) : info.shape;
  type.dtype = info.dtype;
  type.layout = info.layout;
  type.kind = info.kind;
  type.producer = info.producer;
  type.inferred = info.inferred;
  return type;
}

Tensor Rewriter::add(std::string_view op, const PortInputs& inputs, Attrs attrs, std::string name,
                     std::string output_name) {
  std::vector<Tensor> outs =
      g_.add_node(op, inputs, std::move(attrs), std::move(name), {{"y", std::move(output_name)}});
  KILN_CHECK(outs.size() == 1 && g_.nodes().back().build_errors.empty() && g_.nodes().back().infer_errors.empty(),
             fmt::format("pass built an invalid {} node", op));
  return outs[0];
}

Tensor Rewriter::add_known(OpId op, NodeInputs inputs, Attrs attrs, std::string name, TensorInfo type,
                           std::string output_name) {
  Node proto;
  proto.name = std::move(name);
  proto.op = op;
  proto.op_text = std::string(op_name(op));
  proto.attrs = std::move(attrs);
  std::vector<TensorInfo> types(1);
  types[0] = std::move(type);
  std::vector<std::string> names(1);
  names[0] = std::move(output_name);
  return g_.append_verified_node(std::move(proto), std::move(inputs), std::move(types), std::move(names))[0];
}

std::string Rewriter::fresh_name(const std::string& base) {
  auto taken = [&](const std::string& n) {
    return old_.find_tensor(n) || g_.find_tensor(n) || old_.find_node(n) || g_.find_node(n);
  };
  if (!taken(base)) return base;
  for (int k = 1;; ++k) {
    std::string n = fmt::format("{}.{}", base, k);
    if (!taken(n)) return n;
  }
}

Graph Rewriter::finish() {
  for (Tensor t : old_.outputs()) {
    const TensorInfo& info = old_.tensor(t);
    g_.output(map(t), info.name, info.layout);
  }
  return std::move(g_);
}

// ---- GraphEditor ----------------------------------------------------------------------------------------

GraphEditor::GraphEditor(Graph& g) : g_(g), old_nodes_(g.nodes().size()) {
  g_.verified_ = false;
  // Room for a conversion per four nodes without regrowing the tensor array (each regrowth moves every
  // tensor of a big graph).
  const size_t room = g.tensors().size() + old_nodes_ / 4 + 16;
  if (g_.tensors_.capacity() < room) g_.tensors_.reserve(room);
  added_.reserve(old_nodes_ / 4 + 16);
  in_start_.reserve(old_nodes_ + 1);
  out_start_.reserve(old_nodes_ + 1);
  ins_.reserve(2 * old_nodes_);
  outs_.reserve(old_nodes_);
  ops_.reserve(old_nodes_);
  recorded_.reserve(old_nodes_);
}

Node& GraphEditor::node(int32_t i) {
  const size_t k = static_cast<size_t>(i);
  return k < old_nodes_ ? g_.nodes_[k] : added_[k - old_nodes_];
}

Tensor GraphEditor::push_tensor(TensorInfo type, std::string name, int32_t producer) {
  KILN_CHECK(!g_.find_tensor(name), fmt::format("pass created a second tensor '{}'", name));
  const Tensor y{static_cast<int32_t>(g_.tensors_.size())};
  type.name = std::move(name);
  type.kind = TensorKind::intermediate;
  type.producer = producer;
  type.inferred = true;
  g_.tensor_by_name_.insert(Graph::NameIndex::hash(type.name), y.id);
  g_.tensors_.push_back(std::move(type));
  g_.layout_given_.push_back(false);
  return y;
}

Tensor GraphEditor::add_known(int32_t before, OpId op, NodeInputs inputs, Attrs attrs, std::string name,
                              TensorInfo type, std::string output_name) {
  const Tensor y =
      push_tensor(std::move(type), std::move(output_name), static_cast<int32_t>(old_nodes_ + added_.size()));
  add_known_writing(before, op, std::move(inputs), std::move(attrs), std::move(name), y);
  return y;
}

int32_t GraphEditor::add_known_writing(int32_t before, OpId op, NodeInputs inputs, Attrs attrs, std::string name,
                                       Tensor y) {
  KILN_CHECK(before >= 0 && static_cast<size_t>(before) <= old_nodes_ &&
                 (added_before_.empty() || added_before_.back() <= before),
             "GraphEditor::add_known: nodes must be added in order of position");
  KILN_CHECK(!g_.find_node(name) && added_by_name_.find(name, added_) < 0,
             fmt::format("pass created a second node '{}'", name));
  const int32_t idx = static_cast<int32_t>(old_nodes_ + added_.size());
  g_.tensors_[static_cast<size_t>(y.id)].producer = idx;
  Node n;
  n.name = std::move(name);
  n.op = op;
  n.op_text = std::string(op_name(op));
  n.inputs = std::move(inputs);
  n.outputs = {y};
  n.attrs = std::move(attrs);
  added_by_name_.insert(Graph::NameIndex::hash(n.name), static_cast<int32_t>(added_.size()));
  added_.push_back(std::move(n));
  added_before_.push_back(before);
  return idx;
}

Tensor GraphEditor::new_output(int32_t i, std::string name) {
  KILN_CHECK(i >= 0 && static_cast<size_t>(i) < old_nodes_, "GraphEditor::new_output: not an old node");
  Node& n = g_.nodes_[static_cast<size_t>(i)];
  const Tensor t = push_tensor(g_.tensors_[static_cast<size_t>(n.outputs[0].id)], std::move(name), i);
  n.outputs[0] = t;
  return t;
}

void GraphEditor::rename(Tensor t, std::string name) {
  TensorInfo& info = g_.tensors_[static_cast<size_t>(t.id)];
  if (name == info.name) return;
  KILN_CHECK(!g_.find_tensor(name), fmt::format("pass renamed a tensor to the taken name '{}'", name));
  g_.tensor_by_name_.erase(info.name, g_.tensors_);
  g_.tensor_by_name_.insert(Graph::NameIndex::hash(name), t.id);
  info.name = std::move(name);
}

void GraphEditor::replace_output(Tensor from, Tensor to) {
  for (Tensor& o : g_.outputs_)
    if (o == from) o = to;
}

std::string GraphEditor::fresh_name(const std::string& base) {
  auto taken = [&](const std::string& n) {
    return g_.find_tensor(n) || g_.find_node(n) || added_by_name_.find(n, added_) >= 0;
  };
  if (!taken(base)) return base;
  for (int k = 1;; ++k) {
    std::string n = fmt::format("{}.{}", base, k);
    if (!taken(n)) return n;
  }
}

void GraphEditor::record(int32_t i) {
  const Node& n = node(i);
  flat_.clear();
  for (const auto& port : n.inputs) flat_.insert(flat_.end(), port.begin(), port.end());
  record(i, *n.op, flat_, n.outputs);
}

void GraphEditor::record(int32_t i, OpId op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  recorded_.push_back(i);
  in_start_.push_back(static_cast<int32_t>(ins_.size()));
  out_start_.push_back(static_cast<int32_t>(outs_.size()));
  ins_.insert(ins_.end(), inputs.begin(), inputs.end());
  outs_.insert(outs_.end(), outputs.begin(), outputs.end());
  ops_.push_back(op);
}

Uses GraphEditor::commit() {
  const size_t total = old_nodes_ + added_.size();
  KILN_CHECK(recorded_.size() == total, "GraphEditor::commit: not every node was recorded");
  // perm[old or added index] = final position. The node array grows in place and is filled from the back
  // (an old node only ever moves to a later position), so nodes move once and nothing they own is copied.
  std::vector<int32_t> perm(total);
  std::vector<Node>& nodes = g_.nodes_;
  nodes.resize(total);
  size_t dst = total, k = added_.size();
  auto place_added_before = [&](size_t i) {
    for (; k > 0 && static_cast<size_t>(added_before_[k - 1]) == i; --k) {
      perm[old_nodes_ + k - 1] = static_cast<int32_t>(--dst);
      nodes[dst] = std::move(added_[k - 1]);
    }
  };
  place_added_before(old_nodes_);
  for (size_t i = old_nodes_; i-- > 0;) {
    perm[i] = static_cast<int32_t>(--dst);
    if (dst != i) nodes[dst] = std::move(nodes[i]);
    place_added_before(i);
  }
  for (size_t j = 0; j < total; ++j)
    KILN_CHECK(perm[static_cast<size_t>(recorded_[j])] == static_cast<int32_t>(j),
               "GraphEditor::commit: nodes were recorded out of their final order");
  g_.node_by_name_.renumber(perm);
  for (size_t a = 0; a < added_.size(); ++a)
    g_.node_by_name_.insert(Graph::NameIndex::hash(g_.nodes_[static_cast<size_t>(perm[old_nodes_ + a])].name),
                            perm[old_nodes_ + a]);
  for (TensorInfo& t : g_.tensors_)
    if (t.producer >= 0) t.producer = perm[static_cast<size_t>(t.producer)];
  added_.clear();
  g_.verified_ = false;
  in_start_.push_back(static_cast<int32_t>(ins_.size()));
  out_start_.push_back(static_cast<int32_t>(outs_.size()));
  g_.log_ = {std::move(ops_), std::move(in_start_), std::move(out_start_), std::move(ins_), std::move(outs_)};
  return Uses(g_);
}

}  // namespace kiln
