// The roofline ceilings of the known targets (include/kiln/profile.h).

#include "kiln/profile.h"

namespace kiln {

namespace {

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

}  // namespace kiln
