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
// (element strides of x's logical [N, C, H, W] and w's [K, C/G, R, S] dims, plus base offsets), the
// storage type T, an epilogue functor called once per output with (value, Idx<4>{n, k, p, q}), and
// optionally a prologue functor applied to every element of x read (value, Idx<4>{n, c, h, w}) -> value.
// Launch: grid (ceil(M/BM), ceil(K/G / BN) · G, SPLITS), block Tile::THREADS, dynamic shared memory only
// as a residency pad.
// The batch N is the entry's argument `batch` (1 ≤ batch ≤ NMAX): one kernel serves every batch up to NMAX.
// A shape-generic kernel (conv2d_implicit_gemm_generic) takes C, H, W, K, P and Q as arguments too; its Cfg
// has R, S, G (1), SH, SW, PT, PL, DH, DW, the tiles and the flags VEC and INT32 (RuntimeDims).
#pragma once

#include "kiln/gemm_tile.cuh"
#include "kiln/reduction_epilogue.cuh"
#include "kiln/split_k.cuh"

namespace kiln {
namespace conv {

// Unsigned division by a run-time divisor d (1 <= d <= 2^31) of numbers n < 2^31, as a multiply-high and a
// shift (Granlund and Montgomery's round-up method, Hacker's Delight 10-9: m = floor(2^32 (2^l - d) / d) + 1
// with l = ceil(log2 d), q = (mulhi(m, n) + n) >> l): the shape-generic kernel's pixel and tap indices, which
// a kernel specialized on its shape divides by compile-time constants instead.
struct FastDiv {
  unsigned m = 1;
  int l = 0;
  FastDiv() = default;
  __device__ __forceinline__ explicit FastDiv(int d) {
    while ((1ull << l) < static_cast<unsigned long long>(d)) ++l;
    m = static_cast<unsigned>(
        (4294967296ull * ((1ull << l) - static_cast<unsigned long long>(d))) / static_cast<unsigned long long>(d) + 1);
  }
  __device__ __forceinline__ int div(int n) const {
    const unsigned hi = static_cast<unsigned>((static_cast<unsigned long long>(m) * static_cast<unsigned>(n)) >> 32);
    return static_cast<int>((hi + static_cast<unsigned>(n)) >> l);
  }
};

// The sizes and strides a conv kernel reads, as compile-time constants: the kernel of one shape (Cfg holds
// every dim). Members are static, so `d.C` on an object is a constant and its divisions fold.
template <class Cfg>
struct Dims {
  static constexpr bool kStatic = true;
  static constexpr int C = Cfg::C, H = Cfg::H, W = Cfg::W, K = Cfg::K, P = Cfg::P, Q = Cfg::Q;
  static constexpr int CG = Cfg::C / Cfg::G;  // input channels per group
  static constexpr int KG = Cfg::K / Cfg::G;  // output channels per group
  static constexpr int KDIM = CG * Cfg::R * Cfg::S;
  static constexpr long long XN = Cfg::XN, XC = Cfg::XC, XH = Cfg::XH, XW = Cfg::XW, XB = Cfg::XB;
  static constexpr long long WK = Cfg::WK, WC = Cfg::WC, WR = Cfg::WR, WS = Cfg::WS, WB = Cfg::WB;
  static constexpr long long abs_(long long v) { return v < 0 ? -v : v; }
  // Every offset of x fits in an int at every batch the kernel serves: 32-bit address arithmetic (fewer
  // registers for the loaders).
  static constexpr bool kInt =
      (Cfg::NMAX - 1) * abs_(XN) + (H - 1) * abs_(XH) + (W - 1) * abs_(XW) + (C - 1) * abs_(XC) < (1LL << 31);
  // x and w move in chunks of V elements (channels contiguous, every stride and C/G multiples of V).
  static constexpr bool x_vec(int V) {
    return XC == 1 && CG % V == 0 && XN % V == 0 && XH % V == 0 && XW % V == 0 && XB % V == 0;
  }
  // (1x1 KCRS weights qualify: their r and s are always 0, so only the channel and K strides matter.)
  static constexpr bool w_vec(int V) {
    return WC == 1 && CG % V == 0 && WK % V == 0 && (Cfg::R == 1 || WR % V == 0) && (Cfg::S == 1 || WS % V == 0) &&
           WB % V == 0;
  }
  // M = batch · P · Q output pixels: a run-time value (the batch is the kernel's argument).
  static __device__ __forceinline__ int pixels(int batch) { return batch * Cfg::P * Cfg::Q; }
  // Output pixel m -> (image, row, column).
  __device__ __forceinline__ void pixel(int m, int& n, int& p, int& q) const {
    const int t = m / Q;
    q = m % Q, p = t % P, n = t / P;
  }
  // Reduction index k = (r·S + s)·C/G + c -> (r, s, c).
  __device__ __forceinline__ void tap(int k, int& r, int& s, int& c) const {
    c = k % CG;
    const int rs = k / CG;
    r = rs / Cfg::S, s = rs % Cfg::S;
  }
};

// The sizes a shape-generic kernel takes as arguments: C, H, W, K, P and Q (with the batch), so that one
// source serves every conv of the same filter size, stride, padding, dilation, dtype, epilogue and tile
// (docs/architecture.md, "Shape-generic conv kernels"). x is dense NHWC and w dense KRSC, one group; Cfg says
// whether their chunks are whole vectors (VEC: the conv's channels are a multiple of the width) and whether
// x's offsets fit an int (INT32), decisions the planner made for the conv at hand.
template <class Cfg>
struct RuntimeDims {
  static_assert(Cfg::G == 1, "a shape-generic conv has one group");
  static constexpr bool kStatic = false;
  int C, H, W, K, P, Q, CG, KG, KDIM;
  long long XN, XH, XW, WK, WR, WS;
  static constexpr long long XC = 1, XB = 0, WC = 1, WB = 0;
  static constexpr bool kInt = Cfg::INT32;
  static constexpr bool x_vec(int) { return Cfg::VEC; }  // dense NHWC / KRSC: both hold when C is a multiple
  static constexpr bool w_vec(int) { return Cfg::VEC; }  // of the vector width
  FastDiv by_c, by_p, by_q;
  __device__ __forceinline__ RuntimeDims(int c, int h, int w, int k, int p, int q)
      : C(c),
        H(h),
        W(w),
        K(k),
        P(p),
        Q(q),
        CG(c),
        KG(k),
        KDIM(c * Cfg::R * Cfg::S),
        XN(static_cast<long long>(h) * w * c),
        XH(static_cast<long long>(w) * c),
        XW(c),
        WK(static_cast<long long>(Cfg::R) * Cfg::S * c),
        WR(static_cast<long long>(Cfg::S) * c),
        WS(c),
        by_c(c),
        by_p(p),
        by_q(q) {}
  __device__ __forceinline__ void pixel(int m, int& n, int& p, int& q) const {
    const int t = by_q.div(m);
    q = m - t * Q;
    n = by_p.div(t);
    p = t - n * P;
  }
  __device__ __forceinline__ void tap(int k, int& r, int& s, int& c) const {
    const int rs = by_c.div(k);
    c = k - rs * CG;
    r = rs / Cfg::S, s = rs % Cfg::S;
  }
};

// Reduction index k -> (r, s, c).
template <class Dm>
struct Rsc {
  int r, s, c;
  __device__ __forceinline__ Rsc(const Dm& d, int k) { d.tap(k, r, s, c); }
};

// A: the im2col view of x. A row is an output pixel; its state is the window's origin. Pro: the fused
// prologue (NoPrologue, or a functor of (value, Idx<4>{n, c, h, w}) at x's logical coordinate). Dm: Dims
// (sizes in Cfg) or RuntimeDims (sizes as arguments).
template <class Cfg, class T, class Pro = NoPrologue, class Dm = Dims<Cfg>>
struct ImageRows {
  static constexpr int V = gemm::VecWidth<T>::value;
  static constexpr bool kVec = Dm::x_vec(V);
  static constexpr bool kInt = Dm::kInt;
  using Off = typename gemm::OffsetType<kInt>::type;
  static constexpr bool kKFast = Dm::XC == 1;  // channels-last: a tap's channels, and a row's taps, in runs
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
  Dm d;
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
    int n, p, q;
    d.pixel(m, n, p, q);
    rw.base = static_cast<Off>(n * d.XN + static_cast<long long>(g * d.CG) * d.XC);
    rw.h0 = p * Cfg::SH - Cfg::PT;
    rw.w0 = q * Cfg::SW - Cfg::PL;
    rw.n = n;
    return rw;
  }
  // The prologue of the element at (row, k), which at() found inside x.
  __device__ __forceinline__ float pro(const Row& rw, int k, float v) const {
    const Rsc<Dm> i(d, k);
    const Idx<4> at{{rw.n, g * d.CG + i.c, rw.h0 + i.r * Cfg::DH, rw.w0 + i.s * Cfg::DW}};
    if constexpr (Pro::kPixelNorm) {
      const int slot = rw.local * (Cfg::R * Cfg::S) + i.r * Cfg::S + i.s;
      return fn(v, at, mean[slot], rstd[slot]);
    } else {
      return fn(v, at);
    }
  }
  __device__ __forceinline__ bool at(const Row& rw, int k, long long& off) const {
    if (k >= d.KDIM) return false;
    const Rsc<Dm> i(d, k);
    const int ih = rw.h0 + i.r * Cfg::DH, iw = rw.w0 + i.s * Cfg::DW;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(d.H) ||
        static_cast<unsigned>(iw) >= static_cast<unsigned>(d.W))
      return false;
    if constexpr (kInt) {
      const int xh = static_cast<int>(d.XH), xw = static_cast<int>(d.XW), xc = static_cast<int>(d.XC);
      off = rw.base + ih * xh + iw * xw + i.c * xc;
    } else {
      off = rw.base + ih * d.XH + iw * d.XW + i.c * d.XC;
    }
    return true;
  }
};

// B: the weights of one group. A row is an output channel of the group.
template <class Cfg, class T, class Dm = Dims<Cfg>>
struct FilterRows {
  static constexpr int V = gemm::VecWidth<T>::value;
  static constexpr bool kVec = Dm::w_vec(V);
  static constexpr bool kKFast = Dm::WC == 1;  // KRSC: a filter's k is one run
  static constexpr bool kPro = false;
  struct Row {
    long long base;  // -1 for rows past the group's channels
  };
  const T* ptr;  // w + WB
  int g;
  Dm d;

  __device__ __forceinline__ Row row(int n) const {
    return Row{n < d.KG ? static_cast<long long>(g * d.KG + n) * d.WK : -1};
  }
  __device__ __forceinline__ bool at(const Row& rw, int k, long long& off) const {
    if (rw.base < 0 || k >= d.KDIM) return false;
    const Rsc<Dm> i(d, k);
    off = rw.base + i.r * d.WR + i.s * d.WS + i.c * d.WC;
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

// The kernel body, for the sizes `d` (Dims: constants of Cfg; RuntimeDims: arguments). MainLoop: tensor
// cores for f16 / bf16, SIMT for f32 (gemm::DefaultMainLoop); both have the accumulator interface init,
// compute(stage), row(i), col(j), acc[i][j]. SPLITS > 1: split-K (kiln/split_k.cuh), block z reducing its
// range of k (constant sizes only).
template <class Cfg, class T, class Epi, class Pro, template <class, class> class MainLoop, int SPLITS, class Split,
          class Dm>
__device__ __forceinline__ void conv2d_body(const Dm& d, int batch, const T* x, const T* w, const Epi& epi,
                                            const Pro& pro, const Split& split) {
  using Tile = ConvTile<Cfg>;
  const int M = batch * d.P * d.Q;
  const int NT = (d.KG + Tile::BN - 1) / Tile::BN;  // channel tiles per group
  const int g = static_cast<int>(blockIdx.y) / NT;
  const int n0 = static_cast<int>(blockIdx.y) % NT * Tile::BN;
  const int m0 = static_cast<int>(blockIdx.x) * Tile::BM;
  ImageRows<Cfg, T, Pro, Dm> a{x + d.XB, g, pro, M, d};
  if constexpr (Pro::kPixelNorm) {
    static_assert(Dm::kStatic, "a layer-norm prologue needs constant sizes");
    KILN_SHARED(float, stat_mean, [Tile::BM * Cfg::R * Cfg::S]);
    KILN_SHARED(float, stat_rstd, [Tile::BM * Cfg::R * Cfg::S]);
    pixel_stats<Cfg, T, Tile::BM, Tile::THREADS, Pro>(x, m0, M, stat_mean, stat_rstd);
    a.mean = stat_mean, a.rstd = stat_rstd, a.m0 = m0;
  }
  const FilterRows<Cfg, T, Dm> b{w + d.WB, g, d};
  MainLoop<T, Tile> ml;
  int k0 = 0, k1 = d.KDIM;
  if constexpr (SPLITS > 1 && Dm::kStatic) {
    const split_k::Range<Dims<Cfg>::KDIM, Tile::BK, SPLITS> ks(static_cast<int>(blockIdx.z));
    k0 = ks.k0, k1 = ks.k1;
  } else if constexpr (SPLITS > 1) {  // Range's split at run time (the planner gives every split a slice)
    const int per = ((d.KDIM + Tile::BK - 1) / Tile::BK + SPLITS - 1) / SPLITS * Tile::BK;
    k0 = static_cast<int>(blockIdx.z) * per;
    k1 = k0 + per < d.KDIM ? k0 + per : d.KDIM;
  }
  void* smem = gemm::gemm_mainloop<T, Tile>(a, b, m0, n0, k0, k1, ml);

  // Epilogue: (value, logical coordinate) to the functor, which applies the fused chain and stores; in the
  // order of the output's memory (Cfg::ALONG_M: pixels contiguous, NCHW; else channels).
  // The per-channel operands once per tile column (a column past the group's last channel reads the last).
  const int KG = d.KG;
  const auto col = [&](int c) { return epi.channel(g * KG + (n0 + c < KG ? n0 + c : KG - 1)); };
  const auto out = [&](int r, int c, float v, const auto& ch) {
    const int m = m0 + r, k = n0 + c;
    if (m >= M || k >= KG) return;
    int n, p, q;
    d.pixel(m, n, p, q);
    epi(v, Idx<4>{{n, g * KG + k, p, q}}, ch);
  };
  if constexpr (SPLITS > 1) {
    split_k::finish<T, Tile, Cfg::ALONG_M, SPLITS>(ml, smem, split, col, out);
  } else {
    gemm::staged_epilogue<T, Tile, Cfg::ALONG_M>(ml, smem, col, out);
  }
}

// The kernel of one conv shape (Cfg holds every size).
template <class Cfg, class T, class Epi, class Pro = NoPrologue,
          template <class, class> class MainLoop = gemm::DefaultMainLoop, int SPLITS = 1, class Split = NoSplit>
__device__ __forceinline__ void conv2d_implicit_gemm(int batch, const T* x, const T* w, const Epi& epi,
                                                     const Pro& pro = Pro{}, const Split& split = Split{}) {
  conv2d_body<Cfg, T, Epi, Pro, MainLoop, SPLITS, Split>(Dims<Cfg>{}, batch, x, w, epi, pro, split);
}

// The shape-generic kernel: the batch and C, H, W, K, P, Q are arguments (RuntimeDims).
template <class Cfg, class T, class Epi, template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void conv2d_implicit_gemm_generic(int batch, int c, int h, int w_, int k, int p, int q,
                                                             const T* x, const T* w, const Epi& epi) {
  conv2d_body<Cfg, T, Epi, NoPrologue, MainLoop, 1, NoSplit>(RuntimeDims<Cfg>(c, h, w_, k, p, q), batch, x, w, epi,
                                                             NoPrologue{}, NoSplit{});
}

// The shape-generic kernel with split-K (Cfg::SPLITS).
template <class Cfg, class T, class Epi, class Split, template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void conv2d_implicit_gemm_generic_split(int batch, int c, int h, int w_, int k, int p, int q,
                                                                   const T* x, const T* w, const Epi& epi,
                                                                   const Split& split) {
  conv2d_body<Cfg, T, Epi, NoPrologue, MainLoop, Cfg::SPLITS, Split>(RuntimeDims<Cfg>(c, h, w_, k, p, q), batch, x, w,
                                                                     epi, NoPrologue{}, split);
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
