#include "cache/counters.h"

#include <unistd.h>

#include <charconv>
#include <sstream>
#include <string>

#include "cache/files.h"
#include "support/atomic_file.h"

namespace kiln::cache_counters {
namespace {

constexpr const char* kNames[kCount] = {"hits", "misses", "stores", "evictions", "bad_entries"};

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
      c[kind][counter] += v;
    }
  }
  return c;
}

Counts read_one(const std::filesystem::path& path) {
  std::string text;
  int64_t mtime = 0;
  if (cache_files::read_file(path, text, mtime) != cache_files::ReadResult::ok) return {};
  return parse(text);
}

}  // namespace

void add(const std::filesystem::path& stats_dir, const Counts& delta) {
  bool any = false;
  for (const auto& per_kind : delta)
    for (int64_t d : per_kind) any = any || d != 0;
  if (!any) return;
  if (!cache_files::make_dirs(stats_dir).ok()) return;
  auto path = stats_dir / (std::to_string(::getpid() % kShards) + ".txt");
  Counts c = read_one(path);
  std::string text;
  for (CacheKind k : kCacheKinds) {
    const auto ki = static_cast<size_t>(k);
    for (size_t i = 0; i < kCount; ++i) {
      text += std::string(cache_kind_name(k)) + "." + kNames[i] + " " + std::to_string(c[ki][i] + delta[ki][i]) + "\n";
    }
  }
  (void)support::write_file_atomic(path, text, {.fsync = false, .mode = 0600});
}

Counts read_all(const std::filesystem::path& stats_dir) {
  Counts sum{};
  for (int s = 0; s < kShards; ++s) {
    Counts c = read_one(stats_dir / (std::to_string(s) + ".txt"));
    for (size_t k = 0; k < kCacheKindCount; ++k)
      for (size_t i = 0; i < kCount; ++i) sum[k][i] += c[k][i];
  }
  return sum;
}

}  // namespace kiln::cache_counters
