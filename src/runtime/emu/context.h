// Fibers for the emu backend: a hand-written x86-64 context switch and mmap'ed stacks with guard pages.
//
// Why not swapcontext: glibc's saves and restores the signal mask with a system call on every switch
// (about 0.2 µs); this switch saves the six callee-saved registers, MXCSR and the x87 control word and
// swaps stack pointers (a few ns). Why not Boost.Context: one more package for ~40 lines of assembly.
#pragma once

#include <cstddef>

#if !defined(__x86_64__)
#error "kiln's emu backend has an x86-64 context switch only (src/runtime/emu/context.cpp)"
#endif

namespace kiln::emu::detail {

extern "C" {
// Saves the current context on the current stack, stores its stack pointer in *save, and continues the
// context whose stack pointer is `load`.
void kiln_emu_ctx_switch(void** save, void* load);
}

// Prepares a stack so that switching to the returned stack pointer calls entry(arg) on it; entry must never
// return (it switches away for the last time instead).
void* ctx_make(void* stack_top, void (*entry)(void*), void* arg);

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
