// The summary of a graph that `kiln validate` prints.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "json_output.h"
#include "kiln/types.h"

namespace kiln::cli {
namespace {

std::string count(int64_t n, std::string_view what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); }

// A symbolic input's dims as declared ("[N, 3, 224, 224]"); else the numbers.
std::string shape_text(const Graph& g, Tensor t) {
  auto sym = g.symbolic_shape(t);
  if (!sym) return g.tensor(t).shape.to_string();
  std::string s;
  for (const DimExpr& d : *sym) s += (s.empty() ? "" : ", ") + d.to_string();
  return "[" + s + "]";
}

std::vector<std::string> tensor_row(std::string_view kind, const Graph& g, Tensor t) {
  const TensorInfo& info = g.tensor(t);
  return {std::string(kind), info.name, shape_text(g, t), std::string(dtype_name(info.dtype)),
          std::string(layout_name(info.layout))};
}

}  // namespace

void print_graph_summary(const Graph& g) {
  int64_t inputs = 0, parameters = 0, param_elements = 0, param_bytes = 0;
  std::vector<std::vector<std::string>> rows;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    if (info.kind == TensorKind::input) ++inputs;
    if (info.kind == TensorKind::parameter) {
      ++parameters;
      param_elements += info.shape.numel();
      param_bytes += info.shape.numel() * dtype_size(info.dtype);
    }
    rows.push_back(tensor_row(tensor_kind_name(info.kind), g, t));
  }
  for (Tensor t : g.outputs()) rows.push_back(tensor_row("output", g, t));

  // Ops in order of first appearance, with their counts.
  std::vector<std::pair<std::string, int>> ops;
  for (const Node& n : g.nodes()) {
    std::string name = n.op ? std::string(op_name(*n.op)) : n.op_text;
    auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& p) { return p.first == name; });
    if (it == ops.end()) {
      ops.emplace_back(name, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> op_counts;
  for (const auto& [name, n] : ops) op_counts.push_back(fmt::format("{} {}", name, n));

  fmt::print("graph: {} (valid)\n", g.name());
  fmt::print("counts: {}, {}, {}, {}\n", count(inputs, "input"), count(parameters, "parameter"),
             count(static_cast<int64_t>(g.nodes().size()), "node"),
             count(static_cast<int64_t>(g.outputs().size()), "output"));
  if (g.is_symbolic()) {
    fmt::print("dims: {} (verified over these ranges; the other shapes below are at the bottom of each)\n",
               ranges_text(g.dim_ranges()));
  }
  fmt::print("tensors:\n");
  print_table(rows, 2);
  fmt::print("ops: {}\n", op_counts.empty() ? std::string("none") : fmt::format("{}", fmt::join(op_counts, ", ")));
  fmt::print("parameter elements: {} ({})\n", group_digits(param_elements), human_bytes(param_bytes));
}

Json json_document(std::string_view what) {
  Json doc;
  doc["schema"] = fmt::format("kiln.{}/1", what);
  return doc;
}

void print_json(const Json& doc) { fmt::print("{}\n", doc.dump(2, ' ', false, Json::error_handler_t::replace)); }

Json graph_summary_json(const Graph& g) {
  Json j;
  j["name"] = g.name();
  Json tensors = Json::array();
  int64_t inputs = 0, parameters = 0, param_elements = 0, param_bytes = 0;
  auto tensor = [&](std::string_view kind, Tensor id) {
    const TensorInfo& t = g.tensor(id);
    Json o{{"name", t.name},
           {"kind", kind},
           {"shape", std::vector<int64_t>(t.shape.dims().begin(), t.shape.dims().end())},
           {"dtype", dtype_name(t.dtype)},
           {"layout", layout_name(t.layout)}};
    if (auto sym = g.symbolic_shape(id)) {  // the declared dims; "shape" holds them at the bottom of the ranges
      Json dims = Json::array();
      for (const DimExpr& d : *sym) d.is_constant() ? dims.push_back(*d.constant()) : dims.push_back(d.to_string());
      o["symbolic_shape"] = std::move(dims);
    }
    return o;
  };
  if (g.is_symbolic()) {
    Json dims = Json::object();
    for (const auto& [name, r] : g.dim_ranges()) dims[name] = {r.min, r.max};
    j["dims"] = std::move(dims);
  }
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    inputs += info.kind == TensorKind::input;
    if (info.kind == TensorKind::parameter) {
      ++parameters;
      param_elements += info.shape.numel();
      param_bytes += info.shape.numel() * dtype_size(info.dtype);
    }
    tensors.push_back(tensor(tensor_kind_name(info.kind), t));
  }
  for (Tensor t : g.outputs()) tensors.push_back(tensor("output", t));
  j["counts"] = {
      {"inputs", inputs}, {"parameters", parameters}, {"nodes", g.nodes().size()}, {"outputs", g.outputs().size()}};
  j["tensors"] = std::move(tensors);
  Json ops = Json::object();
  for (const Node& n : g.nodes()) {
    const std::string name = n.op ? std::string(op_name(*n.op)) : n.op_text;
    ops[name] = ops.value(name, 0) + 1;
  }
  j["ops"] = std::move(ops);
  j["parameter_elements"] = param_elements;
  j["parameter_bytes"] = param_bytes;
  return j;
}

}  // namespace kiln::cli
