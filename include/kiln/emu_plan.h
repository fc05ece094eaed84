// Running a Plan's generated kernels on the emu backend: every kernel group is generated (codegen/),
// compiled for the host (one shared object per plan, cached on disk) and launched in order on host memory
// laid out exactly as the GPU's would be: bound tensors in their declared layouts and dtypes, one
// workspace for the intermediates at their planned offsets, poisoned (all bits set: NaN in every float
// type) before the run so that an element no kernel writes shows up.
#pragma once

#include <string>
#include <vector>

#include "kiln/emu.h"
#include "kiln/host_tensor.h"
#include "kiln/plan.h"
#include "kiln/status.h"

namespace kiln {

struct EmuPlanOptions {
  emu::LaunchOptions launch{};  // schedule, checked mode, worker threads, counters (profile)
};

// One launch of a run with launch.profile set: its kernel and what the emulator counted.
struct EmuLaunchRecord {
  std::string entry;
  emu::KernelProfile profile;
};

struct EmuPlanReport {
  int kernels_launched = 0;
  int distinct_kernels = 0;  // identical groups share one kernel
  bool compiled = false;     // the host compiler ran (false: the shared object came from the cache)
  double generate_ms = 0, compile_ms = 0, run_ms = 0;
  std::vector<std::string> entries;  // per launched group, its kernel's entry name
  // What did not stop the run but should be known (CompileReport::warnings): the compiled kernels could not
  // be kept in the cache (a full disk, a directory that is not private), so the next run compiles again.
  std::vector<std::string> warnings;
  std::vector<EmuLaunchRecord> launches;  // with launch.profile: every launch, in order (weight transforms too)
};

// Runs `p` on `inputs` (every graph input and parameter by name, logical dims, as run_reference takes
// them); returns the graph outputs by name, in logical order. Fails with a Status for a wrong binding,
// a group no kernel family supports, a compile error or a kernel error the emulator detects.
Result<TensorMap> run_plan_emu(const Plan& p, const TensorMap& inputs, const EmuPlanOptions& options = {},
                               EmuPlanReport* report = nullptr);

}  // namespace kiln
