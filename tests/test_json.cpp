// JSON load and save: round trips over every op of the registry, the samples, the canonical text, the
// defaults of the format, and files on disk. The error cases live in test_json_errors.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "kiln/graph.h"
#include "kiln/json.h"
#include "op_cases.h"
#include "ops/registry.h"

namespace kiln {
namespace {

using testing::op_cases;

namespace fs = std::filesystem;

// Whether every input and parameter was declared before the first node: then loading the saved text
// numbers the tensors as `g` does. (Graph::operator== compares tensors by their index, and a file lists
// the declarations before the nodes.)
bool declarations_first(const Graph& g) {
  bool seen_intermediate = false;
  for (const TensorInfo& t : g.tensors()) {
    if (t.kind == TensorKind::intermediate) {
      seen_intermediate = true;
    } else if (seen_intermediate) {
      return false;
    }
  }
  return true;
}

// save -> load gives the same graph (the same text when its declarations are interleaved with nodes);
// load -> save -> load gives an equal graph and byte-identical text.
void expect_round_trip(const Graph& g, const std::string& what) {
  const std::string text = graph_to_json(g);
  Result<Graph> g1 = graph_from_json(text, what);
  ASSERT_TRUE(g1.ok()) << what << ": " << g1.status().message() << "\n" << text;
  if (declarations_first(g)) {
    EXPECT_TRUE(*g1 == g) << what << ": the loaded graph differs from the saved one\n" << text;
  }
  const std::string text2 = graph_to_json(*g1);
  EXPECT_EQ(text, text2) << what << ": saving the loaded graph changed the text";
  Result<Graph> g2 = graph_from_json(text2, what);
  ASSERT_TRUE(g2.ok()) << what << ": " << g2.status().message();
  EXPECT_TRUE(*g2 == *g1) << what;
}

TEST(JsonRoundTrip, EveryOpOfTheRegistry) {
  int covered = 0;
  for (const OpDef& def : op_registry()) {
    auto it = op_cases().find(std::string(def.name));
    if (it == op_cases().end()) {
      ADD_FAILURE() << "op '" << def.name << "' has no case in op_cases() of tests/test_json.cpp: add one";
      continue;
    }
    SCOPED_TRACE(std::string(def.name));
    Graph g(std::string(def.name) + "_graph");
    it->second(g);
    Status st = g.verify();
    ASSERT_TRUE(st.ok()) << def.name << ": " << st.message();
    bool has_op = std::any_of(g.nodes().begin(), g.nodes().end(), [&](const Node& n) { return n.op == def.id; });
    EXPECT_TRUE(has_op) << "the case of '" << def.name << "' does not use the op";
    expect_round_trip(g, std::string(def.name));
    ++covered;
  }
  EXPECT_EQ(covered, kOpCount);
  // No case for an op that is not in the registry (a renamed or removed op).
  for (const auto& [name, builder] : op_cases()) EXPECT_NE(find_op(name), nullptr) << "no op named '" << name << "'";
}

// All the ops in one graph (each case's tensors renamed apart), saved and loaded as a whole.
TEST(JsonRoundTrip, ManyOpsInOneGraph) {
  Graph g("everything");
  Tensor x = g.input("image", {1, 8, 16, 16}, DType::f32);
  Tensor w = g.parameter("conv.w", {8, 8, 3, 3});
  Tensor s = g.parameter("bn/scale~1", {8});
  Tensor t = g.parameter("bn.shift", {8});
  Tensor m = g.parameter("bn.mean", {8});
  Tensor v = g.parameter("bn.var", {8});
  Tensor y = g.conv2d(x, w, {.padding = {1, 1}}, "conv");
  y = g.batch_norm(y, s, t, m, v, 1e-5, "bn \"quoted\"");
  y = g.relu(y, "relu/1");
  Tensor r = g.add(y, x, "résidu");
  Tensor p = g.max_pool2d(r, {.kernel = {2, 2}}, "pool");
  Tensor u = g.upsample2d(p, {.scale = {2.0, 2.0}}, "up");
  Tensor c = g.concat({u, r}, 1, "cat");
  Tensor gp = g.global_avg_pool(c, "gap");
  Tensor flat = g.reshape(gp, {1, 16}, "flat");
  Tensor fc = g.matmul(flat, g.parameter("fc.w", {16, 10}), g.parameter("fc.b", {10}), {}, "fc");
  g.output(g.softmax(fc, -1, "prob"), "probabilities");
  g.output(g.layout_convert(r, Layout::NHWC, "to_nhwc"));
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  expect_round_trip(g, "everything");
  // The renamed output keeps its new name.
  EXPECT_NE(graph_to_json(g).find("\"probabilities\""), std::string::npos);
}

// A tensor with dtypes and layouts other than the defaults, declared in any order.
TEST(JsonRoundTrip, DTypesLayoutsAndKinds) {
  Graph g("kinds");
  Tensor a = g.input("a", {1, 4, 6, 6}, DType::f16, Layout::NHWC);
  Tensor w = g.parameter("w", {4, 4, 1, 1}, DType::f16);  // KCRS by default: it is read as a weight
  Tensor b = g.input("b", {4}, DType::bf16);
  Tensor y = g.conv2d(a, w, {}, "conv");
  g.output(y);                                    // NHWC, as its producer gives it: written as a plain name
  g.output(g.relu(y, "relu"), {}, Layout::NCHW);  // differs from its producer's NHWC: written with its layout
  g.output(g.cast(b, DType::f32, "widen"));
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  EXPECT_EQ(g.tensor(w).layout, Layout::KCRS);
  expect_round_trip(g, "kinds");
  const std::string text = graph_to_json(g);
  EXPECT_NE(
      text.find("\"outputs\": [\n    \"conv\",\n    {\n      \"name\": \"relu\",\n      \"layout\": \"NCHW\"\n    }"),
      std::string::npos)
      << text;
}

// The exact text of a small graph: the canonical form of docs/graph-format.md.
TEST(JsonSave, CanonicalText) {
  Graph g("conv_bias_bn_relu");
  Tensor x = g.input("x", {1, 3, 32, 32});
  Tensor w = g.parameter("conv1.w", {16, 3, 3, 3});
  Tensor b = g.parameter("conv1.b", {16});
  Tensor s = g.parameter("bn1.scale", {16}), t = g.parameter("bn1.shift", {16});
  Tensor m = g.parameter("bn1.mean", {16}), v = g.parameter("bn1.var", {16});
  Tensor y = g.conv2d(x, w, b, {.stride = {1, 1}, .padding = {1, 1}}, "conv1");
  y = g.batch_norm(y, s, t, m, v, 1e-5, "bn1");
  y = g.relu(g.mul(y, 1.0, "scale1"), "relu1");
  g.output(y);
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  const std::string expected = R"({
  "format": "kiln.graph",
  "version": 1,
  "name": "conv_bias_bn_relu",
  "tensors": [
    {
      "name": "x",
      "shape": [
        1,
        3,
        32,
        32
      ],
      "dtype": "f32",
      "layout": "NCHW",
      "kind": "input"
    },
    {
      "name": "conv1.w",
      "shape": [
        16,
        3,
        3,
        3
      ],
      "dtype": "f32",
      "layout": "KCRS",
      "kind": "parameter"
    },
    {
      "name": "conv1.b",
      "shape": [
        16
      ],
      "dtype": "f32",
      "layout": "row_major",
      "kind": "parameter"
    },
    {
      "name": "bn1.scale",
      "shape": [
        16
      ],
      "dtype": "f32",
      "layout": "row_major",
      "kind": "parameter"
    },
    {
      "name": "bn1.shift",
      "shape": [
        16
      ],
      "dtype": "f32",
      "layout": "row_major",
      "kind": "parameter"
    },
    {
      "name": "bn1.mean",
      "shape": [
        16
      ],
      "dtype": "f32",
      "layout": "row_major",
      "kind": "parameter"
    },
    {
      "name": "bn1.var",
      "shape": [
        16
      ],
      "dtype": "f32",
      "layout": "row_major",
      "kind": "parameter"
    }
  ],
  "nodes": [
    {
      "op": "conv2d",
      "name": "conv1",
      "inputs": {
        "x": "x",
        "w": "conv1.w",
        "bias": "conv1.b"
      },
      "outputs": {
        "y": "conv1"
      },
      "attrs": {
        "stride": [
          1,
          1
        ],
        "padding": [
          1,
          1
        ],
        "dilation": [
          1,
          1
        ],
        "groups": 1
      }
    },
    {
      "op": "batch_norm",
      "name": "bn1",
      "inputs": {
        "x": "conv1",
        "scale": "bn1.scale",
        "shift": "bn1.shift",
        "mean": "bn1.mean",
        "var": "bn1.var"
      },
      "outputs": {
        "y": "bn1"
      },
      "attrs": {
        "epsilon": 1e-05
      }
    },
    {
      "op": "mul",
      "name": "scale1",
      "inputs": {
        "a": "bn1"
      },
      "outputs": {
        "y": "scale1"
      },
      "attrs": {
        "b": 1.0
      }
    },
    {
      "op": "relu",
      "name": "relu1",
      "inputs": {
        "x": "scale1"
      },
      "outputs": {
        "y": "relu1"
      }
    }
  ],
  "outputs": [
    "relu1"
  ]
}
)";
  EXPECT_EQ(graph_to_json(g), expected);
  expect_round_trip(g, "canonical");
}

// What a hand-written file may leave out, and what it then gets.
TEST(JsonLoad, DefaultsAndScalarAttributes) {
  const char* text = R"({
    "format": "kiln.graph", "version": 1,
    "tensors": [
      {"name": "x", "shape": [1, 3, 8, 8]},
      {"name": "w", "shape": [4, 3, 3, 3], "kind": "parameter"},
      {"name": "v", "shape": [4], "dtype": "f32", "kind": "input"},
      {"name": "h", "shape": [1, 4, 8, 8], "dtype": "f16", "layout": "NHWC"}
    ],
    "nodes": [
      {"op": "conv2d", "inputs": {"x": "x", "w": "w"}, "outputs": {"y": "c"}, "attrs": {"padding": 1}},
      {"op": "mul", "name": "half", "inputs": {"a": "c"}, "outputs": {"y": "m"}, "attrs": {"b": 0.5}},
      {"op": "sub", "name": "one_minus", "inputs": {"b": "m"}, "outputs": {"y": "s"}, "attrs": {"a": 1}},
      {"op": "concat", "name": "cat", "inputs": {"xs": "s"}, "outputs": {"y": "cat"}},
      {"op": "relu", "name": "r", "inputs": {"x": ["h"]}, "outputs": {"y": "r"}}
    ],
    "outputs": ["cat", {"name": "r"}, {"name": "m", "layout": "NHWC"}]
  })";
  Result<Graph> r = graph_from_json(text);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Graph& g = *r;
  EXPECT_EQ(g.name(), "graph");
  auto info = [&](const char* name) -> const TensorInfo& { return g.tensor(*g.find_tensor(name)); };
  EXPECT_EQ(info("x").layout, Layout::NCHW);
  EXPECT_EQ(info("x").kind, TensorKind::input);
  EXPECT_EQ(info("x").dtype, DType::f32);
  EXPECT_EQ(info("w").layout, Layout::KCRS);  // a 4-D tensor read as a conv weight
  EXPECT_EQ(info("w").kind, TensorKind::parameter);
  EXPECT_EQ(info("v").layout, Layout::row_major);
  EXPECT_EQ(info("h").layout, Layout::NHWC);
  EXPECT_EQ(info("h").dtype, DType::f16);
  EXPECT_EQ(info("c").shape, (Shape{1, 4, 8, 8}));
  EXPECT_EQ(info("m").layout, Layout::NHWC);
  ASSERT_EQ(g.nodes().size(), 5u);
  EXPECT_EQ(g.nodes()[0].name, "conv2d_0");  // named automatically
  const Attrs& conv = g.nodes()[0].attrs;
  EXPECT_EQ(std::get<std::vector<int64_t>>(conv.at("padding")), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(conv.at("stride")), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(std::get<double>(g.nodes()[1].attrs.at("b")), 0.5);
  EXPECT_EQ(std::get<double>(g.nodes()[2].attrs.at("a")), 1.0);  // an integer where a float is expected
  EXPECT_TRUE(g.nodes()[1].inputs[1].empty());                   // port 'b' is the scalar
  // Saving writes every default out; that text is stable from then on.
  const std::string text2 = graph_to_json(g);
  EXPECT_NE(text2.find("\"a\": 1.0"), std::string::npos) << text2;
  EXPECT_NE(text2.find("\"xs\": [\n          \"s\"\n        ]"), std::string::npos) << text2;
  expect_round_trip(g, "defaults");
}

TEST(JsonLoad, AttributeValueTypes) {
  // Each JSON kind of value becomes its AttrValue: checked through upsample2d's float list given as ints.
  const char* text = R"({"format": "kiln.graph", "version": 1,
    "tensors": [{"name": "x", "shape": [1, 1, 2, 2]}],
    "nodes": [{"op": "upsample2d", "inputs": {"x": "x"}, "outputs": {"y": "y"},
               "attrs": {"scale": [2, 3], "mode": "bilinear", "align_corners": true}}],
    "outputs": ["y"]})";
  Result<Graph> r = graph_from_json(text);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Attrs& a = r->nodes()[0].attrs;
  EXPECT_EQ(std::get<std::vector<double>>(a.at("scale")), (std::vector<double>{2.0, 3.0}));
  EXPECT_EQ(std::get<std::string>(a.at("mode")), "bilinear");
  EXPECT_TRUE(std::get<bool>(a.at("align_corners")));
  EXPECT_EQ(r->shape(*r->find_tensor("y")), (Shape{1, 1, 4, 6}));
  const std::string saved = graph_to_json(*r);
  EXPECT_NE(saved.find("\"scale\": [\n          2.0,\n          3.0\n        ]"), std::string::npos) << saved;
}

// Every shipped sample loads, and saving it is stable (load -> save -> load -> save).
TEST(JsonRoundTrip, Samples) {
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "samples" / "graphs";
  std::vector<fs::path> files;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".json") files.push_back(e.path());
    }
  }
  if (files.empty()) GTEST_SKIP() << "no samples in " << dir;
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    Result<Graph> g = load_graph(f.string());
    ASSERT_TRUE(g.ok()) << g.status().message();
    expect_round_trip(*g, f.string());
  }
}

// The example of docs/graph-format.md (its first ```json block) is a valid graph.
TEST(JsonDocs, ExampleLoads) {
  const fs::path doc = fs::path(KILN_SOURCE_DIR) / "docs" / "graph-format.md";
  std::ifstream in(doc);
  ASSERT_TRUE(in.good()) << doc;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const std::string open = "```json\n";
  size_t begin = text.find(open);
  ASSERT_NE(begin, std::string::npos) << "no ```json block in " << doc;
  begin += open.size();
  size_t end = text.find("```", begin);
  ASSERT_NE(end, std::string::npos);
  Result<Graph> g = graph_from_json(std::string_view(text).substr(begin, end - begin), doc.string());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->nodes().size(), 4u);
  EXPECT_EQ(g->tensor(*g->find_tensor("conv1.w")).layout, Layout::KCRS);
  EXPECT_EQ(g->shape(*g->find_tensor("y")), (Shape{1, 16, 32, 32}));
  expect_round_trip(*g, "docs example");
}

// A scratch directory removed at the end of a test.
class JsonFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static std::string fmt_dir(const std::string& test) {
    return "kiln_test_json_" + test + "_" + std::to_string(::getpid());
  }
  fs::path dir_;
};

Graph small_graph() {
  Graph g("small");
  Tensor x = g.input("x", {1, 2, 4, 4});
  g.output(g.sigmoid(g.avg_pool2d(x, {.kernel = {2, 2}}, "pool"), "sig"));
  return g;
}

TEST_F(JsonFiles, SaveThenLoad) {
  Graph g = small_graph();
  ASSERT_TRUE(g.verify().ok());
  const std::string path = (dir_ / "small.json").string();
  ASSERT_TRUE(save_graph(g, path).ok());
  Result<Graph> r = load_graph(path);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(*r == g);
  // Overwriting works, and no temporary file is left behind.
  ASSERT_TRUE(save_graph(*r, path).ok());
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "small.json");
  }
  EXPECT_EQ(files, 1);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), graph_to_json(g));
}

TEST_F(JsonFiles, MissingFileIsNotFound) {
  const std::string path = (dir_ / "nope.json").string();
  Result<Graph> r = load_graph(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::not_found);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
}

TEST_F(JsonFiles, DirectoryIsIoError) {
  Result<Graph> r = load_graph(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::io_error);
  EXPECT_NE(r.status().message().find(dir_.string()), std::string::npos) << r.status().message();
}

TEST_F(JsonFiles, FileOverTheLimitIsRefusedBeforeReading) {
  const std::string path = (dir_ / "big.json").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(4096, ' ') << "{}";
  }
  Result<Graph> r = load_graph(path, {.max_bytes = 1000});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("over the limit of 1000 bytes"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(path), std::string::npos);
}

TEST_F(JsonFiles, SaveIntoMissingDirectoryIsIoError) {
  Graph g = small_graph();
  ASSERT_TRUE(g.verify().ok());
  Status st = save_graph(g, (dir_ / "no" / "such" / "dir" / "g.json").string());
  EXPECT_EQ(st.code(), StatusCode::io_error);
  EXPECT_NE(st.message().find("g.json"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace kiln
