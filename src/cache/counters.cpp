#include "cache/counters.h"

#include <unistd.h>

#include <charconv>
#include <sstream>
#include <string>

#include "cache/files.h"

namespace kiln::cache_counters {
namespace {

constexpr const char* kNames[kCount] = {"hits", "misses", "stores", "evictions", "bad_entries"};

Counts parse(const std::string& text) {
  Counts c{};
  std::istringstream in(text);
  for (std::string name, value; in >> name >> value;) {
    for (int i = 0; i < kCount; ++i) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (name == kNames[i] && ec == std::errc() && end == value.data() + value.size() && v >= 0) c[i] = v;
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
  for (int64_t d : delta) any = any || d != 0;
  if (!any) return;
  if (!cache_files::make_dirs(stats_dir).ok()) return;
  auto path = stats_dir / (std::to_string(::getpid() % kShards) + ".txt");
  Counts c = read_one(path);
  std::string text;
  for (int i = 0; i < kCount; ++i) text += std::string(kNames[i]) + " " + std::to_string(c[i] + delta[i]) + "\n";
  (void)cache_files::write_atomic(path, text, /*fsync=*/false);
}

Counts read_all(const std::filesystem::path& stats_dir) {
  Counts sum{};
  for (int s = 0; s < kShards; ++s) {
    Counts c = read_one(stats_dir / (std::to_string(s) + ".txt"));
    for (int i = 0; i < kCount; ++i) sum[i] += c[i];
  }
  return sum;
}

}  // namespace kiln::cache_counters
