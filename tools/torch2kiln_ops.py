"""The PyTorch -> kiln op mappings of tools/torch2kiln.py: one handler per nn.Module type, function and
Tensor method kiln supports (kiln's ops, ports and attributes: docs/ops.md). A handler gets a Ctx (see
torch2kiln_graph.Ctx), adds kiln nodes and returns the tensor standing for the node's result (an input's
own name when the node is a no-op in eval); it raises Unsupported for a configuration kiln cannot run."""
import ast
import operator
import sys

import torch
import torch.nn.functional as F
from torch import nn

from torch2kiln_attention import multihead_attention
from torch2kiln_data import (axis, chunk, concat, expand, getitem, is_number, method_permute, pair, permute, reshape,
                             size, split, transpose)
from torch2kiln_graph import KT, Unsupported


# ---- convolution, matmul, normalization ----

def conv_padding(padding, kernel, dilation):
    """kiln padding: [ph, pw], or [top, left, bottom, right] for 'same' with an odd total (PyTorch pads the
    extra row and column at the bottom and right)."""
    if padding == "valid":
        return [0, 0]
    if padding != "same":
        return pair(padding)
    total = [d * (k - 1) for k, d in zip(kernel, dilation)]
    lo = [t // 2 for t in total]
    hi = [t - l for t, l in zip(total, lo)]
    return lo if lo == hi else [lo[0], lo[1], hi[0], hi[1]]


def conv2d(c, x, w, bias, stride, padding, dilation, groups):
    if len(c.shape(x)) != 4:
        raise Unsupported(f"input of {len(c.shape(x))} dims: kiln's conv2d takes [N, C, H, W]")
    kernel = c.shape(w)[2:]
    attrs = {"stride": pair(stride), "padding": conv_padding(padding, kernel, pair(dilation)),
             "dilation": pair(dilation), "groups": int(groups)}
    inputs = {"x": x, "w": w}
    if bias is not None:
        inputs["bias"] = bias
    return c.op("conv2d", inputs, attrs)


def m_conv2d(c, m, x):
    if m.padding_mode != "zeros":
        raise Unsupported(f"padding_mode '{m.padding_mode}': kiln pads with zeros only")
    bias = c.param(m, "bias") if m.bias is not None else None
    return conv2d(c, x, c.param(m, "weight"), bias, m.stride, m.padding, m.dilation, m.groups)


def f_conv2d(c, p):
    return conv2d(c, p["input"], p["weight"], p["bias"], p["stride"], p["padding"], p["dilation"], p["groups"])


def m_conv_transpose2d(c, m, x):
    """nn.ConvTranspose2d as conv2d_dgrad: the input gradient of the conv from out_channels to in_channels, whose
    weight [C_in, C_out / groups, kH, kW] is the module's, for PyTorch's output size."""
    if m.padding_mode != "zeros":
        raise Unsupported(f"padding_mode '{m.padding_mode}': kiln pads with zeros only")
    shape = c.shape(x)
    if len(shape) != 4:
        raise Unsupported(f"input of {len(shape)} dims: kiln's conv2d_dgrad takes [N, C, H, W]")
    stride, padding, dilation = pair(m.stride), pair(m.padding), pair(m.dilation)
    out_pad, kernel = pair(m.output_padding), pair(m.kernel_size)
    if any(o >= s for o, s in zip(out_pad, stride)):
        raise Unsupported(f"output_padding {out_pad} at stride {stride}: kiln's conv2d_dgrad takes 0 to stride - 1")
    size = [(n - 1) * s - 2 * p + d * (k - 1) + o + 1
            for n, s, p, d, k, o in zip(shape[2:], stride, padding, dilation, kernel, out_pad)]
    y = c.op("conv2d_dgrad", {"dy": x, "w": c.param(m, "weight")},
             {"stride": stride, "padding": padding, "dilation": dilation, "groups": int(m.groups),
              "input_size": size}, suffix="dgrad" if m.bias is not None else None)
    if m.bias is not None:
        y = c.op("bias_add", {"x": y, "bias": c.param(m, "bias")}, {"axis": 1})
    return y


def linear(c, x, w, bias):
    inputs = {"a": x, "b": w}
    if bias is not None:
        inputs["bias"] = bias
    return c.op("matmul", inputs, {"transpose_b": True})  # PyTorch's weight is [out, in]


def m_linear(c, m, x):
    return linear(c, x, c.param(m, "weight"), c.param(m, "bias") if m.bias is not None else None)


def batch_norm(c, x, scale, shift, mean, var, eps):
    inputs = {"x": x, "scale": scale, "shift": shift, "mean": mean, "var": var}
    return c.op("batch_norm", inputs, {"epsilon": float(eps)})


def m_batch_norm(c, m, x):
    if m.running_mean is None:
        raise Unsupported("track_running_stats=False: in eval it normalizes with batch statistics, which kiln's "
                          "batch_norm (inference, running statistics) does not")
    C = m.num_features
    scale = c.param(m, "weight") if m.affine else c.const("ones", torch.ones(C))
    shift = c.param(m, "bias") if m.affine else c.const("zeros", torch.zeros(C))
    return batch_norm(c, x, scale, shift, c.param(m, "running_mean"), c.param(m, "running_var"), m.eps)


def f_batch_norm(c, p):
    if p["training"] or p["running_mean"] is None:
        raise Unsupported("training=True or no running statistics: kiln's batch_norm is inference only")
    C = c.shape(p["input"])[1]
    scale = p["weight"] if p["weight"] is not None else c.const("ones", torch.ones(C))
    shift = p["bias"] if p["bias"] is not None else c.const("zeros", torch.zeros(C))
    return batch_norm(c, p["input"], scale, shift, p["running_mean"], p["running_var"], p["eps"])


def layer_norm(c, x, normalized_shape, weight, bias, eps):
    inputs = {"x": x}
    if weight is not None:
        inputs["scale"] = weight
    if bias is not None:
        inputs["shift"] = bias
    return c.op("layer_norm", inputs, {"normalized_ndim": len(pair(normalized_shape)), "epsilon": float(eps)})


def m_layer_norm(c, m, x):
    affine = m.elementwise_affine
    weight = c.param(m, "weight") if affine else None
    bias = c.param(m, "bias") if affine and getattr(m, "bias", None) is not None else None
    return layer_norm(c, x, m.normalized_shape, weight, bias, m.eps)


def f_layer_norm(c, p):
    return layer_norm(c, p["input"], p["normalized_shape"], p["weight"], p["bias"], p["eps"])


def m_group_norm(c, m, x):
    inputs = {"x": x}
    if m.affine:
        inputs.update(scale=c.param(m, "weight"), shift=c.param(m, "bias"))
    return c.op("group_norm", inputs, {"groups": m.num_groups, "epsilon": float(m.eps)})


# ---- activations and other unary ops ----

def m_activation(op, **attrs):
    """A module handler for an activation; attrs maps kiln attribute -> the module's attribute name."""
    return lambda c, m, x: c.op(op, {"x": x}, {k: float(getattr(m, a)) for k, a in attrs.items()})


def gelu_op(approximate):
    ops = {"none": "gelu", "tanh": "gelu_tanh"}
    if approximate not in ops:
        raise Unsupported(f"approximate='{approximate}'")
    return ops[approximate]


def hardtanh(c, x, lo, hi):
    if (lo, hi) == (0, 6):
        return c.op("relu6", {"x": x})
    return c.op("clamp", {"x": x}, {"min": float(lo), "max": float(hi)})


def softmax(c, x, dim):
    if dim is None:
        raise Unsupported("softmax without dim")
    return c.op("softmax", {"x": x}, {"axis": axis(int(dim), len(c.shape(x)))})


def f_unary(op, **attrs):
    """A function handler for a unary op; attrs maps kiln attribute -> the function's parameter name."""
    return lambda c, p: c.op(op, {"x": p["input"]}, {k: float(p[a]) for k, a in attrs.items()})


def f_clamp(c, p):
    attrs = {k: float(p[k]) for k in ("min", "max") if p[k] is not None}
    if not attrs or any(isinstance(p[k], KT) for k in ("min", "max")):
        raise Unsupported("clamp needs a number min and/or max")
    return c.op("clamp", {"x": p["input"]}, attrs)


# ---- binary ops: a number on either side becomes the attribute of that port ----

def binary(op):
    def handler(c, p):
        if p.get("alpha", 1) != 1 or p.get("rounding_mode") is not None:
            raise Unsupported("alpha / rounding_mode")
        inputs, attrs = {}, {}
        for port, v in (("a", p["input"]), ("b", p["other"])):
            if isinstance(v, KT):
                inputs[port] = v
            elif is_number(v):
                attrs[port] = float(v)
            else:
                raise Unsupported(f"operand {port} is a {type(v).__name__}")
        return c.op(op, inputs, attrs)
    return handler


# ---- pooling ----

def pool(kind, c, p):
    if p.get("return_indices") or pair(p.get("dilation", 1)) != [1, 1]:
        raise Unsupported("dilation or return_indices")
    if p.get("divisor_override") is not None:
        raise Unsupported("divisor_override")
    kernel = pair(p["kernel_size"])
    stride = pair(p["stride"]) if p["stride"] not in (None, [], ()) else kernel
    attrs = {"kernel": kernel, "stride": stride, "padding": pair(p["padding"]), "ceil_mode": bool(p["ceil_mode"])}
    if kind == "avg":
        attrs["count_include_pad"] = bool(p["count_include_pad"])
    return c.op(f"{kind}_pool2d", {"x": p["input"]}, attrs)


def m_pool(kind):
    names = ["kernel_size", "stride", "padding", "ceil_mode", "dilation", "return_indices", "count_include_pad",
             "divisor_override"]
    return lambda c, m, x: pool(kind, c, {"input": x, **{n: getattr(m, n) for n in names if hasattr(m, n)}})


def adaptive_pool(kind, c, x, output_size):
    """Exact in kiln when each dim's input is divisible by its output (a pool) or the output is a multiple
    of the input (nearest upsampling: each output bin then covers exactly one input element)."""
    shape = c.shape(x)
    if len(shape) != 4:
        raise Unsupported(f"input of {len(shape)} dims")
    H, W = shape[2:]
    out = [s if o is None else int(o) for s, o in zip((H, W), [output_size] * 2 if is_number(output_size)
                                                      else output_size)]
    if out == [1, 1]:
        return c.op(f"global_{kind}_pool", {"x": x})
    if out == [H, W]:
        return x
    if any(i % o and o % i for i, o in zip((H, W), out)):
        raise Unsupported(f"adaptive pool {H}x{W} -> {out[0]}x{out[1]}: kiln has it exactly only when the input is "
                          "divisible by the output or the output a multiple of the input; export at another "
                          "resolution")
    kernel = [i // o if i % o == 0 else 1 for i, o in zip((H, W), out)]
    scale = [float(o // i) if i % o else 1.0 for i, o in zip((H, W), out)]
    if kernel != [1, 1]:
        x = c.op(f"{kind}_pool2d", {"x": x}, {"kernel": kernel, "stride": kernel},
                 suffix="pool" if scale != [1.0, 1.0] else None)
    if scale != [1.0, 1.0]:
        x = c.op("upsample2d", {"x": x}, {"scale": scale, "mode": "nearest"})
    return x


def upsample(c, x, size, scale_factor, mode, align_corners):
    if mode not in ("nearest", "bilinear"):
        raise Unsupported(f"mode '{mode}': kiln's upsample2d has nearest and bilinear")
    attrs = {"mode": mode, "align_corners": bool(align_corners)}
    if scale_factor is not None:
        attrs["scale"] = [float(s) for s in ([scale_factor] * 2 if is_number(scale_factor) else scale_factor)]
    else:
        attrs["size"] = c.out_shape[2:]
    return c.op("upsample2d", {"x": x}, attrs)


def f_interpolate(c, p):
    if p["antialias"] or p["recompute_scale_factor"]:
        raise Unsupported("antialias / recompute_scale_factor")
    return upsample(c, p["input"], p["size"], p["scale_factor"], p["mode"], p["align_corners"])


def mean(c, p):
    x, dims = p["input"], p["dim"]
    rank = len(c.shape(x))
    dims = [axis(d, rank) for d in ([dims] if is_number(dims) else dims or [])]
    if rank != 4 or sorted(dims) != [2, 3]:
        raise Unsupported(f"mean over dims {dims} of a {rank}-D tensor: kiln has the mean over H, W of [N, C, H, W]")
    if p["keepdim"]:
        return c.op("global_avg_pool", {"x": x})
    y = c.op("global_avg_pool", {"x": x}, suffix="pool")
    return c.op("reshape", {"x": y}, {"shape": c.out_shape})


def no_op_in_eval(c, p):
    if p.get("training") and p.get("p", 0) > 0:
        raise Unsupported("called with training=True")
    return p["input"]


# ---- the tables ----

def modules():
    identity = lambda c, m, x: x  # noqa: E731 - eval: dropout and identity are no-ops
    table = {
        nn.Conv2d: m_conv2d, nn.ConvTranspose2d: m_conv_transpose2d, nn.Linear: m_linear, nn.BatchNorm1d: m_batch_norm, nn.BatchNorm2d: m_batch_norm,
        nn.LayerNorm: m_layer_norm, nn.GroupNorm: m_group_norm,
        nn.ReLU: m_activation("relu"), nn.ReLU6: m_activation("relu6"), nn.Hardswish: m_activation("hardswish"),
        nn.Hardsigmoid: m_activation("hardsigmoid"), nn.SiLU: m_activation("silu"),
        nn.Sigmoid: m_activation("sigmoid"), nn.Tanh: m_activation("tanh"), nn.Mish: m_activation("mish"),
        nn.Softsign: m_activation("softsign"),
        nn.GELU: lambda c, m, x: c.op(gelu_op(m.approximate), {"x": x}),
        nn.LeakyReLU: m_activation("leaky_relu", alpha="negative_slope"), nn.ELU: m_activation("elu", alpha="alpha"),
        nn.Softplus: m_activation("softplus", beta="beta", threshold="threshold"),
        nn.Hardtanh: lambda c, m, x: hardtanh(c, x, m.min_val, m.max_val),
        nn.Softmax: lambda c, m, x: softmax(c, x, m.dim),
        nn.MaxPool2d: m_pool("max"), nn.AvgPool2d: m_pool("avg"),
        nn.AdaptiveAvgPool2d: lambda c, m, x: adaptive_pool("avg", c, x, m.output_size),
        nn.AdaptiveMaxPool2d: lambda c, m, x: adaptive_pool("max", c, x, m.output_size),
        nn.Upsample: lambda c, m, x: upsample(c, x, m.size, m.scale_factor, m.mode, m.align_corners),
        nn.Flatten: lambda c, m, x: reshape(c, x), nn.Unflatten: lambda c, m, x: reshape(c, x),
        nn.MultiheadAttention: multihead_attention,
    }
    multihead_attention.takes_args = True
    for t in (nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout):
        table[t] = identity
    return table


def layer_functions():
    """target -> (handler(c, params), signature: names with optional defaults, as in the Python signature)."""
    return {
        F.conv2d: (f_conv2d, "input weight bias=None stride=1 padding=0 dilation=1 groups=1"),
        F.linear: (lambda c, p: linear(c, p["input"], p["weight"], p["bias"]), "input weight bias=None"),
        F.batch_norm: (f_batch_norm, "input running_mean running_var weight=None bias=None training=False "
                                     "momentum=0.1 eps=1e-05"),
        F.layer_norm: (f_layer_norm, "input normalized_shape weight=None bias=None eps=1e-05"),
        F.gelu: (lambda c, p: c.op(gelu_op(p["approximate"]), {"x": p["input"]}), "input approximate='none'"),
        F.leaky_relu: (f_unary("leaky_relu", alpha="negative_slope"), "input negative_slope=0.01 inplace=False"),
        F.elu: (f_unary("elu", alpha="alpha"), "input alpha=1.0 inplace=False"),
        F.softplus: (f_unary("softplus", beta="beta", threshold="threshold"), "input beta=1 threshold=20"),
        F.hardtanh: (lambda c, p: hardtanh(c, p["input"], p["min_val"], p["max_val"]),
                     "input min_val=-1.0 max_val=1.0 inplace=False"),
        torch.clamp: (f_clamp, "input min=None max=None"),
        F.max_pool2d: (lambda c, p: pool("max", c, p),
                       "input kernel_size stride=None padding=0 dilation=1 ceil_mode=False return_indices=False"),
        F.avg_pool2d: (lambda c, p: pool("avg", c, p), "input kernel_size stride=None padding=0 ceil_mode=False "
                                                       "count_include_pad=True divisor_override=None"),
        F.adaptive_avg_pool2d: (lambda c, p: adaptive_pool("avg", c, p["input"], p["output_size"]),
                                "input output_size"),
        F.adaptive_max_pool2d: (lambda c, p: adaptive_pool("max", c, p["input"], p["output_size"]),
                                "input output_size return_indices=False"),
        F.interpolate: (f_interpolate, "input size=None scale_factor=None mode='nearest' align_corners=None "
                                       "recompute_scale_factor=None antialias=False"),
        torch.mean: (mean, "input dim=None keepdim=False dtype=None"),
        F.softmax: (lambda c, p: softmax(c, p["input"], p["dim"]), "input dim=None _stacklevel=3 dtype=None"),
        torch.softmax: (lambda c, p: softmax(c, p["input"], p["dim"]), "input dim dtype=None"),
    }


def data_functions():
    table = {
        torch.flatten: (lambda c, p: reshape(c, p["input"]), "input start_dim=0 end_dim=-1"),
        torch.reshape: (lambda c, p: reshape(c, p["input"]), "input shape"),
        torch.permute: (lambda c, p: permute(c, p["input"], p["dims"]), "input dims"),
        torch.transpose: (transpose, "input dim0 dim1"), torch.swapaxes: (transpose, "input dim0 dim1"),
        torch.cat: (concat, "tensors dim=0"), torch.concat: (concat, "tensors dim=0"),
        torch.chunk: (chunk, "input chunks dim=0"), torch.split: (split, "input split_size_or_sections dim=0"),
        operator.getitem: (getitem, "input index"),
        torch.unsqueeze: (lambda c, p: reshape(c, p["input"]), "input dim"),
        torch.squeeze: (lambda c, p: reshape(c, p["input"]), "input dim=None"),
        F.dropout: (no_op_in_eval, "input p=0.5 training=True inplace=False"),
    }
    sd = sys.modules.get("torchvision.ops.stochastic_depth")
    if sd is not None:  # torchvision's StochasticDepth: fx.wrap-ped, so a call_function node
        table[sd.stochastic_depth] = (no_op_in_eval, "input p mode training=True")
    return table


def elementwise_functions():
    table = {}
    for fns, op in (((F.relu, torch.relu), "relu"), ((F.relu6,), "relu6"), ((F.hardswish,), "hardswish"),
                    ((F.hardsigmoid,), "hardsigmoid"), ((F.silu,), "silu"), ((F.mish,), "mish"),
                    ((torch.sigmoid, F.sigmoid), "sigmoid"), ((torch.tanh, F.tanh), "tanh"),
                    ((torch.exp,), "exp"), ((torch.log,), "log"), ((torch.sqrt,), "sqrt"),
                    ((torch.rsqrt,), "rsqrt"), ((torch.abs,), "abs"), ((torch.neg, operator.neg), "neg"),
                    ((torch.reciprocal,), "reciprocal"), ((F.softsign,), "softsign")):
        for fn in fns:
            table[fn] = (f_unary(op), "input inplace=False")
    for fns, op in (((operator.add, operator.iadd, torch.add), "add"), ((operator.sub, operator.isub, torch.sub),
                                                                       "sub"),
                    ((operator.mul, operator.imul, torch.mul), "mul"),
                    ((operator.truediv, operator.itruediv, torch.div), "div"),
                    ((torch.maximum,), "maximum"), ((torch.minimum,), "minimum"), ((torch.pow,), "pow")):
        for fn in fns:
            table[fn] = (binary(op), "input other alpha=1 rounding_mode=None")
    return table


def methods():
    """Tensor method name -> handler(c, x, *args, **kwargs), or (handler(c, params), signature)."""
    table = {
        "view": reshape, "reshape": reshape, "flatten": reshape, "contiguous": lambda c, x: x,
        "float": lambda c, x: x,  # a float tensor already (non-float tensors are refused before)
        "unsqueeze": reshape, "squeeze": reshape, "expand": expand,
        "chunk": (chunk, "input chunks dim=0"), "split": (split, "input split_size_or_sections dim=0"),
        "permute": method_permute, "size": size, "dim": lambda c, x: len(c.shape(x)),
        "transpose": (transpose, "input dim0 dim1"), "swapaxes": (transpose, "input dim0 dim1"), "mean": (mean, "input dim=None keepdim=False dtype=None"),
        "softmax": (lambda c, p: softmax(c, p["input"], p["dim"]), "input dim dtype=None"),
        "clamp": (f_clamp, "input min=None max=None"),
    }
    for name in ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal"):
        table[name] = table[name + "_"] = (f_unary(name), "input")
    for name in ("add", "sub", "mul", "div"):
        table[name] = table[name + "_"] = (binary(name), "input other alpha=1 rounding_mode=None")
    return table


# ---- dispatch ----

def parse_signature(sig):
    """'input p=0.5 training=True' -> [('input', REQUIRED), ('p', 0.5), ('training', True)]."""
    out = []
    for item in sig.split():
        name, _, default = item.partition("=")
        out.append((name, ast.literal_eval(default) if default else REQUIRED))
    return out


REQUIRED = object()
MODULES, METHODS = modules(), methods()
FUNCTIONS = {**layer_functions(), **data_functions(), **elementwise_functions()}
SIGNATURES = {}


def bind(sig, args, kwargs):
    if sig not in SIGNATURES:
        SIGNATURES[sig] = parse_signature(sig)
    params = SIGNATURES[sig]
    if len(args) > len(params) or set(kwargs) - {n for n, _ in params}:
        raise Unsupported(f"arguments not understood: {len(args)} positional, keywords {sorted(kwargs)}")
    p = {n: (args[i] if i < len(args) else kwargs.get(n, d)) for i, (n, d) in enumerate(params)}
    missing = [n for n, v in p.items() if v is REQUIRED]
    if missing:
        raise Unsupported(f"missing arguments {missing}")
    return p


def module_handler(t):
    return next((MODULES[k] for k in t.__mro__ if k in MODULES), None)


def call(c, kind, target, args, kwargs):
    """Converts a call_function or call_method node; a call on constants only is evaluated in Python."""
    tensors = [a for a in list(args) + list(kwargs.values()) if isinstance(a, KT)
               or (isinstance(a, (list, tuple)) and any(isinstance(t, KT) for t in a))]
    if not tensors and kind == "call_function":
        value = target(*args, **kwargs)  # e.g. operator.getitem on a size, arithmetic on sizes
        return c.b.param(c.node.name, value) if isinstance(value, torch.Tensor) else value  # torch.ones(...)
    if kind == "call_function" and target is getattr and args[1] == "shape":
        return tuple(c.shape(args[0]))
    entry = (FUNCTIONS if kind == "call_function" else METHODS).get(target)
    if entry is None:
        raise Unsupported("")
    if callable(entry):
        return entry(c, *args, **kwargs)
    handler, sig = entry
    return handler(c, bind(sig, args, kwargs))
