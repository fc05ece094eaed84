#include "runtime/kernel_provider.h"
#include "support/log.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "codegen/nvrtc.h"
#include "support/hash.h"
#include "support/stopwatch.h"

namespace kiln {

namespace {

// Compiles in flight in this process, by key: a second request for the same key and the same source
// waits for the first instead of compiling (the source is compared too, so that only identical kernels
// ever share a compile).
struct InFlight {
  struct Compile {
    std::string source;
    std::shared_future<Result<CacheEntry>> result;
  };
  std::mutex mu;
  std::map<std::string, Compile> by_key;
};
InFlight& in_flight() {
  static InFlight f;
  return f;
}

// A store that fails is an error only with `require_store`; else it goes to `warning` and the kernel is
// used all the same.
Result<CacheEntry> compile_and_store(KernelCache& cache, const codegen::Kernel& k, const std::string& arch,
                                     const CacheKey& key, const std::string& manifest, bool require_store,
                                     std::string* warning) {
  if (cache.config().save_source) KILN_RETURN_IF_ERROR(cache.save_source(key, k.source));
  codegen::NvrtcOptions o;
  o.arch = arch;
  o.source_name = k.entry + ".cu";
  KILN_ASSIGN_OR_RETURN(codegen::CompiledKernel c, codegen::nvrtc_compile(k.source, o));
  CacheEntry e;
  e.kernel_name = k.entry;
  e.arch = arch;
  e.cubin = std::move(c.cubin);
  e.ptx = std::move(c.ptx);
  e.info = {c.registers, c.shared_bytes, c.stack_bytes, c.spill_store_bytes, c.spill_load_bytes, c.compile_ms};
  e.manifest = manifest;
  if (Status s = cache.store(key, e); !s.ok()) {
    if (require_store) return Status(s.code(), "compiled, but not stored: " + s.message());
    if (warning) *warning = "compiled but not cached (" + s.message() + "): later runs compile it again";
  }
  return e;
}

}  // namespace

// Renames entry `k.entry` to `name` in the kernel and in every whole-identifier occurrence in its source.
void rename_entry(codegen::Kernel& k, const std::string& name) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  const std::string& src = k.source;
  size_t from = 0;
  for (size_t at = src.find(k.entry); at != std::string::npos; at = src.find(k.entry, at + 1)) {
    const size_t end = at + k.entry.size();
    if ((at > 0 && ident(src[at - 1])) || (end < src.size() && ident(src[end]))) continue;
    out.append(src, from, at - from).append(name);
    from = end;
  }
  out.append(src, from, std::string::npos);
  k.source = std::move(out);
  k.entry = name;
}

void assign_distinct(PlanKernels& pk) {
  pk.distinct.clear();
  pk.distinct_of.clear();
  pk.distinct_smem.clear();
  struct Distinct {
    std::string entry, source;  // as generated, before any renaming
    std::string renamed;        // the entry it runs under, when renamed
  };
  std::vector<Distinct> ds;
  std::map<support::Hash128, std::vector<int>> by_content;  // XXH3-128 of entry and source -> candidates
  std::set<std::string> names;                              // entry names taken by distinct kernels
  for (size_t i = 0; i < pk.launches.size(); ++i) {
    codegen::Kernel& k = pk.launches[i];
    support::Hasher h;
    std::vector<int>& candidates = by_content[h.field(k.entry).field(k.source).digest()];
    int d = -1;
    for (int c : candidates) {
      if (ds[static_cast<size_t>(c)].entry == k.entry && ds[static_cast<size_t>(c)].source == k.source) d = c;
    }
    if (d < 0) {
      d = static_cast<int>(ds.size());
      candidates.push_back(d);
      ds.push_back({k.entry, k.source, {}});
      std::string name = k.entry;
      for (int n = 2; names.count(name); ++n) name = fmt::format("{}_v{}", k.entry, n);
      if (name != k.entry) ds.back().renamed = name;
      names.insert(name);
      pk.distinct.push_back(static_cast<int>(i));
      pk.distinct_smem.push_back(0);
    }
    uint32_t& smem = pk.distinct_smem[static_cast<size_t>(d)];
    smem = std::max(smem, k.dynamic_smem);
    if (!ds[static_cast<size_t>(d)].renamed.empty()) rename_entry(k, ds[static_cast<size_t>(d)].renamed);
    pk.distinct_of.push_back(d);
  }
}

Result<PlanKernels> plan_kernel_launches(const Plan& p) {
  PlanKernels pk;
  for (const Group& grp : p.groups) {
    if (!grp.is_kernel() && grp.kind != GroupKind::weight_transform) continue;
    KILN_ASSIGN_OR_RETURN(codegen::Kernel k, codegen::generate_kernel(p, grp));
    pk.group.push_back(grp.id);
    pk.launches.push_back(std::move(k));
  }
  assign_distinct(pk);
  return pk;
}

std::vector<codegen::Kernel> distinct_kernels(PlanKernels pk) {
  std::vector<codegen::Kernel> out;
  for (int i : pk.distinct) out.push_back(std::move(pk.launches[static_cast<size_t>(i)]));
  return out;
}

Result<std::vector<codegen::Kernel>> plan_kernels(const Plan& p) {
  KILN_ASSIGN_OR_RETURN(PlanKernels pk, plan_kernel_launches(p));
  return distinct_kernels(std::move(pk));
}

CacheKey kernel_cache_key(const codegen::Kernel& k, const std::string& arch, KeyManifest* manifest) {
  static const std::string templates = codegen::templates_hash();  // the same for the whole process
  KeyManifest m;
  m.add("codegen", std::to_string(codegen::kCodegenVersion));
  m.add("templates", templates);
  m.add("nvrtc", codegen::nvrtc_build_version());
  m.add("arch", arch);
  m.add("target", k.target);  // the device the kernel's tiles were chosen for
  std::string opts;
  for (const std::string& o : codegen::nvrtc_preamble(arch)) opts += o + " ";
  m.add("options", opts);
  m.add("entry", k.entry);
  m.add_hashed("source", k.source);
  if (manifest) *manifest = m;
  return m.key();
}

ObtainResult obtain_kernels(KernelCache& cache, const std::vector<codegen::Kernel>& kernels,
                            const ObtainOptions& options) {
  const support::Stopwatch wall;
  struct Item {
    const codegen::Kernel* kernel;
    std::string arch;
  };
  std::vector<Item> items;
  for (const codegen::Kernel& k : kernels)
    for (const std::string& a : options.archs) items.push_back({&k, a});

  ObtainResult r;
  r.total = static_cast<int>(items.size());
  r.entries.resize(items.size());
  std::vector<std::string> errors(items.size()), warnings(items.size());
  std::vector<KernelEvent::Outcome> outcome(items.size(), KernelEvent::cached);
  std::mutex report_mu;
  std::atomic<size_t> next{0};

  auto work = [&] {
    for (size_t i = next++; i < items.size(); i = next++) {
      const support::Stopwatch kernel_time;
      const Item& it = items[i];
      KeyManifest m;
      const CacheKey key = kernel_cache_key(*it.kernel, it.arch, &m);
      Result<CacheEntry> got = Status(StatusCode::internal, "not obtained");
      if (std::optional<CacheEntry> hit = cache.lookup(key)) {
        KILN_LOG(debug, "kernel {} ({}): loaded from the cache (key {})", it.kernel->entry, it.arch,
                 key.hex().substr(0, 12));
        got = std::move(*hit);
      } else if (cache.config().assert_hit) {
        got = cache.miss_error(it.kernel->entry, key);
        outcome[i] = KernelEvent::failed;
      } else {
        // One compile per key in this process: the first request compiles, the others wait for it.
        std::promise<Result<CacheEntry>> mine;
        std::shared_future<Result<CacheEntry>> fut;
        bool owner = false;
        {
          std::lock_guard lock(in_flight().mu);
          auto [pos, inserted] = in_flight().by_key.try_emplace(key.hex());
          if (inserted) {
            pos->second = {it.kernel->source, mine.get_future().share()};
            owner = true;
          }
          // Another source under the same key (an XXH3-128 collision, in theory): compiled on its own.
          if (inserted || pos->second.source == it.kernel->source) fut = pos->second.result;
        }
        if (owner) {
          KILN_LOG(info, "kernel {} ({}): compiling with NVRTC: not in the cache (key {})", it.kernel->entry, it.arch,
                   key.hex().substr(0, 12));
          mine.set_value(
              compile_and_store(cache, *it.kernel, it.arch, key, m.text(), options.require_store, &warnings[i]));
          std::lock_guard lock(in_flight().mu);
          in_flight().by_key.erase(key.hex());
        }
        got = fut.valid()
                  ? fut.get()
                  : compile_and_store(cache, *it.kernel, it.arch, key, m.text(), options.require_store, &warnings[i]);
        outcome[i] = got.ok() ? KernelEvent::compiled : KernelEvent::failed;
        if (got.ok()) {
          KILN_LOG(info, "kernel {} ({}): compiled in {:.0f} ms{}", it.kernel->entry, it.arch, kernel_time.ms(),
                   warnings[i].empty() ? ", stored in the cache" : ", not stored: " + warnings[i]);
        }
      }
      if (got.ok()) {
        r.entries[i] = std::move(*got);
      } else {
        errors[i] = fmt::format("{} ({}): {}", it.kernel->entry, it.arch, got.status().message());
        outcome[i] = KernelEvent::failed;
      }
      if (options.on_kernel) {
        std::lock_guard lock(report_mu);
        options.on_kernel({it.kernel, it.arch, outcome[i], kernel_time.ms(), errors[i]});
      }
    }
  };
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int jobs = std::max(1, std::min(options.jobs > 0 ? options.jobs : hw, static_cast<int>(items.size())));
  std::vector<std::thread> pool;
  for (int j = 1; j < jobs; ++j) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  for (size_t i = 0; i < items.size(); ++i) {
    if (!warnings[i].empty()) {
      r.warnings.push_back(fmt::format("{} ({}): {}", items[i].kernel->entry, items[i].arch, warnings[i]));
    }
    switch (outcome[i]) {
      case KernelEvent::cached: ++r.cached; break;
      case KernelEvent::compiled: ++r.compiled; break;
      case KernelEvent::failed:
        ++r.failed;
        r.errors.push_back(errors[i]);
        break;
    }
  }
  r.wall_ms = wall.ms();
  return r;
}

}  // namespace kiln
