// The ops' vector-Jacobian rules (ops/vjp.h). Notation: y = op(x...), dy = dL/dy, each rule gives dL/dx for
// every input that needs one (VjpCtx::grad ignores the others). Every rule is checked against central
// finite differences of the f64 reference (tests/test_autodiff.cpp).
#include "ops/vjp.h"

#include <algorithm>

namespace kiln::vjp {

namespace {

// dx = op(dy, at) for an activation whose backward is one *_grad op of dy and the forward's x or y.
void by_grad_op(VjpCtx& c, std::string_view grad_op, bool at_output) {
  c.grad("x", c.g().binary(grad_op, c.dy(), at_output ? c.out() : c.in("x")));
}

// `t` broadcast to `like`'s shape.
Tensor broadcast_like(Graph& g, Tensor t, Tensor like) { return g.expand(t, g.shape(like).to_vector()); }

}  // namespace

void relu(VjpCtx& c) { by_grad_op(c, "relu_grad", false); }
void sigmoid(VjpCtx& c) { by_grad_op(c, "sigmoid_grad", true); }
void tanh(VjpCtx& c) { by_grad_op(c, "tanh_grad", true); }
void gelu(VjpCtx& c) { by_grad_op(c, "gelu_grad", false); }
void silu(VjpCtx& c) { by_grad_op(c, "silu_grad", false); }
void exp(VjpCtx& c) { c.grad("x", c.g().mul(c.dy(), c.out())); }
void log(VjpCtx& c) { c.grad("x", c.g().div(c.dy(), c.in("x"))); }
void sqrt(VjpCtx& c) { c.grad("x", c.g().div(c.g().mul(c.dy(), 0.5), c.out())); }
void rsqrt(VjpCtx& c) {  // d(x^-1/2) = -x^-3/2 / 2 = -y^3 / 2
  Graph& g = c.g();
  c.grad("x", g.mul(c.dy(), g.mul(g.mul(c.out(), g.mul(c.out(), c.out())), -0.5)));
}
void neg(VjpCtx& c) { c.grad("x", c.g().neg(c.dy())); }
void reciprocal(VjpCtx& c) { c.grad("x", c.g().mul(c.g().neg(c.dy()), c.g().mul(c.out(), c.out()))); }
void identity(VjpCtx& c) { c.grad("x", c.dy()); }

void add(VjpCtx& c) {
  if (c.wants("a")) c.grad("a", c.sum_to(c.dy(), c.g().shape(c.in("a"))));
  if (c.wants("b")) c.grad("b", c.sum_to(c.dy(), c.g().shape(c.in("b"))));
}

void sub(VjpCtx& c) {
  if (c.wants("a")) c.grad("a", c.sum_to(c.dy(), c.g().shape(c.in("a"))));
  if (c.wants("b")) c.grad("b", c.sum_to(c.g().neg(c.dy()), c.g().shape(c.in("b"))));
}

void mul(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor a = c.in("a"), b = c.in("b");
  if (c.wants("a")) c.grad("a", c.sum_to(b.valid() ? g.mul(c.dy(), b) : g.mul(c.dy(), c.scalar("b")), g.shape(a)));
  if (c.wants("b")) c.grad("b", c.sum_to(a.valid() ? g.mul(c.dy(), a) : g.mul(c.dy(), c.scalar("a")), g.shape(b)));
}

void div(VjpCtx& c) {  // y = a / b: da = dy / b, db = -dy a / b^2 = -dy y / b
  Graph& g = c.g();
  const Tensor a = c.in("a"), b = c.in("b");
  if (c.wants("a")) c.grad("a", c.sum_to(b.valid() ? g.div(c.dy(), b) : g.div(c.dy(), c.scalar("b")), g.shape(a)));
  if (c.wants("b")) c.grad("b", c.sum_to(g.neg(g.mul(c.dy(), g.div(c.out(), b))), g.shape(b)));
}

void bias_add(VjpCtx& c) {
  Graph& g = c.g();
  const int rank = g.shape(c.dy()).rank();
  int64_t axis = std::get<int64_t>(c.node().attrs.at("axis"));
  if (axis < 0) axis += rank;
  c.grad("x", c.dy());
  if (c.wants("bias")) {
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis) axes.push_back(d);
    c.grad("bias", g.reduce_sum(c.dy(), axes));
  }
}

// y = A B with A = a or aᵀ, B = b or bᵀ (the last two dims): dA = dy Bᵀ, dB = Aᵀ dy, each turned back into
// a's and b's own orientation by choosing the operands' transposes, never by a transpose op.
void matmul(VjpCtx& c) {
  Graph& g = c.g();
  const bool ta = std::get<bool>(c.node().attrs.at("transpose_a")),
             tb = std::get<bool>(c.node().attrs.at("transpose_b"));
  const Tensor a = c.in("a"), b = c.in("b"), dy = c.dy();
  if (c.wants("a")) {
    // a = A: dy Bᵀ; a = Aᵀ: (dy Bᵀ)ᵀ = B dyᵀ.
    const Tensor da = ta ? g.matmul(b, dy, {.transpose_a = tb, .transpose_b = true})
                         : g.matmul(dy, b, {.transpose_a = false, .transpose_b = !tb});
    c.grad("a", c.sum_to(da, g.shape(a)));
  }
  if (c.wants("b")) {
    // b = B: Aᵀ dy; b = Bᵀ: (Aᵀ dy)ᵀ = dyᵀ A.
    const Tensor db = tb ? g.matmul(dy, a, {.transpose_a = true, .transpose_b = ta})
                         : g.matmul(a, dy, {.transpose_a = !ta, .transpose_b = false});
    c.grad("b", c.sum_to(db, g.shape(b)));
  }
  if (c.wants("bias")) c.grad("bias", c.sum_to(dy, g.shape(c.in("bias"))));
}

void conv2d(VjpCtx& c) {
  Graph& g = c.g();
  const Node& n = c.node();
  const auto ints = [&](const char* a) { return std::get<std::vector<int64_t>>(n.attrs.at(a)); };
  const Conv2dOptions o{ints("stride"), ints("padding"), ints("dilation"), std::get<int64_t>(n.attrs.at("groups"))};
  const Tensor x = c.in("x"), w = c.in("w"), dy = c.dy();
  const Shape xs = g.shape(x), ws = g.shape(w);  // copies: the builder calls below may move the graph's tensors
  const Layout w_layout = g.tensor(w).layout;
  if (c.wants("x")) c.grad("x", g.conv2d_dgrad(dy, w, {xs[2], xs[3]}, o));
  if (c.wants("w")) {
    const Tensor dw = g.conv2d_wgrad(x, dy, {ws[2], ws[3]}, o);
    // The gradient in the parameter's layout (conv2d_wgrad gives KCRS), so that an update is elementwise.
    c.grad("w", w_layout == Layout::KRSC ? g.layout_convert(dw, Layout::KRSC) : dw);
  }
  if (c.wants("bias")) c.grad("bias", g.reduce_sum(dy, {0, 2, 3}));
}

void pool2d(VjpCtx& c) {
  const bool is_max = *c.node().op == OpId::max_pool2d;
  c.grad("x", c.g().add_node(is_max ? "max_pool2d_grad" : "avg_pool2d_grad", {{"dy", {c.dy()}}, {"x", {c.in("x")}}},
                             c.node().attrs)[0]);
}

void reshape(VjpCtx& c) { c.grad("x", c.g().reshape(c.dy(), c.g().shape(c.in("x")).to_vector())); }

void transpose(VjpCtx& c) {
  const auto& perm = std::get<std::vector<int64_t>>(c.node().attrs.at("perm"));
  std::vector<int64_t> inverse(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inverse[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  c.grad("x", c.g().transpose(c.dy(), inverse));
}

namespace {

// dy with the reduced dims back as 1s, broadcast to x: every element of x gets its sum's gradient.
Tensor spread(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  const Shape xs = g.shape(x);
  const std::vector<bool> reduced = reduced_dims(c.node(), xs.rank());
  std::vector<int64_t> kept = xs.to_vector();
  for (int d = 0; d < xs.rank(); ++d)
    if (reduced[static_cast<size_t>(d)]) kept[static_cast<size_t>(d)] = 1;
  const Tensor dy = g.shape(c.dy()).to_vector() == kept ? c.dy() : g.reshape(c.dy(), kept);
  return broadcast_like(g, dy, x);
}

}  // namespace

void reduce_sum(VjpCtx& c) { c.grad("x", spread(c)); }

void reduce_mean(VjpCtx& c) {
  const double count = static_cast<double>(c.g().shape(c.in("x")).numel()) /
                       static_cast<double>(std::max<int64_t>(c.g().shape(c.out()).numel(), 1));
  c.grad("x", c.g().mul(spread(c), 1.0 / count));
}

void global_avg_pool(VjpCtx& c) {  // y[n, c] = mean over H, W: every x[n, c, h, w] gets dy[n, c] / (H W)
  Graph& g = c.g();
  const Shape xs = g.shape(c.in("x"));
  c.grad("x", g.mul(broadcast_like(g, c.dy(), c.in("x")), 1.0 / static_cast<double>(xs[2] * xs[3])));
}

// y = (x - mean) s + shift, s = scale / sqrt(var + eps), along axis 1; with r = rsqrt(var + eps):
//   dx = dy s, dshift = Σ dy, dscale = Σ dy (x - mean) r, dmean = -s Σ dy, dvar = -scale r³ / 2 Σ dy (x - mean),
// each Σ over every axis but 1.
void batch_norm(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x"), dy = c.dy();
  const int rank = g.shape(x).rank();
  std::vector<int64_t> column{g.shape(x)[1]}, others{0};  // a [C] vector as [C, 1, ...]: along axis 1
  for (int d = 2; d < rank; ++d) column.push_back(1), others.push_back(d);
  const auto col = [&](Tensor v) { return g.reshape(v, column); };
  const auto sum = [&](Tensor t) { return g.reduce_sum(t, others); };
  const double eps = std::get<double>(c.node().attrs.at("epsilon"));
  const Tensor r = g.rsqrt(g.add(c.in("var"), eps));
  const Tensor s = g.mul(c.in("scale"), r);
  const Tensor centered = g.sub(x, col(c.in("mean")));
  c.grad("x", g.mul(dy, col(s)));
  c.grad("shift", sum(dy));
  if (c.wants("scale")) c.grad("scale", g.mul(sum(g.mul(dy, centered)), r));
  if (c.wants("mean")) c.grad("mean", g.neg(g.mul(sum(dy), s)));
  if (c.wants("var")) {
    const Tensor r3 = g.mul(r, g.mul(r, r));
    c.grad("var", g.mul(g.mul(sum(g.mul(dy, centered)), g.mul(c.in("scale"), r3)), -0.5));
  }
}

// dx = y (dy - Σ dy y) with the sum along the axis, kept as a 1.
void softmax(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor y = c.out(), dy = c.dy();
  const int64_t axis = std::get<int64_t>(c.node().attrs.at("axis"));
  c.grad("x", g.mul(y, g.sub(dy, g.reduce_sum(g.mul(dy, y), {axis}, true))));
}

namespace {

// A norm over the trailing normalized_ndim dims T of x, with rows over the leading dims L: x̂ = (x - μ) r
// (layer norm) or x r (RMS norm), r = rsqrt(var + eps), y = x̂ scale + shift. With g = dy scale:
//   dx = r (g - mean_T(g) - x̂ mean_T(g x̂))   (RMS: without the mean_T(g) term)
//   dscale = Σ_L dy x̂, dshift = Σ_L dy.
void trailing_norm(VjpCtx& c, bool rms) {
  Graph& g = c.g();
  const Tensor x = c.in("x"), dy = c.dy(), scale = c.in("scale");
  const int rank = g.shape(x).rank();
  const int64_t nd = std::get<int64_t>(c.node().attrs.at("normalized_ndim"));
  std::vector<int64_t> trailing, leading;
  for (int64_t d = 0; d < rank; ++d) (d >= rank - nd ? trailing : leading).push_back(d);
  const auto mean_t = [&](Tensor t) { return g.reduce_mean(t, trailing, true); };
  const double eps = std::get<double>(c.node().attrs.at("epsilon"));
  const Tensor centered = rms ? x : g.sub(x, mean_t(x));
  const Tensor r = g.rsqrt(g.add(mean_t(g.mul(centered, centered)), eps));
  const Tensor xhat = g.mul(centered, r);
  const Tensor gy = scale.valid() ? g.mul(dy, scale) : dy;
  Tensor inner = g.sub(gy, g.mul(xhat, mean_t(g.mul(gy, xhat))));
  if (!rms) inner = g.sub(inner, mean_t(gy));
  c.grad("x", g.mul(inner, r));
  const auto sum_l = [&](Tensor t) { return leading.empty() ? t : g.reduce_sum(t, leading); };
  if (c.wants("scale")) c.grad("scale", sum_l(g.mul(dy, xhat)));
  if (c.wants("shift")) c.grad("shift", sum_l(dy));
}

}  // namespace

void group_norm(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x"), dy = c.dy(), scale = c.in("scale");
  const Shape xs = g.shape(x);
  const int64_t C = xs[1];
  const int64_t G = c.node().op == OpId::group_norm ? std::get<int64_t>(c.node().attrs.at("groups")) : C;
  const std::vector<int64_t> rows{xs[0], G, -1};
  std::vector<int64_t> column{C}, others{0};  // a [C] vector as [C, 1, ...]; the axes other than the channels
  for (int d = 2; d < xs.rank(); ++d) column.push_back(1), others.push_back(d);
  const auto mean_row = [&](Tensor t) { return g.reduce_mean(t, {2}, true); };
  const double eps = std::get<double>(c.node().attrs.at("epsilon"));
  const Tensor xr = g.reshape(x, rows);
  const Tensor centered = g.sub(xr, mean_row(xr));
  const Tensor r = g.rsqrt(g.add(mean_row(g.mul(centered, centered)), eps));
  const Tensor xhat = g.mul(centered, r);  // [N, G, M]
  const Tensor gy = g.reshape(scale.valid() ? g.mul(dy, g.reshape(scale, column)) : dy, rows);
  const Tensor inner = g.sub(g.sub(gy, mean_row(gy)), g.mul(xhat, mean_row(g.mul(gy, xhat))));
  c.grad("x", g.reshape(g.mul(inner, r), xs.to_vector()));
  if (c.wants("scale")) c.grad("scale", g.reduce_sum(g.mul(dy, g.reshape(xhat, xs.to_vector())), others));
  if (c.wants("shift")) c.grad("shift", g.reduce_sum(dy, others));
}

void layer_norm(VjpCtx& c) { trailing_norm(c, false); }
void rms_norm(VjpCtx& c) { trailing_norm(c, true); }

// Each input's slice of dy along the axis.
void concat(VjpCtx& c) {
  Graph& g = c.g();
  const Shape ys = g.shape(c.out());
  int64_t axis = std::get<int64_t>(c.node().attrs.at("axis"));
  if (axis < 0) axis += ys.rank();
  int64_t at = 0;
  for (int k = 0; k < static_cast<int>(c.node().inputs[0].size()); ++k) {
    const Shape xs = g.shape(c.in("xs", k));
    std::vector<int64_t> starts(static_cast<size_t>(ys.rank()), 0), ends = ys.to_vector();
    starts[static_cast<size_t>(axis)] = at;
    ends[static_cast<size_t>(axis)] = at + xs[static_cast<int>(axis)];
    at += xs[static_cast<int>(axis)];
    if (c.wants("xs", k)) c.grad("xs", g.slice(c.dy(), starts, ends), k);
  }
}

void slice(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  const Shape xs = g.shape(x);
  const std::vector<SliceRange> ranges = slice_ranges(xs, c.node().attrs);
  for (const SliceRange& r : ranges) {
    if (r.step != 1 && r.size > 1) {
      c.refuse("a slice with a step above 1 has no gradient rule yet");
      return;
    }
  }
  // The slice of x spanning dims [0, a) whole, dim a over [b, e), the dims after as the slice takes them: the
  // shape dy has once the dims before a are back to x's.
  const auto part = [&](int a, int64_t b, int64_t e) {
    std::vector<int64_t> starts, ends;
    for (int d = 0; d < xs.rank(); ++d) {
      const SliceRange& r = ranges[static_cast<size_t>(d)];
      starts.push_back(d < a ? 0 : d == a ? b : r.start);
      ends.push_back(d < a ? xs[d] : d == a ? e : r.start + r.size);
    }
    return g.mul(g.slice(x, starts, ends), 0.0);
  };
  Tensor d = c.dy();
  for (int a = 0; a < xs.rank(); ++a) {
    const SliceRange r = ranges[static_cast<size_t>(a)];
    if (r.size == xs[a]) continue;
    std::vector<Tensor> pieces;
    if (r.start > 0) pieces.push_back(part(a, 0, r.start));
    pieces.push_back(d);
    if (r.start + r.size < xs[a]) pieces.push_back(part(a, r.start + r.size, xs[a]));
    d = g.concat(pieces, a);
  }
  c.grad("x", d);
}

void channel_stats(VjpCtx& c) {
  Graph& g = c.g();
  const Tensor x = c.in("x");
  const Shape xs = g.shape(x);
  const int64_t C = xs[1];
  const DType t = g.tensor(x).dtype;
  // dy [2, C] (f32): row 0 the sums' gradient, row 1 the sums of squares'; each as [C, 1, 1] in x's dtype.
  const auto row = [&](int64_t i) {
    Tensor r = g.reshape(g.slice(c.dy(), {i, 0}, {i + 1, C}), {C, 1, 1});
    return t == DType::f32 ? r : g.cast(r, t);
  };
  const Tensor ds = row(0), dq = row(1);
  c.grad("x", g.add(g.expand(ds, xs.to_vector()), g.mul(g.mul(x, 2.0), dq)));
}

void expand(VjpCtx& c) { c.grad("x", c.sum_to(c.dy(), c.g().shape(c.in("x")))); }

void cast(VjpCtx& c) { c.grad("x", c.g().cast(c.dy(), c.g().dtype(c.in("x")))); }

}  // namespace kiln::vjp
