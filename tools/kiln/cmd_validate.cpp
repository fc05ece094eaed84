// `kiln validate GRAPH`: loads and verifies a graph; prints its summary, or every error.
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "json_output.h"
#include "kiln/json.h"
#include "support/lines.h"

namespace kiln::cli {
namespace {

CommandResult validate(const Args& args) {
  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  std::optional<DimBindings> dims;
  if (auto e = parse_graph_dims(args, dims)) return {kExitUsage, e};
  const std::string& path = args.positional[0];
  auto g = load_graph_file(path, onnx, dims ? &*dims : nullptr);
  if (global_options().json) {
    Json doc = json_document("validate");
    doc["graph"] = path;
    doc["valid"] = g.ok();
    if (g.ok()) {
      doc.update(graph_summary_json(*g));
    } else {
      doc["errors"] = support::lines_naming(g.status().message(), path);
    }
    print_json(doc);
  }
  if (!g.ok()) {
    print_error(g.status(), path);
    return {kExitInvalid, {}};
  }
  if (!global_options().json) print_graph_summary(*g);
  return {};
}

}  // namespace

CommandSpec validate_command() {
  return {.name = "validate",
          .summary = "check a graph and print its summary (every error, each naming its node, port or JSON path)",
          .positional = "GRAPH",
          .positional_help = kGraphHelp,
          .options = {kShapeOption,
                      {"--dim-range", "NAME=LO..HI",
                       "ONNX: the range of an open dim the model names (default 1..1024), e.g. batch=1..64"},
                      kDimsOption,
                      {"--json", "", "the summary (or the errors) as JSON: schema kiln.validate/1 (docs/cli.md)"}},
          .run = validate};
}

}  // namespace kiln::cli
