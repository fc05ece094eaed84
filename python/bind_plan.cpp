// kiln.plan(graph) -> kiln.Plan: the planner's fused groups (each one kernel) as Python objects.
#include "bindings.h"
#include "kiln/json.h"
#include "kiln/plan.h"
#include "kiln/target.h"

namespace kiln::python {

using namespace pybind11::literals;

namespace {

// A group of a plan as names (the plan's graph is the graph after the passes: it has conversions the
// user's graph does not, so handles into it would mean nothing to the caller).
struct PyGroup {
  int32_t id = 0;
  std::string kind, family;
  std::vector<std::string> nodes, ops;  // in execution order
  std::vector<std::string> inputs, outputs;
  int64_t bytes_read = 0, bytes_written = 0;
  bool is_kernel = false;
  std::optional<std::string> view_of;
};

PyGroup group_view(const Plan& p, const Group& g) {
  PyGroup r;
  r.id = g.id;
  r.kind = group_kind_name(g.kind);
  r.family = kernel_family_name(g.family);
  for (int32_t n : g.nodes) {
    const Node& node = p.graph.node(n);
    r.nodes.push_back(node.name);
    r.ops.push_back(node.op_text);
  }
  for (Tensor t : g.inputs) r.inputs.push_back(p.graph.tensor(t).name);
  for (Tensor t : g.outputs) r.outputs.push_back(p.graph.tensor(t).name);
  r.bytes_read = g.bytes_read;
  r.bytes_written = g.bytes_written;
  r.is_kernel = g.is_kernel();
  if (g.view_of.valid()) r.view_of = p.graph.tensor(g.view_of).name;
  return r;
}

PlanPtr plan(const GraphPtr& g, const std::string& target, const std::string& layout, int max_group_ops) {
  PlanOptions o;
  o.target = value_or_throw(target_named(target));
  o.layout = layout_policy_from_py(layout);
  o.max_group_ops = max_group_ops;
  Graph copy = *g;  // planned without the GIL: another thread may build on `g` meanwhile
  Result<Plan> p = Status(StatusCode::internal, "not planned");
  {
    py::gil_scoped_release unlocked;
    p = plan_graph(std::move(copy), o);
  }
  return std::make_shared<Plan>(value_or_throw(std::move(p)));
}

}  // namespace

LayoutPolicy layout_policy_from_py(const std::string& s) {
  if (s == "auto") return LayoutPolicy::automatic;
  if (s == "nchw") return LayoutPolicy::nchw;
  if (s == "nhwc") return LayoutPolicy::nhwc;
  throw_invalid("unknown layout '" + s + "': expected auto, nchw or nhwc");
}

void bind_plan(py::module_& m) {
  py::class_<PyGroup>(m, "Group",
                      "One fused group of a kiln.Plan: one kernel (or an elided concat, a weight transform).")
      .def_readonly("id", &PyGroup::id)
      .def_readonly("kind", &PyGroup::kind, "conv, matmul, norm, pool, pointwise, layout, concat, ...")
      .def_readonly("family", &PyGroup::family, "the kernel family that runs it (none: no kernel)")
      .def_readonly("nodes", &PyGroup::nodes, "names of the nodes it runs, in order")
      .def_readonly("ops", &PyGroup::ops, "their ops")
      .def_readonly("inputs", &PyGroup::inputs, "names of the tensors it reads from memory")
      .def_readonly("outputs", &PyGroup::outputs, "names of the tensors it writes to memory")
      .def_readonly("bytes_read", &PyGroup::bytes_read)
      .def_readonly("bytes_written", &PyGroup::bytes_written)
      .def_readonly("is_kernel", &PyGroup::is_kernel)
      .def_readonly("view_of", &PyGroup::view_of)
      .def("__repr__", [](const PyGroup& g) {
        std::string ops;
        for (const auto& o : g.ops) ops += (ops.empty() ? "" : "+") + o;
        return "<kiln.Group " + std::to_string(g.id) + " " + g.kind + " (" + g.family + "): " + ops + ">";
      });

  py::class_<Plan, PlanPtr>(m, "Plan", "What kiln.plan made of a graph: its fused groups in execution order.")
      .def_property_readonly("groups",
                             [](const Plan& p) {
                               std::vector<PyGroup> r;
                               for (const Group& g : p.groups) r.push_back(group_view(p, g));
                               return r;
                             })
      .def_property_readonly("kernel_count", &Plan::kernel_count)
      .def_readonly("bytes_moved", &Plan::bytes_moved, "bytes the kernels read and write")
      .def_readonly("unfused_bytes_moved", &Plan::unfused_bytes_moved, "the same with every op a kernel of its own")
      .def_readonly("workspace_bytes", &Plan::workspace_bytes)
      .def_property_readonly("target", [](const Plan& p) { return p.target.name; })
      .def_property_readonly("arch", [](const Plan& p) { return p.target.arch; })
      .def_property_readonly(
          "graph", [](const Plan& p) { return std::make_shared<Graph>(p.graph); },
          "a copy of the graph after the passes (group node names refer to it)")
      .def("to_json", &plan_to_json, "the JSON form `kiln plan --format json` prints")
      .def("to_text", &plan_to_text, "the text form `kiln plan` prints")
      .def("explain", &plan_explanation, "why each tensor between two kernels is not fused (`kiln plan --explain`)")
      .def(
          "to_dot", [](const Plan& p) { return plan_to_dot(p); }, "Graphviz")
      .def("__repr__", [](const Plan& p) {
        return "<kiln.Plan of '" + p.graph.name() + "' for " + p.target.name + ": " + std::to_string(p.kernel_count()) +
               " kernels, " + std::to_string(p.bytes_moved) + " bytes moved>";
      });

  m.def("plan", &plan, "graph"_a, py::kw_only(), "target"_a = "h200", "layout"_a = "auto", "max_group_ops"_a = 32,
        "Plans a graph for a GPU (a device name such as 'h200', 'a100', or an arch such as 'sm_80').");
}

}  // namespace kiln::python
