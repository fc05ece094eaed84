// The emulator's access counters (LaunchOptions::profile; include/kiln/emu_profile.h). Each worker groups
// its block's accesses into warp-level requests (lane L's n-th execution of a site joins the warp's n-th
// request of that site), measures a request when its last lane arrives (or when the block ends, for lanes
// that never arrive), and keeps per-site totals; the launch merges its workers' totals and the buffers'
// sector bitmaps when it ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/emu_profile.h"

namespace kiln::emu::detail {

struct SiteKey {
  const char* file;
  int line;
  AccessOp op;
  AccessSpace space;
  bool operator==(const SiteKey&) const = default;
};
struct SiteKeyHash {
  size_t operator()(const SiteKey& k) const {
    return std::hash<const void*>()(k.file) ^ (size_t(k.line) * 0x9e3779b97f4a7c15ull) ^ (size_t(k.op) << 1 | size_t(k.space));
  }
};

// A request being gathered: which lanes have arrived, and where each accessed.
struct PendingRequest {
  uint32_t mask = 0;
  uint64_t addr[32];  // global: the address; shared: the offset in the block's shared memory
  uint8_t size[32];
};

struct SiteCounts {
  int bytes_per_lane = 0;
  uint64_t requests = 0, lanes = 0, bytes = 0, unique_bytes = 0, sectors = 0, data_wavefronts = 0, wavefronts = 0,
           ideal_wavefronts = 0;
  void add(const SiteCounts& o);
};

// The whole launch's counters: merged totals, and one sector bitmap per buffer argument (read, written).
class LaunchProfile {
 public:
  struct Range {
    const unsigned char* base;
    size_t extent;
  };
  explicit LaunchProfile(const std::vector<Range>& buffers);
  // Marks the sectors [p, p + bytes) of the buffer holding them (none: an access outside every buffer).
  void touch(const void* p, size_t bytes, bool store);
  void merge(const std::unordered_map<SiteKey, SiteCounts, SiteKeyHash>& sites, uint64_t mma, uint64_t blocks);
  KernelProfile result(const std::vector<std::string>& buffer_names) const;

 private:
  struct Bits {
    Range range;
    std::unique_ptr<std::atomic<uint64_t>[]> read, written;
    size_t words = 0;
  };
  std::vector<Bits> bits_;
  std::mutex mu_;
  std::unordered_map<SiteKey, SiteCounts, SiteKeyHash> sites_;
  uint64_t mma_ = 0, blocks_ = 0;
};

// One worker's recorder, reset for every block.
class BlockRecorder {
 public:
  void begin_block(unsigned threads);
  // Lane `thread % 32` of warp `thread / 32` executes site `key` once, accessing `bytes` at `addr`.
  void access(unsigned thread, const SiteKey& key, uint64_t addr, unsigned bytes);
  // A whole ldmatrix: the row offsets of lanes 0..8*count-1.
  void ldmatrix(const SiteKey& key, const uint64_t* rows, int count);
  void mma() { ++mma_; }
  void end_block();
  void flush_into(LaunchProfile& launch);

 private:
  struct WarpSite {
    uint32_t count[32] = {};
    std::unordered_map<uint32_t, PendingRequest> pending;
  };
  void finish(const SiteKey& key, const PendingRequest& r);
  std::vector<std::unordered_map<SiteKey, WarpSite, SiteKeyHash>> warps_;
  std::vector<uint32_t> full_mask_;  // per warp: the lanes the block has
  std::unordered_map<SiteKey, SiteCounts, SiteKeyHash> totals_;
  uint64_t mma_ = 0, blocks_ = 0;
};

// The measures of one request (exposed for the tests of the counting rules).
uint64_t global_sectors(const PendingRequest& r);
uint64_t unique_bytes(const PendingRequest& r);
uint64_t shared_wavefronts(const PendingRequest& r, uint64_t* ideal);

}  // namespace kiln::emu::detail
