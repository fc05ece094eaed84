// The emu fiber switch on the build machine's architecture (src/runtime/emu/fiber_switch_*.cpp): the checks
// of tests/emu/fiber_check.h, which tools/cross-check-aarch64.sh also runs for aarch64 under qemu.
#include <gtest/gtest.h>

#include <cstdint>

#include "emu/fiber_check.h"

namespace kiln::emu::test {
namespace {

TEST(EmuFiber, SwitchKeepsCalleeSavedRegistersAndRoundingModes) { EXPECT_EQ(fiber_check::run(1000), ""); }

TEST(EmuFiber, StacksAreAlignedAndReusable) {
  detail::StackPool pool;
  ASSERT_TRUE(pool.reserve(4, 20 * 1024));  // rounded up to pages
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.top(i)) % 16, 0u) << i;
  void* first = pool.top(0);
  ASSERT_TRUE(pool.reserve(2, 20 * 1024));  // fewer stacks of the same size: the mapping is kept
  EXPECT_EQ(pool.top(0), first);
}

}  // namespace
}  // namespace kiln::emu::test
