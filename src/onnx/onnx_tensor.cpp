// TensorProto -> values: initializers, Constant nodes and the backend tests' .pb files.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "importer.h"
#include "kiln/onnx.h"
#include "onnx/plugin_api.h"
#include "support/dir_fd.h"

namespace kiln::onnx_import {
namespace {

using TP = onnx::TensorProto;

int64_t elem_size(int32_t t) {
  switch (t) {
    case TP::FLOAT:
    case TP::INT32:
    case TP::UINT32: return 4;
    case TP::DOUBLE:
    case TP::INT64:
    case TP::UINT64: return 8;
    case TP::FLOAT16:
    case TP::BFLOAT16:
    case TP::INT16:
    case TP::UINT16: return 2;
    case TP::INT8:
    case TP::UINT8:
    case TP::BOOL: return 1;
    default: return 0;
  }
}

template <class T>
T read_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 and aarch64 are little-endian, as ONNX's raw_data
  return v;
}

// One element of raw little-endian bytes, as a double or an int64.
void push_raw(Const& c, const unsigned char* p) {
  switch (c.elem_type) {
    case TP::FLOAT: c.floats.push_back(read_le<float>(p)); break;
    case TP::DOUBLE: c.floats.push_back(read_le<double>(p)); break;
    case TP::FLOAT16: c.floats.push_back(f16_bits_to_f32(read_le<uint16_t>(p))); break;
    case TP::BFLOAT16: c.floats.push_back(bf16_bits_to_f32(read_le<uint16_t>(p))); break;
    case TP::INT64: c.ints.push_back(read_le<int64_t>(p)); break;
    case TP::UINT64: c.ints.push_back(static_cast<int64_t>(read_le<uint64_t>(p))); break;
    case TP::INT32: c.ints.push_back(read_le<int32_t>(p)); break;
    case TP::UINT32: c.ints.push_back(read_le<uint32_t>(p)); break;
    case TP::INT16: c.ints.push_back(read_le<int16_t>(p)); break;
    case TP::UINT16: c.ints.push_back(read_le<uint16_t>(p)); break;
    case TP::INT8: c.ints.push_back(read_le<int8_t>(p)); break;
    case TP::UINT8:
    case TP::BOOL: c.ints.push_back(*p); break;
    default: break;
  }
}

// An external_data value ONNX defines as a non-negative integer ("offset", "length"): all digits, in range.
Result<int64_t> external_int(const TP& t, const std::string& key, const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < 0) {
    return invalid_argument(
        fmt::format("initializer '{}': external data {} '{}' is not a non-negative integer", t.name(), key, text));
  }
  return v;
}

Result<std::string> external_bytes(const TP& t, const std::string& dir, int64_t want) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") {
      KILN_ASSIGN_OR_RETURN(offset, external_int(t, kv.key(), kv.value()));
    }
    if (kv.key() == "length") {
      KILN_ASSIGN_OR_RETURN(length, external_int(t, kv.key(), kv.value()));
    }
  }
  if (location.empty())
    return invalid_argument(fmt::format("initializer '{}': external data without a location", t.name()));
  if (dir.empty()) {
    return invalid_argument(
        fmt::format("initializer '{}': its data is in the external file '{}', and a model read "
                    "from memory has no directory to find it in",
                    t.name(), location));
  }
  if (location.find("..") != std::string::npos || location[0] == '/') {
    return invalid_argument(
        fmt::format("initializer '{}': external data location '{}' leaves the model's directory", t.name(), location));
  }
  // Beneath the model's directory and nothing else: no link is followed (one could point anywhere: onnx's
  // CVE-2024-27318), and only a regular file is read (a FIFO would hang, a directory holds no data).
  auto file = support::open_regular_beneath(dir, location);
  if (!file.ok()) {
    return Status(file.status().code(),
                  fmt::format("initializer '{}': external data {}", t.name(), file.status().message()));
  }
  if (length < 0) length = want;
  if (length != want) {
    return invalid_argument(fmt::format("initializer '{}': external data length {} at offset {}, expected {} bytes",
                                        t.name(), length, offset, want));
  }
  struct stat st {};
  const int64_t size = ::fstat(file->get(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
  if (offset > size || want > size - offset) {
    return invalid_argument(
        fmt::format("initializer '{}': external data file '{}' holds {} bytes, fewer than the {} "
                    "at offset {} the initializer needs",
                    t.name(), location, size, want, offset));
  }
  std::string bytes(static_cast<size_t>(want), '\0');  // at most the file's size
  int64_t got = 0;
  while (got < want) {
    const ssize_t n = ::pread(file->get(), bytes.data() + got, static_cast<size_t>(want - got), offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  if (got != want) {
    return invalid_argument(
        fmt::format("initializer '{}': external data file '{}' holds {} bytes at offset {}, expected {}", t.name(),
                    location, got, offset, want));
  }
  return bytes;
}

}  // namespace

Status internalize_external_data(onnx::ModelProto& m, const std::string& external_dir) {
  for (auto& t : *m.mutable_graph()->mutable_initializer()) {
    if (t.data_location() != TP::EXTERNAL) continue;
    const int64_t esize = elem_size(t.data_type());
    if (esize == 0) {
      return unsupported(fmt::format("initializer '{}' has element type {}, which kiln cannot hold", t.name(),
                                     elem_type_name(t.data_type())));
    }
    const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    if (!dims_bounded(dims)) return invalid_argument(fmt::format("initializer '{}': invalid dims", t.name()));
    const int64_t n = dims_product(dims);

    KILN_ASSIGN_OR_RETURN(std::string bytes, external_bytes(t, external_dir, n * esize));
    t.set_raw_data(std::move(bytes));
    t.clear_external_data();
    t.set_data_location(TP::DEFAULT);
  }
  return {};
}

bool Const::is_float_type(int32_t t) {
  return t == TP::FLOAT || t == TP::DOUBLE || t == TP::FLOAT16 || t == TP::BFLOAT16;
}

int64_t Const::numel() const { return dims_product(dims); }

std::string elem_type_name(int32_t t) {
  if (!TP::DataType_IsValid(t)) return fmt::format("type {}", t);
  std::string s = TP::DataType_Name(static_cast<TP::DataType>(t));
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::optional<DType> elem_dtype(int32_t t) {
  if (t == TP::FLOAT) return DType::f32;
  if (t == TP::FLOAT16) return DType::f16;
  if (t == TP::BFLOAT16) return DType::bf16;
  return std::nullopt;
}

Result<Const> tensor_to_const(const TP& t, const std::string& external_dir) {
  Const c;
  c.elem_type = t.data_type();
  const int64_t esize = elem_size(c.elem_type);
  if (esize == 0) {
    return unsupported(
        fmt::format("tensor '{}' has element type {}, which kiln cannot hold", t.name(), elem_type_name(c.elem_type)));
  }
  c.dims.assign(t.dims().begin(), t.dims().end());
  if (!dims_bounded(c.dims)) {
    return invalid_argument(
        fmt::format("tensor '{}': dims [{}] are negative or too large", t.name(), fmt::join(c.dims, ", ")));
  }
  const int64_t n = c.numel();
  std::string external;
  const std::string* raw = t.has_raw_data() ? &t.raw_data() : nullptr;
  if (t.data_location() == TP::EXTERNAL) {
    KILN_ASSIGN_OR_RETURN(external, external_bytes(t, external_dir, n * esize));
    raw = &external;
  }
  if (raw) {
    if (static_cast<int64_t>(raw->size()) != n * esize) {
      return invalid_argument(fmt::format("tensor '{}': {} bytes of data for {} elements of {}", t.name(), raw->size(),
                                          n, elem_type_name(c.elem_type)));
    }
    const auto* p = reinterpret_cast<const unsigned char*>(raw->data());
    for (int64_t i = 0; i < n; ++i) push_raw(c, p + i * esize);
    return c;
  }
  auto check = [&](int64_t have) -> Status {
    if (have == n) return {};
    return invalid_argument(fmt::format("tensor '{}': {} values for dims of {} elements", t.name(), have, n));
  };
  switch (c.elem_type) {
    case TP::FLOAT:
      KILN_RETURN_IF_ERROR(check(t.float_data_size()));
      c.floats.assign(t.float_data().begin(), t.float_data().end());
      break;
    case TP::DOUBLE:
      KILN_RETURN_IF_ERROR(check(t.double_data_size()));
      c.floats.assign(t.double_data().begin(), t.double_data().end());
      break;
    case TP::FLOAT16:
    case TP::BFLOAT16:
      KILN_RETURN_IF_ERROR(check(t.int32_data_size()));
      for (int32_t v : t.int32_data()) {
        const auto bits = static_cast<uint16_t>(v);
        c.floats.push_back(c.elem_type == TP::FLOAT16 ? f16_bits_to_f32(bits) : bf16_bits_to_f32(bits));
      }
      break;
    case TP::INT64:
      KILN_RETURN_IF_ERROR(check(t.int64_data_size()));
      c.ints.assign(t.int64_data().begin(), t.int64_data().end());
      break;
    case TP::UINT64:
    case TP::UINT32:
      KILN_RETURN_IF_ERROR(check(t.uint64_data_size()));
      for (uint64_t v : t.uint64_data()) c.ints.push_back(static_cast<int64_t>(v));
      break;
    default:
      KILN_RETURN_IF_ERROR(check(t.int32_data_size()));
      c.ints.assign(t.int32_data().begin(), t.int32_data().end());
      break;
  }
  return c;
}

void normalize_to_type(Const& c) {
  switch (c.elem_type) {
    case TP::FLOAT:
      for (double& v : c.floats) v = round_to_dtype(v, DType::f32);
      break;
    case TP::FLOAT16:
      for (double& v : c.floats) v = round_to_dtype(v, DType::f16);
      break;
    case TP::BFLOAT16:
      for (double& v : c.floats) v = round_to_dtype(v, DType::bf16);
      break;
    case TP::BOOL:
      for (int64_t& v : c.ints) v = v != 0;
      break;
    case TP::INT8:
      for (int64_t& v : c.ints) v = static_cast<int8_t>(v);
      break;  // modular (C++20)
    case TP::UINT8:
      for (int64_t& v : c.ints) v = static_cast<uint8_t>(v);
      break;
    case TP::INT16:
      for (int64_t& v : c.ints) v = static_cast<int16_t>(v);
      break;
    case TP::UINT16:
      for (int64_t& v : c.ints) v = static_cast<uint16_t>(v);
      break;
    case TP::INT32:
      for (int64_t& v : c.ints) v = static_cast<int32_t>(v);
      break;
    case TP::UINT32:
      for (int64_t& v : c.ints) v = static_cast<uint32_t>(v);
      break;
    default: break;  // double, int64, uint64 (held as its bits)
  }
}

HostTensor const_to_host(const Const& c, DType dtype) {
  HostTensor h(Shape(c.dims), dtype);
  for (size_t i = 0; i < h.data.size(); ++i) h.data[i] = round_to_dtype(c.at(i), dtype);
  return h;
}

}  // namespace kiln::onnx_import

namespace kiln::onnx_plugin {

Result<HostTensor> load_onnx_tensor(const std::string& path, std::string* name) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(fmt::format("{}: file not found", path));
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes)) return invalid_argument(fmt::format("{}: not a serialized ONNX TensorProto", path));
  if (name) *name = t.name();
  // ONNX's test data stores bfloat16 tensors as uint16 bit patterns (NumPy has no bfloat16).
  if (t.data_type() == onnx::TensorProto::UINT16) t.set_data_type(onnx::TensorProto::BFLOAT16);
  auto dtype = onnx_import::elem_dtype(t.data_type());
  if (!dtype) {
    return unsupported(fmt::format("{}: tensor '{}' is {}; kiln's tensors are f32, f16 or bf16", path, t.name(),
                                   onnx_import::elem_type_name(t.data_type())));
  }
  auto c = onnx_import::tensor_to_const(t, "");
  if (!c.ok()) return Status(c.status().code(), fmt::format("{}: {}", path, c.status().message()));
  return onnx_import::const_to_host(*c, *dtype);
}

}  // namespace kiln::onnx_plugin
