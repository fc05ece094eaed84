// The pointwise family: any fused DAG of pointwise ops (broadcasting, several outputs, cast rounding,
// store transforms), one thread per element of the group's domain in a grid-stride loop.
//
// Two paths. The flat path, when every tensor the group touches is either a single value or has the
// domain's full shape in the same memory order: elements are addressed by their flat index, VEC of them
// per thread with 16-byte loads and stores when every pointer is 16-byte aligned (checked at run time:
// a user's buffer may not be), one at a time otherwise and for the tail. The general path unravels the
// flat index into a logical coordinate, in the memory order of the first output so stores coalesce, and
// reads every operand through its own strides and broadcasting.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

constexpr uint32_t kBlock = 256;
constexpr int64_t kMaxGrid = 65535;

Dim3 grid_for(int64_t work) {
  const int64_t blocks = std::clamp<int64_t>((work + kBlock - 1) / kBlock, 1, kMaxGrid);
  return {static_cast<uint32_t>(blocks), 1, 1};
}

std::vector<std::string> coord_names(int rank) {
  std::vector<std::string> c;
  for (int d = 0; d < rank; ++d) c.push_back(fmt::format("i.i[{}]", d));
  return c;
}

// What the pointwise kernel is built from: the domain, the primary output (its memory order is the walk's),
// the external operands, and whether the flat path applies.
struct Pw {
  Shape domain;
  bool has_layout = false;
  Tensor primary{};
  std::vector<int64_t> order_strides;
  std::vector<Tensor> loads;
  bool flat = false;
  int max_size = 1;
};

Result<Pw> analyse(KernelBuilder& b) {
  const Group& grp = b.group();
  Pw pw;
  // The domain: the broadcast of every pointwise value the group computes.
  for (int32_t n : grp.nodes) {
    const OpDef& def = op_def(*b.node(n).op);
    if (def.kind == FusionKind::layout) {
      pw.has_layout = true;
      continue;
    }
    if (def.kind != FusionKind::pointwise)
      return unsupported(
          fmt::format("group {}: node '{}' ({}) in a pointwise group", grp.id, b.node(n).name, def.name));
    auto s = broadcast_shapes(pw.domain, b.info(b.node(n).outputs[0]).shape);
    if (!s) {
      // One grid-stride loop walks one domain: values of shapes that do not broadcast need two kernels.
      return unsupported(
          fmt::format("node '{}' ({}): its output {} does not broadcast with the group's other values {}",
                      b.node(n).name, def.name, b.info(b.node(n).outputs[0]).shape.to_string(), pw.domain.to_string()));
    }
    pw.domain = *s;
  }
  KILN_RETURN_IF_ERROR(b.can_emit(grp.nodes));
  const Shape& domain = pw.domain;
  const int D = domain.rank();

  // The primary output (full domain shape, not behind a store transform) decides the iteration order.
  for (Tensor t : grp.outputs) {
    if (b.info(t).shape == domain && op_def(*b.node(b.info(t).producer).op).kind == FusionKind::pointwise) {
      pw.primary = t;
      break;
    }
  }
  pw.order_strides = row_major_strides(domain);
  int64_t primary_base = 0;
  if (pw.primary.valid()) {
    const MemView pv = b.view(pw.primary, true);
    pw.order_strides = pv.strides;
    primary_base = pv.base;
  }

  // External operands and outputs, and whether the flat path applies.
  for (int32_t n : grp.nodes) {
    for (const auto& port : b.node(n).inputs)
      for (Tensor t : port)
        if (!b.produced_in_group(t) && std::find(pw.loads.begin(), pw.loads.end(), t) == pw.loads.end())
          pw.loads.push_back(t);
  }
  auto same_order = [&](const MemView& v) {
    // Same memory order as the primary and dense (no slice offsets): the flat index addresses it.
    return v.base == 0 && v.strides == pw.order_strides && primary_base == 0;
  };
  bool flat = pw.primary.valid() && !pw.has_layout && D > 0;
  for (Tensor t : pw.loads) {
    const TensorInfo& ti = b.info(t);
    pw.max_size = std::max<int>(pw.max_size, static_cast<int>(dtype_size(ti.dtype)));
    if (ti.shape.numel() == 1) continue;
    flat = flat && ti.shape == domain && same_order(b.view(t));
  }
  for (Tensor t : grp.outputs) {
    pw.max_size = std::max<int>(pw.max_size, static_cast<int>(dtype_size(b.info(t).dtype)));
    flat = flat && b.info(t).shape == domain && same_order(b.view(t, true));
  }
  // The primary (and so every tensor, all having its strides) must be dense in some dim order: walking its
  // dims from the smallest stride up, each stride is the product of the sizes below it (size-1 dims have
  // any stride). NHWC is dense in the order C, W, H, N. (Comparing with a permutation of the row-major
  // strides, as an earlier version did, sent every NHWC group down the per-element general path: 44 % of
  // copy bandwidth for add+relu on the GPU of docs/gpu.md.)
  if (flat) {
    std::vector<int> by_stride(static_cast<size_t>(D));
    std::iota(by_stride.begin(), by_stride.end(), 0);
    std::sort(by_stride.begin(), by_stride.end(), [&](int a, int c) {
      return pw.order_strides[static_cast<size_t>(a)] < pw.order_strides[static_cast<size_t>(c)];
    });
    int64_t expect = 1;
    for (int d : by_stride) {
      if (domain[d] == 1) continue;
      flat = flat && pw.order_strides[static_cast<size_t>(d)] == expect;
      expect *= domain[d];
    }
  }
  pw.flat = flat;
  return pw;
}

// The flat path's Body: one(e) for one element at flat index e, vec(e) for VEC from e (16-byte accesses).
Result<std::string> flat_body(KernelBuilder& b, const Pw& pw, int vec) {
  const Group& grp = b.group();
  std::string src;
  {
    std::map<int32_t, std::string> values;
    for (Tensor t : pw.loads) {
      if (b.info(t).shape.numel() == 1) continue;
      const MemView v = b.view(t);
      values[t.id] = fmt::format("kiln::ldf(static_cast<const {}*>({}), e)", ctype(v.dtype), v.param);
    }
    for (Tensor t : grp.outputs) {
      const MemView v = b.view(t, true);
      b.redirect_store(t, fmt::format("kiln::stf(static_cast<{}*>({}), e, ", ctype(v.dtype), v.param), ");");
    }
    KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(grp.nodes, {"e"}, values, false, 4));
    b.clear_redirects();
    src += "  __device__ void one(long long e) const {\n" + body + "  }\n";
  }
  std::string pre, post;
  std::map<int32_t, std::string> values;
  for (Tensor t : pw.loads) {
    if (b.info(t).shape.numel() == 1) continue;
    const MemView v = b.view(t);
    const std::string name = b.fresh("in");
    pre += fmt::format("    const kiln::Vec<{0}, {1}> {2} = kiln::ldv<{0}, {1}>(static_cast<const {0}*>({3}), e);\n",
                       ctype(v.dtype), vec, name, v.param);
    values[t.id] = name + ".v[j]";
  }
  for (Tensor t : grp.outputs) {
    const MemView v = b.view(t, true);
    const std::string name = b.fresh("out");
    pre += fmt::format("    kiln::Vec<{}, {}> {};\n", ctype(v.dtype), vec, name);
    post +=
        fmt::format("    kiln::stv<{0}, {1}>(static_cast<{0}*>({2}), e, {3});\n", ctype(v.dtype), vec, v.param, name);
    b.redirect_store(t, name + ".v[j] = ", ";");
  }
  KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(grp.nodes, {"e"}, values, false, 6));
  b.clear_redirects();
  src += fmt::format(
      "  __device__ void vec(long long e) const {{\n{}#pragma unroll\n    for (int j = 0; j < {}; ++j) {{\n{}    "
      "}}\n{}  }}\n",
      pre, vec, body, post);
  return src;
}

// The flat path's launch: VEC elements a thread while every pointer is 16-byte aligned, then the tail.
// `batch`: the batch parameter of a batch-generic kernel ("" for one made for its domain's batch).
std::string flat_launch(KernelBuilder& b, const Pw& pw, int vec, const std::string& batch) {
  std::string aligned = "true";
  for (Tensor t : pw.loads)
    if (b.info(t).shape.numel() != 1) aligned += fmt::format(" && kiln::aligned16({})", b.view(t).param);
  for (Tensor t : b.group().outputs) aligned += fmt::format(" && kiln::aligned16({})", b.view(t, true).param);
  return fmt::format(
      "  const long long n = {0};\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  long long done = 0;\n"
      "  if ({1}) {{\n"
      "    for (long long c = t; c < n / {2}; c += stride) body.vec(c * {2});\n"
      "    done = n / {2} * {2};\n"
      "  }}\n"
      "  for (long long e = done + t; e < n; e += stride) body.one(e);\n",
      batch.empty() ? fmt::format("{}LL", pw.domain.numel())
                    : fmt::format("(long long)({}) * {}LL", batch, pw.domain.numel() / pw.domain[0]),
      aligned, vec);
}

// The general path's walk: dims from the largest memory stride of the primary to the smallest.
std::vector<int> walk_order(const Pw& pw) {
  std::vector<int> order(static_cast<size_t>(pw.domain.rank()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int c) {
    return pw.order_strides[static_cast<size_t>(a)] > pw.order_strides[static_cast<size_t>(c)];
  });
  return order;
}

// The general path's loop over the walk's order. `batch`: the batch parameter of a batch-generic kernel
// (its walk has dim 0 outermost, whose size the unravelling never needs), or "".
std::string general_launch(const Pw& pw, const std::string& batch) {
  const Shape& domain = pw.domain;
  const int D = domain.rank();
  const std::vector<int> order = walk_order(pw);
  std::string unravel = "    long long r = e;\n";
  for (int k = D - 1; k >= 0; --k) {
    const int d = order[static_cast<size_t>(k)];
    if (k == 0 && !batch.empty()) {
      unravel += fmt::format("    i.i[{}] = (int)r;\n", d);
    } else if (domain[d] == 1) {
      unravel += fmt::format("    i.i[{}] = 0;\n", d);
    } else {
      unravel += fmt::format("    i.i[{0}] = (int)(r % {1}); r /= {1};\n", d, domain[d]);
    }
  }
  if (D == 0) unravel += "    i.i[0] = 0;\n";
  const std::string n = batch.empty() ? fmt::format("{}LL", domain.numel())
                                      : fmt::format("(long long)({}) * {}LL", batch, domain.numel() / domain[0]);
  return fmt::format(
      "  const long long n = {0};\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{\n"
      "    kiln::Idx<{1}> i;\n{2}    (void)r;\n    body(i);\n  }}\n",
      n, std::max(D, 1), unravel);
}

class PointwiseFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::pointwise; }
  std::string describe(const KernelConfig& k) const override {
    const PointwiseConfig& p = std::get<PointwiseConfig>(k.detail);
    return p.path == PointwiseConfig::Path::flat ? fmt::format("flat v{}", p.vec) : "general";
  }
  bool runs(GroupKind k) const override { return k == GroupKind::pointwise; }
  // Any DAG of pointwise ops whose outputs broadcast to one domain, with store transforms the emitter knows.
  Status can_implement(KernelBuilder& b, const Target&) const override {
    Shape domain;
    for (int32_t n : b.group().nodes) {
      const OpDef& def = op_def(*b.node(n).op);
      if (def.kind == FusionKind::layout) continue;
      if (def.kind != FusionKind::pointwise)
        return unsupported(
            fmt::format("group {}: node '{}' ({}) in a pointwise group", b.group().id, b.node(n).name, def.name));
      auto s = broadcast_shapes(domain, b.info(b.node(n).outputs[0]).shape);
      if (!s) {
        return unsupported(
            fmt::format("node '{}' ({}): its output {} does not broadcast with the group's other values {}",
                        b.node(n).name, def.name, b.info(b.node(n).outputs[0]).shape.to_string(), domain.to_string()));
      }
      domain = *s;
    }
    return b.can_emit(b.group().nodes);
  }

  Result<KernelConfig> plan(KernelBuilder& b, const Target&) const override {
    KernelConfig k = new_config(b, id());
    KILN_ASSIGN_OR_RETURN(Pw pw, analyse(b));
    PointwiseConfig pc;
    pc.domain = pw.domain;
    pc.path = pw.flat ? PointwiseConfig::Path::flat : PointwiseConfig::Path::general;
    pc.vec = pw.flat ? 16 / pw.max_size : 1;
    const int64_t numel = pw.domain.numel();
    k.grid = grid_for(pw.flat ? (numel + pc.vec - 1) / pc.vec : numel);
    k.block = {kBlock, 1, 1};
    // The flat path addresses every tensor by the flat index alone, and the general path's walk needs no
    // size of its outermost dim: when that is dim 0 (the batch), only the element count depends on the batch,
    // and the batch is the kernel's argument.
    // (At batch 1 a general walk may order dim 0 anywhere among the size-1 dims: made for it.)
    pc.batch_generic =
        pw.domain.rank() >= 1 && pw.domain[0] >= 1 && (pw.flat || (pw.domain[0] > 1 && walk_order(pw)[0] == 0));
    if (pc.batch_generic) {
      k.params.push_back(KernelParam::batch_value(pw.domain[0]));
      b.use_params(k.params);
    }
    k.detail = pc;
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const PointwiseConfig& pc = std::get<PointwiseConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Pw pw, analyse(b));
    std::string src = kernel_preamble();
    src += "\nnamespace KILN_ENTRY_ns {\n\n";
    src += "struct Body {\n  KILN_PARAM_MEMBERS\n";
    std::string launch;
    if (pc.path == PointwiseConfig::Path::flat) {
      KILN_ASSIGN_OR_RETURN(std::string body, flat_body(b, pw, pc.vec));
      src += body;
      launch = flat_launch(b, pw, pc.vec, pc.batch_generic ? b.batch_param() : std::string());
    } else {
      const int D = pw.domain.rank();
      std::map<int32_t, std::string> values;
      KILN_ASSIGN_OR_RETURN(std::string body,
                            b.emit_pointwise(b.group().nodes, coord_names(std::max(D, 1)), values, false, 4));
      src +=
          fmt::format("  __device__ void operator()(const kiln::Idx<{}>& i) const {{\n{}  }}\n", std::max(D, 1), body);
      launch = general_launch(pw, pc.batch_generic ? b.batch_param() : std::string());
    }
    src += "};\n\n}  // namespace KILN_ENTRY_ns\n\n";
    src +=
        "extern \"C\" __global__ void KILN_ENTRY(KILN_PARAMS) {\n"
        "  const KILN_ENTRY_ns::Body body{KILN_PARAM_NAMES};\n" +
        launch + "}\n";
    return b.finish(id(), src, k.grid, k.block);
  }
};

}  // namespace

const KernelFamily& pointwise_family() {
  static const PointwiseFamily f;
  return f;
}

}  // namespace kiln::codegen
