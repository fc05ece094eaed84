// JSON values read as attribute values and integers.
#include "json/json_attr_values.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "json/json_messages.h"

namespace kiln::json_detail {

bool json_kind_fits(const AttrSpec& s, const json& v) {
  auto all = [&](auto pred) { return std::all_of(v.begin(), v.end(), pred); };
  switch (s.type) {
    case AttrType::int_: return v.is_number_integer();
    case AttrType::float_: return v.is_number();
    case AttrType::bool_: return v.is_boolean();
    case AttrType::string: return v.is_string();
    case AttrType::ints:
      return v.is_number_integer() || (v.is_array() && all([](const json& e) { return e.is_number_integer(); }));
    case AttrType::floats: return v.is_number() || (v.is_array() && all([](const json& e) { return e.is_number(); }));
  }
  return true;
}

std::optional<int64_t> as_int64(const json& v, std::string* why) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      *why = fmt::format("{} does not fit in a 64-bit signed integer", u);
      return std::nullopt;
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    // nlohmann reads integers beyond 64 bits as floats.
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) >= 9.2e18) {
      *why = fmt::format("{} does not fit in a 64-bit signed integer", shown(v));
      return std::nullopt;
    }
  }
  *why = fmt::format("expected an integer, got {}", shown(v));
  return std::nullopt;
}

std::optional<AttrValue> to_attr_value(const json& v, std::string* why, std::string* where) {
  switch (v.type()) {
    case json::value_t::boolean: return AttrValue{v.get<bool>()};
    case json::value_t::string: return AttrValue{v.get<std::string>()};
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: {
      auto i = as_int64(v, why);
      if (!i) return std::nullopt;
      return AttrValue{*i};
    }
    case json::value_t::number_float: return AttrValue{v.get<double>()};
    case json::value_t::array: {
      std::vector<int64_t> ints;
      std::vector<double> floats;
      bool any_float = false;
      for (size_t k = 0; k < v.size(); ++k) {
        const json& e = v[k];
        if (e.is_number_float()) {
          any_float = true;
          floats.push_back(e.get<double>());
          continue;
        }
        if (e.is_number()) {
          auto i = as_int64(e, why);
          if (!i) {
            *where = fmt::format("/{}", k);
            return std::nullopt;
          }
          ints.push_back(*i);
          floats.push_back(static_cast<double>(*i));
          continue;
        }
        *why = fmt::format("expected a list of numbers, got {} at index {}", shown(e), k);
        *where = fmt::format("/{}", k);
        return std::nullopt;
      }
      if (any_float) return AttrValue{std::move(floats)};
      return AttrValue{std::move(ints)};
    }
    default: break;
  }
  *why = fmt::format("expected a number, true or false, a string or a list of numbers, got {}", shown(v));
  return std::nullopt;
}

}  // namespace kiln::json_detail
