// The reduction epilogue (passes/fusion.h, templates/kiln/reduction_epilogue.cuh). First the pool epilogue
// (suite PoolEpilogue): a global average pool of a value that a conv2d group computes joins that group; the
// kernel stores the value, sums its tile per (image, channel) from what it stored, and the last block of each
// channel tile averages the partial sums. Each
// graph is planned (the pool inside the conv's kernel), run on emu in checked mode under every fiber
// schedule and compared with ref on random inputs. The shapes make tiles cross images (P·Q not a multiple
// of the 32-row chunks; several images inside one chunk) and leave channel tails (K not a multiple of the
// channel tile).
//
// Tolerance: testing::tolerance_for(dtype) (include/kiln/compare.h: f32 1e-4 / 1e-5, f16 1e-2 / 1e-2, bf16
// 6e-2 / 6e-2): the kernel sums in another order than ref, in f32, from the values it stored.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "codegen_check.h"
#include "codegen_gemm_util.h"
#include "kiln/engine.h"
#include "kiln/host_tensor.h"
#include "kiln/kiln.h"
#include "ops/registry.h"
#include "passes/fusion.h"

namespace kiln {
namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr emu::Schedule kSchedules[] = {emu::Schedule::forward, emu::Schedule::reverse, emu::Schedule::random};

struct Case {
  int64_t N = 2, C = 40, H = 9, W = 9, K = 40, groups = 40;  // groups == C: depthwise
  int64_t R = 3;
  int64_t stride = 1;
  bool excite = true;  // the squeeze-excite scale (the pooled mean times the value: its own kernel)
};

// x -> conv2d -> bias -> silu = y -> global_avg_pool -> outputs "pooled" and (excite) "scaled" = y * pooled.
Graph se_graph(const Case& c, DType t) {
  Graph g(fmt::format("pool_epilogue_n{}_k{}_g{}_{}x{}", c.N, c.K, c.groups, c.H, c.W));
  const Tensor x = g.input("x", {c.N, c.C, c.H, c.W}, t, Layout::NHWC);
  const Tensor w = g.parameter("w", {c.K, c.C / c.groups, c.R, c.R}, t, Layout::KRSC);
  Conv2dOptions o{.stride = {c.stride, c.stride}, .padding = {c.R / 2, c.R / 2}, .groups = c.groups};
  const Tensor y = g.silu(g.bias_add(g.conv2d(x, w, o), g.parameter("b", {c.K}, t), 1));
  const Tensor pooled = g.global_avg_pool(y);
  g.output(pooled, "pooled", Layout::NHWC);
  if (c.excite) g.output(g.mul(y, pooled), "scaled", Layout::NHWC);
  return g;
}

// The pool is in the conv's group, with its scratch reserved; the plan's kernels: the conv's, and the
// excitation's mul when there is one.
void expect_fused(const Plan& p, const Case& c) {
  int pooled_groups = 0;
  for (const Group& grp : p.groups) {
    if (grp.roles.reduction < 0) continue;
    ++pooled_groups;
    EXPECT_GT(grp.scratch.counters_bytes, 0);
    EXPECT_GT(grp.scratch.partials_bytes, 0);
  }
  EXPECT_EQ(pooled_groups, 1) << plan_to_text(p);
  EXPECT_EQ(p.kernel_count(), c.excite ? 2 : 1) << plan_to_text(p);
  EXPECT_GT(p.zeroed_bytes, 0);
}

void check(const Case& c, const char* family) {
  for (DType t : kDtypes) {
    for (emu::Schedule s : kSchedules) {
      SCOPED_TRACE(fmt::format("N{} C{} {}x{} K{} G{} {} {}", c.N, c.C, c.H, c.W, c.K, c.groups, dtype_name(t),
                               emu::schedule_name(s)));
      const auto plan = gemm_test::expect_emu_matches_ref(se_graph(c, t), 21, {}, family, s, testing::tolerance_for(t));
      if (plan) expect_fused(*plan, c);
    }
  }
}

// Depthwise: 2 images of 81 pixels (chunks of 32 rows cross the image boundary), 40 channels (a tail of 8
// past the 32-channel tile).
TEST(PoolEpilogue, DepthwiseTilesCrossImages) { check({}, "depthwise_conv2d"); }

// Images smaller than a chunk: 3 images of 3x3 pixels in one 32-row chunk; stride 2.
TEST(PoolEpilogue, DepthwiseSeveralImagesPerChunk) {
  check({.N = 3, .C = 8, .H = 6, .W = 6, .K = 8, .groups = 8, .stride = 2}, "depthwise_conv2d");
}

// A grouped conv (RegNet's group width 8): channel tiles of 32 with 8 channels each, one per group.
TEST(PoolEpilogue, GroupedConv) { check({.N = 2, .C = 32, .H = 7, .W = 7, .K = 32, .groups = 4}, "conv2d"); }

// A dense 1x1 conv whose value only the pool reads (the head of EfficientNet: conv -> pool -> classifier),
// with a channel tail past a 64-channel tile and more row tiles than one (14x14 images).
TEST(PoolEpilogue, DenseConvValueReadOnlyByThePool) {
  check({.N = 2, .C = 16, .H = 14, .W = 14, .K = 72, .groups = 1, .R = 1, .excite = false}, "conv2d");
}

// The counters start every run at zero: one Executable run three times on emu, each with new inputs, matches
// ref each time (a counter left at its last value would make no block the last one, and the means stale).
TEST(PoolEpilogue, CountersAreZeroEveryRun) {
  testing::expect_every_run_matches_ref(se_graph({}, DType::f32), DType::f32, {3, 4, 5});
}

// The excitation's mul reads the pool's mean, which exists only when the conv's kernel ends: it stays a
// kernel of its own, and --explain says why.
TEST(PoolEpilogue, TheMeanIsReadByTheNextKernel) {
  auto plan = plan_graph(se_graph({}, DType::f32));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  bool found = false;
  for (const Separation& s : plan->separations) {
    if (s.rule != SeparationRule::reduction_result) continue;
    found = true;
    EXPECT_NE(separation_reason(*plan, s).find("reduction epilogue"), std::string::npos) << separation_reason(*plan, s);
  }
  EXPECT_TRUE(found) << plan_to_text(*plan);
}

// A pool of a value computed before the conv (its prologue's) or of another shape is no pool epilogue.
TEST(PoolEpilogue, OnlyValuesAfterTheConv) {
  Graph g("pool_of_prologue");
  const Tensor x = g.input("x", {1, 8, 6, 6}, DType::f32, Layout::NHWC);
  const Tensor a = g.relu(x);
  const Tensor w = g.parameter("w", {8, 8, 1, 1}, DType::f32, Layout::KRSC);
  g.output(g.conv2d(a, w, Conv2dOptions{}), "y", Layout::NHWC);
  g.output(g.global_avg_pool(a), "pooled", Layout::NHWC);
  auto plan = plan_graph(g);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const Group& grp : plan->groups) EXPECT_LT(grp.roles.reduction, 0) << plan_to_text(*plan);
  gemm_test::expect_emu_matches_ref(g, 5);
}

// NVRTC compiles both pooled kernels for sm_80 and sm_90 without spills.
TEST(PoolEpilogue, CompilesWithoutSpills) {
  gemm_test::expect_compiles_without_spills(se_graph({}, DType::f16));
  gemm_test::expect_compiles_without_spills(
      se_graph({.N = 2, .C = 32, .H = 7, .W = 7, .K = 32, .groups = 4}, DType::f16));
}

// ---- batch-norm statistics (channel_stats) ----------------------------------------------------------------
//
// A training batch norm's statistics of a conv's output: the output is stored (the normalization reads it)
// and the same kernel sums it and its squares per channel over every image. Tolerance: as above; the sums
// run over N·P·Q values (162 here), each as stored (rounded), in f32.

// x -> conv2d -> bias = y, outputs "y" and "stats" = channel_stats(y) ([2, K] f32).
Graph stats_graph(const Case& c, DType t) {
  Graph g(fmt::format("channel_stats_n{}_k{}_g{}_{}x{}", c.N, c.K, c.groups, c.H, c.W));
  const Tensor x = g.input("x", {c.N, c.C, c.H, c.W}, t, Layout::NHWC);
  const Tensor w = g.parameter("w", {c.K, c.C / c.groups, c.R, c.R}, t, Layout::KRSC);
  Conv2dOptions o{.stride = {c.stride, c.stride}, .padding = {c.R / 2, c.R / 2}, .groups = c.groups};
  const Tensor y = g.bias_add(g.conv2d(x, w, o), g.parameter("b", {c.K}, t), 1);
  g.output(y, "y", Layout::NHWC);
  g.output(g.unary("channel_stats", y), "stats");
  return g;
}

void check_stats(const Case& c, const char* family) {
  for (DType t : kDtypes) {
    for (emu::Schedule s : kSchedules) {
      SCOPED_TRACE(fmt::format("N{} C{} {}x{} K{} G{} {} {}", c.N, c.C, c.H, c.W, c.K, c.groups, dtype_name(t),
                               emu::schedule_name(s)));
      const auto plan =
          gemm_test::expect_emu_matches_ref(stats_graph(c, t), 23, {}, family, s, testing::tolerance_for(t));
      if (!plan) continue;
      EXPECT_EQ(plan->kernel_count(), 1) << plan_to_text(*plan);  // the conv's, which also sums
      for (const Group& grp : plan->groups) {
        if (!grp.is_kernel()) continue;
        EXPECT_GE(grp.roles.reduction, 0) << plan_to_text(*plan);
      }
    }
  }
}

// A dense 3x3 conv: 2 images of 81 pixels (chunks cross images), 72 channels (a tail past the 64-wide tile).
TEST(ChannelStatsEpilogue, DenseConv) {
  check_stats({.N = 2, .C = 16, .H = 9, .W = 9, .K = 72, .groups = 1}, "conv2d");
}

// Many row tiles (3 images of 15x15 pixels: 6 tiles of 128 rows, 11 of 64), not a multiple of the four the
// last block adds at a time, and a channel tail (40 of 64).
TEST(ChannelStatsEpilogue, ManyRowTiles) {
  check_stats({.N = 3, .C = 8, .H = 15, .W = 15, .K = 40, .groups = 1, .R = 1}, "conv2d");
}

// A depthwise conv, several images per 32-row chunk (3 images of 3x3 pixels).
TEST(ChannelStatsEpilogue, DepthwiseConv) {
  check_stats({.N = 3, .C = 8, .H = 6, .W = 6, .K = 8, .groups = 8, .stride = 2}, "depthwise_conv2d");
  check_stats({}, "depthwise_conv2d");
}

// Alone (of a graph input, in either layout), the pool family's global kernel computes it from the same
// registry row.
TEST(ChannelStatsEpilogue, AloneOnThePoolFamily) {
  for (Layout layout : {Layout::NCHW, Layout::NHWC}) {
    Graph g(fmt::format("channel_stats_alone_{}", layout_name(layout)));
    const Tensor x = g.input("x", {3, 5, 7, 6}, DType::f16, layout);
    g.output(g.unary("channel_stats", g.add(x, 0.5)), "stats");  // signed values
    gemm_test::expect_emu_matches_ref(g, 31, {}, "pool", emu::Schedule::forward, testing::tolerance_for(DType::f16));
  }
}

// NVRTC compiles the statistics kernels (two terms, over all images) for sm_80 and sm_90 without spills:
// the dense and depthwise convs with it as their epilogue, and the pool family's alone.
TEST(ChannelStatsEpilogue, CompilesWithoutSpills) {
  gemm_test::expect_compiles_without_spills(
      stats_graph({.N = 2, .C = 16, .H = 9, .W = 9, .K = 72, .groups = 1}, DType::bf16));
  gemm_test::expect_compiles_without_spills(stats_graph({}, DType::f16));
  Graph g("channel_stats_alone");
  g.output(g.unary("channel_stats", g.input("x", {3, 5, 7, 6}, DType::f16, Layout::NHWC)), "stats");
  gemm_test::expect_compiles_without_spills(g);
}

}  // namespace
}  // namespace kiln
