// `kiln cache stats|ls|verify|prune --max-size S|clear`: looks after the kernel cache of $KILN_CACHE_DIR
// (docs/cache.md). KILN_CACHE_DISABLE does not apply here: these commands exist to manage the directory.
#include <ctime>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/cache.h"

namespace kiln::cli {
namespace {

std::string utc_time(int64_t s) {
  std::time_t t = static_cast<std::time_t>(s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

int cache_stats(KernelCache& cache) {
  CacheStats s = cache.stats();
  // In double: the counters saturate at INT64_MAX, and their sum must not overflow.
  const double lookups = static_cast<double>(s.hits) + static_cast<double>(s.misses);
  std::string rate =
      lookups > 0 ? fmt::format(" ({:.1f} % of lookups)", 100.0 * static_cast<double>(s.hits) / lookups) : "";
  fmt::print("cache directory: {}\n", cache.config().dir);
  if (!cache.config().secondary_dir.empty()) fmt::print("secondary:       {}\n", cache.config().secondary_dir);
  print_table({{"entries", group_digits(s.entries)},
               {"size", fmt::format("{} (limit {})", human_bytes(s.bytes), human_bytes(cache.config().max_size_bytes))},
               {"hits", group_digits(s.hits) + rate},
               {"misses", group_digits(s.misses)},
               {"stores", group_digits(s.stores)},
               {"evictions", group_digits(s.evictions)},
               {"bad entries", group_digits(s.bad_entries)}},
              0);
  // Every kind of entry shares the directory, the size limit and the LRU order: each one's part of it.
  std::vector<std::vector<std::string>> rows{
      {"kind", "entries", "size", "hits", "misses", "stores", "evictions", "bad"}};
  for (CacheKind k : kCacheKinds) {
    const CacheCounts& c = s.of(k);
    rows.push_back({cache_kind_name(k), group_digits(c.entries), human_bytes(c.bytes), group_digits(c.hits),
                    group_digits(c.misses), group_digits(c.stores), group_digits(c.evictions),
                    group_digits(c.bad_entries)});
  }
  fmt::print("by kind:\n");
  print_table(rows, 2);
  return kExitOk;
}

int cache_ls(KernelCache& cache) {
  auto entries = cache.list();
  if (!entries.ok()) {
    print_error(entries.status());
    return kExitInvalid;
  }
  std::vector<std::vector<std::string>> rows{
      {"key", "kind", "kernel", "arch", "size", "regs", "spills", "last use (UTC)"}};
  for (const CacheEntry& e : *entries) {
    int spills = e.info.spill_store_bytes + e.info.spill_load_bytes;
    const bool gpu = e.kind == CacheKind::nvrtc;  // registers and spills are ptxas's: none for the host
    rows.push_back({e.key.hex().substr(0, 12), cache_kind_name(e.kind), e.kernel_name, e.arch,
                    human_bytes(e.file_bytes), gpu ? std::to_string(e.info.registers) : "-",
                    spills ? fmt::format("{} B", spills) : "-", utc_time(e.mtime_s)});
  }
  print_table(rows, 0);
  fmt::print("{} entries\n", group_digits(static_cast<int64_t>(entries->size())));
  return kExitOk;
}

int cache_verify(KernelCache& cache) {
  auto r = cache.verify();
  if (!r.ok()) {
    print_error(r.status());
    return kExitInvalid;
  }
  for (const auto& b : r->bad_files) fmt::print("bad: {}: {}\n", b.path, b.reason);
  fmt::print("checked {} entries: {} bad, {} removed\n", group_digits(r->checked), group_digits(r->bad),
             group_digits(r->removed));
  return r->bad ? kExitInvalid : kExitOk;
}

}  // namespace

CommandResult cmd_cache(const std::vector<std::string>& argv) {
  Args args;
  if (auto e = parse_args("cache", argv, {"--max-size"}, args)) return {kExitUsage, e};
  if (args.help) {
    fmt::print("{}", help_text());
    return {};
  }
  if (args.positional.empty()) {
    return {kExitUsage, UsageError{"cache: missing subcommand (expected stats, ls, verify, prune or clear)"}};
  }
  const std::string& sub = args.positional[0];
  if (sub != "stats" && sub != "ls" && sub != "verify" && sub != "prune" && sub != "clear") {
    return {kExitUsage, UsageError{fmt::format(
                            "cache: unknown subcommand '{}' (expected stats, ls, verify, prune or clear)", sub)}};
  }
  if (args.positional.size() > 1) {
    return {kExitUsage, UsageError{fmt::format("cache {}: unexpected argument '{}'", sub, args.positional[1])}};
  }
  auto max_size = args.get("--max-size");
  if (max_size.has_value() != (sub == "prune")) {
    return {kExitUsage, UsageError{sub == "prune" ? "cache prune: missing --max-size SIZE (e.g. 500M)"
                                                  : fmt::format("cache {}: takes no --max-size", sub)}};
  }
  int64_t prune_to = 0;
  if (max_size) {
    auto n = parse_cache_size(*max_size, "--max-size");
    if (!n.ok()) return {kExitUsage, UsageError{n.status().message()}};
    prune_to = *n;
  }

  auto config = CacheConfig::from_env();
  if (!config.ok()) {
    print_error(config.status());
    return {kExitInvalid, {}};
  }
  config->disabled = false;
  // Looking must not create the directory or change anything.
  if (sub == "stats" || sub == "ls") config->read_only = true;
  auto cache = KernelCache::open(*config);
  if (!cache.ok()) {
    print_error(cache.status());
    return {kExitInvalid, {}};
  }
  if (sub == "stats") return {cache_stats(*cache), {}};
  if (sub == "ls") return {cache_ls(*cache), {}};
  if (sub == "verify") return {cache_verify(*cache), {}};
  if (sub == "prune") {
    int64_t before = cache->stats().bytes;
    auto removed = cache->prune(prune_to);
    if (!removed.ok()) {
      print_error(removed.status());
      return {kExitInvalid, {}};
    }
    fmt::print("removed {}; {} remain (limit {})\n", human_bytes(*removed), human_bytes(before - *removed),
               human_bytes(prune_to));
    return {};
  }
  if (Status s = cache->clear(); !s.ok()) {
    print_error(s);
    return {kExitInvalid, {}};
  }
  fmt::print("cleared {}\n", cache->config().dir);
  return {};
}

}  // namespace kiln::cli
