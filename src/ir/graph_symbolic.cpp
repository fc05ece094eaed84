// Dims that vary (include/kiln/graph.h, docs/graph-format.md "Symbolic dims"): declaring symbols and
// symbolic inputs, checking a graph over its symbols' ranges, and binding the symbols to values.
//
// Today the shape rules and the planner work on numbers: a symbolic graph holds its inputs' dims as
// expressions (DimExpr) beside the numbers at the bottom of every range, is verified at the ends and middle
// of the ranges (each combination: a shape rule that fails anywhere there fails verify, naming the values),
// and is planned and run once bound.
#include <set>

#include <fmt/format.h>

#include "kiln/graph.h"
#include "support/lines.h"

namespace kiln {

namespace {

// Every combination of each symbol's min, middle and max (at most 3^4 of them; with more symbols, the
// bottoms and tops together and each symbol alone at its top and middle), the all-bottom one first.
std::vector<DimBindings> probes(const DimRanges& ranges) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> values;
  for (const auto& [name, r] : ranges) {
    std::vector<int64_t> v{r.min};
    for (int64_t x : {r.min + (r.max - r.min) / 2, r.max})
      if (x != v.back()) v.push_back(x);
    values.emplace_back(name, std::move(v));
  }
  std::vector<DimBindings> out(1);
  if (values.size() <= 4) {
    for (const auto& [name, vs] : values) {
      std::vector<DimBindings> next;
      for (const DimBindings& b : out) {
        for (int64_t v : vs) {
          DimBindings c = b;
          c[name] = v;
          next.push_back(std::move(c));
        }
      }
      out = std::move(next);
    }
    return out;
  }
  for (const auto& [name, vs] : values) out[0][name] = vs.front();
  DimBindings top;
  for (const auto& [name, vs] : values) top[name] = vs.back();
  out.push_back(top);
  for (const auto& [name, vs] : values) {
    for (size_t k = 1; k < vs.size(); ++k) {
      DimBindings b = out[0];
      b[name] = vs[k];
      out.push_back(std::move(b));
    }
  }
  return out;
}

}  // namespace

Status unbound_dims_error(const Graph& g) {
  std::string example;
  for (const auto& [name, r] : g.dim_ranges())
    example += fmt::format("{}{}={}", example.empty() ? "" : ",", name, r.min);
  return invalid_argument(fmt::format(
      "graph '{}' has symbolic dims ({}): bind them to values first (Graph::bind; on the command line --dims {})",
      g.name(), ranges_text(g.dim_ranges()), example));
}

Graph::SymbolicDims& Graph::symbolic_for_edit() {
  auto fresh = std::make_shared<SymbolicDims>(symbolic_ ? *symbolic_ : SymbolicDims{});
  SymbolicDims& ref = *fresh;
  symbolic_ = std::move(fresh);
  return ref;
}

const DimRanges& Graph::dim_ranges() const {
  static const DimRanges none;
  return symbolic_ ? symbolic_->ranges : none;
}

DimExpr Graph::dim(std::string name, int64_t min, int64_t max) {
  verified_ = false;
  const std::string where = "dims/" + name;
  DimExpr sym = DimExpr::symbol(name);
  const Result<DimExpr> parsed = DimExpr::parse(name);  // a name parses as exactly one symbol
  if (!parsed.ok() || !parsed->is_symbol() || name == "min" || name == "max" || name == "ceildiv") {
    graph_errors_.push_back(
        {-1, where, fmt::format("'{}' cannot name a dim: a letter or '_', then letters, digits or '_'", name)});
    return sym;
  }
  if (min < 1 || max < min) {
    graph_errors_.push_back(
        {-1, where,
         fmt::format("dim '{}': expected a range [min, max] with 1 <= min <= max, got [{}, {}]", name, min, max)});
    return sym;
  }
  if (auto it = dim_ranges().find(name); it != dim_ranges().end()) {
    if (it->second.min != min || it->second.max != max) {
      graph_errors_.push_back({-1, where,
                               fmt::format("dim '{}' is declared twice: [{}, {}] and [{}, {}]", name, it->second.min,
                                           it->second.max, min, max)});
    }
    return sym;
  }
  symbolic_for_edit().ranges[name] = {min, max};
  return sym;
}

Tensor Graph::symbolic_input(std::string name, const std::vector<DimExpr>& shape, DType dtype,
                             std::optional<Layout> layout) {
  // The dims at the bottom of every range are the tensor's numbers until the graph is bound.
  const int32_t id = static_cast<int32_t>(tensors_.size());
  const std::string where = fmt::format("tensors/{}/shape", id);
  const DimBindings bottom = range_ends(dim_ranges(), false);
  std::vector<int64_t> dims;
  bool symbolic = false, broken = false;
  for (size_t k = 0; k < shape.size(); ++k) {
    symbolic = symbolic || !shape[k].is_constant();
    for (const std::string& sym : shape[k].symbols()) {
      if (!dim_ranges().count(sym)) {
        graph_errors_.push_back(
            {-1, fmt::format("{}/{}", where, k),
             fmt::format("tensor '{}': dim {} ({}) uses '{}', which is no declared dim{}", name, k,
                         shape[k].to_string(), sym,
                         dim_ranges().empty() ? "" : " (declared: " + ranges_text(dim_ranges()) + ")")});
        broken = true;
      }
    }
    auto v = shape[k].evaluate(bottom);
    if (!broken && (!v.ok() || *v < 1)) {
      graph_errors_.push_back(
          {-1, fmt::format("{}/{}", where, k),
           fmt::format("tensor '{}': dim {} ({}) is {} with {} (the bottom of its range): dims must "
                       "be positive",
                       name, k, shape[k].to_string(), v.ok() ? std::to_string(*v) : v.status().message(),
                       bindings_text(bottom))});
      broken = true;
    }
    dims.push_back(v.ok() ? *v : 0);
  }
  if (broken) dims.assign(std::max<size_t>(dims.size(), 1), 0);  // an invalid shape: reported once, above
  const Tensor t = declare(std::move(name), Shape(dims), dtype, layout, TensorKind::input);
  if (symbolic && !broken) symbolic_for_edit().inputs[t.id] = shape;
  return t;
}

std::optional<std::vector<DimExpr>> Graph::symbolic_shape(Tensor t) const {
  if (!symbolic_) return std::nullopt;
  auto it = symbolic_->inputs.find(t.id);
  if (it == symbolic_->inputs.end()) return std::nullopt;
  return it->second;
}

Result<Graph> Graph::bind(const DimBindings& values) const {
  for (const auto& [name, v] : values) {
    auto it = dim_ranges().find(name);
    if (it == dim_ranges().end()) {
      return invalid_argument(fmt::format(
          "graph '{}' has no dim '{}'{}", name_, name,
          dim_ranges().empty() ? " (it has no symbolic dims)" : " (its dims: " + ranges_text(dim_ranges()) + ")"));
    }
    if (v < it->second.min || v > it->second.max) {
      return invalid_argument(fmt::format("dim '{}' = {} is outside its range [{}, {}] in graph '{}'", name, v,
                                          it->second.min, it->second.max, name_));
    }
  }
  for (const auto& [name, r] : dim_ranges()) {
    if (!values.count(name))
      return invalid_argument(
          fmt::format("graph '{}': no value for dim '{}' (range [{}, {}])", name_, name, r.min, r.max));
  }
  Graph g = *this;
  g.symbolic_.reset();
  g.verified_ = false;
  g.binding_ = symbolic_ != nullptr;
  if (symbolic_) {
    for (const auto& [id, dims] : symbolic_->inputs) {
      TensorInfo& info = g.tensors_[static_cast<size_t>(id)];
      Shape s;
      for (size_t k = 0; k < dims.size(); ++k) {
        auto v = dims[k].evaluate(values);
        if (!v.ok() || *v < 1) {
          return invalid_argument(fmt::format("with {}: input '{}' dim {} ({}) is {}: dims must be positive",
                                              bindings_text(values), info.name, k, dims[k].to_string(),
                                              v.ok() ? std::to_string(*v) : v.status().message()));
        }
        s.push_back(*v);
      }
      if (Status st = validate_shape(s); !st.ok())
        return invalid_argument(fmt::format("with {}: input '{}': {}", bindings_text(values), info.name, st.message()));
      info.shape = std::move(s);
    }
  }
  if (Status st = g.verify(); !st.ok()) {
    if (values.empty()) return st;
    std::string msg;
    for (const std::string& line : support::lines_naming(st.message(), ""))
      msg += fmt::format("{}with {}: {}", msg.empty() ? "" : "\n", bindings_text(values), line);
    return invalid_argument(std::move(msg));
  }
  return g;
}

// The graph at each probe but the all-bottom one (its own numbers, which check() just inferred): the first
// combination of values at which it does not hold, its problems prefixed with those values.
std::vector<Diagnostic> Graph::check_over_ranges() {
  const std::vector<DimBindings> all = probes(dim_ranges());
  for (size_t p = 1; p < all.size(); ++p) {
    Result<Graph> g = bind(all[p]);
    if (g.ok()) continue;
    std::vector<Diagnostic> out;
    for (const std::string& line : support::lines_naming(g.status().message(), "")) {
      out.push_back({-1, "dims", fmt::format("{} (verified over {})", line, ranges_text(dim_ranges()))});
    }
    return out;
  }
  return {};
}

Result<Shape> Graph::shape_at(Tensor t, const DimBindings& values) const {
  KILN_CHECK(t.valid() && static_cast<size_t>(t.id) < tensors_.size(), "shape_at: invalid tensor handle");
  if (!symbolic_) return tensors_[static_cast<size_t>(t.id)].shape;
  Graph g = *this;
  for (const auto& [id, dims] : symbolic_->inputs) {
    Shape s;
    for (const DimExpr& d : dims) {
      KILN_ASSIGN_OR_RETURN(const int64_t v, d.evaluate(values));
      s.push_back(v);
    }
    g.tensors_[static_cast<size_t>(id)].shape = std::move(s);
  }
  // The nodes up to t's producer, in order (the later ones cannot change it).
  const int32_t last = tensors_[static_cast<size_t>(t.id)].producer;
  for (int32_t i = 0; i <= last; ++i) {
    g.infer(i);
    const Node& n = g.nodes_[static_cast<size_t>(i)];
    if (!n.infer_errors.empty()) {
      return invalid_argument(
          fmt::format("with {}: {}", bindings_text(values), format_diagnostic(g, n.infer_errors.front())));
    }
  }
  return g.tensors_[static_cast<size_t>(t.id)].shape;
}

// A node's problem in a symbolic graph at its own numbers (the bottom of every range) says so.
void Graph::say_bottom_values(std::vector<Diagnostic>& ds, size_t from) const {
  const DimBindings bottom = range_ends(dim_ranges(), false);
  for (size_t i = from; i < ds.size(); ++i)
    ds[i].message = fmt::format("with {} (the bottom of the range): {}", bindings_text(bottom), ds[i].message);
}

Result<DimBindings> Graph::dims_from_shapes(const std::map<std::string, Shape, std::less<>>& shapes) const {
  DimBindings found;
  std::map<std::string, std::string, std::less<>> source;                // symbol -> "input 'x' dim 0"
  std::vector<std::tuple<std::string, size_t, DimExpr, int64_t>> later;  // expressions checked once solved
  if (symbolic_) {
    for (const auto& [id, dims] : symbolic_->inputs) {
      const std::string& name = tensors_[static_cast<size_t>(id)].name;
      auto it = shapes.find(name);
      if (it == shapes.end()) continue;
      const Shape& s = it->second;
      std::string declared;
      for (const DimExpr& d : dims) declared += (declared.empty() ? "" : ", ") + d.to_string();
      if (s.rank() != static_cast<int>(dims.size())) {
        return invalid_argument(
            fmt::format("input '{}': expected {} dims ([{}]), got {}", name, dims.size(), declared, s.to_string()));
      }
      for (size_t k = 0; k < dims.size(); ++k) {
        const int64_t v = s[static_cast<int>(k)];
        const std::string here = fmt::format("input '{}' dim {}", name, k);
        if (auto c = dims[k].constant(); c && *c != v) {
          return invalid_argument(fmt::format("{} is {}, but the graph fixes it at {}", here, v, *c));
        } else if (dims[k].is_symbol()) {
          const std::string sym = dims[k].symbols()[0];
          if (auto f = found.find(sym); f != found.end() && f->second != v) {
            return invalid_argument(fmt::format("{} is {}, but {} made {} = {}", here, v, source[sym], sym, f->second));
          }
          found[sym] = v;
          source.emplace(sym, here);
        } else if (!c) {
          later.emplace_back(here, k, dims[k], v);
        }
      }
    }
  }
  for (const auto& [name, r] : dim_ranges()) {
    if (!found.count(name)) {
      return invalid_argument(
          fmt::format("no value for dim '{}': no given input has it as a dim of its own (give it, e.g. --dims {}={})",
                      name, name, r.min));
    }
  }
  for (const auto& [here, k, expr, v] : later) {
    auto want = expr.evaluate(found);
    if (!want.ok() || *want != v) {
      return invalid_argument(fmt::format("{} is {}, but {} = {} with {}", here, v, expr.to_string(),
                                          want.ok() ? std::to_string(*want) : want.status().message(),
                                          bindings_text(found)));
    }
  }
  return found;
}

}  // namespace kiln
