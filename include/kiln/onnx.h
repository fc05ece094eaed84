// ONNX models in: a ModelProto file, or its bytes, as a kiln Graph (docs/onnx.md).
//
// The model is checked with ONNX's checker (not its shape inference: kiln infers every shape itself,
// docs/onnx.md says why), its constant subgraphs (the Shape /
// Gather / Unsqueeze / Concat / Reshape chains exporters emit, Constant, Identity, Dropout) are folded, and
// every remaining node becomes kiln ops. Initializers become parameters that keep their values
// (Graph::value: `kiln run` uses them instead of random values); the model's inputs become inputs.
// Every problem names the node, its op type and opset, or the input and dim:
//   m.onnx: node 'conv3' (ConvTranspose, opset 13): op not supported by kiln
// All unsupported nodes of a model are listed at once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/status.h"
#include "kiln/types.h"

namespace kiln {

struct OnnxOptions {
  // Shapes for inputs whose dims the model leaves open (a symbolic dim such as 'batch', or none given):
  // input name -> its whole shape (`kiln ... --shape x=1x3x224x224`).
  std::map<std::string, Shape, std::less<>> input_shapes;
  // Where no --shape fixes them, the model's open dims become symbols (a dim_param keeps its name: 'batch')
  // with this range; the graph is verified over it and bound to values to run (Graph::bind, --dims).
  DimRange dim_range{1, 1024};
  // The range of one open dim by its symbol's name (`kiln ... --dim-range batch=1..64`), instead of
  // dim_range; a name that is no open dim of the model is an error.
  std::map<std::string, DimRange, std::less<>> dim_ranges;
  int64_t max_bytes = int64_t{2} << 30;  // larger files are refused before parsing (protobuf's own limit)
};

// The ONNX opsets kiln reads (the default domain, "ai.onnx").
inline constexpr int kOnnxMinOpset = 6;
inline constexpr int kOnnxMaxOpset = 17;

// False when this build of kiln has no ONNX front end (built without libonnx-dev): every function below
// then returns `unsupported` saying so.
bool onnx_available();

// Reads and imports `path`; external-data initializers are looked up beside it.
Result<Graph> load_onnx(const std::string& path, const OnnxOptions& options = {});
// Imports the bytes of a ModelProto. `source` names them in messages; external-data files are looked up
// in `base_dir` (none are allowed when it is empty).
Result<Graph> onnx_from_bytes(std::string_view bytes, std::string_view source = "<bytes>",
                              const OnnxOptions& options = {}, const std::string& base_dir = {});

// A serialized TensorProto (the backend tests' input_0.pb, output_0.pb) as a host tensor: f32, f16 and
// bf16 only (uint16 is read as bfloat16 bit patterns, which is how ONNX's test data stores bfloat16). `name` receives
// the tensor's name when given.
Result<HostTensor> load_onnx_tensor(const std::string& path, std::string* name = nullptr);

// Whether `path` names an ONNX model rather than a kiln graph (its extension is .onnx).
bool is_onnx_path(std::string_view path);

// The ONNX op types the importer maps, sorted.
std::vector<std::string> onnx_supported_ops();

}  // namespace kiln
