// Symbolic dims (include/kiln/dim_expr.h): the canonical form keeps every value (checked against direct
// integer arithmetic on random expressions and bindings), prints what it parses, bounds soundly, and
// decides what can be decided.
#include <functional>
#include <ostream>
#include <random>

#include <gtest/gtest.h>

#include "kiln/dim_expr.h"

namespace kiln {

void PrintTo(const DimExpr& e, std::ostream* os) { *os << e.to_string(); }

namespace {

const DimExpr N = DimExpr::symbol("N"), H = DimExpr::symbol("H"), L = DimExpr::symbol("L");

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

TEST(DimExpr, CanonicalFormsOfEqualExpressionsAreEqual) {
  EXPECT_EQ(floordiv(2 * N + 4, 2), N + 2);
  EXPECT_EQ(floordiv(N + 3, 2), floordiv(N + 1, 2) + 1);
  EXPECT_EQ(floordiv(3 * N, 2), N + floordiv(N, 2));
  EXPECT_EQ(N * H, H * N);
  EXPECT_EQ((N + 1) * (N - 1), N * N - 1);
  EXPECT_EQ(min(N, H), min(H, N));
  EXPECT_EQ(max(N, N + 2), N + 2);
  EXPECT_EQ(N - N, DimExpr(0));
  EXPECT_EQ(floordiv(N, N), DimExpr(1));
  EXPECT_EQ(mod(4 * N + 8, 4), DimExpr(0));
  EXPECT_EQ(ceildiv(N, 1), N);
  EXPECT_FALSE(N + 1 == N);
  EXPECT_FALSE(floordiv(N, 2) * 2 == N);  // not equal for odd N
}

TEST(DimExpr, PrintsTheFormPeopleWriteAndParsesItBack) {
  const DimExpr conv = floordiv(H + 2 * 1 - 3, 2) + 1;  // a 3x3 conv, padding 1, stride 2
  EXPECT_EQ(conv.to_string(), "(H + 1) / 2");
  EXPECT_EQ((2 * N + 1).to_string(), "2*N + 1");
  EXPECT_EQ((N * H - 3).to_string(), "H*N - 3");
  EXPECT_EQ((-N).to_string(), "-N");
  EXPECT_EQ((2 * floordiv(N, 3)).to_string(), "2*(N / 3)");
  EXPECT_EQ(min(N, 8).to_string(), "min(8, N)");
  EXPECT_EQ(DimExpr(-7).to_string(), "-7");
  for (const char* text : {"N", "2*N + 1", "(H + 1) / 2", "N*H*L - 7", "min(N, 2*L)", "max(N - 1, 1)", "N % 8",
                           "ceildiv(L, 64)", "-(N / 2)", "(2*N + 3) / (L + 1)", "N*N + 2*(N / 3)"}) {
    auto e = DimExpr::parse(text);
    ASSERT_TRUE(e.ok()) << text << ": " << e.status().message();
    auto back = DimExpr::parse(e->to_string());
    ASSERT_TRUE(back.ok()) << e->to_string();
    EXPECT_EQ(*back, *e) << text << " -> " << e->to_string();
  }
  EXPECT_TRUE(DimExpr(5).is_constant());
  EXPECT_TRUE(N.is_symbol());
  EXPECT_FALSE((N + 1).is_symbol());
  EXPECT_EQ((N * H + floordiv(L, 2)).symbols(), (std::vector<std::string>{"H", "L", "N"}));
}

TEST(DimExpr, ParseErrorsSayWhatWasExpectedAndWhere) {
  auto msg = [](const char* text) {
    auto e = DimExpr::parse(text);
    EXPECT_FALSE(e.ok()) << text;
    return e.ok() ? std::string() : e.status().message();
  };
  EXPECT_EQ(msg("N +"), "dim expression 'N +': expected a number, a symbol or '(' at offset 3 (the end)");
  EXPECT_EQ(msg("(N"), "dim expression '(N': expected ')' at offset 2 (the end)");
  EXPECT_EQ(msg("N / 0"), "dim expression 'N / 0': expected a divisor other than 0 at offset 5 (the end)");
  EXPECT_EQ(msg("2 $ N"), "dim expression '2 $ N': expected an operator or the end at offset 2 ('$')");
  EXPECT_NE(msg("99999999999999999999").find("a number that fits in int64"), std::string::npos);
  EXPECT_NE(msg(std::string(100, '(').c_str()).find("less nesting"), std::string::npos);
  EXPECT_NE(msg("min(N)").find("expected ','"), std::string::npos);
  EXPECT_NE(msg("").find("a number, a symbol or '('"), std::string::npos);
}

TEST(DimExpr, EvaluationNamesWhatIsMissingOrOverflows) {
  EXPECT_EQ(*(floordiv(H - 1, 2) + 1).evaluate({{"H", 224}}), 112);
  auto e = (N + H).evaluate({{"N", 1}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "the symbol 'H' has no value");
  EXPECT_FALSE((N * N).evaluate({{"N", int64_t{1} << 40}}).ok());
  EXPECT_FALSE(floordiv(N, H).evaluate({{"N", 3}, {"H", 0}}).ok());
  const DimExpr big = DimExpr(INT64_MAX) + 1;
  EXPECT_TRUE(big.overflowed());
  EXPECT_FALSE(big.evaluate({}).ok());
  EXPECT_TRUE(floordiv(DimExpr(INT64_MIN), DimExpr(-1)).overflowed());
  EXPECT_EQ(mod(DimExpr(INT64_MIN), DimExpr(-1)), DimExpr(0));
  EXPECT_EQ((INT64_MIN * N).to_string(), "-9223372036854775808*N");
  EXPECT_EQ(*(INT64_MIN * N + 1).evaluate({{"N", 1}}), INT64_MIN + 1);
}

// A random expression and the same computation done directly on integers.
struct Both {
  DimExpr expr;
  std::function<std::optional<int64_t>(const DimBindings&)> value;  // nullopt: a division by zero
};

Both random_expr(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth <= 0 ? 1 : 8);
  const int k = pick(rng);
  if (k == 0) {
    const int64_t c = std::uniform_int_distribution<int64_t>(-5, 9)(rng);
    return {DimExpr(c), [c](const DimBindings&) { return std::optional<int64_t>(c); }};
  }
  if (k == 1) {
    static const char* const names[] = {"N", "H", "L"};
    const std::string n = names[std::uniform_int_distribution<int>(0, 2)(rng)];
    return {DimExpr::symbol(n), [n](const DimBindings& b) { return std::optional<int64_t>(b.at(n)); }};
  }
  Both a = random_expr(rng, depth - 1), b = random_expr(rng, depth - 1);
  using F = std::function<std::optional<int64_t>(int64_t, int64_t)>;
  auto join = [&](DimExpr e, F f) {
    return Both{std::move(e), [fa = a.value, fb = b.value, f](const DimBindings& v) -> std::optional<int64_t> {
                  auto x = fa(v), y = fb(v);
                  if (!x || !y) return std::nullopt;
                  return f(*x, *y);
                }};
  };
  // Divisors are kept positive constants or positive sums, as shapes make them.
  const int64_t d = std::uniform_int_distribution<int64_t>(1, 5)(rng);
  switch (k) {
    case 2: return join(a.expr + b.expr, [](int64_t x, int64_t y) { return x + y; });
    case 3: return join(a.expr - b.expr, [](int64_t x, int64_t y) { return x - y; });
    case 4: return join(a.expr * b.expr, [](int64_t x, int64_t y) { return x * y; });
    case 5: return join(floordiv(a.expr, DimExpr(d)) + 0 * b.expr, [d](int64_t x, int64_t) { return floor_div(x, d); });
    case 6:
      return join(mod(a.expr, DimExpr(d)) + 0 * b.expr, [d](int64_t x, int64_t) { return x - floor_div(x, d) * d; });
    case 7: return join(min(a.expr, b.expr), [](int64_t x, int64_t y) { return std::min(x, y); });
    default: return join(max(a.expr, b.expr), [](int64_t x, int64_t y) { return std::max(x, y); });
  }
}

TEST(DimExpr, RandomExpressionsKeepTheirValuesBoundsAndText) {
  std::mt19937 rng(7);
  int checked = 0, nontrivial = 0;
  for (int i = 0; i < 3000; ++i) {
    const Both e = random_expr(rng, 4);
    ASSERT_FALSE(e.expr.overflowed());
    auto parsed = DimExpr::parse(e.expr.to_string());
    ASSERT_TRUE(parsed.ok()) << e.expr.to_string() << ": " << parsed.status().message();
    EXPECT_EQ(*parsed, e.expr) << e.expr.to_string();
    const DimRanges ranges{{"N", {1, 64}}, {"H", {-3, 300}}, {"L", {7, 7}}};
    const DimInterval bound = e.expr.range(ranges);
    nontrivial += e.expr.symbols().empty() ? 0 : 1;
    for (int j = 0; j < 8; ++j) {
      const DimBindings v{{"N", std::uniform_int_distribution<int64_t>(1, 64)(rng)},
                          {"H", std::uniform_int_distribution<int64_t>(-3, 300)(rng)},
                          {"L", 7}};
      const std::optional<int64_t> want = e.value(v);
      ASSERT_TRUE(want.has_value());
      auto got = e.expr.evaluate(v);
      ASSERT_TRUE(got.ok()) << e.expr.to_string() << ": " << got.status().message();
      EXPECT_EQ(*got, *want) << e.expr.to_string();
      EXPECT_EQ(*parsed->evaluate(v), *want) << parsed->to_string();
      if (bound.lo) {
        EXPECT_GE(*want, *bound.lo) << e.expr.to_string();
      }
      if (bound.hi) {
        EXPECT_LE(*want, *bound.hi) << e.expr.to_string();
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 24000);
  EXPECT_GT(nontrivial, 2000);
}

TEST(DimExpr, DecidesEqualityBoundsAndDivisibilityWhereItCan) {
  const DimRanges r{{"N", {1, 64}}, {"H", {8, 512}}};
  EXPECT_EQ(dims_equal(floordiv(2 * N + 2, 2), N + 1, r), Tri::yes);
  EXPECT_EQ(dims_equal(N + 1, N, r), Tri::no);
  EXPECT_EQ(dims_equal(N, H + 100, r), Tri::no);  // N <= 64 < H + 100
  EXPECT_EQ(dims_equal(N, H, r), Tri::unknown);
  EXPECT_EQ(dim_at_least(floordiv(H - 3, 2) + 1, 1, r), Tri::yes);
  EXPECT_EQ(dim_at_least(H - 9, 0, r), Tri::unknown);  // negative for H = 8
  EXPECT_EQ(dim_at_least(N - 70, 0, r), Tri::no);
  EXPECT_EQ(dim_divisible(4 * N, 2, r), Tri::yes);
  EXPECT_EQ(dim_divisible(4 * N + 1, 2, r), Tri::no);
  EXPECT_EQ(dim_divisible(N, 8, r), Tri::unknown);
  EXPECT_EQ(dim_divisible(N, 8, {{"N", {16, 16}}}), Tri::yes);
  EXPECT_EQ(dims_equal(N, N, {}), Tri::yes);
  const DimInterval none = (N * H).range({});
  EXPECT_FALSE(none.lo.has_value());
  EXPECT_FALSE(none.hi.has_value());
}

}  // namespace
}  // namespace kiln
