// What every pass shares: its context and the Rewriter that builds a pass's output graph.
//
// A pass is a free function `Status pass_name(Graph&, PassContext&)` in its own file pair. Passes that
// change the graph's structure build a new graph with a Rewriter and swap it in: nodes stay in
// topological order and every tensor keeps its name unless the pass says otherwise.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/id_tables.h"
#include "kiln/graph.h"
#include "kiln/plan.h"

namespace kiln {

// Facts about a graph's use of its tensors, and every node's operands in flat arrays, shared by the passes
// (PassContext::uses). Built from the graph's operand log (flat arrays kept as nodes are added), never from
// the nodes' own vectors: at 100k nodes a sweep over those is mostly cache misses.
struct Uses {
  explicit Uses(const Graph& g);
  // The nodes reading a tensor, in node order (a node once per read).
  std::span<const int32_t> consumers(Tensor t) const {
    const auto i = static_cast<size_t>(t.id);
    return {readers_.data() + start_[i], readers_.data() + start_[i + 1]};
  }
  // The tensors a node reads, its ports flattened in row order (as Node::inputs, a tensor once per read).
  std::span<const Tensor> inputs(int32_t node) const {
    const auto i = static_cast<size_t>(node);
    return {ins_.data() + in_start_[i], ins_.data() + in_start_[i + 1]};
  }
  // The tensors a node writes (as Node::outputs).
  std::span<const Tensor> outputs(int32_t node) const {
    const auto i = static_cast<size_t>(node);
    return {outs_.data() + out_start_[i], outs_.data() + out_start_[i + 1]};
  }
  // A node's op (as Node::op; set in every verified graph), without touching the node itself. Nodes are
  // indices into Graph::nodes() (int32_t, as TensorInfo::producer holds them), unchecked: the passes' loops.
  OpId op(int32_t node) const { return *ops_[static_cast<size_t>(node)]; }
  // The node writing a tensor, -1 for graph inputs and parameters (as TensorInfo::producer, from a flat
  // array instead of the tensor records).
  int32_t producer(Tensor t) const { return producer_[t]; }
  bool is_output(Tensor t) const { return is_output_[t]; }  // a graph output
  size_t node_count() const { return in_start_.size() - 1; }
  size_t tensor_count() const { return start_.size() - 1; }

 private:
  void index_readers(const Graph& g);  // start_, readers_ and is_output from the flat arrays
  PerTensor<int32_t> producer_;
  PerTensor<bool> is_output_;                  // per tensor
  std::vector<int32_t> start_, readers_;       // compressed rows: readers of tensor t are [start_[t], start_[t+1])
  std::vector<int32_t> in_start_, out_start_;  // the same per node over ins_ and outs_
  std::vector<Tensor> ins_, outs_;
  std::vector<std::optional<OpId>> ops_;
};

struct PassContext {
  PlanOptions options;
  Plan* plan = nullptr;  // fusion and memory planning fill it
  // Per node: planned alone and joined by nothing (set for the ops of a group no kernel family ran).
  std::vector<bool> isolated;

  // The Uses of `g`, built on the first request and kept until a pass that changes the graph's structure
  // calls graph_changed() (passes that only read, such as fusion and memory planning, share one).
  const Uses& uses(const Graph& g);
  void graph_changed() { uses_.reset(); }
  // For a pass that rebuilt the graph and knows its Uses already (Rewriter::take_uses).
  void graph_changed(const Graph& g, Uses uses) {
    uses_.emplace(std::move(uses));
    uses_of_ = &g;
  }

 private:
  std::optional<Uses> uses_;
  const Graph* uses_of_ = nullptr;
};

class Rewriter {
 public:
  // Starts the new graph with the old graph's name, inputs and parameters (same order, names and types).
  explicit Rewriter(const Graph& old);
  // The same for a pass that will replace `old` with the result: copied nodes take over their old
  // node's attributes and op text instead of copying them (a 100k-node graph would otherwise allocate
  // and free every attribute twice). The pass must not read a node's attributes after copying it.
  struct Consume {};
  static constexpr Consume consume{};
  Rewriter(Graph& old, Consume);

  // Old node `i`'s inputs (per port, old tensors) for the pass to map and hand to copy_with; moved out of
  // a consumed graph (the pass must not read that node's inputs again), copied otherwise.
  NodeInputs take_inputs(int32_t i);
  // Old tensor `t`'s type, without its name, for copy_with; a consumed graph's shape is moved out (the
  // pass must not read that tensor's shape again).
  TensorInfo take_type(Tensor t);

  // The new tensor standing for an old one.
  Tensor map(Tensor old) const { return map_[old]; }
  void set_map(Tensor old, Tensor now) { map_[old] = now; }
  Graph& graph() { return g_; }

  // Copies old node `i` reading the mapped inputs; its outputs keep their names and types.
  void copy(int32_t i);
  // Copies old node `i` with other inputs, output names and/or output types (empty: keep). The caller
  // vouches for the types; verify() re-infers them when PlanOptions::verify_after_each_pass is set.
  std::vector<Tensor> copy_with(int32_t i, NodeInputs inputs, std::vector<std::string> names = {},
                                std::vector<TensorInfo> types = {});
  // Adds a new node through the checked builder (attributes normalized, shapes inferred).
  Tensor add(std::string_view op, const PortInputs& inputs, Attrs attrs, std::string name, std::string output_name);
  // Adds a new node whose output type the pass knows (no normalization or inference: attrs must be
  // complete and normalized; verify-after-pass re-checks it in tests). For hot paths such as conversions.
  Tensor add_known(OpId op, NodeInputs inputs, Attrs attrs, std::string name, TensorInfo type, std::string output_name);
  // A name not yet used by any tensor or node of the old or the new graph, starting from `base`.
  std::string fresh_name(const std::string& base);

  // Marks the old graph's outputs (mapped) with their names and declared layouts; returns the new graph.
  Graph finish();
  // The Uses of the graph finish() returned (from its operand log, written as each node was added).
  Uses take_uses(const Graph& result) { return Uses(result); }

 private:
  const Graph& old_;
  Graph* consumed_ = nullptr;  // old_, when its nodes' attributes may be moved out
  Graph g_;
  PerTensor<Tensor> map_;
};

// Edits a graph in place, for a pass that keeps every node and tensor and adds a few nodes (layout
// assignment: retyping tensors, rewiring inputs, inserting conversions). Rebuilding a 100k-node graph with a
// Rewriter allocates every node's vectors and names again and re-indexes every name; editing touches only
// what changes. Tensor handles stay valid; added tensors get new ids after the existing ones.
//
// Added nodes wait aside until commit(), which moves every node to its final position: an added node
// stands right before the old node `before` it was added for (in the order added). Until then, added
// nodes are reached through node(), with the index add_known() gave their outputs as producer.
class GraphEditor {
 public:
  explicit GraphEditor(Graph& g);

  Graph& graph() { return g_; }
  size_t old_node_count() const { return old_nodes_; }
  // A node by index: an old node, or an added one (index >= old_node_count()).
  Node& node(int32_t i);
  // A tensor's type, to retype it in place (not its name: rename()).
  TensorInfo& tensor(Tensor t) { return g_.tensors_[static_cast<size_t>(t.id)]; }
  // Whether the tensor's layout is inferred (as for any intermediate) rather than declared by the user.
  void set_layout_given(Tensor t, bool given) { g_.layout_given_[static_cast<size_t>(t.id)] = given; }

  // A node of a verified kind whose output type the pass knows (attrs complete and normalized), to stand
  // before old node `before` (old_node_count(): after the last). Calls must come in order of `before`.
  Tensor add_known(int32_t before, OpId op, NodeInputs inputs, Attrs attrs, std::string name, TensorInfo type,
                   std::string output_name);
  // The same, writing the existing tensor `y` (which becomes its output; new_output() freed it). Returns the
  // added node's index (for record()).
  int32_t add_known_writing(int32_t before, OpId op, NodeInputs inputs, Attrs attrs, std::string name, Tensor y);
  // Gives old node `i` a new output tensor named `name`, of its current output's type, and returns it. The
  // old output keeps its name, type and readers, for an added node to write (add_known_writing): how a pass
  // puts a node after `i` without rewiring i's readers.
  Tensor new_output(int32_t i, std::string name);
  void rename(Tensor t, std::string name);
  // Every graph output reading `from` reads `to` instead.
  void replace_output(Tensor from, Tensor to);
  // A name no tensor or node has, starting from `base`.
  std::string fresh_name(const std::string& base);

  // Notes node `i`'s operands as final; every node, old and added, once, in its final order. They become
  // the edited graph's operand log (commit()), instead of another sweep over the nodes.
  void record(int32_t i);
  // The same for a node whose final operands the caller has at hand (no read of the node's vectors).
  void record(int32_t i, OpId op, std::span<const Tensor> inputs, std::span<const Tensor> outputs);
  // Moves the added nodes into place and writes the operand log; returns the graph's Uses.
  Uses commit();

 private:
  Graph& g_;
  size_t old_nodes_;
  Tensor push_tensor(TensorInfo type, std::string name, int32_t producer);  // a new intermediate
  std::vector<Node> added_;                                                 // added nodes, in order of `before`
  std::vector<int32_t> added_before_;  // per added node: the old node it stands before
  Graph::NameIndex added_by_name_;     // names of added nodes (the graph's index reads the graph's nodes)
  std::vector<int32_t> recorded_;      // node indices (old or old_nodes_ + k) in final order
  std::vector<std::optional<OpId>> ops_;
  std::vector<int32_t> in_start_, out_start_;
  std::vector<Tensor> ins_, outs_;
  std::vector<Tensor> flat_;  // record(i)'s scratch: a node's ports, flattened
};

}  // namespace kiln
