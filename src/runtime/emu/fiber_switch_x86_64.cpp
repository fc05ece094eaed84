// The x86-64 (System V) fiber switch; compiles to nothing elsewhere (fiber.h picks the architectures).
#if defined(__x86_64__)
#include <cstdint>

#include "runtime/emu/fiber.h"

// kiln_emu_fiber_switch(void** save /* rdi */, void* load /* rsi */)
// Stack of a suspended context, from its saved stack pointer upwards:
//   [sp+0] MXCSR (4 bytes), x87 control word (2 bytes), padding
//   [sp+8] r15, r14, r13, r12, rbx, rbp, return address
// MXCSR's control bits and the x87 control word are callee-saved in the System V ABI, so a fiber that
// changes its rounding mode must not change the scheduler's or another fiber's.
// A fresh context (fiber_make) returns into kiln_emu_fiber_start with r12 = argument, r13 = entry.
asm(R"(
    .text
    .p2align 4
    .globl kiln_emu_fiber_switch
    .hidden kiln_emu_fiber_switch
    .type kiln_emu_fiber_switch, @function
kiln_emu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kiln_emu_fiber_switch, .-kiln_emu_fiber_switch

    .p2align 4
    .type kiln_emu_fiber_start, @function
kiln_emu_fiber_start:
    movq %r12, %rdi
    andq $-16, %rsp
    callq *%r13
    ud2
    .size kiln_emu_fiber_start, .-kiln_emu_fiber_start
)");

extern "C" void kiln_emu_fiber_start();

namespace kiln::emu::detail {

void* fiber_make(void* stack_top, void (*entry)(void*), void* arg) {
  auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t{15});
  top[-1] = 0;                                                  // fake return address of the start frame
  top[-2] = reinterpret_cast<uint64_t>(&kiln_emu_fiber_start);  // where the first switch returns to
  top[-3] = 0;                                                  // rbp
  top[-4] = 0;                                                  // rbx
  top[-5] = reinterpret_cast<uint64_t>(arg);                    // r12
  top[-6] = reinterpret_cast<uint64_t>(entry);                  // r13
  top[-7] = 0;                                                  // r14
  top[-8] = 0;                                                  // r15
  top[-9] = 0x1F80u | (uint64_t{0x037Fu} << 32);                // default MXCSR and x87 control word
  return &top[-9];
}

}  // namespace kiln::emu::detail
#endif  // __x86_64__
