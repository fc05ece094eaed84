// Tensor files: NumPy `.npy`, one tensor per file, named after the tensor (`<dir>/<tensor name>.npy`).
//
// A file holds the tensor in its logical dims (NCHW order for activations whatever their layout), C order,
// little-endian: f32 as '<f4', f16 as '<f2', bf16 as '<f4' (bf16 widens to f32 exactly; reading rounds each
// value to the nearest bf16, ties to even). Any tool that reads and writes NumPy files can produce and
// check them. Files are written as format version 1.0 (2.0 for headers over 64 KiB), with NumPy's own
// header text and 64-byte alignment; versions 1.0, 2.0 and 3.0 are read.
//
// Reading checks everything and names the file and the tensor in every message, expected vs actual:
//   in/x.npy: tensor 'x': shape mismatch: expected [1, 3, 8, 8], got [1, 3, 8]
#pragma once

#include <string>
#include <string_view>

#include "kiln/graph.h"
#include "kiln/host_tensor.h"
#include "kiln/status.h"
#include "kiln/types.h"

namespace kiln {

// The .npy type descriptor a dtype is stored as: "<f4" for f32 and bf16, "<f2" for f16.
std::string_view npy_descr(DType t);

// The bytes of a .npy file holding `t` (format 1.0, NumPy's header text, padded to 64 bytes).
std::string npy_encode(const HostTensor& t);

// Decodes the bytes of a .npy file as a tensor of `dtype` and `expected_shape`. `source` names the bytes
// in messages (a file path); `tensor_name` names the tensor. Never aborts on bad bytes.
Result<HostTensor> npy_decode(std::string_view bytes, DType dtype, const Shape& expected_shape,
                              std::string_view tensor_name, std::string_view source = "<bytes>");

// Writes `t` to `path` through a temporary file in the same directory and a rename, so a reader never
// sees half a file. The directory must exist.
Status save_npy(const std::string& path, const HostTensor& t);

// Reads `path` as a tensor of `dtype` and `expected_shape` (see npy_decode). A missing file is not_found,
// an unreadable one io_error, wrong contents invalid_argument.
Result<HostTensor> load_npy(const std::string& path, DType dtype, const Shape& expected_shape,
                            std::string_view tensor_name);

// The shape a .npy file declares (its header only; the data is read, and checked, by load_npy).
Result<Shape> npy_shape(const std::string& path, std::string_view tensor_name);

// `<dir>/<tensor_name>.npy`, a '/' in the name a subdirectory (`grad/w1` is `<dir>/grad/w1.npy`); invalid_argument
// when a part of the name cannot be a file name (empty, ".", "..", or holding '\\' or a NUL character).
Result<std::string> npy_path(const std::string& dir, std::string_view tensor_name);

// Writes every tensor of `tensors` as `<dir>/<name>.npy`, creating `dir` (and its parents) if needed.
Status save_tensors(const std::string& dir, const TensorMap& tensors);

// Reads every input and parameter of `g` from `<dir>/<name>.npy` with its declared shape and dtype. A
// missing file is a not_found Status naming the file and the tensor, except for a parameter the graph
// holds a value for (Graph::set_value), which then keeps that value. Other files in `dir` are ignored.
Result<TensorMap> load_inputs(const std::string& dir, const Graph& g);

}  // namespace kiln
