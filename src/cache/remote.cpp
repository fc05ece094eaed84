#include "cache/remote.h"

#include <charconv>

#include <fmt/format.h>

#include "cache/entry_format.h"

#if KILN_HAVE_REDIS
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

}  // namespace

std::string Url::text() const { return fmt::format("redis://{}:{}/{}", host, port, db); }

Result<Url> parse_url(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return invalid_argument(fmt::format(
        "KILN_CACHE_REMOTE '{}': {} (expected redis://HOST[:PORT][/DB], e.g. redis://cache.lan:6379/0)", text, why));
  };
  constexpr std::string_view kScheme = "redis://";
  if (!text.starts_with(kScheme)) return bad("not a redis:// URL");
  std::string_view rest = text.substr(kScheme.size());
  if (rest.find('@') != std::string_view::npos) {
    return bad(
        "a password or user in the URL; give the password in KILN_CACHE_REMOTE_PASSWORD or "
        "KILN_CACHE_REMOTE_PASSWORD_FILE instead");
  }
  if (rest.find_first_of("?#") != std::string_view::npos) return bad("query or fragment: kiln reads none");
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
  if (const size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
    auto v = parse_int(hostport.substr(colon + 1), 1, 65535);
    if (!v) return bad(fmt::format("port '{}' is not a number in 1..65535", hostport.substr(colon + 1)));
    u.port = *v;
    hostport = hostport.substr(0, colon);
  }
  if (hostport.empty()) return bad("no host");
  u.host = std::string(hostport);
  return u;
}

std::string remote_key(const CacheKey& key, CacheKind kind) {
  return fmt::format("kiln:{}:{}:{}", cache_format::kFormatVersion, cache_kind_name(kind), key.hex());
}

#if KILN_HAVE_REDIS

bool available() { return true; }

struct Remote::Connection {
  redisContext* c = nullptr;
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

Remote::Got Remote::get(std::string_view key, std::string& value) {
  std::lock_guard lock(mu_);
  if (!connect_locked()) return Got::failed;
  Reply r(static_cast<redisReply*>(redisCommand(conn_->c, "GET %b", key.data(), key.size())));
  if (!r) {
    give_up_locked(fmt::format("GET failed: {}", conn_->c->errstr));
    return Got::failed;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    const std::string_view msg(r->str, r->len);
    // Not authenticated (a server that gained a password, or none given): nothing will work.
    if (msg.starts_with("NOAUTH") || msg.starts_with("WRONGPASS")) {
      give_up_locked(fmt::format("GET refused: {}", msg));
      return Got::failed;
    }
    return Got::miss;
  }
  if (r->type != REDIS_REPLY_STRING) return Got::miss;
  value.assign(r->str, r->len);
  return Got::hit;
}

bool Remote::set(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  if (!connect_locked()) return false;
  Reply r(static_cast<redisReply*>(
      redisCommand(conn_->c, "SET %b %b", key.data(), key.size(), value.data(), value.size())));
  if (!r) {
    give_up_locked(fmt::format("SET failed: {}", conn_->c->errstr));
    return false;
  }
  return r->type == REDIS_REPLY_STATUS;
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
