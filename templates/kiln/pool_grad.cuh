// The window pools' gradients, max_pool2d_grad and avg_pool2d_grad: one thread per element of dx, summing over
// the windows that cover it (at most ceil(KH / SH) x ceil(KW / SW)) as the reference does, in f32. A max pool's
// window gives its dy to its max, recomputed from x as the forward's rule picks it (the first in scan order; a
// NaN, the last NaN; the window's first element when nothing beats -inf): PyTorch's index. An average's window
// gives each element dy / divisor (pool.cuh's divisor).
//
// Cfg: I (index type), C, H, W, P, Q, KH, KW, SH, SW, PT, PL, PB, PR, MAX, INCLUDE_PAD, CHANNELS_LAST, BLOCK.
// Fn: dy(Idx<4>), x(Idx<4>) -> float and store(float, Idx<4>) at logical NCHW coordinates.
// Launch: grid ceil(N·C·H·W / BLOCK), block BLOCK; the batch is the argument.
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {
namespace pool_grad {

template <class Cfg, class Fn>
__device__ __forceinline__ void window_grad(int batch, const Fn& fn) {
  using I = typename Cfg::I;
  const I total = static_cast<I>(batch) * Cfg::C * Cfg::H * Cfg::W;
  I t = static_cast<I>(blockIdx.x) * Cfg::BLOCK + static_cast<I>(threadIdx.x);
  if (t >= total) return;
  int n, c, h, w;
  if constexpr (Cfg::CHANNELS_LAST) {  // neighbouring threads on neighbouring channels
    c = static_cast<int>(t % Cfg::C), t /= Cfg::C;
    w = static_cast<int>(t % Cfg::W), t /= Cfg::W;
    h = static_cast<int>(t % Cfg::H), n = static_cast<int>(t / Cfg::H);
  } else {
    w = static_cast<int>(t % Cfg::W), t /= Cfg::W;
    h = static_cast<int>(t % Cfg::H), t /= Cfg::H;
    c = static_cast<int>(t % Cfg::C), n = static_cast<int>(t / Cfg::C);
  }
  // Windows p whose rows [p·SH − PT, p·SH − PT + KH) hold h: p from ceil((h + PT − KH + 1) / SH) to (h + PT) / SH.
  const int ph = h + Cfg::PT, pw = w + Cfg::PL;
  const int p0 = ph - Cfg::KH + 1 > 0 ? (ph - Cfg::KH + 1 + Cfg::SH - 1) / Cfg::SH : 0;
  const int q0 = pw - Cfg::KW + 1 > 0 ? (pw - Cfg::KW + 1 + Cfg::SW - 1) / Cfg::SW : 0;
  const int p1 = ph / Cfg::SH < Cfg::P - 1 ? ph / Cfg::SH : Cfg::P - 1;
  const int q1 = pw / Cfg::SW < Cfg::Q - 1 ? pw / Cfg::SW : Cfg::Q - 1;
  float acc = 0.0f;
  for (int p = p0; p <= p1; ++p) {
    for (int q = q0; q <= q1; ++q) {
      int h0 = p * Cfg::SH - Cfg::PT, w0 = q * Cfg::SW - Cfg::PL;
      int h1 = h0 + Cfg::KH < Cfg::H + Cfg::PB ? h0 + Cfg::KH : Cfg::H + Cfg::PB;
      int w1 = w0 + Cfg::KW < Cfg::W + Cfg::PR ? w0 + Cfg::KW : Cfg::W + Cfg::PR;
      const int padded = (h1 - h0) * (w1 - w0);
      h0 = h0 > 0 ? h0 : 0, w0 = w0 > 0 ? w0 : 0;
      h1 = h1 < Cfg::H ? h1 : Cfg::H, w1 = w1 < Cfg::W ? w1 : Cfg::W;
      const float d = fn.dy(Idx<4>{{n, c, p, q}});
      if constexpr (Cfg::MAX) {
        int ah = h0, aw = w0;
        float best = -__int_as_float(0x7f800000);
        for (int ih = h0; ih < h1; ++ih)
          for (int iw = w0; iw < w1; ++iw) {
            const float v = fn.x(Idx<4>{{n, c, ih, iw}});
            if (v != v || v > best) best = v, ah = ih, aw = iw;
          }
        if (ah == h && aw == w) acc += d;
      } else {
        acc += d / static_cast<float>(Cfg::INCLUDE_PAD ? padded : (h1 - h0) * (w1 - w0));
      }
    }
  }
  fn.store(acc, Idx<4>{{n, c, h, w}});
}

}  // namespace pool_grad
}  // namespace kiln
