// The CUDA driver API, opened with dlopen("libcuda.so.1") at first use: kiln builds, links and runs on
// machines without a driver (or with only the toolkit's stub library), and says so when asked for a GPU.
//
// Only the handful of types and entry points the cuda backend uses are declared here (not <cuda.h>), so
// the library needs no CUDA toolkit to build. The declarations match the driver ABI of CUDA 12 and 13: the
// `_v2` symbols are the ones <cuda.h> maps its names to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/status.h"

namespace kiln::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;

// The values of <cuda.h>'s enumerators kiln uses.
inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorStubLibrary = 34;
inline constexpr CUresult kErrorNoDevice = 100;
inline constexpr CUresult kErrorNoBinaryForGpu = 209;
inline constexpr int kAttrMultiprocessorCount = 16;
inline constexpr int kAttrL2CacheSize = 38;
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;
inline constexpr int kAttrMaxThreadsPerMultiprocessor = 39;
inline constexpr int kAttrMaxSharedMemoryPerMultiprocessor = 81;
inline constexpr int kAttrMaxRegistersPerMultiprocessor = 82;
inline constexpr int kAttrMaxBlocksPerMultiprocessor = 106;
inline constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
inline constexpr unsigned kStreamNonBlocking = 1;
inline constexpr int kStreamCaptureModeThreadLocal = 1;

// The driver's entry points, resolved once. Every member is non-null when driver() succeeded.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemGetInfo)(size_t*, size_t*);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
};

// The driver, loaded and initialized (cuInit) on the first call; later calls return the same result.
// Fails with StatusCode::unavailable and "no CUDA driver found: ..." when libcuda.so.1 cannot be opened
// (or $KILN_CUDA_DRIVER_LIBRARY, if set, names a file that cannot), when it is the toolkit's stub, or when
// cuInit fails (no device, driver too old).
Result<const Driver*> driver();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver result.
std::string error_text(const Driver& d, CUresult r);

// A Status for a failed driver call: "<what>: <error_text>"; ok for kSuccess.
Status check(const Driver& d, CUresult r, std::string_view what);

}  // namespace kiln::cuda
