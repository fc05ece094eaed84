// Steps 2-4 of loading a graph from JSON (json_load.cpp has the overview): the Loader that reads a parsed
// document into a Graph and names every problem by its JSON path. Its parts live in one file each:
//   json_load.cpp           the entry points, the top level (format, version, name, sections)
//   json_load_tensors.cpp   /tensors: declarations
//   json_load_nodes.cpp     /nodes: reading op, name, inputs, outputs, attributes
//   json_load_build.cpp     /nodes: resolving input names (use-before-producer, cycles) and adding nodes
//   json_load_outputs.cpp   /outputs
//   json_load_problems.cpp  the graph's own checks turned into JSON paths, and the final message
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/graph.h"
#include "kiln/status.h"

namespace kiln::json_detail {

using json = nlohmann::json;

// An attribute no op has: added to a node with problems so that its shape is not inferred.
inline constexpr std::string_view kBrokenAttr = "#kiln-json-load-error";

struct InputRef {
  std::string tensor;
  std::string path_suffix;  // "" for a single name, "/<k>" for an element of a list
};

struct PortRefs {
  std::string port;
  std::vector<InputRef> refs;
  bool ok = true;
};

struct NodeSpec {
  std::string op = "?";  // "?" when the op is missing (reported)
  std::string name;      // "" = named automatically
  std::vector<PortRefs> inputs;
  std::vector<std::pair<std::string, std::string>> outputs;
  Attrs attrs;
  bool outputs_read = false;  // "outputs" was an object
  bool broken = false;        // a problem was reported: do not infer its shape
};

// One problem, sorted by where it is in the document and formatted once the graph is built.
struct Problem {
  int section = 0;     // 0 top level, 1 tensors, 2 nodes, 3 outputs
  int64_t index = -1;  // tensor, node or output index; -1 for the section as a whole
  std::string path;    // JSON pointer
  int32_t node = -1;   // a node's problems are worded by Graph::format_diagnostic (naming node and op)
  std::string field;
  std::string message;
};

class Loader {
 public:
  Result<Graph> load(const json& root);

 private:
  // ---- recording problems ----
  void top_problem(std::string path, std::string msg) {
    problems_.push_back({0, -1, std::move(path), -1, "", std::move(msg)});
  }
  void tensor_problem(size_t i, std::string path, std::string msg) {
    problems_.push_back({1, static_cast<int64_t>(i), std::move(path), -1, "", std::move(msg)});
  }
  void node_problem(size_t i, std::string field, std::string path, std::string msg) {
    problems_.push_back(
        {2, static_cast<int64_t>(i), std::move(path), static_cast<int32_t>(i), std::move(field), std::move(msg)});
  }
  void output_problem(int64_t k, std::string path, std::string msg) {
    problems_.push_back({3, k, std::move(path), -1, "", std::move(msg)});
  }

  // ---- the top level (json_load.cpp) ----
  bool read_header(const json& root);
  void read_dims(const json& dims);
  const json* section(const json& root, const char* key, const char* what);

  // ---- tensors (json_load_tensors.cpp) ----
  void read_tensors(const json& list);
  // Declares /tensors/i in the graph: a symbolic input, an input or a parameter.
  void declare(const std::string& name, const std::vector<DimExpr>& dims, bool symbolic, DType dtype,
               std::optional<Layout> layout, TensorKind kind);

  // ---- nodes: reading (json_load_nodes.cpp) ----
  std::vector<NodeSpec> read_nodes(const json& list);
  void read_node_inputs(const json& n, size_t i, NodeSpec& spec);
  void read_node_outputs(const json& n, size_t i, NodeSpec& spec);

  // ---- nodes: building (json_load_build.cpp) ----
  std::string display_name(const std::vector<NodeSpec>& specs, int32_t j) const;
  // Nodes that each node reads from (by the names of its inputs); computed when first needed.
  const std::vector<std::vector<int32_t>>& deps(const std::vector<NodeSpec>& specs);
  // A chain from node `from` to node `to` following what each node reads; empty when there is none.
  std::vector<int32_t> dependency_chain(const std::vector<NodeSpec>& specs, int32_t from, int32_t to);
  std::string unknown_tensor(const std::string& tname) const;
  std::optional<Tensor> resolve(const std::vector<NodeSpec>& specs, size_t i, const std::string& field,
                                const std::string& path, const std::string& tname);
  void build_nodes(std::vector<NodeSpec>& specs);

  // ---- outputs (json_load_outputs.cpp) ----
  void read_outputs(const json& list);

  // ---- the graph's own checks (json_load_problems.cpp) ----
  bool suppressed(const Diagnostic& d) const;
  static std::string field_path(const std::string& field);
  void check();
  Result<Graph> finish();

  Graph g_;
  std::vector<Problem> problems_;
  std::set<int64_t> broken_tensors_;                    // tensor entries with a reported problem
  std::set<std::string> declared_;                      // names in /tensors
  std::map<std::string, int32_t> producer_;             // tensor name -> first node that names it as output
  std::set<std::pair<int32_t, std::string>> suppress_;  // (node, field) already reported by the loader
  std::set<int32_t> suppress_inputs_;                   // nodes whose whole "inputs" was reported
  std::vector<int64_t> output_index_;                   // graph output k -> /outputs index
  std::vector<std::vector<int32_t>> deps_;              // see deps()
  bool output_problems_ = false;
  bool outputs_unreadable_ = false;
};

}  // namespace kiln::json_detail
