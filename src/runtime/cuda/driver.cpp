#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

namespace kiln::cuda {

namespace {

// Resolves `name` into `slot`; the first missing symbol is remembered for the error.
template <class F>
void resolve(void* lib, const char* name, F& slot, std::string& missing) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  if (!slot && missing.empty()) missing = name;
}

Result<const Driver*> load() {
  const char* env = std::getenv("KILN_CUDA_DRIVER_LIBRARY");
  const std::string path = env && *env ? env : "libcuda.so.1";
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace; never closed (the driver keeps
  // threads and state that outlive any handle).
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return Status(StatusCode::unavailable,
                  fmt::format("no CUDA driver found: cannot open {} ({}); use --device emu to run kiln's kernels "
                              "on the CPU",
                              path, why ? why : "unknown reason"));
  }
  static Driver d{};
  std::string missing;
  resolve(lib, "cuInit", d.cuInit, missing);
  resolve(lib, "cuDriverGetVersion", d.cuDriverGetVersion, missing);
  resolve(lib, "cuGetErrorName", d.cuGetErrorName, missing);
  resolve(lib, "cuGetErrorString", d.cuGetErrorString, missing);
  resolve(lib, "cuDeviceGetCount", d.cuDeviceGetCount, missing);
  resolve(lib, "cuDeviceGet", d.cuDeviceGet, missing);
  resolve(lib, "cuDeviceGetName", d.cuDeviceGetName, missing);
  resolve(lib, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, missing);
  resolve(lib, "cuDeviceTotalMem_v2", d.cuDeviceTotalMem, missing);
  resolve(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, missing);
  resolve(lib, "cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease, missing);
  resolve(lib, "cuCtxSetCurrent", d.cuCtxSetCurrent, missing);
  resolve(lib, "cuCtxSynchronize", d.cuCtxSynchronize, missing);
  resolve(lib, "cuModuleLoadData", d.cuModuleLoadData, missing);
  resolve(lib, "cuModuleUnload", d.cuModuleUnload, missing);
  resolve(lib, "cuModuleGetFunction", d.cuModuleGetFunction, missing);
  resolve(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute, missing);
  resolve(lib, "cuLaunchKernel", d.cuLaunchKernel, missing);
  resolve(lib, "cuMemAlloc_v2", d.cuMemAlloc, missing);
  resolve(lib, "cuMemFree_v2", d.cuMemFree, missing);
  resolve(lib, "cuMemGetInfo_v2", d.cuMemGetInfo, missing);
  resolve(lib, "cuMemcpyHtoD_v2", d.cuMemcpyHtoD, missing);
  resolve(lib, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH, missing);
  resolve(lib, "cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync, missing);
  resolve(lib, "cuMemsetD8_v2", d.cuMemsetD8, missing);
  resolve(lib, "cuMemsetD8Async", d.cuMemsetD8Async, missing);
  resolve(lib, "cuStreamCreate", d.cuStreamCreate, missing);
  resolve(lib, "cuStreamDestroy_v2", d.cuStreamDestroy, missing);
  resolve(lib, "cuStreamSynchronize", d.cuStreamSynchronize, missing);
  resolve(lib, "cuStreamBeginCapture_v2", d.cuStreamBeginCapture, missing);
  resolve(lib, "cuStreamEndCapture", d.cuStreamEndCapture, missing);
  resolve(lib, "cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlags, missing);
  resolve(lib, "cuGraphLaunch", d.cuGraphLaunch, missing);
  resolve(lib, "cuGraphExecDestroy", d.cuGraphExecDestroy, missing);
  resolve(lib, "cuGraphDestroy", d.cuGraphDestroy, missing);
  resolve(lib, "cuEventCreate", d.cuEventCreate, missing);
  resolve(lib, "cuEventDestroy_v2", d.cuEventDestroy, missing);
  resolve(lib, "cuEventRecord", d.cuEventRecord, missing);
  resolve(lib, "cuEventSynchronize", d.cuEventSynchronize, missing);
  // cuEventElapsedTime_v2 since CUDA 12.8; the original before it (same signature and meaning).
  d.cuEventElapsedTime = reinterpret_cast<decltype(d.cuEventElapsedTime)>(dlsym(lib, "cuEventElapsedTime_v2"));
  if (!d.cuEventElapsedTime) resolve(lib, "cuEventElapsedTime", d.cuEventElapsedTime, missing);
  if (!missing.empty()) {
    return Status(
        StatusCode::unavailable,
        fmt::format("no usable CUDA driver: {} has no symbol {} (driver too old for CUDA 12?)", path, missing));
  }
  const CUresult r = d.cuInit(0);
  if (r == kErrorStubLibrary) {
    return Status(StatusCode::unavailable,
                  fmt::format("no CUDA driver found: {} is the CUDA toolkit's stub library, not a driver", path));
  }
  if (r != kSuccess) {
    return Status(StatusCode::unavailable, fmt::format("no CUDA device: cuInit failed: {}", error_text(d, r)));
  }
  return &d;
}

}  // namespace

Result<const Driver*> driver() {
  static std::once_flag once;
  static Result<const Driver*> loaded = Status(StatusCode::internal, "not loaded");
  std::call_once(once, [] { loaded = load(); });
  return loaded;
}

std::string error_text(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  return fmt::format("{} ({})", name ? name : fmt::format("CUDA error {}", r), text ? text : "no description");
}

Status check(const Driver& d, CUresult r, std::string_view what) {
  if (r == kSuccess) return {};
  return Status(StatusCode::device_error, fmt::format("{}: {}", what, error_text(d, r)));
}

}  // namespace kiln::cuda
