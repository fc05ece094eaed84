// The norm family (codegen/family_norm.cpp, templates/kiln/norm.cuh): small graphs planned, generated, run
// in emu on random inputs and compared with the ref backend, in f32, f16 and bf16, plus randomized shapes.
// Shapes stay small (emu runs every CUDA thread as a fiber), and each test puts its independent cases into
// one graph per dtype: one host compile per plan is what the time goes into.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>

#include <fmt/format.h>

#include "codegen/kernel.h"
#include "codegen_rows_check.h"

namespace kiln::rows_test {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

NormOptions affine(Graph& g, const std::string& name, const Shape& s, DType t, double eps = 1e-5) {
  NormOptions o;
  o.scale = g.parameter(name + ".scale", s, t);
  o.shift = g.parameter(name + ".shift", s, t);
  o.epsilon = eps;
  return o;
}

TEST(CodegenNorm, LayerAndRmsNorm) {
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("layer_rms");
    // Affine + a residual add after it (a row per part of a warp).
    auto a = g.input("a", {3, 5, 37}, t);
    g.output(g.add(g.layer_norm(a, affine(g, "a", {37}, t)), g.input("r", {3, 5, 37}, t)), "ya");
    // Two normalized dims, affine over both.
    NormOptions ob = affine(g, "b", {6, 50}, t);
    ob.normalized_ndim = 2;
    g.output(g.layer_norm(g.input("b", {4, 6, 50}, t), ob), "yb");
    // A fused leading op: (x * 2 + 1) then the norm.
    g.output(g.layer_norm(g.add(g.mul(g.input("c", {6, 45}, t), 2.0), 1.0)), "yc");
    // rms_norm with a scale only.
    NormOptions od;
    od.scale = g.parameter("d.scale", {129}, t);
    g.output(g.rms_norm(g.input("d", {7, 129}, t), od), "yd");
    // The norm's own output is a group output besides the epilogue's.
    auto e = g.layer_norm(g.input("e", {4, 33}, t));
    g.output(e, "ye");
    g.output(g.mul(g.sigmoid(e), 2.0), "ye2");
    // The norm's input read again by the epilogue (a residual of the input itself).
    auto f = g.input("f", {5, 24}, t);
    g.output(g.add(g.rms_norm(f), f), "yf");
    expect_emu_matches_ref(g, 1, {}, 6);
  }
}

TEST(CodegenNorm, LongRowsBlockAndStreamed) {
  // Rows of 1500 and 3001 values: a block per row with the row in registers; 9001: two reads of the row.
  Graph g("long_rows");
  for (int64_t cols : {1500, 3001, 9001}) {
    auto x = g.input(fmt::format("x{}", cols), {2, cols}, DType::f16);
    const std::string n = fmt::format("y{}", cols);
    if (cols == 3001) {
      NormOptions o;
      o.shift = g.parameter(n + ".shift", {cols}, DType::f16);
      g.output(g.rms_norm(x, o), n);
    } else {
      g.output(g.layer_norm(x, affine(g, n, {cols}, DType::f16)), n);
    }
  }
  g.output(g.softmax(g.mul(g.input("s", {2, 8500}, DType::f16), 3.0), 1), "ys");
  // Rank 1: one row.
  g.output(g.layer_norm(g.softmax(g.input("v", {37}, DType::f16))), "yv");
  expect_emu_matches_ref(g, 3, {}, 6);
}

TEST(CodegenNorm, Softmax) {
  // Last axis (a row per warp); inner 40 (a row per thread), inner 5 (a warp per row, strided), axis 0,
  // inner 33 with 37 values (a row per thread, streamed).
  struct Case {
    Shape s;
    int64_t axis;
  };
  const Case cases[] = {{{5, 3, 70}, -1}, {{2, 9, 40}, 1}, {{3, 20, 5}, 1}, {{6, 4, 3}, 0}, {{2, 37, 33}, 1}};
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("softmax");
    int k = 0;
    for (const Case& c : cases) {
      auto x = g.input(fmt::format("x{}", k), c.s, t);
      g.output(g.softmax(g.mul(x, 3.0), c.axis), fmt::format("y{}", k++));
    }
    expect_emu_matches_ref(g, 7, {}, 5);
  }
}

TEST(CodegenNorm, GroupAndInstanceNorm) {
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("group_norms");
    // NCHW, + SiLU.
    g.output(g.silu(g.group_norm(g.input("a", {2, 12, 9, 7}, t), 3, affine(g, "a", {12}, t))), "ya");
    // NHWC in and out, a leading op: a group's channels are walked fastest.
    auto b = g.mul(g.input("b", {2, 16, 11, 13}, t, Layout::NHWC), 2.0);
    g.output(g.silu(g.group_norm(b, 4, affine(g, "b", {16}, t))), "yb", Layout::NHWC);
    // NHWC, rows of 8 x 1200 values: two reads.
    g.output(g.group_norm(g.input("c", {1, 16, 30, 40}, t, Layout::NHWC), 2), "yc");
    // instance_norm + ReLU, after a per-channel add (a broadcast operand in the Load functor).
    auto d = g.add(g.input("d", {2, 5, 6, 7}, t), g.parameter("d.bias", {5, 1, 1}, t));
    g.output(g.relu(g.instance_norm(d, affine(g, "d", {5}, t))), "yd");
    expect_emu_matches_ref(g, 8, {}, 4);
  }
}

// The config of the one norm kernel of a one-norm graph.
codegen::NormConfig norm_cfg(Graph g) {
  EXPECT_TRUE(g.verify().ok());
  auto plan = plan_graph(g);
  EXPECT_TRUE(plan.ok());
  if (!plan.ok()) return {};
  const auto cs = testing::details_of<codegen::NormConfig>(*plan);
  EXPECT_EQ(cs.size(), 1u);
  return cs.empty() ? codegen::NormConfig{} : cs[0];
}

// The thread mapping of a norm kernel: V, TPR, BLOCK, K.
struct Mapping {
  int v, tpr, block, k;
  bool operator==(const Mapping&) const = default;
  friend std::ostream& operator<<(std::ostream& o, const Mapping& m) {
    return o << "V = " << m.v << ", TPR = " << m.tpr << ", BLOCK = " << m.block << ", K = " << m.k;
  }
};
Mapping mapping(const codegen::NormConfig& c) { return {c.vec, c.threads_per_row, c.block, c.cached_chunks}; }

// Group norm over NHWC with a group under 32 bytes a pixel: IL neighbouring groups on neighbouring threads
// (NormConfig::interleave), in each mapping: rows in part of a warp (TPR x IL < 32 and = 32), a block of IL
// rows kept in shared memory, a block of IL rows streamed (Welford, two reads); and groups that IL does not
// divide (no interleaving).
TEST(CodegenNorm, InterleavedGroupsOverChannelsLast) {
  struct Case {
    Shape shape;
    int64_t groups;
    bool leading_op;  // a mul before the norm: f32 shared-memory copies, or none when too long
    int il16, il32;   // the interleave expected for 16-bit and f32 inputs
  };
  const Case cases[] = {
      {{2, 64, 4, 4}, 32, false, 8, 4},    // 2 channels a group: 4 or 8 bytes a pixel; warp rows
      {{2, 32, 5, 3}, 16, false, 8, 4},    // 15 pixels: rows in part of a warp
      {{1, 32, 40, 40}, 4, false, 2, 1},   // 8 channels (16 or 32 bytes): a block of rows in shared memory
      {{1, 16, 100, 100}, 2, true, 2, 1},  // 80000 values a row after a mul: streamed, read twice
      {{2, 24, 6, 6}, 3, false, 1, 1},     // 3 groups: 2 does not divide them
  };
  uint64_t seed = 40;
  for (DType t : kDTypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} {} groups {}", dtype_name(t), c.shape.to_string(), c.groups));
      Graph g("interleaved");
      Tensor x = g.input("x", c.shape, t, Layout::NHWC);
      if (c.leading_op) x = g.mul(x, 2.0);
      g.output(g.silu(g.group_norm(x, c.groups, affine(g, "x", {c.shape[1]}, t))), "y", Layout::NHWC);
      const codegen::NormConfig nc = norm_cfg(g);
      EXPECT_EQ(nc.interleave, t == DType::f32 ? c.il32 : c.il16) << mapping(nc);
      expect_emu_matches_ref(g, seed++, {}, 1);
    }
  }
}

TEST(CodegenNorm, GroupNormLargeRowsNchwAndPolicyNhwc) {
  // 32 groups over 64 channels x 32 x 32: rows of 2048 values, a block-wide reduction.
  Graph g("gn_large");
  auto x = g.input("x", {1, 64, 32, 32}, DType::f16);
  g.output(g.silu(g.group_norm(x, 32, affine(g, "x", {64}, DType::f16))), "y");
  expect_emu_matches_ref(g, 9, {}, 1);
  // LayoutPolicy::nhwc on an NCHW input: read through a load transform, written through a store transform.
  Graph h("gn_policy_nhwc");
  auto z = h.input("z", {2, 8, 5, 7}, DType::bf16);
  h.output(h.mul(h.group_norm(h.add(z, 0.5), 2), 3.0), "y");
  PlanOptions o;
  o.layout = LayoutPolicy::nhwc;
  expect_emu_matches_ref(h, 12, o);
}

TEST(CodegenNorm, RandomizedShapes) {
  // 12 configurations with odd sizes, four per dtype (one graph per dtype).
  std::mt19937_64 rng(2024);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(lo + static_cast<int>(rng() % (hi - lo + 1))); };
  for (DType t : kDTypes) {
    Graph g(fmt::format("random_{}", dtype_name(t)));
    std::string what;
    for (int cfg = 0; cfg < 4; ++cfg) {
      const int op = static_cast<int>(rng() % 5);
      const std::string n = fmt::format("x{}", cfg);
      Tensor y;
      if (op == 0 || op == 1) {
        const int64_t d0 = pick(1, 5);
        const int64_t d1 = pick(2, 7);
        const Shape s{d0, d1, pick(3, 900)};
        NormOptions o = affine(g, n, {s[2]}, t, 1e-3);
        y = op == 0 ? g.layer_norm(g.input(n, s, t), o) : g.rms_norm(g.input(n, s, t), o);
        what += fmt::format(" {}: {} {};", n, op == 0 ? "layer_norm" : "rms_norm", s.to_string());
      } else if (op == 2) {
        const int64_t d0 = pick(1, 4);
        const int64_t d1 = pick(2, 40);
        const Shape s{d0, d1, pick(1, 50)};
        const int64_t axis = pick(0, 2);
        y = g.softmax(g.input(n, s, t), axis);
        what += fmt::format(" {}: softmax {} axis {};", n, s.to_string(), axis);
      } else {
        const int64_t groups = pick(1, 4);
        const int64_t d0 = pick(1, 3);
        const int64_t d1 = groups * pick(1, 5);
        const int64_t d2 = pick(1, 12);
        const Shape s{d0, d1, d2, pick(1, 13)};
        const bool nhwc = rng() % 2;
        auto x = g.input(n, s, t, nhwc ? Layout::NHWC : Layout::NCHW);
        y = op == 3 ? g.group_norm(x, groups, affine(g, n, {s[1]}, t)) : g.instance_norm(x);
        what += fmt::format(" {}: {} {} groups {} {};", n, op == 3 ? "group_norm" : "instance_norm", s.to_string(),
                            groups, nhwc ? "NHWC" : "NCHW");
      }
      g.output(g.tanh(y), "y" + n);
    }
    SCOPED_TRACE(std::string(dtype_name(t)) + what);
    expect_emu_matches_ref(g, 100, {}, 4);
  }
}

TEST(CodegenNorm, VectorRows) {
  // Rows moved in chunks of V columns (16-byte accesses; 8- or 4-byte ones where 16 do not divide the row) and
  // their per-element fallbacks, side by side in one graph per dtype. CodegenNorm.VectorPathTaken checks
  // which path each kind of case takes.
  for (DType t : kDTypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("vector_rows");
    // A row per warp, affine and a residual add (every operand contiguous along the row).
    auto a = g.input("a", {5, 64}, t);
    g.output(g.add(g.layer_norm(a, affine(g, "a", {64}, t)), g.input("ar", {5, 64}, t)), "ya");
    // A block per row (1024 values), rms_norm with a scale, then a trailing op; its own output stored too.
    NormOptions ob;
    ob.scale = g.parameter("b.scale", {1024}, t);
    auto bn = g.rms_norm(g.input("b", {3, 1024}, t), ob);
    g.output(bn, "yb");
    g.output(g.gelu(bn), "yb2");
    // Softmax over the last axis after a leading op with an operand broadcast along the row ([4, 1]: one
    // value a chunk).
    g.output(g.softmax(g.mul(g.input("c", {4, 136}, t), g.input("cs", {4, 1}, t))), "yc");
    // 100 values: 8 do not divide it (half a 16-byte access for 16-bit types), 4 do.
    g.output(g.layer_norm(g.input("d", {3, 100}, t), affine(g, "d", {100}, t)), "yd");
    // 37 values: per element.
    g.output(g.layer_norm(g.input("e", {4, 37}, t)), "ye");
    // Two normalized dims whose last (12) is no multiple of 8: chunks of 4 (8-byte accesses for 16-bit types).
    NormOptions of = affine(g, "f", {3, 12}, t);
    of.normalized_ndim = 2;
    g.output(g.layer_norm(g.input("f", {2, 3, 12}, t), of), "yf");
    // Group norm over NHWC, 8 channels a group: chunks of a group's channels; a per-channel bias before it.
    auto h = g.bias_add(g.input("h", {2, 16, 5, 7}, t, Layout::NHWC), g.parameter("h.bias", {16}, t));
    g.output(g.silu(g.group_norm(h, 2, affine(g, "h", {16}, t))), "yh", Layout::NHWC);
    // Group norm over NCHW with W = 16: chunks along W.
    g.output(g.group_norm(g.input("k", {2, 8, 3, 16}, t), 4, affine(g, "k", {8}, t)), "yk");
    // Softmax over the last axis of an NHWC tensor: W is strided in memory, per element.
    g.output(g.softmax(g.input("m", {2, 3, 4, 8}, t, Layout::NHWC)), "ym", Layout::NHWC);
    // Pairs (4-byte accesses for 16-bit types, 8-byte for f32): group norm over NHWC with 2 and 10
    // channels a group (GroupNorm(32) of 64 or 320 channels), a layer norm row of 6.
    g.output(g.silu(g.group_norm(g.input("p", {2, 8, 5, 7}, t, Layout::NHWC), 4, affine(g, "p", {8}, t))), "yp",
             Layout::NHWC);
    g.output(g.group_norm(g.input("q", {2, 20, 3, 5}, t, Layout::NHWC), 2), "yq", Layout::NHWC);
    g.output(g.layer_norm(g.input("s", {5, 6}, t), affine(g, "s", {6}, t)), "ys");
    PlanOptions o;
    o.layout = LayoutPolicy::nchw;  // the declared layouts, no conversion kernels
    // a, b, c, h, k: 16 bytes; d, f: 4 values; p, q, s: 2 values; e, m: per element.
    const std::vector<int> want = t == DType::f32 ? std::vector<int>{1, 1, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4}
                                                  : std::vector<int>{1, 1, 2, 2, 2, 4, 4, 8, 8, 8, 8, 8};
    EXPECT_EQ(vector_widths(g, o), want);
    expect_emu_matches_ref(g, 21, o, 12);
  }
}

TEST(CodegenNorm, LongRowsInSharedMemory) {
  // Rows too long for registers, a block per row: kept in shared memory in the input's type (no leading
  // op), in f32 (after a leading op), and too long for shared memory (two reads); vector and per element.
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("long_rows_smem");
    // 20000 values: shared memory as the input type (f32 80 KB, bf16 40 KB).
    g.output(g.layer_norm(g.input("a", {2, 20000}, t), affine(g, "a", {20000}, t)), "ya");
    // 9001 values (per element), after a leading op: shared memory as f32.
    g.output(g.softmax(g.add(g.input("b", {2, 9001}, t), 0.5)), "yb");
    // 26000 values after a leading op: 104 KB of f32, more than a block keeps: two reads.
    g.output(g.rms_norm(g.mul(g.input("c", {2, 26000}, t), 2.0)), "yc");
    // Group norm over NHWC, rows of 8 channels x 4096: bf16 in shared memory, f32 (128 KB) read twice.
    g.output(g.silu(g.group_norm(g.input("d", {1, 16, 64, 64}, t, Layout::NHWC), 2)), "yd", Layout::NHWC);
    PlanOptions o;
    o.layout = LayoutPolicy::nchw;
    expect_emu_matches_ref(g, 22, o, 4);
  }
}

TEST(CodegenNorm, MovingStoresStayPerElement) {
  // A transposing or reshaping store after the norm moves each value's coordinate: such a group keeps the
  // per-element functors even where the row itself would allow chunks.
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("moving_stores");
    g.output(g.transpose(g.layer_norm(g.input("a", {4, 64}, t)), {1, 0}), "ya");
    g.output(g.reshape(g.relu(g.rms_norm(g.input("b", {4, 64}, t))), {16, 16}), "yb");
    EXPECT_EQ(vector_widths(g), (std::vector<int>{1, 1}));
    expect_emu_matches_ref(g, 23, {}, 2);  // the stores fused into the norms' kernels
  }
}

TEST(CodegenNorm, VectorRowsOnMisalignedPointers) {
  // A row per warp and a block per row with the row in shared memory, each with loads and stores through
  // the vector forms.
  Graph g("misaligned");
  auto x = g.input("x", {6, 64}, DType::bf16);
  g.output(g.add(g.layer_norm(x, affine(g, "x", {64}, DType::bf16)), g.input("r", {6, 64}, DType::bf16)), "y");
  expect_same_when_misaligned(g, {}, [](const codegen::KernelConfig& c) {
    const auto& n = std::get<codegen::NormConfig>(c.detail);
    return n.vec == 8 && n.threads_per_row == 8;
  });
  Graph h("misaligned_smem");
  h.output(h.softmax(h.input("s", {2, 40000}, DType::f16)), "ys");
  expect_same_when_misaligned(
      h, {}, [](const codegen::KernelConfig& c) { return std::get<codegen::NormConfig>(c.detail).smem_row; });
  Graph p("misaligned_pairs");  // 4-byte accesses: 2 channels a group over NHWC
  p.output(p.group_norm(p.input("p", {2, 16, 5, 5}, DType::f16, Layout::NHWC), 8), "yp", Layout::NHWC);
  PlanOptions o;
  o.layout = LayoutPolicy::nchw;
  expect_same_when_misaligned(p, o, [](const codegen::KernelConfig& c) {
    const auto& n = std::get<codegen::NormConfig>(c.detail);
    return n.channel_group == 2 && n.vec == 2;
  });
}

TEST(CodegenNorm, MappingByShapeAndLayout) {
  auto one = [](Shape s, auto build, Layout layout = Layout::NCHW) {
    Graph g("one");
    const std::optional<Layout> l = s.rank() == 4 ? std::optional<Layout>(layout) : std::nullopt;
    auto x = g.input("x", s, DType::f16, l);
    g.output(build(g, x), "y", l);
    return norm_cfg(g);
  };
  auto ln = [](Graph& g, Tensor x) { return g.layer_norm(x); };
  // f16 rows of multiples of 8 values: chunks of 8 (16-byte accesses).
  EXPECT_EQ(mapping(one({64, 512}, ln)), (Mapping{8, 32, 128, 2}));  // a warp per row
  EXPECT_EQ(mapping(one({64, 16}, ln)), (Mapping{8, 2, 128, 1}));
  EXPECT_EQ(mapping(one({8192, 4096}, ln)), (Mapping{8, 256, 256, 2}));  // a block per row
  EXPECT_EQ(mapping(one({16, 1536}, ln)), (Mapping{8, 256, 256, 1}));    // few rows
  EXPECT_EQ(mapping(one({300, 16384}, ln)), (Mapping{8, 1024, 1024, 2}));
  // Longer: streamed, kept in shared memory (f16, 16384 * 2 bytes... up to 96 KB).
  EXPECT_EQ(mapping(one({300, 32768}, ln)), (Mapping{8, 1024, 1024, 0}));
  EXPECT_TRUE(one({300, 32768}, ln).smem_row);
  EXPECT_TRUE(one({300, 65536}, ln).smem_row);    // 128 KB: what an H200 grants one block, less 4 KB
  EXPECT_FALSE(one({300, 131072}, ln).smem_row);  // 256 KB: read twice
  // Rows that no 16-byte chunk divides: per element, the earlier mapping.
  EXPECT_EQ(mapping(one({64, 20}, ln)), (Mapping{4, 8, 128, 1}));  // 8-byte chunks
  EXPECT_EQ(mapping(one({64, 5}, ln)), (Mapping{1, 8, 128, 1}));   // a quarter warp
  EXPECT_EQ(mapping(one({64, 511}, ln)), (Mapping{1, 32, 128, 16}));
  // A block per row: few rows get big blocks; rows in registers up to 8 values a thread, else two reads.
  EXPECT_EQ(mapping(one({16, 1535}, ln)), (Mapping{1, 512, 512, 3}));
  EXPECT_EQ(mapping(one({300, 1535}, ln)), (Mapping{1, 256, 256, 6}));
  EXPECT_EQ(mapping(one({8, 8191}, ln)), (Mapping{1, 1024, 1024, 8}));
  EXPECT_EQ(mapping(one({8, 8193}, ln)), (Mapping{1, 1024, 1024, 0}));
  EXPECT_EQ(mapping(one({300, 4097}, ln)), (Mapping{1, 512, 512, 0}));
  auto sm1 = [](Graph& g, Tensor x) { return g.softmax(x, 1); };
  {
    const codegen::NormConfig c = one({8, 64, 256}, sm1);
    EXPECT_EQ(mapping(c), (Mapping{1, 1, 128, 0}));
    EXPECT_EQ(c.inner, 256);
    EXPECT_EQ(c.channel_group, 0);
  }
  {
    const codegen::NormConfig c = one({8, 12, 256}, sm1);
    EXPECT_EQ(mapping(c), (Mapping{1, 1, 128, 12}));
    EXPECT_EQ(c.inner, 256);
    EXPECT_EQ(c.channel_group, 0);
  }
  auto sm = [](Graph& g, Tensor x) { return g.softmax(x); };
  EXPECT_EQ(mapping(one({8192, 4096}, sm)), (Mapping{8, 256, 256, 2}));
  auto gn = [](Graph& g, Tensor x) { return g.group_norm(x, 32); };
  {
    const codegen::NormConfig c = one({2, 64, 32, 32}, gn);
    EXPECT_EQ(mapping(c), (Mapping{8, 256, 256, 1}));
    EXPECT_EQ(c.inner, 1);
    EXPECT_EQ(c.channel_group, 0);
    EXPECT_EQ(c.cols, 2048);
  }
  // GroupNorm(32, 64) over NHWC: a group's 2 channels per pixel, read in pairs (4-byte accesses).
  {
    const codegen::NormConfig c = one({2, 64, 32, 32}, gn, Layout::NHWC);
    EXPECT_EQ(c.vec, 2);
    EXPECT_EQ(c.inner, 1);
    EXPECT_EQ(c.channel_group, 2);
    EXPECT_EQ(c.cols, 2048);
    EXPECT_EQ(c.interleave, 8);  // 4 bytes a group and pixel: 8 groups fill a sector
  }
  auto gn8 = [](Graph& g, Tensor x) { return g.silu(g.group_norm(x, 32)); };
  // ResNet-50 sized group norm over NHWC: chunks of a group's 8 channels (16 bytes), two neighbouring groups
  // a block (so a warp's reads of a pixel are whole sectors), their rows (2 x 25088 values) kept in shared
  // memory as f16.
  const codegen::NormConfig big = one({32, 256, 56, 56}, gn8, Layout::NHWC);
  EXPECT_EQ(big.cache_dtype, DType::f16);
  EXPECT_EQ(big.cols, 25088);
  EXPECT_EQ(big.channel_group, 8);
  EXPECT_EQ(big.interleave, 2);
  EXPECT_EQ(mapping(big), (Mapping{8, 512, 1024, 0}));
  EXPECT_TRUE(big.smem_row);
  auto in = [](Graph& g, Tensor x) { return g.instance_norm(g.mul(x, 2.0)); };
  {
    const codegen::NormConfig c = one({2, 64, 7, 7}, in, Layout::NHWC);
    EXPECT_EQ(c.vec, 1);
    EXPECT_EQ(c.inner, 1);
    EXPECT_EQ(c.channel_group, 0);
    EXPECT_EQ(c.cols, 49);
  }
}

TEST(CodegenNorm, VectorPathTaken) {
  // The generated source of a vectorized row: 16-byte loads and stores through the functors' vec forms,
  // and no per-element access left.
  Graph g("vec_source");
  auto x = g.input("x", {64, 256}, DType::bf16);
  NormOptions o = affine(g, "x", {256}, DType::bf16);
  g.output(g.add(g.layer_norm(g.mul(x, 2.0), o), g.input("r", {64, 256}, DType::bf16)), "y");
  ASSERT_TRUE(g.verify().ok());
  auto plan = plan_graph(g);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->kernel_count(), 1);
  for (const Group& grp : plan->groups) {
    if (!grp.is_kernel()) continue;
    auto k = codegen::generate_kernel(*plan, grp);
    ASSERT_TRUE(k.ok()) << k.status().message();
    using ::testing::HasSubstr;
    using ::testing::Not;
    auto c = codegen::plan_kernel(*plan, grp);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(std::get<codegen::NormConfig>(c->detail).vec, 8);
    // The render honours the config: 16-byte accesses, no per-element store left.
    EXPECT_THAT(k->source, HasSubstr("kiln::ldvu<__nv_bfloat16, 8>"));
    EXPECT_THAT(k->source, HasSubstr("kiln::stvu<__nv_bfloat16, 8>"));
    EXPECT_THAT(k->source, Not(HasSubstr("kiln::stf(")));
  }
}

TEST(CodegenNorm, NvrtcNoSpills) {
  // One kernel of each mapping at realistic sizes: a row per warp, per block (cached, in shared memory and
  // streamed), per thread; group norm over NHWC; the shapes kiln is measured on (layer norm and softmax of
  // [8192, 4096], ResNet-50's group norm + SiLU).
  Graph g("mappings");
  auto a = g.input("a", {64, 512}, DType::f16);
  auto b = g.input("b", {16, 1536}, DType::bf16);
  auto c = g.input("c", {8, 8192});
  auto d = g.input("d", {8, 64, 256});
  auto e = g.input("e", {2, 64, 32, 32}, DType::f16, Layout::NHWC);
  g.output(g.layer_norm(g.mul(a, 2.0), affine(g, "a", {512}, DType::f16)), "ya");
  NormOptions ob;
  ob.scale = g.parameter("sb", {1536}, DType::bf16);
  g.output(g.gelu(g.rms_norm(b, ob)), "yb");
  g.output(g.softmax(c), "yc");
  g.output(g.softmax(d, 1), "yd");
  g.output(g.silu(g.group_norm(e, 32, affine(g, "e", {64}, DType::f16))), "ye", Layout::NHWC);
  g.output(g.layer_norm(g.input("f", {8192, 4096}, DType::f16), affine(g, "f", {4096}, DType::f16)), "yf");
  g.output(g.softmax(g.input("h", {8192, 4096}, DType::f16)), "yh");
  g.output(g.layer_norm(g.input("k", {8192, 4096}), affine(g, "k", {4096}, DType::f32)), "yk");
  auto m = g.input("m", {32, 256, 56, 56}, DType::f16, Layout::NHWC);
  g.output(g.silu(g.group_norm(m, 32, affine(g, "m", {256}, DType::f16))), "ym", Layout::NHWC);
  g.output(g.layer_norm(g.input("n", {64, 50000}, DType::bf16)), "yn");  // streamed: too long for shared memory
  for (const char* arch : {"sm_80", "sm_90"}) {
    SCOPED_TRACE(arch);
    expect_compiles_without_spills(g, arch);
  }
}

}  // namespace
}  // namespace kiln::rows_test
