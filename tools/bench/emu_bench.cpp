// emu_bench: the emulator's own throughput. Prints
//   - the raw fiber switch: two contexts ping-ponging through kiln_emu_fiber_switch, nothing else, in ns
//     per switch (src/runtime/emu/fiber_switch_<architecture>.cpp);
//   - fiber context switches per second (a block of 1024 threads meeting at __syncthreads() in a loop, and
//     a warp loop of __syncwarp()), counted by the launcher, both directions;
//   - the wall time of a 64x64x64 tiled GEMM (tests/emu/gemm_cp_async.cu: 3-stage cp.async pipeline, 4
//     blocks of 256 threads) with one worker thread and with the default pool.
// Usage: emu_bench [--cache-dir DIR]   (default: the user's kiln cache)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/emu.h"
#include "runtime/emu/fiber.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const char* kBarrierKernels = R"(
#include "kiln/device.cuh"
extern "C" __global__ void barrier_loop(int iters, int* sink) {
  int acc = 0;
  for (int i = 0; i < iters; ++i) {
    acc += i;
    __syncthreads();
  }
  if (threadIdx.x == 0) *sink = acc;
}
extern "C" __global__ void syncwarp_loop(int iters, int* sink) {
  int acc = 0;
  for (int i = 0; i < iters; ++i) {
    acc += i;
    __syncwarp();
  }
  if (threadIdx.x == 0) *sink = acc;
}
)";

void* g_main_sp = nullptr;
void* g_fiber_sp = nullptr;

[[noreturn]] void ping_pong(void*) {
  for (;;) kiln::emu::detail::kiln_emu_fiber_switch(&g_fiber_sp, g_main_sp);
}

// ns per switch of the bare switch, best of 3 runs of 2 x 5M switches. The fiber is left suspended at the
// end (its stack is unmapped with the pool): it never finishes by design.
double raw_switch_ns() {
  using namespace kiln::emu::detail;
  StackPool stacks;
  if (!stacks.reserve(1, 64 * 1024)) return 0;
  g_fiber_sp = fiber_make(stacks.top(0), &ping_pong, nullptr);
  const int n = 5'000'000;
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) kiln_emu_fiber_switch(&g_main_sp, g_fiber_sp);
    best = std::min(best, seconds_since(t));
  }
  return best / (2.0 * n) * 1e9;
}

int fail(const kiln::Status& s) {
  fmt::print(stderr, "emu_bench: {}\n", s.message());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::emu;
  CompileOptions co;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cache-dir" && i + 1 < argc) {
      co.cache_dir = argv[++i];
    } else {
      fmt::print(stderr, "usage: emu_bench [--cache-dir DIR]\n");
      return 2;
    }
  }
  fmt::print("fiber switch (raw ping-pong, no scheduler): {:.1f} ns per switch\n", raw_switch_ns());

  auto t0 = Clock::now();
  auto m = compile(kBarrierKernels, {"barrier_loop", "syncwarp_loop"}, co);
  if (!m.ok()) return fail(m.status());
  fmt::print("compile (barrier kernels): {:.3f} s{}\n", seconds_since(t0),
             (*m)->from_disk_cache() ? " (disk cache)" : "");

  std::vector<int> sink(1, 0);
  LaunchOptions one;
  one.threads = 1;
  for (const char* k : {"barrier_loop", "syncwarp_loop"}) {
    const int iters = 2000;
    const uint32_t threads = std::string(k) == "barrier_loop" ? 1024 : 32;
    const int reps = threads == 32 ? 64 : 2;
    LaunchReport report;
    double best = 1e30;
    uint64_t switches = 0;
    for (int r = 0; r < 3; ++r) {
      auto t = Clock::now();
      kiln::Status s = launch(**m, k, {static_cast<uint32_t>(reps)}, {threads}, 0,
                              {Arg::value(iters), Arg::buffer(sink.data(), sizeof(int), "sink")}, one, &report);
      if (!s.ok()) return fail(s);
      best = std::min(best, seconds_since(t));
      switches = report.context_switches;
    }
    fmt::print(
        "{:14s} {:5d} threads x {} blocks x {} iterations: {} switches in {:.3f} s = {:.1f} M switches/s "
        "({:.1f} ns per switch, scheduler included)\n",
        k, threads, reps, iters, switches, best, switches / best / 1e6, best / switches * 1e9);
  }

  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/tests/emu/gemm_cp_async.cu");
  std::string gemm_src((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  co.source_name = "gemm_cp_async.cu";
  t0 = Clock::now();
  auto g = compile(gemm_src, {"gemm_cp_async"}, co);
  if (!g.ok()) return fail(g.status());
  fmt::print("compile (gemm_cp_async.cu): {:.3f} s{}\n", seconds_since(t0),
             (*g)->from_disk_cache() ? " (disk cache)" : "");
  const int M = 64, N = 64, K = 64;
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N, 0.0f);
  std::vector<Arg> args = {Arg::buffer(a.data(), a.size() * 4, "A"),
                           Arg::buffer(b.data(), b.size() * 4, "B"),
                           Arg::buffer(c.data(), c.size() * 4, "C"),
                           Arg::value(M),
                           Arg::value(N),
                           Arg::value(K)};
  for (int threads : {1, 0}) {
    for (bool checked : {false, true}) {
      LaunchOptions o;
      o.threads = threads;
      o.checked = checked;
      std::vector<double> times;
      LaunchReport report;
      for (int r = 0; r < 5; ++r) {
        auto t = Clock::now();
        kiln::Status s = launch(**g, "gemm_cp_async", {2, 2}, {256}, 0, args, o, &report);
        if (!s.ok()) return fail(s);
        times.push_back(seconds_since(t));
      }
      std::sort(times.begin(), times.end());
      if (c[0] != 0.5f * 0.25f * K) return fail(kiln::invalid_argument(fmt::format("GEMM gave {}", c[0])));
      fmt::print("gemm 64x64x64 ({} worker{}, {}): median {:.2f} ms, min {:.2f} ms, {} switches\n",
                 threads == 1 ? "1" : "default", threads == 1 ? "" : "s", checked ? "checked" : "unchecked",
                 times[2] * 1e3, times[0] * 1e3, report.context_switches);
    }
  }
  return 0;
}
