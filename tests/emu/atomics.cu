// Atomics from many blocks: a histogram through per-block shared bins merged into global bins, a float
// sum, a maximum and a counter.
#include "kiln/device.cuh"

extern "C" __global__ void histogram(const int* keys, int n, int* bins, float* sum, int* max_key, unsigned* count) {
  KILN_SHARED(int, local, [16]);
  const int t = threadIdx.x;
  if (t < 16) local[t] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) {
    const int k = kiln::ld(keys + i);
    atomicAdd(&local[k % 16], 1);
    atomicAdd(sum, static_cast<float>(k) * 0.5f);
    atomicMax(max_key, k);
    atomicAdd(count, 1u);
  }
  __syncthreads();
  if (t < 16) atomicAdd(&bins[t], local[t]);
}
