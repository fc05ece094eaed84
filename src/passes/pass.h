// What every pass shares: its context and the Rewriter that builds a pass's output graph.
//
// A pass is a free function `Status pass_name(Graph&, PassContext&)` in its own file pair. Passes that
// change the graph's structure build a new graph with a Rewriter and swap it in: nodes stay in
// topological order and every tensor keeps its name unless the pass says otherwise.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/plan.h"

namespace kiln {

struct PassContext {
  PlanOptions options;
  Plan* plan = nullptr;  // fusion and memory planning fill it
};

// Facts about a graph's use of its tensors, computed once per pass.
struct Uses {
  explicit Uses(const Graph& g);
  // The nodes reading a tensor, in node order (a node once per read).
  std::span<const int32_t> consumers(size_t tensor) const {
    return {readers_.data() + start_[tensor], readers_.data() + start_[tensor + 1]};
  }
  std::vector<bool> is_output;  // per tensor: a graph output

 private:
  std::vector<int32_t> start_, readers_;  // compressed rows: readers of tensor t are [start_[t], start_[t+1])
};

class Rewriter {
 public:
  // Starts the new graph with the old graph's name, inputs and parameters (same order, names and types).
  explicit Rewriter(const Graph& old);

  // The new tensor standing for an old one.
  Tensor map(Tensor old) const { return map_[static_cast<size_t>(old.id)]; }
  void set_map(Tensor old, Tensor now) { map_[static_cast<size_t>(old.id)] = now; }
  Graph& graph() { return g_; }

  // Copies old node `i` reading the mapped inputs; its outputs keep their names and types.
  void copy(int32_t i);
  // Copies old node `i` with other inputs, output names and/or output types (empty: keep). The caller
  // vouches for the types; verify() re-infers them when PlanOptions::verify_after_each_pass is set.
  std::vector<Tensor> copy_with(int32_t i, std::vector<std::vector<Tensor>> inputs, std::vector<std::string> names = {},
                                std::vector<TensorInfo> types = {});
  // Adds a new node through the checked builder (attributes normalized, shapes inferred).
  Tensor add(std::string_view op, const PortInputs& inputs, Attrs attrs, std::string name, std::string output_name);
  // Adds a new node whose output type the pass knows (no normalization or inference: attrs must be
  // complete and normalized; verify-after-pass re-checks it in tests). For hot paths such as conversions.
  Tensor add_known(OpId op, std::vector<std::vector<Tensor>> inputs, Attrs attrs, std::string name, TensorInfo type,
                   std::string output_name);
  // A name not yet used by any tensor or node of the old or the new graph, starting from `base`.
  std::string fresh_name(const std::string& base);

  // Marks the old graph's outputs (mapped) with their names and declared layouts; returns the new graph.
  Graph finish();

 private:
  const Graph& old_;
  Graph g_;
  std::vector<Tensor> map_;
};

}  // namespace kiln
