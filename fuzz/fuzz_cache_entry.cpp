// libFuzzer harness: bytes -> the kernel cache's entry parser (cache_format::decode), for nvrtc and emu
// entries alike (one format, kind in the header).
//
// Byte 0 of the input: bit 0 set means "repair" the rest before decoding: write its real length into the
// header and its real XXH3-128 at the end, as a faulty kiln that wrote bad fields under a good checksum
// would, so the fuzzer reaches the field parser behind the checksum. The key asked for is the one the bytes
// hold at offset 24 (else zero) and the kind the one at offset 12 (else nvrtc), so header checks pass when
// the fuzzer keeps those bytes. Properties: a refusal says why; an entry that decodes re-encodes to exactly
// the bytes it came from.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cache/entry_format.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  if (size < 1) return 0;
  const bool repair = data[0] & 1;
  std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  CacheKey key;
  if (bytes.size() >= 40) std::memcpy(key.bytes.data(), bytes.data() + 24, 16);
  CacheKind kind = CacheKind::nvrtc;
  if (bytes.size() >= 16) kind = static_cast<CacheKind>(static_cast<uint8_t>(bytes[12]) % kCacheKindCount);
  if (repair && bytes.size() >= cache_format::kHeaderBytes + cache_format::kChecksumBytes) {
    const uint64_t total = bytes.size();
    for (int i = 0; i < 8; ++i) bytes[16 + i] = static_cast<char>(total >> (8 * i));
    const size_t body = bytes.size() - cache_format::kChecksumBytes;
    const CacheKey sum = xxh3_128(std::string_view(bytes).substr(0, body));
    std::memcpy(bytes.data() + body, sum.bytes.data(), 16);
  }
  for (bool metadata_only : {false, true}) {
    std::string why;
    std::optional<CacheEntry> e = cache_format::decode(bytes, key, kind, metadata_only, &why);
    if (!e) {
      if (why.empty()) fuzz::violated("a refused entry has no reason");
      continue;
    }
    if (!metadata_only && cache_format::encode(key, *e, kind) != bytes) {
      fuzz::violated("decode -> encode changed the entry's bytes");
    }
  }
  return 0;
}
