// The graph builder: naming, default layouts, graph-level errors, equality.
#include <gtest/gtest.h>

#include "kiln/graph.h"
#include "kiln/json.h"

namespace kiln {
namespace {

bool contains(const Status& st, const std::string& needle) { return st.message().find(needle) != std::string::npos; }

TEST(Graph, BuildsVerifiesAndInfersWhileBuilding) {
  Graph g("block");
  Tensor x = g.input("x", {1, 3, 8, 8});
  Tensor w = g.parameter("w", {4, 3, 3, 3});
  Tensor y = g.relu(g.conv2d(x, w, {.padding = {1, 1}}, "conv"), "act");
  EXPECT_EQ(g.shape(y), (Shape{1, 4, 8, 8}));  // known before verify()
  g.output(y, "out");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  EXPECT_EQ(g.tensor(y).name, "out");
  EXPECT_EQ(g.tensor(x).layout, Layout::NCHW);
  EXPECT_EQ(g.tensor(w).layout, Layout::KCRS);  // a 4-D tensor read as a conv weight
  EXPECT_EQ(g.tensor(w).kind, TensorKind::parameter);
  EXPECT_EQ(g.nodes()[0].name, "conv");
  EXPECT_EQ(g.bound_tensors().size(), 2u);
  EXPECT_EQ(g.find_tensor("out"), y);
  EXPECT_FALSE(g.find_tensor("nope"));
}

TEST(Graph, AutoNamesAreUniqueAndOutputsFollowTheNode) {
  Graph g;
  Tensor x = g.input("x", {4});
  Tensor a = g.relu(x);
  Tensor b = g.relu(a);
  EXPECT_EQ(g.nodes()[0].name, "relu_0");
  EXPECT_EQ(g.nodes()[1].name, "relu_1");
  EXPECT_EQ(g.tensor(a).name, "relu_0");
  EXPECT_EQ(g.tensor(b).producer, 1);
  g.output(b);
  EXPECT_TRUE(g.verify().ok());
}

TEST(Graph, LayoutsPropagateAndOutputsMayDeclareTheirs) {
  Graph g;
  Tensor x = g.input("x", {1, 8, 4, 4}, DType::f16, Layout::NHWC);
  Tensor w = g.parameter("w", {8, 8, 1, 1}, DType::f16, Layout::KRSC);
  Tensor y = g.silu(g.conv2d(x, w));
  EXPECT_EQ(g.tensor(y).layout, Layout::NHWC);
  EXPECT_EQ(g.dtype(y), DType::f16);
  Tensor z = g.global_avg_pool(y);
  g.output(z, "pooled", Layout::NCHW);
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  EXPECT_EQ(g.tensor(z).layout, Layout::NCHW);
  Tensor f = g.reshape(z, {1, 8});
  g.output(f, "flat", Layout::NHWC);
  Status st = g.verify();
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st, "output 'flat': layout NHWC needs 4 dims, got [1, 8]")) << st.message();
}

TEST(Graph, GraphLevelErrors) {
  {
    Graph g;
    g.input("x", {2});
    Status st = g.verify();
    EXPECT_TRUE(contains(st, "the graph has no outputs")) << st.message();
  }
  {
    Graph g;
    Tensor x = g.input("x", {2});
    g.input("x", {3});
    g.output(x);
    Status st = g.verify();
    EXPECT_TRUE(contains(st, "duplicate tensor name 'x'")) << st.message();
    EXPECT_TRUE(contains(st, "output 'x' is a graph input")) << st.message();
  }
  {
    Graph g;
    Tensor x = g.input("x", {2, 0});
    g.output(g.relu(x));
    Status st = g.verify();
    EXPECT_TRUE(contains(st, "tensor 'x': dim 1 of [2, 0] is 0: dims must be positive")) << st.message();
  }
  {
    Graph g;
    g.input("x", {int64_t{1} << 40, int64_t{1} << 40});
    EXPECT_TRUE(contains(g.verify(), "more than 2^48 elements"));
  }
  {
    Graph g;
    Tensor x = g.input("x", {2});
    Tensor y = g.relu(x, "r");
    g.relu(x, "r");  // duplicate node name; its output takes a fresh name
    g.output(y);
    g.output(y);
    Status st = g.verify();
    EXPECT_TRUE(contains(st, "duplicate node name 'r'")) << st.message();
    EXPECT_TRUE(contains(st, "output 'r' is listed twice")) << st.message();
  }
  {
    Graph g;
    g.input("x", {2, 3}, DType::f32, Layout::NCHW);
    EXPECT_TRUE(contains(g.verify(), "tensor 'x': layout NCHW needs 4 dims, got [2, 3]"));
  }
}

TEST(Graph, TwoOutputsOfOneNodeWithOneNameAreReported) {
  // Found by fuzz_graph_json: the first output's producer is the node being added, not yet in the graph.
  for (const char* op : {"no_such_op", "relu"}) {
    Graph g;
    Tensor x = g.input("x", {4});
    g.add_node(op, {{"x", {x}}}, {}, "n", {{"y", "t"}, {"z", "t"}});
    Status s = g.verify();
    ASSERT_FALSE(s.ok()) << op;
    if (std::string(op) == "no_such_op") {
      EXPECT_NE(s.message().find("tensor 't' is produced twice: already produced by this node"), std::string::npos)
          << s.message();
    }
  }
}

TEST(Graph, InvalidHandlesAndUnknownOpsAreReportedNotCrashes) {
  Graph g;
  Tensor bad;  // never assigned
  Tensor y = g.relu(bad, "r");
  std::vector<Tensor> outs = g.add_node("frobnicate", {{"x", {y}}}, {}, "f");
  EXPECT_TRUE(outs.empty());  // an unknown op has no known outputs
  g.output(Tensor{});
  Status st = g.verify();
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st, "node 'r' (relu) input 'x': invalid tensor handle")) << st.message();
  EXPECT_TRUE(contains(st, "node 'f' (frobnicate): unknown op 'frobnicate'; valid ops: conv2d, matmul"))
      << st.message();
  EXPECT_TRUE(contains(st, "output is an invalid tensor handle")) << st.message();
}

TEST(Graph, ErrorsDownstreamOfABadNodeAreNotRepeated) {
  Graph g;
  Tensor x = g.input("x", {1, 3, 8, 8});
  Tensor y = g.conv2d(x, g.parameter("w", {4, 5, 3, 3}), {}, "bad");
  g.output(g.relu(g.relu(y)));
  Status st = g.verify();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(std::count(st.message().begin(), st.message().end(), '\n'), 0) << st.message();
}

TEST(Graph, EqualityIsStructural) {
  auto build = [](double eps) {
    Graph g("g");
    Tensor x = g.input("x", {2, 4});
    g.output(g.layer_norm(x, {.epsilon = eps}));
    return g;
  };
  EXPECT_TRUE(build(1e-5) == build(1e-5));
  EXPECT_FALSE(build(1e-5) == build(1e-6));
  Graph a = build(1e-5);
  a.set_name("other");
  EXPECT_FALSE(a == build(1e-5));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Graph, EqualityDoesNotDependOnDeclarationOrder) {
  // Parameters declared between nodes (as samples/cpp/resnet50.cpp does) come first in the saved JSON.
  Graph g("interleaved");
  Tensor x = g.input("x", {1, 4, 6, 6});
  Tensor y = g.relu(g.conv2d(x, g.parameter("w1", {4, 4, 3, 3}), {.padding = {1, 1}}, "c1"));
  Tensor z = g.conv2d(y, g.parameter("w2", {8, 4, 1, 1}), {}, "c2");
  g.output(z, "out");
  ASSERT_TRUE(g.verify().ok());
  auto back = graph_from_json(graph_to_json(g));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_NE(back->find_tensor("w2")->id, g.find_tensor("w2")->id);  // really a different order
  EXPECT_TRUE(*back == g);
  EXPECT_EQ(graph_to_json(*back), graph_to_json(g));
}

TEST(Graph, ManyOutputsAreCheckedInLinearTime) {
  Graph g;
  Tensor x = g.input("x", {2});
  for (int i = 0; i < 20000; ++i) g.output(g.relu(x, "r" + std::to_string(i)));
  g.output(g.nodes().back().outputs[0]);
  Status st = g.verify();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("output 'r19999' is listed twice"), std::string::npos);
}

// The name index stores no strings: lookups must survive growth, copies, renames and duplicates.
TEST(Graph, NameLookupsSurviveGrowthCopiesAndRenames) {
  Graph g("names");
  Tensor x = g.input("x", {1, 4});
  for (int i = 0; i < 5000; ++i) x = g.relu(x, "r" + std::to_string(i));
  g.output(x, "y");
  Tensor dup = g.input("x", {2});  // a duplicate name: reported, and lookups keep the first tensor
  Graph copy = g;
  for (const Graph* h : {&g, &copy}) {
    EXPECT_EQ(h->find_tensor("x")->id, 0);
    EXPECT_NE(h->find_tensor("x")->id, dup.id);
    EXPECT_EQ(h->find_tensor("y"), std::optional<Tensor>(x));  // renamed output
    EXPECT_FALSE(h->find_tensor("r4999").has_value());         // its old name is free again
    EXPECT_EQ(h->find_tensor("r1234"), std::optional<Tensor>(Tensor{1235}));
    EXPECT_EQ(h->find_node("r4999"), std::optional<int32_t>(4999));
    EXPECT_FALSE(h->find_node("nope").has_value());
  }
  EXPECT_EQ(copy, g);
  Tensor z = copy.relu(copy.find_tensor("y").value());  // an automatic name avoids the used ones
  EXPECT_EQ(copy.find_tensor(copy.tensor(z).name), std::optional<Tensor>(z));
  EXPECT_FALSE(g.find_tensor(copy.tensor(z).name).has_value());
}

}  // namespace
}  // namespace kiln
