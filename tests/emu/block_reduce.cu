// Block reduction through shared memory and __syncthreads: out[b] = sum of x[b*256 .. b*256+255].
#include "kiln/device.cuh"

extern "C" __global__ void __launch_bounds__(256) block_reduce(const float* x, float* out, int n) {
  KILN_SHARED(float, buf, [256]);
  const int t = threadIdx.x;
  const int i = blockIdx.x * blockDim.x + t;
  buf[t] = i < n ? kiln::ld(x + i) : 0.0f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) kiln::st(out + blockIdx.x, buf[0]);
}
