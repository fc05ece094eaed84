// The aarch64 (AAPCS64) fiber switch; compiles to nothing elsewhere (fiber.h picks the architectures).
// Checked by tools/cross-check-aarch64.sh: assembled with the cross compiler, and run under qemu-user with
// tests/emu/fiber_selftest.cpp (every callee-saved register, FPCR, argument and stack alignment).
#if defined(__aarch64__)
#include <cstdint>
#include <cstring>

#include "runtime/emu/fiber.h"

// kiln_emu_fiber_switch(void** save /* x0 */, void* load /* x1 */)
// Frame of a suspended context, from its saved stack pointer upwards (176 bytes: sp stays 16-byte aligned,
// which aarch64 Linux enforces on every sp-based access):
//   [sp+0]   x19 x20 x21 x22 x23 x24 x25 x26 x27 x28   callee-saved (AAPCS64 6.1.1)
//   [sp+80]  x29 (frame pointer), x30 (link register: where this switch returns to)
//   [sp+96]  d8 ... d15                                 the low halves of v8-v15 are callee-saved
//   [sp+160] FPCR, padding
// FPCR (rounding mode, flush-to-zero) is saved per context for the reason MXCSR is on x86-64: a fiber's
// mode must not leak into the scheduler or other fibers. It is written only when it differs, since an
// FPCR write can stall the pipeline on some cores and fibers almost never change it.
// A fresh context (fiber_make) "returns" into kiln_emu_fiber_start with x19 = argument, x20 = entry.
// kiln_emu_fiber_start is global (hidden), not local: C++ takes its address through the GOT, and for a
// local symbol the assembler turns that into "section + offset", whose offset GNU ld drops on aarch64 (the
// GOT entry then held kiln_emu_fiber_switch's address, and the first switch looped forever; found by the
// qemu run of tests/emu/fiber_selftest.cpp).
asm(R"(
    .text
    .p2align 4
    .globl kiln_emu_fiber_switch
    .hidden kiln_emu_fiber_switch
    .type kiln_emu_fiber_switch, %function
kiln_emu_fiber_switch:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mrs x9, fpcr
    str x9, [sp, #160]
    mov x10, sp
    str x10, [x0]
    mov sp, x1
    ldr x10, [sp, #160]
    cmp x9, x10
    b.eq 1f
    msr fpcr, x10
1:
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
    .size kiln_emu_fiber_switch, .-kiln_emu_fiber_switch

    .p2align 4
    .globl kiln_emu_fiber_start
    .hidden kiln_emu_fiber_start
    .type kiln_emu_fiber_start, %function
kiln_emu_fiber_start:
    mov x0, x19
    blr x20
    brk #0x3e8
    .size kiln_emu_fiber_start, .-kiln_emu_fiber_start
)");

extern "C" void kiln_emu_fiber_start();

namespace kiln::emu::detail {

void* fiber_make(void* stack_top, void (*entry)(void*), void* arg) {
  constexpr size_t kFrameWords = 176 / 8;
  auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t{15});
  uint64_t* frame = top - kFrameWords;
  // x21-x28 and d8-d15 start at zero; x29 = 0 ends the frame-pointer chain.
  std::memset(frame, 0, 176);
  frame[0] = reinterpret_cast<uint64_t>(arg);                     // x19
  frame[1] = reinterpret_cast<uint64_t>(entry);                   // x20
  frame[11] = reinterpret_cast<uint64_t>(&kiln_emu_fiber_start);  // x30: where the first switch returns to
  frame[20] = 0;  // FPCR: Linux's default (round to nearest, no flush-to-zero, no traps)
  return frame;
}

}  // namespace kiln::emu::detail
#endif  // __aarch64__
