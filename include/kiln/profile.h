// Performance without a GPU: what Nsight Compute would report about a plan's kernels that the kernels'
// access patterns and resources determine exactly, and a roofline estimate built on them. See
// docs/profile.md (each column, the model, how it maps to Nsight Compute's metrics).
//
//   auto full = kiln::plan_graph(graph);                            // the shapes the estimate is for
//   auto small = kiln::plan_graph(*kiln::rebatch_graph(graph, 1));  // what the emulator runs with counters
//   auto prof = kiln::profile_plan(*full, &*small, {});
//   for (const auto& k : prof->kernels) fmt::print("{} {:.1f} us {}\n", k.entry, k.estimate.us, k.estimate.bound);
//
// Static facts (registers, spills, shared memory from ptxas; the launch; occupancy; waves) are for `full`;
// the counters (sectors per request, bank wavefronts, DRAM sectors) come from running `small` on the
// emulator and are carried to `full` as ratios: per-request measures do not depend on the batch, and the
// DRAM traffic is scaled by the plan's bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/emu.h"
#include "kiln/graph.h"
#include "kiln/occupancy.h"
#include "kiln/plan.h"
#include "kiln/status.h"
#include "kiln/target.h"

namespace kiln {

// The ceilings of a Target's roofline, and where each number comes from.
struct DevicePeaks {
  double copy_bytes_per_s = 0;       // device-to-device copy, bytes read + written
  double tensor_flops = 0;           // dense f16/bf16 with f32 accumulation on the best path (wgmma on sm_90)
  double mma_sync_flops = 0;         // mma.sync.m16n8k16, what kiln's tensor-core main loop issues
  double simt_fp32_flops = 0;        // FFMA: 2 flops x 128 lanes per SM x SMs x boost clock
  double smem_wavefronts_per_s = 0;  // shared memory: one 128-byte wavefront per SM per clock
  std::string source;
};
DevicePeaks device_peaks(const Target& t);

struct KernelEstimate {
  double us = 0;                      // estimated time
  double memory_us = 0;               // DRAM bytes / copy bandwidth
  double math_us = 0;                 // flops / the main loop's peak
  double shared_us = 0;               // shared-memory wavefronts (conflicts included) / the SMs' wavefront rate
  std::string bound;                  // "memory", "math" or "shared"
  double ceiling_fraction = 0;        // the bound's ideal time (planned bytes or flops at its peak) / us
  std::vector<std::string> limiters;  // what keeps it from its ceiling, worst first: "sectors", "banks", ...
};

// One launch of a plan.
struct KernelProfileRow {
  int group = -1;  // Plan::groups index
  std::string entry, family;
  std::string config;  // the family's decisions in short, e.g. "tc 128x64x32 w8 s3"
  emu::Dim3 grid, block;
  int64_t static_smem = 0, dynamic_smem = 0;
  std::optional<int> registers;  // from ptxas (absent when NVRTC could not compile the kernel)
  int spill_bytes = 0;           // spill stores + loads
  Occupancy occupancy;
  Waves waves;
  bool tensor_cores = false;
  int64_t planned_bytes = 0;  // what the plan says the group must move (Group::bytes_read + bytes_written)
  double flops = 0;           // of the GEMM families (2 per multiply-add); 0 for the rest
  // The counters, from the emulated run (absent without one), and the planned bytes of that run's group.
  std::optional<emu::KernelProfile> counters;
  int64_t emulated_planned_bytes = 0;
  // From the counters: DRAM bytes carried to this row's shapes, and the main sites' worst efficiency.
  double dram_bytes = 0;
  double main_site_efficiency = 1;  // the least sector efficiency of the global sites that move >= 5 %
  KernelEstimate estimate;
};

struct PlanProfile {
  Target target;
  DevicePeaks peaks;
  std::vector<KernelProfileRow> kernels;  // in launch order
  double estimated_us = 0;                // sum over kernels
  int64_t planned_bytes = 0;
  double flops = 0;
  std::vector<std::string> warnings;  // e.g. why registers or counters are missing
};

struct ProfileOptions {
  emu::LaunchOptions launch{};  // for the emulated run (its profile flag is set)
  uint64_t seed = 1;            // random inputs of the emulated run
};

// Profiles `plan`'s kernels on its target. `emulated` (may be `plan` itself, or null for static facts
// only) runs on the emulator with counters; its kernel groups must match `plan`'s one for one (same
// family and kind): the same graph at another batch does. A mismatch leaves the counters out, with a
// warning. Fails only when the plan's kernels cannot be generated or the emulated run fails.
Result<PlanProfile> profile_plan(const Plan& plan, const Plan* emulated, const ProfileOptions& options = {});

// A kernel's time measured on a GPU (kiln bench --json on cuda), for the roofline chart.
struct MeasuredKernel {
  int group = -1;  // Plan::groups index, as in KernelProfileRow::group
  double us = 0;
};

struct RooflineOptions {
  std::string title;                     // shown above the chart, e.g. the graph's name and batch
  std::vector<MeasuredKernel> measured;  // drawn beside the estimates, joined to them by a line
  std::string measured_source;           // where the measured times come from (the legend says it)
};

// The roofline chart of a profile as a standalone SVG document (docs/profile.md, "The roofline chart"):
// the target's ceilings (copy bandwidth, the tensor-core and SIMT peaks), each kernel with FLOPs as a
// point at its arithmetic intensity and estimated throughput, coloured by what bounds it, with a dotted
// line up to its roof and, where kiln models one, a tick at its shared-memory ceiling; kernels that only
// move data (0 FLOP) as bars against the copy bandwidth below it; and a table of every kernel. Plain
// SVG 1.1 with text as text: it opens in any browser and renders with rsvg-convert.
std::string roofline_svg(const PlanProfile& profile, const RooflineOptions& options = {});

// The plan to take counters from for `g` planned as `full`: `g` at the smallest batch from `from` on
// (doubling, up to g's own) at which every kernel gets the same family, config and block as in `full`, so
// that the counters describe the very kernels estimated (tile choices depend on the problem's size). The
// batch chosen goes to `batch`. Fails when `g` cannot be rebatched.
Result<Plan> plan_for_counters(const Graph& g, const Plan& full, const PlanOptions& options, int64_t from,
                               int64_t* batch);

// The same graph with batch `batch`: the leading dim of every graph input (not parameters) set to it,
// everything else re-derived. Fails, naming the node, when an op's attributes fix the old batch.
Result<Graph> rebatch_graph(const Graph& g, int64_t batch);

}  // namespace kiln
