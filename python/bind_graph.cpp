// kiln.Graph and kiln.Tensor (the builder methods are in bind_builders.cpp), kiln.load, kiln.random_inputs
// and kiln.run_reference.
#include <pybind11/stl/filesystem.h>
#include <map>

#include <filesystem>

#include "bindings.h"
#include "kiln/autodiff.h"
#include "kiln/json.h"
#include "kiln/onnx.h"
#include "kiln/op_info.h"
#include "kiln/reference.h"

namespace kiln::python {

using namespace pybind11::literals;

Tensor tensor_of(const Graph& g, const PyTensor& t) {
  if (t.graph.get() != &g) {
    throw_invalid("tensor '" + t.info().name + "' belongs to graph '" + t.graph->name() + "', not to graph '" +
                  g.name() + "'");
  }
  return t.tensor;
}

PyTensor made_by(const GraphPtr& g, Tensor t) {
  if (t.valid()) return {g, t};
  // The node just added says why; a declaration (input, parameter) records its problem on the graph.
  std::vector<Diagnostic> why;
  if (!g->nodes().empty()) why = g->nodes().back().build_errors;
  if (why.empty()) why = g->check();
  std::string problems;
  for (const Diagnostic& d : why) problems += (problems.empty() ? "" : "\n") + Graph::format_diagnostic(*g, d);
  throw_invalid(problems.empty() ? "graph '" + g->name() + "': no tensor was made" : problems);
}

DType dtype_from_py(const py::handle& dtype) {
  if (py::isinstance<py::str>(dtype)) {
    const std::string s = dtype.cast<std::string>();
    if (auto d = parse_dtype(s)) return *d;
    if (s == "float32") return DType::f32;
    if (s == "float16") return DType::f16;
    if (s == "bfloat16") return DType::bf16;
    throw_invalid("unknown dtype '" + s + "': expected f32, f16 or bf16");
  }
  // numpy.float32, numpy.dtype('float16'), ...: whatever numpy.dtype() makes of it.
  py::dtype d;
  try {
    d = py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype));
  } catch (const py::error_already_set&) {
    throw_invalid("unknown dtype " + py::repr(dtype).cast<std::string>() + ": expected f32, f16 or bf16");
  }
  if (d.kind() == 'f' && d.itemsize() == 4) return DType::f32;
  if (d.kind() == 'f' && d.itemsize() == 2) return DType::f16;
  throw_invalid("dtype " + d.attr("name").cast<std::string>() + " has no kiln dtype: expected f32, f16 or bf16");
}

std::optional<Layout> layout_from_py(const std::optional<std::string>& layout) {
  if (!layout) return std::nullopt;
  if (auto l = parse_layout(*layout)) return *l;
  throw_invalid("unknown layout '" + *layout + "': expected row_major, NCHW, NHWC, KCRS or KRSC");
}

namespace {

py::tuple shape_tuple(const Shape& s) {
  py::tuple t(static_cast<size_t>(s.rank()));
  for (int i = 0; i < s.rank(); ++i) t[static_cast<size_t>(i)] = s[i];
  return t;
}

std::vector<PyTensor> tensors_where(const GraphPtr& g, bool (*keep)(const Graph&, Tensor)) {
  std::vector<PyTensor> r;
  for (size_t i = 0; i < g->tensors().size(); ++i) {
    const Tensor t{static_cast<int32_t>(i)};
    if (keep(*g, t)) r.push_back({g, t});
  }
  return r;
}

// A node as Python reads it: names, not handles (kiln.Graph.nodes).
struct PyNode {
  std::string name, op;
  std::vector<std::string> inputs, outputs;  // tensor names, ports in the op's order
  py::dict attrs;
};

py::object attr_to_py(const AttrValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

PyNode node_view(const Graph& g, const Node& n) {
  PyNode r{n.name, n.op_text, {}, {}, {}};
  for (const auto& port : n.inputs)
    for (Tensor t : port) r.inputs.push_back(g.tensor(t).name);
  for (Tensor t : n.outputs) r.outputs.push_back(g.tensor(t).name);
  for (const auto& [name, value] : n.attrs) r.attrs[py::str(name)] = attr_to_py(value);
  return r;
}

// Graphs must pass verify() before they are saved, planned, run or given random values.
void verify_or_throw(Graph& g) { throw_if_error(g.verify()); }

GraphPtr load(const std::filesystem::path& path,
              const std::optional<std::map<std::string, std::vector<int64_t>>>& shapes) {
  const std::string p = path.string();
  if (is_onnx_path(p)) {
    OnnxOptions o;
    if (shapes)
      for (const auto& [name, dims] : *shapes) o.input_shapes.emplace(name, Shape(dims));
    return std::make_shared<Graph>(value_or_throw(load_onnx(p, o)));
  }
  if (shapes && !shapes->empty()) {
    throw_invalid(p + ": shapes= applies to ONNX models (.onnx); a kiln graph's shapes are in its JSON");
  }
  return std::make_shared<Graph>(value_or_throw(load_graph(p)));
}

void bind_tensor(py::class_<PyTensor>& c) {
  c.def_property_readonly("name", [](const PyTensor& t) { return t.info().name; })
      .def_property_readonly(
          "shape",
          [](const PyTensor& t) -> py::object {
            // An intermediate whose node failed to infer has no shape yet (verify() says why).
            if (!t.info().inferred) return py::none();
            return shape_tuple(t.info().shape);
          },
          "logical dims as a tuple (NCHW order for activations, whatever the layout); None if not inferred")
      .def_property_readonly("dtype", [](const PyTensor& t) { return std::string(dtype_name(t.info().dtype)); })
      .def_property_readonly("layout", [](const PyTensor& t) { return std::string(layout_name(t.info().layout)); })
      .def_property_readonly("kind", [](const PyTensor& t) { return std::string(tensor_kind_name(t.info().kind)); })
      .def_property_readonly("graph", [](const PyTensor& t) { return t.graph; })
      .def("__eq__", [](const PyTensor& a, const PyTensor& b) { return a.graph == b.graph && a.tensor == b.tensor; })
      .def("__hash__", [](const PyTensor& t) { return py::hash(py::make_tuple(size_t(t.graph.get()), t.tensor.id)); })
      .def("__repr__", [](const PyTensor& t) {
        const TensorInfo& i = t.info();
        return "<kiln.Tensor '" + i.name + "' " + std::string(dtype_name(i.dtype)) + " " +
               (i.inferred ? i.shape.to_string() : std::string("[?]")) + " " + std::string(tensor_kind_name(i.kind)) +
               ">";
      });
}

void bind_graph_methods(py::class_<Graph, GraphPtr>& c) {
  c.def(py::init([](std::string name) { return std::make_shared<Graph>(std::move(name)); }), "name"_a = "graph")
      .def_property(
          "name", [](const Graph& g) { return g.name(); }, [](Graph& g, std::string n) { g.set_name(std::move(n)); })
      .def(
          "input",
          [](const GraphPtr& g, std::string name, const py::sequence& shape, const py::object& dtype,
             const std::optional<std::string>& layout) {
            // Dims are numbers, or symbolic dims as text ("N", "2*N + 1") over symbols declared by dim().
            std::vector<DimExpr> dims;
            bool symbolic = false;
            for (const py::handle& d : shape) {
              if (py::isinstance<py::str>(d)) {
                dims.push_back(value_or_throw(DimExpr::parse(d.cast<std::string>())));
                symbolic = true;
              } else {
                dims.push_back(DimExpr(d.cast<int64_t>()));
              }
            }
            if (!symbolic) {
              std::vector<int64_t> numbers;
              for (const DimExpr& d : dims) numbers.push_back(*d.constant());
              return made_by(g,
                             g->input(std::move(name), Shape(numbers), dtype_from_py(dtype), layout_from_py(layout)));
            }
            return made_by(g, g->symbolic_input(std::move(name), dims, dtype_from_py(dtype), layout_from_py(layout)));
          },
          "name"_a, "shape"_a, "dtype"_a = "f32", "layout"_a = py::none())
      .def(
          "dim",
          [](const GraphPtr& g, std::string name, int64_t min, int64_t max) { g->dim(std::move(name), min, max); },
          "name"_a, "min"_a, "max"_a, "declares a symbolic dim that input shapes may use, with its range")
      .def_property_readonly("is_symbolic", &Graph::is_symbolic)
      .def_property_readonly("dims",
                             [](const Graph& g) {
                               std::map<std::string, std::pair<int64_t, int64_t>> out;
                               for (const auto& [name, r] : g.dim_ranges()) out[name] = {r.min, r.max};
                               return out;
                             })
      .def(
          "bind",
          [](const Graph& g, const std::map<std::string, int64_t>& values) {
            DimBindings b(values.begin(), values.end());
            return std::make_shared<Graph>(value_or_throw(g.bind(b)));
          },
          "values"_a, "the graph with its symbolic dims fixed, verified (kiln.Error names a bad value)")
      .def(
          "dims_from_shapes",
          [](const Graph& g, const std::map<std::string, std::vector<int64_t>>& shapes) {
            std::map<std::string, Shape, std::less<>> s;
            for (const auto& [name, dims] : shapes) s.emplace(name, Shape(dims));
            const DimBindings b = value_or_throw(g.dims_from_shapes(s));
            return std::map<std::string, int64_t>(b.begin(), b.end());
          },
          "shapes"_a,
          "the symbolic dims' values that these input shapes imply ({name: shape}); kiln.Error names the tensor, "
          "dim and symbol that disagree")
      .def(
          "parameter",
          [](const GraphPtr& g, std::string name, std::vector<int64_t> shape, const py::object& dtype,
             const std::optional<std::string>& layout) {
            return made_by(g,
                           g->parameter(std::move(name), Shape(shape), dtype_from_py(dtype), layout_from_py(layout)));
          },
          "name"_a, "shape"_a, "dtype"_a = "f32", "layout"_a = py::none())
      .def(
          "output",
          [](const GraphPtr& g, const PyTensor& t, std::string name, const std::optional<std::string>& layout) {
            g->output(tensor_of(*g, t), std::move(name), layout_from_py(layout));
            return t;
          },
          "tensor"_a, "name"_a = "", "layout"_a = py::none())
      .def("verify", &verify_or_throw, "raises kiln.Error listing every problem, each naming its node and port")
      .def("problems",
           [](Graph& g) {
             std::vector<std::string> r;
             for (const Diagnostic& d : g.check()) r.push_back(Graph::format_diagnostic(g, d));
             return r;
           })
      .def("save",
           [](Graph& g, const std::filesystem::path& path) {
             verify_or_throw(g);
             throw_if_error(save_graph(g, path.string()));
           })
      .def("to_json",
           [](Graph& g) {
             verify_or_throw(g);
             return graph_to_json(g);
           })
      .def(
          "set_value",
          [](const GraphPtr& g, const PyTensor& t, const py::handle& array) {
            const TensorInfo& info = g->tensor(tensor_of(*g, t));
            auto value = std::make_shared<HostTensor>(host_tensor_from_array(array, info.name, info.shape, info.dtype));
            throw_if_error(g->set_value(t.tensor, std::move(value)));
          },
          "parameter"_a, "value"_a)
      .def(
          "value",
          [](const Graph& g, const std::string& name) -> py::object {
            const HostTensor* v = g.value(name);
            return v ? py::object(array_from_host_tensor(*v)) : py::none();
          },
          "name"_a)
      .def(
          "tensor",
          [](const GraphPtr& g, const std::string& name) {
            auto t = g->find_tensor(name);
            if (!t) throw py::key_error("graph '" + g->name() + "' has no tensor '" + name + "'");
            return PyTensor{g, *t};
          },
          "name"_a)
      .def_property_readonly("inputs",
                             [](const GraphPtr& g) {
                               return tensors_where(
                                   g, [](const Graph& gr, Tensor t) { return gr.tensor(t).kind == TensorKind::input; });
                             })
      .def_property_readonly("parameters",
                             [](const GraphPtr& g) {
                               return tensors_where(g, [](const Graph& gr, Tensor t) {
                                 return gr.tensor(t).kind == TensorKind::parameter;
                               });
                             })
      .def_property_readonly(
          "tensors", [](const GraphPtr& g) { return tensors_where(g, [](const Graph&, Tensor) { return true; }); })
      .def_property_readonly("outputs",
                             [](const GraphPtr& g) {
                               std::vector<PyTensor> r;
                               for (Tensor t : g->outputs()) r.push_back({g, t});
                               return r;
                             })
      .def_property_readonly("nodes",
                             [](const Graph& g) {
                               std::vector<PyNode> r;
                               for (const Node& n : g.nodes()) r.push_back(node_view(g, n));
                               return r;
                             })
      .def("copy", [](const Graph& g) { return std::make_shared<Graph>(g); })
      .def("__eq__", [](const Graph& a, const Graph& b) { return a == b; })
      .def("__repr__", [](const Graph& g) {
        return "<kiln.Graph '" + g.name() + "': " + std::to_string(g.nodes().size()) + " nodes, " +
               std::to_string(g.outputs().size()) + " outputs>";
      });
}

}  // namespace

void bind_graph(py::module_& m) {
  py::class_<PyTensor> tensor(m, "Tensor", "A tensor of a kiln.Graph (made by its builder methods).");
  bind_tensor(tensor);
  py::class_<PyNode>(m, "Node", "A node of a kiln.Graph, as names (kiln.Graph.nodes).")
      .def_readonly("name", &PyNode::name)
      .def_readonly("op", &PyNode::op)
      .def_readonly("inputs", &PyNode::inputs)
      .def_readonly("outputs", &PyNode::outputs)
      .def_readonly("attrs", &PyNode::attrs)
      .def("__repr__", [](const PyNode& n) { return "<kiln.Node '" + n.name + "' (" + n.op + ")>"; });
  py::class_<Graph, GraphPtr> graph(m, "Graph", "A kiln graph: tensors and nodes, built as kiln::Graph is.");
  bind_graph_methods(graph);
  bind_builders(graph, tensor);

  m.def("load", &load, "path"_a, "shapes"_a = py::none(),
        "A kiln graph (.json) or an ONNX model (.onnx; shapes= gives open input dims: {'x': (1, 3, 224, 224)}).");
  m.def("onnx_available", &onnx_available, "whether this build of kiln reads ONNX models");
  m.def(
      "backward",
      [](const GraphPtr& g, const std::string& loss) {
        Training tr = value_or_throw(kiln::backward(*g, loss));
        return py::make_tuple(std::make_shared<Graph>(std::move(tr.graph)), tr.warnings);
      },
      "graph"_a, "loss"_a,
      "The training graph of `graph` for the scalar tensor named `loss` and the warnings (parameters the loss "
      "does not reach): (kiln.Graph, [str]). The graph has an output grad/<parameter> for every parameter "
      "(docs/training.md).");
  m.def(
      "ops",
      [] {
        py::list r;
        auto ports = [](const std::vector<OpPortInfo>& ps) {
          py::list l;
          for (const OpPortInfo& p : ps)
            l.append(py::dict("name"_a = std::string(p.name), "optional"_a = p.optional, "list"_a = p.list,
                              "scalar_attr"_a = p.scalar_attr));
          return l;
        };
        for (const OpInfo& i : op_infos()) {
          py::list attrs;
          for (const OpAttrInfo& a : i.attrs) {
            py::list choices;
            for (std::string_view c : a.choices) choices.append(std::string(c));
            attrs.append(py::dict("name"_a = std::string(a.name), "type"_a = std::string(a.type),
                                  "default"_a = a.default_value ? attr_to_py(*a.default_value) : py::none(),
                                  "optional"_a = a.optional, "choices"_a = choices));
          }
          r.append(py::dict("name"_a = std::string(i.name), "summary"_a = std::string(i.summary),
                            "onnx"_a = std::string(i.onnx), "inputs"_a = ports(i.inputs),
                            "outputs"_a = ports(i.outputs), "attrs"_a = attrs));
        }
        return r;
      },
      "Every op of kiln's registry: {name, summary, onnx, inputs/outputs: [{name, optional, list, scalar_attr}], "
      "attrs: [{name, type, default, optional, choices}]}, in registry order.");
  m.def(
      "random_inputs",
      [](const GraphPtr& g, uint64_t seed) {
        verify_or_throw(*g);
        return dict_from_tensor_map(random_inputs(*g, seed));
      },
      "graph"_a, "seed"_a = 0,
      "Deterministic random values for every input and parameter (a parameter's own value where it has one).");
  m.def(
      "run_reference",
      [](const GraphPtr& g, const py::dict& inputs) {
        verify_or_throw(*g);
        const Graph copy = *g;  // the GIL is released below: another thread may build on `g` meanwhile
        const TensorMap bindings = bindings_from_dict(copy, inputs);
        Result<TensorMap> out = Status(StatusCode::internal, "not run");
        {
          py::gil_scoped_release unlocked;
          out = run_reference(copy, bindings);
        }
        return dict_from_tensor_map(value_or_throw(std::move(out)));
      },
      "graph"_a, "inputs"_a, "Runs the graph op by op in f64 on the CPU (the oracle); returns {output name: array}.");
}

}  // namespace kiln::python
