// Host tensors for the reference backend and for tensor files.
//
// A HostTensor holds its values as f64 in logical row-major order (NCHW order for activations, whatever
// their layout), each value representable in its storage dtype. It is what `ref` reads and writes and what
// `.npy` files hold; device backends convert to memory layouts at their boundary.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/types.h"

namespace kiln {

struct HostTensor {
  Shape shape;
  DType dtype = DType::f32;
  std::vector<double> data;  // logical row-major, numel() values

  HostTensor() = default;
  HostTensor(Shape s, DType t) : shape(std::move(s)), dtype(t), data(static_cast<size_t>(shape.numel()), 0.0) {}
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
};

using TensorMap = std::map<std::string, HostTensor, std::less<>>;

// What values a tensor may hold for an op to be defined on it (batch_norm's `var` must be positive, ...).
enum class ValueDomain : uint8_t { any, positive, nonzero };

// Deterministic random values (the same on every platform and compiler): uniform in [-1, 1] for `any`,
// [0.5, 1.5] for `positive`, ±[0.5, 1] for `nonzero`, rounded to the dtype. `stream` separates tensors.
HostTensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, uint64_t stream,
                         ValueDomain domain = ValueDomain::any);

// Random values for every input and parameter of a graph, each from the seed and the tensor's name, in
// the domain its consumers require; weights (conv2d's `w`, matmul's `b`) are scaled by sqrt(3 / fan_in)
// so that deep networks stay finite. A parameter the graph holds a value for (Graph::set_value: an ONNX
// model's weights) gets that value instead. The graph must have passed verify().
TensorMap random_inputs(const Graph& g, uint64_t seed);

// A tensor's values in its storage dtype and memory layout (what a device buffer holds, what a binding of
// the execution API points at), and back.
std::vector<unsigned char> to_device_bytes(const HostTensor& t, Layout layout);
HostTensor from_device_bytes(const unsigned char* bytes, const Shape& shape, DType dtype, Layout layout);

// Summary statistics of a tensor, for printing.
struct TensorStats {
  double min = 0, max = 0, mean = 0, std = 0;
  int64_t nan_count = 0, inf_count = 0;
};
TensorStats tensor_stats(const HostTensor& t);

}  // namespace kiln
