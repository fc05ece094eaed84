// `kiln import` and every command that takes an .onnx model, as real processes.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kiln/onnx.h"
#include "onnx_model_builder.h"
#include "scoped_env.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace kiln {
namespace {

using subprocess::Proc;
using testing::OnnxModel;

class OnnxCli : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    OnnxModel m;
    m.input("x", {-1, 3, 8, 8}).output("y", {-1, 4});
    m.weight("conv.w", {4, 3, 3, 3});
    m.weight("conv.b", {4});
    auto& c = m.node("Conv", {"x", "conv.w", "conv.b"}, {"c"});
    OnnxModel::attr(c, "pads", std::vector<int64_t>{1, 1, 1, 1});
    m.node("Relu", {"c"}, {"r"});
    m.node("GlobalAveragePool", {"r"}, {"p"});
    m.node("Flatten", {"p"}, {"y"});
    write("m.onnx", m.bytes());
  }
  Proc kiln(std::vector<std::string> args) {
    return subprocess::run_process(KILN_CLI_PATH, args, dir_, std::chrono::seconds(300));
  }
};

TEST_F(OnnxCli, CommandsTakeAnOnnxModelWithShape) {
  // The open dim is a symbol: validated over its range, bound by --dims to run; --shape fixes it at import.
  Proc v = kiln({"validate", path("m.onnx")});
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("dims: N in [1, 1024]"), std::string::npos) << v.out;
  Proc unbound = kiln({"plan", path("m.onnx")});
  EXPECT_EQ(unbound.code, 1);
  EXPECT_NE(unbound.err.find("--dims N=1"), std::string::npos) << unbound.err;
  Proc bound = kiln({"run", path("m.onnx"), "--dims", "N=3", "--device", "emu", "--check"});
  ASSERT_EQ(bound.code, 0) << bound.err;
  EXPECT_NE(bound.out.find("[3, 4]"), std::string::npos) << bound.out;
  v = kiln({"validate", path("m.onnx"), "--shape", "x=2x3x8x8"});
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("conv2d 1"), std::string::npos) << v.out;
  Proc p = kiln({"plan", path("m.onnx"), "--shape", "x=2x3x8x8"});
  EXPECT_EQ(p.code, 0) << p.err;
  Proc r = kiln({"run", path("m.onnx"), "--shape", "x=2x3x8x8", "--device", "emu", "--check"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 parameters: the graph's own values"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok"), std::string::npos) << r.out;
  Proc w = kiln({"prewarm", path("m.onnx"), "--shape", "x=2x3x8x8", "--arch", "sm_80"});
  EXPECT_EQ(w.code, 0) << w.err;
}

TEST_F(OnnxCli, ImportWritesGraphAndWeightsThatRunLikeTheModel) {
  Proc i = kiln({"import", path("m.onnx"), "-o", path("g.json"), "--shape", "x=1x3x8x8"});
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_TRUE(std::filesystem::exists(path("g.weights/conv.w.npy")));
  EXPECT_NE(i.out.find("wrote 2 parameters"), std::string::npos) << i.out;
  Proc a = kiln({"run", path("m.onnx"), "--shape", "x=1x3x8x8", "--device", "ref", "--save-outputs", path("out_onnx")});
  ASSERT_EQ(a.code, 0) << a.err;
  Proc b = kiln(
      {"run", path("g.json"), "--weights", path("g.weights"), "--device", "ref", "--save-outputs", path("out_json")});
  ASSERT_EQ(b.code, 0) << b.err;
  const std::string ya = subprocess::slurp(path("out_onnx/y.npy")), yb = subprocess::slurp(path("out_json/y.npy"));
  EXPECT_FALSE(ya.empty());
  EXPECT_EQ(ya, yb);  // same weights, same seed-0 input: the same bytes
  // Without --weights the JSON graph's parameters are random: a different output.
  Proc c = kiln({"run", path("g.json"), "--device", "ref", "--save-outputs", path("out_random")});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(subprocess::slurp(path("out_random/y.npy")), ya);
  Proc missing = kiln({"run", path("g.json"), "--weights", path("nowhere"), "--device", "ref"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("conv.w"), std::string::npos) << missing.err;
}

TEST_F(OnnxCli, BadModelsAndBadOptionsExitWithClearErrors) {
  write("bad.onnx", "this is not protobuf at all \xff\xff\xff");
  Proc r = kiln({"run", path("bad.onnx"), "--device", "ref"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("error: " + path("bad.onnx") + ": not an ONNX model"), std::string::npos) << r.err;
  Proc s = kiln({"validate", path("m.onnx"), "--shape", "x=2xAx8"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("invalid --shape 'x=2xAx8'"), std::string::npos) << s.err;
  // --dim-range: LO..HI with 1 <= LO <= HI, a name the model opens, only for ONNX; a good one is kept.
  for (const char* bad : {"N=8..2", "N=0..4", "N=4", "=1..4", "N=1..4,N=2..3"}) {
    Proc d = kiln({"validate", path("m.onnx"), "--dim-range", bad});
    EXPECT_EQ(d.code, 2) << bad;
    EXPECT_NE(d.err.find("invalid --dim-range"), std::string::npos) << d.err;
  }
  Proc unknown = kiln({"validate", path("m.onnx"), "--dim-range", "batch=1..8"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("--dim-range names 'batch', which is no open dim of the model (its open dims: N in "
                             "[1, 1024])"),
            std::string::npos)
      << unknown.err;
  Proc ranged = kiln({"validate", path("m.onnx"), "--dim-range", "N=2..16"});
  EXPECT_EQ(ranged.code, 0) << ranged.err;
  EXPECT_NE(ranged.out.find("N in [2, 16]"), std::string::npos) << ranged.out;
  Proc outside = kiln({"plan", path("m.onnx"), "--dim-range", "N=2..16", "--dims", "N=17"});
  EXPECT_EQ(outside.code, 1);
  EXPECT_NE(outside.err.find("dim 'N' = 17 is outside its range [2, 16]"), std::string::npos) << outside.err;
  Proc i = kiln({"import", path("m.onnx")});
  EXPECT_EQ(i.code, 2);
  EXPECT_NE(i.err.find("missing -o"), std::string::npos) << i.err;
  Proc j = kiln({"import", path("bad.onnx"), "-o", path("x.json")});
  EXPECT_EQ(j.code, 1);
  EXPECT_FALSE(std::filesystem::exists(path("x.json")));
}

// What import would write over, refused before anything is written: the model itself, a FIFO or a device
// where the graph goes, a graph path that is also the weights' directory.
TEST_F(OnnxCli, ImportNeverWritesOverWhatIsNotItsOwnOutput) {
  namespace fs = std::filesystem;
  const std::string model = subprocess::slurp(path("m.onnx"));
  const std::vector<std::string> shape{"--shape", "x=1x3x8x8"};
  auto import = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "import");
    args.insert(args.end(), shape.begin(), shape.end());
    return kiln(args);
  };
  // -o the model (by its path, another spelling of it, a hard link to it): it was overwritten with JSON.
  fs::create_hard_link(path("m.onnx"), path("linked.onnx"));
  for (const std::string& out : {path("m.onnx"), dir_ + "/./m.onnx", path("linked.onnx")}) {
    Proc p = import({path("m.onnx"), "-o", out});
    EXPECT_EQ(p.code, 2) << out << ": " << p.out;
    EXPECT_NE(p.err.find("is the model being imported"), std::string::npos) << p.err;
  }
  EXPECT_EQ(subprocess::slurp(path("m.onnx")), model);
  EXPECT_FALSE(fs::exists(path("m.weights")));

  // -o a FIFO: it became a regular file.
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  Proc f = import({path("m.onnx"), "-o", path("pipe")});
  EXPECT_EQ(f.code, 2);
  EXPECT_NE(f.err.find("-o '" + path("pipe") + "' is a FIFO, not a regular file"), std::string::npos) << f.err;
  EXPECT_TRUE(fs::is_fifo(path("pipe")));
  EXPECT_FALSE(fs::exists(path("pipe.weights")));
  // -o a device (a link to /dev/null, so the test needs no root): refused the same way.
  fs::create_symlink("/dev/null", path("null.json"));
  Proc d = import({path("m.onnx"), "-o", path("null.json")});
  EXPECT_EQ(d.code, 2);
  EXPECT_NE(d.err.find("is a character device, not a regular file"), std::string::npos) << d.err;
  EXPECT_FALSE(fs::exists(path("null.weights")));

  // The graph and its weights at one path: it failed, leaving a same.json/ folder behind.
  Proc w = import({path("m.onnx"), "-o", path("same.json"), "--weights", path("same.json")});
  EXPECT_EQ(w.code, 2);
  EXPECT_NE(w.err.find("is the graph's own path"), std::string::npos) << w.err;
  EXPECT_FALSE(fs::exists(path("same.json")));
  // Weights where a file is.
  write("file", "x");
  Proc x = import({path("m.onnx"), "-o", path("g.json"), "--weights", path("file")});
  EXPECT_EQ(x.code, 2);
  EXPECT_NE(x.err.find("exists and is not a directory"), std::string::npos) << x.err;
  EXPECT_FALSE(fs::exists(path("g.json")));

  // An existing regular graph file is replaced, as before.
  write("old.json", "old");
  Proc ok = import({path("m.onnx"), "-o", path("old.json")});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(subprocess::slurp(path("old.json")), "old");
}

// The ONNX front end is a plugin (src/onnx/plugin_api.h): a command that reads no model never loads it, nor
// protobuf and libonnx (ld.so's LD_DEBUG=libs lists every library a process initializes); one that reads a
// model does, and finds it beside the program.
TEST_F(OnnxCli, ThePluginIsLoadedOnlyToReadAModel) {
  EXPECT_TRUE(onnx_available());
  write("g.json", R"({"format": "kiln.graph", "version": 1, "name": "g",
    "tensors": [{"name": "x", "shape": [2, 8], "kind": "input"}],
    "nodes": [{"op": "relu", "name": "r", "inputs": {"x": "x"}, "outputs": {"y": "y"}}], "outputs": ["y"]})");
  testing::ScopedEnv debug("LD_DEBUG", "libs");
  Proc json = kiln({"validate", path("g.json")});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_NE(json.err.find("calling init"), std::string::npos) << "LD_DEBUG=libs printed nothing";
  EXPECT_EQ(json.err.find("libprotobuf"), std::string::npos) << json.err;
  EXPECT_EQ(json.err.find("libkiln_onnx"), std::string::npos) << json.err;
  Proc model = kiln({"validate", path("m.onnx")});
  ASSERT_EQ(model.code, 0) << model.err;
  EXPECT_NE(model.err.find("libkiln_onnx.so"), std::string::npos) << model.err;
  EXPECT_NE(model.err.find("libprotobuf"), std::string::npos) << model.err;
}

// KILN_ONNX_PLUGIN names the plugin: a path that is absent, or a library that is no kiln plugin, is an error
// saying what was tried and why, never a crash.
TEST_F(OnnxCli, AMissingOrForeignPluginIsAClearError) {
  {
    testing::ScopedEnv plugin("KILN_ONNX_PLUGIN", path("nowhere/libkiln_onnx.so").c_str());
    Proc p = kiln({"validate", path("m.onnx")});
    EXPECT_NE(p.code, 0);
    EXPECT_NE(p.err.find("kiln's ONNX front end (libkiln_onnx.so) could not be loaded"), std::string::npos) << p.err;
    EXPECT_NE(p.err.find(path("nowhere/libkiln_onnx.so") + " (absent)"), std::string::npos) << p.err;
    EXPECT_NE(p.err.find("KILN_ONNX_PLUGIN"), std::string::npos) << p.err;
    Proc json = kiln({"--version"});
    EXPECT_EQ(json.code, 0) << "a command that reads no model does not need the plugin: " << json.err;
  }
  testing::ScopedEnv plugin("KILN_ONNX_PLUGIN", "/lib/x86_64-linux-gnu/libz.so.1");
  if (!std::filesystem::exists("/lib/x86_64-linux-gnu/libz.so.1")) GTEST_SKIP() << "no libz.so.1 at the usual path";
  Proc p = kiln({"validate", path("m.onnx")});
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find("not a kiln ONNX plugin: no kiln_onnx_plugin_api"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace kiln
