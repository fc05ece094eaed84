// fusion: partitions the graph's nodes into groups, each of which becomes one kernel.
//
// Needs: a verified graph after layout assignment (nodes in topological order). Guarantees: ctx.plan->groups
// holds every node exactly once, groups in an order that respects every dependency (the group graph is
// acyclic), each group's kind, inputs, outputs and bytes moved; ctx.plan->separations.
//
// Legality (which joins are valid) is `join_refusal` in fusion.cpp; policy (which valid joins to make) is
// PlanOptions::policy, by default "whenever legal". Every refusal is noted with its rule (separations.h), and
// ctx.plan->separations says, for every tensor between two kernels, which rule kept them apart. The kinds of
// join:
//  - a pointwise op joins the group of one of its producers when that group is an anchor (conv, matmul),
//    a norm, a pool or a pointwise group; into an anchor, norm or pool group only as an epilogue: same
//    output shape, and every other operand a scalar, a per-channel vector or a full tensor of that shape;
//  - a norm or pool absorbs the pointwise group that feeds it when nothing else reads that group's values;
//  - a layout conversion joins its producer's group as the group's final store (the group then closes),
//    or, when all its readers are in one group, that group as its load;
//  - a concat whose every input is written by a kernel group for it alone costs no kernel: the producers
//    store straight into their slices (GroupKind::concat_elided);
//  - a conversion of a parameter is a weight transform, run once per bound weight.
// Every join must keep the group graph acyclic and the group under PlanOptions::max_group_ops ops. A
// value read outside its group (or a graph output) is written out, so one group may have several outputs.
#pragma once

#include "passes/pass.h"

namespace kiln {
Status fuse(Graph& g, PassContext& ctx);
}
