// The pool epilogue: a global average pool of a value that a conv kernel stores anyway (squeeze-excite's
// pool of the depthwise or grouped conv's activated output), computed by that kernel instead of a kernel
// of its own that reads the whole tensor again.
//
// After a block has stored its tile of the value (rows m0 .. m0+BM of the M = N·PQ output pixels, channels
// k0 .. k0+kn), it reads its own stores back (L2-resident: they were just written) and sums them per
// (channel, piece), a piece being the rows of one 32-row chunk inside one image; piece (chunk c, image n)
// is slot c + n of the partial sums, distinct for distinct pieces. Each thread sums one piece's rows in
// order and blocks count themselves per channel tile; the block that arrives last for its tile adds, for
// every image, its pieces' sums in chunk order and stores the mean. So the result is deterministic (no
// floating-point atomics), it averages exactly the values stored (rounded to the storage type, as a pool
// kernel would read them), and no block waits for another.
//
// Pool: the generated functor, with
//   float load(int n, int k, int pix) const     the value as this kernel stored it, pix = p·Q + q
//   void store(int n, int k, float mean) const  the pool's output (and what follows it in the group: nothing)
//   unsigned* counters() const                  one per channel tile, zero when the kernel starts
//   float* partials() const                     (ceil(M / 32) + N - 1) slots of K floats
// The shapes and the formulas for the scratch are src/passes/fusion.h's PoolEpilogueShape.
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {
namespace pool_epi {

constexpr int kChunk = 32;  // rows per partial sum (kiln::kPoolChunkRows)

// Called by every thread of a block after its epilogue stored the tile. `tile`: the block's channel tile
// (its counter); `tiles`: the blocks sharing that tile (one per row tile).
template <int N, int PQ, int K, int BM, int BN, int THREADS, class Pool>
__device__ __forceinline__ void finish(const Pool& pool, int m0, int k0, int kn, int tile, unsigned tiles) {
  static_assert(BM % kChunk == 0, "row tiles of whole chunks");
  constexpr int M = N * PQ;
  constexpr int S0 = (kChunk - 1 + PQ - 1) / PQ + 1;  // images a chunk of 32 rows can touch
  constexpr int SI = S0 < N ? S0 : N;
  constexpr int CH = BM / kChunk;
  float* part = pool.partials();
  __syncthreads();  // the block's stores of the value are visible to all its threads
  for (int e = static_cast<int>(threadIdx.x); e < CH * SI * BN; e += THREADS) {
    const int j = e % BN, s = e / BN % SI, c = m0 / kChunk + e / BN / SI;
    const int r0 = c * kChunk, r1 = r0 + kChunk < M ? r0 + kChunk : M;
    const int n = r0 / PQ + s;
    if (j >= kn || r0 >= M || n * PQ >= r1) continue;
    const int lo = r0 > n * PQ ? r0 : n * PQ, hi = r1 < (n + 1) * PQ ? r1 : (n + 1) * PQ;
    float sum = 0.0f;
    for (int m = lo; m < hi; ++m) sum += pool.load(n, k0 + j, m - n * PQ);
    kiln::st(part + static_cast<long long>(c + n) * K + k0 + j, sum);
  }
  __threadfence();  // the partial sums reach L2 before the count says so
  __syncthreads();
  KILN_SHARED(int, last, [1]);
  if (threadIdx.x == 0) last[0] = atomicAdd(pool.counters() + tile, 1u) == tiles - 1u;
  __syncthreads();
  if (!last[0]) return;
  __threadfence();  // every other block's partial sums are visible past its count
  for (int e = static_cast<int>(threadIdx.x); e < N * BN; e += THREADS) {
    const int j = e % BN, n = e / BN;
    if (j >= kn) continue;
    const int c0 = n * PQ / kChunk, c1 = ((n + 1) * PQ - 1) / kChunk;
    float sum = 0.0f;
    for (int c = c0; c <= c1; ++c) sum += kiln::ld_cg(part + static_cast<long long>(c + n) * K + k0 + j);
    pool.store(n, k0 + j, sum / static_cast<float>(PQ));
  }
}

}  // namespace pool_epi
}  // namespace kiln
