// The matmul family: batched matmul + epilogue on the tiled GEMM (templates/kiln/matmul.cuh), or for at most 8
// rows on the skinny kernel (templates/kiln/matmul_skinny.cuh). Transposes and
// NumPy-broadcast batch dims become compile-time strides (stride 0 along a broadcast dim); the glue holds
// the batch decomposition as straight-line code in Cfg.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/family_gemm.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

double gemm_flops(const MatmulOperands& o) { return 2.0 * double(o.m) * double(o.n) * double(o.k) * double(o.batches); }

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

// The shapes, strides and batch decomposition of the group's matmul.
struct Mm {
  const Node* node = nullptr;
  Tensor a, b, y;
  Tensor a_source;  // what the kernel reads for a: a, or the tensor a's prologue starts from
  gemm_glue::Prologue prologue;
  const Tensor* bias = nullptr;
  int64_t M = 0, N = 0, K = 0, batches = 1;
  int R = 0;
};

Result<Mm> matmul_of(KernelBuilder& b) {
  const int32_t an = b.anchor();
  if (an < 0 || *b.node(an).op != OpId::matmul)
    return unsupported(fmt::format("group {}: no matmul node", b.group().id));
  KILN_RETURN_IF_ERROR(gemm_glue::check_group(b, an));
  Mm m;
  const Node& nd = b.node(an);
  m.node = &nd;
  m.a = nd.inputs[0][0], m.b = nd.inputs[1][0], m.y = nd.outputs[0];
  m.bias = nd.inputs.size() > 2 && !nd.inputs[2].empty() ? &nd.inputs[2][0] : nullptr;
  KILN_ASSIGN_OR_RETURN(m.prologue, gemm_glue::prologue_of(b, an));
  m.a_source = m.prologue.source;
  const bool ta = std::get<bool>(nd.attrs.at("transpose_a"));
  const Shape& as = b.info(m.a).shape;
  const Shape& ys = b.info(m.y).shape;
  m.R = ys.rank();
  m.M = ys[m.R - 2], m.N = ys[m.R - 1], m.K = ta ? as[as.rank() - 2] : as[as.rank() - 1];
  for (int i = 0; i < m.R - 2; ++i) m.batches *= ys[i];
  return m;
}

// The operands as the kernel reads them (call after the parameters are declared), and whether every batch's
// rows of a and b start 16-byte aligned given aligned bases (AV / BV).
MatmulOperands operands_of(KernelBuilder& b, const Mm& m) {
  MatmulOperands o{m.M, m.N, m.K, m.batches, false, false, b.view(m.a_source), b.view(m.b)};
  const int64_t vec = 16 / dtype_size(o.a.dtype);
  o.a_vec = all_multiples(batch_strides(b.info(m.a).shape, o.a.strides, m.R), o.a.base, vec);
  o.b_vec = all_multiples(batch_strides(b.info(m.b).shape, o.b.strides, m.R), o.b.base, vec);
  return o;
}

// The operands the tile loader reads element by element (kiln/matmul.cuh's StridedRows::kVec is false: k not
// contiguous, or rows and k not multiples of 16 bytes), and by which mapping.
gemm_glue::ElementLoads element_loads_of(KernelBuilder& b, const Mm& m) {
  const MatmulOperands o = operands_of(b, m);
  const Node& nd = *m.node;
  const bool ta = std::get<bool>(nd.attrs.at("transpose_a")), tb = std::get<bool>(nd.attrs.at("transpose_b"));
  const int ra = b.info(m.a).shape.rank(), rb = b.info(m.b).shape.rank();
  const auto stride = [](const MemView& v, int d) { return v.strides[static_cast<size_t>(d)]; };
  const int64_t sam = stride(o.a, ta ? ra - 1 : ra - 2), sak = stride(o.a, ta ? ra - 2 : ra - 1);
  const int64_t sbk = stride(o.b, tb ? rb - 1 : rb - 2), sbn = stride(o.b, tb ? rb - 2 : rb - 1);
  const int64_t vec = 16 / dtype_size(o.a.dtype);
  const auto chunks = [&](bool aligned, int64_t step, int64_t kstride) {
    return aligned && kstride == 1 && step % vec == 0 && m.K % vec == 0;
  };
  // StridedRows::kKFast: k contiguous.
  const auto cost = [](bool vec, int64_t kstride) {
    return vec ? 0 : kstride == 1 ? gemm_glue::ElementLoads::kMatmulKFastest : gemm_glue::ElementLoads::kRowFastest;
  };
  return {cost(chunks(o.a_vec, sam, sak), sak), cost(chunks(o.b_vec, sbn, sbk), sbk)};
}

Status check_grid(const Mm& m, int64_t gx, int64_t gy) {
  if (m.M >= (int64_t{1} << 31) || m.N >= (int64_t{1} << 31) || m.K >= (int64_t{1} << 31) || gx >= (int64_t{1} << 31) ||
      gy > 65535) {
    return unsupported(fmt::format("node '{}': {}x{}x{} in {} batches exceeds the launch grid", m.node->name, m.M, m.N,
                                   m.K, m.batches));
  }
  return {};
}

// Cfg: shapes, k/m/n strides, batch offsets; `rows` declares the rows ("M = 4", or "MMAX = ..." where the
// kernel takes them as an argument), `tiles` is the family's own line.
Result<std::string> mm_cfg(KernelBuilder& b, const Mm& m, const MatmulOperands& o, const std::string& rows,
                           const std::string& tiles) {
  const MemView& av = o.a;
  const MemView& bv = o.b;
  const Node& nd = *m.node;
  const bool ta = std::get<bool>(nd.attrs.at("transpose_a")), tb = std::get<bool>(nd.attrs.at("transpose_b"));
  const Shape& as = b.info(m.a).shape;
  const Shape& bs = b.info(m.b).shape;
  const Shape& ys = b.info(m.y).shape;
  const int ra = as.rank(), rb = bs.rank(), R = m.R;
  const auto ast = [&](int d) { return av.strides[static_cast<size_t>(d)]; };
  const auto bst = [&](int d) { return bv.strides[static_cast<size_t>(d)]; };
  const int64_t sam = ta ? ast(ra - 1) : ast(ra - 2), sak = ta ? ast(ra - 2) : ast(ra - 1);
  const int64_t sbk = tb ? bst(rb - 1) : bst(rb - 2), sbn = tb ? bst(rb - 2) : bst(rb - 1);
  std::string cfg = fmt::format(
      "struct Cfg {{\n"
      "  static constexpr int {}, N = {}, K = {}, BATCH = {}, R = {};\n"
      "  static constexpr long long SAM = {}, SAK = {}, SBK = {}, SBN = {};\n"
      "  static constexpr bool AV = {}, BV = {};\n"
      "{}",
      rows, m.N, m.K, m.batches, R, sam, sak, sbk, sbn, o.a_vec, o.b_vec, tiles);
  cfg += offset_fn("a_off", av.base, batch_strides(as, av.strides, R), ys);
  cfg += offset_fn("b_off", bv.base, batch_strides(bs, bv.strides, R), ys);
  cfg += fmt::format("  static __device__ __forceinline__ void batch(int z, kiln::Idx<{}>& i) {{\n", R);
  for (int i = 0; i < R - 2; ++i) {
    int64_t inner = 1;
    for (int j = i + 1; j < R - 2; ++j) inner *= ys[j];
    cfg += fmt::format("    i.i[{}] = z / {} % {};\n", i, inner, ys[i]);
  }
  if (R == 2) cfg += "    (void)z, (void)i;\n";
  cfg += "  }\n};\n";
  return cfg;
}

// The whole source: Cfg, Epi, and an entry calling `call` with launch bounds `bounds` (and `rows_arg` first,
// when given).
Result<Kernel> render_mm(KernelBuilder& b, const KernelConfig& k, const Mm& m, const MatmulOperands& o,
                         const std::string& cfg, const char* header, const char* call, const std::string& bounds,
                         const std::string& rows_arg = {}) {
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epilogue, gemm_glue::epilogue_nodes(b, b.anchor()));
  KILN_ASSIGN_OR_RETURN(std::string epi, gemm_glue::epi_functor(b, epilogue, m.y, m.R, m.bias, m.R - 1));
  std::string pro_fn;
  if (m.prologue.active()) {  // operands along k only (prologue_operand), so every coordinate but a's last is 0
    std::vector<std::string> coords(static_cast<size_t>(b.info(m.a).shape.rank()), "0");
    coords.back() = "i.i[0]";
    KILN_ASSIGN_OR_RETURN(pro_fn, gemm_glue::pro_functor(b, m.prologue, m.a, coords, 1));
  }
  const std::string src = gemm_glue::gemm_source(header, cfg + "\n" + epi, pro_fn, {{"Epi", "epi"}}, call, bounds,
                                                 o.a.dtype, o.a.param, o.b.param, rows_arg);
  return b.finish(k.family, src, k.grid, k.block, k.dynamic_smem);
}

// The largest rows a batch-generic 2-D matmul kernel serves (Cfg::MMAX): fewer than 2^31, and where a's
// offsets fit in an int at m's rows (matmul.cuh's StridedRows::kInt), the rows where they still do. A function
// of everything but the rows and of that one bit, as the conv family's batch_limit.
int64_t rows_limit(const Mm& m, const MatmulOperands& o) {
  constexpr int64_t kLimit = (int64_t{1} << 31) - 1;
  const Node& nd = *m.node;
  const bool ta = std::get<bool>(nd.attrs.at("transpose_a"));
  const int ra = static_cast<int>(o.a.strides.size());
  const int64_t sam = std::abs(o.a.strides[static_cast<size_t>(ta ? ra - 1 : ra - 2)]);
  const int64_t sak = std::abs(o.a.strides[static_cast<size_t>(ta ? ra - 2 : ra - 1)]);
  const int64_t rest = (m.K - 1) * sak;
  const int64_t by_int = rest > kLimit ? 0 : sam == 0 ? kLimit : (kLimit - rest) / sam + 1;
  return m.M <= by_int ? std::min(by_int, kLimit) : kLimit;
}

// The tiled GEMM (kiln/matmul.cuh) for more than 8 rows.
class MatmulFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::matmul; }
  std::string describe(const KernelConfig& k) const override {
    const MatmulConfig& mc = std::get<MatmulConfig>(k.detail);
    return gemm_glue::tiles_text(mc.tiles) + gemm_glue::choice_text(mc.choice);
  }
  double flops(const KernelConfig& k) const override { return gemm_flops(std::get<MatmulConfig>(k.detail).operands); }
  bool tensor_cores(const KernelConfig& k) const override {
    return std::get<MatmulConfig>(k.detail).tiles.main_loop == MainLoop::tensor_core;
  }
  bool runs(GroupKind k) const override { return k == GroupKind::matmul; }
  Status can_implement(KernelBuilder& b, const Target& target) const override {
    KILN_ASSIGN_OR_RETURN(Mm m, matmul_of(b));
    return grid_of(m, tiles_of(b, m, target)).status();
  }

  Result<KernelConfig> plan(KernelBuilder& b, const Target& target) const override {
    KILN_ASSIGN_OR_RETURN(Mm m, matmul_of(b));
    MatmulConfig mc;
    mc.tiles = tiles_of(b, m, target, &mc.choice);
    KILN_ASSIGN_OR_RETURN(Dim3 grid, grid_of(m, mc.tiles));
    KernelConfig k = new_config(b, id());
    mc.operands = operands_of(b, m);
    k.grid = grid;
    k.block = {static_cast<uint32_t>(mc.tiles.threads()), 1, 1};
    k.dynamic_smem = static_cast<uint32_t>(mc.tiles.pad_smem);
    k.detail = mc;
    if (m.R == 2) {  // batch-generic: the rows (dim 0 of the output) are the kernel's argument
      k.params.push_back(KernelParam::batch_value(m.M));
      b.use_params(k.params);
    }
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const MatmulConfig& mc = std::get<MatmulConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Mm m, matmul_of(b));
    const MatmulOperands o = operands_of(b, m);
    const GemmTiles& t = mc.tiles;
    const std::string rows = fmt::format("MMAX = {}", m.R == 2 ? rows_limit(m, o) : m.M);
    KILN_ASSIGN_OR_RETURN(std::string cfg,
                          mm_cfg(b, m, o, rows,
                                 fmt::format("  static constexpr int BM = {}, BN = {}, BK = {}, TM = {}, TN = {}, "
                                             "STAGES = {};\n  static constexpr bool ALONG_M = {};\n",
                                             t.bm, t.bn, t.bk, t.tm, t.tn, t.stages,
                                             gemm_glue::store_along_m(b, k.params, m.y, m.R - 2, m.R - 1))));
    // Launch bounds with the tile's residency: with the block size alone, ptxas caps 256 threads at 64
    // registers.
    return render_mm(b, k, m, o, cfg, "matmul", "kiln::mm::matmul",
                     fmt::format("{}, {}", k.block.x, t.launch_bounds_blocks()),
                     m.R == 2 ? b.batch_param() : "KILN_ENTRY_ns::Cfg::MMAX");
  }

 private:
  // A shape-generic plan's 2-D matmul (batch-generic: its rows are the batch) takes the generic tile unless
  // the rows' own is much faster (generic_or_own); a batched one keeps its own (its source holds every dim).
  static GemmTiles tiles_of(KernelBuilder& b, const Mm& m, const Target& target, TileChoice* choice = nullptr) {
    const auto pick = [&](int64_t rows) {
      return gemm_glue::pick_tiles(rows, m.N, m.batches, b.info(m.a).dtype, target, 0, element_loads_of(b, m));
    };
    const GemmTiles own = pick(m.M);
    if (b.plan().tiles == TilePolicy::own || m.R != 2) return own;
    return gemm_glue::generic_or_own(pick(gemm_glue::kSaturatingRows), own, m.M, m.N, m.batches, target, 0,
                                     b.plan().tiles, choice);
  }
  // A block per BM x BN tile of every batch.
  static Result<Dim3> grid_of(const Mm& m, const GemmTiles& t) {
    const int64_t gx = (m.M + t.bm - 1) / t.bm * m.batches, gy = (m.N + t.bn - 1) / t.bn;
    KILN_RETURN_IF_ERROR(check_grid(m, gx, gy));
    return Dim3{static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), 1};
  }
};

// LN for the skinny kernel: the smallest of 2, 4, 8 whose pass over k (8 warps x 32 / LN lanes x V values)
// fits in K.
int lanes_for(int64_t K, int vec) {
  int ln = 2;
  while (ln < 8 && 8 * (32 / ln) * vec > K) ln *= 2;
  return ln;
}

// At most 8 rows (kiln/matmul_skinny.cuh): one block per batch and column strip with K split across its
// threads. LN, its lanes across the strip, is the smallest of 2, 4, 8 whose pass over k (8 warps x 32 / LN
// lanes x V values) fits in K, so that few lanes idle and the grid has many strips.
class SkinnyMatmulFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::matmul_skinny; }
  std::string describe(const KernelConfig& k) const override {
    const SkinnyMatmulConfig& p = std::get<SkinnyMatmulConfig>(k.detail);
    return fmt::format("skinny ln{} v{} t{}", p.lanes, p.vec, p.threads);
  }
  double flops(const KernelConfig& k) const override {
    return gemm_flops(std::get<SkinnyMatmulConfig>(k.detail).operands);
  }
  bool runs(GroupKind k) const override { return k == GroupKind::matmul; }
  Status can_implement(KernelBuilder& b, const Target&) const override {
    KILN_ASSIGN_OR_RETURN(Mm m, matmul_of(b));
    return shape_of(b, m).status();
  }

  Result<KernelConfig> plan(KernelBuilder& b, const Target&) const override {
    KILN_ASSIGN_OR_RETURN(Mm m, matmul_of(b));
    KILN_ASSIGN_OR_RETURN(SkinnyMatmulConfig sc, shape_of(b, m));
    KernelConfig k = new_config(b, id());
    sc.operands = operands_of(b, m);
    const int64_t strip = int64_t{sc.lanes} * sc.vec;
    k.grid = {static_cast<uint32_t>((m.N + strip - 1) / strip * m.batches), 1, 1};
    k.block = {static_cast<uint32_t>(sc.threads), 1, 1};
    k.detail = sc;
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const SkinnyMatmulConfig& sc = std::get<SkinnyMatmulConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Mm m, matmul_of(b));
    const MatmulOperands o = operands_of(b, m);
    KILN_ASSIGN_OR_RETURN(std::string cfg, mm_cfg(b, m, o, fmt::format("M = {}", m.M),
                                                  fmt::format("  static constexpr int LN = {};\n", sc.lanes)));
    return render_mm(b, k, m, o, cfg, "matmul_skinny", "kiln::mm::matmul_skinny", fmt::format("{}", sc.threads));
  }

 private:
  // Lanes and vector width, when the matmul has at most 8 rows and its strips fit the grid.
  static Result<SkinnyMatmulConfig> shape_of(KernelBuilder& b, const Mm& m) {
    if (m.M > 8)
      return unsupported(fmt::format("node '{}': {} rows (the skinny kernel takes at most 8)", m.node->name, m.M));
    SkinnyMatmulConfig sc;
    sc.vec = static_cast<int>(16 / dtype_size(b.info(m.a).dtype));
    sc.lanes = lanes_for(m.K, sc.vec);
    const int64_t strip = int64_t{sc.lanes} * sc.vec;
    KILN_RETURN_IF_ERROR(check_grid(m, (m.N + strip - 1) / strip * m.batches, 1));
    return sc;
  }
};

}  // namespace

const KernelFamily& matmul_family() {
  static const MatmulFamily f;
  return f;
}

const KernelFamily& skinny_matmul_family() {
  static const SkinnyMatmulFamily f;
  return f;
}

}  // namespace kiln::codegen
