#include "runtime/host_device.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "kiln/plan.h"

namespace kiln::runtime {

Result<void*> HostDevice::allocate(size_t bytes) {
  // At least one byte, rounded up to the alignment as aligned_alloc requires.
  const size_t a = static_cast<size_t>(kWorkspaceAlignment);
  void* p = std::aligned_alloc(a, (std::max<size_t>(bytes, 1) + a - 1) / a * a);
  if (!p) return Status(StatusCode::device_error, fmt::format("out of host memory allocating {} bytes", bytes));
  return p;
}

void HostDevice::release(void* p) { std::free(p); }

Status HostDevice::upload(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return {};
}

Status HostDevice::download(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  return {};
}

Status HostDevice::fill(void* dst, unsigned char byte, size_t bytes, Stream) {
  std::memset(dst, byte, bytes);
  return {};
}

Result<std::unique_ptr<LoadedKernels>> HostDevice::load(const std::vector<const codegen::Kernel*>&, const std::string&,
                                                        const std::string&, CompileReport&) {
  return unsupported("the ref backend runs no generated kernels");
}

std::shared_ptr<Device> make_ref_device() { return std::make_shared<HostDevice>(); }

}  // namespace kiln::runtime
