// Loading an ONNX model: parse, check (ONNX's checker), then walk its nodes in order,
// each through its op's handler (ops_*.cpp), into a kiln Graph.
#include <algorithm>
#include <cctype>
#include <exception>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <onnx/checker.h>

#include "importer.h"
#include "kiln/onnx.h"
#include "onnx/plugin_api.h"
#include "onnx_patterns.h"

namespace kiln {
namespace {

using onnx_import::Const;
using onnx_import::Importer;

Status with_source(const Status& s, std::string_view source) {
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("{}: {}", source, s.message()));
}

Result<int> default_opset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      const int64_t v = o.version();
      if (v > kOnnxMaxOpset) {
        return unsupported(fmt::format("the model's opset {} is newer than kiln reads (opsets {} to {})", v,
                                       kOnnxMinOpset, kOnnxMaxOpset));
      }
      if (v < kOnnxMinOpset) {
        return unsupported(fmt::format("the model's opset {} is older than kiln reads (opsets {} to {})", v,
                                       kOnnxMinOpset, kOnnxMaxOpset));
      }
      return static_cast<int>(v);
    }
  }
  return invalid_argument("the model imports no opset of the default ONNX domain (opset_import has no \"\" entry)");
}

// A symbol's name for an ONNX dim_param ("batch_size", "unk__12"; other characters made '_'), or for a dim
// with neither a value nor a name (the input's name and the dim's position).
std::string symbol_name(const onnx::ValueInfoProto& vi, int i, const std::string& param) {
  std::string s = param.empty() ? fmt::format("{}_d{}", vi.name(), i) : param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])) || s == "min" || s == "max" || s == "ceildiv")
    s = "_" + s;
  return s;
}

// The dims of graph input `vi`: the ones the caller gave (--shape), else the model's, where a dim the model
// leaves open (a dim_param such as 'batch', or none) becomes a symbol over OnnxOptions::dim_range, declared
// in `g` (docs/onnx.md, "Symbolic dims").
Result<std::vector<DimExpr>> input_dims(const onnx::ValueInfoProto& vi, const OnnxOptions& o, Graph& g) {
  std::vector<DimExpr> dims;
  if (auto it = o.input_shapes.find(vi.name()); it != o.input_shapes.end()) {
    for (int64_t d : it->second.dims()) dims.push_back(d);
    return dims;
  }
  const auto& tt = vi.type().tensor_type();
  if (!tt.has_shape()) {
    return invalid_argument(
        fmt::format("input '{}' has no shape in the model: give it with --shape {}=1x3x224x224 "
                    "(OnnxOptions::input_shapes)",
                    vi.name(), vi.name()));
  }
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    if (d.has_dim_value() && d.dim_value() > 0) {
      dims.push_back(d.dim_value());
    } else if (d.has_dim_value()) {
      return invalid_argument(
          fmt::format("input '{}' dim {} is {}: give the input's shape with --shape "
                      "{}=<d0>x<d1>x... (OnnxOptions::input_shapes)",
                      vi.name(), i, d.dim_value(), vi.name()));
    } else {
      const std::string name = symbol_name(vi, i, d.dim_param());
      const auto given = o.dim_ranges.find(name);
      const DimRange r = given != o.dim_ranges.end() ? given->second : o.dim_range;
      dims.push_back(g.dim(name, r.min, r.max));
    }
  }
  return dims;
}

// ONNX's checker. Not ONNX's shape inference: libonnx 1.12's inference functions dereference shapes a
// malformed model lacks (fuzz_onnx found null reads in ConvTranspose's and Gemm's within seconds; a crash
// in a library is a crash of kiln), and kiln needs none of what it writes: it infers every shape itself as it
// builds nodes, from the inputs' shapes (the model's, or --shape) and the constants it folds.
Status check_model(const onnx::ModelProto& m) {
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    return invalid_argument(fmt::format("ONNX's checker refused the model: {}", e.what()));
  }
  return {};
}

// Initializers become constants, the other graph inputs kiln inputs (f32/f16/bf16, static or --shape dims).
Status declare_inputs(Importer& imp, const onnx::GraphProto& graph, const OnnxOptions& o, const std::string& base_dir) {
  std::set<std::string> initialized;
  for (const auto& t : graph.initializer()) {
    KILN_ASSIGN_OR_RETURN(Const c, onnx_import::tensor_to_const(t, base_dir));
    imp.set_const(t.name(), std::move(c));
    initialized.insert(t.name());
  }
  if (graph.sparse_initializer_size() > 0)
    return unsupported("the model has sparse initializers, which kiln does not import");
  std::vector<std::string> errors;
  for (const auto& vi : graph.input()) {
    if (initialized.count(vi.name())) continue;  // IR < 4 lists initializers as inputs too
    if (!vi.type().has_tensor_type()) {
      errors.push_back(fmt::format("input '{}' is not a tensor (a sequence, map or optional)", vi.name()));
      continue;
    }
    const int32_t et = vi.type().tensor_type().elem_type();
    auto dtype = onnx_import::elem_dtype(et);
    if (!dtype) {
      errors.push_back(fmt::format("input '{}' is {}: kiln's tensors are float, float16 or bfloat16", vi.name(),
                                   onnx_import::elem_type_name(et)));
      continue;
    }
    auto dims = input_dims(vi, o, imp.g);
    if (!dims.ok()) {
      errors.push_back(dims.status().message());
      continue;
    }
    if (std::any_of(dims->begin(), dims->end(), [](const DimExpr& d) { return !d.is_constant(); })) {
      imp.set_tensor(vi.name(), imp.g.symbolic_input(vi.name(), *dims, *dtype));  // the graph checks it
      continue;
    }
    Shape shape;
    for (const DimExpr& d : *dims) shape.push_back(*d.constant());
    if (Status st = validate_shape(shape); !st.ok()) {
      errors.push_back(fmt::format("input '{}': {}", vi.name(), st.message()));
      continue;
    }
    imp.set_tensor(vi.name(), imp.g.input(vi.name(), shape, *dtype));
  }
  for (const auto& [name, shape] : o.input_shapes) {
    bool found = false;
    for (const auto& vi : graph.input()) found = found || vi.name() == name;
    if (!found) errors.push_back(fmt::format("--shape names '{}', which is not an input of the model", name));
  }
  for (const auto& [name, r] : o.dim_ranges) {
    if (imp.g.dim_ranges().count(name)) continue;
    errors.push_back(
        fmt::format("--dim-range names '{}', which is no open dim of the model ({})", name,
                    imp.g.dim_ranges().empty() ? "it has none" : "its open dims: " + ranges_text(imp.g.dim_ranges())));
  }
  if (errors.empty()) return {};
  std::string msg;
  for (const auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
  return invalid_argument(msg);
}

// What could not be imported: one line per node, and the op types that blocked it.
struct Problems {
  std::vector<std::string> lines;
  std::map<std::string, int> unsupported_types;
  std::set<std::string> poisoned;  // outputs of nodes that were not imported: their readers are skipped
};

// Every node through its op's handler, in order; a node whose handler fails (or is missing) is recorded and
// its outputs poisoned, so that all unsupported nodes of a model are reported at once.
// In a graph with open dims: a node that folds a value depending on them (Importer::varies; the shape of a
// symbolic tensor) folds it again in the importer's other worlds (the open dims at other values). A node that makes a
// tensor from such a value is refused, unless it is a Reshape (whose handler follows the value: ops_reshape.cpp).
Status fold_at_the_top(Importer& imp, const onnx::NodeProto& node, const onnx_import::Handler& handler) {
  std::string varying;
  for (const auto& in : node.input())
    if (varying.empty() && imp.varies(in)) varying = in;
  const bool reads_shape =
      (node.op_type() == "Shape" || node.op_type() == "Size") && node.input_size() > 0 && !imp.constant(node.input(0));
  if (varying.empty() && !reads_shape) return {};
  std::vector<std::string> outputs;
  bool fold = true;
  for (const auto& out : node.output()) {
    if (out.empty()) continue;
    outputs.push_back(out);
    fold = fold && imp.constant(out) != nullptr;
  }
  if (!fold) {
    if (node.op_type() == "Reshape" && varying == node.input(1)) return {};
    return imp.refuse(node, fmt::format("it reads '{}', a value that depends on the model's open dims ({}) where kiln "
                                        "needs a constant: fix the inputs' shapes with --shape",
                                        varying, imp.open_dims()));
  }
  for (int w = 1; w <= imp.worlds(); ++w) {
    imp.set_world(w);
    Status there = handler(imp, node);
    imp.set_world(0);
    if (!there.ok()) {
      return imp.refuse(
          node, fmt::format("with the open dims at {}: {}", bindings_text(imp.world_bindings(w)), there.message()));
    }
  }
  imp.keep_varying(outputs);
  return {};
}

void import_nodes(Importer& imp, const std::vector<onnx::NodeProto>& nodes, Problems& p) {
  const onnx_import::HandlerTable& table = onnx_import::handlers();
  for (const onnx::NodeProto& node : nodes) {
    auto poison = [&] {
      for (const auto& out : node.output()) p.poisoned.insert(out);
    };
    bool blocked = false;
    for (const auto& in : node.input()) blocked = blocked || p.poisoned.count(in);
    if (blocked) {
      poison();
      continue;
    }
    const bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    auto h = default_domain ? table.find(node.op_type()) : table.end();
    if (h == table.end()) {
      p.lines.push_back(imp.describe(node) + ": op not supported by kiln" +
                        (default_domain ? "" : fmt::format(" (domain '{}')", node.domain())));
      ++p.unsupported_types[node.op_type()];
      poison();
      continue;
    }
    imp.begin_node();
    Status s = h->second(imp, node);
    // A kiln node the handler added may have recorded a problem (an op's shape rule) that its Tensor did not
    // show: the ONNX node is then one kiln cannot express.
    if (s.ok()) {
      if (auto problem = imp.node_problem()) s = imp.refuse(node, *problem);
    }
    if (s.ok() && imp.g.is_symbolic()) s = fold_at_the_top(imp, node, h->second);
    if (!s.ok()) {
      p.lines.push_back(s.message());
      if (s.code() == StatusCode::unsupported) ++p.unsupported_types[node.op_type()];
      poison();
    }
  }
}

// The graph's outputs under their ONNX names (through an identity where the tensor is an input, a parameter
// or an output already).
void declare_outputs(Importer& imp, const onnx::GraphProto& graph, Problems& p) {
  for (const auto& vi : graph.output()) {
    if (p.poisoned.count(vi.name())) continue;
    if (!imp.known(vi.name())) {
      p.lines.push_back(fmt::format("output '{}' is produced by no node of the model", vi.name()));
      continue;
    }
    onnx::NodeProto out_node;
    out_node.set_op_type("graph output");
    std::string source = vi.name();
    if (imp.varies(vi.name())) {
      p.lines.push_back(
          fmt::format("output '{}' is a value that depends on the model's open dims ({}), which kiln "
                      "holds as constants: fix the inputs' shapes with --shape",
                      vi.name(), imp.open_dims()));
      continue;
    }
    if (const Const* c = imp.constant(vi.name())) {
      // A constant output: a parameter under another name, and the output an identity of it named as in ONNX.
      source = vi.name() + "/value";
      imp.set_const(source, *c);
    }
    out_node.add_input(source);
    out_node.add_output(vi.name());
    auto t = imp.input(out_node, 0);
    if (!t.ok()) {
      p.lines.push_back(t.status().message());
      if (t.status().code() == StatusCode::unsupported) ++p.unsupported_types["graph output"];
      continue;
    }
    const TensorInfo& info = imp.g.tensor(*t);
    const bool taken = std::find(imp.g.outputs().begin(), imp.g.outputs().end(), *t) != imp.g.outputs().end();
    Tensor out = *t;
    if (info.kind != TensorKind::intermediate || taken || (info.name != vi.name() && imp.g.find_tensor(vi.name()))) {
      out = imp.g.identity(*t, imp.node_name(out_node, "output"));
    }
    imp.g.output(out, vi.name());
  }
}

Status problems_status(const Problems& p) {
  std::string msg;
  for (const auto& line : p.lines) msg += line + "\n";
  if (p.unsupported_types.empty()) {
    msg.pop_back();
    return invalid_argument(msg);
  }
  std::vector<std::string> types;
  for (const auto& [t, n] : p.unsupported_types) types.push_back(n == 1 ? t : fmt::format("{} ({})", t, n));
  int nodes = 0;
  for (const auto& [t, n] : p.unsupported_types) nodes += n;
  msg += fmt::format("kiln cannot import {} node{} of op type{}: {}", nodes, nodes == 1 ? "" : "s",
                     p.unsupported_types.size() == 1 ? "" : "s", fmt::join(types, ", "));
  return unsupported(msg);
}

// With the open dims at the top of their range, each output has the dims the model declares for it: a
// dim named like an input's open dim has that value, a fixed one its number. This catches an op whose
// import fixed a dim that should vary (a shape folded at the bottom of the range): refused, not run wrong.
Status check_declared_outputs(const Graph& g, const onnx::GraphProto& graph) {
  const DimBindings top = range_ends(g.dim_ranges(), true);
  const std::string at = bindings_text(top);
  for (const auto& vi : graph.output()) {
    const auto t = g.find_tensor(vi.name());
    if (!t || !vi.type().tensor_type().has_shape()) continue;
    KILN_ASSIGN_OR_RETURN(const Shape s, g.shape_at(*t, top));
    const auto& shape = vi.type().tensor_type().shape();
    if (shape.dim_size() != s.rank()) continue;  // kiln's own rank rules were checked as it imported
    for (int i = 0; i < shape.dim_size(); ++i) {
      const auto& d = shape.dim(i);
      std::optional<int64_t> want;
      if (d.has_dim_value() && d.dim_value() > 0) want = d.dim_value();
      if (d.has_dim_param() && top.count(d.dim_param())) want = top.at(d.dim_param());
      if (want && *want != s[i]) {
        return invalid_argument(fmt::format(
            "output '{}' dim {} is {} with {}, but the model declares it {}: an op kiln imported fixed a dim "
            "that varies; give the inputs' shapes with --shape to import the model at fixed shapes",
            vi.name(), i, s[i], at, d.has_dim_param() ? "'" + d.dim_param() + "'" : std::to_string(*want)));
      }
    }
  }
  return {};
}

Result<Graph> import_graph(onnx::ModelProto& m, const std::string& source, const OnnxOptions& o,
                           const std::string& base_dir) {
  KILN_ASSIGN_OR_RETURN(const int opset, default_opset(m));
  if (m.functions_size() > 0) return unsupported("the model defines local functions, which kiln does not import");
  KILN_RETURN_IF_ERROR(onnx_import::internalize_external_data(m, base_dir));
  KILN_RETURN_IF_ERROR(check_model(m));
  const onnx::GraphProto& graph = m.graph();
  Importer imp(source, opset);
  imp.g.set_name(graph.name().empty() ? "onnx" : graph.name());
  KILN_RETURN_IF_ERROR(declare_inputs(imp, graph, o, base_dir));
  std::vector<onnx::NodeProto> nodes = onnx_import::rewrite_patterns(imp, graph);
  std::set<std::string, std::less<>> used;
  for (const auto& n : nodes) used.insert(n.input().begin(), n.input().end());
  for (const auto& vi : graph.output()) used.insert(vi.name());
  imp.set_used(std::move(used));
  Problems problems;
  import_nodes(imp, nodes, problems);
  declare_outputs(imp, graph, problems);
  if (!problems.lines.empty()) return problems_status(problems);
  KILN_RETURN_IF_ERROR(imp.g.verify());
  if (imp.g.is_symbolic()) KILN_RETURN_IF_ERROR(check_declared_outputs(imp.g, graph));
  return std::move(imp.g);
}

}  // namespace

namespace onnx_plugin {

Result<Graph> onnx_from_bytes(std::string_view bytes, std::string_view source, const OnnxOptions& options,
                              const std::string& base_dir) {
  if (static_cast<int64_t>(bytes.size()) > options.max_bytes) {
    return invalid_argument(fmt::format("{}: {} bytes, more than the {} kiln reads (OnnxOptions::max_bytes)", source,
                                        bytes.size(), options.max_bytes));
  }
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return invalid_argument(fmt::format("{}: {} bytes, over protobuf's 2 GiB limit", source, bytes.size()));
  }
  onnx::ModelProto m;
  if (bytes.empty() || !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return invalid_argument(
        fmt::format("{}: not an ONNX model: the bytes do not parse as a ModelProto (truncated or "
                    "not an .onnx file)",
                    source));
  }
  if (!m.has_graph()) return invalid_argument(fmt::format("{}: the ModelProto holds no graph", source));
  auto g = import_graph(m, std::string(source), options, base_dir);
  if (!g.ok()) return with_source(g.status(), source);
  return g;
}

Result<Graph> load_onnx(const std::string& path, const OnnxOptions& options) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return not_found(fmt::format("{}: file not found", path));
  const std::streamoff size = f.tellg();
  if (size < 0) return io_error(fmt::format("{}: cannot read", path));
  if (size > options.max_bytes) {
    return invalid_argument(fmt::format("{}: {} bytes, more than the {} kiln reads (OnnxOptions::max_bytes)", path,
                                        size, options.max_bytes));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  f.seekg(0);
  f.read(bytes.data(), size);
  if (f.gcount() != size) return io_error(fmt::format("{}: read {} of {} bytes", path, f.gcount(), size));
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return onnx_plugin::onnx_from_bytes(bytes, path, options, dir);
}

std::vector<std::string> onnx_supported_ops() {
  std::vector<std::string> r;
  for (const auto& [name, h] : onnx_import::handlers()) r.push_back(name);
  return r;
}

}  // namespace onnx_plugin

}  // namespace kiln
