// The fixture of the emu shared-object cache fault tests (test_emu_cache_faults*.cpp): `kiln run --device emu
// --check` of a one-kernel graph as a child process, in a cache directory and a TMPDIR of the test's own.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache/entry_format.h"
#include "cache_fault_util.h"
#include "cache_test_util.h"
#include "kiln/cache.h"

namespace kiln::cache_test {

class EmuFaultTest : public KernelCacheTest {
 protected:
  void SetUp() override {
    KernelCacheTest::SetUp();
    fs::create_directories(path("tmp"));
    write("g.json", kTinyReluGraph);
  }

  // `kiln run g.json --device emu --check` with KILN_CACHE_DIR=path(cache) and TMPDIR=path("tmp").
  subprocess::Proc run(const std::string& cache = "cache", const ChildOptions& o = {}) {
    ScopedEnv dir("KILN_CACHE_DIR", path(cache).c_str()), tmp("TMPDIR", path("tmp").c_str());
    return run_child(KILN_CLI_PATH, {"run", path("g.json"), "--device", "emu", "--check"}, dir_, o);
  }
  // A run that must succeed with every output right, leaving no scratch directory behind.
  subprocess::Proc good_run(const std::string& cache = "cache", const ChildOptions& o = {}) {
    subprocess::Proc p = run(cache, o);
    EXPECT_EQ(p.code, 0) << p.out << p.err;
    EXPECT_THAT(p.out, ::testing::HasSubstr("check against ref:"));
    EXPECT_THAT(p.out, ::testing::ContainsRegex("y +f32 +0 +0 .* ok\n"));
    EXPECT_TRUE(fs::is_empty(path("tmp"))) << "a scratch directory was left behind";
    return p;
  }
  static bool compiled_now(const subprocess::Proc& p) { return p.out.find("host-compiled now") != std::string::npos; }

  subprocess::Proc cache_cmd(const std::string& sub, const std::string& cache = "cache") {
    ScopedEnv dir("KILN_CACHE_DIR", path(cache).c_str());
    return subprocess::run_process(KILN_CLI_PATH, {"cache", sub}, dir_);
  }

  // The regular files under <cache>/kernels/emu.
  std::vector<std::string> emu_files(const std::string& cache = "cache") {
    std::vector<std::string> out;
    if (!fs::exists(path(cache + "/kernels/emu"))) return out;
    for (const auto& e : fs::recursive_directory_iterator(path(cache + "/kernels/emu"))) {
      if (e.is_regular_file(ec_) && !e.is_symlink(ec_)) out.push_back(e.path().string());
    }
    return out;
  }
  // Runs once into an empty cache and returns the path of the one entry it stores.
  std::string first_entry(const std::string& cache = "cache") {
    good_run(cache);
    std::vector<std::string> files = emu_files(cache);
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? "" : files[0];
  }
  static CacheKey key_of_entry(const std::string& entry_path) {
    return *CacheKey::parse(fs::path(entry_path).stem().string());
  }
  static CacheEntry decoded(const std::string& entry_path) {
    auto e = cache_format::decode(read_bytes(entry_path), key_of_entry(entry_path), CacheKind::emu);
    EXPECT_TRUE(e) << entry_path;
    return e ? *e : CacheEntry{};
  }

  std::error_code ec_;
  CleanCacheEnv clean_;
};

}  // namespace kiln::cache_test
