// Row reductions: layer_norm, rms_norm, group_norm / instance_norm and softmax as one template.
//
// Every op here normalizes "rows" of a logical shape D[R] (row-major logical order, never memory order):
// the logical linear index of element `col` of row `row` is
//     (o * COLS + pos(col)) * INNER + k,      o = row / INNER, k = row % INNER
// - layer_norm / rms_norm over the trailing dims: INNER = 1, COLS = the product of the normalized dims;
// - softmax along an axis: COLS = D[axis], INNER = the product of the dims after it;
// - group_norm: a (sample, group) row is Cg channels x spatial, contiguous in logical order: INNER = 1,
//   COLS = Cg * spatial (instance_norm: Cg = 1).
// pos() is the identity, or for group norm over a channels-last input (CG > 0) it walks the channels of a
// group fastest, so neighbouring threads read neighbouring addresses in NHWC memory.
//
// Thread mapping: TPR (threads per row) consecutive threads share a row: TPR = 1 (one row per thread:
// softmax along an outer axis, where neighbouring rows are neighbouring addresses), 2..32 (a row per warp
// or part of a warp: shuffles only), or the whole block (long rows: shuffles, then shared memory).
// Values: a thread takes chunks of V consecutive columns (V = 1, or 4 / 8 for 16-byte accesses, see
// rows()). With K > 0 each thread keeps its K chunks of the row in registers (K * TPR * V >= COLS), and the
// statistics are exact two-pass ones over registers. With K == 0 the row is too long for registers: when
// it fits in shared memory (SMEM, a block per row) the first read keeps it there, the statistics are
// exact two-pass ones over that copy (softmax: online (max, sum) states) and the outputs come from it;
// otherwise a first read accumulates Welford (mean, M2) / sum of squares / online softmax (max, sum)
// states that are merged across threads (Chan's formula), and a second read through the Load functor
// produces the outputs. Arithmetic is f32; the biased variance of docs/ops.md.
//
// Functors (written by codegen): `Load` maps a logical coordinate to the f32 input value (applying fused
// leading pointwise ops); `Epi` takes each output value and its coordinate (affine, trailing ops, stores).
#pragma once

#include "kiln/codegen.cuh"

namespace kiln {
namespace rowred {

// A reduction state of N floats, merged by a symmetric operation (op(a, b) == op(b, a) bit for bit), so a
// butterfly leaves every thread of a row with the same value.
// -inf (INFINITY is a host header's macro; NVRTC has no such header).
__device__ __forceinline__ float neg_inf() { return __int_as_float(static_cast<int>(0xff800000u)); }

template <int N>
struct St {
  float v[N];
};

struct Sum {  // of each float of the state
  template <int N>
  __device__ __forceinline__ St<N> operator()(const St<N>& a, const St<N>& b) const {
    St<N> r;
#pragma unroll
    for (int f = 0; f < N; ++f) r.v[f] = a.v[f] + b.v[f];
    return r;
  }
};
struct Max {  // NaN wins, as the reference's max pooling (softmax inputs are never NaN in practice)
  __device__ __forceinline__ St<1> operator()(const St<1>& a, const St<1>& b) const {
    const float x = a.v[0], y = b.v[0];
    return {{x != x ? x : (y != y ? y : fmaxf(x, y))}};
  }
};
// Welford states (count, mean, M2) merged by Chan et al.'s formula, written symmetrically.
struct Welford {
  __device__ __forceinline__ St<3> operator()(const St<3>& a, const St<3>& b) const {
    if (a.v[0] == 0.0f) return b;
    if (b.v[0] == 0.0f) return a;
    const float n = a.v[0] + b.v[0], d = b.v[1] - a.v[1];
    return {{n, (a.v[0] * a.v[1] + b.v[0] * b.v[1]) / n, a.v[2] + b.v[2] + d * d * (a.v[0] * b.v[0] / n)}};
  }
};
// Online softmax states (max, sum of exp(x - max)).
struct SoftmaxState {
  __device__ __forceinline__ St<2> operator()(const St<2>& a, const St<2>& b) const {
    if (a.v[0] == rowred::neg_inf()) return b;
    if (b.v[0] == rowred::neg_inf()) return a;
    const float m = fmaxf(a.v[0], b.v[0]);
    return {{m, a.v[1] * expf(a.v[0] - m) + b.v[1] * expf(b.v[0] - m)}};
  }
};

// Reduces `s` over the TPR threads of a row. IL rows are interleaved (a power of two <= 32): the threads of
// a row are those with the same threadIdx.x % IL among TPR * IL consecutive threads, which span a part of a
// warp (TPR * IL <= 32: shuffles only) or the whole block of BLOCK threads, a multiple of 32. Every thread
// of the block must call it (shuffles use the full mask; the block case has barriers). Every thread of the
// row gets the result.
template <int TPR, int BLOCK, int IL = 1, class Op, int N>
__device__ __forceinline__ St<N> reduce(St<N> s, const Op& op) {
  static_assert(N <= 4, "reduction states hold at most 4 floats");
  static_assert(IL >= 1 && IL <= 32 && 32 % IL == 0, "interleaved rows divide a warp");
  static_assert(TPR * IL <= 32 || TPR * IL == BLOCK, "a row is a part of a warp or of the whole block");
  constexpr int W = TPR * IL < 32 ? TPR : 32 / IL;  // a row's threads in one warp
#pragma unroll
  for (int o = W / 2; o > 0; o /= 2) {
    St<N> t;
#pragma unroll
    for (int f = 0; f < N; ++f) t.v[f] = __shfl_xor_sync(0xffffffffu, s.v[f], o * IL);
    s = op(s, t);
  }
  if constexpr (TPR * IL > 32) {
    static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "block rows need whole warps");
    constexpr int kWarps = BLOCK / 32;
    KILN_SHARED(float, part, [32 * 4 * IL]);
    const int warp = static_cast<int>(threadIdx.x) / 32, sub = static_cast<int>(threadIdx.x) % IL;
    if (threadIdx.x % 32 < IL) {
#pragma unroll
      for (int f = 0; f < N; ++f) part[(warp * IL + sub) * N + f] = s.v[f];
    }
    __syncthreads();
    // Every thread folds the warps' partials of its row in the same order: identical results without a
    // broadcast.
#pragma unroll
    for (int f = 0; f < N; ++f) s.v[f] = part[sub * N + f];
    for (int w = 1; w < kWarps; ++w) {
      St<N> t;
#pragma unroll
      for (int f = 0; f < N; ++f) t.v[f] = part[(w * IL + sub) * N + f];
      s = op(s, t);
    }
    __syncthreads();  // the partials are rewritten by the next reduction
  }
  return s;
}

// A logical shape as a type (static constexpr arrays cannot be read from device code).
template <int... Ds>
struct Dims {
  static constexpr int R = sizeof...(Ds);
};

// The logical coordinate of logical linear index `lin` of shape Dims<Ds...>.
template <class I, int... Ds>
__device__ __forceinline__ Idx<sizeof...(Ds)> unravel(I lin, Dims<Ds...>) {
  constexpr int R = sizeof...(Ds);
  constexpr int dims[R] = {Ds...};
  Idx<R> c;
#pragma unroll
  for (int d = R - 1; d > 0; --d) {
    c.i[d] = static_cast<int>(lin % dims[d]);
    lin /= dims[d];
  }
  c.i[0] = static_cast<int>(lin);
  return c;
}

}  // namespace rowred

namespace norm {

// A chunk of V values of a row kept in shared memory as C (float or a 16-bit storage type): 16 bytes at a
// time when the chunk is a multiple of 16 bytes (so a warp's accesses are conflict-free), else one value at
// a time. `p` is 16-byte aligned in the first case (dynamic shared memory, chunk c at c * V).
template <class C, int V>
__device__ __forceinline__ void smem_put(C* p, const float* v) {
  if constexpr (V * sizeof(C) % 16 == 0) {
    constexpr int W = static_cast<int>(V * sizeof(C) / 4);
    unsigned w[W];
    pack_words<C, V>(v, w);
#pragma unroll
    for (int q = 0; q < W / 4; ++q)
      reinterpret_cast<uint4*>(p)[q] = make_uint4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) p[e] = from_f32<C>(v[e]);
  }
}
template <class C, int V>
__device__ __forceinline__ void smem_get(const C* p, float* v) {
  if constexpr (V * sizeof(C) % 16 == 0) {
    constexpr int W = static_cast<int>(V * sizeof(C) / 4);
    unsigned w[W];
#pragma unroll
    for (int q = 0; q < W / 4; ++q) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[q];
      w[4 * q] = u.x, w[4 * q + 1] = u.y, w[4 * q + 2] = u.z, w[4 * q + 3] = u.w;
    }
    unpack_words<C, V>(w, v);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = to_f32(p[e]);
  }
}

enum Stat : int { kMeanVar = 0, kRms = 1, kSoftmax = 2 };

// Cfg: Shape (rowred::Dims<...>, the logical shape), I (index type: int, or long long for 2^31 elements and more),
// Cache (a storage type), STAT, ROWS, COLS, INNER, CG, V, TPR, IL, BLOCK, K, SMEM, EPS. Launch: grid
// ceil(ROWS / (BLOCK / TPR)), block BLOCK, dynamic shared memory IL * COLS * sizeof(Cache) bytes when SMEM.
//
// IL (interleaved rows, a power of two): 1, or for a group norm over channels-last memory whose group is
// under 32 bytes a pixel, the rows (groups) whose chunks of one pixel share a sector: neighbouring threads
// take neighbouring rows (see the mapping below), ROWS % IL == 0 and IL rows are IL neighbouring groups.
//
// V (values per access): 1, or 4 / 8 when V consecutive columns are V consecutive elements of every tensor
// the functors touch (codegen checks): the row is then walked in chunks of V columns, the functors'
// `vec(i, float* v)` move a chunk with one 16-byte (or 8-byte) access per tensor (kiln::ldvu / stvu), and a
// chunk's coordinate is unravelled once.
// SMEM (K == 0 only, a block per row): the first read keeps the row in dynamic shared memory as Cache values
// (float; or the input's 16-bit type, which converts to f32 and back exactly, when the norm reads its input
// straight from memory), the outputs are computed from there, and the row is read from global memory once.
// `batch`: with a batch-generic Cfg, ROWS is the rows of one batch element (dim 0) and there are batch x ROWS
// rows; else ROWS is every row and batch is 1.
template <class Cfg, class Load, class Epi>
__device__ __forceinline__ void rows(const Load& load, const Epi& epi, int batch = 1) {
  using I = typename Cfg::I;
  constexpr int TPR = Cfg::TPR, COLS = Cfg::COLS, K = Cfg::K, V = Cfg::V, IL = Cfg::IL;
  constexpr int kRowsPerBlock = Cfg::BLOCK / TPR;
  constexpr int NV = COLS / V;  // chunks of V columns in a row
  static_assert(Cfg::BLOCK % (TPR * IL) == 0 && Cfg::ROWS % IL == 0, "a block holds whole sets of interleaved rows");
  static_assert(COLS % V == 0 && (Cfg::CG == 0 || Cfg::CG % V == 0), "a chunk never straddles rows or groups");
  static_assert(K == 0 || K * TPR >= NV, "cached values cover the row");
  static_assert(!Cfg::SMEM || (K == 0 && TPR * IL == Cfg::BLOCK), "shared memory holds the IL rows of a block");
  // Thread t works on row (t / (TPR * IL)) * IL + t % IL of the block's rows, as its lane (t / IL) % TPR:
  // IL > 1 puts neighbouring rows (a channels-last group norm's neighbouring groups) on neighbouring threads,
  // so that a warp's chunks of one pixel fill whole 32-byte sectors.
  const int t = static_cast<int>(threadIdx.x);
  const int sub = t % IL, lane = t / IL % TPR;
  const I row = static_cast<I>(blockIdx.x) * kRowsPerBlock + static_cast<I>(t / (TPR * IL) * IL + sub);
  const bool valid = row < static_cast<I>(Cfg::ROWS) * static_cast<I>(batch);
  const I base = (row / Cfg::INNER) * (static_cast<I>(COLS) * Cfg::INNER) + row % Cfg::INNER;
  // The coordinate of column `col` (a chunk's first column: with CG > 0, its V columns are V consecutive
  // channels, since CG % V == 0).
  auto at = [&](int col) {
    int pos = col;
    if constexpr (Cfg::CG > 0) pos = (col % Cfg::CG) * (COLS / Cfg::CG) + col / Cfg::CG;
    return rowred::unravel(base + static_cast<I>(pos) * Cfg::INNER, typename Cfg::Shape{});
  };
  // Chunk c of the row into v[0..V) (f32), and V outputs to chunk c.
  auto get = [&](int c, float* v) {
    if constexpr (V == 1) {
      v[0] = load(at(c));
    } else {
      load.vec(at(c * V), v);
    }
  };
  auto put = [&](int c, const float* v) {
    if constexpr (V == 1) {
      epi(v[0], at(c));
    } else {
      epi.vec(at(c * V), v);
    }
  };
  constexpr float kInvCols = 1.0f / static_cast<float>(COLS);

  if constexpr (K > 0) {
    // The row in registers: exact two-pass statistics.
    float x[K * V];
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const int c = lane + j * TPR;
      if (valid && c < NV) {
        get(c, x + j * V);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) x[j * V + e] = 0.0f;
      }
    }
    auto in_row = [&](int j) { return valid && (K * TPR == NV || lane + j * TPR < NV); };
    float a = 0.0f, b = 1.0f;  // the output is (x - a) * b, or exp(x - a) * ... for softmax
    if constexpr (Cfg::STAT == kSoftmax) {
      rowred::St<1> m{{rowred::neg_inf()}};
#pragma unroll
      for (int j = 0; j < K; ++j)
        if (in_row(j)) {
#pragma unroll
          for (int e = 0; e < V; ++e) m.v[0] = fmaxf(m.v[0], x[j * V + e]);
        }
      m = rowred::reduce<TPR, Cfg::BLOCK, IL>(m, rowred::Max{});
      rowred::St<1> s{{0.0f}};
#pragma unroll
      for (int j = 0; j < K; ++j) {
#pragma unroll
        for (int e = 0; e < V; ++e) x[j * V + e] = expf(x[j * V + e] - m.v[0]);
        if (in_row(j)) {
#pragma unroll
          for (int e = 0; e < V; ++e) s.v[0] += x[j * V + e];
        }
      }
      s = rowred::reduce<TPR, Cfg::BLOCK, IL>(s, rowred::Sum{});
      b = s.v[0];
    } else {
      if constexpr (Cfg::STAT == kMeanVar) {
        rowred::St<1> s{{0.0f}};
#pragma unroll
        for (int j = 0; j < K; ++j)
          if (in_row(j)) {
#pragma unroll
            for (int e = 0; e < V; ++e) s.v[0] += x[j * V + e];
          }
        a = rowred::reduce<TPR, Cfg::BLOCK, IL>(s, rowred::Sum{}).v[0] * kInvCols;
      }
      rowred::St<1> q{{0.0f}};
#pragma unroll
      for (int j = 0; j < K; ++j)
        if (in_row(j)) {
#pragma unroll
          for (int e = 0; e < V; ++e) q.v[0] += (x[j * V + e] - a) * (x[j * V + e] - a);
        }
      q = rowred::reduce<TPR, Cfg::BLOCK, IL>(q, rowred::Sum{});
      b = 1.0f / sqrtf(q.v[0] * kInvCols + Cfg::EPS);
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
      if (!in_row(j)) continue;
      float o[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float v = x[j * V + e];
        o[e] = Cfg::STAT == kSoftmax ? v / b : (v - a) * b;
      }
      put(lane + j * TPR, o);
    }
  } else {
    // The row is too long for registers: single-pass mergeable statistics over a first read, then the
    // outputs from a second read; or, when the first read left a copy in shared memory, everything after
    // it from that copy.
    using C = typename Cfg::Cache;
    C* cache = nullptr;
    if constexpr (Cfg::SMEM) {
      KILN_DYNAMIC_SHARED(C, smem);
      cache = smem;
    }
    // Chunk c of this thread's row in the copy: the IL rows' chunks interleaved, so that neighbouring
    // threads (neighbouring rows) touch neighbouring 16-byte chunks, conflict-free.
    auto slot = [&](int c) { return cache + (c * IL + sub) * V; };
    auto keep = [&](int c, const float* v) {
      if constexpr (Cfg::SMEM) smem_put<C, V>(slot(c), v);
    };
    // Chunk c again: from shared memory (written by this same thread: no barrier), else from the input.
    auto again = [&](int c, float* v) {
      if constexpr (Cfg::SMEM) {
        smem_get<C, V>(slot(c), v);
      } else {
        get(c, v);
      }
    };
    // f(value) for every value of this thread's chunks of the row: from the input on the first read
    // (leaving a copy in shared memory when SMEM), from the copy or the input again afterwards.
    auto each = [&](bool first, auto&& f) {
      if (!valid) return;
      for (int c = lane; c < NV; c += TPR) {
        float v[V];
        if (first) {
          get(c, v);
          keep(c, v);
        } else {
          again(c, v);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) f(v[e]);
      }
    };
    float a = 0.0f, b = 1.0f;
    if constexpr (Cfg::STAT == kSoftmax) {
      rowred::St<2> s{{rowred::neg_inf(), 0.0f}};
      each(true, [&](float x) {
        if (x > s.v[0]) {
          s.v[1] = s.v[1] * expf(s.v[0] - x) + 1.0f;
          s.v[0] = x;
        } else {
          s.v[1] += expf(x - s.v[0]);
        }
      });
      s = rowred::reduce<TPR, Cfg::BLOCK, IL>(s, rowred::SoftmaxState{});
      a = s.v[0];
      b = s.v[1];
    } else if constexpr (Cfg::STAT == kMeanVar && Cfg::SMEM) {
      // The first read leaves the row in shared memory: exact two-pass statistics over that copy (no
      // division per value, as Welford's update takes).
      rowred::St<1> s{{0.0f}};
      each(true, [&](float x) { s.v[0] += x; });
      a = rowred::reduce<TPR, Cfg::BLOCK, IL>(s, rowred::Sum{}).v[0] * kInvCols;
      rowred::St<1> q{{0.0f}};
      each(false, [&](float x) { q.v[0] += (x - a) * (x - a); });
      q = rowred::reduce<TPR, Cfg::BLOCK, IL>(q, rowred::Sum{});
      b = 1.0f / sqrtf(q.v[0] * kInvCols + Cfg::EPS);
    } else if constexpr (Cfg::STAT == kMeanVar) {
      rowred::St<3> s{{0.0f, 0.0f, 0.0f}};
      each(true, [&](float x) {
        s.v[0] += 1.0f;
        const float d = x - s.v[1];
        s.v[1] += d / s.v[0];
        s.v[2] += d * (x - s.v[1]);
      });
      s = rowred::reduce<TPR, Cfg::BLOCK, IL>(s, rowred::Welford{});
      a = s.v[1];
      b = 1.0f / sqrtf(s.v[2] * kInvCols + Cfg::EPS);
    } else {
      rowred::St<1> q{{0.0f}};
      each(true, [&](float x) { q.v[0] += x * x; });
      q = rowred::reduce<TPR, Cfg::BLOCK, IL>(q, rowred::Sum{});
      b = 1.0f / sqrtf(q.v[0] * kInvCols + Cfg::EPS);
    }
    if (!valid) return;
    for (int c = lane; c < NV; c += TPR) {
      float v[V];
      again(c, v);
#pragma unroll
      for (int e = 0; e < V; ++e) v[e] = Cfg::STAT == kSoftmax ? expf(v[e] - a) / b : (v[e] - a) * b;
      put(c, v);
    }
  }
}

}  // namespace norm
}  // namespace kiln
