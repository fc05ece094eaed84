// The two names every layer uses for a fused group: what it computes (GroupKind, decided by fusion) and
// which kernel family runs it (KernelFamilyId, decided by the families' can_implement). One list each
// (X-macros), so a kind is named in one place and every switch over it is checked by the compiler.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

// X(enumerator, name printed by `kiln plan`, Graphviz fill, Graphviz border, Graphviz style, traits)
// Traits, what fusion lets a group of the kind hold around its first op (docs/architecture.md, "Fusion
// roles"): kAnchored (the op starts a kernel of its own), kPrologue (the pointwise group computing its data
// input may be applied as it loads), kEpilogue (pointwise ops on its output join it), kReduction (a per-channel
// reduction of a value it stores joins it as its trailing reduction: OpDef::channel_reduction).
#define KILN_GROUP_KINDS(X)                                                                                       \
  X(conv, "conv", "#c6dbef", "#3182bd", "filled", kAnchored | kPrologue | kEpilogue | kReduction) /* conv2d */    \
  X(matmul, "matmul", "#c7e9c0", "#31a354", "filled", kAnchored | kPrologue | kEpilogue)          /* matmul */    \
  X(norm, "norm", "#fdd0a2", "#e6550d", "filled", kAnchored | kPrologue | kEpilogue) /* a norm or softmax */      \
  X(pool, "pool", "#dadaeb", "#756bb1", "filled", kAnchored | kPrologue | kEpilogue) /* a pooling op */           \
  X(pointwise, "pointwise", "#fcbba1", "#de2d26", "filled", kEpilogue)               /* a DAG of pointwise ops */ \
  X(layout, "layout", "#fff7bc", "#d9a40e", "filled", 0) /* a layout conversion, transpose, reshape */            \
  X(concat, "concat", "#c7eae5", "#35978f", "filled", 0) /* a concat that is a copy */                            \
  X(concat_elided, "concat_elided", "#f5f5f5", "#969696", "filled,dashed", 0)       /* inputs write slices */     \
  X(weight_transform, "weight_transform", "#e5e5e5", "#636363", "filled,dotted", 0) /* once per weight */         \
  X(other, "other", "#f0f0f0", "#525252", "filled", 0) /* any other op alone (slice, upsample2d) */               \
  X(dgrad, "dgrad", "#9ecae1", "#08519c", "filled", kAnchored | kEpilogue) /* conv2d_dgrad */                     \
  X(wgrad, "wgrad", "#deebf7", "#08519c", "filled", kAnchored | kEpilogue) /* conv2d_wgrad */

inline constexpr unsigned kAnchored = 1, kPrologue = 2, kEpilogue = 4, kReduction = 8;

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

// The kind's traits from the table above.
constexpr unsigned group_kind_traits(GroupKind k) {
  switch (k) {
#define KILN_X(e, name, fill, border, style, traits) \
  case GroupKind::e: return traits;
    KILN_GROUP_KINDS(KILN_X)
#undef KILN_X
  }
  return 0;
}
// An anchored kind: its op starts a kernel of its own.
constexpr bool is_anchored(GroupKind k) { return (group_kind_traits(k) & kAnchored) != 0; }
// The pointwise group computing its op's data input may join it as a prologue.
constexpr bool accepts_prologue(GroupKind k) { return (group_kind_traits(k) & kPrologue) != 0; }
// Pointwise ops on the group's output may join it as its epilogue.
constexpr bool accepts_epilogue(GroupKind k) { return (group_kind_traits(k) & kEpilogue) != 0; }
// A per-channel reduction of a value it stores may join it as its trailing reduction.
constexpr bool accepts_reduction(GroupKind k) { return (group_kind_traits(k) & kReduction) != 0; }

// X(enumerator, name): the kernel families of codegen/ (one KernelFamily object each).
#define KILN_KERNEL_FAMILIES(X)                                                                    \
  X(none, "none")                         /* no kernel: an elided concat, or not yet chosen */     \
  X(pointwise, "pointwise")               /* templates: none (generated grid-stride loop) */       \
  X(conv2d, "conv2d")                     /* implicit GEMM, kiln/conv2d.cuh */                     \
  X(depthwise_conv2d, "depthwise_conv2d") /* direct, kiln/depthwise_conv2d.cuh */                  \
  X(matmul, "matmul")                     /* tiled GEMM, kiln/matmul.cuh */                        \
  X(matmul_skinny, "matmul_skinny")       /* at most 8 rows, K split in a block */                 \
  X(norm, "norm")                         /* row reductions, kiln/norm.cuh */                      \
  X(pool, "pool")                         /* window and global pooling, kiln/pool.cuh */           \
  X(data, "data")                         /* data movement: kiln/gather.cuh, kiln/transpose.cuh */ \
  X(conv2d_grad, "conv2d_grad")           /* dgrad and wgrad implicit GEMMs, conv2d_grad.cuh */    \
  X(pool_grad, "pool_grad")               /* window pools' gradients, kiln/pool_grad.cuh */

enum class KernelFamilyId : uint8_t {
#define KILN_X(e, n) e,
  KILN_KERNEL_FAMILIES(KILN_X)
#undef KILN_X
};
std::string_view kernel_family_name(KernelFamilyId f);

}  // namespace kiln
