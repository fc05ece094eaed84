// Split-K: a GEMM whose output tiles are too few to fill the GPU's waves (ResNet-50's 1568 x 512 convs at
// batch 32: 104 tiles of 128 rows on 132 SMs) splits each tile's reduction over SPLITS blocks (grid z),
// each multiplying a run of whole k slices. Each block stores its fp32 partial tile in the scratch, in the
// staged epilogue's order (so these stores coalesce as the output's would), and counts itself in its
// tile's counter; the block that arrives last sums the SPLITS partial tiles in z order and runs the
// epilogue. So the result is deterministic (no floating-point atomics, the same sum whichever block is
// last), the epilogue runs once per output, and no block waits for another.
//
// Split: the generated functor, with
//   unsigned* counters() const   one per output tile (blockIdx.y * gridDim.x + blockIdx.x), zero at start
//   float* partials() const      tiles x SPLITS x BM x BN floats
// (codegen/family_gemm.h's split_scratch sizes them; the memory pass places them in the group's scratch.)
#pragma once

#include "kiln/gemm_tile.cuh"

namespace kiln {
namespace split_k {

// The k range of split z: whole BK slices, the last split taking what remains.
template <int KDIM, int BK, int SPLITS>
struct Range {
  static constexpr int kSlices = (KDIM + BK - 1) / BK;
  static constexpr int kPerSplit = (kSlices + SPLITS - 1) / SPLITS;
  static_assert((SPLITS - 1) * kPerSplit < kSlices, "every split has at least one slice");
  int k0, k1;
  __device__ __forceinline__ explicit Range(int z)
      : k0(z * kPerSplit * BK), k1((z + 1) * kPerSplit * BK < KDIM ? (z + 1) * kPerSplit * BK : KDIM) {}
};

// Called by every thread of a block after its main loop, instead of gemm::staged_epilogue: f(r, c, v, col(c))
// runs once per element of the tile, in the last block to finish it, with the sum of every split's partial.
template <class T, class Tile, bool ALONG_M, int SPLITS, class MainLoop, class Split, class Col, class F>
__device__ __forceinline__ void finish(const MainLoop& ml, void* smem, const Split& split, Col&& col, F&& f) {
  constexpr int kElems = Tile::BM * Tile::BN;
  const long long tile = static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x;
  float* const part = split.partials() + tile * SPLITS * kElems;
  // Element e of a partial tile is the staged epilogue's e-th call: (inner, outer) = (e % kInner, e / kInner).
  gemm::staged_epilogue<T, Tile, ALONG_M>(ml, smem, gemm::NoColumn{}, [&](int r, int c, float v, int) {
    const int e = ALONG_M ? c * Tile::BM + r : r * Tile::BN + c;
    kiln::st(part + static_cast<long long>(blockIdx.z) * kElems + e, v);
  });
  __threadfence();  // the partial tile reaches L2 before the count says so
  __syncthreads();
  KILN_SHARED(int, last, [1]);
  if (threadIdx.x == 0) last[0] = atomicAdd(split.counters() + tile, 1u) == static_cast<unsigned>(SPLITS - 1);
  __syncthreads();
  if (!last[0]) return;
  __threadfence();  // every other block's partial tile is visible past its count
  constexpr int kInner = ALONG_M ? Tile::BM : Tile::BN;
  const auto sum = [&](int e) {
    float v = 0.0f;
#pragma unroll
    for (int z = 0; z < SPLITS; ++z) v += kiln::ld_cg(part + static_cast<long long>(z) * kElems + e);
    return v;
  };
  if constexpr (!ALONG_M && Tile::THREADS % kInner == 0) {  // one column per thread, as staged_epilogue
    const int c = static_cast<int>(threadIdx.x) % kInner;
    const auto shared = col(c);
    for (int r = static_cast<int>(threadIdx.x) / kInner; r < Tile::BM; r += Tile::THREADS / kInner)
      f(r, c, sum(r * kInner + c), shared);
  } else {
    for (int e = static_cast<int>(threadIdx.x); e < kElems; e += Tile::THREADS) {
      const int inner = e % kInner, outer = e / kInner;
      if constexpr (ALONG_M) {
        f(inner, outer, sum(e), col(outer));
      } else {
        f(outer, inner, sum(e), col(inner));
      }
    }
  }
}

}  // namespace split_k
}  // namespace kiln
