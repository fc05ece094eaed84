// Parsing symbolic dims (include/kiln/dim_expr.h): the text DimExpr::to_string writes, by recursive descent.
#include <cctype>
#include <string>

#include <fmt/format.h>

#include "kiln/dim_expr.h"

namespace kiln {

// ---- parsing --------------------------------------------------------------------------------------------

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}
  Result<DimExpr> all() {
    KILN_ASSIGN_OR_RETURN(DimExpr e, sum());
    skip();
    if (at_ < s_.size()) return error("an operator or the end");
    return e;
  }

 private:
  std::string_view s_;
  size_t at_ = 0;
  int depth_ = 0;

  void skip() {
    while (at_ < s_.size() && s_[at_] == ' ') ++at_;
  }
  bool eat(char c) {
    skip();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  Status error(std::string_view expected) const {
    return invalid_argument(fmt::format("dim expression '{}': expected {} at offset {}{}", s_, expected, at_,
                                        at_ < s_.size() ? fmt::format(" ('{}')", s_[at_]) : std::string(" (the end)")));
  }
  Result<DimExpr> sum() {
    KILN_ASSIGN_OR_RETURN(DimExpr e, product_());
    for (;;) {
      if (eat('+')) {
        KILN_ASSIGN_OR_RETURN(DimExpr r, product_());
        e = e + r;
      } else if (eat('-')) {
        KILN_ASSIGN_OR_RETURN(DimExpr r, product_());
        e = e - r;
      } else {
        return e;
      }
    }
  }
  Result<DimExpr> product_() {
    KILN_ASSIGN_OR_RETURN(DimExpr e, factor());
    for (;;) {
      char op = 0;
      for (char c : {'*', '/', '%'})
        if (!op && eat(c)) op = c;
      if (!op) return e;
      KILN_ASSIGN_OR_RETURN(DimExpr r, factor());
      if (op != '*' && r.constant() == std::optional<int64_t>(0)) return error("a divisor other than 0");
      e = op == '*' ? e * r : op == '/' ? floordiv(e, r) : mod(e, r);
    }
  }
  Result<DimExpr> factor() {
    if (++depth_ > 64) return error("less nesting (at most 64 levels)");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    skip();
    if (eat('-')) {
      KILN_ASSIGN_OR_RETURN(DimExpr e, factor());
      return -e;
    }
    if (eat('(')) {
      KILN_ASSIGN_OR_RETURN(DimExpr e, sum());
      if (!eat(')')) return error("')'");
      return e;
    }
    if (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) {
      int64_t v = 0;
      while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[at_] - '0', &v))
          return error("a number that fits in int64");
        ++at_;
      }
      return DimExpr(v);
    }
    if (at_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_')) {
      const size_t start = at_;
      while (at_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_')) ++at_;
      const std::string name(s_.substr(start, at_ - start));
      if (name != "min" && name != "max" && name != "ceildiv") return DimExpr::symbol(name);
      if (!eat('(')) return error("'(' after " + name);
      KILN_ASSIGN_OR_RETURN(DimExpr a, sum());
      if (!eat(',')) return error("','");
      KILN_ASSIGN_OR_RETURN(DimExpr b, sum());
      if (!eat(')')) return error("')'");
      if (name == "ceildiv" && b.constant() == std::optional<int64_t>(0)) return error("a divisor other than 0");
      return name == "min" ? min(a, b) : name == "max" ? max(a, b) : ceildiv(a, b);
    }
    return error("a number, a symbol or '('");
  }
};

}  // namespace

Result<DimExpr> DimExpr::parse(std::string_view text) {
  if (text.size() > 4096) return invalid_argument("dim expression: longer than 4096 characters");
  return Parser(text).all();
}

}  // namespace kiln
