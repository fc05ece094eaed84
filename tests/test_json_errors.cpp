// JSON loading errors: one test per class of mistake, each checking the JSON path, the node or tensor
// name and the expected-vs-actual wording; robustness against garbage, truncation and deep nesting; and
// the corpus of broken files in tests/data/bad/ with its expectations in tests/data/bad/EXPECTED.txt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/json.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// conv (with bias) -> batch_norm -> relu: valid; each test breaks one thing.
json base_graph() {
  return json::parse(R"({
    "format": "kiln.graph",
    "version": 1,
    "name": "base",
    "tensors": [
      {"name": "x", "shape": [1, 3, 8, 8]},
      {"name": "w", "shape": [8, 3, 3, 3], "kind": "parameter"},
      {"name": "b", "shape": [8], "kind": "parameter"},
      {"name": "s", "shape": [8], "kind": "parameter"},
      {"name": "t", "shape": [8], "kind": "parameter"},
      {"name": "m", "shape": [8], "kind": "parameter"},
      {"name": "v", "shape": [8], "kind": "parameter"}
    ],
    "nodes": [
      {"op": "conv2d", "name": "conv1", "inputs": {"x": "x", "w": "w", "bias": "b"}, "outputs": {"y": "c1"},
       "attrs": {"stride": [1, 1], "padding": [1, 1]}},
      {"op": "batch_norm", "name": "bn1", "inputs": {"x": "c1", "scale": "s", "shift": "t", "mean": "m", "var": "v"},
       "outputs": {"y": "n1"}},
      {"op": "relu", "name": "relu1", "inputs": {"x": "n1"}, "outputs": {"y": "r1"}}
    ],
    "outputs": ["r1"]
  })");
}

// The error message of loading `text`, which must fail with invalid_argument.
std::string error_of(const std::string& text, const JsonLoadOptions& options = {}) {
  Result<Graph> r = graph_from_json(text, "test.json", options);
  EXPECT_FALSE(r.ok()) << "loaded a broken graph:\n" << text;
  if (r.ok()) return {};
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().message();
  return r.status().message();
}
std::string error_of(const json& doc) { return error_of(doc.dump()); }
std::string error_of(const char* text) { return error_of(std::string(text)); }

// Every needle appears in the message.
::testing::AssertionResult mentions(const std::string& message, std::initializer_list<std::string> needles) {
  for (const std::string& n : needles) {
    if (message.find(n) == std::string::npos) {
      return ::testing::AssertionFailure() << "the message lacks '" << n << "':\n" << message;
    }
  }
  return ::testing::AssertionSuccess();
}

size_t line_count(const std::string& s) { return s.empty() ? 0 : 1 + std::count(s.begin(), s.end(), '\n'); }

TEST(JsonErrors, BaseGraphIsValid) {
  Result<Graph> r = graph_from_json(base_graph().dump());
  ASSERT_TRUE(r.ok()) << r.status().message();
}

TEST(JsonErrors, UnknownOpListsValidOps) {
  json d = base_graph();
  d["nodes"][2]["op"] = "reluu";
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(
      e, {"/nodes/2/op: ", "node 'relu1' (reluu)", "unknown op 'reluu'", "valid ops:", "conv2d", "gelu_tanh"}));
  EXPECT_EQ(line_count(e), 1u) << e;
}

TEST(JsonErrors, UnknownInputPortListsValidPorts) {
  json d = base_graph();
  d["nodes"][0]["inputs"].erase("w");
  d["nodes"][0]["inputs"]["weight"] = "w";
  std::string e = error_of(d);
  EXPECT_TRUE(
      mentions(e, {"/nodes/0/inputs/weight: node 'conv1' (conv2d) input 'weight': unknown input port 'weight'",
                   "'x', 'w', 'bias'", "/nodes/0/inputs/w: node 'conv1' (conv2d) input 'w': missing input 'w'"}));
}

TEST(JsonErrors, UnknownOutputPort) {
  json d = base_graph();
  d["nodes"][2]["outputs"] = {{"out", "r1"}};
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/nodes/2/outputs/out: node 'relu1' (relu) output 'out': unknown output port 'out'",
                           "/nodes/2/outputs: node 'relu1' (relu) output 'y': missing"}));
}

TEST(JsonErrors, UnknownAttributeListsValidOnes) {
  json d = base_graph();
  d["nodes"][0]["attrs"]["strides"] = {2, 2};
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/nodes/0/attrs/strides: node 'conv1' (conv2d): unknown attribute 'strides'",
                           "'stride', 'padding', 'dilation', 'groups'"}));
}

TEST(JsonErrors, WrongAttributeType) {
  json d = base_graph();
  d["nodes"][0]["attrs"]["stride"] = "x";
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/attrs/stride: node 'conv1' (conv2d): attribute 'stride': expected a "
                                     "list of 2 integers, got \"x\""}));
  d["nodes"][0]["attrs"]["stride"] = 1.5;
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/attrs/stride: node 'conv1'", "expected a list of 2 integers, got 1.5"}));
  d["nodes"][0]["attrs"]["stride"] = {1, 1, 1};
  EXPECT_TRUE(
      mentions(error_of(d), {"/nodes/0/attrs/stride: node 'conv1'", "expected a list of 2 integers, got [1, 1, 1]"}));
  d["nodes"][0]["attrs"]["stride"] = {1, 1};
  d["nodes"][0]["attrs"]["groups"] = 1.0;  // shown as written
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/attrs/groups: node 'conv1' (conv2d): attribute 'groups': expected an "
                                     "integer, got 1.0"}));
  d = base_graph();
  d["nodes"][1]["attrs"] = {{"epsilon", "small"}};
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/1/attrs/epsilon: node 'bn1' (batch_norm): attribute 'epsilon': expected a "
                                     "number, got \"small\""}));
}

TEST(JsonErrors, AttributeValuesThatAreNotAttributes) {
  json d = base_graph();
  d["nodes"][0]["attrs"]["stride"] = nullptr;
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/nodes/0/attrs/stride: node 'conv1' (conv2d): attribute 'stride': expected a list of 2 "
                           "integers, got null"}));
  EXPECT_EQ(line_count(e), 1u) << e;  // not "missing" as well, and nothing downstream
  d["nodes"][0]["attrs"]["stride"] = {{"h", 1}};
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/attrs/stride: node 'conv1'", "got {\"h\":1}"}));
  d["nodes"][0]["attrs"]["stride"] = json::parse("[[1], [1]]");
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/attrs/stride/0: node 'conv1'", "expected a list of numbers, got [1]"}));
  d["nodes"][0]["attrs"]["stride"] = json::parse("[1, true]");
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/attrs/stride/1: node 'conv1'", "got true at index 1"}));
  d["nodes"][0]["attrs"]["stride"] = json::parse("[1, 18446744073709551615]");
  EXPECT_TRUE(
      mentions(error_of(d), {"/nodes/0/attrs/stride/1: node 'conv1'", "does not fit in a 64-bit signed integer"}));
  d["nodes"][0]["attrs"] = json::array();
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/attrs: node 'conv1' (conv2d): expected an object"}));
}

TEST(JsonErrors, MissingInput) {
  json d = base_graph();
  d["nodes"][1]["inputs"].erase("var");
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/nodes/1/inputs/var: node 'bn1' (batch_norm) input 'var': missing input 'var'"}));
  EXPECT_EQ(line_count(e), 1u) << e;  // relu1 is not reported: its input's shape is unknown
}

TEST(JsonErrors, MissingScalarOperand) {
  json d = base_graph();
  d["nodes"][2] = json::parse(R"({"op": "mul", "name": "half", "inputs": {"a": "n1"}, "outputs": {"y": "r1"}})");
  EXPECT_TRUE(
      mentions(error_of(d), {"/nodes/2/inputs/b: node 'half' (mul) input 'b': missing input 'b'", "as attribute 'b'"}));
  d["nodes"][2]["inputs"]["b"] = 0.5;
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/2/inputs/b: node 'half' (mul) input 'b': expected a tensor name",
                                     "\"attrs\": {\"b\": 0.5}"}));
}

TEST(JsonErrors, TensorProducedTwice) {
  json d = base_graph();
  d["nodes"][2]["outputs"]["y"] = "n1";
  d["outputs"] = {"n1"};
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/nodes/2/outputs/y: node 'relu1' (relu) output 'y': tensor 'n1' is produced twice: already "
                           "produced by node 'bn1'"}));
  d = base_graph();
  d["nodes"][0]["outputs"]["y"] = "x";
  EXPECT_TRUE(mentions(
      error_of(d), {"/nodes/0/outputs/y: node 'conv1'", "tensor 'x' is produced twice", "the declaration in tensors"}));
}

TEST(JsonErrors, UseBeforeProducer) {
  json d = base_graph();
  std::swap(d["nodes"][1], d["nodes"][2]);  // relu1 now comes before bn1, which produces its input
  std::string e = error_of(d);
  EXPECT_TRUE(
      mentions(e, {"/nodes/1/inputs/x: node 'relu1' (relu) input 'x': tensor 'n1' is used before it is produced: "
                   "node 'bn1' (/nodes/2) produces it later"}));
  EXPECT_EQ(line_count(e), 1u) << e;
}

TEST(JsonErrors, Cycle) {
  json d = base_graph();
  d["nodes"][0]["inputs"]["x"] = "r1";  // conv1 reads relu1's output, which depends on conv1
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/nodes/0/inputs/x: node 'conv1' (conv2d) input 'x': tensor 'r1' comes from node 'relu1' "
                           "(/nodes/2), which depends on this node: a cycle 'conv1' -> 'bn1' -> 'relu1' -> 'conv1'"}));
  d = base_graph();
  d["nodes"][2]["inputs"]["x"] = "r1";  // reads its own output
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/2/inputs/x: node 'relu1' (relu) input 'x': tensor 'r1' is this node's own "
                                     "output"}));
}

TEST(JsonErrors, UnknownTensor) {
  json d = base_graph();
  d["nodes"][1]["inputs"]["x"] = "c2";
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/1/inputs/x: node 'bn1' (batch_norm) input 'x': unknown tensor 'c2'"}));
  d = base_graph();
  d["nodes"][2] =
      json::parse(R"({"op": "concat", "name": "cat", "inputs": {"xs": ["n1", "zz"]}, "outputs": {"y": "r1"}})");
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/2/inputs/xs/1: node 'cat' (concat) input 'xs': unknown tensor 'zz'"}));
}

TEST(JsonErrors, ShapeMismatch) {
  json d = base_graph();
  d["tensors"][1]["shape"] = {8, 4, 3, 3};  // C of the weight is 4, of x 3
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/nodes/0/inputs/w: node 'conv1' (conv2d) input 'w': ", "[8, 4, 3, 3]"}));
  EXPECT_EQ(line_count(e), 1u) << e;
  d = base_graph();
  d["tensors"][3]["shape"] = {16};
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/1/inputs/scale: node 'bn1' (batch_norm) input 'scale': ", "[16]"}));
}

TEST(JsonErrors, UnknownDType) {
  json d = base_graph();
  d["tensors"][0]["dtype"] = "f64";
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/tensors/0/dtype: tensor 'x': unknown dtype \"f64\"; valid dtypes: 'f32', 'f16', 'bf16'"}));
  EXPECT_EQ(line_count(e), 1u) << e;
}

TEST(JsonErrors, UnknownLayoutAndKind) {
  json d = base_graph();
  d["tensors"][0]["layout"] = "NCWH";
  EXPECT_TRUE(mentions(error_of(d), {"/tensors/0/layout: tensor 'x': unknown layout \"NCWH\"; valid layouts: "
                                     "'row_major', 'NCHW', 'NHWC', 'KCRS', 'KRSC'"}));
  d = base_graph();
  d["tensors"][0]["kind"] = "intermediate";
  EXPECT_TRUE(
      mentions(error_of(d), {"/tensors/0/kind: tensor 'x': unknown kind \"intermediate\"; valid kinds: 'input', "
                             "'parameter'"}));
  d = base_graph();
  d["outputs"] = json::parse(R"([{"name": "r1", "layout": "nchw"}])");
  EXPECT_TRUE(mentions(error_of(d), {"/outputs/0/layout: unknown layout \"nchw\""}));
  d = base_graph();
  d["tensors"][2]["layout"] = "NCHW";  // a 4-D layout on a 1-D tensor
  EXPECT_TRUE(mentions(error_of(d), {"/tensors/2/layout: tensor 'b': layout NCHW needs 4 dims, got [8]"}));
}

TEST(JsonErrors, NonPositiveDim) {
  json d = base_graph();
  d["tensors"][0]["shape"] = {1, 3, 0, 8};
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/tensors/0/shape: tensor 'x': dim 2 of [1, 3, 0, 8] is 0: dims must be positive"}));
  EXPECT_EQ(line_count(e), 1u) << e;  // reported once, and nothing downstream
  d["tensors"][0]["shape"] = {1, -3, 8, 8};
  EXPECT_TRUE(mentions(error_of(d), {"/tensors/0/shape: tensor 'x': dim 1 of [1, -3, 8, 8] is -3"}));
}

TEST(JsonErrors, OverflowingDims) {
  json d = base_graph();
  d["tensors"][0]["shape"] = {1048576, 1048576, 1048576, 8};
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/tensors/0/shape: tensor 'x': shape [1048576, 1048576, 1048576, 8] has more than 2^48"}));
  EXPECT_EQ(line_count(e), 1u) << e;
  std::string text = base_graph().dump();
  std::string big = text;
  big.replace(big.find("[1,3,8,8]"), 9, "[1,3,99999999999999999999,8]");
  EXPECT_TRUE(mentions(error_of(big), {"/tensors/0/shape/2: tensor 'x': dim 2: 1e+20 does not fit in a 64-bit signed "
                                       "integer"}));
  big = text;
  big.replace(big.find("[1,3,8,8]"), 9, "[1,3,18446744073709551615,8]");
  EXPECT_TRUE(mentions(error_of(big), {"/tensors/0/shape/2: tensor 'x': dim 2: 18446744073709551615 does not fit"}));
  d = base_graph();
  d["tensors"][0]["shape"] = json::parse("[1, 3, 8.5, 8]");
  EXPECT_TRUE(mentions(error_of(d), {"/tensors/0/shape/2: tensor 'x': dim 2: expected an integer, got 8.5"}));
  // A node whose output would overflow.
  d = base_graph();
  d["nodes"][2] = json::parse(R"({"op": "upsample2d", "name": "up", "inputs": {"x": "n1"}, "outputs": {"y": "r1"},
                                   "attrs": {"size": [4294967296, 4294967296]}})");
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/2", "node 'up' (upsample2d)", "2^48"}));
}

TEST(JsonErrors, DuplicateNames) {
  json d = base_graph();
  d["tensors"][4]["name"] = "s";
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/tensors/4/name: duplicate tensor name 's'"}));
  d = base_graph();
  d["nodes"][1]["name"] = "conv1";
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/1/name: node 'conv1' (batch_norm): duplicate node name 'conv1'"}));
}

TEST(JsonErrors, DuplicateKeys) {
  std::string text = base_graph().dump();
  text.replace(text.find("\"op\":\"relu\""), 11, "\"op\":\"relu\",\"op\":\"gelu\"");
  EXPECT_TRUE(mentions(error_of(text), {"/nodes/2/op: duplicate key 'op'"}));
  // At the top, and inside an object inside an array inside an object (each found in the one parse).
  text = base_graph().dump();
  text.replace(text.find("\"nodes\""), 7, "\"name\":\"twice\",\"nodes\"");
  EXPECT_TRUE(mentions(error_of(text), {"/name: duplicate key 'name'"}));
  json d = base_graph();
  d["nodes"][1]["attrs"] = json::object({{"epsilon", 0.001}});
  text = d.dump();
  text.replace(text.find("\"epsilon\""), 9, "\"epsilon\":1,\"epsilon\"");
  EXPECT_TRUE(mentions(error_of(text), {"/nodes/1/attrs/epsilon: duplicate key 'epsilon'"})) << error_of(text);
}

TEST(JsonErrors, WrongFormatOrVersion) {
  json d = base_graph();
  d["format"] = "onnx";
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/format: expected \"kiln.graph\", got \"onnx\""}));
  EXPECT_EQ(line_count(e), 1u) << e;  // a file of another format is not read on
  d = base_graph();
  d["version"] = 2;
  EXPECT_TRUE(mentions(error_of(d), {"/version: unsupported version 2: this kiln reads version 1"}));
  d["version"] = "1";
  EXPECT_TRUE(mentions(error_of(d), {"/version: expected 1, got \"1\""}));
  d.erase("version");
  d.erase("format");
  EXPECT_TRUE(mentions(error_of(d), {"/format: missing key 'format'", "/version: missing key 'version'"}));
}

TEST(JsonErrors, UnknownKeys) {
  json d = base_graph();
  d["extra"] = 1;
  d["tensors"][0]["shap"] = {1};
  d["nodes"][1]["input"] = json::object();
  d["outputs"] = json::parse(R"([{"name": "r1", "rename": "out"}])");
  std::string e = error_of(d);
  EXPECT_TRUE(mentions(e, {"/extra: unknown key 'extra'; valid keys: 'format', 'version', 'name', 'dims', 'tensors', "
                           "'nodes', 'outputs'",
                           "/tensors/0/shap: tensor 'x': unknown key 'shap'; valid keys: 'name', 'shape', 'dtype', "
                           "'layout', 'kind'",
                           "/nodes/1/input: node 'bn1' (batch_norm): unknown key 'input'; valid keys: 'op', 'name', "
                           "'inputs', 'outputs', 'attrs'",
                           "/outputs/0/rename: unknown key 'rename'; valid keys: 'name', 'layout'"}));
  EXPECT_EQ(line_count(e), 4u) << e;
}

TEST(JsonErrors, WrongJsonTypes) {
  json d = base_graph();
  d["tensors"][0]["shape"] = "1x3x8x8";
  EXPECT_TRUE(
      mentions(error_of(d), {"/tensors/0/shape: tensor 'x': expected the dims, a list of positive integers, got "
                             "\"1x3x8x8\""}));
  d = base_graph();
  d["tensors"][0]["shape"] = json::parse(R"([1, "3", 8, 8])");
  EXPECT_TRUE(
      mentions(error_of(d),
               {"/tensors/0/shape/1: tensor 'x': dim 1: expected an integer, or a symbolic dim over the graph's dims, "
                "got the number \"3\" as a string"}));
  d = base_graph();
  d["tensors"][0]["name"] = 7;
  EXPECT_TRUE(mentions(error_of(d), {"/tensors/0/name: expected the tensor's name (a string), got 7"}));
  d = base_graph();
  d["tensors"][1] = "w";
  EXPECT_TRUE(mentions(error_of(d), {"/tensors/1: expected a tensor declaration"}));
  d = base_graph();
  d["nodes"][0]["op"] = 3;
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/0/op: node 'conv1' (?): expected the op's name (a string), got 3"}));
  d = base_graph();
  d["nodes"][0]["inputs"]["x"] = true;
  EXPECT_TRUE(
      mentions(error_of(d), {"/nodes/0/inputs/x: node 'conv1' (conv2d) input 'x': expected a tensor name or a list "
                             "of tensor names, got true"}));
  d = base_graph();
  d["nodes"][0]["inputs"] = {"x", "w"};
  EXPECT_TRUE(
      mentions(error_of(d), {"/nodes/0/inputs: node 'conv1' (conv2d): expected an object {port: tensor name}"}));
  d = base_graph();
  d["nodes"][2]["outputs"]["y"] = 5;
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/2/outputs/y: node 'relu1' (relu) output 'y': expected a tensor name"}));
  d = base_graph();
  d["nodes"][2].erase("outputs");
  EXPECT_TRUE(mentions(error_of(d), {"/nodes/2/outputs: node 'relu1' (relu): missing key 'outputs'"}));
  d = base_graph();
  d["nodes"] = {{"op", "relu"}};
  EXPECT_TRUE(mentions(error_of(d), {"/nodes: expected a list of nodes, got {\"op\":\"relu\"}"}));
  d = base_graph();
  d["outputs"] = "r1";
  EXPECT_TRUE(mentions(error_of(d), {"/outputs: expected a list of output tensor names, got \"r1\""}));
  d = base_graph();
  d["name"] = json::array();
  EXPECT_TRUE(mentions(error_of(d), {"/name: expected the graph's name (a string), got []"}));
  EXPECT_TRUE(mentions(error_of("[1, 2]"), {"/: expected a JSON object", "got [1,2]"}));
  EXPECT_TRUE(mentions(error_of("\"kiln.graph\""), {"/: expected a JSON object"}));
}

TEST(JsonErrors, Outputs) {
  json d = base_graph();
  d["outputs"] = {"r1", "nope"};
  EXPECT_TRUE(mentions(error_of(d), {"/outputs/1: unknown tensor 'nope'"}));
  d["outputs"] = json::array();
  EXPECT_TRUE(mentions(error_of(d), {"/outputs: the graph has no outputs"}));
  d["outputs"] = {"x", "r1"};
  EXPECT_TRUE(mentions(error_of(d), {"/outputs/0: output 'x' is a graph input"}));
  d["outputs"] = {"r1", "r1"};
  EXPECT_TRUE(mentions(error_of(d), {"/outputs/1: output 'r1' is listed twice"}));
  d["outputs"] = json::parse(R"(["nope", {"name": "r1", "layout": "NHWC"}, {"name": "r1"}])");
  EXPECT_TRUE(mentions(error_of(d), {"/outputs/0: unknown tensor 'nope'", "/outputs/2: output 'r1' is listed twice"}));
}

TEST(JsonErrors, EveryProblemIsReportedInDocumentOrder) {
  json d = base_graph();
  d["tensors"][0]["dtype"] = "f64";
  d["nodes"][2]["op"] = "reluu";
  d["nodes"][1]["attrs"] = {{"epsilon", "small"}};
  d["outputs"] = {"r1", "nope"};
  std::string e = error_of(d);
  size_t a = e.find("/tensors/0/dtype"), b = e.find("/nodes/1/attrs/epsilon"), c = e.find("/nodes/2/op"),
         o = e.find("/outputs/1");
  ASSERT_NE(a, std::string::npos) << e;
  ASSERT_NE(b, std::string::npos) << e;
  ASSERT_NE(c, std::string::npos) << e;
  ASSERT_NE(o, std::string::npos) << e;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_LT(c, o);
  EXPECT_EQ(line_count(e), 4u) << e;
}

TEST(JsonErrors, ManyProblemsAreCapped) {
  json d = base_graph();
  for (int i = 0; i < 200; ++i) d["tensors"].push_back({{"name", "t" + std::to_string(i)}, {"shape", {0}}});
  std::string e = error_of(d);
  EXPECT_EQ(line_count(e), 51u);
  EXPECT_TRUE(mentions(e, {"... and 150 more problems"}));
}

// ---- the raw text ---------------------------------------------------------------------------------------
TEST(JsonErrors, TooBig) {
  std::string text = base_graph().dump();
  std::string e = error_of(text, {.max_bytes = 100});
  EXPECT_TRUE(mentions(e, {"test.json: ", " bytes is over the limit of 100 bytes"}));
}

TEST(JsonErrors, TooDeep) {
  EXPECT_TRUE(
      mentions(error_of(std::string(1000000, '[')), {"test.json: nesting deeper than 32 levels at byte offset 32"}));
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += "{\"a\":";
  deep += "1";
  for (int i = 0; i < 40; ++i) deep += "}";
  EXPECT_TRUE(mentions(error_of(deep), {"nesting deeper than 32 levels"}));
  EXPECT_TRUE(mentions(error_of(deep, {.max_depth = 64}), {"/a: unknown key 'a'"}));
  // Brackets inside strings do not count.
  json d = base_graph();
  d["name"] = std::string(1000, '[') + "\\\"{{{{";
  Result<Graph> r = graph_from_json(d.dump());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->name(), d["name"].get<std::string>());
}

TEST(JsonErrors, BinaryGarbage) {
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
  EXPECT_TRUE(mentions(error_of(png), {"test.json: invalid JSON at byte offset 0", "\\x89"}));
  EXPECT_TRUE(mentions(error_of(""), {"test.json: invalid JSON at byte offset 0", "unexpected end of input"}));
  EXPECT_TRUE(mentions(error_of(std::string("{\"format\": \"kiln\xff\"}")), {"invalid JSON at byte offset", "UTF-8"}));
  // nlohmann stops at a NUL byte; kiln refuses it, so nothing after one is silently ignored.
  EXPECT_TRUE(mentions(error_of(std::string("{\"a\":1}\0garbage", 15)), {"test.json: a NUL byte at byte offset 7"}));
}

TEST(JsonErrors, TruncatedAtEveryByte) {
  const std::string text = base_graph().dump(2);
  for (size_t n = 0; n < text.size(); ++n) {
    Result<Graph> r = graph_from_json(std::string_view(text).substr(0, n), "t.json");
    ASSERT_FALSE(r.ok()) << "loaded a graph truncated to " << n << " bytes";
    ASSERT_NE(r.status().message().find("invalid JSON at byte offset"), std::string::npos) << r.status().message();
  }
}

// Random bytes, and random corruptions of a valid file: always a clean Status or a graph, never a crash.
TEST(JsonErrors, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(12345);
  const std::string text = base_graph().dump(1);
  const std::string alphabet =
      "{}[]\":,0123456789-.eE truefalsnul\\/\xff\x80\x01"
      "abcxyz";
  int loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    if (iter % 3 == 0) {
      size_t len = rng() % 200;
      for (size_t i = 0; i < len; ++i) s += static_cast<char>(rng() & 0xff);
    } else {
      s = text;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits && !s.empty(); ++k) {
        size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0: s[at] = alphabet[rng() % alphabet.size()]; break;
          case 1: s.erase(at, 1 + rng() % 8); break;
          default: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        }
      }
    }
    Result<Graph> r = graph_from_json(s, "fuzz.json");
    if (r.ok()) {
      ++loaded;
      // Whatever loads must save and load back to the same graph.
      Result<Graph> again = graph_from_json(graph_to_json(*r));
      ASSERT_TRUE(again.ok()) << again.status().message() << "\nfrom:\n" << s;
      EXPECT_TRUE(*again == *r) << s;
    } else {
      EXPECT_FALSE(r.status().message().empty());
    }
  }
  EXPECT_LT(loaded, 3000);
}

// ---- the corpus of broken files -------------------------------------------------------------------------
// tests/data/bad/EXPECTED.txt: "file<TAB>substring" lines ('#' starts a comment); every file in the
// directory needs at least one line, and every substring must appear in the message of loading it.
std::map<std::string, std::vector<std::string>> read_expectations(const fs::path& file) {
  std::map<std::string, std::vector<std::string>> out;
  std::ifstream in(file);
  EXPECT_TRUE(in.good()) << "cannot read " << file;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == line.size()) {
      ADD_FAILURE() << file << ":" << number << ": expected 'file<TAB>substring', got '" << line << "'";
      continue;
    }
    out[line.substr(0, tab)].push_back(line.substr(tab + 1));
  }
  return out;
}

TEST(JsonBadCorpus, EveryFileFailsWithItsExpectedMessages) {
  const fs::path dir = fs::path(KILN_SOURCE_DIR) / "tests" / "data" / "bad";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  auto expected = read_expectations(dir / "EXPECTED.txt");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename() != "EXPECTED.txt") files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_GE(files.size(), 20u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    auto it = expected.find(f);
    if (it == expected.end()) {
      ADD_FAILURE() << f << " has no expectation in EXPECTED.txt";
      continue;
    }
    Result<Graph> r = load_graph((dir / f).string());
    ASSERT_FALSE(r.ok()) << f << " loaded";
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().message();
    for (const std::string& needle : it->second) {
      EXPECT_NE(r.status().message().find(needle), std::string::npos)
          << f << ": the message lacks '" << needle << "':\n"
          << r.status().message();
    }
  }
  for (const auto& [f, needles] : expected) {
    EXPECT_TRUE(std::binary_search(files.begin(), files.end(), f)) << "EXPECTED.txt names a missing file " << f;
  }
}

}  // namespace
}  // namespace kiln
