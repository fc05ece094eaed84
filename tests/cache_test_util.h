// Helpers of the kernel cache tests (test_cache.cpp, test_cache_maintenance.cpp, test_cache_cli.cpp):
// environment scopes, entries made from a number, file snapshots, and a fixture with a cache directory.
#pragma once

#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "codegen/nvrtc.h"
#include "kiln/cache.h"
#include "scoped_env.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace kiln::cache_test {

namespace fs = std::filesystem;

// A one-kernel graph (a relu over [4, 64]) for the tests that run kiln on emu against a cache.
inline constexpr const char* kTinyReluGraph = R"({"format": "kiln.graph", "version": 1, "name": "tiny_relu",
  "tensors": [{"name": "x", "shape": [4, 64], "dtype": "f32", "kind": "input"}],
  "nodes": [{"op": "relu", "name": "act", "inputs": {"x": "x"}, "outputs": {"y": "y"}}],
  "outputs": ["y"]})";

using kiln::testing::ScopedEnv;

// Every cache variable unset, so that the host's environment cannot leak into a test.
struct CleanCacheEnv {
  ScopedEnv vars[13] = {{"KILN_CACHE_DIR", nullptr},
                        {"KILN_CACHE_SECONDARY", nullptr},
                        {"KILN_CACHE_DISABLE", nullptr},
                        {"KILN_CACHE_READONLY", nullptr},
                        {"KILN_CACHE_ASSERT_HIT", nullptr},
                        {"KILN_SAVE_SOURCE", nullptr},
                        {"KILN_CACHE_MAX_SIZE", nullptr},
                        {"KILN_CACHE_FSYNC", nullptr},
                        {"XDG_CACHE_HOME", nullptr},
                        {"KILN_CACHE_REMOTE", nullptr},
                        {"KILN_CACHE_REMOTE_PASSWORD", nullptr},
                        {"KILN_CACHE_REMOTE_PASSWORD_FILE", nullptr},
                        {"KILN_CACHE_REMOTE_TIMEOUT_MS", nullptr}};
};

// For the tests that compile NVRTC kernels (prewarm, the provider).
#define SKIP_WITHOUT_NVRTC() \
  if (codegen::nvrtc_build_version() == "none") GTEST_SKIP() << "built without the CUDA toolkit"

inline CacheKey key_for(int i) {
  KeyManifest m;
  m.add("kernel", "k" + std::to_string(i));
  return m.key();
}

// An entry whose cubin holds every byte value (NULs, 0xff) and is large enough to span several reads.
inline CacheEntry make_entry(int i, size_t cubin_bytes = 70000) {
  CacheEntry e;
  e.kernel_name = "fused_" + std::to_string(i);
  e.arch = "sm_90a";
  for (size_t b = 0; b < cubin_bytes; ++b) e.cubin.push_back(static_cast<uint8_t>((b * 131 + i) & 0xff));
  e.ptx = ".version 8.8\n.target sm_90a\n// kernel " + std::to_string(i) + "\n";
  e.info = {.registers = 40 + i,
            .shared_bytes = 4096,
            .stack_bytes = 8,
            .spill_store_bytes = i,
            .spill_load_bytes = 2 * i,
            .compile_ms = 12.5 + i};
  KeyManifest m;
  m.add("kernel", "k" + std::to_string(i));
  e.manifest = m.text();
  return e;
}

inline void expect_same_payload(const CacheEntry& got, const CacheEntry& want) {
  EXPECT_EQ(got.kernel_name, want.kernel_name);
  EXPECT_EQ(got.arch, want.arch);
  EXPECT_TRUE(got.cubin == want.cubin);
  EXPECT_EQ(got.ptx, want.ptx);
  EXPECT_EQ(got.info, want.info);
  EXPECT_EQ(got.manifest, want.manifest);
}

inline void set_mtime(const std::string& path, int64_t seconds_ago) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = ::time(nullptr) - seconds_ago;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0) << path;
}

inline int64_t mtime_of(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtime) : -1;
}

// Every path under `dir` with its size and mtime (nanoseconds): a write, delete or touch changes it.
inline std::map<std::string, std::pair<int64_t, int64_t>> snapshot(const std::string& dir) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st;
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = {st.st_size, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}

inline std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().filename().string());
  }
  return out;
}

inline std::string read_bytes(const std::string& path) { return subprocess::slurp(path); }
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void flip(std::string& b, size_t at) { b[at] = static_cast<char>(b[at] ^ 0x10); }

// A fresh cache directory per test: path("cache").
class KernelCacheTest : public TempDirTest {
 protected:
  CacheConfig config() const {
    CacheConfig c;
    c.dir = path("cache");
    return c;
  }
  KernelCache open(CacheConfig c) {
    auto r = KernelCache::open(std::move(c));
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  }
  KernelCache open() { return open(config()); }
};

}  // namespace kiln::cache_test
