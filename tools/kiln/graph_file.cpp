// GRAPH arguments: a kiln graph (JSON) or an ONNX model, told apart by the .onnx extension.
#include <charconv>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/json.h"

namespace kiln::cli {

std::optional<UsageError> parse_shape_option(const Args& args, OnnxOptions& out) {
  auto text = args.get("--shape");
  if (!text) return std::nullopt;
  auto bad = [&](std::string_view item, std::string_view why) {
    return UsageError{
        fmt::format("invalid --shape '{}': {} (expected NAME=D0xD1x..., several separated by commas, "
                    "e.g. --shape input=1x3x224x224)",
                    item, why)};
  };
  size_t start = 0;
  while (start <= text->size()) {
    size_t end = text->find(',', start);
    if (end == std::string::npos) end = text->size();
    const std::string item = text->substr(start, end - start);
    const size_t eq = item.rfind('=');
    if (eq == std::string::npos || eq == 0) return bad(item, "no NAME=");
    std::vector<int64_t> dims;
    std::string_view rest = std::string_view(item).substr(eq + 1);
    while (true) {
      const size_t x = rest.find('x');
      std::string_view d = rest.substr(0, x);
      int64_t v = 0;
      auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
      if (d.empty() || ec != std::errc() || p != d.data() + d.size() || v <= 0) {
        return bad(item, fmt::format("'{}' is not a positive dim", d));
      }
      dims.push_back(v);
      if (x == std::string_view::npos) break;
      rest = rest.substr(x + 1);
    }
    if (!out.input_shapes.emplace(item.substr(0, eq), Shape(dims)).second) return bad(item, "the input is named twice");
    start = end + 1;
  }
  return std::nullopt;
}

Result<Graph> load_graph_file(const std::string& path, const OnnxOptions& onnx) {
  if (is_onnx_path(path)) return load_onnx(path, onnx);
  if (!onnx.input_shapes.empty()) {
    return invalid_argument(
        fmt::format("{}: --shape applies to ONNX models (.onnx); a kiln graph's shapes are in its JSON", path));
  }
  return load_graph(path);
}

}  // namespace kiln::cli
