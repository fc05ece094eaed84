// memory planning: one workspace for every intermediate that crosses a group boundary.
//
// Needs: ctx.plan->groups from fusion. Guarantees: ctx.plan->buffers places every tensor that one group
// writes and another reads (and that is not a graph output) at an offset aligned to kWorkspaceAlignment;
// two buffers whose live ranges [first_group, last_group] overlap never overlap in memory; inputs of an
// elided concat alias their slice of its output (no space of their own). workspace_bytes is the extent.
// Allocation simulates the groups in order with a best-fit free list (O(n log n)).
#pragma once

#include "passes/pass.h"

namespace kiln {
Status plan_memory(Graph& g, PassContext& ctx);
}
