// The graphs of the benchmark suites, shared by gpu_bench (timed on a GPU) and profile_bench (estimated
// without one), so that both measure the same shapes.
//   conv    conv + bias + batch_norm + relu on every distinct convolution of ResNet-50 v1.5 (from
//           samples/graphs/resnet50.json), NHWC activations, KRSC weights
//   memory  the memory-bound families on tensors far larger than the L2
#pragma once

#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/graph.h"
#include "kiln/json.h"
#include "kiln/status.h"

namespace kiln::bench {

struct ConvShape {
  int64_t C, H, W, K, R, S, stride, pad;
  auto operator<=>(const ConvShape&) const = default;
};

// The distinct convolutions of ResNet-50 (input channels and size, output channels, window, stride, pad),
// in first-use order.
inline Result<std::vector<ConvShape>> resnet50_conv_shapes(const std::string& source_dir) {
  KILN_ASSIGN_OR_RETURN(Graph g, load_graph(source_dir + "/samples/graphs/resnet50.json"));
  std::set<ConvShape> seen;
  std::vector<ConvShape> out;
  for (const Node& n : g.nodes()) {
    if (n.op_text != "conv2d") continue;
    const Shape& x = g.shape(n.inputs[0][0]);
    const Shape& w = g.shape(n.inputs[1][0]);
    const auto& stride = std::get<std::vector<int64_t>>(n.attrs.at("stride"));
    const auto& pad = std::get<std::vector<int64_t>>(n.attrs.at("padding"));
    ConvShape s{x[1], x[2], x[3], w[0], w[2], w[3], stride[0], pad[0]};
    if (seen.insert(s).second) out.push_back(s);
  }
  return out;
}

inline std::string conv_label(const ConvShape& s, int64_t n, DType dt) {
  return fmt::format("conv {}x{} {}->{} {}x{} s{} b{} {}", s.R, s.S, s.C, s.K, s.H, s.W, s.stride, n, dtype_name(dt));
}

// conv + bias + batch norm + relu at batch n, verified.
inline Result<Graph> conv_graph(const ConvShape& s, int64_t n, DType dt) {
  Graph g(fmt::format("conv_{}x{}_{}_{}_{}x{}_s{}_b{}_{}", s.R, s.S, s.C, s.K, s.H, s.W, s.stride, n, dtype_name(dt)));
  Tensor x = g.input("x", {n, s.C, s.H, s.W}, dt, Layout::NHWC);
  Tensor w = g.parameter("w", {s.K, s.C, s.R, s.S}, dt, Layout::KRSC);
  auto vec = [&](const char* name) { return g.parameter(name, {s.K}, dt); };
  Tensor y = g.conv2d(x, w, {.stride = {s.stride, s.stride}, .padding = {s.pad, s.pad}});
  y = g.bias_add(y, vec("bias"));
  y = g.relu(g.batch_norm(y, vec("bn.scale"), vec("bn.shift"), vec("bn.mean"), vec("bn.var")));
  g.output(y, "y", Layout::NHWC);
  KILN_RETURN_IF_ERROR(g.verify());
  return g;
}

inline const std::vector<std::string>& memory_cases() {
  static const std::vector<std::string> v{"add_relu", "group_norm_silu", "max_pool", "layer_norm", "softmax"};
  return v;
}

// One memory-suite graph (`what` from memory_cases()), verified; `label` says what it is.
inline Result<Graph> memory_graph(const std::string& what, DType dt, std::string* label = nullptr) {
  const std::string dn(dtype_name(dt));
  Graph g(what + "_" + dn);
  std::string l;
  if (what == "add_relu") {
    Tensor x = g.input("x", {32, 256, 56, 56}, dt, Layout::NHWC);
    Tensor r = g.input("r", {32, 256, 56, 56}, dt, Layout::NHWC);
    g.output(g.relu(g.add(x, r)), "y", Layout::NHWC);
    l = fmt::format("add+relu [32,256,56,56] {}", dn);
  } else if (what == "group_norm_silu") {
    Tensor x = g.input("x", {32, 256, 56, 56}, dt, Layout::NHWC);
    NormOptions o;
    o.scale = g.parameter("gn.scale", {256}, dt);
    o.shift = g.parameter("gn.shift", {256}, dt);
    g.output(g.silu(g.group_norm(x, 32, o)), "y", Layout::NHWC);
    l = fmt::format("group_norm(32)+silu [32,256,56,56] {}", dn);
  } else if (what == "max_pool") {
    Tensor x = g.input("x", {32, 64, 112, 112}, dt, Layout::NHWC);
    g.output(g.max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}), "y", Layout::NHWC);
    l = fmt::format("max_pool 3x3 s2 [32,64,112,112] {}", dn);
  } else if (what == "layer_norm") {
    Tensor x = g.input("x", {8192, 4096}, dt);
    NormOptions o;
    o.scale = g.parameter("ln.scale", {4096}, dt);
    o.shift = g.parameter("ln.shift", {4096}, dt);
    g.output(g.layer_norm(x, o), "y");
    l = fmt::format("layer_norm [8192,4096] {}", dn);
  } else if (what == "softmax") {
    Tensor x = g.input("x", {8192, 4096}, dt);
    g.output(g.softmax(x), "y");
    l = fmt::format("softmax [8192,4096] {}", dn);
  } else {
    return invalid_argument(fmt::format("unknown memory case '{}'", what));
  }
  KILN_RETURN_IF_ERROR(g.verify());
  if (label) *label = l;
  return g;
}

}  // namespace kiln::bench
