// kiln::prewarm (include/kiln/prewarm.h): plan every graph for every target, obtain every distinct kernel
// (cache first, NVRTC on a miss), then check what the cache holds afterwards.
#include "kiln/prewarm.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "codegen/nvrtc.h"
#include "kiln/cache.h"
#include "runtime/kernel_provider.h"
#include "runtime/plan_cache.h"
#include "support/lines.h"

namespace kiln {
namespace {

// Why the cache keeps nothing, or may not have kept everything.
std::string uncached_reason(const KernelCache& cache, const CacheConfig& c) {
  if (c.disabled) return "the cache is disabled: KILN_CACHE_DISABLE";
  if (c.read_only) return "the cache is read-only: KILN_CACHE_READONLY";
  if (std::string p = cache.problem(); !p.empty()) return p;
  return fmt::format("KILN_CACHE_MAX_SIZE is {} bytes, or the cache directory {} is not writable", c.max_size_bytes,
                     c.dir);
}

// How many of the (kernel, arch) pairs obtained the cache does not hold now (disabled, read-only, evicted
// again at once because the size limit is smaller than they are, or not writable). Asked of each entry's
// file (KernelCache::holds): a lookup would count as a hit, and the cache's listing reads every entry of the
// whole cache (14 MB for three ResNet-50s, half of a warm prewarm).
int kernels_not_kept(KernelCache& cache, const CacheConfig& config, const std::vector<codegen::Kernel>& kernels,
                     const std::vector<size_t>& per_target, const std::vector<Target>& targets) {
  if (config.disabled) return static_cast<int>(kernels.size());
  int missing = 0;
  size_t k = 0;
  for (size_t t = 0; t < targets.size(); ++t)
    for (size_t i = 0; i < per_target[t]; ++i, ++k)
      missing += cache.holds(kernel_cache_key(kernels[k], targets[t].arch)) ? 0 : 1;
  return missing;
}

}  // namespace

Result<PrewarmReport> prewarm(const std::vector<Graph>& graphs, const PrewarmOptions& options) {
  std::vector<Target> targets;
  for (const Target& t : options.targets) {
    // Targets with the same facts get the same kernels (h100 and h200): compiled once.
    if (std::none_of(targets.begin(), targets.end(), [&](const Target& u) { return u.key() == t.key(); }))
      targets.push_back(t);
  }
  if (targets.empty()) {
    for (const char* arch : {"sm_80", "sm_90"}) targets.push_back(*target_named(arch));
  }
  auto config = CacheConfig::from_env();
  if (!config.ok()) return config.status();
  auto cache = KernelCache::open(*config);
  if (!cache.ok()) return cache.status();

  PrewarmReport report;
  for (const Target& t : targets) report.archs.push_back(t.arch);
  report.cache_dir = config->disabled ? std::string() : config->dir;
  // Every graph's distinct kernels for each target; the same kernel in several graphs is compiled once.
  std::vector<codegen::Kernel> kernels;
  std::vector<size_t> per_target;                      // kernels of each target, in `targets` order
  std::set<std::pair<std::string, std::string>> seen;  // (target facts and arch, source): the cache key's parts
  PlanOptions po = options.plan;
  for (const Target& target : targets) {
    po.target = target;
    size_t of_target = 0;
    for (size_t gi = 0; gi < graphs.size(); ++gi) {
      const std::string& name = gi < options.names.size() ? options.names[gi] : graphs[gi].name();
      // Through the plan cache: a prewarmed graph's later compiles skip planning as well.
      auto planned = runtime::plan_with_cache(&*cache, graphs[gi], po);
      if (!planned.ok()) return support::status_naming(planned.status(), name);
      const Plan* plan = &planned->plan;
      std::vector<codegen::Kernel> ks = distinct_kernels(std::move(planned->kernels));
      PrewarmGraph line{name, target.name, target.arch};
      line.plan_cached = planned->cached;
      for (codegen::Kernel& k : ks) {
        if (!seen.insert({target.key(), k.source}).second) continue;
        kernels.push_back(std::move(k));
        ++line.fresh, ++of_target;
      }
      line.kernel_groups = plan->kernel_count();
      line.weight_transforms =
          static_cast<int>(std::count_if(plan->groups.begin(), plan->groups.end(),
                                         [](const Group& x) { return x.kind == GroupKind::weight_transform; }));
      line.distinct_kernels = static_cast<int>(ks.size());
      report.graphs.push_back(std::move(line));
    }
    per_target.push_back(of_target);
  }

  report.total = static_cast<int>(kernels.size());
  report.jobs = options.jobs > 0 ? options.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int done = 0;
  ObtainOptions oo;
  oo.jobs = options.jobs;
  oo.require_store = options.require_store;
  if (options.on_kernel) {
    oo.on_kernel = [&](const KernelEvent& e) {  // serialized by obtain_kernels
      PrewarmEvent pe;
      pe.outcome = e.outcome == KernelEvent::cached     ? PrewarmEvent::cached
                   : e.outcome == KernelEvent::compiled ? PrewarmEvent::compiled
                                                        : PrewarmEvent::failed;
      pe.arch = e.arch;
      pe.entry = e.kernel->entry;
      pe.ms = e.ms;
      pe.done = ++done;
      pe.total = report.total;
      pe.error = e.error;
      options.on_kernel(pe);
    };
  }
  // Each target's kernels for its own arch (one provider run per target; their counts add up).
  size_t from = 0;
  int total = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    const std::vector<codegen::Kernel> mine(kernels.begin() + static_cast<std::ptrdiff_t>(from),
                                            kernels.begin() + static_cast<std::ptrdiff_t>(from + per_target[t]));
    from += per_target[t];
    oo.archs = {targets[t].arch};
    const ObtainResult part = obtain_kernels(*cache, mine, oo);
    total += part.total, report.cached += part.cached, report.compiled += part.compiled, report.failed += part.failed;
    report.wall_ms += part.wall_ms;
    report.errors.insert(report.errors.end(), part.errors.begin(), part.errors.end());
  }
  report.total = total;
  report.nvrtc_loaded = codegen::nvrtc_loaded();
  if (report.failed == 0) {
    report.not_kept = kernels_not_kept(*cache, *config, kernels, per_target, targets);
    if (report.not_kept > 0) report.not_kept_reason = uncached_reason(*cache, *config);
  }
  return report;
}

}  // namespace kiln
