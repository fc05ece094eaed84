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

std::string pre_statements(KernelBuilder& b, const std::vector<PreOp>& pre, int rank) {
  std::string s;
  for (const PreOp& o : pre) {
    const std::vector<std::string> at = o.per_channel ? std::vector<std::string>{"i.i[1]"} : coord_names(rank);
    s += fmt::format("    v {} {};\n", o.op, b.load(o.t, at));
  }
  return s;
}

namespace {

// One tensor a vector functor reads or writes at the chunk's first coordinate.
struct Access {
  Tensor t;
  int channel_dim = -1;  // >= 0: a 1-D vector indexed by this domain dim; else read at the domain coordinate
  bool write = false;
};

// Whether `t` is memory this group reads (a group input, or one behind a load transform), not a value the
// group computes.
bool read_from_memory(KernelBuilder& b, Tensor t) {
  if (!b.produced_in_group(t)) return true;
  const Node& prod = b.node(b.info(t).producer);
  return *prod.op == OpId::layout_convert && !b.produced_in_group(prod.inputs[0][0]);
}

// The reads of `nodes`' operands as KernelBuilder::emit_pointwise makes them (port 0 of each input, channel
// vectors indexed by the op's axis). False when one tensor is read in two ways.
bool collect_reads(KernelBuilder& b, const std::vector<int32_t>& nodes, int D, std::vector<Access>& out) {
  auto add = [&](Access a) {
    for (const Access& o : out)
      if (o.t == a.t) return o.channel_dim == a.channel_dim && !o.write;
    out.push_back(a);
    return true;
  };
  for (int32_t n : nodes) {
    const Node& nd = b.node(n);
    const OpDef& def = op_def(*nd.op);
    if (def.kind != FusionKind::pointwise) continue;  // store transforms read in-group values
    for (size_t p = 0; p < def.inputs.size() && p < nd.inputs.size(); ++p) {
      if (nd.inputs[p].empty()) continue;
      const Tensor t = nd.inputs[p][0];
      if (!read_from_memory(b, t)) continue;
      Access a{t};
      if (def.inputs[p].channel_vector) {
        const int xr = b.info(nd.inputs[0][0]).shape.rank();
        auto ax = nd.attrs.find("axis");
        const int axis = ax == nd.attrs.end() ? 1 : *normalize_axis(std::get<int64_t>(ax->second), xr);
        a.channel_dim = D - xr + axis;
      }
      if (!add(a)) return false;
    }
  }
  return true;
}

}  // namespace

Result<std::optional<VecForms>> vector_functors(KernelBuilder& b, const Parts& p, Tensor x, Tensor y, int vd,
                                                const std::vector<PreOp>& pre, const std::function<bool(int)>& fits) {
  const Shape& xs = b.info(x).shape;
  const Shape& ys = b.info(y).shape;
  const int R = xs.rank();
  if (ys.rank() != R || vd < 0 || vd >= R) return std::optional<VecForms>{};

  // Every access of each functor.
  std::vector<Access> load_acc, epi_acc;
  if (p.prologue.empty()) {
    load_acc.push_back({x});
  } else if (!collect_reads(b, p.prologue, R, load_acc)) {
    return std::optional<VecForms>{};
  }
  for (const PreOp& o : pre) epi_acc.push_back({o.t, o.per_channel ? 1 : -1});
  if (!collect_reads(b, p.epilogue, R, epi_acc)) return std::optional<VecForms>{};
  // The stores: group outputs computed by the functors' pointwise ops or store conversions, and the anchor's
  // output. (Transposing or reshaping stores move the coordinate: they stay per element.)
  auto add_writes = [&](const std::vector<int32_t>& nodes, bool with_y, const Shape& domain, std::vector<Access>& acc) {
    std::vector<Tensor> outs;
    if (with_y && b.is_group_output(y)) outs.push_back(y);
    for (int32_t n : nodes) {
      const Node& nd = b.node(n);
      const OpId op = *nd.op;
      if (op_def(op).kind != FusionKind::pointwise && op != OpId::layout_convert) continue;
      if (b.is_group_output(nd.outputs[0])) outs.push_back(nd.outputs[0]);
    }
    for (Tensor t : outs) {
      if (b.info(t).shape != domain) return false;  // a broadcast value, stored by some threads only
      acc.push_back({t, -1, true});
    }
    return true;
  };
  if (!add_writes(p.prologue, false, xs, load_acc) || !add_writes(p.epilogue, true, ys, epi_acc))
    return std::optional<VecForms>{};

  // The memory step of an access when the vd coordinate advances by one (0: one value for the chunk).
  auto step = [&](const Access& a, const MemView& v) -> int64_t {
    const Shape& s = b.info(a.t).shape;
    if (a.channel_dim >= 0) {
      if (s.rank() != 1) return -1;  // (channel vectors are 1-D)
      return a.channel_dim == vd && s[0] != 1 ? v.strides[0] : 0;
    }
    const int i = vd - (R - s.rank());
    return i < 0 || s[i] == 1 ? 0 : v.strides[static_cast<size_t>(i)];
  };
  // A chunk's first element sits at an offset multiple of V: the base and every other stride in use are.
  auto aligned_for = [&](const Access& a, const MemView& v, int V) {
    if (v.base % V != 0) return false;
    if (a.channel_dim >= 0) return true;
    const Shape& s = b.info(a.t).shape;
    for (int i = 0; i < s.rank(); ++i) {
      const int d = R - s.rank() + i;
      if (d < 0 || d == vd || s[i] == 1) continue;
      if (v.strides[static_cast<size_t>(i)] % V != 0) return false;
    }
    return true;
  };
  size_t max_size = 0, min_size = 16;
  for (const auto* acc : {&load_acc, &epi_acc}) {
    for (const Access& a : *acc) {
      const MemView v = b.view(a.t, a.write);
      const int64_t st = step(a, v);
      if (st != 0 && st != 1) return std::optional<VecForms>{};
      if (a.write && st != 1) return std::optional<VecForms>{};
      if (st == 1) {
        max_size = std::max(max_size, static_cast<size_t>(dtype_size(v.dtype)));
        min_size = std::min(min_size, static_cast<size_t>(dtype_size(v.dtype)));
      }
    }
  }
  if (max_size == 0) return std::optional<VecForms>{};
  int V = 0;
  for (int cand : {static_cast<int>(16 / max_size), static_cast<int>(8 / max_size), static_cast<int>(4 / max_size)}) {
    if (cand < 2 || static_cast<size_t>(cand) * min_size < 4 || !fits(cand)) continue;
    bool ok = true;
    for (const auto* acc : {&load_acc, &epi_acc})
      for (const Access& a : *acc) {
        const MemView v = b.view(a.t, a.write);
        if (step(a, v) == 1) ok = ok && aligned_for(a, v, cand);
      }
    if (ok) {
      V = cand;
      break;
    }
  }
  if (V == 0) return std::optional<VecForms>{};

  // The statements before the loop over the chunk's V values (vector and single reads, output registers),
  // the seeds of the pointwise emitter, and the stores after the loop.
  const std::vector<std::string> coords = coord_names(R);
  auto prepare = [&](const std::vector<Access>& acc, std::string& before, std::map<int32_t, std::string>& values,
                     std::string& after) {
    for (const Access& a : acc) {
      const MemView v = b.view(a.t, a.write);
      const std::string T(ctype(v.dtype));
      const std::string off = a.channel_dim >= 0
                                  ? b.offset(v, b.info(a.t).shape, {coords[static_cast<size_t>(a.channel_dim)]})
                                  : b.offset(v, b.info(a.t).shape, coords);
      if (a.write) {
        const std::string name = b.fresh("out");
        before += fmt::format("    kiln::Vec<{}, {}> {};\n", T, V, name);
        after += fmt::format("    kiln::stvu<{0}, {1}>(static_cast<{0}*>({2}), {3}, {4});\n", T, V, v.param, off, name);
        b.redirect_store(a.t, name + ".v[j] = ", ";");
      } else if (step(a, v) == 1) {
        const std::string name = b.fresh("in");
        before += fmt::format(
            "    const kiln::Vec<{0}, {1}> {2} = kiln::ldvu<{0}, {1}>(static_cast<const {0}*>({3}), {4});\n", T, V,
            name, v.param, off);
        values[a.t.id] = name + ".v[j]";
      } else {
        const std::string name = b.fresh("s");
        before +=
            fmt::format("    const float {} = kiln::ldf(static_cast<const {}*>({}), {});\n", name, T, v.param, off);
        values[a.t.id] = name;
      }
    }
  };
  // A body that still addresses memory or the coordinate would be wrong for values 1..V-1 of the chunk.
  auto per_element = [](const std::string& body) {
    return body.find("i.i[") != std::string::npos || body.find("kiln::ldf(") != std::string::npos ||
           body.find("kiln::stf(") != std::string::npos;
  };
  auto member = [&](const std::string& sig, const std::string& before, const std::string& body,
                    const std::string& after) {
    return fmt::format(
        "  __device__ __forceinline__ void vec({}) const {{\n{}#pragma unroll\n"
        "    for (int j = 0; j < {}; ++j) {{\n{}    }}\n{}  }}\n",
        sig, before, V, body, after);
  };

  VecForms f;
  f.v = V;
  {
    std::string before, after, body;
    std::map<int32_t, std::string> values;
    prepare(load_acc, before, values, after);
    if (p.prologue.empty()) {
      body = fmt::format("      x[j] = {};\n", values.at(x.id));
    } else {
      KILN_ASSIGN_OR_RETURN(body, b.emit_pointwise(p.prologue, coords, values, false, 6));
      auto it = values.find(x.id);
      if (it == values.end()) {
        b.clear_redirects();
        return std::optional<VecForms>{};
      }
      body += fmt::format("      x[j] = {};\n", it->second);
    }
    b.clear_redirects();
    if (per_element(body)) return std::optional<VecForms>{};
    f.load = fmt::format("struct Load {{\n  KILN_PARAM_MEMBERS\n{}}};\n",
                         member(fmt::format("const kiln::Idx<{}>& i, float* x", R), before, body, after));
  }
  {
    std::string before, after, pre_body;
    std::map<int32_t, std::string> values;
    prepare(epi_acc, before, values, after);
    for (const PreOp& o : pre) pre_body += fmt::format("      v {} {};\n", o.op, values.at(o.t.id));
    values.emplace(y.id, std::string(1, 'v'));  // the anchor's output, after `pre`
    KILN_ASSIGN_OR_RETURN(std::string body, b.emit_pointwise(p.epilogue, coords, values, true, 6));
    b.clear_redirects();
    if (per_element(body)) return std::optional<VecForms>{};
    f.epi = fmt::format("struct Epi {{\n  KILN_PARAM_MEMBERS\n{}}};\n",
                        member(fmt::format("const kiln::Idx<{}>& i, const float* vv", R), before,
                               "      float v = vv[j];\n" + pre_body + body, after));
  }
  return std::optional<VecForms>{f};
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
// Values a thread keeps in registers at most, by mapping (more spills or costs occupancy). Rows moved in
// chunks of V columns keep up to kVecCache values a thread (two or four 16-byte loads in flight).
constexpr int64_t kWarpCache = 16, kBlockCache = 8, kVecCache = 16;
// The most dynamic shared memory a block keeps a long row in: what every sm_80+ GPU grants one block
// (99 KB on sm_86/sm_89, more on sm_80 and sm_90).
constexpr int64_t kSmemRowBytes = 96 * 1024;

// Threads per row and cached chunks per thread for `rows` rows of `cols` values (chunks of `v` columns),
// `inner` apart in logical order.
Mapping choose_mapping(int64_t rows, int64_t cols, int64_t inner, int v) {
  Mapping m;
  if (inner >= 32) {
    // Softmax along an outer axis: neighbouring rows are neighbouring addresses; one row per thread.
    m.tpr = 1;
    m.block = 128;
    m.k = cols <= kWarpCache ? static_cast<int>(cols) : 0;
    return m;
  }
  const int64_t units = cols / v;
  if (units <= 32 * std::max<int64_t>(1, kWarpCache / v)) {
    m.tpr = std::min(32, pow2_at_least(units));
    m.block = 128;
    m.k = static_cast<int>((units + m.tpr - 1) / m.tpr);
    return m;
  }
  if (v == 1) {
    // A block per row. When rows are few (group norm of one image: 32 rows), each gets the largest block,
    // so that the few SMs in use keep enough loads in flight; otherwise 256 or 512 threads.
    if (rows < kFewRows) {
      m.block = cols >= 4096 ? 1024 : 512;
    } else {
      m.block = cols <= 2048 ? 256 : 512;
    }
  } else {
    // A block per row, each thread with about kVecCache values (a chunk each when rows are few, so that
    // the few SMs in use have every thread loading).
    const int64_t per_thread = rows < kFewRows ? 1 : kVecCache / v;
    m.block = static_cast<int>(std::clamp<int64_t>(pow2_at_least((units + per_thread - 1) / per_thread), 128, 1024));
  }
  m.tpr = m.block;
  const int64_t k = (units + m.block - 1) / m.block;
  m.k = k * v <= (v == 1 ? kBlockCache : kVecCache) ? static_cast<int>(k) : 0;  // 0: the row is streamed
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

  KILN_ASSIGN_OR_RETURN(std::string load, rows::load_functor(b, parts, x));

  // The affine parameters, per normalized element (layer/rms norm: the trailing dims, read broadcast) or
  // per channel (group/instance norm).
  std::vector<rows::PreOp> pre;
  if (op != OpId::softmax) {
    if (nd.inputs.size() > 1 && !nd.inputs[1].empty()) pre.push_back({"*=", nd.inputs[1][0], per_channel_affine});
    if (nd.inputs.size() > 2 && !nd.inputs[2].empty()) pre.push_back({"+=", nd.inputs[2][0], per_channel_affine});
  }
  KILN_ASSIGN_OR_RETURN(std::string epi, rows::epi_functor(b, parts, y, rows::pre_statements(b, pre, R)));

  // Chunks of V columns are V consecutive elements of the row's last dim (layer/rms norm, softmax over the
  // last axis, group norm over NCHW) or, over channels-last memory, of a group's channels.
  int vd = -1;
  if (cg > 0) {
    vd = 1;
  } else if (inner == 1) {
    vd = R - 1;
  }
  int vec = 1;
  if (vd >= 0) {
    auto fits = [&](int v) { return cols % v == 0 && (cg > 0 ? cg % v == 0 : shape[vd] % v == 0); };
    KILN_ASSIGN_OR_RETURN(std::optional<rows::VecForms> vf, rows::vector_functors(b, parts, x, y, vd, pre, fits));
    if (vf) {
      vec = vf->v;
      load = vf->load;
      epi = vf->epi;
    }
  }
  const Mapping m = choose_mapping(nrows, cols, inner, vec);
  // A long row streamed by a block stays in shared memory between its two passes when it fits: in the
  // input's 16-bit type when the norm reads it straight from memory (exact), else in f32.
  const DType cache = parts.prologue.empty() ? b.view(x).dtype : DType::f32;
  const int64_t smem = m.k == 0 && m.tpr == m.block ? cols * static_cast<int64_t>(dtype_size(cache)) : 0;
  const bool use_smem = smem > 0 && smem <= kSmemRowBytes;

  std::string dims;
  for (int d = 0; d < R; ++d) dims += fmt::format("{}{}", d ? ", " : "", shape[d]);
  const bool wide = shape.numel() >= (int64_t{1} << 31);
  std::string src = kernel_preamble();
  src += "#include \"kiln/norm.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
  src += fmt::format(
      "struct Cfg {{\n"
      "  using Shape = kiln::rowred::Dims<{}>;\n"
      "  using I = {};\n"
      "  using Cache = {};\n"
      "  static constexpr int STAT = {}, COLS = {}, INNER = {}, CG = {}, V = {}, TPR = {}, BLOCK = {}, K = {};\n"
      "  static constexpr bool SMEM = {};\n"
      "  static constexpr long long ROWS = {};\n"
      "  static constexpr float EPS = {};\n"
      "}};\n\n",
      dims, wide ? "long long" : "int", ctype(use_smem ? cache : DType::f32), stat, cols, inner, cg, vec, m.tpr,
      m.block, m.k, use_smem, nrows, float_literal(stat == 2 ? 0.0 : rows::attr_float(nd, "epsilon", 1e-5)));
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
  return b.finish("norm", src, {static_cast<uint32_t>(grid), 1, 1}, {static_cast<uint32_t>(m.block), 1, 1},
                  use_smem ? static_cast<uint32_t>(smem) : 0);
}

}  // namespace kiln::codegen
