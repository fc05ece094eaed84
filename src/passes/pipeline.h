// The planner's passes in order (pipeline.cpp). plan_graph (codegen/families.cpp) calls this with the
// kernel families as the chooser: the passes themselves know nothing of code generation.
#pragma once

#include "kiln/plan.h"

namespace kiln {

// Runs verify, canonicalize, dce and layout once, then fusion and memory planning until every kernel group
// has a family (options.chooser; none: no families are chosen).
Result<Plan> run_planner(Graph&& graph, const PlanOptions& options);

}  // namespace kiln
