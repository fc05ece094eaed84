// KernelCache: lookups, stores, eviction and the maintenance operations behind `kiln cache`.
//
// Layout under config.dir (docs/cache.md): kernels/<2 hex>/<32 hex>.kbin entries, stats/<n>.txt counters,
// sources/<32 hex>.cu saved sources. Every entry is checked in full on every read; a bad one is a miss.
#include <algorithm>
#include <atomic>
#include <mutex>

#include <fmt/format.h>

#include "cache/counters.h"
#include "cache/entry_format.h"
#include "cache/files.h"
#include "kiln/cache.h"

namespace kiln {

namespace fs = std::filesystem;
namespace cf = cache_files;
namespace cc = cache_counters;

namespace {

constexpr int64_t kHourS = 3600;
// After a store finds the cache over its limit, evict down to this fraction of it, so that the next few
// stores do not each pay for a scan and an eviction.
constexpr double kEvictTarget = 0.9;

fs::path entry_path_in(const fs::path& dir, const CacheKey& key) {
  std::string hex = key.hex();
  return dir / "kernels" / hex.substr(0, 2) / (hex + ".kbin");
}

// The key an entry file's name claims, or nothing for a name that is not "<32 hex>.kbin" in shard <2 hex>.
std::optional<CacheKey> key_of(const fs::path& p) {
  std::string name = p.filename().string();
  if (name.size() != 37 || name.substr(32) != ".kbin") return std::nullopt;
  auto key = CacheKey::parse(name.substr(0, 32));
  if (!key || p.parent_path().filename().string() != key->hex().substr(0, 2)) return std::nullopt;
  return key;
}

}  // namespace

struct KernelCache::State {
  CacheConfig config;
  fs::path kernels;
  fs::path stats;
  std::mutex mu;  // guards size_estimate
  // Bytes in kernels/ as of this process's last scan, plus what it has stored since. Other processes'
  // stores are not seen until the next scan, which happens whenever the estimate crosses the limit.
  std::optional<int64_t> size_estimate;
  std::array<std::atomic<int64_t>, cc::kCount> session{};
  // Counts not yet added to the shared counter files. Hits and misses wait here so that a warm run,
  // hundreds of hits, writes no file per hit: they go out with the next store, eviction or verify, at
  // most a minute later, from stats(), or when the cache is destroyed (a crash loses them: approximate).
  std::mutex counters_mu;
  cc::Counts pending{};
  int64_t last_flush_s = cf::now_s();

  ~State() { flush(); }

  void flush() {
    std::lock_guard lock(counters_mu);
    if (!config.read_only && !config.disabled) cc::add(stats, pending);
    pending = {};
    last_flush_s = cf::now_s();
  }

  void count(cc::Counter c, int64_t n = 1) {
    session[c] += n;
    if (config.read_only || n == 0) return;
    {
      std::lock_guard lock(counters_mu);
      pending[c] += n;
      if ((c == cc::hits || c == cc::misses) && cf::now_s() - last_flush_s < 60) return;
    }
    flush();
  }

  // Removes temporary files older than an hour: left by a process killed between create and rename.
  void remove_stale_temps(const std::vector<cf::FileInfo>& temps) {
    int64_t now = cf::now_s();
    for (const auto& t : temps) {
      if (now - t.mtime_s > kHourS) cf::remove_file(t.path);
    }
  }

  // Least recently used first (by mtime) until at most `target` bytes remain. Returns bytes removed.
  int64_t evict_to(int64_t target) {
    std::vector<cf::FileInfo> entries, temps;
    cf::scan(kernels, entries, &temps);
    remove_stale_temps(temps);
    int64_t total = 0;
    for (const auto& e : entries) total += e.bytes;
    std::sort(entries.begin(), entries.end(), [](const cf::FileInfo& a, const cf::FileInfo& b) {
      return a.mtime_s != b.mtime_s ? a.mtime_s < b.mtime_s : a.path < b.path;
    });
    int64_t removed = 0, count_removed = 0;
    for (const auto& e : entries) {
      if (total - removed <= target) break;
      // Another process may evict the same file: count only what this one removed.
      if (cf::remove_file(e.path)) {
        removed += e.bytes;
        ++count_removed;
      }
    }
    count(cc::evictions, count_removed);
    size_estimate = total - removed;
    return removed;
  }
};

KernelCache::KernelCache(std::unique_ptr<State> state) : s_(std::move(state)) {}
KernelCache::KernelCache(KernelCache&&) noexcept = default;
KernelCache& KernelCache::operator=(KernelCache&&) noexcept = default;
KernelCache::~KernelCache() = default;

Result<KernelCache> KernelCache::open(CacheConfig config) {
  if (config.dir.empty() && !config.disabled) {
    return invalid_argument("kernel cache: no directory (set KILN_CACHE_DIR)");
  }
  if (config.max_size_bytes <= 0) {
    return invalid_argument(fmt::format("kernel cache: max size {} is not positive", config.max_size_bytes));
  }
  auto s = std::make_unique<State>();
  s->config = std::move(config);
  s->kernels = fs::path(s->config.dir) / "kernels";
  s->stats = fs::path(s->config.dir) / "stats";
  if (!s->config.disabled && !s->config.read_only) KILN_RETURN_IF_ERROR(cf::make_dirs(s->kernels));
  return KernelCache(std::move(s));
}

const CacheConfig& KernelCache::config() const { return s_->config; }

std::string KernelCache::entry_path(const CacheKey& key) const { return entry_path_in(s_->config.dir, key).string(); }

std::optional<CacheEntry> KernelCache::lookup(const CacheKey& key) {
  if (s_->config.disabled) return std::nullopt;
  bool primary = true;
  for (const std::string& dir : {s_->config.dir, s_->config.secondary_dir}) {
    if (dir.empty()) continue;
    fs::path path = entry_path_in(dir, key);
    std::string bytes;
    int64_t mtime = 0;
    uint64_t inode = 0;
    cf::ReadResult r = cf::read_file(path, bytes, mtime, &inode);
    if (r == cf::ReadResult::ok) {
      if (auto e = cache_format::decode(bytes, key)) {
        e->path = path.string();
        e->mtime_s = mtime;
        // Touching at most once an hour keeps warm runs free of metadata writes; an hour is plenty of
        // resolution for an LRU measured in days.
        bool writable = primary && !s_->config.read_only;
        if (writable && cf::now_s() - mtime > kHourS) {
          cf::touch(path);
          e->mtime_s = cf::now_s();
        }
        s_->count(cc::hits);
        return e;
      }
      s_->count(cc::bad_entries);
      if (primary && !s_->config.read_only) cf::remove_if_same(path, inode);
    }
    primary = false;
  }
  s_->count(cc::misses);
  return std::nullopt;
}

Status KernelCache::store(const CacheKey& key, const CacheEntry& entry) {
  if (s_->config.disabled || s_->config.read_only) return {};
  fs::path path = entry_path_in(s_->config.dir, key);
  KILN_RETURN_IF_ERROR(cf::make_dirs(path.parent_path()));
  std::string bytes = cache_format::encode(key, entry);
  KILN_RETURN_IF_ERROR(cf::write_atomic(path, bytes, s_->config.fsync));
  s_->count(cc::stores);

  std::lock_guard lock(s_->mu);
  if (!s_->size_estimate) {
    s_->evict_to(s_->config.max_size_bytes);  // the first store of a process scans (and cleans temps)
  } else {
    *s_->size_estimate += static_cast<int64_t>(bytes.size());
  }
  if (*s_->size_estimate > s_->config.max_size_bytes) {
    s_->evict_to(static_cast<int64_t>(static_cast<double>(s_->config.max_size_bytes) * kEvictTarget));
  }
  return {};
}

Result<std::vector<CacheEntry>> KernelCache::list() {
  std::vector<cf::FileInfo> files;
  cf::scan(s_->kernels, files, nullptr);
  std::vector<CacheEntry> out;
  for (const auto& f : files) {
    auto key = key_of(f.path);
    std::string bytes;
    int64_t mtime = 0;
    if (!key || cf::read_file(f.path, bytes, mtime) != cf::ReadResult::ok) continue;
    auto e = cache_format::decode(bytes, *key, /*metadata_only=*/true);
    if (!e) continue;  // bad files are verify's business
    e->path = f.path.string();
    e->mtime_s = mtime;
    out.push_back(std::move(*e));
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.mtime_s != b.mtime_s ? a.mtime_s > b.mtime_s : a.path < b.path;
  });
  return out;
}

Result<KernelCache::VerifyReport> KernelCache::verify() {
  std::vector<cf::FileInfo> files, temps;
  cf::scan(s_->kernels, files, &temps);
  if (!s_->config.read_only) s_->remove_stale_temps(temps);
  VerifyReport report;
  for (const auto& f : files) {
    ++report.checked;
    auto key = key_of(f.path);
    std::string bytes;
    int64_t mtime = 0;
    uint64_t inode = 0;
    cf::ReadResult r = key ? cf::read_file(f.path, bytes, mtime, &inode) : cf::ReadResult::unreadable;
    if (r == cf::ReadResult::missing) {  // evicted meanwhile
      --report.checked;
      continue;
    }
    if (r == cf::ReadResult::ok && cache_format::decode(bytes, *key, /*metadata_only=*/true)) continue;
    ++report.bad;
    report.bad_paths.push_back(f.path.string());
    if (s_->config.read_only) continue;
    if (key ? cf::remove_if_same(f.path, inode) : cf::remove_file(f.path)) ++report.removed;
  }
  s_->count(cc::bad_entries, report.bad);
  return report;
}

Result<int64_t> KernelCache::prune(int64_t max_size_bytes) {
  if (s_->config.read_only) return unsupported("kernel cache: cannot prune a read-only cache (KILN_CACHE_READONLY=1)");
  if (max_size_bytes < 0) return invalid_argument("kernel cache: prune size must not be negative");
  std::lock_guard lock(s_->mu);
  return s_->evict_to(max_size_bytes);
}

Status KernelCache::clear() {
  if (s_->config.read_only) return unsupported("kernel cache: cannot clear a read-only cache (KILN_CACHE_READONLY=1)");
  std::lock_guard lock(s_->mu);
  for (const char* sub : {"kernels", "sources", "stats"}) {
    std::error_code ec;
    fs::remove_all(fs::path(s_->config.dir) / sub, ec);
    if (ec)
      return io_error(
          fmt::format("kernel cache: cannot remove '{}': {}", (fs::path(s_->config.dir) / sub).string(), ec.message()));
  }
  s_->size_estimate = 0;
  if (!s_->config.disabled) KILN_RETURN_IF_ERROR(cf::make_dirs(s_->kernels));
  return {};
}

CacheStats KernelCache::stats() {
  s_->flush();
  CacheStats st;
  std::vector<cf::FileInfo> files;
  cf::scan(s_->kernels, files, nullptr);
  st.entries = static_cast<int64_t>(files.size());
  for (const auto& f : files) st.bytes += f.bytes;
  cc::Counts c = cc::read_all(s_->stats);
  st.hits = c[cc::hits];
  st.misses = c[cc::misses];
  st.stores = c[cc::stores];
  st.evictions = c[cc::evictions];
  st.bad_entries = c[cc::bad_entries];
  return st;
}

CacheStats KernelCache::session_stats() const {
  CacheStats st;
  st.hits = s_->session[cc::hits];
  st.misses = s_->session[cc::misses];
  st.stores = s_->session[cc::stores];
  st.evictions = s_->session[cc::evictions];
  st.bad_entries = s_->session[cc::bad_entries];
  return st;
}

Status KernelCache::miss_error(std::string_view kernel_name, const CacheKey& key) const {
  return not_found(
      fmt::format("kernel cache miss for '{}' (key {}) with KILN_CACHE_ASSERT_HIT=1: no valid entry in '{}'{}",
                  kernel_name, key.hex(), s_->config.dir,
                  s_->config.secondary_dir.empty() ? "" : fmt::format(" or '{}'", s_->config.secondary_dir)));
}

std::string KernelCache::source_path(const CacheKey& key) const {
  return (fs::path(s_->config.dir) / "sources" / (key.hex() + ".cu")).string();
}

Status KernelCache::save_source(const CacheKey& key, std::string_view text) {
  if (s_->config.read_only) return {};
  fs::path path = source_path(key);
  KILN_RETURN_IF_ERROR(cf::make_dirs(path.parent_path()));
  return cf::write_atomic(path, text, /*fsync=*/false);
}

}  // namespace kiln
