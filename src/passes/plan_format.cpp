// The human-readable forms of a Plan (kiln plan --format text, kiln plan --explain; dot is plan_dot.cpp).
//
// Both are deterministic: they depend only on the plan (no addresses, times or hash-map order), so tests
// and documentation can show them verbatim.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ir/text_table.h"
#include "kiln/plan.h"

namespace kiln {
namespace {

std::string node_op(const Node& n) { return n.op ? std::string(op_name(*n.op)) : n.op_text; }

// Where each tensor comes from and goes to, for the annotations of the text form.
struct PlanIndex {
  std::map<int32_t, int32_t> producer_group;  // tensor id -> id of the group that writes it
  std::map<int32_t, const BufferPlacement*> buffer;
  std::vector<bool> is_output;  // per tensor id: a graph output

  explicit PlanIndex(const Plan& p) : is_output(p.graph.tensors().size(), false) {
    for (const Group& grp : p.groups) {
      for (Tensor t : grp.outputs) producer_group.emplace(t.id, grp.id);
    }
    for (const BufferPlacement& b : p.buffers) buffer.emplace(b.tensor.id, &b);
    for (Tensor t : p.graph.outputs()) {
      if (t.valid() && static_cast<size_t>(t.id) < is_output.size()) is_output[static_cast<size_t>(t.id)] = true;
    }
  }
};

std::vector<std::string> tensor_row(const Graph& g, Tensor t, std::string where) {
  const TensorInfo& info = g.tensor(t);
  return {info.name, info.shape.to_string(), std::string(dtype_name(info.dtype)), std::string(layout_name(info.layout)),
          std::move(where)};
}

std::string input_origin(const Plan& p, const PlanIndex& idx, Tensor t) {
  const TensorInfo& info = p.graph.tensor(t);
  if (info.kind != TensorKind::intermediate) return std::string(tensor_kind_name(info.kind));
  auto it = idx.producer_group.find(t.id);
  return it == idx.producer_group.end() ? std::string("intermediate") : fmt::format("from group {}", it->second);
}

std::string output_destination(const Graph& g, const PlanIndex& idx, Tensor t) {
  std::vector<std::string> parts;
  if (static_cast<size_t>(t.id) < idx.is_output.size() && idx.is_output[static_cast<size_t>(t.id)]) {
    parts.push_back("graph output");
  }
  if (auto it = idx.buffer.find(t.id); it != idx.buffer.end()) {
    const BufferPlacement& b = *it->second;
    if (b.alias_of.valid()) {
      parts.push_back(fmt::format("in {} + {} along the concat axis", g.tensor(b.alias_of).name, b.alias_axis_offset));
    } else {
      parts.push_back(fmt::format("workspace @ {}", group_digits(b.offset)));
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string ratio_text(int64_t moved, int64_t unfused) {
  if (unfused <= 0) return "n/a";
  double r = static_cast<double>(moved) / static_cast<double>(unfused);
  if (moved <= 0) return fmt::format("{:.3f}", r);
  // Above 1 the plan moves more than the ops run one by one would (layout conversions at the graph's edges
  // of a small graph can outweigh what fusion saves): said so, not as a fraction of "less".
  if (r > 1.0) return fmt::format("{:.3f} ({:.2f}x more traffic)", r, r);
  if (r == 1.0) return fmt::format("{:.3f} (the same traffic)", r);
  return fmt::format("{:.3f} ({:.2f}x less traffic)", r, static_cast<double>(unfused) / static_cast<double>(moved));
}

}  // namespace

std::string plan_to_text(const Plan& p) {
  const Graph& g = p.graph;
  PlanIndex idx(p);
  int weight_transforms = 0;
  for (const Group& grp : p.groups) weight_transforms += grp.kind == GroupKind::weight_transform ? 1 : 0;
  const int kernels = p.kernel_count();

  std::string out;
  out += fmt::format("plan: {}\n", g.name());
  out += fmt::format("target: {} ({}, {} SMs)\n", p.target.name, p.target.arch, p.target.sm_count);
  out += fmt::format("groups: {} ({} kernel{}, {} weight transform{})\n", p.groups.size(), kernels,
                     kernels == 1 ? "" : "s", weight_transforms, weight_transforms == 1 ? "" : "s");
  for (const Group& grp : p.groups) {
    const std::string family = grp.family == KernelFamilyId::none
                                   ? std::string()
                                   : fmt::format(", kernel family {}", kernel_family_name(grp.family));
    std::string note = grp.kind == GroupKind::weight_transform ? " (once per bound weight)"
                       : grp.is_kernel()                       ? ""
                                                               : " (no kernel)";
    if (grp.view_of.valid()) note = fmt::format(" (no kernel: a view of {})", g.tensor(grp.view_of).name);
    out += fmt::format("\ngroup {}: {}{}{}\n", grp.id, group_kind_name(grp.kind), family, note);
    std::vector<std::vector<std::string>> rows;
    out += "  ops:\n";
    for (int32_t n : grp.nodes) {
      const Node& node = g.node(n);
      rows.push_back({node.name, node_op(node)});
    }
    out += render_table(rows, 4);
    rows.clear();
    out += "  inputs:\n";
    for (Tensor t : grp.inputs) rows.push_back(tensor_row(g, t, input_origin(p, idx, t)));
    if (rows.empty()) out += "    none\n";
    out += render_table(rows, 4);
    rows.clear();
    out += "  outputs:\n";
    for (Tensor t : grp.outputs) rows.push_back(tensor_row(g, t, output_destination(g, idx, t)));
    if (rows.empty()) out += "    none\n";
    out += render_table(rows, 4);
    if (grp.scratch.any()) {
      out += fmt::format("  scratch: {} bytes of counters @ {} (zero at every run), {} bytes of partial sums @ {}\n",
                         group_digits(grp.scratch.counters_bytes), group_digits(grp.scratch.counters_offset),
                         group_digits(grp.scratch.partials_bytes), group_digits(grp.scratch.partials_offset));
    }
    out += fmt::format("  bytes: {} read, {} written\n", group_digits(grp.bytes_read), group_digits(grp.bytes_written));
  }

  // Groups fusion proposed that no kernel family runs on the target, and why: they were split.
  for (const FusionRefusal& r : p.refusals) {
    std::string nodes;
    for (const std::string& n : r.nodes) nodes += fmt::format("{}'{}'", nodes.empty() ? "" : ", ", n);
    out += fmt::format("\nsplit: a {} group of {} (no kernel family runs it: {})\n", group_kind_name(r.kind), nodes,
                       r.reason);
  }

  if (!p.buffers.empty()) {
    out += "\nworkspace buffers:\n";
    std::vector<std::vector<std::string>> rows{{"tensor", "offset", "bytes", "live (groups)", "alias"}};
    for (const BufferPlacement& b : p.buffers) {
      std::string alias;
      if (b.alias_of.valid()) {
        alias = fmt::format("{} + {} along the concat axis", g.tensor(b.alias_of).name, b.alias_axis_offset);
      }
      rows.push_back({g.tensor(b.tensor).name, group_digits(b.offset), group_digits(b.bytes),
                      fmt::format("{}..{}", b.first_group, b.last_group), alias});
    }
    out += render_table(rows, 2);
  }

  out += "\ntotals:\n";
  std::vector<std::vector<std::string>> rows{
      {"kernels:", fmt::format("{}", kernels)},
      {"weight transforms:", fmt::format("{}", weight_transforms)},
      {"workspace:", fmt::format("{} bytes ({})", group_digits(p.workspace_bytes), human_bytes(p.workspace_bytes))},
      {"bytes moved:", fmt::format("{} ({})", group_digits(p.bytes_moved), human_bytes(p.bytes_moved))},
      {"unfused baseline:",
       fmt::format("{} ({})", group_digits(p.unfused_bytes_moved), human_bytes(p.unfused_bytes_moved))},
      {"fused / unfused:", ratio_text(p.bytes_moved, p.unfused_bytes_moved)},
  };
  out += render_table(rows, 2);
  return out;
}

std::string plan_explanation(const Plan& p) {
  std::string out = fmt::format("plan: {}\ntarget: {} ({}, {} SMs)\n", p.graph.name(), p.target.name, p.target.arch,
                                p.target.sm_count);
  out += fmt::format("kernels: {}, tensors between kernels: {} (each with the rule that kept its kernels apart)\n",
                     p.kernel_count(), p.separations.size());
  for (const Separation& s : p.separations) {
    const Node& from = p.graph.node(s.producer_node);
    const Node& to = p.graph.node(s.consumer_node);
    std::string via = fmt::format("'{}'", p.graph.tensor(s.tensor).name);
    if (s.concat_node >= 0) {
      via += fmt::format(" into elided concat '{}'", p.graph.node(s.concat_node).name);
    }
    out += fmt::format("group {} -> group {} ({}): {} '{}' -> {} '{}': {}\n", s.producer_group, s.consumer_group, via,
                       node_op(from), from.name, node_op(to), to.name, separation_reason(p, s));
  }
  return out;
}

}  // namespace kiln
