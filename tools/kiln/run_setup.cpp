// prepare_run (run_setup.h): options, graph, inputs and engine for `kiln run` and `kiln bench`.
#include "run_setup.h"

#include <charconv>
#include <map>

#include <fmt/format.h>

#include "kiln/emu.h"
#include "kiln/npy.h"
#include "layout_option.h"
#include "memory_limit.h"
#include "support/env.h"

namespace kiln::cli {

namespace {

// The graph bound at the dims its symbolic inputs' files have (`<dir>/<input>.npy`; Graph::dims_from_shapes
// names a file whose shape disagrees).
Result<Graph> bind_dims_from_files(const Graph& g, const std::string& dir) {
  std::map<std::string, Shape, std::less<>> shapes;
  for (Tensor t : g.bound_tensors()) {
    if (!g.symbolic_shape(t)) continue;
    const std::string& name = g.tensor(t).name;
    KILN_ASSIGN_OR_RETURN(const std::string path, npy_path(dir, name));
    auto shape = npy_shape(path, name);
    if (!shape.ok()) {
      if (shape.status().code() == StatusCode::not_found) continue;  // load_inputs reports it, once bound
      return shape.status();
    }
    shapes.emplace(name, *shape);
  }
  KILN_ASSIGN_OR_RETURN(const DimBindings values, g.dims_from_shapes(shapes));
  return g.bind(values);
}

}  // namespace

std::optional<uint64_t> parse_seed(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

namespace {

CommandResult usage(std::string message) { return {kExitUsage, UsageError{std::move(message)}}; }
CommandResult invalid() { return {kExitInvalid, {}}; }

// --weights DIR: every parameter's values from DIR/<name>.npy (what `kiln import --weights` wrote), kept by
// the graph as an ONNX model's are.
bool load_weights(Graph& g, const std::string& dir) {
  std::vector<std::string> problems;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    if (info.kind != TensorKind::parameter) continue;
    auto path = npy_path(dir, info.name);
    auto loaded = path.ok() ? load_npy(*path, info.dtype, info.shape, info.name) : Result<HostTensor>(path.status());
    if (!loaded.ok()) {
      problems.push_back(loaded.status().message());
      continue;
    }
    Status s = g.set_value(t, std::make_shared<HostTensor>(std::move(loaded).value()));
    if (!s.ok()) problems.push_back(s.message());
  }
  for (const auto& p : problems) print_error(p);
  return problems.empty();
}

}  // namespace

std::vector<OptionSpec> run_setup_options(bool device_required) {
  return {
      {"--device", "D",
       device_required ? "where to run (required): ref, the CPU reference (f64); emu, kiln's CUDA kernels "
                         "emulated on the CPU (needs the host C++ compiler, $KILN_HOST_CXX); cuda, the GPU "
                         "(kernels from the cache or NVRTC); auto, cuda when a driver and GPU are present, else emu"
                       : "where to run: auto (default: cuda when a driver and GPU are present, else emu), cuda, "
                         "emu or ref"},
      {"--layout", "L", "the planner's layout policy: auto (default), nchw or nhwc"},
      {"--seed", "S", "seed of the random inputs and parameters (default 0)"},
      {"--inputs", "DIR",
       "read every input and parameter from DIR/<tensor name>.npy instead of random values (a parameter with "
       "values of its own, an ONNX model's, keeps them when DIR has no file for it)"},
      {"--weights", "DIR", "read every parameter from DIR/<tensor name>.npy (what kiln import wrote)"},
      {"--max-memory", "S", "refuse a graph needing more host memory than S (500M, 8G; default 3/4 of the machine's)"},
      kShapeOption,
      {"--dim-range", "NAME=LO..HI",
       "ONNX: the range of an open dim the model names (default 1..1024), e.g. batch=1..64"},
      kDimsOption};
}

std::variant<RunSetup, CommandResult> prepare_run(const Args& args, std::string_view command,
                                                  std::optional<DeviceKind> fallback) {
  RunSetup r;
  r.path = args.positional.at(0);
  auto device_arg = args.get("--device");
  if (!device_arg && !fallback) {
    return usage(fmt::format("{}: missing --device (expected --device ref, emu, cuda or auto)", command));
  }
  if (device_arg) {
    const std::optional<DeviceKind> d = parse_device_kind(*device_arg);
    if (!d) return usage(fmt::format("unknown device '{}': expected ref, emu, cuda or auto", *device_arg));
    r.device = *d;
  } else {
    r.device = *fallback;
  }
  if (auto s = args.get("--seed")) {
    auto v = parse_seed(*s);
    if (!v) return usage(fmt::format("invalid --seed value '{}': expected a non-negative integer below 2^64", *s));
    r.seed = *v;
  }
  r.inputs_dir = args.get("--inputs");
  if (r.inputs_dir && args.get("--seed")) {
    return usage(fmt::format("{}: --seed and --inputs exclude each other (--inputs gives every value)", command));
  }
  int64_t max_memory = default_max_memory();
  if (auto m = args.get("--max-memory")) {
    auto v = support::parse_size(*m, "--max-memory");
    if (!v.ok()) return usage(v.status().message());
    max_memory = *v;
  }
  if (auto l = args.get("--layout")) {
    auto p = parse_layout_policy(*l);
    if (!p) return usage(layout_usage_message(*l));
    r.layout = *p;
  }
  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return CommandResult{kExitUsage, e};
  std::optional<DimBindings> dims;
  if (auto e = parse_graph_dims(args, dims)) return CommandResult{kExitUsage, e};
  // Every usage error before the graph is read: a bad option is exit 2 even when the graph is missing too.
  if (command == "run" && args.has("--check") && r.device == DeviceKind::ref) {
    return usage("run: --check compares a device with ref: use it with --device emu, cuda or auto");
  }

  auto g = load_graph_file(r.path, onnx, dims ? &*dims : nullptr);
  if (!g.ok()) {
    print_error(g.status(), r.path);
    return invalid();
  }
  r.graph = std::move(g).value();
  // A symbolic graph run on files: the files' shapes say the dims' values (--dims, when given, already bound).
  if (r.graph.is_symbolic() && r.inputs_dir) {
    auto bound = bind_dims_from_files(r.graph, *r.inputs_dir);
    if (!bound.ok()) {
      print_error(bound.status(), r.path);
      return invalid();
    }
    r.graph = std::move(bound).value();
  }
  // Before any tensor is allocated: a graph too large for this machine is refused, not attempted.
  if (std::string why = memory_refusal(r.graph, r.device, max_memory, args.has("--max-memory")); !why.empty()) {
    print_error(why, r.path);
    return invalid();
  }
  if (auto wdir = args.get("--weights"))
    if (!load_weights(r.graph, *wdir)) return invalid();
  if (r.inputs_dir) {
    auto loaded = load_inputs(*r.inputs_dir, r.graph);
    if (!loaded.ok()) {
      print_error(loaded.status());
      return invalid();
    }
    r.inputs = std::move(loaded).value();
  } else {
    r.inputs = random_inputs(r.graph, r.seed);
  }
  // ref walks the graph op by op (the oracle); every other device runs the plan's generated kernels
  // through the execution API (include/kiln/engine.h).
  if (r.device != DeviceKind::ref) {
    auto e = Engine::open(r.device);
    if (!e.ok()) {
      print_error(e.status());
      return invalid();
    }
    r.engine.emplace(std::move(e).value());
    if (r.engine->device() == DeviceKind::emu) {
      // The emulator builds kiln's kernels with the host C++ compiler: say which variable to set first.
      Status cxx = emu::check_host_compiler();
      if (!cxx.ok()) {
        print_error(cxx);
        return invalid();
      }
    }
  }
  return r;
}

}  // namespace kiln::cli
