// `kiln cache` (the real binary), the emu backend's shared objects as cache entries (READONLY, DISABLE,
// corrupted entries rebuilt), and kernels told apart by their whole source, never by entry name alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cache_test_util.h"
#include "kiln/cache.h"
#include "kiln/emu.h"
#include "runtime/kernel_provider.h"

namespace kiln {
namespace {

using namespace cache_test;
using ::testing::HasSubstr;

// ---- kiln cache ------------------------------------------------------------------------------------------

class CacheCliTest : public KernelCacheTest {
 protected:
  subprocess::Proc kiln(const std::vector<std::string>& args) {
    return subprocess::run_process(KILN_CLI_PATH, args, dir_);
  }
};

TEST_F(CacheCliTest, StatsLsVerifyPruneClear) {
  CleanCacheEnv clean;
  ScopedEnv dir("KILN_CACHE_DIR", path("cache").c_str());
  auto p = kiln({"cache", "stats"});  // looking at a cache that does not exist yet creates nothing
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, ::testing::ContainsRegex("entries +0\n"));
  EXPECT_FALSE(fs::exists(path("cache")));
  {
    KernelCache cache = open();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.store(key_for(i), make_entry(i)).ok());
    EXPECT_FALSE(cache.lookup(key_for(9)));
    std::string bytes = read_bytes(cache.entry_path(key_for(1)));
    flip(bytes, bytes.size() / 2);
    write_bytes(cache.entry_path(key_for(1)), bytes);
  }
  p = kiln({"cache", "stats"});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("cache directory: " + path("cache")));
  EXPECT_THAT(p.out, ::testing::ContainsRegex("entries +3\n"));
  EXPECT_THAT(p.out, ::testing::ContainsRegex("stores +3\n"));
  EXPECT_THAT(p.out, ::testing::ContainsRegex("misses +1\n"));

  p = kiln({"cache", "ls"});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, ::testing::ContainsRegex("key +kind +kernel +arch +size +regs +spills +last use"));
  EXPECT_THAT(p.out, HasSubstr(key_for(0).hex().substr(0, 12) + "  nvrtc  fused_0  sm_90a"));
  EXPECT_THAT(p.out, HasSubstr("fused_2"));
  EXPECT_THAT(p.out, ::testing::Not(HasSubstr("fused_1")));  // the corrupted one
  EXPECT_THAT(p.out, HasSubstr("2 entries"));

  p = kiln({"cache", "verify"});
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_THAT(p.out, HasSubstr("bad: " + fs::path(path("cache")).string() + "/kernels/nvrtc/"));
  EXPECT_THAT(p.out, HasSubstr(".kbin: checksum mismatch (corrupted)\n"));
  EXPECT_THAT(p.out, HasSubstr("checked 3 entries: 1 bad, 1 removed"));
  p = kiln({"cache", "verify"});
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_THAT(p.out, HasSubstr("checked 2 entries: 0 bad, 0 removed"));

  p = kiln({"cache", "prune", "--max-size", "100K"});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("remain (limit 100.0 KiB)"));
  EXPECT_EQ(files_under(path("cache/kernels")).size(), 1u);

  p = kiln({"cache", "clear"});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("cleared " + path("cache")));
  p = kiln({"cache", "stats"});
  EXPECT_THAT(p.out, ::testing::ContainsRegex("entries +0\n"));
}

TEST_F(CacheCliTest, UsageAndEnvironmentErrors) {
  CleanCacheEnv clean;
  ScopedEnv dir("KILN_CACHE_DIR", path("cache").c_str());
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{{"cache"},
                                                                             {"cache", "bogus"},
                                                                             {"cache", "prune"},
                                                                             {"cache", "prune", "--max-size", "5X"},
                                                                             {"cache", "ls", "--max-size", "5M"},
                                                                             {"cache", "ls", "extra"}}) {
    auto p = kiln(args);
    EXPECT_EQ(p.code, 2) << ::testing::PrintToString(args) << p.err;
    EXPECT_THAT(p.err, ::testing::StartsWith("error: "));
  }
  ScopedEnv bad("KILN_CACHE_MAX_SIZE", "huge");
  auto p = kiln({"cache", "stats"});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("error: KILN_CACHE_MAX_SIZE='huge'"));
}

// ---- the emu backend's shared objects ----------------------------------------------------------------------

// `kiln run --device emu --check` of a one-kernel graph, in a cache directory of the test's own, with
// TMPDIR a directory of its own too (compiles happen in scratch directories there, which must go away).
class EmuCacheTest : public CacheCliTest {
 protected:
  void SetUp() override {
    CacheCliTest::SetUp();
    fs::create_directories(path("tmp"));
    write("g.json", kTinyReluGraph);
  }
  // Runs the graph on emu with `cache` as KILN_CACHE_DIR; expects success and a passing check.
  void run_emu(const std::string& cache) {
    ScopedEnv dir("KILN_CACHE_DIR", path(cache).c_str()), tmp("TMPDIR", path("tmp").c_str());
    auto p = kiln({"run", path("g.json"), "--device", "emu", "--check"});
    EXPECT_EQ(p.code, 0) << p.out << p.err;
    EXPECT_THAT(p.out, HasSubstr("check against ref:"));
    EXPECT_THAT(p.out, ::testing::Not(HasSubstr("FAIL")));
    EXPECT_TRUE(fs::is_empty(path("tmp"))) << "a scratch directory was left behind";
  }
  subprocess::Proc cache_cmd(const std::string& cache, const std::string& sub) {
    ScopedEnv dir("KILN_CACHE_DIR", path(cache).c_str());
    return kiln({"cache", sub});
  }
  std::vector<std::string> emu_entries(const std::string& cache) {
    std::vector<std::string> out;
    if (!fs::exists(path(cache + "/kernels/emu"))) return out;
    for (const auto& e : fs::recursive_directory_iterator(path(cache + "/kernels/emu"))) {
      if (e.is_regular_file()) out.push_back(e.path().string());
    }
    return out;
  }
  CleanCacheEnv clean_;
};

unsigned mode_of(const std::string& p) {
  struct stat st;
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

TEST_F(EmuCacheTest, SharedObjectsAreEntriesAndBadOnesAreRebuilt) {
  run_emu("cache");
  std::vector<std::string> entries = emu_entries("cache");
  ASSERT_EQ(entries.size(), 1u);
  const std::string entry = entries[0];
  EXPECT_THAT(entry, ::testing::EndsWith(".kbin"));
  EXPECT_EQ(mode_of(entry), 0600u);
  for (const std::string d : {"cache", "cache/kernels", "cache/kernels/emu"}) EXPECT_EQ(mode_of(path(d)), 0700u) << d;
  EXPECT_EQ(mode_of(fs::path(entry).parent_path().string()), 0700u);
  EXPECT_FALSE(fs::exists(path("cache/emu")));  // no second cache beside the kernel cache

  auto p = cache_cmd("cache", "stats");
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, ::testing::ContainsRegex("entries +2\n"));  // the kernels' shared object and the plan
  EXPECT_THAT(p.out, ::testing::ContainsRegex("  emu +1 +[0-9.]+ [KM]iB +0 +1 +1 +0 +0\n"));  // entries..bad
  EXPECT_THAT(p.out, ::testing::ContainsRegex("  plan +1 +[0-9.]+ [KM]iB +0 +1 +1 +0 +0\n"));
  p = cache_cmd("cache", "ls");
  EXPECT_THAT(p.out, ::testing::ContainsRegex(" emu +tiny_relu.kernels.cu +(x86_64|aarch64) +[0-9.]+ [KM]iB +- +- "));
  EXPECT_THAT(p.out, ::testing::ContainsRegex(" plan +tiny_relu +sm_90 +[0-9.]+ [KM]iB +- +- "));
  p = cache_cmd("cache", "verify");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("checked 2 entries: 0 bad"));

  // A warm run loads the entry and writes nothing into kernels/.
  auto before = snapshot(path("cache/kernels"));
  run_emu("cache");
  EXPECT_EQ(snapshot(path("cache/kernels")), before);
  EXPECT_THAT(cache_cmd("cache", "stats").out, ::testing::ContainsRegex("  emu +1 +[0-9.]+ [KM]iB +1 +1 +1 +0 +0\n"));

  // A truncated shared object used to be mapped (and kill the run with SIGBUS); a flipped bit would have
  // run wrong code. Each is detected by the entry checks, removed, rebuilt, and the run's results are right.
  const std::string good = read_bytes(entry);
  int bad = 0;
  for (int damage = 0; damage < 2; ++damage) {
    std::string bytes = good;
    if (damage == 0) bytes.resize(bytes.size() / 2);
    if (damage == 1) flip(bytes, bytes.size() / 2);
    write_bytes(entry, bytes);
    run_emu("cache");
    ++bad;
    ASSERT_TRUE(fs::exists(entry)) << "not rebuilt";
    EXPECT_EQ(fs::file_size(entry), good.size());
    p = cache_cmd("cache", "verify");
    EXPECT_EQ(p.code, 0) << p.out;
    EXPECT_THAT(
        cache_cmd("cache", "stats").out,
        ::testing::ContainsRegex(fmt::format("  emu +1 +[0-9.]+ [KM]iB +1 +{} +{} +0 +{}\n", 1 + bad, 1 + bad, bad)));
  }
  p = cache_cmd("cache", "clear");
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(emu_entries("cache").empty());
}

TEST_F(EmuCacheTest, ReadOnlyAndDisabledCachesAreNotWritten) {
  run_emu("cache");  // a populated cache
  ASSERT_EQ(emu_entries("cache").size(), 1u);
  const auto before = snapshot(path("cache"));
  {
    ScopedEnv ro("KILN_CACHE_READONLY", "1");
    run_emu("cache");  // a hit: the entry is read, nothing written, touched or counted on disk
    EXPECT_EQ(snapshot(path("cache")), before);
    run_emu("empty-ro");  // a miss: compiled in scratch space, nothing created
    EXPECT_FALSE(fs::exists(path("empty-ro")));
  }
  {
    ScopedEnv off("KILN_CACHE_DISABLE", "1");
    run_emu("cache");  // not even looked up: compiled again, not stored
    EXPECT_EQ(snapshot(path("cache")), before);
    run_emu("empty-off");
    EXPECT_FALSE(fs::exists(path("empty-off")));
  }
  {
    ScopedEnv assert_hit("KILN_CACHE_ASSERT_HIT", "1"), dir("KILN_CACHE_DIR", path("empty-hit").c_str());
    auto p = kiln({"run", path("g.json"), "--device", "emu"});
    EXPECT_EQ(p.code, 1);
    EXPECT_THAT(p.err, HasSubstr("KILN_CACHE_ASSERT_HIT=1"));
  }
}

// ---- kernels are told apart by their whole source -----------------------------------------------------------

// A kernel named `entry` whose one thread writes `value`: different values, different sources.
codegen::Kernel test_kernel(const std::string& entry, int value) {
  codegen::Kernel k;
  k.family = KernelFamilyId::pointwise;  // (hand-written: any family)
  k.entry = entry;
  k.source = fmt::format(
      "#include \"kiln/device.cuh\"\n// {0}: writes {1}\nextern \"C\" __global__ void {0}(float* y) {{ y[0] = {1}.0f; "
      "}}\n",
      entry, value);
  return k;
}

class KernelIdentityTest : public TempDirTest {};

TEST_F(KernelIdentityTest, SameEntryNameDifferentSourcesAreKeptApart) {
  const std::string name = "kiln_test_same_0000abcd";
  PlanKernels pk;
  pk.launches = {test_kernel(name, 1), test_kernel(name, 2), test_kernel(name, 1), test_kernel(name, 2),
                 test_kernel(name + "_v2", 3)};
  pk.group = {0, 1, 2, 3, 4};
  // Launches of one kernel may ask for different dynamic shared memory (a generic kernel at two residencies).
  pk.launches[0].dynamic_smem = 1024, pk.launches[2].dynamic_smem = 4096, pk.launches[1].dynamic_smem = 512;
  assign_distinct(pk);
  EXPECT_EQ(pk.distinct, (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(pk.distinct_of, (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(pk.distinct_smem, (std::vector<uint32_t>{4096, 512, 0})) << "loaded for the most any launch asks";
  // The first keeps its name; the second source under it is renamed, in its entry and its source, at
  // every launch; a kernel that already had the new name moves on to another.
  EXPECT_EQ(pk.launches[0].entry, name);
  EXPECT_EQ(pk.launches[0].source, test_kernel(name, 1).source);
  EXPECT_EQ(pk.launches[1].entry, name + "_v2");
  EXPECT_EQ(pk.launches[1].source, test_kernel(name + "_v2", 2).source);
  EXPECT_EQ(pk.launches[3].entry, pk.launches[1].entry);
  EXPECT_EQ(pk.launches[3].source, pk.launches[1].source);
  EXPECT_EQ(pk.launches[4].entry, name + "_v2_v2");
  EXPECT_EQ(pk.launches[4].source, test_kernel(name + "_v2_v2", 3).source);
  EXPECT_NE(kernel_cache_key(pk.launches[0], "sm_90"), kernel_cache_key(pk.launches[1], "sm_90"));

  // All three in one translation unit (as the emu device builds a plan): each entry runs its own code.
  std::string unit;
  std::vector<std::string> entries;
  for (int d : pk.distinct) {
    unit += pk.launches[static_cast<size_t>(d)].source;
    entries.push_back(pk.launches[static_cast<size_t>(d)].entry);
  }
  emu::CompileOptions o;
  o.cache_dir = path("cache");
  auto m = emu::compile(unit, entries, o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (int i = 0; i < 3; ++i) {
    std::vector<float> y(1, 0.0f);
    Status s = emu::launch(**m, entries[static_cast<size_t>(i)], {1}, {1}, 0, {emu::Arg::buffer(y.data(), 4, "y")});
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(y[0], static_cast<float>(i + 1)) << entries[static_cast<size_t>(i)];
  }
  // The emu compiler refuses one name twice rather than linking one kernel for both.
  auto twice = emu::compile(unit, {name, name}, o);
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("named twice"));
}

}  // namespace
}  // namespace kiln
