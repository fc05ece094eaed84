// The plan cache (issue 32; docs/cache.md, "Plans"): a plan and its kernels' launches, stored in the kernel
// cache as entries of kind `plan`, so that a warm Engine::compile, `kiln run` or a server's compile skips
// planning and code generation and goes straight to the kernels' own entries.
//
// An entry's key is XXH3-128 over a manifest of: the plan format's version, kiln's source id (a hash of every
// file the library is built from: cmake/source_id.cmake), the graph's binary form (structure only: a
// parameter's values never change a plan), every plan option that changes a plan, and every fact of the
// target. Options that are code (a fusion policy, a kernel chooser, a pass hook) name nothing a key could
// hold: such a plan is never cached. An entry is checksummed, verified and evicted like every other; one that
// does not decode (a kiln bug: its checksum held) is removed and counted bad, and the graph is planned anew.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kiln/cache.h"
#include "kiln/plan.h"
#include "runtime/kernel_provider.h"

namespace kiln::runtime {

// Bump when the payload's layout changes (part of every key, so old entries miss).
inline constexpr int kPlanFormatVersion = 2;  // 2: kernel parameters say whether an int is a size (KernelParam::size)

// The key of plan_graph(g, options) with its kernels, and its manifest; nullopt when the plan cannot be
// cached (options holding code, or a graph with symbols or problems).
std::optional<KeyManifest> plan_cache_manifest(const Graph& g, const PlanOptions& options);

// An entry's payload: the plan and every launch of its kernels (sources included, once per distinct kernel).
std::string encode_plan(const Plan& plan, const PlanKernels& kernels);
struct CachedPlan {
  Plan plan;
  PlanKernels kernels;
};
// Reads a payload back, checking every index against what it indexes; fails saying what was malformed.
Result<CachedPlan> decode_plan(std::string_view payload);

// A plan and its kernels, from the cache or made now.
struct PlannedKernels {
  Plan plan;
  PlanKernels kernels;
  bool cached = false;                 // read from a plan entry (planning and code generation skipped)
  double plan_ms = 0, codegen_ms = 0;  // cached: plan_ms is the lookup and decode, codegen_ms 0
  std::string warning;                 // a plan entry that could not be stored or read (the compile went on without it)
};
// Looks the plan of `g` up in `cache` (null: no cache), else plans and generates its kernels and stores them.
// A plan that is not cacheable is planned as plan_graph would.
Result<PlannedKernels> plan_with_cache(KernelCache* cache, const Graph& g, const PlanOptions& options);

}  // namespace kiln::runtime
