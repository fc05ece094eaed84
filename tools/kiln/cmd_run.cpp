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
#include "kiln/compare.h"
#include "kiln/emu.h"
#include "kiln/engine.h"
#include "kiln/host_tensor.h"
#include "kiln/json.h"
#include "kiln/npy.h"
#include "kiln/plan.h"
#include "kiln/reference.h"
#include "layout_option.h"
#include "memory_limit.h"
#include "support/env.h"

namespace kiln::cli {
namespace {

std::optional<uint64_t> parse_seed(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string files(size_t n) { return fmt::format("{} file{}", n, n == 1 ? "" : "s"); }

std::string num(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

CommandResult cmd_run(const std::vector<std::string>& argv_in) {
  // --check takes no value: take it out before the value-flag parser sees the rest.
  std::vector<std::string> argv;
  bool check = false;
  for (const std::string& a : argv_in) {
    if (a == "--check") {
      check = true;
    } else {
      argv.push_back(a);
    }
  }
  Args args;
  if (auto e = parse_args("run", argv,
                          {"--device", "--seed", "--inputs", "--save-inputs", "--save-outputs", "--layout",
                           "--max-memory", "--shape", "--weights"},
                          args)) {
    return {kExitUsage, e};
  }
  if (args.help) {
    fmt::print("{}", help_text());
    return {};
  }
  if (args.positional.empty()) return {kExitUsage, UsageError{"run: missing GRAPH.json"}};
  if (args.positional.size() > 1) {
    return {kExitUsage,
            UsageError{fmt::format("run: unexpected argument '{}' (run takes one GRAPH.json)", args.positional[1])}};
  }
  auto device_arg = args.get("--device");
  if (!device_arg) {
    return {kExitUsage, UsageError{"run: missing --device (expected --device ref, emu, cuda or auto)"}};
  }
  const std::optional<DeviceKind> device = parse_device_kind(*device_arg);
  if (!device) {
    return {kExitUsage, UsageError{fmt::format("unknown device '{}': expected ref, emu, cuda or auto", *device_arg)}};
  }
  uint64_t seed = 0;
  if (auto s = args.get("--seed")) {
    auto v = parse_seed(*s);
    if (!v) {
      return {kExitUsage,
              UsageError{fmt::format("invalid --seed value '{}': expected a non-negative integer below 2^64", *s)}};
    }
    seed = *v;
  }
  auto inputs_dir = args.get("--inputs");
  if (inputs_dir && args.get("--seed")) {
    return {kExitUsage, UsageError{"run: --seed and --inputs exclude each other (--inputs gives every value)"}};
  }

  int64_t max_memory = default_max_memory();
  if (auto m = args.get("--max-memory")) {
    auto v = support::parse_size(*m, "--max-memory");
    if (!v.ok()) return {kExitUsage, UsageError{v.status().message()}};
    max_memory = *v;
  }
  // Every usage error before the graph is read: a bad option is exit 2 even when the graph is missing too.
  if (check && *device == DeviceKind::ref) {
    return {kExitUsage, UsageError{"run: --check compares a device with ref: use it with --device emu, cuda or auto"}};
  }
  LayoutPolicy layout = LayoutPolicy::automatic;
  if (auto l = args.get("--layout")) {
    auto p = parse_layout_policy(*l);
    if (!p) return {kExitUsage, UsageError{layout_usage_message(*l)}};
    layout = *p;
  }

  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  auto g = load_graph_file(args.positional[0], onnx);
  if (!g.ok()) {
    print_error(g.status(), args.positional[0]);
    return {kExitInvalid, {}};
  }

  // Before any tensor is allocated: a graph too large for this machine is refused, not attempted.
  if (std::string why = memory_refusal(*g, *device, max_memory, args.has("--max-memory")); !why.empty()) {
    print_error(why, args.positional[0]);
    return {kExitInvalid, {}};
  }
  // --weights DIR: every parameter's values from DIR/<name>.npy (what `kiln import --weights` wrote), kept
  // by the graph as an ONNX model's are.
  if (auto wdir = args.get("--weights")) {
    std::vector<std::string> problems;
    for (Tensor t : g->bound_tensors()) {
      const TensorInfo& info = g->tensor(t);
      if (info.kind != TensorKind::parameter) continue;
      auto path = npy_path(*wdir, info.name);
      auto loaded = path.ok() ? load_npy(*path, info.dtype, info.shape, info.name) : Result<HostTensor>(path.status());
      if (!loaded.ok()) {
        problems.push_back(loaded.status().message());
        continue;
      }
      Status s = g->set_value(t, std::make_shared<HostTensor>(std::move(loaded).value()));
      if (!s.ok()) problems.push_back(s.message());
    }
    if (!problems.empty()) {
      for (const auto& p : problems) print_error(p);
      return {kExitInvalid, {}};
    }
  }
  TensorMap inputs;
  if (inputs_dir) {
    auto loaded = load_inputs(*inputs_dir, *g);
    if (!loaded.ok()) {
      print_error(loaded.status());
      return {kExitInvalid, {}};
    }
    inputs = std::move(loaded).value();
  } else {
    inputs = random_inputs(*g, seed);
  }
  if (auto dir = args.get("--save-inputs")) {
    Status s = save_tensors(*dir, inputs);
    if (!s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
  }

  // ref walks the graph op by op (the oracle); every other device runs the plan's generated kernels
  // through the execution API (include/kiln/engine.h).
  std::optional<Engine> engine;
  if (*device != DeviceKind::ref) {
    auto e = Engine::open(*device);
    if (!e.ok()) {
      print_error(e.status());
      return {kExitInvalid, {}};
    }
    engine.emplace(std::move(e).value());
    if (engine->device() == DeviceKind::emu) {
      // The emulator builds kiln's kernels with the host C++ compiler: say which variable to set first.
      Status cxx = emu::check_host_compiler();
      if (!cxx.ok()) {
        print_error(cxx);
        return {kExitInvalid, {}};
      }
    }
  }
  auto start = std::chrono::steady_clock::now();
  Result<TensorMap> outputs = Status(StatusCode::internal, "not run");
  std::optional<Executable> exe;
  double run_ms = 0;
  if (engine) {
    CompileOptions co;
    co.plan.layout = layout;
    auto compiled = engine->compile(*g, co);
    if (!compiled.ok()) {
      print_error(compiled.status(), args.positional[0]);
      return {kExitInvalid, {}};
    }
    exe.emplace(std::move(compiled).value());
    for (const std::string& w : exe->report().warnings) fmt::print(stderr, "warning: {}\n", w);
    auto t0 = std::chrono::steady_clock::now();
    outputs = run_on_host_tensors(*engine, *exe, inputs);
    run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } else {
    outputs = run_reference(*g, inputs);
  }
  auto stop = std::chrono::steady_clock::now();
  if (!outputs.ok()) {
    print_error(outputs.status());
    return {kExitInvalid, {}};
  }

  fmt::print("graph: {}\n", g->name());
  if (engine) {
    fmt::print("device: {} ({})\n", device_kind_name(engine->device()), engine->device_name());
    const CompileReport& r = exe->report();
    const std::string origin =
        engine->device() == DeviceKind::emu
            ? (r.host_compiled ? "host-compiled now" : "from the emu cache")
            : fmt::format("{} from the cache, {} compiled for {}{}", r.cache_hits, r.compiled, r.arch,
                          r.ptx_loaded ? fmt::format(", {} loaded from PTX", r.ptx_loaded) : "");
    fmt::print(
        "kernels: {} launched, {} distinct, {} weight transform{} ({}; plan {:.0f} ms, generate {:.0f} ms, "
        "obtain {:.0f} ms, load {:.0f} ms, run {:.0f} ms)\n",
        r.launches, r.distinct_kernels, r.weight_transforms, r.weight_transforms == 1 ? "" : "s", origin, r.plan_ms,
        r.codegen_ms, r.obtain_ms, r.load_ms, run_ms);
  } else {
    fmt::print("device: ref\n");
  }
  if (inputs_dir) {
    size_t from_files = 0;  // the rest are the graph's own parameter values
    for (const auto& [name, t] : inputs) {
      auto path = npy_path(*inputs_dir, name);
      std::error_code ec;
      from_files += path.ok() && std::filesystem::exists(*path, ec);
    }
    fmt::print("inputs: {} from {}{}\n", files(from_files), *inputs_dir,
               from_files < inputs.size()
                   ? fmt::format(", {} parameters: the graph's own values", inputs.size() - from_files)
                   : "");
  } else {
    fmt::print("inputs: random, seed {}{}\n", seed,
               g->values().empty() ? "" : fmt::format("; {} parameters: the graph's own values", g->values().size()));
  }
  std::vector<std::vector<std::string>> rows{{"name", "shape", "dtype", "min", "max", "mean", "std"}};
  bool non_finite = false;
  std::vector<TensorStats> stats;
  for (Tensor t : g->outputs()) {
    const TensorInfo& info = g->tensor(t);
    auto it = outputs->find(info.name);
    KILN_CHECK(it != outputs->end(), "run_reference returned no tensor for output '" + info.name + "'");
    TensorStats st = tensor_stats(it->second);
    non_finite = non_finite || st.nan_count > 0 || st.inf_count > 0;
    stats.push_back(st);
    rows.push_back({info.name, info.shape.to_string(), std::string(dtype_name(info.dtype)), num(st.min), num(st.max),
                    num(st.mean), num(st.std)});
  }
  if (non_finite) {
    rows[0].insert(rows[0].end(), {"nan", "inf"});
    for (size_t i = 0; i < stats.size(); ++i) {
      rows[i + 1].insert(rows[i + 1].end(),
                         {fmt::format("{}", stats[i].nan_count), fmt::format("{}", stats[i].inf_count)});
    }
  }
  fmt::print("outputs:\n");
  print_table(rows, 2);

  if (auto dir = args.get("--save-inputs")) {
    fmt::print("saved inputs: {} in {}\n", files(inputs.size()), *dir);
  }
  if (auto dir = args.get("--save-outputs")) {
    Status s = save_tensors(*dir, *outputs);
    if (!s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
    fmt::print("saved outputs: {} in {}\n", files(outputs->size()), *dir);
  }
  double ms = std::chrono::duration<double, std::milli>(stop - start).count();
  fmt::print("time: {:.3f} ms\n", ms);
  if (!check) return {};

  // --check: the same inputs through the reference, every output compared with its dtype's tolerance.
  auto want = run_reference(*g, inputs);
  if (!want.ok()) {
    print_error(want.status());
    return {kExitInvalid, {}};
  }
  std::vector<std::vector<std::string>> crow{
      {"name", "dtype", "max abs error", "max rel error", "tolerance", "result"}};
  bool all_ok = true;
  for (Tensor t : g->outputs()) {
    const TensorInfo& info = g->tensor(t);
    const Tolerance tol = tolerance_for(info.dtype);
    const Comparison c = compare_tensors(outputs->at(info.name), want->at(info.name), tol);
    all_ok = all_ok && c.ok;
    crow.push_back({info.name, std::string(dtype_name(info.dtype)), fmt::format("{:.3g}", c.max_abs_error),
                    fmt::format("{:.3g}", c.max_rel_error), fmt::format("rtol {:g} atol {:g}", tol.rtol, tol.atol),
                    c.ok ? "ok" : "FAIL: " + c.problem});
  }
  fmt::print("check against ref:\n");
  print_table(crow, 2);
  if (!all_ok) {
    print_error(invalid_argument(fmt::format(
        "{} output(s) of '{}' differ from the reference beyond tolerance",
        std::count_if(crow.begin() + 1, crow.end(), [](const auto& r) { return r.back() != "ok"; }), g->name())));
    return {kExitInvalid, {}};
  }
  return {};
}

}  // namespace kiln::cli
