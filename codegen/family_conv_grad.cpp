// The conv gradient family: conv2d_dgrad and conv2d_wgrad + epilogue as implicit GEMMs
// (templates/kiln/conv2d_grad.cuh) on the forward conv's tiled GEMM core. The glue is a Cfg of compile-time
// sizes, strides and tiles, the Epi functor, a Split functor when wgrad splits its pixels, and the entry.
#include <algorithm>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/family_conv.h"
#include "codegen/family_gemm.h"
#include "ops/conv_window.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

// The group's gradient op: its sizes, attributes and operands (dgrad: dy and w; wgrad: x and dy).
struct Grad {
  const Node* node = nullptr;
  bool wgrad = false;
  Tensor a, b, y;   // the operands in port order, the output
  Tensor dy, x, w;  // x invalid for dgrad, w for wgrad
  int64_t N, C, H, W, K, R, S, P, Q, G;
  std::array<int64_t, 4> pad;
  std::vector<int64_t> stride, dilation;
  // The GEMM (conv2d_grad.cuh): dgrad N·H·W x C/G x R·S·K/G, wgrad K/G x R·S·C/G x N·P·Q, per group.
  int64_t m() const { return wgrad ? K / G : N * H * W; }
  int64_t n() const { return wgrad ? R * S * (C / G) : C / G; }
  int64_t k() const { return wgrad ? N * P * Q : R * S * (K / G); }
};

Result<Grad> grad_of(KernelBuilder& b) {
  const int32_t an = b.anchor();
  const Node* nd = an >= 0 ? &b.node(an) : nullptr;
  if (nd == nullptr || (*nd->op != OpId::conv2d_dgrad && *nd->op != OpId::conv2d_wgrad))
    return unsupported(fmt::format("group {}: no conv2d_dgrad or conv2d_wgrad node", b.group().id));
  Grad g;
  g.node = nd;
  g.wgrad = *nd->op == OpId::conv2d_wgrad;
  g.a = nd->inputs[0][0], g.b = nd->inputs[1][0], g.y = nd->outputs[0];
  g.dy = g.wgrad ? g.b : g.a;
  if (g.wgrad) g.x = g.a;
  if (!g.wgrad) g.w = g.b;
  for (Tensor t : {g.a, g.b})
    if (!b.from_memory(t))
      return unsupported(fmt::format("node '{}': operand '{}' is computed inside the group", nd->name, b.info(t).name));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epi, gemm_glue::epilogue_nodes(b, an));
  KILN_RETURN_IF_ERROR(b.can_emit(epi));
  const Shape& ys = b.info(g.y).shape;
  const Shape& dys = b.info(g.dy).shape;
  g.G = std::get<int64_t>(nd->attrs.at("groups"));
  g.K = dys[1], g.P = dys[2], g.Q = dys[3];
  if (g.wgrad) {
    const Shape& xs = b.info(g.x).shape;
    g.N = xs[0], g.C = xs[1], g.H = xs[2], g.W = xs[3], g.R = ys[2], g.S = ys[3];
  } else {
    g.N = ys[0], g.C = ys[1], g.H = ys[2], g.W = ys[3], g.R = b.info(g.w).shape[2], g.S = b.info(g.w).shape[3];
  }
  g.pad = pad4(conv_glue::ints(*nd, "padding"));
  g.stride = conv_glue::ints(*nd, "stride");
  g.dilation = conv_glue::ints(*nd, "dilation");
  // The template indexes pixels, channels and GEMM rows with int; element offsets are 64-bit.
  constexpr int64_t kInt = int64_t{1} << 31;
  if (g.N * g.H * g.W * g.C >= kInt || g.N * g.P * g.Q * g.K >= kInt || g.R * g.S * std::max(g.C, g.K) >= kInt)
    return unsupported(fmt::format("node '{}': more than 2^31 pixels or reduction terms", nd->name));
  return g;
}

// The largest batch the source serves (Cfg::NMAX): int pixel and element indices (grad_of's limits).
int64_t batch_limit(const Grad& g) {
  constexpr int64_t kLimit = (int64_t{1} << 31) - 1;
  return kLimit / std::max({g.H * g.W * g.C, g.P * g.Q * g.K, int64_t{1}});
}

// Whether dy moves in 16-byte chunks in dgrad (OutputGradRows::kVec).
bool dy_chunks(const Grad& g, const MemView& v) {
  const int64_t vec = 16 / dtype_size(v.dtype);
  bool ok = v.strides[1] == 1 && (g.K / g.G) % vec == 0 && v.base % vec == 0;
  for (int d : {0, 2, 3}) ok = ok && v.strides[static_cast<size_t>(d)] % vec == 0;
  return ok;
}

// Wgrad's splits of its pixels: enough blocks for about one full wave of the tile's residency (the tiles
// alone are a filter's worth, a handful), each split at least kMinSplitSlices slices, at most kMaxWgradSplits.
constexpr int kMaxWgradSplits = 64;
int wgrad_splits(const Grad& g, const GemmTiles& t, const Target& target) {
  const int64_t tiles = (g.m() + t.bm - 1) / t.bm * ((g.n() + t.bn - 1) / t.bn) * g.G;
  const int64_t slices = (g.k() + t.bk - 1) / t.bk;
  const int64_t wave = int64_t{target.sm_count} * std::max(t.blocks_per_sm, 1);
  const int64_t want = (wave + tiles - 1) / tiles;
  return static_cast<int>(std::clamp<int64_t>(std::min(want, slices / gemm_glue::kMinSplitSlices), 1, kMaxWgradSplits));
}

GemmTiles tiles_of(KernelBuilder& b, const Grad& g, const Target& target) {
  using gemm_glue::ElementLoads;
  // dgrad's dy takes 16-byte chunks when NHWC with whole vectors of channels; its filter, and both wgrad
  // operands, go element by element (conv2d_grad.cuh).
  const MemView dyv = b.view(g.dy);
  const ElementLoads loads =
      g.wgrad ? ElementLoads{ElementLoads::kRowFastest, ElementLoads::kRowFastest}
              : ElementLoads{dy_chunks(g, dyv) ? 0 : ElementLoads::kConvKFastest, ElementLoads::kRowFastest};
  GemmTiles t = gemm_glue::pick_tiles(g.m(), g.n(), g.G, b.info(g.dy).dtype, target, 0, loads);
  if (g.wgrad) t.splits = wgrad_splits(g, t, target);
  return t;
}

// One channel per group: the direct depthwise kernels, BLOCK threads a block.
constexpr int kDepthwiseBlock = 256;
bool depthwise(const Grad& g) { return g.G > 1 && g.C == g.G && g.K == g.G; }

Result<Dim3> grid_of(const Grad& g, const GemmTiles& t) {
  if (depthwise(g)) {
    const int64_t blocks = g.wgrad ? g.C * g.R * g.S : (g.N * g.H * g.W * g.C + kDepthwiseBlock - 1) / kDepthwiseBlock;
    if (blocks >= (int64_t{1} << 31))
      return unsupported(fmt::format("node '{}': {} blocks exceed the launch grid", g.node->name, blocks));
    return Dim3{static_cast<uint32_t>(blocks), 1, 1};
  }
  const int64_t gx = (g.m() + t.bm - 1) / t.bm, gy = (g.n() + t.bn - 1) / t.bn * g.G;
  if (gy > 65535 || gx >= (int64_t{1} << 31))
    return unsupported(fmt::format("node '{}': {} x {} tiles exceed the launch grid", g.node->name, gx, gy));
  return Dim3{static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), static_cast<uint32_t>(t.splits)};
}

std::string view_line(const char* p, const MemView& v) {
  return fmt::format("  static constexpr long long {0}N = {1}, {0}C = {2}, {0}H = {3}, {0}W = {4}, {0}B = {5};\n", p,
                     v.strides[0], v.strides[1], v.strides[2], v.strides[3], v.base);
}

class ConvGradFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::conv2d_grad; }
  std::string describe(const KernelConfig& k) const override {
    const ConvGradConfig& c = std::get<ConvGradConfig>(k.detail);
    if (c.depthwise) return fmt::format("{} depthwise b{}", c.wgrad ? "wgrad" : "dgrad", kDepthwiseBlock);
    return fmt::format("{} {}", c.wgrad ? "wgrad" : "dgrad", gemm_glue::tiles_text(c.tiles));
  }
  // The products the kernel issues (a strided dgrad's skipped taps included).
  double flops(const KernelConfig& k) const override {
    const ConvGradConfig& c = std::get<ConvGradConfig>(k.detail);
    return 2.0 * double(c.m) * double(c.n) * double(c.k) * double(c.groups);
  }
  bool tensor_cores(const KernelConfig& k) const override {
    return std::get<ConvGradConfig>(k.detail).tiles.main_loop == MainLoop::tensor_core;
  }
  bool runs(GroupKind k) const override { return k == GroupKind::dgrad || k == GroupKind::wgrad; }

  Status can_implement(KernelBuilder& b, const Target& target) const override {
    KILN_ASSIGN_OR_RETURN(Grad g, grad_of(b));
    if (b.info(g.a).dtype != b.info(g.b).dtype)
      return unsupported(fmt::format("node '{}': its two operands differ in dtype", g.node->name));
    return grid_of(g, tiles_of(b, g, target)).status();
  }

  bool may_need_scratch() const override { return true; }
  // Wgrad's split partial tiles and counters.
  Group::Scratch scratch(KernelBuilder& b, const Target& target) const override {
    const Result<Grad> g = grad_of(b);
    if (!g.ok() || !g->wgrad || depthwise(*g)) return {};
    const gemm_glue::SplitScratch s = gemm_glue::split_scratch(tiles_of(b, *g, target), g->m(), g->n(), g->G);
    Group::Scratch need;
    need.counters_bytes = s.counters_bytes, need.partials_bytes = s.partials_bytes;
    return need;
  }

  Result<KernelConfig> plan(KernelBuilder& b, const Target& target) const override {
    KILN_ASSIGN_OR_RETURN(Grad g, grad_of(b));
    ConvGradConfig cc;
    cc.wgrad = g.wgrad;
    cc.depthwise = depthwise(g);
    cc.tiles = tiles_of(b, g, target);
    if (cc.depthwise) cc.tiles.splits = 1;
    const gemm_glue::SplitScratch need = gemm_glue::split_scratch(cc.tiles, g.m(), g.n(), g.G);
    if (b.group().scratch.counters_bytes < need.counters_bytes ||
        b.group().scratch.partials_bytes < need.partials_bytes)
      cc.tiles.splits = 1;  // a plan without the scratch (planned without the families)
    KILN_ASSIGN_OR_RETURN(Dim3 grid, grid_of(g, cc.tiles));
    KernelConfig k = new_config(b, id());
    cc.m = g.m(), cc.n = g.n(), cc.k = g.k(), cc.groups = g.G;
    k.grid = grid;
    k.block = {static_cast<uint32_t>(cc.depthwise ? kDepthwiseBlock : cc.tiles.threads()), 1, 1};
    k.dynamic_smem = cc.depthwise ? 0 : static_cast<uint32_t>(cc.tiles.pad_smem);
    k.detail = cc;
    k.params.push_back(KernelParam::batch_value(g.N));
    b.use_params(k.params);
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const ConvGradConfig& cc = std::get<ConvGradConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Grad g, grad_of(b));
    const GemmTiles& t = cc.tiles;
    const MemView av = b.view(g.a), bv = b.view(g.b);
    std::string cfg = fmt::format(
        "struct Cfg {{\n"
        "  static constexpr int NMAX = {}, C = {}, H = {}, W = {}, K = {}, P = {}, Q = {}, R = {}, S = {}, G = {};\n"
        "  static constexpr int SH = {}, SW = {}, PT = {}, PL = {}, DH = {}, DW = {};\n",
        batch_limit(g), g.C, g.H, g.W, g.K, g.P, g.Q, g.R, g.S, g.G, g.stride[0], g.stride[1], g.pad[0], g.pad[1],
        g.dilation[0], g.dilation[1]);
    if (g.wgrad) {
      cfg += view_line("X", av) + view_line("Y", bv);
    } else {
      cfg += view_line("Y", av) +
             fmt::format("  static constexpr long long WK = {}, WC = {}, WR = {}, WS = {}, WB = {};\n", bv.strides[0],
                         bv.strides[1], bv.strides[2], bv.strides[3], bv.base);
    }
    if (cc.depthwise) {
      cfg += fmt::format("  static constexpr int BLOCK = {};\n}};\n", kDepthwiseBlock);
    } else {
      cfg += fmt::format(
          "  static constexpr int BM = {}, BN = {}, BK = {}, TM = {}, TN = {}, STAGES = {}, SPLITS = {};\n"
          "  static constexpr bool ALONG_M = {};\n}};\n",
          t.bm, t.bn, t.bk, t.tm, t.tn, t.stages, t.splits,
          g.wgrad ? gemm_glue::store_along_m(b, k.params, g.y, 0, 1)
                  : gemm_glue::store_along_m(b, k.params, g.y, 3, 1));
    }
    KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epilogue, gemm_glue::epilogue_nodes(b, b.anchor()));
    KILN_ASSIGN_OR_RETURN(std::string body, gemm_glue::epi_functor(b, epilogue, g.y, 4, nullptr, 1));
    std::vector<std::pair<const char*, const char*>> functors{{"Epi", "epi"}};
    std::string call = cc.depthwise
                           ? (g.wgrad ? "kiln::conv_grad::depthwise_wgrad" : "kiln::conv_grad::depthwise_dgrad")
                       : g.wgrad ? "kiln::conv_grad::conv2d_wgrad"
                                 : "kiln::conv_grad::conv2d_dgrad";
    if (t.splits > 1) {
      body += "struct Split {\n  KILN_PARAM_MEMBERS\n" + conv_glue::scratch_members(b) + "};\n";
      functors.push_back({"Split", "split"});
      call += "_split";
    }
    const std::string src = gemm_glue::gemm_source(
        "conv2d_grad", cfg + "\n" + body, "", functors, call.c_str(),
        cc.depthwise ? fmt::format("{}", k.block.x) : fmt::format("{}, {}", k.block.x, t.launch_bounds_blocks()),
        av.dtype, av.param, bv.param, b.batch_param());
    return b.finish(k.family, src, k.grid, k.block, k.dynamic_smem);
  }
};

}  // namespace

const KernelFamily& conv_grad_family() {
  static const ConvGradFamily f;
  return f;
}

}  // namespace kiln::codegen
