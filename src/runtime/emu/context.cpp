#include "runtime/emu/context.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

// kiln_emu_ctx_switch(void** save /* rdi */, void* load /* rsi */)
// Stack of a suspended context, from its saved stack pointer upwards:
//   [sp+0] MXCSR (4 bytes), x87 control word (2 bytes), padding
//   [sp+8] r15, r14, r13, r12, rbx, rbp, return address
// A fresh context (ctx_make) returns into kiln_emu_ctx_start with r12 = argument, r13 = entry.
asm(R"(
    .text
    .p2align 4
    .globl kiln_emu_ctx_switch
    .hidden kiln_emu_ctx_switch
    .type kiln_emu_ctx_switch, @function
kiln_emu_ctx_switch:
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
    .size kiln_emu_ctx_switch, .-kiln_emu_ctx_switch

    .p2align 4
    .type kiln_emu_ctx_start, @function
kiln_emu_ctx_start:
    movq %r12, %rdi
    andq $-16, %rsp
    callq *%r13
    ud2
    .size kiln_emu_ctx_start, .-kiln_emu_ctx_start
)");

extern "C" void kiln_emu_ctx_start();

namespace kiln::emu::detail {

void* ctx_make(void* stack_top, void (*entry)(void*), void* arg) {
  auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t{15});
  top[-1] = 0;                                                // fake return address of the start frame
  top[-2] = reinterpret_cast<uint64_t>(&kiln_emu_ctx_start);  // where the first switch returns to
  top[-3] = 0;                                                // rbp
  top[-4] = 0;                                                // rbx
  top[-5] = reinterpret_cast<uint64_t>(arg);                  // r12
  top[-6] = reinterpret_cast<uint64_t>(entry);                // r13
  top[-7] = 0;                                                // r14
  top[-8] = 0;                                                // r15
  top[-9] = 0x1F80u | (uint64_t{0x037Fu} << 32);              // default MXCSR and x87 control word
  return &top[-9];
}

StackPool::~StackPool() {
  if (base_) munmap(base_, mapped_);
}

bool StackPool::reserve(size_t count, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t usable = (bytes + page - 1) / page * page;
  if (base_ && count <= count_ && usable == usable_) return true;
  if (base_) munmap(base_, mapped_);
  base_ = nullptr;
  slot_ = usable + page;
  mapped_ = slot_ * count;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  base_ = static_cast<char*>(p);
  for (size_t i = 0; i < count; ++i) {
    if (mprotect(base_ + i * slot_, page, PROT_NONE) != 0) return false;
  }
  count_ = count;
  usable_ = usable;
  return true;
}

void* StackPool::top(size_t i) const { return base_ + (i + 1) * slot_; }

}  // namespace kiln::emu::detail
