// KernelCache: lookups, stores, eviction and the maintenance operations behind `kiln cache`.
//
// Layout under config.dir (docs/cache.md): kernels/<kind>/<2 hex>/<32 hex>.kbin entries, stats/<n>.txt
// counters, sources/<32 hex>.cu saved sources. Every entry is checked in full on every read; a bad one is a
// miss.
#include <algorithm>
#include <atomic>
#include <mutex>

#include <fmt/format.h>

#include "cache/counters.h"
#include "cache/entry_format.h"
#include "cache/files.h"
#include "cache/remote.h"
#include "kiln/cache.h"
#include "support/log.h"

namespace kiln {

namespace fs = std::filesystem;
namespace cf = cache_files;
namespace cc = cache_counters;

namespace {

constexpr int64_t kHourS = 3600;
// After a store finds the cache over its limit, evict down to this fraction of it, so that the next few
// stores do not each pay for a scan and an eviction.
constexpr double kEvictTarget = 0.9;

size_t index_of(CacheKind k) { return static_cast<size_t>(k); }

// kernels/<kind>/<2 hex>/<32 hex>.kbin, below the cache directory.
fs::path entry_rel(const CacheKey& key, CacheKind kind) {
  std::string hex = key.hex();
  return fs::path("kernels") / cache_kind_name(kind) / hex.substr(0, 2) / (hex + ".kbin");
}

// The key an entry file's name claims, or nothing for a name that is not "<32 hex>.kbin" in shard <2 hex>.
std::optional<CacheKey> key_of(const fs::path& p) {
  std::string name = p.filename().string();
  if (name.size() != 37 || name.substr(32) != ".kbin") return std::nullopt;
  auto key = CacheKey::parse(name.substr(0, 32));
  if (!key || p.parent_path().filename().string() != key->hex().substr(0, 2)) return std::nullopt;
  return key;
}

// The CacheCounts field of each counter, in cc::Counter order (one list for reading and summing them).
constexpr std::array<int64_t CacheCounts::*, cc::kCount> kCounterFields = {
    &CacheCounts::hits,        &CacheCounts::misses,      &CacheCounts::stores,        &CacheCounts::evictions,
    &CacheCounts::bad_entries, &CacheCounts::remote_hits, &CacheCounts::remote_misses, &CacheCounts::remote_errors};

CacheCounts counts_of(const std::array<int64_t, cc::kCount>& c) {
  CacheCounts out;
  for (size_t i = 0; i < cc::kCount; ++i) out.*kCounterFields[i] = c[i];
  return out;
}

// The totals of `st` as the sum of its kinds.
void sum_kinds(CacheStats& st) {
  CacheCounts& t = st;
  t = {};
  for (const CacheCounts& k : st.by_kind) {
    t.entries = cc::saturating_add(t.entries, k.entries);
    t.bytes = cc::saturating_add(t.bytes, k.bytes);
    for (auto m : kCounterFields) t.*m = cc::saturating_add(t.*m, k.*m);
  }
}

}  // namespace

struct KernelCache::State {
  CacheConfig config;
  fs::path root;  // config.dir
  std::mutex mu;  // guards size_estimate
  // Bytes in kernels/ as of this process's last scan, plus what it has stored since. Other processes'
  // stores are not seen until the next scan, which happens whenever the estimate crosses the limit.
  std::optional<int64_t> size_estimate;
  std::array<std::array<std::atomic<int64_t>, cc::kCount>, kCacheKindCount> session{};
  // Counts not yet added to the shared counter files. Hits and misses wait here so that a warm run,
  // hundreds of hits, writes no file per hit: they go out with the next store, eviction or verify, at
  // most a minute later, from stats(), or when the cache is destroyed (a crash loses them: approximate).
  std::mutex counters_mu;
  cc::Counts pending{};
  int64_t last_flush_s = cf::now_s();
  // Why the last operation that could not use the directory could not (problem()).
  mutable std::mutex problem_mu;
  std::string problem;
  // The shared tier (KILN_CACHE_REMOTE), or null.
  std::unique_ptr<cache_remote::Remote> remote;
  std::atomic<bool> remote_warned{false};

  void note_problem(std::string why) {
    std::lock_guard lock(problem_mu);
    problem = std::move(why);
  }

  ~State() { flush(); }

  bool writable() const { return !config.read_only && !config.disabled; }

  // `bytes` more in the directory (a store, or a remote hit kept locally): evicts when over the limit.
  void account_written(int64_t bytes) {
    std::lock_guard lock(mu);
    if (!size_estimate) {
      evict_to(config.max_size_bytes);  // the first write of a process scans (and cleans up)
    } else {
      *size_estimate += bytes;
    }
    if (*size_estimate > config.max_size_bytes) {
      evict_to(static_cast<int64_t>(static_cast<double>(config.max_size_bytes) * kEvictTarget));
    }
  }

  // A remote failure: counted, and said once (a warning and problem()); the remote is given up by then.
  void remote_failed(CacheKind kind) {
    count(kind, cc::remote_errors);
    if (!remote_warned.exchange(true)) {
      const std::string why = remote->problem();
      KILN_LOG(warn, "{}", why);
      note_problem(why);
    }
  }

  // The entry from the shared tier, checked like a file; a good one is also written to the primary
  // directory, so that the next lookup is local.
  std::optional<CacheEntry> remote_lookup(const CacheKey& key, CacheKind kind, const fs::path& rel) {
    if (!remote || remote->down()) return std::nullopt;
    std::string bytes;
    switch (remote->get(cache_remote::remote_key(key, kind), bytes)) {
      case cache_remote::Remote::Got::failed: remote_failed(kind); return std::nullopt;
      case cache_remote::Remote::Got::miss: count(kind, cc::remote_misses); return std::nullopt;
      case cache_remote::Remote::Got::hit: break;
    }
    std::optional<CacheEntry> e = cache_format::decode(bytes, key, kind);
    if (!e) {  // corrupted, truncated or not an entry: never used; the next store overwrites it
      count(kind, cc::remote_errors);
      return std::nullopt;
    }
    count(kind, cc::remote_hits);
    e->path = remote->url().text() + "/" + cache_remote::remote_key(key, kind);
    e->mtime_s = cf::now_s();
    if (writable() && cf::write_file(root, rel, bytes, config.fsync).ok()) {
      e->path = (root / rel).string();
      account_written(static_cast<int64_t>(bytes.size()));
    }
    return e;
  }

  void flush() {
    std::lock_guard lock(counters_mu);
    if (writable()) cc::add(root, pending);
    pending = {};
    last_flush_s = cf::now_s();
  }

  void count(CacheKind kind, cc::Counter c, int64_t n = 1) {
    session[index_of(kind)][c] += n;
    if (config.read_only || n == 0) return;
    {
      std::lock_guard lock(counters_mu);
      pending[index_of(kind)][c] += n;
      if ((c == cc::hits || c == cc::misses) && cf::now_s() - last_flush_s < 60) return;
    }
    flush();
  }

  // Removes temporary files older than an hour (left by a process killed between create and rename),
  // stray files (which no lookup can ever find) and links, FIFOs and the like (the names, never what a link
  // points to).
  void remove_litter(const cf::Scan& s) {
    int64_t now = cf::now_s();
    for (const auto& t : s.temps) {
      if (now - t.mtime_s > kHourS) cf::remove_file(root, t.rel);
    }
    for (const auto* list : {&s.strays, &s.odd})
      for (const auto& f : *list) cf::remove_file(root, f.rel);
  }

  // Least recently used first (by mtime, every kind together) until at most `target` bytes remain.
  // Returns bytes removed.
  int64_t evict_to(int64_t target) {
    cf::Scan s = cf::scan(root);
    remove_litter(s);
    std::vector<cf::FileInfo>& entries = s.entries;
    int64_t total = 0;
    for (const auto& e : entries) total += e.bytes;
    std::sort(entries.begin(), entries.end(), [](const cf::FileInfo& a, const cf::FileInfo& b) {
      return a.mtime_s != b.mtime_s ? a.mtime_s < b.mtime_s : a.path < b.path;
    });
    int64_t removed = 0;
    std::array<int64_t, kCacheKindCount> count_removed{};
    for (const auto& e : entries) {
      if (total - removed <= target) break;
      // Another process may evict the same file: count only what this one removed.
      if (cf::remove_file(root, e.rel)) {
        removed += e.bytes;
        ++count_removed[index_of(e.kind)];
      }
    }
    for (CacheKind k : kCacheKinds) count(k, cc::evictions, count_removed[index_of(k)]);
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
  s->root = s->config.dir;
  // A directory that cannot be made or used is no error here: lookups miss, and stores say why.
  if (s->writable()) {
    if (auto d = cf::open_dir(s->root, "kernels", /*create=*/true); !d.ok()) s->note_problem(d.status().message());
  }
  if (!s->config.remote.empty() && !s->config.disabled) {
    KILN_ASSIGN_OR_RETURN(cache_remote::Url url, cache_remote::parse_url(s->config.remote));
    // Connected at the first lookup: a process that never looks anything up never connects.
    s->remote =
        std::make_unique<cache_remote::Remote>(std::move(url), s->config.remote_password, s->config.remote_timeout_ms);
  }
  return KernelCache(std::move(s));
}

const CacheConfig& KernelCache::config() const { return s_->config; }

std::string KernelCache::entry_path(const CacheKey& key, CacheKind kind) const {
  return (s_->root / entry_rel(key, kind)).string();
}

std::string KernelCache::problem() const {
  std::lock_guard lock(s_->problem_mu);
  return s_->problem;
}

bool KernelCache::holds(const CacheKey& key, CacheKind kind) const {
  return !s_->config.disabled && !s_->config.dir.empty() && cf::is_regular_file(s_->config.dir, entry_rel(key, kind));
}

std::optional<CacheEntry> KernelCache::lookup(const CacheKey& key, CacheKind kind) {
  if (s_->config.disabled) return std::nullopt;
  const fs::path rel = entry_rel(key, kind);
  bool primary = true;
  for (const std::string& dir : {s_->config.dir, s_->config.secondary_dir}) {
    if (dir.empty()) continue;
    std::string bytes;
    // The secondary directory is its owner's to ship: any owner, but never writable by group or others.
    cf::ReadResult r = cf::read_file(dir, rel, bytes, /*any_owner=*/!primary);
    std::optional<CacheEntry> e;
    if (r.code == cf::ReadResult::ok) e = cache_format::decode(bytes, key, kind);
    if (e) {
      e->path = (fs::path(dir) / rel).string();
      e->mtime_s = r.mtime_s;
      // Touching at most once an hour keeps warm runs free of metadata writes; an hour is plenty of
      // resolution for an LRU measured in days.
      if (primary && !s_->config.read_only && cf::now_s() - r.mtime_s > kHourS) {
        cf::touch(dir, rel);
        e->mtime_s = cf::now_s();
      }
      s_->count(kind, cc::hits);
      return e;
    }
    if (r.code == cf::ReadResult::unusable) s_->note_problem(r.why);
    if (r.code == cf::ReadResult::ok || r.code == cf::ReadResult::bad) {
      s_->count(kind, cc::bad_entries);
      if (primary && !s_->config.read_only) cf::remove_file(dir, rel, r.inode);
    }
    primary = false;
  }
  if (auto e = s_->remote_lookup(key, kind, rel)) {
    s_->count(kind, cc::hits);
    return e;
  }
  s_->count(kind, cc::misses);
  return std::nullopt;
}

Status KernelCache::store(const CacheKey& key, const CacheEntry& entry, CacheKind kind) {
  if (!s_->writable()) return {};
  std::string bytes = cache_format::encode(key, entry, kind);
  if (Status s = cf::write_file(s_->root, entry_rel(key, kind), bytes, s_->config.fsync); !s.ok()) {
    s_->note_problem(s.message());
    return io_error("kernel cache: " + s.message());
  }
  s_->count(kind, cc::stores);
  if (s_->remote && !s_->remote->down() && !s_->remote->set(cache_remote::remote_key(key, kind), bytes)) {
    if (s_->remote->down()) {
      s_->remote_failed(kind);
    } else {
      s_->count(kind, cc::remote_errors);  // refused (out of memory under maxmemory noeviction): still up
    }
  }

  s_->account_written(static_cast<int64_t>(bytes.size()));
  return {};
}

void KernelCache::remove_bad(const CacheKey& key, CacheKind kind) {
  if (!s_->writable()) return;
  cf::remove_file(s_->root, entry_rel(key, kind));
  s_->count(kind, cc::bad_entries);
}

Result<std::vector<CacheEntry>> KernelCache::list() {
  cf::Scan s = cf::scan(s_->root);
  std::vector<CacheEntry> out;
  for (const auto& f : s.entries) {
    auto key = key_of(f.path);
    std::string bytes;
    cf::ReadResult r;
    if (!key || (r = cf::read_file(s_->root, f.rel, bytes)).code != cf::ReadResult::ok) continue;
    auto e = cache_format::decode(bytes, *key, f.kind, /*metadata_only=*/true);
    if (!e) continue;  // bad files are verify's business
    e->path = f.path.string();
    e->mtime_s = r.mtime_s;
    out.push_back(std::move(*e));
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.mtime_s != b.mtime_s ? a.mtime_s > b.mtime_s : a.path < b.path;
  });
  return out;
}

Result<KernelCache::VerifyReport> KernelCache::verify() {
  cf::Scan s = cf::scan(s_->root);
  VerifyReport report;
  std::array<int64_t, kCacheKindCount> bad_of_kind{};
  const bool ro = s_->config.read_only;
  auto bad = [&](const fs::path& p, std::string reason, bool removed) {
    ++report.bad;
    report.bad_files.push_back({p.string(), std::move(reason)});
    if (removed) ++report.removed;
  };
  for (const auto& f : s.entries) {
    ++report.checked;
    auto key = key_of(f.path);
    std::string bytes, why;
    cf::ReadResult r;
    if (key) r = cf::read_file(s_->root, f.rel, bytes);
    if (key && r.code == cf::ReadResult::missing) {  // evicted meanwhile
      --report.checked;
      continue;
    }
    if (!key) {
      why = "not an entry name (<32 hex>.kbin in the shard of its first 2 hex)";
    } else if (r.code != cf::ReadResult::ok) {
      why = r.why;
    } else if (cache_format::decode(bytes, *key, f.kind, /*metadata_only=*/true, &why)) {
      continue;
    }
    ++bad_of_kind[index_of(f.kind)];
    const bool removable = r.code != cf::ReadResult::unusable;
    const bool removed =
        !ro && removable && cf::remove_file(s_->root, f.rel, key ? std::optional(r.inode) : std::nullopt);
    bad(f.path, std::move(why), removed);
  }
  for (const auto& f : s.strays) {
    ++report.checked;
    bad(f.path, "outside kernels/<kind>/<shard>/, where no lookup finds it (an older kiln's layout?)",
        !ro && cf::remove_file(s_->root, f.rel));
  }
  for (const auto& f : s.odd) {  // the link or FIFO itself goes, never what a link points to
    ++report.checked;
    bad(f.path, f.why, !ro && cf::remove_file(s_->root, f.rel));
  }
  for (const auto& f : s.untrusted) {
    ++report.checked;
    bad(f.path, f.why + "; left in place", false);
  }
  if (!ro) s_->remove_litter({{}, s.temps, {}, {}, {}});
  for (CacheKind k : kCacheKinds) s_->count(k, cc::bad_entries, bad_of_kind[index_of(k)]);
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
  // "emu": where the emu backend kept its shared objects before they became entries of this cache.
  for (const char* sub : {"kernels", "sources", "stats", "emu"}) {
    if (Status st = cf::remove_tree(s_->root, sub); !st.ok()) return io_error("kernel cache: " + st.message());
  }
  s_->size_estimate = 0;
  if (!s_->config.disabled) {
    if (auto d = cf::open_dir(s_->root, "kernels", /*create=*/true); !d.ok()) {
      return io_error("kernel cache: " + d.status().message());
    }
  }
  return {};
}

CacheStats KernelCache::stats() {
  s_->flush();
  CacheStats st;
  cc::Counts c = cc::read_all(s_->root);
  for (CacheKind k : kCacheKinds) st.by_kind[index_of(k)] = counts_of(c[index_of(k)]);
  for (const auto& f : cf::scan(s_->root).entries) {
    CacheCounts& k = st.by_kind[index_of(f.kind)];
    ++k.entries;
    k.bytes = cc::saturating_add(k.bytes, f.bytes);
  }
  sum_kinds(st);
  return st;
}

CacheStats KernelCache::session_stats() const {
  CacheStats st;
  for (CacheKind k : kCacheKinds) {
    std::array<int64_t, cc::kCount> c{};
    for (size_t i = 0; i < cc::kCount; ++i) c[i] = s_->session[index_of(k)][i];
    st.by_kind[index_of(k)] = counts_of(c);
  }
  sum_kinds(st);
  return st;
}

Status KernelCache::miss_error(std::string_view kernel_name, const CacheKey& key) const {
  const std::string problem = this->problem();
  return not_found(
      fmt::format("kernel cache miss for '{}' (key {}) with KILN_CACHE_ASSERT_HIT=1: no valid entry in '{}'{}{}",
                  kernel_name, key.hex(), s_->config.dir,
                  s_->config.secondary_dir.empty() ? "" : fmt::format(" or '{}'", s_->config.secondary_dir),
                  problem.empty() ? "" : " (" + problem + ")"));
}

std::string KernelCache::source_path(const CacheKey& key) const {
  return (fs::path(s_->config.dir) / "sources" / (key.hex() + ".cu")).string();
}

Status KernelCache::save_source(const CacheKey& key, std::string_view text) {
  if (s_->config.read_only) return {};
  Status s = cf::write_file(s_->root, fs::path("sources") / (key.hex() + ".cu"), text, /*fsync=*/false);
  return s.ok() ? s : io_error("kernel cache: " + s.message());
}

}  // namespace kiln
