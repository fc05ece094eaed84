#include "passes/fusion.h"

#include <algorithm>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "ops/registry.h"
#include "passes/separations.h"

namespace kiln {

namespace {

int64_t tensor_bytes(const TensorInfo& t) { return t.shape.numel() * dtype_size(t.dtype); }

// The kind of group node `n` starts (read from Uses: the node itself is not touched).
GroupKind master_kind(const Graph& g, const Uses& uses, int32_t n) {
  const OpDef& def = op_def(uses.op(static_cast<size_t>(n)));
  if (def.anchors) return *def.anchors;
  switch (def.kind) {
    case FusionKind::pointwise: return GroupKind::pointwise;
    case FusionKind::layout: {
      const TensorInfo& x = g.tensor(uses.inputs(static_cast<size_t>(n))[0]);  // port x
      const bool weight =
          x.kind == TensorKind::parameter && is_weight_layout(g.tensor(uses.outputs(static_cast<size_t>(n))[0]).layout);
      return weight ? GroupKind::weight_transform : GroupKind::layout;
    }
    case FusionKind::opaque: return def.inputs[0].list ? GroupKind::concat : GroupKind::other;
    default: return GroupKind::other;
  }
}

bool accepts_epilogue(GroupKind k) {
  return k == GroupKind::conv || k == GroupKind::matmul || k == GroupKind::norm || k == GroupKind::pool ||
         k == GroupKind::pointwise;
}

struct Building {
  GroupKind kind;
  std::vector<int32_t> nodes;
  int32_t min_node, max_node;
  int32_t master;       // the node whose output shape epilogues must keep
  bool closed = false;  // ends in a store transform: nothing more joins
  bool alive = true;
};

class Fuser {
 public:
  Fuser(const Graph& g, const PlanOptions& o, const Uses& uses, const std::vector<bool>& isolated, FusionNotes& notes)
      : g_(g), o_(o), uses_(uses), isolated_(isolated), notes_(notes), group_of_(g.nodes().size(), -1) {}

  void run() {
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes().size()); ++i) place(i);
    merge_load_transforms();
    elide_concats();
  }

  std::vector<Building>& groups() { return groups_; }
  const std::vector<int32_t>& group_of() const { return group_of_; }

 private:
  int32_t producer_group(Tensor t) const {
    const int32_t p = uses_.producer(t);
    return p < 0 ? -1 : group_of_[static_cast<size_t>(p)];
  }

  // Groups whose values node `n` reads, other than `except`, into `s` (a short list: a node has few inputs).
  // Callers pass their own scratch list: planning a 100k-node graph asks this several times per node.
  void input_groups(int32_t n, int32_t except, std::vector<int32_t>& s) const {
    s.clear();
    for (Tensor t : uses_.inputs(static_cast<size_t>(n))) {
      int32_t h = producer_group(t);
      if (h >= 0 && h != except && std::find(s.begin(), s.end(), h) == s.end()) s.push_back(h);
    }
  }

  // Whether group `from` (transitively) reads a value of group `target`. Groups whose last node comes
  // before target's first node cannot, which keeps the search short. Visited groups are marked with a
  // per-search stamp instead of a set (no allocation per search).
  bool depends_on(int32_t from, int32_t target) const {
    if (seen_stamp_.size() < groups_.size()) seen_stamp_.resize(groups_.size() + groups_.size() / 2 + 16, 0);
    const uint32_t stamp = ++stamp_;
    std::vector<int32_t>& stack = dep_stack_;
    stack.assign(1, from);
    seen_stamp_[static_cast<size_t>(from)] = stamp;
    const int32_t floor = groups_[static_cast<size_t>(target)].min_node;
    while (!stack.empty()) {
      int32_t x = stack.back();
      stack.pop_back();
      if (x == target) return true;
      for (int32_t n : groups_[static_cast<size_t>(x)].nodes) {
        input_groups(n, x, dep_inputs_);
        for (int32_t h : dep_inputs_) {
          uint32_t& seen = seen_stamp_[static_cast<size_t>(h)];
          if (groups_[static_cast<size_t>(h)].max_node < floor || seen == stamp) continue;
          seen = stamp;
          stack.push_back(h);
        }
      }
    }
    return false;
  }

  // Would putting node `n` into group `gid` create a cycle? Only if another group n reads from depends on gid:
  // the first such group, or -1.
  int32_t cycle_through(int32_t n, int32_t gid) const {
    input_groups(n, gid, cycle_inputs_);
    for (int32_t h : cycle_inputs_) {
      if (depends_on(h, gid)) return h;
    }
    return -1;
  }

  // Notes why `consumer` stays apart from `producer`'s group (separations.h); returns nothing, so that a
  // refusing branch can end with `return note(...)`.
  void note(int32_t consumer, int32_t producer, Apart why) { notes_.note(consumer, producer, why); }
  Apart split(int32_t n) const { return kept_apart(SeparationRule::split, n); }
  Apart cycle(int32_t through) const {
    return kept_apart(SeparationRule::cycle, groups_[static_cast<size_t>(through)].master);
  }

  // An operand of an epilogue op: a scalar, a per-channel vector or a tensor of the output's full shape.
  bool epilogue_operand(int32_t n, const TensorInfo& o, const Shape& out, int channel_axis) const {
    if (o.shape.numel() == 1) return true;
    if (o.shape == out) return true;
    const int64_t C = out[channel_axis];
    if (o.shape.rank() == 1 && o.shape[0] == C) {
      const Attrs& attrs = g_.nodes()[static_cast<size_t>(n)].attrs;
      auto it = attrs.find("axis");  // a vector op along another axis is no per-channel operand
      if (it == attrs.end()) return true;
      auto ax = normalize_axis(std::get<int64_t>(it->second), out.rank());
      return ax && *ax == channel_axis;
    }
    if (o.shape.rank() > out.rank()) return false;
    for (int i = 0; i < o.shape.rank(); ++i) {
      const int d = out.rank() - o.shape.rank() + i;
      if (o.shape[i] != 1 && !(d == channel_axis && o.shape[i] == C)) return false;
    }
    return true;
  }

  bool is_isolated(int32_t n) const {
    return static_cast<size_t>(n) < isolated_.size() && isolated_[static_cast<size_t>(n)];
  }

  // May node `n` join group `gid` (reached through its producer `via_producer`)? If not, the rule that says no.
  Apart join_refusal(int32_t n, int32_t gid, int32_t via_producer) const {
    const Building& b = groups_[static_cast<size_t>(gid)];
    if (!b.alive) return kept_apart(SeparationRule::unrecorded);
    if (is_isolated(n)) return split(n);
    if (is_isolated(b.master)) return split(b.master);
    if (b.closed) return kept_apart(SeparationRule::store_transform, b.nodes.back());
    if (static_cast<int>(b.nodes.size()) >= o_.max_group_ops) return kept_apart(SeparationRule::max_group_size);
    // Operands from Uses (flat arrays): the node itself is read only for an epilogue's `axis` attribute.
    const bool store_transform = op_def(uses_.op(static_cast<size_t>(n))).kind == FusionKind::layout;
    if (store_transform) {
      // Only as the final store of the value it converts, when nothing else reads that value.
      const Tensor x = uses_.inputs(static_cast<size_t>(n))[0];
      for (int32_t c : uses_.consumers(static_cast<size_t>(x.id)))
        if (c != n) return kept_apart(SeparationRule::store_value_shared, x.id, c);
      if (uses_.is_output[static_cast<size_t>(x.id)]) return kept_apart(SeparationRule::store_value_output, x.id);
      if (!accepts_epilogue(b.kind)) return kept_apart(SeparationRule::takes_no_epilogue, static_cast<int32_t>(b.kind));
    } else if (!accepts_epilogue(b.kind)) {
      return kept_apart(SeparationRule::takes_no_epilogue, static_cast<int32_t>(b.kind));
    } else if (b.kind != GroupKind::pointwise) {
      const Shape& out = g_.tensor(uses_.outputs(static_cast<size_t>(b.master))[0]).shape;
      if (g_.tensor(uses_.outputs(static_cast<size_t>(n))[0]).shape != out)
        return kept_apart(SeparationRule::output_shape, b.master);
      const int ch = b.kind == GroupKind::matmul ? out.rank() - 1 : 1;
      for (Tensor t : uses_.inputs(static_cast<size_t>(n))) {
        if (producer_group(t) == gid) continue;
        if (!epilogue_operand(n, g_.tensor(t), out, ch)) return kept_apart(SeparationRule::operand_shape, t.id);
      }
    }
    if (const int32_t h = cycle_through(n, gid); h >= 0) return cycle(h);
    if (o_.policy && !o_.policy(g_, via_producer, n)) return kept_apart(SeparationRule::policy);
    return {};
  }

  void add_to(int32_t n, int32_t gid) {
    Building& b = groups_[static_cast<size_t>(gid)];
    b.nodes.push_back(n);
    b.min_node = std::min(b.min_node, n);
    b.max_node = std::max(b.max_node, n);
    group_of_[static_cast<size_t>(n)] = gid;
    if (op_def(uses_.op(static_cast<size_t>(n))).kind == FusionKind::layout) b.closed = true;
  }

  int32_t new_group(int32_t n) {
    const int32_t gid = static_cast<int32_t>(groups_.size());
    groups_.push_back(Building{master_kind(g_, uses_, n), {}, n, n, n});
    add_to(n, gid);
    groups_.back().closed = false;
    return gid;
  }

  void place(int32_t n) {
    const GroupKind kind = master_kind(g_, uses_, n);
    const auto inputs = uses_.inputs(static_cast<size_t>(n));
    if (kind == GroupKind::pointwise || kind == GroupKind::layout) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        const int32_t gid = producer_group(inputs[i]);
        if (gid < 0) continue;
        const Apart why = join_refusal(n, gid, uses_.producer(inputs[i]));
        if (why) {
          note(n, uses_.producer(inputs[i]), why);
          continue;
        }
        add_to(n, gid);
        for (size_t k = i + 1; k < inputs.size(); ++k) {  // the producers it did not try: it joined one group
          if (producer_group(inputs[k]) >= 0 && producer_group(inputs[k]) != gid)
            note(n, uses_.producer(inputs[k]), kept_apart(SeparationRule::joined_other, inputs[i].id));
        }
        return;
      }
    }
    const int32_t gid = new_group(n);
    const bool prologue = kind == GroupKind::norm || kind == GroupKind::pool;  // its input x may join it
    if (kind != GroupKind::pointwise && kind != GroupKind::layout) {
      for (size_t i = prologue ? 1 : 0; i < inputs.size(); ++i) {
        if (uses_.producer(inputs[i]) >= 0)
          note(n, uses_.producer(inputs[i]), kept_apart(SeparationRule::starts_kernel, static_cast<int32_t>(kind)));
      }
    }
    if (prologue && is_isolated(n) && uses_.producer(inputs[0]) >= 0) note(n, uses_.producer(inputs[0]), split(n));
    if (prologue && !is_isolated(n)) absorb_prologue(n, gid);
  }

  // A norm or pool takes in the pointwise group that computes its input when nothing else reads it.
  void absorb_prologue(int32_t n, int32_t gid) {
    const Tensor x = uses_.inputs(static_cast<size_t>(n))[0];  // port x
    const int32_t pid = producer_group(x);
    if (pid < 0) return;
    const int32_t xp = uses_.producer(x);
    Building& p = groups_[static_cast<size_t>(pid)];
    if (p.kind != GroupKind::pointwise)
      return note(n, xp, kept_apart(SeparationRule::prologue_kind, static_cast<int32_t>(p.kind)));
    if (p.closed) return note(n, xp, kept_apart(SeparationRule::store_transform, p.nodes.back()));
    if (is_isolated(p.master)) return note(n, xp, split(p.master));
    if (static_cast<int>(p.nodes.size()) + 1 > o_.max_group_ops)
      return note(n, xp, kept_apart(SeparationRule::max_group_size));
    for (int32_t m : p.nodes) {
      for (Tensor t : uses_.outputs(static_cast<size_t>(m))) {
        if (uses_.is_output[static_cast<size_t>(t.id)])
          return note(n, xp, kept_apart(SeparationRule::prologue_value_output, t.id));
        for (int32_t c : uses_.consumers(static_cast<size_t>(t.id))) {
          if (c != n && group_of_[static_cast<size_t>(c)] != pid)
            return note(n, xp, kept_apart(SeparationRule::prologue_value_shared, t.id, c));
        }
      }
    }
    std::vector<int32_t> inputs;
    input_groups(n, pid, inputs);
    for (int32_t h : inputs) {
      if (h != gid && depends_on(h, pid)) return note(n, xp, cycle(h));
    }
    if (o_.policy && !o_.policy(g_, g_.tensor(x).producer, n)) return note(n, xp, kept_apart(SeparationRule::policy));
    Building& b = groups_[static_cast<size_t>(gid)];
    for (int32_t m : p.nodes) group_of_[static_cast<size_t>(m)] = gid;
    b.nodes.insert(b.nodes.begin(), p.nodes.begin(), p.nodes.end());
    b.min_node = std::min(b.min_node, p.min_node);
    p.alive = false;
    p.nodes.clear();
  }

  // A layout conversion whose readers all sit in one kernel group becomes that group's load: the kernel
  // reads the source in its own order (an address computation, no extra pass over memory).
  void merge_load_transforms() {
    for (size_t gid = 0; gid < groups_.size(); ++gid) {
      Building& b = groups_[gid];
      if (!b.alive || b.kind != GroupKind::layout || b.nodes.size() != 1) continue;
      const Node& n = g_.nodes()[static_cast<size_t>(b.nodes[0])];
      const Tensor y = n.outputs[0];
      // Why the conversion stays a kernel of its own, noted against each of its readers.
      auto refuse = [&](Apart why) {
        for (int32_t c : uses_.consumers(static_cast<size_t>(y.id))) note(c, b.nodes[0], why);
      };
      if (is_isolated(b.nodes[0])) {
        refuse(split(b.nodes[0]));
        continue;
      }
      if (op_def(*n.op).row_major_only) {  // reshape / transpose: not a pure reordering
        refuse(kept_apart(SeparationRule::load_reorders));
        continue;
      }
      if (uses_.is_output[static_cast<size_t>(y.id)]) {
        refuse(kept_apart(SeparationRule::load_value_output, y.id));
        continue;
      }
      std::set<int32_t> readers;
      for (int32_t c : uses_.consumers(static_cast<size_t>(y.id))) readers.insert(group_of_[static_cast<size_t>(c)]);
      if (readers.size() != 1) {
        refuse(kept_apart(SeparationRule::load_readers, y.id, static_cast<int32_t>(readers.size())));
        continue;
      }
      const int32_t target = *readers.begin();
      Building& t = groups_[static_cast<size_t>(target)];
      Apart why;
      const int32_t h = producer_group(n.inputs[0][0]);
      if (!t.alive) {
        why = kept_apart(SeparationRule::unrecorded);
      } else if (is_isolated(t.master)) {
        why = split(t.master);
      } else if (!accepts_epilogue(t.kind)) {
        why = kept_apart(SeparationRule::takes_no_load, static_cast<int32_t>(t.kind));
      } else if (static_cast<int>(t.nodes.size()) >= o_.max_group_ops) {
        why = kept_apart(SeparationRule::max_group_size);
      } else if (h >= 0 && depends_on(h, target)) {
        why = cycle(h);
      } else if (o_.policy && !o_.policy(g_, b.nodes[0], uses_.consumers(static_cast<size_t>(y.id))[0])) {
        why = kept_apart(SeparationRule::policy);
      }
      if (why) {
        refuse(why);
        continue;
      }
      group_of_[static_cast<size_t>(b.nodes[0])] = target;
      t.nodes.push_back(b.nodes[0]);
      t.min_node = std::min(t.min_node, b.nodes[0]);
      b.alive = false;
      b.nodes.clear();
    }
  }

  void elide_concats() {
    for (Building& b : groups_) {
      if (!b.alive || b.kind != GroupKind::concat || is_isolated(b.nodes[0])) continue;
      const Node& c = g_.nodes()[static_cast<size_t>(b.nodes[0])];
      std::set<int32_t> seen;
      bool ok = true;
      for (Tensor t : c.inputs[0]) {
        const int32_t gid = producer_group(t);
        ok = ok && gid >= 0 && seen.insert(t.id).second && !uses_.is_output[static_cast<size_t>(t.id)] &&
             uses_.consumers(static_cast<size_t>(t.id)).size() == 1 &&
             accepts_epilogue(groups_[static_cast<size_t>(gid)].kind) && !groups_[static_cast<size_t>(gid)].closed &&
             g_.tensor(t).layout == g_.tensor(c.outputs[0]).layout;
      }
      if (ok) b.kind = GroupKind::concat_elided;
    }
  }

  const Graph& g_;
  const PlanOptions& o_;
  const Uses& uses_;
  const std::vector<bool>& isolated_;
  FusionNotes& notes_;
  std::vector<int32_t> group_of_;
  std::vector<Building> groups_;
  // Scratch of depends_on / cycle_through, reused across calls.
  mutable std::vector<uint32_t> seen_stamp_;  // per group: the search that last reached it
  mutable uint32_t stamp_ = 0;
  mutable std::vector<int32_t> dep_stack_, dep_inputs_, cycle_inputs_;
};

}  // namespace

Status fuse(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  FusionNotes notes;
  Fuser f(g, ctx.options, uses, ctx.isolated, notes);
  f.run();
  auto& bs = f.groups();
  const auto& group_of = f.group_of();

  // Order the live groups so that every group comes after the groups it reads from (Kahn's algorithm,
  // earliest first node first, so the order follows the graph's).
  std::vector<int32_t> live;
  std::vector<int32_t> index(bs.size(), -1);
  for (size_t i = 0; i < bs.size(); ++i) {
    if (!bs[i].alive) continue;
    std::sort(bs[i].nodes.begin(), bs[i].nodes.end());
    index[i] = static_cast<int32_t>(live.size());
    live.push_back(static_cast<int32_t>(i));
  }
  // Successor lists without duplicates: k grows through the sweep, so a repeat of (from, k) is the last entry.
  std::vector<std::vector<int32_t>> succ(live.size());
  std::vector<int32_t> indeg(live.size(), 0);
  for (size_t k = 0; k < live.size(); ++k) {
    for (int32_t n : bs[static_cast<size_t>(live[k])].nodes) {
      for (Tensor t : uses.inputs(static_cast<size_t>(n))) {
        const int32_t p = uses.producer(t);
        if (p < 0) continue;
        const int32_t from = index[static_cast<size_t>(group_of[static_cast<size_t>(p)])];
        auto& s = succ[static_cast<size_t>(from)];
        if (from != static_cast<int32_t>(k) && (s.empty() || s.back() != static_cast<int32_t>(k))) {
          s.push_back(static_cast<int32_t>(k));
          ++indeg[k];
        }
      }
    }
  }
  using Item = std::pair<int32_t, int32_t>;  // (first node, live index)
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (size_t k = 0; k < live.size(); ++k) {
    if (indeg[k] == 0) ready.push({bs[static_cast<size_t>(live[k])].min_node, static_cast<int32_t>(k)});
  }
  std::vector<int32_t> order;
  while (!ready.empty()) {
    auto [first, k] = ready.top();
    ready.pop();
    order.push_back(k);
    for (int32_t s : succ[static_cast<size_t>(k)]) {
      if (--indeg[static_cast<size_t>(s)] == 0)
        ready.push({bs[static_cast<size_t>(live[static_cast<size_t>(s)])].min_node, s});
    }
  }
  KILN_CHECK(order.size() == live.size(), "fusion made the group graph cyclic");

  // The groups, with what each reads from and writes to memory.
  std::vector<int32_t> position(bs.size(), -1);
  std::vector<int32_t> read_by(g.tensors().size(), -1);  // the last group found reading each tensor
  Plan& plan = *ctx.plan;
  plan.groups.clear();
  for (int32_t k : order) {
    const int32_t gid = live[static_cast<size_t>(k)];
    position[static_cast<size_t>(gid)] = static_cast<int32_t>(plan.groups.size());
    Group grp;
    grp.id = static_cast<int32_t>(plan.groups.size());
    grp.kind = bs[static_cast<size_t>(gid)].kind;
    grp.nodes = std::move(bs[static_cast<size_t>(gid)].nodes);
    for (int32_t n : grp.nodes) {
      for (Tensor t : uses.inputs(static_cast<size_t>(n))) {
        const int32_t p = uses.producer(t);
        if ((p < 0 || group_of[static_cast<size_t>(p)] != gid) && read_by[static_cast<size_t>(t.id)] != gid) {
          read_by[static_cast<size_t>(t.id)] = gid;
          grp.inputs.push_back(t);
        }
      }
      for (Tensor t : uses.outputs(static_cast<size_t>(n))) {
        bool out = uses.is_output[static_cast<size_t>(t.id)];
        for (int32_t c : uses.consumers(static_cast<size_t>(t.id)))
          out = out || group_of[static_cast<size_t>(c)] != gid;
        if (out) grp.outputs.push_back(t);
      }
    }
    if (grp.kind != GroupKind::concat_elided) {
      for (Tensor t : grp.inputs) grp.bytes_read += tensor_bytes(g.tensor(t));
      for (Tensor t : grp.outputs) grp.bytes_written += tensor_bytes(g.tensor(t));
    }
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
