// Attribute values at the edges of their types (issue #18): every shape rule gives a correct result or a
// clear error naming the node, the attribute and what it expects, for any number: no signed overflow, no
// float-to-integer overflow (UBSan found both), no value the generated kernels cannot hold (a 32-bit int
// window, an f32 literal), no divisor that overflows, nothing validated that no backend runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen_check.h"
#include "kiln/graph.h"
#include "kiln/json.h"
#include "kiln/reference.h"
#include "ops/registry.h"

namespace kiln {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI32Max = 2147483647;
constexpr const char* kKernelInt = "up to 2147483647 (the generated kernels hold them in 32-bit int)";
constexpr const char* kF32Range = "expected a finite value within the f32 range (|x| <= 3.4028235e+38)";

// The message of verify() on the graph `build` makes; an empty string (and a failure) when it verifies.
std::string error_of(const std::function<void(Graph&)>& build) {
  Graph g;
  build(g);
  Status st = g.verify();
  EXPECT_FALSE(st.ok()) << "the graph verified";
  return st.ok() ? std::string() : st.message();
}

// The message of loading a one-node graph {op, attrs} on input x of `shape` from JSON; "" when it loads.
std::string json_error_of(const std::string& op, const std::string& attrs, const std::string& shape) {
  const std::string text = fmt::format(
      R"({{"format": "kiln.graph", "version": 1, "name": "t", "tensors": [{{"name": "x", "shape": {}}}],
          "nodes": [{{"op": "{}", "name": "n", "inputs": {{"x": "x"}}, "outputs": {{"y": "y"}}, "attrs": {}}}],
          "outputs": ["y"]}})",
      shape, op, attrs);
  Result<Graph> r = graph_from_json(text, "t.json");
  EXPECT_FALSE(r.ok()) << "loaded:\n" << text;
  return r.ok() ? std::string() : r.status().message();
}

::testing::AssertionResult mentions(const std::string& message, std::initializer_list<std::string> needles) {
  for (const std::string& n : needles) {
    if (message.find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "the message lacks '" << n << "':\n" << message;
  }
  return ::testing::AssertionSuccess();
}

// Verifies the graph `build` makes and returns the shape of its output.
Shape shape_of(const std::function<Tensor(Graph&)>& build) {
  Graph g;
  Tensor y = build(g);
  g.output(y);
  Status st = g.verify();
  EXPECT_TRUE(st.ok()) << st.message();
  return st.ok() ? g.shape(y) : Shape{};
}

// ---- conv2d: padding, dilation and stride near 2^62 overflowed the output size ----
TEST(OpsRanges, ConvHugePaddingDilationStrideAreRefused) {
  auto conv = [](Conv2dOptions o) {
    return [o](Graph& g) { g.output(g.conv2d(g.input("x", {1, 2, 8, 8}), g.parameter("w", {4, 2, 3, 3}), o, "c")); };
  };
  const int64_t p62 = int64_t{1} << 62;
  EXPECT_TRUE(mentions(error_of(conv({.padding = {p62, p62}})),
                       {"node 'c' (conv2d)", "attribute 'padding': expected non-negative values", kKernelInt,
                        "got [4611686018427387904, 4611686018427387904]"}));
  EXPECT_TRUE(mentions(error_of(conv({.dilation = {p62, 1}})),
                       {"node 'c' (conv2d)", "attribute 'dilation': expected positive values", kKernelInt,
                        "got [4611686018427387904, 1]"}));
  EXPECT_TRUE(mentions(error_of(conv({.stride = {kI64Max, kI64Max}})),
                       {"attribute 'stride': expected positive values", kKernelInt}));
  EXPECT_TRUE(mentions(error_of(conv({.stride = {0, 1}})), {"attribute 'stride': expected positive values"}));
}

TEST(OpsRanges, ConvWindowsAtTheKernelIntLimit) {
  // The largest stride gives one output per dim; the largest dilation makes the window not fit.
  EXPECT_EQ(
      shape_of([](Graph& g) {
        return g.conv2d(g.input("x", {1, 2, 5, 5}), g.parameter("w", {4, 2, 3, 3}), {.stride = {kI32Max, kI32Max}});
      }),
      (Shape{1, 4, 1, 1}));
  EXPECT_TRUE(mentions(
      error_of([](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 2, 5, 5}), g.parameter("w", {4, 2, 3, 3}), {.dilation = {kI32Max, 1}}, "c"));
      }),
      {"node 'c' (conv2d)", "does not fit", "output would be -4294967289x3"}));
  // A dilated window wider than int64 holds (a 2^40-tap weight; the shape rule never allocates it).
  EXPECT_TRUE(mentions(error_of([](Graph& g) {
                         g.output(g.conv2d(g.input("x", {1, 1, 5, 5}), g.parameter("w", {1, 1, int64_t{1} << 40, 1}),
                                           {.dilation = {kI32Max, 1}}, "c"));
                       }),
                       {"node 'c' (conv2d)", "does not fit", "beyond int64"}));
  // Each padding within int, but the padded row (8 + 2 * (2^31 - 1)) beyond what the kernels index.
  EXPECT_TRUE(mentions(
      error_of([](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 2, 8, 8}), g.parameter("w", {4, 2, 3, 3}), {.padding = {kI32Max, 0}}, "c"));
      }),
      {"node 'c' (conv2d)", "attribute 'padding'", "the padded input's H (8 + 2147483647 + 2147483647", "= 4294967302",
       "exceeds 2147483647"}));
}

// ---- pools: stride 2^63 - 1 or padding 2^62 with ceil_mode overflowed; such a max pool validated ----
TEST(OpsRanges, PoolHugeKernelStridePaddingAreRefused) {
  const std::string big = std::to_string(kI64Max), half = std::to_string(kI64Max / 2);
  EXPECT_TRUE(mentions(
      json_error_of("max_pool2d",
                    fmt::format(R"({{"kernel": [{0}, {0}], "padding": [{1}, {1}], "ceil_mode": true}})", big, half),
                    "[1, 1, 8, 8]"),
      {"/nodes/0/attrs/kernel", "node 'n' (max_pool2d)", "attribute 'kernel': expected positive values", kKernelInt}));
  EXPECT_TRUE(mentions(
      json_error_of("max_pool2d", fmt::format(R"({{"kernel": [2, 2], "stride": [{0}, {0}], "ceil_mode": true}})", big),
                    "[1, 1, 8, 8]"),
      {"node 'n' (max_pool2d)", "attribute 'stride': expected positive values", kKernelInt}));
  EXPECT_TRUE(mentions(json_error_of("avg_pool2d", R"({"kernel": [2, 0]})", "[1, 1, 8, 8]"),
                       {"attribute 'kernel': expected positive values", "got [2, 0]"}));
}

TEST(OpsRanges, PoolWindowsAtTheKernelIntLimit) {
  // The largest stride, with ceil_mode: one window per dim.
  EXPECT_EQ(shape_of([](Graph& g) {
              return g.max_pool2d(g.input("x", {1, 1, 8, 8}),
                                  {.kernel = {2, 2}, .stride = {kI32Max, kI32Max}, .ceil_mode = true});
            }),
            (Shape{1, 1, 1, 1}));
  // ceil_mode's last window may end past the padded input: here at 2147483548 + 2^30, beyond int.
  EXPECT_TRUE(mentions(error_of([](Graph& g) {
                         g.output(g.max_pool2d(
                             g.input("x", {1, 1, 2147483637, 1}),
                             {.kernel = {int64_t{1} << 30, 1}, .stride = {2147483548, 1}, .ceil_mode = true}, "mp"));
                       }),
                       {"node 'mp' (max_pool2d)", "attribute 'stride'", "the last window along H ends at 3221225372",
                        "exceeds 2147483647"}));
}

// ---- avg_pool2d: a divisor beyond int gave inf on ref and NaN on emu, where the answer is about 0 ----
TEST(OpsRanges, AvgPoolDivisorBeyondIntIsRefused) {
  // The issue's case: a 2^32 x 2^32 window (refused for its kernel now) ...
  EXPECT_TRUE(mentions(
      error_of([](Graph& g) {
        const int64_t k = int64_t{1} << 32;
        g.output(g.avg_pool2d(g.input("x", {1, 1, 1, 1}), {.kernel = {k, k}, .padding = {k / 2, k / 2}}, "ap"));
      }),
      {"node 'ap' (avg_pool2d)", "attribute 'kernel'", kKernelInt}));
  // ... and windows within int whose element count is not (emu's divisor overflowed its int).
  EXPECT_TRUE(mentions(
      error_of([](Graph& g) {
        g.output(g.avg_pool2d(g.input("x", {1, 1, 2, 2}), {.kernel = {65537, 65537}, .padding = {32768, 32768}}, "ap"));
      }),
      {"node 'ap' (avg_pool2d)", "attribute 'kernel'", "averages up to 4295098369 elements",
       "expected at most 2147483647"}));
  EXPECT_TRUE(mentions(
      error_of([](Graph& g) {
        g.output(g.avg_pool2d(g.input("x", {1, 1, 2, 2}), {.kernel = {1, kI32Max}, .padding = {0, 1073741823}}, "ap"));
      }),
      {"node 'ap' (avg_pool2d)", "attribute 'padding'", "the padded input's W"}));
}

TEST(OpsRanges, AvgPoolOfTheLargestWindowIsAboutZero) {
  // 46340^2 = 2147395600 elements, within int: the one input value over that divisor, on ref and emu.
  Graph g("big_window");
  Tensor x = g.input("x", {1, 2, 1, 1});
  g.output(g.avg_pool2d(x, {.kernel = {46340, 46340}, .padding = {23170, 23170}}, "ap"));
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  TensorMap in = random_inputs(g, 3);
  Result<TensorMap> ref = run_reference(g, in);
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  const HostTensor& y = ref->begin()->second;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(y.data[i], in.at("x").data[i] / 2147395600.0, 1e-15);
  testing::expect_plan_matches_ref(g, DType::f32, 3);
}

// ---- slice: huge steps overflowed the output size; INT64_MIN starts and ends clamp ----
TEST(OpsRanges, SliceExtremeIndicesAndSteps) {
  EXPECT_EQ(shape_of([](Graph& g) {
              return g.slice(g.input("x", {4, 3}), {0, 0}, {4, 3}, {kI64Max, 1});
            }),
            (Shape{1, 3}));
  EXPECT_EQ(shape_of([](Graph& g) {
              return g.slice(g.input("x", {4, 3}), {kI64Min, 1}, {kI64Max, 3}, {kI64Max, 1});
            }),
            (Shape{1, 2}));
  EXPECT_EQ(shape_of([](Graph& g) {
              return g.slice(g.input("x", {4, 3}), {kI64Min, kI64Min}, {kI64Max, kI64Max});
            }),
            (Shape{4, 3}));
  EXPECT_TRUE(mentions(error_of([](Graph& g) {
                         g.output(g.slice(g.input("x", {4, 3}), {0, 0}, {kI64Min, 3}, {}, "sl"));
                       }),
                       {"node 'sl' (slice)", "empty along dim 0"}));
}

// ---- upsample2d: floor(H * scale) converted to int64 overflowed (the wrong reason was given) ----
TEST(OpsRanges, UpsampleHugeScaleIsRefusedForItsSize) {
  EXPECT_TRUE(mentions(json_error_of("upsample2d", R"({"scale": [1e300, 1e300]})", "[1, 1, 1000, 1000]"),
                       {"/nodes/0/attrs/scale", "node 'n' (upsample2d)", "attribute 'scale'",
                        "expected factors that give at most 2^48 output elements", "got [1e+300, 1e+300]",
                        "an output of 1e+303 x 1e+303 for input 'x' [1, 1, 1000, 1000]"}));
  EXPECT_TRUE(mentions(json_error_of("upsample2d", R"({"scale": [1e10, 1e10]})", "[1, 1, 1000, 1000]"),
                       {"attribute 'scale'", "at most 2^48"}));
  EXPECT_TRUE(mentions(json_error_of("upsample2d", R"({"scale": [1e-300, 2]})", "[1, 1, 1000, 1000]"),
                       {"attribute 'scale'", "give an empty output"}));
  EXPECT_EQ(shape_of([](Graph& g) {
              return g.upsample2d(g.input("x", {1, 1, 2, 3}), {.scale = {4096.5, 1e6}});
            }),
            (Shape{1, 1, 8193, 3000000}));
}

// ---- f32 literals: epsilon 1e39 validated, then no generated kernel compiled ----
TEST(OpsRanges, EpsilonBeyondF32IsRefused) {
  EXPECT_TRUE(
      mentions(json_error_of("layer_norm", R"({"epsilon": 1e39})", "[2, 8]"),
               {"/nodes/0/attrs/epsilon", "node 'n' (layer_norm)", "attribute 'epsilon'", kF32Range, "got 1e+39"}));
}

// Every float attribute the generated code holds in an f32 refuses a value beyond the f32 range, naming
// the node and the attribute; clamp's bounds accept one (see ops_pointwise.cpp).
TEST(OpsRanges, EveryF32AttributeIsRangeChecked) {
  struct Attr {
    std::string op, attr;
  };
  const std::vector<Attr> f32_attrs = {{"batch_norm", "epsilon"},
                                       {"layer_norm", "epsilon"},
                                       {"group_norm", "epsilon"},
                                       {"instance_norm", "epsilon"},
                                       {"rms_norm", "epsilon"},
                                       {"leaky_relu", "alpha"},
                                       {"elu", "alpha"},
                                       {"softplus", "beta"},
                                       {"softplus", "threshold"},
                                       {"add", "b"},
                                       {"sub", "a"},
                                       {"mul", "b"},
                                       {"div", "b"},
                                       {"maximum", "a"},
                                       {"minimum", "b"},
                                       {"pow", "b"}};
  for (const Attr& a : f32_attrs) {
    for (double v : {1e39, -3.5e38}) {
      Graph g;
      Tensor x = g.input("x", {2, 4, 3, 3});
      PortInputs in{{a.op == "add" || a.op == "mul" || a.op == "div" || a.op == "minimum" || a.op == "pow" ? "a"
                     : a.op == "sub" || a.op == "maximum"                                                  ? "b"
                                                                                                           : "x",
                     {x}}};
      if (a.op == "batch_norm") {
        for (const char* p : {"scale", "shift", "mean", "var"}) in.push_back({p, {g.parameter(p, {4})}});
      }
      Attrs attrs{{a.attr, v}};
      if (a.op == "group_norm") attrs["groups"] = int64_t{2};
      g.output(g.add_node(a.op, in, attrs, "n")[0]);
      Status st = g.verify();
      EXPECT_FALSE(st.ok()) << a.op << "." << a.attr << " = " << v << " verified";
      if (st.ok()) continue;
      EXPECT_TRUE(mentions(st.message(), {fmt::format("node 'n' ({})", a.op), fmt::format("attribute '{}'", a.attr),
                                          kF32Range, fmt::format("got {}", v)}));
    }
  }
}

// The schema marks (AttrSpec::f32) every float the kernels take as an f32 literal: a pointwise op's device
// parameters and scalar operands, every epsilon; clamp's bounds alone may lie beyond (see ops_pointwise.cpp).
TEST(OpsRanges, F32FlagMarksEveryF32Literal) {
  for (const OpDef& def : op_registry()) {
    std::vector<std::string_view> literal = def.device_params.empty() ? def.unary_params : def.device_params;
    for (const PortSpec& p : def.inputs)
      if (p.scalar_attr) literal.push_back(p.name);
    if (def.attr("epsilon")) literal.push_back("epsilon");
    for (const AttrSpec& a : def.attrs) {
      const bool is_literal = std::find(literal.begin(), literal.end(), a.name) != literal.end();
      EXPECT_EQ(a.f32, is_literal && def.id != OpId::clamp) << def.name << "." << a.name;
    }
  }
}

TEST(OpsRanges, F32AttributesAtTheLimitRun) {
  // FLT_MAX itself is an f32: the kernel compiles and matches ref (each output about 1e-20).
  Graph ln("eps_flt_max");
  ln.output(ln.layer_norm(ln.input("x", {2, 8}), {.epsilon = FLT_MAX}));
  ASSERT_TRUE(ln.verify().ok()) << ln.verify().message();
  testing::expect_plan_matches_ref(ln, DType::f32, 1);
  // A clamp bound beyond f32 bounds no f32 value, as the infinity the kernel holds for it.
  Graph cl("clamp_beyond_f32");
  cl.output(cl.clamp(cl.input("x", {2, 8}), -1e39, 1e300));
  ASSERT_TRUE(cl.verify().ok()) << cl.verify().message();
  testing::expect_plan_matches_ref(cl, DType::f32, 1);
}

// ---- rank 0: a transpose or slice of a scalar validated and planned, then emu had no kernel for it ----
TEST(OpsRanges, ScalarTransposeAndSliceAreRefused) {
  EXPECT_TRUE(mentions(json_error_of("transpose", R"({"perm": []})", "[]"),
                       {"node 'n' (transpose) input 'x'", "expected at least 1 dim", "got []"}));
  EXPECT_TRUE(mentions(json_error_of("slice", R"({"starts": [], "ends": []})", "[]"),
                       {"node 'n' (slice) input 'x'", "expected at least 1 dim", "got []"}));
}

// A scalar has no axis and no trailing dims: each op says so, not "an axis in [0, 0)" or "1 to 0".
TEST(OpsRanges, ScalarSoftmaxNormsAndConcatAreRefused) {
  for (const char* op : {"softmax", "layer_norm", "rms_norm"}) {
    EXPECT_TRUE(mentions(json_error_of(op, "{}", "[]"),
                         {fmt::format("node 'n' ({}) input 'x'", op), "expected at least 1 dim", "got []"}));
  }
  EXPECT_TRUE(mentions(error_of([](Graph& g) {
                         Tensor a = g.input("a", {}), b = g.input("b", {});
                         g.output(g.concat({a, b}, 0, "cat"));
                       }),
                       {"node 'cat' (concat) input 'xs'", "expected tensors of at least 1 dim, xs[0] is []"}));
}

}  // namespace
}  // namespace kiln
