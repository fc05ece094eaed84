// `kiln cache stats|ls|verify|prune --max-size S|clear`: looks after the kernel cache of $KILN_CACHE_DIR
// (docs/cache.md). KILN_CACHE_DISABLE does not apply here: these commands exist to manage the directory.
#include <ctime>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "json_output.h"
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

Json counts_json(const CacheCounts& c) {
  return {{"entries", c.entries},
          {"bytes", c.bytes},
          {"hits", c.hits},
          {"misses", c.misses},
          {"stores", c.stores},
          {"evictions", c.evictions},
          {"bad_entries", c.bad_entries},
          {"remote_hits", c.remote_hits},
          {"remote_misses", c.remote_misses},
          {"remote_errors", c.remote_errors}};
}

int cache_stats(KernelCache& cache) {
  CacheStats s = cache.stats();
  if (global_options().json) {
    Json doc = json_document("cache.stats");
    doc["directory"] = cache.config().dir;
    doc["secondary"] = cache.config().secondary_dir;
    doc["remote"] = cache.config().remote;
    doc["limit_bytes"] = cache.config().max_size_bytes;
    doc.update(counts_json(s));
    doc["by_kind"] = Json::object();
    for (CacheKind k : kCacheKinds) doc["by_kind"][cache_kind_name(k)] = counts_json(s.of(k));
    print_json(doc);
    return kExitOk;
  }
  // In double: the counters saturate at INT64_MAX, and their sum must not overflow.
  const double lookups = static_cast<double>(s.hits) + static_cast<double>(s.misses);
  std::string rate =
      lookups > 0 ? fmt::format(" ({:.1f} % of lookups)", 100.0 * static_cast<double>(s.hits) / lookups) : "";
  fmt::print("cache directory: {}\n", cache.config().dir);
  if (!cache.config().secondary_dir.empty()) fmt::print("secondary:       {}\n", cache.config().secondary_dir);
  if (!cache.config().remote.empty()) fmt::print("remote:          {}\n", cache.config().remote);
  std::vector<std::vector<std::string>> totals{
      {"entries", group_digits(s.entries)},
      {"size", fmt::format("{} (limit {})", human_bytes(s.bytes), human_bytes(cache.config().max_size_bytes))},
      {"hits", group_digits(s.hits) + rate},
      {"misses", group_digits(s.misses)},
      {"stores", group_digits(s.stores)},
      {"evictions", group_digits(s.evictions)},
      {"bad entries", group_digits(s.bad_entries)}};
  // The shared tier's part of the hits (each is also a hit), and what it could not answer.
  if (!cache.config().remote.empty() || s.remote_hits + s.remote_misses + s.remote_errors > 0) {
    totals.push_back({"remote hits", group_digits(s.remote_hits)});
    totals.push_back({"remote misses", group_digits(s.remote_misses)});
    totals.push_back({"remote errors", group_digits(s.remote_errors)});
  }
  print_table(totals, 0);
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
  if (global_options().json) {
    Json doc = json_document("cache.ls");
    doc["directory"] = cache.config().dir;
    Json list = Json::array();
    for (const CacheEntry& e : *entries) {
      const bool gpu = e.kind == CacheKind::nvrtc;
      list.push_back({{"key", e.key.hex()},
                      {"kind", cache_kind_name(e.kind)},
                      {"kernel", e.kernel_name},
                      {"arch", e.arch},
                      {"bytes", e.file_bytes},
                      {"registers", gpu ? Json(e.info.registers) : Json(nullptr)},
                      {"spill_bytes", gpu ? Json(e.info.spill_store_bytes + e.info.spill_load_bytes) : Json(nullptr)},
                      {"last_use_utc", utc_time(e.mtime_s)},
                      {"last_use_unix", e.mtime_s}});
    }
    doc["entries"] = std::move(list);
    print_json(doc);
    return kExitOk;
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
  if (global_options().json) {
    Json doc = json_document("cache.verify");
    doc["directory"] = cache.config().dir;
    doc["checked"] = r->checked;
    doc["bad"] = r->bad;
    doc["removed"] = r->removed;
    doc["bad_files"] = Json::array();
    for (const auto& b : r->bad_files) doc["bad_files"].push_back({{"path", b.path}, {"reason", b.reason}});
    print_json(doc);
    return r->bad ? kExitInvalid : kExitOk;
  }
  for (const auto& b : r->bad_files) fmt::print("bad: {}: {}\n", b.path, b.reason);
  fmt::print("checked {} entries: {} bad, {} removed\n", group_digits(r->checked), group_digits(r->bad),
             group_digits(r->removed));
  return r->bad ? kExitInvalid : kExitOk;
}

// One `kiln cache SUB` command.
CommandResult cache_command(std::string_view sub, const Args& args) {
  int64_t prune_to = 0;
  if (auto max_size = args.get("--max-size")) {
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

}  // namespace

std::vector<CommandSpec> cache_commands() {
  constexpr std::string_view kFooter =
      "The cache directory is $KILN_CACHE_DIR (default ~/.cache/kiln); see docs/cache.md.";
  auto json = [](std::string_view schema) { return OptionSpec{"--json", "", schema}; };
  return {
      {.name = "cache stats",
       .summary = "the cache's counters (entries, size, hits, misses, stores, evictions), in all and by kind",
       .positionals = 0,
       .options = {json("the counters as JSON: schema kiln.cache.stats/1 (docs/cli.md)")},
       .footer = kFooter,
       .run = [](const Args& a) { return cache_command("stats", a); }},
      {.name = "cache ls",
       .summary = "every entry: key, kind, kernel, arch, size, registers, spills, last use",
       .positionals = 0,
       .options = {json("the entries as JSON: schema kiln.cache.ls/1 (docs/cli.md)")},
       .footer = kFooter,
       .run = [](const Args& a) { return cache_command("ls", a); }},
      {.name = "cache verify",
       .summary = "check every entry's checksum and remove the bad ones (exit 1 if any was bad)",
       .positionals = 0,
       .options = {json("the result as JSON: schema kiln.cache.verify/1 (docs/cli.md)")},
       .footer = kFooter,
       .run = [](const Args& a) { return cache_command("verify", a); }},
      {.name = "cache prune",
       .summary = "remove least recently used entries until at most --max-size remain",
       .positionals = 0,
       .options = {{"--max-size", "S", "what may remain: bytes, or with K, M, G, T (500M, 2G); required"}},
       .footer = kFooter,
       .run =
           [](const Args& a) {
             if (!a.has("--max-size"))
               return CommandResult{kExitUsage, UsageError{"cache prune: missing --max-size SIZE (e.g. 500M)"}};
             return cache_command("prune", a);
           }},
      {.name = "cache clear",
       .summary = "remove every entry",
       .positionals = 0,
       .footer = kFooter,
       .run = [](const Args& a) { return cache_command("clear", a); }},
  };
}

}  // namespace kiln::cli
