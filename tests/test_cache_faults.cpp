// The kernel cache under faults (issue 18), for every kind through KernelCache itself and for NVRTC
// kernels through the kernel provider and `kiln prewarm`: links and FIFOs planted in the cache,
// directories another user could write, a cache directory without write permission, a full disk, a size
// limit smaller than one entry, counters at their limit, failed sources saved privately. The emu backend's
// own runs under the same faults are test_emu_cache_faults*.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cache_fault_util.h"
#include "cache_test_util.h"
#include "codegen/nvrtc.h"
#include "kiln/cache.h"
#include "kiln/json.h"
#include "kiln/plan.h"
#include "runtime/kernel_provider.h"

namespace kiln::cache_test {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

class CacheFaultTest : public KernelCacheTest {
 protected:
  CleanCacheEnv clean_;
};

TEST_F(CacheFaultTest, CountersSaturateInsteadOfOverflowing) {
  open();  // makes the directory, mode 0700
  ASSERT_EQ(::mkdir(path("cache/stats").c_str(), 0700), 0);
  const std::string mine = path("cache/stats/") + std::to_string(::getpid() % 16) + ".txt";
  const std::string other = path("cache/stats/") + std::to_string((::getpid() + 1) % 16) + ".txt";
  write_bytes(mine, "nvrtc.hits 9223372036854775807\nemu.misses 9223372036854775807\n");
  write_bytes(other, "nvrtc.hits 5\nemu.misses 9223372036854775807\nemu.hits 7\n");
  {
    KernelCache cache = open();
    ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
    EXPECT_TRUE(cache.lookup(key_for(1)));  // one more hit into a shard already at the limit
    CacheStats s = cache.stats();
    EXPECT_EQ(s.of(CacheKind::nvrtc).hits, kMax);
    EXPECT_EQ(s.of(CacheKind::emu).misses, kMax);
    EXPECT_EQ(s.hits, kMax);  // the totals too
    EXPECT_EQ(s.misses, kMax);
  }
  EXPECT_THAT(read_bytes(mine), HasSubstr("nvrtc.hits 9223372036854775807\n"));
  ScopedEnv dir("KILN_CACHE_DIR", path("cache").c_str());
  subprocess::Proc p = subprocess::run_process(KILN_CLI_PATH, {"cache", "stats"}, dir_);
  EXPECT_EQ(p.code, 0);
  EXPECT_THAT(p.out, HasSubstr("hits         9,223,372,036,854,775,807 (50.0 % of lookups)"));
  // No counter printed negative; the first line, the directory's random name, may hold "-9" itself.
  const std::string counters = p.out.substr(p.out.find('\n') + 1);
  EXPECT_THAT(counters, HasSubstr("9,223,372,036,854,775,807"));
  EXPECT_THAT(counters, ::testing::Not(HasSubstr("-9")));
}

TEST_F(CacheFaultTest, LinksAreNeverFollowed) {
  KernelCache cache = open();
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  const std::string entry = cache.entry_path(key_for(1));
  const std::string shard = fs::path(entry).parent_path().string();
  fs::create_directories(path("outside"));

  // The entry's name a link to a valid entry elsewhere: not read through; the link (only) is removed.
  fs::rename(entry, path("outside/entry.kbin"));
  fs::create_symlink(path("outside/entry.kbin"), entry);
  EXPECT_FALSE(cache.lookup(key_for(1)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(entry)));
  EXPECT_TRUE(fs::exists(path("outside/entry.kbin")));
  EXPECT_EQ(cache.session_stats().bad_entries, 1);

  // The shard a link to a directory holding a valid entry: not read, not written, not touched.
  fs::remove_all(shard);
  fs::create_directory_symlink(path("outside"), shard);
  fs::copy_file(path("outside/entry.kbin"), path("outside/" + key_for(1).hex() + ".kbin"));
  set_mtime(path("outside/" + key_for(1).hex() + ".kbin"), 7200);  // a hit would touch it
  const auto outside = snapshot(path("outside"));
  EXPECT_FALSE(cache.lookup(key_for(1)));
  Status s = cache.store(key_for(1), make_entry(1));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("'" + shard + "' is a symbolic link, not a directory"));
  EXPECT_THAT(cache.problem(), HasSubstr(shard));
  EXPECT_EQ(snapshot(path("outside")), outside);

  // verify reports the link and removes it, not what it points to; prune and clear the same.
  auto r = cache.verify();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->bad_files.size(), 1u);
  EXPECT_EQ(r->bad_files[0].path, shard);
  EXPECT_EQ(r->bad_files[0].reason, "a symbolic link, not a regular file (never followed)");
  EXPECT_FALSE(fs::exists(fs::symlink_status(shard)));
  EXPECT_EQ(snapshot(path("outside")), outside);
  for (int step = 0; step < 2; ++step) {
    fs::create_directory_symlink(path("outside"), shard);
    ASSERT_TRUE(step == 0 ? cache.prune(0).ok() : cache.clear().ok());
    EXPECT_EQ(snapshot(path("outside")), outside) << step;
  }
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  EXPECT_TRUE(cache.lookup(key_for(1)));
}

TEST_F(CacheFaultTest, FifoNeitherBlocksNorHides) {
  ChildOptions quick;
  quick.timeout = std::chrono::seconds(20);
  const int code = in_child(
      [&] {
        KernelCache cache = open();
        const std::string entry = cache.entry_path(key_for(1));
        if (!cache.store(key_for(1), make_entry(1)).ok()) return 1;
        fs::remove(entry);
        if (::mkfifo(entry.c_str(), 0600) != 0) return 2;
        if (cache.lookup(key_for(1))) return 3;  // a miss, at once; the FIFO is removed
        if (fs::exists(fs::symlink_status(entry))) return 4;
        if (::mkfifo(entry.c_str(), 0600) != 0) return 5;
        auto r = cache.verify();
        if (!r.ok() || r->bad_files.size() != 1 || r->bad_files[0].path != entry) return 6;
        if (r->bad_files[0].reason != "a FIFO, not a regular file (never opened)") return 7;
        return cache.list().ok() && cache.stats().entries == 0 ? 0 : 8;
      },
      quick);
  EXPECT_NE(code, -1) << "a lookup or verify hung on a FIFO";
  EXPECT_EQ(code, 0);
}

// Directories and entries another user could have written are never used: a valid-looking entry there
// may have been planted (the key and the checksum are no secret).
TEST_F(CacheFaultTest, UntrustedDirectoriesAndEntriesAreNeverUsed) {
  KernelCache cache = open();
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  const std::string entry = cache.entry_path(key_for(1));
  const std::string shard = fs::path(entry).parent_path().string();

  ASSERT_EQ(::chmod(shard.c_str(), 0775), 0);
  EXPECT_FALSE(cache.lookup(key_for(1)));
  EXPECT_TRUE(fs::exists(entry)) << "removed from a directory the cache does not use";
  Status s = cache.store(key_for(1), make_entry(1));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("'" + shard + "' is not private (writable by its group (mode 0775))"));
  auto r = cache.verify();
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->bad_files.size(), 1u);
  EXPECT_EQ(r->bad_files[0].path, shard);
  EXPECT_EQ(r->removed, 0);
  ASSERT_EQ(::chmod(shard.c_str(), 0700), 0);

  ASSERT_EQ(::chmod(entry.c_str(), 0666), 0);  // the entry itself writable by others: bad, removed
  EXPECT_FALSE(cache.lookup(key_for(1)));
  EXPECT_FALSE(fs::exists(entry));
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());

  ASSERT_EQ(::chmod(path("cache").c_str(), 0777), 0);  // the root itself
  EXPECT_FALSE(cache.lookup(key_for(1)));
  EXPECT_THAT(cache.store(key_for(2), make_entry(2)).message(), HasSubstr("writable by others (mode 0777)"));
  ASSERT_EQ(::chmod(path("cache").c_str(), 0700), 0);
  EXPECT_TRUE(cache.lookup(key_for(1)));

  // A secondary directory is its owner's to ship (any owner), but not one its group may write.
  fs::copy(path("cache"), path("shipped"), fs::copy_options::recursive);
  if (::geteuid() == 0) give_to_child(path("shipped"), path("shipped"));
  CacheConfig c = config();
  c.dir = path("empty");
  c.secondary_dir = path("shipped");
  c.read_only = true;
  KernelCache reader = open(c);
  EXPECT_TRUE(reader.lookup(key_for(1)));
  ASSERT_EQ(::chmod(path("shipped/kernels").c_str(), 0775), 0);
  EXPECT_FALSE(reader.lookup(key_for(1)));
  EXPECT_THAT(reader.problem(), HasSubstr("writable by its group"));
  EXPECT_THAT(reader.miss_error("fused_1", key_for(1)).message(), HasSubstr("writable by its group"));
}

TEST_F(CacheFaultTest, FullDiskStoreFailsCleanly) {
  ChildOptions limited;
  limited.file_size_limit = 64 << 10;
  const int code = in_child(
      [&] {
        KernelCache cache = open();
        if (!cache.store(key_for(1), make_entry(1, 1000)).ok()) return 1;  // small: fits
        Status s = cache.store(key_for(1), make_entry(1, 1 << 20));
        if (s.ok() || s.message().find("File too large") == std::string::npos) {
          return std::fprintf(stderr, "store: %s\n", s.message().c_str()), 2;
        }
        auto hit = cache.lookup(key_for(1));  // the old entry is still whole
        if (!hit || hit->cubin.size() != 1000) return 3;
        return files_under(path("cache/kernels")).size() == 1 ? 0 : 4;  // no temporary file left
      },
      limited);
  EXPECT_EQ(code, 0);
}

TEST_F(CacheFaultTest, MaxSizeSmallerThanOneEntry) {
  CacheConfig c = config();
  c.max_size_bytes = 1024;
  KernelCache cache = open(c);
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());  // stored, then evicted to stay under the limit
  EXPECT_FALSE(cache.lookup(key_for(1)));
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_TRUE(files_under(path("cache/kernels")).empty());
}

// ---- NVRTC kernels: the provider, kiln prewarm, failed sources --------------------------------------------

std::vector<codegen::Kernel> sample_kernels() {
  Result<Graph> g = load_graph(std::string(KILN_SOURCE_DIR) + "/samples/graphs/mlp_gelu.json");
  EXPECT_TRUE(g.ok());
  Result<Plan> plan = plan_graph(*g);
  EXPECT_TRUE(plan.ok());
  Result<std::vector<codegen::Kernel>> ks = plan_kernels(*plan);
  EXPECT_TRUE(ks.ok());
  return ks.ok() ? *ks : std::vector<codegen::Kernel>{};
}

class ProviderFaultTest : public CacheFaultTest {
 protected:
  subprocess::Proc prewarm(const ChildOptions& o = {}) {
    ScopedEnv dir("KILN_CACHE_DIR", path("cache").c_str());
    const std::string graph = std::string(KILN_SOURCE_DIR) + "/samples/graphs/mlp_gelu.json";
    return run_child(KILN_CLI_PATH, {"prewarm", graph, "--arch", "sm_80", "--jobs", "2"}, dir_, o);
  }
};

// Kernels compiled into a cache that cannot store them are used (a warning each), not counted as failed;
// only kiln prewarm, whose job is the storing, fails, and says why.
TEST_F(ProviderFaultTest, UnwritableCacheDirectory) {
  SKIP_WITHOUT_NVRTC();
  const std::vector<codegen::Kernel> kernels = sample_kernels();
  ASSERT_EQ(kernels.size(), 2u);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("cache").c_str(), 0700), 0);
  give_to_child(path("cache"), path("cache"));
  ASSERT_EQ(::chmod(path("cache").c_str(), 0500), 0);
  ChildOptions as_user;
  as_user.unprivileged = true;
  const int code = in_child(
      [&] {
        CacheConfig c = config();
        auto cache = KernelCache::open(c);
        if (!cache.ok()) return std::fprintf(stderr, "open: %s\n", cache.status().message().c_str()), 1;
        ObtainOptions oo;
        oo.jobs = 1;
        ObtainResult r = obtain_kernels(*cache, kernels, oo);
        for (const std::string& e : r.errors) std::fprintf(stderr, "error: %s\n", e.c_str());
        if (r.compiled != 2 || r.failed != 0 || r.warnings.size() != 2) return 2;
        if (r.warnings[0].find("compiled but not cached") == std::string::npos ||
            r.warnings[0].find("Permission denied") == std::string::npos) {
          return std::fprintf(stderr, "warning: %s\n", r.warnings[0].c_str()), 3;
        }
        return r.entries[0].cubin.empty() ? 4 : 0;
      },
      as_user);
  EXPECT_EQ(code, 0);
  subprocess::Proc p = prewarm(as_user);
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_THAT(p.err, HasSubstr("compiled, but not stored: kernel cache: cannot write"));
  EXPECT_THAT(p.err, HasSubstr("Permission denied"));
  EXPECT_TRUE(fs::is_empty(path("cache")));
}

TEST_F(ProviderFaultTest, PrewarmDoesNotHangOnAFifo) {
  SKIP_WITHOUT_NVRTC();
  subprocess::Proc p = prewarm();
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  std::vector<std::string> entries;
  for (const auto& e : fs::recursive_directory_iterator(path("cache/kernels/nvrtc")))
    if (e.is_regular_file()) entries.push_back(e.path().string());
  ASSERT_EQ(entries.size(), 2u);
  make_fifo(entries[0]);
  ChildOptions quick;
  quick.timeout = std::chrono::seconds(90);
  p = prewarm(quick);
  ASSERT_NE(p.code, -1) << "prewarm hung on a FIFO";
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_THAT(p.out, HasSubstr("1 already cached, 1 compiled, 0 failed"));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(entries[0])));
}

// The source of a kernel NVRTC refuses goes to a fresh private directory: a predictable name in a shared
// /tmp could be taken or linked first by another user, and the source is this user's to read.
TEST_F(ProviderFaultTest, FailedSourceIsSavedPrivately) {
  SKIP_WITHOUT_NVRTC();
  fs::create_directories(path("tmp"));
  ScopedEnv tmp("TMPDIR", path("tmp").c_str());
  auto r = codegen::nvrtc_compile("extern \"C\" __global__ void broken() { int x = ; }\n", {});
  ASSERT_FALSE(r.ok());
  std::smatch m;
  const std::string msg = r.status().message();
  ASSERT_TRUE(std::regex_search(msg, m, std::regex("source saved to (\\S+\\.cu)"))) << msg;
  const fs::path saved = m[1].str();
  EXPECT_EQ(saved.parent_path().parent_path(), fs::path(path("tmp")));
  EXPECT_THAT(saved.parent_path().filename().string(), ::testing::MatchesRegex("kiln-failed-......"));
  struct stat st;
  ASSERT_EQ(::stat(saved.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const fs::path& f : {saved, fs::path(saved).replace_extension(".log")}) {
    ASSERT_EQ(::stat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
}

}  // namespace
}  // namespace kiln::cache_test
