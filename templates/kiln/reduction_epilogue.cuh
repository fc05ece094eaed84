// The reduction epilogue: a per-channel reduction (OpDef::channel_reduction, src/ops/registry.h: a global
// average pool, batch-norm statistics) of a value that a conv kernel stores anyway, computed by that kernel
// instead of a kernel of its own that reads the whole tensor again (squeeze-excite's pool of the depthwise
// conv's activated output; a training batch norm's sum and sum of squares of the conv's output).
//
// After a block has stored its tile of the value (rows m0 .. m0+BM of the M = N·PQ output pixels, channels
// k0 .. k0+kn), it reads its own stores back (L2-resident: they were just written) and sums each term of
// them: per image, per (channel, piece), a piece being the rows of one 32-row chunk inside one image (piece
// (chunk c, image n) is slot c + n of the partial sums, distinct for distinct pieces); over all images, per
// (channel, row tile) (slot m0 / BM). Blocks count themselves per channel tile; the block that arrives last
// for its tile adds the slots in a fixed order and stores what the reduction finishes them into. So the result is
// deterministic (no floating-point atomics), it reduces exactly the values stored (rounded to the storage type, as a
// separate kernel would read them), and no block waits for another.
//
// Red: the generated functor, with
//   static constexpr int TERMS               sums per channel (1 to 4)
//   static constexpr bool PER_IMAGE          sums per (image, channel), else per channel over all images
//   float load(int n, int k, int pix) const  the value as this kernel stored it, pix = p·Q + q
//   float term(int q, float v) const         term q of a value (v; v · v)
//   void store(int n, int k, int q, float sum, float count) const
//                                            finishes term q's sum of `count` values and stores it (n: the
//                                            image, 0 when over all images)
//   unsigned* counters() const               one per channel tile, zero when the kernel starts
//   float* partials() const                  (ceil(M / 32) + N - 1) slots of TERMS · K floats (over all
//                                            images only the first ceil(M / BM), one per row tile, are used)
// The shapes and the formulas for the scratch are src/passes/fusion.h's ReductionEpilogueShape.
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {
namespace red_epi {

constexpr int kChunk = 32;  // rows per partial sum (kiln::kReductionChunkRows)

// The partial sum of term q, channel k, slot s.
template <int K, int TERMS>
__device__ __forceinline__ long long slot_at(int s, int q, int k) {
  return (static_cast<long long>(s) * TERMS + q) * K + k;
}

// Phase 1 per image: each thread sums one piece (the rows of one 32-row chunk inside one image) of one
// channel of the block's tile, into slot c + n. N: the batch (a run-time value, as everywhere below).
template <int PQ, int K, int BM, int BN, int THREADS, class Red>
__device__ __forceinline__ void sum_pieces(int N, const Red& red, float* part, int m0, int k0, int kn) {
  const int M = N * PQ;
  constexpr int T = Red::TERMS;
  constexpr int S0 = (kChunk - 1 + PQ - 1) / PQ + 1;  // images a chunk of 32 rows can touch
  const int SI = S0 < N ? S0 : N;
  constexpr int CH = BM / kChunk;
  for (int e = static_cast<int>(threadIdx.x); e < CH * SI * BN; e += THREADS) {
    const int j = e % BN, s = e / BN % SI, c = m0 / kChunk + e / BN / SI;
    const int r0 = c * kChunk, r1 = r0 + kChunk < M ? r0 + kChunk : M;
    const int n = r0 / PQ + s;
    if (j >= kn || r0 >= M || n * PQ >= r1) continue;
    const int lo = r0 > n * PQ ? r0 : n * PQ, hi = r1 < (n + 1) * PQ ? r1 : (n + 1) * PQ;
    float sum[T];
#pragma unroll
    for (int q = 0; q < T; ++q) sum[q] = 0.0f;
    for (int m = lo; m < hi; ++m) {
      const float v = red.load(n, k0 + j, m - n * PQ);
#pragma unroll
      for (int q = 0; q < T; ++q) sum[q] += red.term(q, v);
    }
#pragma unroll
    for (int q = 0; q < T; ++q) kiln::st(part + slot_at<K, T>(c + n, q, k0 + j), sum[q]);
  }
}

// Phase 1 over all images: image boundaries do not matter, so a thread per channel sums the block's whole
// row tile (four accumulators over runs of four rows, the rest into the first, added in a fixed order), into slot m0 /
// BM: one slot per row tile, so the last block adds BM / 32 times fewer of them.
template <int PQ, int K, int BM, int BN, int THREADS, class Red>
__device__ __forceinline__ void sum_tile(int N, const Red& red, float* part, int m0, int k0, int kn) {
  const int M = N * PQ;
  constexpr int T = Red::TERMS;
  const int hi = m0 + BM < M ? m0 + BM : M;
  for (int j = static_cast<int>(threadIdx.x); j < kn; j += THREADS) {
    float sum[4][T];
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int q = 0; q < T; ++q) sum[u][q] = 0.0f;
    int m = m0;
    for (; m + 4 <= hi; m += 4) {  // (constant indices: the accumulators stay in registers)
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int n = (m + u) / PQ;
        const float v = red.load(n, k0 + j, m + u - n * PQ);
#pragma unroll
        for (int q = 0; q < T; ++q) sum[u][q] += red.term(q, v);
      }
    }
    for (; m < hi; ++m) {
      const int n = m / PQ;
      const float v = red.load(n, k0 + j, m - n * PQ);
#pragma unroll
      for (int q = 0; q < T; ++q) sum[0][q] += red.term(q, v);
    }
#pragma unroll
    for (int q = 0; q < T; ++q)
      kiln::st(part + slot_at<K, T>(m0 / BM, q, k0 + j), (sum[0][q] + sum[1][q]) + (sum[2][q] + sum[3][q]));
  }
}

// Called by every thread of a block after its epilogue stored the tile. `tile`: the block's channel tile
// (its counter); `tiles`: the blocks sharing that tile (one per row tile, blockIdx.x = m0 / BM). N: the
// batch.
template <int PQ, int K, int BM, int BN, int THREADS, class Red>
__device__ __forceinline__ void finish(int N, const Red& red, int m0, int k0, int kn, int tile, unsigned tiles) {
  static_assert(BM % kChunk == 0, "row tiles of whole chunks");
  const int M = N * PQ;
  constexpr int T = Red::TERMS;
  static_assert(T >= 1 && T <= 4 && (T == 1 || !Red::PER_IMAGE), "1 to 4 terms, one when per image");
  float* part = red.partials();
  __syncthreads();  // the block's stores of the value are visible to all its threads
  if constexpr (Red::PER_IMAGE) {
    sum_pieces<PQ, K, BM, BN, THREADS>(N, red, part, m0, k0, kn);
  } else {
    sum_tile<PQ, K, BM, BN, THREADS>(N, red, part, m0, k0, kn);
  }
  __threadfence();  // the partial sums reach L2 before the count says so
  __syncthreads();
  KILN_SHARED(int, last, [1]);
  if (threadIdx.x == 0) last[0] = atomicAdd(red.counters() + tile, 1u) == tiles - 1u;
  __syncthreads();
  if (!last[0]) return;
  __threadfence();  // every other block's partial sums are visible past its count
  if constexpr (Red::PER_IMAGE) {
    // Thread e adds the pieces of (image n, channel j) in chunk order.
    for (int e = static_cast<int>(threadIdx.x); e < N * BN; e += THREADS) {
      const int j = e % BN, n = e / BN;
      if (j >= kn) continue;
      const int c0 = n * PQ / kChunk, c1 = ((n + 1) * PQ - 1) / kChunk;
      float sum = 0.0f;
      for (int c = c0; c <= c1; ++c) sum += kiln::ld_cg(part + slot_at<K, T>(c + n, 0, k0 + j));
      red.store(n, k0 + j, 0, sum, static_cast<float>(PQ));
    }
  } else {
    // Thread e adds the row tiles' sums of (term q, channel j): four interleaved accumulators (independent
    // loads in flight), added in a fixed order.
    for (int e = static_cast<int>(threadIdx.x); e < T * BN; e += THREADS) {
      const int j = e % BN, q = e / BN;
      if (j >= kn) continue;
      float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const int n_tiles = static_cast<int>(tiles);
      int s = 0;
      for (; s + 4 <= n_tiles; s += 4) {
#pragma unroll
        for (int u = 0; u < 4; ++u) sum[u] += kiln::ld_cg(part + slot_at<K, T>(s + u, q, k0 + j));
      }
      for (; s < n_tiles; ++s) sum[0] += kiln::ld_cg(part + slot_at<K, T>(s, q, k0 + j));
      red.store(0, k0 + j, q, (sum[0] + sum[1]) + (sum[2] + sum[3]), static_cast<float>(M));
    }
  }
}

}  // namespace red_epi
}  // namespace kiln
