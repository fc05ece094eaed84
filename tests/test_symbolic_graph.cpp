// Graphs with symbolic dims (include/kiln/graph.h, docs/graph-format.md "Symbolic dims"): declared in C++
// and JSON, verified over their ranges, bound to values and then planned and run like any graph (the
// emulator against the reference at two batches), and every bad declaration or binding refused, naming the
// symbol, tensor, dim or node.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/compare.h"
#include "kiln/engine.h"
#include "kiln/host_tensor.h"
#include "kiln/json.h"
#include "kiln/npy.h"
#include "kiln/plan.h"
#include "kiln/reference.h"
#include "plan_cli_fixture.h"
#include "scoped_env.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

// conv (3x3, padding 1) -> relu on x[N, 8, H, H], then global average pool: N and H vary.
Graph conv_graph(int64_t n_max = 8, int64_t h_min = 4) {
  Graph g("symbolic_conv");
  const DimExpr n = g.dim("N", 1, n_max), h = g.dim("H", h_min, 16);
  Tensor x = g.symbolic_input("x", {n, 8, h, h});
  Tensor w = g.parameter("w", {16, 8, 3, 3});
  Tensor b = g.parameter("b", {16});
  Tensor y = g.relu(g.conv2d(x, w, b, {.padding = {1, 1}}, "conv"), "act");
  g.output(g.global_avg_pool(y, "pool"), "pooled");
  return g;
}

std::string message_of(const Status& s) { return s.ok() ? std::string("(ok)") : s.message(); }

TEST(SymbolicGraph, IsVerifiedOverItsRangesAndRunsOnceBoundAtEachValue) {
  Graph g = conv_graph();
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  EXPECT_TRUE(g.is_symbolic());
  EXPECT_EQ(g.shape(*g.find_tensor("x")), (Shape{1, 8, 4, 4}));  // the bottom of every range
  ASSERT_TRUE(g.symbolic_shape(*g.find_tensor("x")).has_value());
  EXPECT_EQ((*g.symbolic_shape(*g.find_tensor("x")))[0].to_string(), "N");

  // Unbound, it cannot be planned or run: the message says how to bind it.
  auto unbound = plan_graph(g);
  ASSERT_FALSE(unbound.ok());
  EXPECT_THAT(unbound.status().message(), HasSubstr("has symbolic dims (H in [4, 16], N in [1, 8]): bind them"));
  EXPECT_FALSE(run_reference(g, random_inputs(g, 1)).ok());

  auto engine = Engine::open(DeviceKind::emu);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  for (const DimBindings& at : {DimBindings{{"N", 3}, {"H", 7}}, DimBindings{{"N", 8}, {"H", 16}}}) {
    auto bound = g.bind(at);
    ASSERT_TRUE(bound.ok()) << bound.status().message();
    EXPECT_FALSE(bound->is_symbolic());
    EXPECT_EQ(bound->shape(*bound->find_tensor("x")), (Shape{at.at("N"), 8, at.at("H"), at.at("H")}));
    EXPECT_EQ(bound->shape(bound->outputs()[0]), (Shape{at.at("N"), 16, 1, 1}));
    const TensorMap inputs = random_inputs(*bound, 5);
    auto want = run_reference(*bound, inputs);
    ASSERT_TRUE(want.ok()) << want.status().message();
    auto exe = engine->compile(*bound);
    ASSERT_TRUE(exe.ok()) << exe.status().message();
    auto got = run_on_host_tensors(*engine, *exe, inputs);
    ASSERT_TRUE(got.ok()) << got.status().message();
    const HostTensor& w = want->at("pooled");
    const Comparison c = compare_tensors(got->at("pooled"), w, tolerance_for(w.dtype));
    EXPECT_TRUE(c.ok) << "N = " << at.at("N") << ": " << c.problem;
  }
}

TEST(SymbolicGraph, BadDeclarationsNameTheSymbolAndTheTensor) {
  Graph g("bad");
  g.dim("N", 8, 1);
  g.dim("2N", 1, 4);
  g.dim("M", 1, 4);
  g.dim("M", 1, 5);
  Tensor x = g.symbolic_input("x", {DimExpr::symbol("K"), 3});
  g.output(g.relu(x, "r"), "y");
  const std::string m = message_of(g.verify());
  EXPECT_THAT(m, HasSubstr("dim 'N': expected a range [min, max] with 1 <= min <= max, got [8, 1]"));
  EXPECT_THAT(m, HasSubstr("'2N' cannot name a dim"));
  EXPECT_THAT(m, HasSubstr("dim 'M' is declared twice: [1, 4] and [1, 5]"));
  EXPECT_THAT(m, HasSubstr("tensor 'x': dim 0 (K) uses 'K', which is no declared dim (declared: M in [1, 4])"));

  // A dim that is not positive at the bottom of its range, and a graph that fails inside the ranges.
  Graph neg("negative");
  const DimExpr n = neg.dim("N", 1, 64);
  neg.output(neg.relu(neg.symbolic_input("x", {n - 5, 3}), "r"), "y");
  EXPECT_THAT(message_of(neg.verify()),
              HasSubstr("tensor 'x': dim 0 (N - 5) is -4 with N = 1 (the bottom of its range): dims must be positive"));
  Graph top("top");
  const DimExpr msym = top.dim("M", 1, 64);
  top.output(top.relu(top.symbolic_input("x", {64 - msym, 3}), "r"), "y");
  EXPECT_THAT(message_of(top.verify()),
              HasSubstr("with M = 64: input 'x' dim 0 (-M + 64) is 0: dims must be positive"));

  Graph reshape("fixed_batch");
  const DimExpr b = reshape.dim("N", 1, 64);
  Tensor in = reshape.symbolic_input("x", {b, 16});
  reshape.output(reshape.reshape(in, {1, 16}, "flat"), "y");
  const std::string r = message_of(reshape.verify());
  EXPECT_THAT(r, HasSubstr("with N = 32: node 'flat' (reshape): attribute 'shape': expected a shape of 512 elements"));
  EXPECT_THAT(r, HasSubstr("(verified over N in [1, 64])"));

  // A conv that does not fit the bottom of H's range says the values.
  Graph small("small");
  const DimExpr h = small.dim("H", 1, 16);
  Tensor w = small.parameter("w", {4, 3, 3, 3});
  Tensor bias = small.parameter("b", {4});
  small.output(small.conv2d(small.symbolic_input("x", {1, 3, h, h}), w, bias, {}, "conv"), "y");
  EXPECT_THAT(message_of(small.verify()),
              HasSubstr("node 'conv' (conv2d): with H = 1 (the bottom of the range): the 3x3 kernel (dilation 1x1) "
                        "does not fit the 1x1 input"));
}

TEST(SymbolicGraph, BindingsOutsideTheRangesOrIncompleteAreRefused) {
  const Graph g = conv_graph();
  EXPECT_EQ(g.bind({{"N", 9}, {"H", 4}}).status().message(),
            "dim 'N' = 9 is outside its range [1, 8] in graph 'symbolic_conv'");
  EXPECT_EQ(g.bind({{"N", 2}}).status().message(), "graph 'symbolic_conv': no value for dim 'H' (range [4, 16])");
  EXPECT_EQ(g.bind({{"N", 2}, {"H", 4}, {"L", 3}}).status().message(),
            "graph 'symbolic_conv' has no dim 'L' (its dims: H in [4, 16], N in [1, 8])");
  Graph plain("plain");
  plain.output(plain.relu(plain.input("x", {2, 3}), "r"), "y");
  EXPECT_THAT(plain.bind({{"N", 1}}).status().message(), HasSubstr("(it has no symbolic dims)"));
  EXPECT_TRUE(plain.bind({}).ok());
}

TEST(SymbolicGraph, DimsFromInputShapesNameTheTensorDimAndSymbolThatDisagree) {
  Graph g("two_inputs");
  const DimExpr n = g.dim("N", 1, 64), l = g.dim("L", 1, 512);
  Tensor a = g.symbolic_input("a", {n, l});
  Tensor b = g.symbolic_input("b", {n, 2 * l + 1});
  Tensor c = g.symbolic_input("c", {n, 4});
  g.output(g.relu(a, "ra"), "ya");
  g.output(g.relu(b, "rb"), "yb");
  g.output(g.relu(c, "rc"), "yc");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto ok = g.dims_from_shapes({{"a", Shape{8, 100}}, {"b", Shape{8, 201}}, {"c", Shape{8, 4}}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(*ok, (DimBindings{{"L", 100}, {"N", 8}}));
  EXPECT_EQ(g.dims_from_shapes({{"a", Shape{8, 100}}, {"c", Shape{4, 4}}}).status().message(),
            "input 'c' dim 0 is 4, but input 'a' dim 0 made N = 8");
  EXPECT_EQ(g.dims_from_shapes({{"a", Shape{8, 100}}, {"c", Shape{8, 5}}}).status().message(),
            "input 'c' dim 1 is 5, but the graph fixes it at 4");
  EXPECT_EQ(g.dims_from_shapes({{"a", Shape{8, 100}}, {"b", Shape{8, 200}}}).status().message(),
            "input 'b' dim 1 is 200, but 2*L + 1 = 201 with L = 100, N = 8");
  EXPECT_EQ(g.dims_from_shapes({{"a", Shape{8, 100, 1}}}).status().message(),
            "input 'a': expected 2 dims ([N, L]), got [8, 100, 1]");
  EXPECT_THAT(g.dims_from_shapes({{"c", Shape{8, 4}}}).status().message(),
              HasSubstr("no value for dim 'L': no given input has it as a dim of its own"));
}

TEST(SymbolicGraph, JsonKeepsTheSymbolsAndNamesTheirPaths) {
  const Graph g = conv_graph();
  const std::string text = graph_to_json(g);
  EXPECT_THAT(text, HasSubstr("\"dims\""));
  EXPECT_THAT(text, HasSubstr("\"N\""));
  auto back = graph_from_json(text, "sym.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(*back == g);
  EXPECT_EQ((*back->symbolic_shape(*back->find_tensor("x")))[2].to_string(), "H");

  auto load = [](const std::string& dims, const std::string& x_shape, const std::string& w_shape = "[4, 3]") {
    const std::string doc = R"({"format": "kiln.graph", "version": 1, "name": "j", )" + dims +
                            R"("tensors": [{"name": "x", "shape": )" + x_shape +
                            R"(, "kind": "input"}, {"name": "w", "shape": )" + w_shape +
                            R"(, "kind": "parameter"}], "nodes": [{"op": "matmul", "name": "mm", "inputs": {"a": "x",
                            "b": "w"}, "outputs": {"y": "y"}}], "outputs": ["y"]})";
    auto r = graph_from_json(doc, "j.json");
    return r.ok() ? std::string("(ok)") : r.status().message();
  };
  EXPECT_EQ(load(R"("dims": {"N": [1, 8]}, )", R"(["N", 4])"), "(ok)");
  EXPECT_THAT(load(R"("dims": {"N": [8, 1]}, )", R"(["N", 4])"),
              HasSubstr("/dims/N: dim 'N': expected a range [min, max] with 1 <= min <= max, got [8, 1]"));
  EXPECT_THAT(load(R"("dims": {"N": 8}, )", R"(["N", 4])"),
              HasSubstr("/dims/N: dim 'N': expected its range [min, max] (two integers), got 8"));
  EXPECT_THAT(load(R"("dims": [1, 8], )", R"(["N", 4])"), HasSubstr("/dims: expected the symbolic dims"));
  EXPECT_THAT(load(R"("dims": {"N": [1, 8]}, )", R"(["M", 4])"),
              HasSubstr("/tensors/0/shape/0: tensor 'x': dim 0 (M) uses 'M', which is no declared dim"));
  EXPECT_THAT(load(R"("dims": {"N": [1, 8]}, )", R"(["N +", 4])"),
              HasSubstr("/tensors/0/shape/0: tensor 'x': dim 0: dim expression 'N +': expected"));
  EXPECT_THAT(load(R"("dims": {"N": [1, 8]}, )", R"(["N", 4])", R"(["N", 3])"),
              HasSubstr("/tensors/1/shape: tensor 'w': a parameter's dims are fixed numbers (only inputs"));
}

}  // namespace
}  // namespace kiln

// The command line: --dims on the commands that read a graph, lists and ranges on prewarm.
namespace kiln {
namespace {

class SymbolicCli : public plan_cli::PlanCliFixture {
 protected:
  std::string saved() { return save(conv_graph(), "sym.json"); }
};

TEST_F(SymbolicCli, DimsAreShownBoundAndRefusedWithTheirNames) {
  const std::string g = saved();
  Proc p = kiln({"validate", g});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("dims: H in [4, 16], N in [1, 8] (verified over these ranges"));
  EXPECT_THAT(p.out, HasSubstr("[N, 8, H, H]"));
  p = kiln({"plan", g});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("bind them to values first (Graph::bind; on the command line --dims H=4,N=1)"));
  p = kiln({"plan", g, "--dims", "N=2,H=5"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("[2, 8, 5, 5]"));
  p = kiln({"run", g, "--dims", "N=3,H=6", "--device", "emu", "--check"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("pooled  f32"));
  EXPECT_THAT(p.out, HasSubstr("ok"));
  p = kiln({"run", g, "--dims", "N=30,H=6", "--device", "ref"});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("dim 'N' = 30 is outside its range [1, 8]"));
  expect_usage({"plan", g, "--dims", "N=0"}, "invalid --dims 'N=0': '0' is not a positive value");
  expect_usage({"plan", g, "--dims", "=3"}, "invalid --dims '=3': no NAME before '='");
  expect_usage({"plan", g, "--dims", "N=1,N=2"}, "invalid --dims 'N=2': 'N' is given twice");
  expect_usage({"plan", g, "--dims", "N=1..3,H=4"}, "--dims N: one value per dim here");
  expect_usage({"prewarm", g, "--dims", "N=1,H=4,L=2"}, "--dims L: no graph given has a dim 'L'");
}

TEST_F(SymbolicCli, InputFilesGiveTheDimsTheirValues) {
  const std::string g = saved();
  Proc p = kiln({"run", g, "--dims", "N=2,H=5", "--device", "ref", "--save-inputs", path("in")});
  ASSERT_EQ(p.code, 0) << p.err;
  p = kiln({"run", g, "--inputs", path("in"), "--device", "emu", "--check"});  // N = 2, H = 5 from x.npy
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("pooled  [2, 16, 1, 1]"));
  EXPECT_THAT(p.out, HasSubstr("ok"));
  HostTensor wrong(Shape{2, 7, 5, 5}, DType::f32);
  ASSERT_TRUE(save_npy(path("in/x.npy"), wrong).ok());
  p = kiln({"run", g, "--inputs", path("in"), "--device", "emu"});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr("input 'x' dim 1 is 7, but the graph fixes it at 8"));
}

TEST_F(SymbolicCli, PrewarmCoversEveryCombinationOfTheValuesGiven) {
  Proc p = kiln({"prewarm", saved(), "--dims", "N=1,2,H=4", "--arch", "sm_90", "--no-progress"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("sym.json (H=4,N=1) (h200, sm_90)"));
  EXPECT_THAT(p.out, HasSubstr("sym.json (H=4,N=2) (h200, sm_90)"));
  EXPECT_THAT(p.out, HasSubstr("0 failed"));
}

// The conv kernel takes the batch as an argument (docs/architecture.md, "Batch-generic kernels"): batches
// whose tiles agree need no kernel of their own, in the same prewarm or a later one (NVRTC not even loaded).
TEST_F(SymbolicCli, BatchesWithTheSameTilesShareTheirKernels) {
  const testing::ScopedEnv cache("KILN_CACHE_DIR", path("cache").c_str());  // a cache of this test's own
  Proc p = kiln({"prewarm", saved(), "--dims", "N=2,3,H=4", "--arch", "sm_90", "--no-progress"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("sym.json (H=4,N=3) (h200, sm_90): 1 kernel groups + 1 weight transforms, 2 distinct "
                               "kernels (0 new)"));
  EXPECT_THAT(p.out, HasSubstr("kernels: 2 total, 0 already cached, 2 compiled, 0 failed"));
  p = kiln({"prewarm", saved(), "--dims", "N=5,H=4", "--arch", "sm_90", "--no-progress"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("kernels: 2 total, 2 already cached, 0 compiled, 0 failed"));
  EXPECT_THAT(p.out, HasSubstr("nvrtc: not loaded"));
}

}  // namespace
}  // namespace kiln
