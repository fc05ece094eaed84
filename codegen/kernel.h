// Code generation: one fused group of a Plan -> one CUDA kernel (source, entry name, launch configuration,
// parameters). The device code lives in templates/kiln/*.cuh; what is generated is only glue: the
// functors that load a group's inputs and apply its pointwise chain before the one store, and an
// `extern "C" __global__` entry that instantiates a template with the group's shapes as constants.
//
// Generated source is deterministic and independent of node order and tensor names: values are numbered
// by a walk of the group, parameters in a canonical order (KernelBuilder::declare_params); the entry name carries a
// hash of the rest of the source, so identical groups anywhere (ResNet-50's repeated blocks) give byte-identical
// kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernel_kinds.h"
#include "kiln/plan.h"
#include "kiln/status.h"
#include "kiln/target.h"

namespace kiln::codegen {

// Bump when generated code changes meaning for the same group (part of every cache key).
inline constexpr int kCodegenVersion = 2;  // 2: kernel families, canonical parameters

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

// A parameter of a kernel: the memory of `tensor` (for a tensor written into a slice of an elided concat's
// output, the concat output's memory; the offset is compiled into the kernel), the group's scratch, or the
// batch (an `int`).
struct KernelParam {
  enum class Scratch : uint8_t { none, counters, partials };
  Tensor tensor;
  bool written = false;
  // Not a tensor (`tensor` invalid) but the group's scratch (Group::scratch): its counters (zero when the
  // run starts) or its partial sums.
  Scratch scratch = Scratch::none;
  // Not memory but an `int` passed by value (-1 for the other parameters): the batch (dim 0 of the group's
  // tensors) of a batch-generic kernel, whose source leaves the batch out so that one kernel serves every
  // batch, or (`size`) one of the sizes a shape-generic kernel takes as arguments (a conv's channels and
  // spatial extents: docs/architecture.md, "Batch-generic kernels", "Shape-generic conv kernels").
  int32_t value = -1;
  bool size = false;
  bool is_value() const { return value >= 0; }
  bool is_batch() const { return value >= 0 && !size; }
  static KernelParam batch_value(int64_t n) {
    KernelParam p;
    p.value = static_cast<int32_t>(n);
    return p;
  }
  static KernelParam size_value(int64_t v) {
    KernelParam p = batch_value(v);
    p.size = true;
    return p;
  }
};

struct Kernel {
  KernelFamilyId family = KernelFamilyId::none;
  std::string entry;   // kiln_<family>_<first ops>_<hash16>: readable in profiles; identity is the source
  std::string source;  // a complete CUDA C++ translation unit (includes only kiln/*.cuh)
  Dim3 grid, block;
  uint32_t dynamic_smem = 0;
  std::vector<KernelParam> params;  // the kernel's parameters in order: pointers, and the batch (an int)
  std::string target;               // Target::key() of the plan it was made for (part of its cache key)
};

// The kernel of a group (a weight transform's too: it runs once per bound weight, but it is a kernel), for
// the plan's target, by the group's family (chosen when it was planned; else the first that runs it). An
// elided concat runs none and is an error to ask for. Fails with a Status naming the group and its first op
// when no family runs the group.
Result<Kernel> generate_kernel(const Plan& plan, const Group& group);

struct KernelConfig;
// What the group's family decides for its kernel (tiles, vector widths, launch shape, parameters), without
// writing source: what tests and `kiln plan` look at.
Result<KernelConfig> plan_kernel(const Plan& plan, const Group& group);

}  // namespace kiln::codegen
