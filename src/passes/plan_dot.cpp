// The Graphviz form of a Plan (kiln plan --format dot [--dot-no-params] [--dot-kernels-only]).
//
// Deterministic like the text form: it depends only on the plan. Two views: every op (one cluster per
// group, tensors as edges; optionally without parameters and weight transforms), or one box per kernel
// with the tensors between kernels as edges (Plan::separations, so each edge's tooltip says why).
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ir/id_tables.h"
#include "kiln/plan.h"

namespace kiln {
namespace {

std::string node_op(const Node& n) { return n.op ? std::string(op_name(*n.op)) : n.op_text; }

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
#define KILN_X(e, n, fill, border, style, traits) \
  case GroupKind::e: return {fill, border, style};
    KILN_GROUP_KINDS(KILN_X)
#undef KILN_X
  }
  return {"#ffffff", "#000000", "filled"};
}

// --heat: a group's estimated time as a share of the plan's, and the colours that show it.
struct Heat {
  const std::map<int32_t, double>& us;
  double total = 0, most = 0;
  explicit Heat(const std::map<int32_t, double>& group_us) : us(group_us) {
    for (const auto& [g, t] : us) total += t, most = std::max(most, t);
  }
  bool on() const { return !us.empty(); }
  double of(int32_t g) const {
    auto it = us.find(g);
    return it == us.end() ? 0 : it->second;
  }
  // White for no time, through orange, to dark red for the costliest group (the scale is relative to it,
  // so the hottest group is always the darkest).
  std::string fill(int32_t g) const {
    const double f = most > 0 ? of(g) / most : 0;
    auto mix = [&](int a, int b) { return static_cast<int>(a + (b - a) * f + 0.5); };
    return fmt::format("#{:02x}{:02x}{:02x}", mix(0xff, 0xd7), mix(0xff, 0x30), mix(0xff, 0x1f));
  }
  std::string label(int32_t g) const {
    return fmt::format("{:.1f} us ({:.0f}%)", of(g), total > 0 ? 100 * of(g) / total : 0.0);
  }
};

std::string header(const Plan& p, const Heat& heat) {
  const Graph& g = p.graph;
  std::string out = fmt::format("digraph {} {{\n", quoted("plan " + g.name()));
  out += "  rankdir=TB;\n  compound=true;\n  fontname=\"Helvetica\";\n";
  out += "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n";
  std::string title = fmt::format("plan {}: {} kernel{}", g.name(), p.kernel_count(), p.kernel_count() == 1 ? "" : "s");
  if (heat.on()) {
    title += fmt::format(
        ", {:.1f} us estimated for {}\nfill: each group's share of it (white none, dark red the "
        "costliest); borders: the group's kind",
        heat.total, p.target.name);
  }
  out += fmt::format("  label={};\n  labelloc=t;\n", quoted(title));
  return out;
}

// A legend of the kinds this plan's drawing uses; closes the digraph.
std::string legend(const std::vector<bool>& kind_used) {
  std::string out = "  subgraph cluster_legend {\n    label=\"group kinds\";\n    style=solid; color=\"#bdbdbd\";\n";
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

std::string tensor_label(const TensorInfo& info) {
  return quoted(fmt::format("{}\n{} {}", info.name, info.shape.to_string(), dtype_name(info.dtype)));
}

// Graph inputs and parameters (those `read` marks), as plain ellipses, and graph outputs, as double ones.
std::string bound_and_outputs(const Graph& g, const PerTensor<bool>& read) {
  std::string out;
  for (Tensor t : g.bound_tensors()) {
    if (!read[t]) continue;
    const TensorInfo& info = g.tensor(t);
    out += fmt::format("  t{} [label={}, shape=ellipse{}];\n", t.id, tensor_label(info),
                       info.kind == TensorKind::parameter ? ", style=dashed" : "");
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    out +=
        fmt::format("  out{} [label={}, shape=ellipse, peripheries=2];\n", k, tensor_label(g.tensor(g.outputs()[k])));
  }
  return out;
}

// Every op: one cluster per group, ops as boxes, tensors as edges. Without parameters, parameter ellipses,
// weight-transform groups and every edge from them are left out.
std::string ops_view(const Plan& p, bool parameters, const Heat& heat) {
  const Graph& g = p.graph;
  std::string out = header(p, heat);
  // Which node is in which group: nodes in no group (there should be none) are drawn outside clusters.
  PerIndex<bool> grouped(g.nodes().size(), false), hidden(g.nodes().size(), false);
  std::vector<bool> kind_used(std::size(kAllGroupKinds), false);
  auto node_line = [&](int32_t n) {
    const Node& node = g.node(n);
    return fmt::format("n{} [label={}, shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\"];", n,
                       quoted(node.name + "\n" + node_op(node)));
  };
  for (const Group& grp : p.groups) {
    const bool hide = !parameters && grp.kind == GroupKind::weight_transform;
    for (int32_t n : grp.nodes) {
      if (n >= 0 && static_cast<size_t>(n) < g.nodes().size()) (hide ? hidden : grouped)[n] = true;
    }
    if (hide) continue;
    KindStyle st = kind_style(grp.kind);
    kind_used[static_cast<size_t>(grp.kind)] = true;
    out += fmt::format("  subgraph cluster_{} {{\n", grp.id);
    std::string label = fmt::format("group {}: {}", grp.id, group_kind_name(grp.kind));
    if (heat.on() && grp.is_kernel()) label += "\n" + heat.label(grp.id);
    out += fmt::format("    label={};\n", quoted(label));
    if (heat.on()) {
      out += fmt::format("    style=\"filled\"; fillcolor=\"{}\"; color=\"{}\"; penwidth=2;\n", heat.fill(grp.id),
                         st.border);
    } else {
      out += fmt::format("    style={}; fillcolor=\"{}\"; color=\"{}\";\n", quoted(st.style), st.fill, st.border);
    }
    for (int32_t n : grp.nodes) {
      if (n >= 0 && static_cast<size_t>(n) < g.nodes().size()) out += "    " + node_line(n) + "\n";
    }
    out += "  }\n";
  }
  const int32_t node_count = static_cast<int32_t>(g.nodes().size());
  for (int32_t n = 0; n < node_count; ++n) {
    if (!grouped[n] && !hidden[n]) out += "  " + node_line(n) + "\n";
  }
  // A tensor is drawn when it is no hidden parameter and its producer is not hidden.
  auto shown = [&](Tensor t) {
    const TensorInfo& info = g.tensor(t);
    return info.producer >= 0 ? !hidden[info.producer] : parameters || info.kind != TensorKind::parameter;
  };
  PerTensor<bool> read(g.tensors().size(), false);
  for (int32_t n = 0; n < node_count; ++n) {
    for (const auto& port : g.node(n).inputs)
      for (Tensor t : port)
        if (t.valid() && !hidden[n] && shown(t)) read[t] = true;
  }
  out += bound_and_outputs(g, read);
  // Tensors as edges: producer node (or the tensor's ellipse) -> each reading node, and -> the outputs.
  auto source = [&](Tensor t) {
    const TensorInfo& info = g.tensor(t);
    return info.producer >= 0 ? fmt::format("n{}", info.producer) : fmt::format("t{}", t.id);
  };
  for (int32_t n = 0; n < node_count; ++n) {
    if (hidden[n]) continue;
    for (const auto& port : g.node(n).inputs) {
      for (Tensor t : port) {
        if (!t.valid() || !shown(t)) continue;
        const TensorInfo& info = g.tensor(t);
        if (info.producer < 0) {
          out += fmt::format("  {} -> n{};\n", source(t), n);
        } else {
          out += fmt::format(
              "  {} -> n{} [label={}];\n", source(t), n,
              quoted(fmt::format("{}\n{} {}", info.name, info.shape.to_string(), layout_name(info.layout))));
        }
      }
    }
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) out += fmt::format("  {} -> out{};\n", source(g.outputs()[k]), k);
  return out + legend(kind_used);
}

// One box per kernel; graph inputs and outputs as ellipses; parameters, weight transforms and elided
// concats left out (an elided concat's writers are joined to its readers, as Plan::separations does).
std::string kernels_view(const Plan& p, const Heat& heat) {
  const Graph& g = p.graph;
  std::string out = header(p, heat);
  const PerIndex<int32_t> group_of = group_of_nodes(p);
  std::vector<bool> kind_used(std::size(kAllGroupKinds), false);
  for (const Group& grp : p.groups) {
    if (!grp.is_kernel()) continue;
    KindStyle st = kind_style(grp.kind);
    kind_used[static_cast<size_t>(grp.kind)] = true;
    std::string label = fmt::format("group {}: {}", grp.id, group_kind_name(grp.kind));
    if (grp.family != KernelFamilyId::none) label += fmt::format("\nfamily {}", kernel_family_name(grp.family));
    label += fmt::format("\n{} op{}", grp.nodes.size(), grp.nodes.size() == 1 ? "" : "s");
    if (heat.on()) {
      label += "\n" + heat.label(grp.id);
      out += fmt::format("  k{} [label={}, shape=box, style=\"filled\", fillcolor=\"{}\", color=\"{}\", penwidth=2];\n",
                         grp.id, quoted(label), heat.fill(grp.id), st.border);
    } else {
      out += fmt::format("  k{} [label={}, shape=box, style={}, fillcolor=\"{}\", color=\"{}\"];\n", grp.id,
                         quoted(label), quoted(st.style), st.fill, st.border);
    }
  }
  // The kernels writing a tensor: its group, or the writers of an elided concat's inputs.
  auto writers = [&](Tensor t) {
    std::vector<int32_t> w;
    const int32_t n = g.tensor(t).producer;
    if (n < 0) return w;
    const Group& grp = p.group(group_of[n]);
    if (grp.is_kernel()) w.push_back(grp.id);
    if (grp.kind != GroupKind::concat_elided) return w;
    for (Tensor u : g.node(n).inputs[0]) {
      const int32_t q = g.tensor(u).producer;
      if (q >= 0 && p.group(group_of[q]).is_kernel()) w.push_back(group_of[q]);
    }
    return w;
  };
  PerTensor<bool> read(g.tensors().size(), false);
  std::string edges;
  for (const Group& grp : p.groups) {
    if (!grp.is_kernel()) continue;
    for (Tensor t : grp.inputs) {
      if (g.tensor(t).kind != TensorKind::input) continue;
      read[t] = true;
      edges += fmt::format("  t{} -> k{};\n", t.id, grp.id);
    }
  }
  for (const Separation& s : p.separations) {
    std::string label = g.tensor(s.tensor).name;
    if (s.concat_node >= 0) label += fmt::format("\n(into {})", g.tensor(g.node(s.concat_node).outputs[0]).name);
    edges += fmt::format("  k{} -> k{} [label={}, tooltip={}];\n", s.producer_group, s.consumer_group, quoted(label),
                         quoted(separation_reason(p, s)));
  }
  for (size_t k = 0; k < g.outputs().size(); ++k) {
    for (int32_t w : writers(g.outputs()[k])) edges += fmt::format("  k{} -> out{};\n", w, k);
  }
  return out + bound_and_outputs(g, read) + edges + legend(kind_used);
}

}  // namespace

std::string plan_to_dot(const Plan& p, const DotOptions& options) {
  const Heat heat(options.group_us);
  return options.kernels_only ? kernels_view(p, heat) : ops_view(p, options.parameters, heat);
}

}  // namespace kiln
