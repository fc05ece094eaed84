#include "passes/separations.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "ir/id_tables.h"
#include "ops/registry.h"
#include "passes/pass.h"

namespace kiln {

std::string_view separation_rule_name(SeparationRule r) {
  switch (r) {
#define KILN_X(e, n) \
  case SeparationRule::e: return n;
    KILN_SEPARATION_RULES(KILN_X)
#undef KILN_X
  }
  return "?";
}

void FusionNotes::finish() {
  std::sort(notes_.begin(), notes_.end(), [](const Note& x, const Note& y) {
    return std::tie(x.consumer, x.producer, x.seq) < std::tie(y.consumer, y.producer, y.seq);
  });
}

const Apart* FusionNotes::find(int32_t consumer, int32_t producer) const {
  // The last of the pair's notes: the first note of a greater pair, one back.
  auto it = std::upper_bound(notes_.begin(), notes_.end(), std::pair{consumer, producer},
                             [](const std::pair<int32_t, int32_t>& key, const Note& n) {
                               return key < std::pair{n.consumer, n.producer};
                             });
  if (it == notes_.begin()) return nullptr;
  --it;
  return it->consumer == consumer && it->producer == producer ? &it->why : nullptr;
}

namespace {

// What the reasons are written from: the plan.
struct Context {
  const Plan& plan;

  const Node& node(int32_t n) const { return plan.graph.node(n); }
  std::string_view op(int32_t n) const { return node(n).op ? op_name(*node(n).op) : node(n).op_text; }
  const TensorInfo& tensor(int32_t id) const { return plan.graph.tensor(Tensor{id}); }
  std::string shape_of(int32_t n) const { return plan.graph.tensor(node(n).outputs[0]).shape.to_string(); }
  std::string_view kind(int32_t k) const { return group_kind_name(static_cast<GroupKind>(k)); }
  // "'a', 'b' and 'c'"
  static std::string names(const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i)
      s += fmt::format("{}'{}'", i == 0 ? "" : i + 1 == v.size() ? " and " : ", ", v[i]);
    return s;
  }
};

std::string starts_kernel_text(const Context& c, const Separation& s, GroupKind kind) {
  const std::string_view op = c.op(s.consumer_node);
  switch (kind) {
    case GroupKind::conv:
    case GroupKind::dgrad:
    case GroupKind::wgrad:
    case GroupKind::matmul: return fmt::format("an anchor ({}) starts its own kernel", op);
    case GroupKind::norm:
    case GroupKind::pool:
      return fmt::format(
          "a {} ({}) starts its own kernel; only the producer of its input 'x' may join it as a prologue",
          group_kind_name(kind), op);
    case GroupKind::concat: return "a concat starts its own group, and this one is not elided: it is a copy kernel";
    default:
      return fmt::format("a {} is a kernel of its own (kind '{}'): no fusion rule joins it", op, group_kind_name(kind));
  }
}

// The split that isolated node `n`: the group no kernel family ran, and every family's reason.
std::string split_text(const Context& c, int32_t n) {
  const std::string& name = c.node(n).name;
  for (const FusionRefusal& r : c.plan.refusals) {
    if (std::find(r.nodes.begin(), r.nodes.end(), name) == r.nodes.end()) continue;
    return fmt::format("split: no kernel family ran the {} group of {} ({}), so '{}' is planned alone",
                       group_kind_name(r.kind), Context::names(r.nodes), r.reason, name);
  }
  return fmt::format("split: '{}' is planned alone (its group was run by no kernel family)", name);
}

std::string fallback_text(const Context& c, const Separation& s) {
  return fmt::format("no fusion rule joins a {} group to a {} group (fusion recorded no decision for this pair)",
                     group_kind_name(c.plan.group(s.producer_group).kind),
                     group_kind_name(c.plan.group(s.consumer_group).kind));
}

// Completes `s` (groups, tensor and producer set): the consumer node of `grp` that reads `via` with the last
// note against `producer`, else the first reader; the rule and its details, those that name a fusion-time
// group or option resolved to the plan's (a cycle's group id, the max group size).
void decide(const PerIndex<int32_t>& group_of, int max_group_ops, const Uses& uses, const FusionNotes& notes,
            const Group& grp, Tensor via, int32_t producer, Separation& s) {
  const Apart* why = nullptr;
  for (int32_t n : grp.nodes) {
    const auto ins = uses.inputs(n);
    if (std::find(ins.begin(), ins.end(), via) == ins.end()) continue;
    if (s.consumer_node < 0) s.consumer_node = n;
    if ((why = notes.find(n, producer)) != nullptr && why->rule != SeparationRule::unrecorded) {
      s.consumer_node = n;
      break;
    }
    why = nullptr;
  }
  if (why == nullptr) return;  // rule unrecorded: the fallback
  s.rule = why->rule;
  s.detail_a = why->a;
  s.detail_b = why->b;
  if (s.rule == SeparationRule::cycle) s.detail_a = group_of[why->a];
  if (s.rule == SeparationRule::max_group_size) s.detail_a = max_group_ops;
}

}  // namespace

std::string separation_reason(const Plan& p, const Separation& s) {
  using R = SeparationRule;
  const Context c{p};
  const int32_t a = s.detail_a, b = s.detail_b;
  const std::string_view cop = c.op(s.consumer_node);
  switch (s.rule) {
    case R::starts_kernel: return starts_kernel_text(c, s, static_cast<GroupKind>(a));
    case R::takes_no_epilogue: return fmt::format("a group of kind '{}' takes no epilogue", c.kind(a));
    case R::store_transform:
      return fmt::format("the producer's group ends in a store transform ('{}'): nothing joins it after that",
                         c.node(a).name);
    case R::max_group_size: return fmt::format("the group reached the max group size ({} ops)", a);
    case R::split: return split_text(c, a);
    case R::store_value_shared:
      return fmt::format("'{}' is also read by '{}': a store transform must be its value's only reader",
                         c.tensor(a).name, c.node(b).name);
    case R::store_value_output:
      return fmt::format("'{}' is a graph output: a store transform must be its value's only use", c.tensor(a).name);
    case R::output_shape:
      return fmt::format("the {}'s output {} is not the shape of the {}'s output {}", cop, c.shape_of(s.consumer_node),
                         c.op(a), c.shape_of(a));
    case R::domain_shape:
      return fmt::format(
          "the {}'s output {} does not broadcast with the values of the pointwise group of '{}' (one kernel walks "
          "one domain)",
          cop, c.shape_of(s.consumer_node), c.node(a).name);
    case R::operand_shape:
      return fmt::format("operand '{}' {} is not a scalar, per-channel vector or full-shape tensor of the output {}",
                         c.tensor(a).name, c.tensor(a).shape.to_string(), c.shape_of(s.consumer_node));
    case R::cycle: return fmt::format("joining would create a cycle (through group {})", a);
    case R::policy: return "the fusion policy refused";
    case R::joined_other:
      return fmt::format("the {} joined the group computing its input '{}' instead: an op joins one group", cop,
                         c.tensor(a).name);
    case R::prologue_kind: {
      // An epilogue op of an anchor's group (ResNet's relu after a conv) is named as such.
      const GroupKind k = static_cast<GroupKind>(a);
      const Node& from = c.node(s.producer_node);
      const bool epilogue = is_anchored(k) && from.op && !op_def(*from.op).anchors;
      if (epilogue)
        return fmt::format(
            "'{}' is in the epilogue of a {} group: a {} takes only a pointwise group of its own as its "
            "prologue",
            from.name, c.kind(a), cop);
      return fmt::format("a {} takes only a pointwise group as its prologue, not a {} group", cop, c.kind(a));
    }
    case R::prologue_value_shared:
      return fmt::format(
          "'{}' is read by another kernel too ('{}'): a prologue's values must stay inside the kernel it "
          "joins",
          c.tensor(a).name, c.node(b).name);
    case R::prologue_value_output:
      return fmt::format("'{}' is a graph output: a prologue's values must stay inside the kernel it joins",
                         c.tensor(a).name);
    case R::prologue_operand:
      if (b >= 0)
        return fmt::format(
            "prologue node '{}' reads '{}' {}: a {} applies only scalars, per-channel vectors and per-image "
            "[N, C, 1, 1] scales to its input as it loads it, from one tensor of the input's shape and type",
            c.node(a).name, c.tensor(b).name, c.tensor(b).shape.to_string(), cop);
      return fmt::format(
          "the pointwise group computing the {}'s input is no prologue it can apply as it loads (it must compute "
          "the input, of one shape and storage type throughout, from one tensor of that shape{})",
          cop, a >= 0 ? fmt::format("; '{}' does not", c.node(a).name) : std::string());
    case R::reduction_result:
      return fmt::format(
          "the {} reads the result of the reduction epilogue '{}', which its kernel's last block computes when "
          "the kernel ends",
          cop, c.node(a).name);
    case R::view_domains:
      return fmt::format("the {} reads values from both sides of its group's transposed store", cop);
    case R::load_reorders:
      return fmt::format(
          "the {} is no strided view of its input's memory (it merges dims the layout does not keep "
          "contiguous): it cannot be a kernel's load",
          c.op(s.producer_node));
    case R::load_value_output:
      return fmt::format("'{}' is a graph output: the conversion is written out, not a load of its reader",
                         c.tensor(a).name);
    case R::load_readers:
      return fmt::format("'{}' is read by {} groups: a conversion becomes a load only when one group reads it",
                         c.tensor(a).name, b);
    case R::takes_no_load: return fmt::format("a group of kind '{}' takes no load transform", c.kind(a));
    case R::keeps_part:
      return fmt::format(
          "a {} keeps only part of its input, so it is no store transform: the value is written whole "
          "and the {} reads it",
          cop, cop);
    case R::channel_operand:
      return fmt::format(
          "the {} reads '{}' as a per-channel vector, which a pointwise group can only read from memory (a value "
          "it computes is read at the element's NumPy-broadcast coordinate)",
          cop, c.tensor(a).name);
    case R::unrecorded: break;
  }
  return fallback_text(c, s);
}

void explain_separations(Plan& plan, const Uses& uses, const FusionNotes& notes, int max_group_ops) {
  const PerIndex<int32_t> group_of = group_of_nodes(plan);
  std::vector<Separation> out;
  for (const Group& grp : plan.groups) {
    if (!grp.is_kernel()) continue;
    for (Tensor t : grp.inputs) {
      const int32_t p = uses.producer(t);
      if (p < 0) continue;
      const Group& from = plan.group(group_of[p]);
      if (from.is_kernel()) {
        Separation s;
        s.producer_group = from.id;
        s.consumer_group = grp.id;
        s.producer_node = p;
        s.tensor = t;
        decide(group_of, max_group_ops, uses, notes, grp, t, p, s);
        out.push_back(s);
      } else if (from.kind == GroupKind::concat_elided) {
        // Looked through: each kernel writing a slice of it, to this reader; the note is about the concat.
        for (Tensor u : uses.inputs(p)) {
          const int32_t q = uses.producer(u);
          if (q < 0 || !plan.group(group_of[q]).is_kernel()) continue;
          Separation s;
          s.producer_group = group_of[q];
          s.consumer_group = grp.id;
          s.producer_node = q;
          s.tensor = u;
          s.concat_node = p;
          decide(group_of, max_group_ops, uses, notes, grp, t, p, s);
          out.push_back(s);
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Separation& x, const Separation& y) {
    return std::tie(x.producer_group, x.consumer_group) < std::tie(y.producer_group, y.consumer_group);
  });
  plan.separations = std::move(out);
}

}  // namespace kiln
