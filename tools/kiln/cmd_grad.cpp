// `kiln grad GRAPH --loss NAME -o TRAIN.json`: the training graph of a graph and its scalar loss (kiln::backward:
// the forward, the backward, and an output grad/<parameter> for every parameter), written as JSON.
#include <string>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/autodiff.h"
#include "kiln/json.h"

namespace kiln::cli {

namespace {

CommandResult grad(const Args& args) {
  const auto out = args.get("--output");
  if (!out) return {kExitUsage, UsageError{"grad: missing -o TRAIN.json (where to write the training graph)"}};
  const auto loss = args.get("--loss");
  if (!loss) return {kExitUsage, UsageError{"grad: missing --loss NAME (the scalar tensor to differentiate)"}};
  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  std::optional<DimBindings> dims;
  if (auto e = parse_graph_dims(args, dims)) return {kExitUsage, e};
  const std::string& path = args.positional[0];
  auto g = load_graph_file(path, onnx, dims ? &*dims : nullptr);
  if (!g.ok()) {
    print_error(g.status(), path);
    return {kExitInvalid, {}};
  }
  Result<Training> tr = backward(*g, *loss);
  if (!tr.ok()) {
    print_error(tr.status(), path);
    return {kExitInvalid, {}};
  }
  for (const std::string& w : tr->warnings) fmt::print(stderr, "warning: {}\n", w);
  if (Status s = save_graph(tr->graph, *out); !s.ok()) {
    print_error(s);
    return {kExitInvalid, {}};
  }
  int params = 0;
  for (Tensor t : g->bound_tensors()) params += g->tensor(t).kind == TensorKind::parameter;
  fmt::print("training graph of {} for loss '{}': {} forward nodes, {} backward nodes, {} gradient{}\n", path, *loss,
             g->nodes().size(), tr->graph.nodes().size() - g->nodes().size(), params, params == 1 ? "" : "s");
  fmt::print("wrote {}\n", *out);
  return {};
}

}  // namespace

CommandSpec grad_command() {
  return {.name = "grad",
          .summary = "write the training graph of a graph: its forward, its backward, and grad/<parameter> outputs",
          .positional = "GRAPH",
          .positional_help = kGraphHelp,
          .options = {{"--loss", "NAME", "the tensor to differentiate: one element (required)"},
                      {"-o,--output", "TRAIN.json", "where to write the training graph (required)"},
                      kShapeOption,
                      kDimsOption},
          .footer = "Which ops have a gradient rule: docs/training.md",
          .run = grad};
}

}  // namespace kiln::cli
