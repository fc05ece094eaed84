// Batch-generic kernels (docs/architecture.md, "Batch-generic kernels"): a conv, pool or 2-D matmul kernel
// leaves the batch out of its source and takes it as an int parameter, so the plans of one graph at several batches
// share one source (one compile, one cache entry), and that one source is right at each batch. A graph with
// a symbolic batch is bound at several batches; each plan runs on the test device against ref on random
// inputs, and the kernels of its conv and pool groups are compared across the batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "codegen/family_gemm.h"
#include "codegen/kernel.h"
#include "codegen_check.h"
#include "kiln/profile.h"

namespace kiln {
namespace {

// Per group kind, the sources of a plan's kernels of that kind (conv groups, pool groups).
std::map<GroupKind, std::set<std::string>> sources_by_kind(const Plan& plan) {
  std::map<GroupKind, std::set<std::string>> out;
  for (const Group& grp : plan.groups) {
    if (grp.kind != GroupKind::conv && grp.kind != GroupKind::pool) continue;
    auto k = codegen::generate_kernel(plan, grp);
    EXPECT_TRUE(k.ok()) << k.status().message();
    if (k.ok()) out[grp.kind].insert(k->source);
  }
  return out;
}

// A stem-like block with a symbolic batch N in [1, 8]: a dense 3x3 conv with batch norm and ReLU, a max pool,
// a depthwise 3x3 conv, and a strided 1x1 conv with a residual add of a second strided conv.
Graph block(DType t) {
  Graph g("batch_generic");
  const DimExpr n = g.dim("N", 1, 8);
  const Tensor x = g.symbolic_input("x", {n, 8, 12, 12}, t);
  const auto channel = [&](const std::string& name, int64_t c) { return g.parameter(name, {c}, t); };
  Conv2dOptions pad1;
  pad1.padding = {1, 1};
  Tensor y = g.conv2d(x, g.parameter("w1", {16, 8, 3, 3}, t), pad1);
  y = g.relu(g.batch_norm(y, channel("s", 16), channel("b", 16), channel("m", 16), channel("v", 16)));
  Pool2dOptions pool;
  pool.kernel = {3, 3}, pool.stride = {1, 1}, pool.padding = {1, 1};
  y = g.max_pool2d(y, pool);
  Conv2dOptions dw = pad1;
  dw.groups = 16;
  y = g.relu(g.conv2d(y, g.parameter("wd", {16, 1, 3, 3}, t), dw));
  Conv2dOptions s2;
  s2.stride = {2, 2};
  const Tensor a = g.conv2d(y, g.parameter("wa", {24, 16, 1, 1}, t), channel("ba", 24), s2);
  const Tensor b = g.conv2d(x, g.parameter("wb", {24, 8, 1, 1}, t), s2);
  g.output(g.relu(g.add(a, b)), "y");
  return g;
}

TEST(CodegenBatch, OneConvAndPoolSourceServesEveryBatch) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    const Graph g = block(t);
    ASSERT_TRUE(g.is_symbolic());
    std::map<GroupKind, std::set<std::string>> first;
    for (int64_t n : {2, 3, 5}) {
      SCOPED_TRACE("N = " + std::to_string(n));
      Result<Graph> bound = g.bind({{"N", n}});
      ASSERT_TRUE(bound.ok()) << bound.status().message();
      const testing::CheckResult cr = testing::expect_plan_matches_ref(*bound, t, 40 + static_cast<uint64_t>(n));
      const auto sources = sources_by_kind(cr.plan);
      ASSERT_EQ(sources.count(GroupKind::conv), 1u);
      ASSERT_EQ(sources.count(GroupKind::pool), 1u);
      // Every conv kernel takes the batch as an argument: no batch in its Cfg (a shape-generic one has no
      // size at all: tests/test_codegen_shape_generic.cpp).
      for (const std::string& src : sources.at(GroupKind::conv)) {
        EXPECT_TRUE(src.find("NMAX = ") != std::string::npos ||
                    src.find("conv2d_implicit_gemm_generic") != std::string::npos)
            << src;
        EXPECT_EQ(src.find(" N = "), std::string::npos) << src;
      }
      if (first.empty()) {
        first = sources;
      } else {
        EXPECT_EQ(sources.at(GroupKind::conv), first.at(GroupKind::conv)) << "a conv kernel's source depends on N";
        EXPECT_EQ(sources.at(GroupKind::pool), first.at(GroupKind::pool)) << "a pool kernel's source depends on N";
      }
    }
  }
}

// Batch 1 (every tensor's dim 0 is 1: nothing to tell a batch from a broadcast) and the range's top.
TEST(CodegenBatch, EndsOfTheRangeMatchReference) {
  const Graph g = block(DType::f32);
  for (int64_t n : {1, 8}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    Result<Graph> bound = g.bind({{"N", n}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    testing::expect_plan_matches_ref(*bound, DType::f32, 60 + static_cast<uint64_t>(n));
  }
}

// A conv with a reduction epilogue (its per-image sums) and a global pool take the batch as an argument too:
// one source for batches 2 and 3, each right against ref. (The pool runs alone: its input is a graph input.)
TEST(CodegenBatch, ReductionEpilogueAndGlobalPoolServeEveryBatch) {
  Graph g("reduced");
  const DimExpr n = g.dim("N", 1, 4);
  const Tensor x = g.symbolic_input("x", {n, 16, 8, 8});
  g.output(g.global_avg_pool(g.relu(g.conv2d(x, g.parameter("w", {32, 16, 1, 1})))), "y");
  g.output(g.global_avg_pool(x), "pooled");
  std::map<GroupKind, std::set<std::string>> first;
  for (int64_t b : {2, 3}) {
    Result<Graph> bound = g.bind({{"N", b}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    const testing::CheckResult cr = testing::expect_plan_matches_ref(*bound, DType::f32, 70 + static_cast<uint64_t>(b));
    bool reduced = false;
    for (const Group& grp : cr.plan.groups)
      reduced = reduced || (grp.kind == GroupKind::conv && grp.roles.reduction >= 0);
    ASSERT_TRUE(reduced) << plan_to_text(cr.plan);
    const auto sources = sources_by_kind(cr.plan);
    ASSERT_EQ(sources.count(GroupKind::pool), 1u) << plan_to_text(cr.plan);
    if (first.empty()) {
      first = sources;
    } else {
      EXPECT_EQ(sources, first) << "a kernel's source depends on N";
    }
  }
}

// A 2-D matmul's rows are its batch: one tiled kernel (more than 8 rows; fewer take the skinny kernel, made
// for its rows) for 9, 12 and 20 rows, with a bias and a ReLU, each right against ref.
TEST(CodegenBatch, MatmulRowsServeEveryBatch) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("linear");
    const DimExpr n = g.dim("N", 1, 64);
    const Tensor x = g.symbolic_input("x", {n, 40}, t);
    g.output(g.relu(g.matmul(x, g.parameter("w", {40, 72}, t), g.parameter("b", {72}, t))), "y");
    std::set<std::string> sources;
    for (int64_t rows : {9, 12, 20}) {
      Result<Graph> bound = g.bind({{"N", rows}});
      ASSERT_TRUE(bound.ok()) << bound.status().message();
      const testing::CheckResult cr = testing::expect_plan_matches_ref(*bound, t, 80 + static_cast<uint64_t>(rows));
      for (const Group& grp : cr.plan.groups) {
        if (grp.kind != GroupKind::matmul) continue;
        auto k = codegen::generate_kernel(cr.plan, grp);
        ASSERT_TRUE(k.ok()) << k.status().message();
        EXPECT_EQ(k->family, KernelFamilyId::matmul);
        EXPECT_TRUE(std::any_of(k->params.begin(), k->params.end(), [](const auto& p) { return p.is_batch(); }));
        sources.insert(k->source);
      }
    }
    EXPECT_EQ(sources.size(), 1u) << "the matmul kernel's source depends on its rows";
  }
}

// Norms whose rows run over the batch outermost (a layer norm over the last dim, a group norm, a softmax
// along the last axis) and pointwise groups (the flat path, and the general path of a broadcasting group
// walking dim 0 outermost) take the batch as an argument: one source per
// group for batches 2, 3 and 5, each right against ref. A softmax along dim 0 normalizes across the batch:
// made for its batch, so its source differs.
TEST(CodegenBatch, NormsAndPointwiseGroupsServeEveryBatch) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g("rows");
    const DimExpr n = g.dim("N", 1, 8);
    const Tensor x = g.symbolic_input("x", {n, 6, 40}, t);
    const Tensor ln = g.layer_norm(x, {.scale = g.parameter("s", {40}, t), .shift = g.parameter("b", {40}, t)});
    g.output(g.softmax(g.gelu(ln)), "y");  // layer norm, then GELU and softmax: a norm group each
    const Tensor img = g.symbolic_input("img", {n, 8, 5, 5}, t);
    g.output(g.silu(g.group_norm(img, 4)), "z");
    g.output(g.add(g.mul(g.symbolic_input("u", {n, 7, 9}, t), 0.5), g.symbolic_input("v", {n, 7, 9}, t)), "w");
    // Broadcasting: the general path, walking dim 0 outermost.
    g.output(g.sub(g.mul(g.symbolic_input("p", {n, 5, 6}, t), g.parameter("scale", {5, 1}, t)), 1.0), "bc");
    g.output(g.softmax(g.symbolic_input("q", {n, 3}, t), 0), "across");
    std::map<std::string, std::set<std::string>> sources;  // by the group's first node's name
    std::set<std::string> generic;
    for (int64_t b : {2, 3, 5}) {
      SCOPED_TRACE("N = " + std::to_string(b));
      Result<Graph> bound = g.bind({{"N", b}});
      ASSERT_TRUE(bound.ok()) << bound.status().message();
      const testing::CheckResult cr = testing::expect_plan_matches_ref(*bound, t, 90 + static_cast<uint64_t>(b));
      for (const Group& grp : cr.plan.groups) {
        if (!grp.is_kernel()) continue;
        auto k = codegen::generate_kernel(cr.plan, grp);
        ASSERT_TRUE(k.ok()) << k.status().message();
        const std::string name = cr.plan.graph.node(grp.nodes.front()).name;
        sources[name].insert(k->source);
        if (std::any_of(k->params.begin(), k->params.end(), [](const auto& p) { return p.is_batch(); }))
          generic.insert(name);
      }
    }
    ASSERT_EQ(sources.size(), 6u);
    for (const auto& [name, srcs] : sources) {
      const bool across = srcs.begin()->find("STAT = 2") != std::string::npos && generic.count(name) == 0;
      if (across) {
        EXPECT_EQ(srcs.size(), 3u) << name << ": the softmax across the batch is made for its batch";
      } else {
        EXPECT_TRUE(generic.count(name)) << name << " takes no batch argument";
        EXPECT_EQ(srcs.size(), 1u) << name << ": its source depends on N";
      }
    }
    EXPECT_EQ(generic.size(), 5u);
  }
}

// The data family's kernels take the batch as an argument where dim 0 is outermost in their walk: a layout
// conversion (NCHW -> NHWC for a conv, and back), a tiled transpose, a slice, an upsample and a reshape of a
// transposed view. One source for batches 1, 2 and 5, each right against ref.
TEST(CodegenBatch, DataKernelsServeEveryBatch) {
  Graph g("data");
  const DimExpr n = g.dim("N", 1, 8);
  const Tensor x = g.symbolic_input("x", {n, 8, 6, 6});
  g.output(g.relu(g.conv2d(x, g.parameter("w", {8, 8, 3, 3}), {.padding = {1, 1}})), "conv");
  g.output(g.relu(g.transpose(g.symbolic_input("t", {n, 5, 33}), {0, 2, 1})), "transposed");
  g.output(g.slice(g.symbolic_input("s", {n, 6, 10}), {0, 1, 0}, {1 << 30, 5, 10}, {1, 1, 2}), "sliced");
  g.output(g.upsample2d(g.symbolic_input("u", {n, 2, 3, 3}), {.scale = {2.0, 2.0}}), "up");
  g.output(g.reshape(g.transpose(g.symbolic_input("r", {n, 4, 6}), {0, 2, 1}), {-1, 24}), "flat");
  std::map<std::string, std::set<std::string>> sources;  // data kernels by their op's node name
  for (int64_t b : {1, 2, 5}) {
    SCOPED_TRACE("N = " + std::to_string(b));
    Result<Graph> bound = g.bind({{"N", b}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    const testing::CheckResult cr =
        testing::expect_plan_matches_ref(*bound, DType::f32, 120 + static_cast<uint64_t>(b));
    for (const Group& grp : cr.plan.groups) {
      if (!grp.is_kernel() || grp.family != KernelFamilyId::data) continue;
      auto k = codegen::generate_kernel(cr.plan, grp);
      ASSERT_TRUE(k.ok()) << k.status().message();
      const std::string name = cr.plan.graph.node(grp.nodes.front()).name;
      EXPECT_TRUE(std::any_of(k->params.begin(), k->params.end(), [](const auto& p) { return p.is_batch(); }))
          << name << " takes no batch argument:\n"
          << k->source;
      sources[name].insert(k->source);
    }
  }
  EXPECT_GE(sources.size(), 5u);
  for (const auto& [name, srcs] : sources) EXPECT_EQ(srcs.size(), 1u) << name << ": its source depends on N";
}

// At batch 1 every tensor's dim 0 is 1, as a broadcast operand's is; a batch-generic kernel indexes that dim
// anyway (its coordinate is always 0), so batch 1 gets the source the other batches get. The block's conv and
// pool kernels at batch 1 are those of batch 2 (its grids are small enough that batch 2 keeps batch 1's tiles).
// That the batch-1 kernels compute what ref does: EndsOfTheRangeMatchReference.
TEST(CodegenBatch, BatchOneSharesTheSourcesOfLargerBatches) {
  const Graph g = block(DType::f32);
  std::map<GroupKind, std::set<std::string>> at[2];
  for (int64_t n : {1, 2}) {
    Result<Graph> bound = g.bind({{"N", n}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    ASSERT_TRUE(bound->is_binding());
    Result<Plan> plan = plan_graph(*bound);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    ASSERT_EQ(plan->tiles, TilePolicy::generic);
    at[n - 1] = sources_by_kind(*plan);
  }
  ASSERT_EQ(at[0].count(GroupKind::conv), 1u);
  EXPECT_EQ(at[0], at[1]) << "batch 1's conv or pool kernels differ from batch 2's";
}

// A shape-generic plan gives a conv the generic tile wherever it is within 10 % of the batch's own
// (gemm_glue::generic_or_own), launched at the residency that fills the batch's waves best: a ResNet-50
// layer-3 1x1 conv (256 -> 1024 channels at 14 x 14) on an A100 runs one kernel at batches 32 and 64, at 2
// and 3 blocks per SM (another pad, the same source), while the same conv in a graph without symbols keeps
// its own tile. (The 128 x 64 tile against ref: tests/test_codegen_conv.cpp.)
TEST(CodegenBatch, GenericConvTileServesBatchesAtTheirOwnResidency) {
  Graph g("layer3");
  const DimExpr n = g.dim("N", 1, 64);
  // A first conv makes the second's input channels-last, as between ResNet's convs.
  const Tensor x = g.relu(
      g.conv2d(g.symbolic_input("x", {n, 256, 14, 14}, DType::f16), g.parameter("w0", {256, 256, 1, 1}, DType::f16)));
  g.output(g.relu(g.conv2d(x, g.parameter("w", {1024, 256, 1, 1}, DType::f16))), "y");
  PlanOptions options;
  options.target = *target_named("a100");
  std::set<std::string> sources;
  std::set<uint32_t> pads;
  int convs = 0;
  for (int64_t b : {32, 64}) {
    SCOPED_TRACE("N = " + std::to_string(b));
    Result<Graph> bound = g.bind({{"N", b}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    Result<Plan> plan = plan_graph(*bound, options);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    for (const Group& grp : plan->groups) {
      if (grp.kind != GroupKind::conv) continue;
      auto cfg = codegen::plan_kernel(*plan, grp);
      ASSERT_TRUE(cfg.ok()) << cfg.status().message();
      const codegen::ConvConfig& cc = std::get<codegen::ConvConfig>(cfg->detail);
      if (cc.n != 1024) continue;
      EXPECT_TRUE(cc.choice.planned && cc.choice.generic) << codegen::gemm_glue::choice_text(cc.choice);
      EXPECT_EQ(cc.tiles.launch_bounds_blocks(), 3)
          << codegen::gemm_glue::tiles_text(cc.tiles) << codegen::gemm_glue::choice_text(cc.choice);
      EXPECT_EQ(cc.tiles.blocks_per_sm, b == 32 ? 2 : 3);
      auto k = codegen::generate_kernel(*plan, grp);
      ASSERT_TRUE(k.ok()) << k.status().message();
      sources.insert(k->source);
      pads.insert(k->dynamic_smem);
      ++convs;
    }
    // Without symbols: the batch's own tile, no choice made.
    Graph fixed("layer3_fixed");
    const Tensor fx = fixed.relu(fixed.conv2d(fixed.input("x", {b, 256, 14, 14}, DType::f16),
                                              fixed.parameter("w0", {256, 256, 1, 1}, DType::f16)));
    fixed.output(fixed.relu(fixed.conv2d(fx, fixed.parameter("w", {1024, 256, 1, 1}, DType::f16))), "y");
    Result<Plan> own = plan_graph(fixed, options);
    ASSERT_TRUE(own.ok()) << own.status().message();
    EXPECT_EQ(own->tiles, TilePolicy::own);
    for (const Group& grp : own->groups) {
      if (grp.kind != GroupKind::conv) continue;
      auto cfg = codegen::plan_kernel(*own, grp);
      ASSERT_TRUE(cfg.ok()) << cfg.status().message();
      EXPECT_FALSE(std::get<codegen::ConvConfig>(cfg->detail).choice.planned);
    }
    // Asked for (PlanOptions::tiles), the graph without symbols gets the binding's kernel.
    PlanOptions generic = options;
    generic.tiles = TilePolicy::generic;
    Result<Plan> asked = plan_graph(fixed, generic);
    ASSERT_TRUE(asked.ok()) << asked.status().message();
    for (const Group& grp : asked->groups) {
      auto k = codegen::generate_kernel(*asked, grp);
      ASSERT_TRUE(k.ok()) << k.status().message();
      if (grp.kind == GroupKind::conv && k->source.find("K = 1024") != std::string::npos) sources.insert(k->source);
    }
  }
  ASSERT_EQ(convs, 2);
  EXPECT_EQ(sources.size(), 1u) << "the two batches' conv kernels differ";
  EXPECT_EQ(pads.size(), 2u) << "both batches launched at one residency";
}

// kiln profile emulates a binding at a smaller batch rebuilt through the builder (rebatch_graph): still a
// binding, planned with the same generic tiles, so its kernels are the ones estimated.
TEST(CodegenBatch, ProfileRebatchKeepsTheBinding) {
  Result<Graph> bound = block(DType::f16).bind({{"N", 8}});
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  Result<Graph> small = rebatch_graph(*bound, 2);
  ASSERT_TRUE(small.ok()) << small.status().message();
  EXPECT_TRUE(small->is_binding());
  Result<Plan> plan = plan_graph(*small);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->tiles, TilePolicy::generic);
}

// At batch 1 only the tensors that carry the batch (a group output's shape) index dim 0: a scalar that the flat
// pointwise path loads at its flat index, and a [1, C, 1]-style operand, stay broadcasts. (Indexing every size-1
// dim 0 read a scalar at the flat index: out of bounds on emu.) Each binding against ref.
TEST(CodegenBatch, BroadcastOperandsStayBroadcastAtBatchOne) {
  Graph g("broadcasts");
  const DimExpr n = g.dim("N", 1, 4);
  const Tensor x = g.symbolic_input("x", {n, 4, 5});
  g.output(g.mul(g.add(x, g.parameter("scalar", {1})), g.parameter("row", {1, 4, 1})), "y");
  g.output(g.sub(g.relu(x), g.parameter("one", {1, 1, 1})), "z");  // the flat path, a rank-3 scalar
  for (int64_t b : {1, 2}) {
    SCOPED_TRACE("N = " + std::to_string(b));
    Result<Graph> bound = g.bind({{"N", b}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    testing::expect_plan_matches_ref(*bound, DType::f32, 110 + static_cast<uint64_t>(b));
  }
}

}  // namespace
}  // namespace kiln
