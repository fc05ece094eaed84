// The GPU a plan and its kernels are made for. Code generation reads every hardware fact it uses from a
// Target (tile choices that must fill the SMs, shared memory a block may take), never from a GPU model's
// name, and every NVRTC cache key includes its key(). On the `cuda` device the Target is read from the device; without
// one (`emu`, `kiln prewarm`) it is a named device, H200 by default, or the default device of an arch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/status.h"

namespace kiln {

struct Target {
  std::string name = "h200";   // a known device's name, or the device's own name on `cuda`
  std::string arch = "sm_90";  // what NVRTC compiles for: sm_80, sm_86, sm_89, sm_90, sm_90a, ...
  int sm_count = 132;
  int64_t smem_per_sm = 233472;     // bytes of shared memory an SM has for blocks (228 KiB on sm_90)
  int64_t smem_per_block = 232448;  // the most one block may opt in to (227 KiB on sm_90)
  int regs_per_sm = 65536;          // 32-bit registers
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int64_t l2_bytes = 52428800;  // 50 MB

  // Compute capability as a number: sm_90a -> 90.
  int cc() const;
  // The facts code generation reads ("sm_90 sms=132 smem_block=232448 smem_sm=233472 ..."), for cache keys: a named
  // device and the real GPU with the same facts share entries (a prewarmed h200 cache serves an H200). Add a field here
  // when codegen starts reading it.
  std::string key() const;
  bool operator==(const Target&) const = default;
};

// The default target when no device says otherwise: an H200 (sm_90).
const Target& default_target();

// A known device ("h200", "h100", "a100", "a10", "l4"), or an arch ("sm_80", "sm_90a"): the default device
// of that arch, compiled for exactly that arch. Unknown names are an error listing the known ones.
Result<Target> target_named(std::string_view name_or_arch);

}  // namespace kiln
