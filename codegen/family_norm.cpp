// The norm family: layer_norm, rms_norm, group_norm, instance_norm and softmax, with the group's leading
// pointwise ops (computing the norm's input) in the Load functor and its trailing ones in the Epi functor
// (templates/kiln/norm.cuh). This file also holds the glue both row families (norm, pool) share: splitting a
// group around its anchor and writing the Load and Epi functors.
#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "codegen/family_rows.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace rows {

std::vector<std::string> coord_names(int rank) {
  std::vector<std::string> c;
  for (int d = 0; d < rank; ++d) c.push_back(fmt::format("i.i[{}]", d));
  return c;
}

Result<Parts> split(KernelBuilder& b) {
  Parts p;
  p.anchor = b.anchor();
  if (p.anchor < 0) return unsupported(fmt::format("group {}: no norm or pool node", b.group().id));
  for (int32_t n : b.group().nodes) {
    if (n == p.anchor) continue;
    const Node& nd = b.node(n);
    const OpDef& def = op_def(*nd.op);
    // A load transform (a layout conversion of a group input) is an address computation of the views.
    if (def.kind == FusionKind::layout && !b.produced_in_group(nd.inputs[0][0])) continue;
    if (def.kind != FusionKind::pointwise && def.kind != FusionKind::layout) {
      return unsupported(
          fmt::format("node '{}' ({}) cannot be fused around '{}'", nd.name, def.name, b.node(p.anchor).name));
    }
    // Graph nodes are in topological order: what comes before the anchor computes its input.
    if (n < p.anchor) {
      if (def.kind != FusionKind::pointwise) {
        return unsupported(
            fmt::format("node '{}' ({}) before '{}' is no pointwise op", nd.name, def.name, b.node(p.anchor).name));
      }
      p.prologue.push_back(n);
    } else {
      p.epilogue.push_back(n);
    }
  }
  return p;
}

Result<std::string> load_functor(KernelBuilder& b, const Parts& p, Tensor x) {
  const int rank = b.info(x).shape.rank();
  std::string body;
  std::string value;
  if (p.prologue.empty()) {
    value = b.load(x, coord_names(rank));
  } else {
    std::map<int32_t, std::string> values;
    KILN_ASSIGN_OR_RETURN(body, b.emit_pointwise(p.prologue, coord_names(rank), values, false, 4));
    auto it = values.find(x.id);
    if (it == values.end()) {
      return unsupported(fmt::format("the fused ops before '{}' do not compute its input", b.node(p.anchor).name));
    }
    value = it->second;
  }
  return fmt::format(
      "struct Load {{\n  KILN_PARAM_MEMBERS\n"
      "  __device__ __forceinline__ float operator()(const kiln::Idx<{}>& i) const {{\n{}    return {};\n  }}\n}};\n",
      rank, body, value);
}

Result<std::string> epi_functor(KernelBuilder& b, const Parts& p, Tensor y, const std::string& pre) {
  const int rank = b.info(y).shape.rank();
  std::map<int32_t, std::string> values{{y.id, "v"}};
  KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(p.epilogue, coord_names(rank), values, true, 4));
  return fmt::format(
      "struct Epi {{\n  KILN_PARAM_MEMBERS\n"
      "  __device__ __forceinline__ void operator()(float v, const kiln::Idx<{}>& i) const {{\n{}{}  }}\n}};\n",
      rank, pre, body);
}

bool channels_last(KernelBuilder& b, const Parts& p, Tensor x) {
  // The tensors read from memory at x's coordinates: x itself, or the prologue's full-shape operands.
  std::vector<Tensor> reads;
  if (p.prologue.empty()) {
    reads.push_back(x);
  } else {
    for (int32_t n : p.prologue)
      for (const auto& port : b.node(n).inputs)
        for (Tensor t : port)
          if (b.info(t).shape == b.info(x).shape) reads.push_back(t);
  }
  for (Tensor t : reads) {
    const TensorInfo& ti = b.info(t);
    if (ti.shape.rank() < 3 || ti.shape[1] == 1) continue;
    // Only tensors in memory (or behind a load transform) have strides; in-group values have none.
    if (b.produced_in_group(t)) {
      const Node& prod = b.node(ti.producer);
      if (*prod.op != OpId::layout_convert || b.produced_in_group(prod.inputs[0][0])) continue;
    }
    if (b.view(t).strides[1] == 1) return true;
  }
  return false;
}

int64_t attr_int(const Node& n, std::string_view name, int64_t dflt) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? dflt : std::get<int64_t>(it->second);
}

double attr_float(const Node& n, std::string_view name, double dflt) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? dflt : std::get<double>(it->second);
}

}  // namespace rows

namespace {

int pow2_at_least(int64_t v) { return static_cast<int>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(v, 1)))); }

struct Mapping {
  int tpr = 32, block = 128, k = 0;
};

// Rows are few when there are fewer than about two per SM of a large GPU (132 SMs on an H100/H200).
constexpr int64_t kFewRows = 256;
// Values a thread keeps in registers at most, by mapping (more spills or costs occupancy).
constexpr int64_t kWarpCache = 16, kBlockCache = 8;

// Threads per row and cached values per thread for `rows` rows of `cols` values, `inner` apart in
// logical order.
Mapping choose_mapping(int64_t rows, int64_t cols, int64_t inner) {
  Mapping m;
  if (inner >= 32) {
    // Softmax along an outer axis: neighbouring rows are neighbouring addresses; one row per thread.
    m.tpr = 1;
    m.block = 128;
    m.k = cols <= kWarpCache ? static_cast<int>(cols) : 0;
    return m;
  }
  if (cols <= 32 * kWarpCache) {
    m.tpr = std::min(32, pow2_at_least(cols));
    m.block = 128;
    m.k = static_cast<int>((cols + m.tpr - 1) / m.tpr);
    return m;
  }
  // A block per row. When rows are few (group norm of one image: 32 rows), each gets the largest block,
  // so that the few SMs in use keep enough loads in flight; otherwise 256 or 512 threads.
  if (rows < kFewRows) {
    m.block = cols >= 4096 ? 1024 : 512;
  } else {
    m.block = cols <= 2048 ? 256 : 512;
  }
  m.tpr = m.block;
  const int64_t k = (cols + m.block - 1) / m.block;
  m.k = k <= kBlockCache ? static_cast<int>(k) : 0;  // 0: two reads of the row
  return m;
}

}  // namespace

Result<Kernel> generate_norm(KernelBuilder& b) {
  KILN_ASSIGN_OR_RETURN(rows::Parts parts, rows::split(b));
  const Node& nd = b.node(parts.anchor);
  const OpId op = *nd.op;
  const Tensor x = nd.inputs[0][0];
  const Tensor y = nd.outputs[0];
  const Shape& shape = b.info(x).shape;
  const int R = shape.rank();
  if (R < 1 || shape.numel() < 1) return unsupported(fmt::format("node '{}': empty input", nd.name));

  int stat = 0;
  int64_t cols = 1, inner = 1, cg = 0;
  bool per_channel_affine = false;
  switch (op) {
    case OpId::layer_norm:
    case OpId::rms_norm: {
      stat = op == OpId::rms_norm ? 1 : 0;
      const int64_t ndim = rows::attr_int(nd, "normalized_ndim", 1);
      for (int d = R - static_cast<int>(ndim); d < R; ++d) cols *= shape[d];
      break;
    }
    case OpId::group_norm:
    case OpId::instance_norm: {
      if (R < 2) return unsupported(fmt::format("node '{}': group norm of a rank-{} input", nd.name, R));
      const int64_t C = shape[1];
      const int64_t groups = op == OpId::group_norm ? rows::attr_int(nd, "groups", 1) : C;
      const int64_t per_group = C / groups;
      cols = shape.numel() / shape[0] / groups;
      per_channel_affine = true;
      // Over a channels-last input, walk a group's channels fastest (neighbouring addresses).
      if (per_group > 1 && cols > per_group && rows::channels_last(b, parts, x)) cg = per_group;
      break;
    }
    case OpId::softmax: {
      stat = 2;
      const int axis = *normalize_axis(rows::attr_int(nd, "axis", -1), R);
      cols = shape[axis];
      for (int d = axis + 1; d < R; ++d) inner *= shape[d];
      break;
    }
    default: return unsupported(fmt::format("node '{}' ({}): not a norm the norm family runs", nd.name, op_name(op)));
  }
  const int64_t nrows = shape.numel() / cols;
  const Mapping m = choose_mapping(nrows, cols, inner);

  KILN_ASSIGN_OR_RETURN(std::string load, rows::load_functor(b, parts, x));

  // The affine parameters, per normalized element (layer/rms norm: the trailing dims, read broadcast) or
  // per channel (group/instance norm).
  std::string affine;
  if (op != OpId::softmax) {
    const std::vector<std::string> at = per_channel_affine ? std::vector<std::string>{"i.i[1]"} : rows::coord_names(R);
    if (nd.inputs.size() > 1 && !nd.inputs[1].empty())
      affine += fmt::format("    v *= {};\n", b.load(nd.inputs[1][0], at));
    if (nd.inputs.size() > 2 && !nd.inputs[2].empty())
      affine += fmt::format("    v += {};\n", b.load(nd.inputs[2][0], at));
  }
  KILN_ASSIGN_OR_RETURN(std::string epi, rows::epi_functor(b, parts, y, affine));

  std::string dims;
  for (int d = 0; d < R; ++d) dims += fmt::format("{}{}", d ? ", " : "", shape[d]);
  const bool wide = shape.numel() >= (int64_t{1} << 31);
  std::string src = kernel_preamble();
  src += "#include \"kiln/norm.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
  src += fmt::format(
      "struct Cfg {{\n"
      "  using Shape = kiln::rowred::Dims<{}>;\n"
      "  using I = {};\n"
      "  static constexpr int STAT = {}, COLS = {}, INNER = {}, CG = {}, TPR = {}, BLOCK = {}, K = {};\n"
      "  static constexpr long long ROWS = {};\n"
      "  static constexpr float EPS = {};\n"
      "}};\n\n",
      dims, wide ? "long long" : "int", stat, cols, inner, cg, m.tpr, m.block, m.k, nrows,
      float_literal(stat == 2 ? 0.0 : rows::attr_float(nd, "epsilon", 1e-5)));
  src += load + "\n" + epi;
  src += "\n}  // namespace KILN_ENTRY_ns\n\n";
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) KILN_ENTRY(KILN_PARAMS) {{\n"
      "  const KILN_ENTRY_ns::Load load{{KILN_PARAM_NAMES}};\n"
      "  const KILN_ENTRY_ns::Epi epi{{KILN_PARAM_NAMES}};\n"
      "  kiln::norm::rows<KILN_ENTRY_ns::Cfg>(load, epi);\n"
      "}}\n",
      m.block);
  const int64_t rows_per_block = m.block / m.tpr;
  const int64_t grid = (nrows + rows_per_block - 1) / rows_per_block;
  if (cols > (int64_t{1} << 30) || grid > int64_t{0x7fffffff}) {
    return unsupported(fmt::format("node '{}': {} rows of {} values is beyond one launch", nd.name, nrows, cols));
  }
  return b.finish("norm", src, {static_cast<uint32_t>(grid), 1, 1}, {static_cast<uint32_t>(m.block), 1, 1});
}

}  // namespace kiln::codegen
