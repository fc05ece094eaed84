// The host side of kiln's device prelude (templates/kiln/device.cuh): CUDA's built-ins for a kernel that the
// host C++ compiler builds into a shared object for kiln's emulator. Every call that needs another thread of
// the block (barriers, warp operations, shared memory, cp.async) goes to the emu runtime through the table
// in emu_abi.h; source positions come from __builtin_FILE()/__builtin_LINE() default arguments.
#pragma once

#include <math.h>
#include <stdio.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kiln/host/emu_abi.h"

#define KILN_EMU_SIDE 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

#define KILN_EMU_CAT_INNER(a, b) a##b
#define KILN_EMU_CAT(a, b) KILN_EMU_CAT_INNER(a, b)

namespace kiln_emu {
inline const kiln_emu_api* api = nullptr;
}  // namespace kiln_emu

// clang-format off
#define KILN_SHARED(T, name, dims)                                                                    \
  static char KILN_EMU_CAT(kiln_emu_smem_key_, __LINE__);                                             \
  T (&name) dims = *reinterpret_cast<T (*) dims>(::kiln_emu::api->shared_static(                      \
      &KILN_EMU_CAT(kiln_emu_smem_key_, __LINE__), sizeof(T dims), alignof(T) < 16 ? 16 : alignof(T), \
      __FILE__, __LINE__))
// clang-format on
#define KILN_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::kiln_emu::api->shared_dynamic())

// ---- vector types and indices ----------------------------------------------------------------------------
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

namespace kiln_emu {
inline uint3 idx3(const unsigned (&v)[3]) { return {v[0], v[1], v[2]}; }
}  // namespace kiln_emu
#define threadIdx (::kiln_emu::idx3(::kiln_emu::api->self()->thread_idx))
#define blockIdx (::kiln_emu::idx3(::kiln_emu::api->self()->block_idx))
#define blockDim (::kiln_emu::idx3(::kiln_emu::api->self()->block_dim))
#define gridDim (::kiln_emu::idx3(::kiln_emu::api->self()->grid_dim))
constexpr int warpSize = 32;

// ---- fp16 / bf16 (storage types; arithmetic is done in float) ---------------------------------------------
struct __half {
  unsigned short x;
};
struct __half2 {
  __half x, y;
};
struct __nv_bfloat16 {
  unsigned short x;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

namespace kiln_emu {
inline unsigned f2u(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float u2f(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// IEEE binary16, round to nearest even, with subnormals, infinities and NaN.
inline unsigned short float_to_half_bits(float f) {
  unsigned u = f2u(f);
  unsigned sign = (u >> 16) & 0x8000u;
  unsigned a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<unsigned short>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // rounds to infinity
  if (a < 0x38800000u) {                                                     // subnormal half or zero
    if (a < 0x33000000u) return static_cast<unsigned short>(sign);           // below half the smallest
    unsigned e = a >> 23;
    unsigned m = (a & 0x7fffffu) | 0x800000u;
    unsigned shift = 126u - e;  // 14 + (112 - e) + ... : brings m to units of 2^-24
    unsigned q = m >> shift;
    unsigned rem = m & ((1u << shift) - 1u);
    unsigned half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<unsigned short>(sign | q);
  }
  unsigned r = a - 0x38000000u;  // rebias exponent 127 -> 15
  unsigned q = r >> 13;
  unsigned rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<unsigned short>(sign | q);
}
inline float half_bits_to_float(unsigned short h) {
  unsigned sign = (h & 0x8000u) << 16;
  unsigned e = (h >> 10) & 0x1fu;
  unsigned m = h & 0x3ffu;
  if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24
    return sign ? -v : v;
  }
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}
inline unsigned short float_to_bf16_bits(float f) {
  unsigned u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<unsigned short>(u >> 16);
}
inline float bf16_bits_to_float(unsigned short b) { return u2f(static_cast<unsigned>(b) << 16); }
}  // namespace kiln_emu

inline __half __float2half(float f) { return {::kiln_emu::float_to_half_bits(f)}; }
inline __half __float2half_rn(float f) { return {::kiln_emu::float_to_half_bits(f)}; }
inline float __half2float(__half h) { return ::kiln_emu::half_bits_to_float(h.x); }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__float2half_rn(lo), __float2half_rn(hi)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __nv_bfloat16 __float2bfloat16(float f) { return {::kiln_emu::float_to_bf16_bits(f)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {::kiln_emu::float_to_bf16_bits(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return ::kiln_emu::bf16_bits_to_float(b.x); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half __ushort_as_half(unsigned short u) { return {u}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return {u}; }
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }

// ---- fast math and bit tricks -------------------------------------------------------------------------------
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __int_as_float(int i) { return ::kiln_emu::u2f(static_cast<unsigned>(i)); }
inline int __float_as_int(float f) { return static_cast<int>(::kiln_emu::f2u(f)); }
inline float __uint_as_float(unsigned u) { return ::kiln_emu::u2f(u); }
inline unsigned __float_as_uint(float f) { return ::kiln_emu::f2u(f); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }

// ---- barriers, fences and warp operations --------------------------------------------------------------------
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->syncthreads(file, line);
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

namespace kiln_emu {
inline kiln_emu_warp_op warp_op(int kind, unsigned mask, const char* file, int line) {
  kiln_emu_warp_op op{};
  op.kind = kind;
  op.mask = mask;
  op.width = 32;
  op.file = file;
  op.line = line;
  return op;
}
template <class T>
T shfl(int kind, unsigned mask, T var, int arg, int width, const char* file, int line) {
  static_assert(std::is_trivially_copyable_v<T> && (sizeof(T) == 4 || sizeof(T) == 8),
                "shuffles move 4- or 8-byte values");
  kiln_emu_warp_op op = warp_op(kind, mask, file, line);
  op.arg = arg;
  op.width = width;
  std::memcpy(&op.value, &var, sizeof(T));
  api->warp_op(&op);
  T r;
  std::memcpy(&r, &op.result, sizeof(T));
  return r;
}
}  // namespace kiln_emu

inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kiln_emu_warp_op op = ::kiln_emu::warp_op(KILN_EMU_SYNCWARP, mask, file, line);
  ::kiln_emu::api->warp_op(&op);
}
template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  return ::kiln_emu::shfl(KILN_EMU_SHFL_IDX, mask, var, src_lane, width, file, line);
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  return ::kiln_emu::shfl(KILN_EMU_SHFL_UP, mask, var, static_cast<int>(delta), width, file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  return ::kiln_emu::shfl(KILN_EMU_SHFL_DOWN, mask, var, static_cast<int>(delta), width, file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  return ::kiln_emu::shfl(KILN_EMU_SHFL_XOR, mask, var, lane_mask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  kiln_emu_warp_op op = ::kiln_emu::warp_op(KILN_EMU_BALLOT, mask, file, line);
  op.arg = pred != 0;
  ::kiln_emu::api->warp_op(&op);
  return static_cast<unsigned>(op.result);
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return (__ballot_sync(mask, pred, file, line) & mask) != 0;
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return (__ballot_sync(mask, pred, file, line) & mask) == mask;
}

// ---- atomics (global or shared memory) --------------------------------------------------------------------
#define KILN_EMU_ATOMIC(name, op)                                   \
  template <class T>                                                \
  inline T name(T* p, T v) {                                        \
    return std::atomic_ref<T>(*p).op(v, std::memory_order_relaxed); \
  }
KILN_EMU_ATOMIC(atomicAdd, fetch_add)
KILN_EMU_ATOMIC(atomicSub, fetch_sub)
KILN_EMU_ATOMIC(atomicAnd, fetch_and)
KILN_EMU_ATOMIC(atomicOr, fetch_or)
KILN_EMU_ATOMIC(atomicXor, fetch_xor)
KILN_EMU_ATOMIC(atomicExch, exchange)
#undef KILN_EMU_ATOMIC
template <class T>
inline T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
inline T atomicMin(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (v < old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <class T>
inline T atomicCAS(T* p, T compare, T v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(compare, v, std::memory_order_relaxed);
  return compare;
}

// ---- kiln's prelude functions ------------------------------------------------------------------------------
namespace kiln {

template <class T>
inline T ld(const T* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->check_global(p, sizeof(T), 0, file, line);
  return *p;
}
template <class T>
inline T ld_cg(const T* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->check_global(p, sizeof(T), 0, file, line);
  return std::atomic_ref<T>(*const_cast<T*>(p)).load(std::memory_order_relaxed);
}
template <class T>
inline void st(T* p, const T& v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->check_global(p, sizeof(T), 1, file, line);
  *p = v;
}

template <class T>
inline T lds(const T* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->shared_access(p, sizeof(T), 0, file, line);
  return *p;
}
template <class T>
inline void sts(T* p, const T& v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->shared_access(p, sizeof(T), 1, file, line);
  *p = v;
}

template <int N>
inline void cp_async(void* dst, const void* src, int src_bytes = N, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8 or 16 bytes");
  ::kiln_emu::api->cp_async(dst, src, N, static_cast<unsigned>(src_bytes), file, line);
}
inline void cp_async_commit() { ::kiln_emu::api->cp_commit(); }
template <int N>
inline void cp_async_wait(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->cp_wait(N, file, line);
}
inline void cp_async_wait_all(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::kiln_emu::api->cp_commit();
  ::kiln_emu::api->cp_wait(0, file, line);
}

template <int N, bool Trans = false>
inline void ldmatrix(unsigned (&r)[N], const void* row, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  kiln_emu_warp_op op = ::kiln_emu::warp_op(KILN_EMU_LDMATRIX, 0xffffffffu, file, line);
  op.addr = row;
  op.count = N;
  op.trans = Trans;
  ::kiln_emu::api->warp_op(&op);
  for (int i = 0; i < N; ++i) r[i] = op.r[i];
}

namespace detail {
inline void mma(int kind, float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4],
                const char* file, int line) {
  kiln_emu_warp_op op = ::kiln_emu::warp_op(kind, 0xffffffffu, file, line);
  for (int i = 0; i < 4; ++i) op.a[i] = a[i], op.c[i] = c[i];
  op.b[0] = b[0];
  op.b[1] = b[1];
  ::kiln_emu::api->warp_op(&op);
  for (int i = 0; i < 4; ++i) d[i] = op.d[i];
}
}  // namespace detail
inline void mma_m16n8k16_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4],
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::mma(KILN_EMU_MMA_F16, d, a, b, c, file, line);
}
inline void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const float (&c)[4],
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::mma(KILN_EMU_MMA_BF16, d, a, b, c, file, line);
}

inline unsigned pack_half2(float lo, float hi) {
  return ::kiln_emu::float_to_half_bits(lo) | (static_cast<unsigned>(::kiln_emu::float_to_half_bits(hi)) << 16);
}
inline unsigned pack_bf162(float lo, float hi) {
  return ::kiln_emu::float_to_bf16_bits(lo) | (static_cast<unsigned>(::kiln_emu::float_to_bf16_bits(hi)) << 16);
}

}  // namespace kiln

// ---- entry points (appended to the kernel text by the emu compiler, one per kernel) --------------------------
namespace kiln_emu {
template <class... A, size_t... I>
void invoke_impl(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}
template <class... A>
void invoke(void (*f)(A...), void** args) {
  invoke_impl(f, args, std::index_sequence_for<A...>{});
}
template <class... A>
int param_sizes(void (*)(A...), size_t* sizes, int capacity) {
  const size_t s[] = {sizeof(A)..., 0};
  for (int i = 0; i < static_cast<int>(sizeof...(A)) && i < capacity; ++i) sizes[i] = s[i];
  return static_cast<int>(sizeof...(A));
}
}  // namespace kiln_emu

#define KILN_EMU_EXPORT extern "C" __attribute__((visibility("default")))
#define KILN_EMU_ENTRY(name)                                                                    \
  KILN_EMU_EXPORT void kiln_emu_invoke_##name(void** args) { ::kiln_emu::invoke(&name, args); } \
  KILN_EMU_EXPORT int kiln_emu_params_##name(size_t* sizes, int capacity) {                     \
    return ::kiln_emu::param_sizes(&name, sizes, capacity);                                     \
  }
#define KILN_EMU_SET_API() \
  KILN_EMU_EXPORT void kiln_emu_set_api(const kiln_emu_api* a) { ::kiln_emu::api = a; }
