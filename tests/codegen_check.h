// Checking generated kernels against the reference: plan a graph, run the plan's kernels on the emu
// backend (or the GPU, in the gpu test executable) and the graph on `ref` with the same random inputs,
// compare every output.
//
// Tolerances: include/kiln/compare.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "codegen/family.h"
#include "kiln/compare.h"
#include "kiln/emu_plan.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/plan.h"
#include "kiln/reference.h"
#include "test_device.h"

namespace kiln::testing {

using kiln::Tolerance;
using kiln::tolerance_for;

// What the kernel families decided for every kernel group of a plan (in group order): tests assert on these
// (tiles, vector widths, main loop) instead of reading generated source.
inline std::vector<codegen::KernelConfig> configs_of(const Plan& p) {
  std::vector<codegen::KernelConfig> cs;
  for (const Group& grp : p.groups) {
    if (!grp.is_kernel() && grp.kind != GroupKind::weight_transform) continue;
    auto c = codegen::plan_kernel(p, grp);
    EXPECT_TRUE(c.ok()) << c.status().message();
    if (c.ok()) cs.push_back(std::move(*c));
  }
  return cs;
}

// The family-specific part of every config of type C (e.g. codegen::NormConfig).
template <class C>
std::vector<C> details_of(const Plan& p) {
  std::vector<C> out;
  for (const codegen::KernelConfig& c : configs_of(p))
    if (const C* d = std::get_if<C>(&c.detail)) out.push_back(*d);
  return out;
}

// One rounding of the storage type: for graphs whose every output is one kernel's f32 result rounded once
// on store (the reference computes in f64 and rounds once too), tighter than tolerance_for, which allows for
// intermediates stored between kernels.
inline Tolerance one_rounding(DType t) {
  switch (t) {
    case DType::f32: return {1e-4, 2e-5};
    case DType::f16: return {2e-3, 1e-3};
    case DType::bf16: return {1.6e-2, 8e-3};
  }
  return {1e-4, 2e-5};
}

// The same graph with every input and parameter (and so every value) in dtype `t`; casts keep their
// target. Goes through the JSON form, which names every tensor's dtype.
inline Graph with_dtype(const Graph& g, DType t) {
  nlohmann::json j = nlohmann::json::parse(graph_to_json(g));
  for (auto& tensor : j["tensors"]) tensor["dtype"] = std::string(dtype_name(t));
  Result<Graph> r = graph_from_json(j.dump(), "with_dtype");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : g;
}

// Compares one output; returns "" when within tolerance, else a description of the worst element.
inline std::string compare_output(const std::string& name, const HostTensor& got, const HostTensor& want,
                                  Tolerance tol) {
  const Comparison c = compare_tensors(got, want, tol);
  return c.ok ? "" : name + ": " + c.problem;
}

// The device generated kernels are checked on: the emulator in checked mode (every global access
// bounds-checked against its buffer) or, in the gpu test executable (tests/test_device.h, tests/gpu/), the
// GPU through the execution API. Outputs are poisoned before the run either way.
inline Result<TensorMap> run_plan_on_test_device(const Plan& plan, const TensorMap& inputs, EmuPlanReport* report) {
  if (!on_cuda()) {
    EmuPlanOptions eo;
    eo.launch.checked = true;
    return run_plan_emu(plan, inputs, eo, report);
  }
  static Result<Engine> engine = Engine::open(DeviceKind::cuda);
  if (!engine.ok()) return engine.status();
  KILN_ASSIGN_OR_RETURN(Executable exe, engine->compile(plan));
  RunReport run;
  KILN_ASSIGN_OR_RETURN(TensorMap out, run_on_host_tensors(*engine, exe, inputs, &run));
  if (report) {
    report->kernels_launched = run.kernels_launched + run.weight_transforms_run;
    report->distinct_kernels = exe.report().distinct_kernels;
    report->entries = exe.report().entries;
  }
  return out;
}

struct CheckResult {
  Plan plan;
  EmuPlanReport report;
};

// Plans `g`, runs it on the test device (above) and ref with random_inputs(g, seed) and compares every
// output with the tolerance of `dtype` (the graph's data dtype).
inline CheckResult expect_plan_matches_ref(const Graph& g, DType dtype, uint64_t seed, const PlanOptions& options = {},
                                           std::optional<Tolerance> tol = {}) {
  CheckResult cr;
  Result<Plan> plan = plan_graph(g, options);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  if (!plan.ok()) return cr;
  const TensorMap inputs = random_inputs(g, seed);
  Result<TensorMap> want = run_reference(g, inputs);
  EXPECT_TRUE(want.ok()) << want.status().message();
  Result<TensorMap> got = run_plan_on_test_device(*plan, inputs, &cr.report);
  EXPECT_TRUE(got.ok()) << got.status().message();
  if (!want.ok() || !got.ok()) return cr;
  for (const auto& [name, w] : *want) {
    auto it = got->find(name);
    EXPECT_TRUE(it != got->end()) << "no output " << name;
    if (it == got->end()) continue;
    const std::string problem = compare_output(name, it->second, w, tol.value_or(tolerance_for(dtype)));
    EXPECT_EQ(problem, "") << "graph " << g.name() << " in " << dtype_name(dtype) << ", seed " << seed;
  }
  cr.plan = std::move(*plan);
  return cr;
}

// One Executable of `g` on emu run once per seed, with new inputs each time, matches ref every time (what
// kernels that count blocks in Plan::zeroed scratch need: counters zero at every run).
inline void expect_every_run_matches_ref(const Graph& g, DType dtype, std::initializer_list<uint64_t> seeds) {
  auto engine = Engine::open(DeviceKind::emu);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto exe = engine->compile(g);
  ASSERT_TRUE(exe.ok()) << exe.status().message();
  for (uint64_t seed : seeds) {
    SCOPED_TRACE(seed);
    const TensorMap inputs = random_inputs(g, seed);
    auto want = run_reference(g, inputs);
    ASSERT_TRUE(want.ok()) << want.status().message();
    auto got = run_on_host_tensors(*engine, *exe, inputs);
    ASSERT_TRUE(got.ok()) << got.status().message();
    for (const auto& [name, w] : *want) {
      const Comparison cmp = compare_tensors(got->at(name), w, tolerance_for(dtype));
      EXPECT_TRUE(cmp.ok) << name << ": " << cmp.problem;
    }
  }
}

}  // namespace kiln::testing
