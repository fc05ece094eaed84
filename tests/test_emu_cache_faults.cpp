// The emu shared-object cache under faults (issue 18): damaged entries, entries of another host, planted
// shared objects, links and FIFOs in the cache. Expected everywhere: a wrong shared object is never
// loaded (nor its constructor run), nothing crashes or hangs, the run succeeds by compiling, and `kiln cache
// verify` names each bad file and why. I/O faults (no write permission, a full disk, a tiny size limit)
// are in test_emu_cache_faults_io.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "emu_fault_fixture.h"

namespace kiln::cache_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The offset of the shared object inside an emu entry (its ELF magic).
size_t so_offset(const std::string& entry_bytes) {
  size_t at = entry_bytes.find(
      "\x7f"
      "ELF");
  EXPECT_NE(at, std::string::npos);
  return at;
}

TEST_F(EmuFaultTest, EveryFlippedByteIsCaughtBeforeDlopen) {
  const std::string entry = first_entry();
  const std::string good = read_bytes(entry);
  const CacheKey key = key_of_entry(entry);
  // Every single byte of the file, flipped on its own: the checks before any dlopen refuse each one.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0x01);
    ASSERT_FALSE(cache_format::decode(b, key, CacheKind::emu)) << "a flip at byte " << i << " passed the checks";
  }
  // And through real runs, at places that matter: the header, the key, the metadata, the ELF header and
  // code of the shared object, the checksum. Each run rebuilds the entry and prints right results.
  const size_t so = so_offset(good);
  for (size_t at : {size_t{0}, size_t{9}, size_t{13}, size_t{17}, size_t{30}, size_t{45}, so + 4, so + 0x12,
                    so + (good.size() - so) / 2, good.size() - 17, good.size() - 1}) {
    SCOPED_TRACE(at);
    std::string b = good;
    flip(b, at);
    write_bytes(entry, b);
    EXPECT_TRUE(compiled_now(good_run()));
    EXPECT_TRUE(cache_format::decode(read_bytes(entry), key, CacheKind::emu)) << "not rebuilt";
  }
}

TEST_F(EmuFaultTest, TruncatedForeignAndAlienEntriesAreRebuilt) {
  const std::string entry = first_entry();
  const std::string good = read_bytes(entry);
  const CacheKey key = key_of_entry(entry);
  // Another valid emu entry: the same shared object under another key, as a copy between caches makes.
  CacheEntry other = decoded(entry);
  const std::string foreign = cache_format::encode(key_for(7), other, CacheKind::emu);
  const std::string so_only = good.substr(so_offset(good), other.cubin.size());
  struct Damage {
    const char* name;
    std::string bytes;
  };
  const std::vector<Damage> damages = {
      {"truncated to half (mapped, it was a SIGBUS)", good.substr(0, good.size() / 2)},
      {"truncated by one byte", good.substr(0, good.size() - 1)},
      {"empty", ""},
      {"another key's valid entry", foreign},
      {"a bare shared object at the entry's name", so_only},
      {"an nvrtc entry of the same key", cache_format::encode(key, make_entry(1), CacheKind::nvrtc)},
  };
  int64_t bad = 0;
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    write_bytes(entry, d.bytes);
    EXPECT_TRUE(compiled_now(good_run()));
    EXPECT_TRUE(cache_format::decode(read_bytes(entry), key, CacheKind::emu)) << "not rebuilt";
    ++bad;
  }
  KernelCache cache = open();
  EXPECT_EQ(cache.stats().of(CacheKind::emu).bad_entries, bad);
  EXPECT_FALSE(compiled_now(good_run()));  // and the rebuilt entry is used
}

TEST_F(EmuFaultTest, ReadOnlyCacheRunsPastABadEntryAndLeavesIt) {
  const std::string entry = first_entry();
  const std::string good = read_bytes(entry);
  write_bytes(entry, good.substr(0, good.size() / 2));
  const auto before = snapshot(path("cache"));
  ScopedEnv ro("KILN_CACHE_READONLY", "1");
  EXPECT_TRUE(compiled_now(good_run()));
  EXPECT_EQ(snapshot(path("cache")), before);
}

// A shared object built for another machine, in an intact entry under this host's key (a cache shared
// over NFS between hosts whose compilers print the same --version): dlopen refuses it, and it is rebuilt.
// The key names the host's architecture, so that two hosts' objects never share one key at all.
TEST_F(EmuFaultTest, AnotherHostsObjectIsRebuiltAndTheKeyNamesTheArch) {
  const std::string entry = first_entry();
  CacheEntry e = decoded(entry);
  const CacheKey key = key_of_entry(entry);
  ASSERT_GT(e.cubin.size(), 0x14u);
  e.cubin[0x12] = static_cast<uint8_t>(e.cubin[0x12] ^ 0x5a);  // ELF e_machine: another CPU
  write_bytes(entry, cache_format::encode(key, e, CacheKind::emu));
  EXPECT_TRUE(compiled_now(good_run()));
  const CacheEntry rebuilt = decoded(entry);
  ASSERT_EQ(rebuilt.cubin.size(), e.cubin.size());
  EXPECT_NE(rebuilt.cubin[0x12], e.cubin[0x12]) << "not rebuilt";
#if defined(__x86_64__)
  const std::string arch = "x86_64";
#else
  const std::string arch = "aarch64";
#endif
  EXPECT_THAT(rebuilt.manifest, HasSubstr("\nhost-arch=" + arch + "\n"));
  EXPECT_EQ(rebuilt.arch, arch);
}

// A shared object whose constructor leaves `marker` behind: what an attacker would plant.
std::string planted_object(const std::string& dir, const std::string& marker) {
  const std::string src = dir + "/planted.cpp", so = dir + "/planted.so";
  std::ofstream(src) << "#include <fcntl.h>\n#include <unistd.h>\n__attribute__((constructor)) static void planted() "
                        "{ int fd = open(\""
                     << marker << "\", O_CREAT | O_WRONLY, 0600); if (fd >= 0) close(fd); }\n";
  const std::string cmd = fmt::format("c++ -shared -fPIC -o '{}' '{}'", so, src);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return read_bytes(so);
}

// Any file at an entry's name used to be dlopen'ed. A bare shared object fails the entry checks; an intact
// entry holding one (anyone can compute a key and a checksum) is used only from directories no other user
// can write: not from one writable by a group (an old kiln made them so under umask 002), not from one
// another user owns.
TEST_F(EmuFaultTest, PlantedObjectsNeverRun) {
  const std::string entry = first_entry();
  const CacheKey key = key_of_entry(entry);
  const std::string marker = path("constructor-ran");
  const std::string so = planted_object(dir_, marker);
  CacheEntry planted = decoded(entry);
  planted.cubin.assign(so.begin(), so.end());
  const std::string shard = fs::path(entry).parent_path().string();

  write_bytes(entry, so);  // bare
  EXPECT_TRUE(compiled_now(good_run()));
  EXPECT_FALSE(fs::exists(marker));

  write_bytes(entry, cache_format::encode(key, planted, CacheKind::emu));
  ASSERT_EQ(::chmod(shard.c_str(), 0770), 0);  // group-writable
  subprocess::Proc p = good_run();
  EXPECT_FALSE(fs::exists(marker)) << "the planted object's constructor ran";
  EXPECT_TRUE(compiled_now(p));
  EXPECT_THAT(p.err, HasSubstr("warning: emu: tiny_relu.kernels.cu was compiled but not cached"));
  EXPECT_THAT(p.err, HasSubstr("'" + shard + "' is not private (writable by its group (mode 0770))"));
  p = cache_cmd("verify");
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.out, HasSubstr("bad: " + shard + ": is not private (writable by its group (mode 0770))"));
  EXPECT_THAT(p.out, HasSubstr("left in place"));

  ASSERT_EQ(::chmod(shard.c_str(), 0700), 0);
  if (::geteuid() == 0) {  // owned by another user: only root can make that
    ASSERT_EQ(::chown(shard.c_str(), kNobody, kNobody), 0);
    p = good_run();
    EXPECT_FALSE(fs::exists(marker)) << "the planted object's constructor ran";
    EXPECT_THAT(p.err, HasSubstr(fmt::format("'{}' is not private (owned by uid {}", shard, kNobody)));
    ASSERT_EQ(::chown(shard.c_str(), 0, 0), 0);
  }
  fs::remove(entry);
}

TEST_F(EmuFaultTest, LinksAreNeverFollowed) {
  const std::string entry = first_entry();
  const std::string good = read_bytes(entry);
  const std::string shard = fs::path(entry).parent_path().string();
  fs::create_directories(path("outside"));

  // The entry's name a link to a valid entry elsewhere: never read through (the run compiles), and the
  // link is replaced by a real entry; the file it pointed to is untouched.
  write_bytes(path("outside/elsewhere.kbin"), good);
  fs::remove(entry);
  fs::create_symlink(path("outside/elsewhere.kbin"), entry);
  EXPECT_TRUE(compiled_now(good_run()));
  EXPECT_FALSE(fs::is_symlink(entry));
  EXPECT_EQ(read_bytes(path("outside/elsewhere.kbin")), good);

  // The shard a link to a directory outside: nothing is read or written there; verify removes the link.
  fs::remove_all(shard);
  fs::create_directory_symlink(path("outside"), shard);
  const auto outside = snapshot(path("outside"));
  subprocess::Proc p = good_run();
  EXPECT_TRUE(compiled_now(p));
  EXPECT_EQ(snapshot(path("outside")), outside) << "written through a link";
  EXPECT_THAT(p.err, HasSubstr("'" + shard + "' is a symbolic link, not a directory"));
  p = cache_cmd("verify");
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.out, HasSubstr("bad: " + shard + ": a symbolic link, not a regular file (never followed)"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(shard)));
  EXPECT_EQ(snapshot(path("outside")), outside);
  good_run();
  EXPECT_EQ(emu_files().size(), 1u);

  // kernels/ itself a link: runs, verify and clear neither write nor remove anything outside.
  fs::create_directories(path("outside2/emu/ab"));
  write_bytes(path("outside2/emu/ab/precious"), "keep me");
  write_bytes(path("outside2/precious"), "keep me");
  const auto outside2 = snapshot(path("outside2"));
  auto plant = [&] {
    fs::remove_all(path("cache/kernels"));
    fs::create_directory_symlink(path("outside2"), path("cache/kernels"));
  };
  plant();
  p = cache_cmd("verify");
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.out, HasSubstr("bad: " + path("cache/kernels") + ": a symbolic link, not a regular file"));
  EXPECT_EQ(snapshot(path("outside2")), outside2) << "deleted through a link";
  EXPECT_FALSE(fs::exists(fs::symlink_status(path("cache/kernels"))));
  plant();
  good_run();
  EXPECT_EQ(snapshot(path("outside2")), outside2) << "written through a link";
  EXPECT_EQ(cache_cmd("clear").code, 0);
  EXPECT_EQ(snapshot(path("outside2")), outside2) << "cleared through a link";
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(path("cache/kernels"))));
}

TEST_F(EmuFaultTest, FifoAtAnEntryNameNeitherHangsNorHides) {
  const std::string entry = first_entry();
  make_fifo(entry);
  ChildOptions o;
  o.timeout = std::chrono::seconds(60);
  subprocess::Proc p = run("cache", o);
  ASSERT_NE(p.code, -1) << "the run hung on a FIFO";
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_TRUE(compiled_now(p));
  EXPECT_EQ(emu_files().size(), 1u) << "the FIFO was not replaced by an entry";

  make_fifo(entry);
  p = cache_cmd("verify");
  EXPECT_EQ(p.code, 1) << p.out;
  EXPECT_THAT(p.out, HasSubstr("bad: " + entry + ": a FIFO, not a regular file (never opened)"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(entry)));
}

TEST_F(EmuFaultTest, VerifyNamesEachBadFileAndWhy) {
  const std::string entry = first_entry();
  const std::string good = read_bytes(entry);
  const fs::path emu = path("cache/kernels/emu");
  auto at = [&](int i) {  // the entry path of key_for(i), its shard made
    const std::string hex = key_for(i).hex();
    fs::create_directories(emu / hex.substr(0, 2));
    return (emu / hex.substr(0, 2) / (hex + ".kbin")).string();
  };
  std::string flipped = good;
  flip(flipped, flipped.size() / 2);
  write_bytes(at(1), good.substr(0, 100));
  write_bytes(at(2), flipped.replace(24, 16, reinterpret_cast<const char*>(key_for(2).bytes.data()), 16));
  write_bytes(at(3), good);  // another key's entry
  make_fifo(at(4));
  fs::create_symlink(entry, at(5));
  write_bytes((emu / "stray.txt").string(), "x");
  auto p = cache_cmd("verify");
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(
      p.out, HasSubstr(at(1) + ": truncated: 100 bytes of the " + std::to_string(good.size()) + " the header gives\n"));
  EXPECT_THAT(p.out, HasSubstr(at(2) + ": checksum mismatch (corrupted)\n"));
  EXPECT_THAT(p.out, HasSubstr(at(3) + ": key mismatch: holds the entry of key " + key_of_entry(entry).hex()));
  EXPECT_THAT(p.out, HasSubstr(at(4) + ": a FIFO, not a regular file (never opened)\n"));
  EXPECT_THAT(p.out, HasSubstr(at(5) + ": a symbolic link, not a regular file (never followed)\n"));
  EXPECT_THAT(p.out, HasSubstr((emu / "stray.txt").string() + ": outside kernels/<kind>/<shard>/"));
  EXPECT_THAT(p.out, HasSubstr("checked 8 entries: 6 bad, 6 removed"));  // and the good emu and plan entries
  EXPECT_THAT(p.out, Not(HasSubstr("bad: " + entry + ":")));
  EXPECT_EQ(read_bytes(entry), good);  // what the link pointed to
  p = cache_cmd("verify");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_THAT(p.out, HasSubstr("checked 2 entries: 0 bad, 0 removed"));
}

}  // namespace
}  // namespace kiln::cache_test
