// The `kiln` program, run as a subprocess: exit codes, messages, summaries, runs and tensor files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "temp_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kiln/json.h"
#include "kiln/npy.h"
#include "kiln/reference.h"
#include "plan_cli_fixture.h"
#include "subprocess.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using ::testing::StartsWith;

using subprocess::Proc;
using subprocess::slurp;

using plan_cli::lines_of;

// stdout without the line that holds the wall time.
std::string without_time(const std::string& out) {
  std::string r;
  for (const auto& l : lines_of(out)) {
    if (l.rfind("time:", 0) != 0) r += l + "\n";
  }
  return r;
}

// The output statistics table of `kiln run` (the lines after "outputs:" up to "saved"/"time").
std::string stats_table(const std::string& out) {
  std::string r;
  bool in = false;
  for (const auto& l : lines_of(out)) {
    if (l == "outputs:") {
      in = true;
    } else if (in && l.rfind("  ", 0) == 0) {
      r += l + "\n";
    } else {
      in = false;
    }
  }
  return r;
}

// kiln() runs the real `kiln` binary (stdout and stderr go to files of the temp directory) and
// expect_usage() checks a usage error: tests/plan_cli_fixture.h.
class CliTest : public plan_cli::PlanCliFixture {
 protected:
  // An invalid-input error: exit 1, every line on stderr starts with "error: ", nothing on stdout.
  std::string expect_invalid(const std::vector<std::string>& args) {
    Proc p = kiln(args);
    std::string what = "kiln " + ::testing::PrintToString(args);
    EXPECT_EQ(p.code, 1) << what << "\nstdout:\n" << p.out << "\nstderr:\n" << p.err;
    EXPECT_EQ(p.out, "") << what;
    EXPECT_FALSE(p.err.empty()) << what;
    for (const auto& l : lines_of(p.err)) EXPECT_THAT(l, StartsWith("error: ")) << what;
    return p.err;
  }

  // conv2d + bias -> relu -> y, and global_avg_pool(y) -> pooled.
  static Graph conv_graph() {
    Graph g("small_conv");
    Tensor x = g.input("x", {1, 3, 8, 8});
    Tensor w = g.parameter("w", {4, 3, 3, 3});
    Tensor b = g.parameter("b", {4});
    Tensor y = g.relu(g.conv2d(x, w, b, {.padding = {1, 1}}, "conv"), "act");
    g.output(y, "y");
    g.output(g.global_avg_pool(y, "pool"), "pooled");
    return g;
  }

  // Every storage type at the graph boundary.
  static Graph mixed_graph() {
    Graph g("mixed");
    Tensor a = g.input("a", {2, 5}, DType::f16);
    Tensor b = g.parameter("b", {5}, DType::bf16);
    Tensor c = g.add(a, g.cast(b, DType::f16, "b16"), "sum");
    g.output(c, "c");
    g.output(g.cast(c, DType::bf16, "to_bf16"), "d");
    g.output(g.cast(a, DType::f32, "to_f32"), "e");
    return g;
  }
};

TEST_F(CliTest, Help) {
  for (const char* flag : {"--help", "-h", "help"}) {
    Proc p = kiln({flag});
    EXPECT_EQ(p.code, 0) << flag;
    EXPECT_EQ(p.err, "");
    EXPECT_THAT(p.out, HasSubstr("usage:"));
    EXPECT_THAT(p.out, HasSubstr("kiln validate GRAPH "));
    EXPECT_THAT(p.out, HasSubstr("kiln run GRAPH --device ref"));
    EXPECT_THAT(p.out, HasSubstr("kiln import MODEL.onnx -o GRAPH.json"));
    EXPECT_THAT(p.out, HasSubstr("GRAPH is a kiln graph (.json) or an ONNX model (.onnx"));
    EXPECT_THAT(p.out, HasSubstr("exit status: 0 ok, 1 invalid input"));
  }
  Proc p = kiln({"run", "--help"});
  EXPECT_EQ(p.code, 0);
  EXPECT_THAT(p.out, HasSubstr("--save-outputs DIR"));
  p = kiln({"validate", "-h"});
  EXPECT_EQ(p.code, 0);
  EXPECT_THAT(p.out, HasSubstr("Usage: kiln validate [OPTIONS] GRAPH"));
}

TEST_F(CliTest, Version) {
  Proc p = kiln({"--version"});
  EXPECT_EQ(p.code, 0);
  EXPECT_EQ(p.err, "");
  EXPECT_THAT(p.out, MatchesRegex("kiln [0-9]+\\.[0-9]+\\.[0-9]+\n"));
}

TEST_F(CliTest, ValidatePrintsTheSummary) {
  std::string file = save(conv_graph(), "g.json");
  Proc p = kiln({"validate", file});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.err, "");
  EXPECT_EQ(p.out,
            "graph: small_conv (valid)\n"
            "counts: 1 input, 2 parameters, 3 nodes, 2 outputs\n"
            "tensors:\n"
            "  input      x       [1, 3, 8, 8]  f32  NCHW\n"
            "  parameter  w       [4, 3, 3, 3]  f32  KCRS\n"
            "  parameter  b       [4]           f32  row_major\n"
            "  output     y       [1, 4, 8, 8]  f32  NCHW\n"
            "  output     pooled  [1, 4, 1, 1]  f32  NCHW\n"
            "ops: conv2d 1, relu 1, global_avg_pool 1\n"
            "parameter elements: 112 (448 B)\n");

  p = kiln({"validate", save(mixed_graph(), "m.json")});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("counts: 1 input, 1 parameter, 4 nodes, 3 outputs\n"));
  EXPECT_THAT(p.out, HasSubstr("ops: cast 3, add 1\n"));
  EXPECT_THAT(p.out, HasSubstr("parameter elements: 5 (10 B)\n"));
}

TEST_F(CliTest, ValidatesEverySample) {
  fs::path samples = fs::path(KILN_SOURCE_DIR) / "samples" / "graphs";
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(samples, ec)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  if (files.empty()) GTEST_SKIP() << "no samples in " << samples;
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    Proc p = kiln({"validate", f.string()});
    EXPECT_EQ(p.code, 0) << f << "\n" << p.err;
    EXPECT_EQ(p.err, "") << f;
    EXPECT_THAT(p.out, StartsWith("graph: ")) << f;
  }
}

// Control bytes in names (an ESC sequence, a NUL) are refused by the graph check with the name spelled
// \xNN, and nothing kiln prints to the terminal carries the raw bytes.
TEST_F(CliTest, ControlBytesInNamesAreRefusedAndNeverPrinted) {
  write("ctl.json", R"({"format": "kiln.graph", "version": 1, "name": "g\u001b[31m",
    "tensors": [{"name": "x\u0000y", "kind": "input", "shape": [2, 3], "dtype": "f32"}],
    "nodes": [{"name": "n\u001b", "op": "relu", "inputs": {"x": "x\u0000y"}, "outputs": {"y": "r\u0007"}}],
    "outputs": ["r\u0007"]})");
  const std::string err = expect_invalid({"validate", path("ctl.json")});
  EXPECT_THAT(err, HasSubstr("graph name 'g\\x1b[31m' holds the control byte 0x1b at byte 1"));
  EXPECT_THAT(err, HasSubstr("tensor name 'x\\x00y' holds the control byte 0x00 at byte 1"));
  EXPECT_THAT(err, HasSubstr("node name 'n\\x1b'"));
  EXPECT_THAT(err, HasSubstr("tensor name 'r\\x07'"));
  for (const char c : err) EXPECT_TRUE(c == '\n' || (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f)) << int(c);
  // The C++ builder refuses them the same way.
  Graph g("ok");
  g.output(g.relu(g.input("a\x1b", {2})), "y");
  const Status st = g.verify();
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("tensor name 'a\\x1b' holds the control byte 0x1b"));
}

// A graph whose tensors cannot fit in memory (a broadcast matmul of 2^40 outputs: valid, 8 TiB as f64) is
// refused by run with the byte count and the limit before anything is allocated, never a bare bad_alloc;
// --max-memory sets the limit (here below a small graph's needs), and a bad value is a usage error.
TEST_F(CliTest, RunRefusesWhatCannotFitInMemory) {
  write("big.json", R"({"format": "kiln.graph", "version": 1, "name": "big",
    "tensors": [{"name": "a", "kind": "input", "shape": [1048576, 1], "dtype": "f32"},
                {"name": "b", "kind": "input", "shape": [1, 1048576], "dtype": "f32"}],
    "nodes": [{"name": "mm", "op": "matmul", "inputs": {"a": "a", "b": "b"}, "outputs": {"y": "y"}}],
    "outputs": ["y"]})");
  Proc v = kiln({"validate", path("big.json")});
  EXPECT_EQ(v.code, 0) << v.err;
  for (const char* device : {"ref", "emu"}) {
    const std::string err = expect_invalid({"run", path("big.json"), "--device", device});
    EXPECT_THAT(err, HasSubstr("needs about ")) << device;
    EXPECT_THAT(err, HasSubstr("TiB) of host memory on " + std::string(device))) << device;
    EXPECT_THAT(err, HasSubstr("the default: 3/4 of this machine's memory")) << device;
    EXPECT_THAT(err, Not(HasSubstr("bad_alloc"))) << device;
  }
  const std::string g = save(conv_graph(), "g.json");
  EXPECT_THAT(expect_invalid({"run", g, "--device", "ref", "--max-memory", "1K"}),
              HasSubstr("more than --max-memory 1024 bytes (1.0 KiB)"));
  EXPECT_EQ(kiln({"run", g, "--device", "ref", "--max-memory", "1G"}).code, 0);
  expect_usage({"run", g, "--device", "ref", "--max-memory", "lots"}, "--max-memory='lots': not a size");
}

TEST_F(CliTest, ValidateRejectsMissingAndUnreadableFiles) {
  EXPECT_THAT(expect_invalid({"validate", path("missing.json")}), HasSubstr(path("missing.json")));
  fs::create_directory(path("adir.json"));
  EXPECT_THAT(expect_invalid({"validate", path("adir.json")}), HasSubstr(path("adir.json")));
  write("empty.json", "");
  EXPECT_THAT(expect_invalid({"validate", path("empty.json")}), HasSubstr(path("empty.json")));
  write("garbage.json", std::string("\x7f"
                                    "ELF\x02\x01\x01\x00\x00\xff\xfe{{[[\"",
                                    17));
  EXPECT_THAT(expect_invalid({"validate", path("garbage.json")}), HasSubstr(path("garbage.json")));
  write("text.json", "this is not json at all");
  EXPECT_THAT(expect_invalid({"validate", path("text.json")}), HasSubstr(path("text.json")));
}

TEST_F(CliTest, ValidateRejectsTheBadCorpus) {
  fs::path bad = fs::path(KILN_SOURCE_DIR) / "tests" / "data" / "bad";
  std::map<std::string, std::vector<std::string>> expected;
  std::ifstream list(bad / "EXPECTED.txt");
  int line_no = 0;
  for (std::string line; std::getline(list, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    auto tab = line.find('\t');
    if (tab == std::string::npos) {
      ADD_FAILURE() << "EXPECTED.txt line " << line_no << " has no tab: " << line;
      continue;
    }
    expected[line.substr(0, tab)].push_back(line.substr(tab + 1));
  }
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(bad, ec)) {
    if (e.path().extension() == ".json") files.push_back(e.path().filename().string());
  }
  for (const auto& [name, needles] : expected) {
    if (std::find(files.begin(), files.end(), name) == files.end()) files.push_back(name);
  }
  if (files.empty() && expected.empty()) GTEST_SKIP() << "no bad graphs in " << bad;
  std::sort(files.begin(), files.end());
  for (const auto& name : files) {
    std::string file = (bad / name).string();
    if (!fs::exists(file)) {
      ADD_FAILURE() << "EXPECTED.txt names " << name << ", which is not in " << bad;
      continue;
    }
    auto it = expected.find(name);
    if (it == expected.end()) ADD_FAILURE() << name << " has no line in EXPECTED.txt";
    std::string err = expect_invalid({"validate", file});
    if (it == expected.end()) continue;
    for (const auto& needle : it->second) EXPECT_THAT(err, HasSubstr(needle)) << name;
  }
}

TEST_F(CliTest, UsageErrors) {
  std::string g = save(conv_graph(), "g.json");
  expect_usage({}, "missing command");
  expect_usage({"frobnicate"}, "unknown command 'frobnicate'");
  expect_usage({"--frob"}, "unknown option '--frob'");
  expect_usage({"--version", "x"}, "unknown command 'x'");
  expect_usage({"validate"}, "GRAPH is required");
  expect_usage({"validate", g, g}, "unexpected argument");
  expect_usage({"validate", g, "--device", "ref"}, "The following argument was not expected: --device");
  expect_usage({"run"}, "GRAPH is required");
  expect_usage({"run", g}, "missing --device");
  expect_usage({"run", g, "--device"}, "--device: 1 required D missing");
  expect_usage({"run", g, "--device", "tpu"}, "unknown device 'tpu': expected ref, emu, cuda or auto");
  expect_usage({"run", g, "--device", "ref", "--check"}, "--check compares a device with ref");
  expect_usage({"run", g, "--device", "emu", "--layout", "diagonal"}, "unknown --layout 'diagonal'");
  expect_usage({"run", g, "--device", "ref", "--device", "ref"}, "--device: At Most 1 required but received 2");
  expect_usage({"run", g, "--device", "ref", "--seed", "abc"}, "invalid --seed value 'abc'");
  expect_usage({"run", g, "--device", "ref", "--seed", "-1"}, "invalid --seed value '-1'");
  expect_usage({"run", g, "--device", "ref", "--seed", "1.5"}, "invalid --seed value '1.5'");
  expect_usage({"run", g, "--device", "ref", "--seed", "99999999999999999999999"}, "invalid --seed value");
  expect_usage({"run", g, "--device", "ref", "--seed="}, "--seed: 1 required S missing");
  expect_usage({"run", g, "--device", "ref", "--speed", "1"}, "The following argument was not expected: --speed");
  expect_usage({"run", g, "--device", "ref", "--seed", "1", "--inputs", dir_}, "exclude each other");
  // A bad option is a usage error even when the graph is missing too (the graph is read after the options).
  const std::string missing = dir_ + "/missing.json";
  expect_usage({"run", missing, "--device", "emu", "--layout", "diagonal"}, "unknown --layout 'diagonal'");
  expect_usage({"run", missing, "--device", "ref", "--check"}, "--check compares a device with ref");
  expect_usage({"plan", missing, "--layout", "diagonal"}, "unknown --layout 'diagonal'");
}

TEST_F(CliTest, RunPrintsStatisticsAndIsDeterministic) {
  std::string g = save(conv_graph(), "g.json");
  Proc a = kiln({"run", g, "--device", "ref", "--seed", "7"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.err, "");
  std::vector<std::string> lines = lines_of(a.out);
  ASSERT_EQ(lines.size(), 8u) << a.out;
  EXPECT_EQ(lines[0], "graph: small_conv");
  EXPECT_EQ(lines[1], "device: ref");
  EXPECT_EQ(lines[2], "inputs: random, seed 7");
  EXPECT_EQ(lines[3], "outputs:");
  EXPECT_THAT(lines[4], MatchesRegex("  name +shape +dtype +min +max +mean +std"));
  EXPECT_THAT(lines[5], StartsWith("  y       [1, 4, 8, 8]  f32  "));
  EXPECT_THAT(lines[6], StartsWith("  pooled  [1, 4, 1, 1]  f32  "));
  EXPECT_THAT(lines[7], MatchesRegex("time: [0-9]+\\.[0-9]{3} ms"));

  Proc b = kiln({"run", "--seed=7", "--device=ref", g});  // options in any order, either spelling
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(without_time(a.out), without_time(b.out));

  Proc c = kiln({"run", g, "--device", "ref", "--seed", "8"});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(stats_table(a.out), stats_table(c.out));

  Proc d = kiln({"run", g, "--device", "ref"});  // the default seed is 0
  Proc e = kiln({"run", g, "--device", "ref", "--seed", "0"});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_THAT(d.out, HasSubstr("inputs: random, seed 0\n"));
  EXPECT_EQ(without_time(d.out), without_time(e.out));
}

TEST_F(CliTest, SavedInputsReproduceTheRunAndSavedOutputsMatch) {
  for (auto make : {&CliTest::conv_graph, &CliTest::mixed_graph}) {
    Graph graph = make();
    std::string name = graph.name();
    std::string g = save(graph, name + ".json");
    std::string in_dir = path(name + "-in"), out1 = path(name + "-out1"), out2 = path(name + "-out2/nested");

    Proc a = kiln({"run", g, "--device", "ref", "--seed", "3", "--save-inputs", in_dir, "--save-outputs", out1});
    ASSERT_EQ(a.code, 0) << a.err;
    size_t n_in = graph.bound_tensors().size(), n_out = graph.outputs().size();
    EXPECT_THAT(a.out, HasSubstr(fmt::format("saved inputs: {} files in {}\n", n_in, in_dir)));
    EXPECT_THAT(a.out, HasSubstr(fmt::format("saved outputs: {} files in {}\n", n_out, out1)));

    Proc b = kiln({"run", g, "--device", "ref", "--inputs", in_dir, "--save-outputs", out2});
    ASSERT_EQ(b.code, 0) << b.err;
    EXPECT_THAT(b.out, HasSubstr(fmt::format("inputs: {} files from {}\n", n_in, in_dir)));
    EXPECT_EQ(stats_table(a.out), stats_table(b.out)) << name;

    // The saved outputs are the reference's outputs on the same random inputs, bit for bit.
    auto expected = run_reference(graph, random_inputs(graph, 3));
    ASSERT_TRUE(expected.ok()) << expected.status().message();
    for (Tensor t : graph.outputs()) {
      const TensorInfo& info = graph.tensor(t);
      for (const std::string& dir : {out1, out2}) {
        std::string file = dir + "/" + info.name + ".npy";
        auto loaded = load_npy(file, info.dtype, info.shape, info.name);
        ASSERT_TRUE(loaded.ok()) << loaded.status().message();
        const HostTensor& want = expected->at(info.name);
        ASSERT_EQ(loaded->data.size(), want.data.size());
        for (size_t i = 0; i < want.data.size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint64_t>(loaded->data[i]), std::bit_cast<uint64_t>(want.data[i]))
              << file << " value " << i;
        }
      }
      EXPECT_EQ(slurp(out1 + "/" + info.name + ".npy"), slurp(out2 + "/" + info.name + ".npy"));
    }
    // The saved inputs are the seed's random inputs.
    for (const auto& [tname, t] : random_inputs(graph, 3)) {
      EXPECT_EQ(slurp(in_dir + "/" + tname + ".npy"), npy_encode(t)) << tname;
    }
  }
}

TEST_F(CliTest, RunRejectsBadInputFiles) {
  Graph graph = conv_graph();
  std::string g = save(graph, "g.json");
  std::string in = path("in");
  ASSERT_EQ(kiln({"run", g, "--device", "ref", "--save-inputs", in}).code, 0);

  // A missing file: named, with the tensor it was for.
  fs::remove(in + "/w.npy");
  std::string err = expect_invalid({"run", g, "--device", "ref", "--inputs", in});
  EXPECT_THAT(err, HasSubstr(in + "/w.npy: missing file for parameter 'w' ([4, 3, 3, 3] f32)"));

  // A file of the wrong shape.
  HostTensor wrong(Shape{4, 3, 3}, DType::f32);
  ASSERT_TRUE(save_npy(in + "/w.npy", wrong).ok());
  err = expect_invalid({"run", g, "--device", "ref", "--inputs", in});
  EXPECT_THAT(err, HasSubstr(in + "/w.npy: tensor 'w': shape mismatch: expected [4, 3, 3, 3], got [4, 3, 3]"));

  // A file of the wrong type.
  HostTensor half(Shape{4, 3, 3, 3}, DType::f16);
  ASSERT_TRUE(save_npy(in + "/w.npy", half).ok());
  err = expect_invalid({"run", g, "--device", "ref", "--inputs", in});
  EXPECT_THAT(err, HasSubstr("expected '<f4' (float32 for f32), got '<f2' (float16)"));

  // Not a .npy file at all, and a directory that does not exist.
  write("in/w.npy", "hello");
  err = expect_invalid({"run", g, "--device", "ref", "--inputs", in});
  EXPECT_THAT(err, HasSubstr("bad magic"));
  err = expect_invalid({"run", g, "--device", "ref", "--inputs", path("nowhere")});
  EXPECT_THAT(err, HasSubstr(path("nowhere")));

  // A graph that does not load.
  write("bad.json", "{}");
  err = expect_invalid({"run", path("bad.json"), "--device", "ref"});
  EXPECT_THAT(err, HasSubstr(path("bad.json")));

  // Outputs cannot be written where a file stands.
  write("file", "x");
  Proc p = kiln({"run", g, "--device", "ref", "--save-outputs", path("file")});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr(path("file")));
}

}  // namespace
}  // namespace kiln
