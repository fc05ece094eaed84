// The kernel families and the planner's contract with them: every group of every plan has a family that
// runs it (fusion splits what no family runs), a single op no family runs is a planning error naming it,
// and targets change what the families choose.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "codegen/family.h"
#include "codegen/nvrtc.h"
#include "codegen_check.h"
#include "kiln/compare.h"
#include "kiln/json.h"
#include "kiln/plan.h"
#include "kiln/reference.h"
#include "op_cases.h"
#include "refusing_chooser.h"
#include "runtime/kernel_provider.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Every kernel group of `p` has a family, plans (KernelConfig of that family) and generates.
void expect_every_group_generates(const Plan& p, const std::string& what) {
  for (const Group& grp : p.groups) {
    if (!grp.is_kernel() && grp.kind != GroupKind::weight_transform) continue;
    EXPECT_NE(grp.family, KernelFamilyId::none) << what << ": group " << grp.id;
    auto c = codegen::plan_kernel(p, grp);
    ASSERT_TRUE(c.ok()) << what << ": " << c.status().message();
    EXPECT_EQ(c->family, grp.family) << what << ": group " << grp.id;
    auto k = codegen::generate_kernel(p, grp);
    ASSERT_TRUE(k.ok()) << what << ": " << k.status().message();
    EXPECT_EQ(k->family, grp.family);
    EXPECT_EQ(k->target, p.target.key());
  }
}

std::vector<Graph> every_graph() {
  std::vector<Graph> gs;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "samples" / "graphs")) {
    auto g = load_graph(e.path().string());
    EXPECT_TRUE(g.ok()) << e.path() << ": " << g.status().message();
    if (g.ok()) gs.push_back(std::move(*g));
  }
  for (const auto& [name, build] : testing::op_cases()) {
    Graph g(name + "_graph");
    build(g);
    gs.push_back(std::move(g));
  }
  return gs;
}

// The samples and one graph per op of the registry, on three targets and every layout policy: fusion never
// returns a group that codegen refuses.
TEST(KernelFamilies, EverySampleAndOpGraphPlansToGroupsThatGenerate) {
  int plans = 0;
  for (const Graph& g : every_graph()) {
    for (const char* target : {"h200", "a100", "l4"}) {
      for (LayoutPolicy layout : {LayoutPolicy::automatic, LayoutPolicy::nchw, LayoutPolicy::nhwc}) {
        const std::string what = fmt::format("{} on {} ({})", g.name(), target, layout_policy_name(layout));
        auto p = plan_graph(g, {.layout = layout, .target = *target_named(target)});
        ASSERT_TRUE(p.ok()) << what << ": " << p.status().message();
        EXPECT_TRUE(p->refusals.empty()) << what << ": " << plan_to_text(*p);
        expect_every_group_generates(*p, what);
        ++plans;
      }
    }
  }
  EXPECT_GT(plans, 9 * 50);
}

// Kiln's families, except that conv groups holding a pointwise op are refused (a stand-in for a family that
// cannot take some epilogue): fusion must split such a group and plan again.
const testing::RefusingChooser& no_conv_epilogues() {
  static const testing::RefusingChooser chooser([](const Plan& plan, const Group& group) -> std::optional<std::string> {
    if (group.kind != GroupKind::conv) return std::nullopt;
    for (int32_t n : group.nodes) {
      const OpId op = *plan.graph.node(n).op;
      if (op != OpId::conv2d && op != OpId::layout_convert) return "this test's conv family takes no epilogue";
    }
    return std::nullopt;
  });
  return chooser;
}

TEST(KernelFamilies, ARefusedGroupIsSplitAndPlannedAgain) {
  Graph g("split");
  auto x = g.input("x", {1, 8, 6, 6});
  auto y = g.conv2d(x, g.parameter("w", {8, 8, 3, 3}), {.padding = {1, 1}}, "conv");
  y = g.relu(g.add(y, g.parameter("b", {8, 1, 1}), "add"), "relu");
  g.output(y, "y");
  ASSERT_TRUE(g.verify().ok());
  auto fused = plan_graph(g);
  ASSERT_TRUE(fused.ok());
  ASSERT_TRUE(fused->refusals.empty());
  auto p = plan_graph(g, {.chooser = &no_conv_epilogues()});
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->refusals.size(), 1u) << plan_to_text(*p);
  EXPECT_EQ(p->refusals[0].kind, GroupKind::conv);
  EXPECT_EQ(p->refusals[0].reason, "this test's conv family takes no epilogue");
  EXPECT_GT(p->kernel_count(), fused->kernel_count());
  EXPECT_NE(plan_to_text(*p).find("split: a conv group of"), std::string::npos) << plan_to_text(*p);
  // The conv's group holds no pointwise op now; the ops split off run alone (isolated: joined by nothing).
  for (const Group& grp : p->groups) {
    if (grp.kind == GroupKind::conv) {
      for (int32_t n : grp.nodes) EXPECT_NE(*p->graph.node(n).op, OpId::relu);
    }
  }
  expect_every_group_generates(*p, "split");
  // The split plan still computes the graph: group by group on the reference, equal to the graph's result.
  const TensorMap in = random_inputs(g, 3);
  auto want = run_reference(g, in);
  auto got = run_plan_reference(*p, in);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(got->at("y").data, want->at("y").data);
}

// Pointwise ops whose outputs do not broadcast to one domain ([3, 4, 5] and [2, 4, 5] from one [4, 5] value):
// one grid-stride loop walks one domain, so fusion keeps them apart up front (rule domain_shape) instead of
// proposing a group the pointwise family refuses (whose split would plan each of its ops alone): two
// kernels, nothing split, and the plan computes the graph.
TEST(KernelFamilies, PointwiseValuesOfUnbroadcastableShapesAreKeptApart) {
  Graph g("two_domains");
  auto a = g.relu(g.input("x", {4, 5}), "a");
  g.output(g.add(a, g.input("z1", {3, 4, 5}), "b"), "b");
  g.output(g.add(a, g.input("z2", {2, 4, 5}), "c"), "c");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto p = plan_graph(g);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->refusals.empty()) << plan_to_text(*p);
  EXPECT_EQ(p->kernel_count(), 2) << plan_to_text(*p);
  bool noted = false;
  for (const Separation& s : p->separations) {
    if (s.rule != SeparationRule::domain_shape) continue;
    noted = true;
    EXPECT_NE(separation_reason(*p, s).find("does not broadcast with the values of the pointwise group of 'a'"),
              std::string::npos)
        << separation_reason(*p, s);
  }
  EXPECT_TRUE(noted) << plan_explanation(*p);
  expect_every_group_generates(*p, "two_domains");
  const TensorMap in = random_inputs(g, 4);
  auto want = run_reference(g, in);
  ASSERT_TRUE(want.ok());
  auto got = testing::run_plan_on_test_device(*p, in, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().message();
  for (const char* o : {"b", "c"}) EXPECT_EQ(got->at(o).data, want->at(o).data) << o;  // one rounding, f32: exact
}

// A training batch norm written out: statistics from the conv's epilogue, mean and variance computed from
// them on [K] vectors, then the normalization of the conv's output. The [K] arithmetic and the [N, K, H, W]
// normalization are two domains: each its own kernel, nothing split into single ops (10 kernels before the
// domain rule). Emu against ref.
TEST(KernelFamilies, VectorArithmeticBeforeABatchNormIsNotSplit) {
  const int64_t N = 2, C = 8, H = 6, W = 6, K = 16;
  Graph g("conv_bn_train");
  const Tensor x = g.input("x", {N, C, H, W});
  const Tensor y = g.conv2d(x, g.parameter("w", {K, C, 3, 3}), {.padding = {1, 1}}, "conv");
  const Tensor stats = g.unary("channel_stats", y, {}, "stats");
  const double count = static_cast<double>(N * H * W);
  const Tensor mean = g.div(g.reshape(g.slice(stats, {0, 0}, {1, K}), {K}), count, "mean");
  const Tensor var = g.sub(g.div(g.reshape(g.slice(stats, {1, 0}, {2, K}), {K}), count), g.mul(mean, mean), "var");
  const Tensor bn = g.batch_norm(y, g.parameter("gamma", {K}), g.parameter("beta", {K}), mean, var, 1e-5, "bn");
  g.output(g.relu(bn, "relu"), "out");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto p = plan_graph(g);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->refusals.empty()) << plan_to_text(*p);
  EXPECT_LE(p->kernel_count(), 6) << plan_to_text(*p);  // conv + statistics, 2 slices, mean, var, bn + relu
  const TensorMap in = random_inputs(g, 6);
  auto want = run_reference(g, in);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = testing::run_plan_on_test_device(*p, in, nullptr);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const Comparison c = compare_tensors(got->at("out"), want->at("out"), output_tolerance_for(DType::f32));
  EXPECT_TRUE(c.ok) << c.problem;
}

// A grouped conv of 70,000 groups needs 70,000 channel tiles along the grid's y axis (at most 65,535): no
// family runs it. Planning says so, naming the node; without required kernels (ref) it plans.
TEST(KernelFamilies, AnOpNoFamilyRunsIsAPlanningErrorNamingIt) {
  Graph g("too_many_groups");
  auto x = g.input("x", {1, 140000, 1, 1});
  g.output(g.conv2d(x, g.parameter("w", {70000, 2, 1, 1}), {.groups = 70000}, "wide_conv"), "y");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto p = plan_graph(g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::unsupported);
  EXPECT_NE(p.status().message().find("node 'wide_conv' (conv2d): no kernel family runs it on h200 (sm_90)"),
            std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("channel tiles exceed the grid's y extent"), std::string::npos);
  EXPECT_NE(p.status().message().find("depthwise_conv2d: node 'wide_conv': not depthwise"), std::string::npos);
  auto ref_plan = plan_graph(g, {.require_kernels = false});
  ASSERT_TRUE(ref_plan.ok()) << ref_plan.status().message();
  EXPECT_EQ(ref_plan->groups.back().family, KernelFamilyId::none);
}

// Render follows the config, not its own idea: the conv family rendered with two or three main-loop stages
// compiles to kernels whose shared memory (ptxas) is what GemmTiles::smem_bytes says for each, for the
// tensor-core loop's f16 stages and the SIMT loop's f32 ones (both swizzled, unpadded).
TEST(KernelFamilies, RenderHonoursTheConfigsStages) {
  for (DType dt : {DType::f16, DType::f32}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Graph g("stages");
    auto x = g.input("x", {2, 32, 16, 16}, dt, Layout::NHWC);
    g.output(g.relu(g.conv2d(x, g.parameter("w", {64, 32, 3, 3}, dt, Layout::KRSC), {.padding = {1, 1}})), "y",
             Layout::NHWC);
    auto p = plan_graph(g);
    ASSERT_TRUE(p.ok()) << p.status().message();
    const Group* conv = nullptr;
    for (const Group& grp : p->groups)
      if (grp.family == KernelFamilyId::conv2d) conv = &grp;
    ASSERT_NE(conv, nullptr) << plan_to_text(*p);
    for (int stages : {2, 3}) {
      codegen::KernelBuilder b(*p, *conv);
      auto c = codegen::conv2d_family().plan(b, p->target);
      ASSERT_TRUE(c.ok()) << c.status().message();
      auto& tiles = std::get<codegen::ConvConfig>(c->detail).tiles;
      EXPECT_EQ(tiles.stages, 3);  // what the family chooses
      tiles.stages = stages;
      b.reset_glue();
      b.use_params(c->params);
      auto k = codegen::conv2d_family().render(b, *c);
      ASSERT_TRUE(k.ok()) << k.status().message();
      auto compiled = codegen::nvrtc_compile(k->source, {.arch = "sm_80", .extra = {}, .source_name = "stages.cu"});
      if (!compiled.ok() && compiled.status().code() == StatusCode::unsupported)
        GTEST_SKIP() << compiled.status().message();
      ASSERT_TRUE(compiled.ok()) << compiled.status().message();
      EXPECT_EQ(compiled->shared_bytes, tiles.smem_bytes(static_cast<int>(dtype_size(dt)))) << stages << " stages";
    }
  }
}

TEST(Targets, NamedDevicesAndArchs) {
  EXPECT_EQ(default_target().name, "h200");
  EXPECT_EQ(default_target().sm_count, 132);
  auto a100 = target_named("a100");
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->arch, "sm_80");
  EXPECT_EQ(a100->sm_count, 108);
  auto sm90a = target_named("sm_90a");  // the default device of the arch, compiled for exactly that arch
  ASSERT_TRUE(sm90a.ok());
  EXPECT_EQ(sm90a->name, "h200");
  EXPECT_EQ(sm90a->arch, "sm_90a");
  EXPECT_EQ(sm90a->cc(), 90);
  EXPECT_EQ(target_named("sm_86")->name, "a10");
  EXPECT_NE(sm90a->key(), default_target().key());
  EXPECT_EQ(target_named("h100")->key(), default_target().key());  // the same facts: the same kernels
  auto bad = target_named("v100");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown target 'v100': expected a device (h200 (sm_90), h100 (sm_90), "
                                        "a100 (sm_80), a10 (sm_86), l4 (sm_89))"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(target_named("sm_75").ok());
}

// The same group on two targets: a kernel whose source is the same is still a different cache entry (the key
// holds the target), and the plan says what it was made for.
TEST(Targets, PartOfEveryCacheKey) {
  Graph g("t");
  g.output(g.relu(g.input("x", {4, 64})), "y");
  Target pcie = *target_named("h100");  // an H100 PCIe: sm_90 with 114 SMs
  pcie.name = "h100-pcie";
  pcie.sm_count = 114;
  auto on_h200 = plan_graph(g);
  auto on_pcie = plan_graph(g, {.target = pcie});
  ASSERT_TRUE(on_h200.ok() && on_pcie.ok());
  EXPECT_EQ(on_pcie->target.name, "h100-pcie");
  auto a = plan_kernels(*on_h200), b = plan_kernels(*on_pcie);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ(a->front().source, b->front().source);
  EXPECT_NE(kernel_cache_key(a->front(), "sm_90").hex(), kernel_cache_key(b->front(), "sm_90").hex());
  // A device with an H200's facts under another name (what the cuda device reports) shares its entries.
  Target named_by_driver = default_target();
  named_by_driver.name = "NVIDIA H200";
  auto c = plan_kernels(*plan_graph(g, {.target = named_by_driver}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(kernel_cache_key(a->front(), "sm_90").hex(), kernel_cache_key(c->front(), "sm_90").hex());
}

}  // namespace
}  // namespace kiln
