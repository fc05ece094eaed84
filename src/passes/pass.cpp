// Uses and Rewriter: the shared machinery of the passes.
#include "passes/pass.h"

#include <fmt/format.h>

namespace kiln {

Uses::Uses(const Graph& g) : is_output(g.tensors().size(), false), start_(g.tensors().size() + 1, 0) {
  for (const Node& n : g.nodes())
    for (const auto& port : n.inputs)
      for (Tensor t : port) ++start_[static_cast<size_t>(t.id) + 1];
  for (size_t t = 0; t < g.tensors().size(); ++t) start_[t + 1] += start_[t];
  readers_.resize(static_cast<size_t>(start_.back()));
  std::vector<int32_t> fill(start_.begin(), start_.end() - 1);
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (const auto& port : g.nodes()[i].inputs)
      for (Tensor t : port) readers_[static_cast<size_t>(fill[static_cast<size_t>(t.id)]++)] = static_cast<int32_t>(i);
  for (Tensor t : g.outputs()) is_output[static_cast<size_t>(t.id)] = true;
}

Rewriter::Rewriter(const Graph& old) : old_(old), g_(old.name()), map_(old.tensors().size()) {
  // Passes add a few nodes at most per node (conversions): room for a third more avoids regrowing.
  g_.reserve(old.tensors().size() * 4 / 3 + 16, old.nodes().size() * 4 / 3 + 16);
  for (Tensor t : old.bound_tensors()) {
    const TensorInfo& info = old.tensor(t);
    Tensor now = info.kind == TensorKind::input ? g_.input(info.name, info.shape, info.dtype, info.layout)
                                                : g_.parameter(info.name, info.shape, info.dtype, info.layout);
    set_map(t, now);
  }
}

void Rewriter::copy(int32_t i) { copy_with(i, {}, {}); }

std::vector<Tensor> Rewriter::copy_with(int32_t i, std::vector<std::vector<Tensor>> inputs,
                                        std::vector<std::string> names, std::vector<TensorInfo> types) {
  const Node& n = old_.nodes()[static_cast<size_t>(i)];
  if (inputs.empty()) {
    for (const auto& port : n.inputs) {
      std::vector<Tensor> ts;
      for (Tensor t : port) ts.push_back(map(t));
      inputs.push_back(std::move(ts));
    }
  }
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    if (types.size() <= k) types.push_back(old_.tensor(n.outputs[k]));
    if (names.size() <= k) names.push_back(old_.tensor(n.outputs[k]).name);
  }
  std::vector<Tensor> outs = g_.append_verified_node(n, std::move(inputs), types, names);
  for (size_t k = 0; k < outs.size(); ++k) set_map(n.outputs[k], outs[k]);
  return outs;
}

Tensor Rewriter::add(std::string_view op, const PortInputs& inputs, Attrs attrs, std::string name,
                     std::string output_name) {
  std::vector<Tensor> outs =
      g_.add_node(op, inputs, std::move(attrs), std::move(name), {{"y", std::move(output_name)}});
  KILN_CHECK(outs.size() == 1 && g_.nodes().back().build_errors.empty() && g_.nodes().back().infer_errors.empty(),
             fmt::format("pass built an invalid {} node", op));
  return outs[0];
}

Tensor Rewriter::add_known(OpId op, std::vector<std::vector<Tensor>> inputs, Attrs attrs, std::string name,
                           TensorInfo type, std::string output_name) {
  Node proto;
  proto.name = std::move(name);
  proto.op = op;
  proto.op_text = std::string(op_name(op));
  proto.attrs = std::move(attrs);
  return g_.append_verified_node(proto, std::move(inputs), {std::move(type)}, {std::move(output_name)})[0];
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

}  // namespace kiln
