// KernelBuilder's pointwise emitter (codegen/kernel_builder.h): a chain of the group's pointwise ops and
// store transforms as f32 statements at a coordinate, and whether a chain can be emitted at all.
#include <cmath>

#include <fmt/format.h>

#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

std::string indent_str(int n) { return std::string(static_cast<size_t>(n), ' '); }

}  // namespace

// A store transform: the value is the input's; only where it lands changes (a layout conversion stores at
// the same coordinate, a transpose at the permuted one, a reshape at the row-major re-index). Broadcast
// values are stored by the threads at coordinate 0 of their broadcast dims only.
Result<std::string> KernelBuilder::emit_store_transform(const Node& nd, const std::vector<std::string>& coords,
                                                        std::map<int32_t, std::string>& values, const std::string& pad,
                                                        std::vector<std::string>* y_coords) {
  const int D = static_cast<int>(coords.size());
  const Tensor x = nd.inputs[0][0], y = nd.outputs[0];
  if (is_load_transform(nd)) {  // a view of memory: y is read through it at y's own coordinate
    if (!values.count(y.id)) values[y.id] = load(y, coords);
    return std::string();
  }
  if (!values.count(x.id)) values[x.id] = load(x, coords);
  const std::string v = values[x.id];
  values[y.id] = v;
  const Shape& xs = info(x).shape;
  const Shape& ysh = info(y).shape;
  std::vector<std::string> xc;  // x's coordinate inside the domain (broadcast dims read index 0)
  for (int i = 0; i < xs.rank(); ++i) {
    const int d = D - xs.rank() + i;
    xc.push_back(broadcast_dim(xs, i, d) ? std::string("0") : coords[static_cast<size_t>(d)]);
  }
  std::vector<std::string> yc;
  if (*nd.op == OpId::transpose) {
    for (int64_t p : std::get<std::vector<int64_t>>(nd.attrs.at("perm"))) yc.push_back(xc[static_cast<size_t>(p)]);
    if (y_coords) *y_coords = yc;  // where the chain continues past the transpose
  }
  if (!is_group_output(y)) return std::string();
  if (*nd.op == OpId::layout_convert) return pad + store(y, coords, v) + "\n";
  std::string out;
  if (*nd.op == OpId::reshape) {
    const std::string lin = fresh("lin");
    std::string e = "0LL";
    const auto rs = row_major_strides(xs);
    for (int i = 0; i < xs.rank(); ++i)
      e += fmt::format(" + (long long)({}) * {}", xc[static_cast<size_t>(i)], rs[static_cast<size_t>(i)]);
    out += pad + fmt::format("const long long {} = {};\n", lin, e);
    const auto ys = row_major_strides(ysh);
    for (int i = 0; i < ysh.rank(); ++i)
      yc.push_back(fmt::format("(int)(({} / {}) % {})", lin, ys[static_cast<size_t>(i)], ysh[i]));
  } else if (*nd.op != OpId::transpose) {
    return unsupported(
        fmt::format("node '{}' ({}): no kernel can apply it after a fused op", nd.name, op_name(*nd.op)));
  }
  std::string guard;
  for (int d = 0; d < D; ++d) {
    const int i = d - (D - xs.rank());
    if (i < 0 || broadcast_dim(xs, i, d))
      guard += fmt::format("{}({}) == 0", guard.empty() ? "" : " && ", coords[static_cast<size_t>(d)]);
  }
  return out + pad + store(y, yc, v, guard) + "\n";
}

Result<std::string> KernelBuilder::emit_pointwise(const std::vector<int32_t>& nodes,
                                                  const std::vector<std::string>& coords,
                                                  std::map<int32_t, std::string>& values, bool store_seeds,
                                                  int indent) {
  const std::string pad = indent_str(indent);
  std::string out;
  if (store_seeds) {
    for (const auto& [id, expr] : values) {
      const Tensor t{id};
      if (is_group_output(t)) out += pad + store(t, coords, expr) + "\n";
    }
  }

  // Values past a transpose of the chain (a matmul's transposed store followed by more epilogue) live at
  // the permuted coordinate: each node works at the coordinate of its in-group inputs.
  std::map<int32_t, std::vector<std::string>> moved;  // tensor id -> its coordinate, when not `coords`
  std::map<int32_t, bool> loaded_moved;               // operands loaded so far: at a moved coordinate?
  auto coords_of = [&](const Node& nd) -> const std::vector<std::string>& {
    for (const auto& port : nd.inputs)
      for (Tensor t : port)
        if (auto it = moved.find(t.id); it != moved.end()) return it->second;
    return coords;
  };
  for (int32_t best : canonical_order(nodes, values)) {
    const Node& nd = node(best);
    const OpDef& def = op_def(*nd.op);
    const Tensor y = nd.outputs[0];
    const TensorInfo& yi = info(y);
    const std::vector<std::string>& at_node = coords_of(nd);
    const bool is_moved = &at_node != &coords;

    if (def.kind == FusionKind::layout) {
      std::vector<std::string> y_coords;
      KILN_ASSIGN_OR_RETURN(std::string st, emit_store_transform(nd, at_node, values, pad, &y_coords));
      if (!y_coords.empty()) moved[y.id] = std::move(y_coords);
      out += st;
      continue;
    }
    if (def.kind != FusionKind::pointwise || def.device_fn.empty()) {
      return unsupported(fmt::format("node '{}' ({}): not a pointwise op a kernel can fuse", nd.name, def.name));
    }

    std::vector<std::string> args;
    for (size_t p = 0; p < def.inputs.size(); ++p) {
      const auto& port = nd.inputs[p];
      if (port.empty()) {
        auto it = nd.attrs.find(def.inputs[p].name);
        args.push_back(float_literal(it == nd.attrs.end() ? NAN : std::get<double>(it->second)));
        continue;
      }
      const Tensor t = port[0];
      auto seen = loaded_moved.find(t.id);
      const bool reload = seen != loaded_moved.end() && seen->second != is_moved;  // read at both coordinates
      if (!values.count(t.id) || reload) {
        std::vector<std::string> at = at_node;
        if (def.inputs[p].channel_vector) {
          // Indexed by x's coordinate along the op's axis, wherever that dim sits in the domain.
          const int xr = info(nd.inputs[0][0]).shape.rank();
          const int a = *channel_vector_axis(nd, xr);
          at = {at_node[(at_node.size() - static_cast<size_t>(xr) + static_cast<size_t>(a))]};
        }
        const std::string v = fresh();
        out += pad + fmt::format("const float {} = {};\n", v, load(t, at));
        if (reload) {
          args.push_back(v);
          continue;
        }
        values[t.id] = v;
        loaded_moved[t.id] = is_moved;
      }
      args.push_back(values[t.id]);
    }
    const auto& params = def.device_params.empty() ? def.unary_params : def.device_params;
    for (std::string_view a : params) {
      auto it = nd.attrs.find(a);
      args.push_back(float_literal(it == nd.attrs.end() ? NAN : std::get<double>(it->second)));
    }
    std::string call = std::string(def.device_fn) + "(";
    for (size_t k = 0; k < args.size(); ++k) call += (k ? ", " : "") + args[k];
    call += ")";
    if (def.rounds_to_output_dtype) call = fmt::format("kiln::round_to<{}>({})", ctype(yi.dtype), call);
    const std::string v = fresh();
    out += pad + fmt::format("const float {} = {};\n", v, call);
    values[y.id] = v;
    if (is_moved) moved[y.id] = at_node;
    if (is_group_output(y)) out += pad + store(y, at_node, v) + "\n";
  }
  return out;
}

Status KernelBuilder::can_emit(const std::vector<int32_t>& nodes) const {
  for (int32_t n : nodes) {
    const Node& nd = node(n);
    const OpDef& def = op_def(*nd.op);
    if (def.kind == FusionKind::layout) {
      // A store transform of a value computed in the group (a load transform is a view, never emitted).
      if (!produced_in_group(nd.inputs[0][0])) continue;
      const OpId op = *nd.op;
      if (op != OpId::layout_convert && op != OpId::transpose && op != OpId::reshape)
        return unsupported(fmt::format("node '{}' ({}): no kernel can apply it after a fused op", nd.name, def.name));
      continue;
    }
    if (def.kind != FusionKind::pointwise || def.device_fn.empty())
      return unsupported(fmt::format("node '{}' ({}): not a pointwise op a kernel can fuse", nd.name, def.name));
  }
  return {};
}

std::string channel_reduction_members(const ChannelReduction& r) {
  std::string terms;
  for (size_t q = 0; q < r.terms.size(); ++q) terms += fmt::format("    if (q == {}) return {};\n", q, r.terms[q]);
  return fmt::format(
      "  static constexpr int TERMS = {};\n  static constexpr bool PER_IMAGE = {};\n"
      "  static __device__ __forceinline__ float term(int q, float v) {{\n{}    return 0.0f;\n  }}\n"
      "  static __device__ __forceinline__ float finish(int q, float sum, float count) {{\n"
      "    (void)q, (void)count;\n    return {};\n  }}\n",
      r.terms.size(), r.per_image, terms, r.finish);
}

}  // namespace kiln::codegen
