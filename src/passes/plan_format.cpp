// The human-readable and Graphviz forms of a Plan (kiln plan --format text|dot).
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
  return fmt::format("{:.3f} ({:.2f}x less traffic)", r, static_cast<double>(unfused) / static_cast<double>(moved));
}

// ---- dot ----------------------------------------------------------------------------------------------

// A DOT double-quoted string: backslashes and quotes escaped, line breaks as \n (centred lines).
std::string quoted(std::string_view s) {
  std::string r = "\"";
  for (char c : s) {
    switch (c) {
      case '\\': r += "\\\\"; break;
      case '"': r += "\\\""; break;
      case '\n': r += "\\n"; break;
      case '\r': break;
      default: r += c;
    }
  }
  r += '"';
  return r;
}

struct KindStyle {
  const char* fill;
  const char* border;
  const char* style;
};

KindStyle kind_style(GroupKind k) {
  switch (k) {
#define KILN_X(e, n, fill, border, style) \
  case GroupKind::e: return {fill, border, style};
    KILN_GROUP_KINDS(KILN_X)
#undef KILN_X
  }
  return {"#ffffff", "#000000", "filled"};
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
      const Node& node = g.nodes()[static_cast<size_t>(n)];
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

std::string plan_to_dot(const Plan& p) {
  const Graph& g = p.graph;
  std::string out;
  out += fmt::format("digraph {} {{\n", quoted("plan " + g.name()));
  out += "  rankdir=TB;\n  compound=true;\n  fontname=\"Helvetica\";\n";
  out += "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n";
  out += fmt::format(
      "  label={};\n  labelloc=t;\n",
      quoted(fmt::format("plan {}: {} kernel{}", g.name(), p.kernel_count(), p.kernel_count() == 1 ? "" : "s")));

  // Which node is in which group: nodes in no group (there should be none) are drawn outside clusters.
  std::vector<bool> grouped(g.nodes().size(), false);
  std::vector<bool> kind_used(std::size(kAllGroupKinds), false);
  auto node_line = [&](int32_t n) {
    const Node& node = g.nodes()[static_cast<size_t>(n)];
    return fmt::format("n{} [label={}, shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\"];", n,
                       quoted(node.name + "\n" + node_op(node)));
  };
  for (const Group& grp : p.groups) {
    KindStyle st = kind_style(grp.kind);
    kind_used[static_cast<size_t>(grp.kind)] = true;
    out += fmt::format("  subgraph cluster_{} {{\n", grp.id);
    out += fmt::format("    label={};\n", quoted(fmt::format("group {}: {}", grp.id, group_kind_name(grp.kind))));
    out += fmt::format("    style={}; fillcolor=\"{}\"; color=\"{}\";\n", quoted(st.style), st.fill, st.border);
    for (int32_t n : grp.nodes) {
      if (n < 0 || static_cast<size_t>(n) >= g.nodes().size()) continue;
      grouped[static_cast<size_t>(n)] = true;
      out += "    " + node_line(n) + "\n";
    }
    out += "  }\n";
  }
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    if (!grouped[n]) out += "  " + node_line(static_cast<int32_t>(n)) + "\n";
  }

  // Graph inputs and parameters (when read), and graph outputs, as plain ellipses.
  std::vector<bool> read(g.tensors().size(), false);
  for (const Node& node : g.nodes()) {
    for (const auto& port : node.inputs) {
      for (Tensor t : port) {
        if (t.valid()) read[static_cast<size_t>(t.id)] = true;
      }
    }
  }
  for (Tensor t : g.bound_tensors()) {
    if (!read[static_cast<size_t>(t.id)]) continue;
    const TensorInfo& info = g.tensor(t);
    out += fmt::format("  t{} [label={}, shape=ellipse{}];\n", t.id,
                       quoted(fmt::format("{}\n{} {}", info.name, info.shape.to_string(), dtype_name(info.dtype))),
                       info.kind == TensorKind::parameter ? ", style=dashed" : "");
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    const TensorInfo& info = g.tensor(g.outputs()[k]);
    out += fmt::format("  out{} [label={}, shape=ellipse, peripheries=2];\n", k,
                       quoted(fmt::format("{}\n{} {}", info.name, info.shape.to_string(), dtype_name(info.dtype))));
  }

  // Tensors as edges: producer node (or the tensor's ellipse) -> each reading node, and -> the outputs.
  auto source = [&](Tensor t) {
    const TensorInfo& info = g.tensor(t);
    return info.producer >= 0 ? fmt::format("n{}", info.producer) : fmt::format("t{}", t.id);
  };
  auto edge_label = [&](Tensor t) {
    const TensorInfo& info = g.tensor(t);
    return quoted(fmt::format("{}\n{} {}", info.name, info.shape.to_string(), layout_name(info.layout)));
  };
  for (size_t n = 0; n < g.nodes().size(); ++n) {
    for (const auto& port : g.nodes()[n].inputs) {
      for (Tensor t : port) {
        if (!t.valid()) continue;
        if (g.tensor(t).producer >= 0) {
          out += fmt::format("  {} -> n{} [label={}];\n", source(t), n, edge_label(t));
        } else {
          out += fmt::format("  {} -> n{};\n", source(t), n);
        }
      }
    }
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    Tensor t = g.outputs()[k];
    out += fmt::format("  {} -> out{};\n", source(t), k);
  }

  // A legend of the kinds this plan uses.
  out += "  subgraph cluster_legend {\n    label=\"group kinds\";\n    style=solid; color=\"#bdbdbd\";\n";
  out += "    node [shape=box, fontsize=9];\n";
  std::string prev;
  for (size_t k = 0; k < std::size(kAllGroupKinds); ++k) {
    if (!kind_used[k]) continue;
    KindStyle st = kind_style(kAllGroupKinds[k]);
    std::string id = fmt::format("legend_{}", group_kind_name(kAllGroupKinds[k]));
    out += fmt::format("    {} [label={}, style={}, fillcolor=\"{}\", color=\"{}\"];\n", id,
                       quoted(group_kind_name(kAllGroupKinds[k])), quoted(st.style), st.fill, st.border);
    if (!prev.empty()) out += fmt::format("    {} -> {} [style=invis];\n", prev, id);
    prev = id;
  }
  out += "  }\n}\n";
  return out;
}

}  // namespace kiln
