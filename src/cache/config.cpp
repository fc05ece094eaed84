// CacheConfig::from_env and size parsing: every bad value is an error that names the variable and the
// value, because a cache silently configured differently from what was asked is worse than a failure.
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "kiln/cache.h"

namespace kiln {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

Result<bool> env_bool(const char* name) {
  auto v = env(name);
  if (!v || v->empty()) return false;
  for (const char* t : {"1", "true", "yes", "on", "TRUE", "True", "YES", "ON"}) {
    if (*v == t) return true;
  }
  for (const char* f : {"0", "false", "no", "off", "FALSE", "False", "NO", "OFF"}) {
    if (*v == f) return false;
  }
  return invalid_argument(fmt::format("{}='{}': expected 1 or 0 (true/false, yes/no, on/off)", name, *v));
}

}  // namespace

Result<int64_t> parse_cache_size(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return invalid_argument(
        fmt::format("{}='{}': {} (expected bytes or a number with K, M, G or T, e.g. 500M)", what, text, why));
  };
  int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec == std::errc::result_out_of_range) return bad("too large");
  if (ec != std::errc() || end == text.data()) return bad("not a size");
  std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
  // Binary units throughout: "1G" is what people mean for a cache limit, and matches human_bytes().
  int shift = -1;
  std::string u(unit);
  for (auto& ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (u.empty() || u == "B") shift = 0;
  const char* letters = "KMGT";
  for (int i = 0; i < 4; ++i) {
    std::string l(1, letters[i]);
    if (u == l || u == l + "B" || u == l + "IB") shift = 10 * (i + 1);
  }
  if (shift < 0) return bad("unknown unit");
  if (n <= 0) return bad("must be positive (KILN_CACHE_DISABLE=1 turns the cache off)");
  if (n > (std::numeric_limits<int64_t>::max() >> shift)) return bad("too large");
  return n << shift;
}

Result<CacheConfig> CacheConfig::from_env() {
  CacheConfig c;
  KILN_ASSIGN_OR_RETURN(c.disabled, env_bool("KILN_CACHE_DISABLE"));
  KILN_ASSIGN_OR_RETURN(c.read_only, env_bool("KILN_CACHE_READONLY"));
  KILN_ASSIGN_OR_RETURN(c.assert_hit, env_bool("KILN_CACHE_ASSERT_HIT"));
  KILN_ASSIGN_OR_RETURN(c.save_source, env_bool("KILN_SAVE_SOURCE"));
  KILN_ASSIGN_OR_RETURN(c.fsync, env_bool("KILN_CACHE_FSYNC"));
  if (auto v = env("KILN_CACHE_MAX_SIZE"); v && !v->empty()) {
    KILN_ASSIGN_OR_RETURN(c.max_size_bytes, parse_cache_size(*v, "KILN_CACHE_MAX_SIZE"));
  }
  namespace fs = std::filesystem;
  if (auto d = env("KILN_CACHE_DIR"); d && !d->empty()) {
    c.dir = *d;
  } else if (auto x = env("XDG_CACHE_HOME"); x && !x->empty()) {
    c.dir = (fs::path(*x) / "kiln").string();
  } else if (auto h = env("HOME"); h && !h->empty()) {
    c.dir = (fs::path(*h) / ".cache" / "kiln").string();
  } else if (!c.disabled) {
    return invalid_argument("no kernel cache directory: set KILN_CACHE_DIR (HOME and XDG_CACHE_HOME are unset)");
  }
  if (auto s = env("KILN_CACHE_SECONDARY"); s && !s->empty()) c.secondary_dir = *s;
  return c;
}

}  // namespace kiln
