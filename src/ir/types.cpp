// Storage types, layouts and shapes: names, conversions and checked arithmetic.
#include "kiln/types.h"

#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

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

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
uint16_t f32_to_f16_bits(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t abs = f & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));  // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                                              // normal half (|x| >= 2^-14)
    uint32_t mant = abs & 0x7FFFFFu;
    uint32_t exp = (abs >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1FFFu;                            // 13 dropped bits
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may roll into the exponent: correct
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half or zero: value = m * 2^-24 with m < 1024.
  if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal: +-0
  uint32_t exp = abs >> 23;                                   // biased f32 exponent, 102..112
  uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;              // with the implicit bit
  uint32_t shift = 126 - exp;                                 // 14..24: bits to drop so that the unit is 2^-24
  uint32_t h = mant >> shift;
  uint32_t rest = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t f;
  if (exp == 0x1F) {
    f = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    f = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  } else if (mant == 0) {
    f = sign;
  } else {  // subnormal: m * 2^-24, exact in f32
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(f);
}

uint16_t f32_to_bf16_bits(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (f >> 16) & 1u;
  f += 0x7FFFu + lsb;  // round to nearest even; overflow to inf is correct
  return static_cast<uint16_t>(f >> 16);
}

float bf16_bits_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

double round_to_dtype(double x, DType t) {
  float f = static_cast<float>(x);
  switch (t) {
    case DType::f32: return f;
    case DType::f16: return f16_bits_to_f32(f32_to_f16_bits(f));
    case DType::bf16: return bf16_bits_to_f32(f32_to_bf16_bits(f));
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

}  // namespace kiln
