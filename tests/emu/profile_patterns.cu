// Access patterns with known counter values, for the emulator's profile (tests/test_emu_profile.cpp).
#include "kiln/device.cuh"
#include "kiln/gemm_tile.cuh"

// Coalesced: lane i reads and writes word i of a 128-byte run (4 sectors per request).
extern "C" __global__ void copy_f32(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) kiln::st(out + i, kiln::ld(in + i));  // MARK copy
}

// Stride 2: lane i reads word 2i, so a request spans 256 bytes (8 sectors) and uses half of each.
extern "C" __global__ void stride2_f32(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) kiln::st(out + i, kiln::ld(in + 2 * i));  // MARK stride2
}

// 16-byte vectors: 512 bytes a request, 16 sectors.
extern "C" __global__ void copy_f32x4(const float4* in, float4* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) kiln::st(out + i, kiln::ld(in + i));  // MARK copy4
}

// The input read twice: twice the L2 sectors, the same DRAM sectors.
extern "C" __global__ void read_twice(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) kiln::st(out + i, kiln::ld(in + i) + kiln::ld(in + (n - 1 - i)));
}

// Every lane reads word 0: one sector, 4 distinct bytes of it used (32 lanes x 4 bytes requested).
extern "C" __global__ void broadcast_f32(const float* in, float* out) {
  kiln::st(out + threadIdx.x, kiln::ld(in) * static_cast<float>(threadIdx.x));  // MARK bcast
}

// Odd lanes only: requests of 16 lanes, measured when the block ends.
extern "C" __global__ void odd_lanes(const float* in, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i % 2 == 1) kiln::st(out + i / 2, kiln::ld(in + i));  // MARK odd
}

// Shared stores of 4-byte words at lane * stride, then a broadcast read of word 0 and a 16-byte read.
extern "C" __global__ void smem_stride(float* out, int stride) {
  KILN_SHARED(float, s, [32 * 33]);
  const int l = threadIdx.x;
  kiln::sts(&s[l * stride], static_cast<float>(l));  // MARK sts
  __syncwarp();
  const float b = kiln::lds(&s[0]);  // MARK broadcast
  const float4 v = kiln::lds(reinterpret_cast<const float4*>(&s[0]) + l % 8);  // MARK lds16
  kiln::st(out + l, b + v.x);
}

// ldmatrix.x4 as the tensor-core main loop addresses A (lane l: row l % 16, k (l / 16) * 8) on a tile of
// 16-bit rows of `kRowElems` elements.
template <int kRowElems>
__device__ void ldmatrix_rows(unsigned* out) {
  KILN_SHARED(unsigned short, t, [16][kRowElems]);
  const int l = threadIdx.x;
  for (int i = l; i < 16 * kRowElems; i += 32) t[i / kRowElems][i % kRowElems] = static_cast<unsigned short>(i);
  __syncwarp();
  unsigned r[4];
  kiln::ldmatrix<4>(r, &t[l % 16][l / 16 * 8]);  // MARK ldmatrix
  for (int j = 0; j < 4; ++j) kiln::st(out + 4 * l + j, r[j]);
}
// Unpadded 64-byte rows (32 bf16): rows 0, 2, 4, 6 of each 8x8 matrix share banks, 4 wavefronts a matrix.
extern "C" __global__ void ldmatrix_unpadded(unsigned* out) { ldmatrix_rows<32>(out); }
// The main loop's Stage (bf16 rows of BK = 32, swizzled), both operands' addressing as the tensor-core
// loop has it.
extern "C" __global__ void ldmatrix_stage(unsigned* out) {
  using Tile = kiln::gemm::TileShape<64, 64, 32, 4, 4, 3>;
  using S = kiln::gemm::Stage<__nv_bfloat16, Tile>;
  KILN_SHARED(S, st, );
  const int l = threadIdx.x;
  unsigned short* a = reinterpret_cast<unsigned short*>(&st.a[0]);
  for (int i = l; i < int(sizeof(S) / 2); i += 32) a[i] = static_cast<unsigned short>(i);
  __syncwarp();
  unsigned r[4], q[4];
  for (int kk = 0; kk < 32; kk += 16) {
    kiln::ldmatrix<4>(r, &st.a[S::offset(16 + l % 16, kk + l / 16 * 8)]);            // MARK stage A
    kiln::ldmatrix<4>(q, &st.b[S::offset(16 + l / 16 * 8 + l % 8, kk + l / 8 % 2 * 8)]);  // MARK stage B
    for (int j = 0; j < 4; ++j) kiln::st(out + 4 * l + j, r[j] ^ q[j]);
  }
}

// cp.async of 16 bytes a lane into 64-byte rows: lanes 8q..8q+7 cover two whole rows (conflict-free);
// then into rows padded to 80 bytes: a quarter-warp's two rows overlap four banks (2 wavefronts).
extern "C" __global__ void cp_async_rows(const float4* in, float* out) {
  KILN_SHARED(float4, dense, [8][4]);
  KILN_SHARED(float4, padded, [8][5]);
  const int l = threadIdx.x;
  kiln::cp_async<16>(&dense[l / 4][l % 4], in + l);   // MARK cp dense
  kiln::cp_async<16>(&padded[l / 4][l % 4], in + l);  // MARK cp padded
  kiln::cp_async_wait_all();
  __syncwarp();
  kiln::st(out + l, dense[l / 4][l % 4].x + padded[l / 4][l % 4].y);
}
