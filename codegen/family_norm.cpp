// The norm family: layer_norm, rms_norm, group_norm, instance_norm and softmax, with the group's leading
// pointwise ops (computing the norm's input) in the Load functor and its trailing ones in the Epi functor
// (templates/kiln/norm.cuh).
#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/family_rows.h"
#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

int pow2_at_least(int64_t v) { return static_cast<int>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(v, 1)))); }

struct Mapping {
  int tpr = 32, block = 128, k = 0;
};

// Rows are few when there are fewer than about two per SM (rounded down to a multiple of 64).
int64_t few_rows(const Target& t) { return std::max<int64_t>(64, (int64_t{2} * t.sm_count) / 64 * 64); }
// Values a thread keeps in registers at most, by mapping (more spills or costs occupancy). Rows moved in
// chunks of V columns keep up to kVecCache values a thread (two or four 16-byte loads in flight).
constexpr int64_t kWarpCache = 16, kBlockCache = 8, kVecCache = 16;
// The most interleaved rows (NormConfig::interleave): 8 (a group of 2 16-bit channels).
constexpr int kMaxInterleave = 8;
// The most dynamic shared memory a block keeps its rows in: what the target lets one block have (the
// planner's target is the device the kernel runs on), less the reductions' static partials (at most
// 32 warps x 4 floats x kMaxInterleave rows). Kept in shared memory, a row is read from DRAM once; streamed,
// twice.
int64_t smem_row_bytes(const Target& t) { return t.smem_per_block - 32 * 4 * kMaxInterleave * 4; }

// Threads per row and cached chunks per thread for `rows` rows of `cols` values (chunks of `v` columns),
// `inner` apart in logical order, `il` rows interleaved (a block holds a multiple of il rows).
Mapping choose_mapping(int64_t rows, int64_t cols, int64_t inner, int v, int il, const Target& target) {
  Mapping m;
  if (il > 1) {
    // Interleaved rows: a row per TPR of every il threads of a warp (TPR <= 32 / il), else il rows of a
    // block. The threads of a row are those of the mapping without interleaving (at most 1024 / il).
    const Mapping one = choose_mapping(rows, cols, inner, v, 1, target);
    const int64_t units = cols / v;
    if (one.tpr <= 32) {
      m.tpr = std::min(32 / il, one.tpr);
      m.block = 128;
      m.k = static_cast<int>((units + m.tpr - 1) / m.tpr);
      if (static_cast<int64_t>(m.k) * v <= std::max<int64_t>(v, kWarpCache)) return m;
    }
    m.tpr = std::min(std::max(one.tpr, 32), 1024 / il);
    m.block = m.tpr * il;
    const int64_t k = (units + m.tpr - 1) / m.tpr;
    m.k = k * v <= (v == 1 ? kBlockCache : kVecCache) ? static_cast<int>(k) : 0;
    return m;
  }
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
    if (rows < few_rows(target)) {
      m.block = cols >= 4096 ? 1024 : 512;
    } else {
      m.block = cols <= 2048 ? 256 : 512;
    }
  } else {
    // A block per row, each thread with about kVecCache values (a chunk each when rows are few, so that
    // the few SMs in use have every thread loading).
    const int64_t per_thread = rows < few_rows(target) ? 1 : kVecCache / v;
    m.block = static_cast<int>(std::clamp<int64_t>(pow2_at_least((units + per_thread - 1) / per_thread), 128, 1024));
  }
  m.tpr = m.block;
  const int64_t k = (units + m.block - 1) / m.block;
  m.k = k * v <= (v == 1 ? kBlockCache : kVecCache) ? static_cast<int>(k) : 0;  // 0: the row is streamed
  return m;
}

// The group's norm: which statistic over which rows, and the affine applied before the epilogue.
struct Norm {
  rows::Parts parts;
  const Node* node = nullptr;
  Tensor x, y;
  NormConfig::Stat stat = NormConfig::Stat::mean_var;
  int64_t cols = 1, inner = 1, cg = 0;
  std::vector<rows::PreOp> pre;
  int vd = -1;  // the dim chunks of V columns run along (-1: none)
  int il = 1;   // rows interleaved (NormConfig::interleave)
  // No normalized dim is dim 0: rows run over dim 0 outermost (a layer / RMS norm over fewer dims than the
  // input has, a group or instance norm, a softmax along another axis), so the kernel can be batch-generic.
  bool batch_outer = false;
};

Result<Norm> norm_of(KernelBuilder& b) {
  Norm nm;
  KILN_ASSIGN_OR_RETURN(nm.parts, rows::split(b));
  const Node& nd = b.node(nm.parts.anchor);
  nm.node = &nd;
  const OpId op = *nd.op;
  nm.x = nd.inputs[0][0];
  nm.y = nd.outputs[0];
  const Shape& shape = b.info(nm.x).shape;
  const int R = shape.rank();
  if (R < 1 || shape.numel() < 1) return unsupported(fmt::format("node '{}': empty input", nd.name));
  bool per_channel_affine = false;
  switch (op) {
    case OpId::layer_norm:
    case OpId::rms_norm: {
      nm.stat = op == OpId::rms_norm ? NormConfig::Stat::mean_square : NormConfig::Stat::mean_var;
      const int64_t ndim = rows::attr_int(nd, "normalized_ndim", 1);
      for (int d = R - static_cast<int>(ndim); d < R; ++d) nm.cols *= shape[d];
      nm.batch_outer = ndim < R;
      break;
    }
    case OpId::group_norm:
    case OpId::instance_norm: {
      if (R < 2) return unsupported(fmt::format("node '{}': group norm of a rank-{} input", nd.name, R));
      const int64_t C = shape[1];
      const int64_t groups = op == OpId::group_norm ? rows::attr_int(nd, "groups", 1) : C;
      const int64_t per_group = C / groups;
      nm.cols = shape.numel() / shape[0] / groups;
      per_channel_affine = true;
      nm.batch_outer = true;
      // Over a channels-last input, walk a group's channels fastest (neighbouring addresses).
      if (per_group > 1 && nm.cols > per_group && rows::channels_last(b, nm.parts, nm.x)) nm.cg = per_group;
      // A group of fewer than 32 bytes a pixel fills part of each sector it reads: neighbouring groups go to
      // neighbouring threads, so that a warp's reads of one pixel are whole sectors (IL groups, which must
      // divide the groups so that IL neighbouring rows are IL neighbouring groups of one sample).
      if (nm.cg > 0) {
        const int64_t bytes = per_group * static_cast<int64_t>(dtype_size(b.info(nm.x).dtype));
        while (nm.il < kMaxInterleave && bytes * nm.il * 2 <= 32 && groups % (nm.il * 2) == 0) nm.il *= 2;
      }
      break;
    }
    case OpId::softmax: {
      nm.stat = NormConfig::Stat::softmax;
      const int axis = *normalize_axis(rows::attr_int(nd, "axis", -1), R);
      nm.cols = shape[axis];
      for (int d = axis + 1; d < R; ++d) nm.inner *= shape[d];
      nm.batch_outer = axis > 0;
      break;
    }
    default: return unsupported(fmt::format("node '{}' ({}): not a norm the norm family runs", nd.name, op_name(op)));
  }
  KILN_RETURN_IF_ERROR(b.can_emit(nm.parts.prologue));
  KILN_RETURN_IF_ERROR(b.can_emit(nm.parts.epilogue));
  // The affine parameters, per normalized element (layer/rms norm: the trailing dims, read broadcast) or
  // per channel (group/instance norm).
  if (op != OpId::softmax) {
    if (nd.inputs.size() > 1 && !nd.inputs[1].empty()) nm.pre.push_back({"*=", nd.inputs[1][0], per_channel_affine});
    if (nd.inputs.size() > 2 && !nd.inputs[2].empty()) nm.pre.push_back({"+=", nd.inputs[2][0], per_channel_affine});
  }
  // Chunks of V columns are V consecutive elements of the row's last dim (layer/rms norm, softmax over the
  // last axis, group norm over NCHW) or, over channels-last memory, of a group's channels.
  if (nm.cg > 0) {
    nm.vd = 1;
  } else if (nm.inner == 1) {
    nm.vd = R - 1;
  }
  return nm;
}

// The vector forms of the functors for V = `only` (0: the widest the accesses allow), or nullopt.
Result<std::optional<rows::VecForms>> norm_vectors(KernelBuilder& b, const Norm& nm, int only) {
  if (nm.vd < 0) return std::optional<rows::VecForms>{};
  const Shape& shape = b.info(nm.x).shape;
  auto fits = [&](int v) {
    return (only == 0 || v == only) && nm.cols % v == 0 && (nm.cg > 0 ? nm.cg % v == 0 : shape[nm.vd] % v == 0);
  };
  return rows::vector_functors(b, nm.parts, nm.x, nm.y, nm.vd, nm.pre, fits);
}

class NormFamily final : public KernelFamily {
 public:
  KernelFamilyId id() const override { return KernelFamilyId::norm; }
  std::string describe(const KernelConfig& k) const override {
    const NormConfig& p = std::get<NormConfig>(k.detail);
    return fmt::format("tpr{}{} v{} b{}{}{}", p.threads_per_row,
                       p.interleave > 1 ? fmt::format(" il{}", p.interleave) : std::string(), p.vec, p.block,
                       p.cached_chunks ? fmt::format(" k{}", p.cached_chunks) : std::string(),
                       p.smem_row ? " smem" : "");
  }
  bool runs(GroupKind k) const override { return k == GroupKind::norm; }
  Status can_implement(KernelBuilder& b, const Target& t) const override { return plan(b, t).status(); }

  Result<KernelConfig> plan(KernelBuilder& b, const Target& target) const override {
    KernelConfig k = new_config(b, id());
    KILN_ASSIGN_OR_RETURN(Norm nm, norm_of(b));
    const Shape& shape = b.info(nm.x).shape;
    NormConfig nc;
    nc.stat = nm.stat;
    nc.cols = nm.cols, nc.inner = nm.inner, nc.channel_group = nm.cg, nc.vec_dim = nm.vd;
    nc.rows = shape.numel() / nm.cols;
    KILN_ASSIGN_OR_RETURN(std::optional<rows::VecForms> vf, norm_vectors(b, nm, 0));
    if (vf) nc.vec = vf->v;
    const Mapping m = choose_mapping(nc.rows, nc.cols, nc.inner, nc.vec, nm.il, target);
    nc.threads_per_row = m.tpr, nc.interleave = nm.il, nc.block = m.block, nc.cached_chunks = m.k;
    // Long rows streamed by a block stay in shared memory between their two passes when they fit: in the
    // input's 16-bit type when the norm reads it straight from memory (exact), else in f32.
    const DType cache = nm.parts.prologue.empty() ? b.view(nm.x).dtype : DType::f32;
    const int64_t smem =
        m.k == 0 && m.tpr * nm.il == m.block ? nm.il * nc.cols * static_cast<int64_t>(dtype_size(cache)) : 0;
    nc.smem_row = smem > 0 && smem <= smem_row_bytes(target);
    nc.cache_dtype = nc.smem_row ? cache : DType::f32;
    nc.wide_index = shape.numel() >= (int64_t{1} << 31);
    const int64_t rows_per_block = m.block / m.tpr;
    const int64_t grid = (nc.rows + rows_per_block - 1) / rows_per_block;
    if (nc.cols > (int64_t{1} << 30) || grid > int64_t{0x7fffffff}) {
      return unsupported(
          fmt::format("node '{}': {} rows of {} values is beyond one launch", nm.node->name, nc.rows, nc.cols));
    }
    k.grid = {static_cast<uint32_t>(grid), 1, 1};
    k.block = {static_cast<uint32_t>(m.block), 1, 1};
    k.dynamic_smem = nc.smem_row ? static_cast<uint32_t>(smem) : 0;
    // Batch-generic when dim 0 is no normalized dim (its rows are the batch's outermost): rows are then
    // batch x the rows of one batch element, and the coordinates never need dim 0's size.
    nc.batch_generic = nm.batch_outer;
    if (nc.batch_generic) {
      k.params.push_back(KernelParam::batch_value(shape[0]));
      b.use_params(k.params);
    }
    k.detail = nc;
    return k;
  }

  Result<Kernel> render(KernelBuilder& b, const KernelConfig& k) const override {
    const NormConfig& nc = std::get<NormConfig>(k.detail);
    KILN_ASSIGN_OR_RETURN(Norm nm, norm_of(b));
    const Shape& shape = b.info(nm.x).shape;
    const int R = shape.rank();
    KILN_ASSIGN_OR_RETURN(std::string load, rows::load_functor(b, nm.parts, nm.x));
    KILN_ASSIGN_OR_RETURN(std::string epi, rows::epi_functor(b, nm.parts, nm.y, rows::pre_statements(b, nm.pre, R)));
    if (nc.vec > 1) {
      KILN_ASSIGN_OR_RETURN(std::optional<rows::VecForms> vf, norm_vectors(b, nm, nc.vec));
      KILN_CHECK(vf.has_value(), "the norm family's vector form went away between plan and render");
      load = vf->load;
      epi = vf->epi;
    }
    std::string dims;  // dim 0 only as a placeholder in a batch-generic source (unravel never reads it)
    for (int d = 0; d < R; ++d) dims += fmt::format("{}{}", d ? ", " : "", d == 0 && nc.batch_generic ? 0 : shape[d]);
    std::string src = kernel_preamble();
    src += "#include \"kiln/norm.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
    src += fmt::format(
        "struct Cfg {{\n"
        "  using Shape = kiln::rowred::Dims<{}>;\n"
        "  using I = {};\n"
        "  using Cache = {};\n"
        "  static constexpr int STAT = {}, COLS = {}, INNER = {}, CG = {}, V = {}, TPR = {}, IL = {}, BLOCK = {}, K = "
        "{};\n"
        "  static constexpr bool SMEM = {};\n"
        "  static constexpr long long ROWS = {};\n"
        "  static constexpr float EPS = {};\n"
        "}};\n\n",
        dims, nc.wide_index ? "long long" : "int", ctype(nc.cache_dtype), static_cast<int>(nc.stat), nc.cols, nc.inner,
        nc.channel_group, nc.vec, nc.threads_per_row, nc.interleave, nc.block, nc.cached_chunks, nc.smem_row,
        nc.batch_generic ? nc.rows / shape[0] : nc.rows,
        float_literal(nc.stat == NormConfig::Stat::softmax ? 0.0 : rows::attr_float(*nm.node, "epsilon", 1e-5)));
    src += load + "\n" + epi;
    src += "\n}  // namespace KILN_ENTRY_ns\n\n";
    src += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({}) KILN_ENTRY(KILN_PARAMS) {{\n"
        "  const KILN_ENTRY_ns::Load load{{KILN_PARAM_NAMES}};\n"
        "  const KILN_ENTRY_ns::Epi epi{{KILN_PARAM_NAMES}};\n"
        "  kiln::norm::rows<KILN_ENTRY_ns::Cfg>(load, epi{});\n"
        "}}\n",
        nc.block, nc.batch_generic ? ", " + b.batch_param() : "");
    return b.finish(id(), src, k.grid, k.block, k.dynamic_smem);
  }
};

}  // namespace

const KernelFamily& norm_family() {
  static const NormFamily f;
  return f;
}

}  // namespace kiln::codegen
