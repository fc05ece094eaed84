// What the Executable needs from a device (include/kiln/engine.h): memory, copies, and kernels made
// launchable. One implementation per backend that runs generated kernels (emu, cuda) plus the host memory
// of ref. Internal: the public face is Engine.
#pragma once

#include <chrono>
#include <map>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/kernel.h"
#include "kiln/emu.h"
#include "kiln/emu_plan.h"
#include "kiln/engine.h"
#include "kiln/target.h"
#include "runtime/plan_cache.h"

namespace kiln::runtime {

// One argument of a launch: a pointer with its extent and the tensor's name (for the emulator's bounds
// reports and for error messages), or an int passed by value.
struct KernelArg {
  void* data = nullptr;
  size_t bytes = 0;
  std::string_view name;
  // An int parameter (codegen::KernelParam::is_value: a batch or a size): passed by value, not memory.
  bool by_value = false;
  int32_t value = 0;
};

// The distinct kernels of one Executable, ready to launch.
class LoadedKernels {
 public:
  virtual ~LoadedKernels() = default;
  // Launches distinct kernel `index` with `spec`'s launch configuration (spec is any group's kernel with
  // that entry: identical source, its own tensors).
  virtual Status launch(int index, const codegen::Kernel& spec, const std::vector<KernelArg>& args, Stream stream) = 0;
  // launch() that also says how long the kernel ran, in ms: CUDA events around it on cuda (waiting for the
  // stream), the wall time of the call elsewhere (ref and emu run synchronously). For `kiln bench`.
  virtual Status launch_timed(int index, const codegen::Kernel& spec, const std::vector<KernelArg>& args, Stream stream,
                              double& ms) {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = launch(index, spec, args, stream);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }

  // CUDA graphs (cuda only): launches between begin_capture and end_capture are recorded, not run, on the
  // stream begin_capture returns; end_capture instantiates them and replay() launches the whole graph.
  virtual bool can_capture() const { return false; }
  virtual Result<Stream> begin_capture() { return unsupported("CUDA graphs need the cuda device"); }
  virtual Status end_capture() { return unsupported("CUDA graphs need the cuda device"); }
  virtual Status replay(Stream) { return unsupported("CUDA graphs need the cuda device"); }
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  virtual std::string arch() const = 0;  // the arch kernels are obtained for by default
  // What plans for this device are made for: the GPU's own facts on cuda, the default target elsewhere
  // (emu runs the kernels an H200 would get).
  virtual Target target() const { return default_target(); }

  virtual Result<void*> allocate(size_t bytes) = 0;  // 256-byte aligned
  virtual void release(void* p) = 0;
  virtual Status upload(void* dst, const void* src, size_t bytes) = 0;
  virtual Status download(void* dst, const void* src, size_t bytes) = 0;
  virtual Status fill(void* dst, unsigned char byte, size_t bytes, Stream stream) = 0;
  virtual Status synchronize(Stream stream) = 0;

  // Makes `distinct` (one kernel per entry) launchable for `arch`; fills the report's cache/compile fields.
  // `unit_name` (the graph's name) names generated sources in compiler messages.
  virtual Result<std::unique_ptr<LoadedKernels>> load(const std::vector<const codegen::Kernel*>& distinct,
                                                      const std::string& arch, const std::string& unit_name,
                                                      CompileReport& report) = 0;
};

// Host memory, for ref (which launches nothing) and as the emulator's memory.
std::shared_ptr<Device> make_ref_device();
// The emulator; `launch` as emu::launch takes it (schedule, checked mode, threads). With launch.profile,
// every launch's counters are appended to `records` (which must then be given).
struct EmuLaunchRecords {
  std::mutex mu;
  std::vector<EmuLaunchRecord> launches;
};
std::shared_ptr<Device> make_emu_device(const emu::LaunchOptions& launch = {},
                                        std::shared_ptr<EmuLaunchRecords> records = nullptr);
// The GPU `ordinal` through the driver API; unavailable without a driver or device.
Result<std::shared_ptr<Device>> make_cuda_device(const EngineOptions& options);

// A weight converted by a weight transform (KCRS -> KRSC): its memory, and the source binding it holds a
// conversion of. Executables of one graph at several bindings of its symbols (DynamicExecutable) share them:
// the conversion does not depend on the batch, so a weight converted for one batch is not converted, nor
// stored, again for another.
struct ConvertedWeight {
  std::shared_ptr<Device> device;  // frees `data` (when it was allocated for this weight alone)
  void* data = nullptr;
  int64_t bytes = 0;
  const void* converted_from = nullptr;  // null: holds nothing yet (or invalidated)
  ConvertedWeight() = default;
  ConvertedWeight(const ConvertedWeight&) = delete;
  ConvertedWeight& operator=(const ConvertedWeight&) = delete;
  ~ConvertedWeight() {
    if (device && data) device->release(data);
  }
};
// By the converted tensor's name, its weight transform's kernel and its size (the same three: the same bytes).
using SharedWeights = std::map<std::string, std::shared_ptr<ConvertedWeight>>;

// The Executable of an already planned graph on `device` (Engine::compile plans, then calls this; run_plan_emu
// calls it with its own emulator options). With `shared`, converted weights are taken from it or added to
// it (each in memory of its own) instead of living in the Executable's own store.
Result<Executable> make_executable(std::shared_ptr<Device> device, Plan plan, const CompileOptions& options,
                                   double plan_ms, SharedWeights* shared = nullptr);
// The same for a plan whose kernels are generated already (the plan cache's, src/runtime/plan_cache.h).
Result<Executable> make_executable(std::shared_ptr<Device> device, PlannedKernels planned,
                                   const CompileOptions& options, SharedWeights* shared = nullptr);

// The distinct kernels of `pk` as a device loads them: each with the most dynamic shared memory any launch of it
// asks for (its first launch may ask for less: a generic kernel at two residencies). `widened` holds the copies
// that differ from their first launch.
std::vector<const codegen::Kernel*> kernels_to_load(const PlanKernels& pk, std::vector<codegen::Kernel>& widened);

// What Engine::compile does once it has a device: plans `graph` for it (options.plan with the device's target;
// kernels required where it runs any), through `plan_cache` unless that is null or options.plan_cache is off,
// and makes the Executable.
Result<Executable> compile_graph(std::shared_ptr<Device> device, KernelCache* plan_cache, const Graph& graph,
                                 const CompileOptions& options, SharedWeights* shared = nullptr);

// A DynamicExecutable of `graph` (verified here) on `device` (Engine::compile_dynamic); each binding's plan
// goes through `plan_cache` (may be null).
Result<DynamicExecutable> make_dynamic_executable(std::shared_ptr<Device> device, const Graph& graph,
                                                  const CompileOptions& options,
                                                  std::shared_ptr<KernelCache> plan_cache = nullptr);

// An Engine on a device made above (for run_plan_emu's emulator options).
Engine engine_on(std::shared_ptr<Device> device);

}  // namespace kiln::runtime
