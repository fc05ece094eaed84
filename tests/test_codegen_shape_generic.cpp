// Shape-generic conv kernels (docs/architecture.md, "Shape-generic conv kernels"): in the bindings of a symbolic
// graph, a conv whose input is dense NHWC and whose weights are dense KRSC takes C, H, W, K, P and Q as int
// arguments, so that convs differing only in those sizes share one source (one compile, one cache entry).
// Every plan runs on the test device against ref on random inputs; the sources are compared across layers
// and batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "codegen_check.h"

namespace kiln {
namespace {

// A symbolic batch N in [1, 8] through convs that differ in their sizes only, and convs that differ in more
// (the inputs are NHWC, as the intermediates of a planned network are; an NCHW input is read as a strided view):
//   a: 3x3 pad 1,  8 -> 16 at 10 x 10, batch norm, ReLU
//   b: 3x3 pad 1, 16 -> 16 at 10 x 10, batch norm, ReLU (a's source: only C differs)
//   c: 3x3 pad 1, 16 -> 16 at  9 x  7, batch norm, ReLU (a's source: C, H, W, P and Q differ)
//   s: 3x3 stride 2 pad 1, 16 -> 24, bias, ReLU (another stride)
//   r: 1x1, 24 -> 24, plus s's output (a residual operand of the output's shape), ReLU
//   n: 3x3 pad 1, 6 -> 8 at 5 x 5 (channels that are no multiple of the vector width: element loads)
Graph layers(DType t) {
  Graph g("shape_generic");
  const DimExpr n = g.dim("N", 1, 8);
  const auto channel = [&](const std::string& name, int64_t c) { return g.parameter(name, {c}, t); };
  const auto conv_bn_relu = [&](Tensor x, int64_t cin, int64_t cout, const std::string& p) {
    Tensor y = g.conv2d(x, g.parameter(p + ".w", {cout, cin, 3, 3}, t), {.padding = {1, 1}}, p);
    y = g.batch_norm(y, channel(p + ".s", cout), channel(p + ".b", cout), channel(p + ".m", cout),
                     channel(p + ".v", cout), 1e-5, p + ".bn");
    return g.relu(y, p + ".relu");
  };
  const Tensor b =
      conv_bn_relu(conv_bn_relu(g.symbolic_input("x", {n, 8, 10, 10}, t, Layout::NHWC), 8, 16, "a"), 16, 16, "b");
  const Tensor c = conv_bn_relu(g.symbolic_input("x2", {n, 16, 9, 7}, t, Layout::NHWC), 16, 16, "c");
  const Tensor s = g.relu(g.conv2d(b, g.parameter("s.w", {24, 16, 3, 3}, t), channel("s.b", 24),
                                   {.stride = {2, 2}, .padding = {1, 1}}, "s"));
  const Tensor r = g.relu(g.add(g.conv2d(s, g.parameter("r.w", {24, 24, 1, 1}, t), Conv2dOptions{}, "r"), s));
  const Tensor m = g.conv2d(g.symbolic_input("x3", {n, 6, 5, 5}, t, Layout::NHWC), g.parameter("n.w", {8, 6, 3, 3}, t),
                            {.padding = {1, 1}}, "n");
  g.output(c, "out_c");
  g.output(r, "out_r");
  g.output(g.relu(m), "out_m");
  return g;
}

// The conv groups' kernels of a plan by their conv's name.
std::map<std::string, codegen::Kernel> conv_kernels(const Plan& plan) {
  std::map<std::string, codegen::Kernel> out;
  for (const Group& grp : plan.groups) {
    if (grp.kind != GroupKind::conv) continue;
    auto k = codegen::generate_kernel(plan, grp);
    EXPECT_TRUE(k.ok()) << k.status().message();
    if (k.ok()) out[plan.graph.node(grp.roles.anchor).name] = std::move(*k);
  }
  return out;
}

TEST(CodegenShapeGeneric, ConvsOfOneFilterShareOneSourceAndMatchReference) {
  for (DType t : {DType::f32, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    const Graph g = layers(t);
    std::map<std::string, std::set<std::string>> by_conv;  // sources across batches
    for (int64_t n : {1, 3}) {
      SCOPED_TRACE("N = " + std::to_string(n));
      Result<Graph> bound = g.bind({{"N", n}});
      ASSERT_TRUE(bound.ok()) << bound.status().message();
      const testing::CheckResult cr = testing::expect_plan_matches_ref(*bound, t, 300 + static_cast<uint64_t>(n));
      for (const codegen::ConvConfig& cc : testing::details_of<codegen::ConvConfig>(cr.plan))
        EXPECT_TRUE(cc.shape_generic) << cc.m << " x " << cc.n << " x " << cc.k << ", splits " << cc.tiles.splits
                                      << (cc.patch ? ", patch" : "");
      const auto kernels = conv_kernels(cr.plan);
      ASSERT_EQ(kernels.size(), 6u);
      for (const auto& [name, k] : kernels) {
        by_conv[name].insert(k.source);
        int sizes = 0;
        for (const codegen::KernelParam& p : k.params) sizes += p.size;
        EXPECT_EQ(sizes, 6) << name;
        EXPECT_NE(k.source.find("conv2d_implicit_gemm_generic"), std::string::npos) << name;
        EXPECT_EQ(k.source.find("NMAX"), std::string::npos) << name << " holds its sizes:\n" << k.source;
      }
      // Only the sizes differ between a, b and c: one source.
      EXPECT_EQ(kernels.at("a").source, kernels.at("b").source);
      EXPECT_EQ(kernels.at("a").source, kernels.at("c").source);
      // Another stride, epilogue or vector path is another source.
      EXPECT_NE(kernels.at("a").source, kernels.at("s").source);
      EXPECT_NE(kernels.at("a").source, kernels.at("n").source);
    }
    for (const auto& [name, srcs] : by_conv) EXPECT_EQ(srcs.size(), 1u) << name << ": its source depends on N";
  }
}

// Split-K on the shape-generic kernel (the range of k each split reduces computed at run time): 2048 pixels x
// 192 channels at batch 2 are too few tiles for 132 SMs, so the binding keeps its own split tile
// (tests/test_codegen_conv.cpp, SplitKSumsThePartialTilesOfEverySplit, has the same conv without symbols).
TEST(CodegenShapeGeneric, SplitKSumsEverySplitOnTheShapeGenericKernel) {
  Graph g("split");
  const Tensor x = g.symbolic_input("x", {g.dim("N", 1, 4), 96, 32, 32}, DType::bf16, Layout::NHWC);
  const Tensor w = g.parameter("w", {192, 96, 3, 3}, DType::bf16);
  g.output(g.relu(g.conv2d(x, w, g.parameter("b", {192}, DType::bf16), {.padding = {1, 1}})), "y");
  Result<Graph> bound = g.bind({{"N", 2}});
  ASSERT_TRUE(bound.ok()) << bound.status().message();
  const testing::CheckResult cr = testing::expect_plan_matches_ref(*bound, DType::bf16, 320);
  const auto cs = testing::details_of<codegen::ConvConfig>(cr.plan);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_TRUE(cs[0].shape_generic);
  EXPECT_GT(cs[0].tiles.splits, 1);
  const auto kernels = conv_kernels(cr.plan);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_NE(kernels.begin()->second.source.find("conv2d_implicit_gemm_generic_split"), std::string::npos);
}

// A graph without symbols keeps every conv specialized on its shape (the sizes are compile-time constants:
// no argument to divide by); so does a conv that reads its input as a strided view (an NCHW input through a
// load transform), in a binding too.
TEST(CodegenShapeGeneric, GraphsWithoutSymbolsAndStridedInputsStaySpecialized) {
  for (const bool symbolic : {false, true}) {
    SCOPED_TRACE(symbolic ? "a binding, NCHW input" : "no symbols, NHWC input");
    Graph g("specialized");
    const Tensor x = symbolic ? g.symbolic_input("x", {g.dim("N", 1, 4), 8, 10, 10})
                              : g.input("x", {2, 8, 10, 10}, DType::f32, Layout::NHWC);
    g.output(g.relu(g.conv2d(x, g.parameter("w", {16, 8, 3, 3}), {.padding = {1, 1}})), "y");
    Result<Graph> bound = symbolic ? g.bind({{"N", 2}}) : Result<Graph>(g);
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    const testing::CheckResult cr = testing::expect_plan_matches_ref(*bound, DType::f32, 310);
    const auto cs = testing::details_of<codegen::ConvConfig>(cr.plan);
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_FALSE(cs[0].shape_generic);
  }
}

}  // namespace
}  // namespace kiln
