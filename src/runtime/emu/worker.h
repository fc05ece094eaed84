// The state of one emu launch and of the worker threads that run its blocks, shared by the launcher
// (launch.cpp: the scheduler and the table of functions kernels call) and the warp operations (warp.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kiln/emu.h"
#include "runtime/emu/fiber.h"
#include "runtime/emu/module.h"
#include "runtime/emu/profile.h"

namespace kiln::emu::detail {

inline constexpr size_t kStaticSmemLimit = 48 * 1024;

inline constexpr const char* kWarpOpNames[] = {"__syncwarp",         "__shfl_sync",         "__shfl_up_sync",
                                               "__shfl_down_sync",   "__shfl_xor_sync",     "__ballot_sync",
                                               "mma.m16n8k16 (f16)", "mma.m16n8k16 (bf16)", "ldmatrix"};
static_assert(sizeof(kWarpOpNames) / sizeof(kWarpOpNames[0]) == KILN_EMU_WARP_KIND_COUNT);

struct Copy {
  unsigned char* dst;
  const unsigned char* src;
  unsigned cp, src_size;
  const char* file;
  int line;
};

enum class FState : uint8_t { runnable, barrier, warp, done };

struct Fiber {
  FiberContext ctx;
  kiln_emu_thread self{};
  FState state = FState::runnable;
  unsigned linear = 0;
  const char* file = nullptr;  // the __syncthreads() this fiber waits at
  int line = 0;
  kiln_emu_warp_op* op = nullptr;  // the warp operation this fiber waits at (on its own stack)
  std::vector<Copy> uncommitted;
  std::deque<std::vector<Copy>> groups;
};

struct Buffer {
  const unsigned char* base;
  size_t extent;
  std::string name;
};

struct LaunchState {
  std::string kernel;
  InvokeFn invoke = nullptr;
  void** argv = nullptr;
  Dim3 grid, block;
  size_t dyn = 0;
  bool checked = false;
  Schedule schedule = Schedule::forward;
  uint64_t seed = 0;
  size_t stack_bytes = 0;
  std::vector<Buffer> buffers;
  uint64_t blocks = 0;
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> switches{0};
  std::mutex mu;
  std::optional<std::pair<uint64_t, std::string>> error;  // the lowest failing block
  std::vector<std::string> warnings;
  std::unique_ptr<LaunchProfile> profile;  // LaunchOptions::profile
};

struct Worker {
  LaunchState* launch = nullptr;
  StackPool stacks;
  std::vector<Fiber> fibers;
  Fiber* cur = nullptr;
  FiberContext sched;  // the thread's own stack, where run_block schedules the block's fibers
  std::vector<unsigned char> arena_storage;
  unsigned char* smem = nullptr;  // [dynamic (rounded to 16)][static, up to 48 KiB]
  size_t dyn_region = 0;
  size_t static_used = 0;
  std::vector<std::pair<const void*, size_t>> static_allocs;
  std::optional<std::string> error;
  uint64_t switches = 0;
  uint64_t rng = 0;
  BlockRecorder recorder;  // when the launch is profiled
};

// The worker running on this thread (set for the duration of work()). Constant-initialized and inline, so
// that every file reads it directly, without a thread_local wrapper call.
inline thread_local Worker* t_w = nullptr;

inline std::string where(const Fiber& f) {
  const kiln_emu_thread& t = f.self;
  return fmt::format("kernel '{}' block ({},{},{}) thread ({},{},{})", t_w->launch->kernel, t.block_idx[0],
                     t.block_idx[1], t.block_idx[2], t.thread_idx[0], t.thread_idx[1], t.thread_idx[2]);
}

inline std::string site(const char* file, int line) { return fmt::format("{}:{}", file ? file : "?", line); }

// Back to the block's scheduler; returns when the scheduler runs this fiber again.
inline void yield() {
  Worker* w = t_w;
  fiber_switch(w->cur->ctx, w->sched);
}

// Ends the block with the error message() makes; the fiber is never resumed. So nothing the fiber's frames
// own is ever destroyed: the message is made inside `message` (where()'s and fmt's temporaries die when it
// returns), and a caller must hold no heap memory of its own when it calls, or each failing block would
// leak it (LeakSanitizer finds that: tools/sanitize.sh).
template <class MakeMessage>
[[noreturn]] void fail(MakeMessage&& message) {
  Worker* w = t_w;
  w->error = message();
  fiber_switch(w->cur->ctx, w->sched, /*final=*/true);
  std::abort();
}

inline bool in_smem(const Worker& w, const void* p, size_t bytes) {
  auto* c = static_cast<const unsigned char*>(p);
  return c >= w.smem && c + bytes <= w.smem + w.dyn_region + kStaticSmemLimit;
}

// The `warp_op` entry of the table (warp.cpp): a per-warp rendezvous; the last lane to arrive computes the
// operation for every lane in the mask.
void api_warp_op(kiln_emu_warp_op* op);

}  // namespace kiln::emu::detail
