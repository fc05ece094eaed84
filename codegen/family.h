// A kernel family: the one owner of a kind of kernel. It says whether it can run a fused group on a Target
// (can_implement, with the reason when not), decides everything about the kernel (plan -> KernelConfig: tiles,
// vector widths, shared memory, main loop, launch shape, parameters) and writes the source from those
// decisions (render). The planner asks can_implement of every group before it returns a plan (after
// fusion and memory planning: plan_graph in codegen/families.cpp), so every group of a plan has a family
// that runs it; tests assert on the KernelConfig instead of reading source.
//
// Adding a family: a KernelFamilyId row (include/kiln/kernel_kinds.h), a class implementing KernelFamily in
// its own codegen/family_*.cpp with its Config struct here, and a line in kernel_families() (families.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "codegen/kernel_builder.h"
#include "kiln/target.h"

namespace kiln::codegen {

// Elementwise DAGs: the flat path (flat index, VEC elements per thread with 16-byte accesses when every pointer
// is aligned at run time) or the general one (per-element coordinates, operands through their strides).
struct PointwiseConfig {
  enum class Path : uint8_t { flat, general } path = Path::general;
  int vec = 1;  // elements per vector access on the flat path
  Shape domain;
  // Batch-generic (the flat path, or a general walk with dim 0 outermost at a batch above 1): the batch
  // (dim 0 of the domain) is the kernel's argument and the source holds one batch element's count.
  bool batch_generic = false;
};

enum class MainLoop : uint8_t { simt, tensor_core };

// A block tile of templates/kiln/gemm_tile.cuh.
struct GemmTiles {
  int bm = 64, bn = 64, bk = 16, tm = 4, tn = 4;
  int stages = 3;  // shared-memory stages of the main loop (TileShape's STAGES): two slices in flight
  MainLoop main_loop = MainLoop::simt;
  // The residency the tile was picked for (gemm_glue::pick_tiles): compiled with __launch_bounds__(threads,
  // blocks_per_sm), so registers allow that many blocks per SM, and launched with `pad_smem` bytes of
  // (unused) dynamic shared memory when shared memory alone would let more share an SM.
  int blocks_per_sm = 2;
  int64_t pad_smem = 0;
  // The residency of its __launch_bounds__ when more than blocks_per_sm (0: blocks_per_sm): a batch-generic
  // kernel compiled for the residency that fills large grids, launched at fewer blocks per SM (pad_smem pins
  // them) where that fills this grid's waves better. Registers that allow more blocks allow fewer.
  int bounds_blocks_per_sm = 0;
  int launch_bounds_blocks() const { return std::max(blocks_per_sm, bounds_blocks_per_sm); }
  // Split-K: the blocks of grid z each reduce a run of whole k slices of the tile (conv only). Each stores
  // its fp32 partial tile in the group's scratch; the last to finish a tile sums them, in z order, and runs
  // the epilogue (templates/kiln/split_k.cuh). 1: every block reduces all of k.
  int splits = 1;
  int threads() const { return (bm / tm) * (bn / tn); }
  int warps() const { return threads() / 32; }
  // Shared memory of the stages (gemm_tile.cuh's Stage): rows of 2, 4 or 8 16-byte chunks are swizzled,
  // unpadded; other rows are padded by one 16-byte vector.
  int64_t smem_bytes(int elem_bytes) const {
    const int chunks = bk * elem_bytes / 16;
    const bool swizzled = chunks == 2 || chunks == 4 || chunks == 8;
    return int64_t{stages} * (bm + bn) * (bk + (swizzled ? 0 : 16 / elem_bytes)) * elem_bytes;
  }
  bool operator==(const GemmTiles&) const = default;
};

// How a shape-generic plan chose a GEMM kernel's tiles (gemm_glue::generic_or_own): the batch-generic tile,
// which every binding of the graph shares, or the batch's own, when the generic one would take more than 10 %
// longer by gemm_glue::tile_cost. `planned` is false under TilePolicy::own (a graph without symbols: its own tiles).
struct TileChoice {
  bool planned = false;
  bool generic = false;  // the kernel has the generic tile
  GemmTiles generic_tiles, own_tiles;
  double generic_over_own = 1;  // tile_cost of the generic tile over the own one, at this batch
  bool operator==(const TileChoice&) const = default;
};

// conv2d as an implicit GEMM: M = N·P·Q output pixels, N = K/G channels per group, K = C/G·R·S.
struct ConvConfig {
  GemmTiles tiles;
  TileChoice choice;
  int64_t m = 0, n = 0, k = 0, groups = 1;
  bool reduced = false;  // a reduction epilogue (templates/kiln/reduction_epilogue.cuh) after the tile's stores
  // The patch kernel (templates/kiln/conv2d_patch.cuh: the block's input rows and filters copied whole, no
  // stages) instead of the stage-based loop, for channels-last inputs too narrow for 16-byte chunks of k.
  bool patch = false;
  // Shape-generic: C, H, W, K, P and Q are kernel arguments, not in the source, so every conv with the same
  // filter, stride, padding, dtype, epilogue and tile shares it (docs/architecture.md, "Shape-generic conv
  // kernels"). Taken by the bindings of a symbolic graph for convs that qualify (conv_generic).
  bool shape_generic = false;
  MemView x, w;  // the operands as the kernel reads them (strides of their layouts, load transforms folded)
};

// conv2d_dgrad / conv2d_wgrad as implicit GEMMs (templates/kiln/conv2d_grad.cuh): dgrad M = N·H·W input pixels,
// N = C/G channels, K = R·S·K/G; wgrad M = K/G channels, N = R·S·C/G taps, K = N·P·Q pixels, split over
// tiles.splits blocks.
struct ConvGradConfig {
  GemmTiles tiles;
  bool wgrad = false;
  // One channel per group (G = C = K): direct kernels (conv2d_grad.cuh's depthwise_*), `tiles` unused.
  bool depthwise = false;
  int64_t m = 0, n = 0, k = 0, groups = 1;
};

struct DepthwiseConfig {
  int threads = 256;  // one output element per thread
  MemView x, w;
  bool row_norm = false;  // a layer norm over each pixel's channels: a block per pixel, a thread per channel
  // A reduction epilogue: blocks of bm pixels x bn channels (several outputs per thread), then their partial
  // sums.
  bool reduced = false;
  int bm = 64, bn = 32;
};

// What both matmul kernels know of their operands.
struct MatmulOperands {
  int64_t m = 0, n = 0, k = 0, batches = 1;
  bool a_vec = false, b_vec = false;  // 16-byte rows possible in every batch (base and batch strides allow it)
  MemView a, b;
};

struct MatmulConfig {
  GemmTiles tiles;
  TileChoice choice;
  MatmulOperands operands;
};

// At most 8 rows: a block per batch and column strip, K split across the block's threads.
struct SkinnyMatmulConfig {
  int lanes = 2;  // lanes across the strip (LN), the smallest of 2, 4, 8 whose pass over k fits K
  int vec = 4;    // elements per 16-byte read of B
  int threads = 256;
  MatmulOperands operands;
};

struct NormConfig {
  enum class Stat : uint8_t { mean_var = 0, mean_square = 1, softmax = 2 } stat = Stat::mean_var;
  int64_t rows = 0, cols = 0, inner = 1;
  int64_t channel_group = 0;  // > 0: a channels-last group norm walks a group's channels fastest (CG)
  int vec = 1;                // columns per vector access (V)
  int vec_dim = -1;           // the dim those columns are consecutive along
  int threads_per_row = 32;   // TPR
  int interleave = 1;         // neighbouring rows on neighbouring threads (IL): a channels-last group norm
                              // whose group is under a 32-byte sector a pixel
  int block = 128;
  int cached_chunks = 0;  // chunks a thread keeps in registers (K); 0: the row is streamed
  bool smem_row = false;  // a streamed row is kept in shared memory between its two passes
  DType cache_dtype = DType::f32;
  bool wide_index = false;
  // Batch-generic (dim 0 is no normalized dim): the batch is the kernel's argument and the source holds the
  // rows of one batch element (rows / dim 0), so every batch with the same mapping shares one source.
  bool batch_generic = false;
};

struct PoolConfig {
  bool global = false;
  bool channels_last = false;
  int vec = 1;              // channels per thread over channels-last memory (V)
  int threads_per_row = 1;  // global pools: threads reducing one (n, c) plane (TPR)
  int block = 128;
  bool wide_index = false;
};

struct DataConfig {
  enum class Kernel : uint8_t { copy_flat, copy_contiguous, gather, tiled_transpose } kernel = Kernel::gather;
  int tile_a = 0, tile_b = 0;  // the tiled transpose's tile (TA x TB)
};

// Everything a family decided about one group's kernel.
struct KernelConfig {
  KernelFamilyId family = KernelFamilyId::none;
  Dim3 grid, block;
  uint32_t dynamic_smem = 0;
  // The kernel's parameters p0, p1, ... in a canonical order (the anchor's operands by port, then every
  // other tensor the group reads from memory in the canonical order of its nodes, then what it writes).
  std::vector<KernelParam> params;
  std::variant<PointwiseConfig, ConvConfig, ConvGradConfig, DepthwiseConfig, MatmulConfig, SkinnyMatmulConfig,
               NormConfig, PoolConfig, DataConfig>
      detail;
};

// A family's plan starts here: its id and the group's parameters, declared in their canonical order.
inline KernelConfig new_config(KernelBuilder& b, KernelFamilyId family) {
  KernelConfig k;
  k.family = family;
  k.params = b.declare_params();
  return k;
}

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual KernelFamilyId id() const = 0;
  // The group kinds this family may run (which families are asked about a group).
  virtual bool runs(GroupKind kind) const = 0;
  // OK when this family runs the group on `target`; else a Status saying why not. Meant to be cheap (the
  // planner asks it of every group): the GEMM, pointwise and data families decide without writing kernel
  // source; norm and pool run their plan (the grid depends on the vector width they choose).
  virtual Status can_implement(KernelBuilder& b, const Target& target) const = 0;
  // Every decision about the kernel. Fails only where can_implement does.
  virtual Result<KernelConfig> plan(KernelBuilder& b, const Target& target) const = 0;
  // The kernel from those decisions (the builder writes the group's pointwise glue).
  virtual Result<Kernel> render(KernelBuilder& b, const KernelConfig& config) const = 0;
  // The workspace the kernel needs beyond its tensors (bytes; offsets unset), which the planner places in
  // Group::scratch once families are chosen: split-K's counters and partial tiles. (A reduction epilogue's are the
  // memory pass's own: src/passes/fusion.h.)
  virtual Group::Scratch scratch(KernelBuilder&, const Target&) const { return {}; }
  // Whether scratch() may be other than none (the planner builds no KernelBuilder to ask a family that says no).
  virtual bool may_need_scratch() const { return false; }
  // What `kiln profile` says of a kernel this family planned: its decisions in short (the config column:
  // "tc 128x64x32 4x8 s3 b2", "flat v4"), its arithmetic (2 per multiply-add; 0 where the kernel only moves
  // data) and whether that arithmetic runs on tensor cores. The profile has no arm per family.
  virtual std::string describe(const KernelConfig& config) const = 0;
  virtual double flops(const KernelConfig&) const { return 0; }
  virtual bool tensor_cores(const KernelConfig&) const { return false; }
};

// Every family, in the order they are asked (the more specialised first: depthwise before the implicit
// GEMM, the skinny matmul before the tiled one).
std::span<const KernelFamily* const> kernel_families();
const KernelFamily& kernel_family(KernelFamilyId id);

// The first family that runs the group, or a Status with every candidate's reason.
Result<const KernelFamily*> choose_family(KernelBuilder& b, const Target& target);

// The families' own definitions (family_*.cpp).
const KernelFamily& pointwise_family();
const KernelFamily& conv2d_family();
const KernelFamily& conv_grad_family();
const KernelFamily& pool_grad_family();
const KernelFamily& depthwise_family();
const KernelFamily& matmul_family();
const KernelFamily& skinny_matmul_family();
const KernelFamily& norm_family();
const KernelFamily& pool_family();
const KernelFamily& data_family();

}  // namespace kiln::codegen
