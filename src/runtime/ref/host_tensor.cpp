// Deterministic random host tensors and their statistics.
#include "kiln/host_tensor.h"

#include <algorithm>
#include <cmath>

#include "ops/registry.h"

namespace kiln {

namespace {

// SplitMix64: a fixed, specified generator, so random inputs are the same on every platform.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a, 64-bit: a stable stream number from a tensor name. Not a key or a checksum (those are XXH3-128,
// support/hash.h): it picks every random input kiln makes (tests, `kiln run --seed`), so changing it would
// change them all; tests whose tolerances hold for today's inputs (EngineOn.WeightTransformsRunOnce...
// on emu, with an unscaled weight) would need retuning first.
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace

HostTensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, uint64_t stream, ValueDomain domain) {
  HostTensor t(shape, dtype);
  uint64_t state = seed;
  state ^= splitmix64(state) ^ stream;
  for (double& v : t.data) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    switch (domain) {
      case ValueDomain::any: v = 2.0 * u - 1.0; break;
      case ValueDomain::positive: v = 0.5 + u; break;
      case ValueDomain::nonzero: v = u < 0.5 ? -(0.5 + u) : u; break;  // [-1, -0.5) or [0.5, 1)
    }
    v = round_to_dtype(v, dtype);
  }
  return t;
}

TensorMap random_inputs(const Graph& g, uint64_t seed) {
  std::vector<ValueDomain> domain(g.tensors().size(), ValueDomain::any);
  std::vector<int64_t> fan_in(g.tensors().size(), 0);
  for (const Node& n : g.nodes()) {
    if (!n.op) continue;
    const OpDef& def = op_def(*n.op);
    for (size_t p = 0; p < n.inputs.size(); ++p) {
      const PortSpec& port = def.inputs[p];
      for (Tensor t : n.inputs[p]) {
        const auto ti = static_cast<size_t>(t.id);
        ValueDomain& cur = domain[ti];
        if (port.domain == ValueDomain::positive || (port.domain == ValueDomain::nonzero && cur == ValueDomain::any)) {
          cur = port.domain;
        }
        if (port.fan_in) fan_in[ti] = std::max(fan_in[ti], port.fan_in(g.tensor(t).shape, n.attrs));
      }
    }
  }
  TensorMap m;
  for (Tensor t : g.bound_tensors()) {
    const TensorInfo& info = g.tensor(t);
    if (const HostTensor* v = g.value(info.name)) {  // the graph's own weights
      m.emplace(info.name, *v);
      continue;
    }
    const auto ti = static_cast<size_t>(t.id);
    HostTensor h = random_tensor(info.shape, info.dtype, seed, fnv1a(info.name), domain[ti]);
    if (fan_in[ti] > 0 && domain[ti] == ValueDomain::any) {
      const double scale = std::sqrt(3.0 / static_cast<double>(fan_in[ti]));
      for (double& v : h.data) v = round_to_dtype(v * scale, info.dtype);
    }
    m.emplace(info.name, std::move(h));
  }
  return m;
}

TensorStats tensor_stats(const HostTensor& t) {
  TensorStats s;
  double sum = 0, sq = 0;
  int64_t n = 0;
  s.min = INFINITY;
  s.max = -INFINITY;
  for (double v : t.data) {
    if (std::isnan(v)) {
      ++s.nan_count;
      continue;
    }
    if (std::isinf(v)) {
      ++s.inf_count;
      continue;
    }
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    sum += v;
    ++n;
  }
  if (n == 0) return TensorStats{0, 0, 0, 0, s.nan_count, s.inf_count};
  s.mean = sum / static_cast<double>(n);
  for (double v : t.data) {
    if (std::isfinite(v)) sq += (v - s.mean) * (v - s.mean);
  }
  s.std = std::sqrt(sq / static_cast<double>(n));
  return s;
}

}  // namespace kiln
