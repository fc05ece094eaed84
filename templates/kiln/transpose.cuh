// A permutation of memory order that moves the innermost dim (NCHW<->NHWC, KCRS<->KRSC, transposes that
// bring another dim innermost): tiled through shared memory so that both the reads and the writes of a
// warp touch consecutive addresses.
//
// The output's dims are split in three groups (all compile-time, in Cfg):
//   A: the dims innermost in the *source's* memory order (reads walk them),
//   B: the dims innermost in the *output's* memory order (writes walk them),
//   the rest: one tile row of blocks each.
// Cfg: R, shape[R] (output logical dims), walk[R] = rest dims (outer to inner) then B dims then A dims
// (each group outer to inner in its memory order), NA, NB, LA, LB (products of the groups' sizes), TA x TB
// (the tile: powers of two, TB <= 32), threads. The rest's count is the grid's (blocks / tiles), and its
// outermost dim's size is never read: a batch-generic kernel's batch (kiln/gather.cuh, unflatten).
//
// A block moves one TA x TB tile: phase 1 reads it with consecutive threads along A, phase 2 hands it to
// the epilogue with consecutive threads along B. The tile is stored [b][a] with a row stride of
// TA + 32/TB: phase 2's lanes read (b = lane % TB, a = lane / TB), whose banks
// b * (32/TB) + lane / TB are all different when TA is a multiple of 32 (TB = 32 gives the classic
// 32 x 33 tile). A source whose inner run is short (C = 3 of NHWC) gets TA < 32 and a stride of TA + 1:
// odd, so phase 2 stays conflict-free for TB = 32; phase 1 then has at most a few 2-way conflicts.
#pragma once

#include "kiln/gather.cuh"

namespace kiln {

template <class Cfg, class Load, class Epi>
__device__ __forceinline__ void tiled_transpose(const Load& load, const Epi& epi) {
  constexpr int R = Cfg::R, NA = Cfg::NA, NB = Cfg::NB, TA = Cfg::TA, TB = Cfg::TB;
  constexpr int S = TA % 32 == 0 ? TA + 32 / TB : TA + 1;
  static_assert(TA >= 1 && (TA & (TA - 1)) == 0 && TB >= 1 && TB <= 32 && 32 % TB == 0, "tile sizes");
  KILN_SHARED(float, tile, [TB * S]);
  constexpr long long tiles_a = (Cfg::LA + TA - 1) / TA, tiles_b = (Cfg::LB + TB - 1) / TB;
  long long blk = blockIdx.x;
  const long long a0 = blk % tiles_a * TA;
  blk /= tiles_a;
  const long long b0 = blk % tiles_b * TB;
  const long long r = blk / tiles_b;
  Idx<R> i;
  unflatten<Cfg, 0, R - NA - NB>(r, i);
  for (int e = threadIdx.x; e < TA * TB; e += Cfg::threads) {
    const int a = e % TA, b = e / TA;
    if (a0 + a < Cfg::LA && b0 + b < Cfg::LB) {
      unflatten<Cfg, R - NA, R>(a0 + a, i);
      unflatten<Cfg, R - NA - NB, R - NA>(b0 + b, i);
      tile[b * S + a] = load(i);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < TA * TB; e += Cfg::threads) {
    const int b = e % TB, a = e / TB;
    if (a0 + a < Cfg::LA && b0 + b < Cfg::LB) {
      unflatten<Cfg, R - NA, R>(a0 + a, i);
      unflatten<Cfg, R - NA - NB, R - NA>(b0 + b, i);
      epi(tile[b * S + a], i);
    }
  }
}

}  // namespace kiln
