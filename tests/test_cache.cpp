// The kernel cache: keys, the entry format under corruption, read-only and secondary directories, LRU
// eviction. (Maintenance, kinds and configuration: test_cache_maintenance.cpp; `kiln cache` and the emu
// backend's entries: test_cache_cli.cpp.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cctype>
#include <filesystem>
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

// ---- keys ------------------------------------------------------------------------------------------------

TEST(CacheKeyTest, HexRoundTrip) {
  CacheKey k = key_for(7);
  std::string hex = k.hex();
  ASSERT_EQ(hex.size(), 32u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(CacheKey::parse(hex), k);
  std::string upper = hex;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(CacheKey::parse(upper), k);
  EXPECT_FALSE(CacheKey::parse(hex.substr(1)));
  EXPECT_FALSE(CacheKey::parse(hex + "0"));
  EXPECT_FALSE(CacheKey::parse("g" + hex.substr(1)));
  EXPECT_FALSE(CacheKey::parse(""));
}

TEST(CacheKeyTest, Xxh3IsTheSpecifiedHash) {
  // XXH3-128 of the empty input, as `xxh128sum` prints it: keys are stable across hosts and builds.
  EXPECT_EQ(xxh3_128("").hex(), "99aa06d3014798d86001c324468d497f");
}

TEST(CacheKeyTest, ManifestStartsWithTheKeyVersion) {
  KeyManifest m;
  EXPECT_EQ(m.text(), "kiln-cache-key=" + std::to_string(kCacheKeyVersion) + "\n");
  m.add("arch", "sm_90a");
  EXPECT_EQ(m.text(), "kiln-cache-key=" + std::to_string(kCacheKeyVersion) + "\narch=sm_90a\n");
  EXPECT_EQ(m.key(), xxh3_128(m.text()));
}

TEST(CacheKeyTest, EveryFieldChangesTheKey) {
  const std::vector<std::pair<std::string, std::string>> fields = {{"codegen", "3"},   {"templates", "xxh3:abc"},
                                                                   {"nvrtc", "13.0"},  {"arch", "sm_90"},
                                                                   {"options", "-O3"}, {"group", "add(0,1)"}};
  auto build = [&](int changed) {
    KeyManifest m;
    for (int i = 0; i < static_cast<int>(fields.size()); ++i) {
      m.add(fields[i].first, fields[i].second + (i == changed ? "x" : ""));
    }
    return m.key();
  };
  CacheKey base = build(-1);
  EXPECT_EQ(build(-1), base);  // deterministic
  for (int i = 0; i < static_cast<int>(fields.size()); ++i) EXPECT_NE(build(i), base) << fields[i].first;
  // sm_90 and sm_90a are different targets.
  KeyManifest a, b;
  a.add("arch", "sm_90");
  b.add("arch", "sm_90a");
  EXPECT_NE(a.key(), b.key());
}

TEST(CacheKeyTest, OrderOfAddIsPartOfTheKey) {
  KeyManifest ab, ba;
  ab.add("a", "1");
  ab.add("b", "2");
  ba.add("b", "2");
  ba.add("a", "1");
  EXPECT_NE(ab.key(), ba.key());
}

TEST(CacheKeyTest, ValuesCannotForgeLines) {
  KeyManifest one, two;
  one.add("a", "x\nb=y");
  two.add("a", "x");
  two.add("b", "y");
  EXPECT_NE(one.key(), two.key());
  EXPECT_THAT(one.text(), HasSubstr("a=x\\nb=y\n"));
  KeyManifest slash, newline;
  slash.add("a", "\\n");
  newline.add("a", "\n");
  EXPECT_NE(slash.key(), newline.key());
}

TEST(CacheKeyTest, AddHashedStoresTheHash) {
  KeyManifest m;
  m.add_hashed("source", std::string(100000, 'x'));
  EXPECT_THAT(m.text(), HasSubstr("source=xxh3:" + xxh3_128(std::string(100000, 'x')).hex() + "\n"));
  EXPECT_LT(m.text().size(), 100u);
}

TEST(CacheKeyDeathTest, DuplicateOrBadFieldIsAnInternalError) {
  EXPECT_DEATH(
      {
        KeyManifest m;
        m.add("a", "1");
        m.add("a", "2");
      },
      "added twice");
  EXPECT_DEATH(KeyManifest().add("a=b", "1"), "bad manifest field");
}

// ---- the cache -------------------------------------------------------------------------------------------

TEST_F(KernelCacheTest, HitAfterMissGivesBackTheSameBytes) {
  CacheKey key = key_for(1);
  CacheEntry e = make_entry(1);
  std::optional<CacheEntry> hit;
  {
    KernelCache cache = open();
    EXPECT_FALSE(cache.lookup(key));
    ASSERT_TRUE(cache.store(key, e).ok());
    hit = cache.lookup(key);
    ASSERT_TRUE(hit);
    expect_same_payload(*hit, e);
    EXPECT_EQ(hit->path, cache.entry_path(key));
    EXPECT_EQ(hit->path, path("cache") + "/kernels/nvrtc/" + key.hex().substr(0, 2) + "/" + key.hex() + ".kbin");
    EXPECT_EQ(hit->kind, CacheKind::nvrtc);
    EXPECT_EQ(hit->key, key);
    EXPECT_EQ(hit->file_bytes, static_cast<int64_t>(fs::file_size(hit->path)));
    EXPECT_NEAR(static_cast<double>(hit->mtime_s), static_cast<double>(::time(nullptr)), 5);
  }  // destroying the cache publishes its pending hit count

  // A new object (another process, in effect) sees the entry and the persisted counters.
  KernelCache again = open();
  ASSERT_TRUE(again.lookup(key));
  CacheStats s = again.stats();
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.bytes, hit->file_bytes);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.stores, 1);
  EXPECT_EQ(s.bad_entries, 0);
  EXPECT_EQ(again.session_stats().hits, 1);
}

TEST_F(KernelCacheTest, EmptyPayloadRoundTrips) {
  KernelCache cache = open();
  CacheEntry e;
  e.kernel_name = "k";
  ASSERT_TRUE(cache.store(key_for(0), e).ok());
  auto hit = cache.lookup(key_for(0));
  ASSERT_TRUE(hit);
  expect_same_payload(*hit, e);
}

TEST_F(KernelCacheTest, DirectoriesAreCreatedWithMode0700) {
  CacheConfig c = config();
  c.dir = path("a/b/cache");
  KernelCache cache = open(c);
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  ASSERT_TRUE(cache.save_source(key_for(1), "// source").ok());
  for (const std::string& d : std::vector<std::string>{
           "a", "a/b", "a/b/cache", "a/b/cache/kernels", "a/b/cache/sources", "a/b/cache/stats",
           "a/b/cache/kernels/nvrtc", "a/b/cache/kernels/nvrtc/" + key_for(1).hex().substr(0, 2)}) {
    struct stat st;
    ASSERT_EQ(::stat(path(d).c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
  struct stat st;
  ASSERT_EQ(::stat(cache.entry_path(key_for(1)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const std::string& f :
       {cache.source_path(key_for(1)), path("a/b/cache/stats/") + std::to_string(::getpid() % 16) + ".txt"}) {
    ASSERT_EQ(::stat(f.c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
}

// One way of damaging an entry file; each must read as a miss, be removed and be replaceable.
struct Corruption {
  const char* name;
  void (*apply)(std::string& bytes, const std::string& other_entry);
};

const Corruption kCorruptions[] = {
    {"truncated by one byte", [](std::string& b, const std::string&) { b.pop_back(); }},
    {"truncated to half", [](std::string& b, const std::string&) { b.resize(b.size() / 2); }},
    {"extended by one byte", [](std::string& b, const std::string&) { b.push_back('\0'); }},
    {"empty", [](std::string& b, const std::string&) { b.clear(); }},
    {"bit flipped in the magic", [](std::string& b, const std::string&) { flip(b, 2); }},
    {"bit flipped in the version", [](std::string& b, const std::string&) { flip(b, 8); }},
    {"bit flipped in the length", [](std::string& b, const std::string&) { flip(b, 17); }},
    {"bit flipped in the key", [](std::string& b, const std::string&) { flip(b, 30); }},
    {"bit flipped in the metadata", [](std::string& b, const std::string&) { flip(b, 50); }},
    {"bit flipped in the cubin", [](std::string& b, const std::string&) { flip(b, b.size() / 2); }},
    {"bit flipped in the ptx", [](std::string& b, const std::string&) { flip(b, b.size() - 20); }},
    {"bit flipped in the checksum", [](std::string& b, const std::string&) { flip(b, b.size() - 1); }},
    {"wrong magic", [](std::string& b, const std::string&) { b.replace(0, 8, std::string("CCACHE\0\0", 8)); }},
    {"foreign (another key's valid entry)", [](std::string& b, const std::string& other) { b = other; }},
    {"not an entry at all", [](std::string& b, const std::string&) { b = "hello\n"; }},
};

TEST_F(KernelCacheTest, EveryCorruptionIsAMissThatIsRemovedAndReplaced) {
  KernelCache cache = open();
  CacheKey key = key_for(1);
  ASSERT_TRUE(cache.store(key_for(2), make_entry(2)).ok());
  const std::string other = read_bytes(cache.entry_path(key_for(2)));
  int64_t bad = 0;
  for (const Corruption& c : kCorruptions) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(cache.store(key, make_entry(1)).ok());
    std::string bytes = read_bytes(cache.entry_path(key));
    c.apply(bytes, other);
    write_bytes(cache.entry_path(key), bytes);
    EXPECT_FALSE(cache.lookup(key));
    EXPECT_FALSE(fs::exists(cache.entry_path(key)));
    EXPECT_EQ(cache.stats().bad_entries, ++bad);
    ASSERT_TRUE(cache.store(key, make_entry(1)).ok());
    auto hit = cache.lookup(key);
    ASSERT_TRUE(hit);
    expect_same_payload(*hit, make_entry(1));
  }
  EXPECT_TRUE(cache.lookup(key_for(2)));  // the source of the foreign copy is untouched
}

TEST_F(KernelCacheTest, OtherFormatVersionIsAMiss) {
  // A well-formed file of another format version (checksum recomputed): only the version tells it apart.
  KernelCache cache = open();
  CacheKey key = key_for(1);
  std::string bytes = cache_format::encode(key, make_entry(1));
  bytes[8] = static_cast<char>(cache_format::kFormatVersion + 1);
  std::string body = bytes.substr(0, bytes.size() - 16);
  CacheKey sum = xxh3_128(body);
  bytes = body + std::string(reinterpret_cast<const char*>(sum.bytes.data()), 16);
  fs::create_directories(fs::path(cache.entry_path(key)).parent_path());
  write_bytes(cache.entry_path(key), bytes);
  std::string why;
  EXPECT_FALSE(cache_format::decode(bytes, key, CacheKind::nvrtc, false, &why));
  EXPECT_EQ(why, fmt::format("format version {} (this kiln reads version {})", cache_format::kFormatVersion + 1,
                             cache_format::kFormatVersion));
  EXPECT_FALSE(cache.lookup(key));
  EXPECT_FALSE(fs::exists(cache.entry_path(key)));
}

TEST_F(KernelCacheTest, ReadOnlyCacheNeverWrites) {
  {
    KernelCache writer = open();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer.store(key_for(i), make_entry(i)).ok());
    set_mtime(writer.entry_path(key_for(0)), 7200);  // old enough that a writable cache would touch it
    std::string bytes = read_bytes(writer.entry_path(key_for(2)));
    flip(bytes, bytes.size() / 2);
    write_bytes(writer.entry_path(key_for(2)), bytes);
  }
  // Mode 0555 stops writes for ordinary users; as root it does not, hence the snapshot comparison.
  for (const auto& e : fs::recursive_directory_iterator(path("cache"))) {
    if (e.is_directory()) ::chmod(e.path().c_str(), 0555);
  }
  ::chmod(path("cache").c_str(), 0555);
  auto before = snapshot(path("cache"));

  CacheConfig c = config();
  c.read_only = true;
  KernelCache cache = open(c);
  auto hit = cache.lookup(key_for(0));
  ASSERT_TRUE(hit);
  expect_same_payload(*hit, make_entry(0));
  EXPECT_TRUE(cache.lookup(key_for(1)));
  EXPECT_FALSE(cache.lookup(key_for(2)));  // bad: a miss, but left in place
  EXPECT_FALSE(cache.lookup(key_for(3)));
  EXPECT_TRUE(cache.store(key_for(3), make_entry(3)).ok());
  EXPECT_TRUE(cache.save_source(key_for(3), "// src").ok());
  EXPECT_FALSE(cache.prune(0).ok());
  EXPECT_FALSE(cache.clear().ok());
  auto report = cache.verify();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->bad, 1);
  EXPECT_EQ(report->removed, 0);
  EXPECT_EQ(cache.session_stats().hits, 2);
  EXPECT_EQ(cache.session_stats().bad_entries, 2);  // the lookup and verify
  EXPECT_EQ(snapshot(path("cache")), before);

  for (const auto& e : fs::recursive_directory_iterator(path("cache"))) ::chmod(e.path().c_str(), 0700);
  ::chmod(path("cache").c_str(), 0700);
}

TEST_F(KernelCacheTest, ReadOnlyOrDisabledCacheCreatesNoDirectory) {
  for (bool read_only : {true, false}) {
    CacheConfig c = config();
    c.read_only = read_only;
    c.disabled = !read_only;
    KernelCache cache = open(c);
    EXPECT_FALSE(cache.lookup(key_for(1)));
    EXPECT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
    EXPECT_FALSE(fs::exists(path("cache")));
  }
}

TEST_F(KernelCacheTest, DisabledCacheNeitherReadsNorWrites) {
  ASSERT_TRUE(open().store(key_for(1), make_entry(1)).ok());
  auto before = snapshot(path("cache"));
  CacheConfig c = config();
  c.disabled = true;
  KernelCache cache = open(c);
  EXPECT_FALSE(cache.lookup(key_for(1)));
  EXPECT_TRUE(cache.store(key_for(2), make_entry(2)).ok());
  EXPECT_EQ(cache.session_stats().misses, 0);
  EXPECT_EQ(snapshot(path("cache")), before);
}

TEST_F(KernelCacheTest, SecondaryDirectoryIsReadAfterThePrimary) {
  CacheConfig shipped = config();
  shipped.dir = path("shipped");
  {
    KernelCache s = open(shipped);
    ASSERT_TRUE(s.store(key_for(1), make_entry(1)).ok());
    ASSERT_TRUE(s.store(key_for(2), make_entry(2)).ok());
    std::string bytes = read_bytes(s.entry_path(key_for(2)));
    bytes.pop_back();
    write_bytes(s.entry_path(key_for(2)), bytes);
  }
  auto before = snapshot(path("shipped"));
  CacheConfig c = config();
  c.secondary_dir = path("shipped");
  KernelCache cache = open(c);
  auto hit = cache.lookup(key_for(1));
  ASSERT_TRUE(hit);
  expect_same_payload(*hit, make_entry(1));
  EXPECT_THAT(hit->path, HasSubstr("/shipped/"));
  EXPECT_FALSE(cache.lookup(key_for(2)));  // bad in the secondary: a miss, never removed there
  EXPECT_EQ(snapshot(path("shipped")), before);
  // The primary wins when both have the key.
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  EXPECT_EQ(cache.lookup(key_for(1))->path, cache.entry_path(key_for(1)));
}

TEST_F(KernelCacheTest, HitTouchesMtimeAtMostOnceAnHour) {
  KernelCache cache = open();
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  ASSERT_TRUE(cache.store(key_for(2), make_entry(2)).ok());
  std::string old_path = cache.entry_path(key_for(1)), recent_path = cache.entry_path(key_for(2));
  set_mtime(old_path, 7200);
  set_mtime(recent_path, 1800);
  int64_t recent = mtime_of(recent_path);
  ASSERT_TRUE(cache.lookup(key_for(1)));
  ASSERT_TRUE(cache.lookup(key_for(2)));
  EXPECT_NEAR(static_cast<double>(mtime_of(old_path)), static_cast<double>(::time(nullptr)), 5);
  EXPECT_EQ(mtime_of(recent_path), recent);
}

TEST_F(KernelCacheTest, SizeLimitEvictsLeastRecentlyUsed) {
  const int64_t entry_bytes = static_cast<int64_t>(cache_format::encode(key_for(0), make_entry(0)).size());
  CacheConfig c = config();
  c.max_size_bytes = entry_bytes * 7 / 2;  // room for 3.5 entries
  KernelCache cache = open(c);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.store(key_for(i), make_entry(i)).ok());
  // Last use: 1 oldest, then 0, then 2.
  set_mtime(cache.entry_path(key_for(1)), 3 * 86400);
  set_mtime(cache.entry_path(key_for(0)), 2 * 86400);
  set_mtime(cache.entry_path(key_for(2)), 1 * 86400);
  ASSERT_TRUE(cache.store(key_for(3), make_entry(3)).ok());  // 4 entries > 3.5: evict down to 90 %
  EXPECT_FALSE(fs::exists(cache.entry_path(key_for(1))));
  for (int i : {0, 2, 3}) EXPECT_TRUE(fs::exists(cache.entry_path(key_for(i)))) << i;
  CacheStats s = cache.stats();
  EXPECT_EQ(s.entries, 3);
  EXPECT_LE(s.bytes, c.max_size_bytes);
  EXPECT_EQ(s.evictions, 1);

  // prune: down to two entries removes the least recently used of the rest (0), then to zero everything.
  auto removed = cache.prune(entry_bytes * 2);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, entry_bytes);
  EXPECT_FALSE(fs::exists(cache.entry_path(key_for(0))));
  removed = cache.prune(0);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 2 * entry_bytes);
  EXPECT_EQ(cache.stats().entries, 0);
}

TEST_F(KernelCacheTest, StaleTemporaryFilesAreCleanedUp) {
  KernelCache cache = open();
  ASSERT_TRUE(cache.store(key_for(1), make_entry(1)).ok());
  std::string shard = fs::path(cache.entry_path(key_for(1))).parent_path().string();
  std::string stale = shard + "/" + key_for(1).hex() + ".kbin.tmp.99999.0abc";
  std::string fresh = shard + "/" + key_for(1).hex() + ".kbin.tmp.99998.0abc";
  write_bytes(stale, "partial");
  write_bytes(fresh, "partial");
  set_mtime(stale, 2 * 3600);
  EXPECT_EQ(cache.stats().entries, 1);  // temporary files are not entries
  ASSERT_TRUE(cache.prune(int64_t{1} << 40).ok());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));  // may belong to a process that is writing it right now
  EXPECT_TRUE(cache.lookup(key_for(1)));
}

}  // namespace
}  // namespace kiln
