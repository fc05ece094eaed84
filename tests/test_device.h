// Which device the tests of generated code run on. The codegen suites and test_engine.cpp are compiled once
// and linked into two programs: kiln_tests (the emulator in checked mode, and ref) and kiln_gpu_tests (the
// GPU through the execution API; tests/gpu/). Each program defines on_cuda() in a file of its own
// (tests/test_device_emu.cpp, tests/gpu/gpu_environment.cpp), so no test source is compiled twice.
#pragma once

namespace kiln::testing {

bool on_cuda();

}  // namespace kiln::testing
