// The execution API: compile a graph once, run it many times on a device.
//
//   auto engine = kiln::Engine::open(kiln::DeviceKind::automatic);    // cuda if a GPU is there, else emu
//   auto exe = engine->compile(graph);                                 // plan + every kernel (cache or NVRTC)
//   kiln::Bindings b{{"x", {x_ptr, x_bytes}}, {"w", {w_ptr, w_bytes}}, {"y", {y_ptr, y_bytes}}};
//   kiln::Status s = exe->run(b, stream);                              // enqueues the plan's kernels
//
// Bindings map every graph input, parameter and output name to memory of the engine's device holding the
// tensor in its storage dtype and declared layout (exactly numel × dtype size bytes). On `ref` and `emu` that
// memory is host memory, so the same program runs everywhere; Engine::allocate/upload/download move data
// the same way on every device. A run allocates nothing: the workspace for intermediates is allocated once
// per Executable (or given by the caller), and weights the plan converts (KCRS -> KRSC) are converted once
// per bound weight and kept until a run binds another pointer for it or the caller says it changed.
//
// The cuda backend opens the driver with dlopen at first use: kiln builds and runs without one, and
// Engine::open(DeviceKind::cuda) fails with "no CUDA driver found" there.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache.h"
#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/plan.h"
#include "kiln/status.h"
#include "kiln/target.h"

namespace kiln {

enum class DeviceKind : uint8_t {
  ref,        // the reference: the Plan group by group on the CPU in f64 (no generated code)
  emu,        // kiln's generated CUDA kernels, run on the CPU by the emulator
  cuda,       // kiln's generated CUDA kernels on an NVIDIA GPU
  automatic,  // cuda when a driver and a device are present, else emu
};
std::string_view device_kind_name(DeviceKind d);
// "ref", "emu", "cuda", "auto".
std::optional<DeviceKind> parse_device_kind(std::string_view s);

struct EngineOptions {
  int device_ordinal = 0;  // cuda: which GPU
  // The kernel cache (cuda) and the plan cache (cuda and emu); default CacheConfig::from_env(). (emu keeps its
  // compiled kernels where KILN_CACHE_DIR says.)
  std::optional<CacheConfig> cache;
  int compile_jobs = 0;  // cuda: parallel NVRTC compiles of one Executable; 0 = all cores
};

struct CompileOptions {
  PlanOptions plan{};
  std::string arch;                // cuda: the target ("sm_80"); empty = the device's own
  bool cuda_graph = false;         // cuda: capture a run into a CUDA graph and replay it while the bindings
                                   // stay the same (cuts launch overhead for small batches)
  bool allocate_workspace = true;  // false: the caller gives the workspace with Executable::set_workspace
  // Look the plan up in the plan cache (the kernel cache's `plan` entries: docs/cache.md, "Plans") and store it
  // there when planned: a warm compile then skips planning and code generation.
  bool plan_cache = true;
  // compile_dynamic only: how a binding whose plan keeps kernels of its own gets them (DynamicExecutable below).
  enum class Specialize : uint8_t {
    at_once,        // its first run plans it with them and waits for any compile they need
    in_background,  // its first run takes the batch-generic kernels every binding shares, and its own compile
                    // on a background thread; a later run swaps them in once they are ready (no stall)
  } specialize = Specialize::at_once;
};

// What compile() did.
struct CompileReport {
  DeviceKind device = DeviceKind::ref;
  std::string arch;                  // cuda: "sm_90"; emu: "host"; ref: ""
  int groups = 0;                    // plan groups
  int launches = 0;                  // kernels launched per run
  int distinct_kernels = 0;          // identical groups share one kernel
  int weight_transforms = 0;         // kernels run once per bound weight
  int cache_hits = 0, compiled = 0;  // cuda: kernels from the cache / compiled by NVRTC now
  int ptx_loaded = 0;                // cuda: kernels whose cubin did not fit the device, loaded from their PTX
  bool host_compiled = false;        // emu: the host compiler ran (false: the kernels' .so came from the cache)
  bool plan_cached = false;          // the plan and its kernels' sources came from the plan cache (codegen_ms is 0)
  double plan_ms = 0, codegen_ms = 0, obtain_ms = 0, load_ms = 0;
  int64_t workspace_bytes = 0;
  int64_t weight_bytes = 0;          // memory for converted weights, allocated once (by this compile)
  std::vector<std::string> entries;  // the kernel of each launch (weight transforms included), plan order
  // What did not stop the compile but should be known: kernels compiled now that the kernel cache could
  // not store (a full disk, a directory without write permission or not private), so later runs compile
  // them again. `kiln run` prints each as "warning: ..." on stderr.
  std::vector<std::string> warnings;
};

// Memory of the engine's device holding one tensor (or the workspace).
struct Binding {
  void* data = nullptr;
  size_t bytes = 0;
};
using Bindings = std::map<std::string, Binding, std::less<>>;

// How long one kernel of a run took (RunOptions::time_kernels).
struct KernelTime {
  int group = -1;     // the plan group it ran
  std::string entry;  // its kernel
  double ms = 0;      // cuda: the GPU's time between CUDA events around it; ref, emu: the CPU's wall time
  // When it was launched: ms from the start of Executable::run, on the host's monotonic clock (a timed run
  // launches each kernel after the one before it finished, so on cuda this is also about when it began).
  double start_ms = 0;
  std::array<uint32_t, 3> grid{1, 1, 1}, block{1, 1, 1};
};

struct RunReport {
  int kernels_launched = 0;
  int weight_transforms_run = 0;         // 0 when the converted weights were reused
  bool graph_replayed = false;           // cuda_graph: the run replayed a captured graph
  std::vector<KernelTime> kernel_times;  // with RunOptions::time_kernels: one per launch, in order
};

struct RunOptions {
  // Time every kernel (kiln bench): each launch waits for the one before it, and a CUDA graph is not used.
  bool time_kernels = false;
};

// An opaque CUDA stream (CUstream / cudaStream_t); nullptr is the default stream. Ignored by ref and emu,
// which run synchronously.
using Stream = void*;

class Engine;

class Executable {
 public:
  Executable(Executable&&) noexcept;
  Executable& operator=(Executable&&) noexcept;
  ~Executable();

  // Enqueues the plan on `stream`. Checks the bindings first: every input, parameter and output bound, no
  // unknown names, non-null, 16-byte aligned, exactly the declared size. ref and emu finish before returning.
  // Runs share the Executable's workspace and converted weights: call run() from one thread at a time, and
  // enqueue every run of one Executable on one stream (stream order keeps them apart); compile one
  // Executable per stream that must run concurrently.
  Status run(const Bindings& bindings, Stream stream = nullptr, RunReport* report = nullptr);
  Status run(const Bindings& bindings, Stream stream, RunReport* report, const RunOptions& options);

  // The caller's workspace (at least workspace_bytes(), 256-byte aligned), replacing one kiln allocated.
  Status set_workspace(void* data, size_t bytes);
  int64_t workspace_bytes() const;
  // The next run converts every weight again (the caller rewrote a bound weight in place).
  void invalidate_weights();

  const Plan& plan() const;
  const CompileReport& report() const;
  // Bytes a binding of `name` must have, or an error naming the tensor as not an input/parameter/output.
  Result<size_t> binding_bytes(std::string_view name) const;

  struct Impl;  // internal (src/runtime/executable.cpp)
  explicit Executable(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// A graph with symbolic dims (Graph::dim), compiled for every value of its symbols in their ranges: the
// answer to TensorRT's optimization profiles and ONNX Runtime's dynamic axes.
//
//   auto dyn = engine->compile_dynamic(graph);           // graph: x is [N, 3, 224, 224], N in [1, 64]
//   dyn->run(bindings_at_batch_8, stream);               // N = 8, read from x's binding size
//   dyn->run(bindings_at_batch_32, stream);              // N = 32: its kernels planned and loaded now
//
// A run reads the symbols' values off its bindings: each symbolic input with one open dim has it at
// binding bytes / (dtype size x its fixed dims); the values must agree across inputs and lie in their
// ranges, or the run fails naming the tensor, the dim and the symbol. A graph whose inputs leave that
// ambiguous (two open dims in one input and no other input fixing either) takes them given: run(dims, ...).
// The first run at a new binding plans the bound graph and loads its kernels (prepare() does it ahead of
// time); later runs at that binding reuse it. Where the batch-generic families make two bindings' kernels
// the same source (docs/architecture.md, "Batch-generic kernels"), it is compiled once and cached once (each
// binding still loads its own module). Converted weights are shared (converted once for every binding), and
// so is the workspace (one, as large as the largest binding so far needs). Each binding still has a plan of
// its own: one plan for every binding is issue 32's next step.
//
// A binding's plan gives a conv or matmul its own tile where that is more than 10 % faster than the
// batch-generic one (docs/architecture.md, "Batch-generic kernels"): a kernel no other binding shares, which
// may need compiling. With CompileOptions::specialize = in_background, the first run at such a binding runs the
// batch-generic plan (TilePolicy::generic_only: kernels every binding shares, cached after any one of them) and
// compiles the binding's own kernels on a background thread; the first run after they are ready swaps them in
// (TensorRT-RTX's shape-generic fallback). Executables handed out before a swap stay valid; destroying the
// DynamicExecutable waits for a background compile still running.

class DynamicExecutable {
 public:
  DynamicExecutable(DynamicExecutable&&) noexcept;
  DynamicExecutable& operator=(DynamicExecutable&&) noexcept;
  ~DynamicExecutable();

  // Enqueues the graph at the symbols' values its bindings give (or `dims`); bindings as Executable::run
  // checks them, sized for those values. Like Executable::run: one thread, one stream at a time.
  Status run(const Bindings& bindings, Stream stream = nullptr, RunReport* report = nullptr,
             const RunOptions& options = {});
  Status run(const DimBindings& dims, const Bindings& bindings, Stream stream = nullptr, RunReport* report = nullptr,
             const RunOptions& options = {});
  // The symbols' values the bindings give, or an error naming the tensor, the dim and the symbol.
  Result<DimBindings> dims_of(const Bindings& bindings) const;
  // Plans and loads the graph at `dims` now, so that no run waits for it (a binding outside the ranges is
  // an error naming the symbol). The Executable stays valid while this object lives.
  Result<const Executable*> prepare(const DimBindings& dims);
  // The Executable for `dims` if prepared (or run) already, else null.
  const Executable* executable(const DimBindings& dims) const;
  // How many bindings have an Executable.
  int bindings_prepared() const;
  // Specialize::in_background: whether the binding at `dims` still runs the batch-generic kernels while its own
  // compile, and waiting for that compile to finish and swapping its kernels in (a binding not prepared yet is
  // prepared first). A background compile that failed leaves the generic kernels in place and is its error.
  bool specializing(const DimBindings& dims) const;
  Status wait_specialized(const DimBindings& dims);
  // The next run converts every weight again (the caller rewrote a bound weight in place).
  void invalidate_weights();
  const Graph& graph() const;

  struct Impl;  // internal (src/runtime/dynamic_executable.cpp)
  explicit DynamicExecutable(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Device memory owned by an Engine's device; freed when destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&&) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept;
  ~DeviceBuffer();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Binding binding() const { return {data_, bytes_}; }

  struct Owner;  // internal: the device that frees it
  DeviceBuffer(std::shared_ptr<Owner> owner, void* data, size_t bytes)
      : owner_(std::move(owner)), data_(data), bytes_(bytes) {}

 private:
  std::shared_ptr<Owner> owner_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class Engine {
 public:
  // Opens a device. cuda (or automatic finding a GPU): loads the driver, retains the device's primary
  // context and opens the kernel cache. Fails with StatusCode::unavailable when cuda is asked for and no
  // driver or device is present.
  static Result<Engine> open(DeviceKind device, const EngineOptions& options = {});
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  DeviceKind device() const;        // never automatic: what open() chose
  std::string device_name() const;  // "NVIDIA H200 (sm_90, 132 SMs)", "CUDA kernels emulated on the CPU", ...
  std::string arch() const;         // what kernels are compiled for by default: "sm_90" (cuda), "host" (emu), "" (ref)
  Target target() const;            // what this engine plans for (the GPU's own facts on cuda; an H200 elsewhere)

  // Plans `graph` for this device's target() (options.plan.target and require_kernels are set from the
  // device: a plan must fit the GPU it runs on) and makes every kernel of the plan ready to launch.
  Result<Executable> compile(const Graph& graph, const CompileOptions& options = {});
  // The same for a graph planned already (options.plan is not used).
  Result<Executable> compile(Plan plan, const CompileOptions& options = {});
  // A graph with symbolic dims, for every binding of them (DynamicExecutable above). Verifies the graph
  // over its ranges; plans nothing until a binding is prepared or run. A graph without symbols is accepted
  // too (one binding: the empty one). options.allocate_workspace is not used: it owns one workspace.
  Result<DynamicExecutable> compile_dynamic(const Graph& graph, const CompileOptions& options = {});

  // Device memory (host memory for ref and emu), 256-byte aligned, and copies to and from it.
  Result<DeviceBuffer> allocate(size_t bytes);
  Status upload(void* device_dst, const void* host_src, size_t bytes);
  Status download(void* host_dst, const void* device_src, size_t bytes);
  Status fill(void* device_dst, unsigned char byte, size_t bytes);
  Status synchronize(Stream stream = nullptr);

  struct Impl;  // internal (src/runtime/engine.cpp)
  explicit Engine(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> impl_;
};

// Device buffers for every input, parameter and output of `g` (an Executable's plan().graph, or the graph it
// was compiled from): inputs and parameters hold `inputs` in their declared layouts and dtypes, outputs are
// poisoned (all bits set: NaN in every float type). `bindings` points into `buffers`.
struct BoundBuffers {
  std::vector<DeviceBuffer> buffers;
  Bindings bindings;
};
Result<BoundBuffers> upload_bindings(Engine& engine, const Graph& g, const TensorMap& inputs);

// Convenience for tools and tests: runs `exe` once on host tensors (logical order, as run_reference takes
// them), through device buffers allocated for the call. Outputs are poisoned (all bits set: NaN in every
// float type) before the run, so an element no kernel writes shows up. The buffers are new each call (a
// freed one's address may come back with other values), so every call converts the weights again and
// leaves none converted for a later run (RunReport::weight_transforms_run counts them every time).
// `options` as Executable::run takes them (time_kernels: `kiln run --trace`).
Result<TensorMap> run_on_host_tensors(Engine& engine, Executable& exe, const TensorMap& inputs,
                                      RunReport* report = nullptr, const RunOptions& options = {});
// The same for a DynamicExecutable: the symbols' values are read off the input tensors' shapes
// (Graph::dims_from_shapes, which names the tensor, dim and symbol of a disagreement).
Result<TensorMap> run_on_host_tensors(Engine& engine, DynamicExecutable& exe, const TensorMap& inputs,
                                      RunReport* report = nullptr, const RunOptions& options = {});

}  // namespace kiln
