// Shared by tests/test_codegen_conv.cpp and tests/test_codegen_matmul.cpp: graphs built with the C++
// builder, planned, run in the emulator (checked mode) through run_plan_emu and compared with the reference
// backend on random inputs; and NVRTC compiles without spills.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "codegen/family.h"
#include "codegen/kernel.h"
#include "codegen/nvrtc.h"
#include "codegen_check.h"
#include "kiln/compare.h"
#include "kiln/emu_plan.h"
#include "kiln/kiln.h"
#include "kiln/plan.h"

namespace kiln::gemm_test {

// Every graph of these tests is one kernel that accumulates in f32 and rounds once, on the store of the
// output: one rounding's tolerance (tests/codegen_check.h).
using testing::one_rounding;

// Plans `g`, runs it on emu (checked mode, fiber schedule `s`) and ref with random_inputs(g, seed), and
// compares every output with `tol` (default: one rounding of the output's dtype); `family`, when given,
// must be among the kernels run ("conv2d", "matmul", ...). Returns the plan (none when a step failed).
inline std::optional<Plan> expect_emu_matches_ref(const Graph& g, uint64_t seed, const PlanOptions& po = {},
                                                  const char* family = nullptr,
                                                  emu::Schedule s = emu::Schedule::forward,
                                                  std::optional<Tolerance> tol = {}) {
  auto plan = plan_graph(g, po);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return {};
  const TensorMap inputs = random_inputs(g, seed);
  auto want = run_reference(g, inputs);
  EXPECT_TRUE(want.ok()) << want.status().message();
  if (!want.ok()) return {};
  EmuPlanReport report;
  EmuPlanOptions eo;  // on a GPU, the GPU schedules its own warps
  eo.launch.checked = true;
  eo.launch.schedule = s;
  eo.launch.seed = seed;
  auto got = testing::on_cuda() ? testing::run_plan_on_test_device(*plan, inputs, &report)
                                : run_plan_emu(*plan, inputs, eo, &report);
  EXPECT_TRUE(got.ok()) << got.status().message();
  if (!got.ok()) return {};
  if (family) {
    const std::string prefix = std::string("kiln_") + family + "_";
    EXPECT_TRUE(std::any_of(report.entries.begin(), report.entries.end(),
                            [&](const std::string& e) { return e.rfind(prefix, 0) == 0; }))
        << "no " << family << " kernel in\n"
        << plan_to_text(*plan);
  }
  for (const auto& [name, w] : *want) {
    auto it = got->find(name);
    EXPECT_TRUE(it != got->end()) << "no output " << name;
    if (it == got->end()) continue;
    const Comparison c = compare_tensors(it->second, w, tol.value_or(one_rounding(w.dtype)));
    EXPECT_TRUE(c.ok) << g.name() << " output " << name << " (seed " << seed << ", schedule " << emu::schedule_name(s)
                      << "): " << c.problem;
  }
  return std::move(*plan);
}

// The generated source and, where kiln was built with NVRTC and `compile` is set, the sm_80 PTX of the one
// kernel of `g`'s plan.
struct OnlyKernel {
  std::string source, ptx;
  codegen::KernelConfig config;
  // The GEMM tile of a conv2d or matmul kernel.
  codegen::GemmTiles tiles() const {
    if (auto* c = std::get_if<codegen::ConvConfig>(&config.detail)) return c->tiles;
    if (auto* m = std::get_if<codegen::MatmulConfig>(&config.detail)) return m->tiles;
    ADD_FAILURE() << "not a GEMM kernel: " << kernel_family_name(config.family);
    return {};
  }
};
inline OnlyKernel only_kernel(const Graph& g, bool compile = true) {
  OnlyKernel out;
  auto plan = plan_graph(g);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return out;
  EXPECT_EQ(plan->kernel_count(), 1) << plan_to_text(*plan);
  for (const Group& grp : plan->groups) {
    if (!grp.is_kernel()) continue;
    auto k = codegen::generate_kernel(*plan, grp);
    EXPECT_TRUE(k.ok()) << k.status().message();
    if (!k.ok()) return out;
    out.source = k->source;
    auto config = codegen::plan_kernel(*plan, grp);
    EXPECT_TRUE(config.ok()) << config.status().message();
    if (config.ok()) out.config = *config;
    if (!compile) return out;
#ifdef KILN_HAVE_NVRTC
    codegen::NvrtcOptions o;
    o.arch = "sm_80";
    auto c = codegen::nvrtc_compile(k->source, o);
    if (c.ok()) {
      out.ptx = c->ptx;
    } else if (c.status().code() != StatusCode::unsupported) {  // unsupported: no NVRTC library here
      ADD_FAILURE() << c.status().message();
    }
#endif
  }
  return out;
}

// Every kernel of `g`'s plan compiled by NVRTC for sm_80 and sm_90: no error, no spills, no stack; prints
// registers and compile times (where kiln was built with the toolkit).
inline void expect_compiles_without_spills(const Graph& g, const PlanOptions& po = {}) {
#ifdef KILN_HAVE_NVRTC
  auto plan = plan_graph(g, po);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  for (const Group& grp : plan->groups) {
    if (!grp.is_kernel()) continue;
    auto k = codegen::generate_kernel(*plan, grp);
    ASSERT_TRUE(k.ok()) << k.status().message();
    for (const char* arch : {"sm_80", "sm_90"}) {
      codegen::NvrtcOptions o;
      o.arch = arch;
      auto c = codegen::nvrtc_compile(k->source, o);
      if (!c.ok() && c.status().code() == StatusCode::unsupported) GTEST_SKIP() << c.status().message();
      ASSERT_TRUE(c.ok()) << c.status().message() << "\n" << k->source;
      std::printf("  %s %s: %d registers, %d bytes shared, %d/%d bytes spilled, block %u, %.0f ms\n", k->entry.c_str(),
                  arch, c->registers, c->shared_bytes, c->spill_store_bytes, c->spill_load_bytes, k->block.x,
                  c->compile_ms);
      EXPECT_EQ(c->spill_store_bytes + c->spill_load_bytes, 0) << k->entry << " " << arch << "\n" << c->log;
      EXPECT_EQ(c->stack_bytes, 0) << k->entry << " " << arch << "\n" << c->log;
    }
  }
#else
  (void)g, (void)po;
  GTEST_SKIP() << "built without the CUDA toolkit";
#endif
}

}  // namespace kiln::gemm_test
