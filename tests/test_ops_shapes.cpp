// Shape inference of every registry row, on good and bad inputs, and the generic checks every row gets
// (unknown attributes and ports, missing inputs, wrong attribute types). Iterates over the registry, so
// an op added without a case here fails.
#include <functional>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kiln/graph.h"
#include "ops/registry.h"

namespace kiln {
namespace {

struct Case {
  std::function<Tensor(Graph&)> build;  // builds the op under test, returns its output
  Shape expect;
  DType dtype = DType::f32;
};

// A good case per op that is not plain unary/binary pointwise (those get generic cases below).
std::map<std::string, Case> good_cases() {
  std::map<std::string, Case> m;
  auto x4 = [](Graph& g) { return g.input("x", {2, 8, 9, 10}); };
  m["conv2d"] = {[](Graph& g) {
                   return g.conv2d(g.input("x", {2, 8, 9, 10}), g.parameter("w", {6, 4, 3, 3}), g.parameter("b", {6}),
                                   {.stride = {2, 1}, .padding = {1, 0, 1, 2}, .groups = 2});
                 },
                 Shape{2, 6, 5, 10}};
  m["matmul"] = {[](Graph& g) {
                   return g.matmul(g.input("a", {2, 1, 7, 5}), g.parameter("b", {3, 4, 5}), g.parameter("c", {4}),
                                   {.transpose_b = true});
                 },
                 Shape{2, 3, 7, 4}};
  m["bias_add"] = {[](Graph& g) {
                     return g.bias_add(g.input("x", {2, 5, 7}), g.parameter("b", {7}), -1);
                   },
                   Shape{2, 5, 7}};
  m["batch_norm"] = {[=](Graph& g) {
                       auto p = [&](const char* n) { return g.parameter(n, {8}); };
                       return g.batch_norm(x4(g), p("s"), p("t"), p("m"), p("v"));
                     },
                     Shape{2, 8, 9, 10}};
  m["layer_norm"] = {
      [](Graph& g) {
        return g.layer_norm(g.input("x", {4, 6, 32}), {.scale = g.parameter("s", {6, 32}), .normalized_ndim = 2});
      },
      Shape{4, 6, 32}};
  m["group_norm"] = {[=](Graph& g) { return g.group_norm(x4(g), 4, {.scale = g.parameter("s", {8})}); },
                     Shape{2, 8, 9, 10}};
  m["instance_norm"] = {[=](Graph& g) { return g.instance_norm(x4(g)); }, Shape{2, 8, 9, 10}};
  m["rms_norm"] = {[](Graph& g) {
                     return g.rms_norm(g.input("x", {3, 16}), {.scale = g.parameter("s", {16})});
                   },
                   Shape{3, 16}};
  m["softmax"] = {[](Graph& g) { return g.softmax(g.input("x", {3, 16}), 0); }, Shape{3, 16}};
  m["max_pool2d"] = {
      [](Graph& g) {
        return g.max_pool2d(g.input("x", {1, 3, 112, 112}), {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
      },
      Shape{1, 3, 56, 56}};
  m["avg_pool2d"] = {
      [](Graph& g) {
        return g.avg_pool2d(g.input("x", {1, 3, 6, 6}), {.kernel = {3, 3}, .stride = {2, 2}, .ceil_mode = true});
      },
      Shape{1, 3, 3, 3}};
  m["global_avg_pool"] = {[=](Graph& g) { return g.global_avg_pool(x4(g)); }, Shape{2, 8, 1, 1}};
  m["global_max_pool"] = {[=](Graph& g) { return g.global_max_pool(x4(g)); }, Shape{2, 8, 1, 1}};
  m["conv2d_dgrad"] = {[](Graph& g) {
                         return g.conv2d_dgrad(g.input("dy", {2, 16, 28, 28}), g.parameter("w", {16, 8, 3, 3}),
                                               {56, 56}, {.stride = {2, 2}, .padding = {1, 1}});
                       },
                       Shape{2, 8, 56, 56}};
  m["conv2d_wgrad"] = {[](Graph& g) {
                         return g.conv2d_wgrad(g.input("x", {2, 8, 57, 57}), g.input("dy", {2, 16, 28, 28}), {3, 3},
                                               {.stride = {2, 2}, .padding = {0, 0}, .groups = 4});
                       },
                       Shape{16, 2, 3, 3}};
  m["max_pool2d_grad"] = {[](Graph& g) {
                            return g.add_node(
                                "max_pool2d_grad",
                                {{"dy", {g.input("dy", {2, 4, 28, 28})}}, {"x", {g.input("x", {2, 4, 56, 56})}}},
                                {{"kernel", std::vector<int64_t>{3, 3}},
                                 {"stride", std::vector<int64_t>{2, 2}},
                                 {"padding", std::vector<int64_t>{1, 1}}})[0];
                          },
                          Shape{2, 4, 56, 56}};
  m["avg_pool2d_grad"] = {[](Graph& g) {
                            return g.add_node(
                                "avg_pool2d_grad",
                                {{"dy", {g.input("dy", {2, 4, 3, 3})}}, {"x", {g.input("x", {2, 4, 6, 6})}}},
                                {{"kernel", std::vector<int64_t>{2, 2}}})[0];
                          },
                          Shape{2, 4, 6, 6}};
  m["expand"] = {[](Graph& g) { return g.expand(g.input("x", {8, 1, 1}), {2, 8, 9, 10}); }, Shape{2, 8, 9, 10}};
  m["reduce_sum"] = {[=](Graph& g) { return g.reduce_sum(x4(g), {0, 2, 3}); }, Shape{8}};
  m["reduce_mean"] = {[=](Graph& g) { return g.reduce_mean(x4(g), {-1}, true); }, Shape{2, 8, 9, 1}};
  m["layout_convert"] = {[=](Graph& g) { return g.layout_convert(x4(g), Layout::NHWC); }, Shape{2, 8, 9, 10}};
  m["reshape"] = {[=](Graph& g) { return g.reshape(x4(g), {2, -1, 10}); }, Shape{2, 72, 10}};
  m["transpose"] = {[=](Graph& g) { return g.transpose(x4(g), {0, 2, 3, 1}); }, Shape{2, 9, 10, 8}};
  m["concat"] = {[](Graph& g) {
                   return g.concat({g.input("a", {2, 3, 4}), g.input("b", {2, 5, 4}), g.input("c", {2, 1, 4})}, -2);
                 },
                 Shape{2, 9, 4}};
  m["slice"] = {[=](Graph& g) {
                  return g.slice(x4(g), {0, 1, -4, 0}, {2, 8, 100, 10}, {1, 2, 1, 3});
                },
                Shape{2, 4, 4, 4}};
  m["upsample2d"] = {[=](Graph& g) {
                       return g.upsample2d(x4(g), {.scale = {2.0, 1.5}, .mode = "bilinear"});
                     },
                     Shape{2, 8, 18, 15}};
  m["cast"] = {[=](Graph& g) { return g.cast(x4(g), DType::bf16); }, Shape{2, 8, 9, 10}, DType::bf16};
  return m;
}

TEST(OpShapes, EveryOpInfersOnAGoodCase) {
  auto cases = good_cases();
  for (const OpDef& def : op_registry()) {
    SCOPED_TRACE(std::string(def.name));
    Graph g;
    Case c;
    if (def.unary) {
      c = {[&](Graph& gg) {
             return gg.unary(def.name, gg.input("x", {2, 3, 4, 5}, DType::f16),
                             def.id == OpId::clamp ? Attrs{{"min", 0.0}} : Attrs{});
           },
           Shape{2, 3, 4, 5}, DType::f16};
    } else if (def.binary) {
      c = {[&](Graph& gg) {
             return gg.binary(def.name, gg.input("a", {2, 3, 4, 5}), gg.input("b", {4, 1}));
           },
           Shape{2, 3, 4, 5}};
    } else if (def.channel_reduction && !cases.count(std::string(def.name))) {
      // A channel reduction (OpDef::channel_reduction): [N, C, 1, 1] per image in x's dtype, else [terms, C] f32.
      const ChannelReduction& red = *def.channel_reduction;
      c = {[&](Graph& gg) {
             return gg.unary(def.name, gg.input("x", {2, 3, 4, 5}, DType::f16));
           },
           red.per_image ? Shape{2, 3, 1, 1} : Shape{static_cast<int64_t>(red.terms.size()), 3},
           red.per_image ? DType::f16 : DType::f32};
    } else {
      auto it = cases.find(std::string(def.name));
      ASSERT_NE(it, cases.end()) << "op '" << def.name << "' has no shape-inference case in test_ops_shapes.cpp";
      c = it->second;
    }
    Tensor y = c.build(g);
    g.output(y);
    Status st = g.verify();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(g.shape(y), c.expect);
    EXPECT_EQ(g.dtype(y), c.dtype);
  }
}

TEST(OpShapes, BinaryOpsTakeScalarsOnEitherSide) {
  for (const OpDef& def : op_registry()) {
    if (!def.binary) continue;
    Graph g;
    Tensor x = g.input("x", {3, 4});
    Tensor a = g.binary(def.name, x, 2.0);
    Tensor b = g.binary(def.name, 0.5, x);
    g.output(a);
    g.output(b);
    ASSERT_TRUE(g.verify().ok()) << def.name << ": " << g.verify().message();
    EXPECT_EQ(g.shape(a), (Shape{3, 4}));
    EXPECT_EQ(std::get<double>(g.nodes()[1].attrs.at("a")), 0.5);
  }
}

// Builds a graph, expects verify() to fail with every one of `needles` in the message.
void expect_error(const std::function<void(Graph&)>& build, std::vector<std::string> needles) {
  Graph g;
  build(g);
  Status st = g.verify();
  ASSERT_FALSE(st.ok()) << "expected an error containing '" << needles[0] << "'";
  for (const auto& n : needles)
    EXPECT_NE(st.message().find(n), std::string::npos) << "missing '" << n << "' in:\n" << st.message();
}

// reduce_sum / reduce_mean's axes and expand's shape, as a user gets them wrong.
TEST(OpShapes, ReductionAxesAndExpandShapesAreChecked) {
  expect_error(
      [](Graph& g) {
        g.output(g.reduce_sum(g.input("x", {2, 3}), {2}, false, "r"));
      },
      {"node 'r' (reduce_sum)", "attribute 'axes'", "axis 2 is outside the 2 dims of input 'x'"});
  expect_error(
      [](Graph& g) {
        g.output(g.reduce_mean(g.input("x", {2, 3}), {1, -1}, false, "r"));
      },
      {"node 'r' (reduce_mean)", "axis 1 is named twice"});
  expect_error(
      [](Graph& g) {
        g.output(g.expand(g.input("x", {3, 2}), {4, 3, 5}, "e"));
      },
      {"node 'e' (expand)", "attribute 'shape'", "input 'x' [3, 2] does not broadcast to [4, 3, 5]"});
  expect_error(
      [](Graph& g) {
        g.output(g.expand(g.input("x", {1}), {0, 3}, "e"));
      },
      {"node 'e' (expand)", "dims must be positive"});
  expect_error(
      [](Graph& g) {
        g.output(g.expand(g.input("x", {1}), {int64_t{1} << 40, int64_t{1} << 40}, "e"));
      },
      {"node 'e' (expand)", "more than 2^48 elements"});
}

// A pool gradient's dy must be the pooled shape of its x.
TEST(OpShapes, PoolGradientsCheckTheirForwardPool) {
  expect_error(
      [](Graph& g) {
        g.output(g.add_node("max_pool2d_grad",
                            {{"dy", {g.input("dy", {1, 3, 4, 4})}}, {"x", {g.input("x", {1, 3, 6, 6})}}},
                            {{"kernel", std::vector<int64_t>{2, 2}}}, "mpg")[0]);
      },
      {"node 'mpg' (max_pool2d_grad)", "input 'dy'",
       "expected [1, 3, 3, 3] (the pooled shape of input 'x' [1, 3, 6, 6])", "got [1, 3, 4, 4]"});
}

// conv2d_dgrad / conv2d_wgrad given a dy, a filter or sizes that are not those of one forward conv.
TEST(OpShapes, ConvGradientsCheckTheirForwardConv) {
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d_dgrad(g.input("dy", {1, 8, 5, 5}), g.parameter("w", {8, 3, 3, 3}), {8, 8}, {}, "dg"));
      },
      {"node 'dg' (conv2d_dgrad)", "input 'dy'", "expected spatial size 6x6", "got [1, 8, 5, 5]"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d_dgrad(g.input("dy", {1, 8, 6, 6}), g.parameter("w", {4, 3, 3, 3}), {8, 8}, {}, "dg"));
      },
      {"node 'dg' (conv2d_dgrad)", "input 'w'", "expected dim 0 (K) = 8"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d_dgrad(g.input("dy", {1, 8, 6, 6}), g.parameter("w", {8, 3, 3, 3}), {8, 0}, {}, "dg"));
      },
      {"node 'dg' (conv2d_dgrad)", "attribute 'input_size'"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d_wgrad(g.input("x", {2, 6, 8, 8}), g.input("dy", {2, 9, 6, 6}), {3, 3}, {.groups = 2}, "wg"));
      },
      {"node 'wg' (conv2d_wgrad)", "attribute 'groups'", "positive divisor of C = 6 and K = 9"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d_wgrad(g.input("x", {2, 6, 8, 8}), g.input("dy", {3, 8, 6, 6}), {3, 3}, {}, "wg"));
      },
      {"node 'wg' (conv2d_wgrad)", "input 'dy'", "expected dim 0 (N) = 2"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d_wgrad(g.input("x", {2, 6, 8, 8}), g.input("dy", {2, 8, 6, 6}), {9, 9}, {}, "wg"));
      },
      {"node 'wg' (conv2d_wgrad)", "the 9x9 kernel", "does not fit the 8x8 input"});
}

TEST(OpShapes, BadInputsNameNodePortAndExpectation) {
  // The issue's own example message.
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 3, 8, 8}), g.parameter("w", {64, 3, 7}), {}, "conv1"));
      },
      {"node 'conv1' (conv2d) input 'w': expected 4 dims [K, C/groups, R, S], got [64, 3, 7]"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 3, 8, 8}), g.parameter("w", {8, 4, 3, 3}), {}, "c"));
      },
      {"node 'c' (conv2d) input 'w'", "expected dim 1 (C/groups) = 3", "[8, 4, 3, 3]"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 6, 8, 8}), g.parameter("w", {8, 2, 3, 3}), {.groups = 4}, "c"));
      },
      {"attribute 'groups'", "divisor of C = 6 and K = 8", "got 4"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 3, 2, 2}), g.parameter("w", {8, 3, 5, 5}), {}, "c"));
      },
      {"node 'c' (conv2d)", "does not fit", "output would be -2x-2"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 3, 8, 8}), g.parameter("w", {8, 3, 3, 3}), g.parameter("b", {3}), {}, "c"));
      },
      {"input 'bias'", "expected shape [8]", "got [3]"});
  expect_error(
      [](Graph& g) {
        g.output(g.conv2d(g.input("x", {1, 3, 8, 8}), g.parameter("w", {8, 3, 3, 3}, DType::f16), {}, "c"));
      },
      {"input 'w'", "expected dtype f32", "got f16"});
  expect_error(
      [](Graph& g) {
        g.output(
            g.conv2d(g.input("x", {1, 3, 8, 8}), g.parameter("w", {8, 3, 3, 3}, DType::f32, Layout::NCHW), {}, "c"));
      },
      {"input 'w'", "expected layout KCRS or KRSC, got NCHW"});
  expect_error(
      [](Graph& g) {
        g.output(g.matmul(g.input("a", {4, 5}), g.input("b", {6, 7}), {}, "mm"));
      },
      {"node 'mm' (matmul) input 'b'", "expected K = 5", "got 6"});
  expect_error(
      [](Graph& g) {
        g.output(g.matmul(g.input("a", {2, 4, 5}), g.input("b", {3, 5, 7}), {}, "mm"));
      },
      {"batch dims [3] do not broadcast", "[2]"});
  expect_error(
      [](Graph& g) {
        g.output(g.add(g.input("a", {2, 3}), g.input("b", {4}), "s"));
      },
      {"node 's' (add) input 'b'", "[4] does not broadcast with input 'a' [2, 3]"});
  expect_error(
      [](Graph& g) {
        g.output(g.bias_add(g.input("x", {2, 3, 4}), g.parameter("b", {4}), 1, "ba"));
      },
      {"input 'bias'", "expected shape [3]", "got [4]"});
  expect_error(
      [](Graph& g) {
        g.output(g.bias_add(g.input("x", {2, 3}), g.parameter("b", {3}), 5, "ba"));
      },
      {"attribute 'axis'", "[-2, 2)", "got 5"});
  expect_error(
      [](Graph& g) {
        auto p = [&](const char* n, int64_t c) { return g.parameter(n, {c}); };
        g.output(g.batch_norm(g.input("x", {1, 4, 2, 2}), p("s", 4), p("t", 4), p("m", 3), p("v", 4), 1e-5, "bn"));
      },
      {"node 'bn' (batch_norm) input 'mean'", "expected shape [4]", "got [3]"});
  expect_error(
      [](Graph& g) {
        g.output(g.layer_norm(g.input("x", {2, 3}), {.normalized_ndim = 3}, "ln"));
      },
      {"attribute 'normalized_ndim'", "expected 1 to 2", "got 3"});
  expect_error(
      [](Graph& g) {
        g.output(g.layer_norm(g.input("x", {2, 3}), {.scale = g.parameter("s", {2})}, "ln"));
      },
      {"input 'scale'", "expected shape [3]"});
  expect_error(
      [](Graph& g) {
        g.output(g.group_norm(g.input("x", {1, 6, 2, 2}), 4, {}, "gn"));
      },
      {"attribute 'groups'", "divisor of C = 6"});
  expect_error([](Graph& g) { g.output(g.softmax(g.input("x", {2, 3}), 2, "sm")); }, {"attribute 'axis'", "got 2"});
  expect_error(
      [](Graph& g) {
        g.output(g.max_pool2d(g.input("x", {1, 1, 8, 8}), {.kernel = {2, 2}, .padding = {2, 2}}, "mp"));
      },
      {"attribute 'padding'", "half the kernel"});
  expect_error(
      [](Graph& g) {
        g.output(g.max_pool2d(g.input("x", {1, 1, 2, 2}), {.kernel = {3, 3}}, "mp"));
      },
      {"does not fit"});
  expect_error(
      [](Graph& g) {
        g.output(g.global_avg_pool(g.input("x", {2, 3}), "gp"));
      },
      {"input 'x'", "expected 4 dims [N, C, H, W], got [2, 3]"});
  expect_error(
      [](Graph& g) {
        g.output(g.layout_convert(g.input("x", {1, 2, 3, 4}), Layout::KRSC, "lc"));
      },
      {"attribute 'to'", "from NCHW to KRSC"});
  expect_error(
      [](Graph& g) {
        g.output(g.reshape(g.input("x", {2, 3}), {4, 2}, "r"));
      },
      {"attribute 'shape'", "6 elements", "got [4, 2]"});
  expect_error([](Graph& g) { g.output(g.reshape(g.input("x", {2, 3}), {-1, -1}, "r")); }, {"at most one -1"});
  expect_error(
      [](Graph& g) {
        g.output(g.transpose(g.input("x", {2, 3}), {0, 0}, "t"));
      },
      {"attribute 'perm'", "permutation of 0..1"});
  expect_error(
      [](Graph& g) {
        g.output(g.concat({g.input("a", {2, 3}), g.input("b", {3, 3})}, 1, "cc"));
      },
      {"node 'cc' (concat) input 'xs'", "xs[1] [3, 3]", "except along axis 1"});
  expect_error(
      [](Graph& g) {
        g.output(g.slice(g.input("x", {2, 3}), {0}, {1}, {}, "sl"));
      },
      {"attribute 'starts'", "expected 2 values"});
  expect_error(
      [](Graph& g) {
        g.output(g.slice(g.input("x", {4, 3}), {3, 0}, {1, 3}, {}, "sl"));
      },
      {"empty along dim 0"});
  expect_error(
      [](Graph& g) {
        g.output(g.slice(g.input("x", {4, 3}), {0, 0}, {4, 3}, {0, 1}, "sl"));
      },
      {"attribute 'steps'", "positive"});
  expect_error(
      [](Graph& g) {
        g.output(g.upsample2d(g.input("x", {1, 1, 4, 4}), {}, "up"));
      },
      {"needs attribute 'scale' or 'size'"});
  expect_error(
      [](Graph& g) {
        g.output(g.upsample2d(g.input("x", {1, 1, 4, 4}), {.scale = {2, 2}, .align_corners = true}, "up"));
      },
      {"attribute 'align_corners'", "bilinear"});
  expect_error([](Graph& g) { g.output(g.clamp(g.input("x", {3}), std::nullopt, std::nullopt, "cl")); },
               {"node 'cl' (clamp)", "needs attribute 'min', 'max'"});
  expect_error(
      [](Graph& g) {
        g.output(g.unary("cast", g.input("x", {3}), {{"to", std::string("f64")}}, "ca"));
      },
      {"attribute 'to'", "one of 'f32', 'f16', 'bf16'", "got \"f64\""});
  expect_error(
      [](Graph& g) {
        g.output(g.add_node("add", {}, {{"a", 1.0}, {"b", 2.0}}, "both")[0]);
      },
      {"node 'both' (add)", "at least one of 'a' and 'b' must be a tensor"});
}

// ---- checks every row gets, whatever its op ----
TEST(OpShapes, UnknownAttributeListsTheValidOnes) {
  for (const OpDef& def : op_registry()) {
    Graph g;
    Tensor x = g.input("x", {2, 3});
    g.add_node(def.name, {{std::string(def.inputs[0].name), {x}}}, {{"bogus", int64_t{1}}}, "n");
    Status st = g.verify();
    ASSERT_FALSE(st.ok()) << def.name;
    EXPECT_NE(st.message().find(fmt::format("node 'n' ({}): unknown attribute 'bogus'", def.name)), std::string::npos)
        << st.message();
    for (const AttrSpec& a : def.attrs)
      EXPECT_NE(st.message().find(fmt::format("'{}'", a.name)), std::string::npos) << st.message();
  }
}

TEST(OpShapes, UnknownPortAndMissingInputsAreReported) {
  for (const OpDef& def : op_registry()) {
    Graph g;
    Tensor x = g.input("x", {2, 3});
    g.add_node(def.name, {{"zz", {x}}}, {}, "n");
    Status st = g.verify();
    ASSERT_FALSE(st.ok()) << def.name;
    EXPECT_NE(st.message().find("node 'n' (" + std::string(def.name) + ") input 'zz': unknown input port 'zz'"),
              std::string::npos)
        << st.message();
    for (const PortSpec& p : def.inputs) {
      if (p.optional) continue;
      EXPECT_NE(st.message().find(fmt::format("input '{}': missing input '{}'", p.name, p.name)), std::string::npos)
          << def.name << ":\n"
          << st.message();
    }
  }
}

TEST(OpShapes, WrongAttributeTypesAreReported) {
  for (const OpDef& def : op_registry()) {
    for (const AttrSpec& a : def.attrs) {
      Graph g;
      Tensor x = g.input("x", {2, 3});
      AttrValue wrong = a.type == AttrType::string ? AttrValue(int64_t{3}) : AttrValue(std::string("oops"));
      g.add_node(def.name, {{std::string(def.inputs[0].name), {x}}}, {{std::string(a.name), wrong}}, "n");
      Status st = g.verify();
      ASSERT_FALSE(st.ok());
      EXPECT_NE(st.message().find(fmt::format("attribute '{}': expected", a.name)), std::string::npos)
          << def.name << "." << a.name << ":\n"
          << st.message();
    }
  }
}

TEST(OpShapes, ListAttributesAcceptOneNumberAndCheckLength) {
  Graph g;
  Tensor y = g.add_node("conv2d", {{"x", {g.input("x", {1, 2, 9, 9})}}, {"w", {g.parameter("w", {4, 2, 3, 3})}}},
                        {{"stride", int64_t{2}}, {"padding", int64_t{1}}}, "c")[0];
  g.output(y);
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  EXPECT_EQ(g.shape(y), (Shape{1, 4, 5, 5}));
  EXPECT_EQ(std::get<std::vector<int64_t>>(g.nodes()[0].attrs.at("stride")), (std::vector<int64_t>{2, 2}));
  Graph bad;
  bad.output(bad.add_node("conv2d", {{"x", {bad.input("x", {1, 2, 9, 9})}}, {"w", {bad.parameter("w", {4, 2, 3, 3})}}},
                          {{"stride", std::vector<int64_t>{1, 2, 3}}}, "c")[0]);
  Status st = bad.verify();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("attribute 'stride': expected a list of 2 integers, got [1, 2, 3]"), std::string::npos)
      << st.message();
}

TEST(OpShapes, RegistryRowsAreConsistent) {
  ASSERT_EQ(static_cast<int>(op_registry().size()), kOpCount);
  for (int i = 0; i < kOpCount; ++i) {
    const OpDef& def = op_registry()[static_cast<size_t>(i)];
    EXPECT_EQ(static_cast<int>(def.id), i);
    EXPECT_EQ(find_op(def.name), &def);
    EXPECT_FALSE(def.outputs.empty());
    EXPECT_EQ(def.outputs[0].name, "y") << "every single-output op writes 'y'";
    EXPECT_FALSE(def.summary.empty()) << def.name;
    if (def.kind == FusionKind::pointwise && def.unary) {
      EXPECT_EQ(def.inputs[0].name, "x");
    }
    for (const AttrSpec& a : def.attrs) {
      // Defaults must pass their own schema.
      if (!a.default_value) continue;
      std::vector<Diagnostic> errs;
      normalize_attrs(def, {{std::string(a.name), *a.default_value}}, errs, 0);
      for (const auto& e : errs) EXPECT_NE(e.field, fmt::format("attrs/{}", a.name)) << def.name << ": " << e.message;
    }
  }
  EXPECT_EQ(find_op("conv"), nullptr);
}

// reshape's view (view_reshape): the output's strides over the input's memory, when every run of dims it
// merges or splits is contiguous there (size-1 dims have any stride); else none.
TEST(OpsShapes, ReshapeViewStrides) {
  const ViewFn view = op_def(OpId::reshape).view;
  ASSERT_NE(view, nullptr);
  const Node n;
  using S = std::vector<int64_t>;
  auto strides = [&](const Shape& in, const Shape& out, const S& in_strides) -> std::optional<S> {
    auto v = view(n, in, out, in_strides);
    if (!v) return std::nullopt;
    EXPECT_EQ(v->base, 0) << "a reshape starts where its input does";
    return v->strides;
  };
  // NHWC [1, 1280, 1, 1] (strides n 1280, c 1, h 1280, w 1280) flattened: the same bytes.
  EXPECT_EQ(strides(Shape{1, 1280, 1, 1}, Shape{1, 1280}, {1280, 1, 1280, 1280}), (S{1280, 1}));
  // Row-major splits and merges.
  EXPECT_EQ(strides(Shape{2, 12, 5}, Shape{2, 3, 4, 5}, {60, 5, 1}), (S{60, 20, 5, 1}));
  EXPECT_EQ(strides(Shape{2, 3, 4}, Shape{6, 4}, {12, 4, 1}), (S{4, 1}));
  EXPECT_EQ(strides(Shape{4}, Shape{1, 4, 1}, {1}), (S{4, 1, 1}));
  // NHWC [1, 4, 3, 3] to [1, 36]: logical C, H, W is not memory's order.
  EXPECT_FALSE(strides(Shape{1, 4, 3, 3}, Shape{1, 36}, {36, 1, 12, 4}).has_value());
  // A transposed [3, 2] (strides 1, 3) merged: no.
  EXPECT_FALSE(strides(Shape{3, 2}, Shape{6}, {1, 3}).has_value());
  // A strided run kept whole (a slice along the outer dim): yes.
  EXPECT_EQ(strides(Shape{2, 3, 4}, Shape{2, 12}, {24, 4, 1}), (S{24, 1}));
}

// slice's view (view_slice): starts past the input's first element by Σ start·stride, strides stride·step,
// with the reference's index rules (negative starts count from the end, ends clamp).
TEST(OpsShapes, SliceView) {
  Graph g("s");
  const Tensor x = g.input("x", {4, 10});
  g.output(g.slice(x, {1, -6}, {4, 100}, {2, 3}, "s"), "y");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  const Node& n = g.nodes().back();
  const ViewFn view = op_def(OpId::slice).view;
  ASSERT_NE(view, nullptr);
  EXPECT_FALSE(op_def(OpId::slice).store_view) << "a slice drops elements: never a store transform";
  // Rows 1 and 3, columns 4, 7: row-major [4, 10] (strides 10, 1) gives base 1*10 + 4 = 14, strides 20, 3.
  auto v = view(n, Shape{4, 10}, g.tensor(n.outputs[0]).shape, {10, 1});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->base, 14);
  EXPECT_EQ(v->strides, (std::vector<int64_t>{20, 3}));
  EXPECT_EQ(g.tensor(n.outputs[0]).shape, Shape({2, 2}));
  // Over column-major memory (strides 1, 4): base 1 + 4*4 = 17, strides 2, 12.
  v = view(n, Shape{4, 10}, g.tensor(n.outputs[0]).shape, {1, 4});
  EXPECT_EQ(v->base, 17);
  EXPECT_EQ(v->strides, (std::vector<int64_t>{2, 12}));
}

}  // namespace
}  // namespace kiln
