// The emu device: kiln's generated kernels compiled for the host (one shared object per Executable, cached
// on disk by the emulator) and launched on host memory by the emulator.
#include <chrono>

#include <fmt/format.h>

#include "runtime/host_device.h"
#include "support/log.h"

namespace kiln::runtime {

namespace {

class EmuKernels : public LoadedKernels {
 public:
  EmuKernels(std::shared_ptr<const emu::Module> module, emu::LaunchOptions launch,
             std::shared_ptr<EmuLaunchRecords> records)
      : module_(std::move(module)), launch_(launch), records_(std::move(records)) {}

  Status launch(int, const codegen::Kernel& spec, const std::vector<KernelArg>& args, Stream) override {
    std::vector<emu::Arg> a;
    a.reserve(args.size());
    for (const KernelArg& k : args)
      a.push_back(k.by_value ? emu::Arg::value(k.value) : emu::Arg::buffer(k.data, k.bytes, std::string(k.name)));
    emu::LaunchReport report;
    KILN_RETURN_IF_ERROR(emu::launch(*module_, spec.entry, {spec.grid.x, spec.grid.y, spec.grid.z},
                                     {spec.block.x, spec.block.y, spec.block.z}, spec.dynamic_smem, a, launch_,
                                     &report));
    if (records_ && report.profile) {
      std::lock_guard lock(records_->mu);
      records_->launches.push_back({spec.entry, *std::move(report.profile)});
    }
    return {};
  }

 private:
  std::shared_ptr<const emu::Module> module_;
  emu::LaunchOptions launch_;
  std::shared_ptr<EmuLaunchRecords> records_;
};

class EmuDevice : public HostDevice {
 public:
  EmuDevice(const emu::LaunchOptions& launch, std::shared_ptr<EmuLaunchRecords> records)
      : launch_(launch), records_(std::move(records)) {}
  DeviceKind kind() const override { return DeviceKind::emu; }
  std::string name() const override { return "CUDA kernels emulated on the CPU"; }
  std::string arch() const override { return "host"; }

  Result<std::unique_ptr<LoadedKernels>> load(const std::vector<const codegen::Kernel*>& distinct, const std::string&,
                                              const std::string& unit_name, CompileReport& report) override {
    // The host compiler runs kiln's kernels: say which variable to set when there is none.
    KILN_RETURN_IF_ERROR(emu::check_host_compiler());
    std::string unit;
    std::vector<std::string> entries;
    for (const codegen::Kernel* k : distinct) {
      unit += k->source + "\n";
      entries.push_back(k->entry);
    }
    std::shared_ptr<const emu::Module> module;
    if (!entries.empty()) {
      emu::CompileOptions co;
      co.source_name = unit_name + ".kernels.cu";
      auto t0 = std::chrono::steady_clock::now();
      KILN_ASSIGN_OR_RETURN(module, emu::compile(unit, entries, co));
      report.obtain_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      report.host_compiled = !module->from_disk_cache();
      KILN_LOG(
          info, "emu: {} kernels of '{}' {} ({:.0f} ms)", entries.size(), unit_name,
          report.host_compiled ? "compiled with the host compiler: not in the emu cache" : "loaded from the emu cache",
          report.obtain_ms);
      if (!module->cache_warning().empty()) report.warnings.push_back(module->cache_warning());
    }
    return std::unique_ptr<LoadedKernels>(std::make_unique<EmuKernels>(std::move(module), launch_, records_));
  }

 private:
  emu::LaunchOptions launch_;
  std::shared_ptr<EmuLaunchRecords> records_;
};

}  // namespace

std::shared_ptr<Device> make_emu_device(const emu::LaunchOptions& launch, std::shared_ptr<EmuLaunchRecords> records) {
  return std::make_shared<EmuDevice>(launch, std::move(records));
}

}  // namespace kiln::runtime
