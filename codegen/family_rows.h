// Glue shared by the two families whose anchor reads its input through a Load functor and hands each output
// to an Epi functor: norm (codegen/family_norm.cpp) and pool (family_pool.cpp); defined in family_rows.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "codegen/kernel_builder.h"

namespace kiln::codegen::rows {

// A norm or pool group around its anchor. Load transforms (layout conversions of group inputs) are in
// neither list: the memory views read through them.
struct Parts {
  int32_t anchor = -1;
  std::vector<int32_t> prologue;  // pointwise ops computing the anchor's input
  std::vector<int32_t> epilogue;  // pointwise ops and store transforms after the anchor
};
Result<Parts> split(KernelBuilder& b);

// `i.i[0]`, ..., `i.i[rank-1]`: the coordinate names inside the functors.
std::vector<std::string> coord_names(int rank);

// `struct Load { params; float operator()(const kiln::Idx<R>& i) const }`: the anchor input x at i.
Result<std::string> load_functor(KernelBuilder& b, const Parts& p, Tensor x);
// `struct Epi { params; void operator()(float v, const kiln::Idx<R>& i) const }`: `pre` (statements that
// may rewrite v, such as a norm's affine), then the epilogue, storing every group output.
// `domain_rank` (default: y's rank) is the rank of the coordinate it takes: 1 for a scalar y (no Idx<0>).
Result<std::string> epi_functor(KernelBuilder& b, const Parts& p, Tensor y, const std::string& pre,
                                int domain_rank = -1);

// A read-modify statement of the Epi functor before the epilogue (`v *= scale`): a norm's affine, read at
// the output coordinate (broadcasting) or, when `per_channel`, as a vector indexed by the channel (dim 1).
struct PreOp {
  std::string op;  // "*=", "+="
  Tensor t;
  bool per_channel = false;
};
// The scalar form of `pre` inside the Epi functor (statements rewriting v at coordinate i).
std::string pre_statements(KernelBuilder& b, const std::vector<PreOp>& pre, int rank);

// The functors' vector forms, for a template that walks V consecutive values along dim `vd` of both the
// anchor's input domain (Load) and output domain (Epi), starting at a coordinate multiple of V:
//   Load: void vec(const kiln::Idx<R>& i, float* x) const  (x[0..V): the inputs)
//   Epi:  void vec(const kiln::Idx<R>& i, const float* vv) const
// Every tensor they touch must be, along vd, either one value (read once) or V consecutive elements at an
// offset that is a multiple of V (one 16-, 8- or 4-byte access, kiln::ldvu / stvu); every tensor written
// must be. V >= 2 is the widest of 16, 8 and 4 / (the largest element size) that `fits` (the template's own
// conditions) and the strides allow: a group norm over NHWC with 2 or 10 channels a group (GroupNorm(32)
// of 64 or 320 channels) reads its 16-bit values in pairs.
// nullopt when any access does not allow it (broadcasts along vd other than single values, strided or
// misaligned tensors, transposing or reshaping stores): the caller keeps the per-element functors. Call
// after the kernel's parameters are declared (KernelBuilder::declare_params) when the text is to be used.
struct VecForms {
  int v = 0;
  std::string load, epi;
};
Result<std::optional<VecForms>> vector_functors(KernelBuilder& b, const Parts& p, Tensor x, Tensor y, int vd,
                                                const std::vector<PreOp>& pre, const std::function<bool(int)>& fits);

// Whether the memory x is read from (x, or the prologue's full-shape operands) keeps channels (dim 1)
// adjacent: neighbouring threads should then take neighbouring channels.
bool channels_last(KernelBuilder& b, const Parts& p, Tensor x);

int64_t attr_int(const Node& n, std::string_view name, int64_t dflt);
double attr_float(const Node& n, std::string_view name, double dflt);

}  // namespace kiln::codegen::rows
