// Batched matmul with few rows, Y[..., M, N] = A[..., M, K] · B[..., K, N] for M <= 8 (a decode step, an
// MLP at batch 1..8): reading B is the whole cost. The tiled GEMM (kiln/matmul.cuh) gives such a product
// 32-row tiles that are mostly padding and walks K serially in each of few blocks. Here a block covers every
// row of one batch and a strip of BN columns, and its 256 threads split K instead:
//   - a lane owns V consecutive columns (one 16-byte access of B per k when B is contiguous along n) and
//     KC = V consecutive k; LN lanes of a warp lie across the strip, LK = 32 / LN across k, and the 8 warps
//     take further k, so one pass of the block covers KSTEP = 8 · LK · KC values of k;
//   - each lane keeps M x V partial sums in registers; the LK lanes of a column group add theirs with warp
//     shuffles, the 8 warps theirs through shared memory, and the epilogue runs once per output, threads
//     along n (coalesced stores).
// A is read through the same strides as in matmul.cuh (vector loads along k when contiguous; its few rows
// stay in L1/L2 across the block's lanes).
//
// The generated glue supplies matmul.cuh's Cfg (M, N, K, BATCH, R, SAM, SAK, SBK, SBN, AV, BV, a_off,
// b_off, batch) with, instead of the tile sizes,
//   static constexpr int LN;                // lanes across the strip: 2, 4 or 8
// and optionally matmul.cuh's prologue functor ((value, Idx<1>{k}) -> value, applied to every element of A).
// Launch: grid (ceil(N / (LN · V)) · BATCH), block 256, no dynamic shared memory.
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {
namespace mm {

template <class Cfg, class T>
struct Skinny {
  static constexpr int WARPS = 8, THREADS = 32 * WARPS;
  static constexpr int V = 16 / static_cast<int>(sizeof(T));  // columns per lane, k per lane and pass
  static constexpr int KC = V;
  static constexpr int LN = Cfg::LN, LK = 32 / LN, BN = LN * V;
  static constexpr int NT = (Cfg::N + BN - 1) / BN;  // column strips per batch
  static constexpr int KSTEP = WARPS * LK * KC;
  static_assert(Cfg::M >= 1 && Cfg::M <= 8, "the skinny matmul keeps M x V sums per thread");
  static_assert(LN == 2 || LN == 4 || LN == 8, "LN lanes across the strip");
  // Vector reads: B along n (a strip's V columns are in range together when V divides N), A along k (a
  // lane's KC values of k likewise when KC divides K). Offsets are multiples of V by these conditions and
  // Cfg's AV / BV (batch offsets); the pointers' own alignment is tested at run time (ldvu).
  static constexpr bool kVecB = Cfg::BV && Cfg::SBN == 1 && Cfg::N % V == 0 && Cfg::SBK % V == 0;
  static constexpr bool kVecA = Cfg::AV && Cfg::SAK == 1 && Cfg::K % KC == 0 && Cfg::SAM % KC == 0;
};

template <class Cfg, class T, class Epi, class Pro = NoPrologue>
__device__ __forceinline__ void matmul_skinny(const T* a, const T* b, const Epi& epi, const Pro& pro = Pro{}) {
  using S = Skinny<Cfg, T>;
  constexpr int M = Cfg::M, V = S::V, KC = S::KC, LN = S::LN, BN = S::BN;
  const int z = static_cast<int>(blockIdx.x) / S::NT;
  const int n0 = static_cast<int>(blockIdx.x) % S::NT * BN;
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  const int ln = lane % LN, lk = lane / LN;
  const int n = n0 + ln * V;  // this lane's first column
  const T* A = a + Cfg::a_off(z);
  const T* B = b + Cfg::b_off(z);

  float acc[M][V];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int j = 0; j < V; ++j) acc[m][j] = 0.0f;

  for (int k0 = (warp * S::LK + lk) * KC; k0 < Cfg::K; k0 += S::KSTEP) {
    float av[M][KC];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if constexpr (S::kVecA) {
        const Vec<T, KC> v = ldvu<T, KC>(A, m * Cfg::SAM + k0);
#pragma unroll
        for (int c = 0; c < KC; ++c) av[m][c] = v.v[c];
      } else {
#pragma unroll
        for (int c = 0; c < KC; ++c) av[m][c] = k0 + c < Cfg::K ? ldf(A, m * Cfg::SAM + (k0 + c) * Cfg::SAK) : 0.0f;
      }
      if constexpr (Pro::kActive) {  // (past K the values stay zero)
#pragma unroll
        for (int c = 0; c < KC; ++c)
          if (k0 + c < Cfg::K) av[m][c] = pro(av[m][c], Idx<1>{{k0 + c}});
      }
    }
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      const int k = k0 + c;
      float bv[V];
      if constexpr (S::kVecB) {
        if ((Cfg::K % KC == 0 || k < Cfg::K) && n < Cfg::N) {
          const Vec<T, V> v = ldvu<T, V>(B, k * Cfg::SBK + n);
#pragma unroll
          for (int j = 0; j < V; ++j) bv[j] = v.v[j];
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) bv[j] = 0.0f;
        }
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j)
          bv[j] = k < Cfg::K && n + j < Cfg::N ? ldf(B, k * Cfg::SBK + (n + j) * Cfg::SBN) : 0.0f;
      }
#pragma unroll
      for (int m = 0; m < M; ++m)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[m][j] = fmaf(av[m][c], bv[j], acc[m][j]);
    }
  }

  // The LK lanes of a column group differ in the lane bits at and above LN.
#pragma unroll
  for (int off = LN; off < 32; off <<= 1)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int j = 0; j < V; ++j) acc[m][j] += __shfl_xor_sync(0xffffffffu, acc[m][j], off);

  KILN_SHARED(float, part, [S::WARPS][M][BN]);
  if (lk == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int j = 0; j < V; ++j) part[warp][m][ln * V + j] = acc[m][j];
  }
  __syncthreads();

  Idx<Cfg::R> i;
  Cfg::batch(z, i);
  for (int e = static_cast<int>(threadIdx.x); e < M * BN; e += S::THREADS) {
    const int m = e / BN, c = e % BN;
    if (n0 + c >= Cfg::N) continue;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < S::WARPS; ++w) s += part[w][m][c];
    i.i[Cfg::R - 2] = m;
    i.i[Cfg::R - 1] = n0 + c;
    epi(s, i);
  }
}

}  // namespace mm
}  // namespace kiln
