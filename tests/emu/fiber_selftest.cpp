// The fiber check (fiber_check.h) as a program without gtest, so that it can be linked statically for
// another architecture and run under qemu-user: tools/cross-check-aarch64.sh builds it from this file,
// src/runtime/emu/fiber.cpp and fiber_switch_aarch64.cpp. Exit 0 and one line "fiber_selftest: ok ..." when
// every check held.
#include <chrono>
#include <cstdio>

#include "emu/fiber_check.h"

int main() {
  const int rounds = 100000;
  auto t0 = std::chrono::steady_clock::now();
  const std::string err = kiln::emu::fiber_check::run(rounds);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!err.empty()) {
    std::fprintf(stderr, "fiber_selftest: FAILED: %s\n", err.c_str());
    return 1;
  }
  // Under an emulator the time says nothing about the hardware; it is printed to show the loop really ran.
  std::printf("fiber_selftest: ok: %d round trips (%d switches), all registers and modes kept, %.1f ns/switch\n",
              rounds, 2 * rounds + 2, s / (2 * rounds + 2) * 1e9);
  return 0;
}
