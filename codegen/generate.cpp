// generate_kernel: a group's kind picks its kernel family (codegen/family_*.cpp). Families see the group
// through a KernelBuilder and never the rest of the plan.
#include <fmt/format.h>

#include "codegen/kernel_builder.h"
#include "ops/registry.h"

namespace kiln::codegen {

Result<Kernel> generate_kernel(const Plan& plan, const Group& group, const CodegenOptions&) {
  if (!group.is_kernel() && group.kind != GroupKind::weight_transform) {
    return invalid_argument(fmt::format("group {} ({}) runs no kernel", group.id, group_kind_name(group.kind)));
  }
  KernelBuilder b(plan, group);
  Result<Kernel> k = [&]() -> Result<Kernel> {
    switch (group.kind) {
      case GroupKind::pointwise: return generate_pointwise(b);
      case GroupKind::conv: return generate_conv(b);
      case GroupKind::matmul: return generate_matmul(b);
      case GroupKind::norm: return generate_norm(b);
      case GroupKind::pool: return generate_pool(b);
      case GroupKind::layout:
      case GroupKind::weight_transform:
      case GroupKind::concat:
      case GroupKind::other: return generate_data(b);
      case GroupKind::concat_elided: break;
    }
    return unsupported("no kernel family");
  }();
  if (!k.ok()) {
    const Node& first = plan.graph.nodes()[static_cast<size_t>(group.nodes.front())];
    return Status(k.status().code(), fmt::format("group {} ({}, first node '{}' ({})): {}", group.id,
                                                 group_kind_name(group.kind), first.name,
                                                 op_name(*first.op), k.status().message()));
  }
  return k;
}

}  // namespace kiln::codegen
