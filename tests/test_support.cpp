// src/support/: atomic whole-file writes under concurrency, file and directory modes, the one hash
// (known answers from the xxh128sum program), environment parsing, the cache root, the stopwatch and the
// f16/bf16 conversions. Real files in temporary directories, real threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "scoped_env.h"
#include "subprocess.h"
#include "support/atomic_file.h"
#include "support/cache_root.h"
#include "support/env.h"
#include "support/half_float.h"
#include "support/hash.h"
#include "support/lines.h"
#include "support/private_dir.h"
#include "support/stopwatch.h"
#include "temp_dir.h"

namespace kiln::support {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using kiln::testing::ScopedEnv;

unsigned mode_of(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

// ---- atomic writes ----------------------------------------------------------------------------------------

// Writer w's n-th content: a header naming it, then a body derived from it, of a length that varies
// (up to ~200 KiB, several write() calls), so that any torn or interleaved file fails to match.
std::string content(int w, int n) {
  const size_t len = 1000 + static_cast<size_t>((w * 7919 + n * 104729) % 200000);
  std::string s = "writer " + std::to_string(w) + " n " + std::to_string(n) + " len " + std::to_string(len) + "\n";
  while (s.size() < len) s.push_back(static_cast<char>('a' + (s.size() * 31 + static_cast<size_t>(w + n)) % 26));
  return s;
}

bool is_some_content(const std::string& s) {
  int w = 0, n = 0;
  size_t len = 0;
  return std::sscanf(s.c_str(), "writer %d n %d len %zu", &w, &n, &len) == 3 && s == content(w, n);
}

class AtomicWriteTest : public TempDirTest {};

TEST_F(AtomicWriteTest, ManyThreadsIntoOnePathNeverTearAndLeaveNoTemporaryFile) {
  constexpr int kWriters = 12, kWrites = 40;
  const std::string target = path("shared.bin");
  std::atomic<bool> done{false};
  std::atomic<int> failures{0}, reads{0};
  // A reader checks every version it sees while the writers race: always one writer's whole content.
  std::thread reader([&] {
    while (!done) {
      if (!fs::exists(target)) continue;
      if (!is_some_content(subprocess::slurp(target))) ++failures;
      ++reads;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int n = 0; n < kWrites; ++n) {
        if (!write_file_atomic(target, content(w, n), {.fsync = n % 10 == 0, .mode = 0600}).ok()) ++failures;
      }
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(failures, 0);
  EXPECT_GT(reads, 0);
  EXPECT_TRUE(is_some_content(subprocess::slurp(target)));
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"shared.bin"});  // no temporary file left behind
}

TEST_F(AtomicWriteTest, FileModes) {
  const mode_t old = ::umask(022);
  ASSERT_TRUE(write_file_atomic(path("private"), "x", {.mode = 0600}).ok());
  ASSERT_TRUE(write_file_atomic(path("public"), "y").ok());
  EXPECT_EQ(mode_of(path("private")), 0600u);
  EXPECT_EQ(mode_of(path("public")), 0644u);  // 0666 less the umask
  // Replacing a file gives it the new file's mode.
  ASSERT_TRUE(write_file_atomic(path("public"), "z", {.mode = 0600}).ok());
  EXPECT_EQ(mode_of(path("public")), 0600u);
  EXPECT_EQ(subprocess::slurp(path("public")), "z");
  ::umask(old);
}

TEST_F(AtomicWriteTest, FailureIsAnIoErrorAndLeavesNothing) {
  Status s = write_file_atomic(path("no/such/dir/f.txt"), "x");
  EXPECT_EQ(s.code(), StatusCode::io_error);
  EXPECT_THAT(s.message(), HasSubstr("cannot write '" + path("no/such/dir/f.txt") + "'"));
  // Renaming over a directory fails after the temporary was written: it must be removed again.
  fs::create_directories(path("d/inner"));
  s = write_file_atomic(path("d"), "x");
  EXPECT_EQ(s.code(), StatusCode::io_error);
  EXPECT_EQ(names_in(dir_), std::vector<std::string>{"d"});
}

// A FIFO or a device at the target was replaced by a regular file (`kiln import -o /dev/full` as root):
// refused, naming what is there, and it stays what it was.
TEST_F(AtomicWriteTest, NeverReplacesWhatIsNotARegularFile) {
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  Status s = write_file_atomic(path("pipe"), "x");
  EXPECT_EQ(s.code(), StatusCode::io_error);
  EXPECT_THAT(s.message(), HasSubstr("cannot write '" + path("pipe") + "': it is a FIFO, not a regular file"));
  EXPECT_TRUE(fs::is_fifo(path("pipe")));
  fs::create_symlink("/dev/null", path("null"));
  s = write_file_atomic(path("null"), "x");
  EXPECT_THAT(s.message(), HasSubstr("it is a character device, not a regular file"));
  EXPECT_TRUE(fs::is_symlink(path("null")));
  ASSERT_TRUE(write_file_atomic(path("plain"), "a").ok());  // regular files are replaced as ever
  ASSERT_TRUE(write_file_atomic(path("plain"), "b").ok());
}

TEST(TempNames, UniqueAcrossThreadsAndNamedAsTemporary) {
  constexpr int kThreads = 8, kEach = 500;
  std::vector<std::vector<std::string>> got(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) got[static_cast<size_t>(t)].push_back(unique_temp_suffix());
    });
  }
  for (auto& t : ts) t.join();
  std::set<std::string> all;
  for (const auto& v : got) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
  const std::string one = *all.begin();
  EXPECT_THAT(one, ::testing::StartsWith(".tmp." + std::to_string(::getpid()) + "."));
  EXPECT_TRUE(is_temp_name("abc.kbin" + one));
  EXPECT_FALSE(is_temp_name("abc.kbin"));
}

class PrivateDirTest : public TempDirTest {};

TEST_F(PrivateDirTest, DirectoriesAreMode0700AndScratchIsRemoved) {
  const mode_t old = ::umask(0);  // even with a permissive umask
  ASSERT_TRUE(make_private_dirs(path("a/b/c"), "test").ok());
  for (const char* d : {"a", "a/b", "a/b/c"}) EXPECT_EQ(mode_of(path(d)), 0700u) << d;
  ASSERT_TRUE(make_private_dirs(path("a/b/c"), "test").ok());  // existing: fine
  write("file", "x");
  Status s = make_private_dirs(path("file"), "test");
  EXPECT_EQ(s.code(), StatusCode::io_error);
  EXPECT_THAT(s.message(), HasSubstr("not a directory"));
  ::umask(old);

  ScopedEnv tmp("TMPDIR", dir_.c_str());
  std::string scratch_path;
  {
    auto scratch = ScratchDir::create("kiln-test-scratch-");
    ASSERT_TRUE(scratch.ok()) << scratch.status().message();
    scratch_path = scratch->path().string();
    EXPECT_THAT(scratch_path, ::testing::StartsWith(dir_ + "/kiln-test-scratch-"));
    EXPECT_EQ(mode_of(scratch_path), 0700u);
    ASSERT_TRUE(write_file_atomic(scratch->path() / "x", "data").ok());
  }
  EXPECT_FALSE(fs::exists(scratch_path));
}

// ---- the hash ---------------------------------------------------------------------------------------------

// Known answers computed once with the xxh128sum program (xxHash 0.8.1), e.g. `printf kiln | xxh128sum`.
TEST(HashTest, Xxh3_128KnownAnswers) {
  EXPECT_EQ(xxh3_128("").hex(), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(xxh3_128("kiln").hex(), "29e4f6aff37a6f975bfb178850627e51");
  EXPECT_EQ(xxh3_128("abc").hex(), "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(xxh3_128(std::string(100000, 'x')).hex(), "0fe996a84987456bd8b99a30e426ac41");  // several blocks
  const Hash128 h = xxh3_128("kiln");
  EXPECT_EQ(h.high64(), 0x29e4f6aff37a6f97ull);
  EXPECT_EQ(h.low64(), 0x5bfb178850627e51ull);
}

TEST(HashTest, StreamingEqualsOneShotAndFieldsAreFramed) {
  Hasher a;
  a.update("ki").update("").update("ln");
  EXPECT_EQ(a.digest(), xxh3_128("kiln"));
  EXPECT_EQ(a.digest(), xxh3_128("kiln"));  // digest does not end the stream
  a.update("!");
  EXPECT_EQ(a.digest(), xxh3_128("kiln!"));
  Hasher f1, f2, f3;
  f1.field("ab").field("c");
  f2.field("a").field("bc");
  f3.update("2:ab1:c");
  EXPECT_NE(f1.digest(), f2.digest());
  EXPECT_EQ(f1.digest(), f3.digest());  // the framing is "<length>:<bytes>"
  EXPECT_EQ(to_hex(reinterpret_cast<const uint8_t*>("\x01\xab"), 2), "01ab");
}

// ---- environment --------------------------------------------------------------------------------------------

TEST(EnvTest, Booleans) {
  for (const char* t : {"1", "true", "yes", "on", "TRUE", "True", "ON"}) EXPECT_TRUE(*parse_bool(t, "V")) << t;
  for (const char* f : {"0", "false", "no", "off", "FALSE", "Off"}) EXPECT_FALSE(*parse_bool(f, "V")) << f;
  for (const char* bad : {"2", "maybe", "y", " 1", "1 ", "tru"}) {
    auto r = parse_bool(bad, "KILN_X");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_THAT(r.status().message(), HasSubstr("KILN_X='" + std::string(bad) + "': expected 1 or 0"));
  }
  ScopedEnv unset("KILN_TEST_BOOL", nullptr);
  EXPECT_FALSE(*env_bool("KILN_TEST_BOOL"));
  EXPECT_TRUE(*env_bool("KILN_TEST_BOOL", true));
  ScopedEnv empty("KILN_TEST_BOOL", "");  // empty is unset
  EXPECT_TRUE(*env_bool("KILN_TEST_BOOL", true));
  ScopedEnv yes("KILN_TEST_BOOL", "yes");
  EXPECT_TRUE(*env_bool("KILN_TEST_BOOL"));
  ScopedEnv bad("KILN_TEST_BOOL", "sometimes");
  auto r = env_bool("KILN_TEST_BOOL");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("KILN_TEST_BOOL='sometimes'"));
}

TEST(EnvTest, Sizes) {
  const std::pair<const char*, int64_t> good[] = {{"500M", int64_t{500} << 20}, {"2G", int64_t{2} << 30},
                                                  {"1024K", int64_t{1} << 20},  {"12345", 12345},
                                                  {"2GiB", int64_t{2} << 30},   {"1kb", 1024},
                                                  {"7T", int64_t{7} << 40},     {"64B", 64}};
  for (auto [text, bytes] : good) {
    auto r = parse_size(text, "S");
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().message();
    EXPECT_EQ(*r, bytes) << text;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"lots", "not a size"},        {"", "not a size"},
      {"5X", "unknown unit"},        {"1.5G", "unknown unit"},
      {"0", "must be positive"},     {"-1", "must be positive"},
      {"99999999999T", "too large"}, {"99999999999999999999", "too large"}};
  for (auto [text, why] : bad) {
    auto r = parse_size(text, "KILN_CACHE_MAX_SIZE");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_THAT(r.status().message(), HasSubstr("KILN_CACHE_MAX_SIZE='" + std::string(text) + "': " + why));
  }
  EXPECT_THAT(parse_size("0", "S", "use X=1 instead").status().message(),
              HasSubstr("must be positive (use X=1 instead)"));
  ScopedEnv unset("KILN_TEST_SIZE", nullptr);
  EXPECT_EQ(*env_size("KILN_TEST_SIZE", 77), 77);
  ScopedEnv set("KILN_TEST_SIZE", "3K");
  EXPECT_EQ(*env_size("KILN_TEST_SIZE", 77), 3072);
}

TEST(EnvTest, PositiveIntegersAndStrings) {
  EXPECT_EQ(*parse_positive_int("42", "N"), 42);
  for (const char* bad : {"0", "-3", "4x", "", " 4", "1e3"}) {
    auto r = parse_positive_int(bad, "KILN_EMU_THREADS");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("KILN_EMU_THREADS='" + std::string(bad) + "': expected a positive"));
  }
  ScopedEnv n("KILN_TEST_N", "8");
  EXPECT_EQ(*env_positive_int("KILN_TEST_N", 1), 8);
  EXPECT_EQ(env_string("KILN_TEST_N"), "8");
  ScopedEnv e("KILN_TEST_EMPTY", "");
  EXPECT_EQ(env_string("KILN_TEST_EMPTY"), std::nullopt);
}

TEST(EnvTest, IntegersWithALowerBound) {
  EXPECT_EQ(*parse_int_at_least("0", "--warmup", 0), 0);
  EXPECT_EQ(*parse_int_at_least("12", "--warmup", 0), 12);
  for (const char* bad : {"-1", "-0", "x", "", "3 "}) {
    auto r = parse_int_at_least(bad, "--warmup", 0);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(),
                HasSubstr("--warmup='" + std::string(bad) + "': expected a non-negative integer"));
  }
  auto r = parse_int_at_least("3", "--tiles", 4);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("--tiles='3': expected an integer >= 4"));
}

TEST(LinesTest, EveryLineNamesItsSource) {
  // Lines that already name the source keep one name; empty lines go; no source leads nothing.
  EXPECT_EQ(lines_naming("node 'a': bad\n\ng.json: node 'b': worse\n", "g.json"),
            (std::vector<std::string>{"g.json: node 'a': bad", "g.json: node 'b': worse"}));
  EXPECT_EQ(lines_naming("one\ntwo", ""), (std::vector<std::string>{"one", "two"}));
  EXPECT_TRUE(lines_naming("", "g.json").empty());
  EXPECT_EQ(message_naming("x\ny", "m"), "m: x\nm: y");
  // A line that merely starts with the source's text (no ": ") is led all the same.
  EXPECT_EQ(message_naming("g.jsonl is missing", "g.json"), "g.json: g.jsonl is missing");
  const Status named = status_naming(invalid_argument("bad\nworse"), "g.json");
  EXPECT_EQ(named.code(), StatusCode::invalid_argument);
  EXPECT_EQ(named.message(), "g.json: bad\ng.json: worse");
}

TEST(CacheRootTest, KilnCacheDirThenXdgThenHome) {
  ScopedEnv dir("KILN_CACHE_DIR", nullptr), xdg("XDG_CACHE_HOME", nullptr), home("HOME", "/home/u");
  EXPECT_EQ(cache_root(), "/home/u/.cache/kiln");
  {
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(cache_root(), "/xdg/kiln");
    ScopedEnv d("KILN_CACHE_DIR", "/explicit");
    EXPECT_EQ(cache_root(), "/explicit");
    ScopedEnv empty("KILN_CACHE_DIR", "");
    EXPECT_EQ(cache_root(), "/xdg/kiln");
  }
  ScopedEnv no_home("HOME", nullptr);
  EXPECT_EQ(cache_root(), std::nullopt);
}

// ---- stopwatch, conversions ---------------------------------------------------------------------------------

TEST(StopwatchTest, MeasuresElapsedMilliseconds) {
  Stopwatch sw;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double ms = sw.ms();
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 20000.0);
  EXPECT_GE(ms_since(sw.start()), ms);
  sw.restart();
  EXPECT_LT(sw.ms(), ms);
}

TEST(HalfFloatTest, KnownValuesAndRoundTrips) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7C00);               // halfway to the next: ties to even = inf
  EXPECT_EQ(f32_to_f16_bits(1.0f + 1.0f / 2048), 0x3C00);     // tie, even stays
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3.0f / 2048), 0x3C02);     // tie, odd rounds up
  EXPECT_EQ(f32_to_f16_bits(5.960464477539063e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 1.0f / 256), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 3.0f / 256), 0x3F82);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  // Every non-NaN f16 and bf16 survives the trip through float bit for bit.
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<uint16_t>(b);
    if ((h & 0x7C00) != 0x7C00 || (h & 0x3FF) == 0) {
      EXPECT_EQ(f32_to_f16_bits(f16_bits_to_f32(h)), h) << b;
    }
    if ((h & 0x7F80) != 0x7F80 || (h & 0x7F) == 0) {
      EXPECT_EQ(f32_to_bf16_bits(bf16_bits_to_f32(h)), h) << b;
    }
  }
}

}  // namespace
}  // namespace kiln::support
