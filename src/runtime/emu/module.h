// What the emu compiler hands the launcher: a loaded shared object and its kernels' entry points.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "kiln/emu.h"
#include "kiln/host/emu_abi.h"

namespace kiln::emu::detail {

using InvokeFn = void (*)(void** args);
using ParamsFn = int (*)(size_t* sizes, int capacity);

struct KernelEntry {
  InvokeFn invoke = nullptr;
  ParamsFn params = nullptr;
};

class ModuleImpl final : public Module {
 public:
  bool has_kernel(std::string_view name) const override { return kernels.count(std::string(name)) != 0; }
  bool from_disk_cache() const override { return cached; }
  const std::string& so_path() const override { return path; }
  const std::string& cache_warning() const override { return warning; }

  void* handle = nullptr;
  std::string path;
  std::string warning;
  bool cached = false;
  std::map<std::string, KernelEntry, std::less<>> kernels;
};

// The table of runtime functions every loaded shared object receives (launch.cpp).
const struct ::kiln_emu_api* runtime_api();

}  // namespace kiln::emu::detail
