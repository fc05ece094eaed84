// One warp: a 16x16 (A, row-major) times 16x8 (B, K x N row-major) product through ldmatrix and
// mma.m16n8k16, plus C; inputs are fp16 or bf16 bit patterns, C and D are float, all row-major.
#include "kiln/device.cuh"

template <bool kBf16>
__device__ void mma_tile(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
  KILN_SHARED(unsigned short, As, [16][16]);
  KILN_SHARED(unsigned short, Bs, [16][8]);
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) As[i / 16][i % 16] = kiln::ld(a + i);
  for (int i = lane; i < 128; i += 32) Bs[i / 8][i % 8] = kiln::ld(b + i);
  __syncwarp();
  unsigned ra[4], rb[2];
  kiln::ldmatrix<4>(ra, &As[lane % 16][8 * (lane / 16)]);
  kiln::ldmatrix<2, true>(rb, &Bs[lane % 16][0]);
  const int g = lane / 4, t = lane % 4;
  float rc[4], rd[4];
  for (int i = 0; i < 4; ++i) rc[i] = kiln::ld(c + (g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1));
  if (kBf16) {
    kiln::mma_m16n8k16_bf16(rd, ra, rb, rc);
  } else {
    kiln::mma_m16n8k16_f16(rd, ra, rb, rc);
  }
  for (int i = 0; i < 4; ++i) kiln::st(d + (g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1), rd[i]);
}

extern "C" __global__ void mma_tile_f16(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
  mma_tile<false>(a, b, c, d);
}
extern "C" __global__ void mma_tile_bf16(const unsigned short* a, const unsigned short* b, const float* c, float* d) {
  mma_tile<true>(a, b, c, d);
}

// The raw registers of ldmatrix .x1/.x2/.x4 with and without .trans, on four 8x8 matrices whose element
// (j, r, col) is j*64 + r*8 + col. Lane L supplies row L%8 of matrix L/8.
// out[(variant * 32 + lane) * 4 + j], variants: x1, x1.trans, x2, x2.trans, x4, x4.trans.
extern "C" __global__ void ldmatrix_probe(unsigned* out) {
  KILN_SHARED(unsigned short, m, [4][8][8]);
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) m[i / 64][i / 8 % 8][i % 8] = static_cast<unsigned short>(i);
  __syncwarp();
  const void* row = &m[lane / 8][lane % 8][0];
  unsigned r1[1], r2[2], r4[4];
  unsigned* o = out + lane * 4;
  kiln::ldmatrix<1>(r1, row);
  kiln::st(o, r1[0]);
  kiln::ldmatrix<1, true>(r1, row);
  kiln::st(o + 128, r1[0]);
  kiln::ldmatrix<2>(r2, row);
  for (int j = 0; j < 2; ++j) kiln::st(o + 256 + j, r2[j]);
  kiln::ldmatrix<2, true>(r2, row);
  for (int j = 0; j < 2; ++j) kiln::st(o + 384 + j, r2[j]);
  kiln::ldmatrix<4>(r4, row);
  for (int j = 0; j < 4; ++j) kiln::st(o + 512 + j, r4[j]);
  kiln::ldmatrix<4, true>(r4, row);
  for (int j = 0; j < 4; ++j) kiln::st(o + 640 + j, r4[j]);
}
