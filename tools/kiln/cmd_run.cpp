// `kiln run GRAPH.json --device ref ...`: runs a graph on random or given inputs and prints statistics of
// its outputs.
#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/emu.h"
#include "kiln/host_tensor.h"
#include "kiln/json.h"
#include "kiln/npy.h"
#include "kiln/reference.h"

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

CommandResult cmd_run(const std::vector<std::string>& argv) {
  Args args;
  if (auto e = parse_args("run", argv, {"--device", "--seed", "--inputs", "--save-inputs", "--save-outputs"}, args)) {
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
  auto device = args.get("--device");
  if (!device) return {kExitUsage, UsageError{"run: missing --device (expected --device ref or --device emu)"}};
  if (*device != "ref" && *device != "emu") {
    return {kExitUsage, UsageError{fmt::format("unknown device '{}': expected ref or emu", *device)}};
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

  auto g = load_graph(args.positional[0]);
  if (!g.ok()) {
    print_error(g.status(), args.positional[0]);
    return {kExitInvalid, {}};
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
  if (*device == "emu") {
    // The emu backend runs the CUDA kernels kiln generates for a plan's groups; it needs the host C++
    // compiler ($KILN_HOST_CXX) and the code generator, which does not exist yet (issue 5).
    Status cxx = emu::check_host_compiler();
    if (!cxx.ok()) {
      print_error(cxx);
      return {kExitInvalid, {}};
    }
    print_error(
        unsupported(fmt::format("device emu: no kernel for graph '{}': the emu backend runs the kernels "
                                "kiln generates for each fused group, and kiln has no code generator yet "
                                "(issue 5); use --device ref",
                                g->name())));
    return {kExitInvalid, {}};
  }
  if (auto dir = args.get("--save-inputs")) {
    Status s = save_tensors(*dir, inputs);
    if (!s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
  }

  auto start = std::chrono::steady_clock::now();
  auto outputs = run_reference(*g, inputs);
  auto stop = std::chrono::steady_clock::now();
  if (!outputs.ok()) {
    print_error(outputs.status());
    return {kExitInvalid, {}};
  }

  fmt::print("graph: {}\n", g->name());
  fmt::print("device: ref\n");
  if (inputs_dir) {
    fmt::print("inputs: {} from {}\n", files(inputs.size()), *inputs_dir);
  } else {
    fmt::print("inputs: random, seed {}\n", seed);
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
  return {};
}

}  // namespace kiln::cli
