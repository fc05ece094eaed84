// The glue both row families (norm, pool) share: splitting a group around its anchor and writing the Load
// and Epi functors, scalar and vector forms (codegen/family_rows.h).
#include <algorithm>

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
  // What comes before the anchor must compute its input (the Load functor returns that value).
  if (!p.prologue.empty()) {
    const Tensor x = b.node(p.anchor).inputs[0][0];
    if (std::find(p.prologue.begin(), p.prologue.end(), b.info(x).producer) == p.prologue.end()) {
      return unsupported(fmt::format("the fused ops before '{}' do not compute its input", b.node(p.anchor).name));
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

Result<std::string> epi_functor(KernelBuilder& b, const Parts& p, Tensor y, const std::string& pre, int domain_rank) {
  const int rank = domain_rank >= 0 ? domain_rank : b.info(y).shape.rank();
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
bool read_from_memory(KernelBuilder& b, Tensor t) { return b.from_memory(t); }

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
        a.channel_dim = D - xr + *channel_vector_axis(nd, xr);
      }
      if (!add(a)) return false;
    }
  }
  return true;
}

}  // namespace

namespace {

// The accesses of both functors along the vector dim `vd`, and from them the vector width and the vector
// forms (vector_functors below).
class VectorForms {
 public:
  VectorForms(KernelBuilder& b, const Parts& p, Tensor x, Tensor y, int vd)
      : b_(b), p_(p), x_(x), y_(y), vd_(vd), R_(b.info(x).shape.rank()), coords_(coord_names(R_)) {}

  // Every access of each functor; false when one rules the vector forms out.
  bool collect(const std::vector<PreOp>& pre) {
    if (b_.info(y_).shape.rank() != R_ || vd_ < 0 || vd_ >= R_) return false;
    if (p_.prologue.empty()) {
      load_acc_.push_back({x_});
    } else if (!collect_reads(b_, p_.prologue, R_, load_acc_)) {
      return false;
    }
    for (const PreOp& o : pre) epi_acc_.push_back({o.t, o.per_channel ? 1 : -1});
    if (!collect_reads(b_, p_.epilogue, R_, epi_acc_)) return false;
    return add_writes(p_.prologue, false, b_.info(x_).shape, load_acc_) &&
           add_writes(p_.epilogue, true, b_.info(y_).shape, epi_acc_);
  }

  // The widest V of 16, 8 and 4 bytes / the largest element that `fits` and every access allows; 0: none.
  int width(const std::function<bool(int)>& fits) {
    size_t max_size = 0, min_size = 16;
    for (const auto* acc : {&load_acc_, &epi_acc_}) {
      for (const Access& a : *acc) {
        const MemView v = b_.view(a.t, a.write);
        const int64_t st = step(a, v);
        if ((st != 0 && st != 1) || (a.write && st != 1)) return 0;
        if (st == 1) {
          max_size = std::max(max_size, static_cast<size_t>(dtype_size(v.dtype)));
          min_size = std::min(min_size, static_cast<size_t>(dtype_size(v.dtype)));
        }
      }
    }
    if (max_size == 0) return 0;
    for (int cand : {static_cast<int>(16 / max_size), static_cast<int>(8 / max_size), static_cast<int>(4 / max_size)}) {
      if (cand < 2 || static_cast<size_t>(cand) * min_size < 4 || !fits(cand)) continue;
      bool ok = true;
      for (const auto* acc : {&load_acc_, &epi_acc_})
        for (const Access& a : *acc) {
          const MemView v = b_.view(a.t, a.write);
          if (step(a, v) == 1) ok = ok && aligned_for(a, v, cand);
        }
      if (ok) return cand;
    }
    return 0;
  }

  // `struct Load { vec(i, x) }` for width V; nullopt when the body stays per element.
  Result<std::optional<std::string>> load(int V) {
    std::string before, after, body;
    std::map<int32_t, std::string> values;
    prepare(load_acc_, V, before, values, after);
    if (p_.prologue.empty()) {
      body = fmt::format("      x[j] = {};\n", values.at(x_.id));
    } else {
      KILN_ASSIGN_OR_RETURN(body, b_.emit_pointwise(p_.prologue, coords_, values, false, 6));
      auto it = values.find(x_.id);
      if (it == values.end()) {
        b_.clear_redirects();
        return std::optional<std::string>{};
      }
      body += fmt::format("      x[j] = {};\n", it->second);
    }
    b_.clear_redirects();
    if (per_element(body)) return std::optional<std::string>{};
    return std::optional<std::string>{
        fmt::format("struct Load {{\n  KILN_PARAM_MEMBERS\n{}}};\n",
                    member(fmt::format("const kiln::Idx<{}>& i, float* x", R_), V, before, body, after))};
  }

  // `struct Epi { vec(i, vv) }`: `pre`, then the epilogue; nullopt when the body stays per element.
  Result<std::optional<std::string>> epi(int V, const std::vector<PreOp>& pre) {
    std::string before, after, pre_body;
    std::map<int32_t, std::string> values;
    prepare(epi_acc_, V, before, values, after);
    for (const PreOp& o : pre) pre_body += fmt::format("      v {} {};\n", o.op, values.at(o.t.id));
    values.emplace(y_.id, std::string(1, 'v'));  // the anchor's output, after `pre`
    KILN_ASSIGN_OR_RETURN(std::string body, b_.emit_pointwise(p_.epilogue, coords_, values, true, 6));
    b_.clear_redirects();
    if (per_element(body)) return std::optional<std::string>{};
    return std::optional<std::string>{fmt::format("struct Epi {{\n  KILN_PARAM_MEMBERS\n{}}};\n",
                                                  member(fmt::format("const kiln::Idx<{}>& i, const float* vv", R_), V,
                                                         before, "      float v = vv[j];\n" + pre_body + body, after))};
  }

 private:
  // The stores: group outputs computed by the functors' pointwise ops or store conversions, and the anchor's
  // output. (Transposing or reshaping stores move the coordinate: they stay per element.)
  bool add_writes(const std::vector<int32_t>& nodes, bool with_y, const Shape& domain, std::vector<Access>& acc) {
    std::vector<Tensor> outs;
    if (with_y && b_.is_group_output(y_)) outs.push_back(y_);
    for (int32_t n : nodes) {
      const Node& nd = b_.node(n);
      const OpId op = *nd.op;
      if (op_def(op).kind != FusionKind::pointwise && op != OpId::layout_convert) continue;
      if (b_.is_group_output(nd.outputs[0])) outs.push_back(nd.outputs[0]);
    }
    for (Tensor t : outs) {
      if (b_.info(t).shape != domain) return false;  // a broadcast value, stored by some threads only
      acc.push_back({t, -1, true});
    }
    return true;
  }

  // The memory step of an access when the vd coordinate advances by one (0: one value for the chunk).
  int64_t step(const Access& a, const MemView& v) const {
    const Shape& s = b_.info(a.t).shape;
    if (a.channel_dim >= 0) {
      if (s.rank() != 1) return -1;  // (channel vectors are 1-D)
      return a.channel_dim == vd_ && s[0] != 1 ? v.strides[0] : 0;
    }
    const int i = vd_ - (R_ - s.rank());
    return i < 0 || s[i] == 1 ? 0 : v.strides[static_cast<size_t>(i)];
  }

  // A chunk's first element sits at an offset multiple of V: the base and every other stride in use are.
  bool aligned_for(const Access& a, const MemView& v, int V) const {
    if (v.base % V != 0) return false;
    if (a.channel_dim >= 0) return true;
    const Shape& s = b_.info(a.t).shape;
    for (int i = 0; i < s.rank(); ++i) {
      const int d = R_ - s.rank() + i;
      if (d < 0 || d == vd_ || s[i] == 1) continue;
      if (v.strides[static_cast<size_t>(i)] % V != 0) return false;
    }
    return true;
  }

  // The statements before the loop over the chunk's V values (vector and single reads, output registers),
  // the seeds of the pointwise emitter, and the stores after the loop.
  void prepare(const std::vector<Access>& acc, int V, std::string& before, std::map<int32_t, std::string>& values,
               std::string& after) {
    for (const Access& a : acc) {
      const MemView v = b_.view(a.t, a.write);
      const std::string T(ctype(v.dtype));
      const std::string off = a.channel_dim >= 0
                                  ? b_.offset(v, b_.info(a.t).shape, {coords_[static_cast<size_t>(a.channel_dim)]})
                                  : b_.offset(v, b_.info(a.t).shape, coords_);
      if (a.write) {
        const std::string name = b_.fresh("out");
        before += fmt::format("    kiln::Vec<{}, {}> {};\n", T, V, name);
        after += fmt::format("    kiln::stvu<{0}, {1}>(static_cast<{0}*>({2}), {3}, {4});\n", T, V, v.param, off, name);
        b_.redirect_store(a.t, name + ".v[j] = ", ";");
      } else if (step(a, v) == 1) {
        const std::string name = b_.fresh("in");
        before += fmt::format(
            "    const kiln::Vec<{0}, {1}> {2} = kiln::ldvu<{0}, {1}>(static_cast<const {0}*>({3}), {4});\n", T, V,
            name, v.param, off);
        values[a.t.id] = name + ".v[j]";
      } else {
        const std::string name = b_.fresh("s");
        before +=
            fmt::format("    const float {} = kiln::ldf(static_cast<const {}*>({}), {});\n", name, T, v.param, off);
        values[a.t.id] = name;
      }
    }
  }

  // A body that still addresses memory or the coordinate would be wrong for values 1..V-1 of the chunk.
  static bool per_element(const std::string& body) {
    return body.find("i.i[") != std::string::npos || body.find("kiln::ldf(") != std::string::npos ||
           body.find("kiln::stf(") != std::string::npos;
  }

  static std::string member(const std::string& sig, int V, const std::string& before, const std::string& body,
                            const std::string& after) {
    return fmt::format(
        "  __device__ __forceinline__ void vec({}) const {{\n{}#pragma unroll\n"
        "    for (int j = 0; j < {}; ++j) {{\n{}    }}\n{}  }}\n",
        sig, before, V, body, after);
  }

  KernelBuilder& b_;
  const Parts& p_;
  Tensor x_, y_;
  int vd_, R_;
  std::vector<std::string> coords_;
  std::vector<Access> load_acc_, epi_acc_;
};

}  // namespace

Result<std::optional<VecForms>> vector_functors(KernelBuilder& b, const Parts& p, Tensor x, Tensor y, int vd,
                                                const std::vector<PreOp>& pre, const std::function<bool(int)>& fits) {
  VectorForms forms(b, p, x, y, vd);
  if (!forms.collect(pre)) return std::optional<VecForms>{};
  const int V = forms.width(fits);
  if (V == 0) return std::optional<VecForms>{};
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> load, forms.load(V));
  if (!load) return std::optional<VecForms>{};
  KILN_ASSIGN_OR_RETURN(std::optional<std::string> epi, forms.epi(V, pre));
  if (!epi) return std::optional<VecForms>{};
  return std::optional<VecForms>{VecForms{V, std::move(*load), std::move(*epi)}};
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
    if (!b.from_memory(t)) continue;
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

}  // namespace kiln::codegen
