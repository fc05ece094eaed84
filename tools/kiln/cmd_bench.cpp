// `kiln bench GRAPH [--device auto] [--iterations N] [--duration S] [--warmup N] [--cuda-graph] [--trace F]
// [--json]`: times
// a graph's runs and each of its kernels, as trtexec does for TensorRT engines. Compiles once (kernels from the
// cache or NVRTC), uploads the inputs once, runs --warmup untimed runs, then at least --iterations runs and at
// least --duration seconds of them, and prints the median, p10 and p90 of a run and of each kernel.
//
// What is measured: on cuda a run is the host's wall time from enqueueing it to the stream finishing
// (synchronized after every run: launch overhead included; --cuda-graph replays a captured graph instead of
// launching kernel by kernel), and each kernel's time comes from CUDA events around it in separate timed runs
// (one kernel at a time). On emu and ref everything is the CPU's wall time: the emulator's times say how long
// the CPU took to emulate a kernel, nothing about a GPU, and are labelled so.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "json_output.h"
#include "kiln/engine.h"
#include "kiln/kernel_kinds.h"
#include "kiln/reference.h"
#include "output_file.h"
#include "progress.h"
#include "run_setup.h"
#include "support/env.h"
#include "trace.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Nearest-rank percentile of `v` (sorted copy), p in [0, 100].
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::max(1.0, std::ceil(p / 100.0 * static_cast<double>(v.size()))));
  return v[std::min(rank, v.size()) - 1];
}

struct Summary {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
};
Summary summarize(const std::vector<double>& v) {
  Summary s;
  if (v.empty()) return s;
  s.median = percentile(v, 50), s.p10 = percentile(v, 10), s.p90 = percentile(v, 90);
  s.min = *std::min_element(v.begin(), v.end()), s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}
Json summary_json(const Summary& s) {
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}, {"min", s.min}, {"max", s.max}, {"mean", s.mean}};
}

std::optional<int64_t> positive(const Args& args, std::string_view flag, std::optional<UsageError>& error) {
  auto v = args.get(flag);
  if (!v) return std::nullopt;
  auto n = support::parse_positive_int(*v, flag);
  if (!n.ok()) {
    error = UsageError{n.status().message()};
    return std::nullopt;
  }
  return *n;
}

// One kernel launch of the plan and its times over the timed runs.
struct KernelRow {
  int group = -1;
  std::string entry;
  std::vector<double> ms;
};

CommandResult bench(const Args& args) {
  std::optional<UsageError> error;
  const auto iterations_arg = positive(args, "--iterations", error);
  int64_t warmup = -1;  // unset: 10 on a GPU, 1 on emu (below)
  if (auto w = args.get("--warmup")) {
    auto n = support::parse_int_at_least(*w, "--warmup", 0);  // 0 times the first run (cold caches) too
    if (!n.ok()) return {kExitUsage, UsageError{n.status().message()}};
    warmup = *n;
  }
  double duration_s = -1;
  if (auto d = args.get("--duration")) {
    char* end = nullptr;
    duration_s = std::strtod(d->c_str(), &end);
    if (d->empty() || *end != '\0' || !(duration_s > 0) || duration_s > 86400) {
      return {kExitUsage, UsageError{fmt::format("invalid --duration '{}': expected seconds, e.g. 3 or 0.5", *d)}};
    }
  }
  if (error) return {kExitUsage, error};
  const std::optional<std::string> trace_path = args.get("--trace");
  if (trace_path) {
    if (std::string problem = output_file_problem("--trace", *trace_path, {args.positional[0]}); !problem.empty())
      return {kExitUsage, UsageError{problem}};
  }
  auto prepared = prepare_run(args, "bench", DeviceKind::automatic);
  if (auto* r = std::get_if<CommandResult>(&prepared)) return *r;
  RunSetup& setup = std::get<RunSetup>(prepared);
  const DeviceKind device = setup.engine ? setup.engine->device() : DeviceKind::ref;
  const bool gpu = device == DeviceKind::cuda;
  bool cuda_graph = args.has("--cuda-graph");
  std::vector<std::string> notes;
  if (cuda_graph && !gpu) {
    if (setup.device == DeviceKind::automatic) {
      notes.push_back("--cuda-graph ignored: no GPU here, running on emu");
      cuda_graph = false;
    } else {
      return {kExitUsage, UsageError{"bench: --cuda-graph needs --device cuda (or auto on a machine with a GPU)"}};
    }
  }
  if (setup.device == DeviceKind::automatic && !gpu) {
    notes.push_back("no GPU here: running on emu, the CUDA kernels emulated on the CPU");
  }
  // Defaults like trtexec's on a GPU (3 s, at least 10 runs); on the CPU a run takes long: 5 runs.
  const int64_t min_iterations = iterations_arg.value_or(gpu ? 10 : 5);
  const double min_ms = duration_s > 0 ? duration_s * 1000 : (gpu && !iterations_arg ? 3000 : 0);
  if (warmup < 0) warmup = gpu ? 10 : 1;

  // Compile once; the inputs uploaded once.
  std::optional<Executable> exe;
  std::optional<BoundBuffers> buffers;
  if (setup.engine) {
    CompileOptions co;
    co.plan.layout = setup.layout;
    co.cuda_graph = cuda_graph;
    auto compiled = setup.engine->compile(setup.graph, co);
    if (!compiled.ok()) {
      print_error(compiled.status(), setup.path);
      return {kExitInvalid, {}};
    }
    exe.emplace(std::move(compiled).value());
    for (const std::string& w : exe->report().warnings) fmt::print(stderr, "warning: {}\n", w);
    auto b = upload_bindings(*setup.engine, exe->plan().graph, setup.inputs);
    if (!b.ok()) {
      print_error(b.status());
      return {kExitInvalid, {}};
    }
    buffers.emplace(std::move(b).value());
  }
  // One run; `timed`: every kernel timed (the report's kernel_times).
  auto run_once = [&](bool timed, RunReport* report) -> Status {
    if (!exe) return run_reference(setup.graph, setup.inputs).status();
    RunOptions ro;
    ro.time_kernels = timed;
    KILN_RETURN_IF_ERROR(exe->run(buffers->bindings, nullptr, report, ro));
    return setup.engine->synchronize();
  };
  for (int64_t i = 0; i < warmup; ++i) {
    if (Status s = run_once(false, nullptr); !s.ok()) {
      print_error(s, setup.path);
      return {kExitInvalid, {}};
    }
  }
  // The timed runs. On the CPU the kernels are timed in the same runs (they run one after another anyway);
  // on a GPU in runs of their own, after, so that the run times are those of a stream kept full.
  std::vector<double> run_ms;
  std::vector<TracedRun> traced;        // --trace
  std::map<size_t, KernelRow> kernels;  // launch index -> times
  auto record = [&](const RunReport& rep) {
    for (size_t k = 0; k < rep.kernel_times.size(); ++k) {
      KernelRow& row = kernels[k];
      row.group = rep.kernel_times[k].group, row.entry = rep.kernel_times[k].entry;
      row.ms.push_back(rep.kernel_times[k].ms);
    }
  };
  const auto start = Clock::now();
  {
    Progress progress(static_cast<int>(min_iterations));
    while (static_cast<int64_t>(run_ms.size()) < min_iterations || ms_since(start) < min_ms) {
      RunReport rep;
      const auto t0 = Clock::now();
      if (Status s = run_once(!gpu && exe.has_value(), &rep); !s.ok()) {
        print_error(s, setup.path);
        return {kExitInvalid, {}};
      }
      run_ms.push_back(ms_since(t0));
      record(rep);
      if (trace_path) traced.push_back({ms_between(start, t0), run_ms.back(), std::move(rep.kernel_times)});
      progress.step(static_cast<int>(std::min<int64_t>(static_cast<int64_t>(run_ms.size()), min_iterations)),
                    fmt::format("run {}: {:.3f} ms", run_ms.size(), run_ms.back()));
    }
  }
  const double total_ms = ms_since(start);
  if (gpu) {
    const int64_t timed_runs = std::min<int64_t>(static_cast<int64_t>(run_ms.size()), 50);
    for (int64_t i = 0; i < timed_runs; ++i) {
      RunReport rep;
      const auto t0 = Clock::now();
      if (Status s = run_once(true, &rep); !s.ok()) {
        print_error(s, setup.path);
        return {kExitInvalid, {}};
      }
      record(rep);
      if (trace_path) traced.push_back({ms_between(start, t0), ms_since(t0), std::move(rep.kernel_times)});
    }
  }
  if (trace_path) {
    const TraceInfo info{"bench",
                         setup.path,
                         setup.graph.name(),
                         std::string(device_kind_name(device)),
                         setup.engine ? setup.engine->device_name() : "the reference",
                         gpu};
    if (Status s = write_output_file(*trace_path, trace_document(info, exe ? &exe->plan() : nullptr, traced).dump());
        !s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
  }

  const Summary run = summarize(run_ms);
  double kernel_sum = 0;
  for (const auto& [i, row] : kernels) kernel_sum += summarize(row.ms).median;
  const std::string clock = gpu ? "GPU" : "CPU";
  const char* run_clock = gpu ? "host wall time, enqueue to stream finished" : "CPU wall time";
  const Plan* plan = exe ? &exe->plan() : nullptr;
  auto group_of = [&](int g) -> const Group* {
    return plan && g >= 0 && g < static_cast<int>(plan->groups.size()) ? &plan->group(g) : nullptr;
  };

  if (global_options().json) {
    Json doc = json_document("bench");
    doc["graph"] = setup.path;
    doc["name"] = setup.graph.name();
    doc["device"] = device_kind_name(device);
    doc["device_name"] = setup.engine ? setup.engine->device_name() : "the reference (f64, op by op)";
    doc["clock"] = clock;
    doc["notes"] = notes;
    doc["cuda_graph"] = cuda_graph;
    doc["warmup_runs"] = warmup;
    doc["runs"] = run_ms.size();
    doc["total_ms"] = total_ms;
    doc["run_ms"] = summary_json(run);
    doc["run_clock"] = run_clock;
    Json ks = Json::array();
    for (const auto& [i, row] : kernels) {
      const Group* grp = group_of(row.group);
      Json k{{"launch", i},
             {"group", row.group},
             {"kind", grp ? Json(group_kind_name(grp->kind)) : Json(nullptr)},
             {"family", grp ? Json(kernel_family_name(grp->family)) : Json(nullptr)},
             {"entry", row.entry},
             {"samples", row.ms.size()}};
      k["ms"] = summary_json(summarize(row.ms));
      ks.push_back(std::move(k));
    }
    doc["kernels"] = std::move(ks);
    doc["kernel_ms_sum"] = kernel_sum;
    print_json(doc);
    return {};
  }
  fmt::print("graph: {}\n", setup.graph.name());
  fmt::print("device: {} ({})\n", device_kind_name(device),
             setup.engine ? setup.engine->device_name() : "the reference, op by op in f64");
  for (const std::string& n : notes) fmt::print("note: {}\n", n);
  if (!gpu) fmt::print("note: every time below is the CPU's wall time, not a GPU's\n");
  if (exe) {
    const CompileReport& r = exe->report();
    fmt::print("kernels: {} per run, {} distinct{}\n", r.launches, r.distinct_kernels,
               cuda_graph ? ", replayed as a CUDA graph" : "");
  }
  fmt::print("runs: {} warm-up, {} timed in {:.2f} s\n", warmup, run_ms.size(), total_ms / 1000);
  fmt::print("run ({}): median {:.3f} ms, p10 {:.3f} ms, p90 {:.3f} ms, min {:.3f} ms, max {:.3f} ms\n", run_clock,
             run.median, run.p10, run.p90, run.min, run.max);
  if (!kernels.empty()) {
    const size_t samples = kernels.begin()->second.ms.size();
    fmt::print("kernels ({} time, {}, {} samples each):\n", clock, gpu ? "CUDA events" : "wall", samples);
    std::vector<std::vector<std::string>> rows{
        {"#", "group", "kind", "family", "entry", "median ms", "p10 ms", "p90 ms", "share"}};
    for (const auto& [i, row] : kernels) {
      const Summary s = summarize(row.ms);
      const Group* grp = group_of(row.group);
      rows.push_back({std::to_string(i), std::to_string(row.group), grp ? std::string(group_kind_name(grp->kind)) : "-",
                      grp ? std::string(kernel_family_name(grp->family)) : "-", row.entry,
                      fmt::format("{:.3f}", s.median), fmt::format("{:.3f}", s.p10), fmt::format("{:.3f}", s.p90),
                      kernel_sum > 0 ? fmt::format("{:.1f} %", 100 * s.median / kernel_sum) : "-"});
    }
    print_table(rows, 2);
    fmt::print("sum of kernel medians: {:.3f} ms ({:.1f} % of the run's median)\n", kernel_sum,
               run.median > 0 ? 100 * kernel_sum / run.median : 0.0);
  } else {
    fmt::print("kernels: none timed (ref runs the graph op by op)\n");
  }
  return {};
}

}  // namespace

CommandSpec bench_command() {
  std::vector<OptionSpec> options = run_setup_options(/*device_required=*/false);
  options.insert(options.begin() + 1,
                 {{"--iterations", "N", "time at least N runs (default: 10 on a GPU, 5 on the CPU)"},
                  {"--duration", "S", "time runs for at least S seconds (default: 3 on a GPU with no --iterations)"},
                  {"--warmup", "N", "untimed runs first (default: 10 on a GPU, 1 on the CPU)"},
                  {"--cuda-graph", "", "cuda: capture a run into a CUDA graph and replay it (cuts launch overhead)"}});
  options.push_back({"--no-progress", "", "no progress lines on stderr"});
  options.push_back({"--trace", "FILE.json",
                     "write the timed runs' kernel launches as a Chrome trace (opens in Perfetto; docs/cli.md)"});
  options.push_back({"--json", "", "the times as JSON: schema kiln.bench/1 (docs/cli.md)"});
  return {.name = "bench",
          .summary = "time a graph's runs and each of its kernels: median, p10, p90 (like trtexec)",
          .positional = "GRAPH",
          .positional_help = kGraphHelp,
          .options = std::move(options),
          .footer =
              "On cuda, run times are the host's (enqueue to finished) and kernel times come from CUDA "
              "events;\non emu and ref every time is the CPU's wall time (labelled so).",
          .run = bench};
}

}  // namespace kiln::cli
