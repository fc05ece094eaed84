// The pool family: max_pool2d and avg_pool2d (one output per thread; over channels-last memory with C a
// multiple of the vector width, V consecutive channels per thread with 16-byte accesses), global_max_pool and
// the channel reductions (OpDef::channel_reduction: global_avg_pool, channel_stats; a reduction over H x W
// per (n, c), or over N x H x W per channel), with the group's leading pointwise ops in the Load functor and
// its trailing ones in the Epi functor (templates/kiln/pool.cuh).
#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/family_rows.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

constexpr int kWindowBlock = 128;

std::vector<int64_t> ints(const Node& n, std::string_view name, std::vector<int64_t> dflt) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? dflt : std::get<std::vector<int64_t>>(it->second);
}

bool flag(const Node& n, std::string_view name, bool dflt) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? dflt : std::get<bool>(it->second);
}

// An axis reduction (OpDef::axis_reduction) as a channel reduction of the 4-D view [P, K, S, 1] of its input:
// P the product of the reduced dims before the kept ones, K of the kept ones (adjacent), S of the reduced
// dims after them. The dims of each part, outermost first.
struct AxisView {
  std::vector<int> prefix, kept, suffix;
  int64_t P = 1, K = 1, S = 1;
};

Result<AxisView> axis_view(KernelBuilder& b, const Node& nd) {
  const Shape& xs = b.info(nd.inputs[0][0]).shape;
  const int R = xs.rank();
  if (R == 0) return unsupported(fmt::format("node '{}' ({}): a reduction of a scalar", nd.name, op_name(*nd.op)));
  const std::vector<bool> reduced = reduced_dims(nd, R);
  AxisView v;
  for (int d = 0; d < R; ++d) {
    std::vector<int>& part = !reduced[static_cast<size_t>(d)] ? v.kept : v.kept.empty() ? v.prefix : v.suffix;
    if (!reduced[static_cast<size_t>(d)] && !v.suffix.empty())
      return unsupported(fmt::format("node '{}' ({}): the dims it keeps are not adjacent", nd.name, op_name(*nd.op)));
    part.push_back(d);
  }
  for (int d : v.prefix) v.P *= xs[d];
  for (int d : v.kept) v.K *= xs[d];
  for (int d : v.suffix) v.S *= xs[d];
  if (std::max({v.P, v.K, v.S}) > INT32_MAX)
    return unsupported(fmt::format("node '{}' ({}): a part of its input beyond 2^31 - 1", nd.name, op_name(*nd.op)));
  return v;
}

// `dst` = the coordinate of `dims` (outermost first) for the linear index `lin` over them; the outermost
// takes what is left, so its size is never needed.
std::string unravel(const Shape& s, const std::vector<int>& dims, const std::string& lin, const std::string& dst) {
  if (dims.empty()) return {};
  std::string out = fmt::format("    {{\n      int t = {};\n", lin);
  for (size_t k = dims.size(); k-- > 1;)
    out += fmt::format("      {0}.i[{1}] = t % {2};\n      t /= {2};\n", dst, dims[k], s[dims[k]]);
  return out + fmt::format("      {}.i[{}] = t;\n    }}\n", dst, dims[0]);
}

// The Load and Epi functors of an axis reduction: the global kernel's view coordinates (p, k, s, 0) and
// outputs (0, k) mapped to the input's and output's own (`inner`: the functors at those).
std::string axis_functors(const Shape& xs, const Shape& ys, const AxisView& v, const std::string& inner_load,
                          const std::string& inner_epi) {
  std::string load =
      "struct Load {\n  KILN_PARAM_MEMBERS\n"
      "  __device__ __forceinline__ float operator()(const kiln::Idx<4>& i) const {\n";
  load += fmt::format("    kiln::Idx<{}> j;\n", xs.rank());
  load +=
      unravel(xs, v.prefix, "i.i[0]", "j") + unravel(xs, v.kept, "i.i[1]", "j") + unravel(xs, v.suffix, "i.i[2]", "j");
  load += "    return XLoad{KILN_PARAM_NAMES}(j);\n  }\n};\n";
  // The output's coordinate: the kept dims' (renumbered when the reduced ones are dropped), 0 elsewhere.
  const bool keep = ys.rank() == xs.rank();
  std::vector<int> at;
  for (size_t k = 0; k < v.kept.size(); ++k) at.push_back(keep ? v.kept[k] : static_cast<int>(k));
  std::string epi =
      "struct Epi {\n  KILN_PARAM_MEMBERS\n"
      "  __device__ __forceinline__ void operator()(float v, const kiln::Idx<2>& i) const {\n";
  epi += fmt::format("    kiln::Idx<{}> j{{}};\n", std::max(ys.rank(), 1));
  epi += unravel(ys, at, "i.i[1]", "j");
  epi += "    YEpi{KILN_PARAM_NAMES}(v, j);\n  }\n};\n";
  auto rename = [](std::string text, const char* from, const char* to) {
    text.replace(text.find(from), std::string(from).size(), to);
    return text;
  };
  return rename(inner_load, "struct Load", "struct XLoad") + "\n" + rename(inner_epi, "struct Epi", "struct YEpi") +
         "\n" + load + "\n" + epi;
}

// The group's pooling op and its window.
struct Pool {
  rows::Parts parts;
  const Node* node = nullptr;
  OpId op{};
  Tensor x, y;
  bool global = false, is_max = false;
  const ChannelReduction* reduction = nullptr;  // a global sum (not max)
  std::vector<int64_t> k, s, p;                 // window, stride, padding (top, left, bottom, right)
  std::optional<AxisView> axes;                 // an axis reduction (reduce_sum, reduce_mean)
  // The 4-D input the kernel walks: x's shape, or an axis reduction's view of it.
  Shape walked(const KernelBuilder& b) const { return axes ? Shape{axes->P, axes->K, axes->S, 1} : b.info(x).shape; }
};

Result<Pool> pool_of(KernelBuilder& b) {
  Pool pl;
  KILN_ASSIGN_OR_RETURN(pl.parts, rows::split(b));
  const Node& nd = b.node(pl.parts.anchor);
  pl.node = &nd;
  pl.op = *nd.op;
  pl.x = nd.inputs[0][0];
  pl.y = nd.outputs[0];
  const Shape& in = b.info(pl.x).shape;
  if (const auto& red = op_def(pl.op).axis_reduction) {
    KILN_ASSIGN_OR_RETURN(pl.axes, axis_view(b, nd));
    pl.reduction = &*red;
    pl.global = true;
    KILN_RETURN_IF_ERROR(b.can_emit(pl.parts.prologue));
    KILN_RETURN_IF_ERROR(b.can_emit(pl.parts.epilogue));
    return pl;
  }
  if (in.rank() != 4) return unsupported(fmt::format("node '{}': pooling of a rank-{} input", nd.name, in.rank()));
  if (const auto& red = op_def(pl.op).channel_reduction) pl.reduction = &*red;
  pl.global = pl.reduction != nullptr || pl.op == OpId::global_max_pool;
  if (!pl.global && pl.op != OpId::max_pool2d && pl.op != OpId::avg_pool2d) {
    return unsupported(fmt::format("node '{}' ({}): not a pooling op the pool family runs", nd.name, op_name(pl.op)));
  }
  pl.is_max = pl.op == OpId::max_pool2d || pl.op == OpId::global_max_pool;
  if (!pl.global) {
    pl.k = ints(nd, "kernel", {1, 1});
    pl.s = ints(nd, "stride", pl.k);
    pl.p = ints(nd, "padding", {0, 0});
    if (pl.p.size() == 2) pl.p = {pl.p[0], pl.p[1], pl.p[0], pl.p[1]};
    if (pl.k.size() != 2 || pl.s.size() != 2 || pl.p.size() != 4)
      return unsupported(fmt::format("node '{}': malformed window attributes", nd.name));
  }
  KILN_RETURN_IF_ERROR(b.can_emit(pl.parts.prologue));
  KILN_RETURN_IF_ERROR(b.can_emit(pl.parts.epilogue));
  return pl;
}

// The global kernel's TERMS, PER_IMAGE, term(q, v) and finish(q, sum, count), from the op's registry row (a
// max: one term, per image, never summed).
std::string reduction_members(const ChannelReduction* red) {
  static const ChannelReduction max{.per_image = true, .terms = {"v"}, .finish = "sum"};
  return channel_reduction_members(red != nullptr ? *red : max);
}

class PoolFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::pool; }
  std::string describe(const KernelConfig& k) const override {
    const PoolConfig& p = std::get<PoolConfig>(k.detail);
    return fmt::format("{} v{} tpr{} b{}", p.global ? "global" : "window", p.vec, p.threads_per_row, p.block);
  }
  bool runs(GroupKind k) const override { return k == GroupKind::pool; }
  Status can_implement(KernelBuilder& b, const Target& t) const override { return plan(b, t).status(); }

  Result<KernelConfig> plan(KernelBuilder& b, const Target&) const override {
    KILN_ASSIGN_OR_RETURN(Pool pl, pool_of(b));
    KernelConfig k = new_config(b, id());
    const Shape in = pl.walked(b);
    const Shape& out = b.info(pl.y).shape;
    PoolConfig pc;
    pc.global = pl.global;
    pc.channels_last = !pl.axes && rows::channels_last(b, pl.parts, pl.x);
    pc.wide_index = std::max(in.numel(), out.numel()) >= (int64_t{1} << 31);
    pc.block = kWindowBlock;
    int64_t grid = 0;
    if (pl.global) {
      const bool per_image = pl.reduction == nullptr || pl.reduction->per_image;
      const int64_t hw = in[2] * in[3], nc = per_image ? in[0] * in[1] : in[1];
      // NHWC: a thread per (n, c), neighbouring threads on neighbouring channels; NCHW: the H x W plane is
      // contiguous, so a warp (or, for large planes, the block) reads it together. A reduction over every
      // image has few rows of N x H x W values: a block per channel.
      if (!per_image) {
        pc.threads_per_row = pc.block = 256;
      } else if (!pc.channels_last || nc < 256) {
        pc.threads_per_row =
            hw <= 1024 ? std::min<int>(32, static_cast<int>(std::bit_ceil(static_cast<uint64_t>(hw)))) : 256;
        pc.block = hw <= 1024 ? 128 : 256;
      }
      grid = (nc + pc.block / pc.threads_per_row - 1) / (pc.block / pc.threads_per_row);
    } else {
      // Over channels-last memory, a thread takes V consecutive channels when every access allows it.
      if (pc.channels_last) {
        auto fits = [&](int v) { return in[1] % v == 0; };
        KILN_ASSIGN_OR_RETURN(std::optional<rows::VecForms> vf,
                              rows::vector_functors(b, pl.parts, pl.x, pl.y, 1, {}, fits));
        if (vf) pc.vec = vf->v;
      }
      grid = (out.numel() / pc.vec + pc.block - 1) / pc.block;
    }
    if (grid > int64_t{0x7fffffff})
      return unsupported(fmt::format("node '{}': too many outputs for one launch", pl.node->name));
    k.grid = {static_cast<uint32_t>(grid), 1, 1};
    k.block = {static_cast<uint32_t>(pc.block), 1, 1};
    k.detail = pc;
    // Batch-generic: the batch is the kernel's argument.
    k.params.push_back(KernelParam::batch_value(in[0]));
    b.use_params(k.params);
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const PoolConfig& pc = std::get<PoolConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Pool pl, pool_of(b));
    const Shape in = pl.walked(b);
    const Shape& out = b.info(pl.y).shape;
    KILN_ASSIGN_OR_RETURN(std::string load, rows::load_functor(b, pl.parts, pl.x));
    KILN_ASSIGN_OR_RETURN(std::string epi,
                          rows::epi_functor(b, pl.parts, pl.y, "", std::max(b.info(pl.y).shape.rank(), 1)));
    if (pl.axes) {  // the view's coordinates to the tensors' own
      load = axis_functors(b.info(pl.x).shape, b.info(pl.y).shape, *pl.axes, load, epi);
      epi.clear();
    }
    std::string cfg, call;
    const char* index = pc.wide_index ? "long long" : "int";
    if (pl.global) {
      cfg = fmt::format(
          "struct Cfg {{\n  using I = {};\n"
          "  static constexpr int C = {}, H = {}, W = {}, TPR = {}, BLOCK = {};\n"
          "  static constexpr bool MAX = {};\n{}}};\n\n",
          index, in[1], in[2], in[3], pc.threads_per_row, pc.block, pl.is_max, reduction_members(pl.reduction));
      call = "kiln::pool::global";
    } else {
      if (pc.vec > 1) {
        auto fits = [&](int v) { return v == pc.vec; };
        KILN_ASSIGN_OR_RETURN(std::optional<rows::VecForms> vf,
                              rows::vector_functors(b, pl.parts, pl.x, pl.y, 1, {}, fits));
        KILN_CHECK(vf.has_value(), "the pool family's vector form went away between plan and render");
        load = vf->load;
        epi = vf->epi;
      }
      const bool include_pad = !pl.is_max && flag(*pl.node, "count_include_pad", true);
      cfg = fmt::format(
          "struct Cfg {{\n  using I = {};\n"
          "  static constexpr int C = {}, H = {}, W = {}, P = {}, Q = {};\n"
          "  static constexpr int KH = {}, KW = {}, SH = {}, SW = {}, PT = {}, PL = {}, PB = {}, PR = {};\n"
          "  static constexpr bool MAX = {}, INCLUDE_PAD = {}, CHANNELS_LAST = {};\n"
          "  static constexpr int V = {}, BLOCK = {};\n}};\n\n",
          index, in[1], in[2], in[3], out[2], out[3], pl.k[0], pl.k[1], pl.s[0], pl.s[1], pl.p[0], pl.p[1], pl.p[2],
          pl.p[3], pl.is_max, include_pad, pc.channels_last, pc.vec, pc.block);
      call = "kiln::pool::window";
    }
    std::string src = kernel_preamble();
    src += "#include \"kiln/pool.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
    src += cfg + load + "\n" + epi;
    src += "\n}  // namespace KILN_ENTRY_ns\n\n";
    src += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({}) KILN_ENTRY(KILN_PARAMS) {{\n"
        "  const KILN_ENTRY_ns::Load load{{KILN_PARAM_NAMES}};\n"
        "  const KILN_ENTRY_ns::Epi epi{{KILN_PARAM_NAMES}};\n"
        "  {}<KILN_ENTRY_ns::Cfg>({}, load, epi);\n"
        "}}\n",
        pc.block, call, b.batch_param());
    return b.finish(id(), src, k.grid, k.block);
  }
};

}  // namespace

const KernelFamily& pool_family() {
  static const PoolFamily f;
  return f;
}

}  // namespace kiln::codegen
