// The row-norm epilogue of a depthwise conv (fusion's join_row_norm; templates/kiln/depthwise_rownorm.cuh):
// a layer_norm over the channels of the conv's transposed output, computed by the conv's kernel, one
// block per pixel. This file splits such a group around the norm and writes its two functors.
#include <fmt/format.h>

#include "codegen/family_gemm.h"

namespace kiln::codegen::gemm_glue {

Result<RowNorm> row_norm_of(KernelBuilder& b, int32_t anchor) {
  RowNorm r;
  r.node = b.group().roles.row_norm;  // fusion's join_row_norm recorded it
  if (r.node < 0) return r;
  const Node& an = b.node(anchor);
  const Node& ln = b.node(r.node);
  if (!b.from_memory(an.inputs[1][0]))
    return unsupported(fmt::format("node '{}': its weight is computed inside the group", an.name));
  for (size_t p = 1; p < ln.inputs.size(); ++p) {
    if (!ln.inputs[p].empty() && !b.from_memory(ln.inputs[p][0]))
      return unsupported(fmt::format("node '{}': its scale or shift is computed inside the group", ln.name));
  }
  const Shape& s = b.info(ln.inputs[0][0]).shape;
  const int64_t K = b.info(an.outputs[0]).shape[1];
  if (s.rank() != 4 || s[3] != K || K > kMaxRowNormChannels)
    return unsupported(fmt::format("node '{}': not a norm over the {} channels of '{}' (at most {})", ln.name, K,
                                   an.name, kMaxRowNormChannels));
  for (int32_t n : b.group().nodes) {
    const Node& nd = b.node(n);
    if (n <= anchor || b.is_load_transform(nd) || n == r.node) continue;
    const OpDef& def = op_def(*nd.op);
    if (def.kind != FusionKind::pointwise && def.kind != FusionKind::layout)
      return unsupported(fmt::format("node '{}' ({}) cannot be fused around '{}'", nd.name, def.name, an.name));
    (n < r.node ? r.pre : r.post).push_back(n);
  }
  // What follows the norm computes from its output alone: the kernel has nothing else at that point.
  for (int32_t n : r.post) {
    for (const auto& port : b.node(n).inputs) {
      for (Tensor t : port) {
        if (b.from_memory(t)) continue;
        const int32_t p = b.info(t).producer;
        if (p != r.node && std::find(r.post.begin(), r.post.end(), p) == r.post.end())
          return unsupported(fmt::format("node '{}' after the norm '{}' reads '{}', a value from before it",
                                         b.node(n).name, ln.name, b.info(t).name));
      }
    }
  }
  KILN_RETURN_IF_ERROR(b.can_emit(r.pre));
  KILN_RETURN_IF_ERROR(b.can_emit(r.post));
  return r;
}

Result<std::string> row_norm_functors(KernelBuilder& b, const RowNorm& r, Tensor y, const Tensor* bias) {
  const std::vector<std::string> at_conv{"i.i[0]", "i.i[1]", "i.i[2]", "i.i[3]"};
  std::string pre;
  if (bias) pre = fmt::format("    v += {};\n", b.load(*bias, {"i.i[1]"}));
  std::map<int32_t, std::string> values{{y.id, "v"}};
  seed_channel_operands(b, r.pre, at_conv, values, pre);
  KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(r.pre, at_conv, values, true, 4));
  const Node& ln = b.node(r.node);
  auto it = values.find(ln.inputs[0][0].id);
  KILN_CHECK(it != values.end(),
             fmt::format("the row norm's input '{}' is not computed", b.info(ln.inputs[0][0]).name));
  std::string out = fmt::format(
      "struct Pre {{\n  KILN_PARAM_MEMBERS\n"
      "  __device__ __forceinline__ float operator()(float v, const kiln::Idx<4>& i) const {{\n    (void)i;\n{}{}"
      "    return {};\n  }}\n}};\n",
      pre, body, it->second);
  // The norm's affine (per channel: the last coordinate), then what follows it.
  std::string affine;
  if (ln.inputs.size() > 1 && !ln.inputs[1].empty())
    affine += fmt::format("    v *= {};\n", b.load(ln.inputs[1][0], {"i.i[3]"}));
  if (ln.inputs.size() > 2 && !ln.inputs[2].empty())
    affine += fmt::format("    v += {};\n", b.load(ln.inputs[2][0], {"i.i[3]"}));
  std::map<int32_t, std::string> after{{ln.outputs[0].id, "v"}};
  KILN_ASSIGN_OR_RETURN(std::string tail,
                        b.emit_pointwise(r.post, {"i.i[0]", "i.i[1]", "i.i[2]", "i.i[3]"}, after, true, 4));
  out += fmt::format(
      "struct Epi {{\n  KILN_PARAM_MEMBERS\n"
      "  __device__ __forceinline__ void operator()(float v, const kiln::Idx<4>& i) const {{\n{}{}  }}\n}};\n",
      affine, tail);
  return out;
}

}  // namespace kiln::codegen::gemm_glue
