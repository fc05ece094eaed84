// In-place concats in generated code: producers (conv + bn + relu epilogues, conv without epilogue, pools,
// matmuls, pointwise groups) store straight into their slices of one buffer, and consumers of every family
// (conv implicit GEMM, pointwise, pool, norm, matmul) read concat views through the root buffer's strides
// and a base offset. Plans run on emu in checked mode (every global access bounds-checked against its
// buffer) or on the GPU (kiln_gpu_tests), compared with the ref backend on random inputs.
//
// Tolerance: kiln/compare.h's tolerance_for(dtype) (f32: rtol 1e-4, atol 1e-5; f16: rtol 1e-2, atol 1e-2),
// the one for graphs whose intermediates are stored between kernels in their dtype.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "codegen_check.h"
#include "dense_graphs.h"

namespace kiln {
namespace {

using dense_test::add_dense_block;
using dense_test::DenseBlock;
using testing::expect_plan_matches_ref;

int count_kind(const Plan& p, GroupKind k) {
  int n = 0;
  for (const Group& g : p.groups) n += g.kind == k;
  return n;
}

// The distinct concat outputs that tensors alias (one per in-place buffer).
size_t roots(const Plan& p) {
  std::set<int32_t> r;
  for (const BufferPlacement& b : p.buffers)
    if (b.alias_of.valid()) r.insert(b.alias_of.id);
  return r.size();
}

// A plan of `g` run on the test device matches ref; returns it for the caller's checks.
Plan check(const Graph& g, DType t, uint64_t seed, LayoutPolicy layout) {
  SCOPED_TRACE(fmt::format("{} {}", dtype_name(t), layout_policy_name(layout)));
  return expect_plan_matches_ref(g, t, seed, {.layout = layout}).plan;
}

// Dense blocks of batch 1 and 2 in one graph (one plan, one host compile): odd layers a conv reading the
// view with a bn + relu epilogue writing its slice, even ones a pointwise bn + relu reading the view first;
// pointwise, pool and norm kernels reading slices and views; NCHW (every view of a batch-2 block is strided
// across images) and NHWC (every view is strided across pixels).
TEST(CodegenConcat, DenseBlocksInEveryDtypeLayoutAndBatch) {
  for (const DType t : {DType::f32, DType::f16}) {
    for (const LayoutPolicy layout : {LayoutPolicy::nchw, LayoutPolicy::nhwc}) {
      Graph g("dense");
      for (const int64_t n : {1, 2}) {
        DenseBlock b;
        b.N = n, b.dtype = t, b.extra_readers = true, b.growth = n == 1 ? 4 : 8;
        add_dense_block(g, b, fmt::format("n{}.", n));
      }
      const Plan p = check(g, t, 11, layout);
      EXPECT_EQ(count_kind(p, GroupKind::concat), 0) << plan_to_text(p);
      EXPECT_EQ(count_kind(p, GroupKind::concat_elided), 8);
      EXPECT_EQ(roots(p), 2u);
    }
  }
}

// torchvision's dense layer: a conv with no epilogue writes each slice, the first layer reads cat([f0]),
// the block is f16 and NHWC with two images.
TEST(CodegenConcat, TorchvisionDenseLayer) {
  DenseBlock b;
  b.N = 2, b.dtype = DType::f16, b.bottleneck = true, b.single_concat = true, b.C0 = 16, b.growth = 8;
  Graph g("dense_bottleneck");
  add_dense_block(g, b);
  const Plan p = check(g, b.dtype, 12, LayoutPolicy::automatic);
  EXPECT_EQ(count_kind(p, GroupKind::concat), 0) << plan_to_text(p);
  EXPECT_EQ(roots(p), 1u);
}

// The chain's first input is the graph input: nothing writes it in place, so every concat copies (and
// still gives the right answer); a concat that is a graph output copies the views it reads.
TEST(CodegenConcat, ChainsThatCannotBeElided) {
  Graph g("dense_copies");
  DenseBlock b;
  b.stem = false;
  add_dense_block(g, b, "in.");
  b.stem = true, b.N = 2, b.layers = 3;
  add_dense_block(g, b, "out.");
  g.output(*g.find_tensor("out.cat1"), "out.cat1", Layout::NCHW);
  const Plan p = check(g, DType::f32, 13, LayoutPolicy::nchw);
  EXPECT_EQ(count_kind(p, GroupKind::concat), 5) << plan_to_text(p);  // in.cat1..3, in.cat, out.cat1
  EXPECT_EQ(roots(p), 1u);
}

// A tensor in two concats that are not runs of each other: one root (here a graph output) gets it, the
// other copies it from its slice.
TEST(CodegenConcat, TwoConcatsShareAnInput) {
  for (const DType t : {DType::f32, DType::f16}) {
    Graph g("two_concats");
    const Tensor x = g.input("x", {2, 6, 5, 3}, t, Layout::NHWC);
    const Tensor a = g.relu(x, "a"), b = g.sigmoid(g.add(x, 1.0), "b"), c = g.tanh(g.mul(x, 2.0), "c");
    g.output(g.concat({a, b}, 1, "ab"), "y1", Layout::NHWC);
    g.output(g.relu(g.concat({b, c}, 1, "bc")), "y2", Layout::NHWC);
    const Plan p = check(g, t, 14, LayoutPolicy::automatic);
    EXPECT_EQ(count_kind(p, GroupKind::concat), 1) << plan_to_text(p);
  }
}

// Matmuls writing column slices of a row-major buffer and reading views of it (rows strided by the root's
// width): the skinny family (4 rows) and the tiled one (40 rows).
TEST(CodegenConcat, DenseMatmulChains) {
  for (const DType t : {DType::f32, DType::f16}) {
    Graph g("dense_mlp");
    for (const int64_t m : {4, 40}) {
      const std::string p = fmt::format("m{}.", m);
      const Tensor x = g.input(p + "x", {m, 16}, t);
      auto dense = [&](Tensor in, int i) {
        const int64_t k = g.shape(in)[1];
        const Tensor w = g.parameter(fmt::format("{}w{}", p, i), {k, 8}, t);
        return g.relu(g.matmul(in, w, g.parameter(fmt::format("{}b{}", p, i), {8}, t)));
      };
      std::vector<Tensor> feats{dense(x, 0)};
      for (int i = 1; i <= 3; ++i)
        feats.push_back(dense(feats.size() == 1 ? feats[0] : g.concat(feats, 1, fmt::format("{}cat{}", p, i)), i));
      const Tensor all = g.concat(feats, 1, p + "cat");
      g.output(g.matmul(all, g.parameter(p + "wo", {32, 8}, t)), p + "y");
    }
    const Plan p = check(g, t, 15, LayoutPolicy::automatic);
    EXPECT_EQ(count_kind(p, GroupKind::concat), 0) << plan_to_text(p);
    EXPECT_EQ(roots(p), 2u);
  }
}

}  // namespace
}  // namespace kiln
