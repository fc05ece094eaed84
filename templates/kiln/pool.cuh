// Pooling: max_pool2d / avg_pool2d (one output element per thread) and global average / max pooling (a
// row reduction over H x W per (n, c), sharing norm.cuh's row machinery).
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

// Cfg: I (index type), N, C, H, W (input), P, Q (output), KH, KW, SH, SW, PT, PL, PB, PR, MAX (bool),
// INCLUDE_PAD (bool), CHANNELS_LAST (bool: neighbouring threads take neighbouring channels, which is
// coalesced for NHWC memory; otherwise neighbouring output columns), BLOCK.
// Launch: grid ceil(N*C*P*Q / BLOCK), block BLOCK.
template <class Cfg, class Load, class Epi>
__device__ __forceinline__ void window(const Load& load, const Epi& epi) {
  using I = typename Cfg::I;
  constexpr I kTotal = static_cast<I>(Cfg::N) * Cfg::C * Cfg::P * Cfg::Q;
  I t = static_cast<I>(blockIdx.x) * Cfg::BLOCK + static_cast<I>(threadIdx.x);
  if (t >= kTotal) return;
  int n, c, p, q;
  if constexpr (Cfg::CHANNELS_LAST) {
    c = static_cast<int>(t % Cfg::C);
    t /= Cfg::C;
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
  const int padded = (h1 - h0) * (w1 - w0);  // the window clipped to the padded input
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < Cfg::H ? h1 : Cfg::H;
  w1 = w1 < Cfg::W ? w1 : Cfg::W;
  float acc = Cfg::MAX ? rowred::neg_inf() : 0.0f;
  Idx<4> i{{n, c, 0, 0}};
  for (int h = h0; h < h1; ++h) {
    i.i[2] = h;
    for (int w = w0; w < w1; ++w) {
      i.i[3] = w;
      const float v = load(i);
      if constexpr (Cfg::MAX) {
        acc = (v != v || v > acc) ? v : acc;
      } else {
        acc += v;
      }
    }
  }
  if constexpr (!Cfg::MAX) acc /= static_cast<float>(Cfg::INCLUDE_PAD ? padded : (h1 - h0) * (w1 - w0));
  epi(acc, Idx<4>{{n, c, p, q}});
}

// Cfg: I, N, C, H, W, MAX, TPR (threads per (n, c): 1 when channels are neighbours in memory (NHWC), a
// warp or the whole block when H x W is), BLOCK. Launch: grid ceil(N*C / (BLOCK / TPR)), block BLOCK.
template <class Cfg, class Load, class Epi>
__device__ __forceinline__ void global(const Load& load, const Epi& epi) {
  using I = typename Cfg::I;
  constexpr int TPR = Cfg::TPR, HW = Cfg::H * Cfg::W;
  static_assert(Cfg::BLOCK % TPR == 0, "a block holds whole rows");
  const int lane = static_cast<int>(threadIdx.x) % TPR;
  const I row = static_cast<I>(blockIdx.x) * (Cfg::BLOCK / TPR) + static_cast<I>(threadIdx.x) / TPR;
  const bool valid = row < static_cast<I>(Cfg::N) * Cfg::C;
  const int n = static_cast<int>(row / Cfg::C), c = static_cast<int>(row % Cfg::C);
  rowred::St<1> s{{Cfg::MAX ? rowred::neg_inf() : 0.0f}};
  if (valid) {
    for (int hw = lane; hw < HW; hw += TPR) {
      const float v = load(Idx<4>{{n, c, hw / Cfg::W, hw % Cfg::W}});
      if constexpr (Cfg::MAX) {
        s.v[0] = (v != v || v > s.v[0]) ? v : s.v[0];
      } else {
        s.v[0] += v;
      }
    }
  }
  if constexpr (Cfg::MAX) {
    s = rowred::reduce<TPR, Cfg::BLOCK>(s, rowred::Max{});
  } else {
    s = rowred::reduce<TPR, Cfg::BLOCK>(s, rowred::Sum{});
    s.v[0] /= static_cast<float>(HW);
  }
  if (valid && lane == 0) epi(s.v[0], Idx<4>{{n, c, 0, 0}});
}

}  // namespace pool
}  // namespace kiln
