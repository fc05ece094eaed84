// The NVRTC wrapper: a complete kernel source -> a cubin for one exact sm_XX, plus its PTX.
//
// NVRTC is opened with dlopen on the first compile (never linked), so a run whose kernels all come from the
// cache, or a host without the toolkit, never loads its 100 MB. Headers come from memory: every file under
// templates/kiln/ and the toolkit's cuda_fp16/cuda_bf16 headers, embedded at build time. Every compile uses
// one fixed option preamble, so NVRTC's automatic precompiled header is reused across kernels that share
// an include prefix (see shared/notes/jit-and-cache.md). Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln::codegen {

struct NvrtcOptions {
  std::string arch = "sm_80";  // exact: sm_80, sm_86, sm_89, sm_90, sm_90a, ...; the cubin runs only there
  std::vector<std::string> extra;  // appended after the fixed preamble (changes the output: key them)
  std::string source_name = "kernel.cu";  // shown in NVRTC's diagnostics
};

// What ptxas reported (-Xptxas -v) for one function.
struct PtxasFunctionInfo {
  std::string name;  // mangled, as ptxas prints it
  std::string arch;  // "sm_80"; empty for a non-entry function
  bool entry = false;
  int registers = 0, shared_bytes = 0, stack_bytes = 0, spill_store_bytes = 0, spill_load_bytes = 0;
};

// Parses the "ptxas info" lines of an NVRTC log, in order of appearance. Lines it does not know are skipped.
std::vector<PtxasFunctionInfo> parse_ptxas_info(std::string_view log);

struct CompiledKernel {
  std::vector<uint8_t> cubin;  // an ELF for exactly the requested arch
  std::string ptx;             // kept so a newer GPU can JIT it
  std::string log;             // NVRTC's full log (ptxas info, PCH messages, warnings)
  // The maximum over the entry functions (normally one) of what ptxas reported.
  int registers = 0, shared_bytes = 0, stack_bytes = 0, spill_store_bytes = 0, spill_load_bytes = 0;
  double compile_ms = 0;  // nvrtcCreateProgram to the last output read
};

// Compiles `source` (which #includes "kiln/device.cuh" and other kiln templates) for `opts.arch`.
// Errors: invalid_argument for a bad arch or option; unsupported when NVRTC cannot be loaded; internal for a
// compile error, with NVRTC's log (trimmed) and the path where the failing source was saved.
Result<CompiledKernel> nvrtc_compile(std::string_view source, const NvrtcOptions& opts);

// Whether this process has loaded NVRTC (through kiln). Nothing but a compile, nvrtc_version_string() and
// supported_archs() loads it.
bool nvrtc_loaded();

// "13.0" from the loaded library; loads NVRTC.
Result<std::string> nvrtc_version_string();

// The CUDA toolkit version kiln was built against ("13.0.88"; "none" without the toolkit): for cache keys,
// without loading NVRTC.
std::string nvrtc_build_version();

// XXH3-128, 32 lowercase hex digits, over the name and content of every embedded template and CUDA header
// (the inputs of every compile besides the source and options): for cache keys.
std::string templates_hash();

// The archs kiln can compile for with the NVRTC found (sm_80 and newer, with the sm_XXa variants from sm_90
// on); loads NVRTC; empty when it cannot be loaded.
std::vector<std::string> supported_archs();

// The fixed options every compile starts with, for `arch` (exposed for the cache key and the benchmark).
std::vector<std::string> nvrtc_preamble(const std::string& arch);

}  // namespace kiln::codegen
