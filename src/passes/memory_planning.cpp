#include "passes/memory_planning.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "ir/id_tables.h"
#include "ops/registry.h"
#include "passes/fusion.h"

namespace kiln {

namespace {

int64_t align_up(int64_t x) { return (x + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; }

// Best-fit allocation over a growing arena, with coalescing of neighbouring free blocks.
class Arena {
 public:
  int64_t allocate(int64_t bytes) {
    auto it = by_size_.lower_bound({bytes, 0});
    if (it != by_size_.end()) {
      auto [size, offset] = *it;
      erase(offset, size);
      if (size > bytes) insert(offset + bytes, size - bytes);
      return offset;
    }
    // Grow: reuse a free block at the end of the arena if there is one.
    int64_t offset = extent_;
    if (auto last = by_offset_.rbegin(); last != by_offset_.rend() && last->first + last->second == extent_) {
      offset = last->first;
      erase(last->first, last->second);
    }
    extent_ = offset + bytes;
    return offset;
  }
  void release(int64_t offset, int64_t bytes) {
    auto next = by_offset_.find(offset + bytes);
    if (next != by_offset_.end()) {
      bytes += next->second;
      erase(next->first, next->second);
    }
    auto prev = by_offset_.lower_bound(offset);
    if (prev != by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        bytes += prev->second;
        erase(prev->first, prev->second);
      }
    }
    insert(offset, bytes);
  }
  int64_t extent() const { return extent_; }

 private:
  void insert(int64_t offset, int64_t size) {
    by_offset_[offset] = size;
    by_size_.insert({size, offset});
  }
  void erase(int64_t offset, int64_t size) {
    by_offset_.erase(offset);
    by_size_.erase({size, offset});
  }
  std::map<int64_t, int64_t> by_offset_;
  std::set<std::pair<int64_t, int64_t>> by_size_;
  int64_t extent_ = 0;
};

// Gives every buffer that is not an alias its offset, by simulating the `ng` groups in order: a group's
// outputs are placed before the buffers it reads last are freed, so a group never writes over what it
// reads. Returns the workspace's extent. A step of its own: plan_memory decides which tensors need a
// buffer, this decides where each one goes.
int64_t place_buffers(std::vector<BufferPlacement>& buffers, size_t group_count) {
  const int32_t ng = static_cast<int32_t>(group_count);
  auto buffer = [&](int32_t i) -> BufferPlacement& { return buffers[static_cast<size_t>(i)]; };
  // The buffers born and dying at each group, in buffer order, as compressed rows (one list per group
  // would be two allocations per group): group k's are born[born_start[k] .. born_start[k + 1]).
  PerIndex<int32_t> born_start(group_count + 1, 0), dies_start(group_count + 1, 0);
  for (const BufferPlacement& b : buffers) {
    if (b.alias_of.valid()) continue;
    ++born_start[b.first_group + 1];
    ++dies_start[b.last_group + 1];
  }
  for (int32_t k = 0; k < ng; ++k) {
    born_start[k + 1] += born_start[k];
    dies_start[k + 1] += dies_start[k];
  }
  PerIndex<int32_t> born(static_cast<size_t>(born_start[ng])), dies(static_cast<size_t>(dies_start[ng]));
  {
    PerIndex<int32_t> born_fill = born_start, dies_fill = dies_start;
    for (int32_t i = 0; i < static_cast<int32_t>(buffers.size()); ++i) {
      const BufferPlacement& b = buffer(i);
      if (b.alias_of.valid()) continue;
      born[born_fill[b.first_group]++] = i;
      dies[dies_fill[b.last_group]++] = i;
    }
  }
  // Within a group, the longest-lived buffers first (then the largest): a buffer that outlives its
  // neighbours (a concat's shared buffer, a residual) goes low and leaves no hole between short-lived ones.
  for (int32_t k = 0; k < ng; ++k) {
    std::sort(born.begin() + born_start[k], born.begin() + born_start[k + 1], [&](int32_t a, int32_t c) {
      const BufferPlacement& x = buffer(a);
      const BufferPlacement& y = buffer(c);
      if (x.last_group != y.last_group) return x.last_group > y.last_group;
      if (x.bytes != y.bytes) return x.bytes > y.bytes;
      return a < c;
    });
  }
  Arena arena;
  for (int32_t k = 0; k < ng; ++k) {
    for (int32_t j = born_start[k]; j < born_start[k + 1]; ++j) {
      BufferPlacement& b = buffer(born[j]);
      b.offset = arena.allocate(align_up(b.bytes));
    }
    for (int32_t j = dies_start[k]; j < dies_start[k + 1]; ++j) {
      const BufferPlacement& b = buffer(dies[j]);
      arena.release(b.offset, align_up(b.bytes));
    }
  }
  return arena.extent();
}

// Elided concats (fusion.h): a root's inputs are slices of its output, and a view's output is the slice of
// its root's output that its inputs span (roots first: a view's place is its first input's). The root's
// buffer then lives from the first group writing any slice to the last group reading any slice or view.
void alias_concat_slices(const Graph& g, const Plan& plan, PerTensor<Tensor>& alias_of,
                         PerTensor<int64_t>& alias_offset, PerTensor<int32_t>& first, PerTensor<int32_t>& last) {
  for (const bool views : {false, true}) {
    for (const Group& grp : plan.groups) {
      if (grp.kind != GroupKind::concat_elided || grp.view_of.valid() != views) continue;
      const Node& c = g.node(grp.nodes[0]);
      const Tensor out = c.outputs[0];
      if (views) {
        const Tensor x0 = c.inputs[0][0];
        KILN_CHECK(alias_of[x0] == grp.view_of,
                   fmt::format("concat '{}': a view of a concat its first input is not in", c.name));
        alias_of[out] = grp.view_of;
        alias_offset[out] = alias_offset[x0];
        continue;
      }
      const int axis = *normalize_axis(std::get<int64_t>(c.attrs.at("axis")), g.tensor(out).shape.rank());
      int64_t at = 0;
      for (Tensor x : c.inputs[0]) {
        alias_of[x] = out;
        alias_offset[x] = at;
        at += g.tensor(x).shape[axis];
      }
    }
  }
  for (Tensor t : tensors_of(g)) {
    if (!alias_of[t].valid() || first[t] < 0) continue;
    const Tensor root = alias_of[t];
    first[root] = first[root] < 0 ? first[t] : std::min(first[root], first[t]);
    last[root] = std::max(last[root], last[t]);
  }
}

}  // namespace

void place_scratch(Plan& plan, const KernelChooser* chooser) {
  // Where the buffers end: the workspace's extent, or where an earlier call put the scratch.
  int64_t at = plan.zeroed_bytes > 0 ? plan.zeroed_offset : align_up(plan.workspace_bytes);
  plan.zeroed_offset = at;
  PerIndex<int64_t> partials(plan.groups.size(), 0);  // by group id
  for (Group& grp : plan.groups) {
    grp.scratch = {};
    int64_t counters = 0;
    if (grp.roles.reduction >= 0) {
      const ReductionEpilogueShape rs = reduction_epilogue_shape(plan.graph, grp);
      counters = rs.counters() * 4;
      partials[grp.id] = rs.partials() * 4;
    } else if (chooser != nullptr && grp.family != KernelFamilyId::none) {
      const Group::Scratch need = chooser->scratch(plan, grp);
      counters = need.counters_bytes;
      partials[grp.id] = need.partials_bytes;
    }
    if (counters == 0) continue;
    grp.scratch.counters_offset = at;
    grp.scratch.counters_bytes = counters;
    at = align_up(at + counters);
  }
  plan.zeroed_bytes = at - plan.zeroed_offset;
  if (plan.zeroed_bytes == 0) plan.zeroed_offset = 0;
  int64_t shared_partials = 0;
  for (Group& grp : plan.groups) {
    if (partials[grp.id] == 0) continue;
    grp.scratch.partials_offset = at;
    grp.scratch.partials_bytes = partials[grp.id];
    shared_partials = std::max(shared_partials, grp.scratch.partials_bytes);
  }
  at = align_up(at + shared_partials);
  if (plan.zeroed_bytes > 0) plan.workspace_bytes = at;
}

Status plan_memory(Graph& g, PassContext& ctx) {
  Plan& plan = *ctx.plan;
  const Uses& uses = ctx.uses(g);
  const size_t nt = g.tensors().size();
  // Live range of every tensor written by one group and read by another.
  PerTensor<int32_t> first(nt, -1), last(nt, -1);
  PerTensor<Tensor> alias_of(nt);
  PerTensor<int64_t> alias_offset(nt, 0);
  for (const Group& grp : plan.groups) {
    for (Tensor t : grp.inputs) {
      const int32_t p = uses.producer(t);
      if (p < 0) continue;
      last[t] = std::max(last[t], grp.id);
    }
    for (Tensor t : grp.outputs) first[t] = grp.id;
  }
  // A reduction epilogue reads back the value it reduces: that value needs memory even when no other group
  // reads it.
  PerTensor<bool> read_back(nt, false);
  for (const Group& grp : plan.groups) {
    if (const int32_t red = grp.roles.reduction; red >= 0) {
      const Tensor x = g.node(red).inputs[0][0];
      read_back[x] = true;
      last[x] = std::max(last[x], grp.id);
    }
  }
  alias_concat_slices(g, plan, alias_of, alias_offset, first, last);

  plan.buffers.clear();
  size_t candidates = 0;  // an upper bound on the buffers: room for them all avoids regrowing (and copying)
  for (int32_t f : first) candidates += f >= 0 ? 1 : 0;
  plan.buffers.reserve(candidates);
  PerTensor<int32_t> buffer_of(nt, -1);
  for (Tensor t : tensors_of(g)) {
    // Only tensors a group writes (first[t] >= 0) are read from the tensor records: at 100k nodes most
    // tensors are weights, and a sweep over every record costs a cache miss each.
    if (first[t] < 0 || uses.producer(t) < 0) continue;
    const TensorInfo& info = g.tensor(t);
    const bool aliased = alias_of[t].valid();
    const bool needs_space = !aliased && !uses.is_output(t) && (last[t] > first[t] || read_back[t]);
    if (!needs_space && !aliased) continue;
    BufferPlacement b;
    b.tensor = t;
    b.bytes = info.shape.numel() * dtype_size(info.dtype);
    b.first_group = first[t];
    b.last_group = std::max(first[t], last[t]);
    b.alias_of = alias_of[t];
    b.alias_axis_offset = alias_offset[t];
    buffer_of[t] = static_cast<int32_t>(plan.buffers.size());
    plan.buffers.push_back(b);
  }

  const int64_t extent = place_buffers(plan.buffers, plan.groups.size());
  for (BufferPlacement& b : plan.buffers) {
    if (!b.alias_of.valid()) continue;
    const int32_t owner = buffer_of[b.alias_of];
    b.offset = owner >= 0 ? plan.buffers[static_cast<size_t>(owner)].offset : 0;
  }
  plan.workspace_bytes = extent;
  plan.zeroed_offset = plan.zeroed_bytes = 0;
  place_scratch(plan, nullptr);
  return {};
}

}  // namespace kiln
