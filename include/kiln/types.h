// Storage types, layouts and shapes.
//
// Dims are always logical (activations [N, C, H, W], conv weights [K, C/groups, R, S], matmul [..., M, K]);
// a tensor's memory order is its Layout, kept apart from its dims.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
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
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.size()); }
  Shape(const Shape& o) { assign(o.data(), static_cast<size_t>(o.rank_)); }
  Shape(Shape&& o) noexcept { take(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.data(), static_cast<size_t>(o.rank_));
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      delete[] heap_;
      heap_ = nullptr;
      take(o);
    }
    return *this;
  }
  ~Shape() { delete[] heap_; }

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return data()[i]; }
  int64_t& operator[](int i) { return data()[i]; }
  std::span<const int64_t> dims() const { return {data(), static_cast<size_t>(rank_)}; }
  std::vector<int64_t> to_vector() const { return {data(), data() + rank_}; }
  void push_back(int64_t d);
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (data()[i] != o.data()[i]) return false;
    return true;
  }

  // Element count; the caller must have validated the shape (validate_shape) first.
  int64_t numel() const;
  std::string to_string() const;  // "[1, 64, 56, 56]"

 private:
  // Dims up to rank 4 (nearly every tensor) live inside the Shape: reading a tensor's shape costs no
  // pointer chase and copying one no allocation (planning a 100k-node graph reads and copies hundreds of
  // thousands). Higher ranks go to the heap.
  static constexpr int kInline = 4;
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  int64_t* data() { return heap_ ? heap_ : inline_; }
  void assign(const int64_t* d, size_t n);
  void take(Shape& o) noexcept;
  int32_t rank_ = 0;
  int32_t capacity_ = kInline;
  int64_t* heap_ = nullptr;
  int64_t inline_[kInline] = {};
};

// Largest element count kiln accepts for one tensor (2^48: far beyond any GPU, far below overflow).
inline constexpr int64_t kMaxElements = int64_t{1} << 48;

// Ok when every dim is positive and the element count does not exceed kMaxElements.
Status validate_shape(const Shape& s);

// Overflow-checked arithmetic for sizes: false when the result does not fit in int64_t.
bool checked_mul(int64_t a, int64_t b, int64_t* out);
bool checked_add(int64_t a, int64_t b, int64_t* out);
bool checked_sub(int64_t a, int64_t b, int64_t* out);

// Row-major strides of logical dims.
std::vector<int64_t> row_major_strides(const Shape& s);
// Memory strides (in elements) of a tensor of logical `shape` stored in `layout` (NHWC / KRSC: logical
// [N, C, H, W] stored N, H, W, C; every other layout row-major).
std::vector<int64_t> layout_strides(const Shape& shape, Layout layout);

}  // namespace kiln
