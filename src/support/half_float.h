// IEEE binary16 (f16) and bfloat16 (bf16) <-> float, bit exact and round-to-nearest-even: the one host
// implementation in kiln (the public kiln::f32_to_f16_bits & co. of include/kiln/types.h call these).
// Header-only so that the per-element loops of the reference backend, .npy I/O and device-layout
// conversions inline them.
//
// templates/kiln/host/emu_prelude.h keeps its own copy (float_to_half_bits & co.) on purpose: it is
// compiled by the host compiler inside emu kernels, with only the embedded templates on the include path
// (no src/, no kiln library to link), so it cannot include this header. tests/test_emu.cpp
// (EmuConversions) checks the two agree bit for bit on every kernel-visible conversion.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln::support {

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. NaN stays NaN (quiet, payload kept as
// far as it fits), overflow rounds to infinity.
inline uint16_t f32_to_f16_bits(float x) {
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

// Exact: every f16 value is a float.
inline float f16_bits_to_f32(uint16_t h) {
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

// bfloat16 is the top half of a float: round the dropped 16 bits to nearest even.
inline uint16_t f32_to_bf16_bits(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (f >> 16) & 1u;
  f += 0x7FFFu + lsb;  // round to nearest even; overflow to inf is correct
  return static_cast<uint16_t>(f >> 16);
}

inline float bf16_bits_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace kiln::support
