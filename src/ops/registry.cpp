// The registry table, attribute normalization, and what shape rules and reference code see.
#include "ops/registry.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kiln {

namespace {

std::vector<OpDef> build_table() {
  std::vector<OpDef> rows;
  for (auto family :
       {conv_matmul_rows, conv_grad_rows, norm_rows, pointwise_rows, pool_rows, data_movement_rows, gradient_rows}) {
    for (OpDef& row : family()) rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const OpDef& a, const OpDef& b) { return a.id < b.id; });
  KILN_CHECK(static_cast<int>(rows.size()) == kOpCount,
             fmt::format("registry has {} rows for {} ops", rows.size(), kOpCount));
  for (int i = 0; i < kOpCount; ++i) {
    const OpDef& r = rows[static_cast<size_t>(i)];
    KILN_CHECK(static_cast<int>(r.id) == i, fmt::format("op {} has no row or two rows", op_name(static_cast<OpId>(i))));
    KILN_CHECK(r.name == op_name(r.id), fmt::format("row '{}' names op '{}'", r.name, op_name(r.id)));
    KILN_CHECK(r.kind == op_fusion_kind(r.id), fmt::format("row '{}' has the wrong fusion kind", r.name));
    KILN_CHECK(r.infer != nullptr && r.ref != nullptr, fmt::format("row '{}' lacks a shape rule or reference", r.name));
    if (const auto& red = r.channel_reduction) {  // what the reduction kernels assume of one (ChannelReduction)
      KILN_CHECK(r.anchors == GroupKind::pool && r.inputs.size() == 1 && r.outputs.size() == 1 && !red->terms.empty() &&
                     red->terms.size() <= 4 && (!red->per_image || red->terms.size() == 1),
                 fmt::format("row '{}': a channel reduction takes one input, anchors a pool group and has 1 to 4 "
                             "terms (one per image)",
                             r.name));
    }
  }
  return rows;
}

std::string list_names(const std::vector<std::string_view>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += fmt::format("{}'{}'", i ? ", " : "", names[i]);
  return s;
}

}  // namespace

std::string describe_attr_spec(const AttrSpec& s) {
  std::string sizes;
  if (!s.sizes.empty()) {
    std::vector<std::string> parts;
    for (int n : s.sizes) parts.push_back(std::to_string(n));
    sizes = fmt::format("{} ", fmt::join(parts, " or "));
  }
  switch (s.type) {
    case AttrType::int_: return "an integer";
    case AttrType::float_: return "a number";
    case AttrType::bool_: return "true or false";
    case AttrType::string:
      if (!s.choices.empty()) return fmt::format("one of {}", list_names(s.choices));
      return "a string";
    case AttrType::ints: return fmt::format("a list of {}integers", sizes);
    case AttrType::floats: return fmt::format("a list of {}numbers", sizes);
  }
  return "?";
}

std::span<const OpDef> op_registry() {
  static const std::vector<OpDef> table = build_table();
  return table;
}

const OpDef& op_def(OpId id) { return op_registry()[static_cast<size_t>(id)]; }

const OpDef* find_op(std::string_view name) {
  auto id = parse_op(name);
  return id ? &op_def(*id) : nullptr;
}

std::string_view op_name(OpId op) {
  static constexpr std::string_view names[] = {
#define KILN_OP_NAME(name, kind) #name,
      KILN_OPS(KILN_OP_NAME)
#undef KILN_OP_NAME
  };
  return names[static_cast<size_t>(op)];
}

std::optional<OpId> parse_op(std::string_view name) {
  for (int i = 0; i < kOpCount; ++i) {
    if (op_name(static_cast<OpId>(i)) == name) return static_cast<OpId>(i);
  }
  return std::nullopt;
}

FusionKind op_fusion_kind(OpId op) {
  static constexpr FusionKind kinds[] = {
#define KILN_OP_KIND(name, kind) FusionKind::kind,
      KILN_OPS(KILN_OP_KIND)
#undef KILN_OP_KIND
  };
  return kinds[static_cast<size_t>(op)];
}

std::string_view fusion_kind_name(FusionKind k) {
  switch (k) {
    case FusionKind::pointwise: return "pointwise";
    case FusionKind::anchor: return "anchor";
    case FusionKind::reduction: return "reduction";
    case FusionKind::window: return "window";
    case FusionKind::layout: return "layout";
    case FusionKind::opaque: return "opaque";
  }
  return "?";
}

std::string_view attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::int_: return "int";
    case AttrType::float_: return "float";
    case AttrType::bool_: return "bool";
    case AttrType::string: return "string";
    case AttrType::ints: return "int list";
    case AttrType::floats: return "float list";
  }
  return "?";
}

int OpDef::input_index(std::string_view port) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].name == port) return static_cast<int>(i);
  }
  return -1;
}

int OpDef::output_index(std::string_view port) const {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].name == port) return static_cast<int>(i);
  }
  return -1;
}

const AttrSpec* OpDef::attr(std::string_view name) const {
  for (const AttrSpec& a : attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

// ---- attribute normalization --------------------------------------------------------------------------
namespace {

// Whether `v` has the type (and list length, string choice) of `spec`, after the coercions the schema
// allows: an int for a float, one number for a list of them, ints for floats. `v` is coerced in place.
bool coerce_attr(const AttrSpec& spec, AttrValue& v) {
  auto size_ok = [&](size_t n) {
    return spec.sizes.empty() ||
           std::find(spec.sizes.begin(), spec.sizes.end(), static_cast<int>(n)) != spec.sizes.end();
  };
  switch (spec.type) {
    case AttrType::int_: return std::holds_alternative<int64_t>(v);
    case AttrType::float_:
      if (auto* i = std::get_if<int64_t>(&v)) v = static_cast<double>(*i);
      return std::holds_alternative<double>(v) && std::isfinite(std::get<double>(v));
    case AttrType::bool_: return std::holds_alternative<bool>(v);
    case AttrType::string:
      return std::holds_alternative<std::string>(v) &&
             (spec.choices.empty() ||
              std::find(spec.choices.begin(), spec.choices.end(), std::get<std::string>(v)) != spec.choices.end());
    case AttrType::ints:
      if (auto* i = std::get_if<int64_t>(&v)) {
        v = std::vector<int64_t>(static_cast<size_t>(spec.sizes.empty() ? 1 : spec.sizes[0]), *i);
      }
      return std::holds_alternative<std::vector<int64_t>>(v) && size_ok(std::get<std::vector<int64_t>>(v).size());
    case AttrType::floats: {
      if (auto* i = std::get_if<int64_t>(&v)) v = static_cast<double>(*i);
      if (auto* d = std::get_if<double>(&v)) {
        v = std::vector<double>(static_cast<size_t>(spec.sizes.empty() ? 1 : spec.sizes[0]), *d);
      }
      if (auto* is = std::get_if<std::vector<int64_t>>(&v)) v = std::vector<double>(is->begin(), is->end());
      auto* fs = std::get_if<std::vector<double>>(&v);
      return fs && std::all_of(fs->begin(), fs->end(), [](double d) { return std::isfinite(d); }) &&
             size_ok(fs->size());
    }
  }
  return false;
}

}  // namespace

Attrs normalize_attrs(const OpDef& def, const Attrs& given, std::vector<Diagnostic>& errors, int32_t node) {
  Attrs out;
  auto fail = [&](std::string_view name, std::string msg) {
    errors.push_back({node, fmt::format("attrs/{}", name), std::move(msg)});
  };
  for (const auto& item : given) {
    // (Named references rather than a structured binding, which clang 14 lets no lambda capture.)
    const std::string& name = item.first;
    const AttrValue& value = item.second;
    const AttrSpec* spec = def.attr(name);
    if (!spec) {
      // A port that takes a scalar attribute is listed among the attributes too.
      std::vector<std::string_view> valid;
      for (const AttrSpec& a : def.attrs) valid.push_back(a.name);
      fail(name, valid.empty() ? fmt::format("unknown attribute '{}': {} takes no attributes", name, def.name)
                               : fmt::format("unknown attribute '{}': {} takes {}", name, def.name, list_names(valid)));
      continue;
    }
    AttrValue v = value;
    if (!coerce_attr(*spec, v)) {
      fail(name, fmt::format("attribute '{}': expected {}, got {}", name, describe_attr_spec(*spec),
                             attr_value_to_string(value)));
      continue;
    }
    if (spec->f32 && std::fabs(std::get<double>(v)) > std::numeric_limits<float>::max()) {
      fail(name, fmt::format("attribute '{}': expected a finite value within the f32 range (|x| <= {}), got {}", name,
                             std::numeric_limits<float>::max(), attr_value_to_string(v)));
      continue;
    }
    out[std::string(name)] = std::move(v);
  }
  for (const AttrSpec& spec : def.attrs) {
    if (out.count(std::string(spec.name)) || given.count(std::string(spec.name))) continue;
    if (spec.default_value) {
      out[std::string(spec.name)] = *spec.default_value;
    } else if (!spec.optional) {
      errors.push_back({node, fmt::format("attrs/{}", spec.name),
                        fmt::format("missing required attribute '{}' ({})", spec.name, describe_attr_spec(spec))});
    }
  }
  return out;
}

std::vector<double> unary_param_values(const OpDef& def, const Attrs& attrs) {
  std::vector<double> p;
  for (std::string_view name : def.unary_params) {
    auto it = attrs.find(name);
    p.push_back(it == attrs.end() ? std::numeric_limits<double>::quiet_NaN() : std::get<double>(it->second));
  }
  return p;
}

// ---- InferCtx -----------------------------------------------------------------------------------------
bool InferCtx::has(std::string_view port) const { return count(port) > 0; }

int InferCtx::count(std::string_view port) const {
  int i = def_.input_index(port);
  KILN_CHECK(i >= 0, fmt::format("{} has no port '{}'", def_.name, port));
  return static_cast<int>(node_.inputs[static_cast<size_t>(i)].size());
}

const TensorInfo& InferCtx::in(std::string_view port, int k) const {
  int i = def_.input_index(port);
  KILN_CHECK(i >= 0 && k < count(port), fmt::format("{} port '{}' #{} absent", def_.name, port, k));
  return tensors_[static_cast<size_t>(node_.inputs[static_cast<size_t>(i)][static_cast<size_t>(k)].id)];
}

#define KILN_ATTR_GETTER(method, type)                                                             \
  type InferCtx::method(std::string_view name) const {                                             \
    auto it = node_.attrs.find(name);                                                              \
    KILN_CHECK(it != node_.attrs.end(), fmt::format("{} attribute '{}' absent", def_.name, name)); \
    return std::get<std::remove_cvref_t<type>>(it->second);                                        \
  }                                                                                                \
  type RefCtx::method(std::string_view name) const {                                               \
    auto it = node.attrs.find(name);                                                               \
    KILN_CHECK(it != node.attrs.end(), fmt::format("attribute '{}' absent", name));                \
    return std::get<std::remove_cvref_t<type>>(it->second);                                        \
  }
KILN_ATTR_GETTER(attr_int, int64_t)
KILN_ATTR_GETTER(attr_float, double)
KILN_ATTR_GETTER(attr_bool, bool)
KILN_ATTR_GETTER(attr_str, const std::string&)
KILN_ATTR_GETTER(attr_ints, const std::vector<int64_t>&)
KILN_ATTR_GETTER(attr_floats, const std::vector<double>&)
#undef KILN_ATTR_GETTER

bool InferCtx::has_attr(std::string_view name) const { return node_.attrs.count(name) > 0; }
bool RefCtx::has_attr(std::string_view name) const { return node.attrs.count(name) > 0; }

void InferCtx::fail_input(std::string_view port, std::string message) {
  errors_.push_back({-1, fmt::format("inputs/{}", port), std::move(message)});
}
void InferCtx::fail_attr(std::string_view name, std::string message) {
  errors_.push_back({-1, fmt::format("attrs/{}", name), fmt::format("attribute '{}': {}", name, message)});
}
void InferCtx::fail(std::string message) { errors_.push_back({-1, "", std::move(message)}); }

void InferCtx::set_output(Shape shape, DType dtype, Layout layout, int port) {
  if (outputs_.size() <= static_cast<size_t>(port)) outputs_.resize(static_cast<size_t>(port) + 1);
  Status st = validate_shape(shape);
  if (!st.ok()) {
    fail(fmt::format("output '{}': {}", def_.outputs[static_cast<size_t>(port)].name, st.message()));
    return;
  }
  TensorInfo& t = outputs_[static_cast<size_t>(port)];
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.layout = layout;
  t.inferred = true;
}

bool InferCtx::expect_rank(std::string_view port, int rank, std::string_view dims_hint) {
  const TensorInfo& t = in(port);
  if (t.shape.rank() == rank) return true;
  fail_input(port, fmt::format("expected {} dims{}{}, got {}", rank, dims_hint.empty() ? "" : " ", dims_hint,
                               t.shape.to_string()));
  return false;
}

bool InferCtx::expect_min_rank(std::string_view port, int rank) {
  const TensorInfo& t = in(port);
  if (t.shape.rank() >= rank) return true;
  fail_input(port, fmt::format("expected at least {} dims, got {}", rank, t.shape.to_string()));
  return false;
}

bool InferCtx::expect_same_dtype(std::string_view port, std::string_view other_port) {
  const TensorInfo& a = in(port);
  const TensorInfo& b = in(other_port);
  if (a.dtype == b.dtype) return true;
  fail_input(port, fmt::format("expected dtype {} (the dtype of input '{}'), got {}", dtype_name(b.dtype), other_port,
                               dtype_name(a.dtype)));
  return false;
}

bool InferCtx::expect_vector(std::string_view port, int64_t length, std::string_view what) {
  const TensorInfo& t = in(port);
  if (t.shape.rank() == 1 && t.shape[0] == length) return true;
  fail_input(port, fmt::format("expected shape [{}] ({}), got {}", length, what, t.shape.to_string()));
  return false;
}

bool InferCtx::expect_kernel_ints(std::string_view name, int64_t lo) {
  const auto& values = attr_ints(name);
  if (std::all_of(values.begin(), values.end(), [&](int64_t v) { return v >= lo && v <= kMaxKernelInt; })) return true;
  fail_attr(name, fmt::format("expected {} values up to {} (the generated kernels hold them in 32-bit int), got {}",
                              lo > 0 ? "positive" : "non-negative", kMaxKernelInt, attr_value_to_string(values)));
  return false;
}

// ---- RefCtx -------------------------------------------------------------------------------------------
const HostTensor& RefCtx::in(const OpDef& def, std::string_view port, int k) const {
  int i = def.input_index(port);
  KILN_CHECK(i >= 0 && k < static_cast<int>(inputs[static_cast<size_t>(i)].size()),
             fmt::format("port '{}' absent", port));
  return *inputs[static_cast<size_t>(i)][static_cast<size_t>(k)];
}

const HostTensor* RefCtx::maybe(const OpDef& def, std::string_view port) const {
  int i = def.input_index(port);
  KILN_CHECK(i >= 0, fmt::format("no port '{}'", port));
  return inputs[static_cast<size_t>(i)].empty() ? nullptr : inputs[static_cast<size_t>(i)][0];
}

// ---- shared helpers of the shape rules ----------------------------------------------------------------
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    dims[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(dims));
}

Layout default_layout_for_rank(int rank) { return rank == 4 ? Layout::NCHW : Layout::row_major; }

Layout propagate_layout(const TensorInfo& x, int out_rank) {
  if (x.shape.rank() == out_rank) return x.layout;
  return default_layout_for_rank(out_rank);
}

bool expect_padded_extent(InferCtx& c, std::string_view dim, int64_t in, int64_t lo, int64_t hi) {
  int64_t padded = 0;
  if (checked_add(in, lo, &padded) && checked_add(padded, hi, &padded) && padded <= kMaxKernelInt) return true;
  if (lo == 0 && hi == 0) {
    c.fail_input("x", fmt::format("expected dim {} at most {} (the generated kernels index it with 32-bit int), got {}",
                                  dim, kMaxKernelInt, in));
  } else {
    c.fail_attr("padding", fmt::format("the padded input's {} ({} + {} + {} = {}) exceeds {}, the most the generated "
                                       "kernels' 32-bit int coordinates hold",
                                       dim, in, lo, hi, padded, kMaxKernelInt));
  }
  return false;
}

std::optional<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

bool has_channel_vector(const Node& n) {
  if (!n.op) return false;
  const auto& ports = op_def(*n.op).inputs;
  return std::any_of(ports.begin(), ports.end(), [](const PortSpec& p) { return p.channel_vector; });
}

std::optional<int> channel_vector_axis(const Node& n, int rank) {
  auto it = n.attrs.find("axis");
  if (it == n.attrs.end()) return 1;
  return normalize_axis(std::get<int64_t>(it->second), rank);
}

}  // namespace kiln
