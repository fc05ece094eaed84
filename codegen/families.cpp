// The family registry and the planner's chooser: plan_graph is defined here, beside the families, because
// the passes (src/passes/) know nothing of code generation; they are handed the chooser.
#include <fmt/format.h>

#include "codegen/family.h"
#include "passes/pipeline.h"
#include "support/log.h"
#include "support/stopwatch.h"

namespace kiln {

namespace codegen {

std::span<const KernelFamily* const> kernel_families() {
  static const KernelFamily* const all[] = {
      &pointwise_family(), &depthwise_family(), &conv2d_family(), &conv_grad_family(), &skinny_matmul_family(),
      &matmul_family(),    &norm_family(),      &pool_family(),   &data_family(),      &pool_grad_family()};
  return all;
}

const KernelFamily& kernel_family(KernelFamilyId id) {
  for (const KernelFamily* f : kernel_families())
    if (f->id() == id) return *f;
  KILN_CHECK(false, fmt::format("no kernel family '{}'", kernel_family_name(id)));
  return pointwise_family();
}

Result<const KernelFamily*> choose_family(KernelBuilder& b, const Target& target) {
  std::string why;
  for (const KernelFamily* f : kernel_families()) {
    if (!f->runs(b.group().kind)) continue;
    Status s = f->can_implement(b, target);
    if (s.ok()) return f;
    why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", kernel_family_name(f->id()), s.message());
  }
  if (why.empty()) why = fmt::format("no kernel family runs {} groups", group_kind_name(b.group().kind));
  return unsupported(why);
}

namespace {

// The families as the planner's chooser. One alias index for the whole plan: a builder per group must cost
// the group's size, not the plan's.
class FamilyChooser final : public KernelChooser {
 public:
  void begin(const Plan& plan) const override { aliases_ = alias_index(plan); }
  Result<KernelFamilyId> choose(const Plan& plan, const Group& group) const override {
    KernelBuilder b(plan, group, &aliases_);
    KILN_ASSIGN_OR_RETURN(const KernelFamily* f, choose_family(b, plan.target));
    return f->id();
  }
  Group::Scratch scratch(const Plan& plan, const Group& group) const override {
    const KernelFamily& f = kernel_family(group.family);
    if (!f.may_need_scratch()) return {};
    KernelBuilder b(plan, group, &aliases_);
    return f.scratch(b, plan.target);
  }

 private:
  mutable AliasIndex aliases_;
};

}  // namespace

}  // namespace codegen

Result<Plan> plan_graph(const Graph& g, const PlanOptions& options) { return plan_graph(Graph(g), options); }

Result<Plan> plan_graph(Graph&& g, const PlanOptions& options) {
  const codegen::FamilyChooser families;
  PlanOptions o = options;
  if (o.chooser == nullptr) o.chooser = &families;
  const support::Stopwatch time;
  KILN_ASSIGN_OR_RETURN(Plan p, run_planner(std::move(g), o));
  KILN_LOG(info, "planned '{}' for {} ({}): {} groups, {} kernels, workspace {} bytes ({:.1f} ms)", p.graph.name(),
           o.target.name, o.target.arch, p.groups.size(), p.kernel_count(), p.workspace_bytes, time.ms());
  if (log_enabled(LogLevel::debug)) {
    for (const Group& grp : p.groups) {
      KILN_LOG(debug, "  group {}: {} ({}), {} ops, reads {} B, writes {} B", grp.id, group_kind_name(grp.kind),
               kernel_family_name(grp.family), grp.nodes.size(), grp.bytes_read, grp.bytes_written);
    }
  }
  return p;
}

}  // namespace kiln
