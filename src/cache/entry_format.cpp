// Entry files: little-endian integers, length-prefixed fields, an XXH3-128 checksum at the end. The reader
// checks the cheap facts first (magic, version, length, key) and the checksum before parsing any field,
// so a field length is never trusted before the bytes that hold it are known to be intact.
#include "cache/entry_format.h"

#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "support/byte_codec.h"

namespace kiln::cache_format {
namespace {

using Writer = support::ByteWriter;
using Reader = support::ByteReader;

std::optional<CacheEntry> fail(std::string* why, std::string reason) {
  if (why) *why = std::move(reason);
  return std::nullopt;
}

// Why a file whose header passed the cheap checks does not hold `key` of `kind`, or "" if it does.
std::string header_problem(std::string_view b, const CacheKey& key, CacheKind kind) {
  Reader h(b.substr(8, 16));
  uint32_t version = 0, kind_code = 0;
  uint64_t total = 0;
  (void)h.u32(version), (void)h.u32(kind_code), (void)h.u64(total);
  if (version != kFormatVersion) {
    return fmt::format("format version {} (this kiln reads version {})", version, kFormatVersion);
  }
  if (kind_code >= static_cast<uint32_t>(kCacheKindCount)) return fmt::format("unknown kind {}", kind_code);
  if (kind_code != static_cast<uint32_t>(kind)) {
    return fmt::format("kind mismatch: holds an {} entry, expected {}",
                       cache_kind_name(static_cast<CacheKind>(kind_code)), cache_kind_name(kind));
  }
  if (total > b.size()) return fmt::format("truncated: {} bytes of the {} the header gives", b.size(), total);
  if (total < b.size()) return fmt::format("extended: {} bytes where the header gives {}", b.size(), total);
  if (std::memcmp(b.data() + 24, key.bytes.data(), 16) != 0) {
    CacheKey held;
    std::memcpy(held.bytes.data(), b.data() + 24, 16);
    return fmt::format("key mismatch: holds the entry of key {}", held.hex());
  }
  return "";
}

}  // namespace

std::string encode(const CacheKey& key, const CacheEntry& e, CacheKind kind) {
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.u32(kFormatVersion);
  w.u32(static_cast<uint32_t>(kind));
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

std::optional<CacheEntry> decode(std::string_view b, const CacheKey& key, CacheKind kind, bool metadata_only,
                                 std::string* why) {
  if (b.empty()) return fail(why, "truncated: empty file");
  if (b.size() < kHeaderBytes + kChecksumBytes) {
    return fail(why, fmt::format("truncated: {} bytes, less than a header and checksum", b.size()));
  }
  if (std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) return fail(why, "bad magic (not a kiln cache entry)");
  if (std::string problem = header_problem(b, key, kind); !problem.empty()) return fail(why, std::move(problem));
  std::string_view body = b.substr(0, b.size() - kChecksumBytes);
  CacheKey sum = xxh3_128(body);
  if (std::memcmp(b.data() + body.size(), sum.bytes.data(), 16) != 0) return fail(why, "checksum mismatch (corrupted)");

  Reader r(body.substr(kHeaderBytes));
  std::string_view name, arch, manifest, cubin, ptx;
  CacheEntry e;
  uint64_t ms = 0;
  bool ok = r.bytes(name) && r.bytes(arch) && r.i32(e.info.registers) && r.i32(e.info.shared_bytes) &&
            r.i32(e.info.stack_bytes) && r.i32(e.info.spill_store_bytes) && r.i32(e.info.spill_load_bytes) &&
            r.u64(ms) && r.bytes(manifest) && r.bytes(cubin) && r.bytes(ptx) && r.at_end();
  // Only a writer bug gets here (the checksum matched): still a miss, never a crash.
  if (!ok) return fail(why, "malformed fields (checksum intact: written by a faulty kiln)");
  e.kernel_name = name;
  e.arch = arch;
  e.info.compile_ms = std::bit_cast<double>(ms);
  e.manifest = manifest;
  if (!metadata_only) {
    // Through unsigned char pointers: from char iterators, assign copied byte by byte (a tenth of a warm
    // start's time went there).
    const auto* c = reinterpret_cast<const uint8_t*>(cubin.data());
    e.cubin.assign(c, c + cubin.size());
    e.ptx = ptx;
  }
  e.file_bytes = static_cast<int64_t>(b.size());
  e.kind = kind;
  e.key = key;
  return e;
}

}  // namespace kiln::cache_format
