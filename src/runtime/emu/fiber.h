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

// Which sanitizer instruments this build (gcc defines __SANITIZE_*__, clang answers __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define KILN_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define KILN_EMU_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define KILN_EMU_TSAN 1
#endif
#endif
#if KILN_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if KILN_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "kiln's emu backend has a fiber switch for x86-64 and aarch64 only (src/runtime/emu/fiber_switch_*.cpp)"
#endif

namespace kiln::emu::detail {

extern "C" {
// Saves the current context on the current stack, stores its stack pointer in *save, and continues the
// context whose stack pointer is `load`. Returns when another switch names *save as its `load`.
void kiln_emu_fiber_switch(void** save, void* load);
}

// One side of a switch: a fiber, or the thread's own stack (the block scheduler). Besides the saved stack
// pointer it carries what the sanitizers must be told at each switch, or they would take the fiber stacks
// for an overflow of the thread's stack (ASan: the stack's bounds and the fiber's fake stack, which holds
// its frames' locals under detect_stack_use_after_return; TSan: its fiber handle). Empty outside those builds.
struct FiberContext {
  void* sp = nullptr;
#if KILN_EMU_ASAN
  const void* stack_bottom = nullptr;  // learned on the first switch away from it (the thread's stack)
  size_t stack_size = 0;
  void* fake_stack = nullptr;
#endif
#if KILN_EMU_TSAN
  void* tsan_fiber = nullptr;
#endif
};

// From `from` (the running context) to `to`; returns when a later switch comes back to `from`. With
// `final`, `from` is never resumed: ASan frees its fake stack, and the call does not return.
inline void fiber_switch(FiberContext& from, FiberContext& to, [[maybe_unused]] bool final = false) {
#if KILN_EMU_ASAN
  __sanitizer_start_switch_fiber(final ? nullptr : &from.fake_stack, to.stack_bottom, to.stack_size);
#endif
#if KILN_EMU_TSAN
  __tsan_switch_to_fiber(to.tsan_fiber, 0);  // flags 0: the switch orders the two (happens-before)
#endif
  kiln_emu_fiber_switch(&from.sp, to.sp);
#if KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
#endif
}

// The first thing a fiber does: completes the switch that started it, and records the bounds of the stack
// it came from (`back`, the thread's stack) so that switching back can name them.
inline void fiber_entered([[maybe_unused]] FiberContext& back) {
#if KILN_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &back.stack_bottom, &back.stack_size);
#endif
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
  void* top(size_t i) const;                 // 16-byte aligned
  size_t usable() const { return usable_; }  // bytes of each stack below its top

 private:
  char* base_ = nullptr;
  size_t mapped_ = 0, slot_ = 0, count_ = 0, usable_ = 0;
};

}  // namespace kiln::emu::detail
