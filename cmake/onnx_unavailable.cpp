// kiln built without ONNX (no libonnx-dev / libprotobuf-dev at configure time): every entry point of
// kiln/onnx.h says so.
#include "kiln/onnx.h"

namespace kiln {
namespace {
Status no_onnx() {
  return unsupported(
      "this kiln was built without ONNX support (install libonnx-dev and libprotobuf-dev: tools/setup.sh, "
      "and configure again)");
}
}  // namespace

bool onnx_available() { return false; }
Result<Graph> load_onnx(const std::string&, const OnnxOptions&) { return no_onnx(); }
Result<Graph> onnx_from_bytes(std::string_view, std::string_view, const OnnxOptions&, const std::string&) {
  return no_onnx();
}
Result<HostTensor> load_onnx_tensor(const std::string&, std::string*) { return no_onnx(); }
bool is_onnx_path(std::string_view path) { return path.size() >= 5 && path.substr(path.size() - 5) == ".onnx"; }
std::vector<std::string> onnx_supported_ops() { return {}; }
}  // namespace kiln
