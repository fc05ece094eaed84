// Filling the kernel cache ahead of time: every kernel of one or more graphs, planned for each target GPU,
// compiled with NVRTC into the on-disk cache (what `kiln prewarm` and Python's kiln.prewarm do). Needs no
// GPU. A kernel the cache holds already is not compiled again; one kernel in several graphs is compiled once.
//
//   kiln::PrewarmOptions o;
//   o.targets = {*kiln::target_named("sm_80"), *kiln::target_named("h200")};
//   auto r = kiln::prewarm({graph}, o);   // r->compiled, r->not_kept, ...
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/plan.h"
#include "kiln/status.h"
#include "kiln/target.h"

namespace kiln {

// One kernel finished (called from worker threads, one call at a time).
struct PrewarmEvent {
  enum Outcome { cached, compiled, failed } outcome = cached;
  std::string arch;   // "sm_90"
  std::string entry;  // the kernel's entry name
  double ms = 0;      // compile time (0 for a cached one)
  int done = 0, total = 0;
  std::string error;  // failed only
};

struct PrewarmOptions {
  std::vector<Target> targets;  // devices to plan and compile for; empty: sm_80's and sm_90's default devices
  PlanOptions plan{};           // layout policy and fusion limits (the target is set from `targets`)
  int jobs = 0;                 // parallel compiles; 0: the hardware's thread count
  // Filling the cache is the point: a kernel whose store fails (a directory that is not writable, a full
  // disk) counts as failed. Kernels the cache declines to keep (disabled, read-only, over
  // KILN_CACHE_MAX_SIZE) are counted in PrewarmReport::not_kept, which `kiln prewarm` and Python's
  // kiln.prewarm treat as an error unless uncached kernels are allowed. False: a failed store is not a failure.
  bool require_store = true;
  std::function<void(const PrewarmEvent&)> on_kernel{};
  std::vector<std::string> names;  // how each graph is named in the report (default: the graph's name)
};

// What one graph needs on one target.
struct PrewarmGraph {
  std::string name;
  std::string target, arch;  // "h200", "sm_90"
  int kernel_groups = 0, weight_transforms = 0;
  int distinct_kernels = 0;  // of this graph on this target
  int fresh = 0;             // of those, not already seen in an earlier graph of the call
  bool plan_cached = false;  // its plan came from the plan cache (planning and code generation skipped)
};

struct PrewarmReport {
  std::vector<PrewarmGraph> graphs;  // per target, then per graph
  std::vector<std::string> archs;    // each target's arch, in order
  std::string cache_dir;             // empty when the cache is disabled
  int total = 0, cached = 0, compiled = 0, failed = 0;
  int not_kept = 0;             // kernels not in the cache afterwards (see require_store)
  std::string not_kept_reason;  // why, when not_kept > 0
  double wall_ms = 0;
  int jobs = 0;                     // the parallel compiles used
  bool nvrtc_loaded = false;        // false: every kernel came from the cache
  std::vector<std::string> errors;  // one line per failed kernel
};

// Plans every graph for every target and obtains each distinct kernel (the cache of CacheConfig::from_env()).
// Each plan is stored in the plan cache too (or read from it), so a later compile of the graph plans nothing.
// Returns an error when a graph does not plan or the cache cannot be opened; failed kernels are counted in
// the report (failed, errors), not returned as an error.
Result<PrewarmReport> prewarm(const std::vector<Graph>& graphs, const PrewarmOptions& options = {});

}  // namespace kiln
