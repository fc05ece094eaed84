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
//  - so does a conv or matmul, as a *prologue* applied while it loads its input (port x / a), when that
//    group computes the input from one tensor of the same shape and every other operand is cheap to apply
//    per element loaded (prologue_operand: a per-channel affine such as an inference batch norm, an
//    activation, a per-(n, c) scale such as squeeze-excite's);
//  - a layout conversion joins its producer's group as the group's final store (the group then closes),
//    or, when all its readers are in one group, that group as its load;
//  - a layer norm over the channels of a depthwise conv's transposed output joins the conv's group as a
//    row epilogue (ConvNeXt's dwconv -> permute -> layer_norm): one block per pixel normalizes them;
//  - a per-channel reduction (OpDef::channel_reduction: a global average pool, batch-norm statistics) of a
//    value of a conv group joins that group as its *reduction epilogue* (the squeeze-excite pool after a
//    depthwise or grouped conv): the kernel stores the value, sums what each block stored per channel and
//    image, and the last block of each channel tile adds the partial sums (Group::roles.reduction;
//    templates/kiln/reduction_epilogue.cuh);
//  - a concat whose every input is written by a kernel group (not a graph input, parameter or output) and
//    placed in no other concat costs no kernel: the producers store straight into their slices
//    (GroupKind::concat_elided, a root); a concat whose inputs are a run of a root's inputs is a view of
//    its output (concat_elided with Group::view_of: DenseNet's chains of concats);
//  - a conversion of a parameter is a weight transform, run once per bound weight.
// Every join must keep the group graph acyclic and the group under PlanOptions::max_group_ops ops. A
// value read outside its group (or a graph output) is written out, so one group may have several outputs.
#pragma once

#include "passes/pass.h"

namespace kiln {
Status fuse(Graph& g, PassContext& ctx);

// Whether tensor `t`, an operand of pointwise node `n` in the prologue of an anchor whose input has logical
// `shape`, can be applied as the anchor loads that input: a scalar; the per-channel vector of a bias_add
// along `channel` or of a batch_norm when `channel` is 1; or a tensor that broadcasts over every dim but
// `channel` and, when `per_image`, dim 0 (a [N, C, 1, 1] squeeze-excite scale). conv2d: channel 1,
// per_image; matmul: the last dim of a (its k), not per_image. Shared by the fusion pass (which joins) and
// the conv and matmul families (which emit the prologue).
bool prologue_operand(const Node& n, const TensorInfo& t, const Shape& shape, int channel, bool per_image);

// The most channels a depthwise conv's row-norm epilogue normalizes: one block computes a pixel's channels
// (the depthwise_conv2d family's row-norm kernel, one thread per channel).
inline constexpr int64_t kMaxRowNormChannels = 1024;

// The reduction epilogue (a channel reduction in a conv group). Its kernel writes one partial sum per (term,
// channel, piece of a 32-row chunk of the output pixels inside one image): piece (chunk c, image n) is slot
// c + n, distinct for distinct pieces, so there are ceil(N·P·Q / 32) + N - 1 slots of terms · K floats. Blocks count
// themselves per channel tile (grid y) in a counter that must be zero when the kernel starts: at most
// G · ceil((K / G) / 32) of them, for channel tiles of at least 32 of a group's channels (or one per
// depthwise channel tile). The memory pass reserves both (Group::scratch), codegen writes the kernel, and the
// formulas below are the one place both read.
inline constexpr int64_t kReductionChunkRows = 32;
struct ReductionEpilogueShape {
  int64_t N = 0, K = 0, PQ = 0, G = 1;  // images, channels, pixels per image, conv groups
  int64_t terms = 1;                    // sums per channel (OpDef::channel_reduction)
  int64_t slots() const { return (N * PQ + kReductionChunkRows - 1) / kReductionChunkRows + N - 1; }
  int64_t partials() const { return slots() * terms * K; }  // floats
  int64_t counters() const { return G * ((K / G + 31) / 32); }
};
// The shape of a group's reduction epilogue (Group::roles.reduction, of a conv group: its input and the conv).
ReductionEpilogueShape reduction_epilogue_shape(const Graph& g, const Group& grp);
}  // namespace kiln
