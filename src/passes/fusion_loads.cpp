// The fusion pass's prologues and load transforms: the pointwise group computing a norm's, pool's, conv's
// or matmul's input joins it as a prologue; a layout conversion or transpose read by one group becomes its
// load (see src/passes/fusion.h).
#include "passes/fuser.h"

namespace kiln::fusion_detail {

Apart Fuser::prologue_refusal(int32_t n, int32_t pid) const {
  const Node& anchor = g_.node(n);
  const Tensor x = anchor.inputs[0][0];
  const Shape& shape = g_.tensor(x).shape;
  const bool conv = *anchor.op == OpId::conv2d;
  if (!conv && (shape.rank() < 2 || std::get<bool>(anchor.attrs.at("transpose_a"))))
    return kept_apart(SeparationRule::prologue_operand);
  const int channel = conv ? 1 : shape.rank() - 1;
  int sources = 0;
  for (int32_t m : group(pid).nodes) {
    const Node& nd = g_.node(m);
    if (op_def(*nd.op).kind == FusionKind::layout) {  // a load transform of the group's input
      if (producer_group(nd.inputs[0][0]) == pid) return kept_apart(SeparationRule::prologue_operand, m);
      continue;
    }
    // One shape and one storage type throughout (a cast in front of the conv changes what the kernel
    // loads: the group computing it stays a kernel of its own).
    const TensorInfo& out = g_.tensor(nd.outputs[0]);
    if (out.shape != shape || out.dtype != g_.tensor(x).dtype) return kept_apart(SeparationRule::prologue_operand, m);
    for (const auto& port : nd.inputs) {
      for (Tensor t : port) {
        const int32_t h = producer_group(t);
        const bool inside = h == pid && op_def(*g_.node(uses_.producer(t)).op).kind != FusionKind::layout;
        if (inside) continue;
        if (g_.tensor(t).shape == shape) {
          if (++sources > 1 || g_.tensor(t).dtype != g_.tensor(x).dtype)
            return kept_apart(SeparationRule::prologue_operand, m, t.id);
        } else if (!prologue_operand(nd, g_.tensor(t), shape, channel, conv)) {
          return kept_apart(SeparationRule::prologue_operand, m, t.id);
        }
      }
    }
  }
  return sources == 1 ? Apart{} : kept_apart(SeparationRule::prologue_operand);
}

Apart Fuser::norm_prologue_refusal(int32_t n, int32_t pid) const {
  const Node& conv = g_.node(n);
  const Building& p = group(pid);
  const Apart no = kept_apart(SeparationRule::prologue_kind, static_cast<int32_t>(GroupKind::norm));
  if (p.nodes.size() != 2) return no;
  const Node& ln = g_.node(p.nodes[0]);
  const Node& tr = g_.node(p.nodes[1]);
  // layer_norm over the last dim of [N, H, W, C], then permute(0, 3, 1, 2) back to the conv's x.
  if (*ln.op != OpId::layer_norm || std::get<int64_t>(ln.attrs.at("normalized_ndim")) != 1 ||
      *tr.op != OpId::transpose || tr.inputs[0][0] != ln.outputs[0] || tr.outputs[0] != conv.inputs[0][0] ||
      std::get<std::vector<int64_t>>(tr.attrs.at("perm")) != std::vector<int64_t>{0, 3, 1, 2})
    return no;
  for (const auto& port : ln.inputs)
    for (Tensor t : port)
      if (producer_group(t) == pid) return no;
  // Each row of the implicit GEMM reads its own pixels (windows that do not overlap), one conv per group's
  // channels: the kernel normalizes the pixels of its tile once (a stats pass per row and tap).
  const Shape& w = g_.tensor(conv.inputs[1][0]).shape;
  const auto& stride = std::get<std::vector<int64_t>>(conv.attrs.at("stride"));
  const auto& dilation = std::get<std::vector<int64_t>>(conv.attrs.at("dilation"));
  const int64_t groups = std::get<int64_t>(conv.attrs.at("groups"));
  if (w[2] > stride[0] || w[3] > stride[1] || dilation[0] != 1 || dilation[1] != 1 || (groups > 1 && w[1] == 1))
    return kept_apart(SeparationRule::prologue_operand, p.nodes[0]);
  return {};
}

void Fuser::absorb_prologue(int32_t n, int32_t gid) {
  const Tensor x = uses_.inputs(n)[0];  // port x
  const int32_t pid = producer_group(x);
  if (pid < 0) return;
  const int32_t xp = uses_.producer(x);
  Building& p = group(pid);
  const OpId op = *g_.node(n).op;
  const bool norm = p.kind == GroupKind::norm && op == OpId::conv2d;  // a layer-norm prologue
  if (p.kind != GroupKind::pointwise && !norm)
    return note(n, xp, kept_apart(SeparationRule::prologue_kind, static_cast<int32_t>(p.kind)));
  if (p.closed && !norm) return note(n, xp, kept_apart(SeparationRule::store_transform, p.nodes.back()));
  if (is_isolated(p.master)) return note(n, xp, split(p.master));
  if (static_cast<int>(p.nodes.size()) + 1 > o_.max_group_ops)
    return note(n, xp, kept_apart(SeparationRule::max_group_size));
  if (norm) {
    if (Apart why = norm_prologue_refusal(n, pid)) return note(n, xp, why);
  } else if (op == OpId::conv2d || op == OpId::matmul) {
    if (Apart why = prologue_refusal(n, pid)) return note(n, xp, why);
  }
  for (int32_t m : p.nodes) {
    for (Tensor t : uses_.outputs(m)) {
      if (uses_.is_output(t)) return note(n, xp, kept_apart(SeparationRule::prologue_value_output, t.id));
      for (int32_t c : uses_.consumers(t)) {
        if (c != n && group_of_[c] != pid)
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
  Building& b = group(gid);
  for (int32_t m : p.nodes) group_of_[m] = gid;
  b.prologue = p.nodes;
  if (norm) b.prologue_norm = p.master;
  b.nodes.insert(b.nodes.begin(), p.nodes.begin(), p.nodes.end());
  b.min_node = std::min(b.min_node, p.min_node);
  p.alive = false;
  p.nodes.clear();
}

void Fuser::merge_load_transforms() {
  for (size_t gid = 0; gid < groups_.size(); ++gid) {
    Building& b = groups_[gid];
    if (!b.alive || b.kind != GroupKind::layout || b.nodes.size() != 1) continue;
    const Node& n = g_.node(b.nodes[0]);
    const Tensor y = n.outputs[0];
    // Why the conversion stays a kernel of its own, noted against each of its readers.
    auto refuse = [&](Apart why) {
      for (int32_t c : uses_.consumers(y)) note(c, b.nodes[0], why);
    };
    if (is_isolated(b.nodes[0])) {
      refuse(split(b.nodes[0]));
      continue;
    }
    const TensorInfo& x = g_.tensor(n.inputs[0][0]);
    const TensorInfo& yi = g_.tensor(y);
    if (!op_def(*n.op).view || !op_def(*n.op).view(n, x.shape, yi.shape, layout_strides(x.shape, x.layout))) {
      // (a reshape that merges dims its input's layout does not keep contiguous re-indexes memory)
      refuse(kept_apart(SeparationRule::load_reorders));
      continue;
    }
    if (uses_.is_output(y)) {
      refuse(kept_apart(SeparationRule::load_value_output, y.id));
      continue;
    }
    std::set<int32_t> readers;
    for (int32_t c : uses_.consumers(y)) readers.insert(group_of_[c]);
    if (readers.size() != 1) {
      refuse(kept_apart(SeparationRule::load_readers, y.id, static_cast<int32_t>(readers.size())));
      continue;
    }
    const int32_t target = *readers.begin();
    Building& t = group(target);
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
    } else if (o_.policy && !o_.policy(g_, b.nodes[0], uses_.consumers(y)[0])) {
      why = kept_apart(SeparationRule::policy);
    }
    if (why) {
      refuse(why);
      continue;
    }
    group_of_[b.nodes[0]] = target;
    t.nodes.push_back(b.nodes[0]);
    t.min_node = std::min(t.min_node, b.nodes[0]);
    b.alive = false;
    b.nodes.clear();
  }
}

bool Fuser::join_row_norm(int32_t n) {
  const Node& nd = g_.node(n);
  if (*nd.op != OpId::layer_norm || std::get<int64_t>(nd.attrs.at("normalized_ndim")) != 1 || is_isolated(n))
    return false;
  const Tensor x = nd.inputs[0][0];
  const int32_t gid = producer_group(x);
  if (gid < 0) return false;
  Building& b = group(gid);
  if (!b.alive || b.closed || b.kind != GroupKind::conv || b.view_node < 0 || b.row_norm >= 0 ||
      is_isolated(b.master) || static_cast<int>(b.nodes.size()) >= o_.max_group_ops)
    return false;
  const Node& anchor = g_.node(b.master);
  const Shape& xs = g_.tensor(anchor.inputs[0][0]).shape;
  if (std::get<int64_t>(anchor.attrs.at("groups")) != xs[1]) return false;  // depthwise only
  const Shape& s = g_.tensor(x).shape;
  if (!past_view_[uses_.producer(x)] || s != b.view_shape || b.view_channel != s.rank() - 1 ||
      s[s.rank() - 1] > kMaxRowNormChannels)
    return false;
  for (size_t p = 1; p < nd.inputs.size(); ++p) {  // scale and shift come from memory
    if (!nd.inputs[p].empty() && producer_group(nd.inputs[p][0]) == gid) return false;
  }
  if (cycle_through(n, gid) >= 0 || (o_.policy && !o_.policy(g_, uses_.producer(x), n))) return false;
  add_to(n, gid);
  b.row_norm = n;
  past_view_[n] = true;
  return true;
}

bool Fuser::join_reduction_epilogue(int32_t n) {
  if (is_isolated(n)) return false;
  const Tensor x = uses_.inputs(n)[0];
  const int32_t gid = producer_group(x);
  if (gid < 0) return false;
  Building& b = group(gid);
  if (!b.alive || b.closed || !accepts_reduction(b.kind) || b.view_node >= 0 || b.row_norm >= 0 || b.reduction >= 0 ||
      is_isolated(b.master) || static_cast<int>(b.nodes.size()) >= o_.max_group_ops)
    return false;
  // A value after the anchor (a prologue value comes before it, at the input's coordinates), of its shape.
  if (uses_.producer(x) < b.master || g_.tensor(x).shape != g_.tensor(uses_.outputs(b.master)[0]).shape) return false;
  if (cycle_through(n, gid) >= 0 || (o_.policy && !o_.policy(g_, uses_.producer(x), n))) return false;
  add_to(n, gid);
  b.reduction = n;
  return true;
}

}  // namespace kiln::fusion_detail
