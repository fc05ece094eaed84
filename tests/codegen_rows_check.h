// The checks of the norm and pool families' tests (tests/test_codegen_norm.cpp, test_codegen_pool.cpp):
// codegen_check.h's comparison with one rounding's tolerance, and NVRTC compiles without spills.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codegen/family.h"
#include "codegen/kernel.h"
#include "codegen/nvrtc.h"
#include "codegen_check.h"
#include "kiln/emu.h"
#include "kiln/plan.h"

namespace kiln::rows_test {

// Every graph of these tests rounds once per output: one rounding's tolerance (tests/codegen_check.h).
using testing::one_rounding;

// expect_plan_matches_ref in the dtype of the graph's first input, with one rounding's tolerance;
// `kernels` >= 0: the plan must have that many kernels (a test of a fused group checks the fusion).
inline void expect_emu_matches_ref(const Graph& graph, uint64_t seed, const PlanOptions& options = {},
                                   int kernels = -1) {
  Graph g = graph;
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  const DType t = g.tensor(g.bound_tensors().front()).dtype;
  testing::CheckResult cr = testing::expect_plan_matches_ref(g, t, seed, options, one_rounding(t));
  if (kernels >= 0) {
    EXPECT_EQ(cr.plan.kernel_count(), kernels) << plan_to_text(cr.plan);
  }
}

// The vector width (`V = n` in the generated Cfg) of every kernel of `graph`'s plan that has one, sorted:
// which cases of a test took the 16-byte path (8 or 4), the 8-byte one (4 for 16-bit types) or none (1).
inline std::vector<int> vector_widths(const Graph& graph, const PlanOptions& options = {}) {
  std::vector<int> r;
  Graph g = graph;
  EXPECT_TRUE(g.verify().ok());
  auto plan = plan_graph(g, options);
  EXPECT_TRUE(plan.ok());
  if (!plan.ok()) return r;
  for (const Group& grp : plan->groups) {
    if (!grp.is_kernel()) continue;
    auto c = codegen::plan_kernel(*plan, grp);
    EXPECT_TRUE(c.ok()) << c.status().message();
    if (!c.ok()) continue;
    if (auto* n = std::get_if<codegen::NormConfig>(&c->detail)) r.push_back(n->vec);
    if (auto* p = std::get_if<codegen::PoolConfig>(&c->detail); p && !p->global) r.push_back(p->vec);
  }
  std::sort(r.begin(), r.end());
  return r;
}

// The one kernel of `graph`'s plan (16-bit tensors only) run in emu twice on the same random inputs: with
// every buffer 16-byte aligned, and with every buffer 2 bytes past that (a caller's own pointers; an
// Executable never binds such). The vector forms then move each value alone: the outputs must be equal bit
// for bit. `config_ok` is checked of the kernel's KernelConfig (the vector path is there to be exercised).
inline void expect_same_when_misaligned(const Graph& graph, const PlanOptions& options,
                                        const std::function<bool(const codegen::KernelConfig&)>& config_ok) {
  Graph g = graph;
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto plan = plan_graph(g, options);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->kernel_count(), 1) << plan_to_text(*plan);
  const Group* grp = nullptr;
  for (const Group& x : plan->groups)
    if (x.is_kernel()) grp = &x;
  auto k = codegen::generate_kernel(*plan, *grp);
  ASSERT_TRUE(k.ok()) << k.status().message();
  auto c = codegen::plan_kernel(*plan, *grp);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(config_ok(*c)) << k->source;
  auto m = emu::compile(k->source, {k->entry});
  ASSERT_TRUE(m.ok()) << m.status().message();

  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<std::vector<uint16_t>> inputs;
  for (const codegen::KernelParam& p : k->params) {
    if (p.is_value()) {  // an int by value (a batch-generic kernel)
      inputs.emplace_back();
      continue;
    }
    const TensorInfo& ti = plan->graph.tensor(p.tensor);  // the planned graph (canonicalize may add tensors)
    ASSERT_EQ(dtype_size(ti.dtype), 2);
    std::vector<uint16_t> v(static_cast<size_t>(ti.shape.numel()));
    for (uint16_t& e : v) e = ti.dtype == DType::f16 ? f32_to_f16_bits(dist(rng)) : f32_to_bf16_bits(dist(rng));
    inputs.push_back(std::move(v));
  }
  auto run = [&](size_t misalign) {
    std::vector<std::vector<unsigned char>> mem;
    std::vector<emu::Arg> args;
    for (size_t i = 0; i < k->params.size(); ++i) {
      if (k->params[i].is_value()) {
        args.push_back(emu::Arg::value(k->params[i].value));
        mem.emplace_back();
        continue;
      }
      const size_t bytes = inputs[i].size() * 2;
      mem.emplace_back(bytes + 32);
      unsigned char* base = mem.back().data();
      unsigned char* p = base + (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16 + misalign;
      if (k->params[i].written) {
        std::memset(p, 0xff, bytes);  // poison
      } else {
        std::memcpy(p, inputs[i].data(), bytes);
      }
      args.push_back(emu::Arg::buffer(p, bytes, fmt::format("p{}", i)));
    }
    emu::LaunchOptions lo;
    lo.checked = true;
    const Status st = emu::launch(**m, k->entry, {k->grid.x, k->grid.y, k->grid.z},
                                  {k->block.x, k->block.y, k->block.z}, k->dynamic_smem, args, lo);
    EXPECT_TRUE(st.ok()) << st.message();
    std::vector<std::vector<unsigned char>> out;
    for (size_t i = 0; i < k->params.size(); ++i) {
      if (!k->params[i].written || k->params[i].is_value()) continue;
      const unsigned char* p = static_cast<const unsigned char*>(args[i].base);
      out.emplace_back(p, p + args[i].extent);
    }
    return out;
  };
  const auto aligned = run(0);
  const auto misaligned = run(2);
  ASSERT_FALSE(aligned.empty());
  EXPECT_TRUE(aligned == misaligned);
}

// Every kernel of `graph`'s plan compiled by NVRTC for `arch`: no compile error and no spills (where kiln
// was built with the toolkit; a host without NVRTC skips).
inline void expect_compiles_without_spills(const Graph& graph, const std::string& arch,
                                           const PlanOptions& options = {}) {
#ifdef KILN_HAVE_NVRTC
  Graph g = graph;
  ASSERT_TRUE(g.verify().ok()) << g.verify().message();
  auto plan = plan_graph(g, options);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const Group& grp : plan->groups) {
    if (!grp.is_kernel()) continue;
    auto k = codegen::generate_kernel(*plan, grp);
    ASSERT_TRUE(k.ok()) << k.status().message();
    codegen::NvrtcOptions o;
    o.arch = arch;
    auto c = codegen::nvrtc_compile(k->source, o);
    if (!c.ok() && c.status().code() == StatusCode::unsupported) GTEST_SKIP() << c.status().message();
    ASSERT_TRUE(c.ok()) << c.status().message() << "\n" << k->source;
    std::printf("  %s %s: %d registers, %d bytes shared, %d/%d bytes spilled, block %u\n", k->entry.c_str(),
                arch.c_str(), c->registers, c->shared_bytes, c->spill_store_bytes, c->spill_load_bytes, k->block.x);
    EXPECT_EQ(c->spill_store_bytes + c->spill_load_bytes, 0) << k->entry << " " << arch << "\n" << c->log;
    EXPECT_EQ(c->stack_bytes, 0) << k->entry << " " << arch << "\n" << c->log;
  }
#else
  (void)graph, (void)arch, (void)options;
  GTEST_SKIP() << "built without the CUDA toolkit";
#endif
}

}  // namespace kiln::rows_test
