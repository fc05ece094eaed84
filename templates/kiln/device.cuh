// kiln's device prelude: the one header every kiln kernel includes, and the only way kernels reach shared
// memory declarations, inline PTX (mma, ldmatrix, cp.async) and checked global memory accesses.
//
// Two implementations, chosen by the compiler that reads this file:
//   - NVRTC / nvcc (__CUDACC_RTC__ / __CUDACC__): real built-ins and inline PTX, for sm_80 and later.
//   - the host C++ compiler: kiln/host/emu_prelude.h, the emulator's side (docs/emu.md).
// A kernel written against this header compiles unchanged with both.
//
// What a kernel may use, beyond CUDA's own built-ins (threadIdx, __syncthreads, __shfl_*_sync, atomics,
// __half/__nv_bfloat16, __expf, ...):
//   KILN_SHARED(T, name, dims)          static shared memory, e.g. KILN_SHARED(float, tile, [2][64]);
//                                       (dims may be empty for a scalar; one declaration per source line)
//   KILN_DYNAMIC_SHARED(T, name)        T* name pointing at the launch's dynamic shared memory
//   kiln::ld(p), kiln::st(p, v)         global loads and stores (bounds-checked in the emulator's checked
//                                       mode); T may be a 16-byte vector type (float4, int4, uint4)
//   kiln::ld_cg(p)                      a global load of memory written during the kernel (through L2)
//   kiln::lds(p), kiln::sts(p, v)       shared-memory loads and stores: plain accesses, which the emulator
//                                       counts when a launch is profiled (bank wavefronts; docs/profile.md)
//   kiln::cp_async<N>(dst, src[, src_bytes])   N = 4, 8, 16; copies src_bytes (<= N), zero-fills the rest
//   kiln::cp_async_commit(), kiln::cp_async_wait<N>(), kiln::cp_async_wait_all()
//   kiln::ldmatrix<N, Trans>(unsigned (&r)[N], const void* row)   N = 1, 2, 4 (all 32 lanes)
//   kiln::mma_m16n8k16_f16(d, a, b, c), kiln::mma_m16n8k16_bf16(d, a, b, c)   f32 accumulators
//   kiln::pack_half2(lo, hi), kiln::pack_bf162(lo, hi)   two floats rounded into one 32-bit register
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define KILN_DEVICE_SIDE 1
#define KILN_SHARED(T, name, dims) __shared__ __align__(16) T name dims
#define KILN_DYNAMIC_SHARED(T, name)                                  \
  extern __shared__ __align__(16) unsigned char kiln_dynamic_smem_[]; \
  T* name = reinterpret_cast<T*>(kiln_dynamic_smem_)

namespace kiln {

template <class T>
__device__ __forceinline__ T ld(const T* p) {
  return *p;
}
template <class T>
__device__ __forceinline__ void st(T* p, const T& v) {
  *p = v;
}
template <class T>
__device__ __forceinline__ T lds(const T* p) {
  return *p;
}
template <class T>
__device__ __forceinline__ void sts(T* p, const T& v) {
  *p = v;
}
// A load of memory written during this kernel (a reduction epilogue reading back its block's stores, and the
// partial sums of other blocks after a fence): through L2, never the non-coherent read-only path.
template <class T>
__device__ __forceinline__ T ld_cg(const T* p) {
  return __ldcg(p);
}
// 16- and 8-byte stores stay one instruction: a uint4 assembled from four words may otherwise leave NVVM
// as four 4-byte stores when the address arithmetic does not show it the alignment (seen in the PTX of the
// pool and group norm kernels). `p` is global memory, whose generic and global addresses coincide. No
// memory clobber: kiln's kernels never read what they store.
__device__ __forceinline__ void st(uint4* p, const uint4& v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void st(uint2* p, const uint2& v) {
  asm volatile("st.global.v2.u32 [%0], {%1, %2};\n" ::"l"(p), "r"(v.x), "r"(v.y));
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

template <int N>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int src_bytes = N) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(N),
                 "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr(dst)), "l"(src), "n"(N),
                 "r"(src_bytes)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

template <int N, bool Trans = false>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const unsigned a = smem_addr(row);
  if constexpr (N == 1 && !Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  } else if constexpr (N == 1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  } else if constexpr (N == 2 && !Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  } else if constexpr (N == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  } else if constexpr (!Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
}

__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                                 const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                                                  const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&h);
}
__device__ __forceinline__ unsigned pack_bf162(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&h);
}

}  // namespace kiln

#else

#include "kiln/host/emu_prelude.h"

#endif
