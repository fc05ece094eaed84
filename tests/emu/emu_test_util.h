// Helpers for the emu tests: kernel sources under tests/emu/, a compile cache shared by the test processes
// of one run, random inputs that are never zero, and the line of a marker in a source file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/emu.h"

namespace kiln::emu::test {

inline constexpr Schedule kSchedules[] = {Schedule::forward, Schedule::reverse, Schedule::random};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline std::string kernel_source(const std::string& file) {
  return read_text(std::string(KILN_EMU_KERNEL_DIR) + "/" + file);
}

// The start time of a process, from /proc/PID/stat (field 22), or 0.
inline unsigned long long process_start(pid_t pid) {
  std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
    if (i == 22) return std::stoull(field);
  }
  return 0;
}

// One cache directory per test run: ctest starts every test in its own process, all children of one ctest
// process, so the directory is named after the parent process (pid and start time). A run starts cold;
// its tests share compiled kernels. Directories of runs older than a day are removed.
inline const std::string& cache_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const fs::path root = fs::temp_directory_path() / "kiln-emu-tests";
    std::error_code ec;
    fs::create_directories(root, ec);
    for (const auto& e : fs::directory_iterator(root, ec)) {
      auto age = fs::file_time_type::clock::now() - e.last_write_time(ec);
      if (!ec && age > std::chrono::hours(24)) fs::remove_all(e.path(), ec);
    }
    const pid_t parent = getppid();
    return (root / fmt::format("run-{}-{}", parent, process_start(parent))).string();
  }();
  return dir;
}

// Every kernel of every file under tests/emu/: a file is always compiled with all its entry points, so
// the tests that use one file share one shared object.
inline std::vector<std::string> kernels_of(const std::string& file) {
  static const std::map<std::string, std::vector<std::string>> kKernels = {
      {"atomics.cu", {"histogram"}},
      {"block_reduce.cu", {"block_reduce"}},
      {"block_scan.cu", {"block_scan"}},
      {"bugs.cu",
       {"bug_no_cp_wait", "bug_no_syncthreads", "bug_divergent_barrier", "bug_exit_before_barrier", "bug_shfl_mask",
        "bug_shfl_missing_lane", "bug_oob_store"}},
      {"conversions.cu", {"conversions"}},
      {"cp_async_sizes.cu", {"cp_async_sizes"}},
      {"dynamic_smem.cu", {"reverse_chunks", "scale_vec4"}},
      {"gemm_cp_async.cu", {"gemm_cp_async"}},
      {"mma_tile.cu", {"mma_tile_f16", "mma_tile_bf16", "ldmatrix_probe"}},
      {"profile_patterns.cu",
       {"copy_f32", "stride2_f32", "copy_f32x4", "read_twice", "broadcast_f32", "odd_lanes", "smem_stride", "ldmatrix_unpadded",
        "ldmatrix_stage", "cp_async_rows"}},
      {"warp_shuffles.cu",
       {"warp_sum_down", "warp_sum_xor", "warp_scan_up", "warp_idx", "warp_width", "warp_ballot", "half_warp_groups"}},
  };
  auto it = kKernels.find(file);
  return it == kKernels.end() ? std::vector<std::string>{} : it->second;
}

// Compiles `file` (all its kernels) and checks that `kernels` are among them.
inline Result<std::shared_ptr<const Module>> compile_file(const std::string& file,
                                                          const std::vector<std::string>& kernels,
                                                          const std::string& prefix = {}) {
  CompileOptions o;
  o.source_name = file;
  o.cache_dir = cache_dir();
  auto r = compile(prefix + kernel_source(file), kernels_of(file), o);
  if (!r.ok()) return r;
  for (const auto& k : kernels) {
    if (!(*r)->has_kernel(k)) return not_found("test kernel table: " + file + " has no kernel " + k);
  }
  return r;
}

// Uniform in [-1, -0.1] U [0.1, 1]: never zero, so a missing write or a dropped term shows.
inline std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

template <class T>
Arg buf(std::vector<T>& v, std::string name) {
  return Arg::buffer(v.data(), v.size() * sizeof(T), std::move(name));
}

inline LaunchOptions checked(Schedule s) {
  LaunchOptions o;
  o.schedule = s;
  o.seed = 12345;
  o.checked = true;
  return o;
}

// The 1-based line of the `occurrence`-th line of `source` holding `marker`, counting from the first line
// that holds `after`.
inline int line_of(const std::string& source, const std::string& marker, int occurrence = 1,
                   const std::string& after = {}) {
  int line = 1;
  size_t pos = 0;
  if (!after.empty()) {
    size_t a = source.find(after);
    if (a == std::string::npos) return -1;
    pos = source.rfind('\n', a);
    pos = pos == std::string::npos ? 0 : pos + 1;
    for (size_t i = 0; i < pos; ++i) line += source[i] == '\n';
  }
  while (pos < source.size()) {
    size_t end = source.find('\n', pos);
    if (end == std::string::npos) end = source.size();
    if (source.substr(pos, end - pos).find(marker) != std::string::npos && --occurrence == 0) {
      return line;
    }
    ++line;
    pos = end + 1;
  }
  return -1;
}

}  // namespace kiln::emu::test

#define KILN_ASSERT_OK(expr)                          \
  do {                                                \
    const ::kiln::Status kiln_st_ = (expr);           \
    ASSERT_TRUE(kiln_st_.ok()) << kiln_st_.message(); \
  } while (0)
