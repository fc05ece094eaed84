#include "kiln/kernel_kinds.h"

namespace kiln {

std::string_view group_kind_name(GroupKind k) {
  switch (k) {
#define KILN_X(e, n, ...) \
  case GroupKind::e: return n;
    KILN_GROUP_KINDS(KILN_X)
#undef KILN_X
  }
  return "?";
}

std::string_view kernel_family_name(KernelFamilyId f) {
  switch (f) {
#define KILN_X(e, n) \
  case KernelFamilyId::e: return n;
    KILN_KERNEL_FAMILIES(KILN_X)
#undef KILN_X
  }
  return "?";
}

}  // namespace kiln
