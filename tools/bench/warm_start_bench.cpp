// A warm start in a running process (a server compiling a graph whose kernels are cached), step by step:
// load the graph's JSON, plan it, generate its kernels' sources, and obtain every cubin from the kernel
// cache. That is Engine::compile on cuda up to loading the modules into the driver (cuModuleLoadData, which
// needs a GPU and is not measured here). Issue 32's target for the whole: 2 ms for ResNet-50.
// The cache is KILN_CACHE_DIR's (or the default); the first run compiles what is missing (reported, not
// timed). Medians of --runs runs (default 20). Part of compile_bench; not run by ctest.
// Usage: compile_bench --warm-start [GRAPH.json] [--arch sm_90] [--runs N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/json.h"
#include "runtime/kernel_provider.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// argv[1] is "--warm-start".
int warm_start_main(int argc, char** argv) {
  std::string path = "samples/graphs/resnet50.json", arch = "sm_90";
  int runs = 20;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--arch") && i + 1 < argc) {
      arch = argv[++i];
    } else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (argv[i][0] != '-') {
      path = argv[i];
    } else {
      std::fprintf(stderr, "usage: compile_bench --warm-start [GRAPH.json] [--arch sm_90] [--runs N]\n");
      return 2;
    }
  }
  const auto target = kiln::target_named(arch);
  if (!target.ok()) return std::fprintf(stderr, "%s\n", target.status().message().c_str()), 2;
  auto config = kiln::CacheConfig::from_env();
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().message().c_str()), 1;
  auto cache = kiln::KernelCache::open(*config);
  if (!cache.ok()) return std::fprintf(stderr, "%s\n", cache.status().message().c_str()), 1;
  kiln::ObtainOptions obtain;
  obtain.archs = {target->arch};

  std::vector<double> load, plan, codegen, fetch, total;
  int kernels = 0;
  for (int r = -1; r < runs; ++r) {  // run -1 fills the cache
    const double t0 = now_ms();
    auto g = kiln::load_graph(path);
    if (!g.ok()) return std::fprintf(stderr, "%s\n", g.status().message().c_str()), 1;
    const double t1 = now_ms();
    kiln::PlanOptions po;
    po.target = *target;
    auto p = kiln::plan_graph(std::move(*g), po);
    if (!p.ok()) return std::fprintf(stderr, "%s\n", p.status().message().c_str()), 1;
    const double t2 = now_ms();
    auto ks = kiln::plan_kernels(*p);
    if (!ks.ok()) return std::fprintf(stderr, "%s\n", ks.status().message().c_str()), 1;
    const double t3 = now_ms();
    const kiln::ObtainResult got = kiln::obtain_kernels(*cache, *ks, obtain);
    const double t4 = now_ms();
    if (got.failed > 0) return std::fprintf(stderr, "%s\n", got.errors.front().c_str()), 1;
    if (r < 0) {
      std::printf("%s on %s: %zu distinct kernels (%d compiled to fill the cache)\n", path.c_str(), arch.c_str(),
                  ks->size(), got.compiled);
      kernels = static_cast<int>(ks->size());
      continue;
    }
    if (got.cached != kernels) return std::fprintf(stderr, "a warm run compiled %d kernels\n", got.compiled), 1;
    load.push_back(t1 - t0), plan.push_back(t2 - t1), codegen.push_back(t3 - t2), fetch.push_back(t4 - t3);
    total.push_back(t4 - t0);
  }
  std::printf("%-34s %9s\n", "step (median of runs)", "ms");
  std::printf("%-34s %9.3f\n", "load + verify the JSON", median(load));
  std::printf("%-34s %9.3f\n", "plan", median(plan));
  std::printf("%-34s %9.3f\n", "generate the kernels' sources", median(codegen));
  std::printf("%-34s %9.3f\n", "every cubin from the cache", median(fetch));
  std::printf("%-34s %9.3f\n", "total (median of totals)", median(total));
  return 0;
}
