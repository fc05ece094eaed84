// The prologue of a conv or matmul: the pointwise ops fused in front of the anchor's input (an inference
// batch norm, an activation, a squeeze-excite scale), applied by the kernel to each element it loads
// (templates/kiln/codegen.cuh, NoPrologue and the loaders of conv2d.cuh, depthwise_conv2d.cuh, matmul.cuh,
// matmul_skinny.cuh). The fusion pass decides what may join (passes/fusion.h, prologue_operand) and records
// the nodes (Group::roles.prologue, prologue_norm); this file checks them and writes the functor.
#include <fmt/format.h>

#include "codegen/family_gemm.h"
#include "passes/fusion.h"

namespace kiln::codegen::gemm_glue {

namespace {

// The checks of one prologue node: pointwise, of the input's shape, read by nothing outside the group.
Status check_prologue_node(KernelBuilder& b, const Node& nd, const Node& anchor, const Shape& shape) {
  if (op_def(*nd.op).kind != FusionKind::pointwise) {
    return unsupported(
        fmt::format("node '{}' ({}) before '{}' is no pointwise op", nd.name, op_name(*nd.op), anchor.name));
  }
  for (Tensor t : nd.outputs) {
    if (b.is_group_output(t))
      return unsupported(
          fmt::format("prologue node '{}' of '{}': its value is read outside the kernel", nd.name, anchor.name));
    if (b.info(t).shape != shape)
      return unsupported(fmt::format("prologue node '{}' of '{}': shape {} is not the input's {}", nd.name, anchor.name,
                                     b.info(t).shape.to_string(), shape.to_string()));
  }
  return {};
}

}  // namespace

// The layer-norm prologue of conv `an` (LayerNorm2d: layer_norm over the last dim of a tensor from memory,
// then permute(0, 3, 1, 2) into the conv's x): fusion's roles name the norm (Group::Roles::prologue_norm);
// the other prologue node must be the transpose, which is checked with the rest of the pattern.
Result<Prologue> norm_prologue_of(KernelBuilder& b, int32_t anchor) {
  const Node& an = b.node(anchor);
  Prologue p;
  p.norm = b.group().roles.prologue_norm;
  for (int32_t n : b.group().roles.prologue) {
    if (n == p.norm || b.is_load_transform(b.node(n))) continue;
    if (p.norm_transpose >= 0)
      return unsupported(fmt::format("node '{}': more than the layer norm and its transpose before it", an.name));
    p.norm_transpose = n;
  }
  if (p.norm < 0 || p.norm_transpose < 0)
    return unsupported(fmt::format("node '{}': a layer norm before it without its transpose", an.name));
  const Node& ln = b.node(p.norm);
  const Node& tr = b.node(p.norm_transpose);
  const Tensor src = ln.inputs[0][0];
  if (b.group().kind != GroupKind::conv || tr.inputs[0][0] != ln.outputs[0] || tr.outputs[0] != an.inputs[0][0] ||
      !tr.attrs.count("perm") ||
      std::get<std::vector<int64_t>>(tr.attrs.at("perm")) != std::vector<int64_t>{0, 3, 1, 2} ||
      !ln.attrs.count("normalized_ndim") || std::get<int64_t>(ln.attrs.at("normalized_ndim")) != 1 ||
      !b.from_memory(src) || b.is_group_output(ln.outputs[0]) || b.is_group_output(tr.outputs[0]))
    return unsupported(fmt::format("node '{}': '{}' is no LayerNorm2d over its input's channels", an.name, ln.name));
  for (size_t k = 1; k < ln.inputs.size(); ++k)
    if (!ln.inputs[k].empty() && !b.from_memory(ln.inputs[k][0]))
      return unsupported(fmt::format("node '{}': its scale or shift is computed inside the group", ln.name));
  p.source = src;
  return p;
}

Result<Prologue> prologue_of(KernelBuilder& b, int32_t anchor) {
  const Node& an = b.node(anchor);
  const Tensor x = an.inputs[0][0];
  Prologue p;
  p.source = x;
  if (b.from_memory(x)) return p;
  if (b.group().roles.prologue_norm >= 0) return norm_prologue_of(b, anchor);
  const Shape& shape = b.info(x).shape;
  const bool conv = *an.op == OpId::conv2d;
  if (!conv && std::get<bool>(an.attrs.at("transpose_a")))
    return unsupported(fmt::format("node '{}': a prologue of a transposed operand", an.name));
  const int channel = conv ? 1 : shape.rank() - 1;
  bool have_source = false;
  for (int32_t n : b.group().roles.prologue) {
    const Node& nd = b.node(n);
    if (b.is_load_transform(nd)) continue;
    KILN_RETURN_IF_ERROR(check_prologue_node(b, nd, an, shape));
    p.nodes.push_back(n);
    for (const auto& port : nd.inputs) {
      for (Tensor t : port) {
        if (!b.from_memory(t)) continue;
        if (b.info(t).shape == shape) {
          if (have_source && t != p.source)
            return unsupported(fmt::format("the prologue of '{}' reads two tensors of its input's shape ('{}', '{}')",
                                           an.name, b.info(p.source).name, b.info(t).name));
          p.source = t;
          have_source = true;
        } else if (!prologue_operand(nd, b.info(t), shape, channel, conv)) {
          return unsupported(
              fmt::format("prologue node '{}' of '{}': operand '{}' {} is not applied per element loaded", nd.name,
                          an.name, b.info(t).name, b.info(t).shape.to_string()));
        }
      }
    }
  }
  if (!have_source)
    return unsupported(fmt::format("the prologue of '{}' reads no tensor of its input's shape", an.name));
  return p;
}

std::string gemm_source(const char* header, const std::string& body, const std::string& pro_fn,
                        const std::vector<std::pair<const char*, const char*>>& functors, const char* call,
                        const std::string& bounds, DType t, const std::string& x_param, const std::string& w_param,
                        const std::string& batch_arg) {
  const std::string T(ctype(t));
  std::string src = kernel_preamble();
  src += fmt::format("#include \"kiln/{}.cuh\"\n\nnamespace KILN_ENTRY_ns {{\n\n", header);
  src += body + (pro_fn.empty() ? "" : "\n" + pro_fn);
  src += "\n}  // namespace KILN_ENTRY_ns\n\n";
  src += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) KILN_ENTRY(KILN_PARAMS) {{\n", bounds);
  std::string args;
  for (const auto& [type, var] : functors) {
    src += fmt::format("  const KILN_ENTRY_ns::{} {}{{KILN_PARAM_NAMES}};\n", type, var);
    args += fmt::format(", {}", var);
  }
  if (!pro_fn.empty()) {
    src += "  const KILN_ENTRY_ns::Pro pro{KILN_PARAM_NAMES};\n";
    args += ", pro";
  }
  src += fmt::format("  {}<KILN_ENTRY_ns::Cfg, {}>({}static_cast<const {}*>({}), static_cast<const {}*>({}){});\n}}\n",
                     call, T, batch_arg.empty() ? "" : batch_arg + ", ", T, x_param, T, w_param, args);
  return src;
}

std::vector<ChannelOperand> channel_operands(KernelBuilder& b, const std::vector<int32_t>& nodes, int rank) {
  std::vector<ChannelOperand> out;
  for (int32_t n : nodes) {
    const Node& nd = b.node(n);
    if (!has_channel_vector(nd)) continue;
    const std::optional<int> ax = channel_vector_axis(nd, rank);
    if (!ax) continue;
    const int axis = *ax;
    const auto& ports = op_def(*nd.op).inputs;
    for (size_t p = 0; p < nd.inputs.size() && p < ports.size(); ++p) {
      if (nd.inputs[p].empty() || !ports[p].channel_vector) continue;
      const Tensor t = nd.inputs[p][0];
      if (b.produced_in_group(t) || b.info(t).shape.rank() != 1) continue;
      bool seen = false;
      for (const ChannelOperand& o : out) seen = seen || o.tensor == t;
      if (!seen) out.push_back({t, axis});
    }
  }
  return out;
}

void seed_channel_operands(KernelBuilder& b, const std::vector<int32_t>& nodes, const std::vector<std::string>& coords,
                           std::map<int32_t, std::string>& values, std::string& pre) {
  for (const ChannelOperand& o : channel_operands(b, nodes, static_cast<int>(coords.size()))) {
    if (values.count(o.tensor.id)) continue;
    const std::string v = b.fresh("ch");
    pre += fmt::format("    const float {} = {};\n", v, b.load(o.tensor, {coords[static_cast<size_t>(o.axis)]}));
    values[o.tensor.id] = v;
  }
}

Result<std::string> pro_functor(KernelBuilder& b, const Prologue& p, Tensor input,
                                const std::vector<std::string>& coords, int idx_rank) {
  if (p.norm >= 0) {
    // (v - mean) * rstd, then the norm's affine per channel: the kernel computed mean and rstd per pixel.
    const Node& ln = b.node(p.norm);
    std::string affine;
    if (ln.inputs.size() > 1 && !ln.inputs[1].empty())
      affine += fmt::format("    v *= {};\n", b.load(ln.inputs[1][0], {coords[1]}));
    if (ln.inputs.size() > 2 && !ln.inputs[2].empty())
      affine += fmt::format("    v += {};\n", b.load(ln.inputs[2][0], {coords[1]}));
    return fmt::format(
        "struct Pro {{\n  KILN_PARAM_MEMBERS\n  static constexpr bool kActive = true;\n"
        "  static constexpr bool kPixelNorm = true;\n  static constexpr float EPS = {};\n"
        "  __device__ __forceinline__ float operator()(float v, const kiln::Idx<{}>& i, float mean, float rstd) const "
        "{{\n    v = (v - mean) * rstd;\n{}    return v;\n  }}\n}};\n",
        float_literal(std::get<double>(ln.attrs.at("epsilon"))), idx_rank, affine);
  }
  std::string pre;
  std::map<int32_t, std::string> values{{p.source.id, "v"}};
  seed_channel_operands(b, p.nodes, coords, values, pre);
  KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(p.nodes, coords, values, false, 4));
  auto it = values.find(input.id);
  KILN_CHECK(it != values.end(), fmt::format("the prologue does not compute '{}'", b.info(input).name));
  return fmt::format(
      "struct Pro {{\n  KILN_PARAM_MEMBERS\n  static constexpr bool kActive = true;\n"
      "  static constexpr bool kPixelNorm = false;\n"
      "  __device__ __forceinline__ float operator()(float v, const kiln::Idx<{}>& i) const {{\n    (void)i;\n{}{}"
      "    return {};\n  }}\n}};\n",
      idx_rank, pre, body, it->second);
}

}  // namespace kiln::codegen::gemm_glue
