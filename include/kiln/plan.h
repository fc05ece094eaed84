// The planner: a verified graph in, a Plan out — the graph after the passes, its fused groups (each one
// kernel) in execution order, and a memory plan for the intermediates that cross group boundaries.
#pragma once

#include <cstdint>
#include <functional>
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
};

// Whether the planner re-verifies the graph after every pass: off by default (it costs a fair part of
// planning a large graph), on when KILN_VERIFY_PASSES=1 (the test suite sets it for every test).
bool verify_passes_by_default();

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

struct Plan {
  Graph graph;                           // the graph after the passes; node indices below refer to it
  Target target;                         // what the groups' kernel families were chosen for
  std::vector<Group> groups;             // in execution order
  std::vector<BufferPlacement> buffers;  // every intermediate that crosses a group boundary
  int64_t workspace_bytes = 0;
  int64_t bytes_moved = 0;              // sum over kernel groups of bytes read + written
  int64_t unfused_bytes_moved = 0;      // the same if every op of the input graph ran as its own kernel
  std::vector<FusionRefusal> refusals;  // groups split because no family ran them
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
std::string plan_to_dot(const Plan& p);

// Runs a plan on the reference backend group by group, intermediates living in one workspace at their
// planned offsets (f64 values, so a wrong memory plan corrupts results). Bindings as run_reference.
Result<TensorMap> run_plan_reference(const Plan& p, const TensorMap& inputs);

}  // namespace kiln
