// The JSON form of a Plan (kiln plan --format json): keys in a fixed order, so equal plans give equal text.
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/json.h"
#include "kiln/plan.h"

namespace kiln {
namespace {

using ojson = nlohmann::ordered_json;

ojson tensor_json(const Graph& g, Tensor t) {
  const TensorInfo& info = g.tensor(t);
  ojson o = ojson::object();
  o["name"] = info.name;
  ojson shape = ojson::array();
  for (int64_t d : info.shape.dims()) shape.push_back(d);
  o["shape"] = std::move(shape);
  o["dtype"] = std::string(dtype_name(info.dtype));
  o["layout"] = std::string(layout_name(info.layout));
  o["kind"] = std::string(tensor_kind_name(info.kind));
  return o;
}

// Every tensor between two kernels and why fusion kept them apart (Plan::separations).
ojson separations_json(const Plan& p) {
  const Graph& g = p.graph;
  auto node = [&](int32_t n) -> const Node& { return g.node(n); };
  auto op = [&](int32_t n) { return node(n).op ? std::string(op_name(*node(n).op)) : node(n).op_text; };
  ojson out = ojson::array();
  for (const Separation& s : p.separations) {
    ojson o = ojson::object();
    o["producer_group"] = s.producer_group;
    o["producer_node"] = node(s.producer_node).name;
    o["producer_op"] = op(s.producer_node);
    o["consumer_group"] = s.consumer_group;
    o["consumer_node"] = node(s.consumer_node).name;
    o["consumer_op"] = op(s.consumer_node);
    o["tensor"] = g.tensor(s.tensor).name;
    o["concat"] = s.concat_node >= 0 ? ojson(node(s.concat_node).name) : ojson(nullptr);
    o["rule"] = std::string(separation_rule_name(s.rule));
    o["reason"] = separation_reason(p, s);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

std::string plan_to_json(const Plan& p) {
  const Graph& g = p.graph;
  ojson root = ojson::object();
  root["format"] = "kiln.plan";
  root["version"] = 1;
  root["graph"] = g.name();
  root["target"] = {{"name", p.target.name}, {"arch", p.target.arch}, {"sm_count", p.target.sm_count}};

  int weight_transforms = 0;
  ojson groups = ojson::array();
  for (const Group& grp : p.groups) {
    if (grp.kind == GroupKind::weight_transform) ++weight_transforms;
    ojson o = ojson::object();
    o["id"] = grp.id;
    o["kind"] = std::string(group_kind_name(grp.kind));
    o["family"] = std::string(kernel_family_name(grp.family));
    o["kernel"] = grp.is_kernel();
    if (grp.view_of.valid()) {
      o["view_of"] = g.tensor(grp.view_of).name;
    } else {
      o["view_of"] = nullptr;
    }
    ojson nodes = ojson::array();
    for (int32_t n : grp.nodes) {
      const Node& node = g.node(n);
      ojson j = ojson::object();
      j["index"] = n;
      j["name"] = node.name;
      j["op"] = node.op ? std::string(op_name(*node.op)) : node.op_text;
      nodes.push_back(std::move(j));
    }
    o["nodes"] = std::move(nodes);
    ojson inputs = ojson::array();
    for (Tensor t : grp.inputs) inputs.push_back(tensor_json(g, t));
    o["inputs"] = std::move(inputs);
    ojson outputs = ojson::array();
    for (Tensor t : grp.outputs) outputs.push_back(tensor_json(g, t));
    o["outputs"] = std::move(outputs);
    if (grp.scratch.any()) {
      o["scratch"] = {{"counters_offset", grp.scratch.counters_offset},
                      {"counters_bytes", grp.scratch.counters_bytes},
                      {"partials_offset", grp.scratch.partials_offset},
                      {"partials_bytes", grp.scratch.partials_bytes}};
    }
    o["bytes_read"] = grp.bytes_read;
    o["bytes_written"] = grp.bytes_written;
    groups.push_back(std::move(o));
  }
  root["groups"] = std::move(groups);
  ojson refusals = ojson::array();
  for (const FusionRefusal& r : p.refusals) {
    refusals.push_back({{"kind", std::string(group_kind_name(r.kind))}, {"nodes", r.nodes}, {"reason", r.reason}});
  }
  root["split_groups"] = std::move(refusals);
  root["separations"] = separations_json(p);

  ojson buffers = ojson::array();
  for (const BufferPlacement& b : p.buffers) {
    ojson o = ojson::object();
    o["tensor"] = g.tensor(b.tensor).name;
    o["offset"] = b.offset;
    o["bytes"] = b.bytes;
    o["first_group"] = b.first_group;
    o["last_group"] = b.last_group;
    if (b.alias_of.valid()) {
      o["alias_of"] = g.tensor(b.alias_of).name;
      o["alias_axis_offset"] = b.alias_axis_offset;
    } else {
      o["alias_of"] = nullptr;
    }
    buffers.push_back(std::move(o));
  }
  root["buffers"] = std::move(buffers);

  ojson totals = ojson::object();
  totals["groups"] = p.groups.size();
  totals["kernels"] = p.kernel_count();
  totals["weight_transforms"] = weight_transforms;
  totals["workspace_bytes"] = p.workspace_bytes;
  totals["zeroed_offset"] = p.zeroed_offset;
  totals["zeroed_bytes"] = p.zeroed_bytes;
  totals["bytes_moved"] = p.bytes_moved;
  totals["unfused_bytes_moved"] = p.unfused_bytes_moved;
  if (p.unfused_bytes_moved > 0) {
    totals["fused_over_unfused"] = static_cast<double>(p.bytes_moved) / static_cast<double>(p.unfused_bytes_moved);
  } else {
    totals["fused_over_unfused"] = nullptr;
  }
  root["totals"] = std::move(totals);
  return root.dump(2) + "\n";
}

}  // namespace kiln
