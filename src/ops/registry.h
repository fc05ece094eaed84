// The op registry: one row per op, holding every fact about it.
//
// A row holds the op's name and fusion kind, its input and output ports, its attribute schema with
// defaults, its shape/dtype rule and its f64 reference implementation; pointwise rows also hold the scalar
// function the reference (and the tests of generated code) evaluate. Passes switch on the fusion kind,
// never on one op's name. The rows live in one table in registry.cpp, in the order of KILN_OPS.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/kernel_kinds.h"
#include "kiln/ops.h"

namespace kiln {

enum class AttrType : uint8_t { int_, float_, bool_, string, ints, floats };
std::string_view attr_type_name(AttrType t);
struct AttrSpec;
// What an attribute of this schema expects, as error messages word it: "a list of 2 or 4 integers".
std::string describe_attr_spec(const AttrSpec& s);

struct AttrSpec {
  std::string_view name{};
  AttrType type{};
  std::optional<AttrValue> default_value{};  // nullopt: required unless `optional`
  bool optional = false;                     // may be absent with no default
  std::vector<int> sizes{};                  // allowed list lengths (empty: any); a single number given
                                             // for a list attribute is repeated to sizes[0]
  std::vector<std::string_view> choices{};   // allowed values of a string attribute
  // A float attribute the generated kernels hold as an f32 literal (float_literal): normalize_attrs refuses
  // a value beyond the f32 range (|x| > FLT_MAX), which the kernel would hold as an infinity the reference
  // (in f64) does not see, or could not hold at all (a constexpr EPS).
  bool f32 = false;
};

struct PortSpec {
  std::string_view name{};
  bool optional = false;
  bool list = false;                      // takes any number (>= 1) of tensors (concat's xs)
  bool scalar_attr = false;               // may instead be given as a float attribute of the same name
  ValueDomain domain = ValueDomain::any;  // values the op is defined on (random inputs respect it)
  bool weight4d = false;                  // a 4-D tensor declared without a layout and bound here defaults to KCRS
  // A vector indexed by the coordinate along the op's `axis` attribute (1 when the op has none), not
  // broadcast NumPy-style from the last dim (bias_add's bias, batch_norm's statistics).
  bool channel_vector = false;
  // For weights: how many products each output sums over. Random values for such a port are scaled by
  // sqrt(3 / fan_in) (variance 1 / fan_in), so a deep network of random weights neither explodes nor dies.
  int64_t (*fan_in)(const Shape& weight, const Attrs& attrs) = nullptr;
};

struct OpDef;

// The largest value of the generated kernels' 32-bit int: they hold the window attributes of convs and pools
// (kernel, stride, padding, dilation) and the coordinates computed from them in int (templates/kiln/conv2d.cuh,
// pool.cuh), so the shape rules refuse values and windows beyond it.
inline constexpr int64_t kMaxKernelInt = 2147483647;

// What a shape rule sees and how it reports. Every failure names its port or attribute.
class InferCtx {
 public:
  InferCtx(const OpDef& def, const Node& node, const std::vector<TensorInfo>& tensors)
      : def_(def), node_(node), tensors_(tensors) {}

  bool has(std::string_view port) const;
  int count(std::string_view port) const;
  const TensorInfo& in(std::string_view port, int k = 0) const;

  bool has_attr(std::string_view name) const;
  int64_t attr_int(std::string_view name) const;
  double attr_float(std::string_view name) const;
  bool attr_bool(std::string_view name) const;
  const std::string& attr_str(std::string_view name) const;
  const std::vector<int64_t>& attr_ints(std::string_view name) const;
  const std::vector<double>& attr_floats(std::string_view name) const;

  // Record a problem; the rule returns after the first one it cannot continue past.
  void fail_input(std::string_view port, std::string message);
  void fail_attr(std::string_view name, std::string message);
  void fail(std::string message);
  bool failed() const { return !errors_.empty(); }

  void set_output(Shape shape, DType dtype, Layout layout, int port = 0);

  // Common checks; each records a failure and returns false when it does not hold.
  bool expect_rank(std::string_view port, int rank, std::string_view dims_hint = {});
  bool expect_min_rank(std::string_view port, int rank);
  bool expect_same_dtype(std::string_view port, std::string_view other_port);
  bool expect_vector(std::string_view port, int64_t length, std::string_view what);
  // Every value of int-list attribute `name` lies in [lo, kMaxKernelInt] (lo: 0 or 1).
  bool expect_kernel_ints(std::string_view name, int64_t lo);

  const Node& node() const { return node_; }
  const OpDef& def() const { return def_; }
  std::vector<Diagnostic>& errors() { return errors_; }
  std::vector<TensorInfo>& outputs() { return outputs_; }

 private:
  const OpDef& def_;
  const Node& node_;
  const std::vector<TensorInfo>& tensors_;
  std::vector<Diagnostic> errors_;
  std::vector<TensorInfo> outputs_;
};

// What a reference implementation sees: its inputs (per port, in row order) and its outputs, allocated
// with the inferred shapes.
struct RefCtx {
  const Node& node;
  std::vector<std::vector<const HostTensor*>> inputs;  // per port; empty for an absent optional port
  std::vector<HostTensor*> outputs;

  const HostTensor& in(const OpDef& def, std::string_view port, int k = 0) const;
  const HostTensor* maybe(const OpDef& def, std::string_view port) const;
  HostTensor& out(int port = 0) const { return *outputs[static_cast<size_t>(port)]; }
  int64_t attr_int(std::string_view name) const;
  double attr_float(std::string_view name) const;
  bool attr_bool(std::string_view name) const;
  const std::string& attr_str(std::string_view name) const;
  const std::vector<int64_t>& attr_ints(std::string_view name) const;
  const std::vector<double>& attr_floats(std::string_view name) const;
  bool has_attr(std::string_view name) const;
};

using InferFn = void (*)(InferCtx&);
using RefFn = void (*)(const OpDef&, RefCtx&);
// Where a view's elements are in its input's memory: `base` elements past the input's first one, then
// `strides` (elements) per logical dim of the output.
struct StridedView {
  int64_t base = 0;
  std::vector<int64_t> strides;
};
// The output as a view of the input's memory, given the input's strides and both shapes; nullopt when the
// output is no strided view of that memory (a reshape of a permuted order).
using ViewFn = std::optional<StridedView> (*)(const Node&, const Shape& in, const Shape& out,
                                              const std::vector<int64_t>& in_strides);
// Scalar math of a pointwise op; `p` holds the op's `unary_params` attributes in order (NaN if absent).
using UnaryFn = double (*)(double x, const double* p);
using BinaryFn = double (*)(double a, double b);

// What an op's vector-Jacobian rule (OpDef::vjp) sees while kiln::backward builds a training graph
// (src/ir/autodiff.cpp): the forward node, its tensors in the training graph, the gradient of its output, and
// where to put the gradient of each input. A rule adds nodes with the Graph builder (the backward of an op
// is other ops: matmuls over transposed operands, the activations' *_grad ops, reductions).
// A rule holds no reference into the graph (a TensorInfo, a Shape) across a builder call: adding nodes may move
// the graph's tensors. Copy what it needs first.
class VjpCtx {
 public:
  VjpCtx(Graph& g, const Node& node, Tensor dy) : g_(g), node_(node), dy_(dy) {}
  Graph& g() { return g_; }
  const Node& node() const { return node_; }
  // Forward input `port` (invalid when the port holds a scalar attribute or is absent), output, gradient.
  Tensor in(std::string_view port, int k = 0) const;
  Tensor out() const { return node_.outputs[0]; }
  Tensor dy() const { return dy_; }
  // The number a binary op takes instead of a tensor at `port` ("b": mul(x, 2.0)).
  double scalar(std::string_view port) const;
  // Whether the gradient of input `port` reaches a parameter (no need to compute it otherwise).
  bool wants(std::string_view port, int k = 0) const;
  // The gradient of input `port` (summed with any other gradient of the same tensor).
  void grad(std::string_view port, Tensor dx, int k = 0);
  // `t` (of a broadcast result's shape) summed down to the shape `to` of an operand broadcast to it (NumPy's
  // trailing alignment): the gradient of a broadcast operand.
  // (`to` by value: a shape read from the graph is a reference into it, which adding nodes invalidates.)
  Tensor sum_to(Tensor t, Shape to);
  // The rule has no gradient for this node (an attribute it does not cover yet): kiln::backward fails naming
  // the node, op and `why`.
  void refuse(std::string why) { refused = std::move(why); }
  // What the engine reads back.
  std::function<bool(Tensor)> needs;             // set by the engine
  std::vector<std::pair<Tensor, Tensor>> grads;  // (input, its gradient)
  std::string refused;

 private:
  Graph& g_;
  const Node& node_;
  Tensor dy_;
};
using VjpFn = void (*)(VjpCtx&);

// A per-channel reduction of a 4-D [N, C, H, W] tensor, which a conv kernel may compute in its epilogue from
// the values it stores (a *reduction epilogue*: templates/kiln/reduction_epilogue.cuh; docs/architecture.md,
// "Fusion roles"), and the pool family computes alone: for each channel, the sum of each term over the H·W
// pixels of each image (`per_image`: output [N, C, 1, 1], one term) or over every image too (output
// [terms, C], a row per term), then `finish` of each sum. Both are CUDA expressions in float: a term of `v`
// (a value as stored, so as a separate kernel would read it), `finish` of `sum` and `count` (the values
// summed). global_avg_pool is {per_image, {"v"}, "sum / count"}; channel_stats {over images, {"v", "v * v"}}.
struct ChannelReduction {
  bool per_image = true;
  std::vector<std::string_view> terms{};
  std::string_view finish = "sum";
};

struct OpDef {
  OpId id{};
  std::string_view name{};
  FusionKind kind{};
  std::vector<PortSpec> inputs{};
  std::vector<PortSpec> outputs{};
  std::vector<AttrSpec> attrs{};
  InferFn infer = nullptr;
  RefFn ref = nullptr;
  UnaryFn unary = nullptr;                       // unary pointwise ops
  std::vector<std::string_view> unary_params{};  // float attributes passed to `unary`, in order
  BinaryFn binary = nullptr;                     // binary pointwise ops
  // Pointwise ops: the __device__ function generated kernels call (templates/kiln/pointwise_ops.cuh), with
  // the op's tensor operands in port order, then the float attributes named in `device_params` (default:
  // `unary_params`) as literals.
  std::string_view device_fn{};
  std::vector<std::string_view> device_params{};
  // The op's result is rounded to its output dtype inside a fused kernel (cast); other ops keep f32
  // between the ops of one kernel.
  bool rounds_to_output_dtype = false;
  std::string_view summary{};  // one line for `kiln ops` and the docs
  // The ONNX op that is this op one to one (the same inputs in port order, no attribute to translate):
  // the importer maps every such op from this column (src/onnx/ops_pointwise.cpp). Empty: none, or one
  // with a handler of its own.
  std::string_view onnx{};
  // Reads its 4-D inputs as row-major logical order (reshape, transpose, matmul): the layout pass gives
  // it NCHW inputs. Other ops run in whatever layout their activations have.
  bool row_major_only = false;
  // For an op whose output is its input's elements at other coordinates (layout_convert: the same ones,
  // transpose: permuted, reshape: renumbered, when the input's strides allow it; slice: some of them), the
  // output as a view of the input's memory. Such an op inside a kernel group that reads its input from
  // memory is a *load transform*: the kernel reads the input through the view (KernelBuilder::view).
  // nullptr for every other op.
  ViewFn view = nullptr;
  // Whether such an op also works as a *store transform*: applied to a value its group computed, written at
  // the coordinate it moves it to (a conv's output stored transposed). Every element of the input has a
  // place in the output: layout_convert, transpose, reshape; not slice, which drops some. Only these get
  // the layout pass's treatment of views: no conversion of their input, and for a transpose the output
  // layout that makes it the input's bytes when one does (NHWC [N, C, H, W] permuted by [0, 2, 3, 1] is
  // row-major [N, H, W, C]).
  bool store_view = false;
  // The kind of group this op anchors (conv, matmul, norm, pool; none: the group's kind follows from the
  // fusion kind alone). Which kernel family then runs the group is codegen's choice (KernelFamily).
  std::optional<GroupKind> anchors{};
  // A per-channel reduction (above): it joins a conv group as its trailing reduction, and anchors a pool
  // group alone.
  std::optional<ChannelReduction> channel_reduction{};
  // A sum over the axes its `axes` attribute names (all when empty), as a channel reduction over every image
  // (per_image false) of a 4-D view of its input: [dims before the kept ones, the kept ones, the dims after,
  // 1] (reduce_sum, reduce_mean; the pool family runs it when the kept dims are adjacent). Never a trailing
  // reduction of a conv group (its input need not be a conv's output).
  std::optional<ChannelReduction> axis_reduction{};
  // The op's vector-Jacobian rule (VjpCtx above; the rules are in src/ops/vjp_rules.cpp): kiln::backward
  // fails naming the node for an op on the loss's path without one.
  VjpFn vjp = nullptr;

  int input_index(std::string_view port) const;  // -1 if the op has no such port
  int output_index(std::string_view port) const;
  const AttrSpec* attr(std::string_view name) const;
};

// The whole table, in KILN_OPS order.
std::span<const OpDef> op_registry();
const OpDef& op_def(OpId id);
const OpDef* find_op(std::string_view name);

// Checks and normalizes a node's attributes against the schema: unknown names (listing the valid
// ones), wrong types, wrong list lengths, invalid choices; fills defaults; coerces ints to floats.
// Problems are appended to `errors` with field "attrs/<name>".
Attrs normalize_attrs(const OpDef& def, const Attrs& given, std::vector<Diagnostic>& errors, int32_t node);

// Reads the values of a unary op's parameters (NaN when an optional parameter is absent).
std::vector<double> unary_param_values(const OpDef& def, const Attrs& attrs);

// Rows of each family, defined next to their shape rules and reference code (ops_*.cpp).
std::vector<OpDef> conv_matmul_rows();
std::vector<OpDef> conv_grad_rows();  // conv2d_dgrad, conv2d_wgrad (src/ops/ops_conv_grad.cpp)
std::vector<OpDef> norm_rows();
std::vector<OpDef> pointwise_rows();
std::vector<OpDef> pool_rows();
// Which dims of a rank-`rank` input a reduce_sum / reduce_mean node reduces (its `axes`, negatives from the
// end; every dim when empty), for a node whose shape rule passed: the reference, the kernels, the gradient.
std::vector<bool> reduced_dims(const Node& n, int rank);
// A window pool's (or its gradient's) window from its normalized attributes: kernel, stride (the kernel when
// absent), padding as top, left, bottom, right.
struct PoolWindow {
  int64_t kh, kw, sh, sw, pt, pl, pb, pr;
};
PoolWindow pool_window(const Attrs& a);
// What a slice node (attributes `a`, of an input of shape `s`) takes along each dim: Python's index rules.
struct SliceRange {
  int64_t start, step, size;
};
std::vector<SliceRange> slice_ranges(const Shape& s, const Attrs& a);
std::vector<OpDef> gradient_rows();  // the activations' backward ops (src/ops/ops_grad.cpp)
// A binary pointwise op's row (ports a and b, either may be a number): ops_pointwise.cpp.
OpDef binary_row(OpId id, BinaryFn fn, std::string_view device_fn, std::string_view summary,
                 ValueDomain a_domain = ValueDomain::any, ValueDomain b_domain = ValueDomain::any);
inline OpDef with_vjp(OpDef d, VjpFn rule) {
  d.vjp = rule;
  return d;
}
std::vector<OpDef> data_movement_rows();

// Shared helpers of the shape rules.
// NumPy broadcasting of two shapes; nullopt when they are incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
// Output layout of an op whose output has the rank of input `x`: x's layout; else the rank's default.
Layout propagate_layout(const TensorInfo& x, int out_rank);
Layout default_layout_for_rank(int rank);
// Whether dim `dim` ("H" or "W") of a window op's input padded by `lo` and `hi`, each at most kMaxKernelInt,
// spans at most kMaxKernelInt, as the kernels' int coordinates need; else records why (against 'padding').
bool expect_padded_extent(InferCtx& c, std::string_view dim, int64_t in, int64_t lo, int64_t hi);
// Normalizes an axis in [-rank, rank) to [0, rank); nullopt when out of range.
std::optional<int> normalize_axis(int64_t axis, int rank);
// Whether node `n`'s op has a per-channel vector port (PortSpec::channel_vector: bias_add, batch_norm).
bool has_channel_vector(const Node& n);
// The dim of its input x (of `rank` dims) along which those ports run: the node's `axis` attribute
// (bias_add's), else 1 (batch_norm's channels); nullopt for an axis outside the rank. The one statement
// of that rule for fusion and codegen.
std::optional<int> channel_vector_axis(const Node& n, int rank);

}  // namespace kiln
