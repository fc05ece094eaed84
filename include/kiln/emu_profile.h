// The emulator's memory counters (LaunchOptions::profile): what Nsight Compute's memory tables report,
// obtained exactly from the addresses a kernel touches rather than from timing. See docs/profile.md.
//
// Accesses are grouped as a GPU groups them: the 32 lanes of a warp executing the n-th instance of one
// access site (a kiln::ld/st, cp.async, ldmatrix, kiln::lds/sts call at one source line) form one request.
// Global requests are measured in 32-byte sectors; shared-memory requests in bank wavefronts (32 banks of 4
// bytes; 8-byte accesses in two phases of 16 lanes, 16-byte accesses and ldmatrix in phases of 8 lanes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::emu {

enum class AccessSpace : uint8_t { global, shared };
enum class AccessOp : uint8_t {
  load,          // kiln::ld / ld_cg (global), kiln::lds (shared)
  store,         // kiln::st (global), kiln::sts (shared)
  cp_async_src,  // a cp.async's global source (a load through L2)
  cp_async_dst,  // a cp.async's shared destination (a shared store)
  ldmatrix,      // ldmatrix.x1/x2/x4: one phase of 8 row addresses per matrix
};
const char* access_op_name(AccessOp op);

// One access site's requests over the whole launch.
struct AccessSite {
  std::string file;
  int line = 0;
  AccessSpace space = AccessSpace::global;
  AccessOp op = AccessOp::load;
  int bytes_per_lane = 0;  // the widest access seen at the site
  uint64_t requests = 0;   // warp-level instructions
  uint64_t lanes = 0;      // lane accesses over all requests (32 per request for a full warp)
  uint64_t bytes = 0;      // bytes requested (the lanes' access sizes, summed)
  uint64_t unique_bytes = 0;  // per request, the distinct bytes the lanes touch (lanes reading one word count once)
  uint64_t sectors = 0;    // global: distinct 32-byte sectors per request, summed over requests
  // Global loads and stores (not cp.async): the wavefronts their data takes through L1's data banks,
  // counted as for shared memory (32 banks of 4 bytes; L1 and shared memory are one array with one data
  // stage, so these compete with shared memory's wavefronts).
  uint64_t data_wavefronts = 0;
  uint64_t wavefronts = 0, ideal_wavefronts = 0;  // shared: bank wavefronts taken, and the fewest possible

  double sectors_per_request() const { return requests ? double(sectors) / double(requests) : 0; }
  double wavefronts_per_request() const { return requests ? double(wavefronts) / double(requests) : 0; }
  // Global: distinct bytes requested / bytes of the sectors moved (1 = every byte of every sector used).
  double sector_efficiency() const { return sectors ? double(unique_bytes) / double(sectors * 32) : 1; }
  // Shared: wavefronts beyond the fewest possible (Nsight's bank conflicts).
  uint64_t bank_conflicts() const { return wavefronts - ideal_wavefronts; }
  // What the site moves that it did not need: sector bytes no lane asked for (global), or 128 bytes per
  // extra wavefront (shared). Sites are sorted by this, largest first.
  uint64_t waste_bytes() const;
};

// A buffer argument's compulsory traffic: the distinct 32-byte sectors any block read or wrote.
struct BufferTraffic {
  std::string name;
  uint64_t extent = 0;  // bytes
  uint64_t read_sectors = 0, written_sectors = 0;
};

struct KernelProfile {
  std::vector<AccessSite> sites;       // sorted by waste_bytes(), largest first
  std::vector<BufferTraffic> buffers;  // in argument order
  uint64_t mma = 0;                    // warp-level mma.m16n8k16 instructions
  uint64_t blocks = 0;

  // Unique sectors over every buffer, read plus written, in bytes: the DRAM traffic a kernel cannot avoid
  // (each sector once, as if L2 held everything it reuses).
  uint64_t dram_bytes() const;
  // Totals over the global sites: L2 <-> SM sectors (loads include cp.async sources) and bytes requested.
  uint64_t load_sectors() const, store_sectors() const, load_bytes() const, store_bytes() const;
  uint64_t load_requests() const, store_requests() const;
  // Totals over the shared sites.
  uint64_t shared_wavefronts() const, shared_ideal_wavefronts() const, shared_requests() const;
  // The L1/shared data stage's wavefronts: shared memory's plus global loads' and stores' data_wavefronts.
  uint64_t data_stage_wavefronts() const;
};

}  // namespace kiln::emu
