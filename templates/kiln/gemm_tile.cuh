// The tiled GEMM core shared by conv2d (implicit GEMM) and matmul: C[BM x BN] tile = Σ_k A[m][k] · B[n][k].
//
// Three separable pieces, so that a tensor-core main loop (ldmatrix + mma.sync) can replace the SIMT one
// while the address generation and the epilogue stay:
//   - an operand *source* (written by each family): for a tile row (an output pixel for conv's A, an
//     output channel for conv's B, m or n for matmul) precomputed per-row state, and for (row, k) the
//     element offset in memory or "zero" (padding, tails). Its `kVec` says whether V consecutive k of a row
//     (V = 16 bytes of T, k a multiple of V) are contiguous and 16-byte aligned in memory given an aligned
//     base pointer: then the tile moves with 16-byte cp.async copies, else element by element.
//   - TileLoader: moves a [ROWS][BK] slice of one operand into a shared-memory stage, stored row-major
//     with k contiguous ("A row-major, B column-major": the fragment order ldmatrix reads for mma).
//   - SimtMainLoop: each thread owns a TM x TN register micro-tile (rows ty + i·BM/TM, columns
//     tx + j·BN/TN), f32 accumulation; reads 16-byte vectors of k from shared memory.
// gemm_mainloop() runs them with two shared-memory stages: the next k-slice is fetched (cp.async in
// flight, or plain loads held in registers) while the current one is multiplied.
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {
namespace gemm {

// Elements of T in 16 bytes: the vector width of shared-memory reads and cp.async copies.
template <class T>
struct VecWidth {
  static constexpr int value = static_cast<int>(16 / sizeof(T));
};

template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  static_assert(BM % TM == 0 && BN % TN == 0, "the micro-tile divides the block tile");
};

// One shared-memory stage: rows padded by one vector so that the threads of a warp reading the same k of
// neighbouring rows hit different banks, while every row start stays 16-byte aligned.
template <class T, class Tile>
struct Stage {
  static constexpr int LD = Tile::BK + VecWidth<T>::value;
  T a[Tile::BM][LD];
  T b[Tile::BN][LD];
};

template <class T>
__device__ __forceinline__ T zero_of() {
  return from_f32<T>(0.0f);
}

// Reads V consecutive elements (16 bytes, aligned) of shared memory as f32.
template <class T, int V>
__device__ __forceinline__ void lds_vec(const T* p, float (&o)[V]) {
  const uint4 q = *reinterpret_cast<const uint4*>(p);
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if constexpr (sizeof(T) == 4) {
      o[i] = __uint_as_float(w[i]);
    } else {
      o[i] = half_from_bits(static_cast<T*>(nullptr), static_cast<unsigned short>(w[i / 2] >> (16 * (i & 1))));
    }
  }
}

// Moves [ROWS][BK] slices of one operand into shared memory. Two thread mappings:
//   - vector (Src::kVec): the k-chunks of a row are the fastest index across threads, so a warp reads
//     whole 16-byte runs of each row with cp.async; each thread keeps the state of its rows. Src::ptr must
//     be 16-byte aligned (kiln's allocations and workspace offsets are 256-byte aligned), and Src
//     folds compile-time base offsets into kVec. A misaligned pointer is a loud error (a misaligned-address
//     fault on the GPU, a Status from the emulator's cp.async check), never a wrong result. (A runtime
//     fallback for misaligned pointers cost about 60 ms of ptxas time per kernel.)
//   - element: the row is the fastest index (coalesced when rows are adjacent in memory, e.g. NCHW pixels
//     or a row-major B read along n); each thread owns one row and several k. Loads land in registers in
//     fetch() and go to shared memory in commit(), after the current slice has been multiplied.
template <class T, class Src, int ROWS, int BK, int THREADS>
struct TileLoader {
  static constexpr int V = VecWidth<T>::value;
  static_assert(BK % V == 0, "BK is a multiple of the vector width");
  // vector mapping
  static constexpr int CH = BK / V;  // chunks per row
  static constexpr bool kVec = Src::kVec && THREADS % CH == 0 && THREADS / CH <= ROWS && ROWS % (THREADS / CH) == 0;
  static constexpr int RP = kVec ? THREADS / CH : 1;  // rows per pass
  static constexpr int VROWS = kVec ? ROWS / RP : 1;  // rows per thread
  // element mapping
  static_assert(THREADS % ROWS == 0 && BK % (THREADS / ROWS) == 0, "element mapping: threads tile the slice");
  static constexpr int KP = THREADS / ROWS;  // k per pass
  static constexpr int EK = BK / KP;         // elements per thread

  const Src& src;
  int kc;  // this thread's chunk (vector path) or first k (element path)
  typename Src::Row rows[kVec ? VROWS : 1];
  T regs[kVec ? 1 : EK];

  __device__ __forceinline__ TileLoader(const Src& s, int row0) : src(s) {
    const int t = static_cast<int>(threadIdx.x);
    if constexpr (kVec) {
      kc = t % CH;
#pragma unroll
      for (int i = 0; i < VROWS; ++i) rows[i] = src.row(row0 + t / CH + i * RP);
    } else {
      kc = t / ROWS;
      rows[0] = src.row(row0 + t % ROWS);
    }
  }

  // Starts moving the slice at k0 into `dst` (a [ROWS][LD] array).
  template <int LD>
  __device__ __forceinline__ void fetch(T (*dst)[LD], int k0) {
    const int t = static_cast<int>(threadIdx.x);
    if constexpr (kVec) {
#pragma unroll
      for (int i = 0; i < VROWS; ++i) {
        long long off = 0;
        const bool ok = src.at(rows[i], k0 + kc * V, off);
        T* d = &dst[t / CH + i * RP][kc * V];
        cp_async<16>(d, ok ? src.ptr + off : src.ptr, ok ? 16 : 0);
      }
    } else {
#pragma unroll
      for (int e = 0; e < EK; ++e) {
        long long off = 0;
        const bool ok = src.at(rows[0], k0 + kc + e * KP, off);
        regs[e] = ok ? kiln::ld(src.ptr + off) : zero_of<T>();
      }
    }
  }

  // Completes the slice started by fetch(): element loads go from registers to shared memory. (Copies of
  // the vector path complete at the caller's cp_async_wait, for all operands at once.)
  template <int LD>
  __device__ __forceinline__ void commit(T (*dst)[LD]) {
    if constexpr (!kVec) {
      const int t = static_cast<int>(threadIdx.x);
#pragma unroll
      for (int e = 0; e < EK; ++e) dst[t % ROWS][kc + e * KP] = regs[e];
    }
  }
};

// The SIMT main loop: a TM x TN micro-tile of f32 accumulators per thread.
template <class T, class Tile>
struct SimtMainLoop {
  static constexpr int V = VecWidth<T>::value;
  static constexpr int TX = Tile::BN / Tile::TN;  // threads along n
  static_assert(Tile::BK % V == 0, "BK is a multiple of the vector width");
  float acc[Tile::TM][Tile::TN];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) acc[i][j] = 0.0f;
  }
  // Tile coordinates of accumulator (i, j).
  __device__ __forceinline__ static int row(int i) { return static_cast<int>(threadIdx.x) / TX + i * (Tile::BM / Tile::TM); }
  __device__ __forceinline__ static int col(int j) { return static_cast<int>(threadIdx.x) % TX + j * TX; }

  // Multiplies one shared-memory stage into the accumulators.
  __device__ __forceinline__ void compute(const Stage<T, Tile>& s) {
    const int r0 = row(0), c0 = col(0);
#pragma unroll 1
    for (int k = 0; k < Tile::BK; k += V) {
      float a[Tile::TM][V], b[Tile::TN][V];
#pragma unroll
      for (int i = 0; i < Tile::TM; ++i) lds_vec<T, V>(&s.a[r0 + i * (Tile::BM / Tile::TM)][k], a[i]);
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) lds_vec<T, V>(&s.b[c0 + j * TX][k], b[j]);
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
          for (int j = 0; j < Tile::TN; ++j) acc[i][j] = fmaf(a[i][v], b[j][v], acc[i][j]);
    }
  }
};

// Σ over k in [0, kdim) of A rows [m0, m0+BM) times B rows [n0, n0+BN) into `ml`'s accumulators.
// Every thread of the block must call it (it synchronizes).
template <class T, class Tile, class SrcA, class SrcB, class MainLoop>
__device__ __forceinline__ void gemm_mainloop(const SrcA& sa, const SrcB& sb, int m0, int n0, int kdim, MainLoop& ml) {
  using StageT = Stage<T, Tile>;
  KILN_SHARED(StageT, st, [2]);
  TileLoader<T, SrcA, Tile::BM, Tile::BK, Tile::THREADS> la(sa, m0);
  TileLoader<T, SrcB, Tile::BN, Tile::BK, Tile::THREADS> lb(sb, n0);
  ml.init();
  const int ktiles = (kdim + Tile::BK - 1) / Tile::BK;
  la.fetch(st[0].a, 0);
  lb.fetch(st[0].b, 0);
  la.commit(st[0].a);
  lb.commit(st[0].b);
  cp_async_wait_all();
  __syncthreads();
#pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < ktiles;
    if (more) {
      la.fetch(st[cur ^ 1].a, (kt + 1) * Tile::BK);
      lb.fetch(st[cur ^ 1].b, (kt + 1) * Tile::BK);
    }
    ml.compute(st[cur]);
    if (more) {
      la.commit(st[cur ^ 1].a);
      lb.commit(st[cur ^ 1].b);
    }
    cp_async_wait_all();
    __syncthreads();
  }
}

}  // namespace gemm
}  // namespace kiln
