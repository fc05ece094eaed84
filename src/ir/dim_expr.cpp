// Symbolic dimensions (include/kiln/dim_expr.h): the canonical form, its arithmetic, ranges and parsing.
#include "kiln/dim_expr.h"

#include <algorithm>

#include <fmt/format.h>

namespace kiln {

struct DimExpr::Atom {
  enum class Kind { symbol, product, floordiv, mod, min, max };
  Kind kind = Kind::symbol;
  std::string name;           // a symbol's
  std::vector<DimExpr> args;  // a product's factors (each one atom), or the two operands
  std::string key;            // the canonical text: orders terms and decides equality
};

namespace {

using Atom = DimExpr::Atom;
using Kind = Atom::Kind;

// Checked int64 steps: false on overflow.
bool add_ok(int64_t a, int64_t b, int64_t& out) { return !__builtin_add_overflow(a, b, &out); }
bool mul_ok(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

// Interval ends beyond +-2^62 count as unbounded; the arithmetic on ends is done in 128 bits (GCC's and
// Clang's extension, marked as such for -Wpedantic), where a sum or product of two ends cannot overflow.
__extension__ typedef __int128 Wide;
constexpr int64_t kBig = int64_t{1} << 62;
[[maybe_unused]] std::optional<int64_t> bounded(Wide v) {
  if (v > kBig || v < -kBig) return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace

// What DimExpr's friends need of its insides.
struct DimExprOps {
  static std::string atom_text(const Atom& a, bool tight);
  static std::shared_ptr<const Atom> make(Kind kind, std::vector<DimExpr> args, std::string name = {});
  static std::shared_ptr<const Atom> product(const Atom& a, const Atom& b);
  static DimInterval atom_range(const Atom& a, const DimRanges& r);
  static Result<int64_t> atom_value(const Atom& a, const DimBindings& v);
  static bool single_atom(const DimExpr& e) {
    return e.constant_ == 0 && e.terms_.size() == 1 && e.terms_[0].coef == 1;
  }
  static const std::vector<DimExpr::Term>& terms(const DimExpr& e) { return e.terms_; }
  static int64_t constant_part(const DimExpr& e) { return e.constant_; }
  static DimExpr min_or_max(const DimExpr& a, const DimExpr& b, bool is_min);
  static DimExpr poisoned() {
    DimExpr e;
    e.overflow_ = true;
    return e;
  }
};

std::shared_ptr<const Atom> DimExprOps::make(Kind kind, std::vector<DimExpr> args, std::string name) {
  auto a = std::make_shared<Atom>();
  a->kind = kind;
  a->name = std::move(name);
  a->args = std::move(args);
  a->key = atom_text(*a, false);
  return a;
}

std::shared_ptr<const Atom> DimExprOps::product(const Atom& a, const Atom& b) {
  std::vector<DimExpr> factors;
  for (const Atom* x : {&a, &b}) {
    if (x->kind == Kind::product) {
      factors.insert(factors.end(), x->args.begin(), x->args.end());
    } else {
      factors.push_back(DimExpr::of_atom(make(x->kind, x->args, x->name)));
    }
  }
  std::sort(factors.begin(), factors.end(),
            [](const DimExpr& x, const DimExpr& y) { return x.terms_[0].atom->key < y.terms_[0].atom->key; });
  return make(Kind::product, std::move(factors));
}

// `tight`: the atom is a factor of a product or scaled by a coefficient, where a division must be
// parenthesized ("2*(N / 2)", not "2*N / 2", which reads as (2*N) / 2).
std::string DimExprOps::atom_text(const Atom& a, bool tight) {
  auto operand = [](const DimExpr& e) {
    const bool plain = e.is_constant() || (single_atom(e) && e.terms_[0].atom->kind == Kind::symbol);
    return plain ? e.to_string() : "(" + e.to_string() + ")";
  };
  switch (a.kind) {
    case Kind::symbol: return a.name;
    case Kind::product: {
      std::string s;
      for (const DimExpr& f : a.args) s += (s.empty() ? "" : "*") + atom_text(*f.terms_[0].atom, true);
      return s;
    }
    case Kind::floordiv:
    case Kind::mod: {
      std::string s = operand(a.args[0]) + (a.kind == Kind::floordiv ? " / " : " % ") + operand(a.args[1]);
      return tight ? "(" + s + ")" : s;
    }
    case Kind::min:
    case Kind::max:
      return fmt::format("{}({}, {})", a.kind == Kind::min ? "min" : "max", a.args[0].to_string(),
                         a.args[1].to_string());
  }
  return "?";
}

DimExpr DimExpr::symbol(std::string name) { return of_atom(DimExprOps::make(Atom::Kind::symbol, {}, std::move(name))); }

DimExpr DimExpr::of_atom(std::shared_ptr<const Atom> atom) {
  DimExpr e;
  e.terms_.push_back({std::move(atom), 1});
  return e;
}

void DimExpr::add_term(const std::shared_ptr<const Atom>& atom, int64_t coef) {
  auto it = std::lower_bound(terms_.begin(), terms_.end(), atom->key,
                             [](const Term& t, const std::string& k) { return t.atom->key < k; });
  if (it != terms_.end() && it->atom->key == atom->key) {
    if (!add_ok(it->coef, coef, it->coef)) overflow_ = true;
    if (it->coef == 0) terms_.erase(it);
  } else if (coef != 0) {
    terms_.insert(it, {atom, coef});
  }
}

std::optional<int64_t> DimExpr::constant() const {
  if (!is_constant()) return std::nullopt;
  return constant_;
}

bool DimExpr::is_symbol() const { return DimExprOps::single_atom(*this) && terms_[0].atom->kind == Atom::Kind::symbol; }

std::vector<std::string> DimExpr::symbols() const {
  std::vector<std::string> out;
  for (const Term& t : terms_) {
    if (t.atom->kind == Atom::Kind::symbol) out.push_back(t.atom->name);
    for (const DimExpr& a : t.atom->args) {
      std::vector<std::string> inner = a.symbols();
      out.insert(out.end(), inner.begin(), inner.end());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string DimExpr::to_string() const {
  if (overflow_) return "<overflow>";
  std::string s;
  for (const Term& t : terms_) {
    const int64_t c = t.coef;
    const bool negative = c < 0;
    // |c| as text: -c overflows for INT64_MIN, its unsigned magnitude does not.
    const uint64_t abs_c = negative ? uint64_t{0} - static_cast<uint64_t>(c) : static_cast<uint64_t>(c);
    const std::string magnitude = abs_c == 1 ? "" : fmt::format("{}*", abs_c);
    // A division or remainder is parenthesized after a coefficient or a leading minus: "-(N / 2)" is not
    // "-N / 2", which reads as (-N) / 2.
    const bool tight = !magnitude.empty() || (s.empty() && negative);
    const std::string body = magnitude + DimExprOps::atom_text(*t.atom, tight);
    if (s.empty()) {
      s = (negative ? "-" : "") + body;
    } else {
      s += (negative ? " - " : " + ") + body;
    }
  }
  if (s.empty()) return std::to_string(constant_);
  if (constant_ > 0) s += fmt::format(" + {}", constant_);
  if (constant_ < 0)
    s += " - " + (constant_ == INT64_MIN ? std::string("9223372036854775808") : std::to_string(-constant_));
  return s;
}

DimExpr operator+(const DimExpr& a, const DimExpr& b) {
  DimExpr r = a;
  r.overflow_ = a.overflow_ || b.overflow_;
  if (!add_ok(r.constant_, b.constant_, r.constant_)) r.overflow_ = true;
  for (const DimExpr::Term& t : b.terms_) r.add_term(t.atom, t.coef);
  return r;
}

DimExpr operator-(const DimExpr& a) { return DimExpr(-1) * a; }
DimExpr operator-(const DimExpr& a, const DimExpr& b) { return a + (-b); }

DimExpr operator*(const DimExpr& a, const DimExpr& b) {
  DimExpr r;
  r.overflow_ = a.overflow_ || b.overflow_;
  if (!mul_ok(a.constant_, b.constant_, r.constant_)) r.overflow_ = true;
  int64_t c = 0;
  for (const DimExpr::Term& t : a.terms_) {
    if (!mul_ok(t.coef, b.constant_, c)) r.overflow_ = true;
    r.add_term(t.atom, c);
  }
  for (const DimExpr::Term& t : b.terms_) {
    if (!mul_ok(t.coef, a.constant_, c)) r.overflow_ = true;
    r.add_term(t.atom, c);
  }
  for (const DimExpr::Term& x : a.terms_) {
    for (const DimExpr::Term& y : b.terms_) {
      if (!mul_ok(x.coef, y.coef, c)) r.overflow_ = true;
      r.add_term(DimExprOps::product(*x.atom, *y.atom), c);
    }
  }
  return r;
}

DimExpr floordiv(const DimExpr& a, const DimExpr& b) {
  if (a.overflow_ || b.overflow_) return DimExprOps::poisoned();
  if (auto d = b.constant()) {
    if (*d == 0) return DimExprOps::poisoned();
    if (auto n = a.constant()) {
      if (*n == INT64_MIN && *d == -1) return DimExprOps::poisoned();  // the quotient overflows
      return DimExpr(floor_div(*n, *d));
    }
    if (*d == 1) return a;
    if (*d > 0) {
      // floor((d*X + R) / d) = X + floor(R / d) for integer X: every coefficient and the constant are split
      // into a multiple of d, which comes out, and a remainder in [0, d), which stays inside. That makes
      // the form canonical: (N + 3) / 2 and (N + 1) / 2 + 1 are both "(N + 1) / 2 + 1", 3*N / 2 is
      // "N + N / 2".
      DimExpr whole, rest;
      whole.constant_ = floor_div(a.constant_, *d);
      rest.constant_ = a.constant_ - whole.constant_ * *d;
      for (const DimExpr::Term& t : a.terms_) {
        const int64_t q = floor_div(t.coef, *d);
        whole.add_term(t.atom, q);
        rest.add_term(t.atom, t.coef - q * *d);
      }
      if (rest.terms_.empty()) return whole;  // rest is a constant in [0, d): it adds nothing
      return whole + DimExpr::of_atom(DimExprOps::make(DimExpr::Atom::Kind::floordiv, {rest, b}));
    }
  }
  if (a == b) return DimExpr(1);
  return DimExpr::of_atom(DimExprOps::make(DimExpr::Atom::Kind::floordiv, {a, b}));
}

// For the positive divisors shapes have: ceil(a / b) = floor((a + b - 1) / b), the form people write.
DimExpr ceildiv(const DimExpr& a, const DimExpr& b) { return floordiv(a + b - 1, b); }

DimExpr mod(const DimExpr& a, const DimExpr& b) {
  if (auto n = a.constant(), d = b.constant(); n && d) {
    if (*d == 0) return DimExprOps::poisoned();
    if (*d == -1) return DimExpr(0);  // (and INT64_MIN / -1 would overflow)
    return DimExpr(*n - floor_div(*n, *d) * *d);
  }
  // By a positive constant, through floordiv's canonical form: (4*N + 1) % 2 is 1, N % 4 is N - 4*(N / 4).
  if (auto d = b.constant(); d && *d > 0) return a - b * floordiv(a, b);
  return DimExpr::of_atom(DimExprOps::make(DimExpr::Atom::Kind::mod, {a, b}));
}

DimExpr DimExprOps::min_or_max(const DimExpr& a, const DimExpr& b, bool is_min) {
  if (a.overflowed() || b.overflowed()) return poisoned();
  if (auto x = a.constant(), y = b.constant(); x && y) return DimExpr(is_min ? std::min(*x, *y) : std::max(*x, *y));
  if (a == b) return a;
  if (auto d = (a - b).constant()) return (*d <= 0) == is_min ? a : b;
  // Operands in canonical order: min(a, b) and min(b, a) are one atom.
  const bool swap = b.to_string() < a.to_string();
  return DimExpr::of_atom(
      make(is_min ? Kind::min : Kind::max, swap ? std::vector<DimExpr>{b, a} : std::vector<DimExpr>{a, b}));
}

DimExpr min(const DimExpr& a, const DimExpr& b) { return DimExprOps::min_or_max(a, b, true); }
DimExpr max(const DimExpr& a, const DimExpr& b) { return DimExprOps::min_or_max(a, b, false); }

bool operator==(const DimExpr& a, const DimExpr& b) {
  if (a.overflow_ || b.overflow_ || a.constant_ != b.constant_ || a.terms_.size() != b.terms_.size()) return false;
  for (size_t i = 0; i < a.terms_.size(); ++i) {
    if (a.terms_[i].coef != b.terms_[i].coef || a.terms_[i].atom->key != b.terms_[i].atom->key) return false;
  }
  return true;
}

}  // namespace kiln

namespace kiln {

// ---- values and ranges ----------------------------------------------------------------------------------

Result<int64_t> DimExprOps::atom_value(const Atom& a, const DimBindings& v) {
  if (a.kind == Kind::symbol) {
    auto it = v.find(a.name);
    if (it == v.end()) return invalid_argument(fmt::format("the symbol '{}' has no value", a.name));
    return it->second;
  }
  std::vector<int64_t> x;
  for (const DimExpr& e : a.args) {
    KILN_ASSIGN_OR_RETURN(int64_t value, e.evaluate(v));
    x.push_back(value);
  }
  int64_t out = 1;
  switch (a.kind) {
    case Kind::product:
      for (int64_t f : x)
        if (!mul_ok(out, f, out)) return invalid_argument(fmt::format("'{}' overflows int64", a.key));
      return out;
    case Kind::floordiv:
    case Kind::mod:
      if (x[1] == 0) return invalid_argument(fmt::format("'{}' divides by zero", a.key));
      if (x[0] == INT64_MIN && x[1] == -1) return invalid_argument(fmt::format("'{}' overflows int64", a.key));
      return a.kind == Kind::floordiv ? floor_div(x[0], x[1]) : x[0] - floor_div(x[0], x[1]) * x[1];
    case Kind::min: return std::min(x[0], x[1]);
    case Kind::max: return std::max(x[0], x[1]);
    case Kind::symbol: break;
  }
  return out;
}

Result<int64_t> DimExpr::evaluate(const DimBindings& values) const {
  if (overflow_) return invalid_argument("the dim expression overflowed int64 when it was formed");
  int64_t sum = constant_, term = 0;
  for (const Term& t : terms_) {
    KILN_ASSIGN_OR_RETURN(const int64_t v, DimExprOps::atom_value(*t.atom, values));
    if (!mul_ok(t.coef, v, term) || !add_ok(sum, term, sum))
      return invalid_argument(fmt::format("'{}' overflows int64", to_string()));
  }
  return sum;
}

namespace {

// Interval arithmetic on optional ends (absent: unbounded), in 128 bits, clamped back to +-2^62.
struct Iv {
  std::optional<int64_t> lo, hi;
};
Iv scale(const Iv& x, int64_t c) {
  auto mul = [&](const std::optional<int64_t>& e) -> std::optional<int64_t> {
    if (!e) return std::nullopt;
    return bounded(static_cast<Wide>(*e) * c);
  };
  if (c >= 0) return {c == 0 ? 0 : mul(x.lo), c == 0 ? 0 : mul(x.hi)};
  return {mul(x.hi), mul(x.lo)};
}
Iv add(const Iv& a, const Iv& b) {
  auto sum = [](const std::optional<int64_t>& x, const std::optional<int64_t>& y) -> std::optional<int64_t> {
    if (!x || !y) return std::nullopt;
    return bounded(static_cast<Wide>(*x) + *y);
  };
  return {sum(a.lo, b.lo), sum(a.hi, b.hi)};
}
Iv iv_product(const Iv& a, const Iv& b) {
  if (!a.lo || !a.hi || !b.lo || !b.hi) return {};
  Wide c[4] = {static_cast<Wide>(*a.lo) * *b.lo, static_cast<Wide>(*a.lo) * *b.hi, static_cast<Wide>(*a.hi) * *b.lo,
               static_cast<Wide>(*a.hi) * *b.hi};
  return {bounded(*std::min_element(c, c + 4)), bounded(*std::max_element(c, c + 4))};
}

}  // namespace

DimInterval DimExprOps::atom_range(const Atom& a, const DimRanges& r) {
  if (a.kind == Kind::symbol) {
    auto it = r.find(a.name);
    if (it == r.end()) return {};
    return {it->second.min, it->second.max};
  }
  std::vector<Iv> x;
  for (const DimExpr& e : a.args) {
    const DimInterval d = e.range(r);
    x.push_back({d.lo, d.hi});
  }
  Iv out;
  switch (a.kind) {
    case Kind::product:
      out = {1, 1};
      for (const Iv& f : x) out = iv_product(out, f);
      break;
    case Kind::floordiv:
      // By a positive divisor (the only kind shapes make): floor is monotone in the numerator, and over a
      // divisor range the extremes lie at its ends.
      if (x[1].lo && *x[1].lo > 0 && x[0].lo && x[0].hi) {
        const int64_t d_lo = *x[1].lo, d_hi = x[1].hi.value_or(d_lo);
        const int64_t c[4] = {floor_div(*x[0].lo, d_lo), floor_div(*x[0].lo, d_hi), floor_div(*x[0].hi, d_lo),
                              floor_div(*x[0].hi, d_hi)};
        out = {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
      }
      break;
    case Kind::mod:
      if (x[1].lo && *x[1].lo > 0) out = {0, x[1].hi ? std::optional<int64_t>(*x[1].hi - 1) : std::nullopt};
      break;
    case Kind::min:
      out.lo = x[0].lo && x[1].lo ? std::optional<int64_t>(std::min(*x[0].lo, *x[1].lo)) : std::nullopt;
      out.hi = !x[0].hi ? x[1].hi : !x[1].hi ? x[0].hi : std::optional<int64_t>(std::min(*x[0].hi, *x[1].hi));
      break;
    case Kind::max:
      out.hi = x[0].hi && x[1].hi ? std::optional<int64_t>(std::max(*x[0].hi, *x[1].hi)) : std::nullopt;
      out.lo = !x[0].lo ? x[1].lo : !x[1].lo ? x[0].lo : std::optional<int64_t>(std::max(*x[0].lo, *x[1].lo));
      break;
    case Kind::symbol: break;
  }
  return {out.lo, out.hi};
}

DimInterval DimExpr::range(const DimRanges& ranges) const {
  if (overflow_) return {};
  Iv sum{constant_, constant_};
  for (const Term& t : terms_) {
    const DimInterval a = DimExprOps::atom_range(*t.atom, ranges);
    sum = add(sum, scale({a.lo, a.hi}, t.coef));
  }
  return {sum.lo, sum.hi};
}

std::string ranges_text(const DimRanges& ranges) {
  std::string s;
  for (const auto& [name, r] : ranges) s += fmt::format("{}{} in [{}, {}]", s.empty() ? "" : ", ", name, r.min, r.max);
  return s;
}

std::string bindings_text(const DimBindings& values) {
  std::string s;
  for (const auto& [name, v] : values) s += fmt::format("{}{} = {}", s.empty() ? "" : ", ", name, v);
  return s;
}

DimBindings range_ends(const DimRanges& ranges, bool top) {
  DimBindings out;
  for (const auto& [name, r] : ranges) out[name] = top ? r.max : r.min;
  return out;
}

// ---- decisions ------------------------------------------------------------------------------------------

Tri dim_at_least(const DimExpr& a, int64_t bound, const DimRanges& ranges) {
  const DimInterval r = a.range(ranges);
  if (r.lo && *r.lo >= bound) return Tri::yes;
  if (r.hi && *r.hi < bound) return Tri::no;
  return Tri::unknown;
}

Tri dims_equal(const DimExpr& a, const DimExpr& b, const DimRanges& ranges) {
  if (a.overflowed() || b.overflowed()) return Tri::unknown;
  if (a == b) return Tri::yes;
  const DimExpr diff = a - b;
  if (auto c = diff.constant()) return *c == 0 ? Tri::yes : Tri::no;
  const DimInterval r = diff.range(ranges);
  if ((r.lo && *r.lo > 0) || (r.hi && *r.hi < 0)) return Tri::no;
  if (r.lo && r.hi && *r.lo == 0 && *r.hi == 0) return Tri::yes;
  return Tri::unknown;
}

Tri dim_divisible(const DimExpr& a, int64_t divisor, const DimRanges& ranges) {
  if (divisor == 0 || a.overflowed()) return Tri::unknown;
  const DimExpr m = mod(a, DimExpr(divisor));
  if (auto c = m.constant()) return *c == 0 ? Tri::yes : Tri::no;
  const DimInterval r = a.range(ranges);
  if (r.lo && r.hi && *r.lo == *r.hi) return *r.lo % divisor == 0 ? Tri::yes : Tri::no;
  return Tri::unknown;
}

}  // namespace kiln
