// GRAPH arguments: a kiln graph (JSON) or an ONNX model, told apart by the .onnx extension.
#include <charconv>

#include <fmt/format.h>

#include "cli.h"
#include "kiln/json.h"

namespace kiln::cli {

namespace {

// The comma-separated items of an option's value ("a,b" -> {"a", "b"}; "" -> {""}).
std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    items.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

// `d` as a positive integer, or nothing (empty, a sign, trailing characters, 0, out of range).
std::optional<int64_t> positive_number(std::string_view d) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
  if (d.empty() || ec != std::errc() || p != d.data() + d.size() || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

// --dim-range NAME=LO..HI[,NAME=LO..HI]: the ranges of ONNX open dims by symbol (OnnxOptions::dim_ranges).
std::optional<UsageError> parse_dim_range_option(const Args& args, OnnxOptions& out) {
  auto text = args.get("--dim-range");
  if (!text) return std::nullopt;
  for (const std::string& item : comma_items(*text)) {
    const size_t eq = item.find('='), dots = item.find("..");
    std::optional<int64_t> lo, hi;
    if (eq != std::string::npos && eq > 0 && dots != std::string::npos && dots > eq) {
      lo = positive_number(std::string_view(item).substr(eq + 1, dots - eq - 1));
      hi = positive_number(std::string_view(item).substr(dots + 2));
    }
    if (!lo || !hi || *hi < *lo) {
      return UsageError{
          fmt::format("invalid --dim-range '{}': expected NAME=LO..HI with 1 <= LO <= HI, several "
                      "separated by commas, e.g. --dim-range batch=1..64",
                      item)};
    }
    if (!out.dim_ranges.emplace(item.substr(0, eq), DimRange{*lo, *hi}).second)
      return UsageError{fmt::format("invalid --dim-range '{}': '{}' is given twice", item, item.substr(0, eq))};
  }
  return std::nullopt;
}

std::optional<UsageError> parse_shape_option(const Args& args, OnnxOptions& out) {
  if (auto e = parse_dim_range_option(args, out)) return e;
  auto text = args.get("--shape");
  if (!text) return std::nullopt;
  auto bad = [&](std::string_view item, std::string_view why) {
    return UsageError{
        fmt::format("invalid --shape '{}': {} (expected NAME=D0xD1x..., several separated by commas, "
                    "e.g. --shape input=1x3x224x224)",
                    item, why)};
  };
  for (const std::string& item : comma_items(*text)) {
    const size_t eq = item.rfind('=');
    if (eq == std::string::npos || eq == 0) return bad(item, "no NAME=");
    std::vector<int64_t> dims;
    std::string_view rest = std::string_view(item).substr(eq + 1);
    while (true) {
      const size_t x = rest.find('x');
      std::string_view d = rest.substr(0, x);
      const std::optional<int64_t> v = positive_number(d);
      if (!v) return bad(item, fmt::format("'{}' is not a positive dim", d));
      dims.push_back(*v);
      if (x == std::string_view::npos) break;
      rest = rest.substr(x + 1);
    }
    if (!out.input_shapes.emplace(item.substr(0, eq), Shape(dims)).second) return bad(item, "the input is named twice");
  }
  return std::nullopt;
}

std::optional<UsageError> parse_dims_option(const Args& args, DimValues& out) {
  auto text = args.get("--dims");
  if (!text) return std::nullopt;
  auto bad = [&](std::string_view item, std::string_view why) {
    return UsageError{
        fmt::format("invalid --dims '{}': {} (expected NAME=VALUE, several separated by commas, e.g. --dims N=8,L=128; "
                    "prewarm also takes lists and ranges, N=1,8,32 or N=1..64)",
                    item, why)};
  };
  std::string current;  // the symbol a bare value belongs to (N=1,8,32)
  for (const std::string& item : comma_items(*text)) {
    std::string_view value = item;
    if (const size_t eq = item.find('='); eq != std::string::npos) {
      current = item.substr(0, eq);
      if (current.empty()) return bad(item, "no NAME before '='");
      if (out.count(current)) return bad(item, fmt::format("'{}' is given twice", current));
      value = std::string_view(item).substr(eq + 1);
      out[current];
    } else if (current.empty()) {
      return bad(item, "no NAME=");
    }
    std::vector<int64_t>& values = out[current];
    if (const size_t dots = value.find(".."); dots != std::string_view::npos) {
      auto lo = positive_number(value.substr(0, dots)), hi = positive_number(value.substr(dots + 2));
      if (!lo || !hi || *hi < *lo)
        return bad(item, fmt::format("'{}' is not a range LO..HI of positive values", value));
      if (*hi - *lo >= 4096) return bad(item, "a range of more than 4096 values");
      for (int64_t v = *lo; v <= *hi; ++v) values.push_back(v);
    } else if (auto v = positive_number(value)) {
      values.push_back(*v);
    } else {
      return bad(item, fmt::format("'{}' is not a positive value", value));
    }
  }
  return std::nullopt;
}

std::optional<UsageError> single_dims(const DimValues& values, DimBindings& out) {
  for (const auto& [name, vs] : values) {
    if (vs.size() != 1) {
      return UsageError{fmt::format("--dims {}: one value per dim here (lists and ranges are for kiln prewarm)", name)};
    }
    out[name] = vs[0];
  }
  return std::nullopt;
}

std::optional<UsageError> parse_graph_dims(const Args& args, std::optional<DimBindings>& out) {
  DimValues values;
  if (auto e = parse_dims_option(args, values)) return e;
  if (!args.has("--dims")) return std::nullopt;
  out.emplace();
  return single_dims(values, *out);
}

Result<Graph> load_graph_file(const std::string& path, const OnnxOptions& onnx, const DimBindings* dims) {
  Result<Graph> g = Status(StatusCode::internal, "not loaded");
  if (is_onnx_path(path)) {
    g = load_onnx(path, onnx);
  } else if (!onnx.input_shapes.empty()) {
    return invalid_argument(
        fmt::format("{}: --shape applies to ONNX models (.onnx); a kiln graph's shapes are in its JSON", path));
  } else if (!onnx.dim_ranges.empty()) {
    return invalid_argument(fmt::format(
        "{}: --dim-range applies to ONNX models (.onnx); a kiln graph's ranges are its JSON's \"dims\"", path));
  } else {
    g = load_graph(path);
  }
  if (!g.ok() || dims == nullptr) return g;
  return g->bind(*dims);
}

}  // namespace kiln::cli
