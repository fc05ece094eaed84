// Depthwise (more generally: one input channel per group, C/G == 1) convolution as a direct kernel: each
// thread computes one output from its R x S window. A GEMM would have a reduction of only R·S, so tiles
// would be mostly padding; here every load is useful and the weights stay in L1.
//
// Threads walk the outputs with the channel fastest when x's channel stride is the smallest (NHWC: a warp
// reads 32 neighbouring channels of one pixel, coalesced), else with the column fastest (NCHW).
//
// Cfg: the same shape and view constants as kiln/conv2d.cuh (N, C, H, W, K, P, Q, R, S, G, SH, SW, PT, PL,
// DH, DW, XN, XC, XH, XW, XB, WK, WC, WR, WS, WB) plus THREADS. Launch: grid ceil(N·K·P·Q / THREADS),
// block THREADS. The epilogue functor gets (value, Idx<4>{n, k, p, q}); the optional prologue functor
// (value, Idx<4>{n, c, h, w}) -> value is applied to every element of x read (never to padding).
#pragma once

#include "kiln/codegen.cuh"
#include "kiln/reduction_epilogue.cuh"

namespace kiln {
namespace conv {

// The output (n, k, p, q): its R x S window of x (the prologue applied to every in-bounds tap; padding
// stays zero) times channel k's filter.
template <class Cfg, class T, class Pro>
__device__ __forceinline__ float depthwise_output(const T* x, const T* w, int n, int k, int p, int q, const Pro& pro) {
  constexpr int KG = Cfg::K / Cfg::G;  // channel multiplier
  const T* xb = x + Cfg::XB + n * Cfg::XN + (k / KG) * Cfg::XC;
  const T* wb = w + Cfg::WB + k * Cfg::WK;
  const int h0 = p * Cfg::SH - Cfg::PT, w0 = q * Cfg::SW - Cfg::PL;
  float acc = 0.0f;
#pragma unroll 1
  for (int r = 0; r < Cfg::R; ++r) {
    const int ih = h0 + r * Cfg::DH;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(Cfg::H)) continue;
#pragma unroll
    for (int s = 0; s < Cfg::S; ++s) {
      const int iw = w0 + s * Cfg::DW;
      if (static_cast<unsigned>(iw) < static_cast<unsigned>(Cfg::W)) {
        float v = ldf(xb, ih * Cfg::XH + iw * Cfg::XW);
        if constexpr (Pro::kActive) v = pro(v, Idx<4>{{n, k / KG, ih, iw}});
        acc = fmaf(v, ldf(wb, r * Cfg::WR + s * Cfg::WS), acc);
      }
    }
  }
  return acc;
}

template <class Cfg, class T, class Epi, class Pro = NoPrologue>
__device__ __forceinline__ void depthwise_conv2d(int batch, const T* x, const T* w, const Epi& epi,
                                                 const Pro& pro = Pro{}) {
  static_assert(Cfg::C == Cfg::G, "one input channel per group");
  const long long total = static_cast<long long>(batch) * Cfg::K * Cfg::P * Cfg::Q;
  const long long idx = static_cast<long long>(blockIdx.x) * Cfg::THREADS + threadIdx.x;
  if (idx >= total) return;
  int n, k, p, q;
  if constexpr (Cfg::XC <= Cfg::XW) {
    k = static_cast<int>(idx % Cfg::K);
    const long long t = idx / Cfg::K;
    q = static_cast<int>(t % Cfg::Q);
    p = static_cast<int>(t / Cfg::Q % Cfg::P);
    n = static_cast<int>(t / Cfg::Q / Cfg::P);
  } else {
    q = static_cast<int>(idx % Cfg::Q);
    const long long t = idx / Cfg::Q;
    p = static_cast<int>(t % Cfg::P);
    k = static_cast<int>(t / Cfg::P % Cfg::K);
    n = static_cast<int>(t / Cfg::P / Cfg::K);
  }
  epi(depthwise_output<Cfg>(x, w, n, k, p, q, pro), Idx<4>{{n, k, p, q}});
}

// With a reduction epilogue (kiln/reduction_epilogue.cuh): a block per tile of BM output pixels x BN channels
// (Cfg::BM, Cfg::BN; grid (ceil(N·P·Q / BM), ceil(K / BN))), its threads walking the tile in the same order
// as above, then the tile's partial sums.
template <class Cfg, class T, class Epi, class Red, class Pro = NoPrologue>
__device__ __forceinline__ void depthwise_conv2d_reduced(int batch, const T* x, const T* w, const Epi& epi,
                                                         const Red& red, const Pro& pro = Pro{}) {
  static_assert(Cfg::C == Cfg::G, "one input channel per group");
  const int M = batch * Cfg::P * Cfg::Q;
  const int m0 = static_cast<int>(blockIdx.x) * Cfg::BM, k0 = static_cast<int>(blockIdx.y) * Cfg::BN;
  for (int e = static_cast<int>(threadIdx.x); e < Cfg::BM * Cfg::BN; e += Cfg::THREADS) {
    const bool channels_fastest = Cfg::XC <= Cfg::XW;
    const int m = m0 + (channels_fastest ? e / Cfg::BN : e % Cfg::BM);
    const int k = k0 + (channels_fastest ? e % Cfg::BN : e / Cfg::BM);
    if (m >= M || k >= Cfg::K) continue;
    const int q = m % Cfg::Q, p = m / Cfg::Q % Cfg::P, n = m / Cfg::Q / Cfg::P;
    epi(depthwise_output<Cfg>(x, w, n, k, p, q, pro), Idx<4>{{n, k, p, q}});
  }
  const int kn = Cfg::K - k0 < Cfg::BN ? Cfg::K - k0 : Cfg::BN;
  red_epi::finish<Cfg::P * Cfg::Q, Cfg::K, Cfg::BM, Cfg::BN, Cfg::THREADS>(batch, red, m0, k0, kn,
                                                                           static_cast<int>(blockIdx.y), gridDim.x);
}

}  // namespace conv
}  // namespace kiln
