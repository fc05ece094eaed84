// Obtaining compiled kernels: the cache first, NVRTC on a miss (then stored). Used by `kiln prewarm`, and
// by the cuda backend to get every kernel of a Plan.
//
// A kernel's cache key is XXH3-128 over a manifest of: the key-format version, kiln's codegen version, the
// hash of every embedded template and CUDA header, the NVRTC version kiln was built against, the exact
// arch, the compile options, the entry name and the generated source. The source is canonical (independent
// of node order and tensor names) and holds every shape, dtype, layout and attribute of the group, so it
// is the canonical form of the group. Computing a key loads no NVRTC: a fully cached run never does.
//
// Compiles of distinct kernels run in parallel on `jobs` threads; two requests for one key in one process
// (from any thread, any call) compile it once and share the result.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codegen/kernel.h"
#include "kiln/cache.h"
#include "kiln/plan.h"
#include "kiln/status.h"

namespace kiln {

// Every kernel a plan launches (one per kernel group and weight transform, in plan order) and which of
// them are distinct: identical groups (ResNet-50's repeated blocks) give identical kernels, compiled once.
struct PlanKernels {
  std::vector<codegen::Kernel> launches;
  std::vector<int32_t> group;    // launches[i] runs plan.groups[group[i]]
  std::vector<int> distinct_of;  // launches[i] runs distinct kernel distinct_of[i]
  std::vector<int> distinct;     // distinct kernel j is launches[distinct[j]] (its first use)
  // The most dynamic shared memory a launch of distinct kernel j asks for: what it is loaded for. A generic
  // kernel launched at two residencies has two pads (codegen/family.h, GemmTiles::bounds_blocks_per_sm).
  std::vector<uint32_t> distinct_smem;
};
Result<PlanKernels> plan_kernel_launches(const Plan& p);

// Fills `distinct_of` and `distinct` for `launches`. Two launches share a compiled kernel only when their
// entry names and their whole sources are equal: never by entry name alone, whose hash of the source is
// folded to 32 bits and so can collide. Kernels with different sources under one entry name are made
// distinct: each later one is renamed "<entry>_v<n>" (in its entry and in its source, every launch of it
// alike), so that no two distinct kernels share a symbol (one translation unit on emu) and each has its
// own cache key.
void assign_distinct(PlanKernels& pk);

// The distinct kernels of a plan's launches (each at its first launch), in first-use order.
std::vector<codegen::Kernel> distinct_kernels(PlanKernels pk);
// The distinct kernels of a plan (identical groups share one), in first-use order.
Result<std::vector<codegen::Kernel>> plan_kernels(const Plan& p);

CacheKey kernel_cache_key(const codegen::Kernel& k, const std::string& arch, KeyManifest* manifest = nullptr);

struct KernelEvent {
  const codegen::Kernel* kernel = nullptr;
  std::string arch;
  enum Outcome { cached, compiled, failed } outcome = cached;
  double ms = 0;
  std::string error;  // failed only
};

struct ObtainOptions {
  std::vector<std::string> archs{"sm_80"};
  int jobs = 0;                                         // 0: the hardware's thread count
  std::function<void(const KernelEvent&)> on_kernel{};  // called from worker threads, serialized
  // A kernel compiled now that the cache cannot store fails (kiln prewarm, whose job is the storing);
  // otherwise it is used all the same and the store's error is one of the result's warnings.
  bool require_store = false;
};

struct ObtainResult {
  int total = 0, cached = 0, compiled = 0, failed = 0;
  double wall_ms = 0;
  std::vector<CacheEntry> entries;  // per (kernel, arch) in order kernel-major; empty cubin for failed ones
  std::vector<std::string> errors;
  std::vector<std::string> warnings;  // stores that failed without require_store
};

// Every kernel for every arch. Failures of single kernels are counted and reported in `errors` (the call
// still returns a result); a cache in assert-hit mode turns any miss into such a failure.
ObtainResult obtain_kernels(KernelCache& cache, const std::vector<codegen::Kernel>& kernels,
                            const ObtainOptions& options);

}  // namespace kiln
