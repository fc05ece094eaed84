// What the files of the Python module (kiln._kiln) share: the error type every kiln::Status failure becomes,
// the Python-side handles of graphs and tensors, and NumPy conversions.
//
// Every binding function either returns a value or throws StatusError, which the module's translator turns
// into kiln.Error carrying kiln's message verbatim; nothing reaches the interpreter as an abort.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/plan.h"
#include "kiln/status.h"

namespace kiln::python {

namespace py = pybind11;

// A failed kiln::Status on its way to Python (as kiln.Error, with the status code's name as `.code`).
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& s) : std::runtime_error(s.message()), code_(s.code()) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

inline void throw_if_error(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}
template <class T>
T value_or_throw(Result<T>&& r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}
// A mistake in how the module was called (a wrong array, an unknown name): kiln.Error, invalid_argument.
[[noreturn]] inline void throw_invalid(std::string message) { throw StatusError(invalid_argument(std::move(message))); }

// Graphs are shared between Python objects: every Tensor handle keeps its graph alive, so `g.relu(x)` and
// `x.name` keep working however the Python references are dropped.
using GraphPtr = std::shared_ptr<Graph>;
// kiln.Plan (read-only in Python).
using PlanPtr = std::shared_ptr<Plan>;

// kiln.Tensor: a tensor of one graph.
struct PyTensor {
  GraphPtr graph;
  Tensor tensor;
  const TensorInfo& info() const { return graph->tensor(tensor); }
};

// What a builder method returns to Python. A builder that could not make its output tensor at all (an unknown
// op, a generic node without that port) returns an invalid handle in C++, to be reported by verify(); Python
// has no use for a handle that names nothing, so this raises kiln.Error with the node's problems instead.
PyTensor made_by(const GraphPtr& g, Tensor t);

// The handle of `t` for use in `g`: a tensor of another graph would silently name a different tensor there.
Tensor tensor_of(const Graph& g, const PyTensor& t);

// "f32", "f16", "bf16" (also "float32", "float16", "bfloat16" and NumPy's float32 / float16 dtypes).
DType dtype_from_py(const py::handle& dtype);
std::optional<Layout> layout_from_py(const std::optional<std::string>& layout);
// "auto", "nchw", "nhwc" (the CLI's --layout).
LayoutPolicy layout_policy_from_py(const std::string& policy);

// ---- NumPy (bind_arrays.cpp) ----
// An array given for tensor `name` of `shape` and `dtype` (logical dims, whatever the layout) as a host
// tensor: f32 from float32, f16 from float16, bf16 from float32 rounded to the nearest bf16 (ties to even).
// Non-contiguous and byte-swapped arrays are copied; a wrong type, dtype or shape raises naming the tensor.
HostTensor host_tensor_from_array(const py::handle& obj, std::string_view name, const Shape& shape, DType dtype);
// f32 -> float32, f16 -> float16, bf16 -> float32 (exact).
py::array array_from_host_tensor(const HostTensor& t);
// `inputs` (name -> array) as the bindings of every input and parameter of `g`: unknown names and missing
// inputs raise; a parameter not given takes the graph's own value (Graph::set_value, ONNX initializers).
TensorMap bindings_from_dict(const Graph& g, const py::dict& inputs);
py::dict dict_from_tensor_map(const TensorMap& tensors);

// ---- the parts of the module, one function each ----
void bind_graph(py::module_& m);  // Graph, Tensor, load, random_inputs, run_reference
void bind_builders(py::class_<Graph, GraphPtr>& graph, py::class_<PyTensor>& tensor);  // + Tensor's operators
void bind_plan(py::module_& m);                                                        // plan, Plan, Group
void bind_engine(py::module_& m);   // compile, Executable, CompileReport
void bind_prewarm(py::module_& m);  // prewarm, PrewarmReport

}  // namespace kiln::python
