// The gradient rules of the activations without a *_grad op of their own (ops/vjp.h): each is dy times its
// derivative, composed of existing pointwise ops, which the planner fuses into one kernel with whatever reads
// the result. Piecewise derivatives use relu_grad as a gate: relu_grad(v, t) is v where t > 0, else 0. At a
// breakpoint itself (measure zero) a gate gives the derivative of the side PyTorch's backward gives where it
// says so (relu6's and hardsigmoid's strict inequalities, leaky_relu's slope at 0), and 0 elsewhere.
#include <cmath>
#include <numbers>

#include "ops/vjp.h"

namespace kiln::vjp {

namespace {

Tensor gate(Graph& g, Tensor v, Tensor t) { return g.binary("relu_grad", v, t); }

double attr(const VjpCtx& c, const char* name) {
  auto it = c.node().attrs.find(name);
  return it == c.node().attrs.end() ? NAN : std::get<double>(it->second);
}

}  // namespace

// min(max(x, 0), 6): dy on (0, 6) (PyTorch's hardtanh backward: strict).
void relu6(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  c.grad("x", gate(g, gate(g, c.dy(), x), g.sub(6.0, x)));
}

// min(max(x, lo), hi): dy strictly between the bounds present.
void clamp(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  Tensor d = c.dy();
  if (const double lo = attr(c, "min"); !std::isnan(lo)) d = gate(g, d, g.sub(x, lo));
  if (const double hi = attr(c, "max"); !std::isnan(hi)) d = gate(g, d, g.sub(hi, x));
  c.grad("x", d);
}

// x >= 0 ? x : alpha x: alpha dy + (1 - alpha) dy [x > 0] (alpha dy at 0, as PyTorch).
void leaky_relu(VjpCtx& c) {
  Graph& g = c.g();
  const double alpha = attr(c, "alpha");
  c.grad("x", g.add(g.mul(c.dy(), alpha), g.mul(gate(g, c.dy(), c.in("x")), 1.0 - alpha)));
}

// x > 0 ? x : alpha (exp(x) - 1): dy for x > 0, else dy alpha exp(x).
void elu(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x"), pos = gate(g, c.dy(), x);
  c.grad("x", g.add(pos, g.mul(g.sub(c.dy(), pos), g.mul(g.exp(g.minimum(x, 0.0)), attr(c, "alpha")))));
}

// beta x > threshold ? x : log(1 + exp(beta x)) / beta: dy sigmoid(beta x), or dy past the threshold.
void softplus(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor bx = g.mul(c.in("x"), attr(c, "beta"));
  const Tensor s = g.mul(c.dy(), g.sigmoid(bx));
  c.grad("x", g.add(s, gate(g, g.sub(c.dy(), s), g.sub(bx, attr(c, "threshold")))));
}

// relu6(x + 3) / 6: dy / 6 on (-3, 3).
void hardsigmoid(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  c.grad("x", gate(g, gate(g, g.mul(c.dy(), 1.0 / 6), g.add(x, 3.0)), g.sub(3.0, x)));
}

// x relu6(x + 3) / 6: 0 below -3, dy (x / 3 + 1/2) on (-3, 3), dy above 3.
void hardswish(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  const Tensor mid = gate(g, gate(g, g.mul(c.dy(), g.add(g.mul(x, 1.0 / 3), 0.5)), g.add(x, 3.0)), g.sub(3.0, x));
  c.grad("x", g.add(mid, gate(g, c.dy(), g.sub(x, 3.0))));
}

// 0.5 x (1 + t), t = tanh(k (x + 0.044715 x^3)), k = sqrt(2 / pi):
// dy (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 0.044715 x^2)).
void gelu_tanh(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x"), x2 = g.mul(x, x);
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const Tensor t = g.tanh(g.mul(g.add(x, g.mul(g.mul(x2, x), 0.044715)), k));
  const Tensor inner = g.mul(g.add(g.mul(x2, 3 * 0.044715), 1.0), k);
  const Tensor d = g.add(g.mul(g.add(t, 1.0), 0.5), g.mul(g.mul(x, 0.5), g.mul(g.sub(1.0, g.mul(t, t)), inner)));
  c.grad("x", g.mul(c.dy(), d));
}

// x tanh(softplus(x)): dy (t + x (1 - t^2) sigmoid(x)), t = tanh(softplus(x)).
void mish(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x"), t = g.tanh(g.softplus(x));
  c.grad("x", g.mul(c.dy(), g.add(t, g.mul(g.mul(x, g.sub(1.0, g.mul(t, t))), g.sigmoid(x)))));
}

// x / (1 + |x|): dy / (1 + |x|)^2.
void softsign(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor a = g.add(g.abs(c.in("x")), 1.0);
  c.grad("x", g.div(c.dy(), g.mul(a, a)));
}

// |x|: dy sign(x) (0 at 0, as PyTorch).
void abs(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  c.grad("x", g.sub(gate(g, c.dy(), x), gate(g, c.dy(), g.neg(x))));
}

}  // namespace kiln::vjp
