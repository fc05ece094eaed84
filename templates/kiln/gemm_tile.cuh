// The tiled GEMM core shared by conv2d (implicit GEMM) and matmul: C[BM x BN] tile = Σ_k A[m][k] · B[n][k].
//
// Three separable pieces, so that the tensor-core main loop (ldmatrix + mma.sync) replaces the SIMT one
// while the address generation and the epilogue stay:
//   - an operand *source* (written by each family): for a tile row (an output pixel for conv's A, an
//     output channel for conv's B, m or n for matmul) precomputed per-row state, and for (row, k) the
//     element offset in memory or "zero" (padding, tails). Its `kVec` says whether V consecutive k of a row
//     (V = 16 bytes of T, k a multiple of V) are contiguous and 16-byte aligned in memory given an aligned
//     base pointer: then the tile moves with 16-byte cp.async copies, else element by element. Its `kPro`
//     says whether it has a fused prologue, `pro(row, k, value)` applied to each element loaded.
//   - TileLoader: moves a [ROWS][BK] slice of one operand into a shared-memory stage, stored row-major
//     with k contiguous ("A row-major, B column-major": the fragment order ldmatrix reads for mma).
//   - the main loop: SimtMainLoop (f32 operands: each thread owns a TM x TN register micro-tile, rows
//     ty + i·BM/TM, columns tx + j·BN/TN, reading 16-byte vectors of k from shared memory) or
//     TensorCoreMainLoop (f16 / bf16: ldmatrix + mma.sync, the same number of f32 accumulators per
//     thread in the mma fragment layout). Both expose row(i) / col(j) for the epilogue.
// gemm_mainloop() runs them with three shared-memory stages: the next two k-slices are fetched (cp.async
// in flight, or plain loads held in registers for one of them) while the current one is multiplied.
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {
namespace gemm {

// Elements of T in 16 bytes: the vector width of shared-memory reads and cp.async copies.
template <class T>
struct VecWidth {
  static constexpr int value = static_cast<int>(16 / sizeof(T));
};

// STAGES: shared-memory stages of the main loop (at least 2), chosen by the family (GemmTiles::stages).
template <int BM_, int BN_, int BK_, int TM_, int TN_, int STAGES_>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_, STAGES = STAGES_;
  static_assert(STAGES >= 2, "the main loop overlaps at least one fetch with the math");
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  static_assert(BM % TM == 0 && BN % TN == 0, "the micro-tile divides the block tile");
};

// One shared-memory stage: each operand's rows of BK elements, addressed through offset(row, k).
//   - rows of 2, 4 or 8 16-byte chunks (every tile kiln picks: BK is 64 bytes): rows unpadded, and chunk q
//     of the operand (q = row * CH + k / V) stored at chunk q ^ ((q >> 3) & 7), a permutation within each
//     128-byte line. The tensor-core loop's ldmatrix and the SIMT loop's 16-byte reads take one chunk of 8
//     consecutive rows, a quarter-warp's cp.async stores write 8 consecutive chunks, and the element
//     loader's runs (TileLoader) one chunk of 8 consecutive rows: every way the 8 chunks land on distinct
//     16-byte bank groups, so none conflicts (kiln profile counts 4 wavefronts per x4 and per 512-byte
//     store). Padding rows by one vector kept the reads clean but cost the cp.async stores a second
//     wavefront (f32 SIMT stages were padded until kiln profile showed it: 8 wavefronts per 512 bytes).
//   - otherwise: rows padded by one vector, so that threads reading the same k of neighbouring rows hit
//     different banks while every row start stays 16-byte aligned.
template <class T, class Tile>
struct Stage {
  static constexpr int V = VecWidth<T>::value;
  static constexpr int CH = Tile::BK / V;  // 16-byte chunks per row
  static constexpr bool kSwizzled = CH == 2 || CH == 4 || CH == 8;
  static constexpr int LD = kSwizzled ? Tile::BK : Tile::BK + V;
  T a[Tile::BM * LD];
  T b[Tile::BN * LD];
  // Element (row, k) of an operand's rows; k % V == 0 gives the start of an aligned 16-byte chunk.
  __device__ __forceinline__ static int offset(int row, int k) {
    if constexpr (kSwizzled) {
      const int q = row * CH + k / V;
      return (q ^ ((q >> 3) & 7)) * V + k % V;
    } else {
      return row * LD + k;
    }
  }
};

template <class T>
__device__ __forceinline__ T zero_of() {
  return from_f32<T>(0.0f);
}

// An element's bits, what a vector shared store moves.
__device__ __forceinline__ unsigned bits_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned bits_of(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ unsigned bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

// Stores G consecutive elements v[0 .. G) at p: one 4-, 8- or 16-byte store (p aligned to it), or one
// element store when G is 1.
template <class T, int G>
__device__ __forceinline__ void sts_run(T* p, const T* v) {
  constexpr int W = static_cast<int>(G * sizeof(T) / 4);
  if constexpr (G == 1) {
    sts(p, v[0]);
  } else {
    static_assert(W == 1 || W == 2 || W == 4, "vector shared stores are 4, 8 or 16 bytes");
    unsigned w[W];
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = 0u;
#pragma unroll
    for (int i = 0; i < G; ++i) w[i * sizeof(T) / 4] |= bits_of(v[i]) << (8 * (i * sizeof(T) % 4));
    if constexpr (W == 4) {
      sts(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
    } else if constexpr (W == 2) {
      sts(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
    } else {
      sts(reinterpret_cast<unsigned*>(p), w[0]);
    }
  }
}

// Reads V consecutive elements (16 bytes, aligned) of shared memory as f32.
template <class T, int V>
__device__ __forceinline__ void lds_vec(const T* p, float (&o)[V]) {
  const uint4 q = lds(reinterpret_cast<const uint4*>(p));
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
  unpack_words<T, V>(w, o);
}

// The type of an operand's element offsets: int when every offset fits (OffsetType<true>).
template <bool Int>
struct OffsetType {
  using type = long long;
};
template <>
struct OffsetType<true> {
  using type = int;
};

// Moves [ROWS][BK] slices of one operand into shared memory. Two thread mappings:
//   - vector (Src::kVec): the k-chunks of a row are the fastest index across threads, so a warp reads
//     whole 16-byte runs of each row with cp.async; each thread keeps the state of its rows. Src::ptr must
//     be 16-byte aligned (kiln's allocations and workspace offsets are 256-byte aligned), and Src
//     folds compile-time base offsets into kVec. A misaligned pointer is a loud error (a misaligned-address
//     fault on the GPU, a Status from the emulator's cp.async check), never a wrong result. (A runtime
//     fallback for misaligned pointers cost about 60 ms of ptxas time per kernel.)
//   - element: the row is the fastest index (coalesced when rows are adjacent in memory, e.g. NCHW pixels
//     or a row-major B read along n); each thread owns one row and a run of EK consecutive k. Loads land in
//     registers in fetch() and go to shared memory in commit(), after the current slice has been
//     multiplied, G consecutive k (up to 16 bytes) a store: a warp's 32 rows of one k each were 4-way
//     bank conflicts on the padded f32 stage (kiln profile, NCHW conv), since each bank then holds one
//     k % 4 of 8 rows; whole chunks of 8 rows are conflict-free on the swizzled stage.
//   - element, k fastest (Src::kKFast: consecutive k are consecutive in memory, as in channels-last images
//     with too few channels for 16-byte chunks, e.g. the RGB stem): KT = BK / 4 threads along k, each taking
//     k, k + KT, k + 2 KT, k + 3 KT of every (THREADS / KT)-th row, so KT lanes read a run of one row and the
//     rows of a warp are neighbours (kiln profile measured the row-fastest
//     mapping of a 3-channel NHWC stem at 10 % sector efficiency and 4-way conflicts on its shared stores;
//     this one stores whole rows). The rows' states are recomputed per fetch (one per element would not
//     fit in registers).
// A source with a prologue (Src::kPro) takes the vector mapping through registers instead of cp.async:
// 16-byte loads in fetch(), the prologue applied and the results rounded to T, one 16-byte shared store
// each in commit() (cp.async cannot transform what it copies).
template <class T, class Src, int ROWS, int BK, int THREADS, class StageT>
struct TileLoader {
  static constexpr int V = VecWidth<T>::value;
  static_assert(BK % V == 0, "BK is a multiple of the vector width");
  // vector mapping
  static constexpr int CH = BK / V;  // chunks per row
  static constexpr bool kVec = Src::kVec && THREADS % CH == 0 && THREADS / CH <= ROWS && ROWS % (THREADS / CH) == 0;
  static constexpr int RP = kVec ? THREADS / CH : 1;  // rows per pass
  static constexpr int VROWS = kVec ? ROWS / RP : 1;  // rows per thread
  // element mappings
  static constexpr int KK = 4;        // k fastest: k per thread and row (kc, kc + KT, ...)
  static constexpr int KT = BK / KK;  // k fastest: threads along k
  static constexpr bool kKFast = !kVec && Src::kKFast && THREADS % KT == 0 && ROWS % (THREADS / KT) == 0;
  static_assert(kVec || kKFast || (THREADS % ROWS == 0 && BK % (THREADS / ROWS) == 0),
                "element mapping: threads tile the slice");
  static constexpr int FRP = kKFast ? THREADS / KT : 1;                     // k fastest: rows per pass
  static constexpr int FR = ROWS / FRP;                                     // k fastest: rows per thread
  static constexpr int KP = kKFast || THREADS < ROWS ? 1 : THREADS / ROWS;  // row fastest: threads along k
  static constexpr int EK = kKFast ? KK * FR : BK / KP;                     // elements per thread
  // row fastest: consecutive k a shared store takes (a whole chunk where the run allows)
  static constexpr int G = EK % V == 0 ? V : EK % (V / 2) == 0 ? V / 2 : EK % (V / 4) == 0 ? V / 4 : 1;

  static constexpr bool kStaged = kVec && Src::kPro;  // vector mapping through registers

  const Src& src;
  int row0;
  int kc;  // this thread's chunk (vector path), first k (row fastest) or k (k fastest)
  typename Src::Row rows[kVec ? VROWS : 1];
  T regs[kVec ? 1 : EK];
  uint4 vregs[kStaged ? VROWS : 1];  // the staged vector path's transformed chunks, as stored

  __device__ __forceinline__ TileLoader(const Src& s, int r0) : src(s), row0(r0) {
    const int t = static_cast<int>(threadIdx.x);
    if constexpr (kVec) {
      kc = t % CH;
#pragma unroll
      for (int i = 0; i < VROWS; ++i) rows[i] = src.row(row0 + t / CH + i * RP);
    } else if constexpr (kKFast) {
      kc = t % KT;
    } else {
      kc = t / ROWS * EK;
      rows[0] = src.row(row0 + t % ROWS);
    }
  }

  // Starts moving the slice at k0 into `dst` (an operand of a StageT: ROWS rows at StageT::offset).
  __device__ __forceinline__ void fetch(T* dst, int k0) {
    const int t = static_cast<int>(threadIdx.x);
    if constexpr (kVec) {
#pragma unroll
      for (int i = 0; i < VROWS; ++i) {
        long long off = 0;
        const int k = k0 + kc * V;
        const bool ok = src.at(rows[i], k, off);
        if constexpr (kStaged) {
          float v[V];
          if (ok) {
            const Vec<T, V> x = ldv<T, V>(src.ptr, off);
#pragma unroll
            for (int e = 0; e < V; ++e) v[e] = src.pro(rows[i], k + e, x.v[e]);
          } else {
#pragma unroll
            for (int e = 0; e < V; ++e) v[e] = 0.0f;
          }
          unsigned w[4];
          pack_words<T, V>(v, w);
          vregs[i] = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
          T* d = dst + StageT::offset(t / CH + i * RP, kc * V);
          cp_async<16>(d, ok ? src.ptr + off : src.ptr, ok ? 16 : 0);
        }
      }
    } else if constexpr (kKFast) {
#pragma unroll
      for (int i = 0; i < FR; ++i) {
        const typename Src::Row rw = src.row(row0 + t / KT + i * FRP);
#pragma unroll
        for (int h = 0; h < KK; ++h) {
          const int k = k0 + kc + h * KT;
          long long off = 0;
          const bool ok = src.at(rw, k, off);
          if constexpr (Src::kPro) {
            regs[KK * i + h] = ok ? from_f32<T>(src.pro(rw, k, ldf(src.ptr, off))) : zero_of<T>();
          } else {
            regs[KK * i + h] = ok ? kiln::ld(src.ptr + off) : zero_of<T>();
          }
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < EK; ++e) {
        long long off = 0;
        const int k = k0 + kc + e;
        const bool ok = src.at(rows[0], k, off);
        if constexpr (Src::kPro) {
          regs[e] = ok ? from_f32<T>(src.pro(rows[0], k, ldf(src.ptr, off))) : zero_of<T>();
        } else {
          regs[e] = ok ? kiln::ld(src.ptr + off) : zero_of<T>();
        }
      }
    }
  }

  // Completes the slice started by fetch(): element and staged vector loads go from registers to shared
  // memory. (cp.async copies complete at the caller's cp_async_wait, for all operands at once.)
  __device__ __forceinline__ void commit(T* dst) {
    const int t = static_cast<int>(threadIdx.x);
    if constexpr (kStaged) {
#pragma unroll
      for (int i = 0; i < VROWS; ++i)
        sts(reinterpret_cast<uint4*>(dst + StageT::offset(t / CH + i * RP, kc * V)), vregs[i]);
    } else if constexpr (kKFast) {
#pragma unroll
      for (int e = 0; e < EK; ++e) sts(dst + StageT::offset(t / KT + e / KK * FRP, kc + e % KK * KT), regs[e]);
    } else if constexpr (!kVec) {
#pragma unroll
      for (int e = 0; e < EK; e += G) sts_run<T, G>(dst + StageT::offset(t % ROWS, kc + e), regs + e);
    }
  }
};

// A thread's TM x TN f32 accumulators, what both main loops keep (they differ in which outputs they are).
template <class Tile>
struct Accumulators {
  float acc[Tile::TM][Tile::TN];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) acc[i][j] = 0.0f;
  }
};

// The SIMT main loop: a TM x TN micro-tile of f32 accumulators per thread.
template <class T, class Tile>
struct SimtMainLoop : Accumulators<Tile> {
  using Accumulators<Tile>::acc;
  static constexpr bool kColumnPairs = false;  // acc[i][j], acc[i][j + 1] are not adjacent columns
  static constexpr int V = VecWidth<T>::value;
  static constexpr int TX = Tile::BN / Tile::TN;  // threads along n
  static_assert(Tile::BK % V == 0, "BK is a multiple of the vector width");
  // Tile coordinates of accumulator (i, j).
  __device__ __forceinline__ static int row(int i) {
    return static_cast<int>(threadIdx.x) / TX + i * (Tile::BM / Tile::TM);
  }
  __device__ __forceinline__ static int col(int j) { return static_cast<int>(threadIdx.x) % TX + j * TX; }
  // staged_epilogue's row stride (floats) for a warp's stores of one accumulator: TX consecutive columns of
  // 32 / TX consecutive rows. Along n, rows TX banks apart; along m (the tile transposed: row c, element r),
  // the columns 32 / TX banks apart (at least 1): 32 distinct banks either way.
  static constexpr int kRound = 32;
  static constexpr int kEpilogueStrideM = (Tile::BM + kRound - 1) / kRound * kRound + (TX < 32 ? 32 / TX : 1);
  static constexpr int kEpilogueStrideN = (Tile::BN + kRound - 1) / kRound * kRound + TX % 32;

  using S = Stage<T, Tile>;
  // Multiplies one shared-memory stage into the accumulators.
  __device__ __forceinline__ void compute(const S& s) {
    const int r0 = row(0), c0 = col(0);
#pragma unroll 1
    for (int k = 0; k < Tile::BK; k += V) {
      float a[Tile::TM][V], b[Tile::TN][V];
#pragma unroll
      for (int i = 0; i < Tile::TM; ++i) lds_vec<T, V>(&s.a[S::offset(r0 + i * (Tile::BM / Tile::TM), k)], a[i]);
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) lds_vec<T, V>(&s.b[S::offset(c0 + j * TX, k)], b[j]);
#pragma unroll
      for (int v = 0; v < V; ++v)
#pragma unroll
        for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
          for (int j = 0; j < Tile::TN; ++j) acc[i][j] = fmaf(a[i][v], b[j][v], acc[i][j]);
    }
  }
};

// mma.sync m16n8k16 with f32 accumulators for T = __half or __nv_bfloat16.
__device__ __forceinline__ void mma_m16n8k16(__half*, float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                             const float (&c)[4]) {
  mma_m16n8k16_f16(d, a, b, c);
}
__device__ __forceinline__ void mma_m16n8k16(__nv_bfloat16*, float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2], const float (&c)[4]) {
  mma_m16n8k16_bf16(d, a, b, c);
}

// The tensor-core main loop (f16 / bf16 operands, f32 accumulators), a drop-in for SimtMainLoop: the same
// block tile, threads and accumulator count per thread, the same shared-memory stages. Each warp owns a
// (8·TM) x (4·TN) piece of the tile: TM / 2 mma tiles of 16 rows by TN / 2 of 8 columns. Per 16 values of
// k it loads its A fragments (ldmatrix.x4 per 16 rows: rows k-contiguous in the stage, "row-major A") and
// its B fragments (ldmatrix.x4 per two 8-column tiles: the stage holds B as rows of n with k contiguous,
// "column-major B") and issues (TM / 2)·(TN / 2) mma.sync. The accumulators are those tiles' C fragments:
// acc[i][j] is row 8·i + lane / 4 and column 8·(j / 2) + 2·(lane % 4) + j % 2 of the warp's piece, which
// row(i) and col(j) give the epilogue as SimtMainLoop's do.
template <class T, class Tile>
struct TensorCoreMainLoop : Accumulators<Tile> {
  using Accumulators<Tile>::acc;
  static constexpr bool kColumnPairs = true;  // acc[i][2j], acc[i][2j + 1]: columns c, c + 1
  static_assert(sizeof(T) == 2, "mma.sync m16n8k16 takes f16 or bf16 operands");
  static constexpr int MI = Tile::TM / 2, NI = Tile::TN / 2;  // mma tiles per warp along m and n
  static constexpr int WTM = 16 * MI, WTN = 8 * NI;           // the warp's piece of the block tile
  static constexpr int WN = Tile::BN / WTN;                   // warps along n
  static_assert(Tile::TM % 2 == 0 && NI % 2 == 0 && Tile::BM % WTM == 0 && Tile::BN % WTN == 0 && Tile::BK % 16 == 0,
                "tensor-core tiles: TM even, TN a multiple of 4, warp pieces tile the block, BK a multiple of 16");
  __device__ __forceinline__ static int lane() { return static_cast<int>(threadIdx.x) & 31; }
  __device__ __forceinline__ static int warp_row() { return static_cast<int>(threadIdx.x) / 32 / WN * WTM; }
  __device__ __forceinline__ static int warp_col() { return static_cast<int>(threadIdx.x) / 32 % WN * WTN; }
  __device__ __forceinline__ static int row(int i) { return warp_row() + i * 8 + lane() / 4; }
  __device__ __forceinline__ static int col(int j) { return warp_col() + j / 2 * 8 + lane() % 4 * 2 + j % 2; }
  // staged_epilogue's row stride (floats): a warp stores 8 rows of 4 column pairs (float2) along n, so rows
  // 8 banks apart; along m (transposed, one float a store) 4 columns 2 apart of 8 consecutive rows, 8 banks apart.
  static constexpr int kEpilogueStrideM = Tile::BM + 4, kEpilogueStrideN = Tile::BN + 8;

  using S = Stage<T, Tile>;
  __device__ __forceinline__ void compute(const S& s) {
    const int l = lane(), wm0 = warp_row(), wn0 = warp_col();
#pragma unroll
    for (int kk = 0; kk < Tile::BK; kk += 16) {
      // ldmatrix.x4: lanes 8q .. 8q+7 give the row addresses of matrix q. A: matrices (rows 0-7, k 0-7),
      // (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15), the order of mma's a0..a3. B: (tile
      // 2p, k 0-7), (tile 2p, k 8-15), (tile 2p+1, k 0-7), (tile 2p+1, k 8-15): b0, b1 of two tiles.
      unsigned a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) ldmatrix<4>(a[mi], &s.a[S::offset(wm0 + mi * 16 + l % 16, kk + l / 16 * 8)]);
#pragma unroll
      for (int np = 0; np < NI / 2; ++np) {
        unsigned r[4];
        ldmatrix<4>(r, &s.b[S::offset(wn0 + np * 16 + l / 16 * 8 + l % 8, kk + l / 8 % 2 * 8)]);
        b[2 * np][0] = r[0], b[2 * np][1] = r[1], b[2 * np + 1][0] = r[2], b[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const float c[4] = {acc[2 * mi][2 * ni], acc[2 * mi][2 * ni + 1], acc[2 * mi + 1][2 * ni],
                              acc[2 * mi + 1][2 * ni + 1]};
          float d[4];
          mma_m16n8k16(static_cast<T*>(nullptr), d, a[mi], b[ni], c);
          acc[2 * mi][2 * ni] = d[0], acc[2 * mi][2 * ni + 1] = d[1];
          acc[2 * mi + 1][2 * ni] = d[2], acc[2 * mi + 1][2 * ni + 1] = d[3];
        }
      }
    }
  }
};

// The main loop for operands of type T: tensor cores for 16-bit types, SIMT for f32.
template <class T, class Tile>
struct MainLoopFor {
  using type = SimtMainLoop<T, Tile>;
};
template <class Tile>
struct MainLoopFor<__half, Tile> {
  using type = TensorCoreMainLoop<__half, Tile>;
};
template <class Tile>
struct MainLoopFor<__nv_bfloat16, Tile> {
  using type = TensorCoreMainLoop<__nv_bfloat16, Tile>;
};
template <class T, class Tile>
using DefaultMainLoop = typename MainLoopFor<T, Tile>::type;

// Σ over k in [k0, k1) of A rows [m0, m0+BM) times B rows [n0, n0+BN) into `ml`'s accumulators; k0 a
// multiple of BK, and k1 too unless it is the reduction's end (split-K: the sources bound k by their own
// length, so a slice never reads past k1 into the next split's). Every thread of the block must call it (it
// synchronizes).
//
// Iteration kt multiplies stage kt % kStages. Before it, the copies of slice kt must have landed: each
// thread commits one cp.async group per slice (empty past the end), so waiting until at most kStages - 2
// groups are pending completes slice kt's, and the barrier after the wait makes every thread's copies
// visible to all. The same barrier ends the reads of stage (kt - 1) % kStages, the one slice kt + 2 is
// fetched into next. Element-path loads go to registers in fetch() and into their stage after the math.
// Returns the stages' shared memory (kStages * sizeof(Stage)), which the epilogue may reuse once every
// thread is past the loop.
template <class T, class Tile, class SrcA, class SrcB, class MainLoop>
__device__ __forceinline__ void* gemm_mainloop(const SrcA& sa, const SrcB& sb, int m0, int n0, int k0, int k1,
                                               MainLoop& ml) {
  // While one stage is multiplied, the copies into the next STAGES - 1 are in flight (cp.async groups, one
  // per stage), so a global load has STAGES - 1 iterations of math to arrive. Three stages of the largest
  // tile (128 x 64, 16-bit) are 45 KB, under the 48 KB of static shared memory.
  constexpr int kStages = Tile::STAGES;
  using StageT = Stage<T, Tile>;
  KILN_SHARED(StageT, st, [kStages]);
  TileLoader<T, SrcA, Tile::BM, Tile::BK, Tile::THREADS, StageT> la(sa, m0);
  TileLoader<T, SrcB, Tile::BN, Tile::BK, Tile::THREADS, StageT> lb(sb, n0);
  ml.init();
  const int ktiles = (k1 - k0 + Tile::BK - 1) / Tile::BK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) {
      la.fetch(st[s].a, k0 + s * Tile::BK);
      lb.fetch(st[s].b, k0 + s * Tile::BK);
      la.commit(st[s].a);
      lb.commit(st[s].b);
    }
    cp_async_commit();
  }
#pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1, ns = next % kStages;
    const bool more = next < ktiles;
    if (more) {
      la.fetch(st[ns].a, k0 + next * Tile::BK);
      lb.fetch(st[ns].b, k0 + next * Tile::BK);
    }
    ml.compute(st[kt % kStages]);
    if (more) {
      la.commit(st[ns].a);
      lb.commit(st[ns].b);
    }
    cp_async_commit();
  }
  cp_async_wait<0>();  // no copy outlives the kernel (all groups past the end are empty)
  return &st[0];
}
template <class T, class Tile, class SrcA, class SrcB, class MainLoop>
__device__ __forceinline__ void* gemm_mainloop(const SrcA& sa, const SrcB& sb, int m0, int n0, int kdim, MainLoop& ml) {
  return gemm_mainloop<T, Tile>(sa, sb, m0, n0, 0, kdim, ml);
}

// The block tile's accumulators handed to f(r, c, v, col(c)) (tile row, tile column, value, what the
// column's elements share: the epilogue's per-channel operands) in store order.
// Direct from the registers, a warp's 32 calls of one accumulator lie on 8 rows (the tensor-core
// fragments: 4 column pairs per row), so each warp-wide store touches 8 sectors to write 64 bytes: a
// quarter of every sector moved is used (kiln profile's "codegen.cuh ... global store 25%"). Instead the
// tile goes through shared memory (the stages, reused: `smem` from gemm_mainloop) and is read back so that
// consecutive lanes take consecutive columns (ALONG_M: consecutive rows, for outputs whose m is contiguous
// in memory, e.g. NCHW pixels): whole 64- or 128-byte runs per warp-wide store, and the epilogue's loads
// of per-channel operands (bias, scale) coalesce the same way. Along n with THREADS a multiple of BN, a
// thread keeps one column throughout, so col(c) runs once per thread, not once per element. The main loop
// picks the row stride (kEpilogueStrideM / N) for conflict-free staging of its accumulators' layout. Every
// thread of the block must call it.
template <class T, class Tile, bool ALONG_M, class MainLoop, class Col, class F>
__device__ __forceinline__ void staged_epilogue(const MainLoop& ml, void* smem, Col&& col, F&& f) {
  constexpr int S = ALONG_M ? MainLoop::kEpilogueStrideM : MainLoop::kEpilogueStrideN;
  constexpr size_t kNeed = size_t{ALONG_M ? Tile::BN : Tile::BM} * S * sizeof(float);
  if constexpr (kNeed > Tile::STAGES * sizeof(Stage<T, Tile>)) {  // (no tile kiln picks) the registers' order
#pragma unroll
    for (int i = 0; i < Tile::TM; ++i)
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) f(ml.row(i), ml.col(j), ml.acc[i][j], col(ml.col(j)));
  } else {
    float* s = static_cast<float*>(smem);
    __syncthreads();  // every warp is done with the last stage
#pragma unroll
    for (int i = 0; i < Tile::TM; ++i) {
#pragma unroll
      for (int j = 0; j < Tile::TN; ++j) {
        const int r = ml.row(i), c = ml.col(j);
        if constexpr (ALONG_M) {
          sts(s + c * S + r, ml.acc[i][j]);
        } else if constexpr (MainLoop::kColumnPairs) {
          if (j % 2 == 0) sts(reinterpret_cast<float2*>(s + r * S + c), make_float2(ml.acc[i][j], ml.acc[i][j + 1]));
        } else {
          sts(s + r * S + c, ml.acc[i][j]);
        }
      }
    }
    __syncthreads();
    // Element e = outer * kInner + inner, every THREADS-th from the thread's index (split_k.cuh relies on it).
    constexpr int kInner = ALONG_M ? Tile::BM : Tile::BN;
    if constexpr (!ALONG_M && Tile::THREADS % kInner == 0) {
      const int c = static_cast<int>(threadIdx.x) % kInner;
      const auto shared = col(c);
      for (int r = static_cast<int>(threadIdx.x) / kInner; r < Tile::BM; r += Tile::THREADS / kInner)
        f(r, c, lds(s + r * S + c), shared);
    } else {
      for (int e = static_cast<int>(threadIdx.x); e < Tile::BM * Tile::BN; e += Tile::THREADS) {
        const int inner = e % kInner, outer = e / kInner;
        if constexpr (ALONG_M) {
          f(inner, outer, lds(s + outer * S + inner), col(outer));
        } else {
          f(outer, inner, lds(s + outer * S + inner), col(inner));
        }
      }
    }
  }
}

// staged_epilogue's `col` for an f that shares nothing along a column.
struct NoColumn {
  __device__ __forceinline__ int operator()(int) const { return 0; }
};

}  // namespace gemm
}  // namespace kiln
