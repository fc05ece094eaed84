// `kiln prewarm GRAPH.json... [--arch sm_80,sm_90] [--target h200,a100] [--jobs N] [--layout auto|nchw|nhwc]`:
// plans each graph for every target (a named device, or an arch's default device: kernels are chosen for the
// target's SMs and shared memory, so the cache must be filled for the GPU it will serve) and compiles every
// kernel the cache does not hold yet, in parallel. Needs no GPU.
// A progress bar on a terminal, one line per kernel otherwise; a summary at the end; exit 1 if any failed,
// or if the cache did not keep them all (disabled, read-only, too small, not writable) unless
// --allow-uncached.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.h"
#include "codegen/nvrtc.h"
#include "kiln/json.h"
#include "layout_option.h"
#include "runtime/kernel_provider.h"

namespace kiln::cli {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > at) out.push_back(s.substr(at, end - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

// "sm_80", "sm_90a": sm_ followed by two or three digits and an optional 'a'.
bool looks_like_arch(const std::string& a) {
  if (a.size() < 5 || a.rfind("sm_", 0) != 0) return false;
  size_t i = 3, digits = 0;
  while (i < a.size() && std::isdigit(static_cast<unsigned char>(a[i]))) ++i, ++digits;
  if (i < a.size() && a[i] == 'a') ++i;
  return digits >= 2 && digits <= 3 && i == a.size() && std::stoi(a.substr(3, digits)) >= 80;
}

// Why the cache keeps nothing, or may not have kept everything.
std::string uncached_reason(const KernelCache& cache, const CacheConfig& c) {
  if (c.disabled) return "the cache is disabled: KILN_CACHE_DISABLE";
  if (c.read_only) return "the cache is read-only: KILN_CACHE_READONLY";
  if (std::string p = cache.problem(); !p.empty()) return p;
  return fmt::format("KILN_CACHE_MAX_SIZE is {} bytes, or the cache directory {} is not writable", c.max_size_bytes,
                     c.dir);
}

// How many of the (kernel, arch) pairs prewarm obtained the cache does not hold now (disabled, read-only,
// evicted again at once because the size limit is smaller than they are, or not writable). Read from the
// cache's listing: looking the entries up would count as hits.
int kernels_not_kept(KernelCache& cache, const CacheConfig& config, const std::vector<codegen::Kernel>& kernels,
                     const std::vector<size_t>& per_target, const std::vector<Target>& targets) {
  if (config.disabled) return static_cast<int>(kernels.size());
  std::set<std::pair<std::string, std::string>> held;  // (entry, arch)
  if (auto entries = cache.list(); entries.ok())
    for (const CacheEntry& e : *entries) held.insert({e.kernel_name, e.arch});
  int missing = 0;
  size_t k = 0;
  for (size_t t = 0; t < targets.size(); ++t)
    for (size_t i = 0; i < per_target[t]; ++i, ++k) missing += held.count({kernels[k].entry, targets[t].arch}) ? 0 : 1;
  return missing;
}

}  // namespace

CommandResult cmd_prewarm(const std::vector<std::string>& argv) {
  Args args;
  if (auto e = parse_args("prewarm", argv, {"--arch", "--target", "--jobs", "--layout", "--shape"}, args,
                          {"--allow-uncached"}))
    return {kExitUsage, e};
  if (args.help) {
    fmt::print("{}", help_text());
    return {};
  }
  if (args.positional.empty()) return {kExitUsage, UsageError{"prewarm: missing GRAPH.json (one or more)"}};
  // Targets: every --target device, then every --arch (its default device); neither: sm_80 and sm_90.
  std::vector<Target> targets;
  auto add_targets = [&](const std::string& list, const char* flag) -> std::optional<UsageError> {
    const std::vector<std::string> names = split_commas(list);
    if (names.empty())
      return UsageError{fmt::format("prewarm: {} needs at least one value, e.g. {}", flag,
                                    std::string_view(flag) == "--arch" ? "sm_80,sm_90" : "h200")};
    for (const std::string& x : names) {
      if (std::string_view(flag) == "--arch" && !looks_like_arch(x)) {
        return UsageError{
            fmt::format("prewarm: unknown arch '{}': expected sm_XX with XX >= 80 "
                        "(sm_80, sm_86, sm_89, sm_90, sm_90a, ...)",
                        x)};
      }
      auto t = target_named(x);
      if (!t.ok()) return UsageError{fmt::format("prewarm: {}", t.status().message())};
      // Targets with the same facts get the same kernels (h100 and h200): compiled once.
      if (std::none_of(targets.begin(), targets.end(), [&](const Target& u) { return u.key() == t->key(); }))
        targets.push_back(*t);
    }
    return std::nullopt;
  };
  if (auto t = args.get("--target"))
    if (auto e = add_targets(*t, "--target")) return {kExitUsage, e};
  if (auto a = args.get("--arch"))
    if (auto e = add_targets(*a, "--arch")) return {kExitUsage, e};
  if (targets.empty()) (void)add_targets("sm_80,sm_90", "--arch");
  std::vector<std::string> archs;
  for (const Target& t : targets) archs.push_back(t.arch);
  int jobs = 0;
  if (auto j = args.get("--jobs")) {
    auto [p, ec] = std::from_chars(j->data(), j->data() + j->size(), jobs);
    if (ec != std::errc() || p != j->data() + j->size() || jobs < 1 || jobs > 256) {
      return {kExitUsage, UsageError{fmt::format("prewarm: invalid --jobs '{}': expected an integer in [1, 256]", *j)}};
    }
  }
  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  PlanOptions po;
  if (auto l = args.get("--layout")) {
    auto p = parse_layout_policy(*l);
    if (!p) return {kExitUsage, UsageError{layout_usage_message(*l)}};
    po.layout = *p;
  }

  auto config = CacheConfig::from_env();
  if (!config.ok()) {
    print_error(config.status());
    return {kExitInvalid, {}};
  }
  auto cache = KernelCache::open(*config);
  if (!cache.ok()) {
    print_error(cache.status());
    return {kExitInvalid, {}};
  }

  // Every graph, loaded once (each is planned once per target).
  std::vector<Graph> graphs;
  for (const std::string& path : args.positional) {
    auto g = load_graph_file(path, onnx);
    if (!g.ok()) {
      print_error(g.status(), path);
      return {kExitInvalid, {}};
    }
    graphs.push_back(std::move(*g));
  }

  // Every graph's distinct kernels for each target; the same kernel in several graphs is compiled once.
  std::vector<codegen::Kernel> kernels;
  std::vector<size_t> per_target;                      // kernels of each target, in `targets` order
  std::set<std::pair<std::string, std::string>> seen;  // (target facts and arch, source): the cache key's parts
  for (const Target& target : targets) {
    po.target = target;
    size_t of_target = 0;
    for (size_t gi = 0; gi < graphs.size(); ++gi) {
      const std::string& path = args.positional[gi];
      auto plan = plan_graph(graphs[gi], po);
      if (!plan.ok()) {
        print_error(plan.status(), path);
        return {kExitInvalid, {}};
      }
      auto ks = plan_kernels(*plan);
      if (!ks.ok()) {
        print_error(ks.status(), path);
        return {kExitInvalid, {}};
      }
      int fresh = 0;
      for (codegen::Kernel& k : *ks) {
        if (!seen.insert({target.key(), k.source}).second) continue;
        kernels.push_back(std::move(k));
        ++fresh, ++of_target;
      }
      const auto transforms = std::count_if(plan->groups.begin(), plan->groups.end(),
                                            [](const Group& x) { return x.kind == GroupKind::weight_transform; });
      fmt::print("{} ({}, {}): {} kernel groups + {} weight transforms, {} distinct kernels ({} new)\n", path,
                 target.name, target.arch, plan->kernel_count(), transforms, ks->size(), fresh);
    }
    per_target.push_back(of_target);
  }
  fmt::print("cache: {}\n", config->disabled ? std::string("disabled") : config->dir);
  std::fflush(stdout);

  const bool tty = isatty(STDOUT_FILENO) == 1;
  const int total = static_cast<int>(kernels.size());
  int done = 0;
  ObtainOptions oo;
  oo.jobs = jobs;
  // Filling the cache is the point: a kernel that cannot be stored has failed, unless --allow-uncached.
  oo.require_store = !args.has("--allow-uncached");
  oo.on_kernel = [&](const KernelEvent& e) {
    ++done;
    const char* what = e.outcome == KernelEvent::cached     ? "cached"
                       : e.outcome == KernelEvent::compiled ? "compiled"
                                                            : "FAILED";
    if (tty) {
      const int width = 30, filled = total ? done * width / total : width;
      fmt::print("\r[{}{}] {}/{} {} {:<60.60}", std::string(static_cast<size_t>(filled), '='),
                 std::string(static_cast<size_t>(width - filled), ' '), done, total, e.arch, e.kernel->entry);
      if (done == total) fmt::print("\n");
    } else {
      fmt::print("[{}/{}] {} {} {} ({:.0f} ms)\n", done, total, what, e.arch, e.kernel->entry, e.ms);
    }
    std::fflush(stdout);
  };
  // Each target's kernels for its own arch (one provider run per target; their counts add up).
  ObtainResult r;
  size_t from = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    const std::vector<codegen::Kernel> mine(kernels.begin() + static_cast<std::ptrdiff_t>(from),
                                            kernels.begin() + static_cast<std::ptrdiff_t>(from + per_target[t]));
    from += per_target[t];
    oo.archs = {targets[t].arch};
    const ObtainResult part = obtain_kernels(*cache, mine, oo);
    r.total += part.total, r.cached += part.cached, r.compiled += part.compiled, r.failed += part.failed;
    r.wall_ms += part.wall_ms;
    r.errors.insert(r.errors.end(), part.errors.begin(), part.errors.end());
  }
  for (const std::string& err : r.errors) print_error(err);
  fmt::print("kernels: {} total, {} already cached, {} compiled, {} failed\n", r.total, r.cached, r.compiled, r.failed);
  fmt::print("wall time: {:.2f} s ({} jobs, archs {})\n", r.wall_ms / 1000.0,
             jobs > 0 ? jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
             fmt::join(archs, ","));
  fmt::print("nvrtc: {}\n", codegen::nvrtc_loaded() ? "loaded" : "not loaded");
  if (r.failed > 0) return {kExitInvalid, {}};
  // A prewarm is for the runs after it: kernels it compiled but could not keep are an error of its own.
  const int missing = kernels_not_kept(*cache, *config, kernels, per_target, targets);
  if (missing > 0 && !args.has("--allow-uncached")) {
    print_error(
        fmt::format("prewarm: {} of {} kernels are not in the cache afterwards ({}): later runs will compile "
                    "them; pass --allow-uncached to accept that",
                    missing, r.total, uncached_reason(*cache, *config)));
    return {kExitInvalid, {}};
  }
  return {kExitOk, {}};
}

}  // namespace kiln::cli
