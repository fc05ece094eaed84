// The reference backend: walks the graph node by node, calling each registry row's f64 implementation.
#include "kiln/reference.h"

#include <fmt/format.h>

#include "ir/id_tables.h"
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

Result<TensorMap> run_reference(const Graph& g, const TensorMap& inputs) { return run_reference(g, inputs, {}); }

Result<TensorMap> run_reference(const Graph& g, const TensorMap& inputs, const ReferenceOptions& options) {
  if (g.is_symbolic()) return unbound_dims_error(g);
  for (const Node& n : g.nodes()) {
    if (!n.op || !n.build_errors.empty() || !n.infer_errors.empty()) {
      return invalid_argument(fmt::format("graph '{}' has errors (node '{}'): run verify() first", g.name(), n.name));
    }
  }
  if (g.outputs().empty()) return invalid_argument(fmt::format("graph '{}' has no outputs", g.name()));
  KILN_RETURN_IF_ERROR(check_bindings(g, inputs));

  const size_t nt = g.tensors().size();
  const int32_t node_count = static_cast<int32_t>(g.nodes().size());
  PerTensor<HostTensor> values(nt);
  // Free each intermediate after its last reader; outputs are kept.
  PerTensor<int32_t> last_use(nt, -1);
  for (int32_t i = 0; i < node_count; ++i) {
    for (const auto& port : g.node(i).inputs)
      for (Tensor t : port) last_use[t] = i;
  }
  for (Tensor t : g.outputs()) last_use[t] = node_count;

  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    HostTensor& v = values[t];
    v = inputs.find(info.name)->second;
    if (options.round_to_storage)
      for (double& x : v.data) x = round_to_dtype(x, info.dtype);  // what a device would hold
  }
  for (int32_t i = 0; i < node_count; ++i) {
    const Node& n = g.node(i);
    const OpDef& def = op_def(*n.op);
    RefCtx ctx{n, {}, {}};
    for (const auto& port : n.inputs) {
      std::vector<const HostTensor*> ts;
      for (Tensor t : port) ts.push_back(&values[t]);
      ctx.inputs.push_back(std::move(ts));
    }
    for (Tensor t : n.outputs) {
      const TensorInfo& info = g.tensor(t);
      values[t] = HostTensor(info.shape, info.dtype);
      ctx.outputs.push_back(&values[t]);
    }
    def.ref(def, ctx);
    for (const auto& port : n.inputs) {
      for (Tensor t : port) {
        if (last_use[t] == i && g.tensor(t).kind == TensorKind::intermediate) values[t] = HostTensor();
      }
    }
  }
  TensorMap out;
  for (Tensor t : g.outputs()) {
    HostTensor v = values[t];
    if (options.round_to_storage)
      for (double& x : v.data) x = round_to_dtype(x, v.dtype);  // as the output's store would round
    out.emplace(g.tensor(t).name, std::move(v));
  }
  return out;
}

}  // namespace kiln
