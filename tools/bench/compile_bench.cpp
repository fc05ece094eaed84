// NVRTC compile times, measured side by side in one process: each kernel's first compile (for the very
// first row this includes loading NVRTC and creating the automatic PCH) and its steady state (median of 5),
// with the ratio to the floor (an empty kernel behind the same prelude: what every compile costs at least).
// Wall time and the calling thread's CPU time (NVRTC compiles on the calling thread; CPU time is the steadier
// number on a loaded machine).
// Not run by ctest. Usage: compile_bench [--quick]   (--quick: 2 repetitions instead of 5)
//                          compile_bench --warm-start [GRAPH.json] [--arch A] [--runs N]
//                          (Engine::compile's warm path, step by step: tools/bench/warm_start_bench.cpp)
// Rows: the fixed kernels of kKernels, then the first generated kernel of every family kiln has, taken
// from the sample graphs (generated exactly as `kiln prewarm` would). To add a fixed kernel: one row.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "codegen/nvrtc.h"
#include "kiln/json.h"
#include "runtime/kernel_provider.h"

namespace {

// Every kernel starts with the same prelude, as generated kernels do, so the automatic PCH is shared.
#define KILN_BENCH_PRELUDE "#include \"kiln/codegen.cuh\"\n"

struct Kernel {
  std::string name;
  std::string source;
};

const std::vector<Kernel> kKernels = {
    {"floor (empty kernel)", KILN_BENCH_PRELUDE R"(extern "C" __global__ void kiln_floor() {})"},
    {"pointwise add+relu f16", KILN_BENCH_PRELUDE R"(
extern "C" __global__ void kiln_pointwise(const __half* a, const __half* b, __half* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) {
    float v = __half2float(kiln::ld(a + i)) + __half2float(kiln::ld(b + i));
    kiln::st(y + i, __float2half(v > 0.f ? v : 0.f));
  }
})"},
};

// The first kernel of each family in the sample graphs.
std::vector<Kernel> generated_rows() {
  std::vector<Kernel> rows;
  std::vector<std::string> seen;
  {
    // The generated counterpart of the fixed add+relu row: kiln's pointwise family on a two-op group.
    kiln::Graph g("add_relu");
    kiln::Tensor a = g.input("a", {1024, 1024}, kiln::DType::f16), b = g.input("b", {1024, 1024}, kiln::DType::f16);
    g.output(g.relu(g.add(a, b)), "y");
    if (g.verify().ok()) {
      auto plan = kiln::plan_graph(g);
      auto ks = plan.ok() ? kiln::plan_kernels(*plan) : kiln::Result<std::vector<kiln::codegen::Kernel>>(plan.status());
      if (ks.ok()) rows.push_back({"pointwise add+relu f16 (generated)", ks->front().source});
    }
  }
  for (const char* sample : {"resnet50", "mlp_gelu", "groupnorm_silu_conv", "lstm_cell"}) {
    auto g = kiln::load_graph(std::string(KILN_SOURCE_DIR) + "/samples/graphs/" + sample + ".json");
    if (!g.ok()) continue;
    auto plan = kiln::plan_graph(*g);
    if (!plan.ok()) continue;
    auto ks = kiln::plan_kernels(*plan);
    if (!ks.ok()) continue;
    for (const auto& k : *ks) {
      const std::string family(kiln::kernel_family_name(k.family));
      if (std::find(seen.begin(), seen.end(), family) != seen.end()) continue;
      seen.push_back(family);
      rows.push_back({family + " (" + sample + ")", k.source});
    }
  }
  return rows;
}

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int warm_start_main(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--warm-start") == 0) return warm_start_main(argc, argv);
  const int reps = argc > 1 && std::strcmp(argv[1], "--quick") == 0 ? 2 : 5;
  const char* archs[] = {"sm_80", "sm_90"};
  std::printf("NVRTC built %s", kiln::codegen::nvrtc_build_version().c_str());
  const auto t0 = std::chrono::steady_clock::now();
  auto version = kiln::codegen::nvrtc_version_string();
  if (!version.ok()) {
    std::fprintf(stderr, "\n%s\n", version.status().message().c_str());
    return 1;
  }
  std::printf(", loaded %s in %.1f ms; median of %d\n\n", version->c_str(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), reps);
  std::printf("%-34s %-6s %9s %9s %9s %9s %7s %7s %5s %6s\n", "kernel", "arch", "first", "first", "steady", "steady",
              "x floor", "x floor", "regs", "spill");
  std::printf("%-34s %-6s %9s %9s %9s %9s %7s %7s\n", "", "", "wall ms", "cpu ms", "wall ms", "cpu ms", "wall", "cpu");
  for (const char* arch : archs) {
    double floor_wall = 0, floor_cpu = 0;
    std::vector<Kernel> rows = kKernels;
    for (Kernel& k : generated_rows()) rows.push_back(std::move(k));
    for (const Kernel& k : rows) {
      kiln::codegen::NvrtcOptions opts;
      opts.arch = arch;
      std::vector<double> wall, cpu;
      kiln::codegen::CompiledKernel last;
      for (int i = 0; i <= reps; ++i) {
        const double c0 = thread_cpu_ms();
        auto r = kiln::codegen::nvrtc_compile(k.source, opts);
        cpu.push_back(thread_cpu_ms() - c0);
        if (!r.ok()) {
          std::fprintf(stderr, "%s: %s\n", k.name.c_str(), r.status().message().c_str());
          return 1;
        }
        wall.push_back(r->compile_ms);
        last = std::move(*r);
      }
      const double steady_wall = median(std::vector<double>(wall.begin() + 1, wall.end()));
      const double steady_cpu = median(std::vector<double>(cpu.begin() + 1, cpu.end()));
      if (floor_wall == 0) floor_wall = steady_wall, floor_cpu = steady_cpu;
      std::printf("%-34s %-6s %9.1f %9.1f %9.1f %9.1f %7.2f %7.2f %5d %6d\n", k.name.c_str(), arch, wall[0], cpu[0],
                  steady_wall, steady_cpu, steady_wall / floor_wall, steady_cpu / floor_cpu, last.registers,
                  last.spill_store_bytes);
    }
  }
  return 0;
}
