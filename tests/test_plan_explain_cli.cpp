// `kiln plan --explain` and the dot options (--dot-no-params, --dot-kernels-only), run as a subprocess.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/json.h"
#include "kiln/plan.h"
#include "plan_cli_fixture.h"

namespace kiln {
namespace {

using plan_cli::find_on_path;
using plan_cli::lines_of;
using plan_cli::sample;
using ::testing::Not;

using json = nlohmann::ordered_json;

class PlanExplainCli : public plan_cli::PlanCliFixture {
 protected:
  json plan_json(const std::string& graph) {
    Proc p = kiln({"plan", graph, "--format", "json"});
    EXPECT_EQ(p.code, 0) << p.err;
    return json::parse(p.out);
  }
};

// The tensors between kernels of a plan's JSON form, as "group P -> group C ('t'): " (no concats in resnet50).
std::set<std::string> kernel_edges(const json& j) {
  std::map<std::string, int> writer;  // tensor -> kernel group writing it
  for (const auto& grp : j["groups"])
    if (grp["kernel"].get<bool>())
      for (const auto& t : grp["outputs"]) writer[t["name"].get<std::string>()] = grp["id"].get<int>();
  std::set<std::string> edges;
  for (const auto& grp : j["groups"]) {
    if (!grp["kernel"].get<bool>()) continue;
    for (const auto& t : grp["inputs"]) {
      auto it = writer.find(t["name"].get<std::string>());
      if (it != writer.end())
        edges.insert(fmt::format("group {} -> group {} ('{}'): ", it->second, grp["id"].get<int>(), it->first));
    }
  }
  return edges;
}

TEST_F(PlanExplainCli, EveryKernelEdgeOfResnet50HasALine) {
  const std::string g = sample("resnet50");
  Proc p = kiln({"plan", g, "--explain"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.err, "");
  const auto lines = lines_of(p.out);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0], "plan: resnet50_v1.5");
  EXPECT_EQ(lines[1], "target: h200 (sm_90, 132 SMs)");
  const json j = plan_json(g);
  const std::set<std::string> edges = kernel_edges(j);
  ASSERT_GT(edges.size(), 50u);
  EXPECT_EQ(lines[2], fmt::format("kernels: {}, tensors between kernels: {} (each with the rule that kept its kernels "
                                  "apart)",
                                  j["totals"]["kernels"].get<int>(), edges.size()));
  ASSERT_EQ(lines.size(), 3 + edges.size()) << p.out;
  std::set<std::string> seen;
  for (size_t i = 3; i < lines.size(); ++i) {
    const std::string head = lines[i].substr(0, lines[i].find("): ") + 3);
    EXPECT_TRUE(edges.count(head)) << lines[i];
    EXPECT_TRUE(seen.insert(head).second) << "twice: " << lines[i];
    EXPECT_THAT(lines[i], Not(HasSubstr("no fusion rule joins"))) << "every reason is the planner's own";
  }
  EXPECT_THAT(p.out, HasSubstr("group 1 -> group 2 ('relu'): relu 'relu' -> max_pool2d 'maxpool': 'relu' is in the "
                               "epilogue of a conv group: a max_pool2d takes only a pointwise group of its own as its "
                               "prologue\n"));
  EXPECT_THAT(p.out, HasSubstr("max_pool2d 'maxpool' -> conv2d 'layer1.0.conv1': a conv2d takes only a pointwise group "
                               "as its prologue, not a pool group\n"));
  EXPECT_THAT(p.out, HasSubstr("relu 'layer1.0.relu1' -> conv2d 'layer1.0.conv2': 'layer1.0.relu1' is in the epilogue "
                               "of a conv group: a conv2d takes only a pointwise group of its own as its prologue\n"));
  EXPECT_THAT(p.out, HasSubstr("batch_norm 'layer1.0.downsample.1' -> add 'layer1.0.add': the add joined the group "
                               "computing its input 'layer1.0.bn3' instead: an op joins one group\n"));
  EXPECT_EQ(kiln({"plan", "--explain", g, "--format=text"}).out, p.out) << "deterministic; text is the default";

  // The JSON form has the same separations, keys in a fixed order.
  ASSERT_EQ(j["separations"].size(), edges.size());
  for (const auto& s : j["separations"]) {
    std::vector<std::string> keys;
    for (auto it = s.begin(); it != s.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"producer_group", "producer_node", "producer_op", "consumer_group",
                                              "consumer_node", "consumer_op", "tensor", "concat", "rule", "reason"}));
    EXPECT_TRUE(s["concat"].is_null());
    EXPECT_THAT(p.out, HasSubstr(fmt::format("{} '{}' -> {} '{}': {}\n", s["producer_op"].get<std::string>(),
                                             s["producer_node"].get<std::string>(), s["consumer_op"].get<std::string>(),
                                             s["consumer_node"].get<std::string>(), s["reason"].get<std::string>())));
  }
}

// docs/cli.md shows the explanation of a sample as it is.
TEST_F(PlanExplainCli, TheDocumentedExampleIsTrue) {
  const std::string doc = slurp((fs::path(KILN_SOURCE_DIR) / "docs" / "cli.md").string());
  const std::string cmd = "$ build/kiln plan samples/graphs/resnet50_bottleneck.json --explain\n";
  const size_t at = doc.find(cmd);
  ASSERT_NE(at, std::string::npos);
  const size_t start = at + cmd.size();
  const std::string shown = doc.substr(start, doc.find("\n\n", start) + 1 - start);
  Proc p = kiln({"plan", sample("resnet50_bottleneck"), "--explain"});
  EXPECT_EQ(shown, p.out) << "update the example in docs/cli.md";
}

TEST_F(PlanExplainCli, ReasonsOfSmallGraphs) {
  Graph chain("chain");
  Tensor t = chain.input("x", {64});
  for (const char* name : {"r1", "r2", "r3"}) t = chain.relu(t, name);
  chain.output(t, "y");
  ASSERT_TRUE(chain.verify().ok());
  ASSERT_TRUE(save_graph(chain, path("chain.json")).ok());
  Proc p = kiln({"plan", path("chain.json"), "--explain", "--max-group-ops", "2"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("\nkernels: 2, tensors between kernels: 1 (each with the rule that kept its kernels "
                               "apart)\ngroup 0 -> group 1 ('r2'): relu 'r2' -> relu 'r3': the group reached the max "
                               "group size (2 ops)\n"));

  Graph split("two_domains");
  auto a = split.relu(split.input("x", {4, 5}), "a");
  split.output(split.add(a, split.input("z1", {3, 4, 5}), "b"), "b");
  split.output(split.add(a, split.input("z2", {2, 4, 5}), "c"), "c");
  ASSERT_TRUE(split.verify().ok());
  ASSERT_TRUE(save_graph(split, path("split.json")).ok());
  p = kiln({"plan", path("split.json"), "--explain"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("group 0 -> group 1 ('a'): relu 'a' -> add 'c': the add's output [2, 4, 5] does not "
                               "broadcast with the values of the pointwise group of 'a' (one kernel walks one "
                               "domain)\n"));
}

TEST_F(PlanExplainCli, UsageErrors) {
  const std::string g = sample("conv_bias_bn_relu");
  expect_usage({"plan", g, "--dot-kernels-only"},
               "--dot-kernels-only is an option of the drawing: it needs --format dot or svg");
  expect_usage({"plan", g, "--dot-no-params", "--format", "json"},
               "--dot-no-params is an option of the drawing: it needs --format dot or svg");
  expect_usage({"plan", g, "--explain", "--format", "json"},
               "--explain prints text: it takes no --format json (the JSON form always has the reasons, in "
               "'separations')");
  expect_usage({"plan", g, "--explain", "--format=dot"}, "--explain prints text: it takes no --format dot");
  expect_usage({"plan", g, "--explain=yes"}, "option '--explain' takes no value");
  expect_usage({"plan", g, "--explain", "--explain"}, "option '--explain' given twice");
  expect_usage({"plan", g, "--explain", "--dump-after", "fusion"},
               "--dump-after prints the graph after a pass: it takes "
               "no --explain");
  expect_usage({"plan", g, "--explian"}, "The following argument was not expected: --explian");
  Proc help = kiln({"plan", "--help"});
  for (const char* flag : {"--explain", "--dot-no-params", "--dot-kernels-only"})
    EXPECT_THAT(help.out, HasSubstr(flag));
}

TEST_F(PlanExplainCli, DotWithoutParameters) {
  const std::string g = sample("resnet50_bottleneck");
  Proc full = kiln({"plan", g, "--format", "dot"});
  Proc p = kiln({"plan", g, "--format", "dot", "--dot-no-params"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(full.out, HasSubstr("style=dashed"));
  EXPECT_THAT(full.out, HasSubstr("weight_transform"));
  EXPECT_THAT(p.out, Not(HasSubstr("style=dashed"))) << "no parameter ellipses";
  EXPECT_THAT(p.out, Not(HasSubstr("weight_transform"))) << "no weight-transform clusters";
  EXPECT_THAT(p.out, HasSubstr("label=\"x\\n[1, 256, 56, 56] f32\", shape=ellipse]")) << "inputs stay";
  const json j = plan_json(g);
  for (const auto& grp : j["groups"]) {
    const bool shown = p.out.find(fmt::format("subgraph cluster_{} {{", grp["id"].get<int>())) != std::string::npos;
    EXPECT_EQ(shown, grp["kind"] != "weight_transform") << grp["id"];
  }
  // No edge names a node or tensor that is not drawn.
  std::set<std::string> drawn;
  std::regex decl("^\\s*([nt][0-9]+|out[0-9]+) \\[label="), edge("^\\s*(\\w+) -> (\\w+)");
  std::smatch m;
  for (const auto& l : lines_of(p.out))
    if (std::regex_search(l, m, decl)) drawn.insert(m[1]);
  for (const auto& l : lines_of(p.out)) {
    if (!std::regex_search(l, m, edge) || l.find("legend_") != std::string::npos) continue;
    EXPECT_TRUE(drawn.count(m[1]) && drawn.count(m[2])) << l;
  }
}

TEST_F(PlanExplainCli, DotKernelsOnly) {
  const std::string g = sample("resnet50");
  Proc p = kiln({"plan", g, "--format", "dot", "--dot-kernels-only"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, Not(HasSubstr("subgraph cluster_0"))) << "boxes, not clusters";
  const json j = plan_json(g);
  int kernels = 0;
  for (const auto& grp : j["groups"]) {
    const std::string box = fmt::format("  k{} [label=", grp["id"].get<int>());
    EXPECT_EQ(p.out.find(box) != std::string::npos, grp["kernel"].get<bool>()) << box;
    if (!grp["kernel"].get<bool>()) continue;
    ++kernels;
    EXPECT_THAT(p.out, HasSubstr(fmt::format("{}\"group {}: {}\\nfamily {}\\n{} op{}\"", box, grp["id"].get<int>(),
                                             grp["kind"].get<std::string>(), grp["family"].get<std::string>(),
                                             grp["nodes"].size(), grp["nodes"].size() == 1 ? "" : "s")));
  }
  EXPECT_EQ(kernels, j["totals"]["kernels"].get<int>());
  // One edge per tensor between kernels, labelled with it, its reason as the tooltip.
  std::regex edge("^  k([0-9]+) -> k([0-9]+) \\[label=\"([^\"]*)\", tooltip=\"([^\"]*)\"\\];$");
  std::smatch m;
  size_t edges = 0;
  for (const auto& l : lines_of(p.out)) {
    if (!std::regex_match(l, m, edge)) continue;
    const auto& s = j["separations"][edges++];
    EXPECT_EQ(std::stoi(m[1]), s["producer_group"].get<int>()) << l;
    EXPECT_EQ(std::stoi(m[2]), s["consumer_group"].get<int>()) << l;
    EXPECT_EQ(m[3].str(), s["tensor"].get<std::string>()) << l;
    EXPECT_EQ(m[4].str(), s["reason"].get<std::string>()) << l;
  }
  EXPECT_EQ(edges, j["separations"].size());
  EXPECT_THAT(p.out, HasSubstr("  t0 -> k1;\n")) << "the graph input";
  EXPECT_THAT(p.out, HasSubstr("  k71 -> out0;\n")) << "the graph output";
  EXPECT_THAT(p.out, Not(HasSubstr("style=dashed"))) << "no parameters";
}

// Both options, rendered by the real `dot` (tools/setup.sh installs graphviz), warning-free.
TEST_F(PlanExplainCli, DotOptionsRenderToSvg) {
  const std::string dot = find_on_path("dot");
  if (dot.empty()) GTEST_SKIP() << "Graphviz 'dot' is not on the PATH (tools/setup.sh installs the graphviz package)";
  for (const char* name : {"resnet50", "groupnorm_silu_conv"}) {
    for (const char* option : {"--dot-no-params", "--dot-kernels-only"}) {
      SCOPED_TRACE(fmt::format("{} {}", name, option));
      Proc p = kiln({"plan", sample(name), "--format", "dot", option});
      ASSERT_EQ(p.code, 0) << p.err;
      const std::string in = path("plan.dot"), out = path("plan.svg");
      std::ofstream(in, std::ios::binary) << p.out;
      Proc r = subprocess::run_process(dot, {"-Tsvg", in, "-o", out}, dir_, std::chrono::seconds(120));
      ASSERT_EQ(r.code, 0) << r.err;
      EXPECT_EQ(r.err, "") << "dot warned";
      const std::string svg = slurp(out);
      EXPECT_THAT(svg, HasSubstr("<svg"));
      const json j = plan_json(sample(name));
      for (const auto& grp : j["groups"]) {
        const int id = grp["id"].get<int>();
        if (std::string(option) == "--dot-kernels-only") {
          if (grp["kernel"].get<bool>()) {
            EXPECT_THAT(svg, HasSubstr(fmt::format("<title>k{}</title>", id)));
          }
        } else if (grp["kind"] != "weight_transform") {
          EXPECT_THAT(svg, HasSubstr(fmt::format("<title>cluster_{}</title>", id)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
