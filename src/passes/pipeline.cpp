// The planner's pipeline: the passes in order, and why each comes where it does.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "kiln/plan.h"
#include "ops/registry.h"
#include "passes/canonicalize.h"
#include "passes/dce.h"
#include "passes/fusion.h"
#include "passes/layout_assignment.h"
#include "passes/memory_planning.h"
#include "passes/pass.h"
#include "passes/pipeline.h"

namespace kiln {

namespace {

Status verify_pass(Graph& g, PassContext&) { return g.verify(); }

struct PassEntry {
  std::string_view name;
  Status (*run)(Graph&, PassContext&);
};

// 1. verify first: every later pass assumes a well-formed graph with inferred shapes.
// 2. canonicalize next: one form per idea (a bias is always a bias_add, no identities), so that later
//    passes have fewer patterns to know, and so dead code it leaves behind is removed by
// 3. dead-code elimination, before layouts and fusion spend any effort on nodes that reach no output.
// 4. layout assignment before fusion: the conversions it inserts are ops too, and fusion decides which
//    of them ride along as a group's final store.
// 5. fusion partitions the final graph into groups (kernels).
// 6. memory planning last: liveness is per group, so it needs the groups in their execution order.
constexpr PassEntry kPasses[] = {
    {"verify", verify_pass}, {"canonicalize", canonicalize}, {"dce", eliminate_dead_code}, {"layout", assign_layouts},
    {"fusion", fuse},        {"memory", plan_memory},
};

// Every tensor's size once (on its first read or write: a tensor of an invalid graph that no node
// touches may have no valid size), and the reads and writes from the flat arrays of `uses` (the first
// pass reuses them).
int64_t unfused_traffic(const Graph& g, const Uses& uses) {
  std::vector<int64_t> bytes(g.tensors().size(), -1);
  auto size = [&](Tensor t) {
    int64_t& b = bytes[static_cast<size_t>(t.id)];
    if (b < 0) b = g.tensor(t).shape.numel() * dtype_size(g.tensor(t).dtype);
    return b;
  };
  int64_t total = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    for (Tensor t : uses.inputs(i)) total += size(t);
    for (Tensor t : uses.outputs(i)) total += size(t);
  }
  return total;
}

}  // namespace

const std::vector<std::string_view>& pass_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const PassEntry& p : kPasses) v.push_back(p.name);
    return v;
  }();
  return names;
}

std::string_view layout_policy_name(LayoutPolicy p) {
  switch (p) {
    case LayoutPolicy::automatic: return "auto";
    case LayoutPolicy::nchw: return "nchw";
    case LayoutPolicy::nhwc: return "nhwc";
  }
  return "?";
}

int Plan::kernel_count() const {
  int n = 0;
  for (const Group& g : groups) n += g.is_kernel() ? 1 : 0;
  return n;
}

bool verify_passes_by_default() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_VERIFY_PASSES");
    return v != nullptr && (std::string_view(v) == "1" || std::string_view(v) == "true");
  }();
  return on;
}

namespace {

Status run_pass(const PassEntry& pass, Graph& g, PassContext& ctx) {
  Status st = pass.run(g, ctx);
  if (!st.ok()) {
    return Status(st.code(), pass.name == std::string_view("verify")
                                 ? st.message()
                                 : fmt::format("planner pass '{}': {}", pass.name, st.message()));
  }
  if (ctx.options.verify_after_each_pass && pass.name != std::string_view("verify")) {
    // verify() re-infers every type: a pass that wrote a type its shape rule would not give shows here.
    const std::string before = dump_graph(g);
    Status v = g.verify();
    KILN_CHECK(v.ok(), fmt::format("pass '{}' left an invalid graph: {}", pass.name, v.message()));
    if (const std::string after = dump_graph(g); after != before) {
      // The first line that differs: which tensor's type the pass and the shape rules disagree on.
      size_t i = 0;
      while (i < before.size() && i < after.size() && before[i] == after[i]) ++i;
      const size_t line = before.rfind('\n', i) == std::string::npos ? 0 : before.rfind('\n', i) + 1;
      KILN_CHECK(false, fmt::format("pass '{}' wrote types its shape rules disagree with: '{}' re-inferred as '{}'",
                                    pass.name, before.substr(line, before.find('\n', i) - line),
                                    after.substr(line, after.find('\n', i) - line)));
    }
  }
  return {};
}

// What stays when a refused group is split: its anchor (the first node whose op anchors a group), else its
// first node that is not a layout op (a merged load transform is no group's core), else its first node.
int32_t keeper(const Plan& plan, const Group& grp) {
  for (int32_t n : grp.nodes) {  // the anchor of the group's kind first (a conv group's norm prologue is none)
    const auto& a = op_def(*plan.graph.node(n).op).anchors;
    if (a && *a == grp.kind) return n;
  }
  for (int32_t n : grp.nodes)
    if (op_def(*plan.graph.node(n).op).anchors) return n;
  for (int32_t n : grp.nodes)
    if (op_def(*plan.graph.node(n).op).kind != FusionKind::layout) return n;
  return grp.nodes.front();
}

// Asks the chooser for every kernel group's family. A refused group of several ops is split: its ops other
// than the keeper are marked isolated (each planned alone, joined by nothing), and fusion runs again; each
// round isolates at least one more op, so this ends. A refused single op is an error when kernels are
// required, else stays without a family.
Result<bool> choose_families(Plan& plan, PassContext& ctx) {
  bool split = false;
  ctx.options.chooser->begin(plan);
  for (Group& grp : plan.groups) {
    if (!grp.is_kernel() && grp.kind != GroupKind::weight_transform) continue;
    Result<KernelFamilyId> f = ctx.options.chooser->choose(plan, grp);
    if (f.ok()) {
      grp.family = *f;
      continue;
    }
    const Node& first = plan.graph.node(grp.nodes.front());
    if (grp.nodes.size() == 1) {
      if (!ctx.options.require_kernels) continue;
      return Status(f.status().code(),
                    fmt::format("node '{}' ({}): no kernel family runs it on {} ({}): {}", first.name,
                                op_name(*first.op), plan.target.name, plan.target.arch, f.status().message()));
    }
    FusionRefusal r{grp.kind, {}, f.status().message()};
    const int32_t keep = keeper(plan, grp);
    for (int32_t n : grp.nodes) {
      r.nodes.push_back(plan.graph.node(n).name);
      if (n != keep) ctx.isolated[static_cast<size_t>(n)] = true;
    }
    plan.refusals.push_back(std::move(r));
    split = true;
  }
  return split;
}

}  // namespace

Result<Plan> run_planner(Graph&& input, const PlanOptions& options) {
  if (input.is_symbolic()) return unbound_dims_error(input);
  if (options.max_group_ops < 1) {
    return invalid_argument(
        fmt::format("planner option max_group_ops: expected at least 1, got {}", options.max_group_ops));
  }
  if (static_cast<int>(options.layout) > static_cast<int>(LayoutPolicy::nhwc)) {
    return invalid_argument("planner option layout: expected auto, nchw or nhwc");
  }
  Plan plan;
  plan.graph = std::move(input);
  plan.target = options.target;
  plan.tiles = options.tiles.value_or(plan.graph.is_binding() ? TilePolicy::generic : TilePolicy::own);
  PassContext ctx;
  ctx.options = options;
  ctx.plan = &plan;
  // Of the graph as given, before the passes change it.
  plan.unfused_bytes_moved = unfused_traffic(plan.graph, ctx.uses(plan.graph));
  // From fusion on, the passes group the graph (and run again after a split); those before change it.
  const size_t first_grouping = static_cast<size_t>(
      std::find_if(std::begin(kPasses), std::end(kPasses), [](const PassEntry& p) { return p.name == "fusion"; }) -
      std::begin(kPasses));
  for (size_t i = 0; i < first_grouping; ++i) {
    KILN_RETURN_IF_ERROR(run_pass(kPasses[i], plan.graph, ctx));
    if (options.after_pass) options.after_pass(kPasses[i].name, plan.graph);
  }
  ctx.isolated.assign(plan.graph.nodes().size(), false);
  // Fusion and memory planning read the graph and fill the plan, so running them again after a split
  // shows after_pass the same graph. "families" (not a pass of its own: no dump) is the families' check.
  for (;;) {
    for (size_t i = first_grouping; i < std::size(kPasses); ++i) {
      KILN_RETURN_IF_ERROR(run_pass(kPasses[i], plan.graph, ctx));
      if (options.after_pass) options.after_pass(kPasses[i].name, plan.graph);
    }
    if (options.chooser == nullptr) break;
    KILN_ASSIGN_OR_RETURN(bool split, choose_families(plan, ctx));
    if (options.after_pass) options.after_pass("families", plan.graph);
    if (!split) break;
  }
  if (options.chooser != nullptr) place_scratch(plan, options.chooser);  // with what the chosen families need
  return plan;
}

std::string dump_graph(const Graph& g) {
  std::string s = fmt::format("graph {}\n", g.name());
  auto type = [&](Tensor t) {
    const TensorInfo& i = g.tensor(t);
    return fmt::format("{} {} {}", i.shape.to_string(), dtype_name(i.dtype), layout_name(i.layout));
  };
  for (Tensor t : g.bound_tensors()) {
    s += fmt::format("{} {}: {}\n", tensor_kind_name(g.tensor(t).kind), g.tensor(t).name, type(t));
  }
  for (const Node& n : g.nodes()) {
    std::string ins;
    const auto& def_inputs = n.inputs;
    for (size_t p = 0; p < def_inputs.size(); ++p) {
      for (Tensor t : def_inputs[p]) ins += fmt::format("{}{}", ins.empty() ? "" : ", ", g.tensor(t).name);
    }
    std::string attrs;
    for (const auto& [k, v] : n.attrs)
      attrs += fmt::format("{}{}={}", attrs.empty() ? "" : ", ", k, attr_value_to_string(v));
    s += fmt::format("{}: {} = {} '{}'({}){}\n", g.tensor(n.outputs[0]).name, type(n.outputs[0]), n.op_text, n.name,
                     ins, attrs.empty() ? "" : " {" + attrs + "}");
  }
  std::string outs;
  for (Tensor t : g.outputs()) outs += fmt::format("{}{}", outs.empty() ? "" : ", ", g.tensor(t).name);
  s += fmt::format("outputs: {}\n", outs);
  return s;
}

}  // namespace kiln
