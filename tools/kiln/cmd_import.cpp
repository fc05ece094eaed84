// `kiln import MODEL.onnx -o GRAPH.json [--weights DIR] [--shape NAME=DIMS]`: an ONNX model as a kiln graph
// (JSON) and its weights (one .npy per parameter, which `kiln run --weights DIR` reads).
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/json.h"
#include "kiln/npy.h"
#include "support/dir_fd.h"

namespace kiln::cli {

namespace {

// What import will write, checked before anything is written, so that a refused import leaves nothing
// behind: the graph's path is not the model itself (`-o X.onnx` would overwrite the input) and holds
// nothing but a regular file, and the weights' directory is not the graph's path and holds nothing but a
// directory. Same file means the same inode (a link or another spelling of the model's path included).
std::string import_target_problem(const std::string& model, const std::string& out, const std::string& weights) {
  struct stat model_st = {}, out_st = {}, weights_st = {};
  const bool out_exists = ::stat(out.c_str(), &out_st) == 0;
  if (out_exists && ::stat(model.c_str(), &model_st) == 0 && out_st.st_dev == model_st.st_dev &&
      out_st.st_ino == model_st.st_ino) {
    return fmt::format("-o '{}' is the model being imported: the graph would overwrite it", out);
  }
  if (out_exists && !S_ISREG(out_st.st_mode)) {
    return fmt::format("-o '{}' is {}, not a regular file (import replaces only regular files)", out,
                       support::file_type_name(out_st));
  }
  // The same path: the same file where the weights' path exists, else the same name once normalized.
  const bool weights_exist = ::stat(weights.c_str(), &weights_st) == 0;
  const bool same_file = out_exists && weights_st.st_dev == out_st.st_dev && weights_st.st_ino == out_st.st_ino;
  const bool same_name =
      std::filesystem::absolute(weights).lexically_normal() == std::filesystem::absolute(out).lexically_normal();
  const bool same = weights_exist ? same_file : same_name;
  if (same) return fmt::format("--weights '{}' is the graph's own path (-o): give them different paths", weights);
  if (weights_exist && !S_ISDIR(weights_st.st_mode)) {
    return fmt::format("--weights '{}' exists and is not a directory", weights);
  }
  return {};
}

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
  if (std::string problem = import_target_problem(model, *out, weights); !problem.empty()) {
    return {kExitUsage, UsageError{"import: " + problem}};
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
                      {"--shape", "NAME=DIMS", "fix the dims of an input the model leaves open (1x3x224x224)"},
                      {"--dim-range", "NAME=LO..HI",
                       "the range of an open dim the model names (default 1..1024), e.g. batch=1..64"}},
          .footer = "Run the result with: kiln run GRAPH.json --weights DIR --device auto",
          .run = import_model};
}

}  // namespace kiln::cli
