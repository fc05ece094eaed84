// Graph's name index: open addressing over (hash, position); names are read back from the tensors and
// nodes, so the index stores no strings.
#include "kiln/graph.h"

#include <algorithm>
#include <functional>

namespace kiln {

uint32_t Graph::NameIndex::hash(std::string_view name) {
  return static_cast<uint32_t>(std::hash<std::string_view>{}(name));
}

void Graph::NameIndex::insert(uint32_t h, int32_t index) {
  if ((used_ + 1) * 2 > slots_.size()) rehash(std::max<size_t>(16, slots_.size() * 2));
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].index != kEmpty) i = (i + 1) & mask;
  slots_[i] = {h, index};
  ++used_;
}

void Graph::NameIndex::reserve(size_t n) {
  size_t want = 16;
  while (want < 2 * n) want *= 2;
  if (want > slots_.size()) rehash(want);
}

void Graph::NameIndex::renumber(const std::vector<int32_t>& perm) {
  for (Slot& s : slots_)
    if (s.index >= 0) s.index = perm[static_cast<size_t>(s.index)];
}

// Moves the live entries into `slots` slots (their stored hashes give their places; erased ones are dropped).
void Graph::NameIndex::rehash(size_t slots) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot{});
  used_ = 0;
  for (const Slot& s : old) {
    if (s.index >= 0) insert(s.hash, s.index);
  }
}

}  // namespace kiln
