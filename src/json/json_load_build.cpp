// Loading a graph from JSON: resolving the nodes' input names (use before producer, cycles) and adding
// the nodes to the graph (see json_loader.h).
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "json/json_loader.h"
#include "json/json_messages.h"
#include "json/json_util.h"
#include "ops/registry.h"

namespace kiln::json_detail {

std::string Loader::display_name(const std::vector<NodeSpec>& specs, int32_t j) const {
  const NodeSpec& s = specs[static_cast<size_t>(j)];
  return s.name.empty() ? fmt::format("{}_{}", s.op, j) : s.name;
}

const std::vector<std::vector<int32_t>>& Loader::deps(const std::vector<NodeSpec>& specs) {
  if (deps_.size() == specs.size()) return deps_;
  deps_.assign(specs.size(), {});
  for (size_t k = 0; k < specs.size(); ++k) {
    for (const PortRefs& p : specs[k].inputs) {
      for (const InputRef& ref : p.refs) {
        if (declared_.count(ref.tensor)) continue;
        auto it = producer_.find(ref.tensor);
        if (it != producer_.end()) deps_[k].push_back(it->second);
      }
    }
  }
  return deps_;
}

std::vector<int32_t> Loader::dependency_chain(const std::vector<NodeSpec>& specs, int32_t from, int32_t to) {
  const std::vector<std::vector<int32_t>>& d = deps(specs);
  constexpr int32_t kUnseen = -2;
  std::vector<int32_t> parent(specs.size(), kUnseen);
  parent[static_cast<size_t>(from)] = -1;
  std::vector<int32_t> stack{from};
  while (!stack.empty()) {
    int32_t k = stack.back();
    stack.pop_back();
    if (k == to) {
      std::vector<int32_t> chain;
      for (int32_t c = to; c != -1; c = parent[static_cast<size_t>(c)]) chain.push_back(c);
      std::reverse(chain.begin(), chain.end());
      return chain;
    }
    for (int32_t n : d[static_cast<size_t>(k)]) {
      if (parent[static_cast<size_t>(n)] == kUnseen) {
        parent[static_cast<size_t>(n)] = k;
        stack.push_back(n);
      }
    }
  }
  return {};
}

std::string Loader::unknown_tensor(const std::string& tname) const {
  return fmt::format("unknown tensor '{}': it is not declared in /tensors and no node produces it{}", tname,
                     outputs_unreadable_ ? " (the outputs of some node could not be read)" : "");
}

std::optional<Tensor> Loader::resolve(const std::vector<NodeSpec>& specs, size_t i, const std::string& field,
                                      const std::string& path, const std::string& tname) {
  if (auto t = g_.find_tensor(tname)) return *t;
  auto it = producer_.find(tname);
  const int32_t self = static_cast<int32_t>(i);
  if (it != producer_.end() && it->second < self) {
    // An earlier node names it as an output, but could not make it (an unknown port, a name taken):
    // that node's problem is reported already.
    return std::nullopt;
  }
  if (it == producer_.end()) {
    node_problem(i, field, path, unknown_tensor(tname));
    return std::nullopt;
  }
  const int32_t j = it->second;
  if (j == self) {
    node_problem(
        i, field, path,
        fmt::format("tensor '{}' is this node's own output: a node cannot read what it writes (a cycle)", tname));
    return std::nullopt;
  }
  // j reads (through the chain) from i. Looked for while the messages are still shown (it is linear in
  // the graph's size, and a large file may hold many such mistakes).
  std::vector<int32_t> chain;
  if (problems_.size() < kMaxErrorLines) chain = dependency_chain(specs, j, self);
  if (!chain.empty()) {
    std::string cycle;
    for (auto c = chain.rbegin(); c != chain.rend(); ++c) cycle += fmt::format("'{}' -> ", display_name(specs, *c));
    cycle += fmt::format("'{}'", display_name(specs, self));
    node_problem(i, field, path,
                 fmt::format("tensor '{}' comes from node '{}' (/nodes/{}), which depends on this node: a cycle {}",
                             tname, display_name(specs, j), j, cycle));
    return std::nullopt;
  }
  node_problem(i, field, path,
               fmt::format("tensor '{}' is used before it is produced: node '{}' (/nodes/{}) produces it later; list "
                           "each node after the nodes that produce its inputs",
                           tname, display_name(specs, j), j));
  return std::nullopt;
}

void Loader::build_nodes(std::vector<NodeSpec>& specs) {
  for (size_t i = 0; i < specs.size(); ++i) {
    NodeSpec& spec = specs[i];
    const int32_t self = static_cast<int32_t>(i);
    const std::string path = fmt::format("/nodes/{}", i);
    PortInputs inputs;
    for (const PortRefs& p : spec.inputs) {
      if (!p.ok) continue;
      const std::string field = "inputs/" + p.port;
      std::vector<Tensor> ts;
      bool ok = true;
      for (const InputRef& ref : p.refs) {
        auto t = resolve(specs, i, field, fmt::format("{}/inputs/{}{}", path, pointer_token(p.port), ref.path_suffix),
                         ref.tensor);
        if (t) {
          ts.push_back(*t);
        } else {
          ok = false;
        }
      }
      if (!ok) {
        spec.broken = true;
        suppress_.insert({self, field});
        continue;
      }
      inputs.emplace_back(p.port, std::move(ts));
    }
    if (const OpDef* def = find_op(spec.op)) {
      for (const PortSpec& out : def->outputs) {
        bool given =
            std::any_of(spec.outputs.begin(), spec.outputs.end(), [&](const auto& o) { return o.first == out.name; });
        if (!given && spec.outputs_read) {
          node_problem(
              i, fmt::format("outputs/{}", out.name), fmt::format("{}/outputs", path),
              fmt::format("missing: give the name of the tensor it writes, as in {{\"{}\": \"t1\"}}", out.name));
          spec.broken = true;
        }
      }
      if (spec.broken) {
        spec.attrs[std::string(kBrokenAttr)] = true;
        suppress_.insert({self, fmt::format("attrs/{}", kBrokenAttr)});
      }
    }
    g_.add_node(spec.op, inputs, std::move(spec.attrs), spec.name, spec.outputs);
  }
}

}  // namespace kiln::json_detail
