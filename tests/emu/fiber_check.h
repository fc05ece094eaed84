// A check of the emu fiber switch (src/runtime/emu/fiber.h) on the machine that runs it: the main context
// and one fiber ping-pong, and before every switch each side sets every callee-saved register to a pattern
// of its own (x86-64: rbx, rbp, r12-r15; aarch64: x19-x28, d8-d15, and x29/sp), which it checks once it
// is switched back to. Also checked: the fiber's entry gets its argument on a 16-byte aligned stack, with
// the default rounding mode, and a rounding mode set on one side does not leak to the other.
//
// Shared by tests/test_fiber.cpp (gtest, on the build machine) and tests/emu/fiber_selftest.cpp (a program
// without gtest, which tools/cross-check-aarch64.sh links statically for aarch64 and runs under qemu).
// Include it in one file per program: it defines the probe's assembly.
#pragma once

#include <cfenv>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/emu/fiber.h"

// kiln_fiber_probe(save, load, seed): sets the callee-saved registers to seed + 1, seed + 2, ..., calls
// kiln_emu_fiber_switch(save, load) and, when switched back, returns how many registers lost their value.
// Written in assembly because no C++ can pin values in callee-saved registers across a call.
#if defined(__x86_64__)
asm(R"(
    .text
    .p2align 4
    .globl kiln_fiber_probe
    .hidden kiln_fiber_probe
    .type kiln_fiber_probe, @function
kiln_fiber_probe:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    pushq %rdx
    leaq 1(%rdx), %rbx
    leaq 2(%rdx), %rbp
    leaq 3(%rdx), %r12
    leaq 4(%rdx), %r13
    leaq 5(%rdx), %r14
    leaq 6(%rdx), %r15
    call kiln_emu_fiber_switch
    movq (%rsp), %rdx
    xorl %eax, %eax
    leaq 1(%rdx), %rcx
    cmpq %rcx, %rbx
    setne %cl
    movzbq %cl, %rcx
    addq %rcx, %rax
    leaq 2(%rdx), %rcx
    cmpq %rcx, %rbp
    setne %cl
    movzbq %cl, %rcx
    addq %rcx, %rax
    leaq 3(%rdx), %rcx
    cmpq %rcx, %r12
    setne %cl
    movzbq %cl, %rcx
    addq %rcx, %rax
    leaq 4(%rdx), %rcx
    cmpq %rcx, %r13
    setne %cl
    movzbq %cl, %rcx
    addq %rcx, %rax
    leaq 5(%rdx), %rcx
    cmpq %rcx, %r14
    setne %cl
    movzbq %cl, %rcx
    addq %rcx, %rax
    leaq 6(%rdx), %rcx
    cmpq %rcx, %r15
    setne %cl
    movzbq %cl, %rcx
    addq %rcx, %rax
    popq %rdx
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kiln_fiber_probe, .-kiln_fiber_probe
)");
#elif defined(__aarch64__)
asm(R"(
    .text
    .p2align 4
    .globl kiln_fiber_probe
    .hidden kiln_fiber_probe
    .type kiln_fiber_probe, %function
kiln_fiber_probe:
    stp x29, x30, [sp, #-176]!
    mov x29, sp
    stp x19, x20, [sp, #16]
    stp x21, x22, [sp, #32]
    stp x23, x24, [sp, #48]
    stp x25, x26, [sp, #64]
    stp x27, x28, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    str x2, [sp, #160]
    .irp n, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28
    add x\n, x2, #(\n - 18)
    .endr
    .irp n, 8, 9, 10, 11, 12, 13, 14, 15
    add x9, x2, #(\n + 3)
    fmov d\n, x9
    .endr
    bl kiln_emu_fiber_switch
    ldr x2, [sp, #160]
    mov x0, #0
    .irp n, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28
    add x9, x2, #(\n - 18)
    cmp x\n, x9
    cinc x0, x0, ne
    .endr
    .irp n, 8, 9, 10, 11, 12, 13, 14, 15
    add x9, x2, #(\n + 3)
    fmov x10, d\n
    cmp x10, x9
    cinc x0, x0, ne
    .endr
    mov x10, sp
    cmp x29, x10
    cinc x0, x0, ne
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    ldp x19, x20, [sp, #16]
    ldp x21, x22, [sp, #32]
    ldp x23, x24, [sp, #48]
    ldp x25, x26, [sp, #64]
    ldp x27, x28, [sp, #80]
    ldp x29, x30, [sp], #176
    ret
    .size kiln_fiber_probe, .-kiln_fiber_probe
)");
#endif

extern "C" uint64_t kiln_fiber_probe(void** save, void* load, uint64_t seed);

namespace kiln::emu::fiber_check {

struct State {
  void* main_sp = nullptr;
  void* fiber_sp = nullptr;
  int rounds = 0;
  void* arg = nullptr;  // what the fiber's entry was given
  bool aligned = false, default_mode = false, mode_kept = true, done = false;
  uint64_t lost = 0;  // registers the fiber found changed
};

inline void fiber_entry(void* p) {
  auto* s = static_cast<State*>(p);
  s->arg = p;
  alignas(16) volatile unsigned char local[16] = {};  // at a 16-byte aligned address iff sp was aligned
  s->aligned = reinterpret_cast<uintptr_t>(&local[0]) % 16 == 0;
  s->default_mode = std::fegetround() == FE_TONEAREST;
  std::fesetround(FE_TOWARDZERO);  // this fiber's own mode; the main context keeps FE_UPWARD
  for (int i = 0; i < s->rounds; ++i) {
    s->lost += kiln_fiber_probe(&s->fiber_sp, s->main_sp, 0xF1BE000000000000ull + uint64_t(i) * 64);
    s->mode_kept = s->mode_kept && std::fegetround() == FE_TOWARDZERO;
  }
  s->done = true;
  emu::detail::kiln_emu_fiber_switch(&s->fiber_sp, s->main_sp);
  std::abort();  // never resumed
}

// Empty when everything held; else what did not.
inline std::string run(int rounds) {
  emu::detail::StackPool stacks;
  if (!stacks.reserve(1, 64 * 1024)) return "cannot map a fiber stack";
  State s;
  s.rounds = rounds;
  s.fiber_sp = emu::detail::fiber_make(stacks.top(0), &fiber_entry, &s);
  const int saved_mode = std::fegetround();
  std::fesetround(FE_UPWARD);  // not the default: fiber_make must not hand the creator's mode on
  uint64_t lost = 0;
  bool mode_kept = true;
  for (int i = 0; i <= rounds; ++i) {  // the last switch in comes back from the fiber's final switch
    lost += kiln_fiber_probe(&s.main_sp, s.fiber_sp, 0x3A1D000000000000ull + uint64_t(i) * 64);
    mode_kept = mode_kept && std::fegetround() == FE_UPWARD;
  }
  std::fesetround(saved_mode);
  std::string err;
  if (!s.done) err += "the fiber did not run to its end; ";
  if (s.arg != &s) err += "the fiber's entry got the wrong argument; ";
  if (!s.aligned) err += "the fiber's stack was not 16-byte aligned at entry; ";
  if (!s.default_mode) err += "the fiber did not start with the default rounding mode; ";
  if (!mode_kept || !s.mode_kept) err += "a rounding mode leaked across a switch; ";
  if (lost) err += std::to_string(lost) + " callee-saved register values lost in the main context; ";
  if (s.lost) err += std::to_string(s.lost) + " callee-saved register values lost in the fiber; ";
  return err;
}

}  // namespace kiln::emu::fiber_check
