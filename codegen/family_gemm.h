// Glue shared by the two GEMM-shaped families, conv (codegen/family_conv.cpp) and matmul
// (codegen/family_matmul.cpp): the group around its anchor, the epilogue functor, and the tile heuristic
// of templates/kiln/gemm_tile.cuh.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/kernel_builder.h"
#include "kiln/occupancy.h"
#include "ops/registry.h"
#include "passes/fusion.h"  // kMaxRowNormChannels

namespace kiln::codegen::gemm_glue {

// The nodes after the anchor: pointwise ops and store transforms. Load transforms (layout conversions of
// group inputs) are left out: the operands' memory views read through them; so is the prologue (the
// pointwise nodes before the anchor, prologue_of) and a conv's reduction epilogue (its own functor).
inline Result<std::vector<int32_t>> epilogue_nodes(KernelBuilder& b, int32_t anchor) {
  std::vector<int32_t> epi;
  for (int32_t n : b.group().nodes) {
    if (n == anchor) continue;
    const Node& nd = b.node(n);
    const OpDef& def = op_def(*nd.op);
    if (b.is_load_transform(nd)) continue;
    if (b.in_prologue(n)) continue;                // prologue_of's
    if (n == b.group().roles.reduction) continue;  // the Red functor's (family_conv.cpp)
    if (n < anchor || (def.kind != FusionKind::pointwise && def.kind != FusionKind::layout)) {
      return unsupported(
          fmt::format("node '{}' ({}) cannot be fused around '{}'", nd.name, def.name, b.node(anchor).name));
    }
    epi.push_back(n);
  }
  return epi;
}

// A GEMM tile choice in short, for `kiln profile` ("tc 128x64x32 4x8 s3 b2 k5"): main loop, block tile,
// warp layout, stages, b: the blocks per SM the tile was picked for (its launch bounds; "b2/3": launched at 2,
// compiled for 3), k: split-K's splits.
inline std::string tiles_text(const GemmTiles& t) {
  return fmt::format("{} {}x{}x{} {}x{} s{} b{}{}{}", t.main_loop == MainLoop::tensor_core ? "tc" : "simt", t.bm, t.bn,
                     t.bk, t.tm, t.tn, t.stages, t.blocks_per_sm,
                     t.launch_bounds_blocks() > t.blocks_per_sm ? fmt::format("/{}", t.launch_bounds_blocks()) : "",
                     t.splits > 1 ? fmt::format(" k{}", t.splits) : std::string());
}

// How a shape-generic plan chose the tiles, for `kiln profile`: " generic" (shared by every binding; with the
// batch's own tile's estimate where that differs: "own 32x64 -8%"), or " specialized" with the generic tile's
// estimate ("generic 64x64 +91%"). Empty under TilePolicy::own.
inline std::string choice_text(const TileChoice& c) {
  if (!c.planned) return {};
  const auto pct = [](double r) { return static_cast<int>(std::lround((r - 1) * 100)); };
  if (c.generic) {
    if (c.own_tiles == c.generic_tiles || c.generic_over_own == 1) return " generic";
    return fmt::format(" generic (own {}x{} {:+d}%)", c.own_tiles.bm, c.own_tiles.bn, pct(1 / c.generic_over_own));
  }
  return fmt::format(" specialized (generic {}x{} {:+d}%)", c.generic_tiles.bm, c.generic_tiles.bn,
                     pct(c.generic_over_own));
}

// The anchor's prologue: the group's pointwise nodes that compute its input (port 0) from one tensor in
// memory, applied by the kernel to each element of that tensor it loads (codegen/family_prologue.cpp).
struct Prologue {
  std::vector<int32_t> nodes;  // empty: the input is read as it is
  Tensor source;               // what the kernel reads: the input itself, or the tensor the prologue starts from
  // A layer-norm prologue (conv2d only; fusion's norm_prologue_refusal): the layer_norm over the last dim
  // of `source` ([N, H, W, C]) and the transpose making it the conv's [N, C, H, W] input; `nodes` is empty.
  int32_t norm = -1, norm_transpose = -1;
  bool active() const { return !nodes.empty() || norm >= 0; }
};
// The prologue of `anchor` (conv2d: per-channel and per-image operands; matmul: operands along k), or why
// the group's nodes before the anchor are none the kernel can apply as it loads.
Result<Prologue> prologue_of(KernelBuilder& b, int32_t anchor);
// `struct Pro` (kiln/codegen.cuh's prologue functor) for `p`, taking Idx<idx_rank> coordinates; `coords`
// are the input's logical coordinates in terms of `i` (conv: i.i[0..3]; matmul: 0 but i.i[0] for k).
Result<std::string> pro_functor(KernelBuilder& b, const Prologue& p, Tensor input,
                                const std::vector<std::string>& coords, int idx_rank);
// The source of a conv or matmul kernel: `header`, then in the entry's namespace `body` (Cfg and the
// functor structs) and `pro_fn` (the prologue's Pro, empty when none); the entry builds each of `functors`
// (struct, variable) and the Pro from the kernel's parameters and calls
// `call<Cfg, T>([batch,] x, w, functors..., [pro])` with x and w the parameters named and `batch_arg`, when
// given, first (the conv templates take the batch: a parameter, or Cfg::N where the kernel is made for one).
std::string gemm_source(const char* header, const std::string& body, const std::string& pro_fn,
                        const std::vector<std::pair<const char*, const char*>>& functors, const char* call,
                        const std::string& bounds, DType t, const std::string& x_param, const std::string& w_param,
                        const std::string& batch_arg = {});
// The per-channel operands of the bias_add / batch_norm nodes among `nodes` (rank-`rank` values): each
// [C] vector read from memory, once, with the axis of the values it runs along.
struct ChannelOperand {
  Tensor tensor;
  int axis;
};
std::vector<ChannelOperand> channel_operands(KernelBuilder& b, const std::vector<int32_t>& nodes, int rank);
// The channel operands read at their axis' coordinate into fresh locals (declared in `pre`) and seeded into
// `values`: emit_pointwise broadcasts operands NumPy-style (trailing dims aligned), which would read a [C]
// vector along the last dim.
void seed_channel_operands(KernelBuilder& b, const std::vector<int32_t>& nodes, const std::vector<std::string>& coords,
                           std::map<int32_t, std::string>& values, std::string& pre);

// The row-norm epilogue of a depthwise conv group (the fusion pass's join_row_norm): its layer_norm, the
// group's nodes after the conv and before the norm (`pre`) and after it (`post`); node -1 when the group
// has none (codegen/family_depthwise_norm.cpp).
struct RowNorm {
  int32_t node = -1;
  std::vector<int32_t> pre, post;
};
Result<RowNorm> row_norm_of(KernelBuilder& b, int32_t anchor);
// `struct Pre` (the conv's value -> the norm's input, at {n, k, p, q}) and `struct Epi` (the normalized
// value -> the norm's affine and what follows, at the norm's {n, p, q, k}) of templates/kiln/depthwise_rownorm.cuh.
Result<std::string> row_norm_functors(KernelBuilder& b, const RowNorm& r, Tensor y, const Tensor* bias);

// The anchor's epilogue can be emitted, its weight operand comes from memory and its input from memory or
// a prologue: what both GEMM families check.
inline Status check_group(KernelBuilder& b, int32_t anchor) {
  const Node& nd = b.node(anchor);
  const Tensor w = nd.inputs[1][0];
  if (!b.from_memory(w))
    return unsupported(fmt::format("node '{}': operand '{}' is computed inside the group", nd.name, b.info(w).name));
  KILN_ASSIGN_OR_RETURN(Prologue pro, prologue_of(b, anchor));
  KILN_RETURN_IF_ERROR(b.can_emit(pro.nodes));
  if (pro.norm >= 0 && *nd.op != OpId::conv2d)
    return unsupported(fmt::format("node '{}': a layer-norm prologue runs on the conv2d kernel only", nd.name));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epi, epilogue_nodes(b, anchor));
  KILN_RETURN_IF_ERROR(b.can_emit(epi));
  if (b.info(pro.source).dtype != b.info(w).dtype)
    return unsupported(fmt::format("node '{}': its two operands differ in dtype", nd.name));
  return {};
}

// `struct Epi`: the anchor's optional bias (kept by a graph that was not canonicalized), then the fused
// chain, storing every group output, for the value `v` at logical coordinate `i` of the GEMM output `y`.
// Operands constant along a tile column (the bias, the bias_add / batch-norm vectors along the GEMM's n
// dim `n_dim`) are read by `channel(c)` into a `Ch`, which staged_epilogue (gemm_tile.cuh) calls once per
// column a thread owns rather than once per element: 5 loads per output for a batch norm, otherwise. The
// two-argument call reads them itself (kernels without a column phase).
inline Result<std::string> epi_functor(KernelBuilder& b, const std::vector<int32_t>& nodes, Tensor y, int rank,
                                       const Tensor* bias, int n_dim) {
  std::vector<std::string> coords;
  for (int d = 0; d < rank; ++d) coords.push_back(fmt::format("i.i[{}]", d));
  std::string fields, loads, pre;
  std::map<int32_t, std::string> values{{y.id, "v"}};
  auto hoist = [&](Tensor t) {
    const std::string name = b.fresh("ch");
    fields += fmt::format("    float {};\n", name);
    loads += fmt::format("    ch.{} = {};\n", name, b.load(t, {"c"}));
    return "ch." + name;
  };
  if (bias) pre = fmt::format("    v += {};\n", hoist(*bias));
  for (const ChannelOperand& o : channel_operands(b, nodes, rank)) {
    if (o.axis == n_dim && !values.count(o.tensor.id)) values[o.tensor.id] = hoist(o.tensor);
  }
  seed_channel_operands(b, nodes, coords, values, pre);  // those along other dims: per element
  KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(nodes, coords, values, true, 4));
  if (fields.empty()) {  // nothing shared along a column: unused parameters
    pre += "    (void)ch;\n";
    loads += "    (void)c;\n";
  }
  return fmt::format(
      "struct Epi {{\n  KILN_PARAM_MEMBERS\n  struct Ch {{\n{}  }};\n"
      "  __device__ __forceinline__ Ch channel(int c) const {{\n    Ch ch{{}};\n{}    return ch;\n  }}\n"
      "  __device__ __forceinline__ void operator()(float v, const kiln::Idx<{}>& i, const Ch& ch) const {{\n{}{}  }}\n"
      "  __device__ __forceinline__ void operator()(float v, const kiln::Idx<{}>& i) const {{\n"
      "    (*this)(v, i, channel(i.i[{}]));\n  }}\n}};\n",
      fields, loads, rank, pre, body, rank, n_dim);
}

// The staged epilogue's order (gemm_tile.cuh, staged_epilogue): along m when the group's first stored
// tensor of the GEMM output's shape `y` has its m dim (logical dim `m_dim`) contiguous and its n dim
// (`n_dim`) not, as NCHW conv outputs do; along n otherwise (channels-last, row-major matmul outputs).
inline bool store_along_m(KernelBuilder& b, const std::vector<KernelParam>& params, Tensor y, int m_dim, int n_dim) {
  for (const KernelParam& p : params) {
    if (!p.written || !p.tensor.valid() || b.info(p.tensor).shape != b.info(y).shape) continue;
    const MemView v = b.view(p.tensor, true);
    const auto stride = [&](int d) {
      return v.strides[static_cast<size_t>(d)] < 0 ? -v.strides[static_cast<size_t>(d)]
                                                   : v.strides[static_cast<size_t>(d)];
    };
    return stride(m_dim) == 1 && stride(n_dim) != 1;
  }
  return false;
}

// The tensor-core tiles pick_tiles chooses among, largest first, by 64 columns: 128 rows in 4 warps of
// 64 x 32 (8 x 8 accumulators per thread), 128 rows in 8 warps, 64 or 32 rows in warps of 32 x 32 (4 x 8;
// the 8-warp 128-row tile for grids of fewer tiles than SMs, where one block of 4 warps per SM is too few). Per 16
// values of k a 64 x 32 warp issues 16 mma.sync for 6 ldmatrix.x4 (1.5 shared wavefronts per mma), a 32 x 32 one 8 for
// 4 (2 per mma; warps of 64 x 16 took 2.5): kiln profile found these kernels bound by shared memory (one wavefront per
// SM per clock, about one mma.sync every two). A larger tile also reads fewer operand bytes per output (L2 to SM
// traffic: 1/64 + 1/BM per output and k), so smaller ones are taken only to fill the waves. `min_registers`: a
// residency is considered only if its register cap is at least this (what ptxas was measured to compile the tile's loop
// and fused epilogues in without spilling: 135-143 for 64 x 32 warps, 76-80 under a cap of 80 for 32 x 32).
struct TensorCoreTile {
  int rows, tm, tn, min_registers;
};
inline constexpr TensorCoreTile kTensorCoreTiles[] = {
    {128, 8, 8, 144}, {128, 4, 8, 80}, {64, 4, 8, 80}, {32, 4, 8, 80}};
// The operands that cannot take 16-byte chunks and go through the tile loader's element mapping, as the
// registers each of a thread's values of a slice (rows x BK / threads) costs: the values stay in registers
// across the slice's math, with the state that addresses them, none of which the tile's min_registers
// includes. Measured with ptxas on the 128 x 64 tile of 64 x 32 warps (144 registers without): the k-fastest
// mapping of a conv (the RGB stem, 48 values) about 2 each (232 registers); of a matmul (row bases and the
// k tail per value: k = 100, 48 values) about 3 (255 and spills at sm_90); the row-fastest mapping of a
// matmul's B about 1 (k = 104, 16 values: 168). 0: the operand takes 16-byte chunks.
struct ElementLoads {
  int a = 0, b = 0;
  static constexpr int kRowFastest = 1, kConvKFastest = 2, kMatmulKFastest = 3;
  int registers(int bm, int bn, int bk, int threads) const { return (a * bm + b * bn) * bk / threads; }
};
// A residency must keep at least 8 warps on an SM (two per scheduler, to overlap ldmatrix with mma).
inline constexpr int kMinWarpsPerSm = 8;
// The residency tried first: 16 warps per SM.
inline constexpr int kPreferredWarpsPerSm = 16;
// Tail-wave efficiency good enough to stop at the largest tile reaching it (what kiln profile flags).
inline constexpr double kGoodTail = 0.85;
// Split-K: at most this many splits, each of at least kMinSplitSlices slices of BK (a pipeline's worth: a
// split of fewer would spend most of its time filling and draining the stages).
inline constexpr int kMaxSplits = 8;
inline constexpr int64_t kMinSplitSlices = 4;
// The scratch a split tile needs (GemmTiles::splits): a counter per output tile, `splits` fp32 partial tiles.
struct SplitScratch {
  int64_t counters_bytes = 0, partials_bytes = 0;
};
inline SplitScratch split_scratch(const GemmTiles& t, int64_t m, int64_t n, int64_t batches) {
  if (t.splits <= 1) return {};
  const int64_t tiles = (m + t.bm - 1) / t.bm * ((n + t.bn - 1) / t.bn) * batches;
  return {tiles * 4, tiles * t.splits * t.bm * t.bn * 4};
}

// Block tile of the GEMM, BK = 64 bytes of k per row (16 f32 or 32 f16/bf16: four 16-byte cp.async
// chunks), and the residency it runs at. f16 / bf16 with more than 32 columns and enough rows for a
// 32-row tile per SM: the first of kTensorCoreTiles at the first residency (blocks per SM:
// kPreferredWarpsPerSm, then more, then fewer) allowed by its min_registers, kMinWarpsPerSm and shared
// memory whose grid fills the waves to kGoodTail (include/kiln/occupancy.h's waves: tiles / (blocks per SM
// x SMs x waves), times the rows of the last tile row that are not past m); failing that, the tile and
// residency with the best fill. A residency below what the resources allow is pinned with pad_smem, so the
// grid runs in exactly the waves counted. `smem_per_row` is the block's static shared memory besides the
// stages per tile row (a normalizing prologue's statistics); `element_loads`: the operands that cannot take
// 16-byte chunks (their registers are added to the tile's min_registers). `split_k_dim` > 0 (the reduction's
// length, conv only): when no tile fills the waves to kGoodTail, the first tile that does with k split (at most
// kMaxSplits, kMinSplitSlices slices each), at its residency with the fewest splits, if any. Otherwise (f32 on the SIMT
// loop, at most 32 columns, or too few rows) 64 or 32 rows and columns, 4x4 outputs per thread (256, 128 or 64 threads)
// at 2 blocks per SM: a narrow problem (N <= 32) takes 32 columns; a problem with fewer than about one block of 64 rows
// per SM takes 32 rows, so that the grid still spreads over the SMs.
inline GemmTiles pick_tiles(int64_t m, int64_t n, int64_t batches, DType dtype, const Target& target,
                            int64_t smem_per_row = 0, ElementLoads element_loads = {}, int64_t split_k_dim = 0) {
  GemmTiles t;
  t.bk = dtype == DType::f32 ? 16 : 32;
  t.main_loop = dtype == DType::f32 ? MainLoop::simt : MainLoop::tensor_core;
  const int64_t smallest = kTensorCoreTiles[std::size(kTensorCoreTiles) - 1].rows;
  if (dtype != DType::f32 && n > 32 && (m + smallest - 1) / smallest * ((n + 63) / 64) * batches >= target.sm_count) {
    std::optional<GemmTiles> best;
    double best_fill = -1;
    const int64_t slices = (split_k_dim + t.bk - 1) / t.bk;
    // The first tile that reaches kGoodTail split, at its residency with the fewest splits: a larger tile
    // reads fewer operand bytes per output than the partials of a few more splits cost.
    std::optional<GemmTiles> split;
    for (const TensorCoreTile& tile : kTensorCoreTiles) {
      const int rows = tile.rows;
      GemmTiles c = t;
      c.bm = rows, c.bn = 64, c.tm = tile.tm, c.tn = tile.tn;
      // The static shared memory at least (what the pad is reckoned from) and at most (+ a granule for small
      // statics, the reduction epilogue's flag: what must fit per_sm times).
      const int64_t smem = c.smem_bytes(2) + smem_per_row * rows, smem_max = smem + 128;
      const int64_t tiles = (m + rows - 1) / rows * ((n + 63) / 64) * batches;
      const double row_fill = static_cast<double>(m) / static_cast<double>((m + rows - 1) / rows * rows);
      // Residencies from 16 warps per SM up (more warps, fewer registers), then down.
      const int first = std::max(kPreferredWarpsPerSm / c.warps(), 1);
      std::vector<int> order;
      for (int b = first; b <= target.max_blocks_per_sm; ++b) order.push_back(b);
      for (int b = first - 1; b >= 1; --b) order.push_back(b);
      const int need = tile.min_registers + element_loads.registers(c.bm, c.bn, c.bk, c.threads());
      const int fit = occupancy(target, c.threads(), 1, smem_max).blocks_per_sm;  // warps, shared memory, blocks
      std::optional<GemmTiles> tile_split;
      for (const int per_sm : order) {
        if (per_sm > fit || per_sm * c.warps() < kMinWarpsPerSm || max_registers(target, c.threads(), per_sm) < need)
          continue;
        c.blocks_per_sm = per_sm;
        c.pad_smem = residency_pad(target, smem, per_sm);
        for (int s = 2; s <= kMaxSplits && s * kMinSplitSlices <= slices; ++s) {
          if (tile_split && tile_split->splits <= s) break;
          if ((s - 1) * ((slices + s - 1) / s) >= slices) continue;  // split_k.cuh's Range: none empty
          if (waves(target, tiles * s, per_sm).tail_efficiency * row_fill < kGoodTail) continue;
          tile_split = c, tile_split->splits = s;
          break;
        }
        const double fill = waves(target, tiles, per_sm).tail_efficiency * row_fill;
        if (fill <= best_fill) continue;
        best = c, best_fill = fill;
        if (fill >= kGoodTail) return c;
      }
      if (!split) split = tile_split;
    }
    if (split) return *split;
    if (best) return *best;
  }
  t.bn = n > 32 ? 64 : 32;
  const int64_t blocks = (m + 63) / 64 * ((n + t.bn - 1) / t.bn) * batches;
  // About one 64-row block per SM, less one per 32 SMs (the margin the heuristic was first tuned with).
  const int64_t enough = target.sm_count - target.sm_count / 32;
  t.bm = m > 32 && blocks >= enough ? 64 : 32;
  return t;
}

// What kiln profile's estimate charges a tile for, relative to the other tiles of one problem: the shared-memory
// wavefronts per mma.sync of its warps (the tensor-core kernels are bound there; on the SIMT loop every tile's
// threads compute 4 x 4 outputs, at one cost) over the fill of its waves (tail efficiency, times the rows and
// columns of the last tiles that are not past m and n). A warp of TM x TN accumulators per thread computes a
// wm = 8 TM by wn = 4 TN tile: per 16 of k, wm/16 ldmatrix.x4 for A and wn/16 for B (4 wavefronts each) feed
// wm/16 x wn/8 mma.sync, so 32 (wm + wn) / (wm wn) wavefronts per mma (1.5 for 64 x 32 warps, 2 for 32 x 32, 3
// for 32 x 16). Split-K's partial sums are not charged. Only the ratio of two tiles' costs for one problem means
// anything.
inline double tile_cost(const GemmTiles& t, int64_t m, int64_t n, int64_t batches, const Target& target) {
  const double wm = 8.0 * t.tm, wn = 4.0 * t.tn;
  const double per_mma = t.main_loop == MainLoop::tensor_core ? 32 * (wm + wn) / (wm * wn) : 1.0;
  const int64_t row_tiles = (m + t.bm - 1) / t.bm, col_tiles = (n + t.bn - 1) / t.bn;
  const double fill = waves(target, row_tiles * col_tiles * batches * t.splits, t.blocks_per_sm).tail_efficiency *
                      static_cast<double>(m) / static_cast<double>(row_tiles * t.bm) * static_cast<double>(n) /
                      static_cast<double>(col_tiles * t.bn);
  return per_mma / fill;
}

// Rows enough to fill the waves of any GPU many times over: the tiles pick_tiles gives at this many are those
// of a large problem, whatever its batch.
inline constexpr int64_t kSaturatingRows = int64_t{1} << 24;
// A shape-generic plan's GEMM tiles (Plan::tiles, TilePolicy::generic): the batch-generic tile `generic` (pick_tiles at
// kSaturatingRows rows, unsplit: the same source at every batch, so one kernel serves every binding that takes
// it) unless the batch's own tile `own` is more than kGenericSlack faster by tile_cost. A tensor-core generic
// kernel is launched at the residency (at most the one it is compiled for) that fills this batch's waves best:
// fewer blocks per SM are a larger pad at launch, not another kernel. `smem_per_row` as for pick_tiles.
// TilePolicy::generic_only takes the generic tile whatever it costs. The choice is kept for `kiln profile`,
// which shows both estimates.
inline constexpr double kGenericSlack = 1.10;
inline GemmTiles generic_or_own(GemmTiles generic, const GemmTiles& own, int64_t m, int64_t n, int64_t batches,
                                const Target& target, int64_t smem_per_row, TilePolicy policy, TileChoice* choice) {
  const auto cost = [&](const GemmTiles& t) { return tile_cost(t, m, n, batches, target); };
  if (generic.main_loop == MainLoop::tensor_core) {
    const int compiled = generic.blocks_per_sm;
    const int64_t smem = generic.smem_bytes(2) + smem_per_row * generic.bm;
    GemmTiles best = generic;
    for (int per_sm = compiled - 1; per_sm >= 1 && per_sm * generic.warps() >= kMinWarpsPerSm; --per_sm) {
      GemmTiles c = generic;
      c.blocks_per_sm = per_sm, c.bounds_blocks_per_sm = compiled, c.pad_smem = residency_pad(target, smem, per_sm);
      if (cost(c) < cost(best)) best = c;
    }
    generic = best;
  }
  const double ratio = cost(generic) / cost(own);
  const bool take_generic = ratio <= kGenericSlack || policy == TilePolicy::generic_only;
  if (choice) *choice = TileChoice{true, take_generic, generic, own, ratio};
  return take_generic ? generic : own;
}

}  // namespace kiln::codegen::gemm_glue
