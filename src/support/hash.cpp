// XXH3-128 through libxxhash: the canonical form is big-endian on every host, so a hash is the same 16
// bytes everywhere (keys and checksums written on one machine are read on another).
#include "support/hash.h"

#include <xxhash.h>

#include <cstdlib>
#include <string>

namespace kiln::support {
namespace {

Hash128 canonical(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  Hash128 out;
  for (size_t i = 0; i < 16; ++i) out.bytes[i] = c.digest[i];
  return out;
}

uint64_t big_endian_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

}  // namespace

std::string to_hex(const uint8_t* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[bytes[i] >> 4];
    s[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return s;
}

std::string Hash128::hex() const { return to_hex(bytes.data(), bytes.size()); }
uint64_t Hash128::high64() const { return big_endian_u64(bytes.data()); }
uint64_t Hash128::low64() const { return big_endian_u64(bytes.data() + 8); }

Hash128 xxh3_128(std::string_view bytes) { return canonical(XXH3_128bits(bytes.data(), bytes.size())); }

struct Hasher::State {
  XXH3_state_t* st = XXH3_createState();
  ~State() { XXH3_freeState(st); }
};

Hasher::Hasher() : s_(std::make_unique<State>()) {
  // XXH3_createState only fails when out of memory; like operator new, that is not a recoverable state.
  if (!s_->st) std::abort();
  XXH3_128bits_reset(s_->st);
}
Hasher::~Hasher() = default;

Hasher& Hasher::update(std::string_view bytes) {
  XXH3_128bits_update(s_->st, bytes.data(), bytes.size());
  return *this;
}

Hasher& Hasher::field(std::string_view bytes) {
  const std::string len = std::to_string(bytes.size()) + ":";
  return update(len).update(bytes);
}

Hash128 Hasher::digest() const { return canonical(XXH3_128bits_digest(s_->st)); }

}  // namespace kiln::support
