// The data-movement family: layout_convert, transpose, reshape, slice, upsample2d and a concat that is a
// copy (groups of kind layout, weight_transform, concat, other).
//
// Every op here is "output element <- some input element(s)": the glue is a Load functor (output coordinate ->
// value, through the group's memory views) and an Epi functor (trailing pointwise ops and stores).
// Three templates walk the output:
//   - tiled_transpose (transpose.cuh) when the op moves the innermost memory dim (a shared-memory tile);
//   - copy_flat (gather.cuh) for a reshape with nothing fused: 16-byte loads and stores; copy_contiguous
//     for a reshape of a row-major source with an epilogue: 16-byte loads;
//   - gather (gather.cuh) otherwise: one thread per output element in output memory order.
// Where dim 0 is outermost in the walk, the kernels serve every batch (DataOp::batch_generic).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

constexpr uint32_t kBlock = 256;
constexpr int64_t kMaxGrid = 65535;
constexpr int kElementsPerThread = 4;  // a gather's grid covers a few elements per thread
// A tile only pays when the output's innermost run before the source's innermost dim is longer than
// this: shorter runs are read by a plain gather in a few sectors per warp anyway.
constexpr int64_t kMinTileRun = 4;

std::vector<std::string> coord_names(int rank) {
  std::vector<std::string> c;
  for (int d = 0; d < rank; ++d) c.push_back(fmt::format("i.i[{}]", d));
  return c;
}

std::string join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += (k ? std::string(sep) : "") + v[k];
  return s;
}

template <class T>
std::string int_list(const std::vector<T>& v) {
  std::vector<std::string> s;
  for (T x : v) s.push_back(fmt::format("{}", x));
  return join(s);
}

// A double literal that reads back as the same double (the reference computes upsample scales in double).
std::string double_literal(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Dims sorted from the outermost to the innermost memory stride (ties keep logical order).
std::vector<int> memory_order(const std::vector<int64_t>& strides) {
  // A stable insertion sort: ranks are small (std::stable_sort allocated per call, in every group's check).
  std::vector<int> order(strides.size());
  for (size_t k = 0; k < order.size(); ++k) {
    size_t j = k;
    for (; j > 0 && strides[static_cast<size_t>(order[j - 1])] < strides[k]; --j) order[j] = order[j - 1];
    order[j] = static_cast<int>(k);
  }
  return order;
}

int64_t pow2_ceil(int64_t v) {
  return int64_t{1} << std::bit_width(static_cast<uint64_t>(std::max<int64_t>(v, 1) - 1));
}

// The dims of a tiled transpose (see transpose.cuh): A innermost in the source, B innermost in the
// output, each group outer to inner, with tile sizes. Empty `a` when no tile is needed.
struct TilePlan {
  std::vector<int> rest, b, a;
  int64_t la = 1, lb = 1, lr = 1;
  int ta = 0, tb = 0, threads = 0;
};

// `in_order` / `out_order`: the output's dims in the source's / the output's memory order, outer first.
TilePlan plan_tile(const Shape& out, const std::vector<int>& in_order, const std::vector<int>& out_order) {
  TilePlan t;
  auto innermost = [&](const std::vector<int>& order) {
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      if (out[*it] > 1) return *it;
    return -1;
  };
  const int in_inner = innermost(in_order), out_inner = innermost(out_order);
  if (in_inner < 0 || in_inner == out_inner) return t;  // the innermost dim stays: reads and writes coalesce
  for (auto it = out_order.rbegin(); it != out_order.rend() && t.lb < 32; ++it) {
    if (out[*it] == 1) continue;
    if (*it == in_inner) break;
    t.b.insert(t.b.begin(), *it);
    t.lb *= out[*it];
  }
  if (t.lb <= kMinTileRun) {
    t.b.clear();
    return t;
  }
  for (auto it = in_order.rbegin(); it != in_order.rend() && t.la < 32; ++it) {
    if (out[*it] == 1) continue;
    if (std::find(t.b.begin(), t.b.end(), *it) != t.b.end()) break;
    t.a.insert(t.a.begin(), *it);
    t.la *= out[*it];
  }
  for (int d : out_order) {
    if (std::find(t.a.begin(), t.a.end(), d) == t.a.end() && std::find(t.b.begin(), t.b.end(), d) == t.b.end()) {
      t.rest.push_back(d);
      t.lr *= out[d];
    }
  }
  t.tb = static_cast<int>(std::min<int64_t>(32, pow2_ceil(t.lb)));
  t.ta = static_cast<int>(std::min<int64_t>(1024 / t.tb, pow2_ceil(t.la)));
  t.threads = static_cast<int>(std::clamp<int64_t>(int64_t{t.ta} * t.tb, 32, kBlock));
  return t;
}

// What the Load functor of one data op computes, and which template walks the output.
struct OpGlue {
  std::string load_body;    // statements ending in `return <value>;`, indented 4
  bool tiled = false;       // tiled_transpose, else gather
  std::vector<int> walk;    // output dims, outer to inner memory order of the walk
  TilePlan tile;            // tiled transposes only
  bool contiguous = false;  // copy_contiguous from `source` (+ base)
  MemView source;
};

std::string ret(const std::string& v) { return "    return " + v + ";\n"; }

// layout_convert (identity coordinates) and transpose (output dim k is input dim perm[k]).
OpGlue permute_glue(KernelBuilder& b, const Node& n, const std::vector<int>& out_order) {
  const Tensor x = n.inputs[0][0], y = n.outputs[0];
  const Shape& ys = b.info(y).shape;
  const int R = ys.rank();
  std::vector<int64_t> perm(static_cast<size_t>(R));
  std::iota(perm.begin(), perm.end(), 0);
  if (*n.op == OpId::transpose) perm = std::get<std::vector<int64_t>>(n.attrs.at("perm"));
  std::vector<std::string> src(b.checking_only() ? 0 : static_cast<size_t>(R));  // (no load text while checking)
  for (size_t k = 0; k < src.size(); ++k) src[static_cast<size_t>(perm[k])] = fmt::format("i.i[{}]", k);
  const MemView xv = b.view(x);
  // The source's strides seen from the output's dims.
  std::vector<int64_t> in_strides(static_cast<size_t>(R));
  for (int k = 0; k < R; ++k)
    in_strides[static_cast<size_t>(k)] = xv.strides[static_cast<size_t>(perm[static_cast<size_t>(k)])];
  OpGlue g;
  g.load_body = ret(b.load(x, src));
  g.tile = plan_tile(ys, memory_order(in_strides), out_order);
  if (!g.tile.a.empty()) {
    g.tiled = true;
    g.walk = g.tile.rest;
    g.walk.insert(g.walk.end(), g.tile.b.begin(), g.tile.b.end());
    g.walk.insert(g.walk.end(), g.tile.a.begin(), g.tile.a.end());
  } else {
    g.walk = out_order;
  }
  return g;
}

// reshape: the same row-major element order. A row-major source is copied in that order; any other
// source is read at the coordinate of the output's row-major index.
OpGlue reshape_glue(KernelBuilder& b, const Node& n, const std::vector<int>& out_order) {
  const Tensor x = n.inputs[0][0], y = n.outputs[0];
  const Shape& xs = b.info(x).shape;
  const Shape& ys = b.info(y).shape;
  const MemView xv = b.view(x);
  const auto xrm = row_major_strides(xs), yrm = row_major_strides(ys);
  bool row_major = true;
  for (int d = 0; d < xs.rank(); ++d)
    row_major = row_major && (xs[d] == 1 || xv.strides[static_cast<size_t>(d)] == xrm[static_cast<size_t>(d)]);
  OpGlue g;
  if (row_major) {
    g.contiguous = true;
    g.source = xv;
    g.walk.resize(static_cast<size_t>(ys.rank()));
    std::iota(g.walk.begin(), g.walk.end(), 0);
    return g;
  }
  std::string lin = "0LL";
  for (int k = 0; k < ys.rank(); ++k) lin += fmt::format(" + (long long)i.i[{}] * {}", k, yrm[static_cast<size_t>(k)]);
  g.load_body = fmt::format("    const long long l = {};\n", lin);
  std::vector<std::string> src;
  for (int d = 0; d < xs.rank(); ++d)
    src.push_back(fmt::format("(int)(l / {} % {})", xrm[static_cast<size_t>(d)], xs[d]));
  g.load_body += ret(b.load(x, src));
  g.walk = out_order;
  return g;
}

// slice: x[start + i * step] per dim, with the reference's Python index rules (ops_data.cpp).
OpGlue slice_glue(KernelBuilder& b, const Node& n, const std::vector<int>& out_order) {
  const Tensor x = n.inputs[0][0];
  const Shape& xs = b.info(x).shape;
  const auto& starts = std::get<std::vector<int64_t>>(n.attrs.at("starts"));
  auto st = n.attrs.find("steps");
  std::vector<std::string> src;
  for (int d = 0; d < xs.rank(); ++d) {
    const auto du = static_cast<size_t>(d);
    const int64_t len = xs[d];
    const int64_t step = st == n.attrs.end() ? 1 : std::get<std::vector<int64_t>>(st->second)[du];
    const int64_t start = std::clamp(starts[du] < 0 ? starts[du] + len : starts[du], int64_t{0}, len);
    std::string c = fmt::format("i.i[{}]", d);
    if (step != 1) c = fmt::format("{} * {}", c, step);
    if (start != 0) c = fmt::format("{} + {}", start, c);
    src.push_back(c);
  }
  OpGlue g;
  g.load_body = ret(b.load(x, src));
  g.walk = out_order;
  return g;
}

// concat (a copy): the input whose range along the axis holds the coordinate.
OpGlue concat_glue(KernelBuilder& b, const Node& n, const std::vector<int>& out_order) {
  const Shape& ys = b.info(n.outputs[0]).shape;
  const int axis = *normalize_axis(std::get<int64_t>(n.attrs.at("axis")), ys.rank());
  const auto& xs = n.inputs[0];
  OpGlue g;
  int64_t at = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    std::vector<std::string> src = coord_names(ys.rank());
    if (at != 0) src[static_cast<size_t>(axis)] = fmt::format("i.i[{}] - {}", axis, at);
    at += b.info(xs[k]).shape[axis];
    if (k + 1 < xs.size()) {
      g.load_body += fmt::format("    if (i.i[{}] < {}) return {};\n", axis, at, b.load(xs[k], src));
    } else {
      g.load_body += ret(b.load(xs[k], src));
    }
  }
  g.walk = out_order;
  return g;
}

// The reference's source scale of one upsampled dim (ops_data.cpp, src_scale).
double upsample_scale(const Node& n, int dim, int64_t in, int64_t out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  auto s = n.attrs.find("scale");
  if (s != n.attrs.end()) return 1.0 / std::get<std::vector<double>>(s->second)[static_cast<size_t>(dim)];
  return static_cast<double>(in) / static_cast<double>(out);
}

OpGlue upsample_glue(KernelBuilder& b, const Node& n, const std::vector<int>& out_order) {
  const Tensor x = n.inputs[0][0], y = n.outputs[0];
  const Shape& xs = b.info(x).shape;
  const Shape& ys = b.info(y).shape;
  const bool bilinear = std::get<std::string>(n.attrs.at("mode")) == "bilinear";
  const bool ac = std::get<bool>(n.attrs.at("align_corners"));
  const std::string rh = double_literal(upsample_scale(n, 0, xs[2], ys[2], ac));
  const std::string rw = double_literal(upsample_scale(n, 1, xs[3], ys[3], ac));
  OpGlue g;
  g.walk = out_order;
  if (!bilinear) {
    g.load_body = fmt::format("    const int h = kiln::upsample_nearest_src(i.i[2], {}, {});\n", rh, xs[2]);
    g.load_body += fmt::format("    const int w = kiln::upsample_nearest_src(i.i[3], {}, {});\n", rw, xs[3]);
    g.load_body += ret(b.load(x, {"i.i[0]", "i.i[1]", "h", "w"}));
    return g;
  }
  const char* acs = ac ? "true" : "false";
  g.load_body =
      fmt::format("    const kiln::LinearSrc h = kiln::upsample_linear_src<{}>(i.i[2], {}, {});\n", acs, rh, xs[2]);
  g.load_body +=
      fmt::format("    const kiln::LinearSrc w = kiln::upsample_linear_src<{}>(i.i[3], {}, {});\n", acs, rw, xs[3]);
  g.load_body += fmt::format("    const float a = {};\n", b.load(x, {"i.i[0]", "i.i[1]", "h.i0", "w.i0"}));
  g.load_body += fmt::format("    const float c = {};\n", b.load(x, {"i.i[0]", "i.i[1]", "h.i0", "w.i1"}));
  g.load_body += fmt::format("    const float d = {};\n", b.load(x, {"i.i[0]", "i.i[1]", "h.i1", "w.i0"}));
  g.load_body += fmt::format("    const float e = {};\n", b.load(x, {"i.i[0]", "i.i[1]", "h.i1", "w.i1"}));
  g.load_body += ret("kiln::bilinear_blend(a, c, d, e, h.l, w.l)");
  return g;
}

// With `batch_generic`, dim 0 (the outermost walked) is the kernel's batch argument: its size is left out
// (0 in shape, never read: kiln/gather.cuh's unflatten) and numel counts one batch element's elements.
std::string cfg_struct(const Shape& out, std::vector<int> walk, const TilePlan* tile, bool batch_generic) {
  std::vector<int64_t> dims = out.to_vector();
  if (dims.empty()) dims.push_back(1), walk.push_back(0);  // a scalar is copied as [1] (no zero-length arrays)
  int64_t numel = out.numel();
  if (batch_generic) {
    numel = dims[0] > 0 ? numel / dims[0] : 0;
    dims[0] = 0;
  }
  std::string s = "struct Cfg {\n";
  s += fmt::format("  static constexpr int R = {};\n", dims.size());
  s += fmt::format("  static constexpr int shape[R] = {{{}}};\n", int_list(dims));
  s += fmt::format("  static constexpr int walk[R] = {{{}}};\n", int_list(walk));
  s += fmt::format("  static constexpr long long numel = {}LL;\n", numel);
  if (tile) {
    s += fmt::format("  static constexpr int NA = {}, NB = {}, TA = {}, TB = {}, threads = {};\n", tile->a.size(),
                     tile->b.size(), tile->ta, tile->tb, tile->threads);
    s += fmt::format("  static constexpr long long LA = {}LL, LB = {}LL;\n", tile->la, tile->lb);
  }
  return s + "};\n";
}

// The group's data op (its one node that is not pointwise; the rest are its epilogue) and its glue.
struct DataOp {
  const Node* node = nullptr;
  std::vector<int32_t> epilogue;
  OpGlue glue;
  bool flat_copy = false;  // a reshape with nothing fused into a dense row-major output: copy_flat
  // Dim 0 is outermost in the walk (a tile's rest): its size is the kernel's batch argument, never in the
  // source (docs/architecture.md, "Batch-generic kernels").
  bool batch_generic = false;
};

Result<DataOp> data_op_of(KernelBuilder& b) {
  const Group& grp = b.group();
  int32_t op = -1;
  DataOp d;
  for (int32_t n : grp.nodes) {
    const OpDef& def = op_def(*b.node(n).op);
    if (op < 0 && def.kind != FusionKind::pointwise) {
      op = n;
    } else {
      d.epilogue.push_back(n);
    }
  }
  if (op < 0) {
    const Node& first = b.node(grp.nodes.front());
    return unsupported(fmt::format("node '{}' ({}): a {} group without a data-movement op", first.name,
                                   op_name(*first.op), group_kind_name(grp.kind)));
  }
  const Node& n = b.node(op);
  d.node = &n;
  const Tensor y = n.outputs[0];
  const TensorInfo& yi = b.info(y);
  const int R = yi.shape.rank();
  for (const auto& port : n.inputs)  // inputs whose dim 0 is the output's carry the batch too
    for (Tensor x : port)
      if (R > 0 && b.info(x).shape.rank() > 0 && b.info(x).shape[0] == yi.shape[0]) b.also_carries_batch(x);
  for (int k = 0; k < R; ++k) {
    if (yi.shape[k] > INT32_MAX)
      return unsupported(fmt::format("node '{}' ({}): output dim {} of {} exceeds 2^31 - 1", n.name, op_name(*n.op), k,
                                     yi.shape.to_string()));
  }
  KILN_RETURN_IF_ERROR(b.can_emit(d.epilogue));

  // The walk follows the output's memory order so that the epilogue's stores coalesce.
  const std::vector<int> out_order = memory_order(layout_strides(yi.shape, yi.layout));
  switch (*n.op) {
    case OpId::layout_convert:
    case OpId::transpose: d.glue = permute_glue(b, n, out_order); break;
    case OpId::reshape: d.glue = reshape_glue(b, n, out_order); break;
    case OpId::slice: d.glue = slice_glue(b, n, out_order); break;
    case OpId::concat: d.glue = concat_glue(b, n, out_order); break;
    case OpId::upsample2d: d.glue = upsample_glue(b, n, out_order); break;
    default:
      return unsupported(
          fmt::format("node '{}' ({}): the data-movement family has no kernel for it", n.name, op_name(*n.op)));
  }
  if (d.glue.contiguous && d.epilogue.empty() && b.is_group_output(y)) {
    const MemView yv = b.view(y, true);
    d.flat_copy = yv.base == 0 && yv.strides == row_major_strides(yi.shape) && yv.dtype == d.glue.source.dtype;
  }
  if (R == 0 && !d.flat_copy)  // a scalar (one element) is only ever copied, as if it were [1]
    return unsupported(fmt::format("node '{}' ({}): a rank-0 output but no flat copy", n.name, op_name(*n.op)));
  const std::vector<int>& outer = d.glue.tiled ? d.glue.tile.rest : d.glue.walk;  // unflattened first
  d.batch_generic = R > 0 && (d.flat_copy || (!outer.empty() && outer.front() == 0));
  return d;
}

std::string numel_arg(const KernelBuilder& b, const DataOp& d) {
  return d.batch_generic ? fmt::format("KILN_ENTRY_ns::Cfg::numel * static_cast<long long>({})", b.batch_param())
                         : "KILN_ENTRY_ns::Cfg::numel";
}

std::string render_flat_copy(KernelBuilder& b, const DataOp& d) {
  const Tensor y = d.node->outputs[0];
  const MemView yv = b.view(y, true);
  std::string src = kernel_preamble() + "#include \"kiln/gather.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
  src += cfg_struct(b.info(y).shape, d.glue.walk, nullptr, d.batch_generic);
  src += "\n}  // namespace KILN_ENTRY_ns\n\nextern \"C\" __global__ void KILN_ENTRY(KILN_PARAMS) {\n";
  src += fmt::format(
      "  kiln::copy_flat<KILN_ENTRY_ns::Cfg>(static_cast<const {0}*>({1}) + {2}LL, static_cast<{0}*>({3}), {4});\n}}\n",
      ctype(yv.dtype), d.glue.source.param, d.glue.source.base, yv.param, numel_arg(b, d));
  return src;
}

Result<std::string> render_walk(KernelBuilder& b, const DataOp& d) {
  const Tensor y = d.node->outputs[0];
  const TensorInfo& yi = b.info(y);
  const int R = yi.shape.rank();
  const OpGlue& g = d.glue;
  std::map<int32_t, std::string> values{{y.id, "v"}};
  KILN_ASSIGN_OR_RETURN(std::string epi, b.emit_pointwise(d.epilogue, coord_names(R), values, true, 4));
  std::string src = kernel_preamble();
  src += g.tiled ? "#include \"kiln/transpose.cuh\"\n" : "#include \"kiln/gather.cuh\"\n";
  src += "\nnamespace KILN_ENTRY_ns {\n\n";
  src += cfg_struct(yi.shape, g.walk, g.tiled ? &g.tile : nullptr, d.batch_generic);
  if (!g.contiguous) {
    src += fmt::format(
        "\nstruct Load {{\n  KILN_PARAM_MEMBERS\n  __device__ float operator()(const kiln::Idx<{}>& i) const {{\n{}  "
        "}}\n}};\n",
        R, g.load_body);
  }
  src += fmt::format(
      "\nstruct Epi {{\n  KILN_PARAM_MEMBERS\n  __device__ void operator()(float v, const kiln::Idx<{}>& i) const {{\n"
      "    (void)v;\n    (void)i;\n{}  }}\n}};\n",
      R, epi);
  src += "\n}  // namespace KILN_ENTRY_ns\n\n";
  src += "extern \"C\" __global__ void KILN_ENTRY(KILN_PARAMS) {\n";
  src += "  const KILN_ENTRY_ns::Epi epi{KILN_PARAM_NAMES};\n";
  if (g.tiled) {
    src += "  const KILN_ENTRY_ns::Load load{KILN_PARAM_NAMES};\n";
    src += "  kiln::tiled_transpose<KILN_ENTRY_ns::Cfg>(load, epi);\n}\n";
  } else if (g.contiguous) {
    src += fmt::format("  kiln::copy_contiguous<KILN_ENTRY_ns::Cfg>(static_cast<const {}*>({}) + {}LL, epi, {});\n}}\n",
                       ctype(g.source.dtype), g.source.param, g.source.base, numel_arg(b, d));
  } else {
    src += "  const KILN_ENTRY_ns::Load load{KILN_PARAM_NAMES};\n";
    src += fmt::format("  kiln::gather<KILN_ENTRY_ns::Cfg>(load, epi, {});\n}}\n", numel_arg(b, d));
  }
  return src;
}

int64_t tile_blocks(const TilePlan& t) { return (t.la + t.ta - 1) / t.ta * ((t.lb + t.tb - 1) / t.tb) * t.lr; }

Status check_tiles(const DataOp& d) {
  if (!d.glue.tiled || d.flat_copy || tile_blocks(d.glue.tile) <= INT32_MAX) return {};
  return unsupported(fmt::format("node '{}' ({}): {} tiles exceed one grid", d.node->name, op_name(*d.node->op),
                                 tile_blocks(d.glue.tile)));
}

class DataFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::data; }
  std::string describe(const KernelConfig& k) const override {
    const DataConfig& p = std::get<DataConfig>(k.detail);
    static const char* const kNames[] = {"copy_flat", "copy_contiguous", "gather", "transpose"};
    std::string s = kNames[static_cast<int>(p.kernel)];
    if (p.kernel == DataConfig::Kernel::tiled_transpose) s += fmt::format(" {}x{}", p.tile_a, p.tile_b);
    return s;
  }
  bool runs(GroupKind k) const override {
    return k == GroupKind::layout || k == GroupKind::weight_transform || k == GroupKind::concat ||
           k == GroupKind::other;
  }
  Status can_implement(KernelBuilder& b, const Target&) const override {
    b.set_checking_only(true);
    auto d = data_op_of(b);
    b.set_checking_only(false);
    if (!d.ok()) return d.status();
    return check_tiles(*d);
  }

  Result<KernelConfig> plan(KernelBuilder& b, const Target&) const override {
    KernelConfig k = new_config(b, id());
    KILN_ASSIGN_OR_RETURN(DataOp d, data_op_of(b));
    const TensorInfo& yi = b.info(d.node->outputs[0]);
    DataConfig dc;
    int64_t blocks = 0;
    int threads = kBlock;
    if (d.flat_copy) {
      dc.kernel = DataConfig::Kernel::copy_flat;
      const int64_t per_vec = 16 / dtype_size(yi.dtype);
      blocks = std::clamp<int64_t>(((yi.shape.numel() + per_vec - 1) / per_vec + kBlock - 1) / kBlock, 1, kMaxGrid);
    } else if (d.glue.tiled) {
      dc.kernel = DataConfig::Kernel::tiled_transpose;
      const TilePlan& t = d.glue.tile;
      dc.tile_a = t.ta, dc.tile_b = t.tb;
      KILN_RETURN_IF_ERROR(check_tiles(d));
      blocks = tile_blocks(t);
      threads = t.threads;
    } else {
      dc.kernel = d.glue.contiguous ? DataConfig::Kernel::copy_contiguous : DataConfig::Kernel::gather;
      const int64_t per_block = int64_t{kBlock} * kElementsPerThread;
      blocks = std::clamp<int64_t>((yi.shape.numel() + per_block - 1) / per_block, 1, kMaxGrid);
    }
    k.grid = {static_cast<uint32_t>(blocks), 1, 1};
    k.block = {static_cast<uint32_t>(threads), 1, 1};
    k.detail = dc;
    if (d.batch_generic) {  // the batch is the kernel's argument
      k.params.push_back(KernelParam::batch_value(yi.shape[0]));
      b.use_params(k.params);
    }
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    KILN_ASSIGN_OR_RETURN(DataOp d, data_op_of(b));
    std::string src;
    if (std::get<DataConfig>(k.detail).kernel == DataConfig::Kernel::copy_flat) {
      src = render_flat_copy(b, d);
    } else {
      KILN_ASSIGN_OR_RETURN(src, render_walk(b, d));
    }
    return b.finish(id(), src, k.grid, k.block);
  }
};

}  // namespace

const KernelFamily& data_family() {
  static const DataFamily f;
  return f;
}

}  // namespace kiln::codegen
