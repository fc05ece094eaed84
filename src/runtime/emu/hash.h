// A stable 128-bit hash for the emu backend's on-disk cache keys: FNV-1a with the 128-bit parameters of
// the FNV specification (offset basis 0x6c62272e07bb014262b821756295c58d, prime 2^88 + 0x13b). Never
// std::hash, whose values may change between library versions and runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kiln::emu::detail {

class Hash128 {
 public:
  Hash128& add(std::string_view s) {
    for (unsigned char c : s) {
      h_ ^= c;
      h_ *= kPrime;
    }
    return *this;
  }
  // A field: its length first, so ("ab", "c") and ("a", "bc") differ.
  Hash128& field(std::string_view s) {
    add(fmt::format("{}:", s.size()));
    return add(s);
  }
  std::string hex() const {
    return fmt::format("{:016x}{:016x}", static_cast<uint64_t>(h_ >> 64), static_cast<uint64_t>(h_));
  }

 private:
  __extension__ typedef unsigned __int128 u128;
  static constexpr u128 kPrime = (u128{1} << 88) + 0x13b;
  u128 h_ = (u128{0x6c62272e07bb0142ull} << 64) | 0x62b821756295c58dull;
};

}  // namespace kiln::emu::detail
