// Storage types, layouts and shapes.
//
// Dims are always logical (activations [N, C, H, W], conv weights [K, C/groups, R, S], matmul [..., M, K]);
// a tensor's memory order is its Layout, kept apart from its dims.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln {

// ---- storage types ----------------------------------------------------------------------------------
enum class DType : uint8_t { f32, f16, bf16 };
inline constexpr int kDTypeCount = 3;

std::string_view dtype_name(DType t);                     // "f32", "f16", "bf16"
std::optional<DType> parse_dtype(std::string_view name);  // nullopt for an unknown name
int64_t dtype_size(DType t);                              // bytes per element

// Host conversions. Narrowing rounds to nearest, ties to even; NaN stays NaN, overflow gives infinity.
uint16_t f32_to_f16_bits(float x);
float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_bf16_bits(float x);
float bf16_bits_to_f32(uint16_t b);

// Rounds a value to the nearest value representable in `t` (through f32, as a kernel stores it).
double round_to_dtype(double x, DType t);

// ---- layouts ------------------------------------------------------------------------------------------
// row_major: plain C order of the logical dims (matmul operands, vectors, anything not 4-D).
// NCHW/NHWC: 4-D activations. KCRS/KRSC: 4-D conv weights [K, C/groups, R, S].
enum class Layout : uint8_t { row_major, NCHW, NHWC, KCRS, KRSC };
inline constexpr int kLayoutCount = 5;

std::string_view layout_name(Layout l);
std::optional<Layout> parse_layout(std::string_view name);
bool is_activation_layout(Layout l);  // NCHW, NHWC
bool is_weight_layout(Layout l);      // KCRS, KRSC
int layout_rank(Layout l);            // 4 for the 4-D layouts, -1 (any) for row_major
// Memory order as a permutation of logical dims, outermost first: NHWC -> {0, 2, 3, 1}.
std::vector<int> layout_memory_order(Layout l, int rank);

// ---- shapes -------------------------------------------------------------------------------------------
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  bool operator==(const Shape&) const = default;

  // Element count; the caller must have validated the shape (validate_shape) first.
  int64_t numel() const;
  std::string to_string() const;  // "[1, 64, 56, 56]"

 private:
  std::vector<int64_t> dims_;
};

// Largest element count kiln accepts for one tensor (2^48: far beyond any GPU, far below overflow).
inline constexpr int64_t kMaxElements = int64_t{1} << 48;

// Ok when every dim is positive and the element count does not exceed kMaxElements.
Status validate_shape(const Shape& s);

// Overflow-checked arithmetic for sizes: false when the result does not fit in int64_t.
bool checked_mul(int64_t a, int64_t b, int64_t* out);
bool checked_add(int64_t a, int64_t b, int64_t* out);

// Row-major strides of logical dims.
std::vector<int64_t> row_major_strides(const Shape& s);

}  // namespace kiln
