// Batched matmul Y[..., M, N] = A[..., M, K] · B[..., K, N] on the GEMM core of kiln/gemm_tile.cuh.
// Transposes and broadcast batch dims are strides: A's element (m, k) of batch z sits at
// a_off(z) + m·SAM + k·SAK, B's (k, n) at b_off(z) + k·SBK + n·SBN (a broadcast batch dim has stride 0).
// A with k contiguous (plain A, transposed B) moves with cp.async; otherwise the element path reads along
// the contiguous dim.
//
// The generated glue supplies
//   struct Cfg { static constexpr int MMAX, N, K, BATCH, R;                  // R: the output's rank
//                static constexpr long long SAM, SAK, SBK, SBN;
//                static constexpr bool AV, BV;   // a_off/b_off are always multiples of 16 bytes
//                static constexpr int BM, BN, BK, TM, TN;
//                static __device__ long long a_off(int z), b_off(int z);   // element offsets of batch z
//                static __device__ void batch(int z, kiln::Idx<R>& i); };  // i.i[0 .. R-3] of batch z
// and an epilogue functor called with (value, Idx<R>{batch..., m, n}); optionally a prologue functor
// applied to every element of A read, (value, Idx<1>{k}) -> value.
// M, the rows, is the argument `rows` (1 ≤ rows ≤ MMAX): a 2-D matmul's M is dim 0 of its output, the
// batch, and one kernel serves every batch up to MMAX; a batched one passes its Cfg's M.
// Launch: grid (ceil(M/BM) · BATCH, ceil(N/BN)), block Tile::THREADS, no dynamic shared memory.
#pragma once

#include "kiln/gemm_tile.cuh"

namespace kiln {
namespace mm {

// A row is m (for A) or n (for B); `step` is the row stride, `kstride` the stride along k; `rows` rows, at
// most ROWS_MAX. Pro: A's fused prologue, a functor of (value, Idx<1>{k}) (the family fuses only ops whose
// operands vary along k alone).
template <class T, long long STEP, long long KSTRIDE, int ROWS_MAX, int KDIM, bool ALIGNED, class Pro = NoPrologue>
struct StridedRows {
  static constexpr int V = gemm::VecWidth<T>::value;
  static constexpr bool kVec = ALIGNED && KSTRIDE == 1 && STEP % V == 0 && KDIM % V == 0;
  static constexpr bool kKFast = KSTRIDE == 1;
  static constexpr bool kPro = Pro::kActive;
  static constexpr long long abs_(long long v) { return v < 0 ? -v : v; }
  // Every offset within a batch fits in an int: 32-bit address arithmetic (fewer registers for the element
  // loaders, which keep a slice's values in registers across its math).
  static constexpr bool kInt = (ROWS_MAX - 1) * abs_(STEP) + (KDIM - 1) * abs_(KSTRIDE) < (1LL << 31);
  using Off = typename gemm::OffsetType<kInt>::type;
  struct Row {
    Off base;  // -1 for rows past the edge
  };
  const T* ptr;  // the operand's batch start
  Pro fn;
  int rows;
  __device__ __forceinline__ float pro(const Row&, int k, float v) const { return fn(v, Idx<1>{{k}}); }
  __device__ __forceinline__ Row row(int r) const { return Row{r < rows ? static_cast<Off>(r * STEP) : Off{-1}}; }
  __device__ __forceinline__ bool at(const Row& rw, int k, long long& off) const {
    if (rw.base < 0 || k >= KDIM) return false;
    off = rw.base + static_cast<Off>(k * KSTRIDE);
    return true;
  }
};

template <class Cfg, class T, class Epi, class Pro = NoPrologue,
          template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void matmul(int rows, const T* a, const T* b, const Epi& epi, const Pro& pro = Pro{}) {
  using Tile = gemm::TileShape<Cfg::BM, Cfg::BN, Cfg::BK, Cfg::TM, Cfg::TN, Cfg::STAGES>;
  const int MT = (rows + Tile::BM - 1) / Tile::BM;
  const int z = static_cast<int>(blockIdx.x) / MT;
  const int m0 = static_cast<int>(blockIdx.x) % MT * Tile::BM;
  const int n0 = static_cast<int>(blockIdx.y) * Tile::BN;
  const StridedRows<T, Cfg::SAM, Cfg::SAK, Cfg::MMAX, Cfg::K, Cfg::AV, Pro> sa{a + Cfg::a_off(z), pro, rows};
  const StridedRows<T, Cfg::SBN, Cfg::SBK, Cfg::N, Cfg::K, Cfg::BV> sb{b + Cfg::b_off(z), {}, Cfg::N};
  MainLoop<T, Tile> ml;
  void* smem = gemm::gemm_mainloop<T, Tile>(sa, sb, m0, n0, Cfg::K, ml);

  // Epilogue in the order of the output's memory (Cfg::ALONG_M: rows contiguous; else columns).
  Idx<Cfg::R> base;
  Cfg::batch(z, base);
  // The per-column operands once per tile column (a column past the last reads the last).
  const auto col = [&](int c) { return epi.channel(n0 + c < Cfg::N ? n0 + c : Cfg::N - 1); };
  gemm::staged_epilogue<T, Tile, Cfg::ALONG_M>(ml, smem, col, [&](int r, int c, float v, const auto& ch) {
    Idx<Cfg::R> i = base;
    i.i[Cfg::R - 2] = m0 + r;
    i.i[Cfg::R - 1] = n0 + c;
    if (i.i[Cfg::R - 2] < rows && i.i[Cfg::R - 1] < Cfg::N) epi(v, i, ch);
  });
}

}  // namespace mm
}  // namespace kiln
