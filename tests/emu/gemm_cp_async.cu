// A tiled f32 GEMM, C[M,N] = A[M,K] * B[K,N] (row-major), 32x32 block tiles, BK = 16, 256 threads with 2x2
// outputs each, and a 3-stage cp.async pipeline; tiles past the matrix edges are zero-filled by cp.async.
#include "kiln/device.cuh"

namespace {
constexpr int kBM = 32, kBN = 32, kBK = 16, kStages = 3, kThreads = 256;

__device__ __forceinline__ void load_stage(float (*as)[kBK], float (*bs)[kBN], const float* A, const float* B, int M,
                                           int N, int K, int row0, int col0, int kt) {
  for (int e = threadIdx.x; e < kBM * kBK; e += kThreads) {
    const int r = e / kBK, c = e % kBK, gr = row0 + r, gc = kt * kBK + c;
    const bool ok = gr < M && gc < K;
    kiln::cp_async<4>(&as[r][c], ok ? A + static_cast<long>(gr) * K + gc : A, ok ? 4 : 0);
  }
  for (int e = threadIdx.x; e < kBK * kBN; e += kThreads) {
    const int r = e / kBN, c = e % kBN, gr = kt * kBK + r, gc = col0 + c;
    const bool ok = gr < K && gc < N;
    kiln::cp_async<4>(&bs[r][c], ok ? B + static_cast<long>(gr) * N + gc : B, ok ? 4 : 0);
  }
}
}  // namespace

extern "C" __global__ void __launch_bounds__(256)
    gemm_cp_async(const float* A, const float* B, float* C, int M, int N, int K) {
  KILN_SHARED(float, As, [kStages][kBM][kBK]);
  KILN_SHARED(float, Bs, [kStages][kBK][kBN]);
  const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
  const int ktiles = (K + kBK - 1) / kBK;
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_stage(As[s], Bs[s], A, B, M, N, K, row0, col0, s);
    kiln::cp_async_commit();
  }
  const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (int kt = 0; kt < ktiles; ++kt) {
#ifndef KILN_BUG_NO_CP_WAIT
    kiln::cp_async_wait<kStages - 2>();  // tile kt has landed (for this thread's copies) ...
#endif
    __syncthreads();  // ... for every thread's, and nobody still reads the stage refilled below
    const int next = kt + kStages - 1;
    if (next < ktiles) load_stage(As[next % kStages], Bs[next % kStages], A, B, M, N, K, row0, col0, next);
    kiln::cp_async_commit();
    const int s = kt % kStages;
    for (int k = 0; k < kBK; ++k) {
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) acc[i][j] += As[s][tr * 2 + i][k] * Bs[s][k][tc * 2 + j];
      }
    }
  }
  kiln::cp_async_wait_all();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      const int r = row0 + tr * 2 + i, c = col0 + tc * 2 + j;
      if (r < M && c < N) kiln::st(C + static_cast<long>(r) * N + c, acc[i][j]);
    }
  }
}
