// The cuda device: the GPU through the driver API (runtime/cuda/driver.h). Kernels come from the kernel cache
// or NVRTC (runtime/kernel_provider.h) as cubins for the device's exact arch, loaded with cuModuleLoadData;
// when a cubin does not fit the device (a cache filled for another arch) the stored PTX is loaded instead
// and the driver compiles it.
#include <chrono>
#include <mutex>

#include <fmt/format.h>

#include "runtime/cuda/driver.h"
#include "runtime/device.h"
#include "runtime/kernel_provider.h"

namespace kiln::runtime {

namespace {

using namespace kiln::cuda;

// The primary context of one device, retained for the device object's lifetime and made current on the
// calling thread before each driver call (cheap; callers may come from any thread).
struct Context {
  const Driver* d = nullptr;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  Status make_current() const { return check(*d, d->cuCtxSetCurrent(ctx), "cuCtxSetCurrent"); }
  ~Context() {
    if (ctx) d->cuDevicePrimaryCtxRelease(dev);
  }
};

class CudaKernels : public LoadedKernels {
 public:
  CudaKernels(std::shared_ptr<Context> c) : c_(std::move(c)) {}
  ~CudaKernels() override {
    (void)c_->make_current();
    if (graph_exec_) c_->d->cuGraphExecDestroy(graph_exec_);
    if (capture_stream_) c_->d->cuStreamDestroy(capture_stream_);
    if (event_start_) c_->d->cuEventDestroy(event_start_);
    if (event_stop_) c_->d->cuEventDestroy(event_stop_);
    for (CUmodule m : modules_) c_->d->cuModuleUnload(m);
  }

  // Loads one cached entry: the cubin, or its PTX when the cubin is for another arch (counted in `ptx`).
  Status add(const codegen::Kernel& k, const CacheEntry& e, int max_smem, int& ptx) {
    const Driver& d = *c_->d;
    CUmodule m = nullptr;
    CUresult r = d.cuModuleLoadData(&m, e.cubin.data());
    if (r != kSuccess && !e.ptx.empty()) {
      const CUresult first = r;
      r = d.cuModuleLoadData(&m, e.ptx.c_str());  // NUL-terminated PTX text: the driver JIT-compiles it
      if (r != kSuccess) {
        return check(d, r,
                     fmt::format("kernel {}: loading its cubin ({}) failed: {}, and its PTX", k.entry, e.arch,
                                 error_text(d, first)));
      }
      ++ptx;
    }
    KILN_RETURN_IF_ERROR(check(d, r, fmt::format("kernel {}: cuModuleLoadData ({})", k.entry, e.arch)));
    modules_.push_back(m);
    CUfunction f = nullptr;
    KILN_RETURN_IF_ERROR(check(d, d.cuModuleGetFunction(&f, m, k.entry.c_str()),
                               fmt::format("kernel {}: cuModuleGetFunction", k.entry)));
    if (static_cast<int>(k.dynamic_smem) > max_smem) {
      return unsupported(fmt::format("kernel {} needs {} bytes of shared memory; the device allows {} per block",
                                     k.entry, k.dynamic_smem, max_smem));
    }
    // Static and dynamic shared memory above 48 KB together need the opt-in (a GEMM's stages plus the pad
    // that pins its residency, codegen/family.h's GemmTiles): ask for exactly the dynamic part.
    if (k.dynamic_smem > 0) {
      KILN_RETURN_IF_ERROR(
          check(d, d.cuFuncSetAttribute(f, kFuncAttrMaxDynamicSharedSizeBytes, static_cast<int>(k.dynamic_smem)),
                fmt::format("kernel {}: cuFuncSetAttribute(max dynamic shared memory {})", k.entry, k.dynamic_smem)));
    }
    functions_.push_back(f);
    return {};
  }

  Status launch(int index, const codegen::Kernel& spec, const std::vector<KernelArg>& args, Stream stream) override {
    const Driver& d = *c_->d;
    std::vector<CUdeviceptr> ptrs(args.size());
    std::vector<void*> params(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      ptrs[i] = reinterpret_cast<CUdeviceptr>(args[i].data);
      // cuLaunchKernel copies each parameter's size from where its pointer points: an int by value is
      // the int itself.
      params[i] = args[i].by_value ? static_cast<void*>(const_cast<int32_t*>(&args[i].value)) : &ptrs[i];
    }
    return check(d,
                 d.cuLaunchKernel(functions_.at(static_cast<size_t>(index)), spec.grid.x, spec.grid.y, spec.grid.z,
                                  spec.block.x, spec.block.y, spec.block.z, spec.dynamic_smem,
                                  static_cast<CUstream>(stream), params.data(), nullptr),
                 fmt::format("cuLaunchKernel(grid {}x{}x{}, block {}x{}x{}, {} B shared)", spec.grid.x, spec.grid.y,
                             spec.grid.z, spec.block.x, spec.block.y, spec.block.z, spec.dynamic_smem));
  }

  // Events on the launch's stream before and after it: the GPU's own time of the kernel (launch overhead
  // excluded), waited for. Two events per Executable, made at the first timed launch.
  Status launch_timed(int index, const codegen::Kernel& spec, const std::vector<KernelArg>& args, Stream stream,
                      double& ms) override {
    const Driver& d = *c_->d;
    if (!event_start_) {
      KILN_RETURN_IF_ERROR(check(d, d.cuEventCreate(&event_start_, 0), "cuEventCreate"));
      KILN_RETURN_IF_ERROR(check(d, d.cuEventCreate(&event_stop_, 0), "cuEventCreate"));
    }
    const auto s = static_cast<CUstream>(stream);
    KILN_RETURN_IF_ERROR(check(d, d.cuEventRecord(event_start_, s), "cuEventRecord"));
    KILN_RETURN_IF_ERROR(launch(index, spec, args, stream));
    KILN_RETURN_IF_ERROR(check(d, d.cuEventRecord(event_stop_, s), "cuEventRecord"));
    KILN_RETURN_IF_ERROR(check(d, d.cuEventSynchronize(event_stop_), "cuEventSynchronize"));
    float elapsed = 0;
    KILN_RETURN_IF_ERROR(check(d, d.cuEventElapsedTime(&elapsed, event_start_, event_stop_), "cuEventElapsedTime"));
    ms = elapsed;
    return {};
  }

  bool can_capture() const override { return true; }

  // Capture runs on a stream of our own: capture records and runs nothing, so the graph can then be
  // launched on any stream of the caller's, the default stream included (which cannot be captured).
  Result<Stream> begin_capture() override {
    const Driver& d = *c_->d;
    KILN_RETURN_IF_ERROR(c_->make_current());
    if (!capture_stream_) {
      KILN_RETURN_IF_ERROR(check(d, d.cuStreamCreate(&capture_stream_, kStreamNonBlocking), "cuStreamCreate"));
    }
    KILN_RETURN_IF_ERROR(
        check(d, d.cuStreamBeginCapture(capture_stream_, kStreamCaptureModeThreadLocal), "cuStreamBeginCapture"));
    return static_cast<Stream>(capture_stream_);
  }

  Status end_capture() override {
    const Driver& d = *c_->d;
    CUgraph graph = nullptr;
    KILN_RETURN_IF_ERROR(check(d, d.cuStreamEndCapture(capture_stream_, &graph), "cuStreamEndCapture"));
    if (graph_exec_) {
      d.cuGraphExecDestroy(graph_exec_);
      graph_exec_ = nullptr;
    }
    const CUresult r = d.cuGraphInstantiateWithFlags(&graph_exec_, graph, 0);
    d.cuGraphDestroy(graph);
    return check(d, r, "cuGraphInstantiateWithFlags");
  }

  Status replay(Stream stream) override {
    if (!graph_exec_) return Status(StatusCode::internal, "replay without a captured graph");
    return check(*c_->d, c_->d->cuGraphLaunch(graph_exec_, static_cast<CUstream>(stream)), "cuGraphLaunch");
  }

 private:
  std::shared_ptr<Context> c_;
  std::vector<CUmodule> modules_;
  std::vector<CUfunction> functions_;
  CUstream capture_stream_ = nullptr;
  CUgraphExec graph_exec_ = nullptr;
  CUevent event_start_ = nullptr, event_stop_ = nullptr;
};

class CudaDevice : public Device {
 public:
  CudaDevice(std::shared_ptr<Context> c, Target target, const EngineOptions& o)
      : c_(std::move(c)), target_(std::move(target)), options_(o) {}

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return fmt::format("{} ({}, {} SMs)", target_.name, arch(), target_.sm_count); }
  std::string arch() const override { return target_.arch; }
  Target target() const override { return target_; }

  Result<void*> allocate(size_t bytes) override {
    KILN_RETURN_IF_ERROR(c_->make_current());
    CUdeviceptr p = 0;
    KILN_RETURN_IF_ERROR(
        check(*c_->d, c_->d->cuMemAlloc(&p, std::max<size_t>(bytes, 1)), fmt::format("cuMemAlloc({} bytes)", bytes)));
    return reinterpret_cast<void*>(p);
  }
  void release(void* p) override {
    if (!p) return;
    (void)c_->make_current();
    c_->d->cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  }
  Status upload(void* dst, const void* src, size_t bytes) override {
    KILN_RETURN_IF_ERROR(c_->make_current());
    return check(*c_->d, c_->d->cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, bytes), "cuMemcpyHtoD");
  }
  Status download(void* dst, const void* src, size_t bytes) override {
    KILN_RETURN_IF_ERROR(c_->make_current());
    return check(*c_->d, c_->d->cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), "cuMemcpyDtoH");
  }
  Status fill(void* dst, unsigned char byte, size_t bytes, Stream stream) override {
    KILN_RETURN_IF_ERROR(c_->make_current());
    return check(*c_->d,
                 c_->d->cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), byte, bytes, static_cast<CUstream>(stream)),
                 "cuMemsetD8Async");
  }
  Status synchronize(Stream stream) override {
    KILN_RETURN_IF_ERROR(c_->make_current());
    return check(*c_->d, c_->d->cuStreamSynchronize(static_cast<CUstream>(stream)),
                 "cuStreamSynchronize (a kernel of an earlier run may have failed)");
  }

  Result<std::unique_ptr<LoadedKernels>> load(const std::vector<const codegen::Kernel*>& distinct,
                                              const std::string& arch, const std::string&,
                                              CompileReport& report) override {
    KILN_RETURN_IF_ERROR(open_cache());
    std::vector<codegen::Kernel> kernels;
    for (const codegen::Kernel* k : distinct) kernels.push_back(*k);
    ObtainOptions oo;
    oo.archs = {arch};
    oo.jobs = options_.compile_jobs;
    auto t0 = std::chrono::steady_clock::now();
    // No lock: KernelCache is safe to share between threads, and obtain_kernels compiles a key once however
    // many threads ask (a DynamicExecutable's background compile must not hold up another binding's load).
    ObtainResult got = obtain_kernels(*cache_, kernels, oo);
    report.obtain_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    report.cache_hits = got.cached;
    report.compiled = got.compiled;
    report.warnings.insert(report.warnings.end(), got.warnings.begin(), got.warnings.end());
    if (got.failed > 0) {
      std::string why;
      for (const std::string& e : got.errors) why += "\n" + e;
      return Status(StatusCode::unsupported,
                    fmt::format("{} of {} kernels could not be obtained for {}:{}", got.failed, got.total, arch, why));
    }
    KILN_RETURN_IF_ERROR(c_->make_current());
    auto loaded = std::make_unique<CudaKernels>(c_);
    for (size_t i = 0; i < kernels.size(); ++i) {
      KILN_RETURN_IF_ERROR(
          loaded->add(kernels[i], got.entries[i], static_cast<int>(target_.smem_per_block), report.ptx_loaded));
    }
    return std::unique_ptr<LoadedKernels>(std::move(loaded));
  }

 private:
  Status open_cache() {
    std::lock_guard lock(cache_mu_);
    if (cache_) return {};
    CacheConfig config;
    if (options_.cache) {
      config = *options_.cache;
    } else {
      KILN_ASSIGN_OR_RETURN(config, CacheConfig::from_env());
    }
    KILN_ASSIGN_OR_RETURN(KernelCache c, KernelCache::open(config));
    cache_ = std::make_unique<KernelCache>(std::move(c));
    return {};
  }

  std::shared_ptr<Context> c_;
  Target target_;
  EngineOptions options_;
  std::mutex cache_mu_;
  std::unique_ptr<KernelCache> cache_;
};

}  // namespace

Result<std::shared_ptr<Device>> make_cuda_device(const EngineOptions& options) {
  KILN_ASSIGN_OR_RETURN(const Driver* d, kiln::cuda::driver());
  int count = 0;
  KILN_RETURN_IF_ERROR(check(*d, d->cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0) return Status(StatusCode::unavailable, "no CUDA device: the driver reports none");
  if (options.device_ordinal < 0 || options.device_ordinal >= count) {
    return invalid_argument(fmt::format("CUDA device {} does not exist: this machine has {} (0 to {})",
                                        options.device_ordinal, count, count - 1));
  }
  auto c = std::make_shared<Context>();
  c->d = d;
  KILN_RETURN_IF_ERROR(check(*d, d->cuDeviceGet(&c->dev, options.device_ordinal), "cuDeviceGet"));
  char name[256] = {};
  KILN_RETURN_IF_ERROR(check(*d, d->cuDeviceGetName(name, sizeof name - 1, c->dev), "cuDeviceGetName"));
  // The Target kernels are planned for: every hardware fact codegen reads, from the device itself.
  auto attr = [&](int which) -> Result<int> {
    int v = 0;
    KILN_RETURN_IF_ERROR(check(*d, d->cuDeviceGetAttribute(&v, which, c->dev), "cuDeviceGetAttribute"));
    return v;
  };
  Target t;
  t.name = name;
  KILN_ASSIGN_OR_RETURN(int major, attr(kAttrComputeCapabilityMajor));
  KILN_ASSIGN_OR_RETURN(int minor, attr(kAttrComputeCapabilityMinor));
  t.arch = fmt::format("sm_{}{}", major, minor);
  KILN_ASSIGN_OR_RETURN(t.sm_count, attr(kAttrMultiprocessorCount));
  KILN_ASSIGN_OR_RETURN(int smem_block, attr(kAttrMaxSharedMemoryPerBlockOptin));
  KILN_ASSIGN_OR_RETURN(int smem_sm, attr(kAttrMaxSharedMemoryPerMultiprocessor));
  KILN_ASSIGN_OR_RETURN(t.regs_per_sm, attr(kAttrMaxRegistersPerMultiprocessor));
  KILN_ASSIGN_OR_RETURN(t.max_threads_per_sm, attr(kAttrMaxThreadsPerMultiprocessor));
  KILN_ASSIGN_OR_RETURN(t.max_blocks_per_sm, attr(kAttrMaxBlocksPerMultiprocessor));
  KILN_ASSIGN_OR_RETURN(int l2, attr(kAttrL2CacheSize));
  t.smem_per_block = smem_block, t.smem_per_sm = smem_sm, t.l2_bytes = l2;
  KILN_RETURN_IF_ERROR(check(*d, d->cuDevicePrimaryCtxRetain(&c->ctx, c->dev), "cuDevicePrimaryCtxRetain"));
  KILN_RETURN_IF_ERROR(c->make_current());
  return std::shared_ptr<Device>(std::make_shared<CudaDevice>(c, std::move(t), options));
}

}  // namespace kiln::runtime
