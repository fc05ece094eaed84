// Cache keys: XXH3-128 (support/hash.h) over the manifest text, and the manifest's escaping rules.
#include "kiln/cache.h"
#include "support/hash.h"

namespace kiln {

const char* cache_kind_name(CacheKind kind) {
  switch (kind) {
    case CacheKind::nvrtc: return "nvrtc";
    case CacheKind::emu: return "emu";
    case CacheKind::plan: return "plan";
  }
  return "?";
}

CacheKey xxh3_128(std::string_view bytes) { return CacheKey{support::xxh3_128(bytes).bytes}; }

std::string CacheKey::hex() const { return support::to_hex(bytes.data(), bytes.size()); }

std::optional<CacheKey> CacheKey::parse(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  CacheKey k;
  for (size_t i = 0; i < 16; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    k.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return k;
}

KeyManifest::KeyManifest() { text_ = "kiln-cache-key=" + std::to_string(kCacheKeyVersion) + "\n"; }

void KeyManifest::add(std::string_view field, std::string_view value) {
  KILN_CHECK(!field.empty() && field.find_first_of("=\n") == std::string_view::npos,
             "bad manifest field '" + std::string(field) + "'");
  KILN_CHECK(field != "kiln-cache-key", "the version line is reserved");
  for (const auto& f : fields_) KILN_CHECK(f != field, "manifest field '" + std::string(field) + "' added twice");
  fields_.emplace_back(field);
  text_ += field;
  text_ += '=';
  // Escaping keeps "a=x\nb=y" as one value distinct from two fields a=x and b=y.
  for (char c : value) {
    if (c == '\\') {
      text_ += "\\\\";
    } else if (c == '\n') {
      text_ += "\\n";
    } else {
      text_ += c;
    }
  }
  text_ += '\n';
}

void KeyManifest::add_hashed(std::string_view field, std::string_view value) {
  add(field, "xxh3:" + xxh3_128(value).hex());
}

}  // namespace kiln
