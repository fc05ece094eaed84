// cp.async of 4, 8 and 16 bytes, with partial source sizes (zero-fill), completed by wait_group in order.
// One warp; thread t copies src_bytes[t % 4] of 16 bytes starting at x + 4t into shared memory.
#include "kiln/device.cuh"

extern "C" __global__ void cp_async_sizes(const float* x, float* out) {
  KILN_SHARED(float, s, [3][32 * 4]);
  const int t = threadIdx.x;
  const int src_bytes = (t % 4) * 4;                       // 0, 4, 8, 12 bytes of the 16
  kiln::cp_async<16>(&s[0][4 * t], x + 4 * t, src_bytes);  // group 0
  kiln::cp_async_commit();
  kiln::cp_async<8>(&s[1][4 * t], x + 4 * t, t % 2 ? 8 : 4);  // group 1
  kiln::cp_async<8>(&s[1][4 * t + 2], x + 4 * t + 2, 8);
  kiln::cp_async_commit();
  kiln::cp_async<4>(&s[2][4 * t], x + 4 * t, 4);  // group 2
  kiln::cp_async<4>(&s[2][4 * t + 1], x + 4 * t + 1, 0);
  kiln::cp_async<4>(&s[2][4 * t + 2], x + 4 * t + 2, 4);
  kiln::cp_async<4>(&s[2][4 * t + 3], x + 4 * t + 3, 4);
  kiln::cp_async_commit();
  kiln::cp_async_wait<2>();  // group 0 complete; groups 1 and 2 may still be pending
  for (int i = 0; i < 4; ++i) kiln::st(out + 4 * t + i, s[0][4 * t + i]);
  kiln::cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) kiln::st(out + 128 + 4 * t + i, s[1][4 * t + i]);
  for (int i = 0; i < 4; ++i) kiln::st(out + 256 + 4 * t + i, s[2][4 * t + i]);
}
