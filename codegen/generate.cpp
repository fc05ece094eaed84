// generate_kernel and plan_kernel: a group's family (chosen at planning, else asked now) plans its kernel
// for the plan's target and renders it. Families see the group through a KernelBuilder and never the rest
// of the plan.
#include <fmt/format.h>

#include "codegen/family.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

Status in_group_context(const Plan& plan, const Group& group, const Status& s) {
  const Node& first = plan.graph.node(group.nodes.front());
  return Status(s.code(), fmt::format("group {} ({}, first node '{}' ({})): {}", group.id, group_kind_name(group.kind),
                                      first.name, op_name(*first.op), s.message()));
}

// The group's family (chosen when it was planned, else asked now) and what it decides for the kernel.
Result<std::pair<const KernelFamily*, KernelConfig>> family_plan(KernelBuilder& b, const Plan& plan,
                                                                 const Group& group) {
  if (!group.is_kernel() && group.kind != GroupKind::weight_transform) {
    return invalid_argument(fmt::format("group {} ({}) runs no kernel", group.id, group_kind_name(group.kind)));
  }
  const KernelFamily* f = nullptr;
  if (group.family != KernelFamilyId::none) {
    f = &kernel_family(group.family);
  } else {
    KILN_ASSIGN_OR_RETURN(f, choose_family(b, plan.target));
  }
  KILN_ASSIGN_OR_RETURN(KernelConfig c, f->plan(b, plan.target));
  return std::pair{f, std::move(c)};
}

}  // namespace

Result<KernelConfig> plan_kernel(const Plan& plan, const Group& group) {
  KernelBuilder b(plan, group);
  auto fc = family_plan(b, plan, group);
  if (!fc.ok()) return in_group_context(plan, group, fc.status());
  return std::move(fc->second);
}

Result<Kernel> generate_kernel(const Plan& plan, const Group& group) {
  KernelBuilder b(plan, group);
  auto fc = family_plan(b, plan, group);
  if (!fc.ok()) return in_group_context(plan, group, fc.status());
  const auto& [family, config] = *fc;
  b.reset_glue();
  b.use_params(config.params);
  Result<Kernel> k = family->render(b, config);
  if (!k.ok()) return in_group_context(plan, group, k.status());
  k->target = plan.target.key();
  return k;
}

}  // namespace kiln::codegen
