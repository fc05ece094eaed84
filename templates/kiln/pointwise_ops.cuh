// The device side of every pointwise op: one function per registry row whose `device_fn` names it.
// Arithmetic is f32 (the storage type is converted on load and store); the formulas are those of
// docs/ops.md. Adding a pointwise op: its registry row (src/ops/ops_pointwise.cpp) and one function here.
//
// Calling convention (codegen/pointwise_emit.cpp): the op's tensor operands in port order, then the float
// attributes its row lists in `device_params`, as literals (NaN for an absent optional one).
#pragma once

#include "kiln/device.cuh"

namespace kiln {
namespace op {

__device__ __forceinline__ bool is_nan(float x) { return x != x; }

__device__ __forceinline__ float identity(float x) { return x; }
__device__ __forceinline__ float relu(float x) { return is_nan(x) ? x : (x > 0.0f ? x : 0.0f); }
__device__ __forceinline__ float relu6(float x) { return is_nan(x) ? x : fminf(fmaxf(x, 0.0f), 6.0f); }
// torch.clamp: NaN bounds are absent; when min > max the result is max.
__device__ __forceinline__ float clamp(float x, float lo, float hi) {
  if (is_nan(x)) return x;
  if (!is_nan(lo) && x < lo) x = lo;
  if (!is_nan(hi) && x > hi) x = hi;
  return x;
}
__device__ __forceinline__ float leaky_relu(float x, float alpha) { return x >= 0.0f ? x : alpha * x; }
__device__ __forceinline__ float elu(float x, float alpha) { return x > 0.0f ? x : alpha * (expf(x) - 1.0f); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float tanh_(float x) { return tanhf(x); }
__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float hardsigmoid(float x) { return relu6(x + 3.0f) / 6.0f; }
__device__ __forceinline__ float hardswish(float x) { return x * relu6(x + 3.0f) / 6.0f; }
__device__ __forceinline__ float softplus(float x, float beta, float threshold) {
  return beta * x > threshold ? x : log1pf(expf(beta * x)) / beta;
}
__device__ __forceinline__ float mish(float x) { return x * tanhf(softplus(x, 1.0f, 20.0f)); }
__device__ __forceinline__ float softsign(float x) { return x / (1.0f + fabsf(x)); }
__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ float sqrt_(float x) { return sqrtf(x); }
__device__ __forceinline__ float rsqrt(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ float abs_(float x) { return fabsf(x); }
__device__ __forceinline__ float neg(float x) { return -x; }
__device__ __forceinline__ float reciprocal(float x) { return 1.0f / x; }

__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ float sub(float a, float b) { return a - b; }
__device__ __forceinline__ float mul(float a, float b) { return a * b; }
__device__ __forceinline__ float div(float a, float b) { return a / b; }
// torch.maximum / minimum: NaN when either side is NaN.
__device__ __forceinline__ float maximum(float a, float b) { return is_nan(a) || is_nan(b) ? a + b : fmaxf(a, b); }
__device__ __forceinline__ float minimum(float a, float b) { return is_nan(a) || is_nan(b) ? a + b : fminf(a, b); }
__device__ __forceinline__ float pow_(float a, float b) { return powf(a, b); }

// The activations' backward (the *_grad ops): dy times the derivative, at the forward's input x (relu, gelu,
// silu) or output y (sigmoid, tanh). relu's derivative is 0 at 0, as PyTorch's.
__device__ __forceinline__ float relu_grad(float dy, float x) { return x > 0.0f ? dy : 0.0f; }
__device__ __forceinline__ float sigmoid_grad(float dy, float y) { return dy * y * (1.0f - y); }
__device__ __forceinline__ float tanh_grad(float dy, float y) { return dy * (1.0f - y * y); }
__device__ __forceinline__ float gelu_grad(float dy, float x) {
  return dy * (0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x));
}
__device__ __forceinline__ float silu_grad(float dy, float x) {
  const float s = 1.0f / (1.0f + expf(-x));
  return dy * s * (1.0f + x * (1.0f - s));
}

// Inference batch norm: the per-channel scale and shift are computed here from the bound tensors, so no
// weight is ever rewritten (the compiler hoists nothing across threads, but the cost is one rsqrt).
__device__ __forceinline__ float batch_norm(float x, float scale, float shift, float mean, float var, float eps) {
  const float s = scale / sqrtf(var + eps);
  return (x - mean) * s + shift;
}

}  // namespace op
}  // namespace kiln
