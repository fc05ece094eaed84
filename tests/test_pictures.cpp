// The pictures, checked the way a user checks them (issue: roofline, timeline, heat map): `kiln profile
// --plot` and `kiln plan --format svg --heat` are rendered to PNG by rsvg-convert (Debian's librsvg2-bin) and
// their pixels read back, so an empty or broken picture fails; `--trace` files are checked against the
// Chrome trace event format's fields and against the runs they claim to record. Bad output paths too.
#include <set>

#include <nlohmann/json.hpp>

#include "kiln/json.h"
#include "plan_cli_fixture.h"
#include "png_pixels.h"
#include "scoped_env.h"

namespace kiln {
namespace {

using plan_cli::find_on_path;
using plan_cli::sample;

class PicturesTest : public plan_cli::PlanCliFixture {
 protected:
  // Renders an SVG file to PNG with rsvg-convert and reads the pixels back.
  png::Image render(const std::string& svg) {
    const std::string rsvg = find_on_path("rsvg-convert");
    if (rsvg.empty()) {
      ADD_FAILURE() << "rsvg-convert is not installed: tools/setup.sh --test installs librsvg2-bin";
      return {};
    }
    const std::string png_path = svg + ".png";
    Proc p = subprocess::run_process(rsvg, {svg, "-o", png_path}, dir_);
    EXPECT_EQ(p.code, 0) << "rsvg-convert refused " << svg << ": " << p.err;
    png::Image img = png::decode(slurp(png_path));
    EXPECT_EQ(img.error, "") << png_path;
    return img;
  }

  // Pointwise only: one kernel with no FLOPs (in kiln's count, which counts the GEMMs').
  std::string pointwise_graph() {
    Graph g("pointwise_only");
    Tensor x = g.input("x", {4, 64, 16, 16});
    g.output(g.relu(g.add(x, x, "twice"), "act"), "y");
    return save(g, "pointwise.json");
  }

  // One conv kernel (its bias in the epilogue) and nothing else.
  std::string one_conv_graph() {
    Graph g("one_conv");
    Tensor x = g.input("x", {1, 8, 8, 8});
    Tensor w = g.parameter("w", {16, 8, 3, 3});
    Tensor b = g.parameter("b", {16});
    g.output(g.conv2d(x, w, b, {.padding = {1, 1}}, "conv"), "y");
    return save(g, "one_conv.json");
  }

  // Files left in the test's directory whose names start with `prefix` (temporary files included).
  std::vector<std::string> files_named(const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename().string());
    }
    return out;
  }
};

TEST_F(PicturesTest, RooflineOfTheResNetBottleneckRendersWithItsCeilingsPointsAndTable) {
  Proc p = kiln({"profile", sample("resnet50_bottleneck"), "--plot", path("roof.svg"), "--sites", "0"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("roofline chart: " + path("roof.svg")));
  const std::string svg = slurp(path("roof.svg"));
  for (const char* text : {"copy 4.29 TB/s", "FP32 SIMT", "mma.sync", "arithmetic intensity", "#1 g1 conv2d",
                           "#3 g4 conv2d", "Every kernel, in launch order", "conv2d", "move data only (0 FLOP)"}) {
    EXPECT_THAT(svg, HasSubstr(text)) << text;
  }
  png::Image img = render(path("roof.svg"));
  EXPECT_EQ(img.width, 1000u);
  EXPECT_GT(img.height, 600u);
  EXPECT_GT(png::inked(img), img.rgba.size() / 4 / 50) << "less than 2% of the picture is drawn";
  // The copy ceiling's line, and the conv points coloured by what bounds them (memory, math or shared).
  EXPECT_GT(png::of_colour(img, 0x1f4e79), 200u);
  EXPECT_GT(png::of_colour(img, 0x1b9e77) + png::of_colour(img, 0xd95f02) + png::of_colour(img, 0x7570b3), 100u);
}

TEST_F(PicturesTest, KernelsWithoutFlopsOrCountersAreDrawnByTheirRules) {
  // Only data movement: no point on the FLOP axes, a bar per kernel, and the chart says so.
  Proc p = kiln({"profile", pointwise_graph(), "--plot", path("pw.svg"), "--sites", "0"});
  ASSERT_EQ(p.code, 0) << p.err;
  std::string svg = slurp(path("pw.svg"));
  EXPECT_THAT(svg, HasSubstr("no kernel with FLOPs: see the bars below"));
  EXPECT_THAT(svg, HasSubstr("Kernels that only move data"));
  EXPECT_THAT(svg, HasSubstr("% of copy"));
  EXPECT_GT(png::inked(render(path("pw.svg"))), 1000u);

  // One conv kernel, static facts only: a hollow point, said in the legend.
  p = kiln({"profile", one_conv_graph(), "--no-emulate", "--plot", path("one.svg")});
  ASSERT_EQ(p.code, 0) << p.err;
  svg = slurp(path("one.svg"));
  EXPECT_THAT(svg, HasSubstr("1 of 1 kernels drawn here"));
  EXPECT_THAT(svg, HasSubstr("1 without counters: placed by"));
  EXPECT_THAT(svg, HasSubstr("fill=\"#ffffff\" stroke="));  // the hollow point
  EXPECT_GT(png::inked(render(path("one.svg"))), 1000u);
}

TEST_F(PicturesTest, MeasuredPointsComeOnlyFromAGpuBench) {
  const std::string graph = one_conv_graph();
  // An emulated bench's times are the CPU's: refused.
  Proc b = kiln({"bench", graph, "--iterations", "1", "--warmup", "0", "--json"});
  ASSERT_EQ(b.code, 0) << b.err;
  write("emu_bench.json", b.out);
  Proc p = kiln({"profile", graph, "--plot", path("m.svg"), "--measured", path("emu_bench.json")});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("its times are the CPU's (device emu), not a GPU's"));
  EXPECT_FALSE(fs::exists(path("m.svg")));

  // A cuda bench document (the schema kiln bench --json writes on a GPU; the numbers stand in for one).
  nlohmann::json doc = nlohmann::json::parse(b.out);
  doc["device"] = "cuda";
  doc["kernels"][0]["ms"]["median"] = 0.004;
  write("gpu_bench.json", doc.dump());
  p = kiln({"profile", graph, "--plot", path("m.svg"), "--measured", path("gpu_bench.json"), "--sites", "0"});
  ASSERT_EQ(p.code, 0) << p.err;
  const std::string svg = slurp(path("m.svg"));
  EXPECT_THAT(svg, HasSubstr("measured on a GPU"));
  EXPECT_THAT(svg, HasSubstr("measured: " + path("gpu_bench.json")));

  // A group that is no kernel of this plan, and a file that is no bench document.
  doc["kernels"][0]["group"] = 999;
  write("other_bench.json", doc.dump());
  p = kiln({"profile", graph, "--plot", path("m.svg"), "--measured", path("other_bench.json")});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("/kernels/0: group 999 is no kernel of this plan"));
  p = kiln({"profile", graph, "--plot", path("m.svg"), "--measured", graph});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("expected the output of `kiln bench --json`"));
  expect_usage({"profile", graph, "--measured", path("gpu_bench.json")}, "--measured goes with --plot");
}

TEST_F(PicturesTest, OutputPathsThatCannotTakeThePictureAreRefusedBeforeAnyWork) {
  const std::string graph = pointwise_graph();
  const std::string before = slurp(graph);
  fs::create_directory(path("adir"));
  expect_usage({"profile", graph, "--plot", path("adir")}, "is a directory, not a regular file");
  expect_usage({"profile", graph, "--plot", graph}, "is the input '" + graph + "'");
  EXPECT_EQ(slurp(graph), before);
  expect_usage({"profile", graph, "--plot", path("nowhere/roof.svg")}, "does not exist");
  expect_usage({"bench", graph, "--trace", path("adir")}, "--trace '" + path("adir") + "' is a directory");
  expect_usage({"run", graph, "--device", "emu", "--trace", graph}, "is the input");
  EXPECT_EQ(slurp(graph), before);
  expect_usage({"run", graph, "--device", "ref", "--trace", path("t.json")}, "no kernels to trace");
  expect_usage({"plan", graph, "--heat"}, "--heat is an option of the drawing");
  // A directory that cannot be written (unless running as root, which writes anyway): an error, and no
  // temporary file left behind.
  if (::geteuid() != 0) {
    fs::create_directory(path("ro"));
    fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    Proc p = kiln({"profile", graph, "--no-emulate", "--plot", path("ro/roof.svg")});
    EXPECT_EQ(p.code, 1);
    EXPECT_THAT(p.err, HasSubstr("cannot write '" + path("ro/roof.svg") + "'"));
    fs::permissions(path("ro"), fs::perms::owner_all);
    EXPECT_TRUE(fs::is_empty(path("ro")));
  }
  EXPECT_TRUE(files_named("roof").empty());
  EXPECT_TRUE(files_named("t.json").empty());
}

// The Chrome trace event format's required fields, and that the events are the runs they say.
void check_trace(const nlohmann::json& doc, size_t runs, size_t kernels_per_run, const std::string& clock_word) {
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc.contains("traceEvents") && doc["traceEvents"].is_array());
  EXPECT_EQ(doc["otherData"]["schema"], "kiln.trace/1");
  std::vector<nlohmann::json> run_events, kernel_events;
  std::set<int> named_tracks;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e;
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string()) << e;
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
    if (e["ph"] == "M") {
      EXPECT_TRUE(e["args"]["name"].is_string()) << e;
      if (e["name"] == "thread_name") named_tracks.insert(e["tid"].get<int>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e;
    ASSERT_TRUE(e["ts"].is_number() && e["dur"].is_number()) << e;
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_TRUE(named_tracks.count(e["tid"].get<int>())) << "an event on a track with no thread_name: " << e;
    (e["cat"] == "run" ? run_events : kernel_events).push_back(e);
  }
  ASSERT_EQ(run_events.size(), runs);
  ASSERT_EQ(kernel_events.size(), runs * kernels_per_run);
  for (size_t r = 0; r < runs; ++r) {
    const double start = run_events[r]["ts"], end = start + run_events[r]["dur"].get<double>();
    double last_end = start;
    for (size_t k = 0; k < kernels_per_run; ++k) {
      const auto& e = kernel_events[r * kernels_per_run + k];
      const double ts = e["ts"], dur = e["dur"];
      // Inside its run, after the kernel before it (one stream: the timed launches do not overlap).
      EXPECT_GE(ts + 1e-3, last_end) << e;
      EXPECT_LE(ts + dur, end + 1e-3) << e;
      last_end = ts + dur;
      const auto& a = e["args"];
      EXPECT_TRUE(a["group"].is_number_integer() && a["family"].is_string() && a["kind"].is_string()) << e;
      EXPECT_EQ(a["grid"].size(), 3u);
      EXPECT_EQ(a["block"].size(), 3u);
      EXPECT_GT(a["bytes"].get<int64_t>(), 0);
      EXPECT_TRUE(a["flops"].is_number());
      EXPECT_THAT(a["clock"].get<std::string>(), HasSubstr(clock_word));
      EXPECT_THAT(e["name"].get<std::string>(), StartsWith("kiln_"));
    }
  }
}

TEST_F(PicturesTest, BenchAndRunTracesAreChromeTraceEvents) {
  const std::string graph = one_conv_graph();
  Proc p = kiln({"bench", graph, "--iterations", "3", "--warmup", "0", "--trace", path("bench.json"), "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  const nlohmann::json bench = nlohmann::json::parse(p.out);
  const size_t kernels = bench["kernels"].size();
  ASSERT_GE(kernels, 1u);
  const nlohmann::json trace = nlohmann::json::parse(slurp(path("bench.json")));
  check_trace(trace, bench["runs"].get<size_t>(), kernels, "CPU wall time");
  EXPECT_EQ(trace["otherData"]["device"], "emu");
  // The kernel events are the runs the bench timed: their median is the bench's.
  std::vector<double> first;
  for (const auto& e : trace["traceEvents"])
    if (e["cat"] == "kernel" && e["args"]["launch"] == 0) first.push_back(e["dur"].get<double>() / 1000);
  std::sort(first.begin(), first.end());
  EXPECT_NEAR(first[first.size() / 2], bench["kernels"][0]["ms"]["median"].get<double>(), 1e-6);

  p = kiln({"run", graph, "--device", "emu", "--trace", path("run.json")});
  ASSERT_EQ(p.code, 0) << p.err;
  check_trace(nlohmann::json::parse(slurp(path("run.json"))), 1, kernels, "CPU wall time");
}

TEST_F(PicturesTest, PlanHeatColoursGroupsByTheirShareOfTheEstimate) {
  Proc p = kiln({"plan", sample("resnet50_bottleneck"), "--format", "dot", "--heat", "--dot-kernels-only"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("us estimated for h200"));
  EXPECT_THAT(p.out,
              ::testing::ContainsRegex("group 3: conv\\\\nfamily conv2d\\\\n[0-9]+ ops\\\\n[0-9.]+ us \\([0-9]+%\\)"));
  EXPECT_THAT(p.out, HasSubstr("fillcolor=\"#d7301f\""));  // the costliest group, darkest

  const std::string dot = find_on_path("dot");
  ASSERT_FALSE(dot.empty()) << "Graphviz's dot is not installed: tools/setup.sh --test installs graphviz";
  p = kiln({"plan", sample("resnet50_bottleneck"), "--format", "svg", "--heat"});
  ASSERT_EQ(p.code, 0) << p.err;
  write("heat.svg", p.out);
  png::Image img = render(path("heat.svg"));
  EXPECT_GT(png::inked(img), 5000u);
  EXPECT_GT(png::of_colour(img, 0xd7301f), 500u);  // the hottest group's fill

  testing::ScopedEnv no_dot("KILN_DOT", "/nonexistent/dot");
  p = kiln({"plan", sample("resnet50_bottleneck"), "--format", "svg"});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("--format svg needs Graphviz's '/nonexistent/dot' program"));
  EXPECT_EQ(p.out, "");
}

}  // namespace
}  // namespace kiln
