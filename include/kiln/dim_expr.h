// Symbolic dimensions: integer expressions over named symbols ("N", "2*N + 1", "(H + 2 - 3) / 2 + 1"), the
// algebra that shapes which vary (a batch, a sequence length) are written in.
//
// An expression is kept in a canonical form: a constant plus integer multiples of atoms, where an atom is a
// symbol, a product of atoms, or a floor division, remainder, min or max that could not be simplified away.
// A floor division by a positive constant d keeps inside only coefficients and a constant in [0, d) (the
// multiples of d come out), and a remainder by one is written through it. Two expressions that canonicalize
// alike are equal for every value of their symbols; `(2*N + 4) / 2` is `N + 2`, `(N + 3) / 2` is
// `(N + 1) / 2 + 1`. What the form cannot decide (is `(N + 1) / 2 * 2` equal to `N`?) is decided by ranges where they
// can, and otherwise left to the values bound at run time (`Tri::unknown`).
//
//   DimExpr n = DimExpr::symbol("N"), h = DimExpr::symbol("H");
//   DimExpr p = floordiv(h + 2 * 1 - 3, 2) + 1;                    // a 3x3 conv's output height, stride 2
//   p.to_string();                                                  // "(H + 1) / 2"
//   p.evaluate({{"H", 224}});                                       // 112
//   p.range({{"H", {1, 512}}});                                     // [1, 256]
//   DimExpr::parse("2*N + 1");
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/status.h"

namespace kiln {

// The values a symbol may take, both ends included.
struct DimRange {
  int64_t min = 1;
  int64_t max = 1;
};
using DimRanges = std::map<std::string, DimRange, std::less<>>;
using DimBindings = std::map<std::string, int64_t, std::less<>>;

// The bounds of an expression over ranges; an end is absent when nothing bounds it (a symbol with no
// range, or a product that could overflow).
struct DimInterval {
  std::optional<int64_t> lo, hi;
};

// An answer that may depend on the symbols' values.
enum class Tri { no, yes, unknown };

class DimExpr {
 public:
  DimExpr() = default;                          // the constant 0
  DimExpr(int64_t value) : constant_(value) {}  // NOLINT: a number is a dim
  static DimExpr symbol(std::string name);
  // Parses the form to_string writes: integers, symbol names ([A-Za-z_][A-Za-z0-9_]*), + - * / (floor
  // division) % (remainder of floor division), parentheses, min(a, b), max(a, b), ceildiv(a, b).
  static Result<DimExpr> parse(std::string_view text);

  bool is_constant() const { return terms_.empty() && !overflow_; }
  std::optional<int64_t> constant() const;  // the value when it is a constant
  bool is_symbol() const;                   // exactly one symbol, coefficient 1, nothing added
  // Names of the symbols it uses, sorted.
  std::vector<std::string> symbols() const;
  // An arithmetic step overflowed int64 on constants (the expression is then unusable: evaluate fails).
  bool overflowed() const { return overflow_; }

  // The canonical text: terms in a fixed order, "2*N + 1", "(H - 1) / 2 + 1", "N*H".
  std::string to_string() const;
  // The value with every symbol bound; fails naming an unbound symbol, a division by zero or an overflow.
  Result<int64_t> evaluate(const DimBindings& values) const;
  // Bounds over the symbols' ranges (interval arithmetic: sound, not always tight).
  DimInterval range(const DimRanges& ranges) const;

  friend DimExpr operator+(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator-(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator-(const DimExpr& a);
  friend DimExpr operator*(const DimExpr& a, const DimExpr& b);
  friend DimExpr floordiv(const DimExpr& a, const DimExpr& b);  // rounds toward -infinity
  friend DimExpr ceildiv(const DimExpr& a, const DimExpr& b);   // for b > 0: floordiv(a + b - 1, b)
  friend DimExpr mod(const DimExpr& a, const DimExpr& b);       // a - b * floordiv(a, b)
  friend DimExpr min(const DimExpr& a, const DimExpr& b);
  friend DimExpr max(const DimExpr& a, const DimExpr& b);
  // The same canonical form: equal for every value of the symbols.
  friend bool operator==(const DimExpr& a, const DimExpr& b);

  struct Atom;  // a symbol, product, floor division, remainder, min or max (dim_expr.cpp)

 private:
  struct Term {
    std::shared_ptr<const Atom> atom;
    int64_t coef = 0;
  };
  int64_t constant_ = 0;
  std::vector<Term> terms_;  // sorted by the atom's text, no zero coefficient, no atom twice
  bool overflow_ = false;

  static DimExpr of_atom(std::shared_ptr<const Atom> atom);
  void add_term(const std::shared_ptr<const Atom>& atom, int64_t coef);
  friend struct DimExprOps;
};

// How messages show ranges and values: "H in [4, 16], N in [1, 64]" and "H = 5, N = 8".
std::string ranges_text(const DimRanges& ranges);
std::string bindings_text(const DimBindings& values);
// Every symbol at the bottom (min) or the top (max) of its range.
DimBindings range_ends(const DimRanges& ranges, bool top);

// Decisions over ranges: yes or no when the canonical form or the ranges settle it, else unknown.
Tri dims_equal(const DimExpr& a, const DimExpr& b, const DimRanges& ranges);
Tri dim_at_least(const DimExpr& a, int64_t bound, const DimRanges& ranges);
Tri dim_divisible(const DimExpr& a, int64_t divisor, const DimRanges& ranges);

}  // namespace kiln
