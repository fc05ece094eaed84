// The kernel cache's shared tier: entries kept in a Redis server that a fleet of machines reads and fills
// (docs/cache.md, "A cache shared through Redis").
//
// A value is an entry file's bytes (cache/entry_format.h) under "kiln:<format version>:<kind>:<32 hex>", so
// a remote entry is checked exactly as a local file is (magic, kind, key, checksum) before it is used, and
// entries of another format version never meet. The server is never trusted further than that.
//
// A remote that cannot be reached, times out, refuses the password or answers what is not Redis is given up
// for the rest of the process after the first failure: one warning (problem()), and kiln goes on with its
// local cache. Commands are serialized (one connection, a mutex): lookups are a few per plan.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/cache.h"

namespace kiln::cache_remote {

// Where KILN_CACHE_REMOTE points: redis://HOST[:PORT][/DB].
struct Url {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string text() const;  // "redis://host:port/db"
};
// Refuses anything else, naming what was wrong; a password in the URL is refused too (it belongs in
// KILN_CACHE_REMOTE_PASSWORD or KILN_CACHE_REMOTE_PASSWORD_FILE, out of process listings and logs).
Result<Url> parse_url(std::string_view text);

// Whether this kiln was built with a Redis client (libhiredis-dev); without it KILN_CACHE_REMOTE is an error.
bool available();

class Remote {
 public:
  Remote(Url url, std::string password, int timeout_ms);
  ~Remote();
  Remote(const Remote&) = delete;
  Remote& operator=(const Remote&) = delete;

  enum class Got { hit, miss, failed };
  // The value under `key`, or a miss, or a failure (the remote is given up: see problem()). A value that is
  // not a string (a Redis error, an array) is a miss.
  Got get(std::string_view key, std::string& value);
  // Stores `value` under `key`. False when it was not stored: a failure (the remote is given up) or an
  // error answer such as an out-of-memory refusal under maxmemory (the remote stays up).
  bool set(std::string_view key, std::string_view value);

  // Given up on after a failure: no further command is sent.
  bool down() const;
  // Why it was given up ("" while it is up), naming the URL.
  std::string problem() const;
  const Url& url() const { return url_; }

 private:
  struct Connection;
  bool connect_locked();
  // A hiredis reply (redisReply*, owned by the caller) or null; void* keeps hiredis out of this header.
  template <class... A>
  void* command_locked(std::string_view what, const char* format, A... args);
  void give_up_locked(std::string why);

  Url url_;
  std::string password_;
  int timeout_ms_;
  mutable std::mutex mu_;
  std::unique_ptr<Connection> conn_;
  bool down_ = false;
  std::string problem_;
};

// The remote key of an entry.
std::string remote_key(const CacheKey& key, CacheKind kind);

}  // namespace kiln::cache_remote
