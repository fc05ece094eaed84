// The kernel cache: keys, the entry format under corruption, read-only and secondary directories, LRU
// eviction, environment parsing, several processes storing at once, and `kiln cache`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/entry_format.h"
#include "kiln/cache.h"
#include "subprocess.h"
#include "temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Sets (or with nullptr unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_.c_str(), old_->c_str(), 1) : ::unsetenv(name_.c_str()); }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Every cache variable unset, so that the host's environment cannot leak into a test.
struct CleanCacheEnv {
  ScopedEnv vars[9] = {
      {"KILN_CACHE_DIR", nullptr},      {"KILN_CACHE_SECONDARY", nullptr},  {"KILN_CACHE_DISABLE", nullptr},
      {"KILN_CACHE_READONLY", nullptr}, {"KILN_CACHE_ASSERT_HIT", nullptr}, {"KILN_SAVE_SOURCE", nullptr},
      {"KILN_CACHE_MAX_SIZE", nullptr}, {"KILN_CACHE_FSYNC", nullptr},      {"XDG_CACHE_HOME", nullptr}};
};

CacheKey key_for(int i) {
  KeyManifest m;
  m.add("kernel", "k" + std::to_string(i));
  return m.key();
}

// An entry whose cubin holds every byte value (NULs, 0xff) and is large enough to span several reads.
CacheEntry make_entry(int i, size_t cubin_bytes = 70000) {
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

void expect_same_payload(const CacheEntry& got, const CacheEntry& want) {
  EXPECT_EQ(got.kernel_name, want.kernel_name);
  EXPECT_EQ(got.arch, want.arch);
  EXPECT_TRUE(got.cubin == want.cubin);
  EXPECT_EQ(got.ptx, want.ptx);
  EXPECT_EQ(got.info, want.info);
  EXPECT_EQ(got.manifest, want.manifest);
}

void set_mtime(const std::string& path, int64_t seconds_ago) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = ::time(nullptr) - seconds_ago;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0) << path;
}

int64_t mtime_of(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtime) : -1;
}

// Every path under `dir` with its size and mtime (nanoseconds): a write, delete or touch changes it.
std::map<std::string, std::pair<int64_t, int64_t>> snapshot(const std::string& dir) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st;
    ::lstat(e.path().c_str(), &st);
    out[e.path().string()] = {st.st_size, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}

std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().filename().string());
  }
  return out;
}

std::string read_bytes(const std::string& path) { return subprocess::slurp(path); }
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

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
    EXPECT_EQ(hit->path, path("cache") + "/kernels/" + key.hex().substr(0, 2) + "/" + key.hex() + ".kbin");
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
  for (const std::string& d :
       std::vector<std::string>{"a", "a/b", "a/b/cache", "a/b/cache/kernels", "a/b/cache/sources", "a/b/cache/stats",
                                "a/b/cache/kernels/" + key_for(1).hex().substr(0, 2)}) {
    struct stat st;
    ASSERT_EQ(::stat(path(d).c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
  struct stat st;
  ASSERT_EQ(::stat(cache.entry_path(key_for(1)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// One way of damaging an entry file; each must read as a miss, be removed and be replaceable.
struct Corruption {
  const char* name;
  void (*apply)(std::string& bytes, const std::string& other_entry);
};

void flip(std::string& b, size_t at) { b[at] = static_cast<char>(b[at] ^ 0x10); }

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
  EXPECT_FALSE(cache_format::decode(bytes, key, false, &why));
  EXPECT_EQ(why, "other format version");
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

TEST_F(KernelCacheTest, ListVerifyAndClear) {
  KernelCache cache = open();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.store(key_for(i), make_entry(i)).ok());
  set_mtime(cache.entry_path(key_for(0)), 600);
  std::string bytes = read_bytes(cache.entry_path(key_for(1)));
  flip(bytes, 60);
  write_bytes(cache.entry_path(key_for(1)), bytes);
  fs::create_directories(path("cache/kernels/00"));
  write_bytes(path("cache/kernels/00/not-a-key.kbin"), "x");

  auto list = cache.list();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);                   // bad files are left to verify
  EXPECT_EQ((*list)[0].kernel_name, "fused_2");  // most recently used first
  EXPECT_EQ((*list)[1].kernel_name, "fused_0");
  EXPECT_TRUE((*list)[0].cubin.empty());
  EXPECT_EQ((*list)[0].info, make_entry(2).info);

  auto report = cache.verify();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked, 4);
  EXPECT_EQ(report->bad, 2);
  EXPECT_EQ(report->removed, 2);
  std::vector<std::string> bad_paths = report->bad_paths;  // (kiln_tests links gtest without gmock's library)
  std::sort(bad_paths.begin(), bad_paths.end());
  std::vector<std::string> expected{cache.entry_path(key_for(1)), path("cache/kernels/00/not-a-key.kbin")};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(bad_paths, expected);
  EXPECT_EQ(cache.verify()->bad, 0);

  fs::create_directories(path("cache/emu"));
  write_bytes(path("cache/emu/keep"), "emu");
  ASSERT_TRUE(cache.save_source(key_for(0), "// src").ok());
  ASSERT_TRUE(cache.clear().ok());
  EXPECT_FALSE(cache.lookup(key_for(0)));
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_FALSE(fs::exists(cache.source_path(key_for(0))));
  EXPECT_TRUE(fs::exists(path("cache/emu/keep")));  // the emu backend's cache is not ours
  ASSERT_TRUE(cache.store(key_for(0), make_entry(0)).ok());
  EXPECT_TRUE(cache.lookup(key_for(0)));
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
  EXPECT_THAT(p.out, ::testing::ContainsRegex("key +kernel +arch +size +regs +spills +last use"));
  EXPECT_THAT(p.out, HasSubstr(key_for(0).hex().substr(0, 12) + "  fused_0  sm_90a"));
  EXPECT_THAT(p.out, HasSubstr("fused_2"));
  EXPECT_THAT(p.out, ::testing::Not(HasSubstr("fused_1")));  // the corrupted one
  EXPECT_THAT(p.out, HasSubstr("2 entries"));

  p = kiln({"cache", "verify"});
  EXPECT_EQ(p.code, 1) << p.out << p.err;
  EXPECT_THAT(p.out, HasSubstr("bad: " + fs::path(path("cache")).string() + "/kernels/"));
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

}  // namespace
}  // namespace kiln
