// The graph: tensors, nodes, and the builder methods that make them.
//
// Builder methods never fail on the spot: each returns a Tensor handle and records any problem on the
// node it added; verify() reports every recorded problem, naming node, port or attribute, with expected vs
// actual. Shapes are inferred as nodes are added, so g.shape(t) works while building.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>  // not used here any more; kept for files that rely on it
#include <utility>
#include <variant>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/dim_expr.h"
#include "kiln/ops.h"
#include "kiln/small_vector.h"
#include "kiln/status.h"
#include "kiln/types.h"

namespace kiln {

struct HostTensor;  // kiln/host_tensor.h

std::string attr_value_to_string(const AttrValue& v);  // "[1, 1]", "0.5", "true", "\"nearest\""

// A handle to a tensor of one Graph. Default-constructed handles are invalid.
struct Tensor {
  int32_t id = -1;
  bool valid() const { return id >= 0; }
  bool operator==(const Tensor&) const = default;
};

enum class TensorKind : uint8_t {
  input,         // bound by the caller for every run
  parameter,     // weights: bound by the caller, expected to change rarely
  intermediate,  // produced by a node
};
std::string_view tensor_kind_name(TensorKind k);
std::optional<TensorKind> parse_tensor_kind(std::string_view name);

struct TensorInfo {
  std::string name;
  Shape shape;  // logical dims; empty until inferred
  DType dtype = DType::f32;
  Layout layout = Layout::row_major;
  TensorKind kind = TensorKind::intermediate;
  int32_t producer = -1;  // node index, -1 for inputs and parameters
  bool inferred = false;  // shape/dtype are known (always true for inputs and parameters)
};

// A problem with one part of a graph. `node` is the node index (-1 for graph-level problems); `field` is
// the part of the node it concerns, as a path ("inputs/w", "attrs/stride", "outputs/y", "" for the node).
struct Diagnostic {
  int32_t node = -1;
  std::string field;
  std::string message;
};

// What a node reads and writes, held inside the node (kiln/small_vector.h says why): the tensors of one
// input port (one for most ports, none for an absent optional port, several for a list port such as
// concat's `xs`), the ports of a node, and its outputs.
using PortTensors = SmallVector<Tensor, 1>;
using NodeInputs = SmallVector<PortTensors, 4>;
using NodeOutputs = SmallVector<Tensor, 1>;

struct Node {
  std::string name;
  std::optional<OpId> op;                // nullopt only for a node whose op name was unknown (it is reported)
  std::string op_text;                   // the op name as given
  NodeInputs inputs;                     // per input port of the op's registry row, in row order
  NodeOutputs outputs;                   // per output port, in row order
  Attrs attrs;                           // normalized: defaults filled in, types coerced to the schema
  std::vector<Diagnostic> build_errors;  // recorded when the node was added
  std::vector<Diagnostic> infer_errors;  // recorded by the last shape inference
};

// Inputs of a node by port name, as a user writes them.
using PortInputs = std::vector<std::pair<std::string, std::vector<Tensor>>>;

class Graph;
// What planning or running a graph with unbound symbols says: its dims and how to bind them.
Status unbound_dims_error(const Graph& g);

// ---- options of the builder methods (designated initializers: {.stride = {2, 2}}) -------------------
struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};  // [ph, pw] or [top, left, bottom, right]
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
};
// Batch norm in training mode (PyTorch's BatchNorm2d in train()): what Graph::batch_norm_training gives.
struct BatchNormTraining {
  Tensor y;                          // (x − mean) / √(var + ε) · scale + shift, with the batch's statistics
  Tensor mean, var;                  // the batch's per-channel mean and biased variance [C], f32
  Tensor running_mean, running_var;  // (1 − momentum) · running + momentum · batch's (the variance unbiased)
};
struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};
struct NormOptions {
  Tensor scale{};  // optional (invalid handle = absent)
  Tensor shift{};  // optional
  double epsilon = 1e-5;
  int64_t normalized_ndim = 1;  // layer_norm, rms_norm: how many trailing dims are normalized
};
struct Pool2dOptions {
  std::vector<int64_t> kernel{2, 2};
  std::vector<int64_t> stride{};       // empty: same as kernel
  std::vector<int64_t> padding{0, 0};  // [ph, pw] or [top, left, bottom, right]
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
struct Upsample2dOptions {
  std::vector<double> scale{};   // [sh, sw]; give either scale or size
  std::vector<int64_t> size{};   // [H_out, W_out]
  std::string mode = "nearest";  // "nearest" or "bilinear"
  bool align_corners = false;    // bilinear only
};

class Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}
  // A copy has room for twice its tensors and nodes: the usual reason to copy a graph is to plan it, and
  // the planner adds nodes (a bias_add per biased conv or matmul, a weight conversion per conv). Reserved
  // room costs no memory traffic until it is used, while regrowing a 100k-node graph's arrays touches every
  // node again.
  Graph(const Graph& other);
  Graph& operator=(const Graph& other);
  Graph(Graph&&) noexcept = default;
  Graph& operator=(Graph&&) noexcept = default;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // ---- declaring tensors ----
  // Layout nullopt picks the default: NCHW for 4-D tensors, KCRS for 4-D tensors read as conv weights
  // (resolved when the graph is verified), row_major otherwise.
  Tensor input(std::string name, Shape shape, DType dtype = DType::f32, std::optional<Layout> layout = {});
  Tensor parameter(std::string name, Shape shape, DType dtype = DType::f32, std::optional<Layout> layout = {});
  // Marks a tensor as a graph output; `rename` renames the tensor, `layout` sets its memory order.
  void output(Tensor t, std::string rename = {}, std::optional<Layout> layout = {});
  // A prefix for the names the builder makes up for nodes added without one ("grad/fc1/" gives
  // "grad/fc1/matmul_12"); empty by default. kiln::backward names each op's backward nodes after it.
  void set_name_scope(std::string prefix) { name_scope_ = std::move(prefix); }

  // ---- dims that vary (docs/graph-format.md, "Symbolic dims") ----
  // Declares a symbol that input dims may use, with the values it may take (1 <= min <= max), and returns
  // it: `auto n = g.dim("N", 1, 64); g.symbolic_input("x", {n, 3, 224, 224});`.
  DimExpr dim(std::string name, int64_t min, int64_t max);
  // An input whose dims are expressions over declared symbols (plain numbers are fixed dims). Not an
  // overload of input(): `input("x", {1, 3, 224, 224})` would be ambiguous.
  Tensor symbolic_input(std::string name, const std::vector<DimExpr>& shape, DType dtype = DType::f32,
                        std::optional<Layout> layout = {});
  // Whether the graph declares symbols. Such a graph is verified over its symbols' ranges (at every
  // combination of each range's ends and its middle) and cannot be planned or run until bind() gives each
  // symbol a value; until then its tensors' shapes are those at the bottom of every range.
  bool is_symbolic() const { return symbolic_ != nullptr; }
  const DimRanges& dim_ranges() const;
  // A symbolic input's dims as declared; nullopt for any other tensor.
  std::optional<std::vector<DimExpr>> symbolic_shape(Tensor t) const;
  // The same graph with every symbol fixed, verified. Fails naming the symbol when a value is missing,
  // unknown or outside its range, and naming the node when the graph does not hold at these values.
  Result<Graph> bind(const DimBindings& values) const;
  // Whether this graph is a binding of a symbolic graph (made by bind()): the planner then gives its GEMM
  // kernels the batch-generic tiles that every binding shares, unless the binding's own are more than 10 %
  // faster by the tile model (docs/architecture.md, "Batch-generic kernels").
  bool is_binding() const { return binding_; }
  // What a copy of a binding rebuilt through the builder at another batch says it still is (kiln profile's
  // rebatch_graph).
  void mark_binding(bool binding) { binding_ = binding; }
  // The values of the symbols that the given input shapes imply (by tensor name; inputs not given are not
  // consulted), for bind(). Fails naming the tensor, the dim and the symbol when two shapes disagree, when
  // a shape contradicts a fixed dim or an expression, or when a symbol is left without a value.
  Result<DimBindings> dims_from_shapes(const std::map<std::string, Shape, std::less<>>& shapes) const;
  // The shape tensor `t` has with the symbols at `values` (the graph need not be complete: importers ask
  // while they build). Fails naming the node whose shape rule fails there.
  Result<Shape> shape_at(Tensor t, const DimBindings& values) const;

  // ---- values that come with the graph (an ONNX model's initializers) ----
  // A parameter's values: `kiln run` and random_inputs() use them instead of random values, load_inputs()
  // when the directory has no file for it. Held by shared pointer: copying a graph (the planner does) never
  // copies weights. The value must have the parameter's shape and dtype; it is not part of operator==.
  Status set_value(Tensor t, std::shared_ptr<const HostTensor> value);
  const HostTensor* value(std::string_view tensor_name) const;  // nullptr when the tensor has none
  const std::map<std::string, std::shared_ptr<const HostTensor>, std::less<>>& values() const { return values_; }

  // ---- the generic node builder (every typed method below calls it; the JSON loader too) ----
  // Unknown ops, ports or attributes are recorded on the node and reported by verify().
  // `output_names` gives names to output tensors by port; unnamed outputs are named after the node.
  std::vector<Tensor> add_node(std::string_view op, const PortInputs& inputs, Attrs attrs = {}, std::string name = {},
                               const std::vector<std::pair<std::string, std::string>>& output_names = {});

  // For passes: appends a node of a verified graph (its name, op, op text and attributes taken from
  // `proto`), reading `inputs` (per port, tensors of this graph) and writing outputs named `output_names`
  // with the types of `output_types`. No attribute normalization or shape inference: the node was checked
  // where it came from. verify() re-checks it. Arguments are taken by value so that a pass rebuilding a
  // big graph can move them in instead of copying.
  std::vector<Tensor> append_verified_node(Node proto, NodeInputs inputs, std::vector<TensorInfo> output_types,
                                           std::vector<std::string> output_names);

  // ---- anchors ----
  Tensor conv2d(Tensor x, Tensor w, const Conv2dOptions& o = {}, std::string name = {});
  Tensor conv2d(Tensor x, Tensor w, Tensor bias, const Conv2dOptions& o = {}, std::string name = {});
  // conv2d's gradients (cuDNN's dgrad and wgrad) with the forward conv's options: dx [N, C, H, W] for an input of
  // `input_size` [H, W] from dy and w; dw [K, C/groups, R, S] (KCRS) for a filter of `filter_size` [R, S] from x and
  // dy.
  Tensor conv2d_dgrad(Tensor dy, Tensor w, std::vector<int64_t> input_size, const Conv2dOptions& o = {},
                      std::string name = {});
  Tensor conv2d_wgrad(Tensor x, Tensor dy, std::vector<int64_t> filter_size, const Conv2dOptions& o = {},
                      std::string name = {});
  Tensor matmul(Tensor a, Tensor b, const MatmulOptions& o = {}, std::string name = {});
  Tensor matmul(Tensor a, Tensor b, Tensor bias, const MatmulOptions& o = {}, std::string name = {});

  // ---- per-channel and normalization ----
  Tensor bias_add(Tensor x, Tensor bias, int64_t axis = 1, std::string name = {});
  Tensor batch_norm(Tensor x, Tensor scale, Tensor shift, Tensor mean, Tensor var, double epsilon = 1e-5,
                    std::string name = {});
  // Batch norm of [N, C, H, W] with the batch's statistics, made of ops kiln fuses and differentiates:
  // channel_stats (per-channel Σx and Σx², cuDNN's genstats, a conv's reduction epilogue when a conv computes
  // x), the mean and variance from them ([C] ops: cuDNN's bn_finalize), batch_norm with those. Its gradient
  // follows from theirs (kiln::backward).
  BatchNormTraining batch_norm_training(Tensor x, Tensor scale, Tensor shift, Tensor running_mean, Tensor running_var,
                                        double momentum = 0.1, double epsilon = 1e-5, std::string name = {});
  Tensor layer_norm(Tensor x, const NormOptions& o = {}, std::string name = {});
  Tensor group_norm(Tensor x, int64_t groups, const NormOptions& o = {}, std::string name = {});
  Tensor instance_norm(Tensor x, const NormOptions& o = {}, std::string name = {});
  Tensor rms_norm(Tensor x, const NormOptions& o = {}, std::string name = {});
  Tensor softmax(Tensor x, int64_t axis = -1, std::string name = {});

  // ---- unary pointwise ----
  Tensor unary(std::string_view op, Tensor x, Attrs attrs = {}, std::string name = {});
  Tensor relu(Tensor x, std::string name = {});
  Tensor relu6(Tensor x, std::string name = {});
  Tensor clamp(Tensor x, std::optional<double> min, std::optional<double> max, std::string name = {});
  Tensor leaky_relu(Tensor x, double alpha = 0.01, std::string name = {});
  Tensor elu(Tensor x, double alpha = 1.0, std::string name = {});
  Tensor sigmoid(Tensor x, std::string name = {});
  Tensor tanh(Tensor x, std::string name = {});
  Tensor gelu(Tensor x, std::string name = {});
  Tensor gelu_tanh(Tensor x, std::string name = {});
  Tensor silu(Tensor x, std::string name = {});
  Tensor hardswish(Tensor x, std::string name = {});
  Tensor hardsigmoid(Tensor x, std::string name = {});
  Tensor softplus(Tensor x, double beta = 1.0, double threshold = 20.0, std::string name = {});
  Tensor mish(Tensor x, std::string name = {});
  Tensor exp(Tensor x, std::string name = {});
  Tensor log(Tensor x, std::string name = {});
  Tensor sqrt(Tensor x, std::string name = {});
  Tensor rsqrt(Tensor x, std::string name = {});
  Tensor abs(Tensor x, std::string name = {});
  Tensor neg(Tensor x, std::string name = {});
  Tensor reciprocal(Tensor x, std::string name = {});
  Tensor identity(Tensor x, std::string name = {});

  // ---- binary pointwise, NumPy broadcasting; either side may be a scalar constant ----
  Tensor binary(std::string_view op, Tensor a, Tensor b, std::string name = {});
  Tensor binary(std::string_view op, Tensor a, double b, std::string name = {});
  Tensor binary(std::string_view op, double a, Tensor b, std::string name = {});
#define KILN_BINARY_BUILDER(op)                                                                       \
  Tensor op(Tensor a, Tensor b, std::string name = {}) { return binary(#op, a, b, std::move(name)); } \
  Tensor op(Tensor a, double b, std::string name = {}) { return binary(#op, a, b, std::move(name)); } \
  Tensor op(double a, Tensor b, std::string name = {}) { return binary(#op, a, b, std::move(name)); }
  KILN_BINARY_BUILDER(add)
  KILN_BINARY_BUILDER(sub)
  KILN_BINARY_BUILDER(mul)
  KILN_BINARY_BUILDER(div)
  KILN_BINARY_BUILDER(maximum)
  KILN_BINARY_BUILDER(minimum)
  KILN_BINARY_BUILDER(pow)
#undef KILN_BINARY_BUILDER

  // ---- pooling ----
  Tensor max_pool2d(Tensor x, const Pool2dOptions& o = {}, std::string name = {});
  Tensor avg_pool2d(Tensor x, const Pool2dOptions& o = {}, std::string name = {});
  Tensor global_avg_pool(Tensor x, std::string name = {});
  Tensor global_max_pool(Tensor x, std::string name = {});
  // Sum or mean over `axes` (negative ones count from the end; every axis when empty), dropping them, or
  // keeping them as 1s with `keepdims`. Every axis without keepdims gives the scalar (rank 0).
  Tensor reduce_sum(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false, std::string name = {});
  Tensor reduce_mean(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false, std::string name = {});

  // ---- data movement ----
  Tensor layout_convert(Tensor x, Layout to, std::string name = {});
  Tensor reshape(Tensor x, std::vector<int64_t> shape, std::string name = {});
  Tensor transpose(Tensor x, std::vector<int64_t> perm, std::string name = {});
  Tensor concat(const std::vector<Tensor>& xs, int64_t axis = 1, std::string name = {});
  Tensor slice(Tensor x, std::vector<int64_t> starts, std::vector<int64_t> ends, std::vector<int64_t> steps = {},
               std::string name = {});
  Tensor upsample2d(Tensor x, const Upsample2dOptions& o, std::string name = {});
  Tensor cast(Tensor x, DType to, std::string name = {});
  // x broadcast to `shape` (NumPy rules: x's trailing dims equal to shape's or 1).
  Tensor expand(Tensor x, std::vector<int64_t> shape, std::string name = {});

  // ---- checking ----
  // Re-infers every node in order and reports every problem: one line per problem, each naming the
  // node and port or attribute (`node 'conv1' (conv2d) input 'w': expected ..., got ...`). A graph that
  // passed and has not changed since is not re-inferred.
  Status verify();
  // The same problems as structured diagnostics (the JSON loader turns them into JSON paths).
  std::vector<Diagnostic> check();
  static std::string format_diagnostic(const Graph& g, const Diagnostic& d);

  // Room for this many tensors and nodes without regrowing (passes rebuilding big graphs use it).
  void reserve(size_t tensors, size_t nodes);

  // ---- reading ----
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // Node `i` (an index into nodes(), as TensorInfo::producer and Group::nodes hold them); checked. Inline:
  // the passes read nodes this way in their loops over 100k-node graphs.
  const Node& node(int32_t i) const {
    KILN_CHECK(i >= 0 && static_cast<size_t>(i) < nodes_.size(), "invalid node index");
    return nodes_[static_cast<size_t>(i)];
  }
  const std::vector<Tensor>& outputs() const { return outputs_; }
  const TensorInfo& tensor(Tensor t) const;
  const Shape& shape(Tensor t) const { return tensor(t).shape; }
  DType dtype(Tensor t) const { return tensor(t).dtype; }
  std::optional<Tensor> find_tensor(std::string_view name) const;
  std::optional<int32_t> find_node(std::string_view name) const;
  // Graph inputs and parameters in declaration order.
  std::vector<Tensor> bound_tensors() const;

  // Structural equality: same name, tensors, nodes, attributes and outputs.
  bool operator==(const Graph& other) const;

 private:
  // The passes' Rewriter copies bound tensors with declare_bound() and takes over attributes of the nodes
  // of a graph it replaces (moving them, instead of allocating copies of every node of a big graph).
  friend class Rewriter;
  friend class GraphEditor;  // edits a graph in place (layout assignment)
  friend struct Uses;        // reads the operand log
  friend struct GraphCodec;  // the binary form a plan cache entry holds (src/ir/graph_codec.h)
  // A copy of an input or parameter of a verified graph: no checks (it passed them there), layout given.
  Tensor declare_bound(const TensorInfo& info);
  Tensor declare(std::string name, Shape shape, DType dtype, std::optional<Layout> layout, TensorKind kind);
  void infer(int32_t node);
  std::string unique_node_name(std::string_view op);
  std::string name_scope_;  // name_scope

  // (The copy constructor in graph.cpp lists every member: add new ones there too.)
  std::string name_;
  std::vector<TensorInfo> tensors_;
  std::vector<Node> nodes_;
  std::vector<Tensor> outputs_;
  std::vector<Diagnostic> graph_errors_;  // recorded by declare/output
  bool binding_ = false;                  // made by bind() (is_binding)
  bool verified_ = false;                 // check() found nothing and nothing changed since: check() need not re-infer
  std::vector<bool> layout_given_;        // per tensor: did the user give its layout?
  // Every node's op and operands in flat arrays (node i's inputs, ports flattened in order, are
  // ins[in_start[i], in_start[i+1])), appended as nodes are added; the passes' GraphEditor writes them anew.
  // The passes' operand index (Uses) reads them in order instead of sweeping each node's own vectors, which
  // at 100k nodes are cache misses all over the heap. check() verifies they match the nodes.
  struct OperandLog {
    std::vector<std::optional<OpId>> ops;
    std::vector<int32_t> in_start{0}, out_start{0};
    std::vector<Tensor> ins, outs;
  };
  OperandLog log_;
  void log_node(const Node& n);
  bool log_matches_nodes() const;
  // Name lookups: graphs reach 100k nodes and passes copy and rebuild them, so the index holds no strings.
  // It is open addressing over (hash, index) pairs in one flat array; a candidate's name is read from the
  // tensor or node it points at. Copying a graph copies one array, inserting allocates nothing, and a
  // lookup touches one cache line of the array (a node-based std::unordered_map<std::string, ...> cost a
  // third of planning time at 100k nodes, mostly cache misses and malloc).
  class NameIndex {
   public:
    static uint32_t hash(std::string_view name);
    // The position in `items` (tensors_ or nodes_) of the item named `name`, or -1.
    template <class T>
    int32_t find(std::string_view name, const std::vector<T>& items) const {
      const size_t slot = find_slot(name, items);
      return slot == kNone ? -1 : slots_[slot].index;
    }
    // Indexes position `index` under a name with hash `h` (the caller checked that the name is free).
    void insert(uint32_t h, int32_t index);
    template <class T>
    void erase(std::string_view name, const std::vector<T>& items) {
      if (size_t slot = find_slot(name, items); slot != kNone) slots_[slot].index = kErased;
    }
    void reserve(size_t n);
    // Renumbers every indexed position p as perm[p] (nodes reordered in place).
    void renumber(const std::vector<int32_t>& perm);

   private:
    static constexpr int32_t kEmpty = -1, kErased = -2;
    static constexpr size_t kNone = ~size_t{0};
    struct Slot {
      uint32_t hash = 0;
      int32_t index = kEmpty;
    };
    template <class T>
    size_t find_slot(std::string_view name, const std::vector<T>& items) const {
      if (slots_.empty()) return kNone;
      const uint32_t h = hash(name);
      const size_t mask = slots_.size() - 1;
      for (size_t i = h & mask;; i = (i + 1) & mask) {
        const Slot& s = slots_[i];
        if (s.index == kEmpty) return kNone;
        if (s.index >= 0 && s.hash == h && items[static_cast<size_t>(s.index)].name == name) return i;
      }
    }
    void rehash(size_t slots);
    std::vector<Slot> slots_;  // a power of two in size, at most half used (erased slots count as used)
    size_t used_ = 0;
  };
  NameIndex tensor_by_name_;
  NameIndex node_by_name_;
  std::map<std::string, std::shared_ptr<const HostTensor>, std::less<>> values_;  // by parameter name
  // The symbols and the symbolic inputs' dims (null for a graph without symbols: nothing to copy or check).
  struct SymbolicDims {
    DimRanges ranges;
    std::map<int32_t, std::vector<DimExpr>> inputs;  // by tensor id
  };
  std::shared_ptr<const SymbolicDims> symbolic_;
  SymbolicDims& symbolic_for_edit();  // copy on write
  std::vector<Diagnostic> check_over_ranges();
  // ds[from...] get "with N = 1 (the bottom of the range): " before their messages.
  void say_bottom_values(std::vector<Diagnostic>& ds, size_t from) const;
};

}  // namespace kiln
