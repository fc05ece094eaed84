// The kiln program's command-line surface (issue 16), run as a real process: `kiln CMD --help` for every
// command the overview lists, the --json documents (parsed, their fields checked against the text form and
// the graph), the log levels, progress on stderr, and `kiln bench`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/npy.h"
#include "plan_cli_fixture.h"
#include "scoped_env.h"

namespace kiln {
namespace {

using plan_cli::lines_of;
using plan_cli::sample;
using Json = nlohmann::json;
using ::testing::ContainsRegex;
using ::testing::Not;
using testing::ScopedEnv;

// conv + bias-free batch norm + relu at 1x4x6x6: small enough for emu in a second, a real conv kernel.
constexpr const char* kTinyGraph = R"({
  "format": "kiln.graph", "version": 1, "name": "tiny_conv",
  "tensors": [
    {"name": "x", "shape": [1, 4, 6, 6], "dtype": "f32", "kind": "input"},
    {"name": "w", "shape": [8, 4, 3, 3], "dtype": "f32", "kind": "parameter"}
  ],
  "nodes": [
    {"op": "conv2d", "name": "conv", "inputs": {"x": "x", "w": "w"}, "outputs": {"y": "c"}, "attrs": {"padding": [1, 1]}},
    {"op": "relu", "name": "act", "inputs": {"x": "c"}, "outputs": {"y": "y"}}
  ],
  "outputs": ["y"]
})";

class CliCommandsTest : public plan_cli::PlanCliFixture {
 protected:
  void SetUp() override {
    PlanCliFixture::SetUp();
    write("tiny.json", kTinyGraph);
    cache_.emplace("KILN_CACHE_DIR", path("cache").c_str());
  }
  void TearDown() override { cache_.reset(); }

  // Runs kiln, expects exit `code`, and parses stdout as one JSON document.
  Json json_of(const std::vector<std::string>& args, int code = 0) {
    Proc p = kiln(args);
    EXPECT_EQ(p.code, code) << ::testing::PrintToString(args) << "\n" << p.err;
    Json j = Json::parse(p.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << p.out;
    return j;
  }

  std::optional<ScopedEnv> cache_;
};

// The commands `kiln --help` lists: "kiln NAME" at the start of an indented line ("kiln cache stats|ls|..."
// gives cache stats, cache ls, ...), with the options the overview shows on that line.
std::vector<std::pair<std::string, std::set<std::string>>> commands_in_overview(const std::string& help) {
  std::vector<std::pair<std::string, std::set<std::string>>> out;
  const std::regex line_re(R"(^  kiln ([a-z]+)( ([a-z|]+))?\b(.*)$)");
  const std::regex flag_re(R"(--[a-z][a-z-]*)");
  for (const std::string& line : lines_of(help)) {
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) continue;
    std::set<std::string> flags;
    const std::string rest = m[4].str();
    for (auto it = std::sregex_iterator(rest.begin(), rest.end(), flag_re); it != std::sregex_iterator(); ++it)
      flags.insert(it->str());
    std::vector<std::string> names;
    if (m[1] == "cache") {
      std::string subs = m[3].str();
      size_t at = 0;
      while (at <= subs.size()) {
        size_t bar = subs.find('|', at);
        if (bar == std::string::npos) bar = subs.size();
        names.push_back("cache " + subs.substr(at, bar - at));
        at = bar + 1;
      }
    } else {
      names.push_back(m[1].str());
    }
    for (const std::string& n : names) {
      auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == n; });
      if (it == out.end()) {
        out.emplace_back(n, flags);
      } else {
        it->second.insert(flags.begin(), flags.end());
      }
    }
  }
  return out;
}

TEST_F(CliCommandsTest, EveryCommandHasItsOwnHelp) {
  Proc overview = kiln({"--help"});
  ASSERT_EQ(overview.code, 0);
  auto commands = commands_in_overview(overview.out);
  std::set<std::string> names;
  for (const auto& [name, flags] : commands) names.insert(name);
  // What the overview must list (a command missing from it would go untested here).
  for (const char* c : {"validate", "run", "bench", "import", "grad", "prewarm", "plan", "cache stats", "cache ls",
                        "cache verify", "cache clear", "cache prune"})
    EXPECT_TRUE(names.count(c)) << c << " is not in kiln --help:\n" << overview.out;
  for (const auto& [name, flags] : commands) {
    if (name == "help" || name.rfind("--", 0) == 0) continue;
    std::vector<std::string> args;
    std::istringstream words(name);
    for (std::string w; words >> w;) args.push_back(w);
    args.push_back("--help");
    Proc p = kiln(args);
    EXPECT_EQ(p.code, 0) << name << "\n" << p.err;
    EXPECT_EQ(p.err, "") << name;
    EXPECT_THAT(p.out, HasSubstr("Usage: kiln " + name)) << name;
    EXPECT_THAT(p.out, HasSubstr("-h,--help")) << name;
    // Every option the overview shows for the command is in its own help, with its text.
    for (const std::string& f : flags) EXPECT_THAT(p.out, ContainsRegex("  " + f + "[ =]")) << name << ": " << f;
  }
  // -h too, and a command's help is not the overview.
  Proc p = kiln({"bench", "-h"});
  EXPECT_EQ(p.code, 0);
  EXPECT_THAT(p.out, HasSubstr("--iterations N"));
  EXPECT_THAT(p.out, Not(HasSubstr("kiln validate GRAPH")));
}

TEST_F(CliCommandsTest, ValidateJson) {
  Json j = json_of({"validate", sample("resnet50_bottleneck"), "--json"});
  EXPECT_EQ(j["schema"], "kiln.validate/1");
  EXPECT_EQ(j["valid"], true);
  EXPECT_EQ(j["name"], "resnet50_bottleneck");
  EXPECT_EQ(j["counts"]["inputs"], 1);
  EXPECT_EQ(j["counts"]["parameters"], 15);
  EXPECT_EQ(j["counts"]["nodes"], 10);
  EXPECT_EQ(j["ops"]["conv2d"], 3);
  EXPECT_EQ(j["parameter_elements"], 71168);
  EXPECT_EQ(j["tensors"][0]["name"], "x");
  EXPECT_EQ(j["tensors"][0]["shape"], Json::array({1, 256, 56, 56}));
  // An invalid graph: exit 1, the document says so and lists each error with its JSON path.
  write("bad.json", R"({"format": "kiln.graph", "version": 1, "name": "b", "tensors": [], "nodes": [
    {"op": "relu", "name": "r", "inputs": {"x": "nowhere"}, "outputs": {"y": "y"}}], "outputs": ["y"]})");
  Json bad = json_of({"validate", path("bad.json"), "--json"}, 1);
  EXPECT_EQ(bad["valid"], false);
  ASSERT_TRUE(bad["errors"].is_array());
  ASSERT_FALSE(bad["errors"].empty());
  EXPECT_THAT(bad["errors"][0].get<std::string>(), HasSubstr("nowhere"));
}

TEST_F(CliCommandsTest, RunJsonOnRefAndEmuWithCheck) {
  Json ref = json_of({"run", path("tiny.json"), "--device", "ref", "--seed", "5", "--json"});
  EXPECT_EQ(ref["schema"], "kiln.run/1");
  EXPECT_EQ(ref["device"], "ref");
  EXPECT_TRUE(ref["compile"].is_null());
  EXPECT_EQ(ref["inputs"]["source"], "random");
  EXPECT_EQ(ref["inputs"]["seed"], 5);
  ASSERT_EQ(ref["outputs"].size(), 1u);
  EXPECT_EQ(ref["outputs"][0]["name"], "y");
  EXPECT_EQ(ref["outputs"][0]["shape"], Json::array({1, 8, 6, 6}));
  EXPECT_GE(ref["outputs"][0]["min"].get<double>(), 0.0);  // after relu
  EXPECT_GT(ref["outputs"][0]["max"].get<double>(), 0.0);

  Json emu = json_of({"run", path("tiny.json"), "--device", "emu", "--seed", "5", "--check", "--json"});
  EXPECT_EQ(emu["device"], "emu");
  EXPECT_EQ(emu["check"], true);
  EXPECT_GE(emu["compile"]["launches"].get<int>(), 1);
  const Json& c = emu["outputs"][0]["check"];
  EXPECT_EQ(c["ok"], true);
  EXPECT_LE(c["max_rel_error"].get<double>(), c["rtol"].get<double>());
  // The same statistics as ref's within f32 tolerance.
  EXPECT_NEAR(emu["outputs"][0]["mean"].get<double>(), ref["outputs"][0]["mean"].get<double>(), 1e-4);
}

TEST_F(CliCommandsTest, PrewarmJsonAndProgressOnStderr) {
  Proc p = kiln({"prewarm", path("tiny.json"), "--arch", "sm_80", "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  Json j = Json::parse(p.out);
  EXPECT_EQ(j["schema"], "kiln.prewarm/1");
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["archs"], Json::array({"sm_80"}));
  const int total = j["kernels"]["total"];
  EXPECT_GE(total, 1);
  EXPECT_EQ(j["kernels"]["compiled"], total);
  EXPECT_EQ(j["kernels"]["not_kept"], 0);
  EXPECT_EQ(j["graphs"][0]["graph"], path("tiny.json"));
  // Not a terminal: one plain progress line per kernel, on stderr only.
  EXPECT_THAT(p.err, ContainsRegex(fmt::format("\\[1/{}\\] compiled sm_80 ", total)));
  // A second run finds everything cached; --no-progress keeps stderr empty; the text form on stdout.
  Proc again = kiln({"prewarm", path("tiny.json"), "--arch", "sm_80", "--no-progress"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.err, "");
  EXPECT_THAT(again.out, HasSubstr(fmt::format("kernels: {} total, {} already cached, 0 compiled", total, total)));
  EXPECT_THAT(again.out, HasSubstr("nvrtc: not loaded"));

  Json stats = json_of({"cache", "stats", "--json"});
  EXPECT_EQ(stats["schema"], "kiln.cache.stats/1");
  EXPECT_EQ(stats["directory"], path("cache"));
  EXPECT_EQ(stats["by_kind"]["nvrtc"]["entries"], total);
  EXPECT_EQ(stats["by_kind"]["plan"]["entries"], 1);  // the graph's plan for sm_80
  Json ls = json_of({"cache", "ls", "--json"});
  ASSERT_EQ(ls["entries"].size(), static_cast<size_t>(total) + 1);
  for (const Json& e : ls["entries"]) {
    EXPECT_EQ(e["arch"], "sm_80");
    EXPECT_EQ(e["key"].get<std::string>().size(), 32u);
    if (e["kind"] == "nvrtc") {
      EXPECT_GT(e["registers"].get<int>(), 0);
    } else {
      EXPECT_EQ(e["kind"], "plan");
      EXPECT_EQ(e["kernel"], "tiny_conv");
    }
  }
  Json verify = json_of({"cache", "verify", "--json"});
  EXPECT_EQ(verify["checked"], total + 1);
  EXPECT_EQ(verify["bad"], 0);
  // A read-only cache keeps nothing new: exit 1 and ok false, unless --allow-uncached.
  ScopedEnv other("KILN_CACHE_DIR", path("cache2").c_str());
  ScopedEnv ro("KILN_CACHE_READONLY", "1");
  Json refused = json_of({"prewarm", path("tiny.json"), "--arch", "sm_90", "--json", "--no-progress"}, 1);
  EXPECT_EQ(refused["ok"], false);
  EXPECT_EQ(refused["kernels"]["not_kept"], refused["kernels"]["total"]);
  EXPECT_THAT(refused["not_kept_reason"].get<std::string>(), HasSubstr("read-only"));
  Json allowed = json_of({"prewarm", path("tiny.json"), "--arch", "sm_90", "--json", "--allow-uncached"}, 0);
  EXPECT_EQ(allowed["ok"], true);
}

TEST_F(CliCommandsTest, LogLevels) {
  // -v: what was planned and compiled, and why, on stderr; stdout keeps the result alone.
  Proc v = kiln({"-v", "run", path("tiny.json"), "--device", "emu"});
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_THAT(v.err, HasSubstr("kiln: info: planned 'tiny_conv' for h200 (sm_90): "));
  EXPECT_THAT(v.err, ContainsRegex("kiln: info: emu: [0-9]+ kernels of 'tiny_conv' (compiled with the host "
                                   "compiler: not in the emu cache|loaded from the emu cache)"));
  EXPECT_THAT(v.out, Not(HasSubstr("kiln: info")));
  // The same after the command's name; -vv and KILN_LOG_LEVEL=debug add each group.
  Proc vv = kiln({"plan", path("tiny.json"), "-vv"});
  ASSERT_EQ(vv.code, 0) << vv.err;
  EXPECT_THAT(vv.err, ContainsRegex("kiln: debug:   group [0-9]+: conv \\(conv2d\\), [0-9]+ ops"));
  {
    ScopedEnv debug("KILN_LOG_LEVEL", "debug");
    Proc d = kiln({"prewarm", path("tiny.json"), "--arch", "sm_80", "--no-progress"});
    ASSERT_EQ(d.code, 0) << d.err;
    EXPECT_THAT(d.err, ContainsRegex("kiln: info: kernel \\S+ \\(sm_80\\): compiling with NVRTC: not in the cache"));
    Proc again = kiln({"prewarm", path("tiny.json"), "--arch", "sm_80", "--no-progress"});
    EXPECT_THAT(again.err, ContainsRegex("kiln: debug: kernel \\S+ \\(sm_80\\): loaded from the cache"));
  }
  // Default: warnings only, nothing here.
  Proc quiet = kiln({"run", path("tiny.json"), "--device", "ref"});
  EXPECT_EQ(quiet.err, "");
  // Bad levels are usage errors naming the value.
  expect_usage({"--log-level", "loud", "validate", path("tiny.json")}, "unknown --log-level 'loud'");
  expect_usage({"-q", "-v", "validate", path("tiny.json")}, "-q and -v exclude each other");
  ScopedEnv bad("KILN_LOG_LEVEL", "chatty");
  expect_usage({"validate", path("tiny.json")}, "KILN_LOG_LEVEL='chatty': expected error, warn, info or debug");
}

TEST_F(CliCommandsTest, BenchOnEmuAndRef) {
  // No GPU here: auto runs on emu and says so; every kernel gets a row, CPU times labelled as such.
  Proc p = kiln({"bench", path("tiny.json"), "--iterations", "3", "--warmup", "1"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("note: no GPU here: running on emu"));
  EXPECT_THAT(p.out, HasSubstr("note: every time below is the CPU's wall time, not a GPU's"));
  EXPECT_THAT(p.out, ContainsRegex("runs: 1 warm-up, 3 timed in [0-9.]+ s"));
  EXPECT_THAT(p.out, ContainsRegex("run \\(CPU wall time\\): median [0-9.]+ ms, p10 [0-9.]+ ms, p90 [0-9.]+ ms"));
  EXPECT_THAT(p.out, ContainsRegex("kernels \\(CPU time, wall, 3 samples each\\):"));
  Json j = json_of({"bench", path("tiny.json"), "--device", "emu", "--iterations", "4", "--json"});
  EXPECT_EQ(j["schema"], "kiln.bench/1");
  EXPECT_EQ(j["device"], "emu");
  EXPECT_EQ(j["clock"], "CPU");
  EXPECT_EQ(j["runs"], 4);
  const Json& run = j["run_ms"];
  EXPECT_LE(run["min"].get<double>(), run["p10"].get<double>());
  EXPECT_LE(run["p10"].get<double>(), run["median"].get<double>());
  EXPECT_LE(run["median"].get<double>(), run["p90"].get<double>());
  EXPECT_LE(run["p90"].get<double>(), run["max"].get<double>());
  ASSERT_GE(j["kernels"].size(), 1u);
  EXPECT_EQ(j["kernels"][0]["samples"], 4);
  EXPECT_EQ(j["kernels"][0]["kind"], "conv");
  // Kernel times are parts of the run: their medians cannot add up to more than the slowest run.
  EXPECT_LE(j["kernel_ms_sum"].get<double>(), run["max"].get<double>() * 1.05 + 0.5);
  // --duration is a minimum too.
  Json d = json_of({"bench", path("tiny.json"), "--device", "ref", "--duration", "0.3", "--iterations", "1", "--json"});
  EXPECT_GE(d["total_ms"].get<double>(), 300.0);
  EXPECT_TRUE(d["kernels"].empty());
  expect_usage({"bench", path("tiny.json"), "--device", "emu", "--cuda-graph"}, "--cuda-graph needs --device cuda");
  expect_usage({"bench", path("tiny.json"), "--iterations", "0"}, "--iterations");
  // --warmup 0 times the cold first run too; a negative count is refused by name.
  Json cold = json_of({"bench", path("tiny.json"), "--device", "ref", "--iterations", "2", "--warmup", "0", "--json"});
  EXPECT_EQ(cold["warmup_runs"], 0);
  expect_usage({"bench", path("tiny.json"), "--warmup", "-1"}, "--warmup='-1': expected a non-negative integer");
  expect_usage({"bench", path("tiny.json"), "--duration", "soon"}, "invalid --duration 'soon'");
}

TEST_F(CliCommandsTest, JsonOnlyWhereDocumented) {
  expect_usage({"plan", path("tiny.json"), "--json"}, "The following argument was not expected: --json");
  expect_usage({"cache", "clear", "--json"}, "The following argument was not expected: --json");
}

// `kiln grad`: the training graph of a perceptron with a mean-squared-error loss, written as JSON, that runs on
// emu as on ref (every gradient output checked); a loss that is not a scalar, and a parameter the loss does
// not reach, as a user meets them.
constexpr const char* kMlp = R"({
  "format": "kiln.graph", "version": 1, "name": "mlp",
  "tensors": [
    {"name": "x", "shape": [8, 6], "dtype": "f32", "kind": "input"},
    {"name": "target", "shape": [8, 3], "dtype": "f32", "kind": "input"},
    {"name": "w1", "shape": [6, 16], "dtype": "f32", "kind": "parameter"},
    {"name": "b1", "shape": [16], "dtype": "f32", "kind": "parameter"},
    {"name": "w2", "shape": [16, 3], "dtype": "f32", "kind": "parameter"},
    {"name": "unused", "shape": [3], "dtype": "f32", "kind": "parameter"}
  ],
  "nodes": [
    {"name": "fc1", "op": "matmul", "inputs": {"a": "x", "b": "w1", "bias": "b1"}, "outputs": {"y": "h"}},
    {"name": "act", "op": "gelu", "inputs": {"x": "h"}, "outputs": {"y": "a"}},
    {"name": "fc2", "op": "matmul", "inputs": {"a": "a", "b": "w2"}, "outputs": {"y": "p"}},
    {"name": "err", "op": "sub", "inputs": {"a": "p", "b": "target"}, "outputs": {"y": "d"}},
    {"name": "sq", "op": "mul", "inputs": {"a": "d", "b": "d"}, "outputs": {"y": "d2"}},
    {"name": "mse", "op": "reduce_mean", "inputs": {"x": "d2"}, "outputs": {"y": "loss"}},
    {"name": "side", "op": "relu", "inputs": {"x": "unused"}, "outputs": {"y": "u"}}
  ],
  "outputs": ["loss", "u"]
})";

TEST_F(CliCommandsTest, GradWritesATrainingGraphThatRunsAsOnRef) {
  write("mlp.json", kMlp);
  Proc p = kiln({"grad", path("mlp.json"), "--loss", "loss", "-o", path("train.json")});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("for loss 'loss': 7 forward nodes"));
  EXPECT_THAT(p.out, HasSubstr("4 gradients"));
  EXPECT_THAT(p.err, HasSubstr("warning: parameter 'unused' does not reach the loss 'loss'"));
  Proc run = kiln({"run", path("train.json"), "--device", "emu", "--check"});
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  for (const char* g : {"grad/w1", "grad/b1", "grad/w2", "grad/unused"})
    EXPECT_THAT(run.out, ContainsRegex(std::string(g) + " +f32 .* ok")) << run.out;
  // The gradients saved as files: grad/<parameter>.npy under the directory.
  Proc saved = kiln({"run", path("train.json"), "--device", "ref", "--save-outputs", path("out")});
  ASSERT_EQ(saved.code, 0) << saved.err;
  EXPECT_TRUE(std::filesystem::exists(path("out/grad/w1.npy")));

  Proc not_scalar = kiln({"grad", path("mlp.json"), "--loss", "d", "-o", path("bad.json")});
  EXPECT_EQ(not_scalar.code, 1);
  EXPECT_THAT(not_scalar.err, HasSubstr("the loss 'd' is [8, 3], expected a scalar"));
  Proc no_output = kiln({"grad", path("mlp.json"), "--loss", "loss"});
  EXPECT_EQ(no_output.code, 2);
  EXPECT_THAT(no_output.err, HasSubstr("missing -o"));
}

// A linear model y = x W + b learned from 40 rows of exact data by `kiln train` on emu: its loss falls a
// thousandfold in 150 SGD steps of 8 rows, and the saved parameters are within 0.02 of the W the data came from.
// The bad inputs: a learning rate that is no number, a --batch the graph does not have, data of other dims,
// data that is missing, datasets of different lengths.
TEST_F(CliCommandsTest, TrainLearnsALinearModelAndSavesItsParameters) {
  write("linear.json", R"({
  "format": "kiln.graph", "version": 1, "name": "linear",
  "tensors": [
    {"name": "x", "shape": [8, 3], "dtype": "f32", "kind": "input"},
    {"name": "y", "shape": [8, 2], "dtype": "f32", "kind": "input"},
    {"name": "w", "shape": [3, 2], "dtype": "f32", "kind": "parameter"},
    {"name": "b", "shape": [2], "dtype": "f32", "kind": "parameter"}
  ],
  "nodes": [
    {"name": "fc", "op": "matmul", "inputs": {"a": "x", "b": "w", "bias": "b"}, "outputs": {"y": "p"}},
    {"name": "err", "op": "sub", "inputs": {"a": "p", "b": "y"}, "outputs": {"y": "d"}},
    {"name": "sq", "op": "mul", "inputs": {"a": "d", "b": "d"}, "outputs": {"y": "d2"}},
    {"name": "mse", "op": "reduce_mean", "inputs": {"x": "d2"}, "outputs": {"y": "loss"}}
  ],
  "outputs": ["loss"]
})");
  const double W[3][2] = {{0.5, -1.0}, {2.0, 0.25}, {-0.75, 1.5}}, bias[2] = {0.3, -0.2};
  HostTensor x(Shape{40, 3}, DType::f32), y(Shape{40, 2}, DType::f32);
  std::mt19937 rng(5);  // rows in general position (W identifiable)
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int64_t r = 0; r < 40; ++r) {
    for (int k = 0; k < 3; ++k) x.data[static_cast<size_t>(r * 3 + k)] = uniform(rng);
    for (int j = 0; j < 2; ++j) {
      double v = bias[j];
      for (int k = 0; k < 3; ++k) v += x.data[static_cast<size_t>(r * 3 + k)] * W[k][j];
      y.data[static_cast<size_t>(r * 2 + j)] = v;
    }
  }
  ASSERT_TRUE(save_tensors(path("data"), {{"x", x}, {"y", y}}).ok());
  Proc p = kiln({"train", path("linear.json"), "--loss", "loss", "--data", path("data"), "--steps", "150", "--lr",
                 "0.1", "--batch", "8", "-o", path("trained"), "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  const nlohmann::json doc = nlohmann::json::parse(p.out);
  ASSERT_EQ(doc["losses"].size(), 150u);
  const double first = doc["losses"][0], last = doc["losses"][149];
  EXPECT_LT(last, first / 1000) << p.out;
  Result<HostTensor> w = load_npy(path("trained/w.npy"), DType::f32, Shape{3, 2}, "w");
  ASSERT_TRUE(w.ok()) << w.status().message();
  for (int k = 0; k < 3; ++k)
    for (int j = 0; j < 2; ++j) EXPECT_NEAR(w->data[static_cast<size_t>(k * 2 + j)], W[k][j], 0.02);
  Proc text = kiln({"train", path("linear.json"), "--loss", "loss", "--data", path("data"), "--steps", "2"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("step 2/2  loss "));

  const auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"train", path("linear.json"), "--loss", "loss", "--data", path("data"), "--steps", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return kiln(a);
  };
  Proc nan_lr = train({"--lr", "nan"});
  EXPECT_EQ(nan_lr.code, 2);
  EXPECT_THAT(nan_lr.err, HasSubstr("invalid --lr 'nan'"));
  Proc wrong_batch = train({"--batch", "16"});
  EXPECT_EQ(wrong_batch.code, 1);
  EXPECT_THAT(wrong_batch.err, HasSubstr("input 'x' is [8, 3]: its batch is 8, not --batch 16"));
  ASSERT_TRUE(save_tensors(path("bad"), {{"x", HostTensor(Shape{40, 4}, DType::f32)}, {"y", y}}).ok());
  Proc wrong_dims = kiln({"train", path("linear.json"), "--loss", "loss", "--data", path("bad"), "--steps", "1"});
  EXPECT_EQ(wrong_dims.code, 1);
  EXPECT_THAT(wrong_dims.err, HasSubstr("[40, 4] is neither input 'x' [8, 3] nor a dataset of at least 8 rows of it"));
  ASSERT_TRUE(save_tensors(path("short"), {{"x", HostTensor(Shape{32, 3}, DType::f32)}, {"y", y}}).ok());
  Proc lengths = kiln({"train", path("linear.json"), "--loss", "loss", "--data", path("short"), "--steps", "1"});
  EXPECT_EQ(lengths.code, 1);
  EXPECT_THAT(lengths.err, HasSubstr("40 rows, but the data of input 'x' has 32"));
  std::filesystem::remove(path("short/y.npy"));
  Proc missing = kiln({"train", path("linear.json"), "--loss", "loss", "--data", path("short"), "--steps", "1"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("no such file: the data of input 'y' [8, 2]"));
}

}  // namespace
}  // namespace kiln
