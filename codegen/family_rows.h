// Glue shared by the two families whose anchor reads its input through a Load functor and hands each output
// to an Epi functor: norm (codegen/family_norm.cpp, which defines these) and pool (family_pool.cpp).
#pragma once

#include <cstdint>
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
Result<std::string> epi_functor(KernelBuilder& b, const Parts& p, Tensor y, const std::string& pre);

// Whether the memory x is read from (x, or the prologue's full-shape operands) keeps channels (dim 1)
// adjacent: neighbouring threads should then take neighbouring channels.
bool channels_last(KernelBuilder& b, const Parts& p, Tensor x);

int64_t attr_int(const Node& n, std::string_view name, int64_t dflt);
double attr_float(const Node& n, std::string_view name, double dflt);

}  // namespace kiln::codegen::rows
