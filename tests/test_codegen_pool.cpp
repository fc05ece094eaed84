// The pool family (codegen/family_pool.cpp, templates/kiln/pool.cuh): small graphs planned, generated, run
// in emu on random inputs and compared with the ref backend, in f32, f16 and bf16, plus randomized shapes.
// Independent cases share one graph per dtype (one host compile per plan).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <fmt/format.h>

#include "codegen/kernel.h"
#include "codegen_rows_check.h"

namespace kiln::rows_test {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

Pool2dOptions window(std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> p, bool ceil_mode = false,
                     bool include_pad = true) {
  Pool2dOptions o;
  o.kernel = std::move(k);
  o.stride = std::move(s);
  o.padding = std::move(p);
  o.ceil_mode = ceil_mode;
  o.count_include_pad = include_pad;
  return o;
}

TEST(CodegenPool, WindowPools) {
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("window_pools");
    // Max with padding after x - 0.75 (mostly negative: a padding value of 0 would win if it counted).
    g.output(g.max_pool2d(g.sub(g.input("a", {2, 3, 11, 13}, t), 0.75), window({3, 3}, {2, 2}, {1, 1})), "ya");
    // Average with padding, both divisor rules, and a trailing ReLU.
    auto b = g.input("b", {2, 3, 10, 9}, t);
    g.output(g.relu(g.avg_pool2d(b, window({3, 2}, {2, 2}, {1, 1}, false, true))), "yb1");
    g.output(g.relu(g.avg_pool2d(b, window({3, 2}, {2, 2}, {1, 1}, false, false))), "yb2");
    // ceil_mode with asymmetric padding: the last window hangs over the bottom/right edge.
    auto c = g.input("c", {1, 4, 10, 11}, t);
    const Pool2dOptions ceil_inc = window({3, 3}, {2, 2}, {1, 0, 0, 1}, true, true);
    const Pool2dOptions ceil_exc = window({3, 3}, {2, 2}, {1, 0, 0, 1}, true, false);
    g.output(g.max_pool2d(c, ceil_inc), "yc1");
    g.output(g.avg_pool2d(c, ceil_inc), "yc2");
    g.output(g.avg_pool2d(c, ceil_exc), "yc3");
    // Strides other than the kernel.
    auto d = g.input("d", {2, 5, 13, 12}, t);
    g.output(g.avg_pool2d(d, window({2, 3}, {3, 1}, {0, 1})), "yd1");
    g.output(g.max_pool2d(d, window({3, 2}, {1, 3}, {1, 0}, true)), "yd2");
    // NHWC input: neighbouring threads take neighbouring channels.
    g.output(g.max_pool2d(g.input("e", {2, 6, 9, 9}, t, Layout::NHWC), window({3, 3}, {2, 2}, {1, 1})), "ye");
    // (LayoutPolicy::nchw: the automatic policy would convert b, c and d to NHWC in kernels of their own.)
    PlanOptions o;
    o.layout = LayoutPolicy::nchw;
    expect_emu_matches_ref(g, 1, o, 9);
  }
}

TEST(CodegenPool, GlobalPoolsWithTrailingOps) {
  // 7 x 9 planes (a warp per plane), 40 x 40 (the block), and N * C >= 256 channels-last (a thread each).
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("global_pools");
    auto a = g.input("a", {2, 5, 7, 9}, t);
    g.output(g.sigmoid(g.global_avg_pool(a)), "ya1");
    g.output(g.add(g.global_max_pool(g.neg(a)), 1.0), "ya2");
    auto b = g.input("b", {1, 3, 40, 40}, t);
    g.output(g.mul(g.global_avg_pool(g.abs(b)), 3.0), "yb1");
    g.output(g.global_max_pool(b), "yb2");
    auto c = g.input("c", {2, 150, 3, 5}, t, Layout::NHWC);
    g.output(g.relu(g.global_max_pool(c)), "yc1");
    g.output(g.global_avg_pool(c), "yc2");
    PlanOptions o;
    o.layout = LayoutPolicy::nchw;
    expect_emu_matches_ref(g, 6, o, 6);
  }
}

// reduce_sum / reduce_mean over any axes whose kept dims are adjacent, as channel reductions of the view
// [reduced before, kept, reduced after, 1]: a bias gradient (every axis but the channels, NCHW and NHWC), the
// rows of a matrix, a matrix's columns with keepdims, a whole tensor to the scalar (a loss), and a reduction
// with a fused op before it (the Load functor) and after it (the Epi functor).
TEST(CodegenPool, AxisReductions) {
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("axis_reductions");
    auto a = g.input("a", {3, 5, 4, 6}, t);
    g.output(g.reduce_sum(a, {0, 2, 3}), "bias_grad");
    auto h = g.input("h", {2, 6, 3, 4}, t, Layout::NHWC);
    g.output(g.reduce_sum(h, {0, 2, 3}, true), "bias_grad_nhwc");
    auto m = g.input("m", {7, 9}, t);
    g.output(g.reduce_mean(m, {-1}), "rows");
    g.output(g.reduce_sum(m, {0}, true), "columns");
    g.output(g.mul(g.reduce_mean(g.abs(g.input("l", {4, 3, 5}, t))), 2.0), "loss");
    g.output(g.reduce_sum(g.input("k", {2, 3, 4}, t), {0, 1}), "leading");
    PlanOptions o;
    o.layout = LayoutPolicy::nchw;
    expect_emu_matches_ref(g, 11, o, 6);
  }
}

// A reduction that keeps dims that are not adjacent (axis 1 of [2, 3, 4], keeping 2 and 4) has no kernel yet:
// planning names the node. (The reference computes it: OpReference.)
TEST(CodegenPool, AxisReductionKeepingSeparateDimsIsRefusedByName) {
  Graph g("separate");
  g.output(g.reduce_sum(g.input("x", {2, 3, 4}), {1}, false, "middle"), "y");
  auto plan = plan_graph(g);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), ::testing::HasSubstr("'middle'"));
  EXPECT_THAT(plan.status().message(), ::testing::HasSubstr("not adjacent"));
}

TEST(CodegenPool, MaxPoolNaNWins) {
  // log of values in [-1, 1] is NaN for about half of them: any NaN in a window is the result (as the
  // reference's max: a NaN is never replaced), and padding never is.
  Graph g("nan_pools");
  auto x = g.input("x", {2, 3, 9, 10});
  g.output(g.max_pool2d(g.log(x), window({2, 2}, {2, 2}, {1, 1}, true)), "m");
  g.output(g.global_max_pool(g.log(g.add(x, 0.9))), "g");
  PlanOptions o;
  o.layout = LayoutPolicy::nchw;
  expect_emu_matches_ref(g, 9, o, 2);
}

TEST(CodegenPool, PolicyNhwc) {
  // LayoutPolicy::nhwc on NCHW inputs: load transforms in, store transforms out.
  Graph g("pool_policy_nhwc");
  auto x = g.input("x", {2, 6, 9, 8}, DType::f16);
  g.output(g.max_pool2d(x, window({2, 2}, {2, 2}, {0, 0})), "m");
  g.output(g.hardswish(g.global_avg_pool(x)), "a");
  PlanOptions o;
  o.layout = LayoutPolicy::nhwc;
  expect_emu_matches_ref(g, 5, o);
}

TEST(CodegenPool, RandomizedShapes) {
  // 12 configurations with odd sizes, four per dtype (one graph per dtype).
  std::mt19937_64 rng(77);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + static_cast<int>(rng() % (hi - lo + 1))); };
  for (DType t : kDTypes) {
    Graph g(fmt::format("random_{}", dtype_name(t)));
    std::string what;
    int outputs = 0;
    for (int cfg = 0; cfg < 4; ++cfg) {
      // (one draw per statement: the order in which function arguments are evaluated is unspecified)
      const int64_t kh = pick(1, 4);
      const int64_t kw = pick(1, 4);
      const int64_t n_ = pick(1, 3);
      const int64_t c_ = pick(1, 7);
      const int64_t h_ = kh + pick(0, 12);
      const int64_t w_ = kw + pick(0, 12);
      const Shape s{n_, c_, h_, w_};
      std::vector<int64_t> stride{pick(1, 3)};
      stride.push_back(pick(1, 3));
      std::vector<int64_t> pad;
      for (int64_t k : {kh, kw, kh, kw}) pad.push_back(pick(0, static_cast<int>(k / 2)));
      const bool ceil_mode = rng() % 3 == 1;
      const bool include_pad = rng() % 4 != 2;
      const Pool2dOptions o = window({kh, kw}, stride, pad, ceil_mode, include_pad);
      const bool is_max = rng() % 2;
      const bool nhwc = rng() % 3 == 0;
      // A window that does not fit is the reference's error, not a case: skip it.
      Graph probe;
      auto px = probe.input("x", s, t);
      probe.output(is_max ? probe.max_pool2d(px, o) : probe.avg_pool2d(px, o), "y");
      if (!probe.verify().ok()) continue;
      const std::string n = fmt::format("x{}", cfg);
      auto x = g.mul(g.input(n, s, t, nhwc ? Layout::NHWC : Layout::NCHW), 1.5);
      g.output(g.tanh(is_max ? g.max_pool2d(x, o) : g.avg_pool2d(x, o)), "y" + n);
      ++outputs;
      what +=
          fmt::format(" {}: {} {} {} kernel {}x{} stride {}x{} pad {},{},{},{} ceil {} include_pad {};", n,
                      is_max ? "max" : "avg", s.to_string(), nhwc ? "NHWC" : "NCHW", kh, kw, o.stride[0], o.stride[1],
                      o.padding[0], o.padding[1], o.padding[2], o.padding[3], o.ceil_mode, o.count_include_pad);
    }
    SCOPED_TRACE(std::string(dtype_name(t)) + what);
    if (outputs > 0) expect_emu_matches_ref(g, 200, {}, outputs);
  }
}

TEST(CodegenPool, VectorChannels) {
  // NHWC window pools with a run of V channels per thread (16-byte accesses; 8- or 4-byte ones when 8
  // channels do not divide C) and their per-element fallbacks, in one graph per dtype.
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("vector_pools");
    // Max with padding after a leading op, 16 channels, NHWC out.
    auto a = g.input("a", {2, 16, 9, 9}, t, Layout::NHWC);
    g.output(g.max_pool2d(g.sub(a, 0.75), window({3, 3}, {2, 2}, {1, 1})), "ya", Layout::NHWC);
    // Average (both divisor rules) with a per-channel bias before it and a residual add after it.
    auto b = g.bias_add(g.input("b", {1, 24, 8, 7}, t, Layout::NHWC), g.parameter("b.bias", {24}, t));
    const Pool2dOptions pb = window({3, 2}, {2, 2}, {1, 1}, false, false);
    g.output(g.add(g.avg_pool2d(b, pb), g.input("br", {1, 24, 4, 4}, t, Layout::NHWC)), "yb", Layout::NHWC);
    auto b2 = g.input("b2", {1, 24, 8, 7}, t, Layout::NHWC);
    g.output(g.relu(g.avg_pool2d(b2, window({2, 2}, {1, 1}, {0, 0}, true, true))), "yb2", Layout::NHWC);
    // 12 channels: chunks of 4 (8 bytes for 16-bit types).
    g.output(g.max_pool2d(g.input("c", {2, 12, 6, 6}, t, Layout::NHWC), window({2, 2}, {2, 2}, {0, 0})), "yc",
             Layout::NHWC);
    // 6 channels: pairs (4-byte accesses for 16-bit types, 8-byte for f32).
    g.output(g.max_pool2d(g.input("d", {1, 6, 7, 7}, t, Layout::NHWC), window({3, 3}, {2, 2}, {1, 1})), "yd",
             Layout::NHWC);
    // NHWC in, NCHW out: the stores are strided, per element.
    g.output(g.avg_pool2d(g.input("e", {1, 8, 6, 6}, t, Layout::NHWC), window({2, 2}, {2, 2}, {0, 0})), "ye",
             Layout::NCHW);
    PlanOptions o;
    o.layout = LayoutPolicy::nchw;  // the declared layouts, no conversion kernels
    // a, b, b2: 16 bytes; c: 4 channels; d: 2 channels; e: per element.
    const std::vector<int> want =
        t == DType::f32 ? std::vector<int>{1, 2, 4, 4, 4, 4} : std::vector<int>{1, 2, 4, 8, 8, 8};
    EXPECT_EQ(vector_widths(g, o), want);
    expect_emu_matches_ref(g, 31, o, 6);
  }
}

TEST(CodegenPool, VectorChannelsOnMisalignedPointers) {
  Graph g("misaligned");
  auto x = g.input("x", {1, 16, 7, 7}, DType::f16, Layout::NHWC);
  g.output(g.relu(g.max_pool2d(x, window({3, 3}, {2, 2}, {1, 1}))), "y", Layout::NHWC);
  PlanOptions o;
  o.layout = LayoutPolicy::nchw;
  expect_same_when_misaligned(
      g, o, [](const codegen::KernelConfig& c) { return std::get<codegen::PoolConfig>(c.detail).vec == 8; });
}

// The one pool kernel of a one-pool graph: its config and source.
std::pair<codegen::PoolConfig, std::string> pool_kernel(Graph g, const PlanOptions& o = {}) {
  EXPECT_TRUE(g.verify().ok());
  auto plan = plan_graph(g, o);
  EXPECT_TRUE(plan.ok());
  if (!plan.ok()) return {};
  for (const Group& grp : plan->groups) {
    if (grp.kind != GroupKind::pool) continue;
    auto k = codegen::generate_kernel(*plan, grp);
    auto c = codegen::plan_kernel(*plan, grp);
    EXPECT_TRUE(k.ok() && c.ok()) << k.status().message() << c.status().message();
    if (!k.ok() || !c.ok()) return {};
    return {std::get<codegen::PoolConfig>(c->detail), k->source};
  }
  return {};
}

TEST(CodegenPool, VectorPathTaken) {
  using ::testing::HasSubstr;
  using ::testing::Not;
  auto one = [](int64_t c, DType t, Layout out) {
    Graph g("one");
    g.output(g.max_pool2d(g.input("x", {2, c, 16, 16}, t, Layout::NHWC), window({3, 3}, {2, 2}, {1, 1})), "y", out);
    PlanOptions o;
    o.layout = LayoutPolicy::nchw;
    return pool_kernel(g, o);
  };
  const auto [v8, src] = one(64, DType::f16, Layout::NHWC);
  EXPECT_EQ(v8.vec, 8);
  EXPECT_TRUE(v8.channels_last);
  // The render honours the config: 16-byte accesses, no per-element store left.
  EXPECT_THAT(src, HasSubstr("kiln::ldvu<__half, 8>"));
  EXPECT_THAT(src, HasSubstr("kiln::stvu<__half, 8>"));
  EXPECT_THAT(src, Not(HasSubstr("kiln::stf(")));
  EXPECT_EQ(one(64, DType::f32, Layout::NHWC).first.vec, 4);
  EXPECT_EQ(one(60, DType::bf16, Layout::NHWC).first.vec, 4);
  EXPECT_EQ(one(6, DType::f16, Layout::NHWC).first.vec, 2);
  EXPECT_EQ(one(3, DType::f16, Layout::NHWC).first.vec, 1);
  EXPECT_EQ(one(64, DType::f16, Layout::NCHW).first.vec, 1);
}

TEST(CodegenPool, NvrtcNoSpills) {
  Graph g("pools");
  auto x = g.input("x", {8, 64, 56, 56}, DType::f16, Layout::NHWC);
  auto z = g.input("z", {8, 256, 14, 14}, DType::bf16);
  g.output(g.max_pool2d(g.relu(x), window({3, 3}, {2, 2}, {1, 1})), "m", Layout::NHWC);
  g.output(g.avg_pool2d(z, window({2, 2}, {2, 2}, {0, 0}, true, false)), "a");
  g.output(g.hardswish(g.global_avg_pool(x)), "g", Layout::NHWC);
  g.output(g.global_max_pool(z), "gm");
  // ResNet-50's stem pool at batch 32 (what kiln is measured on).
  g.output(g.max_pool2d(g.input("r", {32, 64, 112, 112}, DType::f16, Layout::NHWC), window({3, 3}, {2, 2}, {1, 1})),
           "rm", Layout::NHWC);
  PlanOptions o;
  o.layout = LayoutPolicy::nchw;  // pool kernels only (no conversion of z to NHWC)
  for (const char* arch : {"sm_80", "sm_90"}) {
    SCOPED_TRACE(arch);
    expect_compiles_without_spills(g, arch, o);
  }
}

}  // namespace
}  // namespace kiln::rows_test
