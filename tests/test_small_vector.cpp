// SmallVector: the inline/heap transitions, copies and moves, for both storage forms: packed (a port's
// Tensor overlays the heap pointer) and separate (a node's ports, elements with destructors). Run under
// the sanitizer build, a leak, double free or use of a freed block fails here.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/graph.h"
#include "kiln/small_vector.h"

namespace kiln {
namespace {

std::vector<int32_t> ids(const PortTensors& v) {
  std::vector<int32_t> out;
  for (Tensor t : v) out.push_back(t.id);
  return out;
}

TEST(SmallVector, APortOfOneTensorIsTwoWordsAndANodeFitsFourCacheLines) {
  static_assert(sizeof(PortTensors) == 16);
  static_assert(sizeof(NodeOutputs) == 16);
  static_assert(sizeof(NodeInputs) == 80);
  EXPECT_LE(sizeof(Node), 256u);
}

TEST(SmallVector, PackedGrowsOutOfItsSlotAndKeepsItsElements) {
  PortTensors v;
  EXPECT_TRUE(v.empty());
  v.push_back(Tensor{7});
  EXPECT_EQ(v.capacity(), 1u);  // inline
  EXPECT_EQ(ids(v), (std::vector<int32_t>{7}));
  for (int32_t i = 8; i < 40; ++i) v.push_back(Tensor{i});  // onto the heap, regrown several times
  ASSERT_EQ(v.size(), 33u);
  EXPECT_GT(v.capacity(), 1u);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i].id, static_cast<int32_t>(7 + i));
  v.erase(v.begin() + 1);
  EXPECT_EQ(v[1].id, 9);
  EXPECT_EQ(v.size(), 32u);
  v.clear();
  EXPECT_TRUE(v.empty());
  v.push_back(Tensor{3});  // the heap block is reused
  EXPECT_EQ(ids(v), (std::vector<int32_t>{3}));
}

TEST(SmallVector, PackedCopiesAndMovesBetweenInlineAndHeap) {
  PortTensors one{Tensor{1}};
  PortTensors many{Tensor{1}, Tensor{2}, Tensor{3}};
  PortTensors copy = many;  // heap copy: its own block
  copy[0] = Tensor{10};
  EXPECT_EQ(ids(many), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids(copy), (std::vector<int32_t>{10, 2, 3}));

  PortTensors moved = std::move(many);  // the block changes hands; the source is an empty inline vector
  EXPECT_EQ(ids(moved), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(many.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_EQ(many.capacity(), 1u);
  many.push_back(Tensor{5});
  EXPECT_EQ(ids(many), (std::vector<int32_t>{5}));

  moved = one;  // heap to inline contents (keeps its block)
  EXPECT_EQ(ids(moved), (std::vector<int32_t>{1}));
  one = std::move(copy);  // inline vector takes a heap block
  EXPECT_EQ(ids(one), (std::vector<int32_t>{10, 2, 3}));
  copy = std::move(one);
  one = std::move(copy);
  EXPECT_EQ(ids(one), (std::vector<int32_t>{10, 2, 3}));
  PortTensors empty;
  one = std::move(empty);  // a heap vector becomes empty and inline again
  EXPECT_TRUE(one.empty());
  EXPECT_EQ(one.capacity(), 1u);
  one.resize(3, Tensor{4});
  EXPECT_EQ(ids(one), (std::vector<int32_t>{4, 4, 4}));
  one.resize(1);
  EXPECT_EQ(ids(one), (std::vector<int32_t>{4}));
}

TEST(SmallVector, SeparateStorageHoldsElementsWithDestructors) {
  SmallVector<std::string, 2> v{"a fairly long string that lives on the heap", "b"};
  v.push_back("c");   // third element: onto the heap
  v.push_back(v[0]);  // an element of itself, while it grows
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[3], "a fairly long string that lives on the heap");
  SmallVector<std::string, 2> w = v;
  SmallVector<std::string, 2> x = std::move(v);
  EXPECT_EQ(w, x);
  EXPECT_TRUE(v.empty());  // NOLINT(bugprone-use-after-move)
  v = x;
  x = SmallVector<std::string, 2>{"z"};
  EXPECT_EQ(x.size(), 1u);
  EXPECT_EQ(v.back(), w.back());
}

TEST(SmallVector, NodeInputsNestPortsOfEveryLength) {
  NodeInputs ins{{Tensor{1}}, {}, {Tensor{2}, Tensor{3}}, {Tensor{4}}, {Tensor{5}}};  // five ports: heap
  NodeInputs copy = ins;
  NodeInputs moved = std::move(ins);
  ASSERT_EQ(copy.size(), 5u);
  EXPECT_EQ(copy, moved);
  EXPECT_TRUE(moved[1].empty());
  EXPECT_EQ(ids(moved[2]), (std::vector<int32_t>{2, 3}));
  std::vector<std::vector<Tensor>> as_vectors{{Tensor{9}}, {Tensor{8}, Tensor{7}}};
  NodeInputs from(as_vectors);
  EXPECT_EQ(ids(from[1]), (std::vector<int32_t>{8, 7}));
}

}  // namespace
}  // namespace kiln
