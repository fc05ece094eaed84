// What generated glue builds on: typed loads and stores that compute in f32, coordinate tuples, and
// 16-byte vector access. Every kernel kiln generates includes this header first (one fixed preamble).
#pragma once

#include "kiln/device.cuh"
#include "kiln/pointwise_ops.cuh"

namespace kiln {

// Storage <-> f32. Stores round to nearest even (the reference's rounding of a graph output).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
// A value rounded to storage type T and back (cast inside a fused kernel).
template <class T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// The f32 value of element `off` of a T array; the store of an f32 value into one.
template <class T>
__device__ __forceinline__ float ldf(const T* p, long long off) {
  return to_f32(kiln::ld(p + off));
}
template <class T>
__device__ __forceinline__ float ldf_cg(const T* p, long long off) {
  return to_f32(kiln::ld_cg(p + off));
}
template <class T>
__device__ __forceinline__ void stf(T* p, long long off, float v) {
  kiln::st(p + off, from_f32<T>(v));
}

// N consecutive elements (N * sizeof(T) == 4, 8 or 16 bytes, aligned to that) as f32, and back. The bytes
// move as 32-bit words; 16-bit elements are taken from them by their bit patterns (little-endian).
template <class T, int N>
struct Vec {
  float v[N];
};
__device__ __forceinline__ float half_from_bits(__half*, unsigned short b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ float half_from_bits(__nv_bfloat16*, unsigned short b) {
  return __bfloat162float(__ushort_as_bfloat16(b));
}
__device__ __forceinline__ unsigned short bits_from_f32(__half*, float v) {
  return __half_as_ushort(__float2half_rn(v));
}
__device__ __forceinline__ unsigned short bits_from_f32(__nv_bfloat16*, float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// N values of storage type T as the N * sizeof(T) / 4 32-bit words that hold them (little-endian), and
// back: what a vector access moves.
template <class T, int N>
__device__ __forceinline__ void pack_words(const float* v, unsigned* w) {
  constexpr int W = static_cast<int>(N * sizeof(T) / 4);
#pragma unroll
  for (int i = 0; i < W; ++i) w[i] = 0u;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (sizeof(T) == 4) {
      w[i] = __float_as_uint(v[i]);
    } else {
      w[i / 2] |= static_cast<unsigned>(bits_from_f32(static_cast<T*>(nullptr), v[i])) << (16 * (i & 1));
    }
  }
}
template <class T, int N>
__device__ __forceinline__ void unpack_words(const unsigned* w, float* v) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (sizeof(T) == 4) {
      v[i] = __uint_as_float(w[i]);
    } else {
      v[i] = half_from_bits(static_cast<T*>(nullptr), static_cast<unsigned short>(w[i / 2] >> (16 * (i & 1))));
    }
  }
}

template <class T, int N>
__device__ __forceinline__ Vec<T, N> ldv(const T* p, long long off) {
  static_assert(N * sizeof(T) == 16 || N * sizeof(T) == 8 || N * sizeof(T) == 4,
                "vector accesses are 4, 8 or 16 bytes");
  constexpr int W = static_cast<int>(N * sizeof(T) / 4);
  unsigned w[W];
  if constexpr (W == 4) {
    const uint4 q = kiln::ld(reinterpret_cast<const uint4*>(p + off));
    w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
  } else if constexpr (W == 2) {
    const uint2 q = kiln::ld(reinterpret_cast<const uint2*>(p + off));
    w[0] = q.x, w[1] = q.y;
  } else {
    w[0] = kiln::ld(reinterpret_cast<const unsigned*>(p + off));
  }
  Vec<T, N> r;
  unpack_words<T, N>(w, r.v);
  return r;
}
template <class T, int N>
__device__ __forceinline__ void stv(T* p, long long off, const Vec<T, N>& r) {
  static_assert(N * sizeof(T) == 16 || N * sizeof(T) == 8 || N * sizeof(T) == 4,
                "vector accesses are 4, 8 or 16 bytes");
  constexpr int W = static_cast<int>(N * sizeof(T) / 4);
  unsigned w[W];
  pack_words<T, N>(r.v, w);
  if constexpr (W == 4) {
    kiln::st(reinterpret_cast<uint4*>(p + off), make_uint4(w[0], w[1], w[2], w[3]));
  } else if constexpr (W == 2) {
    kiln::st(reinterpret_cast<uint2*>(p + off), make_uint2(w[0], w[1]));
  } else {
    kiln::st(reinterpret_cast<unsigned*>(p + off), w[0]);
  }
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// ldv / stv at an offset that is a multiple of N (the generator's guarantee) when the pointer is 16-byte
// aligned, else the same N elements one at a time. Buffers an Executable binds always are (it checks), and
// so is its workspace; a caller launching a kernel on its own pointers may not be. The test is of a kernel
// parameter, the same for every thread. The element-by-element forms are calls, not inlined: inlined
// beside every vector access they made ptxas spill (max pool over NHWC, sm_80).
template <class T, int N>
__device__ __noinline__ Vec<T, N> ldv_unaligned(const T* p, long long off) {
  Vec<T, N> r;
#pragma unroll
  for (int i = 0; i < N; ++i) r.v[i] = ldf(p, off + i);
  return r;
}
template <class T, int N>
__device__ __noinline__ void stv_unaligned(T* p, long long off, Vec<T, N> r) {
#pragma unroll
  for (int i = 0; i < N; ++i) stf(p, off + i, r.v[i]);
}
template <class T, int N>
__device__ __forceinline__ Vec<T, N> ldvu(const T* p, long long off) {
  if (aligned16(p)) return ldv<T, N>(p, off);
  return ldv_unaligned<T, N>(p, off);
}
template <class T, int N>
__device__ __forceinline__ void stvu(T* p, long long off, const Vec<T, N>& r) {
  if (aligned16(p)) {
    stv<T, N>(p, off, r);
  } else {
    stv_unaligned<T, N>(p, off, r);
  }
}

// A logical coordinate: what load functors take and epilogue functors receive.
template <int R>
struct Idx {
  int i[R];
};

// The prologue of an operand that has none: its values go to the math as they are in memory. A fused
// prologue is a generated functor with kActive = true, `float operator()(float v, const Idx<R>& i) const`
// (the fused ops at the operand's logical coordinate), applied to each element a kernel loads; elements
// outside the operand (padding, tails) stay exactly zero, never pro(0): PyTorch pads the transformed tensor.
struct NoPrologue {
  static constexpr bool kActive = false;
  static constexpr bool kPixelNorm = false;  // a layer-norm prologue (kiln/conv2d.cuh): per-pixel statistics
  template <class I>
  __device__ __forceinline__ float operator()(float v, const I&) const {
    return v;
  }
};

}  // namespace kiln
