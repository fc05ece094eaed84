#include "cache/remote.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "cache/entry_format.h"

#if KILN_HAVE_REDIS
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>
#endif

namespace kiln::cache_remote {

namespace {

// A decimal in [lo, hi], all of `s`.
std::optional<int> parse_int(std::string_view s, int lo, int hi) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

// The URL as it may be printed: a user or password replaced by "***", a query or fragment dropped.
std::string printable(std::string_view text) {
  std::string out(text.substr(0, text.find_first_of("?#")));
  const size_t scheme = out.find("://");
  const size_t begin = scheme == std::string::npos ? 0 : scheme + 3;
  if (const size_t at = out.rfind('@'); at != std::string::npos && at >= begin) out.replace(begin, at - begin, "***");
  return out;
}

}  // namespace

std::string Url::text() const {
  return host.find(':') == std::string::npos ? fmt::format("redis://{}:{}/{}", host, port, db)
                                             : fmt::format("redis://[{}]:{}/{}", host, port, db);
}

Result<Url> parse_url(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return invalid_argument(
        fmt::format("KILN_CACHE_REMOTE '{}': {} (expected redis://HOST[:PORT][/DB], e.g. redis://cache.lan:6379/0)",
                    printable(text), why));
  };
  constexpr std::string_view kScheme = "redis://";
  if (!text.starts_with(kScheme)) return bad("not a redis:// URL");
  std::string_view rest = text.substr(kScheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) return bad("query or fragment: kiln reads none");
  if (rest.find('@') != std::string_view::npos) {
    return bad(
        "a password or user in the URL; give the password in KILN_CACHE_REMOTE_PASSWORD or "
        "KILN_CACHE_REMOTE_PASSWORD_FILE instead");
  }
  Url u;
  std::string_view hostport = rest.substr(0, rest.find('/'));
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) {
      auto v = parse_int(db, 0, 1 << 20);
      if (!v) return bad(fmt::format("database '{}' is not a number of 0 or more", db));
      u.db = *v;
    }
  }
  std::string_view port;
  if (hostport.starts_with('[')) {  // an IPv6 literal: [::1] or [::1]:6380
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) return bad("an IPv6 address without its closing ']'");
    u.host = std::string(hostport.substr(1, close - 1));
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty() && !after.starts_with(':')) return bad(fmt::format("'{}' after the IPv6 address", after));
    if (!after.empty()) port = after.substr(1);
    if (after == ":") return bad("port '' is not a number in 1..65535");
  } else {
    if (std::count(hostport.begin(), hostport.end(), ':') > 1) {
      return bad("an IPv6 address must be in brackets: redis://[::1]:6379");
    }
    const size_t colon = hostport.find(':');
    u.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = hostport.substr(colon + 1);
      if (port.empty()) return bad("port '' is not a number in 1..65535");
    }
  }
  if (!port.empty()) {
    auto v = parse_int(port, 1, 65535);
    if (!v) return bad(fmt::format("port '{}' is not a number in 1..65535", port));
    u.port = *v;
  }
  if (u.host.empty()) return bad("no host");
  return u;
}

std::string remote_key(const CacheKey& key, CacheKind kind) {
  return fmt::format("kiln:{}:{}:{}", cache_format::kFormatVersion, cache_kind_name(kind), key.hex());
}

#if KILN_HAVE_REDIS

bool available() { return true; }

struct Remote::Connection {
  redisContext* c = nullptr;
  bool answered = false;  // a command succeeded on it: a later I/O error is a dropped connection
  ~Connection() {
    if (c != nullptr) redisFree(c);
  }
};

namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval timeval_of(int ms) { return {ms / 1000, (ms % 1000) * 1000}; }

// hiredis writes with plain write(): a server that dies in the middle of a large SET would raise SIGPIPE
// and kill the process. While a command runs, SIGPIPE is blocked for this thread; one it raised is taken
// off the pending set before the mask is restored (one that was pending before is left alone).
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      const timespec now{0, 0};
      if (sigismember(&pending, SIGPIPE) == 1) sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

// Answers after which nothing will work: not authenticated, wrong password, a read-only replica.
bool hopeless(std::string_view error) {
  return error.starts_with("NOAUTH") || error.starts_with("WRONGPASS") || error.starts_with("ERR invalid password") ||
         error.starts_with("READONLY");
}

}  // namespace

Remote::Remote(Url url, std::string password, int timeout_ms)
    : url_(std::move(url)), password_(std::move(password)), timeout_ms_(timeout_ms) {}
Remote::~Remote() = default;

void Remote::give_up_locked(std::string why) {
  down_ = true;
  problem_ = fmt::format("kernel cache remote {}: {}; going on with the local cache alone", url_.text(), why);
  conn_.reset();
}

// Connects, authenticates and selects the database once; false (and given up) on any failure.
bool Remote::connect_locked() {
  if (down_) return false;
  if (conn_) return true;
  auto conn = std::make_unique<Connection>();
  conn->c = redisConnectWithTimeout(url_.host.c_str(), url_.port, timeval_of(timeout_ms_));
  if (conn->c == nullptr) {
    give_up_locked("cannot allocate a connection");
    return false;
  }
  if (conn->c->err != 0) {
    give_up_locked(fmt::format("cannot connect: {}", conn->c->errstr));
    return false;
  }
  redisSetTimeout(conn->c, timeval_of(timeout_ms_));
  auto command_ok = [&](Reply r, std::string_view what) {
    if (!r) {
      give_up_locked(fmt::format("{} failed: {}", what, conn->c->errstr[0] ? conn->c->errstr : "no answer"));
      return false;
    }
    if (r->type == REDIS_REPLY_ERROR) {
      give_up_locked(fmt::format("{} refused: {}", what, std::string_view(r->str, r->len)));
      return false;
    }
    return true;
  };
  if (!password_.empty()) {
    Reply r(static_cast<redisReply*>(
        redisCommand(conn->c, "AUTH %b", password_.data(), static_cast<size_t>(password_.size()))));
    if (!command_ok(std::move(r), "AUTH")) return false;
  }
  if (url_.db != 0) {
    Reply r(static_cast<redisReply*>(redisCommand(conn->c, "SELECT %d", url_.db)));
    if (!command_ok(std::move(r), fmt::format("SELECT {}", url_.db))) return false;
  }
  conn_ = std::move(conn);
  return true;
}

// Runs one command. A connection that had answered before and now fails (closed by the server's idle
// timeout, a restart, a proxy) is opened again and the command retried once; any other failure, a second
// one, or a hopeless refusal gives the remote up. Null when it was given up.
template <class... A>
void* Remote::command_locked(std::string_view what, const char* format, A... args) {
  NoSigpipe no_sigpipe;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!connect_locked()) return nullptr;
    Reply r(static_cast<redisReply*>(redisCommand(conn_->c, format, args...)));
    if (!r) {
      const std::string why = conn_->c->errstr;
      if (attempt == 0 && conn_->answered && (conn_->c->err == REDIS_ERR_EOF || conn_->c->err == REDIS_ERR_IO)) {
        conn_.reset();  // dropped: reconnect once
        continue;
      }
      give_up_locked(fmt::format("{} failed: {}", what, why.empty() ? "no answer" : why));
      return nullptr;
    }
    if (r->type == REDIS_REPLY_ERROR && hopeless(std::string_view(r->str, r->len))) {
      give_up_locked(fmt::format("{} refused: {}", what, std::string_view(r->str, r->len)));
      return nullptr;
    }
    conn_->answered = true;
    return r.release();
  }
  return nullptr;
}

Remote::Got Remote::get(std::string_view key, std::string& value) {
  std::lock_guard lock(mu_);
  Reply r(static_cast<redisReply*>(command_locked("GET", "GET %b", key.data(), key.size())));
  if (!r) return Got::failed;
  if (r->type != REDIS_REPLY_STRING) return Got::miss;  // nil; an error answer or anything else: a miss
  value.assign(r->str, r->len);
  return Got::hit;
}

bool Remote::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  Reply r(
      static_cast<redisReply*>(command_locked("SET", "SET %b %b", key.data(), key.size(), value.data(), value.size())));
  return r && r->type == REDIS_REPLY_STATUS;  // else refused (out of memory under noeviction) or given up
}

#else  // built without hiredis

bool available() { return false; }

struct Remote::Connection {};
Remote::Remote(Url url, std::string password, int timeout_ms)
    : url_(std::move(url)), password_(std::move(password)), timeout_ms_(timeout_ms) {
  down_ = true;
  problem_ = "this kiln was built without a Redis client (libhiredis-dev)";
}
Remote::~Remote() = default;
void Remote::give_up_locked(std::string why) { problem_ = std::move(why); }
bool Remote::connect_locked() { return false; }
Remote::Got Remote::get(std::string_view, std::string&) { return Got::failed; }
bool Remote::set(std::string_view, std::string_view) { return false; }

#endif

bool Remote::down() const {
  std::lock_guard lock(mu_);
  return down_;
}

std::string Remote::problem() const {
  std::lock_guard lock(mu_);
  return problem_;
}

}  // namespace kiln::cache_remote
