// What every kernel family's generator uses to write glue for one group: kernel parameters, memory views
// (layout strides, load transforms, concat slices), typed loads and stores, and the pointwise emitter that
// turns a chain of the group's pointwise ops into f32 statements.
//
// Conventions of the generated code (templates/kiln/codegen.cuh):
//   - kernel parameters are `const void*` / `void*` named p0, p1, ... in the canonical order of
//     declare_params (the anchor's operands by port, then the group's other memory, then its outputs);
//   - logical coordinates are `int` variables, one per dim of a *domain* shape; a tensor of lower rank or
//     with dims of size 1 is read at the broadcast coordinate (NumPy rules, trailing dims aligned);
//   - offsets are `long long` element offsets computed from compile-time strides;
//   - arithmetic is f32: `kiln::ldf(ptr, off)` loads any storage type as float, `kiln::stf(ptr, off, v)`
//     rounds to nearest even on store.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/kernel.h"

namespace kiln {
struct ChannelReduction;
}

namespace kiln::codegen {

// Where a tensor's elements are: parameter `param` (a C name), plus `base` elements, plus Σ coord·stride.
struct MemView {
  Tensor storage;     // the tensor whose memory the parameter points at
  std::string param;  // "p3"
  DType dtype = DType::f32;
  int64_t base = 0;              // elements
  std::vector<int64_t> strides;  // elements, one per logical dim of the viewed tensor
};

// The C++ type of a storage dtype: float, __half, __nv_bfloat16.
std::string_view ctype(DType t);

// A float literal that parses back to the same float (NaN and infinities spelled with __int_as_float).
std::string float_literal(double v);

// The tensors written into slices of elided concats (tensor id -> its placement): built once per plan, so
// that asking about one group costs the group's size, not the plan's.
using AliasIndex = std::map<int32_t, const BufferPlacement*>;
AliasIndex alias_index(const Plan& plan);

class KernelBuilder {
 public:
  // `aliases` (optional): alias_index(plan), when the caller builds builders for many groups of one plan.
  KernelBuilder(const Plan& plan, const Group& group, const AliasIndex* aliases = nullptr);

  const Plan& plan() const { return plan_; }
  const Graph& graph() const { return plan_.graph; }
  const Group& group() const { return group_; }
  const Node& node(int32_t n) const { return graph().node(n); }
  const TensorInfo& info(Tensor t) const { return graph().tensor(t); }
  bool in_group(int32_t node) const;
  bool produced_in_group(Tensor t) const;
  bool is_group_output(Tensor t) const;
  // Whether `n`, a node of the group, is a load transform: an op with a view (OpDef::view: layout_convert,
  // transpose, a reshape its input's memory allows) of a tensor the group reads from memory. The group reads its input
  // through the view's strides instead of running it.
  bool is_load_transform(const Node& n) const;
  // Whether the group reads `t` from memory: a group input, or the output of a load transform.
  bool from_memory(Tensor t) const;
  // The group's nodes of each fusion kind, in execution order.
  std::vector<int32_t> nodes_of_kind(FusionKind k) const;
  // The group's one node that anchors it (conv2d, matmul, a norm, a pool), or -1.
  int32_t anchor() const;
  // Whether node `n` is in the anchor's prologue (Group::roles.prologue).
  bool in_prologue(int32_t n) const;

  // The tensor whose memory holds `t` as this group reads (or writes) it: t itself, the source of a load
  // transform, or the elided concat output a slice is written into.
  Tensor storage(Tensor t, bool written) const;
  // Fixes the kernel's parameters in a canonical order (KernelConfig::params): the anchor's operands by
  // port, then every other tensor read from memory in the canonical order of the group's nodes, then the
  // tensors written. Call before any view, load or store.
  std::vector<KernelParam> declare_params();
  void use_params(std::vector<KernelParam> params);
  // The kernel parameter of the group's scratch (Group::scratch; declared last, counters then partials).
  std::string scratch_param(KernelParam::Scratch which) const;
  // The batch parameter of a batch-generic kernel (an int; the family appends it to the declared ones).
  std::string batch_param() const;
  // The kernel parameter holding `t`'s memory: its declared parameter (an internal error if undeclared;
  // "p?" before any are declared, for views looked at only to decide).
  std::string param(Tensor t, bool written) const;
  // The memory view of `t` as this group sees it: a tensor produced inside the group by a layout_convert
  // of a group input is read straight from that input (the conversion is an address computation); a
  // tensor written into an elided concat's slice is a view of the concat's output.
  MemView view(Tensor t, bool written = false) const;

  // Whether dim `i` of a tensor of shape `s` is broadcast at domain dim `d` (d < 0: a leading dim the tensor
  // lacks): a missing or size-1 dim is, except dim 0 of a tensor that carries the batch in a batch-generic
  // kernel planned at batch 1: one of the group's outputs' shapes, so that at any batch it would have the
  // batch's size. There the coordinate is always 0, so indexing it is as correct as broadcasting, and the
  // source is then the one every other batch gets (docs/architecture.md, "Batch-generic kernels"). A [1, C, 1, 1]
  // operand stays a broadcast, as at every other batch; so does anything a kernel addresses another way (the
  // flat pointwise path loads a scalar at its flat index).
  bool broadcast_dim(const Shape& s, int i, int d) const {
    return d < 0 || (s[i] == 1 && !(batch_one_ && d == 0 && i == 0 && carries_batch(s)));
  }
  // A tensor of another shape whose dim 0 is the batch too (a data op's input: a transpose's, a slice's), for
  // broadcast_dim.
  void also_carries_batch(Tensor t) { batch_shapes_.push_back(info(t).shape); }
  // Element offset expression of `t` at a coordinate of a domain of rank coords.size(), broadcasting.
  std::string offset(const MemView& v, const Shape& shape, const std::vector<std::string>& coords) const;
  // A shape-generic kernel's views of shape `s` with `strides` (and base 0): offset() spells their strides as
  // `exprs`, expressions of the kernel's size parameters ("1" for a unit stride), instead of numbers, so that
  // the source holds no size of this problem (a conv's output [N, K, P, Q] in NHWC: P·Q·K, 1, Q·K, K).
  void spell_strides(const Shape& s, std::vector<int64_t> strides, std::vector<std::string> exprs);
  // `kiln::ldf(p0, <offset>)`: the f32 value of `t` at the coordinate ("" while only checking, below).
  std::string load(Tensor t, const std::vector<std::string>& coords);
  // While the planner only asks whether a family can run the group (can_implement), loads need no text:
  // formatting them for every group of a 100k-node graph cost a third of the families' check.
  void set_checking_only(bool on) { checking_only_ = on; }
  bool checking_only() const { return checking_only_; }
  // The statement storing f32 expression `value` into `t` at the coordinate; when `t` is broadcast over
  // the domain (fewer dims or size-1 dims), only the threads at coordinate 0 of those dims store.
  // `guard` (optional) is an extra condition ANDed in.
  std::string store(Tensor t, const std::vector<std::string>& coords, const std::string& value,
                    const std::string& guard = {});

  // Emits the group's nodes `nodes` (pointwise ops and layout ops acting as store transforms; any order,
  // emitted in execution order) as f32 statements at a coordinate of a domain with dims `coords`.
  // `values` maps tensor ids to C++ expressions already known (e.g. an anchor's accumulator); it gains
  // every value computed. Group outputs among these nodes' outputs (and among the seeded tensors when
  // `store_seeds`) are stored. Returns the statements, one per line, indented by `indent`. Nodes are
  // emitted in a canonical order (topological, ties broken by a structural hash), so that the source does
  // not depend on the graph's node order. Fails for a node that is neither pointwise nor a layout op.
  Result<std::string> emit_pointwise(const std::vector<int32_t>& nodes, const std::vector<std::string>& coords,
                                     std::map<int32_t, std::string>& values, bool store_seeds, int indent = 4);

  // Whether emit_pointwise can emit `nodes` (a pointwise op needs a device function; a layout op after a
  // fused op must be a layout conversion, transpose or reshape): the reason when not.
  Status can_emit(const std::vector<int32_t>& nodes) const;
  // The nodes in the order emit_pointwise emits them: topological, ties broken by a structural hash
  // (independent of the graph's node order). `seeded`: tensors with known values (the hash says so).
  std::vector<int32_t> canonical_order(const std::vector<int32_t>& nodes,
                                       const std::map<int32_t, std::string>& seeded) const;

  // Forgets local names and store redirects (between a family's plan and its render).
  void reset_glue() {
    next_var_ = 0;
    redirects_.clear();
  }

  // Makes every later store of `t` the statement `prefix + value + suffix` (the pointwise family's vector
  // path collects lanes in registers and stores them with one 16-byte access); clear_redirects() undoes.
  void redirect_store(Tensor t, std::string prefix, std::string suffix);
  void clear_redirects() { redirects_.clear(); }

  // A fresh local variable name ("v7").
  std::string fresh(std::string_view prefix = "v");

  // Finishes a kernel: the entry name kiln_<family>_<ops>_<hash8 of the source> and the parameters are
  // substituted for these placeholders in `source`:
  //   KILN_ENTRY          the entry name (also inside longer names: namespace KILN_ENTRY_ns)
  //   KILN_PARAMS         `const void* __restrict__ p0, void* __restrict__ p1, int p2` (the entry's
  //                       parameter list; the batch parameter is an int)
  //   KILN_PARAM_MEMBERS  `const void* p0; void* p1; int p2;` (functors hold every parameter)
  //   KILN_PARAM_NAMES    `p0, p1` (to initialise such a functor: Epi epi{KILN_PARAM_NAMES};)
  Kernel finish(KernelFamilyId family, std::string source, Dim3 grid, Dim3 block, uint32_t dynamic_smem = 0);

 private:
  // `y_coords`: set to the output's coordinate for a transpose (where a chain past it continues).
  Result<std::string> emit_store_transform(const Node& nd, const std::vector<std::string>& coords,
                                           std::map<int32_t, std::string>& values, const std::string& pad,
                                           std::vector<std::string>* y_coords = nullptr);

  const Plan& plan_;
  const Group& group_;
  AliasIndex own_aliases_;
  const AliasIndex* aliased_;  // tensor id -> its elided-concat slice placement
  bool params_declared_ = false;
  bool batch_one_ = false;           // a batch-generic kernel planned at batch 1 (broadcast_dim)
  std::vector<Shape> batch_shapes_;  // also_carries_batch
  bool carries_batch(const Shape& s) const;
  std::vector<KernelParam> params_;
  std::map<int32_t, std::string> param_names_;  // tensor id -> "pN"
  std::map<int32_t, std::pair<std::string, std::string>> redirects_;
  int next_var_ = 0;
  bool checking_only_ = false;
  struct SpelledStrides {
    Shape shape;
    std::vector<int64_t> strides;
    std::vector<std::string> exprs;
  };
  std::vector<SpelledStrides> spelled_;  // spell_strides
};

// The parts of a source every generated kernel starts with (one fixed preamble, so NVRTC's automatic
// precompiled header is reused across kernels).
std::string kernel_preamble();

// A channel reduction's registry row (OpDef::channel_reduction) as the members the reduction kernels read:
// TERMS, PER_IMAGE, static term(q, v) and finish(q, sum, count). Shared by the conv families' reduction
// epilogue (Red) and the pool family's global kernel (Cfg).
std::string channel_reduction_members(const ChannelReduction& r);

}  // namespace kiln::codegen
