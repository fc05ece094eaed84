// kiln.Graph's builder methods: one per op of the registry, made from its row (op_infos(): ports and
// attributes by their registry names, so a new op has its Python builder with no line here), the generic
// unary / binary / add_node, and Tensor's arithmetic operators.
// As in C++, a builder never raises for a bad graph: the problem is recorded on the node and verify() reports
// it. What raises at once is a call Python cannot express in C++: an unknown keyword (TypeError), a tensor of
// another graph, an attribute value of no kiln type.
#include <algorithm>
#include <deque>
#include <variant>

#include "bindings.h"
#include "kiln/op_info.h"

namespace kiln::python {

using namespace pybind11::literals;

namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<double>;
// A binary op's operand: a tensor, or a scalar constant.
using Operand = std::variant<PyTensor, double>;

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

// A Python number as a double: a float, an int (any size) or anything with __float__ (NumPy scalars); not a
// bool or a string.
std::optional<double> number_from_py(const py::handle& v) {
  if (py::isinstance<py::bool_>(v) || py::isinstance<py::str>(v) || py::isinstance<py::bytes>(v)) return std::nullopt;
  if (!PyFloat_Check(v.ptr()) && !PyIndex_Check(v.ptr()) && !PyObject_HasAttrString(v.ptr(), "__float__"))
    return std::nullopt;
  const double d = PyFloat_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  return d;
}

// An int attribute's value: anything with __index__ within int64 (a NumPy integer too), not a bool.
std::optional<int64_t> int_from_py(const py::handle& v) {
  py::detail::make_caster<int64_t> c;
  if (py::isinstance<py::bool_>(v) || !PyIndex_Check(v.ptr()) || !c.load(v, true)) return std::nullopt;
  return static_cast<int64_t>(c);
}

// A value of the generic builders (unary, add_node), typed by what it is: a bool, str, float or int (within
// int64), or a list of ints or floats (a float in it makes it a float list: [0.5, 2]).
AttrValue attr_from_py(const std::string& key, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return AttrValue(v.cast<bool>());
  if (py::isinstance<py::str>(v)) return AttrValue(v.cast<std::string>());
  if (py::isinstance<py::float_>(v)) return AttrValue(v.cast<double>());
  if (PyIndex_Check(v.ptr())) {
    const auto i = int_from_py(v);
    if (!i) bad_attr(key, v);  // beyond int64
    return AttrValue(*i);
  }
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) bad_attr(key, v);
  Floats floats;
  Ints ints;
  bool any_float = false;
  for (py::handle item : v) {
    if (const auto i = int_from_py(item)) {
      ints.push_back(*i);
      floats.push_back(static_cast<double>(*i));
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

// ---- one builder method per registry op (op_infos()), with no hand list ----
//
// Parameters, in this order: the required input ports, the required attributes, then the optional ports and
// the attributes that have a default or may be absent (all in registry order); each may be passed by
// position or keyword, `name=` by keyword only. So `g.conv2d(x, w, b, stride=(2, 2))`, `g.group_norm(x, 2)`,
// `g.clamp(x, 0.0, 6.0)`, `g.slice(x, starts, ends)`. A port that may be a number (a binary op's a or b)
// takes a float as well, which becomes the attribute of that name. A missing, repeated or unknown argument
// is a TypeError, as for any Python function; a value the op cannot take is recorded on the node for
// verify() to report, as in C++.
struct BuilderParam {
  std::string_view name;
  const OpPortInfo* port = nullptr;  // else an attribute
  const OpAttrInfo* attr = nullptr;
  bool required = false;
  std::string default_text;  // for the signature: "None", "[1, 1]", "1e-05"
};

std::string py_literal(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          return x ? "True" : "False";  // not 1 / 0
        else
          return py::repr(py::cast(x)).template cast<std::string>();
      },
      v);
}

std::vector<BuilderParam> builder_params(const OpInfo& op) {
  std::vector<BuilderParam> required, rest;
  auto is_port = [&](std::string_view name) {
    return std::any_of(op.inputs.begin(), op.inputs.end(), [&](const OpPortInfo& p) { return p.name == name; });
  };
  for (const OpPortInfo& p : op.inputs)
    (p.optional ? rest : required).push_back({p.name, &p, nullptr, !p.optional, "None"});
  for (const OpAttrInfo& a : op.attrs) {
    if (is_port(a.name)) continue;  // the scalar form of a port (a binary op's a or b)
    const bool req = !a.default_value && !a.optional;
    (req ? required : rest)
        .push_back({a.name, nullptr, &a, req, a.default_value ? py_literal(*a.default_value) : "None"});
  }
  required.insert(required.end(), rest.begin(), rest.end());
  return required;
}

std::string builder_signature(const OpInfo& op, const std::vector<BuilderParam>& params) {
  std::string s = std::string(op.name) + "(";
  for (const BuilderParam& p : params) {
    s += std::string(p.name) + (p.required ? "" : "=" + p.default_text) + ", ";
  }
  return s + "*, name='')";
}

std::vector<Tensor> port_tensors(const Graph& g, const OpInfo& op, const OpPortInfo& port, const py::handle& v) {
  if (py::isinstance<PyTensor>(v)) return {tensor_of(g, v.cast<const PyTensor&>())};
  const bool sequence = py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v);
  if (port.list && sequence &&
      std::all_of(v.begin(), v.end(), [](const py::handle& item) { return py::isinstance<PyTensor>(item); })) {
    std::vector<Tensor> ts;
    for (py::handle item : v) ts.push_back(tensor_of(g, item.cast<const PyTensor&>()));
    return ts;
  }
  throw py::type_error(std::string(op.name) + "(): input '" + std::string(port.name) + "': expected a kiln.Tensor" +
                       (port.list          ? " or a list of them"
                        : port.scalar_attr ? " or a number"
                                           : "") +
                       ", got " + py::repr(v).cast<std::string>());
}

// A sequence that is a list attribute's value: a list, a tuple, a NumPy array or any other non-string
// sequence.
bool is_value_sequence(const py::handle& v) {
  return !py::isinstance<py::str>(v) && !py::isinstance<py::bytes>(v) && PySequence_Check(v.ptr());
}

[[noreturn]] void bad_value(const OpInfo& op, const OpAttrInfo& a, const py::handle& v) {
  throw py::type_error(std::string(op.name) + "(): attribute '" + std::string(a.name) + "': expected " +
                       (a.type == "string" ? std::string("a str") : "a value of type " + std::string(a.type)) +
                       ", got " + py::repr(v).cast<std::string>());
}

// An attribute's value as the registry types it: a float from any number (an int, a NumPy scalar), a list
// from any sequence (a tuple, a NumPy array), an int from anything with __index__; a string attribute whose
// choices are dtype names (cast's `to`) also takes "float16" or a NumPy dtype. Anything else is a TypeError
// naming the attribute; a value of the right type that the op cannot take is the node's problem (verify()).
AttrValue attr_for(const OpInfo& op, const OpAttrInfo& a, const py::handle& v) {
  if (a.type == "bool") {
    if (!py::isinstance<py::bool_>(v)) bad_value(op, a, v);
    return AttrValue(v.cast<bool>());
  }
  if (a.type == "int") {
    const auto i = int_from_py(v);
    if (!i) bad_value(op, a, v);
    return AttrValue(*i);
  }
  if (a.type == "float") {
    const auto d = number_from_py(v);
    if (!d) bad_value(op, a, v);
    return AttrValue(*d);
  }
  if (a.type == "string") {
    const bool dtype = std::find(a.choices.begin(), a.choices.end(), "f32") != a.choices.end();
    if (dtype) return AttrValue(std::string(dtype_name(dtype_from_py(v))));
    if (!py::isinstance<py::str>(v)) bad_value(op, a, v);
    return AttrValue(v.cast<std::string>());
  }
  if (!is_value_sequence(v)) bad_value(op, a, v);
  const auto items = py::reinterpret_borrow<py::sequence>(v);
  if (a.type == "int list") {
    Ints ints;
    for (size_t k = 0; k < items.size(); ++k) {
      const auto i = int_from_py(items[k]);
      if (!i) bad_value(op, a, v);
      ints.push_back(*i);
    }
    return AttrValue(std::move(ints));
  }
  Floats floats;  // "float list"
  for (size_t k = 0; k < items.size(); ++k) {
    const auto d = number_from_py(items[k]);
    if (!d) bad_value(op, a, v);
    floats.push_back(*d);
  }
  return AttrValue(std::move(floats));
}

py::object build(const GraphPtr& g, const OpInfo& op, const std::vector<BuilderParam>& params, const py::args& args,
                 const py::kwargs& kwargs) {
  const std::string fn = std::string(op.name) + "()";
  if (args.size() > params.size())
    throw py::type_error(fn + " takes at most " + std::to_string(params.size()) + " positional arguments (" +
                         std::to_string(args.size()) + " given): " + builder_signature(op, params));
  std::vector<py::object> values(params.size());
  for (size_t i = 0; i < args.size(); ++i) values[i] = args[i];
  std::string name;
  for (auto [k, v] : kwargs) {
    const std::string key = py::str(k).cast<std::string>();
    if (key == "name") {
      if (!py::isinstance<py::str>(v))
        throw py::type_error(fn + ": name: expected a str, got " + py::repr(v).cast<std::string>());
      name = v.cast<std::string>();
      continue;
    }
    auto it = std::find_if(params.begin(), params.end(), [&](const BuilderParam& p) { return p.name == key; });
    if (it == params.end())
      throw py::type_error(fn + " got an unexpected keyword argument '" + key + "'; it takes " +
                           builder_signature(op, params));
    py::object& slot = values[static_cast<size_t>(it - params.begin())];
    if (slot) throw py::type_error(fn + " got multiple values for argument '" + key + "'");
    slot = py::reinterpret_borrow<py::object>(v);
  }
  PortInputs ports;
  Attrs attrs;
  for (size_t i = 0; i < params.size(); ++i) {
    const BuilderParam& p = params[i];
    const py::object& v = values[i];
    if (!v || v.is_none()) {
      if (p.required) throw py::type_error(fn + " missing required argument '" + std::string(p.name) + "'");
      continue;
    }
    if (p.port && p.port->scalar_attr && !py::isinstance<PyTensor>(v)) {
      const auto d = number_from_py(v);
      if (!d) port_tensors(*g, op, *p.port, v);  // raises: neither a tensor nor a number
      attrs.emplace(std::string(p.name), AttrValue(*d));
    } else if (p.port) {
      ports.emplace_back(std::string(p.name), port_tensors(*g, op, *p.port, v));
    } else {
      attrs.emplace(std::string(p.name), attr_for(op, *p.attr, v));
    }
  }
  const std::vector<Tensor> outs = g->add_node(op.name, ports, std::move(attrs), std::move(name));
  if (outs.size() == 1) return py::cast(made_by(g, outs[0]));
  py::tuple r(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) r[i] = py::cast(made_by(g, outs[i]));
  return r;
}

void bind_registry_builders(py::class_<Graph, GraphPtr>& c) {
  py::options options;  // the docstring's first line is the signature above, not pybind11's (*args, **kwargs)
  options.disable_function_signatures();
  for (const OpInfo& op : op_infos()) {
    std::vector<BuilderParam> params = builder_params(op);
    static std::deque<std::string> docs;  // pybind11 keeps the pointer: the texts live as long as the module
    const std::string& doc = docs.emplace_back(builder_signature(op, params) + "\n\n" + std::string(op.summary) +
                                               " (docs/ops.md; made from the op registry)");
    const OpInfo* info = &op;  // op_infos() lives as long as the program
    c.def(
        std::string(op.name).c_str(),
        [info, params = std::move(params)](const GraphPtr& g, const py::args& args, const py::kwargs& kwargs) {
          return build(g, *info, params, args, kwargs);
        },
        py::doc(doc.c_str()));
  }
}

void bind_generic(py::class_<Graph, GraphPtr>& c) {
  c.def(
       "unary",
       [](const GraphPtr& g, std::string_view op, const PyTensor& x, const py::dict& attrs, std::string name) {
         return made_by(g, g->unary(op, tensor_of(*g, x), attrs_from_dict(attrs), std::move(name)));
       },
       "op"_a, "x"_a, "attrs"_a = py::dict(), py::kw_only(), "name"_a = "")
      .def(
          "binary",
          [](const GraphPtr& g, std::string_view op, const Operand& a, const Operand& b, std::string name) {
            return binary(g, op, a, b, std::move(name));
          },
          "op"_a, "a"_a, "b"_a, py::kw_only(), "name"_a = "")
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
  bind_registry_builders(graph);
  bind_generic(graph);
  bind_operators(tensor);
}

}  // namespace kiln::python
