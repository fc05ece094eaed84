// conv2d for inputs with too few channels for 16-byte chunks of k (the RGB stem: 3 channels, a 7x7 window
// at stride 2): the tensor-core implicit GEMM of kiln/conv2d.cuh without its shared-memory stages.
//
// The stage-based loop reads such an x element by element: a pixel's 7-tap run of 3 channels is 42 bytes,
// neighbouring pixels' runs overlap, and no lane mapping of 2-byte loads reaches whole sectors (kiln profile:
// 35 %); the weights (147 values a filter) fare the same (32 %), and every element then costs a 2-byte
// shared store into the stage. Here a block instead copies, once, everything its tile reads:
//   - the patch: whole input rows (every row its output pixels' windows touch, all W columns, 16-byte
//     cp.async chunks: whole sectors), with zero columns around them for the padding, and
//   - its BN filters, contiguous in KRSC, as one flat run of 16-byte chunks,
// and builds each mma fragment straight from them. A fragment register is two consecutive k of one row.
//   - A: consecutive elements of a patch row (within one tap row r), at any element offset. The patch is
//     kept twice, the second copy shifted by one element, so that an odd offset is an aligned 32-bit word
//     there: one 32-bit shared load per register. A pair that crosses a tap row (k = r·S·C + S·C - 1, then
//     the next row's first element) takes its second element from a second load.
//   - B: the filters are rewritten once from the flat copy into rows of KP elements (KP/2 words, 4 mod 8
//     banks apart: a warp's 8 filters x 4 words hit 32 distinct banks), so every pair is an aligned word.
// Fragments past KDIM are zero (masked, whatever the padding holds).
//
// Applies (the conv2d family decides, codegen/family_conv.cpp's patch_bytes) to G = 1, channels-last x
// (XC = 1, XW = C) whose rows of W·C elements are whole 16-byte chunks, flat KRSC weights, DW = 1, no
// prologue, split or reduction epilogue, and tiles of BM pixels that never straddle two images. Cfg:
// kiln/conv2d.cuh's, with the 128 x 64 tile of 4 warps of 64 x 32 (BM, BN, TM = TN = 8), and DSMEM, the
// dynamic shared memory the family launches with (at least PatchShape::kBytes).
#pragma once

#include "kiln/conv2d.cuh"

namespace kiln {
namespace conv {

template <class Cfg>
struct PatchShape {
  static constexpr int C = Cfg::C, SC = Cfg::S * Cfg::C, KDIM = Cfg::R * SC;
  static constexpr int KSTEPS = (KDIM + 15) / 16;
  // Output rows BM consecutive pixels can touch, and the input rows their windows read.
  static constexpr int OROWS = (Cfg::BM - 1 + Cfg::Q - 1) / Cfg::Q + 1;
  static constexpr int IROWS = (OROWS - 1) * Cfg::SH + (Cfg::R - 1) * Cfg::DH + 1;
  // A patch row: input column w's channels at OFF + w·C; OFF (a whole number of 16-byte chunks) leaves room
  // for the left padding, the row's end for the right one (the last column a window reaches) and one more
  // element (a pair's second half).
  static constexpr int OFF = (Cfg::PL * C + 7) / 8 * 8;
  static constexpr int LAST = (Cfg::Q - 1) * Cfg::SW - Cfg::PL + Cfg::S - 1;  // the last input column read
  static constexpr int END = OFF + ((LAST + 1 > Cfg::W ? LAST + 1 : Cfg::W) * C) + 1;
  // Rows a whole number of chunks long, and an odd number of 16-byte bank groups apart (rows of one warp
  // spread over the banks).
  static constexpr int RL0 = (END + 7) / 8 * 8;
  static constexpr int RL = RL0 / 8 % 2 == 1 ? RL0 : RL0 + 8;
  // Elements of one copy: + a zero chunk (the shift's end), to whole groups of 8 chunks (a quarter-warp's
  // cp.async stores never straddle the patch's end and the filters' start: no bank conflict there).
  static constexpr int PATCH = (IROWS * RL + 8 + 63) / 64 * 64;
  static constexpr int FLAT = (Cfg::BN * KDIM + 8 + 7) / 8 * 8;  // the filters as copied (+ a zero chunk)
  static constexpr int KP = (KSTEPS * 16 + 15) / 16 * 16 + 8;    // a filter row: KP / 2 words = 4 mod 8
  static constexpr int kBytes = (2 * PATCH + FLAT + Cfg::BN * KP) * 2;
  static_assert(Cfg::W * C % 8 == 0 && Cfg::XH % 8 == 0 && Cfg::XN % 8 == 0 && Cfg::XB % 8 == 0 && Cfg::XC == 1 &&
                    Cfg::XW == C,
                "patch rows move in 16-byte chunks");
  static_assert(Cfg::G == 1 && Cfg::DW == 1 && Cfg::WC == 1 && Cfg::WS == C && Cfg::WR == SC && Cfg::WK == KDIM &&
                    Cfg::WB % 8 == 0 && Cfg::BN * KDIM % 8 == 0,
                "one group, flat KRSC filters in 16-byte chunks");
  static_assert((Cfg::P * Cfg::Q) % Cfg::BM == 0, "no tile straddles two images");
  static_assert(Cfg::DSMEM >= kBytes, "the family launches with the patch's shared memory");
};

// Consecutive elements a, a + 1 of an array kept as `even` and `odd` (odd[i] = even[i + 1]), as a word.
__device__ __forceinline__ unsigned pair_at(const unsigned* even, const unsigned* odd, int a) {
  return lds((a & 1 ? odd : even) + (a >> 1));
}
// The same for the second load of a pair that crosses a tap row: a load instruction of its own, taken by
// the lanes whose pair crosses (the emulator's counters group a site's executions lane by lane, so it must
// not share pair_at's site either).
__device__ __forceinline__ unsigned crossing_pair_at(const unsigned* even, const unsigned* odd, int a) {
  return lds((a & 1 ? odd : even) + (a >> 1));
}

// Copies chunks 0 .. A + B - 1 of 16 bytes with cp.async, the first A to `a` from a_src(j), the rest to `b`
// from b_src(j - A) (a null source zero-fills its chunk), and waits for them. One loop, so that every lane
// runs the copy the same number of times but for the last: the emulator's counters join a site's n-th
// executions across the warp. Every thread of the block must call it.
template <class T, class SrcA, class SrcB>
__device__ __forceinline__ void copy_chunks(T* a, int A, const SrcA& a_src, T* b, int B, const SrcB& b_src) {
  for (int j = static_cast<int>(threadIdx.x); j < A + B; j += blockDim.x) {
    T* dst = j < A ? a + j * 8 : b + (j - A) * 8;
    const T* src = j < A ? a_src(j) : b_src(j - A);
    cp_async<16>(dst, src ? src : dst, src ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
}

// odd[i] = the word of elements 2i + 1, 2i + 2 of `even`, for i < words (even holds words + 1 words): each
// word read once, the next one from the neighbouring lane. Every thread of the block must call it.
__device__ __forceinline__ void shift_by_one(const unsigned* even, unsigned* odd, int words) {
  const int lane = static_cast<int>(threadIdx.x) & 31, warps = static_cast<int>(blockDim.x) / 32;
  for (int base = static_cast<int>(threadIdx.x) / 32 * 32; base < words; base += warps * 32) {
    const int i = base + lane;
    const unsigned v = i <= words ? lds(even + i) : 0u;
    unsigned next = __shfl_down_sync(0xffffffffu, v, 1);
    if (lane == 31 && i < words) next = lds(even + i + 1);
    if (i < words) sts(odd + i, v >> 16 | next << 16);
  }
}

template <class Cfg, class T, class Epi>
__device__ __forceinline__ void conv2d_patch(int batch, const T* x, const T* w, const Epi& epi) {
  using Tile = ConvTile<Cfg>;
  using D = Dims<Cfg>;
  using PS = PatchShape<Cfg>;
  using ML = gemm::TensorCoreMainLoop<T, Tile>;
  static_assert(Tile::BM == 128 && Tile::BN == 64 && Tile::TM == 8 && Tile::TN == 8, "the 128 x 64 tile of 4 warps");
  constexpr int PQ = Cfg::P * Cfg::Q;
  const int M = D::pixels(batch);
  const int n0 = static_cast<int>(blockIdx.y) * Tile::BN;
  const int m0 = static_cast<int>(blockIdx.x) * Tile::BM;
  const int img = m0 / PQ, p0 = m0 % PQ / Cfg::Q;
  const int h0 = p0 * Cfg::SH - Cfg::PT;  // the patch's first input row

  KILN_DYNAMIC_SHARED(T, smem);
  T* patch = smem;
  T* patch_odd = smem + PS::PATCH;
  T* flat = smem + 2 * PS::PATCH;
  T* filters = flat + PS::FLAT;
  // The patch: chunk j of row i is input row h0 + i's elements (j·8 - OFF) .. + 7, or zeros. The filters
  // n0 .. n0 + BN - 1, flat (filters past K read as zero).
  const T* xn = x + Cfg::XB + static_cast<long long>(img) * Cfg::XN;
  const T* wn = w + Cfg::WB + static_cast<long long>(n0) * PS::KDIM;
  copy_chunks(
      patch, PS::PATCH / 8,
      [&](int j) -> const T* {
        const int i = j / (PS::RL / 8), e = j % (PS::RL / 8) * 8 - PS::OFF, h = h0 + i;
        if (i >= PS::IROWS || h < 0 || h >= Cfg::H || e < 0 || e >= Cfg::W * PS::C) return nullptr;
        return xn + static_cast<long long>(h) * Cfg::XH + e;
      },
      flat, PS::FLAT / 8,
      [&](int j) -> const T* {
        return n0 * PS::KDIM + j * 8 + 8 <= Cfg::K * PS::KDIM && j * 8 < Tile::BN * PS::KDIM ? wn + j * 8 : nullptr;
      });
  shift_by_one(reinterpret_cast<const unsigned*>(patch), reinterpret_cast<unsigned*>(patch_odd), PS::PATCH / 2 - 1);
  {
    // Filter n's pair (2v, 2v + 1) starts at flat element n·KDIM + 2v: an aligned word, or the halves of two.
    const unsigned* fw = reinterpret_cast<const unsigned*>(flat);
    unsigned* rows = reinterpret_cast<unsigned*>(filters);
    constexpr int kWords = (PS::KDIM + 1) / 2;
    for (int e = static_cast<int>(threadIdx.x); e < Tile::BN * kWords; e += blockDim.x) {
      const int n = e / kWords, v = e % kWords, a = n * PS::KDIM + 2 * v;
      unsigned word = lds(fw + (a >> 1));
      if (a & 1) {  // (the second load on a line of its own: a site of its own for the counters)
        word = word >> 16 | lds(fw + (a >> 1) + 1) << 16;
      }
      sts(rows + n * (PS::KP / 2) + v, word);
    }
  }
  __syncthreads();

  ML ml;
  ml.init();
  const int l = ML::lane(), g = l / 4, tig = l % 4;
  // Each of the thread's 8 fragment rows (pixels) as an offset into the patch; rows past M read pixel 0's
  // (their outputs are dropped).
  int pix[ML::MI][2];
#pragma unroll
  for (int mi = 0; mi < ML::MI; ++mi)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int m = m0 + ML::warp_row() + mi * 16 + hh * 8 + g;
      const int mm = m < M ? m : m0;
      const int p = mm % PQ / Cfg::Q, q = mm % Cfg::Q;
      pix[mi][hh] = (p - p0) * Cfg::SH * PS::RL + PS::OFF + (q * Cfg::SW - Cfg::PL) * PS::C;
    }
  const unsigned* pe = reinterpret_cast<const unsigned*>(patch);
  const unsigned* po = reinterpret_cast<const unsigned*>(patch_odd);
  const unsigned* fr = reinterpret_cast<const unsigned*>(filters);
#pragma unroll
  for (int ks = 0; ks < PS::KSTEPS; ++ks) {
    // This thread's two k pairs (k, k + 1): where they sit in a patch row set, whether the pair crosses
    // a tap row, and which halves exist.
    int at[2], at_hi[2];
    bool cross[2];
    unsigned keep[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int k = ks * 16 + j * 8 + 2 * tig, r = k / PS::SC, r1 = (k + 1) / PS::SC;
      at[j] = r * Cfg::DH * PS::RL + k - r * PS::SC;
      at_hi[j] = r1 * Cfg::DH * PS::RL + k + 1 - r1 * PS::SC;
      cross[j] = r1 != r;
      keep[j] = k + 1 < PS::KDIM ? 0xffffffffu : k < PS::KDIM ? 0xffffu : 0u;
    }
    unsigned a[ML::MI][4], b[ML::NI][2];
#pragma unroll
    for (int mi = 0; mi < ML::MI; ++mi)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          unsigned v = pair_at(pe, po, pix[mi][hh] + at[j]);
          if (cross[j]) v = (v & 0xffffu) | (crossing_pair_at(pe, po, pix[mi][hh] + at_hi[j] - 1) & 0xffff0000u);
          a[mi][2 * j + hh] = v & keep[j];  // a0: (g, k), a1: (g + 8, k), a2: (g, k + 8), a3: (g + 8, k + 8)
        }
#pragma unroll
    for (int ni = 0; ni < ML::NI; ++ni)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        b[ni][j] = lds(fr + (ML::warp_col() + ni * 8 + g) * (PS::KP / 2) + ks * 8 + j * 4 + tig) & keep[j];
#pragma unroll
    for (int mi = 0; mi < ML::MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < ML::NI; ++ni) {
        const float c[4] = {ml.acc[2 * mi][2 * ni], ml.acc[2 * mi][2 * ni + 1], ml.acc[2 * mi + 1][2 * ni],
                            ml.acc[2 * mi + 1][2 * ni + 1]};
        float d[4];
        gemm::mma_m16n8k16(static_cast<T*>(nullptr), d, a[mi], b[ni], c);
        ml.acc[2 * mi][2 * ni] = d[0], ml.acc[2 * mi][2 * ni + 1] = d[1];
        ml.acc[2 * mi + 1][2 * ni] = d[2], ml.acc[2 * mi + 1][2 * ni + 1] = d[3];
      }
  }

  const auto col = [&](int c) { return epi.channel(n0 + c < D::KG ? n0 + c : D::KG - 1); };
  const auto out = [&](int r, int c, float v, const auto& ch) {
    const int m = m0 + r, k = n0 + c;
    if (m >= M || k >= D::KG) return;
    const int q = m % Cfg::Q, t = m / Cfg::Q;
    const int p = t % Cfg::P, n = t / Cfg::P;
    epi(v, Idx<4>{{n, k, p, q}}, ch);
  };
  gemm::staged_epilogue<T, Tile, Cfg::ALONG_M>(ml, smem, col, out);
}

}  // namespace conv
}  // namespace kiln
