// The emu launcher: blocks on a pool of worker threads, CUDA threads as fibers, __syncthreads as a counting
// barrier, warp operations at a per-warp rendezvous, per-block shared memory, deferred cp.async, checked
// global accesses. See docs/emu.md for the rules and templates/kiln/host/emu_abi.h for the interface.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kiln/emu.h"
#include "runtime/emu/context.h"
#include "runtime/emu/module.h"

namespace kiln::emu {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::forward: return "forward";
    case Schedule::reverse: return "reverse";
    case Schedule::random: return "random";
  }
  return "?";
}

namespace detail {
namespace {

constexpr size_t kStaticSmemLimit = 48 * 1024;
constexpr size_t kDynamicSmemLimit = 227 * 1024;
constexpr size_t kMaxWarnings = 16;

const char* const kWarpOpNames[] = {"__syncwarp",         "__shfl_sync",         "__shfl_up_sync",
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
  void* sp = nullptr;
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
};

struct Worker {
  LaunchState* launch = nullptr;
  StackPool stacks;
  std::vector<Fiber> fibers;
  Fiber* cur = nullptr;
  void* sched_sp = nullptr;
  std::vector<unsigned char> arena_storage;
  unsigned char* smem = nullptr;  // [dynamic (rounded to 16)][static, up to 48 KiB]
  size_t dyn_region = 0;
  size_t static_used = 0;
  std::vector<std::pair<const void*, size_t>> static_allocs;
  std::optional<std::string> error;
  uint64_t switches = 0;
  uint64_t rng = 0;
};

thread_local Worker* t_w = nullptr;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string where(const Fiber& f) {
  const kiln_emu_thread& t = f.self;
  return fmt::format("kernel '{}' block ({},{},{}) thread ({},{},{})", t_w->launch->kernel, t.block_idx[0],
                     t.block_idx[1], t.block_idx[2], t.thread_idx[0], t.thread_idx[1], t.thread_idx[2]);
}

std::string site(const char* file, int line) { return fmt::format("{}:{}", file ? file : "?", line); }

void yield() {
  Worker* w = t_w;
  kiln_emu_ctx_switch(&w->cur->sp, w->sched_sp);
}

// Ends the block with an error; the fiber is never resumed.
[[noreturn]] void fail(std::string message) {
  Worker* w = t_w;
  w->error = std::move(message);
  kiln_emu_ctx_switch(&w->cur->sp, w->sched_sp);
  std::abort();
}

float half_to_float(unsigned h) {
  unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float bf16_to_float(unsigned b) {
  unsigned u = (b & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool in_smem(const Worker& w, const void* p, size_t bytes) {
  auto* c = static_cast<const unsigned char*>(p);
  return c >= w.smem && c + bytes <= w.smem + w.dyn_region + kStaticSmemLimit;
}

// ---- the table the shared object calls ---------------------------------------------------------------------

const kiln_emu_thread* api_self() { return &t_w->cur->self; }

void api_syncthreads(const char* file, int line) {
  Fiber* f = t_w->cur;
  f->state = FState::barrier;
  f->file = file;
  f->line = line;
  yield();
}

void* api_shared_static(const void* key, size_t bytes, size_t align, const char* file, int line) {
  Worker* w = t_w;
  for (const auto& [k, off] : w->static_allocs) {
    if (k == key) return w->smem + w->dyn_region + off;
  }
  size_t off = (w->static_used + align - 1) / align * align;
  if (off + bytes > kStaticSmemLimit) {
    fail(fmt::format("{}: static shared memory declared at {} needs {} bytes in all, more than the 48 KiB limit",
                     where(*w->cur), site(file, line), off + bytes));
  }
  w->static_used = off + bytes;
  w->static_allocs.emplace_back(key, off);
  std::memset(w->smem + w->dyn_region + off, 0xFF, bytes);  // poisoned: NaN until written
  return w->smem + w->dyn_region + off;
}

void* api_shared_dynamic() { return t_w->smem; }

void check_range(const void* p, size_t bytes, bool store, const char* what, const char* file, int line) {
  const LaunchState& L = *t_w->launch;
  auto* c = static_cast<const unsigned char*>(p);
  const Buffer* nearest = nullptr;
  size_t best = SIZE_MAX;
  std::string how;
  for (const Buffer& b : L.buffers) {
    if (c >= b.base && c + bytes <= b.base + b.extent) return;
    size_t d;
    std::string h;
    if (c < b.base) {
      d = static_cast<size_t>(b.base - c);
      h = fmt::format("{} bytes before the start of", d);
    } else {
      d = static_cast<size_t>(c + bytes - (b.base + b.extent));
      h = fmt::format("{} bytes past the end of", d);
    }
    if (d < best) best = d, nearest = &b, how = h;
  }
  std::string near = nearest ? fmt::format("{} buffer '{}' ({} bytes)", how, nearest->name, nearest->extent)
                             : std::string("no buffer arguments were given");
  fail(fmt::format("{}: out-of-bounds global {} of {} bytes at {} ({}: {})", where(*t_w->cur), what, bytes,
                   site(file, line), store ? "store" : "load", near));
}

void api_check_global(const void* p, size_t bytes, int is_store, const char* file, int line) {
  if (!t_w->launch->checked) return;
  // A GPU faults on an access of 2, 4, 8 or 16 bytes at an address that is not a multiple of its size
  // (a host CPU does not): a 16-byte vector load of a misaligned buffer is an error here too.
  if ((bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16) && reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    fail(fmt::format("{}: misaligned {}-byte {} at {} ({})", where(*t_w->cur), bytes, is_store ? "store" : "load", p,
                     site(file, line)));
  }
  check_range(p, bytes, is_store != 0, is_store ? "store" : "load", file, line);
}

void api_cp_async(void* dst, const void* src, unsigned cp, unsigned src_size, const char* file, int line) {
  Worker* w = t_w;
  Fiber* f = w->cur;
  if (cp != 4 && cp != 8 && cp != 16)
    fail(fmt::format("{}: cp.async of {} bytes at {}", where(*f), cp, site(file, line)));
  if (src_size > cp) {
    fail(fmt::format("{}: cp.async at {}: source size {} exceeds the copy size {}", where(*f), site(file, line),
                     src_size, cp));
  }
  if (!in_smem(*w, dst, cp)) {
    fail(fmt::format("{}: cp.async at {}: the destination is not shared memory", where(*f), site(file, line)));
  }
  if (reinterpret_cast<uintptr_t>(dst) % cp != 0 || reinterpret_cast<uintptr_t>(src) % cp != 0) {
    fail(fmt::format("{}: cp.async at {}: source and destination must be aligned to {} bytes", where(*f),
                     site(file, line), cp));
  }
  if (w->launch->checked && src_size > 0) check_range(src, src_size, false, "load (cp.async source)", file, line);
  std::memset(dst, 0xFF, cp);  // poisoned until the copy's group completes
  f->uncommitted.push_back(
      {static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), cp, src_size, file, line});
}

void api_cp_commit() {
  Fiber* f = t_w->cur;
  f->groups.push_back(std::move(f->uncommitted));
  f->uncommitted.clear();
}

void api_cp_wait(unsigned n, const char*, int) {
  Fiber* f = t_w->cur;
  while (f->groups.size() > n) {
    for (const Copy& c : f->groups.front()) {
      std::memcpy(c.dst, c.src, c.src_size);
      std::memset(c.dst + c.src_size, 0, c.cp - c.src_size);
    }
    f->groups.pop_front();
  }
}

void api_trap(const char* message, const char* file, int line) {
  fail(fmt::format("{}: {} at {}", where(*t_w->cur), message, site(file, line)));
}

void warp_shuffle(Worker& w, unsigned base, unsigned mask, const kiln_emu_warp_op& me) {
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    kiln_emu_warp_op* op = w.fibers[base + l].op;
    const unsigned width = static_cast<unsigned>(op->width), gbase = l & ~(width - 1);
    const unsigned arg = static_cast<unsigned>(op->arg);
    unsigned src = l;
    switch (op->kind) {
      case KILN_EMU_SHFL_IDX: src = gbase + (arg & (width - 1)); break;
      case KILN_EMU_SHFL_UP: src = (l - gbase) < arg ? l : l - arg; break;
      case KILN_EMU_SHFL_DOWN: src = (l - gbase) + arg >= width ? l : l + arg; break;
      default: {  // xor: later width groups are out of reach (PTX shfl.bfly: j > maxLane gives the own value)
        unsigned j = l ^ (arg & 31u);
        src = j > gbase + width - 1 ? l : j;
      }
    }
    if (src != l && !(mask >> src & 1u)) {
      fail(fmt::format("{}: {} at {} with mask 0x{:08x}: lane {} reads lane {}, which is not in the mask",
                       where(w.fibers[base + l]), kWarpOpNames[me.kind], site(me.file, me.line), mask, l, src));
    }
    op->result = w.fibers[base + src].op->value;
  }
}

void warp_mma(Worker& w, unsigned base, int kind) {
  float A[16][16], B[16][8], C[16][8];
  auto cvt = [&](unsigned bits) { return kind == KILN_EMU_MMA_F16 ? half_to_float(bits) : bf16_to_float(bits); };
  for (unsigned lane = 0; lane < 32; ++lane) {
    const kiln_emu_warp_op& op = *w.fibers[base + lane].op;
    const unsigned g = lane >> 2, t = lane & 3u;
    for (unsigned i = 0; i < 8; ++i) {
      unsigned bits = (op.a[i / 2] >> (16 * (i & 1u))) & 0xffffu;
      A[g + ((i >> 1) & 1u) * 8][t * 2 + (i & 1u) + (i >= 4 ? 8 : 0)] = cvt(bits);
    }
    for (unsigned i = 0; i < 4; ++i) {
      unsigned bits = (op.b[i / 2] >> (16 * (i & 1u))) & 0xffffu;
      B[t * 2 + (i & 1u) + (i >= 2 ? 8 : 0)][g] = cvt(bits);
      C[g + (i >= 2 ? 8 : 0)][t * 2 + (i & 1u)] = op.c[i];
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    kiln_emu_warp_op& op = *w.fibers[base + lane].op;
    const unsigned g = lane >> 2, t = lane & 3u;
    for (unsigned i = 0; i < 4; ++i) {
      unsigned m = g + (i >= 2 ? 8 : 0), n = t * 2 + (i & 1u);
      double acc = 0;
      for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[m][k]) * B[k][n];
      op.d[i] = static_cast<float>(acc + C[m][n]);
    }
  }
}

void warp_ldmatrix(Worker& w, unsigned base, const kiln_emu_warp_op& me) {
  uint16_t M[4][8][8];
  const int count = me.count;
  for (unsigned lane = 0; lane < 32; ++lane) {
    const kiln_emu_warp_op& op = *w.fibers[base + lane].op;
    if (op.count != count || op.trans != me.trans) {
      fail(fmt::format("{}: ldmatrix at {}: lanes disagree on the number of matrices or .trans",
                       where(w.fibers[base + lane]), site(me.file, me.line)));
    }
  }
  for (int j = 0; j < count; ++j) {
    for (unsigned r = 0; r < 8; ++r) {
      const Fiber& f = w.fibers[base + 8 * static_cast<unsigned>(j) + r];
      const void* addr = f.op->addr;
      if (!in_smem(w, addr, 16) || reinterpret_cast<uintptr_t>(addr) % 16 != 0) {
        fail(fmt::format("{}: ldmatrix at {}: row address {} is not 16-byte aligned shared memory", where(f),
                         site(me.file, me.line), addr));
      }
      std::memcpy(M[j][r], addr, 16);
    }
  }
  for (unsigned L = 0; L < 32; ++L) {
    kiln_emu_warp_op& op = *w.fibers[base + L].op;
    for (int j = 0; j < count; ++j) {
      unsigned lo, hi;
      if (!me.trans) {
        lo = M[j][L / 4][2 * (L % 4)], hi = M[j][L / 4][2 * (L % 4) + 1];
      } else {
        lo = M[j][2 * (L % 4)][L / 4], hi = M[j][2 * (L % 4) + 1][L / 4];
      }
      op.r[j] = lo | (hi << 16);
    }
  }
}

void api_warp_op(kiln_emu_warp_op* op) {
  Worker* w = t_w;
  Fiber* f = w->cur;
  const unsigned lane = f->self.lane, base = f->linear - lane, n = static_cast<unsigned>(w->fibers.size());
  if (op->kind < 0 || op->kind >= KILN_EMU_WARP_KIND_COUNT) fail(where(*f) + ": unknown warp operation");
  const char* name = kWarpOpNames[op->kind];
  const unsigned mask = op->mask;
  if (!(mask >> lane & 1u)) {
    fail(fmt::format("{}: {} at {}: mask 0x{:08x} does not include the calling lane {}", where(*f), name,
                     site(op->file, op->line), mask, lane));
  }
  if (op->kind >= KILN_EMU_SHFL_IDX && op->kind <= KILN_EMU_SHFL_XOR &&
      (op->width < 1 || op->width > 32 || (op->width & (op->width - 1)) != 0)) {
    fail(fmt::format("{}: {} at {}: width {} is not a power of two in [1, 32]", where(*f), name,
                     site(op->file, op->line), op->width));
  }
  if (op->kind >= KILN_EMU_MMA_F16 && base + 32 > n) {
    fail(fmt::format("{}: {} at {} needs all 32 lanes of the warp; the block has {} threads", where(*f), name,
                     site(op->file, op->line), n));
  }
  f->op = op;
  f->state = FState::warp;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    if (base + l >= n || w->fibers[base + l].state != FState::warp) {
      yield();  // the last lane to arrive completes the operation and makes this fiber runnable
      return;
    }
  }
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    const Fiber& g = w->fibers[base + l];
    if (g.op->kind != op->kind || g.op->mask != mask) {
      fail(fmt::format("{}: {} at {} with mask 0x{:08x} meets lane {} at {} at {} with mask 0x{:08x}", where(*f), name,
                       site(op->file, op->line), mask, l, kWarpOpNames[g.op->kind], site(g.op->file, g.op->line),
                       g.op->mask));
    }
  }
  switch (op->kind) {
    case KILN_EMU_SYNCWARP: break;
    case KILN_EMU_BALLOT: {
      uint64_t r = 0;
      for (unsigned l = 0; l < 32; ++l) {
        if ((mask >> l & 1u) && w->fibers[base + l].op->arg) r |= uint64_t{1} << l;
      }
      for (unsigned l = 0; l < 32; ++l) {
        if (mask >> l & 1u) w->fibers[base + l].op->result = r;
      }
      break;
    }
    case KILN_EMU_MMA_F16:
    case KILN_EMU_MMA_BF16: warp_mma(*w, base, op->kind); break;
    case KILN_EMU_LDMATRIX: warp_ldmatrix(*w, base, *op); break;
    default: warp_shuffle(*w, base, mask, *op);
  }
  for (unsigned l = 0; l < 32; ++l) {
    if (mask >> l & 1u) w->fibers[base + l].state = FState::runnable;
  }
}

const kiln_emu_api kApi = {
    KILN_EMU_ABI_VERSION, api_self,     api_syncthreads, api_warp_op, api_shared_static, api_shared_dynamic,
    api_check_global,     api_cp_async, api_cp_commit,   api_cp_wait, api_trap,
};

// ---- the scheduler -----------------------------------------------------------------------------------------

void warn(LaunchState& L, std::string message) {
  std::lock_guard lock(L.mu);
  if (L.warnings.size() < kMaxWarnings) L.warnings.push_back(std::move(message));
}

void fiber_main(void* arg) {
  auto* f = static_cast<Fiber*>(arg);
  Worker* w = t_w;
  w->launch->invoke(w->launch->argv);
  if (!f->uncommitted.empty() || !f->groups.empty()) {
    const Copy& c = f->groups.empty() ? f->uncommitted.front() : f->groups.front().front();
    warn(*w->launch, fmt::format("{}: exited with cp.async copies never waited for (the oldest issued at {})",
                                 where(*f), site(c.file, c.line)));
  }
  f->state = FState::done;
  kiln_emu_ctx_switch(&f->sp, w->sched_sp);
  std::abort();
}

// Nothing is runnable: release a complete barrier, or say why the block cannot go on.
void resolve(Worker& w) {
  const unsigned n = static_cast<unsigned>(w.fibers.size());
  Fiber *first_bar = nullptr, *first_warp = nullptr, *first_done = nullptr;
  unsigned nbar = 0;
  for (Fiber& f : w.fibers) {
    if (f.state == FState::barrier) ++nbar, first_bar = first_bar ? first_bar : &f;
    if (f.state == FState::warp && !first_warp) first_warp = &f;
    if (f.state == FState::done && !first_done) first_done = &f;
  }
  if (first_warp) {
    const Fiber& f = *first_warp;
    const kiln_emu_warp_op& op = *f.op;
    const unsigned base = f.linear - f.self.lane;
    std::string why = "its lanes wait at different warp operations";
    for (unsigned l = 0; l < 32; ++l) {
      if (!(op.mask >> l & 1u)) continue;
      if (base + l >= n) {
        why = fmt::format("lane {} does not exist (the block has {} threads)", l, n);
        break;
      }
      const Fiber& g = w.fibers[base + l];
      if (g.state == FState::done) {
        why = fmt::format("lane {} has exited", l);
        break;
      }
      if (g.state == FState::barrier) {
        why = fmt::format("lane {} waits at __syncthreads() at {}", l, site(g.file, g.line));
        break;
      }
    }
    w.error = fmt::format("{}: {} at {} with mask 0x{:08x} can never complete: {}", where(f), kWarpOpNames[op.kind],
                          site(op.file, op.line), op.mask, why);
    return;
  }
  if (!first_bar) return;  // all done
  if (first_done) {
    w.error = fmt::format("{}: exited while {} threads wait at __syncthreads() at {}", where(*first_done), nbar,
                          site(first_bar->file, first_bar->line));
    return;
  }
  for (Fiber& f : w.fibers) {
    if (f.line != first_bar->line || std::strcmp(f.file, first_bar->file) != 0) {
      w.error = fmt::format("{}: divergent __syncthreads(): this thread waits at {}, thread ({},{},{}) at {}",
                            where(*first_bar), site(first_bar->file, first_bar->line), f.self.thread_idx[0],
                            f.self.thread_idx[1], f.self.thread_idx[2], site(f.file, f.line));
      return;
    }
  }
  for (Fiber& f : w.fibers) f.state = FState::runnable;
}

void run_block(Worker& w, uint64_t linear) {
  LaunchState& L = *w.launch;
  const unsigned n = static_cast<unsigned>(w.fibers.size());
  const unsigned bx = static_cast<unsigned>(linear % L.grid.x);
  const unsigned by = static_cast<unsigned>(linear / L.grid.x % L.grid.y);
  const unsigned bz = static_cast<unsigned>(linear / (uint64_t{L.grid.x} * L.grid.y));
  std::memset(w.smem, 0xFF, w.dyn_region);
  w.static_used = 0;
  w.static_allocs.clear();
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = w.fibers[i];
    f.state = FState::runnable;
    f.linear = i;
    f.op = nullptr;
    f.file = nullptr;
    f.line = 0;
    f.uncommitted.clear();
    f.groups.clear();
    f.self = kiln_emu_thread{{i % L.block.x, i / L.block.x % L.block.y, i / (L.block.x * L.block.y)},
                             {bx, by, bz},
                             {L.block.x, L.block.y, L.block.z},
                             {L.grid.x, L.grid.y, L.grid.z},
                             i % 32};
    f.sp = ctx_make(w.stacks.top(i), &fiber_main, &f);
  }
  std::vector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i) order[i] = L.schedule == Schedule::reverse ? n - 1 - i : i;
  w.rng = L.seed ^ (linear * 0xd1b54a32d192ed03ull);
  for (;;) {
    if (L.schedule == Schedule::random) {
      for (unsigned i = n; i > 1; --i) std::swap(order[i - 1], order[splitmix(w.rng) % i]);
    }
    bool ran = false;
    for (unsigned i : order) {
      Fiber& f = w.fibers[i];
      if (f.state != FState::runnable) continue;
      ran = true;
      w.cur = &f;
      kiln_emu_ctx_switch(&w.sched_sp, f.sp);
      w.switches += 2;
      if (w.error) return;
    }
    if (!ran) {
      resolve(w);
      if (w.error) return;
      bool all_done = true;
      for (const Fiber& f : w.fibers) all_done = all_done && f.state == FState::done;
      if (all_done) return;
    }
  }
}

void work(LaunchState& L) {
  Worker w;
  t_w = &w;
  w.launch = &L;
  const size_t n = size_t{L.block.x} * L.block.y * L.block.z;
  auto record = [&](uint64_t block, std::string message) {
    std::lock_guard lock(L.mu);
    if (!L.error || block < L.error->first) L.error = {block, std::move(message)};
    L.failed = true;
  };
  if (!w.stacks.reserve(n, L.stack_bytes)) {
    record(0, fmt::format("kernel '{}': cannot map {} fiber stacks of {} bytes", L.kernel, n, L.stack_bytes));
  } else {
    w.fibers.resize(n);
    w.dyn_region = (L.dyn + 15) / 16 * 16;
    w.arena_storage.resize(w.dyn_region + kStaticSmemLimit + 64);
    auto p = reinterpret_cast<uintptr_t>(w.arena_storage.data());
    w.smem = w.arena_storage.data() + ((p + 63) / 64 * 64 - p);
    for (;;) {
      if (L.failed) break;
      uint64_t b = L.next_block.fetch_add(1);
      if (b >= L.blocks) break;
      run_block(w, b);
      if (w.error) {
        record(b, *std::move(w.error));
        break;
      }
    }
  }
  L.switches += w.switches;
  t_w = nullptr;
}

std::optional<long long> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  long long r = std::strtoll(v, &end, 10);
  if (*end != '\0' || r <= 0) return -1;
  return r;
}

}  // namespace

const kiln_emu_api* runtime_api() { return &kApi; }

}  // namespace detail

Status launch(const Module& module, std::string_view kernel, Dim3 grid, Dim3 block, size_t dynamic_smem_bytes,
              const std::vector<Arg>& args, const LaunchOptions& options, LaunchReport* report) {
  using namespace detail;
  const auto& m = static_cast<const ModuleImpl&>(module);
  auto it = m.kernels.find(kernel);
  if (it == m.kernels.end()) return not_found(fmt::format("emu: kernel '{}' is not in module {}", kernel, m.path));
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || threads > 1024 || block.z > 64) {
    return invalid_argument(
        fmt::format("emu: kernel '{}': block ({},{},{}) is not a valid CUDA block (1 to 1024 "
                    "threads, z at most 64)",
                    kernel, block.x, block.y, block.z));
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    return invalid_argument(
        fmt::format("emu: kernel '{}': grid ({},{},{}) is not a valid CUDA grid", kernel, grid.x, grid.y, grid.z));
  }
  if (dynamic_smem_bytes > kDynamicSmemLimit) {
    return invalid_argument(fmt::format("emu: kernel '{}': {} bytes of dynamic shared memory, more than {}", kernel,
                                        dynamic_smem_bytes, kDynamicSmemLimit));
  }
  size_t sizes[256];
  const int np = it->second.params(sizes, 256);
  if (np != static_cast<int>(args.size())) {
    return invalid_argument(
        fmt::format("emu: kernel '{}' takes {} parameters, {} arguments given", kernel, np, args.size()));
  }
  std::vector<std::unique_ptr<std::max_align_t[]>> storage;
  std::vector<void*> argv;
  LaunchState L;
  for (size_t i = 0; i < args.size(); ++i) {
    if (sizes[i] != args[i].bytes.size()) {
      return invalid_argument(fmt::format("emu: kernel '{}' parameter {} is {} bytes, its argument {} bytes", kernel, i,
                                          sizes[i], args[i].bytes.size()));
    }
    storage.emplace_back(new std::max_align_t[args[i].bytes.size() / sizeof(std::max_align_t) + 1]);
    std::memcpy(storage.back().get(), args[i].bytes.data(), args[i].bytes.size());
    argv.push_back(storage.back().get());
    if (args[i].is_buffer) {
      L.buffers.push_back({static_cast<const unsigned char*>(args[i].base), args[i].extent,
                           args[i].name.empty() ? fmt::format("#{}", i) : args[i].name});
    }
  }

  // Schedule, seed, checked mode, workers and stacks: options first, then the environment.
  L.schedule = Schedule::forward;
  L.seed = 1;
  if (const char* s = std::getenv("KILN_EMU_SCHEDULE"); s && *s) {
    std::string v = s;
    if (v == "forward") {
      L.schedule = Schedule::forward;
    } else if (v == "reverse") {
      L.schedule = Schedule::reverse;
    } else if (v == "random" || v.rfind("random:", 0) == 0) {
      L.schedule = Schedule::random;
      if (v.size() > 7) {
        char* end = nullptr;
        L.seed = std::strtoull(v.c_str() + 7, &end, 10);
        if (*end != '\0') v.clear();
      }
    } else {
      v.clear();
    }
    if (v.empty()) {
      return invalid_argument(
          fmt::format("KILN_EMU_SCHEDULE='{}': expected forward, reverse, random or random:SEED", s));
    }
  }
  if (options.schedule) L.schedule = *options.schedule;
  if (options.seed) L.seed = *options.seed;
  const char* checked = std::getenv("KILN_EMU_CHECKED");
  L.checked = options.checked.value_or(checked && std::string(checked) == "1");
  auto env_threads = env_int("KILN_EMU_THREADS");
  auto env_stack = env_int("KILN_EMU_STACK_KIB");
  if ((env_threads && *env_threads < 0) || (env_stack && *env_stack < 0)) {
    return invalid_argument("KILN_EMU_THREADS and KILN_EMU_STACK_KIB must be positive integers");
  }
  long long workers = options.threads > 0 ? options.threads
                      : env_threads       ? *env_threads
                                          : std::max(1u, std::thread::hardware_concurrency());
  L.stack_bytes = options.stack_bytes > 0 ? options.stack_bytes
                  : env_stack             ? static_cast<size_t>(*env_stack) * 1024
                                          : size_t{64} * 1024;
  L.stack_bytes = std::max<size_t>(L.stack_bytes, 16 * 1024);

  L.kernel = std::string(kernel);
  L.invoke = it->second.invoke;
  L.argv = argv.data();
  L.grid = grid;
  L.block = block;
  L.dyn = dynamic_smem_bytes;
  L.blocks = uint64_t{grid.x} * grid.y * grid.z;
  workers = std::min<long long>({workers, static_cast<long long>(L.blocks), 256});

  std::vector<std::thread> pool;
  for (long long i = 1; i < workers; ++i) pool.emplace_back([&L] { work(L); });
  work(L);
  for (auto& t : pool) t.join();

  if (report) {
    report->context_switches = L.switches;
    report->warnings = L.warnings;
    report->schedule = L.schedule;
    report->seed = L.seed;
  }
  if (L.error) return invalid_argument("emu: " + L.error->second);
  return {};
}

}  // namespace kiln::emu
