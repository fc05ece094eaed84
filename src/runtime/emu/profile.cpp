// The emulator's access counters: requests, sectors, bank wavefronts, compulsory traffic (profile.h).
#include "runtime/emu/profile.h"

#include <algorithm>
#include <bit>
#include <map>
#include <string_view>
#include <tuple>

namespace kiln::emu {

const char* access_op_name(AccessOp op) {
  switch (op) {
    case AccessOp::load: return "load";
    case AccessOp::store: return "store";
    case AccessOp::cp_async_src: return "cp.async src";
    case AccessOp::cp_async_dst: return "cp.async dst";
    case AccessOp::ldmatrix: return "ldmatrix";
  }
  return "?";
}

uint64_t AccessSite::waste_bytes() const {
  if (space == AccessSpace::global) return sectors * 32 > unique_bytes ? sectors * 32 - unique_bytes : 0;
  return bank_conflicts() * 128;
}

namespace {
template <class F>
uint64_t sum_sites(const KernelProfile& p, F f) {
  uint64_t s = 0;
  for (const AccessSite& a : p.sites) s += f(a);
  return s;
}
bool is_global_load(const AccessSite& a) {
  return a.space == AccessSpace::global && (a.op == AccessOp::load || a.op == AccessOp::cp_async_src);
}
bool is_global_store(const AccessSite& a) { return a.space == AccessSpace::global && a.op == AccessOp::store; }
}  // namespace

uint64_t KernelProfile::dram_bytes() const {
  uint64_t s = 0;
  for (const BufferTraffic& b : buffers) s += (b.read_sectors + b.written_sectors) * 32;
  return s;
}
uint64_t KernelProfile::load_sectors() const {
  return sum_sites(*this, [](const AccessSite& a) { return is_global_load(a) ? a.sectors : 0; });
}
uint64_t KernelProfile::store_sectors() const {
  return sum_sites(*this, [](const AccessSite& a) { return is_global_store(a) ? a.sectors : 0; });
}
uint64_t KernelProfile::load_bytes() const {
  return sum_sites(*this, [](const AccessSite& a) { return is_global_load(a) ? a.bytes : 0; });
}
uint64_t KernelProfile::store_bytes() const {
  return sum_sites(*this, [](const AccessSite& a) { return is_global_store(a) ? a.bytes : 0; });
}
uint64_t KernelProfile::load_requests() const {
  return sum_sites(*this, [](const AccessSite& a) { return is_global_load(a) ? a.requests : 0; });
}
uint64_t KernelProfile::store_requests() const {
  return sum_sites(*this, [](const AccessSite& a) { return is_global_store(a) ? a.requests : 0; });
}
uint64_t KernelProfile::shared_wavefronts() const {
  return sum_sites(*this, [](const AccessSite& a) { return a.space == AccessSpace::shared ? a.wavefronts : 0; });
}
uint64_t KernelProfile::data_stage_wavefronts() const {
  return shared_wavefronts() + sum_sites(*this, [](const AccessSite& a) { return a.data_wavefronts; });
}
uint64_t KernelProfile::shared_ideal_wavefronts() const {
  return sum_sites(*this,
                   [](const AccessSite& a) { return a.space == AccessSpace::shared ? a.ideal_wavefronts : 0; });
}
uint64_t KernelProfile::shared_requests() const {
  return sum_sites(*this, [](const AccessSite& a) { return a.space == AccessSpace::shared ? a.requests : 0; });
}

namespace detail {

void SiteCounts::add(const SiteCounts& o) {
  bytes_per_lane = std::max(bytes_per_lane, o.bytes_per_lane);
  requests += o.requests, lanes += o.lanes, bytes += o.bytes, unique_bytes += o.unique_bytes, sectors += o.sectors;
  data_wavefronts += o.data_wavefronts;
  wavefronts += o.wavefronts, ideal_wavefronts += o.ideal_wavefronts;
}

uint64_t global_sectors(const PendingRequest& r) {
  uint64_t s[64];
  int n = 0;
  for (uint32_t m = r.mask; m; m &= m - 1) {
    const int l = std::countr_zero(m);
    if (r.size[l] == 0) continue;
    const uint64_t first = r.addr[l] >> 5, last = (r.addr[l] + r.size[l] - 1) >> 5;
    for (uint64_t x = first; x <= last && n < 64; ++x) s[n++] = x;
  }
  std::sort(s, s + n);
  return static_cast<uint64_t>(std::unique(s, s + n) - s);
}

uint64_t unique_bytes(const PendingRequest& r) {
  std::pair<uint64_t, uint64_t> spans[32];
  int n = 0;
  for (uint32_t m = r.mask; m; m &= m - 1) {
    const int l = std::countr_zero(m);
    if (r.size[l] > 0) spans[n++] = {r.addr[l], r.addr[l] + r.size[l]};
  }
  std::sort(spans, spans + n);
  uint64_t total = 0, end = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t from = std::max(spans[i].first, end);
    if (spans[i].second > from) total += spans[i].second - from;
    end = std::max(end, spans[i].second);
  }
  return total;
}

// Shared memory serves a request in phases (all 32 lanes for accesses up to 4 bytes, half-warps for 8
// bytes, quarter-warps for 16 bytes and ldmatrix); within a phase, lanes reading distinct 4-byte words
// of one bank take one wavefront each, while lanes reading the same word share it (broadcast).
uint64_t shared_wavefronts(const PendingRequest& r, uint64_t* ideal) {
  int widest = 0;
  for (uint32_t m = r.mask; m; m &= m - 1) widest = std::max<int>(widest, r.size[std::countr_zero(m)]);
  const int phase = widest <= 4 ? 32 : widest <= 8 ? 16 : 8;
  uint64_t waves = 0, best = 0;
  for (int p0 = 0; p0 < 32; p0 += phase) {
    uint64_t words[128];
    int n = 0;
    for (int l = p0; l < p0 + phase; ++l) {
      if (!(r.mask >> l & 1u) || r.size[l] == 0) continue;
      for (uint64_t w = r.addr[l] >> 2; w <= (r.addr[l] + r.size[l] - 1) >> 2 && n < 128; ++w) words[n++] = w;
    }
    if (n == 0) continue;
    std::sort(words, words + n);
    n = static_cast<int>(std::unique(words, words + n) - words);
    int per_bank[32] = {};
    int most = 0;
    for (int i = 0; i < n; ++i) most = std::max(most, ++per_bank[words[i] % 32]);
    waves += static_cast<uint64_t>(most);
    best += static_cast<uint64_t>((n + 31) / 32);  // 32 words a wavefront at best
  }
  if (ideal) *ideal = best;
  return waves;
}

// ---- LaunchProfile ------------------------------------------------------------------------------------------

LaunchProfile::LaunchProfile(const std::vector<Range>& buffers) {
  for (const Range& r : buffers) {
    Bits b;
    b.range = r;
    // Sectors are counted from the buffer's first aligned sector, so the bitmap covers partial ones too.
    const auto first = reinterpret_cast<uintptr_t>(r.base) >> 5;
    const auto last = (reinterpret_cast<uintptr_t>(r.base) + std::max<size_t>(r.extent, 1) - 1) >> 5;
    b.words = (last - first + 1 + 63) / 64;
    b.read = std::make_unique<std::atomic<uint64_t>[]>(b.words);
    b.written = std::make_unique<std::atomic<uint64_t>[]>(b.words);
    bits_.push_back(std::move(b));
  }
}

void LaunchProfile::touch(const void* p, size_t bytes, bool store) {
  if (bytes == 0) return;
  const auto* c = static_cast<const unsigned char*>(p);
  for (Bits& b : bits_) {
    if (c < b.range.base || c + bytes > b.range.base + b.range.extent) continue;
    const uintptr_t base = reinterpret_cast<uintptr_t>(b.range.base) >> 5;
    const uintptr_t first = (reinterpret_cast<uintptr_t>(c) >> 5) - base;
    const uintptr_t last = ((reinterpret_cast<uintptr_t>(c) + bytes - 1) >> 5) - base;
    std::atomic<uint64_t>* words = store ? b.written.get() : b.read.get();
    for (uintptr_t s = first; s <= last; ++s) words[s / 64].fetch_or(uint64_t{1} << (s % 64), std::memory_order_relaxed);
    return;
  }
}

void LaunchProfile::merge(const std::unordered_map<SiteKey, SiteCounts, SiteKeyHash>& sites, uint64_t mma,
                          uint64_t blocks) {
  std::lock_guard lock(mu_);
  for (const auto& [k, c] : sites) sites_[k].add(c);
  mma_ += mma;
  blocks_ += blocks;
}

KernelProfile LaunchProfile::result(const std::vector<std::string>& buffer_names) const {
  KernelProfile p;
  p.mma = mma_;
  p.blocks = blocks_;
  // Sites by name: the same file may reach the runtime through more than one string literal, and a
  // template's path is the compile's scratch directory, of which only the part from kiln/ is kept.
  std::map<std::tuple<std::string, int, AccessOp, AccessSpace>, SiteCounts> named;
  for (const auto& [k, c] : sites_) {
    std::string_view f = k.file ? k.file : "?";
    if (const size_t at = f.rfind("/kiln/"); at != std::string_view::npos) f.remove_prefix(at + 1);
    named[{std::string(f), k.line, k.op, k.space}].add(c);
  }
  for (const auto& [k, c] : named) {
    AccessSite a;
    a.file = std::get<0>(k);
    a.line = std::get<1>(k);
    a.op = std::get<2>(k);
    a.space = std::get<3>(k);
    a.bytes_per_lane = c.bytes_per_lane;
    a.requests = c.requests, a.lanes = c.lanes, a.bytes = c.bytes, a.unique_bytes = c.unique_bytes;
    a.sectors = c.sectors, a.data_wavefronts = c.data_wavefronts;
    a.wavefronts = c.wavefronts, a.ideal_wavefronts = c.ideal_wavefronts;
    p.sites.push_back(std::move(a));
  }
  std::sort(p.sites.begin(), p.sites.end(), [](const AccessSite& a, const AccessSite& b) {
    if (a.waste_bytes() != b.waste_bytes()) return a.waste_bytes() > b.waste_bytes();
    if (a.file != b.file) return a.file < b.file;
    return a.line != b.line ? a.line < b.line : a.op < b.op;
  });
  for (size_t i = 0; i < bits_.size(); ++i) {
    BufferTraffic t;
    t.name = i < buffer_names.size() ? buffer_names[i] : "";
    t.extent = bits_[i].range.extent;
    for (size_t w = 0; w < bits_[i].words; ++w) {
      t.read_sectors += static_cast<uint64_t>(std::popcount(bits_[i].read[w].load(std::memory_order_relaxed)));
      t.written_sectors += static_cast<uint64_t>(std::popcount(bits_[i].written[w].load(std::memory_order_relaxed)));
    }
    p.buffers.push_back(std::move(t));
  }
  return p;
}

// ---- BlockRecorder ------------------------------------------------------------------------------------------

void BlockRecorder::begin_block(unsigned threads) {
  const unsigned nwarps = (threads + 31) / 32;
  warps_.assign(nwarps, {});
  full_mask_.assign(nwarps, 0xffffffffu);
  if (threads % 32) full_mask_.back() = (1u << (threads % 32)) - 1;
  ++blocks_;
}

void BlockRecorder::access(unsigned thread, const SiteKey& key, uint64_t addr, unsigned bytes) {
  const unsigned warp = thread / 32, lane = thread % 32;
  WarpSite& ws = warps_[warp][key];
  const uint32_t n = ws.count[lane]++;
  PendingRequest& r = ws.pending[n];
  r.mask |= 1u << lane;
  r.addr[lane] = addr;
  r.size[lane] = static_cast<uint8_t>(std::min(bytes, 255u));
  if (r.mask == full_mask_[warp]) {
    finish(key, r);
    ws.pending.erase(n);
  }
}

void BlockRecorder::ldmatrix(const SiteKey& key, const uint64_t* rows, int count) {
  PendingRequest r;
  r.mask = count >= 4 ? 0xffffffffu : (1u << (8 * count)) - 1;
  for (int l = 0; l < 8 * count; ++l) r.addr[l] = rows[l], r.size[l] = 16;
  finish(key, r);
}

void BlockRecorder::finish(const SiteKey& key, const PendingRequest& r) {
  SiteCounts& c = totals_[key];
  ++c.requests;
  for (uint32_t m = r.mask; m; m &= m - 1) {
    const int l = std::countr_zero(m);
    ++c.lanes;
    c.bytes += r.size[l];
    c.bytes_per_lane = std::max<int>(c.bytes_per_lane, r.size[l]);
  }
  if (key.space == AccessSpace::global) {
    c.sectors += global_sectors(r);
    if (key.op != AccessOp::cp_async_src) c.data_wavefronts += shared_wavefronts(r, nullptr);
    c.unique_bytes += unique_bytes(r);
  } else {
    uint64_t ideal = 0;
    c.wavefronts += shared_wavefronts(r, &ideal);
    c.ideal_wavefronts += ideal;
  }
}

void BlockRecorder::end_block() {
  for (auto& sites : warps_) {
    for (auto& [key, ws] : sites) {
      for (auto& [n, r] : ws.pending) finish(key, r);
    }
  }
  warps_.clear();
}

void BlockRecorder::flush_into(LaunchProfile& launch) {
  launch.merge(totals_, mma_, blocks_);
  totals_.clear();
  mma_ = blocks_ = 0;
}

}  // namespace detail
}  // namespace kiln::emu
