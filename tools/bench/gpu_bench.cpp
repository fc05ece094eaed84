// gpu_bench: kiln's fused plans timed on the GPU, for tools/bench/gpu_bench_peers.py to set beside PyTorch.
//
//   gpu_bench --out RESULTS.json --graphs-dir DIR [--suite conv,block,memory] [--quick] [--device cuda|emu]
//             [--estimates PROFILE.json]
//
// Suites:
//   conv   conv + bias + batch_norm + relu on every distinct convolution shape of ResNet-50 v1.5 (taken
//          from samples/graphs/resnet50.json), batch 1 and 32, f16 and bf16, NHWC activations, KRSC weights
//   block  the ResNet-50 bottleneck, the GroupNorm+SiLU ResBlock and the MLP samples in f16 and bf16 (4-D
//          activations NHWC, conv weights KRSC), the bottleneck also at batch 32
//   memory the memory-bound families on tensors far larger than the L2 (add+relu, group_norm+silu,
//          max_pool, layer_norm, softmax; f16 and bf16), against the copy bandwidth measured in the same run
// Each case's graph is written to DIR (kiln JSON, what the peers script interprets), every kernel is
// obtained up front in one parallel batch (cache or NVRTC), then each case is checked against `ref`
// (batch 1 and the memory suite: the f64 reference of a batch-32 convolution takes seconds) and timed with CUDA events
// around single runs: warm-up, then runs until at least 50 runs and 200 ms (at most 1000), rotating
// among binding sets that together exceed 3× the L2 so that runs do not read a warm cache; median, p10, p90.
// The device-to-device copy bandwidth is measured in the same run as the memory ceiling.
//
// --estimates takes profile_bench's --json output (kiln profile's estimates for the bf16 batch-32 convolutions
// and the memory suite) and prints each case's estimated time beside the measured one (docs/profile.md).
//
// --device emu runs the same code on the emulator (a smoke test of this program on a machine without a
// GPU; --quick keeps it to a few small cases and runs). Its times mean nothing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/compare.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/reference.h"
#include "runtime/cuda/driver.h"
#include "runtime/kernel_provider.h"
#include "tools/bench/bench_suites.h"

namespace {

using namespace kiln;

using bench::ConvShape;

struct Case {
  std::string name, suite, dtype;
  int64_t batch = 1;
  Graph graph;
  double flops = 0;
  int64_t min_bytes = 0;
  // results
  std::vector<double> ms;
  double estimated_ms = 0;  // kiln profile's estimate (--estimates), 0 when there is none
  int kernels = 0;
  std::string check = "skipped";
  std::string error;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "gpu_bench: %s\n", msg.c_str());
  std::exit(1);
}

template <class T>
T must(Result<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.status().message());
  return std::move(r).value();
}

int64_t bytes_of(const Graph& g, Tensor t) { return g.shape(t).numel() * dtype_size(g.dtype(t)); }

// Each input and parameter read once, each output written once.
int64_t min_bytes(const Graph& g) {
  int64_t b = 0;
  for (Tensor t : g.bound_tensors()) b += bytes_of(g, t);
  for (Tensor t : g.outputs()) b += bytes_of(g, t);
  return b;
}

Case conv_case(const ConvShape& s, int64_t n, DType dt) {
  Case c;
  c.suite = "conv";
  c.dtype = std::string(dtype_name(dt));
  c.batch = n;
  c.name = bench::conv_label(s, n, dt);
  c.graph = must(bench::conv_graph(s, n, dt), c.name);
  const Shape& out = c.graph.shape(c.graph.outputs()[0]);
  c.flops = 2.0 * static_cast<double>(n * s.K * out[2] * out[3] * s.C * s.R * s.S);
  c.min_bytes = min_bytes(c.graph);
  return c;
}

// The memory-bound families on tensors far larger than the L2: pointwise, norm, pool and row kernels
// should run near copy bandwidth.
Case memory_case(const std::string& what, DType dt) {
  Case c;
  c.suite = "memory";
  c.dtype = std::string(dtype_name(dt));
  c.graph = must(bench::memory_graph(what, dt, &c.name), what);
  c.batch = c.graph.shape(c.graph.bound_tensors()[0])[0] == 32 ? 32 : 1;
  c.min_bytes = min_bytes(c.graph);
  return c;
}

// A sample in dtype `dt` with NHWC activations and KRSC conv weights, batch `n` (4-D inputs/outputs only).
Case block_case(const std::string& sample, DType dt, int64_t n) {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/samples/graphs/" + sample + ".json");
  nlohmann::json j = nlohmann::json::parse(f);
  std::set<std::string> conv_weights;
  for (const auto& node : j["nodes"]) {
    if (node["op"] == "conv2d") conv_weights.insert(node["inputs"]["w"].get<std::string>());
  }
  for (auto& t : j["tensors"]) {
    t["dtype"] = std::string(dtype_name(dt));
    if (t["shape"].size() != 4) continue;
    if (conv_weights.count(t["name"].get<std::string>())) {
      t["layout"] = "KRSC";
    } else {
      t["layout"] = "NHWC";
      if (t["kind"] != "parameter") t["shape"][0] = n;
    }
  }
  Case c;
  c.suite = "block";
  c.dtype = std::string(dtype_name(dt));
  c.batch = n;
  c.name = fmt::format("{} b{} {}", sample, n, c.dtype);
  j["name"] = fmt::format("{}_b{}_{}", sample, n, c.dtype);
  c.graph = must(graph_from_json(j.dump(), sample), c.name);
  Status st = c.graph.verify();
  if (!st.ok()) die(c.name + ": " + st.message());
  for (const Node& node : c.graph.nodes()) {
    if (node.op_text == "conv2d") {
      const Shape& w = c.graph.shape(node.inputs[1][0]);
      const Shape& y = c.graph.shape(node.outputs[0]);
      c.flops += 2.0 * static_cast<double>(y.numel() * w[1] * w[2] * w[3]);
    } else if (node.op_text == "matmul") {
      const Shape& a = c.graph.shape(node.inputs[0][0]);
      const Shape& y = c.graph.shape(node.outputs[0]);
      c.flops += 2.0 * static_cast<double>(y.numel() * a[a.rank() - 1]);
    }
  }
  c.min_bytes = min_bytes(c.graph);
  return c;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::lround(p * static_cast<double>(v.size() - 1)))];
}

// Times on the GPU with driver events; on emu with the host clock (the emulator is synchronous).
class Timer {
 public:
  explicit Timer(bool gpu) : gpu_(gpu) {
    if (!gpu_) return;
    d_ = must(cuda::driver(), "driver");
    d_->cuEventCreate(&start_, 0);
    d_->cuEventCreate(&stop_, 0);
  }
  template <class F>
  double time_ms(F f) {
    if (!gpu_) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    d_->cuEventRecord(start_, nullptr);
    f();
    d_->cuEventRecord(stop_, nullptr);
    d_->cuEventSynchronize(stop_);
    float ms = 0;
    d_->cuEventElapsedTime(&ms, start_, stop_);
    return ms;
  }

 private:
  bool gpu_;
  const cuda::Driver* d_ = nullptr;
  cuda::CUevent start_ = nullptr, stop_ = nullptr;
};

// Device-to-device copy bandwidth, counting bytes read and written.
double copy_gbps(Engine& e, Timer& timer) {
  const size_t bytes = size_t{1} << 30;
  auto a = must(e.allocate(bytes), "allocate");
  auto b = must(e.allocate(bytes), "allocate");
  const cuda::Driver* d = must(cuda::driver(), "driver");
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    double t = timer.time_ms([&] {
      d->cuMemcpyDtoDAsync(reinterpret_cast<cuda::CUdeviceptr>(b.data()), reinterpret_cast<cuda::CUdeviceptr>(a.data()),
                           bytes, nullptr);
    });
    if (i >= 3) ms.push_back(t);
  }
  return 2.0 * static_cast<double>(bytes) / (percentile(ms, 0.5) * 1e-3) / 1e9;
}

// Estimated milliseconds per case from profile_bench --json (a row per kernel: their sum), or none.
std::map<std::string, double> load_estimates(const std::string& path) {
  std::map<std::string, double> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) die("--estimates: cannot read " + path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_array()) die("--estimates: " + path + " is not profile_bench's --json output (a JSON array)");
  for (const auto& row : j) {
    if (!row.contains("case") || !row["case"].is_string() || !row.contains("estimated_us") ||
        !row["estimated_us"].is_number())
      die("--estimates: " + path + ": a row without \"case\" and \"estimated_us\"");
    out[row["case"].get<std::string>()] += row["estimated_us"].get<double>() * 1e-3;
  }
  return out;
}

void run_case(Engine& e, Case& c, Timer& timer, bool quick, int64_t l2_bytes) {
  auto exe_r = e.compile(c.graph);
  if (!exe_r.ok()) {
    c.error = exe_r.status().message();
    return;
  }
  Executable exe = std::move(exe_r).value();
  c.kernels = exe.report().launches;
  const Graph& g = exe.plan().graph;

  // Binding sets: every input, parameter and output; enough sets to exceed 3× the L2.
  const int64_t set_bytes = std::max<int64_t>(min_bytes(g), 1);
  const int sets = quick ? 1 : static_cast<int>(std::clamp<int64_t>((3 * l2_bytes + set_bytes - 1) / set_bytes, 1, 64));
  std::vector<std::vector<DeviceBuffer>> owned(static_cast<size_t>(sets));
  std::vector<Bindings> bindings(static_cast<size_t>(sets));
  // Random values for set 0; the other sets hold the same bytes at other addresses (what matters for
  // rotation is that a run does not find its data in the L2, and generating 64 random sets would take
  // longer than timing them).
  const TensorMap inputs0 = random_inputs(g, 1);
  std::map<std::string, std::vector<unsigned char>> host;
  for (const auto& [name, t] : inputs0) host[name] = to_device_bytes(t, g.tensor(*g.find_tensor(name)).layout);
  for (int s = 0; s < sets; ++s) {
    for (const auto& [name, bytes] : host) {
      auto buf = must(e.allocate(bytes.size()), "allocate");
      Status st = e.upload(buf.data(), bytes.data(), bytes.size());
      if (!st.ok()) die(st.message());
      bindings[static_cast<size_t>(s)][name] = buf.binding();
      owned[static_cast<size_t>(s)].push_back(std::move(buf));
    }
    for (Tensor t : g.outputs()) {
      auto buf = must(e.allocate(static_cast<size_t>(bytes_of(g, t))), "allocate");
      Status st = e.fill(buf.data(), 0xff, buf.bytes());  // poison: NaN
      if (!st.ok()) die(st.message());
      bindings[static_cast<size_t>(s)][g.tensor(t).name] = buf.binding();
      owned[static_cast<size_t>(s)].push_back(std::move(buf));
    }
  }

  // Correctness of set 0 against the reference (batch 1), before any timing.
  Status st = exe.run(bindings[0]);
  if (st.ok()) st = e.synchronize();
  if (!st.ok()) {
    c.error = st.message();
    return;
  }
  if (c.batch == 1 || c.suite == "memory") {  // the f64 reference of a batch-32 convolution takes seconds
    auto want = run_reference(g, inputs0);
    if (!want.ok()) die(want.status().message());
    c.check = "ok";
    for (Tensor t : g.outputs()) {
      const TensorInfo& ti = g.tensor(t);
      std::vector<unsigned char> bytes(static_cast<size_t>(bytes_of(g, t)));
      st = e.download(bytes.data(), bindings[0][ti.name].data, bytes.size());
      if (!st.ok()) die(st.message());
      const Comparison cmp = compare_tensors(from_device_bytes(bytes.data(), ti.shape, ti.dtype, ti.layout),
                                             want->at(ti.name), tolerance_for(ti.dtype));
      if (!cmp.ok) c.check = "failed: " + ti.name + ": " + cmp.problem;
    }
  }

  const int warmup = quick ? 1 : 5, min_runs = quick ? 2 : 50, max_runs = quick ? 2 : 1000;
  const double min_total_ms = quick ? 0 : 200;
  for (int i = 0; i < warmup; ++i) (void)exe.run(bindings[static_cast<size_t>(i % sets)]);
  double total = 0;
  for (int i = 0; i < max_runs && (i < min_runs || total < min_total_ms); ++i) {
    const Bindings& b = bindings[static_cast<size_t>(i % sets)];
    Status rs;
    const double ms = timer.time_ms([&] { rs = exe.run(b); });
    if (!rs.ok()) {
      c.error = rs.message();
      return;
    }
    c.ms.push_back(ms);
    total += ms;
  }
  st = e.synchronize();
  if (!st.ok()) c.error = st.message();
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, graphs_dir = "gpu_bench_graphs", suites = "conv,block,memory", device = "cuda", estimates_path;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--out") {
      out_path = value();
    } else if (a == "--graphs-dir") {
      graphs_dir = value();
    } else if (a == "--suite") {
      suites = value();
    } else if (a == "--device") {
      device = value();
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--estimates") {
      estimates_path = value();
    } else {
      die("unknown option " + a + " (expected --out, --graphs-dir, --suite, --device, --quick, --estimates)");
    }
  }
  const auto kind = parse_device_kind(device);
  if (!kind || (*kind != DeviceKind::cuda && *kind != DeviceKind::emu)) die("--device must be cuda or emu");
  Engine engine = must(Engine::open(*kind), "opening the device");
  const bool gpu = engine.device() == DeviceKind::cuda;
  std::printf("gpu_bench on %s\n", engine.device_name().c_str());

  std::vector<Case> cases;
  if (suites.find("conv") != std::string::npos) {
    std::vector<ConvShape> shapes = must(bench::resnet50_conv_shapes(KILN_SOURCE_DIR), "resnet50.json");
    std::printf("ResNet-50 distinct convolution shapes: %zu\n", shapes.size());
    if (quick) shapes.resize(std::min<size_t>(shapes.size(), 2));
    for (DType dt : {DType::f16, DType::bf16}) {
      for (int64_t n : quick ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 32}) {
        for (const ConvShape& s : shapes) cases.push_back(conv_case(s, n, dt));
      }
    }
  }
  if (suites.find("memory") != std::string::npos) {
    for (DType dt : {DType::f16, DType::bf16}) {
      for (const std::string& m : bench::memory_cases()) {
        if (quick && m != "add_relu") continue;
        cases.push_back(memory_case(m, dt));
      }
    }
  }
  if (suites.find("block") != std::string::npos) {
    for (DType dt : {DType::f16, DType::bf16}) {
      for (const char* s : {"resnet50_bottleneck", "groupnorm_silu_conv", "mlp_gelu"}) {
        if (quick && std::string(s) != "mlp_gelu") continue;
        cases.push_back(block_case(s, dt, 1));
      }
      if (!quick) cases.push_back(block_case("resnet50_bottleneck", dt, 32));
    }
  }
  std::filesystem::create_directories(graphs_dir);
  for (const Case& c : cases) {
    Status st = save_graph(c.graph, graphs_dir + "/" + c.graph.name() + ".json");
    if (!st.ok()) die(st.message());
  }

  // Every kernel of every case in one parallel batch, so that compiles overlap (the cases then hit the cache).
  if (gpu) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<codegen::Kernel> all;
    std::set<std::string> seen;  // sources: what identifies a kernel (entry names are for reading)
    for (const Case& c : cases) {
      auto plan = plan_graph(c.graph, {.target = engine.target()});  // as Engine::compile plans them
      if (!plan.ok()) continue;                                      // reported when the case runs
      auto ks = plan_kernels(*plan);
      if (!ks.ok()) continue;
      for (auto& k : *ks) {
        if (seen.insert(k.source).second) all.push_back(std::move(k));
      }
    }
    KernelCache cache = must(KernelCache::open(must(CacheConfig::from_env(), "cache config")), "cache");
    ObtainOptions oo;
    oo.archs = {engine.arch()};
    ObtainResult r = obtain_kernels(cache, all, oo);
    std::printf("kernels: %d distinct for %s, %d cached, %d compiled, %d failed (%.1f s)\n", r.total,
                oo.archs[0].c_str(), r.cached, r.compiled, r.failed,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (const std::string& e : r.errors) std::printf("  %s\n", e.c_str());
  }

  Timer timer(gpu);
  const double copy = gpu ? copy_gbps(engine, timer) : 0;
  if (gpu) std::printf("device-to-device copy: %.0f GB/s (read + write)\n", copy);
  int64_t l2 = 50 << 20;
  if (gpu) {
    const cuda::Driver* d = must(cuda::driver(), "driver");
    int dev_l2 = 0;
    if (d->cuDeviceGetAttribute(&dev_l2, cuda::kAttrL2CacheSize, 0) == cuda::kSuccess && dev_l2 > 0) l2 = dev_l2;
  }

  const std::map<std::string, double> estimates = load_estimates(estimates_path);
  for (Case& c : cases) {
    if (auto it = estimates.find(c.name); it != estimates.end()) c.estimated_ms = it->second;
  }
  std::printf("%-44s %9s %9s %9s %8s %8s %9s %8s  %s\n", "case", "kiln ms", "p10", "p90", "TFLOP/s", "GB/s", "est ms",
              "meas/est", "check");
  nlohmann::json results;
  results["device"] = engine.device_name();
  results["copy_gbps"] = copy;
  results["l2_bytes"] = l2;
  results["cases"] = nlohmann::json::array();
  for (Case& c : cases) {
    run_case(engine, c, timer, quick, l2);
    const double med = percentile(c.ms, 0.5);
    if (c.error.empty()) {
      const std::string est = c.estimated_ms > 0 ? fmt::format("{:9.4f} {:8.2f}", c.estimated_ms, med / c.estimated_ms)
                                                 : fmt::format("{:>9} {:>8}", "-", "-");
      std::printf("%-44s %9.4f %9.4f %9.4f %8.1f %8.0f %s  %s\n", c.name.c_str(), med, percentile(c.ms, 0.1),
                  percentile(c.ms, 0.9), c.flops / (med * 1e-3) / 1e12,
                  static_cast<double>(c.min_bytes) / (med * 1e-3) / 1e9, est.c_str(), c.check.c_str());
    } else {
      std::printf("%-44s FAILED: %s\n", c.name.c_str(), c.error.c_str());
    }
    std::fflush(stdout);
    nlohmann::json j;
    j["name"] = c.name;
    j["suite"] = c.suite;
    j["graph"] = std::filesystem::absolute(graphs_dir + "/" + c.graph.name() + ".json").string();
    j["dtype"] = c.dtype;
    j["batch"] = c.batch;
    j["kernels"] = c.kernels;
    j["flops"] = c.flops;
    j["min_bytes"] = c.min_bytes;
    j["check"] = c.error.empty() ? c.check : "failed: " + c.error;
    if (c.estimated_ms > 0) j["estimated_ms"] = c.estimated_ms;
    if (c.error.empty() && !c.ms.empty()) {
      j["kiln_ms"] = med;
      j["kiln_ms_p10"] = percentile(c.ms, 0.1);
      j["kiln_ms_p90"] = percentile(c.ms, 0.9);
      j["runs"] = c.ms.size();
    } else {
      j["kiln_ms"] = nullptr;
      j["error"] = c.error;
    }
    results["cases"].push_back(j);
  }
  if (!out_path.empty()) {
    std::ofstream(out_path) << results.dump(1) << "\n";
    std::printf("results: %s\n", out_path.c_str());
  }
  bool failed = false;
  for (const Case& c : cases) failed = failed || !c.error.empty() || c.check.rfind("failed", 0) == 0;
  return failed ? 1 : 0;
}
