// The list of kiln's ops: one place, everything else iterates over it or is checked against it.
//
// Each op has one row in the registry (src/ops/registry.cpp) holding its ports, attributes, shape rule,
// fusion kind and reference implementation; the row order must follow this list (checked at compile time).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

// X(name, fusion kind)
#define KILN_OPS(X)             \
  X(conv2d, anchor)             \
  X(matmul, anchor)             \
  X(bias_add, pointwise)        \
  X(batch_norm, pointwise)      \
  X(layer_norm, reduction)      \
  X(group_norm, reduction)      \
  X(instance_norm, reduction)   \
  X(rms_norm, reduction)        \
  X(softmax, reduction)         \
  X(relu, pointwise)            \
  X(relu6, pointwise)           \
  X(clamp, pointwise)           \
  X(leaky_relu, pointwise)      \
  X(elu, pointwise)             \
  X(sigmoid, pointwise)         \
  X(tanh, pointwise)            \
  X(gelu, pointwise)            \
  X(gelu_tanh, pointwise)       \
  X(silu, pointwise)            \
  X(hardswish, pointwise)       \
  X(hardsigmoid, pointwise)     \
  X(softplus, pointwise)        \
  X(mish, pointwise)            \
  X(softsign, pointwise)        \
  X(exp, pointwise)             \
  X(log, pointwise)             \
  X(sqrt, pointwise)            \
  X(rsqrt, pointwise)           \
  X(abs, pointwise)             \
  X(neg, pointwise)             \
  X(reciprocal, pointwise)      \
  X(identity, pointwise)        \
  X(add, pointwise)             \
  X(sub, pointwise)             \
  X(mul, pointwise)             \
  X(div, pointwise)             \
  X(maximum, pointwise)         \
  X(minimum, pointwise)         \
  X(pow, pointwise)             \
  X(max_pool2d, window)         \
  X(avg_pool2d, window)         \
  X(global_avg_pool, reduction) \
  X(global_max_pool, reduction) \
  X(channel_stats, reduction)   \
  X(reduce_sum, reduction)      \
  X(reduce_mean, reduction)     \
  X(layout_convert, layout)     \
  X(reshape, layout)            \
  X(transpose, layout)          \
  X(concat, opaque)             \
  X(slice, layout)              \
  X(upsample2d, opaque)         \
  X(cast, pointwise)            \
  X(relu_grad, pointwise)       \
  X(sigmoid_grad, pointwise)    \
  X(tanh_grad, pointwise)       \
  X(gelu_grad, pointwise)       \
  X(silu_grad, pointwise)       \
  X(expand, pointwise)          \
  X(conv2d_dgrad, anchor)       \
  X(conv2d_wgrad, anchor)       \
  X(max_pool2d_grad, opaque)    \
  X(avg_pool2d_grad, opaque)

enum class OpId : uint16_t {
#define KILN_OP_ENUM(name, kind) name,
  KILN_OPS(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};

#define KILN_OP_COUNT(name, kind) +1
inline constexpr int kOpCount = 0 KILN_OPS(KILN_OP_COUNT);
#undef KILN_OP_COUNT
static_assert(kOpCount == 63, "adding an op: add its registry row and a test case, then update this count");

// How the planner may fuse an op (after TVM's op patterns). Passes decide by this and by the op's registry
// row (a trailing reduction joins by OpDef::channel_reduction); where a fusion pattern is still special-cased
// by op (the bias split, the layer-norm prologue and row epilogue, layout conversions: the `OpId::` checks
// of src/passes/), that is a
// debt, not the design (docs/architecture.md, "Fusion roles").
enum class FusionKind : uint8_t {
  pointwise,  // elementwise, with broadcasting of one operand
  anchor,     // conv2d, matmul: accept a fused epilogue
  reduction,  // norms, softmax, global pooling
  window,     // sliding-window pooling
  layout,     // layout conversion, reshape, transpose
  opaque,     // everything else
};

std::string_view op_name(OpId op);
std::optional<OpId> parse_op(std::string_view name);
FusionKind op_fusion_kind(OpId op);
std::string_view fusion_kind_name(FusionKind k);

}  // namespace kiln
