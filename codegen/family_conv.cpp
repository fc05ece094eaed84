// The conv family: conv2d + epilogue as an implicit GEMM (templates/kiln/conv2d.cuh), or, when every group
// has one input channel (depthwise), as a direct kernel (templates/kiln/depthwise_conv2d.cuh). The glue is
// a Cfg of compile-time shapes, strides and tiles, the Epi functor, and the entry.
#include <array>

#include <fmt/format.h>

#include "codegen/family_gemm.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

constexpr int kDepthwiseThreads = 256;

const std::vector<int64_t>& ints(const Node& n, std::string_view name) {
  return std::get<std::vector<int64_t>>(n.attrs.at(std::string(name)));
}

}  // namespace

Result<Kernel> generate_conv(KernelBuilder& b) {
  const int32_t a = b.anchor();
  if (a < 0 || *b.node(a).op != OpId::conv2d) {
    return unsupported(fmt::format("group {}: no conv2d node", b.group().id));
  }
  const Node& nd = b.node(a);
  const Tensor x = nd.inputs[0][0], w = nd.inputs[1][0], y = nd.outputs[0];
  const Tensor* bias = nd.inputs.size() > 2 && !nd.inputs[2].empty() ? &nd.inputs[2][0] : nullptr;
  KILN_RETURN_IF_ERROR(gemm_glue::check_operand(b, a, x));
  KILN_RETURN_IF_ERROR(gemm_glue::check_operand(b, a, w));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epilogue, gemm_glue::epilogue_nodes(b, a));

  // Operands first: x and w are parameters p0 and p1 of every conv kernel.
  const MemView xv = b.view(x), wv = b.view(w);
  if (xv.dtype != wv.dtype) return unsupported(fmt::format("node '{}': x and w differ in dtype", nd.name));
  const Shape& xs = b.info(x).shape;
  const Shape& ws = b.info(w).shape;
  const Shape& ys = b.info(y).shape;
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], K = ws[0], R = ws[2], S = ws[3], P = ys[2], Q = ys[3];
  const int64_t G = std::get<int64_t>(nd.attrs.at("groups"));
  const auto& st = ints(nd, "stride");
  const auto& dl = ints(nd, "dilation");
  std::vector<int64_t> pad = ints(nd, "padding");
  if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
  // The templates index pixels, channels and GEMM rows with int; element offsets are 64-bit.
  const int64_t M = N * P * Q;
  if (M >= (int64_t{1} << 31) || N * K * P * Q >= (int64_t{1} << 31) || C * R * S >= (int64_t{1} << 31)) {
    return unsupported(fmt::format("node '{}': more than 2^31 output pixels or reduction terms", nd.name));
  }

  KILN_ASSIGN_OR_RETURN(std::string epi, gemm_glue::epi_functor(b, epilogue, y, 4, bias, 1));
  const bool depthwise = C == G;
  const std::string T(ctype(xv.dtype));
  std::string cfg = fmt::format(
      "struct Cfg {{\n"
      "  static constexpr int N = {}, C = {}, H = {}, W = {}, K = {}, P = {}, Q = {}, R = {}, S = {}, G = {};\n"
      "  static constexpr int SH = {}, SW = {}, PT = {}, PL = {}, DH = {}, DW = {};\n"
      "  static constexpr long long XN = {}, XC = {}, XH = {}, XW = {}, XB = {};\n"
      "  static constexpr long long WK = {}, WC = {}, WR = {}, WS = {}, WB = {};\n",
      N, C, H, W, K, P, Q, R, S, G, st[0], st[1], pad[0], pad[1], dl[0], dl[1], xv.strides[0], xv.strides[1],
      xv.strides[2], xv.strides[3], xv.base, wv.strides[0], wv.strides[1], wv.strides[2], wv.strides[3], wv.base);
  Dim3 grid, block;
  std::string call;
  if (depthwise) {
    cfg += fmt::format("  static constexpr int THREADS = {};\n}};\n", kDepthwiseThreads);
    grid.x = static_cast<uint32_t>((N * K * P * Q + kDepthwiseThreads - 1) / kDepthwiseThreads);
    block.x = kDepthwiseThreads;
    call = "kiln::conv::depthwise_conv2d";
  } else {
    const gemm_glue::Tiles t = gemm_glue::pick_tiles(M, K / G, G, xv.dtype);
    cfg += fmt::format("  static constexpr int BM = {}, BN = {}, BK = {}, TM = {}, TN = {};\n}};\n", t.bm, t.bn, t.bk,
                       t.tm, t.tn);
    const int64_t gy = (K / G + t.bn - 1) / t.bn * G;
    if (gy > 65535) return unsupported(fmt::format("node '{}': {} channel tiles exceed the grid's y extent", nd.name, gy));
    grid.x = static_cast<uint32_t>((M + t.bm - 1) / t.bm);
    grid.y = static_cast<uint32_t>(gy);
    block.x = static_cast<uint32_t>(t.threads());
    call = "kiln::conv::conv2d_implicit_gemm";
  }

  std::string src = kernel_preamble();
  src += fmt::format("#include \"kiln/{}.cuh\"\n\nnamespace KILN_ENTRY_ns {{\n\n", depthwise ? "depthwise_conv2d" : "conv2d");
  src += cfg + "\n" + epi;
  src += "\n}  // namespace KILN_ENTRY_ns\n\n";
  // The GEMM's launch bounds ask for 2 resident blocks: with the block size alone, ptxas caps a 256-thread
  // kernel at 64 registers and spills.
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) KILN_ENTRY(KILN_PARAMS) {{\n"
      "  const KILN_ENTRY_ns::Epi epi{{KILN_PARAM_NAMES}};\n"
      "  {}<KILN_ENTRY_ns::Cfg, {}>(static_cast<const {}*>({}), static_cast<const {}*>({}), epi);\n"
      "}}\n",
      depthwise ? fmt::format("{}", block.x) : fmt::format("{}, 2", block.x), call, T, T, xv.param, T, wv.param);
  return b.finish(depthwise ? "depthwise_conv2d" : "conv2d", src, grid, block);
}

}  // namespace kiln::codegen
