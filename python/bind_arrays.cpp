// NumPy arrays to and from kiln's host tensors (f64 values in logical row-major order, each representable in
// its storage dtype). The rules are the CLI's .npy rules (include/kiln/npy.h): f32 is float32, f16 is
// float16, bf16 is float32 holding bf16 values (rounded to nearest, ties to even, on the way in).
#include <cstring>

#include "bindings.h"

namespace kiln::python {

namespace {

// The NumPy dtype a kiln dtype travels as, and how messages name it.
std::string numpy_name(DType d) { return d == DType::f16 ? "float16" : "float32"; }
std::string expected_dtype(DType d) {
  std::string s = numpy_name(d) + " (kiln " + std::string(dtype_name(d));
  if (d == DType::bf16) s += ", given as float32 and rounded to bf16";
  return s + ")";
}

std::string array_shape(const py::array& a) {
  std::string s = "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

}  // namespace

HostTensor host_tensor_from_array(const py::handle& obj, std::string_view name, const Shape& shape, DType dtype) {
  const std::string who = "tensor '" + std::string(name) + "'";
  // A NumPy scalar (np.float32(2.0)) for a tensor of shape (): as a 0-d array.
  py::object numpy = py::module_::import("numpy");
  if (py::isinstance(obj, numpy.attr("generic")))
    return host_tensor_from_array(numpy.attr("asarray")(obj), name, shape, dtype);
  if (!py::isinstance<py::array>(obj)) {
    throw_invalid(who + ": expected a numpy.ndarray of " + expected_dtype(dtype) + ", got " +
                  py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  }
  auto given = py::reinterpret_borrow<py::array>(obj);
  const py::dtype dt = given.dtype();
  const py::ssize_t want_size = dtype == DType::f16 ? 2 : 4;
  if (dt.kind() != 'f' || dt.itemsize() != want_size) {
    throw_invalid(who + ": dtype mismatch: expected " + expected_dtype(dtype) + ", got " +
                  dt.attr("name").cast<std::string>());
  }
  bool same_shape = given.ndim() == shape.rank();
  for (int i = 0; same_shape && i < shape.rank(); ++i) same_shape = given.shape(i) == shape[i];
  if (!same_shape) {
    throw_invalid(who + ": shape mismatch: expected " + shape.to_string() + ", got " + array_shape(given));
  }
  // Strided views and byte-swapped arrays become a contiguous native-order copy; others pass as they are.
  const py::array a = numpy.attr("ascontiguousarray")(given, want_size == 2 ? "=f2" : "=f4");
  HostTensor t(shape, dtype);
  const size_t n = t.data.size();
  if (dtype == DType::f16) {
    const auto* h = static_cast<const uint16_t*>(a.data());
    for (size_t i = 0; i < n; ++i) t.data[i] = f16_bits_to_f32(h[i]);
  } else {
    const auto* f = static_cast<const float*>(a.data());
    for (size_t i = 0; i < n; ++i) t.data[i] = dtype == DType::bf16 ? bf16_bits_to_f32(f32_to_bf16_bits(f[i])) : f[i];
  }
  return t;
}

py::array array_from_host_tensor(const HostTensor& t) {
  std::vector<py::ssize_t> dims(t.shape.dims().begin(), t.shape.dims().end());
  py::array a(py::dtype(numpy_name(t.dtype)), dims);
  const size_t n = t.data.size();
  if (t.dtype == DType::f16) {
    auto* h = static_cast<uint16_t*>(a.mutable_data());
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16_bits(static_cast<float>(t.data[i]));
  } else {
    auto* f = static_cast<float*>(a.mutable_data());
    for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(t.data[i]);
  }
  return a;
}

TensorMap bindings_from_dict(const Graph& g, const py::dict& inputs) {
  std::vector<std::string> unknown;
  for (auto [k, v] : inputs) {
    if (!py::isinstance<py::str>(k)) throw_invalid("input names must be str, got " + py::repr(k).cast<std::string>());
    auto t = g.find_tensor(k.cast<std::string>());
    if (!t || g.tensor(*t).kind == TensorKind::intermediate) unknown.push_back(k.cast<std::string>());
  }
  std::string bound_names;
  for (Tensor t : g.bound_tensors()) bound_names += (bound_names.empty() ? "" : ", ") + g.tensor(t).name;
  if (!unknown.empty()) {
    std::string list;
    for (const auto& u : unknown) list += (list.empty() ? "'" : ", '") + u + "'";
    throw_invalid("graph '" + g.name() + "' has no input or parameter " + list + " (it has " + bound_names + ")");
  }
  TensorMap out;
  std::vector<std::string> missing;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    const py::str key(info.name);
    if (inputs.contains(key)) {
      out.emplace(info.name, host_tensor_from_array(inputs[key], info.name, info.shape, info.dtype));
    } else if (const HostTensor* v = g.value(info.name)) {
      out.emplace(info.name, *v);
    } else {
      missing.push_back(info.name + " (" + std::string(tensor_kind_name(info.kind)) + ", " +
                        std::string(dtype_name(info.dtype)) + " " + info.shape.to_string() + ")");
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw_invalid("graph '" + g.name() + "': missing input" + (missing.size() > 1 ? "s " : " ") + list);
  }
  return out;
}

py::dict dict_from_tensor_map(const TensorMap& tensors) {
  py::dict d;
  for (const auto& [name, t] : tensors) d[py::str(name)] = array_from_host_tensor(t);
  return d;
}

}  // namespace kiln::python
