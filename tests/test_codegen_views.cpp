// Free transposes and slices (OpDef::view, the layout pass's view_layout, fusion's load transforms and
// transposed epilogues): a transpose whose result is another view of the same bytes costs no kernel, nor
// does a slice a pointwise kernel reads, a layer norm
// over the channels of NHWC data reads it in place (or, after a depthwise conv, is computed by the conv's
// kernel: the row-norm epilogue), and a matmul's epilogue continues past a transposed
// store with elementwise ops on other tensors (ConvNeXt's layer scale and residual). Every graph is planned
// (kernel counts asserted), run on emu in checked mode and compared with ref on random inputs, with
// testing::tolerance_for(dtype) (include/kiln/compare.h).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "codegen_check.h"
#include "codegen_gemm_util.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// Plans g (expecting `kernels` kernels), runs it on emu and ref at tolerance_for(t); the number of nodes
// of op `op` in the plan's graph, or -1 when a step failed.
int expect_matches_ref(const Graph& g, DType t, int kernels, uint64_t seed, OpId op = OpId::layout_convert,
                       const PlanOptions& po = {}) {
  const auto plan =
      gemm_test::expect_emu_matches_ref(g, seed, po, nullptr, emu::Schedule::forward, testing::tolerance_for(t));
  if (!plan) return -1;
  EXPECT_EQ(plan->kernel_count(), kernels) << plan_to_text(*plan);
  int count = 0;
  for (const Node& nd : plan->graph.nodes()) count += nd.op && *nd.op == op;
  return count;
}

// One ConvNeXt block on NHWC data: depthwise 7x7 -> permute(0,2,3,1) -> layer_norm -> linear -> gelu ->
// linear -> permute(0,3,1,2) -> * layer_scale[C,1,1] -> + x.
Graph convnext_block(DType t, int64_t C = 32, int64_t HW = 6) {
  Graph g(fmt::format("convnext_block_{}", dtype_name(t)));
  const Tensor x = g.input("x", {1, C, HW, HW}, t, Layout::NHWC);
  const Tensor d = g.conv2d(x, g.parameter("dw.w", {C, 1, 7, 7}, t, Layout::KRSC), g.parameter("dw.b", {C}, t),
                            {.padding = {3, 3}, .groups = C});
  NormOptions ln{.scale = g.parameter("ln.s", {C}, t), .shift = g.parameter("ln.t", {C}, t), .epsilon = 1e-6};
  const Tensor n = g.layer_norm(g.transpose(d, {0, 2, 3, 1}), ln);
  const Tensor h =
      g.gelu(g.matmul(n, g.parameter("l1.w", {4 * C, C}, t), g.parameter("l1.b", {4 * C}, t), {.transpose_b = true}));
  const Tensor o = g.matmul(h, g.parameter("l2.w", {C, 4 * C}, t), g.parameter("l2.b", {C}, t), {.transpose_b = true});
  const Tensor s = g.mul(g.transpose(o, {0, 3, 1, 2}), g.parameter("gamma", {C, 1, 1}, t));
  g.output(g.add(s, x), "y", Layout::NHWC);
  return g;
}

// Three kernels (the depthwise conv normalizing each pixel's channels in its epilogue, past the permute;
// linear 1; linear 2 with its transposed store, layer scale and residual); no layout conversion.
TEST(CodegenViews, ConvNeXtBlockIsThreeKernels) {
  for (DType t : kDtypes) {
    EXPECT_EQ(expect_matches_ref(convnext_block(t), t, 3, 7), 0) << "layout conversions";
  }
}

// The row-norm epilogue (fusion's join_row_norm, templates/kiln/depthwise_rownorm.cuh) for channel counts
// that are not whole warps (40) and several warps (96), batch 2, with the permuted conv output and the
// norm's output also read by other kernels (stored by the conv's kernel). With NCHW planning (no layout
// conversion in front of a 4-D pointwise op) also an activation after the norm, in the conv's kernel.
TEST(CodegenViews, DepthwiseRowNorm) {
  for (DType t : kDtypes) {
    for (int64_t C : {40, 96}) {
      for (LayoutPolicy layout : {LayoutPolicy::automatic, LayoutPolicy::nchw}) {
        const bool nchw = layout == LayoutPolicy::nchw;
        Graph g(fmt::format("dw_rownorm_{}_{}_{}", C, dtype_name(t), nchw ? "nchw" : "auto"));
        const Tensor x = g.input("x", {2, C, 5, 6}, t, Layout::NHWC);
        const Tensor d = g.conv2d(x, g.parameter("dw.w", {C, 1, 3, 3}, t, Layout::KRSC), g.parameter("dw.b", {C}, t),
                                  {.padding = {1, 1}, .groups = C});
        const Tensor dp = g.transpose(d, {0, 2, 3, 1});
        NormOptions ln{.scale = g.parameter("ln.s", {C}, t), .shift = g.parameter("ln.t", {C}, t), .epsilon = 1e-6};
        const Tensor n = g.layer_norm(dp, ln);
        g.output(n, "n");
        if (nchw) g.output(g.gelu(n), "y");
        g.output(g.matmul(dp, g.parameter("w", {C, 8}, t)), "m");  // the permuted value read by another kernel
        PlanOptions po;
        po.layout = layout;
        expect_matches_ref(g, t, 2, 21, OpId::layout_convert, po);
      }
    }
  }
}

// A norm over more channels than one block has threads stays its own kernel (and is right).
TEST(CodegenViews, RowNormTooWideIsItsOwnKernel) {
  Graph g("dw_rownorm_wide");
  const int64_t C = 1056;
  const Tensor x = g.input("x", {1, C, 2, 2}, DType::f32, Layout::NHWC);
  const Tensor d =
      g.conv2d(x, g.parameter("dw.w", {C, 1, 3, 3}, DType::f32, Layout::KRSC), {.padding = {1, 1}, .groups = C});
  g.output(g.layer_norm(g.transpose(d, {0, 2, 3, 1})), "y");
  expect_matches_ref(g, DType::f32, 2, 23);
}

// LayerNorm2d (ConvNeXt's stem and downsampling): conv -> permute -> layer_norm -> permute -> conv. The
// norm reads the first conv's NHWC output in place; the second conv reads the norm's output through the
// transpose (a load transform: its channel stride is 1, so the vector loader).
TEST(CodegenViews, LayerNorm2dBetweenConvs) {
  for (DType t : kDtypes) {
    Graph g(fmt::format("layernorm2d_{}", dtype_name(t)));
    const Tensor x = g.input("x", {2, 8, 8, 8}, t, Layout::NHWC);
    const Tensor c1 = g.conv2d(x, g.parameter("c1.w", {16, 8, 2, 2}, t, Layout::KRSC), {.stride = {2, 2}});
    NormOptions ln{.scale = g.parameter("ln.s", {16}, t), .shift = g.parameter("ln.t", {16}, t)};
    const Tensor n = g.transpose(g.layer_norm(g.transpose(c1, {0, 2, 3, 1}), ln), {0, 3, 1, 2});
    g.output(g.conv2d(n, g.parameter("c2.w", {24, 16, 3, 3}, t, Layout::KRSC), {.padding = {1, 1}}), "y", Layout::NHWC);
    EXPECT_EQ(expect_matches_ref(g, t, 3, 9), 0) << "layout conversions";
  }
}

// A transpose that is no view of the same bytes (H and W swapped) read by one pointwise group: a strided
// load of the group, no kernel of its own.
TEST(CodegenViews, StridedTransposeIsALoad) {
  for (DType t : kDtypes) {
    Graph g(fmt::format("swap_hw_{}", dtype_name(t)));
    const Tensor x = g.input("x", {2, 3, 5, 7}, t);
    const Tensor r = g.input("r", {2, 3, 7, 5}, t);
    g.output(g.relu(g.add(g.transpose(x, {0, 1, 3, 2}), r)), "y");
    expect_matches_ref(g, t, 1, 13);
  }
}

// A transpose read by two kernels moves memory once (a data kernel), and both readers are right.
TEST(CodegenViews, TransposeReadTwiceIsMaterialized) {
  Graph g("transpose_twice");
  const Tensor x = g.input("x", {4, 6});
  const Tensor xt = g.transpose(x, {1, 0});
  g.output(g.matmul(xt, g.parameter("w", {4, 5})), "a");
  g.output(g.softmax(xt), "b");
  expect_matches_ref(g, DType::f32, 3, 17);
}

// A reshape its input's memory allows is a view (as torch's .view): a network head's flatten of NHWC
// [N, C, 1, 1] into [N, C] is the same bytes, read in place by the classifier's matmul; a row-major
// [2, 12, 5] read as [2, 3, 4, 5] by a pointwise op, too. Each reshape costs no kernel.
TEST(CodegenViews, ReshapeIsALoad) {
  for (DType t : kDtypes) {
    Graph head(fmt::format("flatten_head_{}", dtype_name(t)));
    const Tensor x = head.input("x", {2, 24, 5, 5}, t, Layout::NHWC);
    const Tensor c = head.relu(head.conv2d(x, head.parameter("w", {24, 24, 1, 1}, t, Layout::KRSC), Conv2dOptions{}));
    const Tensor flat = head.reshape(head.global_avg_pool(c), {2, 24});
    head.output(head.matmul(flat, head.parameter("fc", {24, 10}, t)), "logits");
    EXPECT_EQ(expect_matches_ref(head, t, 2, 19, OpId::reshape), 1);  // the conv (+ pool epilogue), the matmul

    Graph rm(fmt::format("reshape_rows_{}", dtype_name(t)));
    const Tensor a = rm.relu(rm.input("a", {2, 12, 5}, t));
    rm.output(a, "a1");
    rm.output(rm.add(rm.reshape(a, {2, 3, 4, 5}), rm.input("b", {2, 3, 4, 5}, t)), "y");
    expect_matches_ref(rm, t, 2, 23, OpId::reshape);
  }
}

// A reshape that merges dims its input's layout permutes (NHWC [1, 4, 3, 3] flattened to [1, 36]: the
// logical order is C, H, W, memory's H, W, C) is no view: its input is converted to row-major first.
TEST(CodegenViews, ReshapeOfPermutedOrderConverts) {
  Graph g("flatten_nhwc");
  const Tensor x = g.input("x", {1, 4, 3, 3}, DType::f32, Layout::NHWC);
  const Tensor c = g.relu(g.conv2d(x, g.parameter("w", {4, 4, 1, 1}, DType::f32, Layout::KRSC), Conv2dOptions{}));
  g.output(g.neg(g.reshape(c, {1, 36})), "y");
  EXPECT_GE(expect_matches_ref(g, DType::f32, 2, 29), 1);  // a layout conversion: the conv's NCHW store
}

// A slice read by one pointwise kernel is a view of its input's memory (base Σ start·stride, strides
// stride·step): an LSTM cell's four gates sliced off one [B, 4H] matmul output and combined in one
// kernel; steps and a negative start (a strided view from the end); channel slices of NHWC activations
// (their pitch is the whole tensor's C). The slices cost no kernel.
TEST(CodegenViews, SlicesAreLoadsOfPointwiseKernels) {
  for (DType t : kDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph cell(fmt::format("lstm_gates_{}", dtype_name(t)));
    const int64_t B = 3, H = 20;
    const Tensor gates = cell.matmul(cell.input("x", {B, 16}, t), cell.parameter("w", {16, 4 * H}, t));
    auto gate = [&](int k) { return cell.slice(gates, {0, k * H}, {B, (k + 1) * H}); };
    const Tensor c = cell.add(cell.mul(cell.sigmoid(gate(0)), cell.tanh(gate(2))),
                              cell.mul(cell.sigmoid(gate(1)), cell.input("c", {B, H}, t)));
    cell.output(c, "c_next");
    cell.output(cell.mul(cell.sigmoid(gate(3)), cell.tanh(c)), "h_next");
    EXPECT_EQ(expect_matches_ref(cell, t, 2, 31, OpId::slice), 4);  // the matmul, the cell

    Graph strided(fmt::format("strided_slice_{}", dtype_name(t)));
    const Tensor a = strided.relu(strided.input("a", {9, 12}, t));
    strided.output(a, "a1");
    strided.output(strided.exp(strided.slice(a, {-7, 1}, {100, 12}, {3, 4})), "y");  // rows 2, 5, 8; columns 1, 5, 9
    EXPECT_EQ(expect_matches_ref(strided, t, 2, 37, OpId::slice), 1);

    Graph nhwc(fmt::format("channel_slices_{}", dtype_name(t)));
    const Tensor x = nhwc.input("x", {2, 16, 5, 5}, t, Layout::NHWC);
    const Tensor y = nhwc.conv2d(x, nhwc.parameter("w", {16, 16, 1, 1}, t, Layout::KRSC), Conv2dOptions{});
    const Tensor glu = nhwc.mul(nhwc.slice(y, {0, 0, 0, 0}, {2, 8, 5, 5}),
                                nhwc.sigmoid(nhwc.slice(y, {0, 8, 0, 0}, {2, 16, 5, 5})));  // a gated linear unit
    nhwc.output(glu, "y", Layout::NHWC);
    EXPECT_EQ(expect_matches_ref(nhwc, t, 2, 41, OpId::slice), 2);  // the conv, the gate
  }
}

// Slices read by the anchored families through their views, with a base that is and is not a multiple of
// a 16-byte chunk: ShuffleNet-style channel splits into a 3x3 conv, a 1x1 conv, a depthwise conv (through a
// ReLU prologue) and a max pool; a window of a matrix into a matmul and a softmax. The slices cost no kernel.
TEST(CodegenViews, SlicesAreLoadsOfAnchoredKernels) {
  for (DType t : kDtypes) {
    SCOPED_TRACE(dtype_name(t));
    Graph g(fmt::format("split_{}", dtype_name(t)));
    const Tensor x = g.input("x", {2, 24, 6, 6}, t, Layout::NHWC);
    const Tensor y = g.relu(g.conv2d(x, g.parameter("w0", {24, 24, 1, 1}, t, Layout::KRSC), Conv2dOptions{}));
    g.output(y, "y0", Layout::NHWC);
    const Tensor a = g.slice(y, {0, 0, 0, 0}, {2, 16, 6, 6});   // aligned
    const Tensor b = g.slice(y, {0, 13, 0, 0}, {2, 24, 6, 6});  // unaligned
    g.output(g.conv2d(a, g.parameter("wa", {8, 16, 3, 3}, t, Layout::KRSC), {.padding = {1, 1}}), "ya", Layout::NHWC);
    g.output(g.conv2d(b, g.parameter("wb", {8, 11, 1, 1}, t, Layout::KRSC), Conv2dOptions{}), "yb", Layout::NHWC);
    const Tensor c = g.slice(y, {0, 4, 0, 0}, {2, 12, 6, 6});
    g.output(g.max_pool2d(c, {.kernel = {2, 2}}), "yc", Layout::NHWC);
    const Tensor d = g.relu(g.slice(y, {0, 3, 0, 0}, {2, 10, 6, 6}));
    g.output(g.conv2d(d, g.parameter("wd", {7, 1, 3, 3}, t, Layout::KRSC), {.padding = {1, 1}, .groups = 7}), "yd",
             Layout::NHWC);
    const Tensor m = g.relu(g.input("m", {10, 40}, t));
    g.output(m, "m0");
    g.output(g.matmul(g.slice(m, {1, 3}, {9, 35}), g.parameter("wm", {32, 24}, t)), "ym");
    g.output(g.softmax(g.slice(m, {0, 5}, {10, 29})), "ys");
    EXPECT_EQ(expect_matches_ref(g, t, 8, 43, OpId::slice), 6);
  }
}

// NVRTC compiles a ConvNeXt block's kernels (the row-norm depthwise conv, the matmuls with a transposed
// epilogue) for sm_80 and sm_90 without spills.
TEST(CodegenViews, CompilesWithoutSpills) {
  for (DType t : {DType::f32, DType::f16}) gemm_test::expect_compiles_without_spills(convnext_block(t, 96, 14));
}

}  // namespace
}  // namespace kiln
