// In-place concats in the planner: the producers of a concat's inputs write straight into their slices of
// one buffer, and every concat whose inputs are a run of a larger elided concat's inputs is a view of it
// (DenseNet's dense blocks: no concat kernel, one buffer per block). Each plan is also run on the reference
// backend through its memory plan (run_plan_reference), which must give exactly run_reference's results.
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "dense_graphs.h"
#include "kiln/kiln.h"
#include "kiln/plan.h"
#include "planner_check.h"

namespace kiln {
namespace {

using dense_test::add_dense_block;
using dense_test::DenseBlock;
using planner_test::check_plan_invariants;
using planner_test::count_kind;
using planner_test::expect_plan_equals_graph;
using planner_test::plan_of;

Graph block_graph(const DenseBlock& b) {
  Graph g("dense_block");
  add_dense_block(g, b);
  KILN_CHECK(g.verify().ok(), g.verify().message());
  return g;
}

const Group* group_of_node(const Plan& p, const std::string& node) {
  for (const Group& grp : p.groups)
    for (int32_t n : grp.nodes)
      if (p.graph.node(n).name == node) return &grp;
  return nullptr;
}

const BufferPlacement* placement(const Plan& p, const std::string& tensor) {
  for (const BufferPlacement& b : p.buffers)
    if (p.graph.tensor(b.tensor).name == tensor) return &b;
  return nullptr;
}

// The roots of a plan's aliases (tensor names), with how many tensors live in each.
std::map<std::string, int> alias_roots(const Plan& p) {
  std::map<std::string, int> r;
  for (const BufferPlacement& b : p.buffers)
    if (b.alias_of.valid()) ++r[p.graph.tensor(b.alias_of).name];
  return r;
}

TEST(PlannerConcat, DenseBlockIsOneBufferAndNoConcatKernel) {
  // torchvision's dense layer (bn-relu-conv1x1-bn-relu-conv3x3), 4 layers, 16 + 4·8 channels of 8x8, f32.
  // KRSC weights, so the workspace holds activations only.
  DenseBlock b;
  b.bottleneck = true, b.C0 = 16, b.growth = 8, b.H = 8, b.W = 8, b.krsc_weights = true;
  const Graph g = block_graph(b);
  const Plan p = plan_of(g);
  check_plan_invariants(p);
  EXPECT_EQ(count_kind(p, GroupKind::concat), 0) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::concat_elided), 4);  // cat1, cat2, cat3 and the block's cat
  for (const char* view : {"cat1", "cat2", "cat3"}) {
    const Group* grp = group_of_node(p, view);
    ASSERT_NE(grp, nullptr);
    ASSERT_TRUE(grp->view_of.valid()) << view;
    EXPECT_EQ(p.graph.tensor(grp->view_of).name, "cat");
  }
  EXPECT_FALSE(group_of_node(p, "cat")->view_of.valid());
  // One buffer: the stem's output, the four layers' and the three views all live in `cat`, at the channel
  // offsets of the concat; the views are its first 24, 32 and 40 channels.
  EXPECT_EQ(alias_roots(p), (std::map<std::string, int>{{"cat", 8}}));
  const std::map<std::string, int64_t> offsets{{"stem.bn.relu", 0}, {"l1.conv2", 16}, {"l2.conv2", 24},
                                               {"l3.conv2", 32},    {"l4.conv2", 40}, {"cat1", 0},
                                               {"cat2", 0},         {"cat3", 0}};
  for (const auto& [t, at] : offsets) {
    const BufferPlacement* s = placement(p, t);
    ASSERT_NE(s, nullptr) << t;
    EXPECT_EQ(p.graph.tensor(s->alias_of).name, "cat") << t;
    EXPECT_EQ(s->alias_axis_offset, at) << t;
  }
  const BufferPlacement* root = placement(p, "cat");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->bytes, 48 * 8 * 8 * 4);
  // Live from the stem (group 0) to the block's final bn + relu (the last group).
  EXPECT_EQ(root->first_group, 0);
  EXPECT_EQ(root->last_group, static_cast<int32_t>(p.groups.size()) - 1);
  // The workspace: the 12 KiB block buffer, plus layer 1's bn+relu'd input (16 channels, 4 KiB: it joins
  // the stem's epilogue, so it is stored; layers 2-4 apply theirs as the 1x1 conv's prologue and store
  // nothing) and one bottleneck (32 channels, 8 KiB) at a time: 24 KiB. (With a copy per concat, before
  // in-place views: 17 kernels, 38 KiB; with views but no prologues, 30 KiB.)
  EXPECT_EQ(p.workspace_bytes, 12288 + 4096 + 8192) << plan_to_text(p);
  EXPECT_NE(plan_to_text(p).find("concat_elided (no kernel: a view of cat)"), std::string::npos);
  EXPECT_NE(plan_to_text(p).find("l1.conv2  [1, 8, 8, 8]  f32  NHWC  in cat + 16 along the concat axis"),
            std::string::npos);
  EXPECT_NE(plan_to_json(p).find("\"view_of\": \"cat\""), std::string::npos);
  expect_plan_equals_graph(g, p, 1);
}

TEST(PlannerConcat, ViewsAreStridedForBatchesAndEitherLayout) {
  for (const LayoutPolicy layout : {LayoutPolicy::nchw, LayoutPolicy::automatic}) {
    for (const bool bottleneck : {false, true}) {
      SCOPED_TRACE(fmt::format("{} bottleneck {}", layout_policy_name(layout), bottleneck));
      DenseBlock b;
      b.N = 2, b.bottleneck = bottleneck, b.extra_readers = !bottleneck, b.single_concat = bottleneck;
      const Graph g = block_graph(b);
      const Plan p = plan_of(g, {.layout = layout});
      check_plan_invariants(p);
      EXPECT_EQ(count_kind(p, GroupKind::concat), 0) << plan_to_text(p);
      EXPECT_EQ(count_kind(p, GroupKind::concat_elided), bottleneck ? 5 : 4);
      EXPECT_EQ(alias_roots(p).size(), 1u);
      expect_plan_equals_graph(g, p, 2);
    }
  }
}

TEST(PlannerConcat, GraphInputsAndParametersAreCopied) {
  // f0 is the graph's input: nothing writes it into place, so every concat of the chain copies.
  DenseBlock b;
  b.stem = false;
  const Graph g = block_graph(b);
  const Plan p = plan_of(g);
  check_plan_invariants(p);
  EXPECT_EQ(count_kind(p, GroupKind::concat), 4) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::concat_elided), 0);
  EXPECT_TRUE(alias_roots(p).empty());
  expect_plan_equals_graph(g, p, 3);
  // A parameter among the inputs: a copy too.
  Graph h("concat_param");
  const Tensor x = h.input("x", {2, 3});
  h.output(h.relu(h.concat({h.relu(x), h.parameter("w", {2, 3})}, 0, "cat")), "y");
  const Plan q = plan_of(h);
  EXPECT_EQ(count_kind(q, GroupKind::concat), 1) << plan_to_text(q);
  expect_plan_equals_graph(h, q, 4);
}

TEST(PlannerConcat, ATensorGoesIntoOneBufferOnly) {
  // b is in two concats neither of which is a run of the other's inputs (nor is [b, a]): the first gets a
  // and b in place, the others copy (reading b from its slice of the first).
  Graph g("two_concats");
  const Tensor x = g.input("x", {2, 3, 4, 4}, DType::f32, Layout::NHWC);
  const Tensor a = g.relu(x, "a"), b = g.sigmoid(g.add(x, 1.0), "b"), c = g.tanh(g.mul(x, 2.0), "c");
  g.output(g.concat({a, b}, 1, "ab"), "y1");
  g.output(g.relu(g.concat({b, c}, 1, "bc")), "y2");
  g.output(g.relu(g.concat({b, a}, 1, "ba")), "y3");
  const Plan p = plan_of(g);
  check_plan_invariants(p);
  EXPECT_EQ(group_of_node(p, "ab")->kind, GroupKind::concat_elided) << plan_to_text(p);
  EXPECT_EQ(group_of_node(p, "bc")->kind, GroupKind::concat);
  EXPECT_EQ(group_of_node(p, "ba")->kind, GroupKind::concat);
  expect_plan_equals_graph(g, p, 5);
}

TEST(PlannerConcat, AnOutputOrOtherAxisIsNoView) {
  // cat1 is a graph output (it needs memory of its own): a copy of its inputs' slices; cat2 stays a view.
  Graph g("dense_output");
  DenseBlock b;
  b.layers = 3;
  add_dense_block(g, b);
  g.output(*g.find_tensor("cat1"), "cat1_out", Layout::NHWC);
  const Plan p = plan_of(g);
  check_plan_invariants(p);
  EXPECT_EQ(group_of_node(p, "cat1")->kind, GroupKind::concat) << plan_to_text(p);
  EXPECT_TRUE(group_of_node(p, "cat2")->view_of.valid());
  expect_plan_equals_graph(g, p, 6);
  // [a, b] along another axis than [a, b, c]'s: not a slice of it.
  Graph h("axes");
  const Tensor x = h.input("x", {4, 4});
  const Tensor a = h.relu(x), bb = h.sigmoid(h.add(x, 1.0)), c = h.tanh(h.mul(x, 2.0));
  h.output(h.relu(h.concat({a, bb, c}, 1, "abc")), "y1");
  h.output(h.relu(h.concat({a, bb}, 0, "ab")), "y2");
  const Plan q = plan_of(h);
  check_plan_invariants(q);
  EXPECT_EQ(group_of_node(q, "abc")->kind, GroupKind::concat_elided) << plan_to_text(q);
  EXPECT_EQ(group_of_node(q, "ab")->kind, GroupKind::concat);
  expect_plan_equals_graph(h, q, 7);
}

TEST(PlannerConcat, DenseNet121HasNoConcatKernel) {
  const Plan p = plan_of(dense_test::densenet121());
  check_plan_invariants(p);
  EXPECT_EQ(count_kind(p, GroupKind::concat), 0) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::concat_elided), 62);
  // One buffer per dense block, holding its input and every layer's output (1 + L slices) and its L concats.
  EXPECT_EQ(alias_roots(p),
            (std::map<std::string, int>{{"b1.out", 13}, {"b2.out", 25}, {"b3.out", 49}, {"b4.out", 33}}));
}

}  // namespace
}  // namespace kiln
