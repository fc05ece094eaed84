// The conv families: conv2d + epilogue as an implicit GEMM (templates/kiln/conv2d.cuh), and, when every
// group has one input channel (depthwise), a direct kernel (templates/kiln/depthwise_conv2d.cuh). The glue
// is a Cfg of compile-time shapes, strides and tiles, the Epi functor, and the entry.
#include <algorithm>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/family_conv.h"
#include "codegen/family_gemm.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace conv_glue {

const std::vector<int64_t>& ints(const Node& n, std::string_view name) {
  return std::get<std::vector<int64_t>>(n.attrs.at(std::string(name)));
}

// The anchor conv's sizes and attributes alone (what the tile choice reads), without conv_of's checks of
// the group around it: for a group the family already said it can run.
Result<Conv> conv_shape(KernelBuilder& b) {
  const int32_t a = b.anchor();
  if (a < 0 || *b.node(a).op != OpId::conv2d) return unsupported(fmt::format("group {}: no conv2d node", b.group().id));
  Conv c;
  const Node& nd = b.node(a);
  c.node = &nd;
  c.x = nd.inputs[0][0], c.w = nd.inputs[1][0], c.y = nd.outputs[0];
  c.bias = nd.inputs.size() > 2 && !nd.inputs[2].empty() ? &nd.inputs[2][0] : nullptr;
  const Shape& xs = b.info(c.x).shape;
  const Shape& ws = b.info(c.w).shape;
  const Shape& ys = b.info(c.y).shape;
  c.N = xs[0], c.C = xs[1], c.H = xs[2], c.W = xs[3], c.K = ws[0], c.R = ws[2], c.S = ws[3], c.P = ys[2], c.Q = ys[3];
  c.G = std::get<int64_t>(nd.attrs.at("groups"));
  c.stride = ints(nd, "stride");
  c.dilation = ints(nd, "dilation");
  c.pad = ints(nd, "padding");
  if (c.pad.size() == 2) c.pad = {c.pad[0], c.pad[1], c.pad[0], c.pad[1]};
  // The templates index pixels, channels and GEMM rows with int; element offsets are 64-bit.
  if (c.pixels() >= (int64_t{1} << 31) || c.pixels() * c.K >= (int64_t{1} << 31) ||
      c.C * c.R * c.S >= (int64_t{1} << 31)) {
    return unsupported(fmt::format("node '{}': more than 2^31 output pixels or reduction terms", nd.name));
  }
  return c;
}

// The group's conv, once the group around it is one the conv kernels run. `row_norm`: whether the caller
// runs a row-norm epilogue (the depthwise family does; others refuse one).
Result<Conv> conv_of(KernelBuilder& b, bool row_norm) {
  const int32_t a = b.anchor();
  if (a < 0 || *b.node(a).op != OpId::conv2d) return unsupported(fmt::format("group {}: no conv2d node", b.group().id));
  KILN_ASSIGN_OR_RETURN(gemm_glue::RowNorm rn, gemm_glue::row_norm_of(b, a));
  if (rn.node >= 0 && !row_norm)
    return unsupported(
        fmt::format("node '{}': a norm in the epilogue runs on the depthwise kernel only", b.node(rn.node).name));
  if (const int32_t red = b.group().roles.reduction; red >= 0) {
    const Node& pn = b.node(red);
    if (rn.node >= 0) return unsupported(fmt::format("node '{}': a reduction epilogue with a row norm", pn.name));
    if (!b.is_group_output(pn.inputs[0][0]) || b.group().scratch.counters_bytes == 0)
      return unsupported(fmt::format("node '{}': its input is not stored, or it has no scratch", pn.name));
  }
  if (rn.node < 0) {
    KILN_RETURN_IF_ERROR(gemm_glue::check_group(b, a));
  } else {
    KILN_ASSIGN_OR_RETURN(gemm_glue::Prologue pro, gemm_glue::prologue_of(b, a));
    KILN_RETURN_IF_ERROR(b.can_emit(pro.nodes));
  }
  return conv_shape(b);
}

// The largest batch a batch-generic kernel of `c` serves (Cfg::NMAX): below 2^31 output pixels and outputs
// (conv_shape's limits), and, when every offset of x fits in an int at c's batch, at the batches where it
// still does (conv2d.cuh's ImageRows::kInt). A function of everything but the batch, and of that one bit, so
// that the kernels of two batches on the same side of the bit are one source.
int64_t batch_limit(const Conv& c, const MemView& xv) {
  constexpr int64_t kLimit = (int64_t{1} << 31) - 1;
  const int64_t by_outputs = kLimit / std::max<int64_t>(c.P * c.Q * c.K, 1);
  const int64_t rest =
      (c.H - 1) * std::abs(xv.strides[2]) + (c.W - 1) * std::abs(xv.strides[3]) + (c.C - 1) * std::abs(xv.strides[1]);
  const int64_t xn = std::abs(xv.strides[0]);
  const int64_t by_int = rest > kLimit ? 0 : xn == 0 ? kLimit : (kLimit - rest) / xn + 1;
  return c.N <= by_int ? std::min(by_int, by_outputs) : by_outputs;
}

// Cfg's shape and views. The batch is not among them: it is the kernel's argument, and NMAX the largest
// batch the source serves.
std::string conv_cfg(const Conv& c, const MemView& xv, const MemView& wv) {
  return fmt::format(
      "struct Cfg {{\n"
      "  static constexpr int NMAX = {}, C = {}, H = {}, W = {}, K = {}, P = {}, Q = {}, R = {}, S = {}, G = {};\n"
      "  static constexpr int SH = {}, SW = {}, PT = {}, PL = {}, DH = {}, DW = {};\n"
      "  static constexpr long long XN = {}, XC = {}, XH = {}, XW = {}, XB = {};\n"
      "  static constexpr long long WK = {}, WC = {}, WR = {}, WS = {}, WB = {};\n",
      batch_limit(c, xv), c.C, c.H, c.W, c.K, c.P, c.Q, c.R, c.S, c.G, c.stride[0], c.stride[1], c.pad[0], c.pad[1],
      c.dilation[0], c.dilation[1], xv.strides[0], xv.strides[1], xv.strides[2], xv.strides[3], xv.base, wv.strides[0],
      wv.strides[1], wv.strides[2], wv.strides[3], wv.base);
}

// Every conv kernel is batch-generic: its batch is a parameter (KernelParam::batch_value), so the kernels of
// every batch with the same tiles are one source, compiled and cached once.
void add_batch_param(KernelBuilder& b, KernelConfig& k, const Conv& c) {
  k.params.push_back(KernelParam::batch_value(c.N));
  b.use_params(k.params);
}

// The memory view the kernel reads for x: x's own, or that of the tensor its prologue starts from.
Result<MemView> input_view(KernelBuilder& b) {
  KILN_ASSIGN_OR_RETURN(gemm_glue::Prologue pro, gemm_glue::prologue_of(b, b.anchor()));
  MemView v = b.view(pro.source);
  if (pro.norm >= 0) {  // x is the normalized source permuted by (0, 3, 1, 2): its view of the source's memory
    const Node& tr = b.node(pro.norm_transpose);
    auto strides = op_def(OpId::transpose).view(tr, b.info(pro.source).shape, b.info(tr.outputs[0]).shape, v.strides);
    KILN_CHECK(strides.has_value(), "a transpose is a view");
    v.strides = std::move(strides->strides);
  }
  return v;
}

// The prologue's Pro at x's logical coordinate {n, c, h, w}, or "" when the group has none.
Result<std::string> prologue_functor(KernelBuilder& b, const Conv& c) {
  KILN_ASSIGN_OR_RETURN(gemm_glue::Prologue pro, gemm_glue::prologue_of(b, b.anchor()));
  if (!pro.active()) return std::string();
  return gemm_glue::pro_functor(b, pro, c.x, {"i.i[0]", "i.i[1]", "i.i[2]", "i.i[3]"}, 4);
}

// The members through which a reduction epilogue's Red and split-K's Split reach the group's scratch.
std::string scratch_members(KernelBuilder& b) {
  return fmt::format(
      "  __device__ __forceinline__ unsigned* counters() const {{ return static_cast<unsigned*>({}); }}\n"
      "  __device__ __forceinline__ float* partials() const {{ return static_cast<float*>({}); }}\n",
      b.scratch_param(KernelParam::Scratch::counters), b.scratch_param(KernelParam::Scratch::partials));
}

// The reduction epilogue's functor (templates/kiln/reduction_epilogue.cuh's Red) for the group's channel
// reduction `red`, made from its registry row (OpDef::channel_reduction): it reads the reduced value where
// the kernel stored it, and stores each finished sum at (n, k, 0, 0) of a per-image reduction's output or
// (q, k) of one over all images.
std::string reduction_functor(KernelBuilder& b, int32_t red) {
  const Node& rn = b.node(red);
  const ChannelReduction& cr = *op_def(*rn.op).channel_reduction;
  const Tensor y = rn.inputs[0][0], out = rn.outputs[0];
  const MemView yv = b.view(y, true);
  const Shape& ys = b.info(y).shape;
  const std::vector<std::string> at =
      cr.per_image ? std::vector<std::string>{"n", "k", "0", "0"} : std::vector<std::string>{"q", "k"};
  return fmt::format(
      "struct Red {{\n  KILN_PARAM_MEMBERS\n{}"
      "  __device__ __forceinline__ float load(int n, int k, int pix) const {{\n"
      "    const int p = pix / {}, q = pix % {};\n"
      "    return kiln::ldf_cg(static_cast<const {}*>({}), {});\n  }}\n"
      "  __device__ __forceinline__ void store(int n, int k, int q, float sum, float count) const {{\n"
      "    (void)n;\n    const float v = finish(q, sum, count);\n    {}\n  }}\n{}}};\n",
      channel_reduction_members(cr), ys[3], ys[3], ctype(yv.dtype), yv.param, b.offset(yv, ys, {"n", "k", "p", "q"}),
      b.store(out, at, "v"), scratch_members(b));
}

// The source of a conv kernel: Cfg, Epi, Pro (when there is a prologue), Red (a reduction epilogue: `call`
// is then the template's _reduced variant) and the entry calling `call` (launch bounds `bounds`).
Result<Kernel> render_conv(KernelBuilder& b, const KernelConfig& cfg, const std::string& cfg_struct, const char* header,
                           std::string call, const std::string& bounds, const MemView& xv, const MemView& wv,
                           const std::string& args) {
  KILN_ASSIGN_OR_RETURN(Conv c, conv_of(b));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> epilogue, gemm_glue::epilogue_nodes(b, b.anchor()));
  KILN_ASSIGN_OR_RETURN(std::string body, gemm_glue::epi_functor(b, epilogue, c.y, 4, c.bias, 1));
  KILN_ASSIGN_OR_RETURN(const std::string pro_fn, prologue_functor(b, c));
  std::vector<std::pair<const char*, const char*>> functors{{"Epi", "epi"}};
  if (const int32_t red = b.group().roles.reduction; red >= 0) {
    body += reduction_functor(b, red);
    functors.push_back({"Red", "red"});
    call += "_reduced";
  } else if (cfg.family == KernelFamilyId::conv2d && std::get<ConvConfig>(cfg.detail).tiles.splits > 1) {
    body += "struct Split {\n  KILN_PARAM_MEMBERS\n" + scratch_members(b) + "};\n";
    functors.push_back({"Split", "split"});
    call += "_split";
  }
  const std::string src = gemm_glue::gemm_source(header, cfg_struct + "\n" + body, pro_fn, functors, call.c_str(),
                                                 bounds, xv.dtype, xv.param, wv.param, args);
  return b.finish(cfg.family, src, cfg.grid, cfg.block, cfg.dynamic_smem);
}

}  // namespace conv_glue

namespace {

using namespace conv_glue;

// The shared memory of the patch kernel (templates/kiln/conv2d_patch.cuh's PatchShape, which static_asserts
// the conditions below and that the launch grants at least these bytes) when it applies to the conv: x
// channels-last in whole 16-byte rows but too narrow for 16-byte chunks of k, flat KRSC weights, one group,
// no dilation along w, 16-bit types, no prologue or reduction epilogue, tiles of 128 pixels that never straddle
// two images, and both copies of the patch and the filters within one block's shared memory.
std::optional<int64_t> patch_bytes(KernelBuilder& b, const Conv& c, const Target& target) {
  const Result<gemm_glue::Prologue> pro = gemm_glue::prologue_of(b, b.anchor());
  const Result<MemView> xv = input_view(b);
  if (!pro.ok() || pro->active() || !xv.ok() || dtype_size(xv->dtype) != 2 || c.G != 1 || c.dilation[1] != 1 ||
      b.group().roles.reduction >= 0)
    return std::nullopt;
  const std::vector<int64_t>& xs = xv->strides;  // (n, c, h, w)
  if (xs[1] != 1 || xs[3] != c.C || c.C % 8 == 0 || c.W * c.C % 8 != 0 || xs[0] % 8 != 0 || xs[2] % 8 != 0 ||
      xv->base % 8 != 0)
    return std::nullopt;
  const MemView wv = b.view(c.w);
  const std::vector<int64_t>& ws = wv.strides;  // (k, c, r, s)
  const int64_t kdim = c.C * c.R * c.S;
  if (ws[1] != 1 || ws[3] != c.C || ws[2] != c.S * c.C || ws[0] != kdim || wv.base % 8 != 0) return std::nullopt;
  constexpr int64_t bm = 128, bn = 64;
  if (c.P * c.Q % bm != 0) return std::nullopt;
  const int64_t orows = (bm - 1 + c.Q - 1) / c.Q + 1;
  const int64_t irows = (orows - 1) * c.stride[0] + (c.R - 1) * c.dilation[0] + 1;
  const int64_t off = (c.pad[1] * c.C + 7) / 8 * 8;
  const int64_t last = (c.Q - 1) * c.stride[1] - c.pad[1] + c.S - 1;
  const int64_t end = off + std::max(last + 1, c.W) * c.C + 1;
  const int64_t rl0 = (end + 7) / 8 * 8, rl = rl0 / 8 % 2 == 1 ? rl0 : rl0 + 8;
  const int64_t patch = (irows * rl + 8 + 63) / 64 * 64, flat = (bn * kdim + 8 + 7) / 8 * 8,
                kp = ((kdim + 15) / 16 * 16 + 15) / 16 * 16 + 8;
  const int64_t bytes = (2 * patch + flat + bn * kp) * 2;
  if (bytes > target.smem_per_block) return std::nullopt;
  return bytes;
}

// The patch kernel's tile: 128 x 64 in 4 warps of 64 x 32, as many blocks per SM as its shared memory lets.
GemmTiles patch_tiles(const Target& target, int64_t bytes) {
  GemmTiles t;
  t.main_loop = MainLoop::tensor_core;
  t.bm = 128, t.bn = 64, t.bk = 32, t.tm = 8, t.tn = 8;
  t.blocks_per_sm = std::max(occupancy(target, t.threads(), 32, bytes).blocks_per_sm, 1);
  return t;
}

// Whether the conv runs on the shape-generic kernel (ConvConfig::shape_generic): in a binding of a symbolic
// graph (TilePolicy other than own: where kernels shared across bindings and layers save compiles), with one
// group, without a prologue or a reduction epilogue, not on the patch kernel, x dense NHWC and w dense
// KRSC from offset 0 (what RuntimeDims in conv2d.cuh computes from the sizes).
bool shape_generic(KernelBuilder& b, const Conv& c, const ConvConfig& cc) {
  if (b.plan().tiles == TilePolicy::own || cc.patch || c.G != 1 || cc.reduced) return false;
  const Result<gemm_glue::Prologue> pro = gemm_glue::prologue_of(b, b.anchor());
  if (!pro.ok() || pro->active()) return false;
  // The strides RuntimeDims computes; a dim of extent 1 is only ever indexed at 0, so its stride is free (1x1
  // weights in KCRS are dense KRSC too).
  const auto dense = [](const MemView& v, const std::vector<int64_t>& extents, const std::vector<int64_t>& strides) {
    bool same = v.base == 0;
    for (size_t d = 0; d < 4; ++d) same = same && (extents[d] == 1 || v.strides[d] == strides[d]);
    return same;
  };
  return dense(cc.x, {c.N, c.C, c.H, c.W}, {c.H * c.W * c.C, 1, c.W * c.C, c.C}) &&
         dense(cc.w, {c.K, c.C, c.R, c.S}, {c.R * c.S * c.C, 1, c.S * c.C, c.C});
}

// The sizes a shape-generic kernel takes after the batch, in the entry's order.
constexpr int kGenericSizes = 6;  // C, H, W, K, P, Q
void add_size_params(KernelBuilder& b, KernelConfig& k, const Conv& c) {
  for (int64_t v : {c.C, c.H, c.W, c.K, c.P, c.Q}) k.params.push_back(KernelParam::size_value(v));
  b.use_params(k.params);
}

// The shape-generic kernel's Cfg (no size of the conv in it) and the entry's arguments before x and w: the
// batch and the sizes. Every tensor of the output's shape in dense NHWC (the output, a residual operand) is
// addressed with strides spelled from the sizes.
std::string generic_cfg(KernelBuilder& b, const KernelConfig& k, const Conv& c, const MemView& xv, std::string& args) {
  std::vector<std::string> name;  // pC, pH, pW, pK, pP, pQ
  for (size_t i = 0; i < k.params.size(); ++i)
    if (k.params[i].size) name.push_back(fmt::format("p{}", i));
  KILN_CHECK(name.size() == kGenericSizes, "a shape-generic conv kernel takes six sizes");
  args = b.batch_param();
  for (const std::string& n : name) args += ", " + n;
  const std::string &K = name[3], &P = name[4], &Q = name[5];
  const Shape& ys = b.info(c.y).shape;
  b.spell_strides(
      ys, layout_strides(ys, Layout::NHWC),
      {fmt::format("((long long){} * {} * {})", P, Q, K), "1", fmt::format("((long long){} * {})", Q, K), K});
  const int64_t v = 16 / dtype_size(xv.dtype);
  const bool int32 = c.N * c.H * c.W * c.C - 1 < (int64_t{1} << 31);
  return fmt::format(
      "struct Cfg {{\n"
      "  static constexpr int R = {}, S = {}, G = 1, SH = {}, SW = {}, PT = {}, PL = {}, DH = {}, DW = {};\n"
      "  static constexpr bool VEC = {}, INT32 = {};\n",
      c.R, c.S, c.stride[0], c.stride[1], c.pad[0], c.pad[1], c.dilation[0], c.dilation[1], c.C % v == 0, int32);
}

class Conv2dFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::conv2d; }
  std::string describe(const KernelConfig& k) const override {
    const ConvConfig& p = std::get<ConvConfig>(k.detail);
    if (p.patch)
      return fmt::format("tc patch {}x{} {}x{} b{}", p.tiles.bm, p.tiles.bn, p.tiles.tm, p.tiles.tn,
                         p.tiles.blocks_per_sm);
    return gemm_glue::tiles_text(p.tiles) + (p.reduced ? " reduce" : "") + (p.shape_generic ? " shape-generic" : "") +
           gemm_glue::choice_text(p.choice);
  }
  double flops(const KernelConfig& k) const override {
    const ConvConfig& p = std::get<ConvConfig>(k.detail);
    return 2.0 * double(p.m) * double(p.n) * double(p.k) * double(p.groups);
  }
  bool tensor_cores(const KernelConfig& k) const override {
    return std::get<ConvConfig>(k.detail).tiles.main_loop == MainLoop::tensor_core;
  }
  bool runs(GroupKind k) const override { return k == GroupKind::conv; }

  // The implicit GEMM runs any conv2d whose channel tiles fit the grid's y extent.
  Status can_implement(KernelBuilder& b, const Target& target) const override {
    KILN_ASSIGN_OR_RETURN(Conv c, conv_of(b));
    if (const auto bytes = patch_bytes(b, c, target)) return grid_of(b, c, patch_tiles(target, *bytes)).status();
    return grid_of(b, c, tiles_of(b, c, target)).status();
  }

  bool may_need_scratch() const override { return true; }
  // Split-K's counters and partial tiles (none for tiles that fill the waves unsplit).
  Group::Scratch scratch(KernelBuilder& b, const Target& target) const override {
    const Result<Conv> c = conv_shape(b);  // asked only of groups can_implement accepted
    if (!c.ok() || patch_bytes(b, *c, target)) return {};
    const gemm_glue::SplitScratch s = gemm_glue::split_scratch(tiles_of(b, *c, target), c->pixels(), c->K / c->G, c->G);
    Group::Scratch need;
    need.counters_bytes = s.counters_bytes, need.partials_bytes = s.partials_bytes;
    return need;
  }

  Result<KernelConfig> plan(KernelBuilder& b, const Target& target) const override {
    KILN_ASSIGN_OR_RETURN(Conv c, conv_of(b));
    ConvConfig cc;
    const std::optional<int64_t> patch = patch_bytes(b, c, target);
    if (patch) {
      cc.patch = true;
      cc.tiles = patch_tiles(target, *patch);
    } else {
      cc.tiles = tiles_of(b, c, target, true, &cc.choice);
      const gemm_glue::SplitScratch need = gemm_glue::split_scratch(cc.tiles, c.pixels(), c.K / c.G, c.G);
      if (b.group().scratch.counters_bytes < need.counters_bytes ||
          b.group().scratch.partials_bytes < need.partials_bytes) {
        // A plan without the scratch (planned without the families).
        cc.tiles = tiles_of(b, c, target, false, &cc.choice);
      }
    }
    KILN_ASSIGN_OR_RETURN(Dim3 grid, grid_of(b, c, cc.tiles));
    KernelConfig k = new_config(b, id());
    cc.m = c.pixels(), cc.n = c.K / c.G, cc.k = c.C / c.G * c.R * c.S, cc.groups = c.G;
    cc.reduced = b.group().roles.reduction >= 0;
    KILN_ASSIGN_OR_RETURN(cc.x, input_view(b));
    cc.w = b.view(c.w);
    k.grid = grid;
    k.block = {static_cast<uint32_t>(cc.tiles.threads()), 1, 1};
    k.dynamic_smem = static_cast<uint32_t>(patch ? *patch : cc.tiles.pad_smem);
    cc.shape_generic = shape_generic(b, c, cc);
    k.detail = cc;
    add_batch_param(b, k, c);
    if (cc.shape_generic) add_size_params(b, k, c);
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const ConvConfig& cc = std::get<ConvConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Conv c, conv_of(b));
    KILN_ASSIGN_OR_RETURN(const MemView xv, input_view(b));
    const MemView wv = b.view(c.w);
    const GemmTiles& t = cc.tiles;
    // Beyond the tile: the patch kernel's shared memory, split-K's splits (only when split: unsplit kernels
    // keep their source, and cache entries).
    const std::string extra = cc.patch       ? fmt::format("  static constexpr int DSMEM = {};\n", k.dynamic_smem)
                              : t.splits > 1 ? fmt::format("  static constexpr int SPLITS = {};\n", t.splits)
                                             : std::string();
    std::string args = b.batch_param();
    const std::string cfg =
        (cc.shape_generic ? generic_cfg(b, k, c, xv, args) : conv_cfg(c, xv, wv)) +
        fmt::format(
            "  static constexpr int BM = {}, BN = {}, BK = {}, TM = {}, TN = {}, STAGES = {};\n"
            "{}  static constexpr bool ALONG_M = {};\n}};\n",
            t.bm, t.bn, t.bk, t.tm, t.tn, t.stages, extra, gemm_glue::store_along_m(b, k.params, c.y, 3, 1));
    // The launch bounds ask for the tile's residency (with the block size alone, ptxas would cap a 256-thread
    // kernel at 64 registers and spill).
    const char* call = cc.patch           ? "kiln::conv::conv2d_patch"
                       : cc.shape_generic ? "kiln::conv::conv2d_implicit_gemm_generic"
                                          : "kiln::conv::conv2d_implicit_gemm";
    return render_conv(b, k, cfg, cc.patch ? "conv2d_patch" : "conv2d", call,
                       fmt::format("{}, {}", k.block.x, t.launch_bounds_blocks()), xv, wv, args);
  }

 private:
  // The GEMM is M = N·P·Q pixels by K/G channels of every group.
  // A layer-norm prologue keeps each tile row's input statistics per tap in shared memory (conv2d.cuh).
  // x takes 16-byte chunks when its channels are contiguous and every stride and C/G are multiples of 8
  // (ImageRows::kVec); the weights are KRSC-like in every plan that gets tensor cores.
  // Split-K (`split`) for a conv without a reduction epilogue (which counts its blocks in the scratch itself).
  // A shape-generic plan takes the batch-generic tile unless the batch's own is much faster (generic_or_own).
  static GemmTiles tiles_of(KernelBuilder& b, const Conv& c, const Target& target, bool split = true,
                            TileChoice* choice = nullptr) {
    const Result<gemm_glue::Prologue> pro = gemm_glue::prologue_of(b, b.anchor());
    const int64_t stats = pro.ok() && pro->norm >= 0 ? int64_t{2} * 4 * c.R * c.S : 0;
    const Result<MemView> xv = input_view(b);
    bool x_vec = xv.ok() && xv->strides[1] == 1 && (c.C / c.G) % 8 == 0 && xv->base % 8 == 0;
    for (int d : {0, 2, 3}) x_vec = x_vec && xv->strides[static_cast<size_t>(d)] % 8 == 0;
    // The weights take chunks as in conv2d.cuh's FilterRows::kVec.
    const MemView wv = b.view(c.w);
    const auto ws = [&](int d) { return wv.strides[static_cast<size_t>(d)]; };
    const bool w_vec = ws(1) == 1 && (c.C / c.G) % 8 == 0 && ws(0) % 8 == 0 && (c.R == 1 || ws(2) % 8 == 0) &&
                       (c.S == 1 || ws(3) % 8 == 0) && wv.base % 8 == 0;
    // conv2d.cuh's kKFast: channels contiguous.
    const auto mapping = [](bool k_fastest) {
      return k_fastest ? gemm_glue::ElementLoads::kConvKFastest : gemm_glue::ElementLoads::kRowFastest;
    };
    const bool reduced = b.group().roles.reduction >= 0;
    const auto pick = [&](int64_t m, int64_t split_k_dim) {
      return gemm_glue::pick_tiles(
          m, c.K / c.G, c.G, b.info(c.x).dtype, target, stats,
          {x_vec ? 0 : mapping(xv.ok() && xv->strides[1] == 1), w_vec ? 0 : mapping(wv.strides[1] == 1)}, split_k_dim);
    };
    const GemmTiles own = pick(c.pixels(), split && !reduced ? c.C / c.G * c.R * c.S : 0);
    if (b.plan().tiles == TilePolicy::own) return own;
    return gemm_glue::generic_or_own(pick(gemm_glue::kSaturatingRows, 0), own, c.pixels(), c.K / c.G, c.G, target,
                                     stats, b.plan().tiles, choice);
  }
  // A block per BM pixels and BN channels of a group; the channel tiles of all groups along y, the splits of
  // k along z. A reduction epilogue counts blocks per channel tile in the counters the memory pass reserved
  // (fusion.h).
  static Result<Dim3> grid_of(KernelBuilder& b, const Conv& c, const GemmTiles& t) {
    const int64_t gy = (c.K / c.G + t.bn - 1) / t.bn * c.G;
    if (gy > 65535)
      return unsupported(fmt::format("node '{}': {} channel tiles exceed the grid's y extent", c.node->name, gy));
    if (b.group().roles.reduction >= 0 &&
        (gy * 4 > b.group().scratch.counters_bytes || t.bm % kReductionChunkRows != 0))
      return unsupported(fmt::format("node '{}': a reduction epilogue needs tiles of 32k rows and at least 32 channels",
                                     c.node->name));
    return Dim3{static_cast<uint32_t>((c.pixels() + t.bm - 1) / t.bm), static_cast<uint32_t>(gy),
                static_cast<uint32_t>(t.splits)};
  }
};

}  // namespace

const KernelFamily& conv2d_family() {
  static const Conv2dFamily f;
  return f;
}

}  // namespace kiln::codegen
