// The data-movement family (codegen/family_data.cpp, templates/kiln/transpose.cuh, gather.cuh): layout
// conversions, transposes, reshapes, slices, upsampling and copy concats, planned from small graphs, run
// on the emu backend and compared with the reference backend on random inputs, in f32, f16 and bf16.
//
// Tolerances: a copy moves stored values unchanged, so every copy must match exactly; bilinear upsampling
// computes in f32 where the reference uses f64, so it may differ by a few f32 ulps before the store rounds
// (f32: 1e-6 absolute on values in [-1, 1]; f16/bf16: one ulp of the storage type, 1e-3 / 8e-3 relative).
//
// Graphs whose outputs are all copies run through tests/codegen_check.h (the plan runner, exact
// tolerance). The others run through the small runner below, which compares each output with the
// tolerance its name asks for (one graph holds every dtype: one host compile per test) and also runs
// plans forged to fuse pointwise ops into data groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/kernel.h"
#include "codegen/kernel_builder.h"
#include "codegen/nvrtc.h"
#include "codegen_check.h"
#include "emu/emu_test_util.h"
#include "kiln/emu.h"
#include "kiln/graph.h"
#include "kiln/plan.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

// The kernel of a group (weight transforms included: the same family generates them).
Result<codegen::Kernel> kernel_of(const Plan& p, const Group& grp) { return codegen::generate_kernel(p, grp); }

// ---- a small runner: every group's generated kernel on emu, one buffer per tensor in its memory layout ----

std::vector<unsigned char> to_memory(const HostTensor& t, const std::vector<int64_t>& strides) {
  const int64_t es = dtype_size(t.dtype);
  std::vector<unsigned char> m(static_cast<size_t>(t.numel() * es), 0xFF);
  const auto rm = row_major_strides(t.shape);
  for (int64_t e = 0; e < t.numel(); ++e) {
    int64_t off = 0;
    for (int d = 0; d < t.shape.rank(); ++d)
      off += (e / rm[static_cast<size_t>(d)] % t.shape[d]) * strides[static_cast<size_t>(d)];
    const float f = static_cast<float>(t.data[static_cast<size_t>(e)]);
    unsigned char* p = &m[static_cast<size_t>(off * es)];
    if (t.dtype == DType::f32) {
      std::memcpy(p, &f, 4);
    } else {
      const uint16_t h = t.dtype == DType::f16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
      std::memcpy(p, &h, 2);
    }
  }
  return m;
}

HostTensor from_memory(const std::vector<unsigned char>& m, const Shape& shape, DType dtype,
                       const std::vector<int64_t>& strides) {
  HostTensor t(shape, dtype);
  const int64_t es = dtype_size(dtype);
  const auto rm = row_major_strides(shape);
  for (int64_t e = 0; e < t.numel(); ++e) {
    int64_t off = 0;
    for (int d = 0; d < shape.rank(); ++d)
      off += (e / rm[static_cast<size_t>(d)] % shape[d]) * strides[static_cast<size_t>(d)];
    const unsigned char* p = &m[static_cast<size_t>(off * es)];
    if (dtype == DType::f32) {
      float f;
      std::memcpy(&f, p, 4);
      t.data[static_cast<size_t>(e)] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, p, 2);
      t.data[static_cast<size_t>(e)] = dtype == DType::f16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
    }
  }
  return t;
}

struct EmuRun {
  TensorMap outputs;                     // graph outputs by name
  std::vector<codegen::Kernel> kernels;  // what ran, in order
};

// Runs every group with a kernel (weight transforms too) in plan order. All kernels of the plan are
// compiled as one translation unit (their glue lives in per-entry namespaces): one host compile per plan
// keeps the emu tests fast.
Result<EmuRun> run_on_emu(const Plan& p, const TensorMap& inputs, emu::Schedule schedule = emu::Schedule::forward) {
  const Graph& g = p.graph;
  std::map<int32_t, std::vector<unsigned char>> mem;
  auto strides_of = [&](Tensor t) { return layout_strides(g.tensor(t).shape, g.tensor(t).layout); };
  for (int32_t id = 0; id < static_cast<int32_t>(g.tensors().size()); ++id) {
    const TensorInfo& ti = g.tensor(Tensor{id});
    if (ti.kind == TensorKind::intermediate) {
      mem[id].assign(static_cast<size_t>(ti.shape.numel() * dtype_size(ti.dtype)), 0xFF);  // NaN poison
    } else {
      auto it = inputs.find(ti.name);
      if (it == inputs.end()) return not_found("no value bound for " + ti.name);
      mem[id] = to_memory(it->second, strides_of(Tensor{id}));
    }
  }
  EmuRun run;
  std::string source;
  std::vector<std::string> entries;
  for (const Group& grp : p.groups) {
    if (grp.kind == GroupKind::concat_elided) return unsupported("the test runner has no elided concats");
    KILN_ASSIGN_OR_RETURN(codegen::Kernel k, kernel_of(p, grp));
    if (std::find(entries.begin(), entries.end(), k.entry) == entries.end()) {
      source += k.source;
      entries.push_back(k.entry);
    }
    run.kernels.push_back(std::move(k));
  }
  emu::CompileOptions co;  // the default cache, as run_plan_emu's: reruns skip the host compile
  co.source_name = g.name() + ".cu";
  KILN_ASSIGN_OR_RETURN(auto module, emu::compile(source, entries, co));
  for (const codegen::Kernel& k : run.kernels) {
    std::vector<emu::Arg> args;
    for (const codegen::KernelParam& kp : k.params) {
      if (kp.is_value()) {  // an int by value (a batch-generic kernel)
        args.push_back(emu::Arg::value(static_cast<int>(kp.value)));
        continue;
      }
      auto& m = mem[kp.tensor.id];
      args.push_back(emu::Arg::buffer(m.data(), m.size(), g.tensor(kp.tensor).name));
    }
    KILN_RETURN_IF_ERROR(emu::launch(*module, k.entry, {k.grid.x, k.grid.y, k.grid.z},
                                     {k.block.x, k.block.y, k.block.z}, k.dynamic_smem, args,
                                     emu::test::checked(schedule)));
  }
  for (Tensor t : g.outputs()) {
    const TensorInfo& ti = g.tensor(t);
    run.outputs[ti.name] = from_memory(mem[t.id], ti.shape, ti.dtype, strides_of(t));
  }
  return run;
}

// Copies must match exactly; outputs named "bilinear..." compute in f32 (see the top of the file).
double tolerance(DType t, std::string_view output) {
  if (output.find("bilinear") == std::string_view::npos) return 0.0;
  switch (t) {
    case DType::f32: return 1e-6;
    case DType::f16: return 1e-3;
    case DType::bf16: return 8e-3;
  }
  return 0.0;
}

// Plans `g`, runs it on emu and on ref, and compares every output (|emu - ref| <= tol * max(1, |ref|)).
// The fibers of a block run in a seeded random order between barriers, so a missing __syncthreads in a
// tile shows. Returns the kernels that ran, for structural checks.
std::vector<codegen::Kernel> expect_matches_ref(const Graph& g, uint64_t seed, const PlanOptions& o = {}) {
  const std::string what = g.name();
  auto plan = plan_graph(g, o);
  EXPECT_TRUE(plan.ok()) << what << ": " << plan.status().message();
  if (!plan.ok()) return {};
  const TensorMap inputs = random_inputs(g, seed);
  auto want = run_reference(g, inputs);
  EXPECT_TRUE(want.ok()) << what << ": " << want.status().message();
  auto got = run_on_emu(*plan, inputs, emu::Schedule::random);
  EXPECT_TRUE(got.ok()) << what << ": " << got.status().message();
  if (!got.ok() || !want.ok()) return {};
  EXPECT_EQ(want->size(), g.outputs().size()) << what;
  for (const auto& [name, w] : *want) {
    auto it = got->outputs.find(name);
    EXPECT_TRUE(it != got->outputs.end()) << what << ": no output " << name;
    if (it == got->outputs.end()) continue;
    const HostTensor& h = it->second;
    EXPECT_EQ(h.shape, w.shape) << what;
    const double tol = tolerance(w.dtype, name);
    int bad = 0;
    for (size_t e = 0; e < w.data.size() && bad < 5; ++e) {
      const double ref = w.data[e], v = h.data[e];
      if (!(std::fabs(v - ref) <= tol * std::max(1.0, std::fabs(ref)))) {
        ADD_FAILURE() << what << " (" << dtype_name(w.dtype) << "): output " << name << " element " << e << ": emu "
                      << v << ", ref " << ref;
        ++bad;
      }
    }
  }
  return std::move(got->kernels);
}

constexpr Tolerance kExact{.rtol = 0.0, .atol = 0.0};

// The kernels of a plan's groups (no compile), for structural checks.
std::vector<codegen::Kernel> kernels_of(const Plan& p) {
  std::vector<codegen::Kernel> ks;
  for (const Group& grp : p.groups) {
    if (grp.kind == GroupKind::concat_elided) continue;
    auto k = kernel_of(p, grp);
    EXPECT_TRUE(k.ok()) << k.status().message();
    if (k.ok()) ks.push_back(std::move(*k));
  }
  return ks;
}

// Kernels of the data family using template `k`.
int count_data_kernels(const Plan& p, codegen::DataConfig::Kernel k) {
  int c = 0;
  for (const auto& d : testing::details_of<codegen::DataConfig>(p)) c += d.kernel == k;
  return c;
}

// ---- layout conversions ----------------------------------------------------------------------------------
// Each test builds one graph holding its cases in every dtype (inputs and outputs named by dtype): one plan,
// one host compile.

std::string dn(DType t) { return std::string(dtype_name(t)); }

TEST(CodegenData, LayoutConvertRoundTripsAndWeightTransform) {
  // C = 3 (a short inner run: gather, or a 4-wide tile the other way), C = 33 and H*W = 35 (tiles not
  // multiples of 32); KCRS parameters converted to KRSC are weight_transform groups, the same kernels:
  // C = 3 (stem-like: a gather) and C = 24 (a 16 x 32 tile: TA < 32).
  Graph g("layout_convert");
  for (DType dt : kDTypes) {
    for (int64_t C : {3, 33}) {
      g.output(
          g.layout_convert(g.input(fmt::format("x{}_{}", C, dn(dt)), {2, C, 5, 7}, dt, Layout::NCHW), Layout::NHWC),
          fmt::format("nhwc{}_{}", C, dn(dt)));
      g.output(
          g.layout_convert(g.input(fmt::format("z{}_{}", C, dn(dt)), {1, C, 5, 7}, dt, Layout::NHWC), Layout::NCHW),
          fmt::format("nchw{}_{}", C, dn(dt)));
    }
    g.output(g.layout_convert(g.parameter("w_" + dn(dt), {40, 3, 3, 3}, dt, Layout::KCRS), Layout::KRSC),
             "krsc_" + dn(dt));
    g.output(g.layout_convert(g.parameter("w2_" + dn(dt), {16, 24, 3, 3}, dt, Layout::KCRS), Layout::KRSC),
             "krsc2_" + dn(dt));
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto plan = plan_graph(g, {.layout = LayoutPolicy::nchw});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  int weight_groups = 0;
  for (const Group& grp : plan->groups) weight_groups += grp.kind == GroupKind::weight_transform;
  EXPECT_EQ(weight_groups, 6) << plan_to_text(*plan);
  const Plan checked = testing::expect_plan_matches_ref(g, DType::f32, 1, {.layout = LayoutPolicy::nchw}, kExact).plan;
  EXPECT_EQ(kernels_of(checked).size(), 18u);
  // All but the two C = 3 conversions to an inner C, per dtype.
  EXPECT_EQ(count_data_kernels(checked, codegen::DataConfig::Kernel::tiled_transpose), 12);
}

TEST(CodegenData, ConvGraphWeightTransformKernel) {
  // A conv with KCRS weights under the NHWC policy: the weight's conversion is a weight_transform group.
  // Its kernel alone runs here (the conv is another family's): the KRSC output must hold the KCRS
  // parameter's values at the same logical coordinates, under every fiber schedule.
  Graph g("conv_weights");
  auto x = g.input("x", {1, 8, 6, 6});
  auto w = g.parameter("w", {16, 8, 3, 3}, DType::f32, Layout::KCRS);
  g.output(g.conv2d(x, w, {.padding = {1, 1}}), "y");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto plan = plan_graph(g, {.layout = LayoutPolicy::nhwc});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const Group* wt = nullptr;
  for (const Group& grp : plan->groups)
    if (grp.kind == GroupKind::weight_transform) wt = &grp;
  ASSERT_NE(wt, nullptr) << plan_to_text(*plan);
  auto k = kernel_of(*plan, *wt);
  ASSERT_TRUE(k.ok()) << k.status().message();
  // The weight, its conversion, and its dim 0 (K, outermost in both layouts) as the kernel's argument: one
  // source serves every K (the family's batch-generic form).
  ASSERT_EQ(k->params.size(), 3u);
  ASSERT_TRUE(k->params[2].is_batch());
  EXPECT_EQ(k->params[2].value, 16);
  const TensorMap inputs = random_inputs(g, 3);
  const Tensor wi = wt->inputs[0], wo = wt->outputs[0];
  const TensorInfo& oi = plan->graph.tensor(wo);
  EXPECT_EQ(oi.layout, Layout::KRSC);
  const HostTensor& want = inputs.at(plan->graph.tensor(wi).name);
  auto in = to_memory(want, layout_strides(oi.shape, Layout::KCRS));
  auto m = emu::compile(k->source, {k->entry});
  ASSERT_TRUE(m.ok()) << m.status().message();
  for (emu::Schedule s : emu::test::kSchedules) {
    std::vector<unsigned char> out(static_cast<size_t>(oi.shape.numel() * 4), 0xFF);
    std::vector<emu::Arg> args;
    for (const auto& kp : k->params) {
      if (kp.is_value()) {
        args.push_back(emu::Arg::value(static_cast<int>(kp.value)));
        continue;
      }
      auto& b = kp.tensor == wi ? in : out;
      args.push_back(emu::Arg::buffer(b.data(), b.size()));
    }
    const Status st = emu::launch(**m, k->entry, {k->grid.x}, {k->block.x}, 0, args, emu::test::checked(s));
    ASSERT_TRUE(st.ok()) << st.message();
    const HostTensor got = from_memory(out, oi.shape, oi.dtype, layout_strides(oi.shape, Layout::KRSC));
    EXPECT_EQ(got.data, want.data) << emu::schedule_name(s);
  }
}

// ---- transpose and reshape -------------------------------------------------------------------------------

TEST(CodegenData, TransposePerms) {
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  const Case cases[] = {
      {{37, 45}, {1, 0}},                   // 2-D: a tile, partial at both edges
      {{3, 40, 33}, {0, 2, 1}},             // batched matrix transpose
      {{5, 6, 34}, {2, 0, 1}},              // innermost to outermost
      {{4, 35, 3}, {1, 0, 2}},              // innermost kept: a gather
      {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},   // 5-D
      {{2, 9, 3, 2, 17}, {0, 4, 2, 3, 1}},  // 5-D, a tile over several dims
  };
  Graph g("transpose");
  for (DType dt : kDTypes) {
    int k = 0;
    for (const Case& c : cases) {
      g.output(g.transpose(g.input(fmt::format("x{}_{}", k, dn(dt)), Shape(c.shape), dt), c.perm),
               fmt::format("y{}_{}", k, dn(dt)));
      ++k;
    }
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto cr = testing::expect_plan_matches_ref(g, DType::f32, 4, {}, kExact);
  EXPECT_EQ(count_data_kernels(cr.plan, codegen::DataConfig::Kernel::tiled_transpose), 15);
}

TEST(CodegenData, Reshape) {
  Graph g("reshape");
  for (DType dt : kDTypes) {
    g.output(g.reshape(g.input("a_" + dn(dt), {2, 3, 4, 5}, dt), {6, -1}), "ra_" + dn(dt));  // 120: vector path
    g.output(g.reshape(g.input("b_" + dn(dt), {3, 5, 7}, dt), {7, 15}), "rb_" + dn(dt));     // 105: scalar
    g.output(g.reshape(g.input("c_" + dn(dt), {2, 3, 8}, dt), {4, 1, 12}), "rc_" + dn(dt));
    // A one-element tensor to the scalar (rank 0: a loss) and a scalar operand of a pointwise op.
    const Tensor s = g.reshape(g.input("d_" + dn(dt), {1, 1}, dt), std::vector<int64_t>{});
    EXPECT_EQ(g.shape(s).rank(), 0);
    g.output(s, "rd_" + dn(dt));
    g.output(g.mul(g.input("e_" + dn(dt), {2, 3}, dt), g.relu(g.input("f_" + dn(dt), Shape{}, dt))), "re_" + dn(dt));
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto cs =
      testing::details_of<codegen::DataConfig>(testing::expect_plan_matches_ref(g, DType::f32, 5, {}, kExact).plan);
  ASSERT_EQ(cs.size(), 12u);
  for (const auto& c : cs) EXPECT_EQ(c.kernel, codegen::DataConfig::Kernel::copy_flat);
}

// ---- slice, upsample, concat -----------------------------------------------------------------------------

TEST(CodegenData, SliceWithStepsAndNegativeIndices) {
  Graph g("slice");
  for (DType dt : kDTypes) {
    auto x = g.input("x_" + dn(dt), {3, 10, 9, 11}, dt);
    g.output(g.slice(x, {0, -8, 1, -11}, {3, 10, 100, -1}, {2, 3, 2, 1}), "a_" + dn(dt));
    g.output(g.slice(x, {1, 2, -5, 0}, {-1, 9, 9, 11}), "b_" + dn(dt));
    // An NHWC source: the walk follows the output's memory order, the reads the source's strides.
    g.output(g.slice(g.input("n_" + dn(dt), {2, 5, 6, 7}, dt, Layout::NHWC), {0, 1, 1, -6}, {2, 5, 6, 7}, {1, 2, 2, 3}),
             "c_" + dn(dt));
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  testing::expect_plan_matches_ref(g, DType::f32, 6, {.layout = LayoutPolicy::nchw}, kExact);
}

TEST(CodegenData, UpsampleNearestAndBilinear) {
  struct Case {
    std::string mode;
    bool ac;
    std::vector<double> scale;
    std::vector<int64_t> size;
  };
  const Case cases[] = {
      {"nearest", false, {2.0, 3.0}, {}},  {"nearest", false, {1.5, 0.7}, {}}, {"nearest", false, {}, {7, 3}},
      {"bilinear", false, {2.0, 1.5}, {}}, {"bilinear", true, {2.0, 2.5}, {}}, {"bilinear", false, {}, {9, 4}},
      {"bilinear", true, {}, {9, 1}},
  };
  Graph g("upsample");
  for (DType dt : kDTypes) {
    auto x = g.input("x_" + dn(dt), {2, 3, 5, 6}, dt);
    int k = 0;
    for (const Case& c : cases) {
      Upsample2dOptions o;
      o.mode = c.mode;
      o.align_corners = c.ac;
      o.scale = c.scale;
      o.size = c.size;
      g.output(g.upsample2d(x, o), fmt::format("{}{}_{}", c.mode, k++, dn(dt)));
    }
  }
  ASSERT_TRUE(g.verify().ok()) << g.name() << ": " << g.verify().message();
  expect_matches_ref(g, 8);
}

TEST(CodegenData, ConcatCopy) {
  // Concats of graph inputs are no elided concats: a copy kernel.
  Graph g("concat");
  for (DType dt : kDTypes) {
    const std::vector<Tensor> xs{g.input("a_" + dn(dt), {2, 3, 4, 5}, dt), g.input("b_" + dn(dt), {2, 3, 4, 5}, dt),
                                 g.input("c_" + dn(dt), {2, 3, 4, 5}, dt)};
    for (int64_t axis : {1, -1, 0}) g.output(g.concat(xs, axis), fmt::format("y{}_{}", axis + 1, dn(dt)));
    g.output(g.concat({g.input("d_" + dn(dt), {2, 1, 3}, dt), g.input("e_" + dn(dt), {2, 4, 3}, dt),
                       g.input("f_" + dn(dt), {2, 2, 3}, dt)},
                      1),
             "uneven_" + dn(dt));
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto plan = plan_graph(g);
  ASSERT_TRUE(plan.ok());
  for (const Group& grp : plan->groups) EXPECT_EQ(grp.kind, GroupKind::concat);
  testing::expect_plan_matches_ref(g, DType::f32, 9, {}, kExact);
}

// ---- trailing pointwise ops ----------------------------------------------------------------------------

// Moves every pointwise group that reads only a data group's output (and graph inputs) into that group,
// as a later fusion rule may: the data op's value then flows through the epilogue functor.
Plan fuse_trailing_pointwise(Plan p) {
  std::vector<Group> out;
  for (const Group& grp : p.groups) {
    const Node& first = p.graph.node(grp.nodes.front());
    const bool pointwise = grp.kind == GroupKind::pointwise && grp.nodes.size() == 1;
    if (pointwise && !out.empty() && out.back().kind != GroupKind::pointwise &&
        first.inputs[0][0] == out.back().outputs[0]) {
      Group& d = out.back();
      d.nodes.push_back(grp.nodes[0]);
      for (Tensor t : grp.inputs)
        if (t != d.outputs[0]) d.inputs.push_back(t);
      d.outputs = grp.outputs;
      continue;
    }
    out.push_back(grp);
  }
  p.groups = std::move(out);
  for (size_t k = 0; k < p.groups.size(); ++k) p.groups[k].id = static_cast<int32_t>(k);
  return p;
}

TEST(CodegenData, TrailingPointwiseOpsRunInTheEpilogue) {
  // The planner keeps data groups alone today; a forged plan puts a relu or an add of a full tensor after
  // a reshape (copy_contiguous), a tiled transpose and a slice (gather). No template changes: the
  // epilogue functor computes the chain and stores.
  Graph g("trailing");
  for (DType dt : kDTypes) {
    g.output(g.relu(g.reshape(g.input("a_" + dn(dt), {3, 5, 8}, dt), {8, 15})), "r_" + dn(dt));
    auto t = g.transpose(g.input("b_" + dn(dt), {3, 40, 33}, dt), {0, 2, 1});
    g.output(g.add(t, g.input("c_" + dn(dt), {3, 33, 40}, dt)), "t_" + dn(dt));
    g.output(g.relu(g.slice(g.input("d_" + dn(dt), {4, 9, 7}, dt), {1, -7, 0}, {4, 9, 7}, {2, 2, 3})), "s_" + dn(dt));
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto plan = plan_graph(g, {.max_group_ops = 1});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const Plan fused = fuse_trailing_pointwise(*plan);
  ASSERT_EQ(fused.groups.size(), 9u) << plan_to_text(fused);
  const TensorMap inputs = random_inputs(g, 11);
  auto want = run_reference(g, inputs);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = run_on_emu(fused, inputs, emu::Schedule::random);
  ASSERT_TRUE(got.ok()) << got.status().message();
  // relu and an f32 add of two stored values round once, at the store, like the reference.
  for (const auto& [name, w] : *want) EXPECT_EQ(got->outputs.at(name).data, w.data) << name;
  EXPECT_EQ(count_data_kernels(fused, codegen::DataConfig::Kernel::tiled_transpose), 3);
  EXPECT_EQ(count_data_kernels(fused, codegen::DataConfig::Kernel::copy_contiguous), 3);
}

// ---- randomized shapes -----------------------------------------------------------------------------------

TEST(CodegenData, RandomizedShapes) {
  // Ten random configurations (fixed seed) in one graph: transpose by a random perm, NCHW->NHWC, a slice
  // with random starts (negative in odd configs) and steps, upsampling to a random size.
  std::mt19937_64 rng(20261129);
  auto dim = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Graph g("random");
  std::string shapes;
  for (int cfg = 0; cfg < 10; ++cfg) {
    const DType dt = kDTypes[cfg % 3];
    const Shape s{dim(1, 2), dim(1, 40), dim(1, 6), dim(1, 9)};
    auto x = g.input(fmt::format("x{}", cfg), s, dt);
    std::vector<int64_t> perm{0, 1, 2, 3};
    std::shuffle(perm.begin(), perm.end(), rng);
    shapes += fmt::format(" {}:{}{}", cfg, s.to_string(), attr_value_to_string(perm));
    g.output(g.transpose(x, perm), fmt::format("t{}", cfg));
    g.output(g.layout_convert(x, Layout::NHWC), fmt::format("nhwc{}", cfg));
    std::vector<int64_t> starts, ends, steps;
    for (int d = 0; d < 4; ++d) {
      starts.push_back(dim(0, s[d] - 1) - (cfg % 2 ? s[d] : 0));
      ends.push_back(s[d] + 1);
      steps.push_back(dim(1, 3));
    }
    g.output(g.slice(x, starts, ends, steps), fmt::format("s{}", cfg));
    Upsample2dOptions o;
    o.mode = cfg % 2 ? "bilinear" : "nearest";
    o.align_corners = cfg % 4 == 1;
    o.size = {dim(1, 9), dim(1, 9)};
    g.output(g.upsample2d(x, o), fmt::format("{}{}", o.mode, cfg));
  }
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  SCOPED_TRACE("shapes and perms:" + shapes);
  expect_matches_ref(g, 100, {.layout = LayoutPolicy::nchw});
}

// ---- errors -----------------------------------------------------------------------------------------------

TEST(CodegenData, UnsupportedGroupsNameTheNode) {
  // Groups the data family cannot run (asked directly: the planner never gives it these) fail with the
  // node's name.
  Graph g("unsupported");
  auto x = g.input("x", {1, 2, 4, 4});
  g.output(g.max_pool2d(x, {}, "the_pool"), "p");
  g.output(g.relu(x, "the_relu"), "r");
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto plan = plan_graph(g, {.layout = LayoutPolicy::nchw});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->groups.size(), 2u);
  for (const Group& grp : plan->groups) {
    codegen::KernelBuilder b(*plan, grp);
    auto k = codegen::data_family().plan(b, plan->target);
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), StatusCode::unsupported);
    const std::string& m = k.status().message();
    EXPECT_TRUE(m.find("'the_pool' (max_pool2d)") != std::string::npos ||
                m.find("'the_relu' (relu)") != std::string::npos)
        << m;
  }
}

// ---- NVRTC -------------------------------------------------------------------------------------------------

TEST(CodegenData, KernelsCompileWithNvrtc) {
  // Every path of the family in one translation unit per dtype: tiles (TA = 32 and TA < 32), gathers,
  // the vector copy, slice, both upsample modes, concat, a weight transform.
  for (auto [dt, arch] : {std::pair{DType::f16, "sm_80"}, std::pair{DType::bf16, "sm_90"}}) {
    Graph g(fmt::format("nvrtc_{}", dtype_name(dt)));
    auto x = g.input("x", {2, 33, 5, 7}, dt);
    g.output(g.layout_convert(x, Layout::NHWC), "nhwc");
    g.output(g.layout_convert(g.input("z", {1, 3, 5, 7}, dt, Layout::NHWC), Layout::NCHW), "nchw");
    g.output(g.layout_convert(g.parameter("w", {16, 3, 3, 3}, dt, Layout::KCRS), Layout::KRSC), "krsc");
    g.output(g.transpose(g.input("t", {2, 3, 4, 5, 6}, dt), {4, 2, 0, 3, 1}), "t5");
    g.output(g.reshape(x, {66, 35}), "r");
    g.output(g.slice(x, {0, -8, 1, 0}, {2, 33, 5, 7}, {1, 3, 2, 2}), "s");
    g.output(g.upsample2d(x, {.scale = {2.0, 1.5}}), "un");
    g.output(g.upsample2d(x, {.size = {9, 4}, .mode = "bilinear", .align_corners = true}), "ub");
    g.output(g.upsample2d(x, {.scale = {2.0, 2.0}, .mode = "bilinear"}), "ub2");
    g.output(g.concat({x, g.input("c", {2, 4, 5, 7}, dt)}, 1), "cat");
    ASSERT_TRUE(g.verify().ok()) << g.verify().message();
    auto plan = plan_graph(g, {.layout = LayoutPolicy::nchw});
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    std::string source;
    for (const Group& grp : plan->groups) {
      auto k = kernel_of(*plan, grp);
      ASSERT_TRUE(k.ok()) << k.status().message();
      if (source.find(k->entry) == std::string::npos) source += k->source;
    }
    auto c = codegen::nvrtc_compile(source, {.arch = arch, .extra = {}, .source_name = g.name() + ".cu"});
    if (!c.ok() && c.status().code() == StatusCode::unsupported) GTEST_SKIP() << c.status().message();
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->spill_store_bytes, 0) << g.name();
    EXPECT_LE(c->shared_bytes, 32 * 33 * 4) << g.name();  // at most one 32 x 33 f32 tile
  }
}

// ---- structure --------------------------------------------------------------------------------------------

TEST(CodegenData, SourceIsIndependentOfNamesAndTiledWhenTheInnerDimMoves) {
  auto kernel_of = [](const std::string& name) {
    Graph g(name);
    g.output(g.layout_convert(g.input(name + "_x", {2, 64, 7, 9}), Layout::NHWC), name + "_y");
    auto plan = plan_graph(g, {.layout = LayoutPolicy::nchw});
    EXPECT_TRUE(plan.ok());
    auto k = codegen::generate_kernel(*plan, plan->groups[0]);
    EXPECT_TRUE(k.ok()) << k.status().message();
    return *k;
  };
  const codegen::Kernel a = kernel_of("a"), b = kernel_of("b");
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.entry, b.entry);
  EXPECT_EQ(a.family, KernelFamilyId::data);
  EXPECT_EQ(a.block.x, 256u);
  Graph g("tile");
  g.output(g.layout_convert(g.input("x", {2, 64, 7, 9}), Layout::NHWC), "y");
  auto plan = plan_graph(g, {.layout = LayoutPolicy::nchw});
  ASSERT_TRUE(plan.ok());
  const auto cs = testing::details_of<codegen::DataConfig>(*plan);
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kernel, codegen::DataConfig::Kernel::tiled_transpose);
  EXPECT_EQ(cs[0].tile_a, 32);  // the classic 32 x 33 tile
  EXPECT_EQ(cs[0].tile_b, 32);
}

}  // namespace
}  // namespace kiln
