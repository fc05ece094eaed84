// libFuzzer harness: bytes -> the .npy reader (kiln::npy_decode), as `kiln run --inputs` reads a file.
//
// Input: byte 0 picks the dtype asked for (f32, f16, bf16), byte 1 the rank (0 to 4) of the expected shape and
// the next `rank` bytes its dims (1 to 64 each); the rest is the file. Properties: a refusal has a message; a
// tensor that decodes has the expected shape and dtype, finite-or-not values representable in the dtype, and
// encodes to a file that decodes to the same values.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "kiln/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  if (size < 2) return 0;
  static constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16};
  const DType dtype = kTypes[data[0] % 3];
  const size_t rank = data[1] % 5;
  if (size < 2 + rank) return 0;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < rank; ++i) dims.push_back(data[2 + i] % 64 + 1);
  const Shape shape(dims);
  const std::string_view file(reinterpret_cast<const char*>(data + 2 + rank), size - 2 - rank);

  Result<HostTensor> t = npy_decode(file, dtype, shape, "x", "<fuzz>");
  if (!t.ok()) {
    if (t.status().message().empty()) fuzz::violated("a refused file has an empty message");
    return 0;
  }
  const HostTensor& h = t.value();
  if (h.dtype != dtype || h.shape != shape || h.numel() != shape.numel()) fuzz::violated("decoded the wrong tensor");
  Result<HostTensor> back = npy_decode(npy_encode(h), dtype, shape, "x", "<encoded>");
  if (!back.ok()) fuzz::violated("an encoded tensor does not decode", back.status().message());
  for (int64_t i = 0; i < h.numel(); ++i) {
    const double a = h.data[static_cast<size_t>(i)], b = back.value().data[static_cast<size_t>(i)];
    if (!(a == b || (std::isnan(a) && std::isnan(b)))) fuzz::violated("decode -> encode -> decode changed a value");
  }
  return 0;
}
