// Occupancy (CUDA's rules), waves, and the roofline ceilings of the known targets (include/kiln/profile.h).
#include <algorithm>
#include <climits>
#include <cmath>

#include "kiln/profile.h"

namespace kiln {

namespace {

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Boost clocks and FP32 lanes per SM, from NVIDIA's data sheets (H100/H200 SXM 1.98 GHz, A100 1.41 GHz,
// A10 1.695 GHz, L4 2.04 GHz; 128 FP32 lanes per SM on sm_86/89/90, 64 on sm_80).
struct Known {
  const char* name;
  double copy, tensor, mma_sync, ghz;
  int fp32_lanes;
  const char* source;
};
constexpr Known kKnown[] = {
    {"h200", 4.288e12, 793e12, 793e12 * 2 / 3, 1.98, 128,
     "H200: copy 4288 GB/s and bf16 matmul 793 TFLOP/s measured on the device (docs/gpu.md, 2026-11-30); "
     "mma.sync assumed 2/3 of that (the FlashAttention-3 paper: mma.sync reaches about 2/3 of Hopper's "
     "tensor-core peak; unmeasured here); FP32 from the 1.98 GHz boost clock"},
    {"h100", 0.893 * 3.35e12, 793e12, 793e12 * 2 / 3, 1.98, 128,
     "H100 SXM: copy = the H200's measured fraction (0.893) of the 3.35 TB/s data-sheet bandwidth; tensor "
     "rate as the H200 (same SM and clock); mma.sync assumed 2/3 of it"},
    {"a100", 0.893 * 2.039e12, 312e12, 312e12, 1.41, 64,
     "A100 SXM4 80GB data sheet (2.039 TB/s x 0.893 measured copy fraction, 312 TFLOP/s bf16 dense: "
     "mma.sync is the full-rate path on sm_80)"},
    {"a10", 0.893 * 600e9, 125e12, 125e12, 1.695, 128, "A10 data sheet (600 GB/s, 125 TFLOP/s bf16 dense)"},
    {"l4", 0.893 * 300e9, 121e12, 121e12, 2.04, 128, "L4 data sheet (300 GB/s, 121 TFLOP/s bf16 dense)"},
};

}  // namespace

DevicePeaks device_peaks(const Target& t) {
  const Known* k = nullptr;
  for (const Known& c : kKnown) {
    if (t.name == c.name) k = &c;
  }
  std::string note;
  if (!k) {  // a GPU kiln does not know by name: the known device of its generation, scaled by SMs
    k = t.cc() >= 90 ? &kKnown[0] : t.cc() >= 86 ? &kKnown[3] : &kKnown[2];
    note = " (not a known device: the figures of a " + std::string(k->name) + ", scaled by SM count)";
  }
  const int known_sms = target_named(k->name)->sm_count;
  const double scale = note.empty() ? 1.0 : static_cast<double>(t.sm_count) / known_sms;
  DevicePeaks p;
  p.copy_bytes_per_s = k->copy * scale;
  p.tensor_flops = k->tensor * scale;
  p.mma_sync_flops = k->mma_sync * scale;
  p.simt_fp32_flops = 2.0 * k->fp32_lanes * t.sm_count * k->ghz * 1e9;
  p.smem_wavefronts_per_s = double(t.sm_count) * k->ghz * 1e9;
  p.source = k->source + note;
  return p;
}

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
