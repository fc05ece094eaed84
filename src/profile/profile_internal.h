// What the pieces of profile_plan share (src/runtime/profile/).
#pragma once

#include <string>

#include "codegen/family.h"
#include "kiln/profile.h"

namespace kiln::profile_detail {

// What a KernelConfig says that the profile shows or estimates with.
struct KernelShape {
  std::string config;  // e.g. "tc 128x64x32 4x8 s3"
  double flops = 0;    // GEMM families: 2 x multiply-adds
  bool tensor_cores = false;
};
KernelShape kernel_shape(const codegen::KernelConfig& c);

// The roofline estimate and limiters of a row whose static facts and counters are filled.
void estimate(const DevicePeaks& peaks, KernelProfileRow& row);

}  // namespace kiln::profile_detail
