// A node's attributes: name -> value, kept sorted by name in one flat array.
//
// The interface is the subset of std::map that kiln uses (find, at, operator[], iteration in name order).
// Why not std::map: a node has a handful of attributes, and a map spends a heap block per attribute and
// touches its first block whenever the node moves (its root points back at the header). Planning a
// 100k-node graph moves and reads every node; with one array per node that is one block, never touched
// by a move.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/status.h"

namespace kiln {

// An attribute value. Int lists and float lists are distinct types; the op's schema coerces ints to
// floats where a float is expected.
using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

class Attrs {
 public:
  using value_type = std::pair<std::string, AttrValue>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  Attrs() = default;
  // As std::map's: for a name given twice, the first value stays.
  Attrs(std::initializer_list<value_type> items) {
    for (const value_type& v : items) emplace(v.first, v.second);
  }

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

  iterator find(std::string_view name) {
    auto it = lower(name);
    return it != items_.end() && it->first == name ? it : items_.end();
  }
  const_iterator find(std::string_view name) const { return const_cast<Attrs*>(this)->find(name); }
  bool contains(std::string_view name) const { return find(name) != end(); }
  size_t count(std::string_view name) const { return contains(name) ? 1 : 0; }
  const AttrValue& at(std::string_view name) const {
    auto it = find(name);
    // kiln's API throws nothing: asking for an attribute a node does not have is a bug of the caller (the
    // registry fills every attribute in, defaults included, when a node is built).
    KILN_CHECK(it != end(), "Attrs::at: no attribute " + std::string(name));
    return it->second;
  }
  AttrValue& at(std::string_view name) { return const_cast<AttrValue&>(std::as_const(*this).at(name)); }
  // The value under `name`, inserted (int 0, as std::map's default) when absent.
  AttrValue& operator[](std::string_view name) {
    auto it = lower(name);
    if (it != items_.end() && it->first == name) return it->second;
    return items_.emplace(it, std::string(name), int64_t{0})->second;
  }

  // Inserts when `name` is absent; returns the entry and whether it was inserted.
  std::pair<iterator, bool> emplace(std::string name, AttrValue value) {
    auto it = lower(name);
    if (it != items_.end() && it->first == name) return {it, false};
    return {items_.emplace(it, std::move(name), std::move(value)), true};
  }
  std::pair<iterator, bool> insert_or_assign(std::string name, AttrValue value) {
    auto [it, inserted] = emplace(std::move(name), AttrValue{});
    it->second = std::move(value);
    return {it, inserted};
  }
  size_t erase(std::string_view name) {
    auto it = find(name);
    if (it == end()) return 0;
    items_.erase(it);
    return 1;
  }

  bool operator==(const Attrs&) const = default;

 private:
  iterator lower(std::string_view name) {
    return std::lower_bound(items_.begin(), items_.end(), name,
                            [](const value_type& v, std::string_view n) { return v.first < n; });
  }
  std::vector<value_type> items_;  // sorted by name, names unique
};

}  // namespace kiln
