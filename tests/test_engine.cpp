// The execution API (include/kiln/engine.h): compile once, run with bindings, on every device this build
// can reach. In kiln_tests the devices are ref and emu; the gpu test executable links the same object and
// runs the same tests on the GPU (tests/test_device.h, tests/gpu/).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen_check.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "runtime/device.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace kiln {
namespace {

Graph load_sample(const std::string& name) {
  auto g = load_graph(std::string(KILN_SOURCE_DIR) + "/samples/graphs/" + name + ".json");
  KILN_CHECK(g.ok(), g.status().message());
  return *g;
}

std::vector<DeviceKind> test_devices() {
  if (testing::on_cuda()) return {DeviceKind::cuda};
  return {DeviceKind::ref, DeviceKind::emu};
}

std::string device_param_name(const ::testing::TestParamInfo<DeviceKind>& i) {
  return std::string(device_kind_name(i.param));
}

// Device buffers for every input, parameter and output of a graph (outputs poisoned).
BoundBuffers upload_all(Engine& e, const Graph& g, const TensorMap& inputs) {
  auto b = upload_bindings(e, g, inputs);
  KILN_CHECK(b.ok(), b.status().message());
  return std::move(b).value();
}

HostTensor download(Engine& e, const Graph& g, const Bindings& b, const std::string& name) {
  const TensorInfo& ti = g.tensor(*g.find_tensor(name));
  std::vector<unsigned char> bytes(b.at(name).bytes);
  KILN_CHECK(e.synchronize().ok(), "synchronize");
  KILN_CHECK(e.download(bytes.data(), b.at(name).data, bytes.size()).ok(), "download");
  return from_device_bytes(bytes.data(), ti.shape, ti.dtype, ti.layout);
}

void expect_matches(const HostTensor& got, const HostTensor& want, const std::string& what) {
  const Comparison c = compare_tensors(got, want, tolerance_for(want.dtype));
  EXPECT_TRUE(c.ok) << what << ": " << c.problem;
}

class EngineOn : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    auto e = Engine::open(GetParam());
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_.emplace(std::move(e).value());
  }
  std::optional<Engine> engine_;
};

// Every sample through Engine::compile + run_on_host_tensors against run_reference on the same random inputs
// (f32; the per-dtype and ResNet-50 runs are in test_codegen_samples.cpp, through the same Executable).
TEST_P(EngineOn, EverySmallSampleMatchesReference) {
  for (const char* name :
       {"conv_bias_bn_relu", "resnet50_bottleneck", "groupnorm_silu_conv", "mlp_gelu", "lstm_cell", "swiglu_ffn"}) {
    SCOPED_TRACE(name);
    const Graph g = load_sample(name);
    const TensorMap inputs = random_inputs(g, 11);
    auto want = run_reference(g, inputs);
    ASSERT_TRUE(want.ok()) << want.status().message();
    auto exe = engine_->compile(g);
    ASSERT_TRUE(exe.ok()) << exe.status().message();
    EXPECT_EQ(exe->report().device, GetParam());
    EXPECT_EQ(exe->report().arch, engine_->arch());
    auto got = run_on_host_tensors(*engine_, *exe, inputs);
    ASSERT_TRUE(got.ok()) << got.status().message();
    for (const auto& [out, w] : *want) expect_matches(got->at(out), w, std::string(name) + " output " + out);
  }
}

// Weight transforms (KCRS -> KRSC) run on the first run, not again while the weight stays bound at the
// same address, again after rebinding it elsewhere or after invalidate_weights().
TEST_P(EngineOn, WeightTransformsRunOncePerBoundWeight) {
  const Graph g = load_sample("conv_bias_bn_relu");
  auto exe = engine_->compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const bool transforms = GetParam() != DeviceKind::ref;  // ref reads weights logically: nothing to convert
  EXPECT_EQ(exe->report().weight_transforms, transforms ? 1 : 0);

  TensorMap inputs = random_inputs(g, 5);
  BoundBuffers b = upload_all(*engine_, g, inputs);
  RunReport r;
  ASSERT_TRUE(exe->run(b.bindings, nullptr, &r).ok());
  EXPECT_EQ(r.weight_transforms_run, transforms ? 1 : 0);
  expect_matches(download(*engine_, g, b.bindings, "y"), run_reference(g, inputs)->at("y"), "first run");

  // A new input, the same weight: the converted weight is reused.
  inputs["x"] = random_tensor(inputs["x"].shape, inputs["x"].dtype, 99, 1);
  auto x = to_device_bytes(inputs["x"], g.tensor(*g.find_tensor("x")).layout);
  ASSERT_TRUE(engine_->upload(b.bindings["x"].data, x.data(), x.size()).ok());
  ASSERT_TRUE(exe->run(b.bindings, nullptr, &r).ok());
  EXPECT_EQ(r.weight_transforms_run, 0);
  expect_matches(download(*engine_, g, b.bindings, "y"), run_reference(g, inputs)->at("y"), "same weight");

  // Another weight at another address: converted again.
  inputs["conv.weight"] = random_tensor(inputs["conv.weight"].shape, inputs["conv.weight"].dtype, 7, 2);
  auto w = to_device_bytes(inputs["conv.weight"], g.tensor(*g.find_tensor("conv.weight")).layout);
  auto w2 = engine_->allocate(w.size());
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE(engine_->upload(w2->data(), w.data(), w.size()).ok());
  b.bindings["conv.weight"] = w2->binding();
  ASSERT_TRUE(exe->run(b.bindings, nullptr, &r).ok());
  EXPECT_EQ(r.weight_transforms_run, transforms ? 1 : 0);
  expect_matches(download(*engine_, g, b.bindings, "y"), run_reference(g, inputs)->at("y"), "rebound weight");

  // The same address rewritten in place: the caller says so, and the next run converts again.
  inputs["conv.weight"] = random_tensor(inputs["conv.weight"].shape, inputs["conv.weight"].dtype, 8, 2);
  w = to_device_bytes(inputs["conv.weight"], g.tensor(*g.find_tensor("conv.weight")).layout);
  ASSERT_TRUE(engine_->upload(w2->data(), w.data(), w.size()).ok());
  exe->invalidate_weights();
  ASSERT_TRUE(exe->run(b.bindings, nullptr, &r).ok());
  EXPECT_EQ(r.weight_transforms_run, transforms ? 1 : 0);
  expect_matches(download(*engine_, g, b.bindings, "y"), run_reference(g, inputs)->at("y"), "rewritten weight");
}

// A device whose allocator hands a freed block straight back to the next allocation of the same size, as
// glibc's malloc often does and CUDA caching allocators always do: a buffer freed after one call and a new
// one allocated for the next share an address, with other contents.
class RecyclingDevice : public runtime::Device {
 public:
  explicit RecyclingDevice(std::shared_ptr<runtime::Device> inner) : inner_(std::move(inner)) {}
  ~RecyclingDevice() override {
    for (auto& [bytes, blocks] : free_) {
      for (void* p : blocks) inner_->release(p);
    }
  }
  DeviceKind kind() const override { return inner_->kind(); }
  std::string name() const override { return inner_->name(); }
  std::string arch() const override { return inner_->arch(); }
  Target target() const override { return inner_->target(); }
  Result<void*> allocate(size_t bytes) override {
    if (auto it = free_.find(bytes); it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      ++reused;
      return p;
    }
    KILN_ASSIGN_OR_RETURN(void* p, inner_->allocate(bytes));
    size_of_[p] = bytes;
    return p;
  }
  void release(void* p) override { free_[size_of_.at(p)].push_back(p); }
  Status upload(void* dst, const void* src, size_t bytes) override { return inner_->upload(dst, src, bytes); }
  Status download(void* dst, const void* src, size_t bytes) override { return inner_->download(dst, src, bytes); }
  Status fill(void* dst, unsigned char byte, size_t bytes, Stream stream) override {
    return inner_->fill(dst, byte, bytes, stream);
  }
  Status synchronize(Stream stream) override { return inner_->synchronize(stream); }
  Result<std::unique_ptr<runtime::LoadedKernels>> load(const std::vector<const codegen::Kernel*>& distinct,
                                                       const std::string& arch, const std::string& unit_name,
                                                       CompileReport& report) override {
    return inner_->load(distinct, arch, unit_name, report);
  }
  int reused = 0;

 private:
  std::shared_ptr<runtime::Device> inner_;
  std::map<void*, size_t> size_of_;
  std::map<size_t, std::vector<void*>> free_;
};

Result<std::shared_ptr<runtime::Device>> open_device(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::ref: return runtime::make_ref_device();
    case DeviceKind::emu: return runtime::make_emu_device();
    default: return runtime::make_cuda_device(EngineOptions{});
  }
}

// run_on_host_tensors uploads its inputs to buffers of its own and frees them when it returns, so the
// next call's weight may land at the address of this call's weight with other values: the converted
// weights of an earlier call must never be taken for this call's (nor for a later run of the caller's own
// buffers at a freed address). Alternating two weights, every result matches run_reference (f32
// tolerance_for: rtol 1e-4, atol 1e-5) and every call converts its weight.
TEST_P(EngineOn, RunOnHostTensorsNeverReusesAnotherCallsConvertedWeights) {
  auto inner = open_device(GetParam());
  ASSERT_TRUE(inner.ok()) << inner.status().message();
  auto device = std::make_shared<RecyclingDevice>(*inner);
  Engine engine = runtime::engine_on(device);
  const Graph g = load_sample("conv_bias_bn_relu");
  auto exe = engine.compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const bool transforms = GetParam() != DeviceKind::ref;
  EXPECT_EQ(exe->report().weight_transforms, transforms ? 1 : 0);

  TensorMap a = random_inputs(g, 5);
  TensorMap b = a;
  const HostTensor& w = a.at("conv.weight");
  b["conv.weight"] = random_tensor(w.shape, w.dtype, 7, 2, ValueDomain::nonzero);
  ASSERT_NE(a.at("conv.weight").data, b.at("conv.weight").data);
  const HostTensor want_a = run_reference(g, a)->at("y");
  const HostTensor want_b = run_reference(g, b)->at("y");
  ASSERT_FALSE(compare_tensors(want_a, want_b, tolerance_for(DType::f32)).ok) << "the two weights must matter";

  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const bool first = i % 2 == 0;
    RunReport r;
    auto got = run_on_host_tensors(engine, *exe, first ? a : b, &r);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(r.weight_transforms_run, transforms ? 1 : 0);
    expect_matches(got->at("y"), first ? want_a : want_b, first ? "weight a" : "weight b");
  }
  EXPECT_GT(device->reused, 0) << "the calls' buffers should have shared addresses";

  // The caller's own buffers, at the addresses the last call (weight b) freed, hold weight a.
  const int reused = device->reused;
  BoundBuffers mine = upload_all(engine, g, a);
  EXPECT_GT(device->reused, reused);
  RunReport r;
  ASSERT_TRUE(exe->run(mine.bindings, nullptr, &r).ok());
  EXPECT_EQ(r.weight_transforms_run, transforms ? 1 : 0);
  expect_matches(download(engine, g, mine.bindings, "y"), want_a, "the caller's buffers after run_on_host_tensors");
}

// Bindings are checked before anything runs, each mistake named with expected vs actual.
TEST_P(EngineOn, BadBindingsAreClearErrors) {
  const Graph g = load_sample("conv_bias_bn_relu");
  auto exe = engine_->compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  BoundBuffers good = upload_all(*engine_, g, random_inputs(g, 1));
  auto expect_error = [&](const Bindings& b, const std::string& needle) {
    Status s = exe->run(b);
    EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.message();
    EXPECT_NE(s.message().find(needle), std::string::npos) << "'" << s.message() << "' lacks '" << needle << "'";
  };
  Bindings b = good.bindings;
  b.erase("x");
  expect_error(b, "input 'x' (f32 [1, 64, 56, 56] NCHW) is not bound");
  b = good.bindings;
  b.erase("conv.weight");
  expect_error(b, "parameter 'conv.weight'");
  b = good.bindings;
  b.erase("y");
  expect_error(b, "output 'y'");
  b = good.bindings;
  b["z"] = good.bindings["x"];
  expect_error(b, "unknown binding 'z'");
  b = good.bindings;
  b["x"].bytes -= 4;
  expect_error(b, "binding 'x': expected 802816 bytes (f32 [1, 64, 56, 56] NCHW), got 802812");
  b = good.bindings;
  b["x"].data = nullptr;
  expect_error(b, "binding 'x' is a null pointer");
  b = good.bindings;
  b["x"].data = static_cast<char*>(b["x"].data) + 4;
  expect_error(b, "is not 16-byte aligned");
  b = good.bindings;
  b["y"] = {b["x"].data, b["y"].bytes};
  expect_error(b, "output 'y' overlaps the memory bound to 'x'");
  EXPECT_EQ(*exe->binding_bytes("x"), 802816u);
  EXPECT_EQ(exe->binding_bytes("nope").status().code(), StatusCode::not_found);
  // The good bindings still run after all of that.
  EXPECT_TRUE(exe->run(good.bindings).ok());
}

// A caller-owned workspace: required when kiln allocates none, checked for size.
TEST_P(EngineOn, CallerWorkspace) {
  if (GetParam() == DeviceKind::ref) GTEST_SKIP() << "ref keeps intermediates in f64 tensors of its own";
  const Graph g = load_sample("resnet50_bottleneck");
  CompileOptions co;
  co.allocate_workspace = false;
  auto exe = engine_->compile(g, co);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  ASSERT_GT(exe->workspace_bytes(), 0);
  const TensorMap inputs = random_inputs(g, 3);
  BoundBuffers b = upload_all(*engine_, g, inputs);
  Status s = exe->run(b.bindings);
  EXPECT_NE(s.message().find("needs a workspace of"), std::string::npos) << s.message();
  auto small = engine_->allocate(static_cast<size_t>(exe->workspace_bytes()) - 256);
  ASSERT_TRUE(small.ok());
  s = exe->set_workspace(small->data(), small->bytes());
  EXPECT_NE(s.message().find("needs"), std::string::npos) << s.message();
  auto ws = engine_->allocate(static_cast<size_t>(exe->workspace_bytes()));
  ASSERT_TRUE(ws.ok());
  ASSERT_TRUE(exe->set_workspace(ws->data(), ws->bytes()).ok());
  ASSERT_TRUE(exe->run(b.bindings).ok());
  expect_matches(download(*engine_, g, b.bindings, "y"), run_reference(g, inputs)->at("y"), "caller workspace");
}

// cuda_graph: the first run captures, later runs with the same bindings replay, new bindings recapture; the
// results equal a plain run's. Elsewhere the option is accepted and runs launch directly.
TEST_P(EngineOn, CudaGraphReplayMatchesDirectRuns) {
  const Graph g = load_sample("resnet50_bottleneck");
  CompileOptions co;
  co.cuda_graph = true;
  auto exe = engine_->compile(g, co);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  const bool graphs = GetParam() == DeviceKind::cuda;
  TensorMap inputs = random_inputs(g, 4);
  BoundBuffers b = upload_all(*engine_, g, inputs);
  RunReport r;
  ASSERT_TRUE(exe->run(b.bindings, nullptr, &r).ok());
  EXPECT_FALSE(r.graph_replayed);
  const HostTensor first = download(*engine_, g, b.bindings, "y");
  expect_matches(first, run_reference(g, inputs)->at("y"), "captured run");
  ASSERT_TRUE(engine_->fill(b.bindings["y"].data, 0xff, b.bindings["y"].bytes).ok());
  ASSERT_TRUE(exe->run(b.bindings, nullptr, &r).ok());
  EXPECT_EQ(r.graph_replayed, graphs);
  EXPECT_EQ(download(*engine_, g, b.bindings, "y").data, first.data) << "a replay must equal the captured run";

  // Another output buffer: a new capture, the same values.
  auto y2 = engine_->allocate(b.bindings["y"].bytes);
  ASSERT_TRUE(y2.ok());
  ASSERT_TRUE(engine_->fill(y2->data(), 0xff, y2->bytes()).ok());
  b.bindings["y"] = y2->binding();
  ASSERT_TRUE(exe->run(b.bindings, nullptr, &r).ok());
  EXPECT_FALSE(r.graph_replayed);
  EXPECT_EQ(download(*engine_, g, b.bindings, "y").data, first.data);
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineOn, ::testing::ValuesIn(test_devices()), device_param_name);

TEST(Engine, DeviceNames) {
  EXPECT_EQ(parse_device_kind("auto"), DeviceKind::automatic);
  EXPECT_EQ(parse_device_kind("cuda"), DeviceKind::cuda);
  EXPECT_EQ(parse_device_kind("gpu"), std::nullopt);
  for (DeviceKind d : {DeviceKind::ref, DeviceKind::emu, DeviceKind::cuda, DeviceKind::automatic}) {
    EXPECT_EQ(parse_device_kind(device_kind_name(d)), d);
  }
}

// Without a driver, cuda is unavailable with a message that says so, and auto falls back to emu.
TEST(Engine, CudaWithoutDriverIsUnavailableAndAutoFallsBackToEmu) {
  auto cuda = Engine::open(DeviceKind::cuda);
  auto any = Engine::open(DeviceKind::automatic);
  ASSERT_TRUE(any.ok()) << any.status().message();
  if (cuda.ok()) {
    EXPECT_EQ(any->device(), DeviceKind::cuda);
    GTEST_SKIP() << "this machine has a GPU: " << cuda->device_name();
  }
  EXPECT_EQ(cuda.status().code(), StatusCode::unavailable);
  EXPECT_TRUE(cuda.status().message().find("no CUDA driver found") != std::string::npos ||
              cuda.status().message().find("no CUDA device") != std::string::npos)
      << cuda.status().message();
  EXPECT_EQ(any->device(), DeviceKind::emu);
}

// Kernels compiled for an older arch than the device's (a shipped cache, --arch): the cubin does not load
// on the device, its PTX does (the driver compiles it), and the results are the same.
TEST(EngineCuda, CubinForAnotherArchFallsBackToPtx) {
  if (!testing::on_cuda()) GTEST_SKIP() << "a test of kiln_gpu_tests (ctest leaves it out of kiln_tests)";
  auto e = Engine::open(DeviceKind::cuda);
  ASSERT_TRUE(e.ok()) << e.status().message();
  const Graph g = load_sample("conv_bias_bn_relu");
  auto native = e->compile(g);
  ASSERT_TRUE(native.ok()) << native.status().message();
  EXPECT_EQ(native->report().ptx_loaded, 0);
  if (native->report().arch.rfind("sm_8", 0) == 0) GTEST_SKIP() << "the device is sm_8x: no older arch kiln supports";
  CompileOptions co;
  co.arch = "sm_80";
  auto exe = e->compile(g, co);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  EXPECT_EQ(exe->report().arch, "sm_80");
  EXPECT_EQ(exe->report().ptx_loaded, exe->report().distinct_kernels);
  const TensorMap inputs = random_inputs(g, 31);
  auto got = run_on_host_tensors(*e, *exe, inputs);
  ASSERT_TRUE(got.ok()) << got.status().message();
  expect_matches(got->at("y"), run_reference(g, inputs)->at("y"), "PTX-loaded kernels");
}

// The CLI in a real process with the driver library pointed elsewhere: --device cuda says there is no
// driver (exit 1), the toolkit's stub is recognised as one, and --device auto runs on emu.
class EngineCli : public ::kiln::TempDirTest {
 protected:
  subprocess::Proc kiln_with_driver(const std::string& driver, const std::vector<std::string>& args) {
    std::vector<std::string> all{"KILN_CUDA_DRIVER_LIBRARY=" + driver, KILN_CLI_PATH};
    all.insert(all.end(), args.begin(), args.end());
    return subprocess::run_process("/usr/bin/env", all, dir_);
  }
  const std::string graph_ = std::string(KILN_SOURCE_DIR) + "/samples/graphs/conv_bias_bn_relu.json";
};

TEST_F(EngineCli, NoDriverMeansNoCudaAndAutoRunsOnEmu) {
  auto p = kiln_with_driver("/nonexistent/libcuda.so.1", {"run", graph_, "--device", "cuda"});
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_NE(p.err.find("no CUDA driver found: cannot open /nonexistent/libcuda.so.1"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("--device emu"), std::string::npos) << p.err;

  p = kiln_with_driver("/nonexistent/libcuda.so.1", {"run", graph_, "--device", "auto", "--check"});
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("device: emu"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("kernels: 1 launched, 2 distinct, 1 weight transform"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("check against ref"), std::string::npos) << p.out;
}

#ifdef KILN_CUDA_STUB_LIBRARY
TEST_F(EngineCli, TheToolkitsStubIsNotADriver) {
  auto p = kiln_with_driver(KILN_CUDA_STUB_LIBRARY, {"run", graph_, "--device", "cuda"});
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_NE(p.err.find("is the CUDA toolkit's stub library, not a driver"), std::string::npos) << p.err;
}
#endif

}  // namespace
}  // namespace kiln
