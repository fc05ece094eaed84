// The ops' vector-Jacobian rules (OpDef::vjp, VjpCtx in ops/registry.h), defined in vjp_rules.cpp and named
// by the registry rows. Each adds the nodes computing its inputs' gradients from dy = dL/dy.
#pragma once

#include "ops/registry.h"

namespace kiln::vjp {

// Activations: their *_grad op (relu, sigmoid, tanh, gelu, silu) or a product of existing ops.
void relu(VjpCtx& c);
void sigmoid(VjpCtx& c);
void tanh(VjpCtx& c);
void gelu(VjpCtx& c);
void silu(VjpCtx& c);
void exp(VjpCtx& c);
void log(VjpCtx& c);
void sqrt(VjpCtx& c);
void rsqrt(VjpCtx& c);
void neg(VjpCtx& c);
void reciprocal(VjpCtx& c);
void identity(VjpCtx& c);
// The other activations, composed of existing pointwise ops (vjp_activations.cpp).
void relu6(VjpCtx& c);
void clamp(VjpCtx& c);
void leaky_relu(VjpCtx& c);
void elu(VjpCtx& c);
void softplus(VjpCtx& c);
void hardsigmoid(VjpCtx& c);
void hardswish(VjpCtx& c);
void gelu_tanh(VjpCtx& c);
void mish(VjpCtx& c);
void softsign(VjpCtx& c);
void abs(VjpCtx& c);
// Binary ops, each operand's gradient summed over the dims it was broadcast along.
void add(VjpCtx& c);
void sub(VjpCtx& c);
void mul(VjpCtx& c);
void div(VjpCtx& c);
void bias_add(VjpCtx& c);
// Matmul gradients are matmuls over transposed operands; a conv's are conv2d_dgrad and conv2d_wgrad, and its
// bias's the sum of dy over every dim but the channels.
void matmul(VjpCtx& c);
void conv2d(VjpCtx& c);
void reshape(VjpCtx& c);
void transpose(VjpCtx& c);
void reduce_sum(VjpCtx& c);
void reduce_mean(VjpCtx& c);
void global_avg_pool(VjpCtx& c);
// max_pool2d / avg_pool2d: their *_grad op with the forward's attributes and input.
void pool2d(VjpCtx& c);
// Normalizations: their backward as pointwise ops and reductions over every axis but the channels (batch
// norm, in inference mode: every one of its operands gets a gradient) or along the softmax's axis.
void batch_norm(VjpCtx& c);
void softmax(VjpCtx& c);
// Norms over the trailing normalized_ndim dims: their statistics recomputed from x.
void layer_norm(VjpCtx& c);
void rms_norm(VjpCtx& c);
// Group and instance norm: statistics per (n, group of channels) over the group's channels and every spatial
// position, recomputed from x as [N, G, C/G · spatial] rows.
void group_norm(VjpCtx& c);
void concat(VjpCtx& c);
// dy put back in x's shape between zeros (0 · the parts of x the slice drops), one sliced dim at a time.
void slice(VjpCtx& c);
// Batch-norm statistics: d Σx = 1, d Σx² = 2x, per channel.
void channel_stats(VjpCtx& c);
void expand(VjpCtx& c);
void cast(VjpCtx& c);

}  // namespace kiln::vjp
