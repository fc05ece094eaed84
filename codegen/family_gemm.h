// Glue shared by the two GEMM-shaped families, conv (codegen/family_conv.cpp) and matmul
// (codegen/family_matmul.cpp): the group around its anchor, the epilogue functor, and the tile heuristic
// of templates/kiln/gemm_tile.cuh.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen::gemm_glue {

// The nodes after the anchor: pointwise ops and store transforms. Load transforms (layout conversions of
// group inputs) are left out: the operands' memory views read through them.
inline Result<std::vector<int32_t>> epilogue_nodes(KernelBuilder& b, int32_t anchor) {
  std::vector<int32_t> epi;
  for (int32_t n : b.group().nodes) {
    if (n == anchor) continue;
    const Node& nd = b.node(n);
    const OpDef& def = op_def(*nd.op);
    if (def.kind == FusionKind::layout && !b.produced_in_group(nd.inputs[0][0])) continue;
    if (n < anchor || (def.kind != FusionKind::pointwise && def.kind != FusionKind::layout)) {
      return unsupported(
          fmt::format("node '{}' ({}) cannot be fused around '{}'", nd.name, def.name, b.node(anchor).name));
    }
    epi.push_back(n);
  }
  return epi;
}

// The anchor's epilogue can be emitted, and its operands come from memory: what both GEMM families check.
inline Status check_group(KernelBuilder& b, int32_t anchor) {
  const Node& nd = b.node(anchor);
  for (size_t p = 0; p < 2; ++p) {
    const Tensor t = nd.inputs[p][0];
    if (!b.produced_in_group(t)) continue;
    const Node& prod = b.node(b.info(t).producer);
    if (*prod.op == OpId::layout_convert && !b.produced_in_group(prod.inputs[0][0])) continue;
    return unsupported(fmt::format("node '{}': operand '{}' is computed inside the group", nd.name, b.info(t).name));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epi, epilogue_nodes(b, anchor));
  KILN_RETURN_IF_ERROR(b.can_emit(epi));
  if (b.info(nd.inputs[0][0]).dtype != b.info(nd.inputs[1][0]).dtype)
    return unsupported(fmt::format("node '{}': its two operands differ in dtype", nd.name));
  return {};
}

// `struct Epi { params; void operator()(float v, const kiln::Idx<R>& i) const }`: the anchor's optional
// bias (kept by a graph that was not canonicalized), then the fused chain, storing every group output.
inline Result<std::string> epi_functor(KernelBuilder& b, const std::vector<int32_t>& nodes, Tensor y, int rank,
                                       const Tensor* bias, int bias_dim) {
  std::vector<std::string> coords;
  for (int d = 0; d < rank; ++d) coords.push_back(fmt::format("i.i[{}]", d));
  std::string pre;
  if (bias) pre = fmt::format("    v += {};\n", b.load(*bias, {coords[static_cast<size_t>(bias_dim)]}));
  std::map<int32_t, std::string> values{{y.id, "v"}};
  // Per-channel operands of bias_add (along its axis) and batch_norm (axis 1) are read at the channel
  // coordinate: emit_pointwise broadcasts operands NumPy-style (trailing dims aligned), which would read a
  // [K] vector along the last dim. Seeding their values here keeps the chain's semantics.
  for (int32_t n : nodes) {
    const Node& nd = b.node(n);
    int axis = -1;
    if (*nd.op == OpId::bias_add) {
      axis = *normalize_axis(std::get<int64_t>(nd.attrs.at("axis")), rank);
    } else if (*nd.op == OpId::batch_norm) {
      axis = 1;
    }
    if (axis < 0) continue;
    for (size_t p = 1; p < nd.inputs.size(); ++p) {
      if (nd.inputs[p].empty()) continue;
      const Tensor t = nd.inputs[p][0];
      if (b.produced_in_group(t) || b.info(t).shape.rank() != 1 || values.count(t.id)) continue;
      const std::string v = b.fresh("ch");
      pre += fmt::format("    const float {} = {};\n", v, b.load(t, {coords[static_cast<size_t>(axis)]}));
      values[t.id] = v;
    }
  }
  KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(nodes, coords, values, true, 4));
  return fmt::format(
      "struct Epi {{\n  KILN_PARAM_MEMBERS\n"
      "  __device__ __forceinline__ void operator()(float v, const kiln::Idx<{}>& i) const {{\n{}{}  }}\n}};\n",
      rank, pre, body);
}

// Block tile of the GEMM, BK = 64 bytes of k per row (16 f32 or 32 f16/bf16: four 16-byte cp.async
// chunks). f16 / bf16 problems big enough to fill the target's SMs with 128-row tiles take 128 x 64 on the
// tensor-core main loop (8 x 4 accumulators per thread, 256 threads). Otherwise 64 or 32 rows and columns,
// 4x4 outputs per thread (256, 128 or 64 threads): a narrow problem (N <= 32) takes 32 columns; a problem
// with fewer than about one block of 64 rows per SM takes 32 rows, so that the grid still spreads over the
// SMs. f16 / bf16 always multiply on tensor cores (mma.sync), f32 on the SIMT loop.
inline GemmTiles pick_tiles(int64_t m, int64_t n, int64_t batches, DType dtype, const Target& target) {
  GemmTiles t;
  t.bk = dtype == DType::f32 ? 16 : 32;
  t.main_loop = dtype == DType::f32 ? MainLoop::simt : MainLoop::tensor_core;
  if (dtype != DType::f32 && n > 32 && (m + 127) / 128 * ((n + 63) / 64) * batches >= target.sm_count) {
    // 128 x 64, 8 warps of 64 x 16, 8 x 4 accumulators per thread. Per 16 values of k a warp issues 8
    // mma.sync for 5 ldmatrix (4 for 3 at 64 x 64), and each byte staged in shared memory feeds more math.
    // (128 x 128 needs more than the 128 registers that two resident blocks of 256 threads allow: ptxas
    // spilled.)
    t.bm = 128, t.bn = 64, t.tm = 8, t.tn = 4;
    return t;
  }
  t.bn = n > 32 ? 64 : 32;
  const int64_t blocks = (m + 63) / 64 * ((n + t.bn - 1) / t.bn) * batches;
  // About one 64-row block per SM, less one per 32 SMs (the margin the heuristic was first tuned with).
  const int64_t enough = target.sm_count - target.sm_count / 32;
  t.bm = m > 32 && blocks >= enough ? 64 : 32;
  return t;
}

}  // namespace kiln::codegen::gemm_glue
