// The matmul family (codegen/family_matmul.cpp, templates/kiln/matmul.cuh): 2-D and batched products with
// broadcast batch dims, transposes, odd sizes, and fused epilogues, run in the emulator against the
// reference backend on random inputs (tolerances in tests/codegen_gemm_util.h), and compiled by NVRTC without
// spills.
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "codegen_gemm_util.h"

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
         MmCase{DType::f32, {3, 10, 12}, {12, 7}, {}, MmEpi::bias_gelu},              // b broadcast over the batch
         MmCase{DType::f16, {2, 1, 9, 16}, {3, 16, 11}, {}, MmEpi::residual},         // [2,1] x [3] -> [2,3]
         MmCase{DType::bf16, {1, 8, 5}, {4, 6, 5}, {.transpose_b = true}, MmEpi::none},  // a broadcast
         MmCase{DType::f32, {1, 1}, {1, 1}, {}, MmEpi::none},
         MmCase{DType::f32, {65, 3}, {3, 66}, {}, MmEpi::none},         // more than one tile each way, K < BK
         MmCase{DType::f16, {5, 70}, {70, 3}, {}, MmEpi::bias_gelu}},  // several k-slices, K no multiple of BK
        2);
}

TEST(CodegenMatmul, EveryFiberSchedule) {
  for (emu::Schedule s : {emu::Schedule::reverse, emu::Schedule::random}) {
    SCOPED_TRACE(emu::schedule_name(s));
    check({MmCase{DType::f32, {37, 24}, {24, 45}, {}, MmEpi::bias_gelu}}, 1, s);  // cp.async A, element B
  }
}

// Default 64x64 tiles at sm_80 and sm_90: k-contiguous B (vector path) and row-major B (element path).
TEST(CodegenMatmul, NvrtcCompilesWithoutSpills) {
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    gemm_test::expect_compiles_without_spills(mm_graph(MmCase{t, {8, 256, 256}, {256, 256}, {}, MmEpi::bias_gelu}));
  }
  gemm_test::expect_compiles_without_spills(
      mm_graph(MmCase{DType::f16, {256, 128}, {256, 128}, {.transpose_b = true}, MmEpi::none}));
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
