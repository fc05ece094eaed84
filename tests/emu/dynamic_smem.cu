// Dynamic shared memory (sized at launch) and 16-byte vector loads and stores.
#include "kiln/device.cuh"

// Each block reverses its chunk of blockDim.x values through dynamic shared memory.
extern "C" __global__ void reverse_chunks(const float* x, float* out) {
  KILN_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  s[t] = kiln::ld(x + base + t);
  __syncthreads();
  kiln::st(out + base + t, s[n - 1 - t]);
}

// out[i] = 2 * x[i] + 1 four floats at a time; dynamic shared memory holds one float4 per thread.
extern "C" __global__ void scale_vec4(const float4* x, float4* out) {
  KILN_DYNAMIC_SHARED(float4, s);
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = kiln::ld(x + i);
  __syncthreads();
  const float4 v = s[blockDim.x - 1 - t];
  kiln::st(out + blockIdx.x * blockDim.x + (blockDim.x - 1 - t),
           make_float4(2.0f * v.x + 1.0f, 2.0f * v.y + 1.0f, 2.0f * v.z + 1.0f, 2.0f * v.w + 1.0f));
}
