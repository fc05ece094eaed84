// DenseNet-like graphs for the tests of in-place concats (tests/test_planner_concat.cpp,
// tests/test_codegen_concat.cpp), built with the C++ API.
//
// A dense block: features f0, then layer i (1..L) computes n_i from cat([f0, n_1, ..., n_{i-1}]), so every
// concat's inputs are a prefix of the next one's and every n_i is read by several concats; the block's output
// is cat([f0, n_1, ..., n_L]).
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/graph.h"

namespace kiln::dense_test {

struct DenseBlock {
  int layers = 4;
  int64_t N = 1, C0 = 8, growth = 4, H = 6, W = 6;
  DType dtype = DType::f32;
  Layout io = Layout::NCHW;  // of the graph's input and outputs
  // Each layer as torchvision's: bn-relu-conv1x1 (4·growth channels)-bn-relu-conv3x3 (pre-activation; the
  // 3x3 conv writes n_i with no epilogue). Otherwise odd layers n_i = relu(bn(conv3x3(cat))) (the conv reads
  // the concat view, its epilogue writes the slice) and even ones n_i = relu(bn(conv3x3(relu(bn(cat))))) (a
  // pointwise group reads the view).
  bool bottleneck = false;
  bool stem = true;            // f0 = relu(bn(conv3x3(x))), written by a kernel; false: f0 is the graph input x
  bool single_concat = false;  // the first layer reads cat([f0]) (torchvision concatenates a list of one)
  // Slices and views read by other families too: add(n_1, n_2) (pointwise), an average pool of cat_2 and a
  // global average pool of cat_3 (pool), a group norm of cat_2 (norm); outputs sum, pool, gpool, gn.
  bool extra_readers = false;
  bool krsc_weights = false;  // 3x3 weights declared KRSC (no weight transforms in the plan)
};

struct BlockBuilder {
  Graph& g;
  const DenseBlock& b;
  std::string p;  // prefix of every name

  Tensor param(const std::string& name, Shape s, Layout l = Layout::row_major) {
    return s.rank() == 4 ? g.parameter(p + name, s, b.dtype, l) : g.parameter(p + name, s, b.dtype);
  }
  Tensor bn(Tensor x, const std::string& name) {
    const int64_t c = g.shape(x)[1];
    return g.batch_norm(x, param(name + ".scale", {c}), param(name + ".shift", {c}), param(name + ".mean", {c}),
                        param(name + ".var", {c}), 1e-5, p + name);
  }
  Tensor conv(Tensor x, const std::string& name, int64_t k, int64_t r) {
    const int64_t c = g.shape(x)[1];
    const Layout l = b.krsc_weights ? Layout::KRSC : Layout::KCRS;
    return g.conv2d(x, param(name + ".w", {k, c, r, r}, l), {.padding = {r / 2, r / 2}}, p + name);
  }
  Tensor relu_bn(Tensor x, const std::string& name) { return g.relu(bn(x, name), p + name + ".relu"); }

  Tensor layer(Tensor in, int i) {
    const std::string n = fmt::format("l{}", i);
    if (b.bottleneck) {
      Tensor t = conv(relu_bn(in, n + ".bn1"), n + ".conv1", 4 * b.growth, 1);
      return conv(relu_bn(t, n + ".bn2"), n + ".conv2", b.growth, 3);
    }
    if (i % 2 == 0) in = relu_bn(in, n + ".pre");
    return relu_bn(conv(in, n + ".conv", b.growth, 3), n + ".bn");
  }

  void build() {
    const Tensor x = g.input(p + "x", {b.N, b.stem ? 3 : b.C0, b.H, b.W}, b.dtype, b.io);
    std::vector<Tensor> feats{b.stem ? relu_bn(conv(x, "stem", b.C0, 3), "stem.bn") : x};
    std::vector<Tensor> cats;
    for (int i = 1; i <= b.layers; ++i) {
      Tensor in = feats[0];
      if (feats.size() > 1 || b.single_concat) {
        in = g.concat(feats, 1, fmt::format("{}cat{}", p, i - 1));
        cats.push_back(in);
      }
      feats.push_back(layer(in, i));
    }
    const Tensor out = g.concat(feats, 1, p + "cat");
    g.output(relu_bn(out, "out.bn"), p + "y", b.io);
    if (!b.extra_readers) return;
    const auto cat = [&](size_t k) { return cats.at(cats.size() - b.layers + k); };  // cat_k: k + 1 inputs
    g.output(g.add(feats[1], feats[2], p + "add"), p + "sum", b.io);
    g.output(g.avg_pool2d(cat(2), {.kernel = {2, 2}, .stride = {2, 2}}, p + "avgpool"), p + "pool", b.io);
    g.output(g.global_avg_pool(cat(3), p + "gap"), p + "gpool", b.io);
    const int64_t c2 = g.shape(cat(2))[1];
    NormOptions no;
    no.scale = param("gn.scale", {c2});
    no.shift = param("gn.shift", {c2});
    g.output(g.group_norm(cat(2), 2, no, p + "gn"), p + "gn", b.io);
  }
};

// Adds block `b` to `g`, every name prefixed with `prefix` (several blocks share one graph: one plan).
inline void add_dense_block(Graph& g, const DenseBlock& b, const std::string& prefix = {}) {
  BlockBuilder{g, b, prefix}.build();
}

// DenseNet-121 as torchvision builds it (growth 32, bottleneck 4·32, blocks of 6, 12, 24 and 16 layers,
// transitions halving channels and resolution), 224x224 input; every layer's input is a concat, the first
// of each block of one tensor (torchvision's torch.cat of a list of one): 62 concats.
inline Graph densenet121(int64_t batch = 1) {
  Graph g("densenet121");
  DenseBlock cfg;
  cfg.growth = 32, cfg.bottleneck = true;
  BlockBuilder bb{g, cfg, ""};
  Tensor y = bb.relu_bn(g.conv2d(g.input("x", {batch, 3, 224, 224}), g.parameter("conv0.w", {64, 3, 7, 7}),
                                 {.stride = {2, 2}, .padding = {3, 3}}, "conv0"),
                        "norm0");
  y = g.max_pool2d(y, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, "pool0");
  int64_t c = 64;
  const int blocks[] = {6, 12, 24, 16};
  for (int k = 0; k < 4; ++k) {
    bb.p = fmt::format("b{}.", k + 1);
    std::vector<Tensor> feats{y};
    for (int i = 1; i <= blocks[k]; ++i)
      feats.push_back(bb.layer(g.concat(feats, 1, fmt::format("{}cat{}", bb.p, i)), i));
    y = g.concat(feats, 1, bb.p + "out");
    c += 32 * blocks[k];
    if (k == 3) break;
    y = bb.conv(bb.relu_bn(y, "t.bn"), "t.conv", c / 2, 1);
    c /= 2;
    y = g.avg_pool2d(y, {.kernel = {2, 2}, .stride = {2, 2}}, bb.p + "t.pool");
  }
  bb.p.clear();
  y = g.reshape(g.global_avg_pool(bb.relu_bn(y, "norm5"), "gap"), {batch, c}, "flat");
  g.output(g.matmul(y, g.parameter("fc.w", {c, 1000}), g.parameter("fc.b", {1000}), {}, "fc"), "logits");
  return g;
}

}  // namespace kiln::dense_test
