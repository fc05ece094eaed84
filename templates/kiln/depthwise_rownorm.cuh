// A depthwise conv whose epilogue normalizes each output pixel's channels (ConvNeXt's dwconv -> permute
// (0, 2, 3, 1) -> layer_norm, planned as one group: the fusion pass's row epilogue): one block per output
// pixel, one thread per channel, a Welford reduction over the block (kiln/norm.cuh), then the normalized
// value to the epilogue. The permuted tensor is never stored unless another kernel reads it.
//
// Cfg: kiln/depthwise_conv2d.cuh's shape and views plus THREADS (K rounded up to whole warps, at most
// 1024) and EPS (the norm's epsilon). Pre: (conv value, Idx<4>{n, k, p, q}) -> the value the norm reads
// (the fused ops between conv and norm, storing any value another kernel reads). Epi: (normalized value,
// Idx<4>{n, p, q, k}) at the norm's coordinate: its scale and shift and every op after it.
// Launch: grid N·P·Q, block THREADS.
#pragma once

#include "kiln/depthwise_conv2d.cuh"
#include "kiln/norm.cuh"

namespace kiln {
namespace conv {

template <class Cfg, class T, class Pre, class Epi, class Pro = NoPrologue>
__device__ __forceinline__ void depthwise_rownorm(int batch, const T* x, const T* w, const Pre& pre, const Epi& epi,
                                                  const Pro& pro = Pro{}) {
  (void)batch;  // a block per output pixel: the grid covers every image
  static_assert(Cfg::C == Cfg::G, "one input channel per group");
  static_assert(Cfg::THREADS % 32 == 0 && Cfg::THREADS >= Cfg::K && Cfg::THREADS <= 1024, "a channel per thread");
  const int pix = static_cast<int>(blockIdx.x);
  const int q = pix % Cfg::Q, p = pix / Cfg::Q % Cfg::P, n = pix / Cfg::Q / Cfg::P;
  const int k = static_cast<int>(threadIdx.x);
  const bool on = k < Cfg::K;
  float v = 0.0f;
  if (on) v = pre(depthwise_output<Cfg>(x, w, n, k, p, q, pro), Idx<4>{{n, k, p, q}});
  // (count, mean, M2) of the pixel's channels; threads past K count nothing.
  rowred::St<3> s{{on ? 1.0f : 0.0f, v, 0.0f}};
  s = rowred::reduce<Cfg::THREADS, Cfg::THREADS>(s, rowred::Welford{});
  const float rstd = rsqrtf(s.v[2] / s.v[0] + Cfg::EPS);  // biased variance, as torch.nn.LayerNorm
  if (on) epi((v - s.v[1]) * rstd, Idx<4>{{n, p, q, k}});
}

}  // namespace conv
}  // namespace kiln
