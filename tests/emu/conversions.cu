// fp16 / bf16 conversions of the prelude: bits of the rounded value, the value read back, packed pairs.
#include "kiln/device.cuh"

extern "C" __global__ void conversions(const float* x, unsigned short* h, unsigned short* b, float* back,
                                       unsigned* packed, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = kiln::ld(x + i);
  const __half hv = __float2half_rn(v);
  const __nv_bfloat16 bv = __float2bfloat16_rn(v);
  kiln::st(h + i, __half_as_ushort(hv));
  kiln::st(b + i, __bfloat16_as_ushort(bv));
  kiln::st(back + 2 * i, __half2float(hv));
  kiln::st(back + 2 * i + 1, __bfloat162float(bv));
  kiln::st(packed + 2 * i, kiln::pack_half2(v, -v));
  kiln::st(packed + 2 * i + 1, kiln::pack_bf162(-v, v));
}
