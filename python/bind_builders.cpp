// kiln.Graph's builder methods, one per kiln::Graph builder (include/kiln/graph.h), with the options structs
// as keyword arguments (g.conv2d(x, w, stride=(2, 2), padding=(1, 1))), and Tensor's arithmetic operators.
// As in C++, a builder never raises for a bad graph: the problem is recorded on the node and verify() reports
// it. What raises at once is a call Python cannot express in C++: an unknown keyword (TypeError), a tensor of
// another graph, an attribute value of no kiln type.
#include <variant>

#include "bindings.h"

namespace kiln::python {

using namespace pybind11::literals;

namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;
// A binary op's operand: a tensor, or a scalar constant.
using Operand = std::variant<PyTensor, double>;

Tensor optional_tensor(const Graph& g, const std::optional<PyTensor>& t) { return t ? tensor_of(g, *t) : Tensor{}; }

PyTensor binary(const GraphPtr& g, std::string_view op, const Operand& a, const Operand& b, std::string name) {
  const auto* ta = std::get_if<PyTensor>(&a);
  const auto* tb = std::get_if<PyTensor>(&b);
  if (ta && tb) return {g, g->binary(op, tensor_of(*g, *ta), tensor_of(*g, *tb), std::move(name))};
  if (ta) return {g, g->binary(op, tensor_of(*g, *ta), std::get<double>(b), std::move(name))};
  if (tb) return {g, g->binary(op, std::get<double>(a), tensor_of(*g, *tb), std::move(name))};
  throw_invalid(std::string(op) + ": at least one operand must be a kiln.Tensor");
}

[[noreturn]] void bad_attr(const std::string& key, const py::handle& v) {
  throw py::type_error("attribute '" + key + "': expected an int, float, bool, str or a list of ints or floats, got " +
                       py::repr(v).cast<std::string>());
}

bool is_int(const py::handle& v) { return !py::isinstance<py::bool_>(v) && PyIndex_Check(v.ptr()); }

AttrValue attr_from_py(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return AttrValue(v.cast<bool>());
  if (py::isinstance<py::str>(v)) return AttrValue(v.cast<std::string>());
  if (py::isinstance<py::float_>(v)) return AttrValue(v.cast<double>());
  if (is_int(v)) {
    int64_t i = 0;
    if (!py::detail::make_caster<int64_t>().load(v, true)) bad_attr(key, v);  // beyond int64
    i = v.cast<int64_t>();
    return AttrValue(i);
  }
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) bad_attr(key, v);
  // A list with a float in it is a float list ([0.5, 2] too); ints alone are an int list.
  Floats floats;
  Ints ints;
  bool any_float = false;
  for (py::handle item : v) {
    py::detail::make_caster<int64_t> as_int;
    if (is_int(item) && as_int.load(item, true)) {
      ints.push_back(static_cast<int64_t>(as_int));
      floats.push_back(static_cast<double>(ints.back()));
    } else if (py::isinstance<py::float_>(item)) {
      any_float = true;
      floats.push_back(item.cast<double>());
    } else {
      bad_attr(key, v);
    }
  }
  return any_float ? AttrValue(std::move(floats)) : AttrValue(std::move(ints));
}

Attrs attrs_from_dict(const py::dict& d) {
  Attrs attrs;
  for (auto [k, v] : d) {
    const std::string key = py::str(k).cast<std::string>();
    attrs.emplace(key, attr_from_py(key, v));  // dict keys are unique
  }
  return attrs;
}

[[noreturn]] void bad_input(const py::handle& port, const py::handle& v) {
  throw py::type_error("input '" + py::str(port).cast<std::string>() +
                       "': expected a kiln.Tensor or a list of them, got " + py::repr(v).cast<std::string>());
}

std::vector<PyTensor> add_node(const GraphPtr& g, std::string_view op, const py::dict& inputs, const py::dict& attrs,
                               std::string name, const std::map<std::string, std::string>& outputs) {
  PortInputs ports;
  for (auto [k, v] : inputs) {
    std::vector<Tensor> ts;
    if (py::isinstance<PyTensor>(v)) {
      ts.push_back(tensor_of(*g, v.cast<const PyTensor&>()));
    } else if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
      for (py::handle item : v) {
        if (!py::isinstance<PyTensor>(item)) bad_input(k, v);
        ts.push_back(tensor_of(*g, item.cast<const PyTensor&>()));
      }
    } else {
      bad_input(k, v);
    }
    ports.emplace_back(py::str(k).cast<std::string>(), std::move(ts));
  }
  const std::vector<std::pair<std::string, std::string>> names(outputs.begin(), outputs.end());
  std::vector<PyTensor> r;
  for (Tensor t : g->add_node(op, ports, attrs_from_dict(attrs), std::move(name), names)) r.push_back(made_by(g, t));
  return r;
}

void bind_anchors(py::class_<Graph, GraphPtr>& c) {
  c.def(
       "conv2d",
       [](const GraphPtr& g, const PyTensor& x, const PyTensor& w, const std::optional<PyTensor>& bias, Ints stride,
          Ints padding, Ints dilation, int64_t groups, std::string name) {
         const Conv2dOptions o{std::move(stride), std::move(padding), std::move(dilation), groups};
         const Tensor tx = tensor_of(*g, x), tw = tensor_of(*g, w);
         return made_by(g, bias ? g->conv2d(tx, tw, tensor_of(*g, *bias), o, std::move(name))
                                : g->conv2d(tx, tw, o, std::move(name)));
       },
       "x"_a, "w"_a, "bias"_a = py::none(), py::kw_only(), "stride"_a = Ints{1, 1}, "padding"_a = Ints{0, 0},
       "dilation"_a = Ints{1, 1}, "groups"_a = 1, "name"_a = "")
      .def(
          "matmul",
          [](const GraphPtr& g, const PyTensor& a, const PyTensor& b, const std::optional<PyTensor>& bias,
             bool transpose_a, bool transpose_b, std::string name) {
            const MatmulOptions o{transpose_a, transpose_b};
            const Tensor ta = tensor_of(*g, a), tb = tensor_of(*g, b);
            return made_by(g, bias ? g->matmul(ta, tb, tensor_of(*g, *bias), o, std::move(name))
                                   : g->matmul(ta, tb, o, std::move(name)));
          },
          "a"_a, "b"_a, "bias"_a = py::none(), py::kw_only(), "transpose_a"_a = false, "transpose_b"_a = false,
          "name"_a = "");
}

void bind_norms(py::class_<Graph, GraphPtr>& c) {
  c.def(
       "bias_add",
       [](const GraphPtr& g, const PyTensor& x, const PyTensor& bias, int64_t axis, std::string name) {
         return made_by(g, g->bias_add(tensor_of(*g, x), tensor_of(*g, bias), axis, std::move(name)));
       },
       "x"_a, "bias"_a, "axis"_a = 1, py::kw_only(), "name"_a = "")
      .def(
          "batch_norm",
          [](const GraphPtr& g, const PyTensor& x, const PyTensor& scale, const PyTensor& shift, const PyTensor& mean,
             const PyTensor& var, double epsilon, std::string name) {
            return made_by(g, g->batch_norm(tensor_of(*g, x), tensor_of(*g, scale), tensor_of(*g, shift),
                                            tensor_of(*g, mean), tensor_of(*g, var), epsilon, std::move(name)));
          },
          "x"_a, "scale"_a, "shift"_a, "mean"_a, "var"_a, py::kw_only(), "epsilon"_a = 1e-5, "name"_a = "")
      .def(
          "softmax",
          [](const GraphPtr& g, const PyTensor& x, int64_t axis, std::string name) {
            return made_by(g, g->softmax(tensor_of(*g, x), axis, std::move(name)));
          },
          "x"_a, "axis"_a = -1, py::kw_only(), "name"_a = "");
  // layer_norm, instance_norm, rms_norm and group_norm share NormOptions.
  using NormMethod = Tensor (Graph::*)(Tensor, const NormOptions&, std::string);
  const std::pair<const char*, NormMethod> norms[] = {
      {"layer_norm", &Graph::layer_norm}, {"instance_norm", &Graph::instance_norm}, {"rms_norm", &Graph::rms_norm}};
  auto options = [](const Graph& g, const std::optional<PyTensor>& scale, const std::optional<PyTensor>& shift,
                    double epsilon, int64_t normalized_ndim) {
    return NormOptions{optional_tensor(g, scale), optional_tensor(g, shift), epsilon, normalized_ndim};
  };
  for (const auto& norm : norms) {
    const NormMethod method = norm.second;  // a plain variable: clang < 16 cannot capture a structured binding
    c.def(
        norm.first,
        [method, options](const GraphPtr& g, const PyTensor& x, const std::optional<PyTensor>& scale,
                          const std::optional<PyTensor>& shift, double epsilon, int64_t normalized_ndim,
                          std::string name) {
          return made_by(g, ((*g).*method)(tensor_of(*g, x), options(*g, scale, shift, epsilon, normalized_ndim),
                                           std::move(name)));
        },
        "x"_a, py::kw_only(), "scale"_a = py::none(), "shift"_a = py::none(), "epsilon"_a = 1e-5,
        "normalized_ndim"_a = 1, "name"_a = "");
  }
  c.def(
      "group_norm",
      [options](const GraphPtr& g, const PyTensor& x, int64_t groups, const std::optional<PyTensor>& scale,
                const std::optional<PyTensor>& shift, double epsilon, std::string name) {
        return made_by(g,
                       g->group_norm(tensor_of(*g, x), groups, options(*g, scale, shift, epsilon, 1), std::move(name)));
      },
      "x"_a, "groups"_a, py::kw_only(), "scale"_a = py::none(), "shift"_a = py::none(), "epsilon"_a = 1e-5,
      "name"_a = "");
}

void bind_pointwise(py::class_<Graph, GraphPtr>& c) {
  using UnaryMethod = Tensor (Graph::*)(Tensor, std::string);
  const std::pair<const char*, UnaryMethod> unary[] = {{"relu", &Graph::relu},
                                                       {"relu6", &Graph::relu6},
                                                       {"sigmoid", &Graph::sigmoid},
                                                       {"tanh", &Graph::tanh},
                                                       {"gelu", &Graph::gelu},
                                                       {"gelu_tanh", &Graph::gelu_tanh},
                                                       {"silu", &Graph::silu},
                                                       {"hardswish", &Graph::hardswish},
                                                       {"hardsigmoid", &Graph::hardsigmoid},
                                                       {"mish", &Graph::mish},
                                                       {"exp", &Graph::exp},
                                                       {"log", &Graph::log},
                                                       {"sqrt", &Graph::sqrt},
                                                       {"rsqrt", &Graph::rsqrt},
                                                       {"abs", &Graph::abs},
                                                       {"neg", &Graph::neg},
                                                       {"reciprocal", &Graph::reciprocal},
                                                       {"identity", &Graph::identity}};
  for (const auto& u : unary) {
    const UnaryMethod method = u.second;  // as above
    c.def(
        u.first,
        [method](const GraphPtr& g, const PyTensor& x, std::string name) {
          return made_by(g, ((*g).*method)(tensor_of(*g, x), std::move(name)));
        },
        "x"_a, py::kw_only(), "name"_a = "");
  }
  // softsign has no C++ builder method of its own: Graph::unary("softsign", x) is how C++ writes it.
  c.def(
       "softsign",
       [](const GraphPtr& g, const PyTensor& x, std::string name) {
         return made_by(g, g->unary("softsign", tensor_of(*g, x), {}, std::move(name)));
       },
       "x"_a, py::kw_only(), "name"_a = "")
      .def(
          "unary",
          [](const GraphPtr& g, std::string_view op, const PyTensor& x, const py::dict& attrs, std::string name) {
            return made_by(g, g->unary(op, tensor_of(*g, x), attrs_from_dict(attrs), std::move(name)));
          },
          "op"_a, "x"_a, "attrs"_a = py::dict(), py::kw_only(), "name"_a = "")
      .def(
          "clamp",
          [](const GraphPtr& g, const PyTensor& x, std::optional<double> min, std::optional<double> max,
             std::string name) { return made_by(g, g->clamp(tensor_of(*g, x), min, max, std::move(name))); },
          "x"_a, "min"_a = py::none(), "max"_a = py::none(), py::kw_only(), "name"_a = "")
      .def(
          "leaky_relu",
          [](const GraphPtr& g, const PyTensor& x, double alpha, std::string name) {
            return made_by(g, g->leaky_relu(tensor_of(*g, x), alpha, std::move(name)));
          },
          "x"_a, "alpha"_a = 0.01, py::kw_only(), "name"_a = "")
      .def(
          "elu",
          [](const GraphPtr& g, const PyTensor& x, double alpha, std::string name) {
            return made_by(g, g->elu(tensor_of(*g, x), alpha, std::move(name)));
          },
          "x"_a, "alpha"_a = 1.0, py::kw_only(), "name"_a = "")
      .def(
          "softplus",
          [](const GraphPtr& g, const PyTensor& x, double beta, double threshold, std::string name) {
            return made_by(g, g->softplus(tensor_of(*g, x), beta, threshold, std::move(name)));
          },
          "x"_a, "beta"_a = 1.0, "threshold"_a = 20.0, py::kw_only(), "name"_a = "")
      .def(
          "binary",
          [](const GraphPtr& g, std::string_view op, const Operand& a, const Operand& b, std::string name) {
            return binary(g, op, a, b, std::move(name));
          },
          "op"_a, "a"_a, "b"_a, py::kw_only(), "name"_a = "");
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum", "pow"}) {
    c.def(
        op,
        [op](const GraphPtr& g, const Operand& a, const Operand& b, std::string name) {
          return binary(g, op, a, b, std::move(name));
        },
        "a"_a, "b"_a, py::kw_only(), "name"_a = "");
  }
}

void bind_pools(py::class_<Graph, GraphPtr>& c) {
  c.def(
       "max_pool2d",
       [](const GraphPtr& g, const PyTensor& x, Ints kernel, Ints stride, Ints padding, bool ceil_mode,
          std::string name) {
         const Pool2dOptions o{std::move(kernel), std::move(stride), std::move(padding), ceil_mode, true};
         return made_by(g, g->max_pool2d(tensor_of(*g, x), o, std::move(name)));
       },
       "x"_a, py::kw_only(), "kernel"_a = Ints{2, 2}, "stride"_a = Ints{}, "padding"_a = Ints{0, 0},
       "ceil_mode"_a = false, "name"_a = "")
      .def(
          "avg_pool2d",
          [](const GraphPtr& g, const PyTensor& x, Ints kernel, Ints stride, Ints padding, bool ceil_mode,
             bool count_include_pad, std::string name) {
            const Pool2dOptions o{std::move(kernel), std::move(stride), std::move(padding), ceil_mode,
                                  count_include_pad};
            return made_by(g, g->avg_pool2d(tensor_of(*g, x), o, std::move(name)));
          },
          "x"_a, py::kw_only(), "kernel"_a = Ints{2, 2}, "stride"_a = Ints{}, "padding"_a = Ints{0, 0},
          "ceil_mode"_a = false, "count_include_pad"_a = true, "name"_a = "")
      .def(
          "global_avg_pool",
          [](const GraphPtr& g, const PyTensor& x, std::string name) {
            return made_by(g, g->global_avg_pool(tensor_of(*g, x), std::move(name)));
          },
          "x"_a, py::kw_only(), "name"_a = "")
      .def(
          "global_max_pool",
          [](const GraphPtr& g, const PyTensor& x, std::string name) {
            return made_by(g, g->global_max_pool(tensor_of(*g, x), std::move(name)));
          },
          "x"_a, py::kw_only(), "name"_a = "");
}

void bind_data_movement(py::class_<Graph, GraphPtr>& c) {
  c.def(
       "layout_convert",
       [](const GraphPtr& g, const PyTensor& x, const std::string& to, std::string name) {
         return made_by(g, g->layout_convert(tensor_of(*g, x), *layout_from_py(to), std::move(name)));
       },
       "x"_a, "to"_a, py::kw_only(), "name"_a = "")
      .def(
          "reshape",
          [](const GraphPtr& g, const PyTensor& x, Ints shape, std::string name) {
            return made_by(g, g->reshape(tensor_of(*g, x), std::move(shape), std::move(name)));
          },
          "x"_a, "shape"_a, py::kw_only(), "name"_a = "")
      .def(
          "transpose",
          [](const GraphPtr& g, const PyTensor& x, Ints perm, std::string name) {
            return made_by(g, g->transpose(tensor_of(*g, x), std::move(perm), std::move(name)));
          },
          "x"_a, "perm"_a, py::kw_only(), "name"_a = "")
      .def(
          "concat",
          [](const GraphPtr& g, const std::vector<PyTensor>& xs, int64_t axis, std::string name) {
            std::vector<Tensor> ts;
            for (const PyTensor& t : xs) ts.push_back(tensor_of(*g, t));
            return made_by(g, g->concat(ts, axis, std::move(name)));
          },
          "xs"_a, "axis"_a = 1, py::kw_only(), "name"_a = "")
      .def(
          "slice",
          [](const GraphPtr& g, const PyTensor& x, Ints starts, Ints ends, Ints steps, std::string name) {
            return made_by(
                g, g->slice(tensor_of(*g, x), std::move(starts), std::move(ends), std::move(steps), std::move(name)));
          },
          "x"_a, "starts"_a, "ends"_a, "steps"_a = Ints{}, py::kw_only(), "name"_a = "")
      .def(
          "upsample2d",
          [](const GraphPtr& g, const PyTensor& x, Floats scale, Ints size, std::string mode, bool align_corners,
             std::string name) {
            const Upsample2dOptions o{std::move(scale), std::move(size), std::move(mode), align_corners};
            return made_by(g, g->upsample2d(tensor_of(*g, x), o, std::move(name)));
          },
          "x"_a, py::kw_only(), "scale"_a = Floats{}, "size"_a = Ints{}, "mode"_a = "nearest",
          "align_corners"_a = false, "name"_a = "")
      .def(
          "cast",
          [](const GraphPtr& g, const PyTensor& x, const py::object& to, std::string name) {
            return made_by(g, g->cast(tensor_of(*g, x), dtype_from_py(to), std::move(name)));
          },
          "x"_a, "to"_a, py::kw_only(), "name"_a = "")
      .def("add_node", &add_node, "op"_a, "inputs"_a, "attrs"_a = py::dict(), py::kw_only(), "name"_a = "",
           "outputs"_a = std::map<std::string, std::string>{},
           "The generic builder: inputs {port: tensor or [tensors]}, attrs {name: value}, outputs {port: name}.");
}

// x + y, x * 2.0, 1.0 - x, -x, x ** 2.0: the graph's pointwise ops on the tensors' own graph.
void bind_operators(py::class_<PyTensor>& c) {
  const std::pair<const char*, const char*> ops[] = {
      {"add", "add"}, {"sub", "sub"}, {"mul", "mul"}, {"truediv", "div"}, {"pow", "pow"}};
  for (const auto& [py_name, op_name] : ops) {
    const char* op = op_name;  // a plain variable, to be captured (see bind_norms)
    c.def(("__" + std::string(py_name) + "__").c_str(),
          [op](const PyTensor& a, const Operand& b) { return binary(a.graph, op, a, b, {}); });
    c.def(("__r" + std::string(py_name) + "__").c_str(),
          [op](const PyTensor& b, double a) { return binary(b.graph, op, a, b, {}); });
  }
  c.def("__neg__", [](const PyTensor& x) { return made_by(x.graph, x.graph->neg(x.tensor)); });
}

}  // namespace

void bind_builders(py::class_<Graph, GraphPtr>& graph, py::class_<PyTensor>& tensor) {
  bind_anchors(graph);
  bind_norms(graph);
  bind_pointwise(graph);
  bind_pools(graph);
  bind_data_movement(graph);
  bind_operators(tensor);
}

}  // namespace kiln::python
