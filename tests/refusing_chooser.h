// A kernel chooser for tests of what planning does when a family refuses a group: it refuses the groups a
// predicate names a reason for, and asks kiln's own families about the others (a stand-in for a family that
// cannot take some pattern, which kiln's fusion never proposes on purpose).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "codegen/family.h"
#include "codegen/kernel_builder.h"
#include "kiln/plan.h"

namespace kiln::testing {

class RefusingChooser final : public KernelChooser {
 public:
  using Refusal = std::function<std::optional<std::string>(const Plan&, const Group&)>;
  explicit RefusingChooser(Refusal refuse) : refuse_(std::move(refuse)) {}
  void begin(const Plan& p) const override { aliases_ = codegen::alias_index(p); }
  Result<KernelFamilyId> choose(const Plan& plan, const Group& group) const override {
    if (std::optional<std::string> why = refuse_(plan, group)) return unsupported(*why);
    codegen::KernelBuilder b(plan, group, &aliases_);
    KILN_ASSIGN_OR_RETURN(const codegen::KernelFamily* f, codegen::choose_family(b, plan.target));
    return f->id();
  }

 private:
  Refusal refuse_;
  mutable codegen::AliasIndex aliases_;
};

}  // namespace kiln::testing
