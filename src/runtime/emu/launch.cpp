// The emu launcher: blocks on a pool of worker threads, CUDA threads as fibers, __syncthreads as a counting
// barrier, warp operations at a per-warp rendezvous, per-block shared memory, deferred cp.async, checked
// global accesses. See docs/emu.md for the rules and templates/kiln/host/emu_abi.h for the interface.
#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>

#include "runtime/emu/worker.h"
#include "support/env.h"

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

constexpr size_t kDynamicSmemLimit = 227 * 1024;
constexpr size_t kMaxWarnings = 16;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
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
    fail([&] {
      return fmt::format("{}: static shared memory declared at {} needs {} bytes in all, more than the 48 KiB limit",
                         where(*w->cur), site(file, line), off + bytes);
    });
  }
  w->static_used = off + bytes;
  w->static_allocs.emplace_back(key, off);
  std::memset(w->smem + w->dyn_region + off, 0xFF, bytes);  // poisoned: NaN until written
  return w->smem + w->dyn_region + off;
}

void* api_shared_dynamic() { return t_w->smem; }

// What an access outside every buffer argument is, named by the nearest buffer.
std::string out_of_bounds(const unsigned char* c, size_t bytes, bool store, const char* what, const char* file,
                          int line) {
  const Buffer* nearest = nullptr;
  size_t best = SIZE_MAX;
  std::string how;
  for (const Buffer& b : t_w->launch->buffers) {
    const bool before = c < b.base;
    const size_t d = before ? static_cast<size_t>(b.base - c) : static_cast<size_t>(c + bytes - (b.base + b.extent));
    if (d < best) {
      best = d, nearest = &b;
      how = fmt::format("{} bytes {}", d, before ? "before the start of" : "past the end of");
    }
  }
  std::string near = nearest ? fmt::format("{} buffer '{}' ({} bytes)", how, nearest->name, nearest->extent)
                             : std::string("no buffer arguments were given");
  return fmt::format("{}: out-of-bounds global {} of {} bytes at {} ({}: {})", where(*t_w->cur), what, bytes,
                     site(file, line), store ? "store" : "load", near);
}

void check_range(const void* p, size_t bytes, bool store, const char* what, const char* file, int line) {
  auto* c = static_cast<const unsigned char*>(p);
  for (const Buffer& b : t_w->launch->buffers) {
    if (c >= b.base && c + bytes <= b.base + b.extent) return;
  }
  fail([&] { return out_of_bounds(c, bytes, store, what, file, line); });
}

void api_check_global(const void* p, size_t bytes, int is_store, const char* file, int line) {
  if (LaunchProfile* prof = t_w->launch->profile.get()) {
    const SiteKey key{file, line, is_store ? AccessOp::store : AccessOp::load, AccessSpace::global};
    t_w->recorder.access(t_w->cur->linear, key, reinterpret_cast<uintptr_t>(p), static_cast<unsigned>(bytes));
    prof->touch(p, bytes, is_store != 0);
  }
  if (!t_w->launch->checked) return;
  // A GPU faults on an access of 2, 4, 8 or 16 bytes at an address that is not a multiple of its size
  // (a host CPU does not): a 16-byte vector load of a misaligned buffer is an error here too.
  if ((bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16) && reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    fail([&] {
      return fmt::format("{}: misaligned {}-byte {} at {} ({})", where(*t_w->cur), bytes, is_store ? "store" : "load",
                         p, site(file, line));
    });
  }
  check_range(p, bytes, is_store != 0, is_store ? "store" : "load", file, line);
}

void api_cp_async(void* dst, const void* src, unsigned cp, unsigned src_size, const char* file, int line) {
  Worker* w = t_w;
  Fiber* f = w->cur;
  if (cp != 4 && cp != 8 && cp != 16)
    fail([&] { return fmt::format("{}: cp.async of {} bytes at {}", where(*f), cp, site(file, line)); });
  if (src_size > cp) {
    fail([&] {
      return fmt::format("{}: cp.async at {}: source size {} exceeds the copy size {}", where(*f), site(file, line),
                         src_size, cp);
    });
  }
  if (!in_smem(*w, dst, cp)) {
    fail([&] {
      return fmt::format("{}: cp.async at {}: the destination is not shared memory", where(*f), site(file, line));
    });
  }
  if (reinterpret_cast<uintptr_t>(dst) % cp != 0 || reinterpret_cast<uintptr_t>(src) % cp != 0) {
    fail([&] {
      return fmt::format("{}: cp.async at {}: source and destination must be aligned to {} bytes", where(*f),
                         site(file, line), cp);
    });
  }
  if (w->launch->checked && src_size > 0) check_range(src, src_size, false, "load (cp.async source)", file, line);
  if (LaunchProfile* prof = w->launch->profile.get()) {
    w->recorder.access(f->linear, {file, line, AccessOp::cp_async_src, AccessSpace::global},
                       reinterpret_cast<uintptr_t>(src), src_size);
    w->recorder.access(f->linear, {file, line, AccessOp::cp_async_dst, AccessSpace::shared},
                       static_cast<uint64_t>(static_cast<unsigned char*>(dst) - w->smem), cp);
    prof->touch(src, src_size, false);
  }
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
  fail([&] { return fmt::format("{}: {} at {}", where(*t_w->cur), message, site(file, line)); });
}

void api_shared_access(const void* p, unsigned bytes, int is_store, const char* file, int line) {
  Worker* w = t_w;
  if (!w->launch->profile) return;
  if (!in_smem(*w, p, bytes)) {
    fail([&] {
      return fmt::format("{}: kiln::{} at {}: the address is not shared memory", where(*w->cur),
                         is_store ? "sts" : "lds", site(file, line));
    });
  }
  const SiteKey key{file, line, is_store ? AccessOp::store : AccessOp::load, AccessSpace::shared};
  w->recorder.access(w->cur->linear, key, static_cast<uint64_t>(static_cast<const unsigned char*>(p) - w->smem), bytes);
}

const kiln_emu_api kApi = {
    KILN_EMU_ABI_VERSION, api_self,     api_syncthreads, api_warp_op, api_shared_static, api_shared_dynamic,
    api_check_global,     api_cp_async, api_cp_commit,   api_cp_wait, api_trap,          api_shared_access,
};

// ---- the scheduler -----------------------------------------------------------------------------------------

void warn(LaunchState& L, std::string message) {
  std::lock_guard lock(L.mu);
  if (L.warnings.size() < kMaxWarnings) L.warnings.push_back(std::move(message));
}

void fiber_main(void* arg) {
  auto* f = static_cast<Fiber*>(arg);
  Worker* w = t_w;
  fiber_entered(w->sched);
  w->launch->invoke(w->launch->argv);
  if (!f->uncommitted.empty() || !f->groups.empty()) {
    const Copy& c = f->groups.empty() ? f->uncommitted.front() : f->groups.front().front();
    warn(*w->launch, fmt::format("{}: exited with cp.async copies never waited for (the oldest issued at {})",
                                 where(*f), site(c.file, c.line)));
  }
  f->state = FState::done;
  fiber_switch(f->ctx, w->sched, /*final=*/true);
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
#if KILN_EMU_ASAN
    // A block that failed left its fibers' frames on these stacks, with their redzones still poisoned; the
    // kernels (not instrumented) and the warp operations reading their locals must see plain memory again.
    f.ctx.stack_bottom = static_cast<char*>(w.stacks.top(i)) - w.stacks.usable();
    f.ctx.stack_size = w.stacks.usable();
    f.ctx.fake_stack = nullptr;
    ASAN_UNPOISON_MEMORY_REGION(f.ctx.stack_bottom, f.ctx.stack_size);
#endif
    f.ctx.sp = fiber_make(w.stacks.top(i), &fiber_main, &f);
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
      fiber_switch(w.sched, f.ctx);
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
#if KILN_EMU_TSAN
    w.sched.tsan_fiber = __tsan_get_current_fiber();
    for (Fiber& f : w.fibers) f.ctx.tsan_fiber = __tsan_create_fiber(0);
#endif
    w.dyn_region = (L.dyn + 15) / 16 * 16;
    // 128-byte aligned, as a GPU's shared memory window: bank = (offset / 4) % 32.
    w.arena_storage.resize(w.dyn_region + kStaticSmemLimit + 128);
    auto p = reinterpret_cast<uintptr_t>(w.arena_storage.data());
    w.smem = w.arena_storage.data() + ((p + 127) / 128 * 128 - p);
    for (;;) {
      if (L.failed) break;
      uint64_t b = L.next_block.fetch_add(1);
      if (b >= L.blocks) break;
      if (L.profile) w.recorder.begin_block(static_cast<unsigned>(n));
      run_block(w, b);
      if (L.profile) w.recorder.end_block();
      if (w.error) {
        record(b, *std::move(w.error));
        break;
      }
    }
  }
#if KILN_EMU_TSAN
  for (Fiber& f : w.fibers) __tsan_destroy_fiber(f.ctx.tsan_fiber);
#endif
  L.switches += w.switches;
  if (L.profile) w.recorder.flush_into(*L.profile);
  t_w = nullptr;
}

// Schedule, seed, checked mode, workers and stacks of a launch: options first, then the environment.
Status configure(LaunchState& L, const LaunchOptions& options, long long& workers) {
  L.schedule = Schedule::forward;
  L.seed = 1;
  if (const std::optional<std::string> s = support::env_string("KILN_EMU_SCHEDULE")) {
    std::string v = *s;
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
          fmt::format("KILN_EMU_SCHEDULE='{}': expected forward, reverse, random or random:SEED", *s));
    }
  }
  if (options.schedule) L.schedule = *options.schedule;
  if (options.seed) L.seed = *options.seed;
  // The variables as every kiln variable reads them (support/env.h): a bad value is an error naming it.
  KILN_ASSIGN_OR_RETURN(const bool checked, support::env_bool("KILN_EMU_CHECKED", false));
  L.checked = options.checked.value_or(checked);
  KILN_ASSIGN_OR_RETURN(const int64_t env_threads, support::env_positive_int("KILN_EMU_THREADS", 0));
  KILN_ASSIGN_OR_RETURN(const int64_t env_stack, support::env_positive_int("KILN_EMU_STACK_KIB", 0));
  workers = options.threads > 0 ? options.threads
            : env_threads > 0   ? env_threads
                                : std::max(1u, std::thread::hardware_concurrency());
  L.stack_bytes = options.stack_bytes > 0 ? options.stack_bytes
                  : env_stack > 0         ? static_cast<size_t>(env_stack) * 1024
                                          : size_t{64} * 1024;
  L.stack_bytes = std::max<size_t>(L.stack_bytes, 16 * 1024);
  return {};
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

  long long workers = 0;
  if (Status st = configure(L, options, workers); !st.ok()) return st;
  std::vector<std::string> buffer_names;
  if (options.profile) {
    std::vector<LaunchProfile::Range> ranges;
    for (const Buffer& b : L.buffers) ranges.push_back({b.base, b.extent}), buffer_names.push_back(b.name);
    L.profile = std::make_unique<LaunchProfile>(ranges);
  }

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
    if (L.profile) report->profile = L.profile->result(buffer_names);
  }
  if (L.error) return invalid_argument("emu: " + L.error->second);
  return {};
}

}  // namespace kiln::emu
