// CacheConfig::from_env and size parsing: every bad value is an error that names the variable and the
// value, because a cache silently configured differently from what was asked is worse than a failure.
// The parsing itself is support/env.h's, shared with every other KILN_* variable.
#include "kiln/cache.h"
#include "support/cache_root.h"
#include "support/env.h"

namespace kiln {
namespace {

constexpr const char* kHowToDisable = "KILN_CACHE_DISABLE=1 turns the cache off";

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
  return c;
}

}  // namespace kiln
