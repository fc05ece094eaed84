// Fibers for the emu backend: mmap'ed stacks with guard pages (fiber.cpp) and a hand-written context switch,
// one per architecture (fiber_switch_x86_64.cpp, fiber_switch_aarch64.cpp; each compiles to nothing on the
// other). docs/emu.md, "Context switch".
//
// Why not swapcontext: glibc's saves and restores the signal mask with a system call on every switch
// (about 0.2 µs); these switches save the callee-saved registers and the floating-point control state and
// swap stack pointers (a few ns). Why not Boost.Context: one more package for ~40 lines of assembly per
// architecture.
#pragma once

#include <cstddef>

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "kiln's emu backend has a fiber switch for x86-64 and aarch64 only (src/runtime/emu/fiber_switch_*.cpp)"
#endif

namespace kiln::emu::detail {

extern "C" {
// Saves the current context on the current stack, stores its stack pointer in *save, and continues the
// context whose stack pointer is `load`. Returns when another switch names *save as its `load`.
void kiln_emu_fiber_switch(void** save, void* load);
}

// Prepares a stack so that switching to the returned stack pointer calls entry(arg) on it, with the default
// floating-point environment; entry must never return (it switches away for the last time instead).
void* fiber_make(void* stack_top, void (*entry)(void*), void* arg);

// `count` stacks of `bytes` each (rounded up to pages), each with an inaccessible guard page below it.
class StackPool {
 public:
  StackPool() = default;
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool();
  // False when the memory cannot be mapped.
  bool reserve(size_t count, size_t bytes);
  void* top(size_t i) const;  // 16-byte aligned

 private:
  char* base_ = nullptr;
  size_t mapped_ = 0, slot_ = 0, count_ = 0, usable_ = 0;
};

}  // namespace kiln::emu::detail
