// One small valid graph per op of the registry (tests iterate over the registry and fail for a row without a
// case): the JSON round trip (test_json.cpp) and the kernel families' coverage (test_kernel_families.cpp).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "kiln/graph.h"
#include "ops/registry.h"

namespace kiln::testing {

// ---- one small valid graph per op --------------------------------------------------------------------
// Every registry row must have a case here (the test fails for a row without one), and each case uses
// non-default attributes where the op has any, so that every kind of attribute value is written and read.
using Builder = std::function<void(Graph&)>;

inline Builder unary_case(std::string op, Attrs attrs = {}) {
  return [op, attrs](Graph& g) {
    Tensor x = g.input("x", {1, 3, 4, 4});
    g.output(g.unary(op, x, attrs, op + "_node"));
  };
}

// Tensor (broadcast) operands, then a scalar on the right, then a scalar on the left.
inline Builder binary_case(std::string op) {
  return [op](Graph& g) {
    Tensor a = g.input("a", {1, 3, 4, 4});
    Tensor b = g.parameter("b", {3, 1, 1});
    Tensor y = g.binary(op, a, b, op + "_tensors");
    y = g.binary(op, y, 0.5, op + "_scalar_b");
    g.output(g.binary(op, 2.0, y, op + "_scalar_a"));
  };
}

inline const std::map<std::string, Builder>& op_cases() {
  static const std::map<std::string, Builder> cases = [] {
    std::map<std::string, Builder> c;
    c["conv2d"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 4, 9, 9});
      Tensor w = g.parameter("w", {6, 2, 3, 3});
      Tensor b = g.parameter("b", {6});
      g.output(
          g.conv2d(x, w, b, {.stride = {2, 2}, .padding = {1, 1, 0, 0}, .dilation = {1, 1}, .groups = 2}, "conv1"));
      // NHWC activations and KRSC weights, no bias; the output asks for NCHW (its producer gives NHWC).
      Tensor x2 = g.input("x2", {1, 3, 8, 8}, DType::f32, Layout::NHWC);
      Tensor w2 = g.parameter("w2", {4, 3, 3, 3}, DType::f32, Layout::KRSC);
      g.output(g.conv2d(x2, w2, {.padding = {1, 1}, .dilation = {2, 2}}, "conv2"), {}, Layout::NCHW);
    };
    c["matmul"] = [](Graph& g) {
      Tensor a = g.input("a", {2, 3, 4});
      Tensor b = g.parameter("b", {4, 5});
      Tensor bias = g.parameter("bias", {5});
      g.output(g.matmul(a, b, bias, {}, "fc"));
      Tensor a2 = g.input("a2", {4, 3}, DType::f16);
      Tensor b2 = g.parameter("b2", {5, 4}, DType::f16);
      g.output(g.matmul(a2, b2, {.transpose_a = true, .transpose_b = true}, "mm_t"));
    };
    c["bias_add"] = [](Graph& g) {
      Tensor x = g.input("x", {2, 5, 3});
      g.output(g.bias_add(x, g.parameter("bias", {5}), 1, "bias"));
    };
    c["batch_norm"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 3, 4, 4});
      Tensor s = g.parameter("scale", {3}), t = g.parameter("shift", {3});
      Tensor m = g.parameter("mean", {3}), v = g.parameter("var", {3});
      g.output(g.batch_norm(x, s, t, m, v, 1e-3, "bn"));
    };
    c["layer_norm"] = [](Graph& g) {
      Tensor x = g.input("x", {2, 3, 8});
      NormOptions o{.scale = g.parameter("gamma", {3, 8}),
                    .shift = g.parameter("beta", {3, 8}),
                    .epsilon = 1e-6,
                    .normalized_ndim = 2};
      g.output(g.layer_norm(x, o, "ln"));
    };
    c["group_norm"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 4, 4, 4});
      NormOptions o{.scale = g.parameter("gamma", {4}), .shift = g.parameter("beta", {4}), .epsilon = 1.0};
      g.output(g.group_norm(x, 2, o, "gn"));
    };
    c["instance_norm"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 3, 4, 4});
      g.output(g.instance_norm(x, {.scale = g.parameter("gamma", {3}), .shift = {}}, "inorm"));
    };
    c["rms_norm"] = [](Graph& g) {
      Tensor x = g.input("x", {2, 8});
      g.output(g.rms_norm(x, {.scale = g.parameter("gamma", {8}), .shift = {}, .epsilon = 1e-6}, "rms"));
    };
    c["softmax"] = [](Graph& g) { g.output(g.softmax(g.input("x", {2, 5}), 0, "sm")); };
    c["clamp"] = unary_case("clamp", {{"min", -1.0}, {"max", 6.0}});
    c["leaky_relu"] = unary_case("leaky_relu", {{"alpha", 0.2}});
    c["elu"] = unary_case("elu", {{"alpha", 2.0}});
    c["softplus"] = unary_case("softplus", {{"beta", 2.0}, {"threshold", 10.0}});
    for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum", "pow"}) c[op] = binary_case(op);
    c["max_pool2d"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 2, 8, 8});
      g.output(g.max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true}, "maxpool"));
    };
    c["avg_pool2d"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 2, 8, 8});
      g.output(g.avg_pool2d(
          x, {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1, 1, 1}, .count_include_pad = false}, "avgpool"));
    };
    c["global_avg_pool"] = [](Graph& g) { g.output(g.global_avg_pool(g.input("x", {1, 3, 4, 4}), "gap")); };
    c["global_max_pool"] = [](Graph& g) { g.output(g.global_max_pool(g.input("x", {1, 3, 4, 4}), "gmp")); };
    c["reduce_sum"] = [](Graph& g) { g.output(g.reduce_sum(g.input("x", {2, 3, 4}), {0, -1}, true, "rsum")); };
    c["reduce_mean"] = [](Graph& g) { g.output(g.reduce_mean(g.input("x", {2, 3, 4}), {}, false, "rmean")); };
    c["layout_convert"] = [](Graph& g) {
      g.output(g.layout_convert(g.input("x", {1, 3, 4, 4}), Layout::NHWC, "to_nhwc"));
    };
    c["reshape"] = [](Graph& g) { g.output(g.reshape(g.input("x", {1, 3, 4, 4}), {1, -1}, "flatten")); };
    c["transpose"] = [](Graph& g) { g.output(g.transpose(g.input("x", {1, 3, 4, 5}), {0, 2, 3, 1}, "perm")); };
    c["concat"] = [](Graph& g) {
      Tensor a = g.input("a", {1, 2, 4, 4}), b = g.input("b", {1, 3, 4, 4}), d = g.input("d", {1, 1, 4, 4});
      g.output(g.concat({a, b, d}, 1, "cat"));
      g.output(g.concat({a}, -1, "cat_one"));
    };
    c["slice"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 3, 8, 8});
      g.output(g.slice(x, {0, 1, 0, 2}, {1, 3, 8, 8}, {1, 1, 2, 3}, "crop"));
      g.output(g.slice(x, {0, 0, 0, 0}, {1, 2, 4, 4}, {}, "crop_default_steps"));
    };
    c["upsample2d"] = [](Graph& g) {
      Tensor x = g.input("x", {1, 2, 4, 4});
      g.output(g.upsample2d(x, {.scale = {2.0, 1.5}}, "up_nearest"));
      g.output(g.upsample2d(x, {.size = {8, 6}, .mode = "bilinear", .align_corners = true}, "up_bilinear"));
    };
    c["cast"] = [](Graph& g) {
      Tensor x = g.input("x", {2, 3});
      g.output(g.cast(x, DType::f16, "to_f16"));
      g.output(g.cast(g.input("xb", {2, 3}, DType::bf16), DType::f32, "from_bf16"));
    };
    c["conv2d_dgrad"] = [](Graph& g) {
      g.output(g.conv2d_dgrad(g.input("dy", {2, 4, 3, 3}), g.parameter("w", {4, 2, 3, 3}), {6, 6},
                              {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}, "dgrad"));
    };
    c["conv2d_wgrad"] = [](Graph& g) {
      g.output(g.conv2d_wgrad(g.input("x", {2, 4, 6, 6}), g.input("dy", {2, 4, 3, 3}), {3, 3},
                              {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}, "wgrad"));
    };
    c["max_pool2d_grad"] = [](Graph& g) {
      g.output(g.add_node("max_pool2d_grad",
                          {{"dy", {g.input("dy", {1, 3, 4, 4})}}, {"x", {g.input("x", {1, 3, 7, 7})}}},
                          {{"kernel", std::vector<int64_t>{3, 3}},
                           {"stride", std::vector<int64_t>{2, 2}},
                           {"padding", std::vector<int64_t>{1, 1}},
                           {"ceil_mode", true}},
                          "maxpool_grad")[0]);
    };
    c["avg_pool2d_grad"] = [](Graph& g) {
      g.output(g.add_node("avg_pool2d_grad",
                          {{"dy", {g.input("dy", {1, 3, 3, 3})}}, {"x", {g.input("x", {1, 3, 6, 6})}}},
                          {{"kernel", std::vector<int64_t>{2, 2}},
                           {"stride", std::vector<int64_t>{2, 2}},
                           {"padding", std::vector<int64_t>{1, 1, 0, 0}},
                           {"count_include_pad", false}},
                          "avgpool_grad")[0]);
    };
    c["expand"] = [](Graph& g) { g.output(g.expand(g.input("x", {3, 1}), {2, 3, 4}, "broadcast")); };
    for (const char* op : {"relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad", "silu_grad"}) {
      c[op] = [op](Graph& g) { g.output(g.binary(op, g.input("dy", {2, 3}), g.input("x", {2, 3})), "dx"); };
    }
    // Every other unary pointwise op and channel reduction of the registry: its default attributes on a
    // 4-D input (so a new one is covered without a line here; ops with attributes have their own case above).
    for (const OpDef& def : op_registry()) {
      if ((def.unary != nullptr || def.channel_reduction) && !c.count(std::string(def.name)))
        c[std::string(def.name)] = unary_case(std::string(def.name));
    }
    return c;
  }();
  return cases;
}

}  // namespace kiln::testing
