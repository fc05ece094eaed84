// Little-endian integers and length-prefixed byte strings, written to and read from a buffer: the binary
// forms kiln stores (cache entry files, plan cache entries). The reader never trusts a length before the
// bytes it covers are there: every read of a truncated or malformed buffer fails (returns false) instead of
// reading past the end, and a failed read leaves the reader failed (ok() is false from then on), so a decoder
// may read a whole record and check once.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::support {

class ByteWriter {
 public:
  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<uint64_t>(v)); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void bytes(std::string_view b) {  // a u64 length, then the bytes
    u64(b.size());
    out.append(b);
  }
  std::string out;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view b) : b_(b) {}
  bool u8(uint8_t& v) {
    if (!take(1)) return false;
    v = static_cast<uint8_t>(b_[pos_ - 1]);
    return true;
  }
  bool u32(uint32_t& v) {
    if (!take(4)) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(b_[pos_ - 4 + i])} << (8 * i);
    return true;
  }
  bool u64(uint64_t& v) {
    if (!take(8)) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(b_[pos_ - 8 + i])} << (8 * i);
    return true;
  }
  bool i32(int32_t& v) {
    uint32_t u = 0;
    if (!u32(u)) return false;
    v = static_cast<int32_t>(u);
    return true;
  }
  bool i64(int64_t& v) {
    uint64_t u = 0;
    if (!u64(u)) return false;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool f64(double& v) {
    uint64_t u = 0;
    if (!u64(u)) return false;
    v = std::bit_cast<double>(u);
    return true;
  }
  bool boolean(bool& v) {
    uint8_t u = 0;
    if (!u8(u) || u > 1) return fail();
    v = u == 1;
    return true;
  }
  bool bytes(std::string_view& v) {
    uint64_t n = 0;
    if (!u64(n) || n > b_.size() - pos_) return fail();
    v = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool bytes(std::string& v) {
    std::string_view s;
    if (!bytes(s)) return false;
    v.assign(s);
    return true;
  }
  // A count of items that each take at least `min_item_bytes`: more than the bytes left could hold fails,
  // so that a corrupt count never makes a decoder reserve or loop without bound.
  bool count(uint64_t& n, size_t min_item_bytes = 1) {
    if (!u64(n) || n > (b_.size() - pos_) / (min_item_bytes ? min_item_bytes : 1)) return fail();
    return true;
  }
  bool fail() {
    failed_ = true;
    pos_ = b_.size();
    return false;
  }
  bool ok() const { return !failed_; }
  bool at_end() const { return pos_ == b_.size(); }

 private:
  bool take(size_t n) {
    if (failed_ || b_.size() - pos_ < n) return fail();
    pos_ += n;
    return true;
  }
  std::string_view b_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace kiln::support
