// `kiln plan` run as a subprocess, the text / JSON / Graphviz forms of a plan, and the planner benchmark.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "plan_cli_fixture.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/json.h"
#include "kiln/plan.h"
#include "scoped_env.h"
#include "subprocess.h"

namespace kiln {
namespace {

using plan_cli::find_on_path;
using plan_cli::lines_of;
using plan_cli::PlanCliFixture;
using plan_cli::sample;
using plan_cli::sample_graphs;

// "1,234" -> 1234
int64_t parse_grouped(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  return std::stoll(s);
}

// The number after `label` in the totals of the text form ("  kernels:  3", "  workspace:  1,024 bytes ...").
std::optional<int64_t> text_total(const std::string& text, const std::string& label) {
  std::regex re("^  " + label + ":\\s+([0-9,]+)");
  std::smatch m;
  for (const auto& l : lines_of(text)) {
    if (std::regex_search(l, m, re)) return parse_grouped(m[1].str());
  }
  return std::nullopt;
}

using PlanCliTest = PlanCliFixture;
using PlanFormatTest = PlanCliFixture;

TEST_F(PlanCliTest, EverySampleInEveryFormatAgrees) {
  for (const std::string& g : sample_graphs()) {
    SCOPED_TRACE(g);
    Proc text = kiln({"plan", g});
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_EQ(text.err, "");
    EXPECT_THAT(text.out, StartsWith("plan: "));
    Proc text2 = kiln({"plan", g, "--format", "text"});
    EXPECT_EQ(text2.out, text.out) << "text is the default format, and the output is deterministic";

    Proc json = kiln({"plan", "--format=json", g});
    ASSERT_EQ(json.code, 0) << json.err;
    EXPECT_EQ(json.err, "");
    nlohmann::json j = nlohmann::json::parse(json.out, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << json.out;
    EXPECT_EQ(j["format"], "kiln.plan");
    const auto& totals = j["totals"];
    EXPECT_EQ(text_total(text.out, "kernels"), totals["kernels"].get<int64_t>());
    EXPECT_EQ(text_total(text.out, "weight transforms"), totals["weight_transforms"].get<int64_t>());
    EXPECT_EQ(text_total(text.out, "workspace"), totals["workspace_bytes"].get<int64_t>());
    EXPECT_EQ(text_total(text.out, "bytes moved"), totals["bytes_moved"].get<int64_t>());
    EXPECT_EQ(text_total(text.out, "unfused baseline"), totals["unfused_bytes_moved"].get<int64_t>());
    EXPECT_GT(totals["kernels"].get<int64_t>(), 0);
    EXPECT_LE(totals["bytes_moved"].get<int64_t>(), totals["unfused_bytes_moved"].get<int64_t>());

    // One "group N: kind" header per JSON group, in the same order; kernels counted alike.
    std::vector<std::string> headers;
    for (const auto& l : lines_of(text.out)) {
      if (l.rfind("group ", 0) == 0) headers.push_back(l);
    }
    ASSERT_EQ(headers.size(), j["groups"].size());
    int64_t kernels = 0, moved = 0;
    for (size_t i = 0; i < headers.size(); ++i) {
      const auto& grp = j["groups"][i];
      EXPECT_THAT(headers[i],
                  StartsWith(fmt::format("group {}: {}", grp["id"].get<int>(), grp["kind"].get<std::string>())));
      EXPECT_FALSE(grp["nodes"].empty());
      if (grp["kernel"].get<bool>()) {
        ++kernels;
        moved += grp["bytes_read"].get<int64_t>() + grp["bytes_written"].get<int64_t>();
      }
    }
    EXPECT_EQ(kernels, totals["kernels"].get<int64_t>());
    EXPECT_EQ(moved, totals["bytes_moved"].get<int64_t>());
    for (const auto& b : j["buffers"]) {
      EXPECT_EQ(b["offset"].get<int64_t>() % kWorkspaceAlignment, 0);
      EXPECT_LE(b["offset"].get<int64_t>() + b["bytes"].get<int64_t>(), totals["workspace_bytes"].get<int64_t>());
    }

    Proc dot = kiln({"plan", g, "--format", "dot"});
    ASSERT_EQ(dot.code, 0) << dot.err;
    EXPECT_THAT(dot.out, StartsWith("digraph "));
    for (const auto& grp : j["groups"]) {
      EXPECT_THAT(dot.out, HasSubstr(fmt::format("subgraph cluster_{} {{", grp["id"].get<int>())));
    }
  }
}

TEST_F(PlanCliTest, DumpAfterEveryPass) {
  const std::string g = sample("resnet50_bottleneck");
  ASSERT_FALSE(pass_names().empty());
  for (std::string_view pass : pass_names()) {
    SCOPED_TRACE(std::string(pass));
    Proc p = kiln({"plan", g, fmt::format("--dump-after={}", pass)});
    ASSERT_EQ(p.code, 0) << p.err;
    EXPECT_EQ(p.err, "");
    EXPECT_FALSE(p.out.empty());
    EXPECT_EQ(p.out.back(), '\n');
    Proc again = kiln({"plan", "--dump-after", std::string(pass), g, "--layout", "auto"});
    EXPECT_EQ(again.out, p.out) << "the dump is deterministic";
  }
  // The dump after the first pass is the graph as loaded: every node of the file appears in it.
  Proc first = kiln({"plan", g, fmt::format("--dump-after={}", pass_names().front())});
  auto loaded = load_graph(g);
  ASSERT_TRUE(loaded.ok());
  for (const Node& n : loaded->nodes()) EXPECT_THAT(first.out, HasSubstr(n.name));
}

TEST_F(PlanCliTest, OptionsChangeThePlan) {
  const std::string g = sample("conv_bias_bn_relu");
  Proc fused = kiln({"plan", g});
  Proc unfused = kiln({"plan", g, "--max-group-ops", "1"});
  ASSERT_EQ(fused.code, 0) << fused.err;
  ASSERT_EQ(unfused.code, 0) << unfused.err;
  EXPECT_GE(text_total(unfused.out, "kernels").value_or(-1), text_total(fused.out, "kernels").value_or(0));
  for (const char* layout : {"auto", "nchw", "nhwc"}) {
    Proc p = kiln({"plan", g, "--layout", layout});
    EXPECT_EQ(p.code, 0) << layout << ": " << p.err;
  }
  Proc nchw = kiln({"plan", g, "--layout=nchw"});
  EXPECT_THAT(nchw.out, ::testing::Not(HasSubstr("NHWC"))) << "nchw keeps every activation NCHW";
}

TEST_F(PlanCliTest, UsageErrors) {
  const std::string g = sample("conv_bias_bn_relu");
  expect_usage({"plan"}, "GRAPH is required");
  expect_usage({"plan", g, g}, "unexpected argument");
  expect_usage({"plan", g, "--format", "png"}, "unknown format 'png': expected text, json, dot or svg");
  expect_usage({"plan", g, "--layout", "nwhc"}, "unknown --layout 'nwhc': expected auto, nchw or nhwc");
  expect_usage({"plan", g, "--max-group-ops", "0"}, "bad --max-group-ops '0'");
  expect_usage({"plan", g, "--max-group-ops=-3"}, "bad --max-group-ops '-3'");
  expect_usage({"plan", g, "--max-group-ops", "many"}, "bad --max-group-ops 'many'");
  expect_usage({"plan", g, "--max-group-ops", "99999999999999"}, "bad --max-group-ops");
  expect_usage({"plan", g, "--format"}, "--format: 1 required F missing");
  expect_usage({"plan", g, "--format", "json", "--format", "dot"}, "--format: At Most 1 required but received 2");
  expect_usage({"plan", g, "--device", "ref"}, "The following argument was not expected: --device");
  expect_usage({"plan", g, "--dump-after=fusion", "--format", "json"}, "takes no --format");
  // An unknown pass names every valid one.
  std::string list;
  for (std::string_view p : pass_names()) list += (list.empty() ? "" : ", ") + std::string(p);
  expect_usage({"plan", g, "--dump-after=frobnicate"}, "unknown pass 'frobnicate': expected one of " + list);
}

TEST_F(PlanCliTest, InvalidGraphExitsOneWithTheLoadersMessages) {
  const std::string bad = (fs::path(KILN_SOURCE_DIR) / "tests" / "data" / "bad" / "unknown_attribute.json").string();
  Proc plan = kiln({"plan", bad});
  Proc validate = kiln({"validate", bad});
  EXPECT_EQ(plan.code, 1);
  EXPECT_EQ(plan.out, "");
  EXPECT_EQ(plan.err, validate.err);
  for (const auto& l : lines_of(plan.err)) EXPECT_THAT(l, StartsWith("error: "));
  EXPECT_THAT(plan.err, HasSubstr("/nodes/0/attrs/strides"));

  Proc missing = kiln({"plan", path("nope.json"), "--format", "dot"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(missing.out, "");
  EXPECT_THAT(missing.err, StartsWith("error: "));
}

TEST_F(PlanCliTest, HelpMentionsPlan) {
  Proc p = kiln({"plan", "--help"});
  EXPECT_EQ(p.code, 0);
  EXPECT_THAT(p.out, HasSubstr("Usage: kiln plan [OPTIONS] GRAPH"));
  EXPECT_THAT(p.out, HasSubstr("--dump-after"));
}

// ---- the forms of a plan, through the C++ API ---------------------------------------------------------

Plan plan_sample(const std::string& name) {
  auto g = load_graph(sample(name));
  EXPECT_TRUE(g.ok()) << g.status().message();
  auto p = plan_graph(*g);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return std::move(p).value();
}

// The text form of one sample, compared exactly. KILN_UPDATE_GOLDEN=1 rewrites the file instead.
TEST(PlanFormat, GoldenText) {
  const fs::path golden = fs::path(KILN_SOURCE_DIR) / "tests" / "golden" / "plan_conv_bias_bn_relu.txt";
  const std::string text = plan_to_text(plan_sample("conv_bias_bn_relu"));
  const char* update = std::getenv("KILN_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    fs::create_directories(golden.parent_path());
    std::ofstream(golden, std::ios::binary) << text;
    std::printf("KILN_UPDATE_GOLDEN=1: rewrote %s\n", golden.c_str());
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing; run with KILN_UPDATE_GOLDEN=1 to write it";
  EXPECT_EQ(text, slurp(golden.string()))
      << "the text form changed; if that is intended, rerun with KILN_UPDATE_GOLDEN=1 and review the diff";
}

// The ratio line says "more traffic" when a plan moves more than its ops run one by one would (layout
// conversions at the edges of a small graph can), and "less" as a factor otherwise.
TEST(PlanFormat, TrafficRatioSaysMoreOrLess) {
  Plan p = plan_sample("conv_bias_bn_relu");
  p.unfused_bytes_moved = 1000;
  p.bytes_moved = 1500;
  EXPECT_NE(plan_to_text(p).find("fused / unfused:    1.500 (1.50x more traffic)"), std::string::npos)
      << plan_to_text(p);
  p.bytes_moved = 250;
  EXPECT_NE(plan_to_text(p).find("fused / unfused:    0.250 (4.00x less traffic)"), std::string::npos)
      << plan_to_text(p);
}

TEST(PlanFormat, JsonMatchesThePlan) {
  for (const char* name : {"conv_bias_bn_relu", "resnet50_bottleneck", "mlp_gelu"}) {
    SCOPED_TRACE(name);
    Plan p = plan_sample(name);
    const std::string text = plan_to_json(p);
    EXPECT_EQ(text, plan_to_json(p));
    auto j = nlohmann::ordered_json::parse(text);
    ASSERT_EQ(j["groups"].size(), p.groups.size());
    for (size_t i = 0; i < p.groups.size(); ++i) {
      const Group& grp = p.groups[i];
      const auto& jg = j["groups"][i];
      EXPECT_EQ(jg["id"].get<int>(), grp.id);
      EXPECT_EQ(jg["kind"].get<std::string>(), group_kind_name(grp.kind));
      EXPECT_EQ(jg["nodes"].size(), grp.nodes.size());
      EXPECT_EQ(jg["inputs"].size(), grp.inputs.size());
      EXPECT_EQ(jg["outputs"].size(), grp.outputs.size());
      EXPECT_EQ(jg["bytes_read"].get<int64_t>(), grp.bytes_read);
      EXPECT_EQ(jg["bytes_written"].get<int64_t>(), grp.bytes_written);
      for (size_t k = 0; k < grp.outputs.size(); ++k) {
        const TensorInfo& info = p.graph.tensor(grp.outputs[k]);
        EXPECT_EQ(jg["outputs"][k]["name"], info.name);
        EXPECT_EQ(jg["outputs"][k]["layout"], layout_name(info.layout));
        EXPECT_EQ(jg["outputs"][k]["shape"].get<std::vector<int64_t>>(), info.shape.to_vector());
      }
    }
    ASSERT_EQ(j["buffers"].size(), p.buffers.size());
    EXPECT_EQ(j["totals"]["kernels"].get<int>(), p.kernel_count());
    EXPECT_EQ(j["totals"]["workspace_bytes"].get<int64_t>(), p.workspace_bytes);
    EXPECT_EQ(j["totals"]["bytes_moved"].get<int64_t>(), p.bytes_moved);
    EXPECT_EQ(j["totals"]["unfused_bytes_moved"].get<int64_t>(), p.unfused_bytes_moved);
    // Keys in a fixed order.
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    EXPECT_EQ(keys, (std::vector<std::string>{"format", "version", "graph", "target", "groups", "split_groups",
                                              "separations", "buffers", "totals"}));
    EXPECT_EQ(j["target"]["name"], p.target.name);
    EXPECT_EQ(j["target"]["arch"], p.target.arch);
    for (size_t i = 0; i < p.groups.size(); ++i)
      EXPECT_EQ(j["groups"][i]["family"], std::string(kernel_family_name(p.groups[i].family)));
  }
}

// Names with quotes, backslashes and line breaks stay inside their DOT strings.
TEST(PlanFormat, DotEscapesNames) {
  Graph g("odd \"names\"");
  Tensor x = g.input("x\"in", {2, 8});
  Tensor y = g.relu(g.add(x, 1.0, "add \\ \"one\""), "relu\\n");
  g.output(y, "y\"out\\");
  ASSERT_TRUE(g.verify().ok());
  auto p = plan_graph(g);
  ASSERT_TRUE(p.ok()) << p.status().message();
  std::string dot = plan_to_dot(*p);
  EXPECT_THAT(dot, HasSubstr("digraph \"plan odd \\\"names\\\"\" {"));
  EXPECT_THAT(dot, HasSubstr("add \\\\ \\\"one\\\""));
  EXPECT_THAT(dot, HasSubstr("relu\\\\n"));
  EXPECT_THAT(dot, HasSubstr("y\\\"out\\\\"));
  // Every quote that opens a string is closed on the same line: an unescaped quote count is even.
  for (const auto& l : lines_of(dot)) {
    int quotes = 0;
    for (size_t i = 0; i < l.size(); ++i) {
      if (l[i] == '\\') {
        ++i;
      } else if (l[i] == '"') {
        ++quotes;
      }
    }
    EXPECT_EQ(quotes % 2, 0) << l;
  }
}

// The Graphviz form, rendered by the real `dot` program (tools/setup.sh installs graphviz).
TEST_F(PlanFormatTest, DotRendersToSvg) {
  const std::string dot = find_on_path("dot");
  if (dot.empty()) GTEST_SKIP() << "Graphviz 'dot' is not on the PATH (tools/setup.sh installs the graphviz package)";
  for (const char* name : {"resnet50_bottleneck", "groupnorm_silu_conv"}) {
    SCOPED_TRACE(name);
    Plan p = plan_sample(name);
    const std::string in = path(std::string(name) + ".dot"), out = path(std::string(name) + ".svg");
    std::ofstream(in, std::ios::binary) << plan_to_dot(p);
    Proc r = subprocess::run_process(dot, {"-Tsvg", in, "-o", out}, dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err, "") << "dot warned";
    const std::string svg = slurp(out);
    EXPECT_THAT(svg, HasSubstr("<svg"));
    for (const Group& grp : p.groups) {
      EXPECT_THAT(svg, HasSubstr(fmt::format("<title>cluster_{}</title>", grp.id)));
      EXPECT_THAT(svg, HasSubstr(fmt::format("group {}: {}", grp.id, group_kind_name(grp.kind))));
    }
  }
}

// ---- the planner benchmark (tools/bench/plan_bench.cpp) -----------------------------------------------

TEST_F(PlanCliTest, BenchQuickRuns) {
  // ctest sets KILN_VERIFY_PASSES=1 for every test; set here too, so the test means the same run alone.
  kiln::testing::ScopedEnv verify("KILN_VERIFY_PASSES", "1");
  Proc p = subprocess::run_process(KILN_PLAN_BENCH_PATH, {"--quick"}, dir_, std::chrono::seconds(300));
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  auto lines = lines_of(p.out);
  ASSERT_GE(lines.size(), 2u);
  // It says what it measures: the default options (verification on: KILN_VERIFY_PASSES=1 above).
  EXPECT_EQ(lines[0],
            "plan_bench: default options (verification after each pass on: KILN_VERIFY_PASSES=1, target h200)");
  EXPECT_THAT(lines[1], ::testing::MatchesRegex("family +nodes +groups +kernels +median ms +fastest ms +us/node"));
  std::set<std::string> families;
  for (const auto& l : lines) {
    std::smatch m;
    if (std::regex_match(l, m,
                         std::regex("(\\S+) +([0-9,]+) +([0-9,]+) +([0-9,]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)"))) {
      families.insert(m[1].str());
      int64_t nodes = parse_grouped(m[2].str());
      EXPECT_GE(nodes, 900) << l;
      EXPECT_LE(nodes, 1100) << l;
      EXPECT_GT(parse_grouped(m[3].str()), 0) << l;
    }
  }
  EXPECT_EQ(families, (std::set<std::string>{"conv_chain", "conv_bias_chain", "pointwise_chain", "residual"})) << p.out;
}

}  // namespace
}  // namespace kiln
