// kiln._prewarm: fills the kernel cache for graphs and target GPUs (kiln::prewarm, include/kiln/prewarm.h).
// The package's kiln.prewarm (python/kiln/__init__.py) calls it and raises when kernels failed.
#include <pybind11/stl/filesystem.h>

#include <filesystem>

#include "bindings.h"
#include "kiln/json.h"
#include "kiln/onnx.h"
#include "kiln/prewarm.h"
#include "kiln/target.h"

namespace kiln::python {

using namespace pybind11::literals;

namespace {

// A str or a list of str (arch="sm_80" or arch=["sm_80", "sm_90"]).
std::vector<std::string> names_from_py(const py::object& o, const char* what) {
  if (o.is_none()) return {};
  if (py::isinstance<py::str>(o)) return {o.cast<std::string>()};
  try {
    return o.cast<std::vector<std::string>>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(what) + ": expected a str or a list of str, got " +
                         py::repr(o).cast<std::string>());
  }
}

PrewarmReport prewarm(const py::object& graphs, const py::object& arch, const py::object& target, int jobs,
                      bool allow_uncached, const std::string& layout) {
  // One graph or path, or a list of them.
  py::list items;
  if (py::isinstance<py::list>(graphs) || py::isinstance<py::tuple>(graphs)) {
    items = py::list(graphs);
  } else {
    items.append(graphs);
  }
  std::vector<Graph> gs;
  PrewarmOptions o;
  for (py::handle item : items) {
    if (py::isinstance<Graph>(item)) {
      Graph g = item.cast<const Graph&>();
      throw_if_error(g.verify());
      o.names.push_back(g.name());
      gs.push_back(std::move(g));
      continue;
    }
    const std::string path = item.cast<std::filesystem::path>().string();  // str or os.PathLike
    gs.push_back(value_or_throw(is_onnx_path(path) ? load_onnx(path) : load_graph(path)));
    o.names.push_back(path);
  }
  for (const std::string& t : names_from_py(target, "target")) o.targets.push_back(value_or_throw(target_named(t)));
  for (const std::string& a : names_from_py(arch, "arch")) o.targets.push_back(value_or_throw(target_named(a)));
  o.plan.layout = layout_policy_from_py(layout);
  o.jobs = jobs;
  o.require_store = !allow_uncached;
  Result<PrewarmReport> r = Status(StatusCode::internal, "not run");
  {
    py::gil_scoped_release unlocked;
    r = kiln::prewarm(gs, o);
  }
  return value_or_throw(std::move(r));
}

}  // namespace

void bind_prewarm(py::module_& m) {
  py::class_<PrewarmGraph>(m, "PrewarmGraph", "What one graph needs on one target (kiln::PrewarmGraph).")
      .def_readonly("name", &PrewarmGraph::name)
      .def_readonly("target", &PrewarmGraph::target)
      .def_readonly("arch", &PrewarmGraph::arch)
      .def_readonly("kernel_groups", &PrewarmGraph::kernel_groups)
      .def_readonly("weight_transforms", &PrewarmGraph::weight_transforms)
      .def_readonly("distinct_kernels", &PrewarmGraph::distinct_kernels)
      .def_readonly("fresh", &PrewarmGraph::fresh, "of those, not seen in an earlier graph of the call")
      .def("__repr__", [](const PrewarmGraph& g) {
        return "<kiln.PrewarmGraph '" + g.name + "' on " + g.target + " (" + g.arch +
               "): " + std::to_string(g.distinct_kernels) + " distinct kernels>";
      });
  py::class_<PrewarmReport>(m, "PrewarmReport", "What kiln.prewarm did (kiln::PrewarmReport).")
      .def_readonly("graphs", &PrewarmReport::graphs, "per target, then per graph")
      .def_readonly("archs", &PrewarmReport::archs)
      .def_readonly("cache_dir", &PrewarmReport::cache_dir, "empty when the cache is disabled")
      .def_readonly("total", &PrewarmReport::total)
      .def_readonly("cached", &PrewarmReport::cached, "kernels the cache held already")
      .def_readonly("compiled", &PrewarmReport::compiled)
      .def_readonly("failed", &PrewarmReport::failed)
      .def_readonly("not_kept", &PrewarmReport::not_kept, "kernels not in the cache afterwards")
      .def_readonly("not_kept_reason", &PrewarmReport::not_kept_reason)
      .def_readonly("wall_ms", &PrewarmReport::wall_ms)
      .def_readonly("jobs", &PrewarmReport::jobs)
      .def_readonly("nvrtc_loaded", &PrewarmReport::nvrtc_loaded, "False: every kernel came from the cache")
      .def_readonly("errors", &PrewarmReport::errors, "one line per failed kernel")
      .def("__repr__", [](const PrewarmReport& r) {
        return "<kiln.PrewarmReport " + std::to_string(r.total) + " kernels: " + std::to_string(r.cached) +
               " cached, " + std::to_string(r.compiled) + " compiled, " + std::to_string(r.failed) + " failed>";
      });
  m.def("_prewarm", &prewarm, "graphs"_a, py::kw_only(), "arch"_a = py::none(), "target"_a = py::none(), "jobs"_a = 0,
        "allow_uncached"_a = false, "layout"_a = "auto");
}

}  // namespace kiln::python
