// The matmul family (codegen/family_matmul.cpp, templates/kiln/matmul.cuh): 2-D and batched products with
// broadcast batch dims, transposes, odd sizes, and fused epilogues, on the tiled GEMM and (at most 8 rows)
// the skinny kernel, run in the emulator against the
// reference backend on random inputs (tolerances in tests/codegen_gemm_util.h), and compiled by NVRTC without
// spills.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "codegen_gemm_util.h"
#include "codegen_rows_check.h"

namespace kiln {
namespace {

using gemm_test::expect_emu_matches_ref;

enum class MmEpi { none, bias_gelu, residual };

struct MmCase {
  DType dtype = DType::f32;
  std::vector<int64_t> a, b;  // shapes as stored (transposed ones already swapped)
  MatmulOptions o{};
  MmEpi epi = MmEpi::none;
};

std::string describe(const MmCase& c) {
  return fmt::format("{} a{} b{}{}{}", dtype_name(c.dtype), Shape(c.a).to_string(), Shape(c.b).to_string(),
                     c.o.transpose_a ? " ta" : "", c.o.transpose_b ? " tb" : "");
}

// Adds case `c` to `g`, its tensors named with prefix `p` (cases share a graph: one plan, one host compile).
void add_case(Graph& g, const MmCase& c, const std::string& p) {
  const Tensor a = g.input(p + "a", Shape(c.a), c.dtype);
  const Tensor b = g.parameter(p + "b", Shape(c.b), c.dtype);
  Tensor y;
  if (c.epi == MmEpi::bias_gelu) {
    const int64_t n = c.o.transpose_b ? c.b[c.b.size() - 2] : c.b.back();
    y = g.gelu(g.matmul(a, b, g.parameter(p + "bias", {n}, c.dtype), c.o));
  } else {
    y = g.matmul(a, b, c.o);
    if (c.epi == MmEpi::residual) y = g.add(y, g.input(p + "r", g.tensor(y).shape, c.dtype));
  }
  g.output(y, p + "y");
}

Graph mm_graph(const std::vector<MmCase>& cases) {
  Graph g("matmul");
  for (size_t i = 0; i < cases.size(); ++i) add_case(g, cases[i], fmt::format("c{}.", i));
  KILN_CHECK(g.verify().ok(), g.verify().message());
  return g;
}
Graph mm_graph(const MmCase& c) { return mm_graph(std::vector<MmCase>{c}); }

// Outputs are named c<i>.y after their case.
void check(const std::vector<MmCase>& cases, uint64_t seed, emu::Schedule s = emu::Schedule::forward) {
  std::string what;
  for (size_t i = 0; i < cases.size(); ++i) what += fmt::format("\n  c{}: {}", i, describe(cases[i]));
  SCOPED_TRACE(what);
  expect_emu_matches_ref(mm_graph(cases), seed, {}, "matmul", s);
}

TEST(CodegenMatmul, TwoDimensionalBiasGeluEveryDtype) {
  check({MmCase{DType::f32, {37, 24}, {24, 45}, {}, MmEpi::bias_gelu},
         MmCase{DType::f16, {37, 24}, {24, 45}, {}, MmEpi::bias_gelu},
         MmCase{DType::bf16, {37, 24}, {24, 45}, {}, MmEpi::bias_gelu}},
        1);
}

TEST(CodegenMatmul, TransposesBatchesAndOddSizes) {
  check({MmCase{DType::f32, {19, 33}, {41, 19}, {.transpose_a = true, .transpose_b = true}, MmEpi::none},
         MmCase{DType::f16, {17, 24}, {40, 24}, {.transpose_b = true}, MmEpi::residual},  // k contiguous in both
         MmCase{DType::bf16, {16, 9}, {16, 13}, {.transpose_a = true}, MmEpi::none},
         MmCase{DType::f32, {3, 10, 12}, {12, 7}, {}, MmEpi::bias_gelu},                 // b broadcast over the batch
         MmCase{DType::f16, {2, 1, 9, 16}, {3, 16, 11}, {}, MmEpi::residual},            // [2,1] x [3] -> [2,3]
         MmCase{DType::bf16, {1, 8, 5}, {4, 6, 5}, {.transpose_b = true}, MmEpi::none},  // a broadcast
         MmCase{DType::f32, {1, 1}, {1, 1}, {}, MmEpi::none},
         MmCase{DType::f32, {65, 3}, {3, 66}, {}, MmEpi::none},        // more than one tile each way, K < BK
         MmCase{DType::f16, {5, 70}, {70, 3}, {}, MmEpi::bias_gelu}},  // several k-slices, K no multiple of BK
        2);
}

TEST(CodegenMatmul, EveryFiberSchedule) {
  for (emu::Schedule s : {emu::Schedule::reverse, emu::Schedule::random}) {
    SCOPED_TRACE(emu::schedule_name(s));
    check({MmCase{DType::f32, {37, 24}, {24, 45}, {}, MmEpi::bias_gelu},    // cp.async A, element B
           MmCase{DType::f16, {6, 272}, {272, 40}, {}, MmEpi::bias_gelu}},  // skinny: shuffles, shared sums
          1, s);
  }
}

// Default 64x64 tiles at sm_80 and sm_90: k-contiguous B (vector path) and row-major B (element path).
TEST(CodegenMatmul, NvrtcCompilesWithoutSpills) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    gemm_test::expect_compiles_without_spills(mm_graph(MmCase{t, {8, 256, 256}, {256, 256}, {}, MmEpi::bias_gelu}));
  }
  gemm_test::expect_compiles_without_spills(
      mm_graph(MmCase{DType::f16, {256, 128}, {256, 128}, {.transpose_b = true}, MmEpi::none}));
  // k = 100 (not whole 16-byte chunks): both operands take the element path, whose loaded values stay in
  // registers across a slice; the 128 x 64 tile spilled at 3 blocks per SM (168 registers) before pick_tiles
  // counted them.
  gemm_test::expect_compiles_without_spills(
      mm_graph(MmCase{DType::f16, {8192, 100}, {100, 1024}, {}, MmEpi::bias_gelu}));
}

// At most 8 rows take the skinny kernel (K split across a block's threads): every row count, vector and
// element reads of A and B (K and N that V does or does not divide, transposes), broadcast batches, all
// three epilogues, K shorter and longer than one pass of the block.
TEST(CodegenMatmul, SkinnyRowsEveryPath) {
  check({MmCase{DType::f16, {1, 512}, {512, 64}, {}, MmEpi::bias_gelu},  // vector A and B
         MmCase{DType::bf16, {8, 300}, {300, 70}, {}, MmEpi::residual},  // K, N not multiples of 8: elements
         MmCase{DType::f32, {3, 520}, {520, 36}, {}, MmEpi::bias_gelu},  // f32: V = 4
         MmCase{DType::f16, {40, 5}, {24, 40}, {.transpose_a = true, .transpose_b = true}, MmEpi::none},
         MmCase{DType::bf16, {2, 7, 96}, {96, 24}, {}, MmEpi::bias_gelu},  // B broadcast over 2 batches
         MmCase{DType::f16, {4, 64}, {3, 64, 16}, {}, MmEpi::residual},    // A broadcast over 3 batches
         MmCase{DType::f32, {8, 2}, {2, 5}, {}, MmEpi::none},              // K far below one pass
         MmCase{DType::f16, {5, 1100}, {1100, 24}, {}, MmEpi::none}},      // several passes over k
        3);
}

// f16 / bf16 products of more than 8 rows run on tensor cores. 132 batches of 128 rows take 264 tiles of
// 128 x 64 at 2 per SM (N = 72: a second column tile, mostly tail); 140 batches of 128 rows with N = 48
// fill the waves best with 560 tiles of 32 rows at 5 per SM (0.85; 140 tiles of 128 rows fill 0.53); 37
// rows are too few for a 32-row tile per SM and take the simple 32 x 64 tile of 4 x 4 accumulators.
TEST(CodegenMatmul, TensorCoresFor16BitTypes) {
  const MmCase wide{DType::f16, {132, 128, 40}, {40, 72}, {}, MmEpi::bias_gelu};
  // A transposed (k-major): the tile loader's element path into the 32-row tile.
  const MmCase narrow{DType::bf16, {140, 24, 128}, {140, 24, 48}, {.transpose_a = true}, MmEpi::residual};
  const MmCase small{DType::bf16, {37, 24}, {24, 45}, {.transpose_b = false}, MmEpi::none};
  struct Want {
    MmCase c;
    int bm, tm, tn, blocks_per_sm;
  };
  for (const Want& w : {Want{wide, 128, 8, 8, 2}, Want{narrow, 32, 4, 8, 5}, Want{small, 32, 4, 4, 2}}) {
    SCOPED_TRACE(describe(w.c));
    const gemm_test::OnlyKernel k = gemm_test::only_kernel(mm_graph(w.c));
    const codegen::GemmTiles g = k.tiles();
    EXPECT_EQ(g.main_loop, codegen::MainLoop::tensor_core);
    EXPECT_EQ(g.bm, w.bm);
    EXPECT_EQ(g.bn, 64);
    EXPECT_EQ(g.tm, w.tm);
    EXPECT_EQ(g.tn, w.tn);
    EXPECT_EQ(g.blocks_per_sm, w.blocks_per_sm);
    gemm_test::expect_compiles_without_spills(mm_graph(w.c));
    if (!k.ptx.empty()) {
      EXPECT_NE(k.ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
    }
  }
  check({wide, narrow, small}, 9);
  MmCase f32 = wide;
  f32.dtype = DType::f32;
  const gemm_test::OnlyKernel k = gemm_test::only_kernel(mm_graph(f32));
  EXPECT_EQ(k.tiles().main_loop, codegen::MainLoop::simt);
  if (!k.ptx.empty()) {
    EXPECT_EQ(k.ptx.find("mma.sync"), std::string::npos);
  }
}

// The tile heuristic reads the target's SM count: 132 batches of 128 rows fill an H200's 132 SMs with
// 128-row tiles (264 at 2 per SM); on a 200-SM GPU they would fill 0.66 of the waves at any residency, and
// 528 tiles of 64 rows at 3 per SM fill 0.88.
TEST(CodegenMatmul, TileChoiceFollowsTheTargetsSmCount) {
  const MmCase c{DType::f16, {132, 128, 40}, {40, 72}, {}, MmEpi::none};
  Target big = default_target();
  big.sm_count = 200;
  auto plan = plan_graph(mm_graph(c), {.target = big});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const auto mm = testing::details_of<codegen::MatmulConfig>(*plan);
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_EQ(mm[0].tiles.bm, 64);
  EXPECT_EQ(mm[0].tiles.blocks_per_sm, 3);
  EXPECT_EQ(gemm_test::only_kernel(mm_graph(c), false).tiles().bm, 128);
}

// Which family a matmul of `m` rows takes.
KernelFamilyId mm_family(int64_t m, DType t) {
  return gemm_test::only_kernel(mm_graph(MmCase{t, {m, 256}, {256, 64}, {}, MmEpi::bias_gelu}), false).config.family;
}

TEST(CodegenMatmul, SkinnyPathTakenUpToEightRows) {
  EXPECT_EQ(mm_family(1, DType::f16), KernelFamilyId::matmul_skinny);
  EXPECT_EQ(mm_family(8, DType::f32), KernelFamilyId::matmul_skinny);
  EXPECT_EQ(mm_family(9, DType::f16), KernelFamilyId::matmul);
}

// The vector reads of the skinny kernel on pointers 2 bytes off 16-byte alignment (a caller's own
// buffers): the element-wise fallback gives the same outputs.
TEST(CodegenMatmul, SkinnyOnMisalignedPointers) {
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    rows_test::expect_same_when_misaligned(
        mm_graph(MmCase{t, {4, 128}, {128, 48}, {}, MmEpi::bias_gelu}), {},
        [](const codegen::KernelConfig& c) { return c.family == KernelFamilyId::matmul_skinny; });
  }
}

// The MLP sample's two products at batch 8 (K 512 and 2048) in every dtype: no spills.
TEST(CodegenMatmul, SkinnyCompilesWithoutSpills) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    gemm_test::expect_compiles_without_spills(mm_graph(MmCase{t, {8, 512}, {512, 2048}, {}, MmEpi::bias_gelu}));
    gemm_test::expect_compiles_without_spills(mm_graph(MmCase{t, {8, 2048}, {2048, 512}, {}, MmEpi::bias_gelu}));
  }
}

TEST(CodegenMatmul, RandomShapes) {
  std::mt19937_64 rng(5);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  std::vector<MmCase> cases;
  for (int i = 0; i < 8; ++i) {
    MmCase c;
    c.dtype = dtypes[i % 3];
    const int64_t M = pick(1, 40), N = pick(1, 40), K = pick(1, 40);
    c.o.transpose_a = pick(0, 1), c.o.transpose_b = pick(0, 1);
    c.a = c.o.transpose_a ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K};
    c.b = c.o.transpose_b ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
    if (pick(0, 1)) c.a.insert(c.a.begin(), pick(1, 3));
    if (pick(0, 1)) c.b.insert(c.b.begin(), c.a.size() == 3 && pick(0, 1) ? c.a[0] : 1);
    c.epi = static_cast<MmEpi>(pick(0, 2));
    cases.push_back(c);
  }
  check(cases, 200);
}

}  // namespace
}  // namespace kiln
