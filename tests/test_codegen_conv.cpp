// The conv family (codegen/family_conv.cpp, templates/kiln/conv2d.cuh and depthwise_conv2d.cuh): small graphs
// built with the C++ builder, planned, their kernels run in the emulator and compared with the reference
// backend on random inputs (tolerances in tests/codegen_gemm_util.h), and compiled by NVRTC without spills. Shapes stay
// small (the emulator runs every CUDA thread as a fiber) and distinct kernels few (each is one host compile).
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "codegen_check.h"
#include "codegen_gemm_util.h"

namespace kiln {
namespace {

using gemm_test::expect_emu_matches_ref;

enum class ConvEpi { none, bias_bn_relu, residual_relu };

struct ConvCase {
  DType dtype = DType::f32;
  int64_t N = 1, C = 8, H = 6, W = 6, K = 8, R = 3, S = 3;
  Conv2dOptions o{};
  Layout x_layout = Layout::NHWC, w_layout = Layout::KRSC, y_layout = Layout::NHWC;
  ConvEpi epi = ConvEpi::none;
};

std::string describe(const ConvCase& c) {
  return fmt::format("{} N{} C{} {}x{} K{} {}x{} s{}x{} p{} d{}x{} g{} {}/{}/{}", dtype_name(c.dtype), c.N, c.C, c.H,
                     c.W, c.K, c.R, c.S, c.o.stride[0], c.o.stride[1], attr_value_to_string(c.o.padding),
                     c.o.dilation[0], c.o.dilation[1], c.o.groups, layout_name(c.x_layout), layout_name(c.w_layout),
                     layout_name(c.y_layout));
}

// Adds case `c` to `g`: inputs and outputs named with `p` (several cases share one graph, so one plan and
// one host compile of all their kernels).
void add_case(Graph& g, const ConvCase& c, const std::string& p) {
  const Tensor x = g.input(p + "x", {c.N, c.C, c.H, c.W}, c.dtype, c.x_layout);
  const Tensor w = g.parameter(p + "w", {c.K, c.C / c.o.groups, c.R, c.S}, c.dtype, c.w_layout);
  auto vec = [&](const char* name) { return g.parameter(p + name, {c.K}, c.dtype); };
  Tensor y;
  if (c.epi == ConvEpi::bias_bn_relu) {
    y = g.relu(g.batch_norm(g.conv2d(x, w, vec("bias"), c.o), vec("scale"), vec("shift"), vec("mean"), vec("var")));
  } else {
    y = g.conv2d(x, w, c.o);
    if (c.epi == ConvEpi::residual_relu) {
      const Tensor r = g.input(p + "r", g.tensor(y).shape, c.dtype, c.y_layout);
      y = g.relu(g.add(y, r));
    }
  }
  g.output(y, p + "y", c.y_layout);
}

Graph conv_graph(const std::vector<ConvCase>& cases) {
  Graph g("conv");
  for (size_t i = 0; i < cases.size(); ++i) add_case(g, cases[i], fmt::format("c{}.", i));
  KILN_CHECK(g.verify().ok(), g.verify().message());
  return g;
}
Graph conv_graph(const ConvCase& c) { return conv_graph(std::vector<ConvCase>{c}); }

// Outputs are named c<i>.y after their case.
void check(const std::vector<ConvCase>& cases, uint64_t seed, const PlanOptions& po = {},
           const char* family = nullptr) {
  std::string what;
  for (size_t i = 0; i < cases.size(); ++i) what += fmt::format("\n  c{}: {}", i, describe(cases[i]));
  SCOPED_TRACE(what);
  expect_emu_matches_ref(conv_graph(cases), seed, po, family);
}

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

TEST(CodegenConv, BiasBatchNormReluEveryDtype) {
  std::vector<ConvCase> cases;
  for (DType t : kDtypes) {
    ConvCase c;
    c.dtype = t;
    c.C = 16, c.K = 24, c.H = 7, c.W = 6;
    c.o.padding = {1, 1};
    c.epi = ConvEpi::bias_bn_relu;
    cases.push_back(c);
  }
  check(cases, 1, {}, "conv2d");
}

TEST(CodegenConv, ResidualAddReluEveryDtype) {
  std::vector<ConvCase> cases;
  for (DType t : kDtypes) {
    ConvCase c;
    c.dtype = t;
    c.N = 2, c.C = 16, c.K = 16, c.R = c.S = 1;
    c.epi = ConvEpi::residual_relu;
    cases.push_back(c);
  }
  check(cases, 2, {}, "conv2d");
}

// NCHW in and out: the input is read through its load transform (element path), the output written through
// its store transform; or, under the nchw policy, everything read and written as declared (KCRS weights).
TEST(CodegenConv, NchwInputAndOutputEveryDtype) {
  std::vector<ConvCase> nhwc_inside, nchw;
  for (DType t : kDtypes) {
    ConvCase c;
    c.dtype = t;
    c.C = 8, c.K = 12, c.H = 5, c.W = 7;
    c.o.padding = {1, 1};
    c.x_layout = Layout::NCHW, c.y_layout = Layout::NCHW;
    c.epi = ConvEpi::bias_bn_relu;
    nhwc_inside.push_back(c);
    c.w_layout = Layout::KCRS;
    nchw.push_back(c);
  }
  ConvCase one;  // 1x1 KCRS weights are channel-contiguous: the vector path reads them
  one.dtype = DType::f16, one.C = 16, one.K = 8, one.R = one.S = 1;
  one.x_layout = Layout::NCHW, one.w_layout = Layout::KCRS, one.y_layout = Layout::NCHW;
  nchw.push_back(one);
  check(nhwc_inside, 3, {}, "conv2d");
  PlanOptions po;
  po.layout = LayoutPolicy::nchw;
  check(nchw, 4, po, "conv2d");
}

TEST(CodegenConv, StridePaddingDilationKernelSizesAndChannelTails) {
  std::vector<ConvCase> cases;
  ConvCase c;
  c.C = 8, c.K = 8, c.H = 9, c.W = 8;
  c.o.stride = {2, 2};
  c.o.padding = {0, 1, 2, 1};  // top, left, bottom, right
  cases.push_back(c);
  c.dtype = DType::f16;
  c.o.stride = {1, 2};
  c.o.padding = {2, 0, 1, 3};
  c.o.dilation = {2, 2};
  cases.push_back(c);
  c = ConvCase{};
  c.dtype = DType::bf16;
  c.R = c.S = 1, c.C = 16, c.K = 8;
  cases.push_back(c);
  c.dtype = DType::f32;
  c.C = 3, c.K = 8, c.R = c.S = 7, c.H = c.W = 9;  // the stem of ResNet: C = 3 is no vector width
  c.o.stride = {2, 2};
  c.o.padding = {3, 3};
  cases.push_back(c);
  c = ConvCase{};
  c.C = 3, c.K = 5;
  cases.push_back(c);
  c.C = 12, c.K = 13, c.dtype = DType::f16;  // C not a multiple of 8 halves: element path for x and w
  cases.push_back(c);
  check(cases, 5, {}, "conv2d");
}

TEST(CodegenConv, GroupsAndDepthwise) {
  ConvCase c;
  c.C = 8, c.K = 16;
  c.o.groups = 2;
  c.o.padding = {1, 1};
  ConvCase d = c;
  d.C = 12, d.K = 12, d.o.groups = 12, d.dtype = DType::f16;
  d.o.stride = {2, 2};
  check({c, d}, 11, {}, "depthwise_conv2d");                                              // and a grouped implicit GEMM
  d.K = 24, d.dtype = DType::bf16, d.x_layout = Layout::NCHW, d.y_layout = Layout::NCHW;  // channel multiplier 2
  PlanOptions nchw;
  nchw.layout = LayoutPolicy::nchw;
  check({d}, 13, nchw, "depthwise_conv2d");
}

// The cp.async pipeline and the barriers of the implicit GEMM under every fiber order: a missing wait or
// barrier reads poisoned (NaN) shared memory under some order.
TEST(CodegenConv, EveryFiberSchedule) {
  ConvCase c;
  c.C = 16, c.K = 16, c.H = c.W = 5;
  c.o.padding = {1, 1};
  for (emu::Schedule s : {emu::Schedule::reverse, emu::Schedule::random}) {
    SCOPED_TRACE(emu::schedule_name(s));
    expect_emu_matches_ref(conv_graph(c), 14, {}, "conv2d", s);  // the kernel of one compile
    ConvCase h = c;                                              // the tensor-core loop: ldmatrix and mma are warp-wide
    h.dtype = DType::bf16;
    expect_emu_matches_ref(conv_graph(h), 15, {}, "conv2d", s);
  }
}

// f16 / bf16 convolutions run on tensor cores (ldmatrix + mma.sync), f32 on the SIMT loop. Each tensor-core
// tile (codegen/family_gemm.h's pick_tiles: 128, 64 or 32 rows by 64 channels, warps of 64 x 32 or 32 x 32) and a
// residency pinned with a shared-memory pad, checked against the reference with padding, a channel tail
// (K = 40 of 64 columns) and the fused epilogue:
//   8 x 64 x 64 pixels: 256 tiles of 128 rows at 2 per SM, 0.97 of one wave on 132 SMs
//   8 x 28 x 28 pixels, 256 channels: 196 tiles of 128 fill 0.74, 392 of 64 rows at 3 per SM 0.99
//   5 x 64 x 64 pixels: 160 tiles of 128 rows fill 0.61; 640 of 32 rows at 5 per SM (10 warps) 0.97
struct TileCase {
  ConvCase c;
  int bm, blocks_per_sm;
};

TEST(CodegenConv, TensorCoresFor16BitTypes) {
  ConvCase big;
  big.N = 8, big.C = 8, big.H = big.W = 64, big.K = 40;
  big.o.padding = {1, 1};
  big.epi = ConvEpi::bias_bn_relu;
  ConvCase wide = big;
  wide.H = wide.W = 28, wide.K = 256, wide.R = wide.S = 1, wide.o.padding = {0, 0};
  ConvCase rows32 = big;
  rows32.N = 5;
  for (DType t : {DType::f16, DType::bf16}) {
    int seed = 21;
    for (TileCase tc : {TileCase{big, 128, 2}, TileCase{wide, 64, 3}, TileCase{rows32, 32, 5}}) {
      tc.c.dtype = t;
      SCOPED_TRACE(describe(tc.c));
      const gemm_test::OnlyKernel k = gemm_test::only_kernel(conv_graph(tc.c));
      const codegen::GemmTiles g = k.tiles();
      EXPECT_EQ(g.main_loop, codegen::MainLoop::tensor_core);
      EXPECT_EQ(g.bm, tc.bm);
      EXPECT_EQ(g.bn, 64);
      EXPECT_EQ(g.tm * g.tn, g.bm == 128 ? 64 : 32);  // warps of 64 x 32 or 32 x 32
      EXPECT_EQ(g.blocks_per_sm, tc.blocks_per_sm);
      EXPECT_GT(g.pad_smem, 0);  // shared memory alone would let more blocks share an SM
      if (!k.ptx.empty()) {
        EXPECT_NE(k.ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
      }
      check({tc.c}, seed++, {}, "conv2d");
      gemm_test::expect_compiles_without_spills(conv_graph(tc.c));
    }
  }
  // An NCHW input: the element path of the tile loader (a thread per pixel row, 16 values of k each) into
  // the 32-row tile of 64 threads, stride 2, a residual add.
  ConvCase nchw = big;
  nchw.dtype = DType::f16, nchw.N = 20, nchw.H = nchw.W = 63, nchw.K = 40, nchw.o.stride = {2, 2};
  nchw.x_layout = Layout::NCHW, nchw.epi = ConvEpi::residual_relu;
  {
    SCOPED_TRACE(describe(nchw));
    const gemm_test::OnlyKernel k = gemm_test::only_kernel(conv_graph(nchw));
    EXPECT_EQ(k.tiles().bm, 32);
    EXPECT_EQ(k.tiles().threads(), 64);
    check({nchw}, 27, {}, "conv2d");
  }
  ConvCase f32 = big;
  f32.dtype = DType::f32;
  const gemm_test::OnlyKernel k = gemm_test::only_kernel(conv_graph(f32));
  EXPECT_EQ(k.tiles().main_loop, codegen::MainLoop::simt);
  EXPECT_EQ(k.tiles().bm, 64);
  if (!k.ptx.empty()) {
    EXPECT_EQ(k.ptx.find("mma.sync"), std::string::npos);
  }
}

// Channels-last inputs with too few channels for 16-byte chunks of k run the patch kernel
// (templates/kiln/conv2d_patch.cuh: the block's input rows and filters copied whole with 16-byte cp.async,
// each fragment register one 32-bit shared load from a copy aligned for its offset): an RGB stem (7x7,
// stride 2, pad 3; tap rows of 21 values, so pairs of k cross them), 4 channels at 3x3 with 72 filters (a
// second, partial filter tile), 2 channels with 5x5 taps dilated 2 along h, an NCHW output (the epilogue along m).
// Against ref; and the ResNet-50 stem itself (batch 32) compiles for sm_80 and sm_90 without spills.
TEST(CodegenConv, PatchKernelForNarrowChannelsLastInputs) {
  ConvCase stem;
  stem.dtype = DType::bf16, stem.N = 2, stem.C = 3, stem.H = stem.W = 32, stem.K = 64, stem.R = stem.S = 7;
  stem.o.stride = {2, 2}, stem.o.padding = {3, 3};
  stem.epi = ConvEpi::bias_bn_relu;
  ConvCase four;
  four.dtype = DType::f16, four.C = 4, four.H = four.W = 16, four.K = 72;
  four.o.padding = {1, 1};
  four.epi = ConvEpi::residual_relu;
  ConvCase gray;
  gray.dtype = DType::bf16, gray.C = 2, gray.H = gray.W = 16, gray.K = 64, gray.R = gray.S = 5;
  gray.o.padding = {4, 2}, gray.o.dilation = {2, 1};
  ConvCase nchw_out = stem;
  nchw_out.dtype = DType::f16, nchw_out.N = 1, nchw_out.y_layout = Layout::NCHW, nchw_out.epi = ConvEpi::none;
  int seed = 71;
  for (const ConvCase& c : {stem, four, gray, nchw_out}) {
    SCOPED_TRACE(describe(c));
    const gemm_test::OnlyKernel k = gemm_test::only_kernel(conv_graph(c));
    ASSERT_TRUE(std::holds_alternative<codegen::ConvConfig>(k.config.detail));
    EXPECT_TRUE(std::get<codegen::ConvConfig>(k.config.detail).patch);
    EXPECT_NE(k.source.find("conv2d_patch"), std::string::npos);
    check({c}, seed++, {}, "conv2d");
  }
  ConvCase resnet = stem;
  resnet.N = 32, resnet.H = resnet.W = 224;
  gemm_test::expect_compiles_without_spills(conv_graph(resnet));
  // 8 channels take 16-byte chunks: the stage-based loop.
  ConvCase eight = four;
  eight.C = 8;
  EXPECT_FALSE(std::get<codegen::ConvConfig>(gemm_test::only_kernel(conv_graph(eight), false).config.detail).patch);
}

// Split-K (templates/kiln/split_k.cuh): 2048 pixels x 192 channels are 48 tiles of 128 rows, too few for
// 132 SMs, so the 27 slices of k = 96 x 3 x 3 are split 5 ways (240 blocks at 2 per SM, the last split 3
// slices), each block's fp32 partial tile summed by the last to finish. Channels-last (epilogue along n) and NCHW in
// and out (the element loaders, the epilogue along m), a fused bias + batch norm + relu, against ref on the emulator.
TEST(CodegenConv, SplitKSumsThePartialTilesOfEverySplit) {
  ConvCase c;
  c.dtype = DType::bf16, c.N = 2, c.C = 96, c.H = c.W = 32, c.K = 192;
  c.o.padding = {1, 1};
  c.epi = ConvEpi::bias_bn_relu;
  ConvCase nchw = c;
  nchw.dtype = DType::f16, nchw.x_layout = Layout::NCHW, nchw.y_layout = Layout::NCHW;
  int seed = 41;
  for (const ConvCase& tc : {c, nchw}) {
    SCOPED_TRACE(describe(tc));
    const gemm_test::OnlyKernel k = gemm_test::only_kernel(conv_graph(tc));
    const codegen::GemmTiles g = k.tiles();
    EXPECT_EQ(g.bm, 128);
    EXPECT_EQ(g.splits, 5);
    EXPECT_EQ(k.config.grid.z, 5u);
    EXPECT_NE(k.source.find("conv2d_implicit_gemm_split"), std::string::npos);
    auto plan = plan_graph(conv_graph(tc));
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    for (const Group& grp : plan->groups) {
      if (!grp.is_kernel()) continue;
      EXPECT_EQ(grp.scratch.counters_bytes, 48 * 4);  // a counter per output tile, in the zeroed range
      EXPECT_EQ(grp.scratch.partials_bytes, int64_t{48} * 5 * 128 * 64 * 4);
      EXPECT_GE(grp.scratch.counters_offset, plan->zeroed_offset);
      EXPECT_LE(grp.scratch.counters_offset + grp.scratch.counters_bytes, plan->zeroed_offset + plan->zeroed_bytes);
      EXPECT_LE(grp.scratch.partials_offset + grp.scratch.partials_bytes, plan->workspace_bytes);
    }
    check({tc}, seed++, {}, "conv2d");
  }
  gemm_test::expect_compiles_without_spills(conv_graph(c));
}

// Whichever block of a tile arrives last, the sum is the same (in split order): the split conv under the
// forward, reverse and random block schedules gives bit-identical outputs, which match ref. Run three times
// through one Executable with new inputs, it matches ref each time: the counters are zero at every run (one
// left at its last count would make no block the last, and the outputs stale).
TEST(CodegenConv, SplitKIsDeterministicAndItsCountersAreZeroEveryRun) {
  ConvCase c;
  c.dtype = DType::bf16, c.N = 2, c.C = 96, c.H = c.W = 32, c.K = 192;
  c.o.padding = {1, 1};
  const Graph g = conv_graph(c);
  auto plan = plan_graph(g);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const TensorMap inputs = random_inputs(g, 51);
  std::optional<TensorMap> first;
  for (const emu::Schedule s : {emu::Schedule::forward, emu::Schedule::reverse, emu::Schedule::random}) {
    SCOPED_TRACE(emu::schedule_name(s));
    EmuPlanOptions eo;
    eo.launch.schedule = s;
    eo.launch.seed = 7;
    auto got = run_plan_emu(*plan, inputs, eo);
    ASSERT_TRUE(got.ok()) << got.status().message();
    if (!first) {
      first = *got;
      continue;
    }
    const std::vector<double>& a = first->at("c0.y").data;
    const std::vector<double>& b = got->at("c0.y").data;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b) << "outputs differ between block schedules";
  }
  testing::expect_every_run_matches_ref(g, DType::bf16, {51, 52, 53});
}

// Two split convs in one plan (48 tiles of 192 channels in 5 splits, 64 of 256 in 4) share one range of
// partial tiles, as long as the larger needs, each with its own counters; run one after the other, both
// match ref (the second group's blocks read only partials its own blocks wrote).
TEST(CodegenConv, SplitConvsShareOneRangeOfPartials) {
  ConvCase a;
  a.dtype = DType::bf16, a.N = 2, a.C = 96, a.H = a.W = 32, a.K = 192;
  a.o.padding = {1, 1};
  ConvCase b = a;
  b.K = 256, b.epi = ConvEpi::bias_bn_relu;
  auto plan = plan_graph(conv_graph({a, b}));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::vector<const Group*> split;
  for (const Group& grp : plan->groups)
    if (grp.is_kernel() && grp.scratch.partials_bytes > 0) split.push_back(&grp);
  ASSERT_EQ(split.size(), 2u);
  for (const auto& [grp, splits] : {std::pair{split[0], 5}, std::pair{split[1], 4}}) {
    auto config = codegen::plan_kernel(*plan, *grp);
    ASSERT_TRUE(config.ok()) << config.status().message();
    EXPECT_EQ(std::get<codegen::ConvConfig>(config->detail).tiles.splits, splits);
  }
  EXPECT_EQ(split[0]->scratch.partials_offset, split[1]->scratch.partials_offset);
  EXPECT_NE(split[0]->scratch.partials_bytes, split[1]->scratch.partials_bytes);
  EXPECT_NE(split[0]->scratch.counters_offset, split[1]->scratch.counters_offset);
  EXPECT_EQ(plan->workspace_bytes, split[0]->scratch.partials_offset +
                                       std::max(split[0]->scratch.partials_bytes, split[1]->scratch.partials_bytes));
  check({a, b}, 61, {}, "conv2d");
}

// The default tiles at sm_80 and sm_90: the vector (NHWC/KRSC) and element (NCHW input) paths of the
// implicit GEMM in each dtype (f16 / bf16 on tensor cores), and the depthwise kernel.
TEST(CodegenConv, NvrtcCompilesWithoutSpills) {
  for (DType t : kDtypes) {
    ConvCase c;
    c.dtype = t;
    c.N = 8, c.C = 64, c.K = 64, c.H = c.W = 32;  // 64x64 tiles (128 blocks)
    c.o.padding = {1, 1};
    c.epi = ConvEpi::bias_bn_relu;
    SCOPED_TRACE(describe(c));
    gemm_test::expect_compiles_without_spills(conv_graph(c));
  }
  ConvCase c;
  c.N = 8, c.C = 64, c.K = 64, c.H = c.W = 32;
  c.x_layout = Layout::NCHW;
  gemm_test::expect_compiles_without_spills(conv_graph(c));
  c.o.groups = 64, c.x_layout = Layout::NHWC, c.dtype = DType::f16;
  gemm_test::expect_compiles_without_spills(conv_graph(c));
}

// Random shapes with a fixed seed: N <= 2, H, W <= 9, C, K <= 24, any stride, padding, dilation, groups.
TEST(CodegenConv, RandomShapes) {
  std::mt19937_64 rng(20261129);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<ConvCase> cases;
  for (int i = 0; i < 10; ++i) {
    ConvCase c;
    c.dtype = kDtypes[i % 3];
    c.N = pick(1, 2);
    c.o.groups = std::array<int64_t, 4>{1, 1, 2, 3}[static_cast<size_t>(pick(0, 3))];
    c.C = c.o.groups * pick(1, 24 / c.o.groups);
    c.K = c.o.groups * pick(1, 24 / c.o.groups);
    c.R = pick(1, 3), c.S = pick(1, 3);
    c.o.stride = {pick(1, 2), pick(1, 2)};
    c.o.dilation = {pick(1, 2), pick(1, 2)};
    c.o.padding = {pick(0, 2), pick(0, 2), pick(0, 2), pick(0, 2)};
    c.H = std::max<int64_t>(pick(3, 9), (c.R - 1) * c.o.dilation[0] + 1);
    c.W = std::max<int64_t>(pick(3, 9), (c.S - 1) * c.o.dilation[1] + 1);
    if (pick(0, 1)) c.x_layout = Layout::NCHW;
    if (pick(0, 1)) c.y_layout = Layout::NCHW;
    c.epi = static_cast<ConvEpi>(pick(0, 2));
    cases.push_back(c);
  }
  check(cases, 100);
}

}  // namespace
}  // namespace kiln
