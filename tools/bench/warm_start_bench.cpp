// A warm start in a running process (a server compiling a graph whose kernels are cached), step by step, two
// ways measured side by side (alternating, each run's steps timed): without the plan cache (plan the graph,
// generate its kernels' sources, obtain every cubin) and with it (the plan entry's key from the graph, its
// lookup and decode, then every cubin). Loading the graph's JSON comes before either and is shown apart. That
// is Engine::compile on cuda up to loading the modules into the driver (cuModuleLoadData, which needs a GPU and
// is not measured here). Issue 32's target for Engine::compile: 2 ms for ResNet-50.
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
#include "runtime/plan_cache.h"

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

  std::vector<double> load, plan, codegen, fetch, total, key_lookup, cached_fetch, cached_total;
  int kernels = 0;
  // Each path's results are freed before the other runs (so neither pays for fresh memory the other holds),
  // and the order alternates between runs.
  const auto without_cache = [&](const kiln::Graph& g, const kiln::PlanOptions& po, bool fill) -> int {
    const double t1 = now_ms();
    auto p = kiln::plan_graph(g, po);
    if (!p.ok()) return std::fprintf(stderr, "%s\n", p.status().message().c_str()), 1;
    const double t2 = now_ms();
    auto ks = kiln::plan_kernels(*p);
    if (!ks.ok()) return std::fprintf(stderr, "%s\n", ks.status().message().c_str()), 1;
    const double t3 = now_ms();
    const kiln::ObtainResult got = kiln::obtain_kernels(*cache, *ks, obtain);
    const double t4 = now_ms();
    if (got.failed > 0) return std::fprintf(stderr, "%s\n", got.errors.front().c_str()), 1;
    if (fill) {
      std::printf("%s on %s: %zu distinct kernels (%d compiled to fill the cache)\n", path.c_str(), arch.c_str(),
                  ks->size(), got.compiled);
      kernels = static_cast<int>(ks->size());
      return 0;
    }
    if (got.cached != kernels) return std::fprintf(stderr, "a warm run compiled %d kernels\n", got.compiled), 1;
    plan.push_back(t2 - t1), codegen.push_back(t3 - t2), fetch.push_back(t4 - t3), total.push_back(t4 - t1);
    return 0;
  };
  // The same compile through the plan cache (what Engine::compile does): key, lookup, decode, then the cubins.
  const auto with_cache = [&](const kiln::Graph& g, const kiln::PlanOptions& po, bool fill) -> int {
    const double t4 = now_ms();
    auto planned = kiln::runtime::plan_with_cache(&*cache, g, po);
    if (!planned.ok()) return std::fprintf(stderr, "%s\n", planned.status().message().c_str()), 1;
    const double t5 = now_ms();
    const kiln::ObtainResult got =
        kiln::obtain_kernels(*cache, kiln::distinct_kernels(std::move(planned->kernels)), obtain);
    const double t6 = now_ms();
    if (got.failed > 0) return std::fprintf(stderr, "%s\n", got.errors.front().c_str()), 1;
    if (fill) return 0;
    if (got.cached != kernels) return std::fprintf(stderr, "a warm run compiled %d kernels\n", got.compiled), 1;
    if (!planned->cached) return std::fprintf(stderr, "a warm run missed the plan cache\n"), 1;
    key_lookup.push_back(t5 - t4), cached_fetch.push_back(t6 - t5), cached_total.push_back(t6 - t4);
    return 0;
  };
  for (int r = -1; r < runs; ++r) {  // run -1 fills the caches (kernels and plan)
    const double t0 = now_ms();
    auto g = kiln::load_graph(path);
    if (!g.ok()) return std::fprintf(stderr, "%s\n", g.status().message().c_str()), 1;
    if (r >= 0) load.push_back(now_ms() - t0);
    kiln::PlanOptions po;
    po.target = *target;
    const bool fill = r < 0;
    const int failed = r % 2 == 0 ? (without_cache(*g, po, fill) || with_cache(*g, po, fill))
                                  : (with_cache(*g, po, fill) || without_cache(*g, po, fill));
    if (failed) return 1;
  }
  std::printf("%-44s %9s\n", "step (median of runs)", "ms");
  std::printf("%-44s %9.3f\n", "load + verify the JSON (before either)", median(load));
  std::printf("without the plan cache:\n");
  std::printf("  %-42s %9.3f\n", "plan", median(plan));
  std::printf("  %-42s %9.3f\n", "generate the kernels' sources", median(codegen));
  std::printf("  %-42s %9.3f\n", "every cubin from the cache", median(fetch));
  std::printf("  %-42s %9.3f\n", "compile total (median of totals)", median(total));
  std::printf("with the plan cache (Engine::compile's path):\n");
  std::printf("  %-42s %9.3f\n", "key, lookup and decode of the plan entry", median(key_lookup));
  std::printf("  %-42s %9.3f\n", "every cubin from the cache", median(cached_fetch));
  std::printf("  %-42s %9.3f\n", "compile total (median of totals)", median(cached_total));
  std::printf("plan cache speed-up of the compile: %.2fx\n", median(total) / median(cached_total));
  return 0;
}
