// DynamicExecutable (include/kiln/engine.h): one compiled object for every binding of a graph's symbolic
// dims. Runs at several batches read off the bindings' sizes, each against run_reference on random inputs
// (tolerance_for the dtype), with the converted weights shared across batches and one workspace grown as
// needed; and the bad bindings: sizes that are no whole number of rows, two inputs that disagree, a value
// outside the range, a missing input. Compiled into kiln_tests (ref and emu) and kiln_gpu_tests (cuda).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen_check.h"
#include "kiln/engine.h"
#include "scoped_env.h"

namespace kiln {
namespace {

std::vector<DeviceKind> devices() {
  if (testing::on_cuda()) return {DeviceKind::cuda};
  return {DeviceKind::ref, DeviceKind::emu};
}

// x [N, 8, 10, 10] -> 3x3 conv + batch norm + ReLU -> global average pool -> [N, 16] -> matmul [16, 5] + bias,
// plus a second symbolic input z [N, 5]: y [N, 5]. N in [1, 16].
Graph dynamic_graph() {
  Graph g("dynamic");
  const DimExpr n = g.dim("N", 1, 16);
  const Tensor x = g.symbolic_input("x", {n, 8, 10, 10});
  const Tensor z = g.symbolic_input("z", {n, 5});
  Conv2dOptions pad1;
  pad1.padding = {1, 1};
  auto channel = [&](const std::string& name) { return g.parameter(name, {16}); };
  Tensor h = g.conv2d(x, g.parameter("w", {16, 8, 3, 3}), pad1);
  h = g.relu(g.batch_norm(h, channel("s"), channel("b"), channel("m"), channel("v")));
  h = g.reshape(g.global_avg_pool(h), {-1, 16});
  const Tensor y = g.add(g.matmul(h, g.parameter("fc", {16, 5}), g.parameter("fc_b", {5})), z);
  g.output(y, "y");
  return g;
}

class DynamicOn : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    auto e = Engine::open(GetParam());
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_.emplace(std::move(e).value());
    auto d = engine_->compile_dynamic(graph_);
    ASSERT_TRUE(d.ok()) << d.status().message();
    dyn_.emplace(std::move(d).value());
  }

  // Random values for the graph at batch n, with the parameters fixed across batches (seed 7).
  TensorMap inputs_at(int64_t n, uint64_t seed) {
    const Graph bound = *graph_.bind({{"N", n}});
    TensorMap in = random_inputs(bound, seed);
    const TensorMap params = random_inputs(*graph_.bind({{"N", 1}}), 7);
    for (const auto& [name, t] : params)
      if (bound.tensor(*bound.find_tensor(name)).kind == TensorKind::parameter) in[name] = t;
    return in;
  }

  // Device memory for every input, parameter and output at batch n (kept while the test lives), with the
  // parameters bound where the first call put them: every batch binds the same weights at the same addresses.
  Bindings bind_at(int64_t n, const TensorMap& in) {
    const Graph bound = *graph_.bind({{"N", n}});
    auto b = upload_bindings(*engine_, bound, in);
    KILN_CHECK(b.ok(), b.status().message());
    Bindings out = b->bindings;
    if (params_.empty()) {
      for (const auto& [name, binding] : out)
        if (bound.tensor(*bound.find_tensor(name)).kind == TensorKind::parameter) params_[name] = binding;
    }
    for (const auto& [name, binding] : params_) out[name] = binding;
    kept_.push_back(std::move(*b));
    return out;
  }

  HostTensor output_at(int64_t n, const Bindings& b) {
    const Graph bound = *graph_.bind({{"N", n}});
    const TensorInfo& ti = bound.tensor(*bound.find_tensor("y"));
    std::vector<unsigned char> bytes(b.at("y").bytes);
    KILN_CHECK(engine_->synchronize().ok(), "synchronize");
    KILN_CHECK(engine_->download(bytes.data(), b.at("y").data, bytes.size()).ok(), "download");
    return from_device_bytes(bytes.data(), ti.shape, ti.dtype, ti.layout);
  }

  // Runs at batch n (the batch read off the bindings) and compares y with the reference.
  RunReport run_and_check(int64_t n, uint64_t seed) {
    SCOPED_TRACE("N = " + std::to_string(n));
    const TensorMap in = inputs_at(n, seed);
    const Bindings b = bind_at(n, in);
    RunReport r;
    const Status s = dyn_->run(b, nullptr, &r);
    EXPECT_TRUE(s.ok()) << s.message();
    auto want = run_reference(*graph_.bind({{"N", n}}), in);
    EXPECT_TRUE(want.ok()) << want.status().message();
    if (s.ok() && want.ok()) {
      const Comparison c = compare_tensors(output_at(n, b), want->at("y"), tolerance_for(DType::f32));
      EXPECT_TRUE(c.ok) << c.problem;
    }
    return r;
  }

  Graph graph_ = dynamic_graph();
  std::optional<Engine> engine_;
  std::optional<DynamicExecutable> dyn_;
  Bindings params_;
  std::vector<BoundBuffers> kept_;
};

// Batches 3, 8, 3 and 1 through one DynamicExecutable: each right, each binding planned once, the weight
// converted once for all of them (the emulator and the GPU convert KCRS -> KRSC; ref reads weights as they
// are), and the workspace grown from batch 3's to batch 8's and used again at 3 and 1.
TEST_P(DynamicOn, RunsEveryBatchFromTheBindingsSizes) {
  const bool converts = GetParam() != DeviceKind::ref;
  RunReport r = run_and_check(3, 1);
  EXPECT_EQ(r.weight_transforms_run, converts ? 1 : 0);
  EXPECT_EQ(dyn_->bindings_prepared(), 1);
  r = run_and_check(8, 2);
  EXPECT_EQ(r.weight_transforms_run, 0) << "the weight converted at batch 3 serves batch 8";
  EXPECT_EQ(dyn_->bindings_prepared(), 2);
  r = run_and_check(3, 3);
  EXPECT_EQ(dyn_->bindings_prepared(), 2) << "batch 3 again: its Executable is reused";
  r = run_and_check(1, 4);
  EXPECT_EQ(dyn_->bindings_prepared(), 3);
  ASSERT_NE(dyn_->executable({{"N", 8}}), nullptr);
  EXPECT_EQ(dyn_->executable({{"N", 2}}), nullptr);
  if (converts) {
    EXPECT_GT(dyn_->executable({{"N", 3}})->report().weight_bytes, 0) << "the first binding allocates it";
    EXPECT_EQ(dyn_->executable({{"N", 8}})->report().weight_bytes, 0) << "later ones share it";
  }
  // The caller rewrote the weights in place: every binding converts them again, once.
  dyn_->invalidate_weights();
  r = run_and_check(8, 5);
  EXPECT_EQ(r.weight_transforms_run, converts ? 1 : 0);
}

// prepare() plans and loads a binding ahead of its first run; the run then makes nothing new.
TEST_P(DynamicOn, PrepareMakesABindingReadyBeforeItsRun) {
  auto exe = dyn_->prepare({{"N", 5}});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  EXPECT_EQ((*exe)->plan().graph.tensor(*(*exe)->plan().graph.find_tensor("x")).shape, Shape({5, 8, 10, 10}));
  run_and_check(5, 6);
  EXPECT_EQ(dyn_->bindings_prepared(), 1);
}

// Specialize::in_background: the first run at batch 3 (whose own plan keeps conv tiles of its own: small batches
// fill an H200's waves better with smaller tiles) runs the batch-generic plan while the batch's own kernels
// compile; waiting swaps them in, and the next run uses them, with the weight converted once for both. Both runs
// match the reference. A graph whose own plan needs no kernel the generic one lacks (no GEMM) gets it at once.
TEST_P(DynamicOn, SpecializedKernelsSwapInAfterTheGenericOnesServe) {
  if (GetParam() == DeviceKind::ref) GTEST_SKIP() << "ref runs no kernels";
  CompileOptions co;
  co.specialize = CompileOptions::Specialize::in_background;
  auto d = engine_->compile_dynamic(graph_, co);
  ASSERT_TRUE(d.ok()) << d.status().message();
  dyn_.emplace(std::move(d).value());
  const DimBindings three{{"N", 3}};
  RunReport r = run_and_check(3, 11);
  EXPECT_EQ(r.weight_transforms_run, 1);
  const Executable* generic = dyn_->executable(three);
  ASSERT_NE(generic, nullptr);
  EXPECT_EQ(generic->plan().tiles, TilePolicy::generic_only) << "the generic kernels serve the first run";
  const std::vector<std::string> generic_entries = generic->report().entries;

  ASSERT_TRUE(dyn_->wait_specialized(three).ok());
  EXPECT_FALSE(dyn_->specializing(three));
  const Executable* own = dyn_->executable(three);
  ASSERT_NE(own, generic);
  EXPECT_EQ(own->plan().tiles, TilePolicy::generic) << "the binding's own plan";
  EXPECT_NE(own->report().entries, generic_entries);
  EXPECT_EQ(generic->report().entries, generic_entries) << "the generic Executable is kept alive";
  r = run_and_check(3, 12);
  EXPECT_EQ(r.weight_transforms_run, 0) << "the weight converted for the generic kernels serves the own ones";
  EXPECT_EQ(dyn_->bindings_prepared(), 1);

  // Pointwise ops alone: the same kernels either way, so the binding's own plan at once.
  Graph flat("flat");
  const DimExpr n = flat.dim("N", 1, 16);
  flat.output(flat.relu(flat.symbolic_input("x", {n, 64})), "y");
  auto fd = engine_->compile_dynamic(flat, co);
  ASSERT_TRUE(fd.ok()) << fd.status().message();
  auto exe = fd->prepare({{"N", 4}});
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  EXPECT_FALSE(fd->specializing({{"N", 4}}));
  EXPECT_EQ((*exe)->plan().tiles, TilePolicy::generic);
}

// A background compile that fails (here: under KILN_CACHE_ASSERT_HIT=1, whose every miss is an error, with
// the batch-generic kernels cached by a run at batch 9 and batch 16's own ones nowhere: above 8 rows the matmul
// is the tiled one, batch-generic too) leaves the generic kernels serving: runs stay right, and
// wait_specialized() is the compile's error.
TEST_P(DynamicOn, AFailedBackgroundCompileLeavesTheGenericKernels) {
  if (GetParam() != DeviceKind::emu) GTEST_SKIP() << "the emu cache's assert-hit mode makes the compile fail";
  char dir[] = "/tmp/kiln-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const testing::ScopedEnv cache("KILN_CACHE_DIR", dir);  // a cache of this test's own
  {
    CompileOptions generic;  // the batch-generic kernels alone, cached
    generic.plan.tiles = TilePolicy::generic_only;
    auto d = engine_->compile_dynamic(graph_, generic);
    ASSERT_TRUE(d.ok()) << d.status().message();
    dyn_.emplace(std::move(d).value());
    run_and_check(9, 21);
  }
  CompileOptions co;
  co.specialize = CompileOptions::Specialize::in_background;
  const testing::ScopedEnv hit("KILN_CACHE_ASSERT_HIT", "1");
  auto d = engine_->compile_dynamic(graph_, co);
  ASSERT_TRUE(d.ok()) << d.status().message();
  dyn_.emplace(std::move(d).value());
  params_.clear();
  run_and_check(16, 22);
  ASSERT_TRUE(dyn_->specializing({{"N", 16}})) << "batch 16's own plan needs kernels of its own";
  const Status s = dyn_->wait_specialized({{"N", 16}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("KILN_CACHE_ASSERT_HIT"), std::string::npos) << s.message();
  EXPECT_FALSE(dyn_->specializing({{"N", 16}}));
  EXPECT_EQ(dyn_->executable({{"N", 16}})->plan().tiles, TilePolicy::generic_only);
  run_and_check(16, 23);
  std::filesystem::remove_all(dir);
}

// Bindings that give no batch, or a batch the graph does not allow, are refused naming what is wrong; nothing
// is planned for them.
TEST_P(DynamicOn, RefusesBindingsThatGiveNoValidBatch) {
  const TensorMap in = inputs_at(4, 8);
  const Bindings good = bind_at(4, in);
  auto expect_refused = [&](const Bindings& b, std::vector<std::string> words) {
    const Status s = dyn_->run(b);
    ASSERT_FALSE(s.ok());
    for (const std::string& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message();
  };
  Bindings b = good;
  b["x"].bytes -= 4;  // not a whole number of images
  expect_refused(b, {"input 'x'", "[N, 8, 10, 10]", "12796 bytes", "dim 0"});
  b = good;
  b["z"].bytes = 5 * 4 * 6;  // z says N = 6, x says 4
  expect_refused(b, {"input 'z' dim 0 is 6", "input 'x' dim 0", "N = 4"});
  b = good;
  b["x"].bytes = 8 * 10 * 10 * 4 * 17, b["z"].bytes = 5 * 4 * 17;  // N = 17: outside [1, 16]
  expect_refused(b, {"N", "17", "16"});
  b = good;
  b.erase("z");
  expect_refused(b, {"input 'z'", "not bound"});
  b = good;
  b["y"].bytes = 5 * 4 * 3;  // the output sized for another batch: the Executable's own check
  expect_refused(b, {"'y'"});
  EXPECT_EQ(dyn_->bindings_prepared(), 1) << "only batch 4 (the wrong output size is found by its Executable)";
  // Values given instead of read: a symbol the graph does not have, and a value outside the range.
  EXPECT_FALSE(dyn_->run({{"M", 4}}, good).ok());
  const Status s = dyn_->run({{"N", 0}}, good);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("N"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Devices, DynamicOn, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<DeviceKind>& i) {
                           return std::string(device_kind_name(i.param));
                         });

}  // namespace
}  // namespace kiln
