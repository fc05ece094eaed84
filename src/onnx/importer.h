// The ONNX importer's working state, shared by its op handlers (src/onnx/ops_*.cpp). The only part of kiln
// besides onnx_load.cpp that sees protobuf classes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/status.h"

namespace kiln::onnx_import {

// A value known while importing: an initializer, a Constant, or what folding them gave. Integers (shapes,
// indices, axes) are kept exactly in `ints`; floating-point values in `floats`.
struct Const {
  int32_t elem_type = onnx::TensorProto::FLOAT;
  std::vector<int64_t> dims;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  bool is_int() const { return !is_float_type(elem_type); }
  int64_t numel() const;  // saturating (dims_product)
  double at(size_t i) const { return is_int() ? static_cast<double>(ints[i]) : floats[i]; }
  static bool is_float_type(int32_t t);
};

// The ONNX element type's name ("float", "int64", ...), and kiln's dtype for it (nullopt: none).
std::string elem_type_name(int32_t t);
std::optional<DType> elem_dtype(int32_t t);

// A TensorProto as a Const; `external_dir` is where external data lives ("" refuses external data).
Result<Const> tensor_to_const(const onnx::TensorProto& t, const std::string& external_dir);
// Reads every external-data initializer of `m` from `external_dir` into the model (as raw data), so that
// ONNX's checker and kiln see one self-contained model; a missing or short file is an error naming it.
Status internalize_external_data(onnx::ModelProto& m, const std::string& external_dir);
// Every value of `c` as its element type holds it: floats rounded to float/float16/bfloat16, bools 0 or 1,
// narrow integers wrapped to their width (what a fold must do after computing in double or int64).
void normalize_to_type(Const& c);
// A float Const as a host tensor of `dtype` (values rounded to it).
HostTensor const_to_host(const Const& c, DType dtype);

class Importer {
 public:
  Importer(std::string source, int opset) : source_(std::move(source)), opset_(opset) {}

  Graph g;
  int opset() const { return opset_; }

  // What an ONNX tensor name holds: a kiln tensor, or a constant.
  bool known(const std::string& name) const { return tensors_.count(name) || consts_.count(name); }
  const Const* constant(const std::string& name) const;
  void set_const(const std::string& name, Const c);

  // Constants that depend on the graph's open dims (symbols): the shape of a symbolic tensor and what is folded
  // from it (exporters' Shape -> Gather -> Concat -> Reshape chains around a dynamic batch). constant() gives a
  // value with every open dim at the bottom of its range (world 0). Each such value is folded again in every
  // other world (import_nodes runs the node's handler with set_world(w): constant() and set_const() then read
  // and write that world's values, and Shape reads shapes there): every open dim at the top of its range, and
  // two points where each takes another value, ascending and descending across the symbols, so that a value
  // equal at the ranges' two ends but not between them (a parity, a difference of two dims) still shows it
  // varies. A value that differs in any world varies: a Reshape makes the one output dim that follows it its
  // -1; any other op reading it as a constant is refused.
  bool varies(const std::string& name) const { return !world_consts_.empty() && world_consts_[0].count(name) > 0; }
  int worlds();                              // the other worlds' count: 0 in a graph without open dims
  const DimBindings& world_bindings(int w);  // w in [1, worlds()]
  const Const* world_constant(const std::string& name, int w) const;  // constant() where it does not vary
  int world() const { return world_; }
  void set_world(int w) { world_ = w; }
  std::string open_dims() const;  // "N, S": the graph's symbols, for messages
  // After the other worlds' runs of a fold: keeps their values of `outputs` where any differs from world 0's.
  void keep_varying(const std::vector<std::string>& outputs);
  void set_tensor(const std::string& name, Tensor t) { tensors_[name] = t; }

  // The kiln tensor for input `i` of `node`; a constant becomes a parameter holding its values (once).
  Result<Tensor> input(const onnx::NodeProto& node, int i);
  // Whether input `i` is given (optional inputs may be absent or named "").
  static bool has_input(const onnx::NodeProto& node, int i) { return i < node.input_size() && !node.input(i).empty(); }
  // A constant input, or an error saying it must be one (Reshape's shape, Slice's starts, ...).
  // With `integer`, an integer constant (shapes, axes, indices): a float one is an error, not an empty list.
  Result<const Const*> const_input(const onnx::NodeProto& node, int i, std::string_view what, bool integer = false);

  // Whether a node or the graph's outputs read `name` (an optional output nobody reads may be left out).
  bool used(const std::string& name) const { return used_.count(name) > 0; }
  void set_used(std::set<std::string, std::less<>> names) { used_ = std::move(names); }

  // A fresh name for a kiln node made for `node`: its first output's name, with `suffix` when it is a helper.
  std::string node_name(const onnx::NodeProto& node, std::string_view suffix = {});
  // Records `t` as output `k` of `node`, failing with the graph's message when the builder recorded one.
  Status set_output(const onnx::NodeProto& node, int k, Tensor t);

  // "node 'conv1' (Conv, opset 13): " + message, as an invalid_argument / unsupported Status.
  Status error(const onnx::NodeProto& node, std::string_view message) const;
  Status refuse(const onnx::NodeProto& node, std::string_view message) const;
  std::string describe(const onnx::NodeProto& node) const;

  // Called before each ONNX node's handler: the kiln nodes added from here on are that node's.
  void begin_node() { node_start_ = g.nodes().size(); }
  // The first build or shape error any kiln node of the current ONNX node recorded (an op's shape rule).
  // A handler that builds several kiln nodes checks it before it reads an intermediate tensor's shape: a
  // failed node's tensor has no shape (rank 0), which would break the handler's own arithmetic.
  std::optional<std::string> node_problem() const;

 private:
  std::string source_;
  int opset_;
  std::map<std::string, Tensor, std::less<>> tensors_;
  std::map<std::string, Const, std::less<>> consts_;
  std::vector<DimBindings> world_dims_;                                  // worlds 1.. (made at first use)
  std::vector<std::map<std::string, Const, std::less<>>> world_consts_;  // values that vary, per world 1..
  int world_ = 0;
  std::map<std::string, Tensor, std::less<>> materialized_;  // constants made parameters
  std::set<std::string, std::less<>> used_;
  size_t node_start_ = 0;
};

// ---- attributes ----
const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, std::string_view name);
int64_t attr_int(const onnx::NodeProto& n, std::string_view name, int64_t fallback);
double attr_float(const onnx::NodeProto& n, std::string_view name, double fallback);
std::string attr_string(const onnx::NodeProto& n, std::string_view name, std::string fallback);
std::vector<int64_t> attr_ints(const onnx::NodeProto& n, std::string_view name, std::vector<int64_t> fallback = {});
std::vector<double> attr_floats(const onnx::NodeProto& n, std::string_view name);

// The product of dims[from, to), saturating at kFoldLimit + 1: every fold checks its result against
// kFoldLimit, so an overflow (dims from a hostile model) is a clear refusal, never undefined behaviour.
inline constexpr int64_t kFoldLimit = int64_t{1} << 40;
// The most elements a fold makes (16 M: a constant is held as doubles while importing, 128 MiB).
inline constexpr int64_t kFoldElements = int64_t{1} << 24;
int64_t dims_product(const std::vector<int64_t>& dims, size_t from, size_t to);
inline int64_t dims_product(const std::vector<int64_t>& dims) { return dims_product(dims, 0, dims.size()); }
// A float as an int64 the way a cast truncates it, clamped to int64's range (NaN: 0) so that no conversion is
// out of range.
int64_t float_to_int(double v);
// Dims a constant may have: none negative, and the product of the nonzero ones at most kFoldLimit (so that
// strides and loops over an empty constant's other dims stay bounded too).
bool dims_bounded(const std::vector<int64_t>& dims);
// a op b for the importer's integer folding; nullopt on overflow (or division by zero).
std::optional<int64_t> checked_int(char op, int64_t a, int64_t b);

// Normalizes a possibly negative axis against `rank`; nullopt when out of range.
std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank);

// One handler per ONNX op type: reads the node's inputs, adds kiln nodes (or folds constants) and sets its
// outputs. The tables live in ops_*.cpp; handlers() merges them.
using Handler = std::function<Status(Importer&, const onnx::NodeProto&)>;
using HandlerTable = std::map<std::string, Handler, std::less<>>;
void add_fold_handlers(HandlerTable& t);       // ops_fold.cpp: Constant, Shape, Gather, ...
void add_pointwise_handlers(HandlerTable& t);  // ops_pointwise.cpp
void add_nn_handlers(HandlerTable& t);         // ops_nn.cpp: Conv, Gemm, pools, norms
void add_data_handlers(HandlerTable& t);       // ops_data.cpp: Concat, Transpose, Slice, ...
void add_reshape_handlers(HandlerTable& t);    // ops_reshape.cpp: Reshape, Flatten, Squeeze, Unsqueeze
// A kiln reshape of `x` to the dims `rule` gives for its dims, written so that it follows the graph's open dims
// (symbols): the rule (`world_rule` where the node's own parameters vary with them: a Reshape's shape computed
// from a Shape) is applied to x's dims at the bottom of their ranges and in each of the importer's other worlds
// (Importer::worlds), and the one output dim that differs becomes the reshape's -1; two such dims cannot be
// written as a reshape: refused (ops_reshape.cpp).
// Every reshape the handlers make of a tensor goes through it: one written with the dims at the bottom of the
// ranges would fix a dim that varies.
using DimsRule = std::function<Result<std::vector<int64_t>>(const std::vector<int64_t>&)>;
using WorldDimsRule = std::function<Result<std::vector<int64_t>>(const std::vector<int64_t>&, int world)>;
Result<Tensor> reshape_following(Importer& imp, const onnx::NodeProto& n, Tensor x, const DimsRule& rule,
                                 std::string name, const WorldDimsRule* world_rule = nullptr);
// The dims of node input 0, a constant's or a tensor's (ops_data.cpp).
Result<std::vector<int64_t>> dims_of(Importer& imp, const onnx::NodeProto& n);
void add_resize_handlers(HandlerTable& t);  // ops_resize.cpp: Resize, Upsample
const HandlerTable& handlers();

}  // namespace kiln::onnx_import
