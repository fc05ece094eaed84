// What the conv families (codegen/family_conv.cpp: the implicit GEMM; codegen/family_depthwise.cpp) share:
// the group's conv, its operands' views, its Cfg and the rendering of its kernel.
#pragma once

#include <string>
#include <vector>

#include "codegen/family.h"

namespace kiln::codegen::conv_glue {

// The shapes and attributes of the group's conv2d.
struct Conv {
  const Node* node = nullptr;
  Tensor x, w, y;
  const Tensor* bias = nullptr;
  int64_t N, C, H, W, K, R, S, P, Q, G;
  std::vector<int64_t> stride, dilation, pad;  // pad: top, left, bottom, right
  int64_t pixels() const { return N * P * Q; }
};

// A list-of-ints attribute of a node (stride, padding, dilation).
const std::vector<int64_t>& ints(const Node& n, std::string_view name);
// The members through which split-K's Split (and a reduction epilogue's Red) reach the group's scratch.
std::string scratch_members(KernelBuilder& b);
// The anchor conv's sizes and attributes alone (what the tile choice reads), without conv_of's checks.
Result<Conv> conv_shape(KernelBuilder& b);
// The group's conv, once the group around it is one the conv kernels run. `row_norm`: whether the caller
// runs a row-norm epilogue (the depthwise family does; others refuse one).
Result<Conv> conv_of(KernelBuilder& b, bool row_norm = false);
// Cfg's shape and views (the struct left open for the family's own members).
std::string conv_cfg(const Conv& c, const MemView& xv, const MemView& wv);
// The batch parameter every conv kernel takes (KernelParam::batch_value).
void add_batch_param(KernelBuilder& b, KernelConfig& k, const Conv& c);
// The memory view the kernel reads for x: x's own, or that of the tensor its prologue starts from.
Result<MemView> input_view(KernelBuilder& b);
// The prologue's Pro at x's logical coordinate {n, c, h, w}, or "" when the group has none.
Result<std::string> prologue_functor(KernelBuilder& b, const Conv& c);
// The source of a conv kernel: Cfg, Epi, Pro, Red or Split as the group needs, and the entry calling `call`
// with `args` before x and w (the batch, and a shape-generic kernel's sizes).
Result<Kernel> render_conv(KernelBuilder& b, const KernelConfig& cfg, const std::string& cfg_struct, const char* header,
                           std::string call, const std::string& bounds, const MemView& xv, const MemView& wv,
                           const std::string& args);

}  // namespace kiln::codegen::conv_glue
