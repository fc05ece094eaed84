// kiln_tests runs the tests of generated code on the emulator (tests/test_device.h).
#include "test_device.h"

namespace kiln::testing {

bool on_cuda() { return false; }

}  // namespace kiln::testing
