// The gpu test executable (CTest label `gpu`): test_engine.cpp and every tests/test_codegen_*.cpp, the same
// objects kiln_tests links, with on_cuda() true (tests/test_device.h), so that every sample and every
// randomized per-family shape runs on the GPU against `ref`. Without a driver or device every test is
// skipped, with the reason, instead of failing.
#include <gtest/gtest.h>

#include "kiln/engine.h"
#include "test_device.h"

namespace kiln::testing {

bool on_cuda() { return true; }

}  // namespace kiln::testing

namespace {

class CudaDeviceRequired : public ::testing::Environment {
 public:
  void SetUp() override {
    auto e = kiln::Engine::open(kiln::DeviceKind::cuda);
    if (!e.ok()) GTEST_SKIP() << "gpu tests skipped: " << e.status().message();
    std::printf("gpu tests on %s\n", e->device_name().c_str());
  }
};

[[maybe_unused]] ::testing::Environment* const cuda_device_required =
    ::testing::AddGlobalTestEnvironment(new CudaDeviceRequired);

}  // namespace
