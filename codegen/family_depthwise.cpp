// The depthwise conv family: a conv2d whose every group has one input channel, as a direct kernel
// (templates/kiln/depthwise_conv2d.cuh), with its epilogue, a reduction epilogue, or a layer norm over each
// pixel's channels (templates/kiln/depthwise_rownorm.cuh).
#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/family_conv.h"
#include "codegen/family_gemm.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

using namespace conv_glue;

class DepthwiseFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::depthwise_conv2d; }
  std::string describe(const KernelConfig& k) const override {
    const DepthwiseConfig& p = std::get<DepthwiseConfig>(k.detail);
    return p.row_norm  ? fmt::format("t{} rownorm", p.threads)
           : p.reduced ? fmt::format("t{} reduce {}x{}", p.threads, p.bm, p.bn)
                       : fmt::format("t{}", p.threads);
  }
  bool runs(GroupKind k) const override { return k == GroupKind::conv; }

  Status can_implement(KernelBuilder& b, const Target&) const override { return depthwise_of(b).status(); }

  Result<KernelConfig> plan(KernelBuilder& b, const Target&) const override {
    KILN_ASSIGN_OR_RETURN(Conv c, depthwise_of(b));
    KILN_ASSIGN_OR_RETURN(gemm_glue::RowNorm rn, gemm_glue::row_norm_of(b, b.anchor()));
    KernelConfig k = new_config(b, id());
    DepthwiseConfig dc;
    KILN_ASSIGN_OR_RETURN(dc.x, input_view(b));
    dc.w = b.view(c.w);
    dc.row_norm = rn.node >= 0;
    dc.reduced = b.group().roles.reduction >= 0;
    // A row norm: one block per pixel, a thread per channel (whole warps).
    if (dc.row_norm) dc.threads = static_cast<int>((c.K + 31) / 32 * 32);
    const int64_t blocks = dc.row_norm ? c.pixels() : (c.pixels() * c.K + dc.threads - 1) / dc.threads;
    k.grid = {static_cast<uint32_t>(blocks), 1, 1};
    if (dc.reduced) {  // counters: one per channel tile of 32, as fusion.h reserves for a depthwise conv
      k.grid = {static_cast<uint32_t>((c.pixels() + dc.bm - 1) / dc.bm),
                static_cast<uint32_t>((c.K + dc.bn - 1) / dc.bn), 1};
      if (k.grid.y > 65535 || k.grid.y * 4 > b.group().scratch.counters_bytes)
        return unsupported(fmt::format("node '{}': {} channel tiles for a reduction epilogue", c.node->name, k.grid.y));
    }
    k.block = {static_cast<uint32_t>(dc.threads), 1, 1};
    k.detail = dc;
    add_batch_param(b, k, c);
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const DepthwiseConfig& dc = std::get<DepthwiseConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Conv c, conv_of(b, true));
    KILN_ASSIGN_OR_RETURN(const MemView xv, input_view(b));
    const MemView wv = b.view(c.w);
    std::string cfg = conv_cfg(c, xv, wv) + fmt::format("  static constexpr int THREADS = {};\n", dc.threads);
    if (dc.row_norm) return render_row_norm(b, k, c, cfg, xv, wv);
    if (dc.reduced) cfg += fmt::format("  static constexpr int BM = {}, BN = {};\n", dc.bm, dc.bn);
    return render_conv(b, k, cfg + "};\n", "depthwise_conv2d", "kiln::conv::depthwise_conv2d",
                       fmt::format("{}", k.block.x), xv, wv, b.batch_param());
  }

 private:
  // The depthwise conv with a layer norm over each pixel's channels (templates/kiln/depthwise_rownorm.cuh).
  static Result<Kernel> render_row_norm(KernelBuilder& b, const KernelConfig& k, const Conv& c, std::string cfg,
                                        const MemView& xv, const MemView& wv) {
    KILN_ASSIGN_OR_RETURN(gemm_glue::RowNorm rn, gemm_glue::row_norm_of(b, b.anchor()));
    const Node& ln = b.node(rn.node);
    cfg += fmt::format("  static constexpr float EPS = {};\n}};\n",
                       float_literal(std::get<double>(ln.attrs.at("epsilon"))));
    KILN_ASSIGN_OR_RETURN(std::string fns, gemm_glue::row_norm_functors(b, rn, c.y, c.bias));
    KILN_ASSIGN_OR_RETURN(const std::string pro_fn, prologue_functor(b, c));
    const std::string src = gemm_glue::gemm_source(
        "depthwise_rownorm", cfg + "\n" + fns, pro_fn, {{"Pre", "pre"}, {"Epi", "epi"}},
        "kiln::conv::depthwise_rownorm", std::to_string(k.block.x), xv.dtype, xv.param, wv.param, b.batch_param());
    return b.finish(k.family, src, k.grid, k.block);
  }

  // The group's conv2d when every group has one input channel.
  static Result<Conv> depthwise_of(KernelBuilder& b) {
    // Whether the conv is depthwise at all, before conv_of's checks of the whole group: this family is
    // asked first about every conv group, and most are not (half the families' check at 10k nodes).
    if (const int32_t a = b.anchor(); a >= 0 && *b.node(a).op == OpId::conv2d) {
      const Node& nd = b.node(a);
      const int64_t groups = std::get<int64_t>(nd.attrs.at("groups"));
      const int64_t C = b.info(nd.inputs[0][0]).shape[1];
      if (C != groups)
        return unsupported(fmt::format("node '{}': not depthwise ({} channels in {} groups)", nd.name, C, groups));
    }
    KILN_ASSIGN_OR_RETURN(Conv c, conv_of(b, true));
    if (c.C != c.G) {
      return unsupported(fmt::format("node '{}': not depthwise ({} channels in {} groups)", c.node->name, c.C, c.G));
    }
    return c;
  }
};

}  // namespace

const KernelFamily& depthwise_family() {
  static const DepthwiseFamily f;
  return f;
}

}  // namespace kiln::codegen
