// The matmul family: batched matmul + epilogue on the tiled GEMM (templates/kiln/matmul.cuh), or for at most 8
// rows on the skinny kernel (templates/kiln/matmul_skinny.cuh). Transposes and
// NumPy-broadcast batch dims become compile-time strides (stride 0 along a broadcast dim); the glue holds
// the batch decomposition as straight-line code in Cfg.
#include <fmt/format.h>

#include "codegen/family_gemm.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

// The element stride of each output batch dim in an operand of logical `shape` (0 where it broadcasts).
std::vector<int64_t> batch_strides(const Shape& shape, const std::vector<int64_t>& strides, int out_rank) {
  const int batch = out_rank - 2, r = shape.rank();
  std::vector<int64_t> s(static_cast<size_t>(batch), 0);
  for (int i = 0; i < batch; ++i) {
    const int d = r - 2 - (batch - i);
    if (d >= 0 && shape[d] != 1) s[static_cast<size_t>(i)] = strides[static_cast<size_t>(d)];
  }
  return s;
}

// `static __device__ long long NAME(int z)`: base + Σ coord_i(z) · stride_i, z decomposed row-major by
// the output's batch dims.
std::string offset_fn(const char* name, int64_t base, const std::vector<int64_t>& st, const Shape& out) {
  std::string body = fmt::format("    long long o = {}LL;\n", base);
  const int batch = out.rank() - 2;
  bool any = false;
  for (int i = batch - 1; i >= 0; --i) {
    if (st[static_cast<size_t>(i)] == 0) continue;
    any = true;
    int64_t inner = 1;
    for (int j = i + 1; j < batch; ++j) inner *= out[j];
    body += fmt::format("    o += (long long)(z / {} % {}) * {}LL;\n", inner, out[i], st[static_cast<size_t>(i)]);
  }
  if (!any) body += "    (void)z;\n";
  return fmt::format("  static __device__ __forceinline__ long long {}(int z) {{\n{}    return o;\n  }}\n", name, body);
}

bool all_multiples(const std::vector<int64_t>& v, int64_t base, int64_t k) {
  if (base % k != 0) return false;
  for (int64_t s : v)
    if (s % k != 0) return false;
  return true;
}

}  // namespace

Result<Kernel> generate_matmul(KernelBuilder& b) {
  const int32_t an = b.anchor();
  if (an < 0 || *b.node(an).op != OpId::matmul) {
    return unsupported(fmt::format("group {}: no matmul node", b.group().id));
  }
  const Node& nd = b.node(an);
  const Tensor a = nd.inputs[0][0], bt = nd.inputs[1][0], y = nd.outputs[0];
  const Tensor* bias = nd.inputs.size() > 2 && !nd.inputs[2].empty() ? &nd.inputs[2][0] : nullptr;
  KILN_RETURN_IF_ERROR(gemm_glue::check_operand(b, an, a));
  KILN_RETURN_IF_ERROR(gemm_glue::check_operand(b, an, bt));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epilogue, gemm_glue::epilogue_nodes(b, an));

  const MemView av = b.view(a), bv = b.view(bt);  // p0 and p1
  if (av.dtype != bv.dtype) return unsupported(fmt::format("node '{}': a and b differ in dtype", nd.name));
  const bool ta = std::get<bool>(nd.attrs.at("transpose_a")), tb = std::get<bool>(nd.attrs.at("transpose_b"));
  const Shape& as = b.info(a).shape;
  const Shape& bs = b.info(bt).shape;
  const Shape& ys = b.info(y).shape;
  const int ra = as.rank(), rb = bs.rank(), R = ys.rank();
  const int64_t M = ys[R - 2], N = ys[R - 1], K = ta ? as[ra - 2] : as[ra - 1];
  int64_t batches = 1;
  for (int i = 0; i < R - 2; ++i) batches *= ys[i];
  const auto ast = [&](int d) { return av.strides[static_cast<size_t>(d)]; };
  const auto bst = [&](int d) { return bv.strides[static_cast<size_t>(d)]; };
  const int64_t sam = ta ? ast(ra - 1) : ast(ra - 2), sak = ta ? ast(ra - 2) : ast(ra - 1);
  const int64_t sbk = tb ? bst(rb - 1) : bst(rb - 2), sbn = tb ? bst(rb - 2) : bst(rb - 1);
  const std::vector<int64_t> abs = batch_strides(as, av.strides, R), bbs = batch_strides(bs, bv.strides, R);
  const int64_t vec = 16 / dtype_size(av.dtype);

  const gemm_glue::Tiles t = gemm_glue::pick_tiles(M, N, batches, av.dtype);
  // At most 8 rows: the skinny kernel (kiln/matmul_skinny.cuh), one block per batch and column strip with K
  // split across its threads. LN, its lanes across the strip, is the smallest of 2, 4, 8 whose pass over k
  // (8 warps x 32 / LN lanes x V values) fits in K, so that few lanes idle and the grid has many strips.
  const bool skinny = M <= 8;
  int ln = 2;
  while (skinny && ln < 8 && 8 * (32 / ln) * vec > K) ln *= 2;
  const int64_t strip = ln * vec;
  const int64_t gx = skinny ? (N + strip - 1) / strip * batches : (M + t.bm - 1) / t.bm * batches;
  const int64_t gy = skinny ? 1 : (N + t.bn - 1) / t.bn;
  if (M >= (int64_t{1} << 31) || N >= (int64_t{1} << 31) || K >= (int64_t{1} << 31) || gx >= (int64_t{1} << 31) ||
      gy > 65535) {
    return unsupported(
        fmt::format("node '{}': {}x{}x{} in {} batches exceeds the launch grid", nd.name, M, N, K, batches));
  }

  KILN_ASSIGN_OR_RETURN(std::string epi, gemm_glue::epi_functor(b, epilogue, y, R, bias, R - 1));
  std::string cfg = fmt::format(
      "struct Cfg {{\n"
      "  static constexpr int M = {}, N = {}, K = {}, BATCH = {}, R = {};\n"
      "  static constexpr long long SAM = {}, SAK = {}, SBK = {}, SBN = {};\n"
      "  static constexpr bool AV = {}, BV = {};\n"
      "{}",
      M, N, K, batches, R, sam, sak, sbk, sbn, all_multiples(abs, av.base, vec), all_multiples(bbs, bv.base, vec),
      skinny ? fmt::format("  static constexpr int LN = {};\n", ln)
             : fmt::format("  static constexpr int BM = {}, BN = {}, BK = {}, TM = {}, TN = {};\n", t.bm, t.bn, t.bk,
                           t.tm, t.tn));
  cfg += offset_fn("a_off", av.base, abs, ys);
  cfg += offset_fn("b_off", bv.base, bbs, ys);
  cfg += fmt::format("  static __device__ __forceinline__ void batch(int z, kiln::Idx<{}>& i) {{\n", R);
  for (int i = 0; i < R - 2; ++i) {
    int64_t inner = 1;
    for (int j = i + 1; j < R - 2; ++j) inner *= ys[j];
    cfg += fmt::format("    i.i[{}] = z / {} % {};\n", i, inner, ys[i]);
  }
  if (R == 2) cfg += "    (void)z, (void)i;\n";
  cfg += "  }\n};\n";

  const std::string T(ctype(av.dtype));
  std::string src = kernel_preamble();
  src += skinny ? "#include \"kiln/matmul_skinny.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n"
                : "#include \"kiln/matmul.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
  src += cfg + "\n" + epi;
  src += "\n}  // namespace KILN_ENTRY_ns\n\n";
  if (skinny) {
    src += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__(256) KILN_ENTRY(KILN_PARAMS) {{\n"
        "  const KILN_ENTRY_ns::Epi epi{{KILN_PARAM_NAMES}};\n"
        "  kiln::mm::matmul_skinny<KILN_ENTRY_ns::Cfg, {}>(static_cast<const {}*>({}), static_cast<const {}*>({}), "
        "epi);\n"
        "}}\n",
        T, T, av.param, T, bv.param);
    return b.finish("matmul", src, {static_cast<uint32_t>(gx), 1, 1}, {256, 1, 1});
  }
  // Launch bounds with 2 resident blocks: with the block size alone, ptxas caps 256 threads at 64 registers.
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}, 2) KILN_ENTRY(KILN_PARAMS) {{\n"
      "  const KILN_ENTRY_ns::Epi epi{{KILN_PARAM_NAMES}};\n"
      "  kiln::mm::matmul<KILN_ENTRY_ns::Cfg, {}>(static_cast<const {}*>({}), static_cast<const {}*>({}), epi);\n"
      "}}\n",
      t.threads(), T, T, av.param, T, bv.param);
  return b.finish("matmul", src, {static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), 1},
                  {static_cast<uint32_t>(t.threads()), 1, 1});
}

}  // namespace kiln::codegen
