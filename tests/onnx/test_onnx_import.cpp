// The ONNX importer on models written here: what it maps (checked against hand-computed values and emu
// against ref on random inputs), and every kind of bad input it must refuse with a clear message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include "kiln/compare.h"
#include "kiln/engine.h"
#include "kiln/onnx.h"
#include "kiln/reference.h"
#include "onnx_model_builder.h"
#include "ops/registry.h"
#include "temp_dir.h"

namespace kiln {
namespace {

using testing::OnnxModel;

Result<Graph> import(const OnnxModel& m, const OnnxOptions& o = {}) { return onnx_from_bytes(m.bytes(), "m.onnx", o); }

// emu against ref on random inputs (the model's weights), kiln's f32 tolerance.
void expect_emu_matches_ref(const Graph& g) {
  TensorMap in = random_inputs(g, 7);
  auto want = run_reference(g, in);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto engine = Engine::open(DeviceKind::emu);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto exe = engine->compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  auto got = run_on_host_tensors(*engine, *exe, in);
  ASSERT_TRUE(got.ok()) << got.status().message();
  for (Tensor t : g.outputs()) {
    const std::string& name = g.tensor(t).name;
    Comparison c = compare_tensors(got->at(name), want->at(name), tolerance_for(DType::f32));
    EXPECT_TRUE(c.ok) << name << ": " << c.problem;
  }
}

TEST(OnnxImport, ConvWithAsymmetricAndSameUpperPadsRunsOnEmuAsOnRef) {
  OnnxModel m;
  m.input("x", {1, 3, 9, 10}).output("y", {1, 4, 3, 5});
  m.weight("w1", {4, 3, 3, 3});
  m.weight("b1", {4});
  auto& c1 = m.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv_asym");
  OnnxModel::attr(c1, "pads", std::vector<int64_t>{0, 1, 2, 1});
  OnnxModel::attr(c1, "strides", std::vector<int64_t>{2, 1});
  m.weight("w2", {4, 2, 3, 3});
  auto& c2 = m.node("Conv", {"c1", "w2"}, {"c2"}, "conv_same");
  OnnxModel::attr_s(c2, "auto_pad", "SAME_UPPER");
  OnnxModel::attr(c2, "group", int64_t{2});
  OnnxModel::attr(c2, "strides", std::vector<int64_t>{2, 2});
  m.node("Relu", {"c2"}, {"y"});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  // conv_asym: H (9 + 0 + 2 - 3) / 2 + 1 = 5, W 10 + 2 - 3 + 1 = 10; conv_same: ceil(5/2) = 3, ceil(10/2) = 5.
  EXPECT_EQ(g->shape(*g->find_tensor("c1")), Shape({1, 4, 5, 10}));
  EXPECT_EQ(g->shape(g->outputs()[0]), Shape({1, 4, 3, 5}));
  ASSERT_NE(g->value("w1"), nullptr);
  expect_emu_matches_ref(*g);
}

// ConvTranspose as conv2d_dgrad: a decoder's upsampling by 2 (kernel 4, stride 2, pads 1, grouped, a bias) and one
// with output_padding, on emu against ref; an output_padding at the stride and a weight of the wrong channels are
// refused naming the node.
TEST(OnnxImport, ConvTransposeIsTheConvGradient) {
  OnnxModel m;
  m.input("x", {2, 8, 5, 6}).output("y", {2, 3, 21, 26});
  m.weight("w1", {8, 2, 4, 4});
  m.weight("b1", {4});
  auto& t1 = m.node("ConvTranspose", {"x", "w1", "b1"}, {"u1"}, "up1");
  OnnxModel::attr(t1, "strides", std::vector<int64_t>{2, 2});
  OnnxModel::attr(t1, "pads", std::vector<int64_t>{1, 1, 1, 1});
  OnnxModel::attr(t1, "group", int64_t{2});
  m.weight("w2", {4, 3, 3, 3});
  auto& t2 = m.node("ConvTranspose", {"u1", "w2"}, {"y"}, "up2");
  OnnxModel::attr(t2, "strides", std::vector<int64_t>{2, 2});
  OnnxModel::attr(t2, "output_padding", std::vector<int64_t>{0, 1});
  OnnxModel::attr(t2, "pads", std::vector<int64_t>{0, 0, 0, 0});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  // up1: 2 (5 - 1) + 4 - 2 = 10, 2 (6 - 1) + 4 - 2 = 12; up2: 2 (10 - 1) + 3 = 21, 2 (12 - 1) + 1 + 3 = 26.
  EXPECT_EQ(g->shape(*g->find_tensor("u1")), Shape({2, 4, 10, 12}));
  EXPECT_EQ(g->shape(g->outputs()[0]), Shape({2, 3, 21, 26}));
  expect_emu_matches_ref(*g);

  const auto refusal = [](int64_t out_pad, int64_t w_in) {
    OnnxModel bad;
    bad.input("x", {1, 4, 5, 5}).output("y", {1, 2, 11, 11});
    bad.weight("w", {w_in, 2, 3, 3});
    auto& t = bad.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
    OnnxModel::attr(t, "strides", std::vector<int64_t>{2, 2});
    OnnxModel::attr(t, "output_padding", std::vector<int64_t>{out_pad, 0});
    auto r = import(bad);
    return r.ok() ? std::string("imported") : r.status().message();
  };
  EXPECT_NE(refusal(2, 4).find("node 'up' (ConvTranspose, opset 13): output_padding 2 at stride 2"), std::string::npos)
      << refusal(2, 4);
  EXPECT_NE(refusal(0, 3).find("node 'up' (ConvTranspose, opset 13): weight [3, 2, 3, 3] has dim 0 3, expected the "
                               "input's 4 channels"),
            std::string::npos)
      << refusal(0, 3);
}

TEST(OnnxImport, GemmAlphaBetaTransBMatchesHandComputation) {
  OnnxModel m;
  m.input("a", {2, 3}).output("y", {2, 4});
  m.weight("b", {4, 3});
  m.weight("c", {4});
  auto& n = m.node("Gemm", {"a", "b", "c"}, {"y"});
  OnnxModel::attr(n, "transB", int64_t{1});
  OnnxModel::attr_f(n, "alpha", 0.5f);
  OnnxModel::attr_f(n, "beta", 2.0f);
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  TensorMap in = random_inputs(*g, 3);
  auto y = run_reference(*g, in);
  ASSERT_TRUE(y.ok()) << y.status().message();
  const HostTensor &a = in.at("a"), &b = *g->value("b"), &c = *g->value("c");
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int k = 0; k < 3; ++k) s += a.data[static_cast<size_t>(i * 3 + k)] * b.data[static_cast<size_t>(j * 3 + k)];
      EXPECT_NEAR(y->at("y").data[static_cast<size_t>(i * 4 + j)], 0.5 * s + 2.0 * c.data[static_cast<size_t>(j)],
                  1e-6);
    }
  }
  expect_emu_matches_ref(*g);
}

TEST(OnnxImport, ErfGeluPatternBecomesOneGeluOp) {
  OnnxModel m;
  m.input("x", {2, 8}).output("y", {2, 8});
  m.weight("sqrt2", {}, {1.41421356f});
  m.weight("one", {}, {1.0f});
  m.weight("half", {}, {0.5f});
  m.node("Div", {"x", "sqrt2"}, {"d"});
  m.node("Erf", {"d"}, {"e"});
  m.node("Add", {"e", "one"}, {"p"});
  m.node("Mul", {"x", "p"}, {"q"});
  m.node("Mul", {"q", "half"}, {"y"});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0].op_text, "gelu");
  TensorMap in = random_inputs(*g, 5);
  auto y = run_reference(*g, in);
  ASSERT_TRUE(y.ok());
  for (size_t i = 0; i < 16; ++i) {
    const double x = in.at("x").data[i];
    EXPECT_NEAR(y->at("y").data[i], 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-6);
  }
}

TEST(OnnxImport, ShapeChainsAreFoldedIntoOneReshape) {
  // What exporters write for x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
  OnnxModel m;
  m.input("x", {2, 3, 4, 4}).output("y", {2, 48});
  m.node("Shape", {"x"}, {"s"});
  m.int_weight("zero", {0});
  auto& gather = m.node("Gather", {"s", "zero"}, {"n"});
  OnnxModel::attr(gather, "axis", int64_t{0});
  m.int_weight("minus1", {-1});
  auto& cat = m.node("Concat", {"n", "minus1"}, {"shape"});
  OnnxModel::attr(cat, "axis", int64_t{0});
  m.node("Reshape", {"x", "shape"}, {"y"});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0].op_text, "reshape");
  EXPECT_EQ(g->shape(g->outputs()[0]), Shape({2, 48}));
  EXPECT_TRUE(g->values().empty());  // the int64 constants were folded, not made parameters
}

TEST(OnnxImport, EveryUnsupportedNodeIsListedAtOnce) {
  OnnxModel m;
  m.input("x", {4}).output("y", {4});
  m.node("Sin", {"x"}, {"a"}, "sine");
  m.node("Cos", {"a"}, {"b"}, "cosine");
  m.node("Relu", {"x"}, {"c"});
  m.node("Floor", {"c"}, {"d"}, "floor");
  m.node("Add", {"b", "d"}, {"y"});
  auto g = import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::unsupported);
  const std::string& msg = g.status().message();
  EXPECT_NE(msg.find("m.onnx: node 'sine' (Sin, opset 13): op not supported by kiln"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'floor' (Floor, opset 13): op not supported by kiln"), std::string::npos) << msg;
  // Cos reads Sin's output: it is not reported on its own (its input is already refused).
  EXPECT_EQ(msg.find("cosine"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kiln cannot import 2 nodes of op types: Floor, Sin"), std::string::npos) << msg;
}

TEST(OnnxImport, AKilnRuleTheModelBreaksIsARefusalNamingTheNode) {
  OnnxModel m;
  m.input("x", {1, 1, 8, 8}).output("y", {1, 1, -1, -1});
  auto& p = m.node("MaxPool", {"x"}, {"y"}, "pool");
  OnnxModel::attr(p, "kernel_shape", std::vector<int64_t>{3, 3});
  OnnxModel::attr(p, "dilations", std::vector<int64_t>{2, 2});
  auto g = import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("node 'pool' (MaxPool, opset 13): dilated pooling is not supported"),
            std::string::npos)
      << g.status().message();
}

TEST(OnnxImport, AnOpenDimBecomesASymbolThatTheShapeOptionCanFix) {
  OnnxModel m;
  m.input("images", {-1, 3, 4, 4}).output("y", {-1, 48});
  m.node("Relu", {"images"}, {"r"});
  m.node("Flatten", {"r"}, {"y"});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(g->is_symbolic());
  EXPECT_EQ(g->dim_ranges().at("N").max, 1024);  // the dim_param's name, OnnxOptions::dim_range
  for (int64_t n : {1, 3}) {
    auto bound = g->bind({{"N", n}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    EXPECT_EQ(bound->shape(bound->outputs()[0]), Shape({n, 48}));  // Flatten follows N (its -1)
    expect_emu_matches_ref(*bound);
  }
  OnnxOptions o;
  o.input_shapes.emplace("images", Shape{2, 3, 4, 4});
  auto fixed = import(m, o);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_FALSE(fixed->is_symbolic());
  EXPECT_EQ(fixed->shape(fixed->outputs()[0]), Shape({2, 48}));
  OnnxOptions wrong;
  wrong.input_shapes.emplace("imgs", Shape{2, 3, 4, 4});
  auto bad = import(m, wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--shape names 'imgs', which is not an input"), std::string::npos);
  // --dim-range gives one open dim its own range; a name that is no open dim is refused, listing them.
  OnnxOptions ranged;
  ranged.dim_ranges["N"] = DimRange{2, 16};
  auto r = import(m, ranged);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->dim_ranges().at("N").min, 2);
  EXPECT_EQ(r->dim_ranges().at("N").max, 16);
  EXPECT_FALSE(r->bind({{"N", 17}}).ok());
  OnnxOptions misnamed;
  misnamed.dim_ranges["batch"] = DimRange{1, 8};
  auto nm = import(m, misnamed);
  ASSERT_FALSE(nm.ok());
  EXPECT_NE(nm.status().message().find("--dim-range names 'batch', which is no open dim of the model (its open "
                                       "dims: N in [1, 1024])"),
            std::string::npos)
      << nm.status().message();
}

// What would fix an open dim at the bottom of its range is refused, never imported: a shape that varies used
// as a graph output or as an operand, a slice of part of a varying dim, a Reshape to a fixed shape, a reshape in
// which two dims vary.
TEST(OnnxImport, WhatWouldFixAnOpenDimIsRefusedNamingTheNode) {
  OnnxModel shape;
  shape.input("x", {-1, 3}).output("y", {2});
  shape.node("Shape", {"x"}, {"y"});
  auto g = import(shape);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("output 'y' is a value that depends on the model's open dims (N), which kiln "
                                      "holds as constants"),
            std::string::npos)
      << g.status().message();

  OnnxModel plus;  // y = x + float(Shape(x)): a tensor op reading a value that varies
  plus.input("x", {-1, 2}).output("y", {-1, 2});
  plus.node("Shape", {"x"}, {"s"});
  auto& cast = plus.node("Cast", {"s"}, {"f"});
  OnnxModel::attr(cast, "to", int64_t{onnx::TensorProto::FLOAT});
  plus.node("Add", {"x", "f"}, {"y"}, "plus");
  g = import(plus);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("node 'plus' (Add, opset 13): it reads 'f', a value that depends on the "
                                      "model's open dims (N) where kiln needs a constant"),
            std::string::npos)
      << g.status().message();

  // Values equal at both ends of the ranges but not between them are still values that vary: max(H, W) - H
  // (0 where H = W: every open dim at its bottom, or at its top), and N mod 2 for N in [1, 3].
  OnnxModel square;
  square.input("x", {1, -1, -1}).output("y", {1, -1, -1});
  auto* dims = square.proto().mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  dims->mutable_dim(1)->set_dim_param("H");
  dims->mutable_dim(2)->set_dim_param("W");
  auto* out_dims =
      square.proto().mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  out_dims->mutable_dim(1)->set_dim_param("H");
  out_dims->mutable_dim(2)->set_dim_param("W");
  square.int_weight("one", {1});
  square.int_weight("two", {2});
  square.node("Shape", {"x"}, {"s"});
  square.node("Gather", {"s", "one"}, {"h"});
  square.node("Gather", {"s", "two"}, {"w"});
  square.node("Max", {"h", "w"}, {"m"});
  square.node("Sub", {"m", "h"}, {"pad"});
  auto& pad_f = square.node("Cast", {"pad"}, {"padf"});
  OnnxModel::attr(pad_f, "to", int64_t{onnx::TensorProto::FLOAT});
  square.node("Add", {"x", "padf"}, {"y"}, "plus");
  g = import(square);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("node 'plus' (Add, opset 13): it reads 'padf', a value that depends on the "
                                      "model's open dims (H, W)"),
            std::string::npos)
      << g.status().message();

  OnnxModel parity;  // y = x + float(N - N / 2 * 2)
  parity.input("x", {-1, 2}).output("y", {-1, 2});
  parity.int_weight("zero", {0});
  parity.int_weight("two", {2});
  parity.node("Shape", {"x"}, {"s"});
  parity.node("Gather", {"s", "zero"}, {"n"});
  parity.node("Div", {"n", "two"}, {"half"});
  parity.node("Mul", {"half", "two"}, {"even"});
  parity.node("Sub", {"n", "even"}, {"odd"});
  auto& odd_f = parity.node("Cast", {"odd"}, {"oddf"});
  OnnxModel::attr(odd_f, "to", int64_t{onnx::TensorProto::FLOAT});
  parity.node("Add", {"x", "oddf"}, {"y"}, "plus");
  OnnxOptions small;
  small.dim_ranges["N"] = DimRange{1, 3};
  g = import(parity, small);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("it reads 'oddf', a value that depends on the model's open dims (N)"),
            std::string::npos)
      << g.status().message();

  // Rows 1 to the end of a batch that varies: one row at N = 2, fifteen at N = 16, which no slice with fixed ends
  // says. (The first row alone, x[0:1], is the same slice at every N: imported.)
  for (const int64_t start : {1, 0}) {
    OnnxModel part;
    part.input("x", {-1, 3}).output("y", {start == 0 ? 1 : -1, 3});
    part.int_weight("starts", {start});
    part.int_weight("ends", {start == 0 ? 1 : std::numeric_limits<int64_t>::max()});
    part.int_weight("axes", {0});
    part.node("Slice", {"x", "starts", "ends", "axes"}, {"y"}, "rows");
    OnnxOptions from2;
    from2.dim_ranges["N"] = DimRange{2, 16};
    g = import(part, from2);
    if (start == 0) {
      ASSERT_TRUE(g.ok()) << g.status().message();
      auto bound = g->bind({{"N", 4}});
      ASSERT_TRUE(bound.ok()) << bound.status().message();
      EXPECT_EQ(bound->shape(bound->outputs()[0]), Shape({1, 3}));
      continue;
    }
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("node 'rows' (Slice, opset 13): it takes part of dim 0, whose size varies"),
              std::string::npos)
        << g.status().message();
  }

  OnnxModel fixed;
  fixed.input("x", {-1, 3, 4}).output("y", {1, 12});
  fixed.int_weight("target", {1, 12});
  fixed.node("Reshape", {"x", "target"}, {"y"});
  g = import(fixed);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("node 'y' (Reshape, opset 13): cannot reshape [1024, 3, 4] to [1, 12] (with the "
                                      "open dims at N = 1024)"),
            std::string::npos)
      << g.status().message();

  // An output the model declares as varying ('N') that comes out otherwise: refused at the end of the import.
  OnnxModel declared;
  declared.input("x", {-1, 4}).output("y", {-1});
  declared.int_weight("target", {-1});
  declared.node("Reshape", {"x", "target"}, {"y"});
  g = import(declared);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("output 'y' dim 0 is 4096 with N = 1024, but the model declares it 'N'"),
            std::string::npos)
      << g.status().message();

  OnnxModel both;
  both.input("x", {-1, -1, 4}).output("y", {-1, -1, 2, 2});
  both.int_weight("target", {0, 0, 2, 2});
  both.node("Reshape", {"x", "target"}, {"y"});
  g = import(both);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("output dims 0 and 1 both vary with the open dims"), std::string::npos)
      << g.status().message();
}

// ShuffleNet's channel shuffle as torch.onnx.export writes it around a dynamic batch: the batch read with Shape
// and Gather, the view's shape concatenated from it, a transpose, and a view back with -1 channels; and a
// chunk (Split) of the channels. Imported with the batch a symbol (each reshape makes the batch its -1, each
// slice takes the batch whole), it matches the shuffle computed by hand at batches 2 and 5, and emu matches ref.
TEST(OnnxImport, ShapeChainsAroundAnOpenBatchFollowIt) {
  OnnxModel m;
  m.input("x", {-1, 6, 2, 2}).output("y", {-1, 3, 2, 2});
  m.int_weight("zero", {0});
  m.int_weight("two", {2});
  m.int_weight("three", {3});
  m.int_weight("hw", {2, 2});
  m.int_weight("rest", {-1});
  m.node("Shape", {"x"}, {"shape"});
  auto& gather = m.node("Gather", {"shape", "zero"}, {"batch"});
  OnnxModel::attr(gather, "axis", int64_t{0});
  auto& view = m.node("Concat", {"batch", "two", "three", "hw"}, {"view"});
  OnnxModel::attr(view, "axis", int64_t{0});
  m.node("Reshape", {"x", "view"}, {"grouped"});  // [N, 2, 3, 2, 2]
  auto& t = m.node("Transpose", {"grouped"}, {"swapped"});
  OnnxModel::attr(t, "perm", std::vector<int64_t>{0, 2, 1, 3, 4});
  auto& back = m.node("Concat", {"batch", "rest", "hw"}, {"back"});
  OnnxModel::attr(back, "axis", int64_t{0});
  m.node("Reshape", {"swapped", "back"}, {"shuffled"});  // [N, 6, 2, 2]
  auto& split = m.node("Split", {"shuffled"}, {"left", "right"});
  OnnxModel::attr(split, "axis", int64_t{1});
  m.node("Relu", {"right"}, {"y"});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(g->is_symbolic());
  for (int64_t n : {2, 5}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    auto bound = g->bind({{"N", n}});
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    const TensorMap in = random_inputs(*bound, 3);
    auto out = run_reference(*bound, in);
    ASSERT_TRUE(out.ok()) << out.status().message();
    const HostTensor& x = in.at("x");
    const HostTensor& y = out->at("y");
    ASSERT_EQ(y.shape, Shape({n, 3, 2, 2}));
    // Shuffled channel j * 2 + i is channel i * 3 + j (groups 2, 3 channels each); y is channels 3..5, ReLU'd.
    for (int64_t b = 0; b < n; ++b)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t p = 0; p < 4; ++p) {
          const int64_t shuffled = c + 3, j = shuffled / 2, i = shuffled % 2, source = i * 3 + j;
          const double want = std::max(0.0, x.data[static_cast<size_t>((b * 6 + source) * 4 + p)]);
          EXPECT_EQ(y.data[static_cast<size_t>((b * 3 + c) * 4 + p)], want) << b << " " << c << " " << p;
        }
    expect_emu_matches_ref(*bound);
  }
}

TEST(OnnxImport, NewerOpsetIsRefused) {
  OnnxModel m(18);
  m.input("x", {4}).output("y", {4});
  m.node("Relu", {"x"}, {"y"});
  auto g = import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("opset 18 is newer than kiln reads (opsets 6 to 17)"), std::string::npos)
      << g.status().message();
}

TEST(OnnxImport, CycleIsRefusedByTheChecker) {
  OnnxModel m;
  m.input("x", {4}).output("y", {4});
  m.node("Add", {"x", "b"}, {"a"}, "first");
  m.node("Relu", {"a"}, {"b"}, "second");
  m.node("Relu", {"b"}, {"y"});
  auto g = import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(g.status().message().find("ONNX's checker refused the model"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("topologically sorted"), std::string::npos) << g.status().message();
}

TEST(OnnxImport, WrittenOutLayerNormBecomesOneLayerNorm) {
  // What torch.onnx.export writes for nn.LayerNorm below opset 17.
  OnnxModel m;
  m.input("x", {2, 3, 8}).output("y", {2, 3, 8});
  m.weight("two", {}, {2.0f});
  m.weight("eps", {}, {1e-5f});
  m.weight("gamma", {8});
  m.weight("beta", {8});
  OnnxModel::attr(m.node("ReduceMean", {"x"}, {"mean"}), "axes", std::vector<int64_t>{-1});
  m.node("Sub", {"x", "mean"}, {"d"});
  m.node("Pow", {"d", "two"}, {"sq"});
  OnnxModel::attr(m.node("ReduceMean", {"sq"}, {"var"}), "axes", std::vector<int64_t>{-1});
  m.node("Add", {"var", "eps"}, {"ve"});
  m.node("Sqrt", {"ve"}, {"sd"});
  m.node("Div", {"d", "sd"}, {"n"});
  m.node("Mul", {"n", "gamma"}, {"scaled"});
  m.node("Add", {"scaled", "beta"}, {"y"});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0].op_text, "layer_norm");
  TensorMap in = random_inputs(*g, 2);
  auto y = run_reference(*g, in);
  ASSERT_TRUE(y.ok());
  const auto& x = in.at("x").data;
  for (size_t row = 0; row < 6; ++row) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < 8; ++i) mean += x[row * 8 + i] / 8;
    for (size_t i = 0; i < 8; ++i) var += (x[row * 8 + i] - mean) * (x[row * 8 + i] - mean) / 8;
    for (size_t i = 0; i < 8; ++i) {
      const double want =
          (x[row * 8 + i] - mean) / std::sqrt(var + 1e-5) * g->value("gamma")->data[i] + g->value("beta")->data[i];
      EXPECT_NEAR(y->at("y").data[row * 8 + i], want, 1e-5);
    }
  }
  expect_emu_matches_ref(*g);
}

TEST(OnnxImport, OneDimensionalConvAndPoolRunAsTwoDimensional) {
  OnnxModel m;
  m.input("x", {2, 4, 17}).output("y", {2, 6, 4});
  m.weight("w", {6, 2, 3});
  auto& c = m.node("Conv", {"x", "w"}, {"c"});
  OnnxModel::attr(c, "group", int64_t{2});
  OnnxModel::attr(c, "pads", std::vector<int64_t>{1, 2});
  OnnxModel::attr(c, "strides", std::vector<int64_t>{2});
  auto& p = m.node("MaxPool", {"c"}, {"y"});
  OnnxModel::attr(p, "kernel_shape", std::vector<int64_t>{2});
  OnnxModel::attr(p, "strides", std::vector<int64_t>{2});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  // conv: (17 + 1 + 2 - 3) / 2 + 1 = 9 (floor); pool: (9 - 2) / 2 + 1 = 4.
  EXPECT_EQ(g->shape(g->outputs()[0]), Shape({2, 6, 4}));
  ASSERT_NE(g->value("w.2d"), nullptr);  // the weight stays a parameter, as [6, 2, 1, 3]
  EXPECT_EQ(g->value("w.2d")->shape, Shape({6, 2, 1, 3}));
  expect_emu_matches_ref(*g);
}

TEST(OnnxImport, SplitAndSoftmaxBeforeOpset13) {
  OnnxModel m(11);
  m.input("x", {2, 3, 4}).output("a", {2, 1, 4}).output("b", {2, 2, 4}).output("s", {2, 3, 4});
  auto& split = m.node("Split", {"x"}, {"a", "b"});
  OnnxModel::attr(split, "axis", int64_t{1});
  OnnxModel::attr(split, "split", std::vector<int64_t>{1, 2});
  // Opset 11: softmax over [2, 12] after flattening at axis 1, not over the last dim only.
  m.node("Softmax", {"x"}, {"s"});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  TensorMap in = random_inputs(*g, 4);
  auto out = run_reference(*g, in);
  ASSERT_TRUE(out.ok()) << out.status().message();
  const auto& x = in.at("x").data;
  for (int n = 0; n < 2; ++n) {
    double sum = 0;
    for (int i = 0; i < 12; ++i) sum += std::exp(x[static_cast<size_t>(n * 12 + i)]);
    for (int i = 0; i < 12; ++i) {
      EXPECT_NEAR(out->at("s").data[static_cast<size_t>(n * 12 + i)],
                  std::exp(x[static_cast<size_t>(n * 12 + i)]) / sum, 1e-7);  // the output is rounded to f32
    }
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out->at("a").data[static_cast<size_t>(n * 4 + i)], x[static_cast<size_t>(n * 12 + i)]);
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(out->at("b").data[static_cast<size_t>(n * 8 + i)], x[static_cast<size_t>(n * 12 + 4 + i)]);
  }
  expect_emu_matches_ref(*g);
}

TEST(OnnxImport, Opset6BroadcastAlignsAtTheAxis) {
  OnnxModel m(6);
  m.input("x", {2, 3, 4, 5}).output("y", {2, 3, 4, 5});
  m.weight("b", {3});
  auto& add = m.node("Add", {"x", "b"}, {"y"});
  OnnxModel::attr(add, "broadcast", int64_t{1});
  OnnxModel::attr(add, "axis", int64_t{1});
  auto g = import(m);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const HostTensor* b = g->value("y.aligned_b");  // B as [3, 1, 1], the weight's values
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, Shape({3, 1, 1}));
  TensorMap in = random_inputs(*g, 6);
  auto out = run_reference(*g, in);
  ASSERT_TRUE(out.ok());
  for (size_t i = 0; i < 120; ++i) {
    EXPECT_NEAR(out->at("y").data[i], in.at("x").data[i] + b->data[(i / 20) % 3], 1e-6);
  }
}

TEST(OnnxImport, HostileConstantsAreRefusedNotComputed) {
  // What fuzz_onnx found: integer folds that overflow, dims whose product overflows before a 0, a
  // transpose that is no permutation, a constant too large to fold.
  auto refusal = [](OnnxModel& m) {
    auto g = import(m);
    EXPECT_FALSE(g.ok());
    return g.ok() ? std::string() : g.status().message();
  };
  {
    OnnxModel m;
    m.input("x", {4}).output("y", {-1});
    m.int_weight("big", {INT64_MAX});
    m.int_weight("two", {2});
    m.node("Mul", {"big", "two"}, {"shape"}, "overflow");
    m.node("Reshape", {"x", "shape"}, {"y"});
    EXPECT_NE(refusal(m).find("node 'overflow' (Mul, opset 13): Mul of integer constants overflows"),
              std::string::npos);
  }
  {
    OnnxModel m;
    m.input("x", {2, 3}).output("y", {2, 2});
    OnnxModel::attr(m.node("Transpose", {"x"}, {"y"}, "t"), "perm", std::vector<int64_t>{0, 0});
    EXPECT_NE(refusal(m).find("perm [0, 0] is not a permutation of the 2 dims"), std::string::npos);
  }
  {
    OnnxModel m;
    m.input("x", {4}).output("y", {-1, -1});
    m.int_weight("dims", {int64_t{1} << 30, int64_t{1} << 30});
    m.node("ConstantOfShape", {"dims"}, {"c"}, "huge");
    m.node("Add", {"x", "c"}, {"y"});
    EXPECT_NE(refusal(m).find("node 'huge' (ConstantOfShape, opset 13): the constant is too large to fold"),
              std::string::npos);
  }
  {
    // An input too large for kiln (it had no shape, and MatMul's 1-D handling dropped a dim of the shapeless
    // product: a crash) is refused by name, before any node reads it.
    OnnxModel m;
    m.input("a", {int64_t{1} << 58}).input("b", {1, 2, 4, 3}).output("y", {1, 2, 3});
    m.node("MatMul", {"a", "b"}, {"y"}, "mm");
    EXPECT_NE(refusal(m).find("input 'a': shape [288230376151711744] has more than 2^48 elements"), std::string::npos);
  }
}

// The registry's onnx column (OpDef::onnx) is what the importer maps one to one: each such ONNX op becomes
// exactly its kiln op, on emu as on ref.
TEST(OnnxImport, EveryOneToOneOpOfTheRegistryImportsAsItsOp) {
  int mapped = 0;
  for (const OpDef& def : op_registry()) {
    if (def.onnx.empty()) continue;
    OnnxModel m(17);
    m.input("x", {2, 8}).output("y", {2, 8});
    m.node(std::string(def.onnx), {"x"}, {"y"}, "n");
    auto g = import(m);
    // Mish (opset 18) and Gelu (opset 20) are newer than Debian's libonnx 1.12 checker knows.
    if (!g.ok() && (def.onnx == "Mish" || def.onnx == "Gelu") &&
        g.status().message().find("No Op registered for " + std::string(def.onnx)) != std::string::npos)
      continue;
    ++mapped;
    ASSERT_TRUE(g.ok()) << def.onnx << ": " << g.status().message();
    ASSERT_EQ(g->nodes().size(), 1u) << def.onnx;
    EXPECT_EQ(g->nodes()[0].op, def.id) << def.onnx << " became " << g->nodes()[0].op_text;
  }
  EXPECT_GE(mapped, 11);
}

TEST(OnnxImport, MalformedNodesAreRefusedByName) {
  auto refusal = [](OnnxModel& m) {
    auto g = import(m);
    EXPECT_FALSE(g.ok());
    return g.ok() ? std::string() : g.status().message();
  };
  {  // ONNX leaves a repeated axis undefined: the last one used to win
    OnnxModel m;
    m.input("x", {4, 6}).output("y", {4, 2});
    m.int_weight("starts", {0, 1});
    m.int_weight("ends", {4, 3});
    m.int_weight("axes", {1, -1});
    m.node("Slice", {"x", "starts", "ends", "axes"}, {"y"}, "twice");
    EXPECT_NE(refusal(m).find("node 'twice' (Slice, opset 13): axes [1, -1] name dim 1 twice"), std::string::npos);
  }
  {  // kernel_shape that contradicts the weight: the weight used to win
    OnnxModel m;
    m.input("x", {1, 3, 8, 8}).output("y", {1, 2, 6, 6});
    m.weight("w", {2, 3, 3, 3});
    OnnxModel::attr(m.node("Conv", {"x", "w"}, {"y"}, "conv"), "kernel_shape", std::vector<int64_t>{5, 5});
    EXPECT_NE(refusal(m).find("node 'conv' (Conv, opset 13): kernel_shape [5, 5] contradicts the weight's spatial "
                              "dims [3, 3]"),
              std::string::npos);
  }
  {  // ... and one that agrees is fine
    OnnxModel m;
    m.input("x", {1, 3, 8, 8}).output("y", {1, 2, 6, 6});
    m.weight("w", {2, 3, 3, 3});
    OnnxModel::attr(m.node("Conv", {"x", "w"}, {"y"}, "conv"), "kernel_shape", std::vector<int64_t>{3, 3});
    auto g = import(m);
    EXPECT_TRUE(g.ok()) << g.status().message();
  }
  {  // an integer index is printed as an integer
    OnnxModel m;
    m.input("x", {4}).output("y", {4});
    m.int_weight("table", {1, 2, 3});
    m.int_weight("idx", {INT64_MIN});
    m.node("Gather", {"table", "idx"}, {"g"}, "lookup");
    m.node("Add", {"x", "g"}, {"y"});
    EXPECT_NE(refusal(m).find("node 'lookup' (Gather, opset 13): index -9223372036854775808 out of range for a dim "
                              "of 3"),
              std::string::npos);
  }
}

class OnnxFiles : public TempDirTest {};

TEST_F(OnnxFiles, TruncatedAndCorruptFilesAreRefused) {
  OnnxModel m;
  m.input("x", {1, 3, 4, 4}).output("y", {1, 2, 4, 4});
  m.weight("w", {2, 3, 1, 1});
  m.node("Conv", {"x", "w"}, {"y"});
  const std::string bytes = m.bytes();
  write("half.onnx", bytes.substr(0, bytes.size() / 2));
  auto g = load_onnx(path("half.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("half.onnx: not an ONNX model"), std::string::npos) << g.status().message();
  write("junk.onnx", std::string(300, '\xff'));
  EXPECT_FALSE(load_onnx(path("junk.onnx")).ok());
  write("empty.onnx", "");
  EXPECT_FALSE(load_onnx(path("empty.onnx")).ok());
  auto missing = load_onnx(path("absent.onnx"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  write("whole.onnx", bytes);
  EXPECT_TRUE(load_onnx(path("whole.onnx")).ok());
}

}  // namespace
}  // namespace kiln
