// `kiln validate GRAPH.json`: loads and verifies a graph; prints its summary, or every error.
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/json.h"

namespace kiln::cli {

CommandResult cmd_validate(const std::vector<std::string>& argv) {
  Args args;
  if (auto e = parse_args("validate", argv, {"--shape"}, args)) return {kExitUsage, e};
  if (args.help) {
    fmt::print("{}", help_text());
    return {};
  }
  if (args.positional.empty()) return {kExitUsage, UsageError{"validate: missing GRAPH.json"}};
  if (args.positional.size() > 1) {
    return {kExitUsage, UsageError{fmt::format("validate: unexpected argument '{}' (validate takes one GRAPH.json)",
                                               args.positional[1])}};
  }
  OnnxOptions onnx;
  if (auto e = parse_shape_option(args, onnx)) return {kExitUsage, e};
  auto g = load_graph_file(args.positional[0], onnx);
  if (!g.ok()) {
    print_error(g.status(), args.positional[0]);
    return {kExitInvalid, {}};
  }
  print_graph_summary(*g);
  return {};
}

}  // namespace kiln::cli
