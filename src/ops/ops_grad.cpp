// The activations' backward ops (cuDNN's pointwise backward modes): binary pointwise ops of the output's
// gradient `a` (dy) and the forward's input or output `b`, each with its f64 reference and device function
// (templates/kiln/pointwise_ops.cuh). Their gradient rules (OpDef::vjp) are in vjp_rules.cpp.
#include <cmath>
#include <numbers>

#include "ops/registry.h"

namespace kiln {

namespace {

double sigmoid_of(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double g_relu(double dy, double x) { return x > 0 ? dy : 0.0; }
double g_sigmoid(double dy, double y) { return dy * y * (1.0 - y); }
double g_tanh(double dy, double y) { return dy * (1.0 - y * y); }
double g_gelu(double dy, double x) {
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
  return dy * (0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)) + x * pdf);
}
double g_silu(double dy, double x) {
  const double s = sigmoid_of(x);
  return dy * s * (1.0 + x * (1.0 - s));
}

}  // namespace

std::vector<OpDef> gradient_rows() {
  std::vector<OpDef> r;
  r.push_back(
      binary_row(OpId::relu_grad, g_relu, "kiln::op::relu_grad", "relu's backward: a = dy, b = x: x > 0 ? dy : 0"));
  r.push_back(binary_row(OpId::sigmoid_grad, g_sigmoid, "kiln::op::sigmoid_grad",
                         "sigmoid's backward: a = dy, b = y (its output): dy y (1 - y)"));
  r.push_back(binary_row(OpId::tanh_grad, g_tanh, "kiln::op::tanh_grad",
                         "tanh's backward: a = dy, b = y (its output): dy (1 - y^2)"));
  r.push_back(binary_row(OpId::gelu_grad, g_gelu, "kiln::op::gelu_grad",
                         "gelu's backward: a = dy, b = x: dy (Phi(x) + x phi(x))"));
  r.push_back(binary_row(OpId::silu_grad, g_silu, "kiln::op::silu_grad",
                         "silu's backward: a = dy, b = x: dy s (1 + x (1 - s)), s = sigmoid(x)"));
  return r;
}

}  // namespace kiln
