// The planner: group counts for every sample, legality, layouts, memory planning, and the proof that a
// plan means what its graph means (run_plan_reference == run_reference, exactly, on random inputs).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "golden.h"
#include "kiln/kiln.h"
#include "kiln/plan.h"
#include "ops/registry.h"
#include "planner_check.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using planner_test::check_plan_invariants;
using planner_test::count_kind;
using planner_test::expect_plan_equals_graph;
using planner_test::plan_of;

Graph load_sample(const std::string& name) {
  auto g = load_graph((fs::path(KILN_SOURCE_DIR) / "samples" / "graphs" / (name + ".json")).string());
  KILN_CHECK(g.ok(), g.status().message());
  return std::move(g).value();
}

// canonicalize's split of a conv's own bias: the conv's new output has the layout the conv's rule gives
// (its input's, NCHW here), not the graph output's declared NHWC, which stays on the bias_add's output.
// Verified after every pass (a pass writing a type its shape rule disagrees with fails planning).
TEST(Planner, BiasSplitKeepsTheConvsLayout) {
  Graph g("bias_split_layout");
  const Tensor x = g.input("x", {1, 8, 6, 6});  // NCHW
  g.output(g.conv2d(x, g.parameter("w", {4, 8, 1, 1}), g.parameter("b", {4}), Conv2dOptions{}), "y", Layout::NHWC);
  PlanOptions o;
  o.verify_after_each_pass = true;
  auto p = plan_graph(g, o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const TensorInfo& y = p->graph.tensor(*p->graph.find_tensor("y"));
  EXPECT_EQ(y.layout, Layout::NHWC);
  expect_plan_equals_graph(g, *p, 3);
}

TEST(Planner, SampleGroupCounts) {
  // conv + bias + batch norm + ReLU: one kernel. The NCHW input's conversion is the conv's load, the NCHW
  // output's conversion its store, and the KCRS weight's conversion a weight transform.
  Plan p = plan_of(load_sample("conv_bias_bn_relu"));
  EXPECT_EQ(p.kernel_count(), 1) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::weight_transform), 1);
  // The ResNet-50 bottleneck: three convolution kernels, the residual add and final ReLU inside the third,
  // plus one kernel converting the NCHW input, which both conv1 and the residual add read.
  p = plan_of(load_sample("resnet50_bottleneck"));
  EXPECT_EQ(count_kind(p, GroupKind::conv), 3) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::layout), 1) << plan_to_text(p);
  EXPECT_EQ(p.kernel_count(), 4);
  const Group& third = p.groups[static_cast<size_t>(p.groups.size() - 1)];
  std::set<OpId> ops;
  for (int32_t n : third.nodes) ops.insert(*p.graph.node(n).op);
  EXPECT_TRUE(ops.count(OpId::add) && ops.count(OpId::relu) && ops.count(OpId::conv2d)) << plan_to_text(p);
  // GroupNorm + SiLU fuse; each conv takes its bias, the second also the residual add: 2 norm groups,
  // 2 conv groups, and the input conversion (read by norm1 and the residual add).
  p = plan_of(load_sample("groupnorm_silu_conv"));
  EXPECT_EQ(count_kind(p, GroupKind::norm), 2) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::conv), 2);
  EXPECT_EQ(p.kernel_count(), 5);
  for (const Group& grp : p.groups) {
    if (grp.kind != GroupKind::norm) continue;
    std::set<OpId> o;
    for (int32_t n : grp.nodes) o.insert(*p.graph.node(n).op);
    EXPECT_TRUE(o.count(OpId::group_norm) && o.count(OpId::silu));
  }
  // The LSTM cell: the two gate matmuls (the bias and the sum of both in the second's epilogue), then one
  // pointwise kernel reading the four gates through their slices' views and computing every activation and
  // product of the cell.
  p = plan_of(load_sample("lstm_cell"));
  EXPECT_EQ(p.kernel_count(), 3) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::pointwise), 1);
  for (const Group& grp : p.groups) {
    int slices = 0;
    for (int32_t n : grp.nodes) slices += *p.graph.node(n).op == OpId::slice;
    EXPECT_EQ(slices, grp.kind == GroupKind::pointwise ? 4 : 0);
  }
  // A LLaMA-style SwiGLU feed-forward block: the RMS norm, the fused up/gate projection, one pointwise
  // kernel reading both halves through their slices (silu(gate) * up), the down projection with the residual
  // add in its epilogue.
  p = plan_of(load_sample("swiglu_ffn"));
  EXPECT_EQ(p.kernel_count(), 4) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::pointwise), 1);
  EXPECT_EQ(count_kind(p, GroupKind::matmul), 2);
  // The MLP: two matmul kernels (bias and GELU in the first's epilogue, bias in the second's).
  p = plan_of(load_sample("mlp_gelu"));
  EXPECT_EQ(p.kernel_count(), 2) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::matmul), 2);
  // ResNet-50: 53 convolution kernels (every batch norm, ReLU and residual add in an epilogue, the global
  // pool in the last one's: its pool epilogue; the input conversion is the stem conv's load), the max
  // pool, and the fully connected matmul with its bias, reading the flatten in place: 55.
  p = plan_of(load_sample("resnet50"));
  EXPECT_EQ(count_kind(p, GroupKind::conv), 53);
  EXPECT_EQ(count_kind(p, GroupKind::weight_transform), 17);  // 1x1 weights are the same in KCRS and KRSC
  EXPECT_EQ(p.kernel_count(), 55) << plan_to_text(p);
  // At batch 1 the 100 MB of weights are read either way; fusion still halves the traffic.
  EXPECT_LT(p.bytes_moved * 19, p.unfused_bytes_moved * 10);
}

// One test per sample (not one loop over them): ctest runs them side by side, and the sanitizer run leaves
// the whole ResNet-50 out by name, as it does the other whole-network tests (tools/sanitize.sh).
std::vector<std::string> sample_graph_names() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "samples" / "graphs")) {
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class PlannerSample : public ::testing::TestWithParam<std::string> {};

TEST_P(PlannerSample, RunsTheSameThroughItsPlan) {
  auto g = load_graph((fs::path(KILN_SOURCE_DIR) / "samples" / "graphs" / (GetParam() + ".json")).string());
  ASSERT_TRUE(g.ok());
  for (LayoutPolicy lp : {LayoutPolicy::automatic, LayoutPolicy::nchw}) {
    // ResNet-50 takes seconds on `ref`: once is enough.
    if (lp == LayoutPolicy::nchw && GetParam() == "resnet50") continue;
    Plan p = plan_of(*g, {.layout = lp});
    check_plan_invariants(p);
    expect_plan_equals_graph(*g, p, 11);
  }
}

INSTANTIATE_TEST_SUITE_P(Samples, PlannerSample, ::testing::ValuesIn(sample_graph_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(Planner, ThreeConvsNchwInAndOutGetOneConversionEachWay) {
  Graph g("three_convs");
  Tensor x = g.input("x", {2, 8, 10, 10});
  Tensor y = x;
  for (int i = 0; i < 3; ++i)
    y = g.relu(g.conv2d(y, g.parameter(fmt::format("w{}", i), {8, 8, 3, 3}), {.padding = {1, 1}}));
  g.output(y, "y");
  Plan p = plan_of(g);
  int in = 0, out = 0, weights = 0;
  for (const Node& n : p.graph.nodes()) {
    if (*n.op != OpId::layout_convert) continue;
    const TensorInfo& src = p.graph.tensor(n.inputs[0][0]);
    if (src.kind == TensorKind::parameter) {
      ++weights;
    } else if (src.name == "x") {
      ++in;
    } else {
      EXPECT_EQ(p.graph.tensor(n.outputs[0]).name, "y");
      ++out;
    }
  }
  EXPECT_EQ(in, 1);
  EXPECT_EQ(out, 1);
  EXPECT_EQ(weights, 3);
  EXPECT_EQ(p.kernel_count(), 3) << plan_to_text(p);
  EXPECT_EQ(p.graph.tensor(*p.graph.find_tensor("y")).layout, Layout::NCHW);
  expect_plan_equals_graph(g, p, 3);
  // Forcing NCHW: no conversion at all.
  Plan q = plan_of(g, {.layout = LayoutPolicy::nchw});
  for (const Node& n : q.graph.nodes()) EXPECT_NE(*n.op, OpId::layout_convert);
  // NHWC in and out: no activation conversion, only the weights'.
  Graph h("nhwc");
  Tensor hx = h.input("x", {2, 8, 10, 10}, DType::f32, Layout::NHWC);
  h.output(h.conv2d(hx, h.parameter("w", {8, 8, 3, 3})), "y", Layout::NHWC);
  Plan r = plan_of(h);
  EXPECT_EQ(r.kernel_count(), 1);
  EXPECT_EQ(count_kind(r, GroupKind::weight_transform), 1);
}

// A graph output that later nodes read again: the NHWC value keeps flowing to the next convolution, a
// row-major reader shares the output's one NCHW conversion, and the output keeps its name and layout.
TEST(Planner, AnOutputReadAgainIsConvertedOnceAndKeepsItsName) {
  Graph g("output_read_again");
  Tensor x = g.input("x", {2, 8, 6, 6});
  Tensor mid = g.relu(g.conv2d(x, g.parameter("w0", {8, 8, 3, 3}), {.padding = {1, 1}}), "mid_relu");
  g.output(mid, "mid");
  Tensor deeper = g.conv2d(mid, g.parameter("w1", {8, 8, 1, 1}), {}, "conv1");
  Tensor flat = g.reshape(mid, {2, 8 * 36}, "flat");
  g.output(deeper, "deep");
  g.output(flat, "flat_out");
  Plan p = plan_of(g);
  const Graph& pg = p.graph;
  const Tensor out_mid = pg.outputs()[0];
  EXPECT_EQ(pg.tensor(out_mid).name, "mid");
  EXPECT_EQ(pg.tensor(out_mid).layout, Layout::NCHW);
  int mid_conversions = 0;
  for (const Node& n : pg.nodes()) {
    if (*n.op == OpId::layout_convert && pg.tensor(n.inputs[0][0]).name == "mid.nhwc") ++mid_conversions;
    if (n.name == "conv1") {
      EXPECT_EQ(pg.tensor(n.inputs[0][0]).layout, Layout::NHWC) << dump_graph(pg);
    }
    if (n.name == "flat") {
      EXPECT_EQ(n.inputs[0][0], out_mid) << dump_graph(pg);
    }
  }
  EXPECT_EQ(mid_conversions, 1) << dump_graph(pg);
  expect_plan_equals_graph(g, p, 11);
}

// An output whose two orders are the same bytes ([N, C, 1, 1]) needs no conversion and keeps the layout
// the user declared, while the NHWC value inside the graph flows on.
TEST(Planner, AnOutputWithOneSpatialElementKeepsItsDeclaredLayout) {
  Graph g("pooled_output");
  Tensor x = g.input("x", {2, 8, 5, 5});
  Tensor c = g.relu(g.conv2d(x, g.parameter("w", {8, 8, 3, 3}), {.padding = {1, 1}}));
  Tensor pooled = g.global_avg_pool(c, "pool");
  g.output(pooled, "pooled");
  g.output(g.conv2d(pooled, g.parameter("w2", {4, 8, 1, 1}), {}, "head"), "head_out");
  Plan p = plan_of(g);
  const Tensor out = *p.graph.find_tensor("pooled");
  EXPECT_EQ(p.graph.tensor(out).layout, Layout::NCHW) << dump_graph(p.graph);
  for (const Node& n : p.graph.nodes()) {
    if (*n.op == OpId::layout_convert) {
      EXPECT_NE(p.graph.tensor(n.inputs[0][0]).name, "pooled") << dump_graph(p.graph);
    }
  }
  expect_plan_equals_graph(g, p, 12);
}

TEST(Planner, CanonicalizeSplitsBiasesAndDropsIdentitiesAndCastChains) {
  Graph g("canon");
  Tensor x = g.input("x", {1, 4, 5, 5}, DType::f16);
  Tensor y = g.conv2d(x, g.parameter("w", {4, 4, 1, 1}, DType::f16), g.parameter("b", {4}, DType::f16), {}, "conv");
  y = g.identity(y, "id");
  y = g.cast(g.cast(y, DType::f32, "up"), DType::bf16, "down");  // f16 -> f32 -> bf16 == f16 -> bf16
  y = g.cast(y, DType::bf16, "same");                            // a no-op
  g.output(y, "y");
  std::map<std::string, std::string> dumps;
  PlanOptions o;
  o.layout = LayoutPolicy::nchw;
  o.after_pass = [&](std::string_view pass, const Graph& gg) { dumps[std::string(pass)] = dump_graph(gg); };
  Plan p = plan_of(g, o);
  const std::string& c = dumps.at("dce");
  EXPECT_NE(c.find("conv: [1, 4, 5, 5] f16 NCHW = bias_add 'conv.bias'(conv.nobias, b) {axis=1}"), std::string::npos)
      << c;
  EXPECT_EQ(c.find("identity"), std::string::npos) << c;
  EXPECT_EQ(c.find("'up'"), std::string::npos) << c;  // the widening cast is gone
  EXPECT_NE(c.find("'down'"), std::string::npos) << c;
  EXPECT_EQ(p.kernel_count(), 1) << plan_to_text(p);
  expect_plan_equals_graph(g, p, 5);
}

// An op reading two pointwise groups merges them into one kernel (an LSTM cell's gates: each gate's
// activation starts a group of its own, and the products and sums that combine them join them into one).
TEST(Planner, SiblingPointwiseGroupsMergeIntoOneKernel) {
  Graph g("gates");
  auto in = [&](const char* name) { return g.input(name, {4, 32}); };
  const Tensor i = g.sigmoid(in("i")), f = g.sigmoid(in("f")), gate = g.tanh(in("g")), o = g.sigmoid(in("o"));
  const Tensor c = g.add(g.mul(i, gate), g.mul(f, in("c")));
  g.output(c, "c_next");
  g.output(g.mul(o, g.tanh(c)), "h_next");
  Plan p = plan_of(g);
  EXPECT_EQ(p.kernel_count(), 1) << plan_to_text(p);
  EXPECT_EQ(count_kind(p, GroupKind::pointwise), 1);
  expect_plan_equals_graph(g, p, 3);
  // A merge is a fusion like any other: the policy has its say. One refusing every pair after a tanh leaves
  // each tanh's group apart from its readers' (the muls join the sigmoids' groups, the tanhs stay out).
  PlanOptions no_tanh;
  no_tanh.policy = [](const Graph& pg, int32_t producer, int32_t) { return *pg.node(producer).op != OpId::tanh; };
  p = plan_of(g, no_tanh);
  std::vector<int32_t> group_of(p.graph.nodes().size(), -1);
  for (const Group& grp : p.groups)
    for (int32_t n : grp.nodes) group_of[static_cast<size_t>(n)] = grp.id;
  int tanhs = 0;
  for (size_t n = 0; n < p.graph.nodes().size(); ++n) {
    const Node& nd = p.graph.nodes()[n];
    for (size_t c = 0; c < p.graph.nodes().size(); ++c) {
      const auto& ins = p.graph.nodes()[c].inputs;
      const bool reads = std::any_of(ins.begin(), ins.end(), [&](const auto& port) {
        return std::find(port.begin(), port.end(), nd.outputs[0]) != port.end();
      });
      if (*nd.op == OpId::tanh && reads) {
        ++tanhs;
        EXPECT_NE(group_of[n], group_of[c]) << plan_to_text(p);
      }
    }
  }
  EXPECT_EQ(tanhs, 2);
  expect_plan_equals_graph(g, p, 5);
}

// ... unless a kernel between them would then both read the merged group and feed it: b reads a through
// the transpose's kernel, so a's group and b's stay apart (merged, the plan's group graph would be cyclic),
// and the transpose becomes the load of b's group.
TEST(Planner, SiblingGroupsThatWouldWaitForThemselvesStayApart) {
  Graph g("sibling_cycle");
  const Tensor a = g.relu(g.input("x", {16, 16}), "a");
  const Tensor b = g.tanh(g.transpose(a, {1, 0}, "t"), "b");
  g.output(g.mul(b, a, "y"), "y");
  Plan p = plan_of(g);
  EXPECT_EQ(p.kernel_count(), 2) << plan_to_text(p);
  expect_plan_equals_graph(g, p, 4);
}

TEST(Planner, AProducerReadByTwoGroupsIsWrittenOutNotFusedAway) {
  Graph g("branch");
  Tensor x = g.input("x", {1, 8, 6, 6}, DType::f32, Layout::NHWC);
  Tensor r = g.relu(g.conv2d(x, g.parameter("w0", {8, 8, 1, 1}, DType::f32, Layout::KRSC)), "shared");
  Tensor a = g.conv2d(r, g.parameter("w1", {8, 8, 3, 3}, DType::f32, Layout::KRSC), {.padding = {1, 1}}, "a");
  Tensor b = g.conv2d(r, g.parameter("w2", {8, 8, 1, 1}, DType::f32, Layout::KRSC), {}, "b");
  g.output(g.add(a, b), "y", Layout::NHWC);
  Plan p = plan_of(g);
  EXPECT_EQ(p.kernel_count(), 3) << plan_to_text(p);
  const Group& first = p.groups[0];
  ASSERT_EQ(first.outputs.size(), 1u);
  EXPECT_EQ(p.graph.tensor(first.outputs[0]).name, "shared");
  int readers = 0;
  for (const Group& grp : p.groups)
    for (Tensor t : grp.inputs) readers += p.graph.tensor(t).name == "shared";
  EXPECT_EQ(readers, 2);
  expect_plan_equals_graph(g, p, 9);
}

TEST(Planner, ConcatOfKernelOutputsCostsNoKernel) {
  Graph g("concat");
  Tensor x = g.input("x", {2, 3, 4, 4}, DType::f32, Layout::NHWC);
  Tensor a = g.conv2d(x, g.parameter("wa", {5, 3, 1, 1}, DType::f32, Layout::KRSC), {}, "ca");
  Tensor b =
      g.sigmoid(g.conv2d(x, g.parameter("wb", {2, 3, 3, 3}, DType::f32, Layout::KRSC), {.padding = {1, 1}}, "cb"));
  Tensor c = g.concat({a, b}, 1, "cat");
  g.output(g.relu(c), "y", Layout::NHWC);
  Plan p = plan_of(g);
  EXPECT_EQ(count_kind(p, GroupKind::concat_elided), 1) << plan_to_text(p);
  EXPECT_EQ(p.kernel_count(), 3);  // two convs writing their slices, the ReLU reading the concat
  check_plan_invariants(p);
  expect_plan_equals_graph(g, p, 4);
  // An input that is also a graph output lives in its binding, not in the slice: the concat copies it.
  Graph h("concat_copy");
  Tensor hx = h.input("x", {2, 3}, DType::f32);
  Tensor ha = h.relu(hx);
  h.output(h.concat({ha, h.sigmoid(hx)}, 0, "cat"), "y");
  h.output(ha, "a");
  Plan q = plan_of(h);
  EXPECT_EQ(count_kind(q, GroupKind::concat), 1) << plan_to_text(q);
  expect_plan_equals_graph(h, q, 4);
}

TEST(Planner, MaxGroupOpsCapsGroupsAndBadOptionsAreErrors) {
  Graph g = load_sample("conv_bias_bn_relu");
  Plan p = plan_of(g, {.max_group_ops = 1});
  for (const Group& grp : p.groups) EXPECT_EQ(grp.nodes.size(), 1u);
  expect_plan_equals_graph(g, p, 2);
  auto bad = plan_graph(g, {.max_group_ops = 0});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_group_ops: expected at least 1, got 0"), std::string::npos);
  auto bad2 = plan_graph(g, {.layout = static_cast<LayoutPolicy>(7)});
  ASSERT_FALSE(bad2.ok());
  EXPECT_NE(bad2.status().message().find("expected auto, nchw or nhwc"), std::string::npos);
  Graph invalid;
  invalid.input("x", {2});
  auto bad3 = plan_graph(invalid);
  ASSERT_FALSE(bad3.ok());
  EXPECT_NE(bad3.status().message().find("no outputs"), std::string::npos);
}

TEST(Planner, PolicyIsReplaceable) {
  Graph g = load_sample("mlp_gelu");
  PlanOptions never;
  never.policy = [](const Graph&, int32_t, int32_t) { return false; };
  Plan p = plan_of(g, never);
  EXPECT_EQ(p.kernel_count(), static_cast<int>(p.graph.nodes().size())) << plan_to_text(p);
  expect_plan_equals_graph(g, p, 1);
}

// Random DAGs of anchors and pointwise ops: every plan is acyclic, its memory plan sound, its meaning
// the graph's.
Graph random_dag(std::mt19937_64& rng, int nodes) {
  Graph g("random");
  const int64_t C = 4;
  std::vector<Tensor> act{g.input("x0", {1, C, 5, 5}), g.input("x1", {1, C, 5, 5})};
  std::vector<Tensor> vec{g.input("m0", {6, 6})};
  auto pick = [&](std::vector<Tensor>& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  for (int i = 0; i < nodes; ++i) {
    const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
    const std::string w = fmt::format("w{}", i);
    switch (kind) {
      case 0: act.push_back(g.conv2d(pick(act), g.parameter(w, {C, C, 3, 3}), {.padding = {1, 1}})); break;
      case 1: act.push_back(g.conv2d(pick(act), g.parameter(w, {C, C, 1, 1}), g.parameter(w + "b", {C}))); break;
      case 2: act.push_back(g.relu(pick(act))); break;
      case 3: act.push_back(g.add(pick(act), pick(act))); break;
      case 4: act.push_back(g.mul(pick(act), g.parameter(w, {C, 1, 1}))); break;
      case 5: act.push_back(g.sigmoid(pick(act))); break;
      case 6: act.push_back(g.bias_add(pick(act), g.parameter(w, {C}))); break;
      case 7: vec.push_back(g.matmul(pick(vec), g.parameter(w, {6, 6}))); break;
      case 8: vec.push_back(g.tanh(g.add(pick(vec), pick(vec)))); break;
      default: act.push_back(g.sub(pick(act), 0.5)); break;
    }
  }
  // A few outputs, among them some intermediates.
  g.output(act.back(), "out_a");
  if (vec.size() > 1) g.output(vec.back(), "out_v");
  if (act.size() > 4) g.output(act[act.size() / 2], "out_mid", Layout::NCHW);
  return g;
}

TEST(Planner, RandomDagsPlanSoundly) {
  std::mt19937_64 rng(20261129);
  for (int trial = 0; trial < 60; ++trial) {
    Graph g = random_dag(rng, 6 + trial % 20);
    if (!g.verify().ok()) continue;  // a duplicate output pick; rare
    PlanOptions o;
    o.max_group_ops = 1 + static_cast<int>(rng() % 8);
    o.layout = static_cast<LayoutPolicy>(rng() % 3);
    SCOPED_TRACE(
        fmt::format("trial {}, max_group_ops {}, layout {}", trial, o.max_group_ops, layout_policy_name(o.layout)));
    Plan p = plan_of(g, o);
    check_plan_invariants(p);
    if (HasFatalFailure()) return;
    expect_plan_equals_graph(g, p, static_cast<uint64_t>(trial));
    if (HasFatalFailure()) return;
  }
}

// Golden dumps after each pass, rewritten only when KILN_UPDATE_GOLDEN=1.
TEST(Planner, PassDumpsMatchGoldenFiles) {
  for (const std::string sample : {"conv_bias_bn_relu", "resnet50_bottleneck"}) {
    std::map<std::string, std::string> dumps;
    PlanOptions o;
    o.after_pass = [&](std::string_view pass, const Graph& gg) { dumps[std::string(pass)] = dump_graph(gg); };
    plan_of(load_sample(sample), o);
    for (std::string_view pass : pass_names()) {
      expect_matches_golden(fs::path(KILN_SOURCE_DIR) / "tests" / "golden" / fmt::format("{}.{}.txt", sample, pass),
                            dumps.at(std::string(pass)));
    }
  }
}

}  // namespace
}  // namespace kiln
