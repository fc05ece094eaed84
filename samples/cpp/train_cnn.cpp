// A small residual CNN learning the synthetic 10-class task of samples/train/make_data.py with kiln's training
// machinery: kiln::backward, training-mode batch norm, an SGD step and a TrainingSession (docs/training.md).
//
//   samples/train/make_data.py /tmp/cnn_data
//   build/train_cnn /tmp/cnn_data [--steps N] [--device emu|ref|cuda]
//
// The model: conv 3->16 (3x3, stride 2) + batch norm + ReLU; a residual block of two 3x3 convs with batch norm;
// global average pool; linear 16->10; softmax cross-entropy. Batch 32, SGD with momentum 0.9, learning rate 0.05.
// Prints the loss of every step and exits with 1 unless the mean loss of the last 10 steps is below 1.0 (chance
// is ln 10 = 2.30).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "kiln/kiln.h"
#include "kiln/npy.h"
#include "kiln/optimizer.h"

namespace {

constexpr int64_t kBatch = 32, kClasses = 10, kWidth = 16;
constexpr double kThreshold = 1.0;

// conv + training-mode batch norm (its running statistics are inputs named after it, fed zeros and ones:
// training reads the batch's own statistics).
kiln::Tensor conv_bn(kiln::Graph& g, kiln::Tensor x, const std::string& name, int64_t cin, int64_t stride) {
  const kiln::Tensor c =
      g.conv2d(x, g.parameter(name + ".w", {kWidth, cin, 3, 3}), {.stride = {stride, stride}, .padding = {1, 1}});
  return g
      .batch_norm_training(c, g.parameter(name + ".scale", {kWidth}), g.parameter(name + ".shift", {kWidth}),
                           g.input(name + ".running_mean", {kWidth}), g.input(name + ".running_var", {kWidth}), 0.1,
                           1e-5, name)
      .y;
}

kiln::Graph model() {
  kiln::Graph g("train_cnn");
  const kiln::Tensor x = g.input("x", {kBatch, 3, 32, 32});
  const kiln::Tensor stem = g.relu(conv_bn(g, x, "stem", 3, 2));
  const kiln::Tensor h = g.relu(conv_bn(g, stem, "block.a", kWidth, 1));
  const kiln::Tensor r = g.relu(g.add(stem, conv_bn(g, h, "block.b", kWidth, 1)));
  const kiln::Tensor logits = g.matmul(g.reshape(g.global_avg_pool(r), {kBatch, kWidth}),
                                       g.parameter("fc.w", {kWidth, kClasses}), g.parameter("fc.b", {kClasses}));
  const kiln::Tensor log_p = g.log(g.softmax(logits));
  g.output(g.mul(g.reduce_sum(g.mul(g.input("target", {kBatch, kClasses}), log_p)), -1.0 / kBatch), "loss");
  return g;
}

// Rows [first, first + count) of a dataset.
kiln::HostTensor rows(const kiln::HostTensor& t, int64_t first, int64_t count) {
  std::vector<int64_t> dims = t.shape.to_vector();
  const int64_t row = t.numel() / dims[0];
  dims[0] = count;
  kiln::HostTensor out(kiln::Shape(dims), t.dtype);
  std::copy(t.data.begin() + first * row, t.data.begin() + (first + count) * row, out.data.begin());
  return out;
}

kiln::Result<kiln::HostTensor> load(const std::string& dir, const char* name) {
  const std::string path = dir + "/" + name + ".npy";
  KILN_ASSIGN_OR_RETURN(const kiln::Shape shape, kiln::npy_shape(path, name));
  return kiln::load_npy(path, kiln::DType::f32, shape, name);
}

int fail(const kiln::Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: train_cnn DATA_DIR [--steps N] [--device emu|ref|cuda] (data: samples/train/make_data.py)\n");
    return 2;
  }
  int steps = 60;
  kiln::DeviceKind device = kiln::DeviceKind::emu;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--device") == 0) device = kiln::parse_device_kind(argv[i + 1]).value_or(device);
  }
  auto x = load(argv[1], "x");
  if (!x.ok()) return fail(x.status());
  auto target = load(argv[1], "target");
  if (!target.ok()) return fail(target.status());
  const int64_t batches = x->shape[0] / kBatch;
  if (batches < 1 || target->shape[0] != x->shape[0]) {
    std::fprintf(stderr, "error: expected x [D, 3, 32, 32] and target [D, 10] with D >= %lld\n",
                 static_cast<long long>(kBatch));
    return 1;
  }

  const kiln::Graph g = model();
  // Parameters: weights drawn with their fan-in's variance, batch norms starting at scale 1 and shift 0.
  kiln::TensorMap params;
  const kiln::TensorMap drawn = kiln::random_inputs(g, 1);
  kiln::TensorMap fixed;  // the running statistics' inputs
  for (kiln::Tensor t : g.bound_tensors()) {
    const kiln::TensorInfo& ti = g.tensor(t);
    const bool scale = ti.name.ends_with(".scale") || ti.name.ends_with(".running_var");
    kiln::HostTensor v = drawn.at(ti.name);
    if (ti.name.ends_with(".scale") || ti.name.ends_with(".shift") || ti.name.ends_with(".running_mean") ||
        ti.name.ends_with(".running_var"))
      for (double& e : v.data) e = scale ? 1.0 : 0.0;
    if (ti.kind == kiln::TensorKind::parameter) params[ti.name] = v;
    if (ti.name.find(".running_") != std::string::npos) fixed[ti.name] = v;
  }
  auto engine = kiln::Engine::open(device);
  if (!engine.ok()) return fail(engine.status());
  auto session = kiln::TrainingSession::create(*engine, g, "loss", kiln::SgdOptions{.momentum = 0.9}, params);
  if (!session.ok()) return fail(session.status());
  std::printf("training %s on %s: %lld images in batches of %lld, %d steps\n", g.name().c_str(),
              engine->device_name().c_str(), static_cast<long long>(x->shape[0]), static_cast<long long>(kBatch),
              steps);
  double recent = 0;
  for (int s = 0; s < steps; ++s) {
    kiln::TensorMap batch = fixed;
    const int64_t first = s % batches * kBatch;
    batch["x"] = rows(*x, first, kBatch);
    batch["target"] = rows(*target, first, kBatch);
    auto loss = session->step(batch, 0.05);
    if (!loss.ok()) return fail(loss.status());
    std::printf("step %d/%d  loss %.4f\n", s + 1, steps, *loss);
    if (s >= steps - 10) recent += *loss / std::min(steps, 10);
  }
  const bool learned = recent < kThreshold;
  std::printf("mean loss of the last %d steps: %.4f (%s %.1f; chance %.2f)\n", std::min(steps, 10), recent,
              learned ? "below" : "NOT below", kThreshold, std::log(10.0));
  return learned ? 0 : 1;
}
