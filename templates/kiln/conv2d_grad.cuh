// conv2d's gradients as implicit GEMMs on the tiled GEMM core (kiln/gemm_tile.cuh: the same stages, main loops,
// staged epilogue and split-K as the forward conv), one GEMM per group. With G groups, KG = K/G output and
// CG = C/G input channels per group:
//
// dgrad, dx = ∂L/∂x: the transposed convolution of dy.
//   M = N·H·W input pixels, N_gemm = CG input channels, K_gemm = R·S·KG,
//   A[m][k] = dy[n, g·KG + ko, p, q] for the output pixel (p, q) whose window puts tap (r, s) on input pixel
//     (h, w): p = (h + PT − r·DH) / SH where that divides exactly and lies in [0, P), q likewise (else 0),
//     with k = (r·S + s)·KG + ko;
//   B[c][k] = w[g·KG + ko, c, r, s].
//   A stride above 1 leaves most taps of a pixel without an output pixel: they are multiplied as zeros (the
//   kernel issues SH·SW times the useful products; cuDNN and CUTLASS split such a dgrad into SH·SW convs).
//
// wgrad, dw = ∂L/∂w: a sum over every image and output pixel.
//   M = KG output channels, N_gemm = R·S·CG taps (t = (r·S + s)·CG + c), K_gemm = N·P·Q output pixels,
//   A[ko][j] = dy[n, g·KG + ko, p, q],  B[t][j] = x[n, g·CG + c, p·SH − PT + r·DH, q·SW − PL + s·DW] (0 outside),
//   for output pixel j = (n, p, q). Its reduction is long and its output a filter, so it is split across grid
//   z (Cfg::SPLITS, kiln/split_k.cuh), each split's range of pixels computed from the batch at run time.
//
// The generated glue supplies
//   struct Cfg { static constexpr int NMAX, C, H, W, K, P, Q, R, S, G, SH, SW, PT, PL, DH, DW;
//                static constexpr long long YN, YC, YH, YW, YB;   // dy's view (both)
//                static constexpr long long WK, WC, WR, WS, WB;   // w's view (dgrad)
//                static constexpr long long XN, XC, XH, XW, XB;   // x's view (wgrad)
//                static constexpr int BM, BN, BK, TM, TN, STAGES; static constexpr bool ALONG_M;
//                static constexpr int SPLITS; };                   // wgrad split
// (element strides of the logical [N, C, H, W] / [K, C/G, R, S] dims, plus base offsets), the storage type T
// and an epilogue functor called once per output with (value, Idx<4>): dx's {n, c, h, w}, dw's {k, c, r, s}.
// The batch is the entry's argument (1 ≤ batch ≤ NMAX). Element offsets are 64-bit, indices int.
// Launch: dgrad grid (ceil(N·H·W / BM), ceil(CG / BN) · G); wgrad (ceil(KG / BM), ceil(R·S·CG / BN) · G, SPLITS).
#pragma once

#include "kiln/gemm_tile.cuh"
#include "kiln/split_k.cuh"

namespace kiln {
namespace conv_grad {

template <class Cfg>
struct Sizes {
  static constexpr int KG = Cfg::K / Cfg::G, CG = Cfg::C / Cfg::G;
  static constexpr int PQ = Cfg::P * Cfg::Q;
};

// dgrad's A: a row is an input pixel (n, h, w), k = (r·S + s)·KG + ko. dy's channels contiguous (NHWC) move in
// 16-byte chunks: V consecutive ko of one tap.
template <class Cfg, class T>
struct OutputGradRows {
  using Z = Sizes<Cfg>;
  static constexpr int V = gemm::VecWidth<T>::value;
  static constexpr int KDIM = Z::KG * Cfg::R * Cfg::S;
  static constexpr bool kVec =
      Cfg::YC == 1 && Z::KG % V == 0 && Cfg::YN % V == 0 && Cfg::YH % V == 0 && Cfg::YW % V == 0 && Cfg::YB % V == 0;
  static constexpr bool kKFast = Cfg::YC == 1;
  static constexpr bool kPro = false;
  struct Row {
    long long base;
    int h, w;  // the input pixel; h far below 0 for rows past M
  };
  const T* ptr;  // dy + YB
  int g;
  int m_end;

  __device__ __forceinline__ Row row(int m) const {
    Row rw;
    if (m >= m_end) {
      rw.base = 0, rw.h = -(1 << 30), rw.w = 0;
      return rw;
    }
    const int t = m / Cfg::W;
    rw.w = m % Cfg::W, rw.h = t % Cfg::H;
    rw.base = static_cast<long long>(t / Cfg::H) * Cfg::YN + static_cast<long long>(g * Z::KG) * Cfg::YC;
    return rw;
  }
  __device__ __forceinline__ bool at(const Row& rw, int k, long long& off) const {
    if (k >= KDIM) return false;
    const int ko = k % Z::KG, rs = k / Z::KG;
    const int th = rw.h + Cfg::PT - rs / Cfg::S * Cfg::DH, tw = rw.w + Cfg::PL - rs % Cfg::S * Cfg::DW;
    if (th < 0 || tw < 0 || th % Cfg::SH != 0 || tw % Cfg::SW != 0) return false;
    const int p = th / Cfg::SH, q = tw / Cfg::SW;
    if (p >= Cfg::P || q >= Cfg::Q) return false;
    off = rw.base + p * Cfg::YH + q * Cfg::YW + ko * Cfg::YC;
    return true;
  }
};

// dgrad's B: a row is an input channel c of the group, k as in A. Along k the filter steps over output
// channels (stride WK): element loads, whose rows (channels, contiguous in KRSC) coalesce.
template <class Cfg, class T>
struct FilterColumns {
  using Z = Sizes<Cfg>;
  static constexpr int KDIM = Z::KG * Cfg::R * Cfg::S;
  static constexpr bool kVec = false;
  static constexpr bool kKFast = Cfg::WK == 1;
  static constexpr bool kPro = false;
  struct Row {
    long long base;  // -1 for rows past the group's channels
  };
  const T* ptr;  // w + WB
  int g;

  __device__ __forceinline__ Row row(int c) const {
    return Row{c < Z::CG ? static_cast<long long>(g * Z::KG) * Cfg::WK + c * Cfg::WC : -1};
  }
  __device__ __forceinline__ bool at(const Row& rw, int k, long long& off) const {
    if (rw.base < 0 || k >= KDIM) return false;
    const int ko = k % Z::KG, rs = k / Z::KG;
    off = rw.base + ko * Cfg::WK + rs / Cfg::S * Cfg::WR + rs % Cfg::S * Cfg::WS;
    return true;
  }
};

// Output pixel j -> (image, row, column) of dy.
template <class Cfg>
__device__ __forceinline__ void output_pixel(int j, int& n, int& p, int& q) {
  n = j / Sizes<Cfg>::PQ;
  const int pq = j % Sizes<Cfg>::PQ;
  p = pq / Cfg::Q, q = pq % Cfg::Q;
}

// wgrad's A: a row is an output channel ko of the group, k an output pixel.
template <class Cfg, class T>
struct ChannelPixels {
  using Z = Sizes<Cfg>;
  static constexpr bool kVec = false;
  static constexpr bool kKFast = Cfg::YW == 1;
  static constexpr bool kPro = false;
  struct Row {
    long long base;  // -1 for rows past the group's channels
  };
  const T* ptr;  // dy + YB
  int g;
  int k_end;  // N·P·Q

  __device__ __forceinline__ Row row(int ko) const {
    return Row{ko < Z::KG ? static_cast<long long>(g * Z::KG + ko) * Cfg::YC : -1};
  }
  __device__ __forceinline__ bool at(const Row& rw, int j, long long& off) const {
    if (rw.base < 0 || j >= k_end) return false;
    int n, p, q;
    output_pixel<Cfg>(j, n, p, q);
    off = rw.base + n * Cfg::YN + p * Cfg::YH + q * Cfg::YW;
    return true;
  }
};

// wgrad's B: a row is a tap t = (r·S + s)·CG + c, k an output pixel: the input pixel its window puts the tap on.
template <class Cfg, class T>
struct TapPixels {
  using Z = Sizes<Cfg>;
  static constexpr int TAPS = Cfg::R * Cfg::S * Z::CG;
  static constexpr bool kVec = false;
  static constexpr bool kKFast = false;
  static constexpr bool kPro = false;
  struct Row {
    long long base;  // the channel's offset; -1 for rows past the taps
    int dh, dw;      // the tap's offset from a window's origin, less the padding
  };
  const T* ptr;  // x + XB
  int g;
  int k_end;

  __device__ __forceinline__ Row row(int t) const {
    if (t >= TAPS) return Row{-1, 0, 0};
    const int c = t % Z::CG, rs = t / Z::CG;
    return Row{static_cast<long long>(g * Z::CG + c) * Cfg::XC, rs / Cfg::S * Cfg::DH - Cfg::PT,
               rs % Cfg::S * Cfg::DW - Cfg::PL};
  }
  __device__ __forceinline__ bool at(const Row& rw, int j, long long& off) const {
    if (rw.base < 0 || j >= k_end) return false;
    int n, p, q;
    output_pixel<Cfg>(j, n, p, q);
    const int ih = p * Cfg::SH + rw.dh, iw = q * Cfg::SW + rw.dw;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(Cfg::H) ||
        static_cast<unsigned>(iw) >= static_cast<unsigned>(Cfg::W))
      return false;
    off = rw.base + n * Cfg::XN + ih * Cfg::XH + iw * Cfg::XW;
    return true;
  }
};

template <class Cfg>
using Tile = gemm::TileShape<Cfg::BM, Cfg::BN, Cfg::BK, Cfg::TM, Cfg::TN, Cfg::STAGES>;

// dx for `batch` images: the epilogue gets (value, {n, c, h, w}) and the per-channel operands of column c.
template <class Cfg, class T, class Epi, template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void conv2d_dgrad(int batch, const T* dy, const T* w, const Epi& epi) {
  using Z = Sizes<Cfg>;
  using Tl = Tile<Cfg>;
  const int M = batch * Cfg::H * Cfg::W;
  constexpr int NT = (Z::CG + Tl::BN - 1) / Tl::BN;  // channel tiles per group
  const int g = static_cast<int>(blockIdx.y) / NT;
  const int n0 = static_cast<int>(blockIdx.y) % NT * Tl::BN;
  const int m0 = static_cast<int>(blockIdx.x) * Tl::BM;
  const OutputGradRows<Cfg, T> a{dy + Cfg::YB, g, M};
  const FilterColumns<Cfg, T> b{w + Cfg::WB, g};
  MainLoop<T, Tl> ml;
  void* smem = gemm::gemm_mainloop<T, Tl>(a, b, m0, n0, OutputGradRows<Cfg, T>::KDIM, ml);
  const auto col = [&](int c) { return epi.channel(g * Z::CG + (n0 + c < Z::CG ? n0 + c : Z::CG - 1)); };
  gemm::staged_epilogue<T, Tl, Cfg::ALONG_M>(ml, smem, col, [&](int r, int c, float v, const auto& ch) {
    const int m = m0 + r, ci = n0 + c;
    if (m >= M || ci >= Z::CG) return;
    const int t = m / Cfg::W;
    epi(v, Idx<4>{{t / Cfg::H, g * Z::CG + ci, t % Cfg::H, m % Cfg::W}}, ch);
  });
}

// The body of both wgrad entries: SPLITS > 1 sums its splits' partial tiles (kiln/split_k.cuh).
template <class Cfg, class T, class Epi, int SPLITS, class Split, template <class, class> class MainLoop>
__device__ __forceinline__ void wgrad_body(int batch, const T* x, const T* dy, const Epi& epi, const Split& split) {
  using Z = Sizes<Cfg>;
  using Tl = Tile<Cfg>;
  using B = TapPixels<Cfg, T>;
  const int pixels = batch * Z::PQ;
  constexpr int NT = (B::TAPS + Tl::BN - 1) / Tl::BN;  // tap tiles per group
  const int g = static_cast<int>(blockIdx.y) / NT;
  const int n0 = static_cast<int>(blockIdx.y) % NT * Tl::BN;
  const int m0 = static_cast<int>(blockIdx.x) * Tl::BM;
  const ChannelPixels<Cfg, T> a{dy + Cfg::YB, g, pixels};
  const B b{x + Cfg::XB, g, pixels};
  int k0 = 0, k1 = pixels;
  if constexpr (SPLITS > 1) {  // whole BK slices per split, as split_k::Range, at the batch's run-time length
    const int per = ((pixels + Tl::BK - 1) / Tl::BK + SPLITS - 1) / SPLITS * Tl::BK;
    k0 = static_cast<int>(blockIdx.z) * per;
    k1 = k0 + per < pixels ? k0 + per : pixels;
    if (k1 < k0) k1 = k0;  // a split past the end (a batch smaller than planned for) adds zeros
  }
  MainLoop<T, Tl> ml;
  void* smem = gemm::gemm_mainloop<T, Tl>(a, b, m0, n0, k0, k1, ml);
  // Column t's channel is t % CG: the per-channel operands of dw's dim 1.
  const auto col = [&](int c) { return epi.channel((n0 + c < B::TAPS ? n0 + c : B::TAPS - 1) % Z::CG); };
  const auto out = [&](int r, int c, float v, const auto& ch) {
    const int ko = m0 + r, t = n0 + c;
    if (ko >= Z::KG || t >= B::TAPS) return;
    const int rs = t / Z::CG;
    epi(v, Idx<4>{{g * Z::KG + ko, t % Z::CG, rs / Cfg::S, rs % Cfg::S}}, ch);
  };
  if constexpr (SPLITS > 1) {
    split_k::finish<T, Tl, Cfg::ALONG_M, SPLITS>(ml, smem, split, col, out);
  } else {
    gemm::staged_epilogue<T, Tl, Cfg::ALONG_M>(ml, smem, col, out);
  }
}

struct NoSplit {};

// dw from `batch` images, unsplit.
template <class Cfg, class T, class Epi, template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void conv2d_wgrad(int batch, const T* x, const T* dy, const Epi& epi) {
  wgrad_body<Cfg, T, Epi, 1, NoSplit, MainLoop>(batch, x, dy, epi, NoSplit{});
}

// dw with its pixels split over Cfg::SPLITS blocks along grid z.
template <class Cfg, class T, class Epi, class Split, template <class, class> class MainLoop = gemm::DefaultMainLoop>
__device__ __forceinline__ void conv2d_wgrad_split(int batch, const T* x, const T* dy, const Epi& epi,
                                                   const Split& split) {
  wgrad_body<Cfg, T, Epi, Cfg::SPLITS, Split, MainLoop>(batch, x, dy, epi, split);
}

// Depthwise (one input and one output channel per group, G = C = K): each group's GEMM is one column wide, which
// the tiles above would fill to 1 of 32, so these kernels compute the sums directly. Cfg::BLOCK threads a block.
// dgrad: a thread per element of dx (channels fastest: coalesced over channels-last memory), summing the R·S taps
// of its window. Launch: grid ceil(N·H·W·C / BLOCK).
template <class Cfg, class T, class Epi>
__device__ __forceinline__ void depthwise_dgrad(int batch, const T* dy, const T* w, const Epi& epi) {
  const long long total = static_cast<long long>(batch) * Cfg::H * Cfg::W * Cfg::C;
  long long t = static_cast<long long>(blockIdx.x) * Cfg::BLOCK + threadIdx.x;
  if (t >= total) return;
  const int c = static_cast<int>(t % Cfg::C);
  t /= Cfg::C;
  const int x = static_cast<int>(t % Cfg::W);
  t /= Cfg::W;
  const int h = static_cast<int>(t % Cfg::H), n = static_cast<int>(t / Cfg::H);
  float acc = 0.0f;
  for (int r = 0; r < Cfg::R; ++r) {
    const int th = h + Cfg::PT - r * Cfg::DH;
    if (th < 0 || th % Cfg::SH != 0 || th / Cfg::SH >= Cfg::P) continue;
    for (int s = 0; s < Cfg::S; ++s) {
      const int tw = x + Cfg::PL - s * Cfg::DW;
      if (tw < 0 || tw % Cfg::SW != 0 || tw / Cfg::SW >= Cfg::Q) continue;
      acc += ldf(dy, Cfg::YB + n * Cfg::YN + c * Cfg::YC + th / Cfg::SH * Cfg::YH + tw / Cfg::SW * Cfg::YW) *
             ldf(w, Cfg::WB + c * Cfg::WK + r * Cfg::WR + s * Cfg::WS);
    }
  }
  epi(acc, Idx<4>{{n, c, h, x}});
}

// wgrad: a block per (channel, tap), its threads striding over the N·P·Q output pixels, then a tree sum in a fixed
// order (deterministic). Launch: grid C·R·S.
template <class Cfg, class T, class Epi>
__device__ __forceinline__ void depthwise_wgrad(int batch, const T* x, const T* dy, const Epi& epi) {
  constexpr int PQ = Cfg::P * Cfg::Q;
  const int c = static_cast<int>(blockIdx.x) / (Cfg::R * Cfg::S), rs = static_cast<int>(blockIdx.x) % (Cfg::R * Cfg::S);
  const int r = rs / Cfg::S, s = rs % Cfg::S;
  const int pixels = batch * PQ;
  float acc = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < pixels; j += Cfg::BLOCK) {
    const int n = j / PQ, p = j % PQ / Cfg::Q, q = j % Cfg::Q;
    const int ih = p * Cfg::SH - Cfg::PT + r * Cfg::DH, iw = q * Cfg::SW - Cfg::PL + s * Cfg::DW;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(Cfg::H) ||
        static_cast<unsigned>(iw) >= static_cast<unsigned>(Cfg::W))
      continue;
    acc += ldf(dy, Cfg::YB + n * Cfg::YN + c * Cfg::YC + p * Cfg::YH + q * Cfg::YW) *
           ldf(x, Cfg::XB + n * Cfg::XN + c * Cfg::XC + ih * Cfg::XH + iw * Cfg::XW);
  }
  KILN_SHARED(float, part, [Cfg::BLOCK]);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int half = Cfg::BLOCK / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) epi(part[0], Idx<4>{{c, 0, r, s}});
}

}  // namespace conv_grad
}  // namespace kiln
