// libFuzzer harness: bytes -> the ONNX front end (its implementation, linked in rather than loaded as the plugin,
// so that the fuzzer sees its coverage), as `kiln import` or `kiln run m.onnx` reads a file: protobuf parsing,
// ONNX's checker, constant folding and op mapping.
//
// Properties: a refusal has a message that names its source; a model that imports is a graph that passes
// verify() and whose every parameter holds values of its declared shape.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "kiln/host_tensor.h"
#include "kiln/onnx.h"
#include "onnx/plugin_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<Graph> g = onnx_plugin::onnx_from_bytes(bytes, "<fuzz>", {}, {});  // no directory: no external data
  if (!g.ok()) {
    if (g.status().message().rfind("<fuzz>: ", 0) != 0)
      fuzz::violated("a refusal does not name its source", g.status().message());
    return 0;
  }
  Status v = g.value().verify();
  if (!v.ok()) fuzz::violated("an imported graph does not verify", v.message());
  for (Tensor t : g.value().bound_tensors()) {
    const TensorInfo& info = g.value().tensor(t);
    if (info.kind != TensorKind::parameter) continue;
    const HostTensor* value = g.value().value(info.name);
    if (!value) fuzz::violated("an imported parameter has no values", info.name);
    if (value->shape != info.shape || value->numel() != info.shape.numel())
      fuzz::violated("a parameter's values have the wrong shape", info.name);
  }
  return 0;
}
