// NumPy .npy tensor files: writing NumPy's exact header, reading versions 1.0-3.0 with every check.
//
// The format (numpy/lib/format.py): the magic "\x93NUMPY", a major and a minor version byte, the header
// length (little-endian uint16 in 1.0, uint32 in 2.0 and 3.0), then the header: a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and ended by '\n' so that
// the data starts at a multiple of 64 bytes. The data follows in C order.
#include "kiln/npy.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "support/atomic_file.h"
#include "support/half_float.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kMagicLen = 8;               // magic + 2 version bytes
constexpr size_t kArrayAlign = 64;            // NumPy aligns the data to 64 bytes
constexpr size_t kGrowthDigits = 21;          // NumPy leaves room for the first dim to grow to 21 digits
constexpr uint32_t kMaxHeaderLen = 1u << 20;  // longer headers are refused (NumPy's own limit is 10000)

// ---- writing ------------------------------------------------------------------------------------------

// The header dict exactly as NumPy writes it (keys sorted, repr of each value, growth padding).
std::string header_dict(const HostTensor& t) {
  std::string shape;
  const auto& dims = t.shape.dims();
  if (dims.size() == 1) {
    shape = fmt::format("({},)", dims[0]);
  } else {
    shape = fmt::format("({})", fmt::join(dims, ", "));
  }
  std::string h = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npy_descr(t.dtype), shape);
  if (!dims.empty()) {
    size_t digits = fmt::formatted_size("{}", dims[0]);
    if (digits < kGrowthDigits) h.append(kGrowthDigits - digits, ' ');
  }
  return h;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// ---- reading: the header --------------------------------------------------------------------------------

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
};

// A tiny parser for the Python literals NumPy writes: a dict with string keys whose values are strings,
// True/False or tuples of integers.
class LiteralParser {
 public:
  explicit LiteralParser(std::string_view s) : s_(s) {}

  // Parses the whole dict; on failure returns false and sets error().
  bool parse_dict(Header& h) {
    skip_ws();
    if (!eat('{')) return fail("expected '{' at the start of the header");
    bool have_descr = false, have_fortran = false, have_shape = false;
    for (;;) {
      skip_ws();
      if (eat('}')) break;
      std::string key;
      if (!parse_string(key)) return fail(fmt::format("expected a quoted key at header offset {}", pos_));
      skip_ws();
      if (!eat(':')) return fail(fmt::format("expected ':' after key '{}'", key));
      skip_ws();
      if (key == "descr") {
        if (have_descr) return fail("key 'descr' appears twice");
        if (!parse_string(h.descr))
          return fail("'descr' must be a quoted string (structured dtypes are not supported)");
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_fortran) return fail("key 'fortran_order' appears twice");
        if (!parse_bool(h.fortran_order)) return fail("'fortran_order' must be True or False");
        have_fortran = true;
      } else if (key == "shape") {
        if (have_shape) return fail("key 'shape' appears twice");
        if (!parse_int_tuple(h.shape)) {
          return error_.empty() ? fail("'shape' must be a tuple of non-negative integers") : false;
        }
        have_shape = true;
      } else {
        return fail(fmt::format("unexpected key '{}' (expected 'descr', 'fortran_order' and 'shape')", key));
      }
      skip_ws();
      if (eat(',')) continue;
      skip_ws();
      if (eat('}')) break;
      return fail(fmt::format("expected ',' or '}}' at header offset {}", pos_));
    }
    skip_ws();
    if (pos_ != s_.size()) return fail(fmt::format("unexpected text after the dict at header offset {}", pos_));
    if (!have_descr) return fail("missing key 'descr'");
    if (!have_fortran) return fail("missing key 'fortran_order'");
    if (!have_shape) return fail("missing key 'shape'");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool fail(std::string msg) {
    if (error_.empty()) error_ = std::move(msg);
    return false;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool eat_word(std::string_view w) {
    if (s_.substr(pos_, w.size()) == w) {
      pos_ += w.size();
      return true;
    }
    return false;
  }
  bool parse_string(std::string& out) {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
    char q = s_[pos_++];
    out.clear();
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\' || s_[pos_] == '\n') return false;  // escapes never occur in a valid header
      out.push_back(s_[pos_++]);
    }
    return eat(q);
  }
  bool parse_bool(bool& out) {
    if (eat_word("True")) {
      out = true;
      return true;
    }
    if (eat_word("False")) {
      out = false;
      return true;
    }
    return false;
  }
  bool parse_int(int64_t& out) {
    size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(s_[pos_] - '0');
      if (v > static_cast<uint64_t>(INT64_MAX / 10)) return fail("a dim in 'shape' is too large");
      ++pos_;
    }
    if (pos_ == start) return false;
    eat('L');  // Python 2 longs
    out = static_cast<int64_t>(v);
    return true;
  }
  bool parse_int_tuple(std::vector<int64_t>& out) {
    out.clear();
    if (!eat('(')) return false;
    skip_ws();
    if (eat(')')) return true;
    for (;;) {
      skip_ws();
      int64_t v = 0;
      if (!parse_int(v)) return false;
      out.push_back(v);
      if (out.size() > 64) return fail("'shape' has more than 64 dims");
      skip_ws();
      if (eat(')')) return true;
      if (!eat(',')) return false;
      skip_ws();
      if (eat(')')) return true;
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string error_;
};

// NumPy's name of a type descriptor, for messages.
std::string describe_descr(std::string_view d) {
  if (d.size() < 2) return "an unknown type";
  char order = d[0];
  std::string_view kind = d.substr(1);
  std::string name;
  if (kind == "f2")
    name = "float16";
  else if (kind == "f4")
    name = "float32";
  else if (kind == "f8")
    name = "float64";
  else if (kind == "f16" || kind == "g")
    name = "longdouble";
  else if (kind == "c8")
    name = "complex64";
  else if (kind == "c16")
    name = "complex128";
  else if (kind == "b1" || kind == "?")
    name = "bool";
  else if (kind[0] == 'i' && kind.size() > 1)
    name = fmt::format("int{}", std::atoi(std::string(kind.substr(1)).c_str()) * 8);
  else if (kind[0] == 'u' && kind.size() > 1)
    name = fmt::format("uint{}", std::atoi(std::string(kind.substr(1)).c_str()) * 8);
  else
    name = "an unsupported type";
  if (order == '>') return fmt::format("big-endian {}, which is not supported", name);
  return name;
}

std::string prefix(std::string_view source, std::string_view tensor_name) {
  return fmt::format("{}: tensor '{}': ", source, tensor_name);
}

// Parses magic, version and header from the first bytes of a file (`head`, which holds at least the
// whole header when the file is long enough). `total` is the size of the whole file.
Result<Header> parse_header(std::string_view head, uint64_t total, std::string_view where) {
  if (total < kMagic.size() || head.substr(0, kMagic.size()) != kMagic) {
    return invalid_argument(fmt::format("{}not a .npy file (bad magic: expected \\x93NUMPY at the start)", where));
  }
  if (head.size() < kMagicLen) return invalid_argument(fmt::format("{}file ends inside the version bytes", where));
  auto major = static_cast<unsigned char>(head[6]);
  auto minor = static_cast<unsigned char>(head[7]);
  int len_bytes = 0;
  if (major == 1 && minor == 0) {
    len_bytes = 2;
  } else if ((major == 2 || major == 3) && minor == 0) {
    len_bytes = 4;
  } else {
    return invalid_argument(
        fmt::format("{}unsupported .npy format version {}.{} (kiln reads 1.0, 2.0 and 3.0)", where, major, minor));
  }
  if (head.size() < kMagicLen + static_cast<size_t>(len_bytes)) {
    return invalid_argument(fmt::format("{}file ends inside the header length", where));
  }
  uint64_t hlen = get_le(reinterpret_cast<const unsigned char*>(head.data()) + kMagicLen, len_bytes);
  if (hlen > kMaxHeaderLen) {
    return invalid_argument(
        fmt::format("{}header length {} bytes exceeds the limit of {} bytes", where, hlen, kMaxHeaderLen));
  }
  size_t start = kMagicLen + static_cast<size_t>(len_bytes);
  if (total < start + hlen || head.size() < start + hlen) {
    return invalid_argument(
        fmt::format("{}truncated header: it declares {} bytes, the file holds {}", where, hlen, total - start));
  }
  std::string_view text = head.substr(start, hlen);
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x80 || (u < 0x20 && c != '\n' && c != '\t' && c != '\r')) {
      return invalid_argument(fmt::format("{}header parse error: the header is not ASCII text", where));
    }
  }
  if (text.empty() || text.back() != '\n') {
    return invalid_argument(fmt::format("{}header parse error: the header does not end with a newline", where));
  }
  Header h;
  LiteralParser p(text);
  if (!p.parse_dict(h)) return invalid_argument(fmt::format("{}header parse error: {}", where, p.error()));
  h.data_offset = start + hlen;
  return h;
}

// Bytes per element on disk: bf16 is stored as f32.
uint64_t file_item_size(DType t) { return t == DType::f16 ? 2 : 4; }

// Checks a parsed header against the expected tensor; returns the number of data bytes expected.
Result<uint64_t> check_header(const Header& h, DType dtype, const Shape& expected, std::string_view where) {
  std::string_view want = npy_descr(dtype);
  if (h.descr != want) {
    return invalid_argument(fmt::format(
        "{}wrong element type: expected '{}' (float{} for {}), got '{}' ({}); "
        "convert with numpy's astype('{}')",
        where, want, dtype == DType::f16 ? 16 : 32, dtype_name(dtype), h.descr, describe_descr(h.descr), want));
  }
  if (h.fortran_order) {
    return invalid_argument(
        fmt::format("{}fortran_order is True: kiln reads C-order (row-major) data only; "
                    "save a C-contiguous array (numpy.ascontiguousarray)",
                    where));
  }
  Shape got{std::vector<int64_t>(h.shape)};
  if (got != expected) {
    return invalid_argument(
        fmt::format("{}shape mismatch: expected {}, got {}", where, expected.to_string(), got.to_string()));
  }
  Status valid = validate_shape(expected);
  if (!valid.ok()) return invalid_argument(fmt::format("{}{}", where, valid.message()));
  return static_cast<uint64_t>(expected.numel()) * file_item_size(dtype);
}

Status check_data_size(uint64_t have, uint64_t want, std::string_view where) {
  if (have < want) {
    return invalid_argument(
        fmt::format("{}truncated data: expected {} bytes after the header, the file holds {}", where, want, have));
  }
  if (have > want) {
    return invalid_argument(
        fmt::format("{}{} bytes of trailing junk after the {} bytes of data", where, have - want, want));
  }
  return {};
}

HostTensor decode_data(const unsigned char* p, DType dtype, const Shape& shape) {
  HostTensor t(shape, dtype);
  auto n = static_cast<size_t>(t.numel());
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::f32: t.data[i] = std::bit_cast<float>(static_cast<uint32_t>(get_le(p + 4 * i, 4))); break;
      case DType::bf16:
        t.data[i] = round_to_dtype(std::bit_cast<float>(static_cast<uint32_t>(get_le(p + 4 * i, 4))), DType::bf16);
        break;
      case DType::f16: t.data[i] = support::f16_bits_to_f32(static_cast<uint16_t>(get_le(p + 2 * i, 2))); break;
    }
  }
  return t;
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace

std::string_view npy_descr(DType t) { return t == DType::f16 ? "<f2" : "<f4"; }

std::string npy_encode(const HostTensor& t) {
  KILN_CHECK(validate_shape(t.shape).ok() && t.numel() == t.shape.numel(), "npy_encode of a malformed tensor");
  std::string dict = header_dict(t);
  size_t hlen = dict.size() + 1;  // with the final '\n'
  int len_bytes = 2;
  size_t pad = kArrayAlign - (kMagicLen + 2 + hlen) % kArrayAlign;
  if (hlen + pad > 0xFFFF) {  // NumPy falls back to version 2.0 when the header does not fit 16 bits
    len_bytes = 4;
    pad = kArrayAlign - (kMagicLen + 4 + hlen) % kArrayAlign;
  }
  std::string out;
  out.reserve(kMagicLen + 4 + hlen + pad + static_cast<size_t>(t.numel() * dtype_size(t.dtype)));
  out.append(kMagic);
  out.push_back(static_cast<char>(len_bytes == 2 ? 1 : 2));
  out.push_back(0);
  put_le(out, hlen + pad, len_bytes);
  out.append(dict);
  out.append(pad, ' ');
  out.push_back('\n');
  for (double v : t.data) {
    if (t.dtype == DType::f16) {
      put_le(out, support::f32_to_f16_bits(static_cast<float>(v)), 2);
    } else {  // f32, and bf16 widened to f32 (exact)
      put_le(out, std::bit_cast<uint32_t>(static_cast<float>(v)), 4);
    }
  }
  return out;
}

Result<HostTensor> npy_decode(std::string_view bytes, DType dtype, const Shape& expected_shape,
                              std::string_view tensor_name, std::string_view source) {
  std::string where = prefix(source, tensor_name);
  KILN_ASSIGN_OR_RETURN(Header h, parse_header(bytes, bytes.size(), where));
  KILN_ASSIGN_OR_RETURN(uint64_t want, check_header(h, dtype, expected_shape, where));
  KILN_RETURN_IF_ERROR(check_data_size(bytes.size() - h.data_offset, want, where));
  return decode_data(reinterpret_cast<const unsigned char*>(bytes.data()) + h.data_offset, dtype, expected_shape);
}

Status save_npy(const std::string& path, const HostTensor& t) {
  Status valid = validate_shape(t.shape);
  if (!valid.ok()) return invalid_argument(fmt::format("{}: cannot save: {}", path, valid.message()));
  if (t.numel() != t.shape.numel()) {
    return invalid_argument(fmt::format("{}: cannot save: the tensor holds {} values, its shape {} needs {}", path,
                                        t.numel(), t.shape.to_string(), t.shape.numel()));
  }
  return support::write_file_atomic(path, npy_encode(t));
}

namespace {

// A .npy file open past its header.
struct OpenNpy {
  std::FILE* f = nullptr;
  Header h;
  uint64_t total = 0;
  std::string where;  // "path: tensor 'x': " for messages
  ~OpenNpy() {
    if (f) std::fclose(f);
  }
};

Status open_npy(const std::string& path, std::string_view tensor_name, OpenNpy& out) {
  out.where = prefix(path, tensor_name);
  const std::string& where = out.where;
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return not_found(fmt::format("{}file not found", where));
  if (ec) return io_error(fmt::format("{}cannot read: {}", where, ec.message()));
  if (fs::is_directory(st)) return io_error(fmt::format("{}is a directory, not a .npy file", where));
  if (!fs::is_regular_file(st)) return io_error(fmt::format("{}is not a regular file", where));
  out.total = fs::file_size(path, ec);
  if (ec) return io_error(fmt::format("{}cannot read: {}", where, ec.message()));
  out.f = std::fopen(path.c_str(), "rb");
  if (out.f == nullptr) return io_error(fmt::format("{}cannot read: {}", where, errno_text(errno)));
  // The header: at most magic + length + the longest header kiln accepts.
  std::string head(static_cast<size_t>(std::min<uint64_t>(out.total, kMagicLen + 4 + kMaxHeaderLen)), '\0');
  if (std::fread(head.data(), 1, head.size(), out.f) != head.size()) {
    return io_error(fmt::format("{}cannot read: {}", where, errno_text(errno)));
  }
  KILN_ASSIGN_OR_RETURN(out.h, parse_header(head, out.total, where));
  return {};
}

}  // namespace

Result<HostTensor> load_npy(const std::string& path, DType dtype, const Shape& expected_shape,
                            std::string_view tensor_name) {
  OpenNpy npy;
  KILN_RETURN_IF_ERROR(open_npy(path, tensor_name, npy));
  const std::string& where = npy.where;
  KILN_ASSIGN_OR_RETURN(uint64_t want, check_header(npy.h, dtype, expected_shape, where));
  KILN_RETURN_IF_ERROR(check_data_size(npy.total - npy.h.data_offset, want, where));

  std::vector<unsigned char> data(static_cast<size_t>(want));
  if (std::fseek(npy.f, static_cast<long>(npy.h.data_offset), SEEK_SET) != 0 ||
      std::fread(data.data(), 1, data.size(), npy.f) != data.size()) {
    return io_error(fmt::format("{}cannot read the data: {}", where, errno_text(errno)));
  }
  return decode_data(data.data(), dtype, expected_shape);
}

Result<Shape> npy_shape(const std::string& path, std::string_view tensor_name) {
  OpenNpy npy;
  KILN_RETURN_IF_ERROR(open_npy(path, tensor_name, npy));
  return Shape(npy.h.shape);
}

}  // namespace kiln
