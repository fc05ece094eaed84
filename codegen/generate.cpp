// generate_kernel and plan_kernel: a group's family (chosen at planning, else asked now) plans its kernel
// for the plan's target and renders it. Families see the group through a KernelBuilder and never the rest
// of the plan.
#include <fmt/format.h>

#include "codegen/family.h"
#include "ops/registry.h"

namespace kiln::codegen {

namespace {

Status in_group_context(const Plan& plan, const Group& group, const Status& s) {
  const Node& first = plan.graph.nodes()[static_cast<size_t>(group.nodes.front())];
  return Status(s.code(), fmt::format("group {} ({}, first node '{}' ({})): {}", group.id, group_kind_name(group.kind),
                                      first.name, op_name(*first.op), s.message()));
}

Result<const KernelFamily*> family_of(KernelBuilder& b, const Plan& plan, const Group& group) {
  if (!group.is_kernel() && group.kind != GroupKind::weight_transform) {
    return invalid_argument(fmt::format("group {} ({}) runs no kernel", group.id, group_kind_name(group.kind)));
  }
  if (group.family != KernelFamilyId::none) return &kernel_family(group.family);
  return choose_family(b, plan.target);
}

}  // namespace

Result<KernelConfig> plan_kernel(const Plan& plan, const Group& group) {
  KernelBuilder b(plan, group);
  Result<const KernelFamily*> f = family_of(b, plan, group);
  if (!f.ok()) return in_group_context(plan, group, f.status());
  Result<KernelConfig> c = (*f)->plan(b, plan.target);
  if (!c.ok()) return in_group_context(plan, group, c.status());
  return c;
}

Result<Kernel> generate_kernel(const Plan& plan, const Group& group) {
  KernelBuilder b(plan, group);
  Result<const KernelFamily*> f = family_of(b, plan, group);
  if (!f.ok()) return in_group_context(plan, group, f.status());
  Result<KernelConfig> c = (*f)->plan(b, plan.target);
  if (!c.ok()) return in_group_context(plan, group, c.status());
  b.reset_glue();
  b.use_params(c->params);
  Result<Kernel> k = (*f)->render(b, *c);
  if (!k.ok()) return in_group_context(plan, group, k.status());
  k->target = plan.target.key();
  return k;
}

}  // namespace kiln::codegen
