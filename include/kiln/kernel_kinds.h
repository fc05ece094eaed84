// The two names every layer uses for a fused group: what it computes (GroupKind, decided by fusion) and
// which kernel family runs it (KernelFamilyId, decided by the families' can_implement). One list each
// (X-macros), so a kind is named in one place and every switch over it is checked by the compiler.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

// X(enumerator, name printed by `kiln plan`, Graphviz fill, Graphviz border, Graphviz style)
#define KILN_GROUP_KINDS(X)                                                                                      \
  X(conv, "conv", "#c6dbef", "#3182bd", "filled")           /* conv2d + epilogue */                              \
  X(matmul, "matmul", "#c7e9c0", "#31a354", "filled")       /* matmul + epilogue */                              \
  X(norm, "norm", "#fdd0a2", "#e6550d", "filled")           /* a norm or softmax with prologue/epilogue */       \
  X(pool, "pool", "#dadaeb", "#756bb1", "filled")           /* a pooling op with prologue/epilogue */            \
  X(pointwise, "pointwise", "#fcbba1", "#de2d26", "filled") /* a DAG of pointwise ops */                         \
  X(layout, "layout", "#fff7bc", "#d9a40e", "filled")       /* a layout conversion, transpose, reshape */        \
  X(concat, "concat", "#c7eae5", "#35978f", "filled")       /* a concat that is a copy */                        \
  X(concat_elided, "concat_elided", "#f5f5f5", "#969696", "filled,dashed")       /* inputs write their slices */ \
  X(weight_transform, "weight_transform", "#e5e5e5", "#636363", "filled,dotted") /* once per bound weight */     \
  X(other, "other", "#f0f0f0", "#525252", "filled") /* any other op alone (slice, upsample2d) */

enum class GroupKind : uint8_t {
#define KILN_X(e, ...) e,
  KILN_GROUP_KINDS(KILN_X)
#undef KILN_X
};
inline constexpr GroupKind kAllGroupKinds[] = {
#define KILN_X(e, ...) GroupKind::e,
    KILN_GROUP_KINDS(KILN_X)
#undef KILN_X
};
std::string_view group_kind_name(GroupKind k);

// X(enumerator, name): the kernel families of codegen/ (one KernelFamily object each).
#define KILN_KERNEL_FAMILIES(X)                                                                \
  X(none, "none")                         /* no kernel: an elided concat, or not yet chosen */ \
  X(pointwise, "pointwise")               /* templates: none (generated grid-stride loop) */   \
  X(conv2d, "conv2d")                     /* implicit GEMM, kiln/conv2d.cuh */                 \
  X(depthwise_conv2d, "depthwise_conv2d") /* direct, kiln/depthwise_conv2d.cuh */              \
  X(matmul, "matmul")                     /* tiled GEMM, kiln/matmul.cuh */                    \
  X(matmul_skinny, "matmul_skinny")       /* at most 8 rows, K split in a block */             \
  X(norm, "norm")                         /* row reductions, kiln/norm.cuh */                  \
  X(pool, "pool")                         /* window and global pooling, kiln/pool.cuh */       \
  X(data, "data")                         /* data movement: kiln/gather.cuh, kiln/transpose.cuh */

enum class KernelFamilyId : uint8_t {
#define KILN_X(e, n) e,
  KILN_KERNEL_FAMILIES(KILN_X)
#undef KILN_X
};
std::string_view kernel_family_name(KernelFamilyId f);

}  // namespace kiln
