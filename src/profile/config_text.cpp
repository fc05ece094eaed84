// A family's decisions in short, for `kiln profile`'s config column (profile_internal.h).
#include <fmt/format.h>

#include "profile/profile_internal.h"

namespace kiln::profile_detail {

namespace {

std::string tiles_text(const codegen::GemmTiles& t) {
  // b: the blocks per SM the tile was picked for (its launch bounds); k: split-K's splits, when split
  return fmt::format("{} {}x{}x{} {}x{} s{} b{}{}", t.main_loop == codegen::MainLoop::tensor_core ? "tc" : "simt", t.bm,
                     t.bn, t.bk, t.tm, t.tn, t.stages, t.blocks_per_sm,
                     t.splits > 1 ? fmt::format(" k{}", t.splits) : std::string());
}

template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

}  // namespace

KernelShape kernel_shape(const codegen::KernelConfig& c) {
  using namespace codegen;
  KernelShape s;
  std::visit(overloaded{
                 [&](const PointwiseConfig& p) {
                   s.config = p.path == PointwiseConfig::Path::flat ? fmt::format("flat v{}", p.vec) : "general";
                 },
                 [&](const ConvConfig& p) {
                   s.config = p.patch ? fmt::format("tc patch {}x{} {}x{} b{}", p.tiles.bm, p.tiles.bn, p.tiles.tm,
                                                    p.tiles.tn, p.tiles.blocks_per_sm)
                                      : tiles_text(p.tiles) + (p.pooled ? " pool" : "");
                   s.flops = 2.0 * double(p.m) * double(p.n) * double(p.k) * double(p.groups);
                   s.tensor_cores = p.tiles.main_loop == MainLoop::tensor_core;
                 },
                 [&](const DepthwiseConfig& p) {
                   s.config = p.row_norm ? fmt::format("t{} rownorm", p.threads)
                              : p.pooled ? fmt::format("t{} pool {}x{}", p.threads, p.bm, p.bn)
                                         : fmt::format("t{}", p.threads);
                 },
                 [&](const MatmulConfig& p) {
                   s.config = tiles_text(p.tiles);
                   s.flops = 2.0 * double(p.operands.m) * double(p.operands.n) * double(p.operands.k) *
                             double(p.operands.batches);
                   s.tensor_cores = p.tiles.main_loop == MainLoop::tensor_core;
                 },
                 [&](const SkinnyMatmulConfig& p) {
                   s.config = fmt::format("skinny ln{} v{} t{}", p.lanes, p.vec, p.threads);
                   s.flops = 2.0 * double(p.operands.m) * double(p.operands.n) * double(p.operands.k) *
                             double(p.operands.batches);
                 },
                 [&](const NormConfig& p) {
                   s.config = fmt::format("tpr{}{} v{} b{}{}{}", p.threads_per_row,
                                          p.interleave > 1 ? fmt::format(" il{}", p.interleave) : std::string(), p.vec,
                                          p.block,
                                          p.cached_chunks ? fmt::format(" k{}", p.cached_chunks) : std::string(),
                                          p.smem_row ? " smem" : "");
                 },
                 [&](const PoolConfig& p) {
                   s.config = fmt::format("{} v{} tpr{} b{}", p.global ? "global" : "window", p.vec, p.threads_per_row,
                                          p.block);
                 },
                 [&](const DataConfig& p) {
                   static const char* const kNames[] = {"copy_flat", "copy_contiguous", "gather", "transpose"};
                   s.config = kNames[static_cast<int>(p.kernel)];
                   if (p.kernel == DataConfig::Kernel::tiled_transpose)
                     s.config += fmt::format(" {}x{}", p.tile_a, p.tile_b);
                 },
             },
             c.detail);
  return s;
}

}  // namespace kiln::profile_detail
