// The on-disk kernel cache: compiled kernels (cubin, PTX, resource usage; or an emu shared object) stored
// by a 128-bit key, one sub-directory per kind of binary.
//
// The cache knows nothing about code generation or compilers: the compile layer builds a KeyManifest from
// everything that changes the compiled code, looks the key up, and on a miss compiles and stores. A bad
// file (truncated, corrupted, copied under another key, from another format version) is a miss that is
// removed and counted, never an error. The file format, the environment variables and the concurrency
// guarantees are in docs/cache.md.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln {

// The first line of every manifest. Bump it whenever the meaning of any manifest field, or the way the
// compile layer fills them, changes: every old entry then misses instead of being wrongly reused.
inline constexpr int kCacheKeyVersion = 1;

// What made an entry, and so what its binary is. Each kind has its own directory <dir>/kernels/<name>/;
// the size limit, LRU eviction, `kiln cache` and the counters cover every kind.
enum class CacheKind : uint8_t {
  nvrtc,  // a CUDA kernel compiled by NVRTC: cubin + PTX (src/runtime/kernel_provider.cpp)
  emu,    // kernels compiled for the CPU by the host C++ compiler: a shared object (src/runtime/emu/)
  plan,   // a plan and its kernels' launches, the binary being their encoding (src/runtime/plan_cache.h)
};
inline constexpr int kCacheKindCount = 3;
inline constexpr CacheKind kCacheKinds[kCacheKindCount] = {CacheKind::nvrtc, CacheKind::emu, CacheKind::plan};
const char* cache_kind_name(CacheKind kind);  // "nvrtc", "emu", "plan": also the directory name

// 16 bytes of XXH3-128 (canonical, big-endian order: hex() equals xxhsum's output).
struct CacheKey {
  std::array<uint8_t, 16> bytes{};

  std::string hex() const;  // 32 lowercase hex digits
  // 32 hex digits (either case) or nothing.
  static std::optional<CacheKey> parse(std::string_view hex);
  bool operator==(const CacheKey&) const = default;
};

// XXH3-128 of arbitrary bytes, the hash used for keys and entry checksums.
CacheKey xxh3_128(std::string_view bytes);

// What a key is computed from: "field=value\n" lines in the order they were added, after the version line
// "kiln-cache-key=<kCacheKeyVersion>". Order is significant (the text is hashed as written), so callers
// add fields in one fixed order. Values may hold any bytes: '\\' and '\n' are escaped so that lines cannot
// run together. Fields are code constants: empty fields, fields holding '=' or '\n' and a field added twice
// are internal errors (KILN_CHECK).
class KeyManifest {
 public:
  KeyManifest();
  void add(std::string_view field, std::string_view value);
  // Adds "field=xxh3:<hex>" for a large input (generated source, template files): keeps the manifest,
  // which every entry stores, small.
  void add_hashed(std::string_view field, std::string_view value);
  const std::string& text() const { return text_; }
  CacheKey key() const { return xxh3_128(text_); }

 private:
  std::string text_;
  std::vector<std::string> fields_;
};

// Resource usage of a compiled kernel as ptxas reports it (-Xptxas -v), plus the compile time.
struct KernelInfo {
  int registers = 0;
  int shared_bytes = 0;
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  double compile_ms = 0;
  bool operator==(const KernelInfo&) const = default;
};

struct CacheEntry {
  std::string kernel_name;     // the entry symbol (emu: the translation unit's name; plan: the graph's name)
  std::string arch;            // "sm_90a", exactly as compiled for (emu: "host"; plan: its target's arch)
  std::vector<uint8_t> cubin;  // the binary: a cubin (nvrtc), a shared object (emu), an encoded plan (plan)
  std::string ptx;             // nvrtc only
  KernelInfo info;
  std::string manifest;  // KeyManifest::text(), kept for `kiln cache ls` and debugging
  // Filled by lookup() and list(); ignored by store().
  CacheKind kind = CacheKind::nvrtc;
  CacheKey key;
  std::string path;
  int64_t file_bytes = 0;
  int64_t mtime_s = 0;  // seconds since the epoch: the approximate last use
};

struct CacheConfig {
  std::string dir;            // KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
  std::string secondary_dir;  // KILN_CACHE_SECONDARY: read-only shipped cache, looked up after `dir`
  bool disabled = false;      // KILN_CACHE_DISABLE=1: no lookups, no stores
  bool read_only = false;     // KILN_CACHE_READONLY=1: lookups only; never writes, deletes or touches
  bool assert_hit = false;    // KILN_CACHE_ASSERT_HIT=1: the compile layer makes any miss an error
  bool save_source = false;   // KILN_SAVE_SOURCE=1: the compile layer saves generated sources
  bool fsync = false;         // KILN_CACHE_FSYNC=1: fsync each entry before its rename (power-loss safety)
  int64_t max_size_bytes = int64_t{2} << 30;  // KILN_CACHE_MAX_SIZE: 500M, 2G, 1024K, 2GiB or plain bytes
  // The shared tier (docs/cache.md, "A cache shared through Redis"): KILN_CACHE_REMOTE=redis://HOST[:PORT][/DB],
  // looked up after the directories and filled after every local store. Its password comes from
  // KILN_CACHE_REMOTE_PASSWORD or the file KILN_CACHE_REMOTE_PASSWORD_FILE names, never from the URL.
  std::string remote;
  std::string remote_password;
  int remote_timeout_ms = 1000;  // KILN_CACHE_REMOTE_TIMEOUT_MS: connect and each command

  // Boolean variables take 1/0, true/false, yes/no, on/off; anything else is an error naming the variable.
  // A non-empty `dir` is the directory instead of the one the variables give (emu::CompileOptions).
  static Result<CacheConfig> from_env(std::string_view dir = {});
};

// "2G" -> 2147483648; binary units K, M, G, T with an optional "B" or "iB". Errors name `what`.
Result<int64_t> parse_cache_size(std::string_view text, std::string_view what = "size");

struct CacheCounts {
  int64_t entries = 0;  // from a scan of the primary directory
  int64_t bytes = 0;
  int64_t hits = 0;  // the counters: persisted, approximate (see docs/cache.md)
  int64_t misses = 0;
  int64_t stores = 0;
  int64_t evictions = 0;
  int64_t bad_entries = 0;
  int64_t remote_hits = 0;    // the shared tier (KILN_CACHE_REMOTE): entries it supplied,
  int64_t remote_misses = 0;  // lookups it could not answer,
  int64_t remote_errors = 0;  // and failures: unreachable, timed out, refused, or a value that failed its checks
};
// Totals over every kind, and each kind's own (by_kind[static_cast<int>(kind)]).
struct CacheStats : CacheCounts {
  std::array<CacheCounts, kCacheKindCount> by_kind{};
  const CacheCounts& of(CacheKind k) const { return by_kind[static_cast<size_t>(k)]; }
};

// One cache directory (plus its optional secondary). Safe to share between threads, and between processes
// through the file system. Move-only.
class KernelCache {
 public:
  // Creates `config.dir` and its kernels/ directory with mode 0700 unless read-only or disabled. A
  // directory that cannot be created or used is not an error here: lookups miss and stores fail saying why.
  static Result<KernelCache> open(CacheConfig config);
  KernelCache(KernelCache&&) noexcept;
  KernelCache& operator=(KernelCache&&) noexcept;
  ~KernelCache();

  // The entry, checked from magic to checksum, or nothing. The primary directory first, then the secondary.
  // A hit older than an hour has its mtime touched (the LRU clock).
  std::optional<CacheEntry> lookup(const CacheKey& key, CacheKind kind = CacheKind::nvrtc);
  // Atomically publishes the entry (temporary file + rename), then evicts the least recently used entries
  // of every kind down to 90 % of the limit if over it. Ok and nothing written when disabled or read-only.
  Status store(const CacheKey& key, const CacheEntry& entry, CacheKind kind = CacheKind::nvrtc);
  // Removes the primary directory's entry (one that passed its checks but turned out unusable, e.g. a
  // shared object dlopen refuses) and counts it as bad. Nothing when disabled or read-only.
  void remove_bad(const CacheKey& key, CacheKind kind);

  // Whether the primary directory has a file for the entry (not read or checked: lookup() does that). What
  // prewarm asks of each kernel it obtained: reading the whole cache to answer was most of a warm prewarm.
  bool holds(const CacheKey& key, CacheKind kind = CacheKind::nvrtc) const;
  // Valid entries of the primary directory, every kind, metadata only (no binary, no PTX), most recently
  // used first.
  Result<std::vector<CacheEntry>> list();
  struct BadFile {
    std::string path;
    std::string reason;  // "checksum mismatch (corrupted)", "truncated: ...", "bad magic ..."
  };
  struct VerifyReport {
    int64_t checked = 0, bad = 0, removed = 0;
    std::vector<BadFile> bad_files;
  };
  // Re-reads every file under kernels/ and checks it fully; removes bad ones unless read-only.
  Result<VerifyReport> verify();
  // Removes least recently used entries (and stale temporary files) until at most `max_size_bytes` remain;
  // returns the bytes removed. An error when read-only.
  Result<int64_t> prune(int64_t max_size_bytes);
  // Removes every entry of every kind, saved source and counter (and <dir>/emu, the emu backend's cache
  // before it became a kind of this one). An error when read-only.
  Status clear();

  // Persisted counters of every process plus a scan of the entries.
  CacheStats stats();
  // This object's own counters since open() (kept even when read-only); entries/bytes are 0.
  CacheStats session_stats() const;

  // Why the cache directory could not be used the last time it could not (a directory that is a link, is
  // not private or cannot be written; a store that failed), or "": for the compile layer's warnings.
  std::string problem() const;

  // The error for a miss under KILN_CACHE_ASSERT_HIT=1: names the kernel, the key and the directory.
  Status miss_error(std::string_view kernel_name, const CacheKey& key) const;
  // <dir>/sources/<hex>.cu; save_source writes it atomically (unless read-only: then Ok, nothing written).
  std::string source_path(const CacheKey& key) const;
  Status save_source(const CacheKey& key, std::string_view text);
  // <dir>/kernels/<kind>/<first 2 hex>/<hex>.kbin
  std::string entry_path(const CacheKey& key, CacheKind kind = CacheKind::nvrtc) const;

  const CacheConfig& config() const;

 private:
  struct State;
  explicit KernelCache(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace kiln
