// Warp operations, one kernel per shuffle kind; blocks of 64 threads (two warps), x has one value per thread.
#include "kiln/device.cuh"

// out[warp] = sum of the warp's 32 values (tree with __shfl_down_sync; lane 0 holds the sum).
extern "C" __global__ void warp_sum_down(const float* x, float* out) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  float v = kiln::ld(x + g);
  for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x % 32 == 0) kiln::st(out + g / 32, v);
}

// out[g] = sum of the warp's values, in every lane (butterfly with __shfl_xor_sync).
extern "C" __global__ void warp_sum_xor(const float* x, float* out) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  float v = kiln::ld(x + g);
  for (int m = 1; m < 32; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  kiln::st(out + g, v);
}

// out[g] = inclusive prefix sum within the warp (Hillis-Steele with __shfl_up_sync).
extern "C" __global__ void warp_scan_up(const float* x, float* out) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % 32;
  float v = kiln::ld(x + g);
  for (int d = 1; d < 32; d <<= 1) {
    float u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += u;
  }
  kiln::st(out + g, v);
}

// out[g] = x of lane `src` (taken modulo width) of the caller's group of `width` lanes (__shfl_sync).
extern "C" __global__ void warp_idx(const float* x, float* out, int src, int width) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  kiln::st(out + g, __shfl_sync(0xffffffffu, kiln::ld(x + g), src + threadIdx.x % 3, width));
}

// Sub-warp widths: out[3g..3g+2] = shfl_up(delta), shfl_down(delta), shfl_xor(lane_mask) with `width`.
extern "C" __global__ void warp_width(const float* x, float* out, int delta, int lane_mask, int width) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = kiln::ld(x + g);
  kiln::st(out + 3 * g, __shfl_up_sync(0xffffffffu, v, delta, width));
  kiln::st(out + 3 * g + 1, __shfl_down_sync(0xffffffffu, v, delta, width));
  kiln::st(out + 3 * g + 2, __shfl_xor_sync(0xffffffffu, v, lane_mask, width));
}

// out[g] = __ballot_sync of (x > 0) over the warp, and any/all of it; 64-bit shuffles of a double.
extern "C" __global__ void warp_ballot(const float* x, unsigned* out, double* dout) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = kiln::ld(x + g);
  kiln::st(out + 3 * g, __ballot_sync(0xffffffffu, v > 0.0f));
  kiln::st(out + 3 * g + 1, static_cast<unsigned>(__any_sync(0xffffffffu, v > 0.9f)));
  kiln::st(out + 3 * g + 2, static_cast<unsigned>(__all_sync(0xffffffffu, v > -2.0f)));
  double d = static_cast<double>(v) * 1e10;
  kiln::st(dout + g, __shfl_xor_sync(0xffffffffu, d, 1));
}

// Two half-warp groups with their own masks, each reducing its 16 values; then __syncwarp.
extern "C" __global__ void half_warp_groups(const float* x, float* out) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % 32;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  float v = kiln::ld(x + g);
  for (int d = 8; d > 0; d >>= 1) v += __shfl_xor_sync(mask, v, d);
  __syncwarp();
  kiln::st(out + g, v);
}
