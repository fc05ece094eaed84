// The one hash of kiln: XXH3-128 (xxHash 0.8, a specified algorithm whose values never change between
// builds, platforms or library versions). Every cache key, entry checksum and stable name is made from it,
// never from std::hash (whose values may change between standard libraries and runs).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::support {

// A 128-bit hash in canonical (big-endian) byte order: hex() equals `xxh128sum`'s output.
struct Hash128 {
  std::array<uint8_t, 16> bytes{};

  std::string hex() const;  // 32 lowercase hex digits
  // The first / last 8 canonical bytes as a number: for a 64-bit (or, folded, shorter) stable value.
  uint64_t high64() const;
  uint64_t low64() const;
  auto operator<=>(const Hash128&) const = default;
};

// XXH3-128 of `bytes`.
Hash128 xxh3_128(std::string_view bytes);

// XXH3-128 over a sequence of inputs without concatenating them. update() hashes bytes as they are (so
// update("ab").update("c") equals xxh3_128("abc")); field() prefixes a field with its length and ':', so
// that field("ab").field("c") and field("a").field("bc") differ: use it for keys made of several parts.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& update(std::string_view bytes);
  Hasher& field(std::string_view bytes);
  Hash128 digest() const;  // may be called more than once; update() may continue after it

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Lowercase hex of any bytes.
std::string to_hex(const uint8_t* bytes, size_t n);

}  // namespace kiln::support
