// Constant arithmetic for the importer's folding (ops_fold.cpp).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "importer.h"

namespace kiln::onnx_import {

// NumPy broadcasting of two shapes; nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
// `op` (Add, Sub, Mul, Div, Pow, Max, Min) of two constants, broadcast; integer when `a` is.
Result<Const> fold_binary(std::string_view op, const Const& a, const Const& b);

}  // namespace kiln::onnx_import
