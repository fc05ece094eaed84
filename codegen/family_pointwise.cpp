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

}  // namespace

Result<Kernel> generate_pointwise(KernelBuilder& b) {
  const Group& grp = b.group();

  // The domain: the broadcast of every pointwise value the group computes.
  std::vector<int32_t> nodes = grp.nodes;
  Shape domain;
  bool has_layout = false;
  for (int32_t n : nodes) {
    const OpDef& def = op_def(*b.node(n).op);
    if (def.kind == FusionKind::layout) {
      has_layout = true;
      continue;
    }
    if (def.kind != FusionKind::pointwise)
      return unsupported(
          fmt::format("group {}: node '{}' ({}) in a pointwise group", grp.id, b.node(n).name, def.name));
    auto s = broadcast_shapes(domain, b.info(b.node(n).outputs[0]).shape);
    KILN_CHECK(s.has_value(), "pointwise group with shapes that do not broadcast");
    domain = *s;
  }
  const int D = domain.rank();
  const int64_t numel = domain.numel();

  // The primary output (full domain shape, not behind a store transform) decides the iteration order.
  Tensor primary{};
  for (Tensor t : grp.outputs) {
    if (b.info(t).shape == domain && op_def(*b.node(b.info(t).producer).op).kind == FusionKind::pointwise) {
      primary = t;
      break;
    }
  }
  std::vector<int64_t> order_strides = row_major_strides(domain);
  int64_t primary_base = 0;
  if (primary.valid()) {
    const MemView pv = b.view(primary, true);
    order_strides = pv.strides;
    primary_base = pv.base;
  }

  // External operands and outputs, and whether the flat path applies.
  std::vector<Tensor> loads;
  for (int32_t n : nodes) {
    for (const auto& port : b.node(n).inputs)
      for (Tensor t : port)
        if (!b.produced_in_group(t) && std::find(loads.begin(), loads.end(), t) == loads.end()) loads.push_back(t);
  }
  auto same_order = [&](const MemView& v) {
    // Same memory order as the primary and dense (no slice offsets): the flat index addresses it.
    return v.base == 0 && v.strides == order_strides && primary_base == 0;
  };
  bool flat = primary.valid() && !has_layout && D > 0;
  int max_size = 1;
  for (Tensor t : loads) {
    const TensorInfo& ti = b.info(t);
    max_size = std::max<int>(max_size, static_cast<int>(dtype_size(ti.dtype)));
    if (ti.shape.numel() == 1) continue;
    flat = flat && ti.shape == domain && same_order(b.view(t));
  }
  for (Tensor t : grp.outputs) {
    max_size = std::max<int>(max_size, static_cast<int>(dtype_size(b.info(t).dtype)));
    flat = flat && b.info(t).shape == domain && same_order(b.view(t, true));
  }
  // The primary (and so every tensor, all having its strides) must be dense in some dim order: walking its
  // dims from the smallest stride up, each stride is the product of the sizes below it (size-1 dims have
  // any stride). NHWC is dense in the order C, W, H, N. (Comparing with a permutation of the row-major
  // strides, as an earlier version did, sent every NHWC group down the per-element general path: 44 % of
  // copy bandwidth for add+relu on an H200.)
  if (flat) {
    std::vector<int> by_stride(static_cast<size_t>(D));
    std::iota(by_stride.begin(), by_stride.end(), 0);
    std::sort(by_stride.begin(), by_stride.end(), [&](int a, int c) {
      return order_strides[static_cast<size_t>(a)] < order_strides[static_cast<size_t>(c)];
    });
    int64_t expect = 1;
    for (int d : by_stride) {
      if (domain[d] == 1) continue;
      flat = flat && order_strides[static_cast<size_t>(d)] == expect;
      expect *= domain[d];
    }
  }

  std::string src = kernel_preamble();
  src += "\nnamespace KILN_ENTRY_ns {\n\n";
  src += "struct Body {\n  KILN_PARAM_MEMBERS\n";
  std::string launch;
  if (flat) {
    const int vec = 16 / max_size;
    // One element at flat index e.
    {
      std::map<int32_t, std::string> values;
      for (Tensor t : loads) {
        if (b.info(t).shape.numel() == 1) continue;
        const MemView v = b.view(t);
        values[t.id] = fmt::format("kiln::ldf(static_cast<const {}*>({}), e)", ctype(v.dtype), v.param);
      }
      for (Tensor t : grp.outputs) {
        const MemView v = b.view(t, true);
        b.redirect_store(t, fmt::format("kiln::stf(static_cast<{}*>({}), e, ", ctype(v.dtype), v.param), ");");
      }
      KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(nodes, {"e"}, values, false, 4));
      b.clear_redirects();
      src += "  __device__ void one(long long e) const {\n" + body + "  }\n";
    }
    // VEC elements from flat index e (16-byte aligned accesses).
    {
      std::string pre, post;
      std::map<int32_t, std::string> values;
      for (Tensor t : loads) {
        if (b.info(t).shape.numel() == 1) continue;
        const MemView v = b.view(t);
        const std::string name = b.fresh("in");
        pre +=
            fmt::format("    const kiln::Vec<{0}, {1}> {2} = kiln::ldv<{0}, {1}>(static_cast<const {0}*>({3}), e);\n",
                        ctype(v.dtype), vec, name, v.param);
        values[t.id] = name + ".v[j]";
      }
      for (Tensor t : grp.outputs) {
        const MemView v = b.view(t, true);
        const std::string name = b.fresh("out");
        pre += fmt::format("    kiln::Vec<{}, {}> {};\n", ctype(v.dtype), vec, name);
        post += fmt::format("    kiln::stv<{0}, {1}>(static_cast<{0}*>({2}), e, {3});\n", ctype(v.dtype), vec, v.param,
                            name);
        b.redirect_store(t, name + ".v[j] = ", ";");
      }
      KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(nodes, {"e"}, values, false, 6));
      b.clear_redirects();
      src += fmt::format(
          "  __device__ void vec(long long e) const {{\n{}#pragma unroll\n    for (int j = 0; j < {}; ++j) {{\n{}    "
          "}}\n{}  }}\n",
          pre, vec, body, post);
    }
    std::string aligned = "true";
    for (Tensor t : loads)
      if (b.info(t).shape.numel() != 1) aligned += fmt::format(" && kiln::aligned16({})", b.view(t).param);
    for (Tensor t : grp.outputs) aligned += fmt::format(" && kiln::aligned16({})", b.view(t, true).param);
    launch = fmt::format(
        "  const long long n = {0}LL;\n"
        "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
        "  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  long long done = 0;\n"
        "  if ({1}) {{\n"
        "    for (long long c = t; c < n / {2}; c += stride) body.vec(c * {2});\n"
        "    done = n / {2} * {2};\n"
        "  }}\n"
        "  for (long long e = done + t; e < n; e += stride) body.one(e);\n",
        numel, aligned, vec);
    src += "};\n\n}  // namespace KILN_ENTRY_ns\n\n";
    src +=
        "extern \"C\" __global__ void KILN_ENTRY(KILN_PARAMS) {\n"
        "  const KILN_ENTRY_ns::Body body{KILN_PARAM_NAMES};\n" +
        launch + "}\n";
    return b.finish("pointwise", src, grid_for((numel + vec - 1) / vec), {kBlock, 1, 1});
  }

  // General path: iterate dims from the largest memory stride of the primary to the smallest.
  std::map<int32_t, std::string> values;
  KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(nodes, coord_names(std::max(D, 1)), values, false, 4));
  src += fmt::format("  __device__ void operator()(const kiln::Idx<{}>& i) const {{\n{}  }}\n", std::max(D, 1), body);
  std::vector<int> order(static_cast<size_t>(D));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int c) {
    return order_strides[static_cast<size_t>(a)] > order_strides[static_cast<size_t>(c)];
  });
  std::string unravel = "    long long r = e;\n";
  for (int k = D - 1; k >= 0; --k) {
    const int d = order[static_cast<size_t>(k)];
    if (domain[d] == 1) {
      unravel += fmt::format("    i.i[{}] = 0;\n", d);
    } else {
      unravel += fmt::format("    i.i[{0}] = (int)(r % {1}); r /= {1};\n", d, domain[d]);
    }
  }
  if (D == 0) unravel += "    i.i[0] = 0;\n";
  launch = fmt::format(
      "  const long long n = {0}LL;\n"
      "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
      "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{\n"
      "    kiln::Idx<{1}> i;\n{2}    (void)r;\n    body(i);\n  }}\n",
      numel, std::max(D, 1), unravel);
  src += "};\n\n}  // namespace KILN_ENTRY_ns\n\n";
  src +=
      "extern \"C\" __global__ void KILN_ENTRY(KILN_PARAMS) {\n"
      "  const KILN_ENTRY_ns::Body body{KILN_PARAM_NAMES};\n" +
      launch + "}\n";
  return b.finish("pointwise", src, grid_for(numel), {kBlock, 1, 1});
}

}  // namespace kiln::codegen
