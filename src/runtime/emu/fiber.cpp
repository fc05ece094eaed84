// Fiber stacks (the switch itself: fiber_switch_<architecture>.cpp).
#include "runtime/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

namespace kiln::emu::detail {

StackPool::~StackPool() {
#if KILN_EMU_ASAN
  // Frames of fibers that never finished leave poisoned shadow behind; the next mapping here must not see it.
  if (base_) ASAN_UNPOISON_MEMORY_REGION(base_, mapped_);
#endif
  if (base_) munmap(base_, mapped_);
}

bool StackPool::reserve(size_t count, size_t bytes) {
  // The page size is read, not assumed: aarch64 kernels (GH200's among them) often use 64 KiB pages.
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
