// Why fusion keeps kernels apart (Plan::separations, `kiln plan --explain`): one small graph per rule, each
// checked for the exact reason; every tensor between two kernels has a separation; the fallback when fusion
// noted nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "kiln/kiln.h"
#include "kiln/plan.h"
#include "passes/pass.h"
#include "passes/separations.h"
#include "refusing_chooser.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

Plan plan_of(const Graph& g, PlanOptions o = {}) {
  auto p = plan_graph(g, o);
  KILN_CHECK(p.ok(), p.status().message());
  return std::move(p).value();
}

// The separation between the named producer and consumer nodes (the test fails when there is none).
const Separation* find_separation(const Plan& p, const std::string& producer, const std::string& consumer) {
  for (const Separation& s : p.separations) {
    if (p.graph.node(s.producer_node).name == producer && p.graph.node(s.consumer_node).name == consumer) return &s;
  }
  ADD_FAILURE() << "no separation " << producer << " -> " << consumer << " in\n" << plan_explanation(p);
  return nullptr;
}

// Checks the rule and the reason of the separation producer -> consumer.
void expect_reason(const Plan& p, const std::string& producer, const std::string& consumer, SeparationRule rule,
                   const std::string& reason) {
  const Separation* s = find_separation(p, producer, consumer);
  if (s == nullptr) return;
  EXPECT_EQ(separation_rule_name(s->rule), separation_rule_name(rule)) << plan_explanation(p);
  EXPECT_EQ(separation_reason(p, *s), reason) << plan_explanation(p);
}

// Every tensor a kernel reads from another kernel (through an elided concat too) has exactly one separation,
// and there are no others.
void expect_every_kernel_edge_explained(const Plan& p) {
  std::vector<int32_t> group_of(p.graph.nodes().size(), -1);
  for (const Group& grp : p.groups)
    for (int32_t n : grp.nodes) group_of[static_cast<size_t>(n)] = grp.id;
  auto group = [&](int32_t node) -> const Group& { return p.group(group_of[static_cast<size_t>(node)]); };
  std::set<std::tuple<int32_t, int32_t, int32_t>> want, got;  // (producer group, consumer group, tensor)
  for (const Group& grp : p.groups) {
    if (!grp.is_kernel()) continue;
    for (Tensor t : grp.inputs) {
      const int32_t n = p.graph.tensor(t).producer;
      if (n < 0) continue;
      if (group(n).is_kernel()) want.insert({group(n).id, grp.id, t.id});
      if (group(n).kind != GroupKind::concat_elided) continue;
      for (Tensor u : p.graph.node(n).inputs[0])
        if (p.graph.tensor(u).producer >= 0 && group(p.graph.tensor(u).producer).is_kernel())
          want.insert({group(p.graph.tensor(u).producer).id, grp.id, u.id});
    }
  }
  for (const Separation& s : p.separations) {
    EXPECT_TRUE(got.insert({s.producer_group, s.consumer_group, s.tensor.id}).second)
        << "twice: " << separation_reason(p, s);
    EXPECT_FALSE(separation_reason(p, s).empty());
    EXPECT_EQ(group_of[static_cast<size_t>(s.consumer_node)], s.consumer_group);
    EXPECT_EQ(p.graph.tensor(s.tensor).producer, s.producer_node);
  }
  EXPECT_EQ(got, want) << plan_explanation(p);
}

// x [8, 16] -> relu 'r' -> matmul 'mm'
TEST(PlanExplain, AnAnchorStartsItsOwnKernel) {
  Graph g("anchor");
  // (A relu feeding the matmul's a would be its prologue; feeding its b, the weight operand, it is not.)
  Tensor r = g.relu(g.input("x", {16, 4}), "r");
  g.output(g.matmul(g.input("a", {8, 16}), r, {}, "mm"), "y");
  const Plan p = plan_of(g);
  expect_reason(p, "r", "mm", SeparationRule::starts_kernel, "an anchor (matmul) starts its own kernel");
  expect_every_kernel_edge_explained(p);
}

TEST(PlanExplain, TheGroupReachedTheMaxGroupSize) {
  Graph g("chain");
  Tensor t = g.input("x", {64});
  for (const char* name : {"r1", "r2", "r3"}) t = g.relu(t, name);
  g.output(t, "y");
  const Plan p = plan_of(g, {.max_group_ops = 2});
  expect_reason(p, "r2", "r3", SeparationRule::max_group_size, "the group reached the max group size (2 ops)");
  expect_every_kernel_edge_explained(p);
}

TEST(PlanExplain, ThePolicyRefused) {
  Graph g("policy");
  g.output(g.neg(g.relu(g.input("x", {64}), "r"), "n"), "y");
  const Plan p = plan_of(g, {.policy = [](const Graph&, int32_t, int32_t) { return false; }});
  expect_reason(p, "r", "n", SeparationRule::policy, "the fusion policy refused");
}

// A value whose conversion is its group's final store: nothing joins that group after it.
TEST(PlanExplain, TheProducerEndsInAStoreTransform) {
  Graph g("store");
  Tensor y = g.layout_convert(g.relu(g.input("x", {1, 8, 4, 4}), "r"), Layout::NHWC, "to_nhwc");
  g.output(g.neg(y, "n"), "z");
  const Plan p = plan_of(g, {.layout = LayoutPolicy::nchw});
  expect_reason(p, "to_nhwc", "n", SeparationRule::store_transform,
                "the producer's group ends in a store transform ('to_nhwc'): nothing joins it after that");
}

TEST(PlanExplain, AStoreTransformsValueReadElsewhere) {
  Graph g("shared");
  Tensor r = g.relu(g.input("x", {1, 8, 4, 4}), "r");
  g.output(g.neg(g.layout_convert(r, Layout::NHWC, "to_nhwc"), "n"), "z");
  g.output(g.exp(r, "e"), "e");
  const Plan p = plan_of(g, {.layout = LayoutPolicy::nchw});
  expect_reason(p, "r", "to_nhwc", SeparationRule::store_value_shared,
                "'r' is also read by 'e': a store transform must be its value's only reader");

  Graph o("output");
  Tensor r2 = o.relu(o.input("x", {1, 8, 4, 4}), "r");
  o.output(r2, "r_out");
  o.output(o.neg(o.layout_convert(r2, Layout::NHWC, "to_nhwc"), "n"), "z");
  const Plan q = plan_of(o, {.layout = LayoutPolicy::nchw});
  expect_reason(q, "r", "to_nhwc", SeparationRule::store_value_output,
                "'r_out' is a graph output: a store transform must be its value's only use");
}

TEST(PlanExplain, EpilogueShapes) {
  Graph g("shapes");
  Tensor m = g.matmul(g.input("x", {8, 16}), g.parameter("w", {16, 16}), {}, "mm");
  g.output(g.add(m, g.input("u", {4, 8, 16}), "wide"), "y1");
  g.output(g.add(m, g.input("v", {8, 1}), "rows"), "y2");
  const Plan p = plan_of(g);
  expect_reason(p, "mm", "wide", SeparationRule::output_shape,
                "the add's output [4, 8, 16] is not the shape of the matmul's output [8, 16]");
  expect_reason(p, "mm", "rows", SeparationRule::operand_shape,
                "operand 'v' [8, 1] is not a scalar, per-channel vector or full-shape tensor of the output [8, 16]");
  expect_every_kernel_edge_explained(p);
}

// add(mm, transpose(mm)): the transpose (a kernel of its own) reads mm, so the add in mm's group would read a
// value of a kernel that reads that group.
TEST(PlanExplain, JoiningWouldCreateACycle) {
  // sum = mm + mm2(-mm): joining mm's group would make it read mm2's, which reads mm's: it joins mm2's.
  Graph g("cycle");
  Tensor m = g.matmul(g.input("x", {16, 16}), g.parameter("w", {16, 16}), {}, "mm");
  Tensor m2 = g.matmul(g.neg(m, "neg"), g.parameter("w2", {16, 16}), {}, "mm2");
  g.output(g.add(m, m2, "sum"), "y");
  const Plan p = plan_of(g);
  const Separation* s = find_separation(p, "mm", "sum");
  ASSERT_NE(s, nullptr);
  expect_reason(p, "mm", "sum", SeparationRule::cycle,
                fmt::format("joining would create a cycle (through group {})", s->consumer_group));
  expect_every_kernel_edge_explained(p);
}

// A reshape of row-major memory is a view of it (OpDef::view: view_reshape), so it is a load like a
// layout conversion: read by two groups it stays a kernel for the rule every load has.
TEST(PlanExplain, AReshapeIsALoadOfOneReader) {
  Graph g("reshape_load");
  Tensor r = g.relu(g.input("x", {4, 6}), "r");
  g.output(r, "y0");  // (so the reshape is no store transform of r's group)
  Tensor t = g.reshape(r, {6, 4}, "t");
  g.output(g.neg(t, "n1"), "y1");
  g.output(g.exp(t, "n2"), "y2");
  const Plan p = plan_of(g);
  expect_reason(p, "t", "n1", SeparationRule::load_readers,
                "'t' is read by 2 groups: a conversion becomes a load only when one group reads it");
  expect_every_kernel_edge_explained(p);

  Graph one("reshape_one_reader");
  Tensor r1 = one.relu(one.input("x", {4, 6}), "r");
  one.output(r1, "y0");
  one.output(one.neg(one.reshape(r1, {6, 4}, "t"), "n1"), "y1");
  EXPECT_EQ(plan_of(one).kernel_count(), 2) << plan_explanation(plan_of(one));  // relu, and neg reading t in place
}

TEST(PlanExplain, AnOpJoinsOneGroup) {
  Graph g("two_inputs");
  Tensor a = g.matmul(g.input("x", {8, 16}), g.parameter("w1", {16, 16}), {}, "mm1");
  Tensor b = g.matmul(g.input("z", {8, 16}), g.parameter("w2", {16, 16}), {}, "mm2");
  g.output(g.add(a, b, "sum"), "y");
  const Plan p = plan_of(g);
  expect_reason(p, "mm2", "sum", SeparationRule::joined_other,
                "the add joined the group computing its input 'mm1' instead: an op joins one group");
}

TEST(PlanExplain, Prologues) {
  Graph g("prologues");
  Tensor m = g.matmul(g.input("x", {8, 16}), g.parameter("w", {16, 16}), {}, "mm");
  g.output(g.softmax(m, -1, "sm"), "y1");
  Tensor r = g.relu(g.input("z", {8, 16}), "r");
  g.output(g.layer_norm(r, {}, "ln1"), "y2");
  g.output(g.neg(r, "n"), "y3");
  Tensor e = g.exp(g.input("v", {8, 16}), "e");
  g.output(e, "e_out");
  g.output(g.layer_norm(e, {}, "ln2"), "y4");
  const Plan p = plan_of(g);
  expect_reason(p, "mm", "sm", SeparationRule::prologue_kind,
                "a softmax takes only a pointwise group as its prologue, not a matmul group");
  expect_reason(p, "r", "ln1", SeparationRule::prologue_value_shared,
                "'r' is read by another kernel too ('n'): a prologue's values must stay inside the kernel it joins");
  expect_reason(p, "e", "ln2", SeparationRule::prologue_value_output,
                "'e_out' is a graph output: a prologue's values must stay inside the kernel it joins");
  expect_every_kernel_edge_explained(p);
}

// Layout conversions of a graph input: a load of the one group reading them, or kernels of their own.
TEST(PlanExplain, LoadTransforms) {
  Graph g("loads");
  Tensor y = g.layout_convert(g.input("x", {1, 8, 4, 4}), Layout::NHWC, "to_nhwc");
  g.output(g.relu(y, "r"), "a");
  g.output(g.exp(y, "e"), "b");
  Tensor y2 = g.layout_convert(g.input("x2", {1, 8, 4, 4}), Layout::NHWC, "to_nhwc2");
  g.output(y2, "y2");
  g.output(g.relu(y2, "r2"), "c");
  Tensor y3 = g.layout_convert(g.input("x3", {1, 8, 4, 4}), Layout::NHWC, "to_nhwc3");
  g.output(g.slice(y3, {0, 0, 0, 0}, {1, 4, 4, 4}, {}, "s"), "d");
  const Plan p = plan_of(g, {.layout = LayoutPolicy::nchw});
  expect_reason(p, "to_nhwc", "r", SeparationRule::load_readers,
                "'to_nhwc' is read by 2 groups: a conversion becomes a load only when one group reads it");
  expect_reason(p, "to_nhwc2", "r2", SeparationRule::load_value_output,
                "'y2' is a graph output: the conversion is written out, not a load of its reader");
  expect_reason(p, "to_nhwc3", "s", SeparationRule::takes_no_load, "a group of kind 'layout' takes no load transform");
  expect_every_kernel_edge_explained(p);
}

TEST(PlanExplain, KindsThatTakeNoEpilogueAndConcats) {
  Graph g("kinds");
  Tensor s = g.slice(g.relu(g.input("x", {8, 16}), "r"), {0, 0}, {8, 8}, {}, "s");
  g.output(g.neg(s, "n"), "y1");  // the slice is no store transform of r's group, but the load of n's
  Tensor up = g.upsample2d(g.input("u", {1, 2, 3, 3}), {.scale = {2, 2}}, "up");
  g.output(g.neg(up, "nu"), "y4");
  // A concat of a graph input is a copy kernel; one whose inputs are all written for it alone is elided.
  g.output(g.concat({g.exp(g.input("z", {8, 16}), "e"), g.input("v", {8, 16})}, 0, "copy"), "y2");
  Tensor cat = g.concat({g.relu(g.input("a", {8, 16}), "ra"), g.relu(g.input("b", {8, 16}), "rb")}, 0, "cat");
  g.output(g.matmul(cat, g.parameter("w", {16, 4}), {}, "mm"), "y3");
  const Plan p = plan_of(g);
  expect_reason(p, "r", "s", SeparationRule::keeps_part,
                "a slice keeps only part of its input, so it is no store transform: the value is written whole and "
                "the slice reads it");
  expect_reason(p, "up", "nu", SeparationRule::takes_no_epilogue, "a group of kind 'other' takes no epilogue");
  expect_reason(p, "e", "copy", SeparationRule::starts_kernel,
                "a concat starts its own group, and this one is not elided: it is a copy kernel");
  // Through the elided concat: each writer of a slice to the concat's reader.
  for (const char* writer : {"ra", "rb"}) {
    expect_reason(p, writer, "mm", SeparationRule::prologue_kind,
                  "a matmul takes only a pointwise group as its prologue, not a concat group");
    const Separation* sep = find_separation(p, writer, "mm");
    ASSERT_NE(sep, nullptr);
    EXPECT_EQ(p.graph.node(sep->concat_node).name, "cat");
  }
  EXPECT_THAT(plan_explanation(p), ::testing::HasSubstr("('ra' into elided concat 'cat'): relu 'ra' -> matmul 'mm': "));
  expect_every_kernel_edge_explained(p);
}

// A group a family refuses is split, and each kernel edge the split leaves names it: here a pointwise family
// that runs single ops only (tests/refusing_chooser.h; kiln's fusion proposes no group its families refuse).
TEST(PlanExplain, ASplitGroup) {
  Graph g("split_chain");
  auto a = g.relu(g.input("x", {4, 5}), "a");
  g.output(g.sigmoid(g.add(a, g.input("z", {4, 5}), "b"), "c"), "y");
  const testing::RefusingChooser single_ops([](const Plan&, const Group& grp) -> std::optional<std::string> {
    if (grp.kind == GroupKind::pointwise && grp.nodes.size() > 1) return "this test's pointwise family runs one op";
    return std::nullopt;
  });
  const Plan p = plan_of(g, {.chooser = &single_ops});
  ASSERT_EQ(p.refusals.size(), 1u);
  EXPECT_EQ(p.refusals[0].reason, "this test's pointwise family runs one op");
  for (const auto& [from, to] : {std::pair{"a", "b"}, std::pair{"b", "c"}}) {
    expect_reason(p, from, to, SeparationRule::split,
                  fmt::format("split: no kernel family ran the pointwise group of 'a', 'b' and 'c' ({}), so '{}' is "
                              "planned alone",
                              p.refusals[0].reason, to));
  }
  expect_every_kernel_edge_explained(p);
}

// Pointwise values of shapes that do not broadcast to one domain are kept apart by fusion (rule domain_shape).
TEST(PlanExplain, TwoDomains) {
  Graph g("two_domains");
  auto a = g.relu(g.input("x", {4, 5}), "a");
  g.output(g.add(a, g.input("z1", {3, 4, 5}), "b"), "b");
  g.output(g.add(a, g.input("z2", {2, 4, 5}), "c"), "c");
  const Plan p = plan_of(g);
  EXPECT_TRUE(p.refusals.empty());
  expect_reason(p, "a", "c", SeparationRule::domain_shape,
                "the add's output [2, 4, 5] does not broadcast with the values of the pointwise group of 'a' (one "
                "kernel walks one domain)");
  expect_every_kernel_edge_explained(p);
}

Graph load_sample(const std::string& name) {
  auto g = load_graph((fs::path(KILN_SOURCE_DIR) / "samples" / "graphs" / (name + ".json")).string());
  KILN_CHECK(g.ok(), g.status().message());
  return std::move(g).value();
}

TEST(PlanExplain, EverySampleHasAReasonForEveryKernelEdge) {
  for (const char* name : {"resnet50", "resnet50_bottleneck", "groupnorm_silu_conv", "lstm_cell", "mlp_gelu",
                           "conv_bias_bn_relu", "swiglu_ffn"}) {
    SCOPED_TRACE(name);
    const Plan p = plan_of(load_sample(name));
    expect_every_kernel_edge_explained(p);
    for (const Separation& s : p.separations) EXPECT_NE(s.rule, SeparationRule::unrecorded) << separation_reason(p, s);
  }
}

// With no notes at all, every edge still gets a line: the honest fallback.
TEST(PlanExplain, AnEdgeWithoutANoteGetsTheFallback) {
  Plan p = plan_of(load_sample("resnet50_bottleneck"));
  const size_t edges = p.separations.size();
  ASSERT_GT(edges, 0u);
  FusionNotes none;
  none.finish();
  explain_separations(p, Uses(p.graph), none, 32);
  ASSERT_EQ(p.separations.size(), edges);
  expect_every_kernel_edge_explained(p);
  expect_reason(p, "relu1", "conv2", SeparationRule::unrecorded,
                "no fusion rule joins a conv group to a conv group (fusion recorded no decision for this pair)");
}

}  // namespace
}  // namespace kiln
