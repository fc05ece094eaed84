// memory planning: one workspace for every intermediate that crosses a group boundary.
//
// Needs: ctx.plan->groups from fusion. Guarantees: ctx.plan->buffers places every tensor that one group
// writes and another reads (and that is not a graph output) at an offset aligned to kWorkspaceAlignment;
// two buffers whose live ranges [first_group, last_group] overlap never overlap in memory; inputs of an
// elided concat, and outputs of elided concats that are views of a larger one (Group::view_of), alias their
// slice of the root concat's output (no space of their own), whose buffer is live from the first group
// writing a slice to the last group reading a slice or a view. workspace_bytes is the extent.
// Allocation simulates the groups in order with a best-fit free list (O(n log n)).
#pragma once

#include "passes/pass.h"

namespace kiln {
Status plan_memory(Graph& g, PassContext& ctx);
// The groups' scratch after the buffers: first every group's counters, one range set to zero before every
// run (Plan::zeroed), never shared; then the partial sums, one range every group's share: a kernel writes its
// partials before it reads them, and the groups run one after another on one stream. A reduction epilogue's
// (src/passes/fusion.h), and, with `chooser`, what it says the chosen family's kernel needs (split-K).
// plan_memory places the first kind; the pipeline places both again once the families are chosen.
void place_scratch(Plan& plan, const KernelChooser* chooser);
}  // namespace kiln
