// Engine: opens a device, compiles graphs into Executables, moves memory (include/kiln/engine.h).
#include <chrono>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "kiln/emu_plan.h"
#include "kiln/engine.h"
#include "kiln/reference.h"
#include "runtime/device.h"
#include "support/stopwatch.h"

namespace kiln {

std::string_view device_kind_name(DeviceKind d) {
  switch (d) {
    case DeviceKind::ref: return "ref";
    case DeviceKind::emu: return "emu";
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::automatic: return "auto";
  }
  return "?";
}

std::optional<DeviceKind> parse_device_kind(std::string_view s) {
  for (DeviceKind d : {DeviceKind::ref, DeviceKind::emu, DeviceKind::cuda, DeviceKind::automatic}) {
    if (s == device_kind_name(d)) return d;
  }
  return std::nullopt;
}

struct Engine::Impl {
  std::shared_ptr<runtime::Device> device;
  std::optional<CacheConfig> cache_config;  // EngineOptions::cache
  // The plan cache, opened at the first compile (null on ref, which plans in microseconds and runs no kernels).
  std::mutex mu;
  bool plan_cache_opened = false;
  std::shared_ptr<KernelCache> plan_cache;
  Result<std::shared_ptr<KernelCache>> open_plan_cache();
};

Result<std::shared_ptr<KernelCache>> Engine::Impl::open_plan_cache() {
  std::lock_guard lock(mu);
  if (plan_cache_opened || device->kind() == DeviceKind::ref) return plan_cache;
  CacheConfig config;
  if (cache_config) {
    config = *cache_config;
  } else {
    KILN_ASSIGN_OR_RETURN(config, CacheConfig::from_env());
  }
  KILN_ASSIGN_OR_RETURN(KernelCache c, KernelCache::open(std::move(config)));
  plan_cache = std::make_shared<KernelCache>(std::move(c));
  plan_cache_opened = true;
  return plan_cache;
}

struct DeviceBuffer::Owner {
  std::shared_ptr<runtime::Device> device;
};

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : owner_(std::move(o.owner_)), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (owner_ && data_) owner_->device->release(data_);
    owner_ = std::move(o.owner_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
DeviceBuffer::~DeviceBuffer() {
  if (owner_ && data_) owner_->device->release(data_);
}

Engine::Engine(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Result<Engine> Engine::open(DeviceKind device, const EngineOptions& options) {
  auto impl = std::make_shared<Impl>();
  impl->cache_config = options.cache;
  switch (device) {
    case DeviceKind::ref: impl->device = runtime::make_ref_device(); break;
    case DeviceKind::emu: impl->device = runtime::make_emu_device(); break;
    case DeviceKind::cuda: {
      KILN_ASSIGN_OR_RETURN(impl->device, runtime::make_cuda_device(options));
      break;
    }
    case DeviceKind::automatic: {
      // A GPU when there is one; anything else (no driver, the stub, no device) falls back to the emulator.
      auto cuda = runtime::make_cuda_device(options);
      if (cuda.ok()) {
        impl->device = std::move(cuda).value();
      } else if (cuda.status().code() == StatusCode::unavailable) {
        impl->device = runtime::make_emu_device();
      } else {
        return cuda.status();
      }
      break;
    }
  }
  return Engine(std::move(impl));
}

DeviceKind Engine::device() const { return impl_->device->kind(); }
std::string Engine::device_name() const { return impl_->device->name(); }
std::string Engine::arch() const { return impl_->device->arch(); }
Target Engine::target() const { return impl_->device->target(); }

Result<Executable> Engine::compile(const Graph& graph, const CompileOptions& options) {
  std::shared_ptr<KernelCache> cache;
  if (options.plan_cache) {
    KILN_ASSIGN_OR_RETURN(cache, impl_->open_plan_cache());
  }
  return runtime::compile_graph(impl_->device, cache.get(), graph, options);
}

Result<Executable> Engine::compile(Plan plan, const CompileOptions& options) {
  return runtime::make_executable(impl_->device, std::move(plan), options, 0);
}

Result<DynamicExecutable> Engine::compile_dynamic(const Graph& graph, const CompileOptions& options) {
  std::shared_ptr<KernelCache> cache;
  if (options.plan_cache) {
    KILN_ASSIGN_OR_RETURN(cache, impl_->open_plan_cache());
  }
  return runtime::make_dynamic_executable(impl_->device, graph, options, std::move(cache));
}

Result<Executable> runtime::compile_graph(std::shared_ptr<Device> device, KernelCache* plan_cache, const Graph& graph,
                                          const CompileOptions& options, SharedWeights* shared) {
  // Planned for this device: the kernel families choose tiles for its SMs and shared memory (ref runs no
  // kernels, so nothing need have a family there, and it generates none).
  PlanOptions po = options.plan;
  po.target = device->target();
  po.require_kernels = device->kind() != DeviceKind::ref;
  if (!po.require_kernels) {
    const support::Stopwatch sw;
    KILN_ASSIGN_OR_RETURN(Plan plan, plan_graph(graph, po));
    return make_executable(std::move(device), std::move(plan), options, sw.ms(), shared);
  }
  KILN_ASSIGN_OR_RETURN(PlannedKernels planned, plan_with_cache(options.plan_cache ? plan_cache : nullptr, graph, po));
  return make_executable(std::move(device), std::move(planned), options, shared);
}

Result<Executable> runtime::make_executable(std::shared_ptr<Device> device, Plan plan, const CompileOptions& options,
                                            double plan_ms, SharedWeights* shared) {
  PlannedKernels p;
  p.plan = std::move(plan);
  p.plan_ms = plan_ms;
  if (device->kind() != DeviceKind::ref) {
    const support::Stopwatch sw;
    KILN_ASSIGN_OR_RETURN(p.kernels, plan_kernel_launches(p.plan));
    p.codegen_ms = sw.ms();
  }
  return make_executable(std::move(device), std::move(p), options, shared);
}

Result<DeviceBuffer> Engine::allocate(size_t bytes) {
  KILN_ASSIGN_OR_RETURN(void* p, impl_->device->allocate(bytes));
  return DeviceBuffer(std::make_shared<DeviceBuffer::Owner>(DeviceBuffer::Owner{impl_->device}), p, bytes);
}

Status Engine::upload(void* dst, const void* src, size_t bytes) { return impl_->device->upload(dst, src, bytes); }
Status Engine::download(void* dst, const void* src, size_t bytes) { return impl_->device->download(dst, src, bytes); }
Status Engine::fill(void* dst, unsigned char byte, size_t bytes) {
  return impl_->device->fill(dst, byte, bytes, nullptr);
}
Status Engine::synchronize(Stream stream) { return impl_->device->synchronize(stream); }

Engine runtime::engine_on(std::shared_ptr<Device> device) {
  auto impl = std::make_shared<Engine::Impl>();
  impl->device = std::move(device);
  return Engine(std::move(impl));
}

Result<BoundBuffers> upload_bindings(Engine& engine, const Graph& g, const TensorMap& inputs) {
  KILN_RETURN_IF_ERROR(check_bindings(g, inputs));
  BoundBuffers b;
  for (const auto& [name, t] : inputs) {
    const std::vector<unsigned char> bytes = to_device_bytes(t, g.tensor(*g.find_tensor(name)).layout);
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, engine.allocate(bytes.size()));
    KILN_RETURN_IF_ERROR(engine.upload(buf.data(), bytes.data(), bytes.size()));
    b.bindings[name] = buf.binding();
    b.buffers.push_back(std::move(buf));
  }
  for (Tensor t : g.outputs()) {
    const TensorInfo& ti = g.tensor(t);
    const auto bytes = static_cast<size_t>(ti.shape.numel() * dtype_size(ti.dtype));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, engine.allocate(bytes));
    KILN_RETURN_IF_ERROR(engine.fill(buf.data(), 0xff, bytes));  // poison: NaN in every float type
    b.bindings[ti.name] = buf.binding();
    b.buffers.push_back(std::move(buf));
  }
  return b;
}

namespace {

// The outputs of `g` from their bindings, in logical order.
Result<TensorMap> download_outputs(Engine& engine, const Graph& g, const Bindings& bindings) {
  TensorMap out;
  for (Tensor t : g.outputs()) {
    const TensorInfo& ti = g.tensor(t);
    const Binding& b = bindings.at(ti.name);
    std::vector<unsigned char> bytes(b.bytes);
    KILN_RETURN_IF_ERROR(engine.download(bytes.data(), b.data, b.bytes));
    out[ti.name] = from_device_bytes(bytes.data(), ti.shape, ti.dtype, ti.layout);
  }
  return out;
}

}  // namespace

Result<TensorMap> run_on_host_tensors(Engine& engine, Executable& exe, const TensorMap& inputs, RunReport* report,
                                      const RunOptions& options) {
  const Graph& g = exe.plan().graph;
  KILN_ASSIGN_OR_RETURN(BoundBuffers bound, upload_bindings(engine, g, inputs));
  const Bindings& bindings = bound.bindings;
  // The Executable keeps converted weights while a weight stays bound at the same address, but these
  // buffers are new on every call and freed when it returns: the allocator may give this call's weight the
  // address of an earlier call's (another weight, or the caller's own buffers freed since), and a later run
  // may find this call's address reused. So the weights are converted again for this call, and the
  // conversion is not kept for a buffer that no longer exists.
  exe.invalidate_weights();
  Status run = exe.run(bindings, nullptr, report, options);
  if (run.ok()) run = engine.synchronize();
  exe.invalidate_weights();
  KILN_RETURN_IF_ERROR(run);
  return download_outputs(engine, g, bindings);
}

Result<TensorMap> run_on_host_tensors(Engine& engine, DynamicExecutable& exe, const TensorMap& inputs,
                                      RunReport* report, const RunOptions& options) {
  const Graph& g = exe.graph();
  DimBindings dims;
  if (g.is_symbolic()) {
    std::map<std::string, Shape, std::less<>> shapes;
    for (const auto& [name, t] : inputs) shapes[name] = t.shape;
    KILN_ASSIGN_OR_RETURN(dims, g.dims_from_shapes(shapes));
  }
  // The binding's own Executable has the graph at these dims, bound and verified once when it was prepared.
  KILN_ASSIGN_OR_RETURN(const Executable* at, exe.prepare(dims));
  const Graph& bound = at->plan().graph;
  KILN_ASSIGN_OR_RETURN(BoundBuffers buffers, upload_bindings(engine, bound, inputs));
  exe.invalidate_weights();  // new buffers each call, as above
  Status run = exe.run(dims, buffers.bindings, nullptr, report, options);
  if (run.ok()) run = engine.synchronize();
  exe.invalidate_weights();
  KILN_RETURN_IF_ERROR(run);
  return download_outputs(engine, bound, buffers.bindings);
}

}  // namespace kiln
