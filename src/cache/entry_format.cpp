// Entry files: little-endian integers, length-prefixed fields, an XXH3-128 checksum at the end. The reader
// checks the cheap facts first (magic, version, length, key) and the checksum before parsing any field,
// so a field length is never trusted before the bytes that hold it are known to be intact.
#include "cache/entry_format.h"

#include <bit>
#include <cstring>

namespace kiln::cache_format {
namespace {

class Writer {
 public:
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void bytes(std::string_view b) {
    u64(b.size());
    out.append(b);
  }
  std::string out;
};

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool u32(uint32_t& v) {
    if (b_.size() - pos_ < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(b_[pos_ + i])} << (8 * i);
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t& v) {
    if (b_.size() - pos_ < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(b_[pos_ + i])} << (8 * i);
    pos_ += 8;
    return true;
  }
  bool i32(int& v) {
    uint32_t u = 0;
    if (!u32(u)) return false;
    v = static_cast<int32_t>(u);
    return true;
  }
  bool bytes(std::string_view& v) {
    uint64_t n = 0;
    if (!u64(n) || n > b_.size() - pos_) return false;
    v = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool at_end() const { return pos_ == b_.size(); }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

std::optional<CacheEntry> fail(std::string* why, const char* reason) {
  if (why) *why = reason;
  return std::nullopt;
}

}  // namespace

std::string encode(const CacheKey& key, const CacheEntry& e) {
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.u32(kFormatVersion);
  w.u32(0);  // reserved (flags), must be 0
  w.u64(0);  // total length, patched below
  w.out.append(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
  w.bytes(e.kernel_name);
  w.bytes(e.arch);
  for (int v :
       {e.info.registers, e.info.shared_bytes, e.info.stack_bytes, e.info.spill_store_bytes, e.info.spill_load_bytes}) {
    w.u32(static_cast<uint32_t>(v));
  }
  w.u64(std::bit_cast<uint64_t>(e.info.compile_ms));
  w.bytes(e.manifest);
  w.bytes(std::string_view(reinterpret_cast<const char*>(e.cubin.data()), e.cubin.size()));
  w.bytes(e.ptx);
  uint64_t total = w.out.size() + kChecksumBytes;
  for (int i = 0; i < 8; ++i) w.out[16 + i] = static_cast<char>(total >> (8 * i));
  CacheKey sum = xxh3_128(w.out);
  w.out.append(reinterpret_cast<const char*>(sum.bytes.data()), sum.bytes.size());
  return std::move(w.out);
}

std::optional<CacheEntry> decode(std::string_view b, const CacheKey& key, bool metadata_only, std::string* why) {
  if (b.size() < kHeaderBytes + kChecksumBytes) return fail(why, "too short");
  if (std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) return fail(why, "bad magic");
  Reader h(b.substr(8, 16));
  uint32_t version = 0, reserved = 0;
  uint64_t total = 0;
  (void)h.u32(version), (void)h.u32(reserved), (void)h.u64(total);
  if (version != kFormatVersion) return fail(why, "other format version");
  if (reserved != 0) return fail(why, "bad header");
  if (total != b.size()) return fail(why, "length differs from the file size (truncated or extended)");
  if (std::memcmp(b.data() + 24, key.bytes.data(), 16) != 0) return fail(why, "holds another key");
  std::string_view body = b.substr(0, b.size() - kChecksumBytes);
  CacheKey sum = xxh3_128(body);
  if (std::memcmp(b.data() + body.size(), sum.bytes.data(), 16) != 0) return fail(why, "checksum mismatch");

  Reader r(body.substr(kHeaderBytes));
  std::string_view name, arch, manifest, cubin, ptx;
  CacheEntry e;
  uint64_t ms = 0;
  bool ok = r.bytes(name) && r.bytes(arch) && r.i32(e.info.registers) && r.i32(e.info.shared_bytes) &&
            r.i32(e.info.stack_bytes) && r.i32(e.info.spill_store_bytes) && r.i32(e.info.spill_load_bytes) &&
            r.u64(ms) && r.bytes(manifest) && r.bytes(cubin) && r.bytes(ptx) && r.at_end();
  // Only a writer bug gets here (the checksum matched): still a miss, never a crash.
  if (!ok) return fail(why, "malformed fields");
  e.kernel_name = name;
  e.arch = arch;
  e.info.compile_ms = std::bit_cast<double>(ms);
  e.manifest = manifest;
  if (!metadata_only) {
    e.cubin.assign(cubin.begin(), cubin.end());
    e.ptx = ptx;
  }
  e.file_bytes = static_cast<int64_t>(b.size());
  return e;
}

}  // namespace kiln::cache_format
