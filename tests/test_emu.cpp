// The emu backend on hand-written kernels (tests/emu/*.cu), each run under the forward, reverse and random
// fiber schedules in checked mode, against values computed here in double precision.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "emu/emu_test_util.h"
#include "kiln/emu.h"
#include "kiln/graph.h"
#include "kiln/reference.h"
#include "kiln/types.h"

namespace kiln::emu::test {
namespace {

using ::testing::HasSubstr;

#define KILN_COMPILE(var, file, ...)                       \
  auto var##_r = compile_file(file, __VA_ARGS__);          \
  ASSERT_TRUE(var##_r.ok()) << var##_r.status().message(); \
  const Module& var = **var##_r

TEST(EmuBlock, ReductionWithSharedMemory) {
  KILN_COMPILE(m, "block_reduce.cu", {"block_reduce"});
  const int n = 1000;  // 4 blocks, the last one partial
  auto x = random_floats(n, 1);
  for (Schedule s : kSchedules) {
    std::vector<float> out(4, 0.0f);
    KILN_ASSERT_OK(launch(m, "block_reduce", {4}, {256}, 0, {buf(x, "x"), buf(out, "out"), Arg::value(n)}, checked(s)));
    for (int b = 0; b < 4; ++b) {
      double want = 0;
      for (int i = b * 256; i < std::min(n, b * 256 + 256); ++i) want += x[i];
      EXPECT_NEAR(out[b], want, 1e-4) << "block " << b << ", schedule " << schedule_name(s);  // f32 sum of 256
    }
  }
}

TEST(EmuWarp, ShuffleDownReduction) {
  KILN_COMPILE(m, "warp_shuffles.cu", {"warp_sum_down"});
  auto x = random_floats(256, 2);
  for (Schedule s : kSchedules) {
    std::vector<float> out(8, 0.0f);
    KILN_ASSERT_OK(launch(m, "warp_sum_down", {4}, {64}, 0, {buf(x, "x"), buf(out, "out")}, checked(s)));
    for (int w = 0; w < 8; ++w) {
      double want = 0;
      for (int i = 0; i < 32; ++i) want += x[w * 32 + i];
      EXPECT_NEAR(out[w], want, 1e-5) << "warp " << w;
    }
  }
}

TEST(EmuWarp, ShuffleXorReductionInEveryLane) {
  KILN_COMPILE(m, "warp_shuffles.cu", {"warp_sum_xor"});
  auto x = random_floats(128, 3);
  for (Schedule s : kSchedules) {
    std::vector<float> out(128, 0.0f);
    KILN_ASSERT_OK(launch(m, "warp_sum_xor", {2}, {64}, 0, {buf(x, "x"), buf(out, "out")}, checked(s)));
    for (int i = 0; i < 128; ++i) {
      double want = 0;
      for (int j = 0; j < 32; ++j) want += x[i / 32 * 32 + j];
      EXPECT_NEAR(out[i], want, 1e-5) << "thread " << i;
    }
  }
}

TEST(EmuWarp, ShuffleUpScan) {
  KILN_COMPILE(m, "warp_shuffles.cu", {"warp_scan_up"});
  auto x = random_floats(128, 4);
  for (Schedule s : kSchedules) {
    std::vector<float> out(128, 0.0f);
    KILN_ASSERT_OK(launch(m, "warp_scan_up", {2}, {64}, 0, {buf(x, "x"), buf(out, "out")}, checked(s)));
    for (int i = 0; i < 128; ++i) {
      double want = 0;
      for (int j = i / 32 * 32; j <= i; ++j) want += x[j];
      EXPECT_NEAR(out[i], want, 1e-5) << "thread " << i;
    }
  }
}

TEST(EmuWarp, ShuffleIdxTakesTheSourceLaneModuloWidth) {
  KILN_COMPILE(m, "warp_shuffles.cu", {"warp_idx"});
  auto x = random_floats(64, 5);
  for (int width : {32, 16, 8, 1}) {
    for (int src : {0, 5, 37, -3}) {
      std::vector<float> out(64, 0.0f);
      KILN_ASSERT_OK(launch(m, "warp_idx", {1}, {64}, 0,
                            {buf(x, "x"), buf(out, "out"), Arg::value(src), Arg::value(width)},
                            checked(Schedule::random)));
      for (int i = 0; i < 64; ++i) {
        const int lane = i % 32, s = src + i % 3;
        const int from = lane / width * width + ((s % width) + width) % width;  // documented: srcLane % width
        EXPECT_EQ(out[i], x[i / 32 * 32 + from]) << "width " << width << " src " << s << " thread " << i;
      }
    }
  }
}

// up/down keep the caller's value when the source lies outside its width group; xor may read an earlier
// group but returns the caller's own value for a later one (Programming Guide, PTX shfl.bfly).
TEST(EmuWarp, SubWarpWidthRules) {
  KILN_COMPILE(m, "warp_shuffles.cu", {"warp_width"});
  auto x = random_floats(64, 6);
  struct Case {
    int delta, lane_mask, width;
  };
  for (Case c : {Case{1, 1, 32}, Case{3, 4, 8}, Case{5, 8, 8}, Case{2, 16, 16}, Case{7, 31, 8}, Case{1, 2, 4}}) {
    for (Schedule s : kSchedules) {
      std::vector<float> out(192, 0.0f);
      KILN_ASSERT_OK(
          launch(m, "warp_width", {1}, {64}, 0,
                 {buf(x, "x"), buf(out, "out"), Arg::value(c.delta), Arg::value(c.lane_mask), Arg::value(c.width)},
                 checked(s)));
      for (int i = 0; i < 64; ++i) {
        const int lane = i % 32, base = i - lane, in_group = lane % c.width, group = lane - in_group;
        const int up = in_group >= c.delta ? lane - c.delta : lane;
        const int down = in_group + c.delta < c.width ? lane + c.delta : lane;
        const int j = lane ^ c.lane_mask;
        const int xr = j <= group + c.width - 1 ? j : lane;
        EXPECT_EQ(out[3 * i], x[base + up]) << "up, width " << c.width << " thread " << i;
        EXPECT_EQ(out[3 * i + 1], x[base + down]) << "down, width " << c.width << " thread " << i;
        EXPECT_EQ(out[3 * i + 2], x[base + xr]) << "xor " << c.lane_mask << ", width " << c.width << " thread " << i;
      }
    }
  }
}

TEST(EmuWarp, BallotAnyAllAndEightByteShuffles) {
  KILN_COMPILE(m, "warp_shuffles.cu", {"warp_ballot"});
  auto x = random_floats(64, 7);
  for (Schedule s : kSchedules) {
    std::vector<unsigned> out(192, 7u);
    std::vector<double> dout(64, 0.0);
    KILN_ASSERT_OK(
        launch(m, "warp_ballot", {1}, {64}, 0, {buf(x, "x"), buf(out, "out"), buf(dout, "dout")}, checked(s)));
    for (int i = 0; i < 64; ++i) {
      unsigned ballot = 0;
      bool any = false;
      for (int l = 0; l < 32; ++l) {
        ballot |= (x[i / 32 * 32 + l] > 0.0f ? 1u : 0u) << l;
        any = any || x[i / 32 * 32 + l] > 0.9f;
      }
      EXPECT_EQ(out[3 * i], ballot) << i;
      EXPECT_EQ(out[3 * i + 1], any ? 1u : 0u) << i;
      EXPECT_EQ(out[3 * i + 2], 1u) << i;
      EXPECT_EQ(dout[i], static_cast<double>(x[i ^ 1]) * 1e10) << i;
    }
  }
}

TEST(EmuWarp, HalfWarpGroupsWithTheirOwnMasks) {
  KILN_COMPILE(m, "warp_shuffles.cu", {"half_warp_groups"});
  auto x = random_floats(64, 8);
  for (Schedule s : kSchedules) {
    std::vector<float> out(64, 0.0f);
    KILN_ASSERT_OK(launch(m, "half_warp_groups", {1}, {64}, 0, {buf(x, "x"), buf(out, "out")}, checked(s)));
    for (int i = 0; i < 64; ++i) {
      double want = 0;
      for (int j = i / 16 * 16; j < i / 16 * 16 + 16; ++j) want += x[j];
      EXPECT_NEAR(out[i], want, 1e-5) << i;
    }
  }
}

TEST(EmuBlock, InclusiveScan) {
  KILN_COMPILE(m, "block_scan.cu", {"block_scan"});
  const int n = 700;  // 3 blocks, the last one partial
  auto x = random_floats(n, 9);
  for (Schedule s : kSchedules) {
    std::vector<float> out(n, 0.0f);
    KILN_ASSERT_OK(launch(m, "block_scan", {3}, {256}, 0, {buf(x, "x"), buf(out, "out"), Arg::value(n)}, checked(s)));
    for (int i = 0; i < n; ++i) {
      double want = 0;
      for (int j = i / 256 * 256; j <= i; ++j) want += x[j];
      EXPECT_NEAR(out[i], want, 1e-4) << i;
    }
  }
}

TEST(EmuAtomics, ManyBlocksOnGlobalAndSharedMemory) {
  KILN_COMPILE(m, "atomics.cu", {"histogram"});
  const int n = 10007;
  std::mt19937 rng(10);
  std::vector<int> keys(n);
  for (auto& k : keys) k = static_cast<int>(rng() % 1000) + 1;
  std::vector<int> want_bins(16, 0);
  double want_sum = 0;
  for (int k : keys) want_bins[k % 16]++, want_sum += k * 0.5;
  for (Schedule s : kSchedules) {
    for (int threads : {1, 2}) {
      std::vector<int> bins(16, 0), max_key(1, 0);
      std::vector<float> sum(1, 0.0f);
      std::vector<unsigned> count(1, 0);
      LaunchOptions o = checked(s);
      o.threads = threads;
      KILN_ASSERT_OK(launch(m, "histogram", {37}, {128}, 0,
                            {buf(keys, "keys"), Arg::value(n), buf(bins, "bins"), buf(sum, "sum"),
                             buf(max_key, "max_key"), buf(count, "count")},
                            o));
      EXPECT_EQ(bins, want_bins);
      EXPECT_EQ(max_key[0], *std::max_element(keys.begin(), keys.end()));
      EXPECT_EQ(count[0], static_cast<unsigned>(n));
      // Every partial sum is a multiple of 0.5 below 2^22: exact in f32 whatever the order of the adds.
      EXPECT_EQ(sum[0], want_sum);
    }
  }
}

TEST(EmuSharedMemory, DynamicSharedMemoryAndVectorAccesses) {
  KILN_COMPILE(m, "dynamic_smem.cu", {"reverse_chunks", "scale_vec4"});
  auto x = random_floats(96 * 3, 11);
  for (Schedule s : kSchedules) {
    std::vector<float> out(x.size(), 0.0f);
    KILN_ASSERT_OK(
        launch(m, "reverse_chunks", {3}, {96}, 96 * sizeof(float), {buf(x, "x"), buf(out, "out")}, checked(s)));
    for (int i = 0; i < 288; ++i) EXPECT_EQ(out[i], x[i / 96 * 96 + 95 - i % 96]) << i;
    std::vector<float> out4(x.size(), 0.0f);
    KILN_ASSERT_OK(launch(m, "scale_vec4", {3}, {24}, 24 * 16, {buf(x, "x"), buf(out4, "out")}, checked(s)));
    for (int i = 0; i < 288; ++i) EXPECT_EQ(out4[i], 2.0f * x[i] + 1.0f) << i;
  }
}

TEST(EmuCpAsync, SizesZeroFillAndGroupOrder) {
  KILN_COMPILE(m, "cp_async_sizes.cu", {"cp_async_sizes"});
  auto x = random_floats(128, 12);
  for (Schedule s : kSchedules) {
    std::vector<float> out(384, 0.0f);
    LaunchReport report;
    KILN_ASSERT_OK(launch(m, "cp_async_sizes", {1}, {32}, 0, {buf(x, "x"), buf(out, "out")}, checked(s), &report));
    EXPECT_TRUE(report.warnings.empty());
    for (int t = 0; t < 32; ++t) {
      for (int i = 0; i < 4; ++i) {
        const float v = x[4 * t + i];
        EXPECT_EQ(out[4 * t + i], i < t % 4 ? v : 0.0f) << "16-byte copy, thread " << t;
        EXPECT_EQ(out[128 + 4 * t + i], (i == 1 && t % 2 == 0) ? 0.0f : v) << "8-byte copies, thread " << t;
        EXPECT_EQ(out[256 + 4 * t + i], i == 1 ? 0.0f : v) << "4-byte copies, thread " << t;
      }
    }
  }
}

// The prelude's host-side fp16/bf16 rounding against kiln's own (include/kiln/types.h), on random values,
// halfway cases, subnormals, overflow and specials.
TEST(EmuConversions, HalfAndBfloat16MatchKilnsRounding) {
  KILN_COMPILE(m, "conversions.cu", {"conversions"});
  std::vector<float> x = random_floats(200, 20);
  for (auto& v : x) v *= 1000.0f;
  for (float v : {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f, 1e6f, 6.0e-8f, 3.0e-8f,
                  2.98023224e-8f, 1.0e-5f, -1.0e-6f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.4e38f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 1e-40f}) {
    x.push_back(v);
  }
  const int n = static_cast<int>(x.size());
  std::vector<uint16_t> h(n), b(n);
  std::vector<float> back(2 * n);
  std::vector<unsigned> packed(2 * n);
  KILN_ASSERT_OK(
      launch(m, "conversions", {static_cast<uint32_t>((n + 63) / 64)}, {64}, 0,
             {buf(x, "x"), buf(h, "h"), buf(b, "b"), buf(back, "back"), buf(packed, "packed"), Arg::value(n)},
             checked(Schedule::forward)));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(h[i], f32_to_f16_bits(x[i])) << x[i];
    EXPECT_EQ(b[i], f32_to_bf16_bits(x[i])) << x[i];
    EXPECT_EQ(back[2 * i], f16_bits_to_f32(f32_to_f16_bits(x[i]))) << x[i];
    EXPECT_EQ(back[2 * i + 1], bf16_bits_to_f32(f32_to_bf16_bits(x[i]))) << x[i];
    EXPECT_EQ(packed[2 * i], f32_to_f16_bits(x[i]) | (unsigned{f32_to_f16_bits(-x[i])} << 16)) << x[i];
    EXPECT_EQ(packed[2 * i + 1], f32_to_bf16_bits(-x[i]) | (unsigned{f32_to_bf16_bits(x[i])} << 16)) << x[i];
  }
}

// ldmatrix: lane L gets row L/4, columns 2(L%4) and 2(L%4)+1 of matrix j in register j (first in the low
// half); with .trans rows 2(L%4) and 2(L%4)+1 of column L/4. The probe's element (j, r, c) is j*64+r*8+c.
TEST(EmuTensorCore, LdmatrixFragmentsBitExact) {
  KILN_COMPILE(m, "mma_tile.cu", {"ldmatrix_probe"});
  std::vector<unsigned> out(6 * 32 * 4, 0xdeadbeefu);
  KILN_ASSERT_OK(launch(m, "ldmatrix_probe", {1}, {32}, 0, {buf(out, "out")}, checked(Schedule::random)));
  const int counts[] = {1, 1, 2, 2, 4, 4};
  for (int v = 0; v < 6; ++v) {
    const bool trans = v % 2;
    for (unsigned L = 0; L < 32; ++L) {
      for (int j = 0; j < 4; ++j) {
        const unsigned got = out[(v * 32 + L) * 4 + j];
        if (j >= counts[v]) {
          EXPECT_EQ(got, 0xdeadbeefu);
          continue;
        }
        unsigned lo, hi;
        if (!trans) {
          lo = j * 64 + (L / 4) * 8 + 2 * (L % 4), hi = lo + 1;
        } else {
          lo = j * 64 + (2 * (L % 4)) * 8 + L / 4, hi = lo + 8;
        }
        EXPECT_EQ(got, lo | (hi << 16)) << "variant " << v << " lane " << L << " register " << j;
      }
    }
  }
}

uint16_t to_half(float f) {  // exact for the values used: multiples of 1/64 below 4 in magnitude
  if (f == 0) return 0;
  uint16_t sign = f < 0 ? 0x8000 : 0;
  f = std::fabs(f);
  int e = static_cast<int>(std::floor(std::log2(f)));
  float mant = f / std::ldexp(1.0f, e) - 1.0f;
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | static_cast<uint16_t>(std::lround(mant * 1024)));
}
uint16_t to_bf16(float f) {  // exact for the values used
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

void check_mma(bool bf16) {
  auto r = compile_file("mma_tile.cu", {"mma_tile_f16", "mma_tile_bf16"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::mt19937 rng(bf16 ? 14 : 13);
  // Values k/64 with k in [-127, 127] \ {0}: exactly representable in fp16 and bf16.
  auto value = [&] {
    int k = static_cast<int>(rng() % 127) + 1;
    return (rng() & 1 ? k : -k) / 64.0f;
  };
  std::vector<float> a(256), b(128);
  for (auto& v : a) v = value();
  for (auto& v : b) v = value();
  auto c = random_floats(128, 15);
  std::vector<uint16_t> ab(256), bb(128);
  for (int i = 0; i < 256; ++i) ab[i] = bf16 ? to_bf16(a[i]) : to_half(a[i]);
  for (int i = 0; i < 128; ++i) bb[i] = bf16 ? to_bf16(b[i]) : to_half(b[i]);
  for (Schedule s : kSchedules) {
    std::vector<float> d(128, 0.0f);
    KILN_ASSERT_OK(launch(**r, bf16 ? "mma_tile_bf16" : "mma_tile_f16", {1}, {32}, 0,
                          {buf(ab, "a"), buf(bb, "b"), buf(c, "c"), buf(d, "d")}, checked(s)));
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 8; ++j) {
        double want = c[i * 8 + j], mag = std::fabs(c[i * 8 + j]);
        for (int k = 0; k < 16; ++k) {
          want += static_cast<double>(a[i * 16 + k]) * b[k * 8 + j];
          mag += std::fabs(static_cast<double>(a[i * 16 + k]) * b[k * 8 + j]);
        }
        // f32 accumulation in an unspecified order: a few ulps of the magnitude.
        EXPECT_NEAR(d[i * 8 + j], want, 4 * mag * 6e-8) << "row " << i << " col " << j;
      }
    }
  }
}

TEST(EmuTensorCore, MmaF16TileMatchesFloat64) { check_mma(false); }
TEST(EmuTensorCore, MmaBf16TileMatchesFloat64) { check_mma(true); }

// The tiled GEMM with a 3-stage cp.async pipeline against the ref backend's matmul.
TEST(EmuGemm, CpAsyncPipelineMatchesReferenceMatmul) {
  KILN_COMPILE(m, "gemm_cp_async.cu", {"gemm_cp_async"});
  std::mt19937 rng(16);
  std::vector<std::array<int, 3>> sizes = {{32, 32, 16}, {64, 64, 64}, {45, 70, 37}, {1, 33, 5}};
  for (int i = 0; i < 3; ++i) {
    sizes.push_back(
        {static_cast<int>(rng() % 80) + 1, static_cast<int>(rng() % 80) + 1, static_cast<int>(rng() % 80) + 1});
  }
  int run = 0;
  for (auto [M, N, K] : sizes) {
    Graph g("gemm");
    Tensor a = g.input("a", {M, K});
    Tensor b = g.input("b", {K, N});
    g.output(g.matmul(a, b), "c");
    ASSERT_TRUE(g.verify().ok()) << g.verify().message();
    auto av = random_floats(static_cast<size_t>(M) * K, 100 + run);
    auto bv = random_floats(static_cast<size_t>(K) * N, 200 + run);
    TensorMap inputs;
    inputs["a"] = HostTensor(Shape({M, K}), DType::f32);
    inputs["b"] = HostTensor(Shape({K, N}), DType::f32);
    std::copy(av.begin(), av.end(), inputs["a"].data.begin());
    std::copy(bv.begin(), bv.end(), inputs["b"].data.begin());
    auto ref = run_reference(g, inputs);
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    const HostTensor& want = ref->at("c");
    // Every size under forward; the first three also under reverse and random.
    std::vector<Schedule> schedules = {Schedule::forward};
    if (run < 3) schedules = {Schedule::forward, Schedule::reverse, Schedule::random};
    for (Schedule s : schedules) {
      std::vector<float> c(static_cast<size_t>(M) * N, 0.0f);
      KILN_ASSERT_OK(launch(
          m, "gemm_cp_async", {static_cast<uint32_t>((N + 31) / 32), static_cast<uint32_t>((M + 31) / 32)}, {256}, 0,
          {buf(av, "A"), buf(bv, "B"), buf(c, "C"), Arg::value(M), Arg::value(N), Arg::value(K)}, checked(s)));
      for (size_t i = 0; i < c.size(); ++i) {
        // f32 accumulation of K terms of magnitude <= 1: |error| <= K * 2^-23 * K, far below 1e-5 * K + 1e-6.
        ASSERT_NEAR(c[i], want.data[i], 1e-5 * K + 1e-6)
            << "M=" << M << " N=" << N << " K=" << K << " element " << i << " schedule " << schedule_name(s);
      }
    }
    ++run;
  }
}

// The kernels' division by a run-time divisor (kiln/conv2d.cuh's FastDiv: a multiply-high and a shift)
// against C++'s `/` for divisors from 1 to 2^31 - 1 and numerators up to 2^31 - 1, edges included.
TEST(EmuKernels, ConvFastDivisionIsExact) {
  const std::string src =
      "#include \"kiln/conv2d.cuh\"\n"
      "extern \"C\" __global__ void fast_div(const int* n, const int* d, int* q, int count) {\n"
      "  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);\n"
      "  if (i < count) q[i] = kiln::conv::FastDiv(d[i]).div(n[i]);\n"
      "}\n";
  CompileOptions o;
  o.cache_dir = cache_dir();
  o.source_name = "fast_div.cu";
  auto m = compile(src, {"fast_div"}, o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::vector<int> n, d;
  std::mt19937_64 rng(7);
  const std::vector<int> divisors{
      1, 2, 3, 5, 7, 9, 14, 28, 49, 56, 196, 3136, 12544, 65535, 65537, 1 << 20, (1 << 30) + 1, 2147483647};
  for (int dv : divisors) {
    for (int64_t e : {int64_t{0}, int64_t{1}, int64_t{dv} - 1, int64_t{dv}, int64_t{dv} + 1, int64_t{2} * dv - 1,
                      int64_t{2147483647}, int64_t{2147483646}}) {
      if (e < 0 || e > 2147483647) continue;
      n.push_back(static_cast<int>(e)), d.push_back(dv);
    }
    for (int k = 0; k < 200; ++k) {
      n.push_back(static_cast<int>(rng() % 2147483648u)), d.push_back(dv);
      n.push_back(static_cast<int>(rng() % 200000u)), d.push_back(dv);
    }
  }
  for (int k = 0; k < 4000; ++k) {  // random divisors too
    d.push_back(static_cast<int>(rng() % 2147483647u) + 1);
    n.push_back(static_cast<int>(rng() % 2147483648u));
  }
  std::vector<int> q(n.size(), -1);
  const int count = static_cast<int>(n.size());
  KILN_ASSERT_OK(launch(**m, "fast_div", {static_cast<uint32_t>((count + 255) / 256)}, {256}, 0,
                        {buf(n, "n"), buf(d, "d"), buf(q, "q"), Arg::value(count)}));
  for (size_t i = 0; i < n.size(); ++i) ASSERT_EQ(q[i], n[i] / d[i]) << n[i] << " / " << d[i];
}

TEST(EmuCompile, SharedObjectsAreCachedOnDiskUnderAStableKey) {
  const std::string src = "#include \"kiln/device.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] = 1; }\n";
  CompileOptions o;
  o.cache_dir = cache_dir() + "/compile-test";
  o.extra_flags = {"-DKILN_TEST_UNIQUE=1"};
  auto a = compile(src, {"k"}, o);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE((*a)->has_kernel("k"));
  EXPECT_FALSE((*a)->has_kernel("j"));
  EXPECT_THAT((*a)->so_path(), ::testing::StartsWith(o.cache_dir + "/"));
  EXPECT_TRUE(std::filesystem::exists((*a)->so_path()));
  auto b = compile(src, {"k"}, o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*a)->so_path(), (*b)->so_path());
  o.extra_flags = {"-DKILN_TEST_UNIQUE=2"};  // every flag is part of the key
  auto c = compile(src, {"k"}, o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*a)->so_path(), (*c)->so_path());
  // No temporary files are left behind.
  for (const auto& e : std::filesystem::recursive_directory_iterator(o.cache_dir)) {
    EXPECT_THAT(e.path().string(), ::testing::Not(HasSubstr(".tmp."))) << e.path();
  }
}

TEST(EmuCompile, ErrorsComeBackAsStatus) {
  CompileOptions o;
  o.cache_dir = cache_dir();
  o.source_name = "broken.cu";
  auto r = compile("#include \"kiln/device.cuh\"\nextern \"C\" __global__ void k(float* x) { x[0] = ; }\n", {"k"}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_THAT(r.status().message(), HasSubstr("broken.cu:2"));

  o.host_cxx = "/nonexistent/kiln-no-such-c++";
  r = compile("extern \"C\" void k() {}\n", {"k"}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::unsupported);
  EXPECT_THAT(r.status().message(), HasSubstr("KILN_HOST_CXX"));
  EXPECT_FALSE(check_host_compiler("/nonexistent/kiln-no-such-c++").ok());
  EXPECT_TRUE(check_host_compiler().ok());

  EXPECT_FALSE(compile("", {"not a name"}, {}).ok());
  EXPECT_FALSE(compile("", {}, {}).ok());
}

TEST(EmuLaunch, BadLaunchesComeBackAsStatus) {
  KILN_COMPILE(m, "block_reduce.cu", {"block_reduce"});
  std::vector<float> x(256, 1.0f), out(1, 0.0f);
  const std::vector<Arg> args = {buf(x, "x"), buf(out, "out"), Arg::value(256)};
  Status s = launch(m, "nope", {1}, {256}, 0, args);
  EXPECT_EQ(s.code(), StatusCode::not_found);
  s = launch(m, "block_reduce", {1}, {256}, 0, {buf(x, "x"), buf(out, "out")});
  EXPECT_THAT(s.message(), HasSubstr("takes 3 parameters, 2 arguments given"));
  s = launch(m, "block_reduce", {1}, {256}, 0, {buf(x, "x"), buf(out, "out"), Arg::value(int64_t{256})});
  EXPECT_THAT(s.message(), HasSubstr("parameter 2 is 4 bytes, its argument 8 bytes"));
  s = launch(m, "block_reduce", {1}, {2048}, 0, args);
  EXPECT_THAT(s.message(), HasSubstr("not a valid CUDA block"));
  s = launch(m, "block_reduce", {0}, {256}, 0, args);
  EXPECT_THAT(s.message(), HasSubstr("not a valid CUDA grid"));
  s = launch(m, "block_reduce", {1}, {256}, 300 * 1024, args);
  EXPECT_THAT(s.message(), HasSubstr("dynamic shared memory"));
  KILN_ASSERT_OK(launch(m, "block_reduce", {1}, {256}, 0, args));
  EXPECT_EQ(out[0], 256.0f);
}

TEST(EmuLaunch, ScheduleFromTheEnvironment) {
  KILN_COMPILE(m, "block_reduce.cu", {"block_reduce"});
  std::vector<float> x(256, 1.0f), out(1, 0.0f);
  const std::vector<Arg> args = {buf(x, "x"), buf(out, "out"), Arg::value(256)};
  LaunchReport report;
  ASSERT_EQ(setenv("KILN_EMU_SCHEDULE", "random:77", 1), 0);
  Status s = launch(m, "block_reduce", {1}, {256}, 0, args, {}, &report);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(report.schedule, Schedule::random);
  EXPECT_EQ(report.seed, 77u);
  EXPECT_GE(report.context_switches, 2u * 256 * 9);  // every thread meets 9 barriers and exits
  ASSERT_EQ(setenv("KILN_EMU_SCHEDULE", "reverse", 1), 0);
  s = launch(m, "block_reduce", {1}, {256}, 0, args, {}, &report);
  EXPECT_EQ(report.schedule, Schedule::reverse);
  LaunchOptions o;
  o.schedule = Schedule::forward;  // an option wins over the environment
  s = launch(m, "block_reduce", {1}, {256}, 0, args, o, &report);
  EXPECT_EQ(report.schedule, Schedule::forward);
  ASSERT_EQ(setenv("KILN_EMU_SCHEDULE", "sideways", 1), 0);
  s = launch(m, "block_reduce", {1}, {256}, 0, args);
  EXPECT_THAT(s.message(), HasSubstr("KILN_EMU_SCHEDULE='sideways'"));
  unsetenv("KILN_EMU_SCHEDULE");
}

// `kiln run --device emu`: reports a missing host compiler (KILN_HOST_CXX); with one, runs the plan's
// generated kernels and, with --check, compares every output with ref.
TEST(EmuCli, RunOnEmuReportsMissingCompilerAndChecksAgainstRef) {
  const std::string graph = std::string(KILN_SOURCE_DIR) + "/samples/graphs/lstm_cell.json";
  const std::string err = cache_dir() + "/cli.stderr", out = cache_dir() + "/cli.stdout";
  auto run = [&](const std::string& env) {
    std::string cmd =
        fmt::format("{} '{}' run '{}' --device emu --check > '{}' 2> '{}'", env, KILN_CLI_PATH, graph, out, err);
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  std::filesystem::create_directories(cache_dir());
  EXPECT_EQ(run("KILN_HOST_CXX=/nonexistent/kiln-no-such-c++"), 1);
  std::string text = read_text(err);
  EXPECT_THAT(text, HasSubstr("error: emu: cannot run the host C++ compiler '/nonexistent/kiln-no-such-c++'"));
  EXPECT_THAT(text, HasSubstr("set KILN_HOST_CXX"));
  EXPECT_EQ(run("env"), 0) << read_text(err);
  text = read_text(out);
  EXPECT_THAT(text, HasSubstr("device: emu"));
  EXPECT_THAT(text, HasSubstr("check against ref:"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("FAIL")));
}

}  // namespace
}  // namespace kiln::emu::test
