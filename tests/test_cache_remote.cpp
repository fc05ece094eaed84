// The kernel cache's shared tier on real redis-servers (src/cache/remote.cpp, docs/cache.md "A cache shared
// through Redis"): two cache directories sharing one server, and the faults a fleet meets: a server killed
// mid-prewarm, a corrupted or truncated value, a wrong password, maxmemory eviction and refusal, a server
// that is down, silent or not Redis at all. Each server is started by the test on a free loopback port.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "cache/remote.h"
#include "cache_test_util.h"
#include "codegen/nvrtc.h"
#include "redis_server.h"

namespace kiln::cache_test {
namespace {

using ::testing::HasSubstr;
using testing::RedisServer;

class RemoteCacheTest : public KernelCacheTest {
 protected:
  void SetUp() override {
    KernelCacheTest::SetUp();
    if (!cache_remote::available()) GTEST_SKIP() << "built without hiredis";
  }
  // A cache in directory `name` reading through the server at `url`.
  CacheConfig remote_config(const std::string& name, const std::string& url, const std::string& password = {},
                            int timeout_ms = 2000) const {
    CacheConfig c;
    c.dir = path(name);
    c.remote = url;
    c.remote_password = password;
    c.remote_timeout_ms = timeout_ms;
    return c;
  }
  using KernelCacheTest::open;
  KernelCache open(const std::string& name, const std::string& url, const std::string& password = {},
                   int timeout_ms = 2000) {
    return open(remote_config(name, url, password, timeout_ms));
  }
  // Writes `value` under entry i's remote key, as a server-side corruption would leave it.
  static void put_raw(const RedisServer& server, int i, const std::string& value) {
    cache_remote::Remote r(*cache_remote::parse_url(server.url()), "", 2000);
    ASSERT_TRUE(r.set(cache_remote::remote_key(key_for(i), CacheKind::nvrtc), value)) << r.problem();
  }
  static std::string get_raw(const RedisServer& server, int i) {
    cache_remote::Remote r(*cache_remote::parse_url(server.url()), "", 2000);
    std::string v;
    EXPECT_EQ(r.get(cache_remote::remote_key(key_for(i), CacheKind::nvrtc), v), cache_remote::Remote::Got::hit);
    return v;
  }
  CleanCacheEnv clean_;
};

TEST(RemoteCacheUrl, WhatParsesAndWhatIsRefused) {
  auto u = cache_remote::parse_url("redis://cache.lan:6380/3");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "cache.lan");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 3);
  u = cache_remote::parse_url("redis://10.0.0.7");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->text(), "redis://10.0.0.7:6379/0");
  u = cache_remote::parse_url("redis://[::1]:6380/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->text(), "redis://[::1]:6380/0");
  u = cache_remote::parse_url("redis://[fe80::1]");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 6379);
  struct Bad {
    const char* url;
    const char* why;
  };
  for (const Bad& b :
       {Bad{"http://cache.lan", "not a redis:// URL"}, Bad{"redis://", "no host"}, Bad{"redis://:6379", "no host"},
        Bad{"redis://h:0", "port '0'"}, Bad{"redis://h:70000", "port"}, Bad{"redis://h:x1", "port 'x1'"},
        Bad{"redis://h/-1", "database '-1'"}, Bad{"redis://:Tr0ub4dor@h:6379", "KILN_CACHE_REMOTE_PASSWORD"},
        Bad{"redis://user:Tr0ub4dor@h", "KILN_CACHE_REMOTE_PASSWORD"},
        Bad{"redis://h?password=Tr0ub4dor", "query or fragment"}, Bad{"redis://::1", "in brackets"},
        Bad{"redis://[::1", "closing ']'"}, Bad{"redis://[::1]x", "after the IPv6 address"},
        Bad{"redis://h:", "port ''"}}) {
    auto r = cache_remote::parse_url(b.url);
    ASSERT_FALSE(r.ok()) << b.url;
    EXPECT_THAT(r.status().message(), HasSubstr("KILN_CACHE_REMOTE")) << b.url;
    EXPECT_THAT(r.status().message(), HasSubstr(b.why)) << b.url;
    EXPECT_THAT(r.status().message(), HasSubstr("expected redis://HOST[:PORT][/DB]")) << b.url;
    EXPECT_THAT(r.status().message(), ::testing::Not(HasSubstr("Tr0ub4dor"))) << "a password is never printed";
  }
}

TEST_F(RemoteCacheTest, SettingsFromTheEnvironment) {
  ScopedEnv dir("KILN_CACHE_DIR", path("cache").c_str());
  ScopedEnv url("KILN_CACHE_REMOTE", "redis://127.0.0.1:6390/1");
  write("pw", "s3cret\n");
  {
    ScopedEnv file("KILN_CACHE_REMOTE_PASSWORD_FILE", path("pw").c_str());
    ScopedEnv timeout("KILN_CACHE_REMOTE_TIMEOUT_MS", "250");
    auto c = CacheConfig::from_env();
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->remote, "redis://127.0.0.1:6390/1");
    EXPECT_EQ(c->remote_password, "s3cret");  // the newline `echo` leaves is not part of it
    EXPECT_EQ(c->remote_timeout_ms, 250);
  }
  auto refused = [](const char* var, const char* value, const char* why) {
    ScopedEnv e(var, value);
    auto c = CacheConfig::from_env();
    ASSERT_FALSE(c.ok()) << var << "=" << value;
    EXPECT_THAT(c.status().message(), HasSubstr(why));
  };
  refused("KILN_CACHE_REMOTE", "redis://:pw@h", "KILN_CACHE_REMOTE_PASSWORD");
  refused("KILN_CACHE_REMOTE_TIMEOUT_MS", "0", "KILN_CACHE_REMOTE_TIMEOUT_MS");
  refused("KILN_CACHE_REMOTE_TIMEOUT_MS", "60001", "at most 60000");
  refused("KILN_CACHE_REMOTE_PASSWORD_FILE", path("absent").c_str(), "cannot be read");
  refused("KILN_CACHE_REMOTE_PASSWORD_FILE", dir_.c_str(), "cannot be read");  // a directory
  write("empty", "");
  {
    ScopedEnv file("KILN_CACHE_REMOTE_PASSWORD_FILE", path("empty").c_str());
    auto c = CacheConfig::from_env();
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->remote_password, "");
  }
  {
    ScopedEnv pw("KILN_CACHE_REMOTE_PASSWORD", "a");
    refused("KILN_CACHE_REMOTE_PASSWORD_FILE", path("pw").c_str(), "both set");
  }
}

// What one machine compiled, another reads: the second directory's lookups are remote hits, checked like
// files, and written to its own directory so that the next lookup is local.
TEST_F(RemoteCacheTest, TwoDirectoriesShareOneServer) {
  RedisServer server(path("redis"));
  ASSERT_TRUE(server.ok());
  KernelCache a = open("a", server.url());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.store(key_for(i), make_entry(i)).ok());
  EXPECT_EQ(a.session_stats().remote_errors, 0);

  KernelCache b = open("b", server.url());
  for (int i = 0; i < 3; ++i) {
    auto e = b.lookup(key_for(i));
    ASSERT_TRUE(e) << i;
    expect_same_payload(*e, make_entry(i));
    EXPECT_EQ(e->path, b.entry_path(key_for(i))) << "a remote hit is kept locally";
  }
  EXPECT_FALSE(b.lookup(key_for(7)));
  CacheStats s = b.session_stats();
  EXPECT_EQ(s.remote_hits, 3);
  EXPECT_EQ(s.remote_misses, 1);
  EXPECT_EQ(s.remote_errors, 0);
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.misses, 1);
  ASSERT_TRUE(b.lookup(key_for(1)));  // now from b's own directory
  EXPECT_EQ(b.session_stats().remote_hits, 3);
  EXPECT_EQ(b.stats().remote_hits, 3) << "persisted with the other counters";
  EXPECT_TRUE(b.problem().empty()) << b.problem();

  // Another database of the same server is another cache.
  KernelCache c = open("c", server.url(5));
  EXPECT_FALSE(c.lookup(key_for(0)));
  EXPECT_EQ(c.session_stats().remote_misses, 1);
}

TEST_F(RemoteCacheTest, CorruptedOrTruncatedValuesAreNeverUsed) {
  RedisServer server(path("redis"));
  ASSERT_TRUE(server.ok());
  KernelCache a = open("a", server.url());
  ASSERT_TRUE(a.store(key_for(1), make_entry(1)).ok());
  ASSERT_TRUE(a.store(key_for(2), make_entry(2)).ok());
  const std::string good = get_raw(server, 1);
  ASSERT_GT(good.size(), 1000u);

  std::string flipped = good;
  flip(flipped, good.size() / 2);
  const std::string other_key = get_raw(server, 2);  // a whole, valid entry, but of another key
  int n = 0;
  for (const std::string& bad :
       {flipped, good.substr(0, good.size() - 1), good.substr(0, 10), std::string("junk"), std::string(), other_key}) {
    put_raw(server, 1, bad);
    KernelCache b = open("b" + std::to_string(n++), server.url());
    EXPECT_FALSE(b.lookup(key_for(1))) << "value of " << bad.size() << " bytes";
    EXPECT_EQ(b.session_stats().remote_errors, 1);
    EXPECT_EQ(b.session_stats().remote_hits, 0);
    EXPECT_TRUE(files_under(path("b" + std::to_string(n - 1) + "/kernels")).empty()) << "nothing kept";
  }
  // The next store (after a compile) overwrites the bad value.
  ASSERT_TRUE(a.store(key_for(1), make_entry(1)).ok());
  KernelCache c = open("c", server.url());
  auto e = c.lookup(key_for(1));
  ASSERT_TRUE(e);
  expect_same_payload(*e, make_entry(1));
}

TEST_F(RemoteCacheTest, AWrongPasswordLeavesTheLocalCacheWorking) {
  RedisServer server(path("redis"), {"--requirepass", "right horse battery"});
  ASSERT_TRUE(server.ok());
  {
    KernelCache good = open("good", server.url(), "right horse battery");
    ASSERT_TRUE(good.store(key_for(1), make_entry(1)).ok());
    EXPECT_EQ(good.session_stats().remote_errors, 0) << good.problem();
  }
  for (const char* password : {"Tr0ub4dor-wrong", ""}) {
    KernelCache c = open(std::string("c") + password, server.url(), password);
    EXPECT_FALSE(c.lookup(key_for(1))) << password;
    EXPECT_EQ(c.session_stats().remote_errors, 1);
    EXPECT_THAT(c.problem(), HasSubstr(server.url()));
    EXPECT_THAT(c.problem(), HasSubstr(*password ? "AUTH refused" : "NOAUTH"));
    EXPECT_THAT(c.problem(), HasSubstr("going on with the local cache alone"));
    EXPECT_THAT(c.problem(), ::testing::Not(HasSubstr("Tr0ub4dor"))) << "the password is never printed";
    // Given up: nothing more is sent, and the local cache works.
    ASSERT_TRUE(c.store(key_for(2), make_entry(2)).ok());
    EXPECT_TRUE(c.lookup(key_for(2)));
    EXPECT_FALSE(c.lookup(key_for(3)));
    EXPECT_EQ(c.session_stats().remote_errors, 1);
  }
  KernelCache again = open("again", server.url(), "right horse battery");
  EXPECT_TRUE(again.lookup(key_for(1)));
  EXPECT_FALSE(again.lookup(key_for(2))) << "the refused cache stored nothing remotely";
}

// A loopback listener that is no Redis server: it answers `reply` to whatever comes (a server that speaks
// another protocol), never answers (a hung server), or closes each connection as soon as it is made (a
// server that dies, or drops a connection, before a command is through).
class FakeServer {
 public:
  enum class Mode { reply, silent, close };
  explicit FakeServer(Mode mode, std::string reply = {}) : mode_(mode), reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) ::close(c);
          return;
        }
        if (mode_ == Mode::close) {  // at once: the client's first write gets a reset, its next one EPIPE
          ::close(c);
          continue;
        }
        char buf[512];
        const bool got = ::read(c, buf, sizeof buf) > 0;
        if (got && mode_ == Mode::reply) (void)!::write(c, reply_.data(), reply_.size());
        held_.push_back(c);  // closed at the end: a silent server keeps its connections open
      }
    });
  }
  ~FakeServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    testing::loopback_exchange(port_, "x");  // wakes accept() up
    thread_.join();
    for (int c : held_) ::close(c);
    ::close(fd_);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  Mode mode_;
  std::string reply_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> held_;
  std::thread thread_;
};

TEST_F(RemoteCacheTest, AServerThatIsDownSilentOrNotRedisIsAMissAndOneWarning) {
  FakeServer http(FakeServer::Mode::reply, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  FakeServer silent(FakeServer::Mode::silent);
  const std::string down = "redis://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  struct Case {
    std::string name, url, why;
  };
  for (const Case& k : {Case{"down", down, "cannot connect"}, Case{"http", http.url(), "GET failed"},
                        Case{"silent", silent.url(), "GET failed"}}) {
    KernelCache c = open(k.name, k.url, "", /*timeout_ms=*/300);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(c.lookup(key_for(1))) << k.name;
    for (int i = 2; i < 6; ++i) EXPECT_FALSE(c.lookup(key_for(i)));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 10.0) << k.name << ": bounded by the timeout, and tried once";
    EXPECT_EQ(c.session_stats().remote_errors, 1) << k.name;
    EXPECT_EQ(c.session_stats().misses, 5) << k.name;
    EXPECT_THAT(c.problem(), HasSubstr(k.why)) << k.name;
    ASSERT_TRUE(c.store(key_for(1), make_entry(1)).ok()) << k.name;
    EXPECT_TRUE(c.lookup(key_for(1))) << k.name;
  }
}

// A server that dies in the middle of a large SET: hiredis's write() would raise SIGPIPE, which kills a
// process that does not ignore it (kiln_tests does not). The store succeeds locally and the remote is given up.
TEST_F(RemoteCacheTest, AServerDyingMidCommandIsNoSigpipe) {
  FakeServer dying(FakeServer::Mode::close);
  KernelCache c = open("c", dying.url());
  ASSERT_TRUE(c.store(key_for(1), make_entry(1, 8 << 20)).ok());  // 8 MB: more than the socket buffers hold
  EXPECT_EQ(c.session_stats().remote_errors, 1);
  EXPECT_THAT(c.problem(), HasSubstr("SET failed"));
  EXPECT_TRUE(c.lookup(key_for(1)));
}

// A connection the server dropped (its idle timeout, a restart, CLIENT KILL) is opened again once, not
// taken for a remote that is down.
TEST_F(RemoteCacheTest, ADroppedConnectionIsReopened) {
  RedisServer server(path("redis"));
  ASSERT_TRUE(server.ok());
  KernelCache a = open("a", server.url());
  ASSERT_TRUE(a.store(key_for(1), make_entry(1)).ok());
  for (int round = 2; round < 5; ++round) {
    ASSERT_THAT(testing::loopback_exchange(server.port(), "CLIENT KILL TYPE normal\r\n"), HasSubstr(":1"))
        << "a's connection was killed";
    ASSERT_TRUE(a.store(key_for(round), make_entry(round)).ok());
  }
  EXPECT_EQ(a.session_stats().remote_errors, 0) << a.problem();
  EXPECT_TRUE(a.problem().empty()) << a.problem();
  KernelCache b = open("b", server.url());
  for (int i = 1; i < 5; ++i) EXPECT_TRUE(b.lookup(key_for(i))) << i;
}

// What a remote hit keeps locally counts against the directory's size limit like a store.
TEST_F(RemoteCacheTest, RemoteHitsKeptLocallyRespectTheSizeLimit) {
  RedisServer server(path("redis"));
  ASSERT_TRUE(server.ok());
  KernelCache a = open("a", server.url());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(a.store(key_for(i), make_entry(i, 100000)).ok());
  CacheConfig c = remote_config("small", server.url());
  c.max_size_bytes = 350000;  // room for three entries of ~100 KB
  KernelCache small = open(c);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(small.lookup(key_for(i))) << i;
  EXPECT_EQ(small.session_stats().remote_hits, 8);
  EXPECT_GT(small.session_stats().evictions, 0);
  int64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(path("small/kernels")))
    if (e.is_regular_file()) bytes += static_cast<int64_t>(e.file_size());
  EXPECT_LE(bytes, c.max_size_bytes);
}

TEST_F(RemoteCacheTest, MaxmemoryEvictsOrRefusesWithoutBreakingAnything) {
  {  // allkeys-lru: the server drops what it has no room for; those lookups are misses, not errors
    RedisServer server(path("lru"), {"--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"});
    ASSERT_TRUE(server.ok());
    KernelCache a = open("a", server.url());
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(a.store(key_for(i), make_entry(i, 100000)).ok());
    EXPECT_EQ(a.session_stats().remote_errors, 0) << a.problem();
    KernelCache b = open("b", server.url());
    int found = 0;
    for (int i = 0; i < 40; ++i) {
      if (auto e = b.lookup(key_for(i))) {
        expect_same_payload(*e, make_entry(i, 100000));
        ++found;
      }
    }
    const CacheStats s = b.session_stats();
    EXPECT_GT(s.remote_misses, 0) << "2 MB hold fewer than 40 entries of 100 KB";
    EXPECT_GT(found, 0);
    EXPECT_EQ(s.remote_hits, found);
    EXPECT_EQ(s.remote_errors, 0);
  }
  {  // noeviction: the server refuses stores; counted, and the remote stays in use
    RedisServer server(path("noev"), {"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"});
    ASSERT_TRUE(server.ok());
    KernelCache a = open("a2", server.url());
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(a.store(key_for(i), make_entry(i, 100000)).ok());
    EXPECT_GT(a.session_stats().remote_errors, 0);
    EXPECT_TRUE(a.problem().empty()) << "a refused store does not give the remote up: " << a.problem();
    KernelCache b = open("b2", server.url());
    EXPECT_TRUE(b.lookup(key_for(0))) << "the first stores fit";
    EXPECT_EQ(b.session_stats().remote_hits, 1);
  }
}

class RemotePrewarmTest : public RemoteCacheTest {
 protected:
  subprocess::Proc prewarm(const std::string& cache, const std::string& url, const std::string& graph = "mlp_gelu",
                           int jobs = 2) {
    ScopedEnv dir("KILN_CACHE_DIR", path(cache).c_str());
    ScopedEnv remote("KILN_CACHE_REMOTE", url.c_str());
    const std::string file = std::string(KILN_SOURCE_DIR) + "/samples/graphs/" + graph + ".json";
    return subprocess::run_process(KILN_CLI_PATH, {"prewarm", file, "--arch", "sm_80", "--jobs", std::to_string(jobs)},
                                   dir_);
  }
};

// The fleet's case: the second machine's prewarm finds every kernel on the server and compiles nothing
// (NVRTC is not even loaded).
TEST_F(RemotePrewarmTest, TheSecondDirectoryCompilesNothing) {
  SKIP_WITHOUT_NVRTC();
  RedisServer server(path("redis"));
  ASSERT_TRUE(server.ok());
  subprocess::Proc first = prewarm("one", server.url());
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr(" 0 already cached"));
  subprocess::Proc second = prewarm("two", server.url());
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_THAT(second.out, HasSubstr(" 0 compiled, 0 failed"));
  EXPECT_THAT(second.out, HasSubstr("nvrtc: not loaded"));
  EXPECT_EQ(files_under(path("one/kernels")).size(), files_under(path("two/kernels")).size());
}

// Killed while a prewarm stores into it: the prewarm still compiles and keeps every kernel locally and
// exits 0, whenever the kill lands. Killed before it connects, and killed as soon as the first of six
// entries (the plan, then five kernels compiled one at a time) has reached it: the stores after that fail,
// which is one warning.
TEST_F(RemotePrewarmTest, TheServerKilledMidPrewarm) {
  SKIP_WITHOUT_NVRTC();
  const std::string graph = "resnet50_bottleneck";
  subprocess::Proc reference = prewarm("reference", "redis://127.0.0.1:1", graph, 1);  // nothing on port 1
  ASSERT_EQ(reference.code, 0) << reference.err;
  EXPECT_THAT(reference.err, HasSubstr("cannot connect"));
  const size_t kernels = files_under(path("reference/kernels")).size();
  ASSERT_EQ(kernels, 6u);  // five kernels and the graph's plan (stored first)
  for (const bool after_first_store : {false, true}) {
    const std::string name = after_first_store ? "after_first_store" : "at_once";
    RedisServer server(path("redis-" + name));
    ASSERT_TRUE(server.ok());
    int stored_at_kill = 0;
    std::thread killer([&] {
      for (int i = 0; after_first_store && i < 3000 && stored_at_kill < 1; ++i) {
        const std::string n = testing::loopback_exchange(server.port(), "DBSIZE\r\n");  // ":<count>\r\n"
        if (n.starts_with(":")) stored_at_kill = std::atoi(n.c_str() + 1);
        if (stored_at_kill < 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      server.stop(SIGKILL);
    });
    subprocess::Proc p = prewarm(name, server.url(), graph, 1);
    killer.join();
    ASSERT_EQ(p.code, 0) << name << ": " << p.err;
    EXPECT_THAT(p.out, HasSubstr("5 compiled, 0 failed")) << name;
    EXPECT_EQ(files_under(path(name + "/kernels")).size(), kernels) << name;
    if (after_first_store) {
      ASSERT_GE(stored_at_kill, 1);
      if (stored_at_kill < 6) {
        EXPECT_THAT(p.err, HasSubstr("going on with the local cache alone")) << "the stores after the kill failed";
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cache_test
