// The window pools' gradients (max_pool2d_grad, avg_pool2d_grad) alone in their group: a thread per element of
// dx summing its windows (templates/kiln/pool_grad.cuh). The glue is a Cfg of sizes and window, and one functor
// reading dy and x and storing dx through their views.
#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

constexpr int kBlock = 256;

Result<const Node*> grad_node(KernelBuilder& b) {
  const Group& grp = b.group();
  const Node& n = b.node(grp.nodes.front());
  if (grp.nodes.size() != 1 || (*n.op != OpId::max_pool2d_grad && *n.op != OpId::avg_pool2d_grad))
    return unsupported(fmt::format("node '{}' ({}): not a pool gradient alone", n.name, op_name(*n.op)));
  return &n;
}

class PoolGradFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::pool_grad; }
  std::string describe(const KernelConfig& k) const override {
    const PoolConfig& p = std::get<PoolConfig>(k.detail);
    return fmt::format("window grad{} b{}", p.channels_last ? " nhwc" : "", p.block);
  }
  bool runs(GroupKind k) const override { return k == GroupKind::other; }
  Status can_implement(KernelBuilder& b, const Target&) const override { return grad_node(b).status(); }

  Result<KernelConfig> plan(KernelBuilder& b, const Target&) const override {
    KILN_ASSIGN_OR_RETURN(const Node* n, grad_node(b));
    KernelConfig k = new_config(b, id());
    const Shape& xs = b.info(n->outputs[0]).shape;
    PoolConfig pc;
    pc.block = kBlock;
    pc.channels_last = b.view(n->outputs[0], true).strides[1] == 1 && xs[1] > 1;
    pc.wide_index = xs.numel() >= (int64_t{1} << 31);
    const int64_t grid = (xs.numel() + kBlock - 1) / kBlock;
    if (grid > int64_t{0x7fffffff})
      return unsupported(fmt::format("node '{}': too many elements for one launch", n->name));
    k.grid = {static_cast<uint32_t>(grid), 1, 1};
    k.block = {static_cast<uint32_t>(kBlock), 1, 1};
    k.detail = pc;
    k.params.push_back(KernelParam::batch_value(xs[0]));  // batch-generic
    b.use_params(k.params);
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const PoolConfig& pc = std::get<PoolConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(const Node* n, grad_node(b));
    const Tensor dy = n->inputs[0][0], x = n->inputs[1][0], dx = n->outputs[0];
    const Shape& xs = b.info(x).shape;
    const Shape& ys = b.info(dy).shape;
    const PoolWindow w = pool_window(n->attrs);
    const bool is_max = *n->op == OpId::max_pool2d_grad;
    const auto flag = [&](const char* a) {
      auto it = n->attrs.find(a);
      return it != n->attrs.end() && std::get<bool>(it->second);
    };
    const std::vector<std::string> at{"i.i[0]", "i.i[1]", "i.i[2]", "i.i[3]"};
    std::string src = kernel_preamble();
    src += "#include \"kiln/pool_grad.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
    src += fmt::format(
        "struct Cfg {{\n  using I = {};\n"
        "  static constexpr int C = {}, H = {}, W = {}, P = {}, Q = {};\n"
        "  static constexpr int KH = {}, KW = {}, SH = {}, SW = {}, PT = {}, PL = {}, PB = {}, PR = {};\n"
        "  static constexpr bool MAX = {}, INCLUDE_PAD = {}, CHANNELS_LAST = {};\n"
        "  static constexpr int BLOCK = {};\n}};\n\n",
        pc.wide_index ? "long long" : "int", xs[1], xs[2], xs[3], ys[2], ys[3], w.kh, w.kw, w.sh, w.sw, w.pt, w.pl,
        w.pb, w.pr, is_max, !is_max && flag("count_include_pad"), pc.channels_last, pc.block);
    src += fmt::format(
        "struct Fn {{\n  KILN_PARAM_MEMBERS\n"
        "  __device__ __forceinline__ float dy(const kiln::Idx<4>& i) const {{ return {}; }}\n"
        "  __device__ __forceinline__ float x(const kiln::Idx<4>& i) const {{ {} }}\n"
        "  __device__ __forceinline__ void store(float v, const kiln::Idx<4>& i) const {{\n    {}\n  }}\n}};\n",
        b.load(dy, at), is_max ? fmt::format("return {};", b.load(x, at)) : "(void)i;\n    return 0.0f;",
        b.store(dx, at, "v"));
    src += "\n}  // namespace KILN_ENTRY_ns\n\n";
    src += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({}) KILN_ENTRY(KILN_PARAMS) {{\n"
        "  const KILN_ENTRY_ns::Fn fn{{KILN_PARAM_NAMES}};\n"
        "  kiln::pool_grad::window_grad<KILN_ENTRY_ns::Cfg>({}, fn);\n}}\n",
        pc.block, b.batch_param());
    return b.finish(id(), src, k.grid, k.block);
  }
};

}  // namespace

const KernelFamily& pool_grad_family() {
  static const PoolGradFamily f;
  return f;
}

}  // namespace kiln::codegen
