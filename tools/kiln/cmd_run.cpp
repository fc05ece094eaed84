// `kiln run GRAPH.json --device ref ...`: runs a graph on random or given inputs and prints statistics of
// its outputs.
#include <charconv>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "json_output.h"
#include "kiln/compare.h"
#include "kiln/emu.h"
#include "kiln/engine.h"
#include "kiln/host_tensor.h"
#include "kiln/json.h"
#include "kiln/npy.h"
#include "kiln/plan.h"
#include "kiln/reference.h"
#include "output_file.h"
#include "run_setup.h"
#include "trace.h"

namespace kiln::cli {
namespace {

std::string files(size_t n) { return fmt::format("{} file{}", n, n == 1 ? "" : "s"); }

std::string num(double v) { return fmt::format("{:.6g}", v); }

void print_output_stats(const Graph& g, const std::vector<TensorStats>& stats) {
  std::vector<std::vector<std::string>> rows{{"name", "shape", "dtype", "min", "max", "mean", "std"}};
  bool non_finite = false;
  size_t i = 0;
  for (Tensor t : g.outputs()) {
    const TensorInfo& info = g.tensor(t);
    const TensorStats& st = stats[i++];
    non_finite = non_finite || st.nan_count > 0 || st.inf_count > 0;
    rows.push_back({info.name, info.shape.to_string(), std::string(dtype_name(info.dtype)), num(st.min), num(st.max),
                    num(st.mean), num(st.std)});
  }
  if (non_finite) {
    rows[0].insert(rows[0].end(), {"nan", "inf"});
    for (size_t k = 0; k < stats.size(); ++k) {
      rows[k + 1].insert(rows[k + 1].end(),
                         {fmt::format("{}", stats[k].nan_count), fmt::format("{}", stats[k].inf_count)});
    }
  }
  fmt::print("outputs:\n");
  print_table(rows, 2);
}

void print_checks(const Graph& g, const std::vector<Comparison>& checks) {
  std::vector<std::vector<std::string>> rows{
      {"name", "dtype", "max abs error", "max rel error", "rel L2", "tolerance", "result"}};
  size_t i = 0;
  for (Tensor t : g.outputs()) {
    const TensorInfo& info = g.tensor(t);
    const Tolerance tol = output_tolerance_for(g, t);
    const Comparison& c = checks[i++];
    rows.push_back({info.name, std::string(dtype_name(info.dtype)), fmt::format("{:.3g}", c.max_abs_error),
                    fmt::format("{:.3g}", c.max_rel_error), fmt::format("{:.3g}", c.rel_l2),
                    fmt::format("rtol {:g} atol {:g} on rms {:.3g}", tol.rtol, tol.atol, c.ref_rms),
                    c.ok ? "ok" : "FAIL: " + c.problem});
  }
  fmt::print("check against ref:\n");
  print_table(rows, 2);
}
CommandResult run(const Args& args) {
  const bool check = args.has("--check");
  auto prepared = prepare_run(args, "run", std::nullopt);
  if (auto* r = std::get_if<CommandResult>(&prepared)) return *r;
  RunSetup& setup = std::get<RunSetup>(prepared);
  const Graph* g = &setup.graph;
  TensorMap& inputs = setup.inputs;
  std::optional<Engine>& engine = setup.engine;
  const std::optional<std::string>& inputs_dir = setup.inputs_dir;
  const uint64_t seed = setup.seed;
  const bool json = global_options().json;
  const std::optional<std::string> trace_path = args.get("--trace");
  if (trace_path && !engine) {
    return {kExitUsage, UsageError{"--trace: ref runs the graph op by op, with no kernels to trace (give --device emu "
                                   "or cuda)"}};
  }
  if (trace_path) {
    if (std::string problem = output_file_problem("--trace", *trace_path, {setup.path}); !problem.empty())
      return {kExitUsage, UsageError{problem}};
  }
  if (auto dir = args.get("--save-inputs")) {
    Status s = save_tensors(*dir, inputs);
    if (!s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
  }

  auto start = std::chrono::steady_clock::now();
  Result<TensorMap> outputs = Status(StatusCode::internal, "not run");
  std::optional<Executable> exe;
  double run_ms = 0;
  if (engine) {
    CompileOptions co;
    co.plan.layout = setup.layout;
    auto compiled = engine->compile(*g, co);
    if (!compiled.ok()) {
      print_error(compiled.status(), setup.path);
      return {kExitInvalid, {}};
    }
    exe.emplace(std::move(compiled).value());
    for (const std::string& w : exe->report().warnings) fmt::print(stderr, "warning: {}\n", w);
    auto t0 = std::chrono::steady_clock::now();
    RunReport report;
    RunOptions ro;
    ro.time_kernels = trace_path.has_value();
    outputs = run_on_host_tensors(*engine, *exe, inputs, &report, ro);
    run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (trace_path && outputs.ok()) {
      const TraceInfo info{"run",
                           setup.path,
                           g->name(),
                           std::string(device_kind_name(engine->device())),
                           engine->device_name(),
                           engine->device() == DeviceKind::cuda};
      const Json doc = trace_document(info, &exe->plan(), {TracedRun{0, run_ms, std::move(report.kernel_times)}});
      if (Status s = write_output_file(*trace_path, doc.dump()); !s.ok()) {
        print_error(s);
        return {kExitInvalid, {}};
      }
    }
  } else {
    outputs = run_reference(*g, inputs);
  }
  auto stop = std::chrono::steady_clock::now();
  if (!outputs.ok()) {
    print_error(outputs.status());
    return {kExitInvalid, {}};
  }

  // Each output's statistics; with --check, each output against the reference.
  std::vector<TensorStats> stats;
  for (Tensor t : g->outputs()) {
    auto it = outputs->find(g->tensor(t).name);
    KILN_CHECK(it != outputs->end(), "the run returned no tensor for output '" + g->tensor(t).name + "'");
    stats.push_back(tensor_stats(it->second));
  }
  if (auto dir = args.get("--save-outputs")) {
    Status s = save_tensors(*dir, *outputs);
    if (!s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(stop - start).count();
  std::vector<Comparison> checks;
  if (check) {
    // --check: the same inputs through the reference, every output compared with the tolerance of the least precise
    // dtype it is computed through.
    auto want = run_reference(*g, inputs);
    if (!want.ok()) {
      print_error(want.status());
      return {kExitInvalid, {}};
    }
    for (Tensor t : g->outputs()) {
      const TensorInfo& info = g->tensor(t);
      checks.push_back(compare_tensors(outputs->at(info.name), want->at(info.name), output_tolerance_for(*g, t)));
    }
  }
  const auto failed = std::count_if(checks.begin(), checks.end(), [](const Comparison& c) { return !c.ok; });
  size_t from_files = 0;  // with --inputs: the rest are the graph's own parameter values
  if (inputs_dir) {
    for (const auto& [name, t] : inputs) {
      auto path = npy_path(*inputs_dir, name);
      std::error_code ec;
      from_files += path.ok() && std::filesystem::exists(*path, ec);
    }
  }

  if (json) {
    Json doc = json_document("run");
    doc["graph"] = setup.path;
    doc["name"] = g->name();
    doc["device"] = engine ? device_kind_name(engine->device()) : "ref";
    doc["device_name"] = engine ? engine->device_name() : "the reference (f64, op by op)";
    if (exe) {
      const CompileReport& r = exe->report();
      doc["compile"] = {{"arch", r.arch},
                        {"groups", r.groups},
                        {"launches", r.launches},
                        {"distinct_kernels", r.distinct_kernels},
                        {"weight_transforms", r.weight_transforms},
                        {"cache_hits", r.cache_hits},
                        {"compiled", r.compiled},
                        {"ptx_loaded", r.ptx_loaded},
                        {"host_compiled", r.host_compiled},
                        {"plan_cached", r.plan_cached},
                        {"plan_ms", r.plan_ms},
                        {"codegen_ms", r.codegen_ms},
                        {"obtain_ms", r.obtain_ms},
                        {"load_ms", r.load_ms},
                        {"run_ms", run_ms},
                        {"workspace_bytes", r.workspace_bytes},
                        {"warnings", r.warnings}};
    } else {
      doc["compile"] = nullptr;
    }
    doc["inputs"] = inputs_dir ? Json{{"source", "files"}, {"dir", *inputs_dir}, {"from_files", from_files}}
                               : Json{{"source", "random"}, {"seed", seed}};
    doc["inputs"]["own_values"] = g->values().size();
    Json outs = Json::array();
    size_t i = 0;
    for (Tensor t : g->outputs()) {
      const TensorInfo& info = g->tensor(t);
      const TensorStats& st = stats[i];
      Json o{{"name", info.name},
             {"shape", std::vector<int64_t>(info.shape.dims().begin(), info.shape.dims().end())},
             {"dtype", dtype_name(info.dtype)},
             {"min", st.min},
             {"max", st.max},
             {"mean", st.mean},
             {"std", st.std},
             {"nan", st.nan_count},
             {"inf", st.inf_count}};
      if (check) {
        const Comparison& c = checks[i];
        const Tolerance tol = output_tolerance_for(*g, t);
        o["check"] = {{"max_abs_error", c.max_abs_error},
                      {"max_rel_error", c.max_rel_error},
                      {"rel_l2", c.rel_l2},
                      {"ref_rms", c.ref_rms},
                      {"rtol", tol.rtol},
                      {"atol", tol.atol},
                      {"ok", c.ok},
                      {"problem", c.problem}};
      }
      outs.push_back(std::move(o));
      ++i;
    }
    doc["outputs"] = std::move(outs);
    doc["check"] = check ? Json(failed == 0) : Json(nullptr);
    doc["saved_inputs"] = args.get("--save-inputs") ? Json(*args.get("--save-inputs")) : Json(nullptr);
    doc["saved_outputs"] = args.get("--save-outputs") ? Json(*args.get("--save-outputs")) : Json(nullptr);
    doc["time_ms"] = ms;
    print_json(doc);
  } else {
    fmt::print("graph: {}\n", g->name());
    if (engine) {
      fmt::print("device: {} ({})\n", device_kind_name(engine->device()), engine->device_name());
      const CompileReport& r = exe->report();
      const std::string origin =
          engine->device() == DeviceKind::emu
              ? (r.host_compiled ? "host-compiled now" : "from the emu cache")
              : fmt::format("{} from the cache, {} compiled for {}{}", r.cache_hits, r.compiled, r.arch,
                            r.ptx_loaded ? fmt::format(", {} loaded from PTX", r.ptx_loaded) : "");
      const std::string planned = r.plan_cached
                                      ? fmt::format("plan {:.1f} ms from the plan cache", r.plan_ms)
                                      : fmt::format("plan {:.1f} ms, generate {:.1f} ms", r.plan_ms, r.codegen_ms);
      fmt::print(
          "kernels: {} launched, {} distinct, {} weight transform{} ({}; {}, obtain {:.0f} ms, load {:.0f} ms, "
          "run {:.0f} ms)\n",
          r.launches, r.distinct_kernels, r.weight_transforms, r.weight_transforms == 1 ? "" : "s", origin, planned,
          r.obtain_ms, r.load_ms, run_ms);
    } else {
      fmt::print("device: ref\n");
    }
    if (inputs_dir) {
      fmt::print("inputs: {} from {}{}\n", files(from_files), *inputs_dir,
                 from_files < inputs.size()
                     ? fmt::format(", {} parameters: the graph's own values", inputs.size() - from_files)
                     : "");
    } else {
      fmt::print("inputs: random, seed {}{}\n", seed,
                 g->values().empty() ? "" : fmt::format("; {} parameters: the graph's own values", g->values().size()));
    }
    print_output_stats(*g, stats);
    if (auto dir = args.get("--save-inputs")) fmt::print("saved inputs: {} in {}\n", files(inputs.size()), *dir);
    if (auto dir = args.get("--save-outputs")) fmt::print("saved outputs: {} in {}\n", files(outputs->size()), *dir);
    fmt::print("time: {:.3f} ms\n", ms);
    if (check) print_checks(*g, checks);
  }
  if (failed > 0) {
    print_error(invalid_argument(
        fmt::format("{} output(s) of '{}' differ from the reference beyond tolerance", failed, g->name())));
    return {kExitInvalid, {}};
  }
  return {};
}

}  // namespace

CommandSpec run_command() {
  std::vector<OptionSpec> options = run_setup_options(/*device_required=*/true);
  options.insert(options.begin() + 1,
                 {"--check", "",
                  "with a device other than ref: also run ref on the same inputs, print each output's errors, and "
                  "exit 1 when one exceeds its tolerance (f32 1e-4, f16 1e-2, bf16 6e-2 relative: the least precise "
                  "dtype it is computed through)"});
  options.push_back({"--save-inputs", "DIR", "write the inputs and parameters used to DIR/<tensor name>.npy"});
  options.push_back({"--save-outputs", "DIR", "write the outputs to DIR/<tensor name>.npy"});
  options.push_back(
      {"--trace", "FILE.json", "write the run's kernel launches as a Chrome trace (opens in Perfetto; docs/cli.md)"});
  options.push_back({"--json", "", "the result as JSON: schema kiln.run/1 (docs/cli.md)"});
  return {.name = "run",
          .summary = "run a graph on random or given inputs and print statistics of its outputs",
          .positional = "GRAPH",
          .positional_help = kGraphHelp,
          .options = std::move(options),
          .footer =
              "Tensor files are NumPy .npy files in the tensor's logical dims (NCHW order whatever the "
              "layout):\nf32 as '<f4', f16 as '<f2', bf16 as '<f4' (rounded to nearest even when read).",
          .run = run};
}

}  // namespace kiln::cli
