// The roofline estimate of one kernel (docs/profile.md, "The estimate"): what the counters and the static
// facts determine, charged in time; everything else named as a limiter.
#include <algorithm>
#include <cmath>

#include "profile/profile_internal.h"

namespace kiln::profile_detail {

namespace {

// Thresholds of the limiters (docs/profile.md): what the issue of kiln's own kernels asks of them.
constexpr double kSectorTarget = 0.90;  // bytes used of the sectors moved, main global sites
constexpr double kTailTarget = 0.85;    // average fill of the waves
constexpr double kOccupancyFloor = 0.25;
constexpr double kDramSlack = 1.10;  // DRAM traffic over the plan's bytes before it counts as excess

bool is_global(const emu::AccessSite& s) { return s.space == emu::AccessSpace::global; }

// The least sector efficiency among the global sites that move at least 5 % of the kernel's sectors.
double main_site_efficiency(const emu::KernelProfile& p) {
  uint64_t total = 0;
  for (const auto& s : p.sites) total += is_global(s) ? s.sectors : 0;
  double worst = 1;
  for (const auto& s : p.sites) {
    if (is_global(s) && s.sectors * 20 >= total && s.sectors > 0) worst = std::min(worst, s.sector_efficiency());
  }
  return worst;
}

}  // namespace

void estimate(const DevicePeaks& peaks, KernelProfileRow& row) {
  KernelEstimate& e = row.estimate;
  const double planned = static_cast<double>(row.planned_bytes);
  double bank_factor = 1, wavefronts = 0, ideal_wavefronts = 0;
  row.dram_bytes = planned;
  if (row.counters) {
    const emu::KernelProfile& c = *row.counters;
    if (row.emulated_planned_bytes > 0) {
      row.dram_bytes = planned * static_cast<double>(c.dram_bytes()) / static_cast<double>(row.emulated_planned_bytes);
    }
    row.main_site_efficiency = main_site_efficiency(c);
    if (c.shared_ideal_wavefronts() > 0) {
      bank_factor = static_cast<double>(c.shared_wavefronts()) / static_cast<double>(c.shared_ideal_wavefronts());
    }
    // The L1/shared data stage: shared memory's wavefronts and the data wavefronts of global loads and
    // stores (one array, one data path). Its traffic per block does not depend on the batch (the same
    // tiles): carried by the grid's size.
    const double blocks = static_cast<double>(row.grid.x) * row.grid.y * row.grid.z;
    if (c.blocks > 0) {
      const double per_block = blocks / static_cast<double>(c.blocks);
      wavefronts = static_cast<double>(c.data_stage_wavefronts()) * per_block;
      ideal_wavefronts =
          static_cast<double>(c.data_stage_wavefronts() - c.shared_wavefronts() + c.shared_ideal_wavefronts()) *
          per_block;
    }
  }
  const double math_peak = row.tensor_cores ? peaks.mma_sync_flops : peaks.simt_fp32_flops;
  e.memory_us = row.dram_bytes / peaks.copy_bytes_per_s * 1e6;
  e.math_us = row.flops / math_peak * 1e6;
  e.shared_us = wavefronts / peaks.smem_wavefronts_per_s * 1e6;
  const double tail = row.waves.tail_efficiency > 0 ? row.waves.tail_efficiency : 1;
  e.bound = e.memory_us >= e.math_us ? "memory" : "math";
  if (e.shared_us > std::max(e.memory_us, e.math_us)) e.bound = "shared";
  e.us = std::max({e.memory_us, e.math_us, e.shared_us}) / tail;
  // The ceiling of the bound: planned bytes at the copy bandwidth, flops at the peak, or the shared
  // wavefronts without their conflicts.
  const double ideal_us = e.bound == "memory" ? planned / peaks.copy_bytes_per_s * 1e6
                          : e.bound == "math" ? row.flops / math_peak * 1e6
                                              : ideal_wavefronts / peaks.smem_wavefronts_per_s * 1e6;
  e.ceiling_fraction = e.us > 0 ? ideal_us / e.us : 0;

  // Worst first: what the estimate charges, then what it does not model but Nsight would flag.
  std::vector<std::pair<double, std::string>> found;
  if (row.dram_bytes > planned * kDramSlack) found.push_back({row.dram_bytes / planned, "dram"});
  if (bank_factor > 1.0 + 1e-9) found.push_back({bank_factor, "banks"});
  if (tail < kTailTarget) found.push_back({1 / tail, "tail"});
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [cost, name] : found) e.limiters.push_back(std::move(name));
  if (row.main_site_efficiency < kSectorTarget) e.limiters.push_back("sectors");
  if (row.occupancy.fraction < kOccupancyFloor) e.limiters.push_back("occupancy");
  if (row.spill_bytes > 0) e.limiters.push_back("spills");
}

}  // namespace kiln::profile_detail
