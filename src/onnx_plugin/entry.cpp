// The one symbol libkiln_onnx.so exports (src/onnx/plugin_api.h): its table of the ONNX front end's functions.
// Everything else of the plugin is hidden (its own sources by -fvisibility=hidden, the static layers it links by
// --exclude-libs), so that its copy of kiln's code never stands in for the loading program's, nor the reverse.
#include "onnx/plugin_api.h"
#include "support/source_id.h"

extern "C" __attribute__((visibility("default"))) const kiln::onnx_plugin::Api* kiln_onnx_plugin_api() {
  static const kiln::onnx_plugin::Api api = [] {
    kiln::onnx_plugin::Api a;
    a.source_id = kiln::support::source_id();
    a.load_onnx = &kiln::onnx_plugin::load_onnx;
    a.onnx_from_bytes = &kiln::onnx_plugin::onnx_from_bytes;
    a.load_onnx_tensor = &kiln::onnx_plugin::load_onnx_tensor;
    a.supported_ops = &kiln::onnx_plugin::onnx_supported_ops;
    return a;
  }();
  return &api;
}
