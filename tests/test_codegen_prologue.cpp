// Prologue fusion (passes/fusion.h, codegen/family_prologue.cpp): pointwise ops applied to a conv's or
// matmul's input as the kernel loads it — an inference batch norm + ReLU (DenseNet's pre-activation), a
// squeeze-excite channel scale [N, C, 1, 1] — in the implicit GEMM's element and staged-vector loaders, the
// SIMT (f32) and tensor-core (f16 / bf16) main loops, the depthwise kernel and both matmul kernels. Each
// graph is planned (one kernel: the prologue is absorbed), run on emu in checked mode under every fiber
// schedule, and compared with ref on random inputs; the shifts are random, so relu(shift) != 0 and a
// kernel that transformed the zero padding would differ from ref at the borders.
//
// Tolerance: testing::tolerance_for(dtype) (include/kiln/compare.h: f32 1e-4 / 1e-5, f16 1e-2 / 1e-2,
// bf16 6e-2 / 6e-2): ref rounds the prologue's values to the storage type once per op, the kernel once.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "codegen_check.h"
#include "codegen_gemm_util.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr emu::Schedule kSchedules[] = {emu::Schedule::forward, emu::Schedule::reverse, emu::Schedule::random};

// Plans g (expecting `kernels` kernels, one of family `family`), runs it on emu under schedule `s` and on
// ref, at tolerance_for(t).
void expect_matches_ref(const Graph& g, DType t, int kernels, const char* family, emu::Schedule s, uint64_t seed) {
  const auto plan = gemm_test::expect_emu_matches_ref(g, seed, {}, family, s, testing::tolerance_for(t));
  if (!plan) return;
  EXPECT_EQ(plan->kernel_count(), kernels) << plan_to_text(*plan);
}

struct ConvCase {
  int64_t N = 1, C = 16, H = 7, W = 6, K = 24, R = 3, S = 3;
  Conv2dOptions o{.stride = {1, 1}, .padding = {1, 1}};
  Layout x_layout = Layout::NHWC;
  bool se = false;  // a squeeze-excite scale [N, C, 1, 1] after the ReLU
};

// x -> batch_norm -> relu [-> * s] -> conv2d: one conv kernel with a three- or four-op prologue.
Graph bn_relu_conv(const ConvCase& c, DType t) {
  Graph g(fmt::format("bn_relu_conv_c{}_{}", c.C, layout_name(c.x_layout)));
  const Tensor x = g.input("x", {c.N, c.C, c.H, c.W}, t, c.x_layout);
  auto vec = [&](const char* name) { return g.parameter(name, {c.C}, t); };
  Tensor a = g.relu(g.batch_norm(x, vec("scale"), vec("shift"), vec("mean"), vec("var")));
  if (c.se) a = g.mul(a, g.input("s", {c.N, c.C, 1, 1}, t));
  const Tensor w = g.parameter("w", {c.K, c.C / c.o.groups, c.R, c.S}, t, Layout::KRSC);
  g.output(g.conv2d(a, w, c.o), "y", Layout::NHWC);
  return g;
}

void check_conv(const ConvCase& c, const char* family = "conv2d") {
  for (DType t : kDtypes) {
    for (emu::Schedule s : kSchedules) {
      SCOPED_TRACE(fmt::format("C{} H{} W{} K{} {}x{} stride {} {}", c.C, c.H, c.W, c.K, c.R, c.S, c.o.stride[0],
                               layout_name(c.x_layout)));
      expect_matches_ref(bn_relu_conv(c, t), t, 1, family, s, 11);
    }
  }
}

// NHWC input, 16 channels: the staged vector loader (16-byte loads, prologue, 16-byte shared stores).
TEST(CodegenPrologue, BatchNormReluConvNhwcPadded) { check_conv(ConvCase{}); }

// NCHW input: the element loader applies the prologue per element.
TEST(CodegenPrologue, BatchNormReluConvNchwStrided) {
  ConvCase c;
  c.x_layout = Layout::NCHW;
  c.H = 9, c.W = 8;
  c.o = {.stride = {2, 2}, .padding = {1, 2, 0, 1}};  // asymmetric padding
  check_conv(c);
}

// 12 channels: not a multiple of the 16-byte vector of f16, so the element loader with a channel tail;
// a 1x1 conv with a squeeze-excite scale per image (N = 2).
TEST(CodegenPrologue, SqueezeExciteScaleChannelTail) {
  ConvCase c;
  c.N = 2, c.C = 12, c.K = 20, c.R = 1, c.S = 1;
  c.o = {};
  c.se = true;
  check_conv(c);
  c.C = 16;  // the staged vector loader with the per-image scale
  check_conv(c);
}

// The depthwise kernel (one input channel per group) applies the prologue to every in-bounds tap.
TEST(CodegenPrologue, DepthwiseConv) {
  ConvCase c;
  c.C = 8, c.K = 8;
  c.o = {.stride = {1, 1}, .padding = {1, 1}, .groups = 8};
  check_conv(c, "depthwise_conv2d");
}

// a [M, K] -> * scale[K] + shift[K] -> gelu -> matmul: the tiled GEMM (M = 40) and the skinny kernel (M = 3).
Graph affine_gelu_matmul(int64_t M, int64_t K, int64_t N, DType t) {
  Graph g(fmt::format("affine_gelu_matmul_m{}", M));
  const Tensor a = g.input("a", {M, K}, t);
  const Tensor scaled = g.mul(a, g.parameter("scale", {K}, t));
  const Tensor shifted = g.bias_add(scaled, g.parameter("shift", {K}, t), 1);
  const Tensor b = g.parameter("b", {K, N}, t);
  g.output(g.matmul(g.gelu(shifted), b), "y");
  return g;
}

TEST(CodegenPrologue, MatmulTiledAndSkinny) {
  for (DType t : kDtypes) {
    for (emu::Schedule s : kSchedules) {
      expect_matches_ref(affine_gelu_matmul(40, 48, 24, t), t, 1, "matmul", s, 5);
      expect_matches_ref(affine_gelu_matmul(3, 40, 24, t), t, 1, "matmul_skinny", s, 5);
    }
  }
}

// A prologue value read elsewhere (the batch norm's output is also a graph output) stays its own kernel,
// and so does a per-pixel operand (a full-shape tensor added before the conv is no prologue operand).
TEST(CodegenPrologue, NotAbsorbedWhenReadElsewhereOrPerPixel) {
  {
    Graph g("bn_shared");
    const Tensor x = g.input("x", {1, 8, 5, 5}, DType::f32, Layout::NHWC);
    auto vec = [&](const char* name) { return g.parameter(name, {8}); };
    const Tensor bn = g.batch_norm(x, vec("scale"), vec("shift"), vec("mean"), vec("var"));
    g.output(bn, "bn", Layout::NHWC);
    g.output(g.conv2d(bn, g.parameter("w", {8, 8, 3, 3}, DType::f32, Layout::KRSC), {.padding = {1, 1}}), "y",
             Layout::NHWC);
    expect_matches_ref(g, DType::f32, 2, "conv2d", emu::Schedule::forward, 3);
  }
  {
    Graph g("per_pixel");
    const Tensor x = g.input("x", {1, 8, 5, 5}, DType::f32, Layout::NHWC);
    const Tensor r = g.input("r", {1, 8, 5, 5}, DType::f32, Layout::NHWC);
    g.output(g.conv2d(g.add(x, r), g.parameter("w", {8, 8, 3, 3}, DType::f32, Layout::KRSC), {.padding = {1, 1}}), "y",
             Layout::NHWC);
    expect_matches_ref(g, DType::f32, 2, "conv2d", emu::Schedule::forward, 4);
  }
}

// A cast in front of the conv changes the storage type the kernel would load: no prologue (two kernels,
// not a refused group split into pieces), and right.
TEST(CodegenPrologue, CastIsNoPrologue) {
  Graph g("cast_conv");
  const Tensor x = g.input("x", {1, 8, 6, 6}, DType::f32, Layout::NHWC);
  const Tensor h = g.cast(g.relu(x), DType::f16);
  g.output(g.conv2d(h, g.parameter("w", {8, 8, 3, 3}, DType::f16, Layout::KRSC), {.padding = {1, 1}}), "y",
           Layout::NHWC);
  expect_matches_ref(g, DType::f16, 2, "conv2d", emu::Schedule::forward, 6);
}

// ConvNeXt's downsampling: LayerNorm2d (permute -> layer_norm over the channels -> permute back) in front of
// a conv whose windows do not overlap is the conv's *layer-norm prologue*: the kernel computes each
// pixel's mean and variance over its tile, then normalizes every element it loads. One kernel. `mid` puts
// a residual-style producer in front (a conv whose output is stored NHWC, as ConvNeXt's block output is).
Graph layernorm2d_conv(DType t, int64_t N, int64_t C, int64_t HW, int64_t K, int64_t RS, int64_t stride) {
  Graph g(fmt::format("layernorm2d_conv_c{}_{}x{}_s{}_{}", C, RS, RS, stride, dtype_name(t)));
  const Tensor x = g.input("x", {N, HW, HW, C}, t);  // [N, H, W, C] row-major: the permuted block output
  NormOptions ln{.scale = g.parameter("ln.s", {C}, t), .shift = g.parameter("ln.t", {C}, t), .epsilon = 1e-6};
  const Tensor n = g.transpose(g.layer_norm(x, ln), {0, 3, 1, 2});
  const Tensor w = g.parameter("w", {K, C, RS, RS}, t, Layout::KRSC);
  g.output(g.conv2d(n, w, g.parameter("b", {K}, t), {.stride = {stride, stride}}), "y", Layout::NHWC);
  return g;
}

TEST(CodegenPrologue, LayerNorm2dBeforeADownsamplingConv) {
  for (emu::Schedule s : kSchedules) {
    for (DType t : kDtypes) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(t), emu::schedule_name(s)));
      // 2x2 stride 2 over 40 channels (16-byte vectors: the staged loader), two images of 6x6.
      expect_matches_ref(layernorm2d_conv(t, 2, 40, 6, 24, 2, 2), t, 1, "conv2d", s, 31);
      // 1x1 over 12 channels (f16 / bf16: not whole 16-byte vectors, the element loader), 5x5.
      expect_matches_ref(layernorm2d_conv(t, 2, 12, 5, 16, 1, 1), t, 1, "conv2d", s, 32);
    }
  }
  // More channels than a warp's lanes several times over and more pixels than one tile (ConvNeXt's 192).
  expect_matches_ref(layernorm2d_conv(DType::f32, 1, 192, 16, 64, 2, 2), DType::f32, 1, "conv2d",
                     emu::Schedule::forward, 33);
}

// Overlapping windows (3x3 stride 1) would normalize every pixel up to 9 times: the norm stays a kernel.
TEST(CodegenPrologue, LayerNorm2dBeforeAnOverlappingConvIsItsOwnKernel) {
  expect_matches_ref(layernorm2d_conv(DType::f32, 1, 16, 6, 8, 3, 1), DType::f32, 2, "conv2d", emu::Schedule::forward,
                     34);
}

// NVRTC compiles the prologue kernels for sm_80 and sm_90 without spills (the staged vector loader holds
// its transformed chunks in registers across the math of a stage).
TEST(CodegenPrologue, CompilesWithoutSpills) {
  ConvCase c;
  c.C = 64, c.K = 64, c.H = c.W = 28;
  for (DType t : {DType::f32, DType::f16}) {
    gemm_test::expect_compiles_without_spills(bn_relu_conv(c, t));
    gemm_test::expect_compiles_without_spills(affine_gelu_matmul(256, 128, 128, t));
    gemm_test::expect_compiles_without_spills(layernorm2d_conv(t, 1, 192, 16, 384, 2, 2));
  }
}

}  // namespace
}  // namespace kiln
