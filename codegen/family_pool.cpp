// The pool family: max_pool2d and avg_pool2d (one output per thread; over channels-last memory with C a
// multiple of the vector width, V consecutive channels per thread with 16-byte accesses), global_avg_pool and
// global_max_pool (a reduction over H x W per (n, c)), with the group's leading pointwise ops in the Load functor and
// its trailing ones in the Epi functor (templates/kiln/pool.cuh).
#include <algorithm>
#include <bit>

#include <fmt/format.h>

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

}  // namespace

Result<Kernel> generate_pool(KernelBuilder& b) {
  KILN_ASSIGN_OR_RETURN(rows::Parts parts, rows::split(b));
  const Node& nd = b.node(parts.anchor);
  const OpId op = *nd.op;
  const Tensor x = nd.inputs[0][0];
  const Tensor y = nd.outputs[0];
  const Shape& in = b.info(x).shape;
  const Shape& out = b.info(y).shape;
  if (in.rank() != 4) return unsupported(fmt::format("node '{}': pooling of a rank-{} input", nd.name, in.rank()));
  const bool global = op == OpId::global_avg_pool || op == OpId::global_max_pool;
  if (!global && op != OpId::max_pool2d && op != OpId::avg_pool2d) {
    return unsupported(fmt::format("node '{}' ({}): not a pooling op the pool family runs", nd.name, op_name(op)));
  }
  const bool is_max = op == OpId::max_pool2d || op == OpId::global_max_pool;
  const bool nhwc = rows::channels_last(b, parts, x);
  const bool wide = std::max(in.numel(), out.numel()) >= (int64_t{1} << 31);

  KILN_ASSIGN_OR_RETURN(std::string load, rows::load_functor(b, parts, x));
  KILN_ASSIGN_OR_RETURN(std::string epi, rows::epi_functor(b, parts, y, ""));

  std::string cfg, call;
  int block = kWindowBlock;
  int64_t grid = 0;
  if (global) {
    const int64_t hw = in[2] * in[3], nc = in[0] * in[1];
    // NHWC: a thread per (n, c), neighbouring threads on neighbouring channels; NCHW: the H x W plane is
    // contiguous, so a warp (or, for large planes, the block) reads it together.
    int tpr = 1;
    if (!nhwc || nc < 256) {
      tpr = hw <= 1024 ? std::min<int>(32, static_cast<int>(std::bit_ceil(static_cast<uint64_t>(hw)))) : 256;
      block = hw <= 1024 ? 128 : 256;
    }
    grid = (nc + block / tpr - 1) / (block / tpr);
    cfg = fmt::format(
        "struct Cfg {{\n  using I = {};\n"
        "  static constexpr int N = {}, C = {}, H = {}, W = {}, TPR = {}, BLOCK = {};\n"
        "  static constexpr bool MAX = {};\n}};\n\n",
        wide ? "long long" : "int", in[0], in[1], in[2], in[3], tpr, block, is_max);
    call = "kiln::pool::global";
  } else {
    const auto k = ints(nd, "kernel", {1, 1});
    const auto s = ints(nd, "stride", k);
    auto p = ints(nd, "padding", {0, 0});
    if (p.size() == 2) p = {p[0], p[1], p[0], p[1]};
    if (k.size() != 2 || s.size() != 2 || p.size() != 4) {
      return unsupported(fmt::format("node '{}': malformed window attributes", nd.name));
    }
    const bool include_pad = !is_max && flag(nd, "count_include_pad", true);
    // Over channels-last memory, a thread takes V consecutive channels when every access allows it.
    int vec = 1;
    if (nhwc) {
      auto fits = [&](int v) { return in[1] % v == 0; };
      KILN_ASSIGN_OR_RETURN(std::optional<rows::VecForms> vf, rows::vector_functors(b, parts, x, y, 1, {}, fits));
      if (vf) {
        vec = vf->v;
        load = vf->load;
        epi = vf->epi;
      }
    }
    grid = (out.numel() / vec + block - 1) / block;
    cfg = fmt::format(
        "struct Cfg {{\n  using I = {};\n"
        "  static constexpr int N = {}, C = {}, H = {}, W = {}, P = {}, Q = {};\n"
        "  static constexpr int KH = {}, KW = {}, SH = {}, SW = {}, PT = {}, PL = {}, PB = {}, PR = {};\n"
        "  static constexpr bool MAX = {}, INCLUDE_PAD = {}, CHANNELS_LAST = {};\n"
        "  static constexpr int V = {}, BLOCK = {};\n}};\n\n",
        wide ? "long long" : "int", in[0], in[1], in[2], in[3], out[2], out[3], k[0], k[1], s[0], s[1], p[0], p[1],
        p[2], p[3], is_max, include_pad, nhwc, vec, block);
    call = "kiln::pool::window";
  }
  if (grid > int64_t{0x7fffffff})
    return unsupported(fmt::format("node '{}': too many outputs for one launch", nd.name));

  std::string src = kernel_preamble();
  src += "#include \"kiln/pool.cuh\"\n\nnamespace KILN_ENTRY_ns {\n\n";
  src += cfg + load + "\n" + epi;
  src += "\n}  // namespace KILN_ENTRY_ns\n\n";
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({}) KILN_ENTRY(KILN_PARAMS) {{\n"
      "  const KILN_ENTRY_ns::Load load{{KILN_PARAM_NAMES}};\n"
      "  const KILN_ENTRY_ns::Epi epi{{KILN_PARAM_NAMES}};\n"
      "  {}<KILN_ENTRY_ns::Cfg>(load, epi);\n"
      "}}\n",
      block, call);
  return b.finish("pool", src, {static_cast<uint32_t>(grid), 1, 1}, {static_cast<uint32_t>(block), 1, 1});
}

}  // namespace kiln::codegen
