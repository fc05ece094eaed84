// The kernel cache's maintenance (list, verify and its reasons, clear), its kinds of entries sharing one
// limit, its counters, several processes storing at once, and configuration from the environment.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cache/entry_format.h"
#include "cache_test_util.h"
#include "kiln/cache.h"

namespace kiln {
namespace {

using namespace cache_test;
using ::testing::HasSubstr;

TEST_F(KernelCacheTest, ListVerifyAndClear) {
  KernelCache cache = open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.store(key_for(i), make_entry(i)).ok());
  ASSERT_TRUE(cache.store(key_for(7), make_entry(7), CacheKind::emu).ok());
  set_mtime(cache.entry_path(key_for(0)), 600);
  set_mtime(cache.entry_path(key_for(7), CacheKind::emu), 1200);
  std::string bytes = read_bytes(cache.entry_path(key_for(1)));
  flip(bytes, 60);
  write_bytes(cache.entry_path(key_for(1)), bytes);
  fs::create_directories(path("cache/kernels/nvrtc/00"));
  write_bytes(path("cache/kernels/nvrtc/00/not-a-key.kbin"), "x");
  fs::create_directories(path("cache/kernels/00"));  // kiln's layout before kinds: never looked up
  write_bytes(path("cache/kernels/00/old.kbin"), "y");

  auto list = cache.list();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);                   // bad files are left to verify
  EXPECT_EQ((*list)[0].kernel_name, "fused_2");  // most recently used first, every kind
  EXPECT_EQ((*list)[1].kernel_name, "fused_0");
  EXPECT_EQ((*list)[2].kernel_name, "fused_7");
  EXPECT_EQ((*list)[2].kind, CacheKind::emu);
  EXPECT_EQ((*list)[2].key, key_for(7));
  EXPECT_TRUE((*list)[0].cubin.empty());
  EXPECT_EQ((*list)[0].info, make_entry(2).info);

  auto report = cache.verify();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked, 6);
  EXPECT_EQ(report->bad, 3);
  EXPECT_EQ(report->removed, 3);
  std::map<std::string, std::string> why;
  for (const auto& b : report->bad_files) why[b.path] = b.reason;
  EXPECT_EQ(why.size(), 3u);
  EXPECT_EQ(why[cache.entry_path(key_for(1))], "checksum mismatch (corrupted)");
  EXPECT_THAT(why[path("cache/kernels/nvrtc/00/not-a-key.kbin")], HasSubstr("not an entry name"));
  EXPECT_THAT(why[path("cache/kernels/00/old.kbin")], HasSubstr("outside kernels/<kind>/<shard>/"));
  EXPECT_FALSE(fs::exists(path("cache/kernels/00/old.kbin")));
  EXPECT_EQ(cache.verify()->bad, 0);

  fs::create_directories(path("cache/emu/ab"));  // the emu backend's own cache before it was a kind here
  write_bytes(path("cache/emu/ab/old.so"), "emu");
  ASSERT_TRUE(cache.save_source(key_for(0), "// src").ok());
  ASSERT_TRUE(cache.clear().ok());
  EXPECT_FALSE(cache.lookup(key_for(0)));
  EXPECT_FALSE(cache.lookup(key_for(7), CacheKind::emu));
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_FALSE(fs::exists(cache.source_path(key_for(0))));
  EXPECT_FALSE(fs::exists(path("cache/emu")));
  ASSERT_TRUE(cache.store(key_for(0), make_entry(0)).ok());
  EXPECT_TRUE(cache.lookup(key_for(0)));
}

// Why each damaged file is bad, as `kiln cache verify` prints it.
TEST_F(KernelCacheTest, VerifySaysWhatIsWrong) {
  KernelCache cache = open();
  const CacheKey key = key_for(1);
  const std::string good = cache_format::encode(key, make_entry(1));
  const std::string other = cache_format::encode(key_for(2), make_entry(2));
  const std::string emu = cache_format::encode(key, make_entry(1), CacheKind::emu);
  auto reason = [&](std::string bytes) {
    std::string why;
    EXPECT_FALSE(cache_format::decode(bytes, key, CacheKind::nvrtc, false, &why));
    return why;
  };
  EXPECT_EQ(reason(""), "truncated: empty file");
  EXPECT_THAT(reason(good.substr(0, 30)), HasSubstr("truncated: 30 bytes"));
  EXPECT_EQ(reason(good.substr(0, good.size() / 2)),
            fmt::format("truncated: {} bytes of the {} the header gives", good.size() / 2, good.size()));
  EXPECT_THAT(reason(good + "x"), HasSubstr("extended: "));
  EXPECT_EQ(reason(std::string("CCACHE\0\0", 8) + good.substr(8)), "bad magic (not a kiln cache entry)");
  EXPECT_THAT(reason(other), HasSubstr("key mismatch: holds the entry of key " + key_for(2).hex()));
  EXPECT_EQ(reason(emu), "kind mismatch: holds an emu entry, expected nvrtc");
  std::string flipped = good;
  flip(flipped, good.size() / 2);
  EXPECT_EQ(reason(flipped), "checksum mismatch (corrupted)");

  // Through verify, with the path.
  fs::create_directories(fs::path(cache.entry_path(key)).parent_path());
  write_bytes(cache.entry_path(key), good.substr(0, good.size() - 5));
  auto report = cache.verify();
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->bad_files.size(), 1u);
  EXPECT_EQ(report->bad_files[0].path, cache.entry_path(key));
  EXPECT_THAT(report->bad_files[0].reason, HasSubstr("truncated"));
}

// One cache, two kinds: separate directories and lookups, one size limit and LRU order, per-kind counts.
TEST_F(KernelCacheTest, KindsShareTheLimitButNotTheirEntries) {
  const int64_t entry_bytes = static_cast<int64_t>(cache_format::encode(key_for(0), make_entry(0)).size());
  CacheConfig c = config();
  c.max_size_bytes = entry_bytes * 7 / 2;  // room for 3.5 entries of either kind
  KernelCache cache = open(c);
  ASSERT_TRUE(cache.store(key_for(0), make_entry(0), CacheKind::emu).ok());
  EXPECT_FALSE(cache.lookup(key_for(0)));  // an emu entry is no nvrtc entry of the same key
  ASSERT_TRUE(cache.lookup(key_for(0), CacheKind::emu));
  EXPECT_THAT(cache.entry_path(key_for(0), CacheKind::emu), HasSubstr("/kernels/emu/"));
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  ASSERT_TRUE(cache.store(key_for(2), make_entry(2)).ok());
  set_mtime(cache.entry_path(key_for(0), CacheKind::emu), 3 * 86400);  // the oldest: an emu entry
  set_mtime(cache.entry_path(key_for(1)), 2 * 86400);
  ASSERT_TRUE(cache.store(key_for(3), make_entry(3), CacheKind::emu).ok());  // over the limit: evicts 0
  EXPECT_FALSE(fs::exists(cache.entry_path(key_for(0), CacheKind::emu)));
  EXPECT_TRUE(fs::exists(cache.entry_path(key_for(1))));
  CacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_EQ(s.of(CacheKind::nvrtc).entries, 2);
  EXPECT_EQ(s.of(CacheKind::emu).entries, 1);
  EXPECT_EQ(s.of(CacheKind::emu).bytes, entry_bytes);
  EXPECT_EQ(s.of(CacheKind::emu).stores, 2);
  EXPECT_EQ(s.of(CacheKind::emu).evictions, 1);
  EXPECT_EQ(s.of(CacheKind::emu).hits, 1);
  EXPECT_EQ(s.of(CacheKind::nvrtc).misses, 1);
  EXPECT_EQ(s.stores, 4);
  EXPECT_EQ(s.evictions, 1);
  // A valid entry of one kind copied into the other's directory is bad there, and removed.
  fs::create_directories(fs::path(cache.entry_path(key_for(1), CacheKind::emu)).parent_path());
  fs::copy_file(cache.entry_path(key_for(1)), cache.entry_path(key_for(1), CacheKind::emu));
  EXPECT_FALSE(cache.lookup(key_for(1), CacheKind::emu));
  EXPECT_FALSE(fs::exists(cache.entry_path(key_for(1), CacheKind::emu)));
  EXPECT_EQ(cache.session_stats().of(CacheKind::emu).bad_entries, 1);
  // remove_bad: an intact entry its user could not use.
  cache.remove_bad(key_for(3), CacheKind::emu);
  EXPECT_FALSE(fs::exists(cache.entry_path(key_for(3), CacheKind::emu)));
  EXPECT_EQ(cache.session_stats().of(CacheKind::emu).bad_entries, 2);
}

// Counter files written before kinds existed ("hits 5") count for nvrtc.
TEST_F(KernelCacheTest, OldCounterFilesCountForNvrtc) {
  fs::create_directories(path("cache/stats"));
  write_bytes(path("cache/stats/3.txt"), "hits 5\nmisses 2\nemu.stores 4\nbogus.hits 9\n");
  KernelCache cache = open();
  CacheStats s = cache.stats();
  EXPECT_EQ(s.of(CacheKind::nvrtc).hits, 5);
  EXPECT_EQ(s.of(CacheKind::nvrtc).misses, 2);
  EXPECT_EQ(s.of(CacheKind::emu).stores, 4);
  EXPECT_EQ(s.hits, 5);
}

TEST_F(KernelCacheTest, SaveSourceAndMissError) {
  KernelCache cache = open();
  CacheKey key = key_for(4);
  EXPECT_EQ(cache.source_path(key), path("cache") + "/sources/" + key.hex() + ".cu");
  ASSERT_TRUE(cache.save_source(key, "__global__ void k() {}\n").ok());
  EXPECT_EQ(read_bytes(cache.source_path(key)), "__global__ void k() {}\n");
  Status s = cache.miss_error("fused_4", key);
  EXPECT_EQ(s.code(), StatusCode::not_found);
  EXPECT_THAT(s.message(), HasSubstr("fused_4"));
  EXPECT_THAT(s.message(), HasSubstr(key.hex()));
  EXPECT_THAT(s.message(), HasSubstr("KILN_CACHE_ASSERT_HIT"));
}

// 8 processes store the same 24 keys (each in its own order) and look them up while the others write:
// every lookup is a miss or the exact entry, and the directory ends with each entry once, valid.
TEST_F(KernelCacheTest, ConcurrentProcessesStoringTheSameKeys) {
  constexpr int kProcs = 8, kKeys = 24;
  std::vector<CacheEntry> entries;
  for (int i = 0; i < kKeys; ++i) entries.push_back(make_entry(i));
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // The child: no gtest assertions (they would report in the wrong process); the exit code says it all.
      int failures = 0;
      auto r = KernelCache::open(config());
      if (!r.ok()) ::_exit(10);
      KernelCache cache = std::move(r).value();
      for (int n = 0; n < kKeys; ++n) {
        int i = (n + (p % 2) * kKeys / 2) % kKeys;  // four processes in step on each key: real collisions
        if (auto hit = cache.lookup(key_for(i)); hit && hit->cubin != entries[i].cubin) ++failures;
        if (!cache.store(key_for(i), entries[i]).ok()) ++failures;
        auto hit = cache.lookup(key_for(i));
        if (!hit || hit->cubin != entries[i].cubin || hit->ptx != entries[i].ptx) ++failures;
      }
      if (cache.session_stats().bad_entries != 0) ++failures;
      ::_exit(failures == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  std::vector<std::string> files = files_under(path("cache/kernels"));
  EXPECT_EQ(files.size(), static_cast<size_t>(kKeys));
  for (const auto& f : files) EXPECT_THAT(f, ::testing::EndsWith(".kbin"));  // no temporary file left
  KernelCache cache = open();
  for (int i = 0; i < kKeys; ++i) {
    auto hit = cache.lookup(key_for(i));
    ASSERT_TRUE(hit) << i;
    expect_same_payload(*hit, make_entry(i));
  }
  auto report = cache.verify();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked, kKeys);
  EXPECT_EQ(report->bad, 0);
  // Counters are approximate under races (docs/cache.md): never more than happened, rarely fewer.
  CacheStats s = cache.stats();
  EXPECT_LE(s.stores, kProcs * kKeys);
  EXPECT_GT(s.stores, 0);
  EXPECT_EQ(s.bad_entries, 0);
}

// A clear while other processes store: the directories it empties fill again under it (rmdir fails with
// ENOTEMPTY, "Directory not empty", 1 in 2,155 tries of an adversarial script). Those files are racing
// stores, not an error: every clear succeeds, and the cache stays usable and valid afterwards.
TEST_F(KernelCacheTest, ClearSucceedsWhileOtherProcessesStore) {
  constexpr int kProcs = 2, kKeys = 64;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto r = KernelCache::open(config());
      if (!r.ok()) ::_exit(10);
      KernelCache cache = std::move(r).value();
      for (int n = 0;; ++n) (void)cache.store(key_for((n + p * 7) % kKeys), make_entry(n % kKeys));  // until killed
    }
    children.push_back(pid);
  }
  KernelCache cache = open();
  int failures = 0;
  std::string first_failure;
  for (int i = 0; i < 400; ++i) {
    Status s = cache.clear();
    if (!s.ok() && failures++ == 0) first_failure = s.message();
  }
  for (pid_t pid : children) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  EXPECT_EQ(failures, 0) << first_failure;
  auto report = cache.verify();  // a store killed mid-write leaves at most a temporary file, never a bad entry
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->bad, 0);
  ASSERT_TRUE(cache.clear().ok());
  EXPECT_EQ(cache.stats().entries, 0);
}

// ---- configuration ---------------------------------------------------------------------------------------

TEST(CacheConfigTest, DirectoryDefaults) {
  CleanCacheEnv clean;
  ScopedEnv home("HOME", "/home/u");
  auto c = CacheConfig::from_env();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->dir, "/home/u/.cache/kiln");
  EXPECT_FALSE(c->disabled || c->read_only || c->assert_hit || c->save_source || c->fsync);
  EXPECT_EQ(c->max_size_bytes, int64_t{2} << 30);
  EXPECT_EQ(c->secondary_dir, "");
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(CacheConfig::from_env()->dir, "/xdg/kiln");
    ScopedEnv dir("KILN_CACHE_DIR", "/explicit");
    EXPECT_EQ(CacheConfig::from_env()->dir, "/explicit");
  }
  ScopedEnv no_home("HOME", nullptr);
  auto none = CacheConfig::from_env();
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("KILN_CACHE_DIR"));
}

TEST(CacheConfigTest, SwitchesAndSecondary) {
  CleanCacheEnv clean;
  ScopedEnv dir("KILN_CACHE_DIR", "/c");
  ScopedEnv a("KILN_CACHE_DISABLE", "1"), b("KILN_CACHE_READONLY", "true"), d("KILN_CACHE_ASSERT_HIT", "1"),
      e("KILN_SAVE_SOURCE", "yes"), f("KILN_CACHE_SECONDARY", "/shipped"), g("KILN_CACHE_FSYNC", "on");
  auto c = CacheConfig::from_env();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->disabled && c->read_only && c->assert_hit && c->save_source && c->fsync);
  EXPECT_EQ(c->secondary_dir, "/shipped");
  ScopedEnv off("KILN_CACHE_ASSERT_HIT", "0");
  EXPECT_FALSE(CacheConfig::from_env()->assert_hit);
  ScopedEnv bad("KILN_CACHE_ASSERT_HIT", "maybe");
  auto r = CacheConfig::from_env();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("KILN_CACHE_ASSERT_HIT='maybe'"));
}

TEST(CacheConfigTest, MaxSizeParsing) {
  const std::pair<const char*, int64_t> good[] = {
      {"500M", int64_t{500} << 20}, {"2G", int64_t{2} << 30},  {"1024K", int64_t{1} << 20}, {"12345", 12345},
      {"2GiB", int64_t{2} << 30},   {"1gb", int64_t{1} << 30}, {"7T", int64_t{7} << 40},    {"64B", 64}};
  for (auto [text, bytes] : good) {
    auto r = parse_cache_size(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().message();
    EXPECT_EQ(*r, bytes) << text;
  }
  for (const char* text : {"", "abc", "-1", "0", "5X", "1.5G", "M", "10 M", "99999999999T", "99999999999999999999"}) {
    auto r = parse_cache_size(text, "KILN_CACHE_MAX_SIZE");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_THAT(r.status().message(), HasSubstr("KILN_CACHE_MAX_SIZE='" + std::string(text) + "'"));
  }
  CleanCacheEnv clean;
  ScopedEnv dir("KILN_CACHE_DIR", "/c");
  ScopedEnv size("KILN_CACHE_MAX_SIZE", "300M");
  EXPECT_EQ(CacheConfig::from_env()->max_size_bytes, int64_t{300} << 20);
  ScopedEnv bad("KILN_CACHE_MAX_SIZE", "lots");
  auto r = CacheConfig::from_env();
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("KILN_CACHE_MAX_SIZE='lots'"));
}

}  // namespace
}  // namespace kiln
