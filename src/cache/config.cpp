// CacheConfig::from_env and size parsing: every bad value is an error that names the variable and the
// value, because a cache silently configured differently from what was asked is worse than a failure.
// The parsing itself is support/env.h's, shared with every other KILN_* variable.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "cache/remote.h"
#include "kiln/cache.h"
#include "support/cache_root.h"
#include "support/env.h"

namespace kiln {
namespace {

constexpr const char* kHowToDisable = "KILN_CACHE_DISABLE=1 turns the cache off";

// The shared tier's settings: a URL that parses, a password from the environment or a file (one trailing
// newline dropped, as `echo secret > file` leaves one), a timeout in 1..60000 ms.
Status remote_from_env(CacheConfig& c) {
  auto url = support::env_string("KILN_CACHE_REMOTE");
  if (!url || url->empty()) return {};
  KILN_ASSIGN_OR_RETURN(cache_remote::Url parsed, cache_remote::parse_url(*url));
  if (!cache_remote::available()) {
    return unsupported(
        fmt::format("KILN_CACHE_REMOTE={}: this kiln was built without a Redis client "
                    "(install libhiredis-dev and rebuild), or unset KILN_CACHE_REMOTE",
                    parsed.text()));
  }
  c.remote = *url;
  auto password = support::env_string("KILN_CACHE_REMOTE_PASSWORD");
  auto file = support::env_string("KILN_CACHE_REMOTE_PASSWORD_FILE");
  if (password && file) {
    return invalid_argument("KILN_CACHE_REMOTE_PASSWORD and KILN_CACHE_REMOTE_PASSWORD_FILE are both set: set one");
  }
  if (password) c.remote_password = *password;
  if (file) {
    // An empty file is an empty password, not an error; a directory or a FIFO is refused.
    std::error_code ec;
    std::ifstream in;
    if (std::filesystem::is_regular_file(*file, ec)) in.open(*file, std::ios::binary);
    if (in) c.remote_password.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in.is_open() || in.bad()) {
      return invalid_argument(fmt::format(
          "KILN_CACHE_REMOTE_PASSWORD_FILE '{}': cannot be read (expected a regular file holding the password)",
          *file));
    }
    if (c.remote_password.ends_with('\n')) c.remote_password.pop_back();
    if (c.remote_password.ends_with('\r')) c.remote_password.pop_back();
  }
  if (auto t = support::env_string("KILN_CACHE_REMOTE_TIMEOUT_MS")) {
    KILN_ASSIGN_OR_RETURN(int64_t ms, support::parse_positive_int(*t, "KILN_CACHE_REMOTE_TIMEOUT_MS"));
    if (ms > 60000) {
      return invalid_argument(fmt::format("KILN_CACHE_REMOTE_TIMEOUT_MS={}: expected at most 60000 (a minute)", *t));
    }
    c.remote_timeout_ms = static_cast<int>(ms);
  }
  return {};
}

}  // namespace

Result<int64_t> parse_cache_size(std::string_view text, std::string_view what) {
  return support::parse_size(text, what, kHowToDisable);
}

Result<CacheConfig> CacheConfig::from_env(std::string_view dir) {
  CacheConfig c;
  KILN_ASSIGN_OR_RETURN(c.disabled, support::env_bool("KILN_CACHE_DISABLE"));
  KILN_ASSIGN_OR_RETURN(c.read_only, support::env_bool("KILN_CACHE_READONLY"));
  KILN_ASSIGN_OR_RETURN(c.assert_hit, support::env_bool("KILN_CACHE_ASSERT_HIT"));
  KILN_ASSIGN_OR_RETURN(c.save_source, support::env_bool("KILN_SAVE_SOURCE"));
  KILN_ASSIGN_OR_RETURN(c.fsync, support::env_bool("KILN_CACHE_FSYNC"));
  if (auto v = support::env_string("KILN_CACHE_MAX_SIZE")) {
    KILN_ASSIGN_OR_RETURN(c.max_size_bytes, parse_cache_size(*v, "KILN_CACHE_MAX_SIZE"));
  }
  if (!dir.empty()) {
    c.dir = dir;
  } else if (auto root = support::cache_root()) {
    c.dir = *root;
  } else if (!c.disabled) {
    return invalid_argument("no kernel cache directory: set KILN_CACHE_DIR (HOME and XDG_CACHE_HOME are unset)");
  }
  if (auto s = support::env_string("KILN_CACHE_SECONDARY")) c.secondary_dir = *s;
  KILN_RETURN_IF_ERROR(remote_from_env(c));
  return c;
}

}  // namespace kiln
