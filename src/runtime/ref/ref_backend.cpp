// The reference backend: walks the graph node by node, calling each registry row's f64 implementation.
#include "kiln/reference.h"

#include <fmt/format.h>

#include "ops/registry.h"

namespace kiln {

Status check_bindings(const Graph& g, const TensorMap& inputs) {
  std::string errors;
  auto add = [&](std::string e) { errors += (errors.empty() ? "" : "\n") + e; };
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    auto it = inputs.find(info.name);
    if (it == inputs.end()) {
      add(fmt::format("{} '{}' is not bound (expected {} {})", tensor_kind_name(info.kind), info.name,
                      info.shape.to_string(), dtype_name(info.dtype)));
      continue;
    }
    const HostTensor& h = it->second;
    if (h.shape != info.shape) {
      add(fmt::format("{} '{}': expected shape {}, got {}", tensor_kind_name(info.kind), info.name,
                      info.shape.to_string(), h.shape.to_string()));
    } else if (h.dtype != info.dtype) {
      add(fmt::format("{} '{}': expected dtype {}, got {}", tensor_kind_name(info.kind), info.name,
                      dtype_name(info.dtype), dtype_name(h.dtype)));
    } else if (h.numel() != info.shape.numel()) {
      add(fmt::format("{} '{}': expected {} values for shape {}, got {}", tensor_kind_name(info.kind), info.name,
                      info.shape.numel(), info.shape.to_string(), h.numel()));
    }
  }
  for (const auto& [name, h] : inputs) {
    auto t = g.find_tensor(name);
    if (!t || g.tensor(*t).kind == TensorKind::intermediate) {
      std::vector<std::string> valid;
      for (Tensor b : g.bound_tensors()) valid.push_back(g.tensor(b).name);
      add(fmt::format("unknown binding '{}': the graph's inputs and parameters are {}", name, fmt::join(valid, ", ")));
    }
  }
  if (errors.empty()) return {};
  return invalid_argument(std::move(errors));
}

Result<TensorMap> run_reference(const Graph& g, const TensorMap& inputs) {
  for (const Node& n : g.nodes()) {
    if (!n.op || !n.build_errors.empty() || !n.infer_errors.empty()) {
      return invalid_argument(fmt::format("graph '{}' has errors (node '{}'): run verify() first", g.name(), n.name));
    }
  }
  if (g.outputs().empty()) return invalid_argument(fmt::format("graph '{}' has no outputs", g.name()));
  KILN_RETURN_IF_ERROR(check_bindings(g, inputs));

  const size_t nt = g.tensors().size();
  std::vector<HostTensor> values(nt);
  // Free each intermediate after its last reader; outputs are kept.
  std::vector<int> last_use(nt, -1);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    for (const auto& port : g.nodes()[i].inputs)
      for (Tensor t : port) last_use[static_cast<size_t>(t.id)] = static_cast<int>(i);
  }
  for (Tensor t : g.outputs()) last_use[static_cast<size_t>(t.id)] = static_cast<int>(g.nodes().size());

  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    HostTensor& v = values[static_cast<size_t>(t.id)];
    v = inputs.find(info.name)->second;
    for (double& x : v.data) x = round_to_dtype(x, info.dtype);  // what a device would hold
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    const OpDef& def = op_def(*n.op);
    RefCtx ctx{n, {}, {}};
    for (const auto& port : n.inputs) {
      std::vector<const HostTensor*> ts;
      for (Tensor t : port) ts.push_back(&values[static_cast<size_t>(t.id)]);
      ctx.inputs.push_back(std::move(ts));
    }
    for (Tensor t : n.outputs) {
      const TensorInfo& info = g.tensor(t);
      values[static_cast<size_t>(t.id)] = HostTensor(info.shape, info.dtype);
      ctx.outputs.push_back(&values[static_cast<size_t>(t.id)]);
    }
    def.ref(def, ctx);
    for (const auto& port : n.inputs) {
      for (Tensor t : port) {
        auto ti = static_cast<size_t>(t.id);
        if (last_use[ti] == static_cast<int>(i) && g.tensors()[ti].kind == TensorKind::intermediate) {
          values[ti] = HostTensor();
        }
      }
    }
  }
  TensorMap out;
  for (Tensor t : g.outputs()) {
    HostTensor v = values[static_cast<size_t>(t.id)];
    for (double& x : v.data) x = round_to_dtype(x, v.dtype);  // as the output's store would round
    out.emplace(g.tensor(t).name, std::move(v));
  }
  return out;
}

}  // namespace kiln
