// Occupancy and waves: how many blocks of a kernel an SM holds (CUDA's rules) and how a grid of them fills
// the SMs. Code generation picks GEMM tiles with these (codegen/family_gemm.h); kiln profile reports them
// (include/kiln/profile.h, docs/profile.md).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/target.h"

namespace kiln {

// CUDA's occupancy rules (the CUDA toolkit's cuda_occupancy.h, cudaOccMaxActiveBlocksPerMultiprocessor,
// with the default shared-memory carveout) for a block of `threads` using `regs` registers per thread
// and `smem` bytes of shared memory (static + dynamic).
struct Occupancy {
  int blocks_per_sm = 0;
  int warps_per_sm = 0;
  double fraction = 0;         // warps_per_sm / the most an SM holds
  std::string limiter;         // "warps", "registers", "shared memory", "blocks"
  int64_t smem_allocated = 0;  // per block: smem + the 1 KiB the driver reserves (sm_80+), to 128 bytes
  int64_t regs_allocated = 0;  // per block: per warp, regs x 32 rounded up to 256
};
Occupancy occupancy(const Target& t, int threads, int regs, int64_t smem);

// The registers per thread that still let `blocks` blocks of `threads` be resident: what ptxas may use under
// __launch_bounds__(threads, blocks). 0 when no register count does (too many threads).
int max_registers(const Target& t, int threads, int blocks);

// Dynamic shared memory that keeps more than `blocks` blocks of a kernel using `smem` bytes (static and
// dynamic) off one SM: 0 when shared memory already does, or when `blocks` do not fit.
int64_t residency_pad(const Target& t, int64_t smem, int blocks);

struct Waves {
  int64_t blocks = 0, blocks_per_wave = 0;  // blocks_per_wave = blocks per SM x SMs
  double waves = 0;
  // blocks / (full waves rounded up x blocks_per_wave): the average fill of the waves; 1 when every wave
  // is full. A grid smaller than one wave has efficiency blocks / blocks_per_wave.
  double tail_efficiency = 1;
};
Waves waves(const Target& t, int64_t blocks, int blocks_per_sm);

}  // namespace kiln
