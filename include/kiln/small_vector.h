// SmallVector: a vector that keeps its first N elements inside itself, for a node's ports and outputs.
//
// Why kiln has its own: a node reads one tensor per port on almost every op, and as std::vector<std::vector>
// each port was a heap block of its own. Planning a 100k-node graph copies and rebuilds every node several
// times, and those blocks (five per conv) were a fifth of the planner's time in malloc and free, growing
// faster than the graph from cache misses. Boost's small_vector does this, but would make Boost a
// dependency of kiln's public headers for one type; this one holds only what the nodes use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln {

// T must be default-constructible and movable: the N inline slots always hold constructed elements (past
// size(), default values or moved-from ones), which keeps copying and growing simple.
template <class T, size_t N>
class SmallVector {
 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;
  using size_type = size_t;

  SmallVector() = default;
  SmallVector(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
  explicit SmallVector(size_t n, const T& value = T{}) { resize(n, value); }
  template <class It>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  // From a std::vector, as the API's callers build ports.
  SmallVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit by design
  // A vector of vectors into a SmallVector of SmallVectors. Only where T is built from a U and U is no
  // number (an int could otherwise become a Tensor through aggregate initialization).
  template <class U>
  requires(!std::is_same_v<U, T> && !std::is_arithmetic_v<U> && std::is_constructible_v<T, const U&>)
      SmallVector(const std::vector<U>& v) {  // NOLINT: implicit by design
    reserve(v.size());
    for (const U& u : v) push_back(T(u));
  }
  template <class U>
  requires(!std::is_same_v<U, T> && !std::is_arithmetic_v<U> && std::is_constructible_v<T, U&&>)
      SmallVector(std::vector<U>&& v) {  // NOLINT: implicit by design
    reserve(v.size());
    for (U& u : v) push_back(T(std::move(u)));
  }

  SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
  SmallVector(SmallVector&& o) noexcept { take(std::move(o)); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      take(std::move(o));
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> items) {
    assign(items.begin(), items.end());
    return *this;
  }
  ~SmallVector() {
    if (on_heap()) delete[] s_.heap_;
  }

  T* data() { return on_heap() ? s_.heap_ : s_.inline_; }
  const T* data() const { return on_heap() ? s_.heap_ : s_.inline_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    T* grown = new T[n];
    if (on_heap()) {
      std::move(s_.heap_, s_.heap_ + size_, grown);
      delete[] s_.heap_;
    } else {  // before s_.heap_ is written: packed, it overlays the inline slots
      std::move(s_.inline_, s_.inline_ + std::min<size_t>(size_, N), grown);  // (the bound: see take())
    }
    s_.heap_ = grown;
    cap_ = static_cast<uint32_t>(n);
  }
  void push_back(T v) {  // by value: `v` may be an element, which reserve() moves
    if (size_ == cap_) reserve(2 * size_t{cap_} + 1);
    data()[size_++] = std::move(v);
  }
  template <class... A>
  T& emplace_back(A&&... a) {
    push_back(T(std::forward<A>(a)...));
    return back();
  }
  void pop_back() { data()[--size_] = T{}; }
  void clear() {
    for (T& v : *this) v = T{};
    size_ = 0;
  }
  void resize(size_t n, const T& fill = T{}) {
    const T value = fill;  // `fill` may be an element, which reserve() moves
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    for (size_t i = n; i < size_; ++i) data()[i] = T{};
    size_ = static_cast<uint32_t>(n);
  }
  template <class It>
  void assign(It first, It last) {
    clear();
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) data()[size_++] = *first;
  }
  // Appends [first, last) (the only insert the nodes' users make).
  template <class It>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - begin());
    const size_t n = static_cast<size_t>(std::distance(first, last));
    reserve(size_ + n);
    std::move_backward(begin() + at, end(), end() + n);
    std::copy(first, last, begin() + at);
    size_ += static_cast<uint32_t>(n);
    return begin() + at;
  }
  iterator erase(const_iterator pos) {
    const size_t at = static_cast<size_t>(pos - begin());
    std::move(begin() + at + 1, end(), begin() + at);
    pop_back();
    return begin() + at;
  }

  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT: implicit by design

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  // Packed, the inline slots overlay the heap pointer: a port of one Tensor takes 16 bytes instead of 24
  // (a node's ports and outputs went from 136 to 96 bytes). Only for elements that need no destructor and
  // fit in the pointer; which of the two is live follows from cap_ (on_heap()).
  static constexpr bool kPacked = std::is_trivially_copyable_v<T> && N * sizeof(T) <= sizeof(T*);
  struct Separate {
    T inline_[N]{};
    T* heap_ = nullptr;
  };
  union Overlaid {
    T inline_[N];
    T* heap_;
    Overlaid() : inline_{} {}
  };

  bool on_heap() const { return cap_ > N; }
  // Back to empty inline slots (the heap block, if any, freed).
  void release() {
    if (on_heap()) {
      delete[] s_.heap_;
      reset_inline();
    }
    size_ = 0;
    cap_ = N;
  }
  void reset_inline() {
    if constexpr (kPacked) {
      for (size_t i = 0; i < N; ++i) s_.inline_[i] = T{};
    } else {
      s_.heap_ = nullptr;
    }
  }
  // Moves o's elements in (this is empty with inline capacity): a heap block changes hands, inline
  // elements are moved one by one.
  void take(SmallVector&& o) {
    if (o.on_heap()) {
      T* block = o.s_.heap_;
      o.reset_inline();
      s_.heap_ = block;
      cap_ = o.cap_;
    } else {
      // Inline, o holds at most N: the bound is said again for GCC's -Warray-bounds, which cannot see it.
      std::move(o.s_.inline_, o.s_.inline_ + std::min<size_t>(o.size_, N), s_.inline_);
    }
    size_ = o.size_;
    o.size_ = 0;
    o.cap_ = N;
  }

  std::conditional_t<kPacked, Overlaid, Separate> s_;
  uint32_t size_ = 0, cap_ = N;
};

}  // namespace kiln
