// Storage types: f16/bf16 conversions against known bit patterns, names, shapes and overflow checks; Attrs.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "kiln/attrs.h"
#include "kiln/types.h"

namespace kiln {
namespace {

float f(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Types, F16FromF32KnownPatterns) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16_bits(0.1f), 0x2E66);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7BFF);  // largest finite half
  EXPECT_EQ(f32_to_f16_bits(65519.0f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7C00);  // midpoint, ties to even = infinity
  EXPECT_EQ(f32_to_f16_bits(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_f16_bits(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  // Ties to even: 1 + 2^-11 lies halfway between 0x3C00 and 0x3C01.
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);  // above the tie
  // Subnormals: unit 2^-24.
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (0)
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);  // above the tie
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even (2)
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normals
  uint16_t nan = f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(Types, F16ToF32KnownPatterns) {
  EXPECT_EQ(f16_bits_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_bits_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_bits_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_bits_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_bits_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_bits_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(f16_bits_to_f32(0x8000)));
}

TEST(Types, F16RoundTripsEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;  // inf / NaN
    float v = f16_bits_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_to_f16_bits(v), h) << "half 0x" << std::hex << h;
  }
}

TEST(Types, Bf16KnownPatterns) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16_bits(-1.5f), 0xBFC0);
  EXPECT_EQ(f32_to_bf16_bits(0.1f), 0x3DCD);           // 0x3DCCCCCD rounds up
  EXPECT_EQ(f32_to_bf16_bits(f(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16_bits(f(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16_bits(f(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16_bits(f(0x7F7FFFFF)), 0x7F80);  // max float rounds to inf
  EXPECT_EQ(f32_to_bf16_bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  uint16_t nan = f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(nan)));
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(f(0x7F800001)))));  // signalling NaN stays NaN
  EXPECT_EQ(bf16_bits_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_bits_to_f32(0x4049), 3.140625f);
}

TEST(Types, RoundToDtype) {
  EXPECT_EQ(round_to_dtype(0.1, DType::f32), static_cast<double>(0.1f));
  EXPECT_EQ(round_to_dtype(1.0 + std::ldexp(1.0, -11), DType::f16), 1.0);
  EXPECT_EQ(round_to_dtype(1.0 + std::ldexp(1.0, -8) * 3, DType::bf16), 1.0 + std::ldexp(1.0, -6));
  EXPECT_TRUE(std::isinf(round_to_dtype(70000.0, DType::f16)));
}

TEST(Types, NamesParseBack) {
  for (int i = 0; i < kDTypeCount; ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  for (int i = 0; i < kLayoutCount; ++i) {
    auto l = static_cast<Layout>(i);
    EXPECT_EQ(parse_layout(layout_name(l)), l);
  }
  EXPECT_FALSE(parse_dtype("f64"));
  EXPECT_FALSE(parse_layout("nchw"));
  EXPECT_EQ(dtype_size(DType::f32), 4);
  EXPECT_EQ(dtype_size(DType::bf16), 2);
  EXPECT_EQ(layout_memory_order(Layout::NHWC, 4), (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(layout_memory_order(Layout::KCRS, 4), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Types, ShapesAndOverflow) {
  EXPECT_EQ((Shape{1, 64, 56, 56}).numel(), 200704);
  EXPECT_EQ((Shape{1, 64, 56, 56}).to_string(), "[1, 64, 56, 56]");
  EXPECT_TRUE(validate_shape(Shape{1, 3, 224, 224}).ok());
  EXPECT_TRUE(validate_shape(Shape{}).ok());  // a scalar
  Status zero = validate_shape(Shape{2, 0, 3});
  EXPECT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("dim 1 of [2, 0, 3] is 0"), std::string::npos) << zero.message();
  EXPECT_FALSE(validate_shape(Shape{-1}).ok());
  Status big = validate_shape(Shape{int64_t{1} << 30, int64_t{1} << 30});
  EXPECT_FALSE(big.ok());
  EXPECT_NE(big.message().find("2^48"), std::string::npos);
  EXPECT_FALSE(validate_shape(Shape{int64_t{1} << 62, 4, 4}).ok());  // would overflow int64
  int64_t r;
  EXPECT_FALSE(checked_mul(int64_t{1} << 62, 4, &r));
  EXPECT_TRUE(checked_mul(int64_t{1} << 31, int64_t{1} << 31, &r));
  EXPECT_EQ(r, int64_t{1} << 62);
  EXPECT_FALSE(checked_add(std::numeric_limits<int64_t>::max(), 1, &r));
  EXPECT_FALSE(checked_sub(std::numeric_limits<int64_t>::min(), 1, &r));
  EXPECT_TRUE(checked_sub(-1, std::numeric_limits<int64_t>::max(), &r));
  EXPECT_EQ(r, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(row_major_strides(Shape{2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Shapes keep up to four dims inline and more on the heap: copies, moves and growth across that boundary
// keep every dim.
TEST(Types, ShapesCopyMoveAndGrowPastTheInlineDims) {
  for (int rank : {0, 1, 4, 5, 9}) {
    Shape s;
    std::vector<int64_t> want;
    for (int d = 0; d < rank; ++d) {
      s.push_back(d + 2);
      want.push_back(d + 2);
    }
    ASSERT_EQ(s.rank(), rank);
    EXPECT_EQ(s.to_vector(), want);
    EXPECT_EQ(Shape(want), s);
    Shape copy = s;
    EXPECT_EQ(copy, s);
    if (rank > 0) {
      copy[rank - 1] = 100;
      EXPECT_NE(copy, s) << "a copy shares no dims with its source";
      EXPECT_EQ(s[rank - 1], rank + 1);
    }
    Shape moved = std::move(copy);
    EXPECT_EQ(moved.rank(), rank);
    if (rank > 0) {
      EXPECT_EQ(moved[rank - 1], 100);
    }
    Shape assigned{7, 7, 7, 7, 7, 7};
    assigned = s;  // from six heap dims to s's
    EXPECT_EQ(assigned, s);
    Shape small{3};
    small = std::move(moved);
    EXPECT_EQ(small.rank(), rank);
    EXPECT_EQ(
        Shape(want).numel(), rank == 0 ? 1 : [&] {
          int64_t n = 1;
          for (int64_t d : want) n *= d;
          return n;
        }());
  }
  EXPECT_NE(Shape({1, 2}), Shape({1, 2, 1}));
  EXPECT_EQ(Shape({2, 3, 4, 5, 6}).to_string(), "[2, 3, 4, 5, 6]");
}

// Attrs keeps std::map's meaning in a flat sorted array: iteration in name order whatever the insertion
// order, the first value of a name given twice, at() throwing for a missing name, operator[] inserting.
TEST(Types, AttrsBehaveAsASortedMap) {
  Attrs a{{"stride", std::vector<int64_t>{2, 2}},
          {"groups", int64_t{1}},
          {"padding", std::vector<int64_t>{1, 1}},
          {"groups", int64_t{7}}};
  ASSERT_EQ(a.size(), 3u);
  std::vector<std::string> names;
  for (const auto& [k, v] : a) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"groups", "padding", "stride"}));
  EXPECT_EQ(std::get<int64_t>(a.at("groups")), 1);
  EXPECT_TRUE(a.contains("stride"));
  EXPECT_EQ(a.count("dilation"), 0u);
  EXPECT_EQ(a.find("dilation"), a.end());
  // No exceptions through kiln's API: asking for a missing attribute is an internal error (abort), not a throw.
  EXPECT_DEATH((void)a.at("dilation"), "internal error.*Attrs::at: no attribute dilation");

  a["dilation"] = std::vector<int64_t>{1, 1};  // inserted in its sorted place
  EXPECT_EQ(a.begin()->first, "dilation");
  EXPECT_FALSE(a.emplace("groups", int64_t{4}).second);  // emplace keeps the existing value
  EXPECT_EQ(std::get<int64_t>(a.at("groups")), 1);
  EXPECT_FALSE(a.insert_or_assign("groups", int64_t{4}).second);
  EXPECT_EQ(std::get<int64_t>(a.at("groups")), 4);
  EXPECT_EQ(a.erase("padding"), 1u);
  EXPECT_EQ(a.erase("padding"), 0u);
  EXPECT_EQ(a.size(), 3u);

  Attrs b{{"stride", std::vector<int64_t>{2, 2}}, {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t{4}}};
  EXPECT_EQ(a, b);
  b["groups"] = int64_t{5};
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace kiln
