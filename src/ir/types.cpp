// Storage types, layouts and shapes: names, conversions and checked arithmetic.
#include "kiln/types.h"

#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "support/half_float.h"

namespace kiln {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::not_found: return "not_found";
    case StatusCode::io_error: return "io_error";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::unavailable: return "unavailable";
    case StatusCode::device_error: return "device_error";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", status_code_name(code_), message_);
}

// ---- dtypes -------------------------------------------------------------------------------------------
std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i) {
    auto t = static_cast<DType>(i);
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

int64_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

// The conversions live in support/half_float.h (header-only, so hot loops inline them); these are their
// public names.
uint16_t f32_to_f16_bits(float x) { return support::f32_to_f16_bits(x); }
float f16_bits_to_f32(uint16_t h) { return support::f16_bits_to_f32(h); }
uint16_t f32_to_bf16_bits(float x) { return support::f32_to_bf16_bits(x); }
float bf16_bits_to_f32(uint16_t b) { return support::bf16_bits_to_f32(b); }

double round_to_dtype(double x, DType t) {
  float f = static_cast<float>(x);
  switch (t) {
    case DType::f32: return f;
    case DType::f16: return support::f16_bits_to_f32(support::f32_to_f16_bits(f));
    case DType::bf16: return support::bf16_bits_to_f32(support::f32_to_bf16_bits(f));
  }
  return f;
}

// ---- layouts ------------------------------------------------------------------------------------------
std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::row_major: return "row_major";
    case Layout::NCHW: return "NCHW";
    case Layout::NHWC: return "NHWC";
    case Layout::KCRS: return "KCRS";
    case Layout::KRSC: return "KRSC";
  }
  return "?";
}

std::optional<Layout> parse_layout(std::string_view name) {
  for (int i = 0; i < kLayoutCount; ++i) {
    auto l = static_cast<Layout>(i);
    if (layout_name(l) == name) return l;
  }
  return std::nullopt;
}

bool is_activation_layout(Layout l) { return l == Layout::NCHW || l == Layout::NHWC; }
bool is_weight_layout(Layout l) { return l == Layout::KCRS || l == Layout::KRSC; }
int layout_rank(Layout l) { return l == Layout::row_major ? -1 : 4; }

std::vector<int> layout_memory_order(Layout l, int rank) {
  if (l == Layout::NHWC || l == Layout::KRSC) return {0, 2, 3, 1};
  std::vector<int> order(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

// ---- shapes -------------------------------------------------------------------------------------------
bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool checked_add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool checked_sub(int64_t a, int64_t b, int64_t* out) { return !__builtin_sub_overflow(a, b, out); }

void Shape::assign(const int64_t* d, size_t n) {
  if (n > static_cast<size_t>(capacity_)) {
    delete[] heap_;
    heap_ = new int64_t[n];
    capacity_ = static_cast<int32_t>(n);
  }
  int64_t* out = data();
  for (size_t i = 0; i < n; ++i) out[i] = d[i];
  rank_ = static_cast<int32_t>(n);
}

void Shape::take(Shape& o) noexcept {
  rank_ = o.rank_;
  if (o.heap_) {
    heap_ = o.heap_;
    capacity_ = o.capacity_;
    o.heap_ = nullptr;
  } else {
    capacity_ = kInline;
    for (int i = 0; i < rank_; ++i) inline_[i] = o.inline_[i];
  }
  o.rank_ = 0;
  o.capacity_ = kInline;
}

void Shape::push_back(int64_t d) {
  if (rank_ == capacity_) {
    const int32_t cap = capacity_ * 2;
    int64_t* grown = new int64_t[static_cast<size_t>(cap)];
    for (int i = 0; i < rank_; ++i) grown[i] = data()[i];
    delete[] heap_;
    heap_ = grown;
    capacity_ = cap;
  }
  data()[rank_++] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims()) {
    KILN_CHECK(checked_mul(n, d, &n), "numel of an unvalidated shape overflowed");
  }
  return n;
}

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims(), ", ")); }

Status validate_shape(const Shape& s) {
  int64_t n = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (s[i] <= 0)
      return invalid_argument(fmt::format("dim {} of {} is {}: dims must be positive", i, s.to_string(), s[i]));
    if (!checked_mul(n, s[i], &n) || n > kMaxElements) {
      return invalid_argument(
          fmt::format("shape {} has more than 2^48 elements (the most kiln accepts)", s.to_string()));
    }
  }
  return {};
}

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.rank()), 1);
  for (int i = s.rank() - 2; i >= 0; --i) st[static_cast<size_t>(i)] = st[static_cast<size_t>(i) + 1] * s[i + 1];
  return st;
}

std::vector<int64_t> layout_strides(const Shape& shape, Layout layout) {
  if (shape.rank() == 4 && (layout == Layout::NHWC || layout == Layout::KRSC)) {
    const int64_t C = shape[1], H = shape[2], W = shape[3];
    return {H * W * C, 1, W * C, C};
  }
  return row_major_strides(shape);
}

}  // namespace kiln
