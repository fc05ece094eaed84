// `kiln prewarm GRAPH... [--arch sm_80,sm_90] [--target h200,a100] [--jobs N] [--layout auto|nchw|nhwc]`:
// plans each graph for every target (a named device, or an arch's default device: kernels are chosen for the
// target's SMs and shared memory, so the cache must be filled for the GPU it will serve) and compiles every
// kernel the cache does not hold yet, in parallel (kiln::prewarm, include/kiln/prewarm.h). Needs no GPU.
// Progress on stderr; a summary on stdout (or --json); exit 1 if any failed, or if the cache did not keep
// them all (disabled, read-only, too small, not writable) unless --allow-uncached.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli.h"
#include "json_output.h"
#include "kiln/prewarm.h"
#include "layout_option.h"
#include "progress.h"

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

CommandResult prewarm_graphs(const Args& args) {
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

  DimValues dims;
  if (auto e = parse_dims_option(args, dims)) return {kExitUsage, e};

  // Every graph, loaded once (each is planned once per target); a symbolic one once per combination of
  // its dims' values (--dims N=1,8,32).
  std::vector<Graph> graphs;
  std::vector<std::string> names;
  std::set<std::string, std::less<>> used;
  for (const std::string& path : args.positional) {
    auto g = load_graph_file(path, onnx);
    if (!g.ok()) {
      print_error(g.status(), path);
      return {kExitInvalid, {}};
    }
    if (!g->is_symbolic()) {
      graphs.push_back(std::move(*g));
      names.push_back(path);
      continue;
    }
    std::vector<DimBindings> all(1);
    for (const auto& [sym, r] : g->dim_ranges()) {
      auto it = dims.find(sym);
      if (it == dims.end()) {
        print_error(unbound_dims_error(*g), path);
        return {kExitInvalid, {}};
      }
      used.insert(sym);
      std::vector<DimBindings> next;
      for (const DimBindings& b : all) {
        for (int64_t v : it->second) {
          DimBindings c = b;
          c[sym] = v;
          next.push_back(std::move(c));
        }
      }
      all = std::move(next);
      if (all.size() > 4096) {
        print_error(fmt::format("--dims: more than 4096 combinations of values for graph '{}'", g->name()), path);
        return {kExitUsage, {}};
      }
    }
    for (const DimBindings& b : all) {
      auto bound = g->bind(b);
      if (!bound.ok()) {
        print_error(bound.status(), path);
        return {kExitInvalid, {}};
      }
      std::string at;
      for (const auto& [sym, v] : b) at += fmt::format("{}{}={}", at.empty() ? "" : ",", sym, v);
      graphs.push_back(std::move(*bound));
      names.push_back(fmt::format("{} ({})", path, at));
    }
  }
  for (const auto& [sym, values] : dims) {
    if (!used.count(sym)) {
      return {kExitUsage, UsageError{fmt::format("--dims {}: no graph given has a dim '{}'", sym, sym)}};
    }
  }

  PrewarmOptions options;
  options.targets = targets;
  options.plan = po;
  options.jobs = jobs;
  options.names = names;
  // Filling the cache is the point: a kernel that cannot be stored has failed, unless --allow-uncached.
  const bool allow_uncached = args.has("--allow-uncached");
  options.require_store = !allow_uncached;
  std::optional<Progress> progress;
  options.on_kernel = [&](const PrewarmEvent& e) {
    if (!progress) progress.emplace(e.total);
    const char* what = e.outcome == PrewarmEvent::cached     ? "cached"
                       : e.outcome == PrewarmEvent::compiled ? "compiled"
                                                             : "FAILED";
    progress->step(e.done, fmt::format("{} {} {} ({:.0f} ms)", what, e.arch, e.entry, e.ms));
  };
  auto r = prewarm(graphs, options);
  if (progress) progress->finish();
  if (!r.ok()) {
    print_error(r.status());
    return {kExitInvalid, {}};
  }
  for (const std::string& err : r->errors) print_error(err);
  const bool not_kept = r->failed == 0 && r->not_kept > 0;
  if (not_kept && !allow_uncached) {
    print_error(
        fmt::format("prewarm: {} of {} kernels are not in the cache afterwards ({}): later runs will compile "
                    "them; pass --allow-uncached to accept that",
                    r->not_kept, r->total, r->not_kept_reason));
  } else if (not_kept) {
    fmt::print(stderr, "warning: prewarm: {} of {} kernels are not in the cache afterwards ({})\n", r->not_kept,
               r->total, r->not_kept_reason);
  }
  const bool ok = r->failed == 0 && (!not_kept || allow_uncached);
  if (global_options().json) {
    Json doc = json_document("prewarm");
    doc["ok"] = ok;
    Json lines = Json::array();
    for (const PrewarmGraph& g : r->graphs) {
      lines.push_back({{"graph", g.name},
                       {"target", g.target},
                       {"arch", g.arch},
                       {"kernel_groups", g.kernel_groups},
                       {"weight_transforms", g.weight_transforms},
                       {"distinct_kernels", g.distinct_kernels},
                       {"new_kernels", g.fresh},
                       {"plan_cached", g.plan_cached}});
    }
    doc["graphs"] = std::move(lines);
    doc["archs"] = r->archs;
    doc["cache_dir"] = r->cache_dir.empty() ? Json(nullptr) : Json(r->cache_dir);
    doc["kernels"] = {{"total", r->total},
                      {"cached", r->cached},
                      {"compiled", r->compiled},
                      {"failed", r->failed},
                      {"not_kept", r->not_kept}};
    doc["not_kept_reason"] = r->not_kept_reason;
    doc["errors"] = r->errors;
    doc["wall_s"] = r->wall_ms / 1000.0;
    doc["jobs"] = r->jobs;
    doc["nvrtc_loaded"] = r->nvrtc_loaded;
    print_json(doc);
  } else {
    for (const PrewarmGraph& g : r->graphs) {
      fmt::print("{} ({}, {}): {} kernel groups + {} weight transforms, {} distinct kernels ({} new){}\n", g.name,
                 g.target, g.arch, g.kernel_groups, g.weight_transforms, g.distinct_kernels, g.fresh,
                 g.plan_cached ? "; plan from the plan cache" : "");
    }
    fmt::print("cache: {}\n", r->cache_dir.empty() ? std::string("disabled") : r->cache_dir);
    fmt::print("kernels: {} total, {} already cached, {} compiled, {} failed{}\n", r->total, r->cached, r->compiled,
               r->failed, r->not_kept ? fmt::format(", {} not kept by the cache", r->not_kept) : "");
    fmt::print("wall time: {:.2f} s ({} jobs, archs {})\n", r->wall_ms / 1000.0, r->jobs, fmt::join(r->archs, ","));
    fmt::print("nvrtc: {}\n", r->nvrtc_loaded ? "loaded" : "not loaded");
  }
  return {ok ? kExitOk : kExitInvalid, {}};
}

}  // namespace

CommandSpec prewarm_command() {
  return {.name = "prewarm",
          .summary =
              "compile every kernel of the graphs with NVRTC into the kernel cache, for each target GPU (no GPU "
              "needed)",
          .positional = "GRAPH",
          .positional_help = "one or more kiln graphs (.json) or ONNX models (.onnx)",
          .positionals = -1,
          .options =
              {{"--arch", "A,B",
                "the GPU archs to compile for, each for its default device (sm_80: a100, sm_86: a10, sm_89: l4, sm_90 "
                "and sm_90a: h200; default sm_80,sm_90)"},
               {"--target", "T,U",
                "devices to compile for (h200, h100, a100, a10, l4): kernels are planned for a device's SMs and shared "
                "memory, so prewarm for the GPU that will run them"},
               {"--jobs", "N", "parallel compiles (default: the number of CPU threads)"},
               {"--layout", "L", "the planner's layout policy: auto (default), nchw or nhwc"},
               {"--shape", "NAME=DIMS", "ONNX: fix the dims of an input the models leave open (1x3x224x224)"},
               {"--dim-range", "NAME=LO..HI",
                "ONNX: the range of an open dim the model names (default 1..1024), e.g. batch=1..64"},
               {"--dims", "NAME=VALUES",
                "values of the graphs' symbolic dims, each combination prewarmed: N=1,8,32 or N=1..64"},
               {"--allow-uncached", "",
                "exit 0 although the cache did not keep the kernels (disabled, read-only, too small)"},
               {"--no-progress", "", "no progress lines on stderr"},
               {"--json", "", "the summary as JSON: schema kiln.prewarm/1 (docs/cli.md)"}},
          .footer =
              "The cache directory and its switches come from KILN_CACHE_DIR, KILN_CACHE_READONLY, "
              "KILN_CACHE_DISABLE,\nKILN_CACHE_MAX_SIZE, KILN_CACHE_ASSERT_HIT and KILN_SAVE_SOURCE "
              "(docs/cache.md).",
          .run = prewarm_graphs};
}

}  // namespace kiln::cli
