// Block-wide inclusive scan of 256 values per block: warp scans, warp totals through shared memory.
#include "kiln/device.cuh"

__device__ __forceinline__ float warp_inclusive_scan(float v, int lane) {
  for (int d = 1; d < 32; d <<= 1) {
    float u = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += u;
  }
  return v;
}

extern "C" __global__ void __launch_bounds__(256) block_scan(const float* x, float* out, int n) {
  KILN_SHARED(float, totals, [8]);
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int i = blockIdx.x * 256 + t;
  float v = warp_inclusive_scan(i < n ? kiln::ld(x + i) : 0.0f, lane);
  if (lane == 31) totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < 8 ? totals[lane] : 0.0f;
    w = warp_inclusive_scan(w, lane);
    if (lane < 8) totals[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += totals[warp - 1];
  if (i < n) kiln::st(out + i, v);
}
