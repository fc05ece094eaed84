// Pooling: max_pool2d / avg_pool2d (one output element, or a run of V channels over NHWC, per thread) and global
// average / max pooling (a row reduction over H x W per (n, c), sharing norm.cuh's row machinery).
//
// Coordinates are logical NCHW; memory order is the functors' business. `Load` maps an input coordinate
// to its f32 value (applying fused leading pointwise ops); `Epi` takes each output value and coordinate.
// Formulas and PyTorch's rules as the reference (src/ops/ops_pool.cpp): max pooling never lets padding win
// and a NaN in the window is the result; the average's divisor is the window clipped to the padded input
// (count_include_pad) or to the input.
#pragma once

#include "kiln/codegen.cuh"
#include "kiln/norm.cuh"

namespace kiln {
namespace pool {

// Cfg: I (index type), C, H, W (input), P, Q (output), KH, KW, SH, SW, PT, PL, PB, PR, MAX (bool),
// INCLUDE_PAD (bool), CHANNELS_LAST (bool: neighbouring threads take neighbouring channels, which is
// coalesced for NHWC memory; otherwise neighbouring output columns), V, BLOCK.
// V (CHANNELS_LAST only): each thread computes V consecutive channels (C % V == 0), read and written by
// the functors' `vec(i, float* v)` with one 16-byte (or 8-byte) access per tensor and window position
// (kiln::ldvu / stvu). V == 1: one output per thread through `load(i)` / `epi(v, i)`.
// The batch N is the argument `batch` (one kernel for every batch whose offsets fit in I).
// Launch: grid ceil(N*C*P*Q / V / BLOCK), block BLOCK.
template <class Cfg, class Load, class Epi>
__device__ __forceinline__ void window(int batch, const Load& load, const Epi& epi) {
  using I = typename Cfg::I;
  constexpr int V = Cfg::V;
  static_assert(V == 1 || (Cfg::CHANNELS_LAST && Cfg::C % V == 0), "vectors are runs of channels");
  constexpr int CV = Cfg::C / V;  // threads per output pixel
  const I kTotal = static_cast<I>(batch) * CV * Cfg::P * Cfg::Q;
  I t = static_cast<I>(blockIdx.x) * Cfg::BLOCK + static_cast<I>(threadIdx.x);
  if (t >= kTotal) return;
  int n, c, p, q;
  if constexpr (Cfg::CHANNELS_LAST) {
    c = static_cast<int>(t % CV) * V;
    t /= CV;
    q = static_cast<int>(t % Cfg::Q);
    t /= Cfg::Q;
    p = static_cast<int>(t % Cfg::P);
    n = static_cast<int>(t / Cfg::P);
  } else {
    q = static_cast<int>(t % Cfg::Q);
    t /= Cfg::Q;
    p = static_cast<int>(t % Cfg::P);
    t /= Cfg::P;
    c = static_cast<int>(t % Cfg::C);
    n = static_cast<int>(t / Cfg::C);
  }
  int h0 = p * Cfg::SH - Cfg::PT, w0 = q * Cfg::SW - Cfg::PL;
  int h1 = h0 + Cfg::KH < Cfg::H + Cfg::PB ? h0 + Cfg::KH : Cfg::H + Cfg::PB;
  int w1 = w0 + Cfg::KW < Cfg::W + Cfg::PR ? w0 + Cfg::KW : Cfg::W + Cfg::PR;
  // The average's divisor: the window clipped to the padded input (the shape rule keeps it an int; a max pool,
  // whose window may be larger, never computes it).
  const int padded = Cfg::MAX ? 1 : (h1 - h0) * (w1 - w0);
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < Cfg::H ? h1 : Cfg::H;
  w1 = w1 < Cfg::W ? w1 : Cfg::W;
  float acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = Cfg::MAX ? rowred::neg_inf() : 0.0f;
  Idx<4> i{{n, c, 0, 0}};
  for (int h = h0; h < h1; ++h) {
    i.i[2] = h;
    for (int w = w0; w < w1; ++w) {
      i.i[3] = w;
      float v[V];
      if constexpr (V == 1) {
        v[0] = load(i);
      } else {
        load.vec(i, v);
      }
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if constexpr (Cfg::MAX) {
          acc[e] = (v[e] != v[e] || v[e] > acc[e]) ? v[e] : acc[e];
        } else {
          acc[e] += v[e];
        }
      }
    }
  }
  if constexpr (!Cfg::MAX) {
    const float d = static_cast<float>(Cfg::INCLUDE_PAD ? padded : (h1 - h0) * (w1 - w0));
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] /= d;
  }
  const Idx<4> o{{n, c, p, q}};
  if constexpr (V == 1) {
    epi(acc[0], o);
  } else {
    epi.vec(o, acc);
  }
}

// A global pool or another channel reduction (OpDef::channel_reduction). The batch N is the argument
// `batch`. Cfg: I, C, H, W, MAX, TPR
// (threads per row: 1 when channels are neighbours in memory (NHWC), a warp or the whole block when H x W
// is), BLOCK, and for a sum: TERMS, PER_IMAGE (a row per (n, c) reducing its H x W values, else a row per
// channel reducing all N x H x W of them), term(q, v) and finish(q, sum, count). Output: (n, c, 0, 0) per
// image, else (q, c) for each term q. Launch: grid ceil(rows / (BLOCK / TPR)), block BLOCK.
template <class Cfg, class Load, class Epi>
__device__ __forceinline__ void global(int batch, const Load& load, const Epi& epi) {
  using I = typename Cfg::I;
  constexpr int TPR = Cfg::TPR, HW = Cfg::H * Cfg::W, T = Cfg::TERMS;
  const I SPAN = Cfg::PER_IMAGE ? static_cast<I>(HW) : static_cast<I>(batch) * HW;
  static_assert(Cfg::BLOCK % TPR == 0, "a block holds whole rows");
  static_assert(!Cfg::MAX || (T == 1 && Cfg::PER_IMAGE), "a max is one value per image");
  const int lane = static_cast<int>(threadIdx.x) % TPR;
  const I row = static_cast<I>(blockIdx.x) * (Cfg::BLOCK / TPR) + static_cast<I>(threadIdx.x) / TPR;
  const bool valid = row < static_cast<I>(Cfg::PER_IMAGE ? batch : 1) * Cfg::C;
  const int n = static_cast<int>(row / Cfg::C), c = static_cast<int>(row % Cfg::C);
  rowred::St<T> s;
#pragma unroll
  for (int q = 0; q < T; ++q) s.v[q] = Cfg::MAX ? rowred::neg_inf() : 0.0f;
  if (valid) {
    for (I e = lane; e < SPAN; e += TPR) {
      const int hw = static_cast<int>(e % HW), ni = Cfg::PER_IMAGE ? n : static_cast<int>(e / HW);
      const float v = load(Idx<4>{{ni, c, hw / Cfg::W, hw % Cfg::W}});
      if constexpr (Cfg::MAX) {
        s.v[0] = (v != v || v > s.v[0]) ? v : s.v[0];
      } else {
#pragma unroll
        for (int q = 0; q < T; ++q) s.v[q] += Cfg::term(q, v);
      }
    }
  }
  if constexpr (Cfg::MAX) {
    s = rowred::reduce<TPR, Cfg::BLOCK>(s, rowred::Max{});
  } else {
    s = rowred::reduce<TPR, Cfg::BLOCK>(s, rowred::Sum{});
  }
  if (!valid || lane != 0) return;
  if constexpr (Cfg::MAX) {
    epi(s.v[0], Idx<4>{{n, c, 0, 0}});
  } else if constexpr (Cfg::PER_IMAGE) {
    epi(Cfg::finish(0, s.v[0], static_cast<float>(SPAN)), Idx<4>{{n, c, 0, 0}});
  } else {
#pragma unroll
    for (int q = 0; q < T; ++q) epi(Cfg::finish(q, s.v[q], static_cast<float>(SPAN)), Idx<2>{{q, c}});
  }
}

}  // namespace pool
}  // namespace kiln
