// What `kiln profile` shows of a kernel's config: each family says it of its own (KernelFamily::describe,
// flops, tensor_cores; profile_internal.h).
#include "profile/profile_internal.h"

namespace kiln::profile_detail {

KernelShape kernel_shape(const codegen::KernelConfig& c) {
  const codegen::KernelFamily& f = codegen::kernel_family(c.family);
  return {f.describe(c), f.flops(c), f.tensor_cores(c)};
}

}  // namespace kiln::profile_detail
