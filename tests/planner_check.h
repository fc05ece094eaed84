// Shared by the planner tests: planning a graph, counting group kinds, the invariants every plan keeps,
// and the proof that a plan means what its graph means (run_plan_reference == run_reference, exactly).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/plan.h"
#include "ops/registry.h"
#include "passes/fusion.h"

namespace kiln::planner_test {

inline Plan plan_of(const Graph& g, PlanOptions o = {}) {
  auto p = plan_graph(g, o);
  KILN_CHECK(p.ok(), p.status().message());
  return std::move(p).value();
}

inline int count_kind(const Plan& p, GroupKind k) {
  int n = 0;
  for (const Group& g : p.groups) n += g.kind == k;
  return n;
}

inline void expect_scratch_placed(const Plan& p);

// The roles fusion recorded (Group::roles), found again independently from the group's nodes: the anchor
// is the node anchoring the group's kind (a conv group may hold a layer norm of its prologue, which anchors
// a norm group elsewhere), the reduction a conv group's channel reduction (global_avg_pool, channel_stats).
inline int32_t find_anchor(const Graph& g, const Group& grp) {
  int32_t first = -1;
  for (int32_t n : grp.nodes) {
    const auto& a = op_def(*g.node(n).op).anchors;
    if (a && *a == grp.kind) return n;
    if (a && first < 0) first = n;
  }
  return first;
}
inline int32_t find_reduction_epilogue(const Graph& g, const Group& grp) {
  if (grp.kind != GroupKind::conv) return -1;
  for (int32_t n : grp.nodes)
    if (op_def(*g.node(n).op).channel_reduction) return n;
  return -1;
}
inline void expect_roles(const Plan& p) {
  for (const Group& grp : p.groups) {
    if (!is_anchored(grp.kind)) {
      EXPECT_EQ(grp.roles.anchor, -1) << "group " << grp.id;
      continue;
    }
    EXPECT_EQ(grp.roles.anchor, find_anchor(p.graph, grp))
        << "group " << grp.id << " (" << group_kind_name(grp.kind) << ")";
    EXPECT_EQ(grp.roles.reduction, find_reduction_epilogue(p.graph, grp)) << "group " << grp.id;
    // A layer-norm prologue's norm is the prologue node anchoring a norm group.
    int32_t norm = -1;
    for (int32_t n : grp.roles.prologue)
      if (op_def(*p.graph.node(n).op).anchors == GroupKind::norm) norm = n;
    EXPECT_EQ(grp.roles.prologue_norm, norm) << "group " << grp.id;
    // The prologue lies before the anchor, and every node before it but layout ops is in the prologue.
    for (int32_t n : grp.roles.prologue) EXPECT_LT(n, grp.roles.anchor) << "group " << grp.id;
    for (int32_t n : grp.nodes) {
      if (n >= grp.roles.anchor || op_fusion_kind(*p.graph.node(n).op) == FusionKind::layout) continue;
      EXPECT_TRUE(std::binary_search(grp.roles.prologue.begin(), grp.roles.prologue.end(), n))
          << "group " << grp.id << ": node " << p.graph.node(n).name << " before the anchor is no prologue";
    }
  }
}

// The structural invariants every plan must keep.
inline void check_plan_invariants(const Plan& p) {
  const Graph& g = p.graph;
  std::vector<int> seen(g.nodes().size(), 0);
  std::vector<int32_t> group_of(g.nodes().size(), -1);
  for (const Group& grp : p.groups)
    for (int32_t n : grp.nodes) {
      seen[static_cast<size_t>(n)]++;
      group_of[static_cast<size_t>(n)] = grp.id;
    }
  for (size_t i = 0; i < seen.size(); ++i)
    ASSERT_EQ(seen[i], 1) << "node " << g.nodes()[i].name << " in " << seen[i] << " groups";
  // Acyclic and in order: a group reads only values of earlier groups (or of itself, internally).
  for (const Group& grp : p.groups) {
    for (int32_t n : grp.nodes) {
      for (const auto& port : g.node(n).inputs)
        for (Tensor t : port) {
          const int32_t prod = g.tensor(t).producer;
          if (prod < 0) continue;
          const int32_t pg = group_of[static_cast<size_t>(prod)];
          ASSERT_LE(pg, grp.id) << "group " << grp.id << " reads group " << pg << " which runs later";
          if (pg == grp.id) {
            ASSERT_LT(prod, n) << "nodes out of order inside group " << grp.id;
          }
        }
    }
    ASSERT_LE(static_cast<int>(grp.nodes.size()), 1000);
  }
  // A slice of an elided concat's output lives inside its root's buffer (or graph output), which is live
  // whenever the slice is.
  std::map<int32_t, const BufferPlacement*> placement;
  for (const BufferPlacement& b : p.buffers) placement[b.tensor.id] = &b;
  for (const BufferPlacement& a : p.buffers) {
    if (!a.alias_of.valid()) continue;
    auto root = placement.find(a.alias_of.id);
    const bool output = std::find(g.outputs().begin(), g.outputs().end(), a.alias_of) != g.outputs().end();
    ASSERT_TRUE(output || root != placement.end()) << g.tensor(a.tensor).name << " aliases an unplaced tensor";
    if (root == placement.end()) continue;
    const BufferPlacement& r = *root->second;
    ASSERT_FALSE(r.alias_of.valid()) << g.tensor(a.tensor).name << ": an alias of an alias";
    ASSERT_EQ(a.offset, r.offset) << g.tensor(a.tensor).name;
    ASSERT_LE(r.first_group, a.first_group) << g.tensor(a.tensor).name;
    ASSERT_GE(r.last_group, a.last_group) << g.tensor(a.tensor).name;
  }
  // No two buffers live at the same time overlap in memory; offsets aligned; all inside the workspace.
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const BufferPlacement& a = p.buffers[i];
    if (a.alias_of.valid()) continue;
    ASSERT_EQ(a.offset % kWorkspaceAlignment, 0);
    ASSERT_LE(a.offset + a.bytes, p.workspace_bytes);
    // A buffer lives past its producer, but for the value a reduction epilogue reads back within its group.
    const Group& producer = p.group(a.first_group);
    const int32_t pool = producer.roles.reduction;
    if (pool >= 0 && g.node(pool).inputs[0][0] == a.tensor) {
      ASSERT_LE(a.first_group, a.last_group);
    } else {
      ASSERT_LT(a.first_group, a.last_group);
    }
    for (size_t j = i + 1; j < p.buffers.size(); ++j) {
      const BufferPlacement& b = p.buffers[j];
      if (b.alias_of.valid()) continue;
      const bool live_together = a.first_group <= b.last_group && b.first_group <= a.last_group;
      const bool overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      ASSERT_FALSE(live_together && overlap) << g.tensor(a.tensor).name << " and " << g.tensor(b.tensor).name;
    }
  }
  expect_scratch_placed(p);
  expect_roles(p);
}

// A group's scratch (reduction epilogues) lies inside the workspace past every buffer, its counters inside the
// range zeroed before each run, no two groups' counters overlapping nor any partials the counters; the
// partials of all groups share one range (the groups run one at a time).
inline void expect_scratch_placed(const Plan& p) {
  int64_t buffers_end = 0;
  for (const BufferPlacement& b : p.buffers)
    if (!b.alias_of.valid()) buffers_end = std::max(buffers_end, b.offset + b.bytes);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t partials_start = -1, partials_end = -1;
  for (const Group& grp : p.groups) {
    const bool pooled = grp.roles.reduction >= 0;
    ASSERT_EQ(grp.scratch.any(), pooled) << "group " << grp.id;
    if (!pooled) continue;
    const ReductionEpilogueShape rs = reduction_epilogue_shape(p.graph, grp);
    const auto terms = op_def(*p.graph.node(grp.roles.reduction).op).channel_reduction->terms.size();
    ASSERT_EQ(grp.scratch.counters_bytes, rs.counters() * 4) << "group " << grp.id;
    ASSERT_EQ(grp.scratch.partials_bytes, rs.slots() * rs.K * 4 * static_cast<int64_t>(terms)) << "group " << grp.id;
    ASSERT_GE(grp.scratch.counters_offset, p.zeroed_offset);
    ASSERT_LE(grp.scratch.counters_offset + grp.scratch.counters_bytes, p.zeroed_offset + p.zeroed_bytes);
    ASSERT_GE(grp.scratch.partials_offset, buffers_end);
    ASSERT_LE(grp.scratch.partials_offset + grp.scratch.partials_bytes, p.workspace_bytes);
    ranges.push_back({grp.scratch.counters_offset, grp.scratch.counters_offset + grp.scratch.counters_bytes});
    if (partials_start < 0) partials_start = grp.scratch.partials_offset;
    ASSERT_EQ(grp.scratch.partials_offset, partials_start) << "group " << grp.id << ": one shared range";
    partials_end = std::max(partials_end, grp.scratch.partials_offset + grp.scratch.partials_bytes);
  }
  if (!ranges.empty()) {
    ASSERT_GE(p.zeroed_offset, buffers_end);
    ranges.push_back({partials_start, partials_end});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) ASSERT_LE(ranges[i - 1].second, ranges[i].first);
}

// Runs the graph and its plan on the same random inputs; the results must be identical.
inline void expect_plan_equals_graph(const Graph& g, const Plan& p, uint64_t seed) {
  TensorMap in = random_inputs(g, seed);
  auto want = run_reference(g, in);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = run_plan_reference(p, in);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(want->size(), got->size());
  for (const auto& [name, w] : *want) {
    const HostTensor& h = got->at(name);
    ASSERT_EQ(h.shape, w.shape) << name;
    for (size_t i = 0; i < w.data.size(); ++i) {
      ASSERT_TRUE(h.data[i] == w.data[i] || (std::isnan(h.data[i]) && std::isnan(w.data[i])))
          << name << "[" << i << "]: plan " << h.data[i] << ", graph " << w.data[i];
    }
  }
}

}  // namespace kiln::planner_test
