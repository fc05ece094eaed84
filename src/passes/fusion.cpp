#include "passes/fusion.h"

#include <algorithm>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "ops/registry.h"

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
  GroupKind kind = GroupKind::other;
  std::vector<int32_t> nodes;
  int32_t min_node = 0, max_node = 0;
  int32_t master = 0;   // the node whose output shape epilogues must keep
  bool closed = false;  // ends in a store transform: nothing more joins
  bool alive = true;
  // A conv or matmul group whose epilogue went through a transpose (a transposed store, ConvNeXt's
  // permute back to NCHW): the ops past it work on the transposed value, of shape view_shape, whose
  // channel dim is view_channel. -1: no transpose yet.
  int32_t view_node = -1;
  Shape view_shape;
  int view_channel = 1;
  Tensor view_of{};  // an elided concat that is a view of a larger one's output: that output
};

class Fuser {
 public:
  Fuser(const Graph& g, const PlanOptions& o, const Uses& uses, const std::vector<bool>& isolated)
      : g_(g),
        o_(o),
        uses_(uses),
        isolated_(isolated),
        group_of_(g.nodes().size(), -1),
        past_view_(g.nodes().size(), 0) {}

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

  // Would putting node `n` into group `gid` create a cycle? Only if another group n reads from depends on gid.
  bool creates_cycle(int32_t n, int32_t gid) const {
    input_groups(n, gid, cycle_inputs_);
    for (int32_t h : cycle_inputs_) {
      if (depends_on(h, gid)) return true;
    }
    return false;
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

  // Whether node n's inputs from group gid are past the group's transpose (view_node): 1 all, 0 none, -1
  // some of each (no single coordinate to compute n at).
  int past_view(int32_t n, int32_t gid) const {
    int past = 0, before = 0;
    for (Tensor t : uses_.inputs(static_cast<size_t>(n))) {
      if (producer_group(t) != gid) continue;
      (past_view_[static_cast<size_t>(uses_.producer(t))] ? past : before)++;
    }
    return past && before ? -1 : past ? 1 : 0;
  }

  bool can_join(int32_t n, int32_t gid, int32_t via_producer) const {
    const Building& b = groups_[static_cast<size_t>(gid)];
    if (!b.alive || b.closed || static_cast<int>(b.nodes.size()) >= o_.max_group_ops || is_isolated(n) ||
        is_isolated(b.master))
      return false;
    const int past = past_view(n, gid);
    if (past < 0) return false;
    // Operands from Uses (flat arrays): the node itself is read only for an epilogue's `axis` attribute.
    const bool store_transform = op_def(uses_.op(static_cast<size_t>(n))).kind == FusionKind::layout;
    if (store_transform) {
      // Only as the final store of the value it converts, when nothing else reads that value.
      const Tensor x = uses_.inputs(static_cast<size_t>(n))[0];
      if (uses_.consumers(static_cast<size_t>(x.id)).size() != 1 || uses_.is_output[static_cast<size_t>(x.id)])
        return false;
      if (!accepts_epilogue(b.kind)) return false;
    } else if (!accepts_epilogue(b.kind)) {
      return false;
    } else if (b.kind != GroupKind::pointwise) {
      const Shape& out = past ? b.view_shape : g_.tensor(uses_.outputs(static_cast<size_t>(b.master))[0]).shape;
      if (g_.tensor(uses_.outputs(static_cast<size_t>(n))[0]).shape != out) return false;
      const int ch = past ? b.view_channel : b.kind == GroupKind::matmul ? out.rank() - 1 : 1;
      for (Tensor t : uses_.inputs(static_cast<size_t>(n))) {
        if (producer_group(t) == gid) continue;
        if (!epilogue_operand(n, g_.tensor(t), out, ch)) return false;
      }
    }
    if (creates_cycle(n, gid)) return false;
    if (o_.policy && !o_.policy(g_, via_producer, n)) return false;
    return true;
  }

  void add_to(int32_t n, int32_t gid) {
    Building& b = groups_[static_cast<size_t>(gid)];
    const bool past = b.view_node >= 0 && past_view(n, gid) > 0;
    b.nodes.push_back(n);
    b.min_node = std::min(b.min_node, n);
    b.max_node = std::max(b.max_node, n);
    group_of_[static_cast<size_t>(n)] = gid;
    past_view_[static_cast<size_t>(n)] = past;
    const OpId op = uses_.op(static_cast<size_t>(n));
    if (op_def(op).kind != FusionKind::layout) return;
    // A conv's or matmul's first transposed store does not end the epilogue: the ops past it compute at
    // the permuted coordinate. Any other store transform does.
    if (op == OpId::transpose && b.view_node < 0 && !past &&
        (b.kind == GroupKind::conv || b.kind == GroupKind::matmul)) {
      const Node& nd = g_.nodes()[static_cast<size_t>(n)];
      const auto& perm = std::get<std::vector<int64_t>>(nd.attrs.at("perm"));
      const int rank = static_cast<int>(perm.size());
      const int channel = b.kind == GroupKind::matmul ? rank - 1 : 1;  // the anchor's channel, moved
      b.view_node = n;
      b.view_shape = g_.tensor(nd.outputs[0]).shape;
      b.view_channel = static_cast<int>(std::find(perm.begin(), perm.end(), channel) - perm.begin());
      past_view_[static_cast<size_t>(n)] = true;
      return;
    }
    b.closed = true;
  }

  int32_t new_group(int32_t n) {
    const int32_t gid = static_cast<int32_t>(groups_.size());
    Building b;
    b.kind = master_kind(g_, uses_, n);
    b.min_node = b.max_node = b.master = n;
    groups_.push_back(std::move(b));
    add_to(n, gid);
    groups_.back().closed = false;
    return gid;
  }

  void place(int32_t n) {
    const GroupKind kind = master_kind(g_, uses_, n);
    if (kind == GroupKind::pointwise || kind == GroupKind::layout) {
      for (Tensor t : uses_.inputs(static_cast<size_t>(n))) {
        const int32_t gid = producer_group(t);
        if (gid >= 0 && can_join(n, gid, uses_.producer(t))) {
          add_to(n, gid);
          return;
        }
      }
    }
    const int32_t gid = new_group(n);
    if ((kind == GroupKind::norm || kind == GroupKind::pool) && !is_isolated(n)) absorb_prologue(n, gid);
    if ((kind == GroupKind::conv || kind == GroupKind::matmul) && !is_isolated(n) && anchor_prologue(n))
      absorb_prologue(n, gid);
  }

  // Whether the pointwise group computing anchor n's input (port 0) can be its prologue: it computes
  // that input, of one shape throughout, from one tensor of that shape read from memory, and every other
  // operand is a prologue_operand. (absorb_prologue checks that nothing else reads the group.)
  bool anchor_prologue(int32_t n) const {
    const Node& anchor = g_.nodes()[static_cast<size_t>(n)];
    const Tensor x = anchor.inputs[0][0];
    const int32_t pid = producer_group(x);
    if (pid < 0 || groups_[static_cast<size_t>(pid)].kind != GroupKind::pointwise) return false;
    const Shape& shape = g_.tensor(x).shape;
    const bool conv = *anchor.op == OpId::conv2d;
    if (!conv && (shape.rank() < 2 || std::get<bool>(anchor.attrs.at("transpose_a")))) return false;
    const int channel = conv ? 1 : shape.rank() - 1;
    int sources = 0;
    for (int32_t m : groups_[static_cast<size_t>(pid)].nodes) {
      const Node& nd = g_.nodes()[static_cast<size_t>(m)];
      if (op_def(*nd.op).kind == FusionKind::layout) {  // a load transform of the group's input
        if (producer_group(nd.inputs[0][0]) == pid) return false;
        continue;
      }
      if (g_.tensor(nd.outputs[0]).shape != shape) return false;
      for (const auto& port : nd.inputs) {
        for (Tensor t : port) {
          const int32_t h = producer_group(t);
          const bool inside =
              h == pid && op_def(*g_.nodes()[static_cast<size_t>(uses_.producer(t))].op).kind != FusionKind::layout;
          if (inside) continue;
          if (g_.tensor(t).shape == shape) {
            ++sources;
          } else if (!prologue_operand(nd, g_.tensor(t), shape, channel, conv)) {
            return false;
          }
        }
      }
    }
    return sources == 1;
  }

  // A norm, pool, conv or matmul takes in the pointwise group that computes its input when nothing else
  // reads it.
  void absorb_prologue(int32_t n, int32_t gid) {
    const Tensor x = uses_.inputs(static_cast<size_t>(n))[0];  // port x
    const int32_t pid = producer_group(x);
    if (pid < 0) return;
    Building& p = groups_[static_cast<size_t>(pid)];
    if (p.kind != GroupKind::pointwise || p.closed || is_isolated(p.master) ||
        static_cast<int>(p.nodes.size()) + 1 > o_.max_group_ops) {
      return;
    }
    for (int32_t m : p.nodes) {
      for (Tensor t : uses_.outputs(static_cast<size_t>(m))) {
        if (uses_.is_output[static_cast<size_t>(t.id)]) return;
        for (int32_t c : uses_.consumers(static_cast<size_t>(t.id))) {
          if (c != n && group_of_[static_cast<size_t>(c)] != pid) return;
        }
      }
    }
    std::vector<int32_t> inputs;
    input_groups(n, pid, inputs);
    for (int32_t h : inputs) {
      if (h != gid && depends_on(h, pid)) return;
    }
    if (o_.policy && !o_.policy(g_, g_.tensor(x).producer, n)) return;
    Building& b = groups_[static_cast<size_t>(gid)];
    for (int32_t m : p.nodes) group_of_[static_cast<size_t>(m)] = gid;
    b.nodes.insert(b.nodes.begin(), p.nodes.begin(), p.nodes.end());
    b.min_node = std::min(b.min_node, p.min_node);
    p.alive = false;
    p.nodes.clear();
  }

  // A layout conversion or transpose whose readers all sit in one kernel group becomes that group's load:
  // the kernel reads the source through the op's view (OpDef::view: an address computation, no extra pass
  // over memory).
  void merge_load_transforms() {
    for (size_t gid = 0; gid < groups_.size(); ++gid) {
      Building& b = groups_[gid];
      if (!b.alive || b.kind != GroupKind::layout || b.nodes.size() != 1 || is_isolated(b.nodes[0])) continue;
      const Node& n = g_.nodes()[static_cast<size_t>(b.nodes[0])];
      if (!op_def(*n.op).view) continue;  // a reshape re-indexes: not a view the reader's strides can express
      const Tensor y = n.outputs[0];
      if (uses_.is_output[static_cast<size_t>(y.id)]) continue;
      std::set<int32_t> readers;
      for (int32_t c : uses_.consumers(static_cast<size_t>(y.id))) readers.insert(group_of_[static_cast<size_t>(c)]);
      if (readers.size() != 1) continue;
      const int32_t target = *readers.begin();
      Building& t = groups_[static_cast<size_t>(target)];
      if (!t.alive || is_isolated(t.master) || !accepts_epilogue(t.kind) ||
          static_cast<int>(t.nodes.size()) >= o_.max_group_ops)
        continue;
      const int32_t h = producer_group(n.inputs[0][0]);
      if (h >= 0 && depends_on(h, target)) continue;
      if (o_.policy && !o_.policy(g_, b.nodes[0], uses_.consumers(static_cast<size_t>(y.id))[0])) continue;
      group_of_[static_cast<size_t>(b.nodes[0])] = target;
      t.nodes.push_back(b.nodes[0]);
      t.min_node = std::min(t.min_node, b.nodes[0]);
      b.alive = false;
      b.nodes.clear();
    }
  }

  // Concats that cost no kernel (GroupKind::concat_elided). A root concat's inputs are written by their
  // producers straight into their slices of its output; a concat whose inputs are a run of a root's inputs
  // is a view of that output (a DenseNet block: each concat re-concatenates a prefix of the next one's
  // inputs, and all are views of the block's last, largest concat). Largest concats are tried first, so a
  // chain's biggest concat is its root. A tensor is written into one root only: a concat that reads a
  // tensor placed elsewhere (or a graph input or parameter, which nothing writes) stays a copy.
  void elide_concats() {
    std::vector<int32_t> cands;
    for (int32_t gid = 0; gid < static_cast<int32_t>(groups_.size()); ++gid)
      if (concat_candidate(gid)) cands.push_back(gid);
    auto inputs_of = [&](int32_t gid) { return concat_node(gid).inputs[0].size(); };
    std::stable_sort(cands.begin(), cands.end(), [&](int32_t a, int32_t b) { return inputs_of(a) > inputs_of(b); });
    std::vector<bool> placed(g_.tensors().size(), false);
    for (int32_t r : cands) {
      if (groups_[static_cast<size_t>(r)].kind != GroupKind::concat || !can_root(r, placed)) continue;
      groups_[static_cast<size_t>(r)].kind = GroupKind::concat_elided;
      for (Tensor t : concat_node(r).inputs[0]) placed[static_cast<size_t>(t.id)] = true;
      claim_views(r);
    }
  }

  const Node& concat_node(int32_t gid) const {
    return g_.nodes()[static_cast<size_t>(groups_[static_cast<size_t>(gid)].nodes[0])];
  }

  int concat_axis(const Node& c) const {
    return *normalize_axis(std::get<int64_t>(c.attrs.at("axis")), g_.tensor(c.outputs[0]).shape.rank());
  }

  bool concat_candidate(int32_t gid) const {
    const Building& b = groups_[static_cast<size_t>(gid)];
    return b.alive && b.kind == GroupKind::concat && b.nodes.size() == 1 && !is_isolated(b.nodes[0]) &&
           *concat_node(gid).op == OpId::concat;
  }

  // Whether every input of concat group `r` can be written into its slice: produced by a kernel group that
  // stores through memory views (not a graph input or parameter, which nothing writes; not a transpose or
  // reshape, whose stores move coordinates), in the concat's layout, not a graph output (that lives in its
  // binding), once in the concat and in no other root. Other readers of an input are fine: they read the
  // slice. (A group closed by a store conversion may write other values into slices.)
  bool can_root(int32_t r, const std::vector<bool>& placed) const {
    const Node& c = concat_node(r);
    const Layout layout = g_.tensor(c.outputs[0]).layout;
    std::set<int32_t> seen;
    for (Tensor t : c.inputs[0]) {
      const int32_t gid = producer_group(t);
      if (gid < 0 || placed[static_cast<size_t>(t.id)] || !seen.insert(t.id).second ||
          uses_.is_output[static_cast<size_t>(t.id)] || !accepts_epilogue(groups_[static_cast<size_t>(gid)].kind) ||
          g_.tensor(t).layout != layout)
        return false;
      const OpId op = uses_.op(static_cast<size_t>(uses_.producer(t)));
      if (op_def(op).kind == FusionKind::layout && op != OpId::layout_convert) return false;
    }
    return true;
  }

  // Makes every concat whose inputs are a run of root `r`'s inputs (same axis and layout, not a graph
  // output: that needs memory of its own) a view of r's output.
  void claim_views(int32_t r) {
    const Node& root = concat_node(r);
    const auto& xs = root.inputs[0];
    const int axis = concat_axis(root);
    const Layout layout = g_.tensor(root.outputs[0]).layout;
    for (size_t k = 0; k < xs.size(); ++k) {
      for (int32_t n : uses_.consumers(static_cast<size_t>(xs[k].id))) {
        const int32_t gid = group_of_[static_cast<size_t>(n)];
        if (gid == r || !concat_candidate(gid)) continue;
        const Node& v = concat_node(gid);
        const auto& vs = v.inputs[0];
        // Asked once per view: from its first input.
        if (vs[0] != xs[k] || vs.size() > xs.size() - k || concat_axis(v) != axis ||
            g_.tensor(v.outputs[0]).layout != layout || uses_.is_output[static_cast<size_t>(v.outputs[0].id)])
          continue;
        bool run = true;
        for (size_t j = 0; j < vs.size() && run; ++j) run = vs[j] == xs[k + j];
        if (!run) continue;
        groups_[static_cast<size_t>(gid)].kind = GroupKind::concat_elided;
        groups_[static_cast<size_t>(gid)].view_of = root.outputs[0];
      }
    }
  }

  const Graph& g_;
  const PlanOptions& o_;
  const Uses& uses_;
  const std::vector<bool>& isolated_;
  std::vector<int32_t> group_of_;
  std::vector<uint8_t> past_view_;  // per node: computed past its group's transpose (Building::view_node)
  std::vector<Building> groups_;
  // Scratch of depends_on / creates_cycle, reused across calls.
  mutable std::vector<uint32_t> seen_stamp_;  // per group: the search that last reached it
  mutable uint32_t stamp_ = 0;
  mutable std::vector<int32_t> dep_stack_, dep_inputs_, cycle_inputs_;
};

}  // namespace

bool prologue_operand(const Node& n, const TensorInfo& t, const Shape& shape, int channel, bool per_image) {
  if (t.shape.numel() == 1) return true;
  if (t.shape.rank() == 1 && t.shape[0] == shape[channel]) {
    if (*n.op == OpId::bias_add) {
      auto ax = normalize_axis(std::get<int64_t>(n.attrs.at("axis")), shape.rank());
      return ax && *ax == channel;
    }
    if (*n.op == OpId::batch_norm) return channel == 1;
  }
  if (t.shape.rank() > shape.rank()) return false;
  for (int i = 0; i < t.shape.rank(); ++i) {  // NumPy broadcasting: trailing dims aligned
    const int d = shape.rank() - t.shape.rank() + i;
    if (t.shape[i] == 1) continue;
    if (t.shape[i] != shape[d] || !(d == channel || (per_image && d == 0))) return false;
  }
  return true;
}

Status fuse(Graph& g, PassContext& ctx) {
  const Uses& uses = ctx.uses(g);
  Fuser f(g, ctx.options, uses, ctx.isolated);
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
    grp.view_of = bs[static_cast<size_t>(gid)].view_of;
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
  return {};
}

}  // namespace kiln
