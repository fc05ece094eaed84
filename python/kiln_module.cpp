// The compiled part of the Python package `kiln` (python/kiln/__init__.py re-exports it): kiln._kiln.
// docs/python.md is the user's page; bindings.h says how the files share the work.
#include "bindings.h"
#include "kiln/status.h"

namespace kiln::python {
namespace {

// kiln.Error: every kiln::Status failure, with kiln's message verbatim as str(e) and the status code's name
// ("invalid_argument", "not_found", ...) as e.code. A RuntimeError, as pybind11 makes other C++ errors.
void bind_errors(py::module_& m) {
  // Kept for the life of the process (never decref'd): the translator may run until the interpreter ends,
  // and a static py::object would be destroyed after it.
  static py::handle error_type = PyErr_NewException("kiln.Error", PyExc_RuntimeError, nullptr);
  if (!error_type) throw py::error_already_set();
  m.attr("Error") = error_type;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object error = py::reinterpret_borrow<py::object>(error_type)(e.what());
      error.attr("code") = status_code_name(e.code());
      PyErr_SetObject(error_type.ptr(), error.ptr());
    }
  });
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "kiln's C++ API (include/kiln/*.h) for Python; import it as `kiln` (docs/python.md).";
  m.attr("__version__") = KILN_VERSION;
  bind_errors(m);
  bind_graph(m);
  bind_plan(m);
  bind_engine(m);
  bind_prewarm(m);
}
