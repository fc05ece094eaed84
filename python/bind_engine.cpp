// kiln.compile(graph, device) -> kiln.Executable, and Executable.run({name: ndarray}) -> {name: ndarray}
// (include/kiln/engine.h). A graph with symbolic dims compiles to a dynamic Executable (kiln::DynamicExecutable):
// each run reads the dims off its arrays' shapes. Compiling and running release the GIL.
#include <map>
#include <mutex>
#include <optional>

#include "bindings.h"
#include "kiln/engine.h"

namespace kiln::python {

using namespace pybind11::literals;

namespace {

// One engine per device for the whole process, as a C++ program would hold it: opening `cuda` loads the
// driver and retains the device's context, which is not something to do per compile. The map is never
// destroyed: at interpreter exit, static destructors run in no order we control, and releasing a CUDA context
// then (or after the driver's own teardown) can crash; the process exit frees everything anyway.
std::shared_ptr<Engine> engine_for(DeviceKind device) {
  static auto* engines = new std::map<DeviceKind, std::shared_ptr<Engine>>();  // guarded by the GIL
  if (auto it = engines->find(device); it != engines->end()) return it->second;
  auto engine = std::make_shared<Engine>(value_or_throw(Engine::open(device)));
  (*engines)[device] = engine;
  (*engines)[engine->device()] = engine;  // `auto` found this device: asking for it by name gets the same one
  return engine;
}

DeviceKind device_from_py(const std::string& s) {
  if (auto d = parse_device_kind(s)) return *d;
  throw_invalid("unknown device '" + s + "': expected auto, cuda, emu or ref");
}

// kiln.Executable: a compiled graph and the engine it runs on; for a graph with symbolic dims, a
// DynamicExecutable instead.
struct PyExecutable {
  PyExecutable(std::shared_ptr<Engine> e, Graph g, Executable x)
      : engine(std::move(e)), graph(std::move(g)), exe(std::move(x)) {}
  PyExecutable(std::shared_ptr<Engine> e, Graph g, DynamicExecutable d)
      : engine(std::move(e)), graph(std::move(g)), dyn(std::move(d)) {}
  std::shared_ptr<Engine> engine;
  Graph graph;  // as the caller gave it: inputs are checked against it, parameter values come from it
  std::optional<Executable> exe;
  std::optional<DynamicExecutable> dyn;
  std::mutex running;  // an Executable runs one call at a time (engine.h), and the GIL is released meanwhile

  // The Executable of a graph without symbols (a dynamic one has one per binding of its dims).
  const Executable& fixed() const {
    if (!exe) {
      throw_invalid("graph '" + graph.name() +
                    "' has symbolic dims: its Executable is dynamic, with a plan and report per binding of them "
                    "(bind the graph first for one of them)");
    }
    return *exe;
  }
};
using ExecutablePtr = std::shared_ptr<PyExecutable>;

ExecutablePtr compile(const GraphPtr& g, const std::string& device, const std::string& layout, const std::string& arch,
                      bool cuda_graph, int max_group_ops) {
  CompileOptions o;
  o.plan.layout = layout_policy_from_py(layout);
  o.plan.max_group_ops = max_group_ops;
  o.arch = arch;
  o.cuda_graph = cuda_graph;
  const DeviceKind kind = device_from_py(device);
  throw_if_error(g->verify());
  std::shared_ptr<Engine> engine = engine_for(kind);
  Graph copy = *g;  // compiled without the GIL: another thread may build on `g` meanwhile
  if (copy.is_symbolic()) {
    Result<DynamicExecutable> dyn = engine->compile_dynamic(copy, o);
    return std::make_shared<PyExecutable>(std::move(engine), std::move(copy), value_or_throw(std::move(dyn)));
  }
  Result<Executable> exe = Status(StatusCode::internal, "not compiled");
  {
    py::gil_scoped_release unlocked;
    exe = engine->compile(copy, o);
  }
  return std::make_shared<PyExecutable>(std::move(engine), std::move(copy), value_or_throw(std::move(exe)));
}

// The graph at the dims the arrays of `inputs` give (the graph itself when it has none).
Graph bound_by_arrays(const Graph& g, const py::dict& inputs) {
  if (!g.is_symbolic()) return g;
  std::map<std::string, Shape, std::less<>> shapes;
  for (auto [k, v] : inputs) {
    if (!py::isinstance<py::str>(k) || !py::hasattr(v, "shape")) continue;  // bindings_from_dict reports these
    std::vector<int64_t> dims;
    for (auto d : v.attr("shape")) dims.push_back(d.cast<int64_t>());
    shapes[k.cast<std::string>()] = Shape(dims);
  }
  return value_or_throw(g.bind(value_or_throw(g.dims_from_shapes(shapes))));
}

py::dict run(PyExecutable& x, const py::dict& inputs) {
  const Graph bound = bound_by_arrays(x.graph, inputs);
  const TensorMap bindings = bindings_from_dict(bound, inputs);
  Result<TensorMap> out = Status(StatusCode::internal, "not run");
  {
    py::gil_scoped_release unlocked;
    std::lock_guard<std::mutex> lock(x.running);
    out = x.dyn ? run_on_host_tensors(*x.engine, *x.dyn, bindings) : run_on_host_tensors(*x.engine, *x.exe, bindings);
  }
  return dict_from_tensor_map(value_or_throw(std::move(out)));
}

void bind_report(py::module_& m) {
  py::class_<CompileReport>(m, "CompileReport", "What kiln.compile did (kiln::CompileReport).")
      .def_property_readonly("device", [](const CompileReport& r) { return std::string(device_kind_name(r.device)); })
      .def_readonly("arch", &CompileReport::arch, "cuda: 'sm_90'; emu: 'host'; ref: ''")
      .def_readonly("groups", &CompileReport::groups)
      .def_readonly("launches", &CompileReport::launches, "kernels launched per run")
      .def_readonly("distinct_kernels", &CompileReport::distinct_kernels)
      .def_readonly("weight_transforms", &CompileReport::weight_transforms)
      .def_readonly("cache_hits", &CompileReport::cache_hits)
      .def_readonly("compiled", &CompileReport::compiled)
      .def_readonly("ptx_loaded", &CompileReport::ptx_loaded)
      .def_readonly("host_compiled", &CompileReport::host_compiled)
      .def_readonly("plan_cached", &CompileReport::plan_cached)
      .def_readonly("plan_ms", &CompileReport::plan_ms)
      .def_readonly("codegen_ms", &CompileReport::codegen_ms)
      .def_readonly("obtain_ms", &CompileReport::obtain_ms)
      .def_readonly("load_ms", &CompileReport::load_ms)
      .def_readonly("workspace_bytes", &CompileReport::workspace_bytes)
      .def_readonly("weight_bytes", &CompileReport::weight_bytes)
      .def_readonly("entries", &CompileReport::entries)
      .def_readonly("warnings", &CompileReport::warnings)
      .def("__repr__", [](const CompileReport& r) {
        return "<kiln.CompileReport " + std::string(device_kind_name(r.device)) + ": " + std::to_string(r.launches) +
               " launches, " + std::to_string(r.distinct_kernels) + " distinct kernels>";
      });
}

}  // namespace

void bind_engine(py::module_& m) {
  bind_report(m);
  py::class_<PyExecutable, ExecutablePtr>(m, "Executable", "A graph compiled for one device (kiln.compile).")
      .def("run", &run, "inputs"_a,
           "Runs once: {input or parameter name: ndarray} -> {output name: ndarray}. Parameters with values of "
           "their own (ONNX initializers, Graph.set_value) may be left out.")
      .def_property_readonly("report", [](const PyExecutable& x) { return x.fixed().report(); })
      .def_property_readonly("plan", [](const PyExecutable& x) { return std::make_shared<Plan>(x.fixed().plan()); })
      .def_property_readonly(
          "dynamic", [](const PyExecutable& x) { return x.dyn.has_value(); },
          "whether the graph has symbolic dims (each run reads them off its arrays' shapes)")
      .def_property_readonly(
          "bindings_prepared", [](const PyExecutable& x) { return x.dyn ? x.dyn->bindings_prepared() : 1; },
          "how many bindings of the symbolic dims have been planned and loaded (1 for a graph without any)")
      .def_property_readonly("device",
                             [](const PyExecutable& x) { return std::string(device_kind_name(x.engine->device())); })
      .def_property_readonly("device_name", [](const PyExecutable& x) { return x.engine->device_name(); })
      .def_property_readonly("workspace_bytes", [](const PyExecutable& x) { return x.fixed().workspace_bytes(); })
      .def("__repr__", [](const PyExecutable& x) {
        const std::string on = "<kiln.Executable of '" + x.graph.name() + "' on " +
                               std::string(device_kind_name(x.engine->device())) + ": ";
        if (x.dyn) return on + "dynamic, " + std::to_string(x.dyn->bindings_prepared()) + " bindings prepared>";
        return on + std::to_string(x.exe->report().launches) + " launches>";
      });

  m.def("compile", &compile, "graph"_a, "device"_a = "auto", py::kw_only(), "layout"_a = "auto", "arch"_a = "",
        "cuda_graph"_a = false, "max_group_ops"_a = 32,
        "Plans a graph for a device ('auto': the GPU if there is one, else 'emu'; 'cuda', 'emu', 'ref') and makes "
        "every kernel ready (kernel cache, NVRTC or the host compiler). A graph with symbolic dims is planned at "
        "each binding of them its runs bring, on first use.");
}

}  // namespace kiln::python
