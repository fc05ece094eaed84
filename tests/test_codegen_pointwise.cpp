// The pointwise kernel family and the codegen core: generated kernels run on emu against ref on random
// inputs (tolerances in tests/codegen_check.h), in f32, f16 and bf16.
#include <random>

#include <gtest/gtest.h>

#include "codegen/kernel_builder.h"
#include "codegen_check.h"
#include "ops/registry.h"

namespace kiln {
namespace {

using testing::expect_plan_matches_ref;
using testing::with_dtype;

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// Every pointwise op of the registry, each as its own kernel (max_group_ops 1) on a tensor whose element
// count is no multiple of the vector width (so both the 16-byte path and the tail run). One graph, so one
// host compile. A new pointwise op is tested here without a new test.
TEST(CodegenPointwise, EveryRegistryOpMatchesReference) {
  Graph g("every_pointwise_op");
  Tensor x = g.input("x", {3, 37});
  Tensor pos = g.input("pos", {3, 37});  // for ops defined on positive values only
  g.output(g.add(g.abs(pos), 0.5), "pos_plus");
  int count = 0;
  for (const OpDef& def : op_registry()) {
    if (def.kind != FusionKind::pointwise) continue;
    const std::string n(def.name);
    const bool positive = def.inputs[0].domain == ValueDomain::positive;
    Tensor in = positive ? g.add(g.abs(pos), 0.5) : x;
    Tensor y;
    if (def.id == OpId::batch_norm) {
      y = g.batch_norm(in, g.parameter(n + ".s", {37}), g.parameter(n + ".b", {37}), g.parameter(n + ".m", {37}),
                       g.parameter(n + ".v", {37}));
    } else if (def.id == OpId::bias_add) {
      y = g.bias_add(in, g.parameter(n + ".bias", {3}), 0);
    } else if (def.id == OpId::cast) {
      y = g.cast(in, DType::bf16);
    } else if (def.id == OpId::clamp) {
      y = g.clamp(in, -0.25, std::nullopt);
    } else if (def.id == OpId::expand) {
      y = g.expand(g.slice(in, {0, 0}, {1, 37}), {3, 37});  // one row broadcast to three
    } else if (def.binary) {
      y = g.binary(def.name, in, def.id == OpId::div ? g.add(g.abs(pos), 0.5) : g.input(n + ".b", {3, 37}));
    } else {
      y = g.unary(def.name, in);
    }
    g.output(y, n);
    ++count;
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  EXPECT_GE(count, 30);
  PlanOptions o;
  o.max_group_ops = 1;
  auto cr = expect_plan_matches_ref(g, DType::f32, 11, o);
  EXPECT_GE(cr.report.kernels_launched, count);
}

// A chain with a scalar operand and two outputs: the flat path (16-byte vectors) in every dtype.
TEST(CodegenPointwise, FlatChainWithTwoOutputs) {
  Graph g("flat_chain");
  Tensor x = g.input("x", {2, 3, 5, 7});
  Tensor y = g.input("y", {2, 3, 5, 7});
  Tensor a = g.add(g.mul(x, 2.0), y);
  g.output(a, "a");
  g.output(g.sigmoid(g.relu(a)), "b");
  ASSERT_TRUE(g.verify().ok());
  for (DType t : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    auto cr = expect_plan_matches_ref(with_dtype(g, t), t, 3);
    EXPECT_EQ(cr.report.kernels_launched, 1);
  }
}

// Every tensor NHWC (declared so): dense in one common order, so the flat 16-byte path applies, as it
// does for NCHW. (It did not until the H200 run of gpu_bench showed NHWC add+relu at 44 % of copy
// bandwidth: the check compared the strides with a permutation of the row-major ones.)
TEST(CodegenPointwise, NhwcEverywhereTakesTheFlatPath) {
  Graph g("nhwc_flat");
  Tensor x = g.input("x", {2, 6, 5, 7}, DType::f32, Layout::NHWC);
  Tensor r = g.input("r", {2, 6, 5, 7}, DType::f32, Layout::NHWC);
  g.output(g.relu(g.add(x, g.mul(r, 0.5))), "y", Layout::NHWC);
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  for (DType t : kDtypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    auto cr = expect_plan_matches_ref(with_dtype(g, t), t, 21);
    ASSERT_EQ(cr.plan.groups.size(), 1u);
    const auto pw = testing::details_of<codegen::PointwiseConfig>(cr.plan);
    ASSERT_EQ(pw.size(), 1u);
    EXPECT_EQ(pw[0].path, codegen::PointwiseConfig::Path::flat);
    EXPECT_EQ(pw[0].vec, 16 / dtype_size(t));
  }
}

// Broadcast shapes, an output smaller than the domain, a cast inside the kernel: the general path.
TEST(CodegenPointwise, BroadcastSmallerOutputAndCast) {
  Graph g("broadcast");
  Tensor a = g.input("a", {4, 1, 6});
  Tensor b = g.input("b", {5, 1});
  Tensor s = g.mul(a, 0.5);  // [4, 1, 6]: written out although the domain is [4, 5, 6]
  g.output(s, "s");
  Tensor c = g.cast(g.add(s, b), DType::f16);
  g.output(g.maximum(g.cast(c, DType::f32), g.input("m", {6})), "y");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto cr = expect_plan_matches_ref(g, DType::f32, 5, {}, testing::Tolerance{1e-3, 1e-3});
  EXPECT_EQ(cr.report.kernels_launched, 1);
}

// NHWC intermediates (forced by the layout policy): the general path iterates in memory order.
TEST(CodegenPointwise, NhwcPolicyWithConversionsAround) {
  Graph g("nhwc_pointwise");
  Tensor x = g.input("x", {2, 3, 4, 5});
  Tensor t = g.silu(g.add(x, g.parameter("bias", {1, 3, 1, 1})));
  g.output(g.mul(t, t), "y");
  ASSERT_TRUE(g.verify().ok());
  PlanOptions o;
  o.layout = LayoutPolicy::nhwc;
  for (DType dt : kDtypes) expect_plan_matches_ref(with_dtype(g, dt), dt, 9, o);
}

// Random pointwise DAGs with random broadcast shapes.
TEST(CodegenPointwise, RandomDags) {
  std::mt19937 rng(1234);
  const char* binary[] = {"add", "sub", "mul", "maximum", "minimum"};
  const char* unary[] = {"relu", "tanh", "silu", "gelu", "abs", "neg", "sigmoid"};
  for (int trial = 0; trial < 8; ++trial) {
    Graph g("random_" + std::to_string(trial));
    const int rank = 1 + static_cast<int>(rng() % 4);
    Shape full;
    for (int d = 0; d < rank; ++d) full.push_back(1 + static_cast<int64_t>(rng() % 6));
    std::vector<Tensor> vals;
    for (int k = 0; k < 3; ++k) {
      Shape s;
      for (int d = static_cast<int>(rng() % 2); d < rank; ++d) s.push_back(rng() % 3 == 0 ? 1 : full[d]);
      vals.push_back(g.input("in" + std::to_string(k), s));
    }
    for (int k = 0; k < 6; ++k) {
      Tensor a = vals[rng() % vals.size()];
      if (rng() % 2) {
        vals.push_back(g.unary(unary[rng() % 7], a));
      } else {
        // One draw per statement: the order of a call's argument evaluations differs between compilers, and
        // the graphs must not (clang's found a bug GCC's did not).
        const char* op = binary[rng() % 5];
        const Tensor b = vals[rng() % vals.size()];
        vals.push_back(g.binary(op, a, b));
      }
    }
    g.output(vals.back(), "y");
    g.output(vals[vals.size() - 2], "z");
    ASSERT_TRUE(g.verify().ok()) << g.verify().message();
    SCOPED_TRACE(g.name());
    expect_plan_matches_ref(g, DType::f32, static_cast<uint64_t>(trial));
  }
}

// The generated source does not depend on tensor names or on the order of independent nodes.
TEST(CodegenPointwise, SourceIndependentOfNamesAndNodeOrder) {
  auto build = [](bool swap, const std::string& prefix) {
    Graph g(prefix + "graph");
    Tensor x = g.input(prefix + "x", {4, 8});
    Tensor p, q;
    if (swap) {
      q = g.tanh(x, prefix + "t");
      p = g.relu(x, prefix + "r");
    } else {
      p = g.relu(x, prefix + "r");
      q = g.tanh(x, prefix + "t");
    }
    g.output(g.add(p, q), prefix + "y");
    EXPECT_TRUE(g.verify().ok());
    Result<Plan> plan = plan_graph(g);
    EXPECT_TRUE(plan.ok());
    Result<codegen::Kernel> k = codegen::generate_kernel(*plan, plan->groups[0]);
    EXPECT_TRUE(k.ok()) << k.status().message();
    return *k;
  };
  const codegen::Kernel a = build(false, ""), b = build(true, "other_");
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.entry, b.entry);
  // ... but does depend on an attribute.
  Graph g("attr");
  Tensor x = g.input("x", {4, 8});
  g.output(g.leaky_relu(x, 0.1), "y");
  ASSERT_TRUE(g.verify().ok());
  Graph h("attr");
  Tensor hx = h.input("x", {4, 8});
  h.output(h.leaky_relu(hx, 0.2), "y");
  ASSERT_TRUE(h.verify().ok());
  auto ka = codegen::generate_kernel(*plan_graph(g), plan_graph(g)->groups[0]);
  auto kb = codegen::generate_kernel(*plan_graph(h), plan_graph(h)->groups[0]);
  ASSERT_TRUE(ka.ok() && kb.ok());
  EXPECT_NE(ka->entry, kb->entry);
}

TEST(CodegenPointwise, FloatLiteralsRoundTrip) {
  EXPECT_EQ(codegen::float_literal(0.5), "0.5f");
  EXPECT_EQ(codegen::float_literal(3), "3.0f");
  EXPECT_EQ(codegen::float_literal(1e-5), "1e-05f");
  EXPECT_EQ(codegen::float_literal(NAN), "__int_as_float(0x7fc00000)");
  EXPECT_EQ(codegen::float_literal(-INFINITY), "__int_as_float(0xff800000)");
  // Beyond the f32 range: the infinity of its sign, never a (undefined) double-to-float conversion.
  EXPECT_EQ(codegen::float_literal(1e39), "__int_as_float(0x7f800000)");
  EXPECT_EQ(codegen::float_literal(-1e300), "__int_as_float(0xff800000)");
  EXPECT_EQ(codegen::float_literal(3.4028234663852886e38), "3.4028235e+38f");  // FLT_MAX itself
}

}  // namespace
}  // namespace kiln
