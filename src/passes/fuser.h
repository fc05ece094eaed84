// The fusion pass's working state (src/passes/fusion.h says what the pass does): the groups as they are
// built and the Fuser that builds them. Shared by fusion.cpp (placing ops, joins, the group order),
// fusion_loads.cpp (prologues and load transforms) and fusion_concat.cpp (concats elided in place).
#pragma once

#include <algorithm>
#include <set>
#include <vector>

#include "ops/registry.h"
#include "passes/fusion.h"
#include "passes/separations.h"

namespace kiln::fusion_detail {

// The kind of group node `n` starts (read from Uses: the node itself is not touched).
inline GroupKind master_kind(const Graph& g, const Uses& uses, int32_t n) {
  const OpDef& def = op_def(uses.op(n));
  if (def.anchors) return *def.anchors;
  switch (def.kind) {
    case FusionKind::pointwise: return GroupKind::pointwise;
    case FusionKind::layout: {
      const TensorInfo& x = g.tensor(uses.inputs(n)[0]);  // port x
      const bool weight = x.kind == TensorKind::parameter && is_weight_layout(g.tensor(uses.outputs(n)[0]).layout);
      return weight ? GroupKind::weight_transform : GroupKind::layout;
    }
    case FusionKind::opaque: return def.inputs[0].list ? GroupKind::concat : GroupKind::other;
    default: return GroupKind::other;
  }
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
  int32_t row_norm = -1;   // a layer_norm joined as the depthwise conv's row epilogue (Fuser::join_row_norm)
  int32_t reduction = -1;  // a channel reduction joined as the conv's reduction epilogue (join_reduction_epilogue)
  std::vector<int32_t> prologue;  // the group absorbed as the anchor's prologue (Fuser::absorb_prologue)
  int32_t prologue_norm = -1;     // that group's layer norm, when it was a norm group (a LayerNorm2d prologue)
  Tensor view_of{};               // an elided concat that is a view of a larger one's output: that output
  Shape domain;  // a pointwise group: the broadcast of its values' shapes (its kernel's one domain; add_to)
};

class Fuser {
 public:
  Fuser(const Graph& g, const PlanOptions& o, const Uses& uses, const std::vector<bool>& isolated, FusionNotes& notes)
      : g_(g),
        o_(o),
        uses_(uses),
        isolated_(isolated),
        notes_(notes),
        group_of_(g.nodes().size(), -1),
        past_view_(g.nodes().size(), 0) {
    // At most one group per node. Reserved room costs no memory until used, while regrowing moves every
    // Building (a few hundred bytes each) and touches twice the pages.
    groups_.reserve(g.nodes().size());
  }

  void run() {
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes().size()); ++i) place(i);
    merge_load_transforms();
    elide_concats();
  }

  std::vector<Building>& groups() { return groups_; }
  Building& group(int32_t gid) { return groups_[static_cast<size_t>(gid)]; }
  const Building& group(int32_t gid) const { return groups_[static_cast<size_t>(gid)]; }
  const PerIndex<int32_t>& group_of() const { return group_of_; }

 private:
  int32_t producer_group(Tensor t) const {
    const int32_t p = uses_.producer(t);
    return p < 0 ? -1 : group_of_[p];
  }

  // Groups whose values node `n` reads, other than `except`, into `s` (a short list: a node has few inputs).
  // Callers pass their own scratch list: planning a 100k-node graph asks this several times per node.
  void input_groups(int32_t n, int32_t except, std::vector<int32_t>& s) const {
    s.clear();
    for (Tensor t : uses_.inputs(n)) {
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
    seen_stamp_[from] = stamp;
    const int32_t floor = group(target).min_node;
    while (!stack.empty()) {
      int32_t x = stack.back();
      stack.pop_back();
      if (x == target) return true;
      for (int32_t n : group(x).nodes) {
        input_groups(n, x, dep_inputs_);
        for (int32_t h : dep_inputs_) {
          uint32_t& seen = seen_stamp_[h];
          if (group(h).max_node < floor || seen == stamp) continue;
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
  Apart cycle(int32_t through) const { return kept_apart(SeparationRule::cycle, group(through).master); }

  // An operand of an epilogue op: a scalar, a per-channel vector or a tensor of the output's full shape.
  bool epilogue_operand(int32_t n, const TensorInfo& o, const Shape& out, int channel_axis) const {
    if (o.shape.numel() == 1) return true;
    if (o.shape == out) return true;
    const int64_t C = out[channel_axis];
    if (o.shape.rank() == 1 && o.shape[0] == C) {
      const Attrs& attrs = g_.node(n).attrs;
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
    for (Tensor t : uses_.inputs(n)) {
      if (producer_group(t) != gid) continue;
      (past_view_[uses_.producer(t)] ? past : before)++;
    }
    return past && before ? -1 : past ? 1 : 0;
  }

  // May node `n` join group `gid` (reached through its producer `via_producer`)? If not, the rule that says no.
  // Whether node n reads `t` at a per-channel vector port (bias_add's bias, batch_norm's statistics) whose axis is
  // not n's last dim. A pointwise group reads a value it computed at the element's NumPy-broadcast coordinate,
  // which would index such a vector along the last dim: a batch norm whose mean a [C] op computes (training-mode
  // batch norm) must read it from memory, as a channel operand.
  bool reads_channel_vector(int32_t n, Tensor t) const {
    const OpDef& def = op_def(uses_.op(n));
    const Node& nd = g_.node(n);
    const int rank = g_.tensor(nd.outputs[0]).shape.rank();
    const std::optional<int> axis = channel_vector_axis(nd, rank);
    if (axis && *axis == rank - 1) return false;
    for (size_t p = 0; p < nd.inputs.size() && p < def.inputs.size(); ++p)
      if (def.inputs[p].channel_vector && std::find(nd.inputs[p].begin(), nd.inputs[p].end(), t) != nd.inputs[p].end())
        return true;
    return false;
  }
  // The first input of n that a group `gid` computes and n reads as a per-channel vector (reads_channel_vector).
  std::optional<Tensor> channel_operand_from(int32_t n, int32_t gid) const {
    // Most ops have no such port: the registry row answers before any node is read (a hot path at 100k nodes).
    const auto& ports = op_def(uses_.op(n)).inputs;
    if (std::none_of(ports.begin(), ports.end(), [](const PortSpec& p) { return p.channel_vector; }))
      return std::nullopt;
    for (Tensor t : uses_.inputs(n))
      if (producer_group(t) == gid && reads_channel_vector(n, t)) return t;
    return std::nullopt;
  }

  Apart join_refusal(int32_t n, int32_t gid, int32_t via_producer) const {
    const Building& b = group(gid);
    if (!b.alive) return kept_apart(SeparationRule::unrecorded);
    if (is_isolated(n)) return split(n);
    if (is_isolated(b.master)) return split(b.master);
    if (b.closed) return kept_apart(SeparationRule::store_transform, b.nodes.back());
    if (static_cast<int>(b.nodes.size()) >= o_.max_group_ops) return kept_apart(SeparationRule::max_group_size);
    const int past = past_view(n, gid);
    if (past < 0) return kept_apart(SeparationRule::view_domains);
    if (b.reduction >= 0) {  // the reduction's result exists only once the kernel's last block computed it
      const Tensor pooled = uses_.outputs(b.reduction)[0];
      for (Tensor t : uses_.inputs(n))
        if (t == pooled) return kept_apart(SeparationRule::reduction_result, b.reduction);
    }
    // Operands from Uses (flat arrays): the node itself is read only for an epilogue's `axis` attribute.
    const bool store_transform = op_def(uses_.op(n)).kind == FusionKind::layout;
    if (store_transform && !op_def(uses_.op(n)).store_view) return kept_apart(SeparationRule::keeps_part);
    if (store_transform) {
      // Only as the final store of the value it converts, when nothing else reads that value.
      const Tensor x = uses_.inputs(n)[0];
      for (int32_t c : uses_.consumers(x))
        if (c != n) return kept_apart(SeparationRule::store_value_shared, x.id, c);
      if (uses_.is_output(x)) return kept_apart(SeparationRule::store_value_output, x.id);
      if (!accepts_epilogue(b.kind)) return kept_apart(SeparationRule::takes_no_epilogue, static_cast<int32_t>(b.kind));
    } else if (!accepts_epilogue(b.kind)) {
      return kept_apart(SeparationRule::takes_no_epilogue, static_cast<int32_t>(b.kind));
    } else if (b.kind == GroupKind::pointwise) {
      // One grid-stride loop walks one domain: the op's output must broadcast with the group's values (else
      // the pointwise family would refuse the group, and the split would plan each of its ops alone).
      const Shape& out = g_.tensor(uses_.outputs(n)[0]).shape;
      if (out != b.domain && !broadcast_shapes(b.domain, out))
        return kept_apart(SeparationRule::domain_shape, b.master);
      if (const std::optional<Tensor> t = channel_operand_from(n, gid))
        return kept_apart(SeparationRule::channel_operand, t->id);
    } else {
      const Shape& out = past ? b.view_shape : g_.tensor(uses_.outputs(b.master)[0]).shape;
      if (g_.tensor(uses_.outputs(n)[0]).shape != out) return kept_apart(SeparationRule::output_shape, b.master);
      const int ch = past ? b.view_channel : b.kind == GroupKind::matmul ? out.rank() - 1 : 1;
      for (Tensor t : uses_.inputs(n)) {
        if (producer_group(t) == gid) continue;
        if (!epilogue_operand(n, g_.tensor(t), out, ch)) return kept_apart(SeparationRule::operand_shape, t.id);
      }
    }
    if (const int32_t h = cycle_through(n, gid); h >= 0) return cycle(h);
    if (o_.policy && !o_.policy(g_, via_producer, n)) return kept_apart(SeparationRule::policy);
    return {};
  }

  void add_to(int32_t n, int32_t gid) {
    Building& b = group(gid);
    const bool past = b.view_node >= 0 && past_view(n, gid) > 0;
    b.nodes.push_back(n);
    b.min_node = std::min(b.min_node, n);
    b.max_node = std::max(b.max_node, n);
    group_of_[n] = gid;
    past_view_[n] = past;
    const OpId op = uses_.op(n);
    if (b.kind == GroupKind::pointwise && op_def(op).kind == FusionKind::pointwise) {
      const Shape& out = g_.tensor(uses_.outputs(n)[0]).shape;
      if (out != b.domain) b.domain = broadcast_shapes(b.domain, out).value_or(b.domain);  // (no allocation when equal)
    }
    if (op_def(op).kind != FusionKind::layout) return;
    // A conv's or matmul's first transposed store does not end the epilogue: the ops past it compute at
    // the permuted coordinate. Any other store transform does.
    if (op == OpId::transpose && b.view_node < 0 && !past &&
        (b.kind == GroupKind::conv || b.kind == GroupKind::matmul)) {
      const Node& nd = g_.node(n);
      const auto& perm = std::get<std::vector<int64_t>>(nd.attrs.at("perm"));
      const int rank = static_cast<int>(perm.size());
      const int channel = b.kind == GroupKind::matmul ? rank - 1 : 1;  // the anchor's channel, moved
      b.view_node = n;
      b.view_shape = g_.tensor(nd.outputs[0]).shape;
      b.view_channel = static_cast<int>(std::find(perm.begin(), perm.end(), channel) - perm.begin());
      past_view_[n] = true;
      return;
    }
    b.closed = true;
  }

  // Why pointwise group `h` may not merge into pointwise group `gid` (which just took op `n`, reading h's
  // node `via`, after joining gid through `joined`), if it may not: both plain pointwise groups (no store
  // transform closing either), no node of h planned alone, within the size limit, of domains that
  // broadcast, no other group both reading one of them and reading from the other (the merged group would
  // then wait for itself), and the policy's yes for (via, n).
  Apart merge_refusal(int32_t h, int32_t gid, Tensor joined, int32_t via, int32_t n) const {
    const Building& a = group(gid);
    const Building& b = group(h);
    if (a.kind != GroupKind::pointwise || b.kind != GroupKind::pointwise || !b.alive || b.closed || a.closed)
      return kept_apart(SeparationRule::joined_other, joined.id);
    for (int32_t m : b.nodes)
      if (is_isolated(m)) return split(m);
    if (static_cast<int>(a.nodes.size() + b.nodes.size()) > o_.max_group_ops)
      return kept_apart(SeparationRule::max_group_size);
    if (a.domain != b.domain && !broadcast_shapes(a.domain, b.domain))
      return kept_apart(SeparationRule::domain_shape, b.master);
    if (const std::optional<Tensor> t = channel_operand_from(n, h))
      return kept_apart(SeparationRule::channel_operand, t->id);
    for (const Building* part : {&a, &b}) {
      for (int32_t m : part->nodes) {
        input_groups(m, -1, merge_inputs_);
        for (int32_t x : merge_inputs_) {
          if (x != gid && x != h && (depends_on(x, gid) || depends_on(x, h))) return cycle(x);
        }
      }
    }
    if (o_.policy && !o_.policy(g_, via, n)) return kept_apart(SeparationRule::policy);
    return {};
  }

  // Moves every node of pointwise group `h` into `gid` (merge_refusal said yes).
  void merge_into(int32_t h, int32_t gid) {
    std::vector<int32_t> nodes = std::move(group(h).nodes);
    group(h).nodes.clear();
    group(h).alive = false;
    for (int32_t m : nodes) add_to(m, gid);
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
    const auto inputs = uses_.inputs(n);
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
        // The producers it did not try: their pointwise groups merge into this one where they can (an LSTM
        // cell's gates, a gated unit's two halves); the others stay apart, the op having joined one group.
        for (size_t k = i + 1; k < inputs.size(); ++k) {
          const int32_t h = producer_group(inputs[k]);
          if (h < 0 || h == gid) continue;
          if (const Apart no = merge_refusal(h, gid, inputs[i], uses_.producer(inputs[k]), n); no) {
            note(n, uses_.producer(inputs[k]), no);
          } else {
            merge_into(h, gid);
          }
        }
        return;
      }
    }
    if (kind == GroupKind::norm && join_row_norm(n)) return;
    if (op_def(uses_.op(n)).channel_reduction && join_reduction_epilogue(n)) return;
    const int32_t gid = new_group(n);
    // Its input x may join it as a prologue.
    const bool prologue = accepts_prologue(kind);
    if (kind != GroupKind::pointwise && kind != GroupKind::layout) {
      for (size_t i = prologue ? 1 : 0; i < inputs.size(); ++i) {
        if (uses_.producer(inputs[i]) >= 0)
          note(n, uses_.producer(inputs[i]), kept_apart(SeparationRule::starts_kernel, static_cast<int32_t>(kind)));
      }
    }
    if (prologue && is_isolated(n) && uses_.producer(inputs[0]) >= 0) note(n, uses_.producer(inputs[0]), split(n));
    if (prologue && !is_isolated(n)) absorb_prologue(n, gid);
  }

  // A layer norm over the channels of a depthwise conv's output, seen past the conv group's transpose
  // (ConvNeXt: dwconv -> permute(0, 2, 3, 1) -> layer_norm), joins that group as a *row epilogue*: its
  // kernel computes all channels of a pixel in one block (at most kMaxRowNormChannels) and normalizes them
  // there. Defined in fusion_loads.cpp.
  bool join_row_norm(int32_t n);

  // A per-channel reduction (OpDef::channel_reduction: a global average pool, batch-norm statistics) of a
  // value a group that takes one (a conv group) computes after its anchor (the anchor's output or an
  // epilogue value, at the conv's coordinates) joins that group as its *reduction epilogue*: the kernel
  // stores the value as it would anyway, then sums per channel (and image) what each block stored, and the
  // last block of each channel tile adds the partial sums (squeeze-excite: the pool after a depthwise or
  // grouped conv, whose value the excitation's scale reads again; a training batch norm's statistics of
  // the conv's output). One per group, not with a row norm or past a transpose. Defined in fusion_loads.cpp.
  bool join_reduction_epilogue(int32_t n);

  // Why the pointwise group `pid` computing conv / matmul n's input (port 0) cannot be its prologue, if it
  // cannot: it must compute that input, of one shape throughout, from one tensor of that shape read from
  // memory, every other operand a prologue_operand. (absorb_prologue checks that nothing else reads it.)
  Apart prologue_refusal(int32_t n, int32_t pid) const;
  // Why the norm group `pid` cannot be conv n's *layer-norm prologue*, if it cannot: it must be ConvNeXt's
  // LayerNorm2d (permute(0, 2, 3, 1) -> layer_norm over the channels -> permute(0, 3, 1, 2)) with the
  // norm's input and affine from memory, and the conv's windows must not overlap (R <= stride, S <= stride:
  // its downsampling 2x2 / stride 2), not depthwise. The conv kernel then computes each pixel's mean and
  // variance over its tile before its main loop and normalizes every element it loads.
  Apart norm_prologue_refusal(int32_t n, int32_t pid) const;

  // A norm, pool, conv or matmul takes in the pointwise group that computes its input when nothing else
  // reads it.
  void absorb_prologue(int32_t n, int32_t gid);

  // A layout conversion or transpose whose readers all sit in one kernel group becomes that group's load:
  // the kernel reads the source through the op's view (OpDef::view: an address computation, no extra pass
  // over memory).
  void merge_load_transforms();

  // Concats that cost no kernel (GroupKind::concat_elided). A root concat's inputs are written by their
  // producers straight into their slices of its output; a concat whose inputs are a run of a root's inputs
  // is a view of that output (a DenseNet block: each concat re-concatenates a prefix of the next one's
  // inputs, and all are views of the block's last, largest concat). Largest concats are tried first, so a
  // chain's biggest concat is its root. A tensor is written into one root only: a concat that reads a
  // tensor placed elsewhere (or a graph input or parameter, which nothing writes) stays a copy.
  void elide_concats();

  const Node& concat_node(int32_t gid) const;

  int concat_axis(const Node& c) const;

  bool concat_candidate(int32_t gid) const;

  // Whether every input of concat group `r` can be written into its slice: produced by a kernel group that
  // stores through memory views (not a graph input or parameter, which nothing writes; not a transpose or
  // reshape, whose stores move coordinates), in the concat's layout, not a graph output (that lives in its
  // binding), once in the concat and in no other root. Other readers of an input are fine: they read the
  // slice. (A group closed by a store conversion may write other values into slices.)
  bool can_root(int32_t r, const PerTensor<bool>& placed) const;

  // Makes every concat whose inputs are a run of root `r`'s inputs (same axis and layout, not a graph
  // output: that needs memory of its own) a view of r's output.
  void claim_views(int32_t r);

  const Graph& g_;
  const PlanOptions& o_;
  const Uses& uses_;
  const std::vector<bool>& isolated_;
  FusionNotes& notes_;
  PerIndex<int32_t> group_of_;
  PerIndex<uint8_t> past_view_;  // per node: computed past its group's transpose (Building::view_node)
  std::vector<Building> groups_;
  // Scratch of depends_on / cycle_through, reused across calls.
  mutable PerIndex<uint32_t> seen_stamp_;  // per group: the search that last reached it
  mutable uint32_t stamp_ = 0;
  mutable std::vector<int32_t> dep_stack_, dep_inputs_, cycle_inputs_, merge_inputs_;
};

}  // namespace kiln::fusion_detail
