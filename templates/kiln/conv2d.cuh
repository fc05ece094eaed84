// conv2d as an implicit GEMM, one GEMM per group:
//   M = N·P·Q output pixels, N_gemm = K/G output channels of the group, K_gemm = C/G · R · S,
//   A[m][k] = x[n, g·C/G + c, p·SH − PT + r·DH, q·SW − PL + s·DW] (zero outside the input),
//   B[n][k] = w[g·K/G + n, c, r, s],  with k = (r·S + s)·C/G + c.
// k runs over channels fastest, so with NHWC activations and KRSC weights (channel stride 1) every run of
// 16 bytes along k is contiguous and moves with cp.async; any other strides (an NCHW input read through a
// load transform, KCRS weights) take the element path of kiln/gemm_tile.cuh. Only strides matter, never
// layout names: 1x1 KCRS weights are channel-contiguous too.
//
// The generated glue supplies
//   struct Cfg { static constexpr int NMAX, C, H, W, K, P, Q, R, S, G, SH, SW, PT, PL, DH, DW; // shape
//                static constexpr long long XN, XC, XH, XW, XB, WK, WC, WR, WS, WB;        // views
//                static constexpr int BM, BN, BK, TM, TN; };                              // tiles
// The batch N is the entry's argument `batch` (1 ≤ batch ≤ NMAX): one kernel serves every batch up to NMAX.
// (element strides of x's logical [N, C, H, W] and w's [K, C/G, R, S] dims, plus base offsets), the
// storage type T, an epilogue functor called once per output with (value, Idx<4>{n, k, p, q}), and
// optionally a prologue functor applied to every element of x read (value, Idx<4>{n, c, h, w}) -> value.
// Launch: grid (ceil(M/BM), ceil(K/G / BN) · G, SPLITS), block Tile::THREADS, dynamic shared memory only
// as a residency pad.
#pragma once

#include "kiln/gemm_tile.cuh"
#include "kiln/reduction_epilogue.cuh"
#include "kiln/split_k.cuh"

namespace kiln {
namespace conv {

template <class Cfg>
struct Dims {
  static constexpr int CG = Cfg::C / Cfg::G;  // input channels per group
  static constexpr int KG = Cfg::K / Cfg::G;  // output channels per group
  static constexpr int KDIM = CG * Cfg::R * Cfg::S;
  // M = batch · P · Q output pixels: a run-time value (the batch is the kernel's argument).
  static __device__ __forceinline__ int pixels(int batch) { return batch * Cfg::P * Cfg::Q; }
};

// Reduction index k -> (r, s, c); divisions by compile-time constants.
template <class Cfg>
struct Rsc {
  int r, s, c;
  __device__ __forceinline__ explicit Rsc(int k) {
    c = k % Dims<Cfg>::CG;
    const int rs = k / Dims<Cfg>::CG;
    r = rs / Cfg::S;
    s = rs % Cfg::S;
  }
};

// A: the im2col view of x. A row is an output pixel; its state is the window's origin. Pro: the fused
// prologue (NoPrologue, or a functor of (value, Idx<4>{n, c, h, w}) at x's logical coordinate).
template <class Cfg, class T, class Pro = NoPrologue>
struct ImageRows {
  static constexpr int V = gemm::VecWidth<T>::value;
  static constexpr bool kVec = Cfg::XC == 1 && Dims<Cfg>::CG % V == 0 && Cfg::XN % V == 0 && Cfg::XH % V == 0 &&
                               Cfg::XW % V == 0 && Cfg::XB % V == 0;
  static constexpr long long abs_(long long v) { return v < 0 ? -v : v; }
  // Every offset of x fits in an int at every batch the kernel serves: 32-bit address arithmetic (fewer
  // registers for the loaders).
  static constexpr bool kInt = (Cfg::NMAX - 1) * abs_(Cfg::XN) + (Cfg::H - 1) * abs_(Cfg::XH) +
                                   (Cfg::W - 1) * abs_(Cfg::XW) + (Cfg::C - 1) * abs_(Cfg::XC) <
                               (1LL << 31);
  using Off = typename gemm::OffsetType<kInt>::type;
  static constexpr bool kKFast = Cfg::XC == 1;  // channels-last: a tap's channels, and a row's taps, in runs
  static constexpr bool kPro = Pro::kActive;
  struct Row {
    Off base;
    int h0, w0;  // the window's top-left input coordinate; h0 far below 0 for rows past M
    int n;       // the image
    int local;   // the row within the block's tile (a layer-norm prologue's statistics)
  };
  const T* ptr;  // x + XB
  int g;
  Pro fn;
  int m_end;  // M: rows from here on are past the output
  // A layer-norm prologue (Pro::kPixelNorm): mean and 1/std of each (tile row, tap)'s input pixel, and the
  // tile's first row (pixel_stats).
  const float* mean = nullptr;
  const float* rstd = nullptr;
  int m0 = 0;

  __device__ __forceinline__ Row row(int m) const {
    Row rw;
    rw.local = m - m0;
    if (m >= m_end) {
      rw.base = 0, rw.h0 = -(1 << 30), rw.w0 = 0, rw.n = 0;
      return rw;
    }
    const int q = m % Cfg::Q, t = m / Cfg::Q;
    const int p = t % Cfg::P, n = t / Cfg::P;
    rw.base = static_cast<Off>(n * Cfg::XN + static_cast<long long>(g * Dims<Cfg>::CG) * Cfg::XC);
    rw.h0 = p * Cfg::SH - Cfg::PT;
    rw.w0 = q * Cfg::SW - Cfg::PL;
    rw.n = n;
    return rw;
  }
  // The prologue of the element at (row, k), which at() found inside x.
  __device__ __forceinline__ float pro(const Row& rw, int k, float v) const {
    const Rsc<Cfg> i(k);
    const Idx<4> at{{rw.n, g * Dims<Cfg>::CG + i.c, rw.h0 + i.r * Cfg::DH, rw.w0 + i.s * Cfg::DW}};
    if constexpr (Pro::kPixelNorm) {
      const int slot = rw.local * (Cfg::R * Cfg::S) + i.r * Cfg::S + i.s;
      return fn(v, at, mean[slot], rstd[slot]);
    } else {
      return fn(v, at);
    }
  }
  __device__ __forceinline__ bool at(const Row& rw, int k, long long& off) const {
    if (k >= Dims<Cfg>::KDIM) return false;
    const Rsc<Cfg> i(k);
    const int ih = rw.h0 + i.r * Cfg::DH, iw = rw.w0 + i.s * Cfg::DW;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(Cfg::H) ||
        static_cast<unsigned>(iw) >= static_cast<unsigned>(Cfg::W))
      return false;
    if constexpr (kInt) {
      constexpr int xh = static_cast<int>(Cfg::XH), xw = static_cast<int>(Cfg::XW), xc = static_cast<int>(Cfg::XC);
      off = rw.base + ih * xh + iw * xw + i.c * xc;
    } else {
      off = rw.base + ih * Cfg::XH + iw * Cfg::XW + i.c * Cfg::XC;
    }
    return true;
  }
};

// B: the weights of one group. A row is an output channel of the group.
template <class Cfg, class T>
struct FilterRows {
  static constexpr int V = gemm::VecWidth<T>::value;
  // (1x1 KCRS weights qualify: their r and s are always 0, so only the channel and K strides matter.)
  static constexpr bool kVec = Cfg::WC == 1 && Dims<Cfg>::CG % V == 0 && Cfg::WK % V == 0 &&
                               (Cfg::R == 1 || Cfg::WR % V == 0) && (Cfg::S == 1 || Cfg::WS % V == 0) &&
                               Cfg::WB % V == 0;
  static constexpr bool kKFast = Cfg::WC == 1;  // KRSC: a filter's k is one run
  static constexpr bool kPro = false;
  struct Row {
    long long base;  // -1 for rows past the group's channels
  };
  const T* ptr;  // w + WB
  int g;

  __device__ __forceinline__ Row row(int n) const {
    return Row{n < Dims<Cfg>::KG ? static_cast<long long>(g * Dims<Cfg>::KG + n) * Cfg::WK : -1};
  }
  __device__ __forceinline__ bool at(const Row& rw, int k, long long& off) const {
    if (rw.base < 0 || k >= Dims<Cfg>::KDIM) return false;
    const Rsc<Cfg> i(k);
    off = rw.base + i.r * Cfg::WR + i.s * Cfg::WS + i.c * Cfg::WC;
    return true;
  }
};

template <class Cfg>
using ConvTile = gemm::TileShape<Cfg::BM, Cfg::BN, Cfg::BK, Cfg::TM, Cfg::TN, Cfg::STAGES>;

// A layer-norm prologue's statistics: for every (row, tap) of the tile, the mean and 1/sqrt(var + EPS) of
// the C channels of the input pixel it reads (biased variance, two passes over the pixel, as the reference
// and kiln/norm.cuh), a warp per pixel with its lanes along the channels. Pixels outside the input (padding,
// rows past M) get 0 and 0: the loaders never normalize them. Before the main loop; a barrier after it.
template <class Cfg, class T, int BM, int THREADS, class Pro>
__device__ __forceinline__ void pixel_stats(const T* x, int m0, int m_end, float* mean, float* rstd) {
  constexpr int TAPS = Cfg::R * Cfg::S, WARPS = THREADS / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  for (int e = warp; e < BM * TAPS; e += WARPS) {
    const int m = m0 + e / TAPS, r = e % TAPS / Cfg::S, s = e % TAPS % Cfg::S;
    const int q = m % Cfg::Q, p = m / Cfg::Q % Cfg::P, n = m / Cfg::Q / Cfg::P;
    const int h = p * Cfg::SH - Cfg::PT + r * Cfg::DH, w = q * Cfg::SW - Cfg::PL + s * Cfg::DW;
    const bool in = m < m_end && static_cast<unsigned>(h) < static_cast<unsigned>(Cfg::H) &&
                    static_cast<unsigned>(w) < static_cast<unsigned>(Cfg::W);
    float mu = 0.0f, inv = 0.0f;
    if (in) {
      const long long base = Cfg::XB + n * Cfg::XN + h * Cfg::XH + w * Cfg::XW;
      float sum = 0.0f;
      for (int c = lane; c < Cfg::C; c += 32) sum += ldf(x, base + c * Cfg::XC);
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      mu = sum / static_cast<float>(Cfg::C);
      float sq = 0.0f;
      for (int c = lane; c < Cfg::C; c += 32) {
        const float d = ldf(x, base + c * Cfg::XC) - mu;
        sq += d * d;
      }
      for (int o = 16; o > 0; o /= 2) sq += __shfl_xor_sync(0xffffffffu, sq, o);
      inv = rsqrtf(sq / static_cast<float>(Cfg::C) + Pro::EPS);
    }
    if (lane == 0) mean[e] = mu, rstd[e] = inv;
  }
  __syncthreads();
}

// Split-K's absence (conv2d_implicit_gemm_split passes its functor).
struct NoSplit {};

// The kernel body. MainLoop: tensor cores for f16 / bf16, SIMT for f32 (gemm::DefaultMainLoop); both have
// the accumulator interface init, compute(stage), row(i), col(j), acc[i][j]. SPLITS > 1: split-K
// (kiln/split_k.cuh), block z reducing its range of k.
template <class Cfg, class T, class Epi, class Pro = NoPrologue,
          template <class, class> class MainLoop = gemm::DefaultMainLoop, int SPLITS = 1, class Split = NoSplit>
__device__ __forceinline__ void conv2d_implicit_gemm(int batch, const T* x, const T* w, const Epi& epi,
                                                     const Pro& pro = Pro{}, const Split& split = Split{}) {
  using Tile = ConvTile<Cfg>;
  using D = Dims<Cfg>;
  const int M = D::pixels(batch);
  constexpr int NT = (D::KG + Tile::BN - 1) / Tile::BN;  // channel tiles per group
  const int g = static_cast<int>(blockIdx.y) / NT;
  const int n0 = static_cast<int>(blockIdx.y) % NT * Tile::BN;
  const int m0 = static_cast<int>(blockIdx.x) * Tile::BM;
  ImageRows<Cfg, T, Pro> a{x + Cfg::XB, g, pro, M};
  if constexpr (Pro::kPixelNorm) {
    KILN_SHARED(float, stat_mean, [Tile::BM * Cfg::R * Cfg::S]);
    KILN_SHARED(float, stat_rstd, [Tile::BM * Cfg::R * Cfg::S]);
    pixel_stats<Cfg, T, Tile::BM, Tile::THREADS, Pro>(x, m0, M, stat_mean, stat_rstd);
    a.mean = stat_mean, a.rstd = stat_rstd, a.m0 = m0;
  }
  const FilterRows<Cfg, T> b{w + Cfg::WB, g};
  MainLoop<T, Tile> ml;
  const split_k::Range<D::KDIM, Tile::BK, SPLITS> ks(static_cast<int>(blockIdx.z));
  void* smem = gemm::gemm_mainloop<T, Tile>(a, b, m0, n0, ks.k0, ks.k1, ml);

  // Epilogue: (value, logical coordinate) to the functor, which applies the fused chain and stores; in the
  // order of the output's memory (Cfg::ALONG_M: pixels contiguous, NCHW; else channels).
  // The per-channel operands once per tile column (a column past the group's last channel reads the last).
  const auto col = [&](int c) { return epi.channel(g * D::KG + (n0 + c < D::KG ? n0 + c : D::KG - 1)); };
  const auto out = [&](int r, int c, float v, const auto& ch) {
    const int m = m0 + r, k = n0 + c;
    if (m >= M || k >= D::KG) return;
    const int q = m % Cfg::Q, t = m / Cfg::Q;
    const int p = t % Cfg::P, n = t / Cfg::P;
    epi(v, Idx<4>{{n, g * D::KG + k, p, q}}, ch);
  };
  if constexpr (SPLITS > 1) {
    split_k::finish<T, Tile, Cfg::ALONG_M, SPLITS>(ml, smem, split, col, out);
  } else {
    gemm::staged_epilogue<T, Tile, Cfg::ALONG_M>(ml, smem, col, out);
  }
}

// With split-K (Cfg::SPLITS blocks along grid z per output tile; kiln/split_k.cuh).
template <class Cfg, class T, class Epi, class Split, class Pro = NoPrologue,
          template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void conv2d_implicit_gemm_split(int batch, const T* x, const T* w, const Epi& epi,
                                                           const Split& split, const Pro& pro = Pro{}) {
  conv2d_implicit_gemm<Cfg, T, Epi, Pro, MainLoop, Cfg::SPLITS, Split>(batch, x, w, epi, pro, split);
}

// With a reduction epilogue (kiln/reduction_epilogue.cuh): the kernel above, then its tile's partial sums (a block's
// tile is BM pixels by BN channels of one group; its counter is its channel tile, blockIdx.y).
template <class Cfg, class T, class Epi, class Red, class Pro = NoPrologue,
          template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void conv2d_implicit_gemm_reduced(int batch, const T* x, const T* w, const Epi& epi,
                                                             const Red& red, const Pro& pro = Pro{}) {
  using Tile = ConvTile<Cfg>;
  using D = Dims<Cfg>;
  conv2d_implicit_gemm<Cfg, T, Epi, Pro, MainLoop>(batch, x, w, epi, pro);
  constexpr int NT = (D::KG + Tile::BN - 1) / Tile::BN;
  const int g = static_cast<int>(blockIdx.y) / NT;
  const int n0 = static_cast<int>(blockIdx.y) % NT * Tile::BN;
  const int kn = D::KG - n0 < Tile::BN ? D::KG - n0 : Tile::BN;
  red_epi::finish<Cfg::P * Cfg::Q, Cfg::K, Tile::BM, Tile::BN, Tile::THREADS>(
      batch, red, static_cast<int>(blockIdx.x) * Tile::BM, g * D::KG + n0, kn, static_cast<int>(blockIdx.y), gridDim.x);
}

}  // namespace conv
}  // namespace kiln
