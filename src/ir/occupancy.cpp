// Occupancy (CUDA's rules) and waves (include/kiln/occupancy.h).
#include "kiln/occupancy.h"

#include <algorithm>
#include <climits>

namespace kiln {

namespace {

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

}  // namespace

Occupancy occupancy(const Target& t, int threads, int regs, int64_t smem) {
  Occupancy o;
  const int max_warps = t.max_threads_per_sm / 32;
  const int warps = (std::max(threads, 1) + 31) / 32;
  const bool ampere_plus = t.cc() >= 80;
  // Shared memory: the driver reserves 1 KiB per block from sm_80 on; allocations in 128-byte units.
  const int64_t reserved = ampere_plus ? 1024 : 0;
  o.smem_allocated = round_up(smem + reserved, ampere_plus ? 128 : 256);
  // Registers: allocated per warp in units of 256, within 4 sub-partitions of the register file.
  const int64_t per_warp = round_up(int64_t{regs} * 32, 256);
  o.regs_allocated = per_warp * warps;
  const int64_t regs_per_block = 65536;  // every sm_80+ GPU
  int by_regs = INT_MAX;
  if (regs > 255 || per_warp * round_up(warps, 4) > regs_per_block || o.regs_allocated > regs_per_block) {
    by_regs = 0;
  } else if (per_warp > 0) {
    by_regs = static_cast<int>((t.regs_per_sm / 4 / per_warp) * 4 / warps);
  }
  int by_smem = 0;
  if (o.smem_allocated <= t.smem_per_block + reserved) by_smem = static_cast<int>(t.smem_per_sm / o.smem_allocated);
  const int by_warps = threads > 1024 ? 0 : max_warps / warps;
  const std::pair<int, const char*> limits[] = {
      {by_warps, "warps"}, {by_regs, "registers"}, {by_smem, "shared memory"}, {t.max_blocks_per_sm, "blocks"}};
  o.blocks_per_sm = INT_MAX;
  for (const auto& [n, why] : limits) {
    if (n < o.blocks_per_sm) o.blocks_per_sm = n, o.limiter = why;
  }
  o.warps_per_sm = o.blocks_per_sm * warps;
  o.fraction = static_cast<double>(o.warps_per_sm) / max_warps;
  return o;
}

int max_registers(const Target& t, int threads, int blocks) {
  // Blocks per SM never grow with registers: bisect for the last count that still fits `blocks`.
  if (occupancy(t, threads, 1, 0).blocks_per_sm < blocks) return 0;
  int lo = 1, hi = 255;  // occupancy(lo) fits; find the largest such
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (occupancy(t, threads, mid, 0).blocks_per_sm >= blocks) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

int64_t residency_pad(const Target& t, int64_t smem, int blocks) {
  const int fit = occupancy(t, 32, 1, smem).blocks_per_sm;  // shared memory's own limit (and blocks/SM)
  if (fit <= blocks || blocks <= 0) return 0;
  // The smallest allocation of which blocks + 1 no longer fit; the allocation is smem + the reserve rounded
  // up, so pad to one granule past smem_per_sm / (blocks + 1).
  const int64_t reserved = t.cc() >= 80 ? 1024 : 0, granule = t.cc() >= 80 ? 128 : 256;
  const int64_t want = round_up(t.smem_per_sm / (blocks + 1) + 1, granule);
  const int64_t pad = std::max<int64_t>(want - reserved - smem, 0);
  return occupancy(t, 32, 1, smem + pad).blocks_per_sm == blocks ? pad : 0;
}

Waves waves(const Target& t, int64_t blocks, int blocks_per_sm) {
  Waves w;
  w.blocks = blocks;
  w.blocks_per_wave = int64_t{std::max(blocks_per_sm, 0)} * t.sm_count;
  if (w.blocks_per_wave <= 0 || blocks <= 0) {
    w.tail_efficiency = 0;
    return w;
  }
  w.waves = static_cast<double>(blocks) / static_cast<double>(w.blocks_per_wave);
  const int64_t full = (blocks + w.blocks_per_wave - 1) / w.blocks_per_wave;
  w.tail_efficiency = static_cast<double>(blocks) / static_cast<double>(full * w.blocks_per_wave);
  return w;
}

}  // namespace kiln
