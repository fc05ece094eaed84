// Side tables keyed by a graph's ids: one value per tensor (PerTensor, indexed by the Tensor handle) or
// per node or group (PerIndex, indexed by the int32_t index that TensorInfo::producer, Group::nodes and
// Group::id hold).
//
// The passes and backends keep dozens of these. As std::vectors every read was
// `v[static_cast<size_t>(t.id)]`, and a cast at every index hid which table was read by what; a table
// also cannot be read by a tensor where it holds nodes. Indexing is unchecked, as std::vector's is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/graph.h"
#include "kiln/plan.h"

namespace kiln {

template <class Key, class T>
class IdTable {
 public:
  using reference = typename std::vector<T>::reference;
  using const_reference = typename std::vector<T>::const_reference;

  IdTable() = default;
  explicit IdTable(size_t n, const T& init = T{}) : v_(n, init) {}

  reference operator[](Key k) { return v_[index(k)]; }
  const_reference operator[](Key k) const { return v_[index(k)]; }
  // Only the key itself: a size_t or a tensor for a node table would otherwise convert silently.
  template <class Other>
  reference operator[](Other) = delete;
  template <class Other>
  const_reference operator[](Other) const = delete;
  size_t size() const { return v_.size(); }
  void assign(size_t n, const T& init) { v_.assign(n, init); }
  void resize(size_t n, const T& init = T{}) { v_.resize(n, init); }
  void push_back(T v) { v_.push_back(std::move(v)); }
  auto begin() { return v_.begin(); }
  auto end() { return v_.end(); }
  auto begin() const { return v_.begin(); }
  auto end() const { return v_.end(); }
  const std::vector<T>& values() const { return v_; }

 private:
  static size_t index(Tensor t) { return static_cast<size_t>(t.id); }
  static size_t index(int32_t i) { return static_cast<size_t>(i); }
  std::vector<T> v_;
};

// One T per tensor of a graph: PerTensor<int32_t> last_reader(g.tensors().size(), -1); last_reader[t].
template <class T>
using PerTensor = IdTable<Tensor, T>;
// One T per node (or per group): PerIndex<int32_t> group_of(g.nodes().size(), -1); group_of[n].
template <class T>
using PerIndex = IdTable<int32_t, T>;

// The group of every node of a plan (-1: none), by node index.
inline PerIndex<int32_t> group_of_nodes(const Plan& p) {
  PerIndex<int32_t> group_of(p.graph.nodes().size(), -1);
  for (const Group& grp : p.groups)
    for (int32_t n : grp.nodes) group_of[n] = grp.id;
  return group_of;
}

// Every tensor of `g` in id order: `for (Tensor t : tensors_of(g))` rather than a size_t loop and a cast.
// (Not std::views::iota: clang 14, the sanitizer build's compiler, cannot compile libstdc++ 12's <ranges>.)
class TensorIds {
 public:
  struct iterator {
    int32_t id;
    Tensor operator*() const { return Tensor{id}; }
    iterator& operator++() {
      ++id;
      return *this;
    }
    bool operator==(const iterator&) const = default;
  };
  explicit TensorIds(int32_t count) : count_(count) {}
  iterator begin() const { return {0}; }
  iterator end() const { return {count_}; }

 private:
  int32_t count_;
};
inline TensorIds tensors_of(const Graph& g) { return TensorIds(static_cast<int32_t>(g.tensors().size())); }

}  // namespace kiln
