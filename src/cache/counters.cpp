#include "cache/counters.h"

#include <unistd.h>

#include <charconv>
#include <limits>
#include <sstream>
#include <string>

#include "cache/files.h"

namespace kiln::cache_counters {
namespace {

constexpr const char* kNames[kCount] = {"hits",        "misses",      "stores",        "evictions",
                                        "bad_entries", "remote_hits", "remote_misses", "remote_errors"};

// "emu.hits" -> (emu, hits); "hits" -> (nvrtc, hits). False for anything else.
bool parse_name(std::string_view name, size_t& kind, size_t& counter) {
  kind = static_cast<size_t>(CacheKind::nvrtc);
  if (size_t dot = name.find('.'); dot != std::string_view::npos) {
    bool known = false;
    for (CacheKind k : kCacheKinds) {
      if (name.substr(0, dot) == cache_kind_name(k)) kind = static_cast<size_t>(k), known = true;
    }
    if (!known) return false;
    name.remove_prefix(dot + 1);
  }
  for (size_t i = 0; i < kCount; ++i) {
    if (name == kNames[i]) {
      counter = i;
      return true;
    }
  }
  return false;
}

Counts parse(const std::string& text) {
  Counts c{};
  std::istringstream in(text);
  for (std::string name, value; in >> name >> value;) {
    int64_t v = 0;
    size_t kind = 0, counter = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec == std::errc() && end == value.data() + value.size() && v >= 0 && parse_name(name, kind, counter)) {
      c[kind][counter] = saturating_add(c[kind][counter], v);
    }
  }
  return c;
}

std::filesystem::path shard(int s) { return std::filesystem::path("stats") / (std::to_string(s) + ".txt"); }

Counts read_one(const std::filesystem::path& cache_dir, int s) {
  std::string text;
  if (cache_files::read_file(cache_dir, shard(s), text).code != cache_files::ReadResult::ok) return {};
  return parse(text);
}

}  // namespace

int64_t saturating_add(int64_t a, int64_t b) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return b > 0 && a > kMax - b ? kMax : a + b;
}

void add(const std::filesystem::path& cache_dir, const Counts& delta) {
  bool any = false;
  for (const auto& per_kind : delta)
    for (int64_t d : per_kind) any = any || d != 0;
  if (!any) return;
  const int mine = ::getpid() % kShards;
  Counts c = read_one(cache_dir, mine);
  std::string text;
  for (CacheKind k : kCacheKinds) {
    const auto ki = static_cast<size_t>(k);
    for (size_t i = 0; i < kCount; ++i) {
      text += std::string(cache_kind_name(k)) + "." + kNames[i] + " " +
              std::to_string(saturating_add(c[ki][i], delta[ki][i])) + "\n";
    }
  }
  (void)cache_files::write_file(cache_dir, shard(mine), text, /*fsync=*/false);
}

Counts read_all(const std::filesystem::path& cache_dir) {
  Counts sum{};
  for (int s = 0; s < kShards; ++s) {
    Counts c = read_one(cache_dir, s);
    for (size_t k = 0; k < kCacheKindCount; ++k)
      for (size_t i = 0; i < kCount; ++i) sum[k][i] = saturating_add(sum[k][i], c[k][i]);
  }
  return sum;
}

}  // namespace kiln::cache_counters
