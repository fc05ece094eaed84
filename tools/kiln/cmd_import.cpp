// `kiln import MODEL.onnx -o GRAPH.json [--weights DIR] [--shape NAME=DIMS]`: an ONNX model as a kiln graph
// (JSON) and its weights (one .npy per parameter, which `kiln run --weights DIR` reads).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/json.h"
#include "kiln/npy.h"

namespace kiln::cli {

namespace {

CommandResult import_model(const Args& args) {
  auto out = args.get("--output");
  if (!out) return {kExitUsage, UsageError{"import: missing -o GRAPH.json (where to write the kiln graph)"}};
  const std::string& model = args.positional[0];
  if (!is_onnx_path(model)) {
    return {kExitUsage, UsageError{fmt::format("import: '{}' is not an .onnx file", model)}};
  }
  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  // The weights' directory: --weights, else beside the graph (model.json -> model.weights/).
  std::string weights = args.get("--weights").value_or("");
  if (weights.empty()) {
    std::string stem = *out;
    if (stem.size() > 5 && stem.substr(stem.size() - 5) == ".json") stem.resize(stem.size() - 5);
    weights = stem + ".weights";
  }

  auto g = load_onnx(model, onnx);
  if (!g.ok()) {
    print_error(g.status(), model);
    return {kExitInvalid, {}};
  }
  TensorMap values;
  int64_t bytes = 0;
  for (const auto& [name, v] : g->values()) {
    values.emplace(name, *v);
    bytes += v->numel() * dtype_size(v->dtype);
  }
  if (!values.empty()) {
    Status s = save_tensors(weights, values);
    if (!s.ok()) {
      print_error(s);
      return {kExitInvalid, {}};
    }
  }
  Status s = save_graph(*g, *out);
  if (!s.ok()) {
    print_error(s);
    return {kExitInvalid, {}};
  }
  fmt::print("imported {}: graph '{}', {} nodes, {} inputs, {} outputs\n", model, g->name(), g->nodes().size(),
             g->bound_tensors().size() - g->values().size(), g->outputs().size());
  fmt::print("wrote {}\n", *out);
  if (!values.empty()) {
    fmt::print("wrote {} parameter{} ({}) to {}/\n", values.size(), values.size() == 1 ? "" : "s", human_bytes(bytes),
               weights);
    fmt::print("run it with: kiln run {} --weights {} --device auto\n", *out, weights);
  }
  return {};
}

}  // namespace

CommandSpec import_command() {
  return {.name = "import",
          .summary = "convert an ONNX model to a kiln graph (JSON) and its weights (one .npy per parameter)",
          .positional = "MODEL.onnx",
          .positional_help = "the ONNX model (opsets 6 to 17; docs/onnx.md)",
          .options = {{"-o,--output", "GRAPH.json", "where to write the kiln graph (required)"},
                      {"--weights", "DIR", "where to write the weights (default: GRAPH.weights/ beside the graph)"},
                      {"--shape", "NAME=DIMS", "fix the dims of an input the model leaves open (1x3x224x224)"}},
          .footer = "Run the result with: kiln run GRAPH.json --weights DIR --device auto",
          .run = import_model};
}

}  // namespace kiln::cli
