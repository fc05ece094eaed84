#include "passes/fusion.h"
#include "passes/fuser.h"

#include <algorithm>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "ops/registry.h"
#include "passes/separations.h"

namespace kiln {

namespace {

int64_t tensor_bytes(const TensorInfo& t) { return t.shape.numel() * dtype_size(t.dtype); }

// What fusion decided each special node of a group is (Group::roles).
Group::Roles roles_of(const fusion_detail::Building& b) {
  Group::Roles r;
  r.anchor = is_anchored(b.kind) ? b.master : -1;
  r.reduction = b.reduction;
  r.row_norm = b.row_norm;
  r.store_view = b.view_node;
  r.prologue = b.prologue;
  r.prologue_norm = b.prologue_norm;
  std::sort(r.prologue.begin(), r.prologue.end());
  return r;
}

}  // namespace

using fusion_detail::Building;
using fusion_detail::Fuser;

bool prologue_operand(const Node& n, const TensorInfo& t, const Shape& shape, int channel, bool per_image) {
  if (t.shape.numel() == 1) return true;
  if (t.shape.rank() == 1 && t.shape[0] == shape[channel] && has_channel_vector(n)) {
    const std::optional<int> ax = channel_vector_axis(n, shape.rank());
    return ax && *ax == channel;
  }
  if (t.shape.rank() > shape.rank()) return false;
  for (int i = 0; i < t.shape.rank(); ++i) {  // NumPy broadcasting: trailing dims aligned
    const int d = shape.rank() - t.shape.rank() + i;
    if (t.shape[i] == 1) continue;
    if (t.shape[i] != shape[d] || !(d == channel || (per_image && d == 0))) return false;
  }
  return true;
}

ReductionEpilogueShape reduction_epilogue_shape(const Graph& g, const Group& grp) {
  KILN_CHECK(grp.roles.reduction >= 0 && grp.roles.anchor >= 0, "reduction_epilogue_shape of a group without one");
  const Node& red = g.node(grp.roles.reduction);
  const Shape& x = g.tensor(red.inputs[0][0]).shape;
  ReductionEpilogueShape s;
  s.N = x[0], s.K = x[1], s.PQ = x[2] * x[3];
  s.terms = static_cast<int64_t>(op_def(*red.op).channel_reduction->terms.size());
  s.G = std::get<int64_t>(g.node(grp.roles.anchor).attrs.at("groups"));
  return s;
}

namespace {

// The live groups in an order where every group comes after the groups it reads from (Kahn's algorithm,
// earliest first node first, so the order follows the graph's), as group ids. Sorts each group's nodes.
std::vector<int32_t> group_order(fusion_detail::Fuser& f, const Uses& uses) {
  auto& bs = f.groups();
  const auto& group_of = f.group_of();
  // Live groups are numbered 0.. in group order: `live` maps that number to the group id, `index` back.
  PerIndex<int32_t> live;
  PerIndex<int32_t> index(bs.size(), -1);
  for (int32_t gid = 0; gid < static_cast<int32_t>(bs.size()); ++gid) {
    Building& b = f.group(gid);
    if (!b.alive) continue;
    std::sort(b.nodes.begin(), b.nodes.end());
    index[gid] = static_cast<int32_t>(live.size());
    live.push_back(gid);
  }
  const int32_t live_count = static_cast<int32_t>(live.size());
  // Successor lists without duplicates: k grows through the sweep, so a repeat of (from, k) is the last entry.
  PerIndex<std::vector<int32_t>> succ(live.size());
  PerIndex<int32_t> indeg(live.size(), 0);
  for (int32_t k = 0; k < live_count; ++k) {
    for (int32_t n : f.group(live[k]).nodes) {
      for (Tensor t : uses.inputs(n)) {
        const int32_t p = uses.producer(t);
        if (p < 0) continue;
        const int32_t from = index[group_of[p]];
        auto& s = succ[from];
        if (from != k && (s.empty() || s.back() != k)) {
          s.push_back(k);
          ++indeg[k];
        }
      }
    }
  }
  using Item = std::pair<int32_t, int32_t>;  // (first node, live index)
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (int32_t k = 0; k < live_count; ++k) {
    if (indeg[k] == 0) ready.push({f.group(live[k]).min_node, k});
  }
  std::vector<int32_t> order;
  while (!ready.empty()) {
    auto [first, k] = ready.top();
    ready.pop();
    order.push_back(k);
    for (int32_t s : succ[k]) {
      if (--indeg[s] == 0) ready.push({f.group(live[s]).min_node, s});
    }
  }
  KILN_CHECK(order.size() == live.size(), "fusion made the group graph cyclic");
  for (int32_t& k : order) k = live[k];
  return order;
}

}  // namespace

Status fuse(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  FusionNotes notes;
  Fuser f(g, ctx.options, uses, ctx.isolated, notes);
  f.run();
  const auto& group_of = f.group_of();
  const std::vector<int32_t> order = group_order(f, uses);

  // The groups, with what each reads from and writes to memory.
  PerTensor<int32_t> read_by(g.tensors().size(), -1);  // the last group found reading each tensor
  Plan& plan = *ctx.plan;
  plan.groups.clear();
  plan.groups.reserve(order.size());  // a Group is big: regrowing moves every one and touches fresh pages
  for (int32_t gid : order) {
    Group grp;
    grp.id = static_cast<int32_t>(plan.groups.size());
    grp.kind = f.group(gid).kind;
    grp.view_of = f.group(gid).view_of;
    grp.roles = roles_of(f.group(gid));
    grp.nodes = std::move(f.group(gid).nodes);
    for (int32_t n : grp.nodes) {
      for (Tensor t : uses.inputs(n)) {
        const int32_t p = uses.producer(t);
        if ((p < 0 || group_of[p] != gid) && read_by[t] != gid) {
          read_by[t] = gid;
          grp.inputs.push_back(t);
        }
      }
      for (Tensor t : uses.outputs(n)) {
        bool out = uses.is_output(t);
        for (int32_t c : uses.consumers(t)) out = out || group_of[c] != gid || c == f.group(gid).reduction;
        if (out) grp.outputs.push_back(t);
      }
    }
    if (grp.kind != GroupKind::concat_elided) {
      for (Tensor t : grp.inputs) grp.bytes_read += tensor_bytes(g.tensor(t));
      for (Tensor t : grp.outputs) grp.bytes_written += tensor_bytes(g.tensor(t));
    }
    // A reduction epilogue reads back the value it reduces (stored above: an output of the group).
    if (const int32_t red = f.group(gid).reduction; red >= 0)
      grp.bytes_read += tensor_bytes(g.tensor(uses.inputs(red)[0]));
    plan.groups.push_back(std::move(grp));
  }
  plan.bytes_moved = 0;
  for (const Group& grp : plan.groups) {
    if (grp.is_kernel()) plan.bytes_moved += grp.bytes_read + grp.bytes_written;
  }
  notes.finish();
  explain_separations(plan, uses, notes, ctx.options.max_group_ops);
  return {};
}

}  // namespace kiln
