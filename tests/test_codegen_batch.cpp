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
#include <vector>

#include <fmt/format.h>

#include "codegen/kernel.h"
#include "codegen_check.h"

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
      // Every conv kernel takes the batch as an argument: no batch in its Cfg.
      for (const std::string& src : sources.at(GroupKind::conv)) {
        EXPECT_NE(src.find("NMAX = "), std::string::npos) << src;
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

}  // namespace
}  // namespace kiln
