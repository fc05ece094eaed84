// The planner: a verified graph in, a Plan out — the graph after the passes, its fused groups (each one
// kernel) in execution order, and a memory plan for the intermediates that cross group boundaries.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/kernel_kinds.h"
#include "kiln/status.h"
#include "kiln/target.h"

namespace kiln {

enum class LayoutPolicy : uint8_t {
  automatic,  // NHWC for activations between convolutions, norms and pools; declared layouts at the boundary
  nchw,       // keep every 4-D activation NCHW (no conversions)
  nhwc,       // every 4-D activation intermediate NHWC, even without convolutions
};
std::string_view layout_policy_name(LayoutPolicy p);

struct Group {
  int32_t id = 0;
  GroupKind kind = GroupKind::other;
  // The kernel family that runs it on the plan's target (none: no kernel, or planned without checking).
  KernelFamilyId family = KernelFamilyId::none;
  std::vector<int32_t> nodes;   // indices into Plan::graph's nodes, in execution order
  std::vector<Tensor> inputs;   // tensors read from memory (graph inputs, parameters, other groups' outputs)
  std::vector<Tensor> outputs;  // tensors written to memory
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  // A concat_elided group is either a root, whose inputs are written straight into their slices of its
  // output (view_of invalid), or a view: its inputs are a run of a root's inputs, so its output is a slice
  // of the root's output (view_of), read through the root's strides. (DenseNet: every concat of a dense
  // block is a view of the block's last one.)
  Tensor view_of{};
  // Workspace the kernel needs beyond its tensors (a reduction epilogue's block counters and partial sums:
  // see ReductionEpilogueShape in src/passes/fusion.h; split-K's). Counters lie in Plan::zeroed, which every run sets
  // to zero before the first kernel; partial sums need no initial value. Offsets are bytes from the workspace start.
  struct Scratch {
    int64_t counters_offset = 0, counters_bytes = 0;
    int64_t partials_offset = 0, partials_bytes = 0;
    bool any() const { return counters_bytes > 0 || partials_bytes > 0; }
  } scratch;
  // The part fusion gave the group's special nodes (docs/architecture.md, "Fusion roles"): node indices
  // into Plan::graph, -1 where the group has none. Codegen, the profile and the memory pass read these
  // rather than finding the nodes again.
  struct Roles {
    int32_t anchor = -1;      // the op the kernel is built around (conv2d, matmul, a norm, a pool): its kind's
    int32_t reduction = -1;   // a trailing reduction: a conv's reduction epilogue (OpDef::channel_reduction)
    int32_t row_norm = -1;    // a depthwise conv's layer-norm row epilogue
    int32_t store_view = -1;  // the first transpose of a conv's or matmul's epilogue (a transposed store)
    // The prologue: the nodes that computed the anchor's data input in a group of their own and joined
    // it to be applied as that input loads (pointwise ops; a layer norm and its transpose), in order.
    std::vector<int32_t> prologue;
    // A conv's layer-norm prologue (ConvNeXt's LayerNorm2d): the layer norm among the prologue's nodes (the
    // others are its transposes). -1: the prologue is pointwise, or there is none.
    int32_t prologue_norm = -1;
  } roles;
  bool is_kernel() const { return kind != GroupKind::concat_elided && kind != GroupKind::weight_transform; }
};

// Where an intermediate lives: a range of the workspace. A tensor that lives in a slice of an elided
// concat's output (an input written straight into it, or the output of a concat that is a view of it) has
// `alias_of` set to that root concat's output and `alias_axis_offset` its start along the concat's axis; it
// shares the root's memory (`offset` is the root's), and the root's buffer is live from the first group
// writing any of its slices to the last group reading any of them.
struct BufferPlacement {
  Tensor tensor;
  int64_t offset = 0;  // bytes from the workspace start (aligned to kWorkspaceAlignment)
  int64_t bytes = 0;
  int32_t first_group = 0, last_group = 0;  // live from the producing group to the last reading group
  Tensor alias_of{};
  int64_t alias_axis_offset = 0;
};

inline constexpr int64_t kWorkspaceAlignment = 256;

struct Plan;

// The fusion policy: given that fusing is legal, should `consumer` join the group of `producer`?
// The default fuses whenever legal.
using FusionPolicy = std::function<bool(const Graph& g, int32_t producer, int32_t consumer)>;

// Chooses the kernel family of a group: kiln's is codegen's family registry (plan_graph uses it unless
// told otherwise). The reason a group is refused names every candidate family and why it said no.
class KernelChooser {
 public:
  virtual ~KernelChooser() = default;
  // Called once with each newly grouped plan, before its groups are asked about.
  virtual void begin(const Plan&) const {}
  virtual Result<KernelFamilyId> choose(const Plan& plan, const Group& group) const = 0;
  // The workspace the group's chosen family needs beyond its tensors (Group::Scratch's bytes; the planner
  // places it): split-K's counters and partial sums.
  virtual Group::Scratch scratch(const Plan&, const Group&) const { return {}; }
};

// Whether the planner re-verifies the graph after every pass: off by default (it costs a fair part of
// planning a large graph), on when KILN_VERIFY_PASSES=1 (the test suite sets it for every test).
bool verify_passes_by_default();

// How conv and 2-D matmul kernels get their GEMM tiles (docs/architecture.md, "Batch-generic kernels").
enum class TilePolicy : uint8_t {
  own,      // each kernel's own batch's tiles: a graph without symbols
  generic,  // the batch-generic tile, unless the batch's own is more than 10 % faster: a binding of a symbolic graph
  generic_only,  // the batch-generic tile everywhere (what it costs where it is not taken: profile_bench --suite
                 // generic)
};

struct PlanOptions {
  LayoutPolicy layout = LayoutPolicy::automatic;
  int max_group_ops = 32;  // ops per group, at least 1 (1 disables fusion)
  bool verify_after_each_pass = verify_passes_by_default();
  FusionPolicy policy{};  // empty: fuse whenever legal
  // The GPU the plan is for: kernel families decide what they can run, and how, for it.
  Target target = default_target();
  // Every kernel group must have a family that runs it on `target`: fusion splits a group no family runs,
  // and a single op no family runs is a planning error. Off only for the ref device (no kernels at all).
  bool require_kernels = true;
  const KernelChooser* chooser = nullptr;  // null: kiln's kernel families
  // Unset: `generic` for a binding of a symbolic graph (Graph::is_binding), `own` for any other graph.
  std::optional<TilePolicy> tiles{};
  // Called with each pass's name and the graph after it (for `kiln plan --dump-after`).
  std::function<void(std::string_view pass, const Graph& g)> after_pass{};
};

// A group fusion proposed that no kernel family runs on the target: it was split (its ops other than the
// first anchor were planned alone) and planned again.
struct FusionRefusal {
  GroupKind kind = GroupKind::other;
  std::vector<std::string> nodes;  // the refused group's node names, in execution order
  std::string reason;              // every candidate family's reason
};

// X(enumerator, name): the rules that keep two kernels apart (Separation::rule; `kiln plan --explain`).
#define KILN_SEPARATION_RULES(X)                                                                                \
  X(starts_kernel, "starts_kernel")                 /* the consumer's op starts a group of its own */           \
  X(takes_no_epilogue, "takes_no_epilogue")         /* the producer's kind of group takes no epilogue */        \
  X(store_transform, "store_transform")             /* the producer's group ends in a store transform */        \
  X(max_group_size, "max_group_size")               /* the group has PlanOptions::max_group_ops ops */          \
  X(split, "split")                                 /* an op of a group no kernel family ran: alone */          \
  X(store_value_shared, "store_value_shared")       /* a store transform's value has other readers */           \
  X(store_value_output, "store_value_output")       /* a store transform's value is a graph output */           \
  X(output_shape, "output_shape")                   /* an epilogue's output is not the anchor's shape */        \
  X(domain_shape, "domain_shape")                   /* a pointwise output not broadcasting with its group's */  \
  X(operand_shape, "operand_shape")                 /* an epilogue operand of another shape */                  \
  X(cycle, "cycle")                                 /* joining would make the group graph cyclic */             \
  X(policy, "policy")                               /* PlanOptions::policy said no */                           \
  X(joined_other, "joined_other")                   /* the consumer joined another input's group */             \
  X(prologue_kind, "prologue_kind")                 /* a norm or pool takes only a pointwise prologue */        \
  X(prologue_value_shared, "prologue_value_shared") /* a prologue value read by another kernel too */           \
  X(prologue_value_output, "prologue_value_output") /* a prologue value is a graph output */                    \
  X(prologue_operand, "prologue_operand")           /* a conv / matmul prologue it cannot apply as it loads */  \
  X(view_domains, "view_domains")                   /* reads values from both sides of a group's transpose */   \
  X(reduction_result, "reduction_result")           /* reads a reduction epilogue's result: ready at the end */ \
  X(load_reorders, "load_reorders")                 /* a reshape that is no view of its input's memory */       \
  X(load_value_output, "load_value_output")         /* a conversion's result is a graph output */               \
  X(load_readers, "load_readers")                   /* a conversion read by several kernels */                  \
  X(takes_no_load, "takes_no_load")                 /* the reader's kind of group takes no load transform */    \
  X(keeps_part, "keeps_part")                       /* a slice is no store transform: it drops elements */      \
  X(unrecorded, "unrecorded")           /* fusion recorded no decision for the pair (an honest fallback) */     \
  X(channel_operand, "channel_operand") /* reads a value of the group as a per-channel vector */

enum class SeparationRule : uint8_t {
#define KILN_X(e, n) e,
  KILN_SEPARATION_RULES(KILN_X)
#undef KILN_X
};
std::string_view separation_rule_name(SeparationRule r);

// Why a tensor goes through memory from one kernel to another: fusion considered putting the reading op in
// the writing op's group (or the reverse: a prologue, a load) and a rule said no. Recorded by the fusion
// pass when it decided; one per (producer group, consumer group, tensor), kernels only (weight transforms
// and elided concats are none: an elided concat is looked through, its inputs' kernels to its readers').
struct Separation {
  int32_t producer_group = -1, consumer_group = -1;  // ids of Plan::groups, both kernels
  int32_t producer_node = -1;                        // the node writing `tensor` (index into Plan::graph)
  int32_t consumer_node = -1;                        // the node of consumer_group reading it (or the concat)
  Tensor tensor;                                     // written by producer_node
  int32_t concat_node = -1;  // an elided concat between them: `tensor` is its input, consumer_node reads it
  SeparationRule rule = SeparationRule::unrecorded;
  // The rule's details as fusion recorded them: a node, a tensor id, a group kind, a group id or a count,
  // per rule (separation_reason puts them in words).
  int32_t detail_a = -1, detail_b = -1;
};
// A separation's rule in words, naming nodes, tensors and groups ("an anchor (conv2d) starts its own
// kernel"). Made on request, not at planning: a 100k-node plan has some 40k separations.
std::string separation_reason(const Plan& p, const Separation& s);

struct Plan {
  Graph graph;                           // the graph after the passes; node indices below refer to it
  Target target;                         // what the groups' kernel families were chosen for
  TilePolicy tiles = TilePolicy::own;    // how its GEMM kernels got their tiles (PlanOptions::tiles)
  std::vector<Group> groups;             // in execution order
  std::vector<BufferPlacement> buffers;  // every intermediate that crosses a group boundary
  int64_t workspace_bytes = 0;
  // The workspace range set to zero before every run (the groups' scratch counters; empty when none).
  int64_t zeroed_offset = 0, zeroed_bytes = 0;
  int64_t bytes_moved = 0;              // sum over kernel groups of bytes read + written
  int64_t unfused_bytes_moved = 0;      // the same if every op of the input graph ran as its own kernel
  std::vector<FusionRefusal> refusals;  // groups split because no family ran them
  // Every tensor one kernel writes and another reads, and why fusion kept the two apart (in order of
  // producer group, consumer group, then the consumer's reads).
  std::vector<Separation> separations;
  // Group `id` (Group::id, an index into groups, as Separation and the launch records hold them); checked.
  const Group& group(int32_t id) const {
    KILN_CHECK(id >= 0 && static_cast<size_t>(id) < groups.size(), "invalid group id");
    return groups[static_cast<size_t>(id)];
  }
  int kernel_count() const;
};

// The names of the passes, in pipeline order (for --dump-after).
const std::vector<std::string_view>& pass_names();

// Plans a graph for options.target. Fails with a Status for an invalid graph, nonsensical options, or (with
// require_kernels) an op no kernel family runs on the target. (Defined beside the kernel families, in
// codegen/: the planner asks them what they can run.)
Result<Plan> plan_graph(const Graph& g, const PlanOptions& options = {});
// The same for a graph the caller is done with: the passes work on it in place instead of on a copy
// (copying a 100k-node graph costs a fair part of planning it).
Result<Plan> plan_graph(Graph&& g, const PlanOptions& options = {});

// The stable one-line-per-node text form of a graph (what --dump-after prints and golden tests compare).
std::string dump_graph(const Graph& g);

// Human-readable and Graphviz forms of a plan (JSON is in kiln/json.h: plan_to_json).
std::string plan_to_text(const Plan& p);
// One line per separation (`kiln plan --explain`): "group 1 -> group 2 ('t'): conv2d 'c' -> max_pool2d 'p': ...".
std::string plan_explanation(const Plan& p);
struct DotOptions {
  bool parameters = true;     // false: no parameters and no weight-transform groups (kiln --dot-no-params)
  bool kernels_only = false;  // one box per kernel, edges between kernels (kiln --dot-kernels-only)
  // Each kernel group's estimated time in microseconds (kiln plan --heat, from kiln/profile.h): when given,
  // a group is filled by its share of the total, white to red, and its label gives the time and share.
  std::map<int32_t, double> group_us;
};
std::string plan_to_dot(const Plan& p, const DotOptions& options = {});

// Runs a plan on the reference backend group by group, intermediates living in one workspace at their
// planned offsets (f64 values, so a wrong memory plan corrupts results). Bindings as run_reference.
Result<TensorMap> run_plan_reference(const Plan& p, const TensorMap& inputs);

}  // namespace kiln
