// Data movement as gathers: every output element is computed from a source coordinate (slice, concat,
// upsample, reshape, a permutation that keeps the innermost memory dim). The glue's Load functor maps an
// output coordinate to a value; the template only walks the output and hands (value, coordinate) to the
// group's epilogue functor, which does the store (and any fused pointwise work).
//
// Shapes are compile-time constants of a Cfg struct:
//   R                rank of the output
//   shape[R]         the output's logical dims
//   walk[R]          the output dims from outermost to innermost *memory* order: consecutive threads take
//                    consecutive elements of that order, so the epilogue's stores coalesce
//   numel            the product of shape; for a batch-generic kernel (the outermost walked dim is the batch,
//                    a kernel argument) the product of the other dims, and shape[walk[0]] is not used
// The templates take the element count as an argument (numel, times the batch where it is one).
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {

// Sets the coordinates of dims Cfg::walk[First..Last) from a flat index `f` over those dims
// (walk[Last - 1] varies fastest). Recursion on constants: every dim and size is a compile-time value,
// so the divisions are by constants (and device code never indexes a constexpr array at run time).
// The outermost walked dim takes what is left of `f`, without its size (f is below the element count): a
// batch-generic kernel's batch.
template <class Cfg, int First, int Last>
__device__ __forceinline__ void unflatten(long long f, Idx<Cfg::R>& i) {
  if constexpr (Last == 1 && First == 0) {
    i.i[Cfg::walk[0]] = static_cast<int>(f);
  } else if constexpr (Last > First) {
    constexpr int d = Cfg::walk[Last - 1];
    constexpr long long n = Cfg::shape[d];
    i.i[d] = static_cast<int>(f % n);
    unflatten<Cfg, First, Last - 1>(f / n, i);
  }
}

// One thread per output element, grid-stride (the launch may cover a few elements per thread).
template <class Cfg, class Load, class Epi>
__device__ __forceinline__ void gather(const Load& load, const Epi& epi, long long numel) {
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long f = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; f < numel; f += step) {
    Idx<Cfg::R> i;
    unflatten<Cfg, 0, Cfg::R>(f, i);
    epi(load(i), i);
  }
}

// A copy of a source that is contiguous in the output's walk order (reshape: both row-major): 16-byte
// loads when the source address and the element count allow, scalar loads otherwise. The stores stay the
// epilogue's, one element at a time.
template <class Cfg, class T, class Epi>
__device__ __forceinline__ void copy_contiguous(const T* src, const Epi& epi, long long numel) {
  constexpr int N = static_cast<int>(16 / sizeof(T));
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  if (numel % N == 0 && aligned16(src)) {
    for (long long f = first; f < numel / N; f += step) {
      const Vec<T, N> x = ldv<T, N>(src, f * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        Idx<Cfg::R> i;
        unflatten<Cfg, 0, Cfg::R>(f * N + k, i);
        epi(x.v[k], i);
      }
    }
    return;
  }
  for (long long f = first; f < numel; f += step) {
    Idx<Cfg::R> i;
    unflatten<Cfg, 0, Cfg::R>(f, i);
    epi(ldf(src, f), i);
  }
}

// A plain copy of Cfg::numel elements (a reshape with nothing fused, into a dense row-major output): the
// bits move unchanged, 16 bytes per access when both addresses are 16-byte aligned, the tail (and any
// unaligned copy) element by element.
template <class Cfg, class T>
__device__ __forceinline__ void copy_flat(const T* src, T* dst, long long numel) {
  constexpr long long N = static_cast<long long>(16 / sizeof(T));
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long step = static_cast<long long>(gridDim.x) * blockDim.x;
  long long done = 0;
  if (aligned16(src) && aligned16(dst)) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (long long f = first; f < numel / N; f += step) st(d + f, ld(s + f));
    done = numel / N * N;
  }
  for (long long f = done + first; f < numel; f += step) st(dst + f, ld(src + f));
}

// ---- upsample2d's source coordinates, exactly as the reference computes them (PyTorch's interpolate) ----
// `r` is the source scale: 1/scale when a scale was given, in/out otherwise, (in-1)/(out-1) with
// align_corners. Computed in double like the reference, so nearest picks the same source element.

// Nearest: floor(p * r), clamped to the last row.
__device__ __forceinline__ int upsample_nearest_src(int p, double r, int in) {
  const int s = static_cast<int>(static_cast<double>(p) * r);  // p * r >= 0: truncation is floor
  return s < in - 1 ? s : in - 1;
}

// Bilinear: the two source rows and the weight of the second.
struct LinearSrc {
  int i0, i1;
  float l;
};
template <bool AlignCorners>
__device__ __forceinline__ LinearSrc upsample_linear_src(int p, double r, int in) {
  double s;
  if constexpr (AlignCorners) {
    s = static_cast<double>(p) * r;
  } else {
    s = (static_cast<double>(p) + 0.5) * r - 0.5;
    s = s > 0.0 ? s : 0.0;
  }
  LinearSrc o;
  const int t = static_cast<int>(s);
  o.i0 = t < in - 1 ? t : in - 1;
  o.i1 = o.i0 + 1 < in - 1 ? o.i0 + 1 : in - 1;
  o.l = static_cast<float>(s - static_cast<double>(o.i0));
  return o;
}

// (1-lh)((1-lw)a + lw b) + lh((1-lw)c + lw d), the reference's order of operations.
__device__ __forceinline__ float bilinear_blend(float a, float b, float c, float d, float lh, float lw) {
  return (1.0f - lh) * ((1.0f - lw) * a + lw * b) + lh * ((1.0f - lw) * c + lw * d);
}

}  // namespace kiln
