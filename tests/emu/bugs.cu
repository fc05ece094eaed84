// Deliberately wrong kernels: the emulator must report each (tests/test_emu_bugs.cpp). They are valid CUDA
// and compile with NVRTC; they are wrong only in what they do at run time.
#include "kiln/device.cuh"

// Reads shared memory written by cp.async without waiting for the copy: reads poison (NaN).
extern "C" __global__ void bug_no_cp_wait(const float* x, float* out) {
  KILN_SHARED(float, s, [128]);
  const int t = threadIdx.x;
  kiln::cp_async<16>(&s[4 * t], x + 4 * t);
  kiln::cp_async_commit();
  __syncthreads();  // a barrier is not a wait: the copies may still be in flight
  for (int i = 0; i < 4; ++i) kiln::st(out + 4 * t + i, s[4 * t + i]);
}

// Reads a neighbour's shared-memory value without a __syncthreads() after the writes.
extern "C" __global__ void bug_no_syncthreads(const float* x, float* out) {
  KILN_SHARED(float, s, [64]);
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = kiln::ld(x + t);
  kiln::st(out + t, s[(t + 1) % n]);
}

// Threads of one block wait at two different barriers.
extern "C" __global__ void bug_divergent_barrier(float* out) {
  const int t = threadIdx.x;
  if (t < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  kiln::st(out + t, 1.0f);
}

// Half of the block leaves before a barrier the other half waits at.
extern "C" __global__ void bug_exit_before_barrier(float* out) {
  const int t = threadIdx.x;
  if (t >= 16) return;
  __syncthreads();
  kiln::st(out + t, 1.0f);
}

// Lane 31 takes part in a reduction whose mask leaves it out.
extern "C" __global__ void bug_shfl_mask(const float* x, float* out) {
  const int t = threadIdx.x;
  float v = kiln::ld(x + t);
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0x7fffffffu, v, d);
  kiln::st(out + t, v);
}

// The mask names all 32 lanes, but only 16 lanes call the shuffle.
extern "C" __global__ void bug_shfl_missing_lane(const float* x, float* out) {
  const int t = threadIdx.x;
  float v = kiln::ld(x + t);
  if (t < 16) v += __shfl_xor_sync(0xffffffffu, v, 1);
  kiln::st(out + t, v);
}

// Every thread stores one element past its own: the last one lands past the end of `out`.
extern "C" __global__ void bug_oob_store(const float* x, float* out) {
  const int t = threadIdx.x;
  kiln::st(out + t + 1, kiln::ld(x + t));
}
