// The fusion pass's concats elided in place: roots whose producers write straight into their slices, and
// concats that are views of a root (see src/passes/fusion.h).
#include "passes/fuser.h"

namespace kiln::fusion_detail {

void Fuser::elide_concats() {
  std::vector<int32_t> cands;
  for (int32_t gid = 0; gid < static_cast<int32_t>(groups_.size()); ++gid)
    if (concat_candidate(gid)) cands.push_back(gid);
  auto inputs_of = [&](int32_t gid) { return concat_node(gid).inputs[0].size(); };
  std::stable_sort(cands.begin(), cands.end(), [&](int32_t a, int32_t b) { return inputs_of(a) > inputs_of(b); });
  PerTensor<bool> placed(g_.tensors().size(), false);
  for (int32_t r : cands) {
    if (group(r).kind != GroupKind::concat || !can_root(r, placed)) continue;
    group(r).kind = GroupKind::concat_elided;
    for (Tensor t : concat_node(r).inputs[0]) placed[t] = true;
    claim_views(r);
  }
}

const Node& Fuser::concat_node(int32_t gid) const { return g_.node(group(gid).nodes[0]); }

int Fuser::concat_axis(const Node& c) const {
  return *normalize_axis(std::get<int64_t>(c.attrs.at("axis")), g_.tensor(c.outputs[0]).shape.rank());
}

bool Fuser::concat_candidate(int32_t gid) const {
  const Building& b = group(gid);
  return b.alive && b.kind == GroupKind::concat && b.nodes.size() == 1 && !is_isolated(b.nodes[0]) &&
         *concat_node(gid).op == OpId::concat;
}

bool Fuser::can_root(int32_t r, const PerTensor<bool>& placed) const {
  const Node& c = concat_node(r);
  const Layout layout = g_.tensor(c.outputs[0]).layout;
  std::set<int32_t> seen;
  for (Tensor t : c.inputs[0]) {
    const int32_t gid = producer_group(t);
    if (gid < 0 || placed[t] || !seen.insert(t.id).second || uses_.is_output(t) || !accepts_epilogue(group(gid).kind) ||
        g_.tensor(t).layout != layout)
      return false;
    const OpId op = uses_.op(uses_.producer(t));
    if (op_def(op).kind == FusionKind::layout && op != OpId::layout_convert) return false;
  }
  return true;
}

void Fuser::claim_views(int32_t r) {
  const Node& root = concat_node(r);
  const auto& xs = root.inputs[0];
  const int axis = concat_axis(root);
  const Layout layout = g_.tensor(root.outputs[0]).layout;
  for (size_t k = 0; k < xs.size(); ++k) {
    for (int32_t n : uses_.consumers(xs[k])) {
      const int32_t gid = group_of_[n];
      if (gid == r || !concat_candidate(gid)) continue;
      const Node& v = concat_node(gid);
      const auto& vs = v.inputs[0];
      // Asked once per view: from its first input.
      if (vs[0] != xs[k] || vs.size() > xs.size() - k || concat_axis(v) != axis ||
          g_.tensor(v.outputs[0]).layout != layout || uses_.is_output(v.outputs[0]))
        continue;
      bool run = true;
      for (size_t j = 0; j < vs.size() && run; ++j) run = vs[j] == xs[k + j];
      if (!run) continue;
      group(gid).kind = GroupKind::concat_elided;
      group(gid).view_of = root.outputs[0];
    }
  }
}

}  // namespace kiln::fusion_detail
