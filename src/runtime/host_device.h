// Host memory as a device: what ref runs on, and the emulator's memory (its kernels run on the CPU).
#pragma once

#include "runtime/device.h"

namespace kiln::runtime {

class HostDevice : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::ref; }
  std::string name() const override { return "the reference on the CPU, f64"; }
  std::string arch() const override { return ""; }
  Result<void*> allocate(size_t bytes) override;
  void release(void* p) override;
  Status upload(void* dst, const void* src, size_t bytes) override;
  Status download(void* dst, const void* src, size_t bytes) override;
  Status fill(void* dst, unsigned char byte, size_t bytes, Stream stream) override;
  Status synchronize(Stream) override { return {}; }  // host work is done when a call returns
  Result<std::unique_ptr<LoadedKernels>> load(const std::vector<const codegen::Kernel*>& distinct,
                                              const std::string& arch, const std::string& unit_name,
                                              CompileReport& report) override;
};

}  // namespace kiln::runtime
