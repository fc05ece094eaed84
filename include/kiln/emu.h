// The emu backend: runs CUDA kernels written against kiln's device prelude (templates/kiln/device.cuh) on
// the CPU with CUDA's execution semantics. See docs/emu.md.
//
//   auto m = kiln::emu::compile(source, {"my_kernel"});          // host C++ compiler -> .so, cached on disk
//   std::vector<kiln::emu::Arg> args{kiln::emu::Arg::buffer(x.data(), x.size() * 4, "x"),
//                                    kiln::emu::Arg::value(n)};
//   kiln::Status s = kiln::emu::launch(**m, "my_kernel", {grid}, {256}, 0, args);
//
// Every CUDA thread is a fiber; one OS thread runs a block to completion; blocks run on a pool of workers.
// Kernel errors (divergent barriers, incomplete warp rendezvous, out-of-bounds accesses in checked mode, ...)
// come back as a Status naming the kernel, the block, the thread and the source line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/emu_profile.h"
#include "kiln/status.h"

namespace kiln::emu {

// The order in which a block's fibers are run between sync points.
enum class Schedule { forward, reverse, random };
const char* schedule_name(Schedule s);

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

// One kernel argument, as cudaLaunchKernel sees it: the bytes of the parameter. A buffer is a pointer
// parameter whose extent is known, so checked mode can report accesses outside it.
struct Arg {
  std::vector<unsigned char> bytes;
  const void* base = nullptr;  // buffers only
  size_t extent = 0;           // buffers only: bytes
  std::string name;            // buffers only: named in out-of-bounds reports
  bool is_buffer = false;

  template <class T>
  static Arg value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied bytewise");
    Arg a;
    a.bytes.resize(sizeof(T));
    std::memcpy(a.bytes.data(), &v, sizeof(T));
    return a;
  }
  static Arg buffer(const void* p, size_t bytes, std::string name = {}) {
    Arg a = value(p);
    a.base = p;
    a.extent = bytes;
    a.name = std::move(name);
    a.is_buffer = true;
    return a;
  }
};

struct CompileOptions {
  std::string host_cxx;                   // default: $KILN_HOST_CXX, else "c++"
  std::string source_name = "kernel.cu";  // the file name errors and __FILE__ give
  std::vector<std::string> extra_flags;   // appended to kiln's flags (and part of the cache key)
  std::string cache_dir;                  // the kernel cache directory; default: cache_dir()
};

struct LaunchOptions {
  std::optional<Schedule> schedule;  // default: $KILN_EMU_SCHEDULE (forward|reverse|random[:SEED]), else forward
  std::optional<uint64_t> seed;      // for Schedule::random; default: from $KILN_EMU_SCHEDULE, else 1
  std::optional<bool> checked;       // bounds-check kiln::ld/st/cp_async; default: $KILN_EMU_CHECKED=1
  int threads = 0;                   // worker threads; 0: $KILN_EMU_THREADS, else the hardware's count
  size_t stack_bytes = 0;            // per fiber; 0: $KILN_EMU_STACK_KIB, else 64 KiB
  // Count every global and shared access (LaunchReport::profile, include/kiln/emu_profile.h). Off: one
  // predictable branch per access.
  bool profile = false;
};

struct LaunchReport {
  uint64_t context_switches = 0;      // fiber switches, both directions
  std::vector<std::string> warnings;  // e.g. cp.async groups still pending when a thread exits
  Schedule schedule = Schedule::forward;
  uint64_t seed = 0;
  std::optional<KernelProfile> profile;  // with LaunchOptions::profile
};

// A compiled kernel source, loaded into this process. Modules live until the process exits.
class Module {
 public:
  virtual ~Module() = default;
  virtual bool has_kernel(std::string_view name) const = 0;
  virtual bool from_disk_cache() const = 0;  // loaded from the on-disk cache rather than compiled now
  virtual const std::string& so_path() const = 0;
  // Why a module compiled now could not be stored in the kernel cache (a full disk, a directory without
  // write permission, one that is not private), or "".
  virtual const std::string& cache_warning() const = 0;
};

// Compiles `source` (which includes "kiln/device.cuh") with the host C++ compiler into a shared object
// exporting `kernels` (extern "C" __global__ functions), or loads it from the on-disk cache.
Result<std::shared_ptr<const Module>> compile(const std::string& source, const std::vector<std::string>& kernels,
                                              const CompileOptions& options = {});

Status launch(const Module& module, std::string_view kernel, Dim3 grid, Dim3 block, size_t dynamic_smem_bytes,
              const std::vector<Arg>& args, const LaunchOptions& options = {}, LaunchReport* report = nullptr);

// $KILN_HOST_CXX, else "c++".
std::string host_compiler();
// Ok when `cxx` (default host_compiler()) runs; says which variable to set when it does not.
Status check_host_compiler(const std::string& cxx = {});
// The kernel cache directory ($KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; "" when none):
// compiled shared objects are its entries of kind emu, under kernels/emu/ (docs/cache.md).
std::string cache_dir();

}  // namespace kiln::emu
