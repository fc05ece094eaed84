// Builds ResNet-50 v1.5 (torchvision's resnet50: the stride of each downsampling bottleneck sits on its
// 3x3 convolution) with kiln's C++ API and writes it as a kiln graph JSON file.
//
//   resnet50_graph [OUT.json] [--batch N] [--train]   (default: samples/graphs/resnet50.json, batch 1)
//
// 53 convolutions, each followed by an inference batch norm; ReLUs; a max pool; a global average pool;
// and the final fully connected layer as one matmul with bias. With --train, the batch norms use the batch's
// statistics (Graph::batch_norm_training; their running statistics are inputs) and a softmax cross-entropy
// against a `target` input [N, 1000] is the output `loss`: `kiln grad OUT.json --loss loss` differentiates it.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/kiln.h"

namespace {

struct Builder {
  kiln::Graph& g;
  bool train = false;

  // conv (no bias) + batch norm, with torchvision's parameter names.
  kiln::Tensor conv_bn(kiln::Tensor x, const std::string& conv, const std::string& bn, int64_t cin, int64_t cout,
                       int64_t k, int64_t stride) {
    kiln::Tensor w = g.parameter(conv + ".weight", {cout, cin, k, k});
    kiln::Tensor y = g.conv2d(x, w, {.stride = {stride, stride}, .padding = {k / 2, k / 2}}, conv);
    auto p = [&](const char* what) { return g.parameter(bn + "." + what, {cout}); };
    if (train) {
      return g
          .batch_norm_training(y, p("scale"), p("shift"), g.input(bn + ".running_mean", {cout}),
                               g.input(bn + ".running_var", {cout}), 0.1, 1e-5, bn)
          .y;
    }
    return g.batch_norm(y, p("scale"), p("shift"), p("mean"), p("var"), 1e-5, bn);
  }

  kiln::Tensor bottleneck(kiln::Tensor x, const std::string& name, int64_t cin, int64_t width, int64_t stride) {
    const int64_t cout = width * 4;
    kiln::Tensor y = g.relu(conv_bn(x, name + ".conv1", name + ".bn1", cin, width, 1, 1), name + ".relu1");
    y = g.relu(conv_bn(y, name + ".conv2", name + ".bn2", width, width, 3, stride), name + ".relu2");
    y = conv_bn(y, name + ".conv3", name + ".bn3", width, cout, 1, 1);
    kiln::Tensor identity = x;
    if (stride != 1 || cin != cout) {
      identity = conv_bn(x, name + ".downsample.0", name + ".downsample.1", cin, cout, 1, stride);
    }
    return g.relu(g.add(y, identity, name + ".add"), name + ".relu3");
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string out = "samples/graphs/resnet50.json";
  int64_t batch = 1;
  bool train = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--batch" && i + 1 < argc) {
      batch = std::strtoll(argv[++i], nullptr, 10);
      if (batch < 1) {
        std::fprintf(stderr, "resnet50_graph: --batch needs a positive integer\n");
        return 2;
      }
    } else if (a == "--train") {
      train = true;
    } else if (!a.empty() && a[0] != '-') {
      out = a;
    } else {
      std::fprintf(stderr, "usage: resnet50_graph [OUT.json] [--batch N] [--train]\n");
      return 2;
    }
  }

  kiln::Graph g("resnet50_v1.5");
  Builder b{g, train};
  kiln::Tensor x = g.input("image", {batch, 3, 224, 224});
  kiln::Tensor y = g.relu(b.conv_bn(x, "conv1", "bn1", 3, 64, 7, 2), "relu");
  y = g.max_pool2d(y, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, "maxpool");
  const int64_t blocks[4] = {3, 4, 6, 3};
  const int64_t widths[4] = {64, 128, 256, 512};
  int64_t cin = 64;
  for (int layer = 0; layer < 4; ++layer) {
    for (int64_t i = 0; i < blocks[layer]; ++i) {
      const int64_t stride = (layer > 0 && i == 0) ? 2 : 1;
      y = b.bottleneck(y, "layer" + std::to_string(layer + 1) + "." + std::to_string(i), cin, widths[layer], stride);
      cin = widths[layer] * 4;
    }
  }
  y = g.global_avg_pool(y, "avgpool");
  y = g.reshape(y, {batch, 2048}, "flatten");
  kiln::Tensor fc_w = g.parameter("fc.weight", {2048, 1000});
  kiln::Tensor fc_b = g.parameter("fc.bias", {1000});
  y = g.matmul(y, fc_w, fc_b, {}, "fc");
  if (train) {  // -Σ target · log softmax / N
    const kiln::Tensor log_p = g.log(g.softmax(y));
    g.output(g.mul(g.reduce_sum(g.mul(g.input("target", {batch, 1000}), log_p)), -1.0 / static_cast<double>(batch)),
             "loss");
  } else {
    g.output(y, "logits");
  }

  kiln::Status st = g.verify();
  if (!st.ok()) {
    std::fprintf(stderr, "resnet50_graph: %s\n", st.message().c_str());
    return 1;
  }
  st = kiln::save_graph(g, out);
  if (!st.ok()) {
    std::fprintf(stderr, "resnet50_graph: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %zu nodes, %zu tensors\n", out.c_str(), g.nodes().size(), g.tensors().size());
  return 0;
}
