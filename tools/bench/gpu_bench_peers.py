#!/usr/bin/env python3
"""Time kiln's gpu_bench cases with PyTorch peers (eager, eager in CUDA graphs, torch.compile), side by side.

gpu_bench (kiln's C++ GPU benchmark) writes a results file: one entry per case with the path of the
kiln graph it ran, kiln's time and the case's FLOP and minimum-byte counts. This script reads that file,
rebuilds every case's computation in PyTorch by interpreting the kiln graph JSON node by node
(docs/graph-format.md, docs/ops.md) and times three peers on the same GPU right after kiln:

  eager        torch.nn.functional ops, torch.backends.cudnn.benchmark = True, 4-D tensors channels_last
               where the graph declares NHWC / KRSC, and for every 4-D input in the "conv" suite;
  eager_graph  the same eager function captured into CUDA graphs (one per input set, after a warm-up on a
               side stream so that cuDNN autotuning happens before capture), timed by graph replay: the GPU
               time of PyTorch's / cuDNN's kernels without Python and launch overhead (--no-graph skips it);
  compile      torch.compile (default mode) of the same function, within --compile-budget-s of compile time.

Eager and compile times include the Python / launch overhead of each call (for small cases it dominates:
~0.1 ms); kiln launches from C++, so eager_graph is the peer to compare GPU work against.

It also measures two ceilings once at the start (device-to-device copy bandwidth, dense bf16 matmul
TFLOP/s) and prints one table per suite: kiln / eager / graph / compile medians, the ratios peer/kiln
(> 1 means kiln is faster) with their geometric means, and kiln's TFLOP/s, GB/s and the
share of each ceiling it reaches. --out writes everything as JSON, --csv a compact CSV.

How the device check calls it (on the GPU machine, right after gpu_bench wrote its results):

    build/gpu_bench ... --out "$OUT/kiln.json"
    python3 tools/bench/gpu_bench_peers.py --kiln "$OUT/kiln.json" \\
        --out "$OUT/peers.json" --csv "$OUT/peers.csv" [--compile-budget-s 150] [--no-compile] [--no-graph]

Without a GPU (or without torch) it can still check that every graph interprets: --dry-run imports no
torch, parses the graphs of a results file (--kiln) or of --graphs FILE..., and prints the op sequence it
would execute; an op or attribute it cannot translate is an error naming the node and op.

Only the standard library is used besides torch, and torch is imported lazily (not in --dry-run).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import operator
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# Set by import_torch(); the lowered ops reference these module globals only when they run, so a dry run
# can build the whole execution plan without torch.
torch: Any = None
F: Any = None

LINE_WIDTH = 160
DTYPE_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
LAYOUTS_4D = {"NCHW", "NHWC", "KCRS", "KRSC"}
CHANNELS_LAST_LAYOUTS = {"NHWC", "KRSC"}  # memory order [N,H,W,C] / [K,R,S,C]: torch.channels_last
PEERS = ("eager", "eager_graph", "compile")  # the order they run and are reported in

# Input ports whose values must be positive (or non-zero) for the op to give finite results
# (docs/ops.md domains): graph inputs bound there get rand + 0.5 instead of randn.
POSITIVE_PORTS = {("batch_norm", "var"), ("log", "x"), ("sqrt", "x"), ("rsqrt", "x"), ("pow", "a"),
                  ("reciprocal", "x"), ("div", "b")}


class GraphError(Exception):
    """A graph this script cannot interpret (unsupported op, bad attribute, malformed JSON)."""


def import_torch() -> None:
    global torch, F
    if torch is None:
        import importlib

        import torch as torch_module
        import torch.nn.functional as functional

        importlib.import_module("torch._dynamo")  # torch._dynamo.config / reset() are used: load it explicitly

        torch, F = torch_module, functional


def torch_dtype(name: str):
    return getattr(torch, DTYPE_NAMES[name])


# ----------------------------------------------------------------------------------------------------
# Graph loading and lowering to a list of steps (each a closure over torch functional calls)
# ----------------------------------------------------------------------------------------------------


@dataclass
class TensorDecl:
    name: str
    shape: list[int]
    dtype: str
    layout: str | None
    kind: str


@dataclass
class Step:
    node: str
    op: str
    inputs: list[str]  # tensor names read, in port order (for printing)
    output: str
    desc: str  # the torch call it makes, for --dry-run
    run: Callable[[dict], Any]  # env (tensor name -> torch.Tensor) -> output tensor


@dataclass
class Plan:
    name: str
    path: str
    decls: list[TensorDecl]
    steps: list[Step]
    outputs: list[tuple[str, str | None]]  # (tensor name, explicit layout or None)
    positive: set[str] = field(default_factory=set)  # declared tensors that must be positive
    fan_in: dict[str, int] = field(default_factory=dict)  # weight tensor -> fan-in, to scale its values


class NodeView:
    """One node's ports and attributes; records what the lowering read so that a port or attribute it
    ignored (which would silently change the computation) is an error."""

    def __init__(self, raw: dict, index: int):
        if not isinstance(raw, dict) or "op" not in raw:
            raise GraphError(f"/nodes/{index}: expected an object with an 'op'")
        self.op: str = raw["op"]
        self.name: str = raw.get("name") or f"{self.op}_{index}"
        self.inputs: dict = raw.get("inputs") or {}
        self.attrs: dict = raw.get("attrs") or {}
        outputs = raw.get("outputs") or {}
        if set(outputs) != {"y"}:
            raise self.error(f"expected one output port 'y', got {sorted(outputs)}")
        self.output: str = outputs["y"]
        self._used_ports: set[str] = set()
        self._used_attrs: set[str] = set()

    def error(self, message: str) -> GraphError:
        return GraphError(f"node '{self.name}' ({self.op}): {message}")

    def port(self, name: str) -> str:
        if name not in self.inputs:
            raise self.error(f"missing input '{name}'")
        return self.opt_port(name)

    def opt_port(self, name: str) -> str | None:
        self._used_ports.add(name)
        value = self.inputs.get(name)
        if value is not None and not isinstance(value, str):
            raise self.error(f"input '{name}': expected a tensor name, got {value!r}")
        return value

    def list_port(self, name: str) -> list[str]:
        self._used_ports.add(name)
        value = self.inputs.get(name)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.error(f"input '{name}': expected a non-empty list of tensor names, got {value!r}")
        return value

    def attr(self, name: str, default: Any = None, required: bool = False) -> Any:
        self._used_attrs.add(name)
        if name not in self.attrs:
            if required:
                raise self.error(f"missing attribute '{name}'")
            return default
        return self.attrs[name]

    def ints(self, name: str, count: int | None, default: Any = None, required: bool = False) -> list[int] | None:
        """An int list attribute; a single number is repeated `count` times (the graph format's rule)."""
        value = self.attr(name, default, required)
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value] * (count or 1)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.error(f"attribute '{name}': expected a list of integers, got {value!r}")
        return list(value)

    def floats(self, name: str, count: int, default: Any = None) -> list[float] | None:
        value = self.attr(name, default)
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value] * count
        if not isinstance(value, list) or len(value) != count:
            raise self.error(f"attribute '{name}': expected a list of {count} numbers, got {value!r}")
        return [float(v) for v in value]

    def number(self, name: str, default: Any = None, required: bool = False) -> float | None:
        value = self.attr(name, default, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"attribute '{name}': expected a number, got {value!r}")
        return float(value)

    def integer(self, name: str, default: Any = None, required: bool = False) -> int:
        value = self.attr(name, default, required)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"attribute '{name}': expected an integer, got {value!r}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.attr(name, default)
        if not isinstance(value, bool):
            raise self.error(f"attribute '{name}': expected true or false, got {value!r}")
        return value

    def check_all_used(self) -> None:
        extra_ports = sorted(set(self.inputs) - self._used_ports)
        if extra_ports:
            raise self.error(f"unsupported input port(s) {extra_ports}")
        extra_attrs = sorted(set(self.attrs) - self._used_attrs)
        if extra_attrs:
            raise self.error(f"unsupported attribute(s) {extra_attrs}")


def _fmt(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _padding4(node: NodeView, default: list[int]) -> tuple[int, int, int, int]:
    """kiln's padding: [ph, pw] or [top, left, bottom, right] -> (top, left, bottom, right)."""
    pad = node.ints("padding", 2, default)
    if len(pad) == 2:
        return pad[0], pad[1], pad[0], pad[1]
    if len(pad) == 4:
        return pad[0], pad[1], pad[2], pad[3]
    raise node.error(f"attribute 'padding': expected 2 or 4 integers, got {pad}")


def _pool_out(size: int, kernel: int, stride: int, lo: int, hi: int, ceil_mode: bool) -> int:
    """kiln's (= PyTorch's) pooling output size; used to crop after explicit asymmetric padding."""
    num = size + lo + hi - kernel + (stride - 1 if ceil_mode else 0)
    out = num // stride + 1
    if ceil_mode and (out - 1) * stride >= size + lo:
        out -= 1
    return out


# --- per-op lowerings: each returns (description, run(env) -> tensor) --------------------------------

Lowered = tuple[str, Callable[[dict], Any]]


def lower_conv2d(n: NodeView) -> Lowered:
    x, w, b = n.port("x"), n.port("w"), n.opt_port("bias")
    stride = n.ints("stride", 2, [1, 1])
    dilation = n.ints("dilation", 2, [1, 1])
    groups = n.integer("groups", 1)
    top, left, bottom, right = _padding4(n, [0, 0])
    symmetric = top == bottom and left == right
    padding = [top, left] if symmetric else [0, 0]

    def run(env):
        inp = env[x]
        if not symmetric:  # F.conv2d pads symmetrically only
            inp = F.pad(inp, (left, right, top, bottom))
        return F.conv2d(inp, env[w], env[b] if b else None, stride, padding, dilation, groups)

    pad_desc = f"padding={padding}" if symmetric else f"F.pad({[left, right, top, bottom]}) padding=0"
    return (f"F.conv2d(stride={stride}, {pad_desc}, dilation={dilation}, groups={groups}, bias={bool(b)})", run)


def lower_matmul(n: NodeView) -> Lowered:
    a, b, bias = n.port("a"), n.port("b"), n.opt_port("bias")
    ta, tb = n.boolean("transpose_a", False), n.boolean("transpose_b", False)

    def run(env):
        lhs, rhs = env[a], env[b]
        if ta:
            lhs = lhs.transpose(-1, -2)
        if bias and rhs.dim() == 2:
            # What nn.Linear does: one addmm/cuBLASLt call with the bias in its epilogue. F.linear wants the
            # weight as [N, K]; a transposed view costs nothing (cuBLAS reads either order).
            return F.linear(lhs, rhs if tb else rhs.t(), env[bias])
        if tb:
            rhs = rhs.transpose(-1, -2)
        out = torch.matmul(lhs, rhs)
        return out + env[bias] if bias else out

    call = "F.linear" if bias else "torch.matmul"
    return (f"{call}(transpose_a={ta}, transpose_b={tb}, bias={bool(bias)})", run)


def lower_bias_add(n: NodeView) -> Lowered:
    x, b = n.port("x"), n.port("bias")
    axis = n.integer("axis", 1)

    def run(env):
        t = env[x]
        shape = [1] * t.dim()
        shape[axis % t.dim()] = -1
        return t + env[b].reshape(shape)

    return (f"x + bias broadcast along axis {axis}", run)


def lower_batch_norm(n: NodeView) -> Lowered:
    x, scale, shift, mean, var = (n.port(p) for p in ("x", "scale", "shift", "mean", "var"))
    eps = n.number("epsilon", 1e-5)

    def run(env):
        return F.batch_norm(env[x], env[mean], env[var], weight=env[scale], bias=env[shift], training=False,
                            eps=eps)

    return (f"F.batch_norm(training=False, eps={eps:g})", run)


def lower_layer_norm(n: NodeView) -> Lowered:
    x, scale, shift = n.port("x"), n.opt_port("scale"), n.opt_port("shift")
    ndim = n.integer("normalized_ndim", 1)
    eps = n.number("epsilon", 1e-5)

    def run(env):
        t = env[x]
        return F.layer_norm(t, tuple(t.shape[t.dim() - ndim:]), env[scale] if scale else None,
                            env[shift] if shift else None, eps)

    return (f"F.layer_norm(last {ndim} dims, eps={eps:g}, scale={bool(scale)}, shift={bool(shift)})", run)


def lower_rms_norm(n: NodeView) -> Lowered:
    x, scale, shift = n.port("x"), n.opt_port("scale"), n.opt_port("shift")
    ndim = n.integer("normalized_ndim", 1)
    eps = n.number("epsilon", 1e-5)

    def run(env):
        t = env[x]
        dims = tuple(range(t.dim() - ndim, t.dim()))
        if hasattr(F, "rms_norm"):  # torch >= 2.4
            out = F.rms_norm(t, tuple(t.shape[t.dim() - ndim:]), env[scale] if scale else None, eps)
        else:
            out = t * torch.rsqrt(t.pow(2).mean(dims, keepdim=True) + eps)
            if scale:
                out = out * env[scale]
        return out + env[shift] if shift else out  # kiln's rms_norm has an optional shift, torch's none

    return (f"F.rms_norm(last {ndim} dims, eps={eps:g}, scale={bool(scale)}) + shift={bool(shift)}", run)


def lower_group_norm(n: NodeView) -> Lowered:
    x, scale, shift = n.port("x"), n.opt_port("scale"), n.opt_port("shift")
    groups = n.integer("groups", required=True)
    eps = n.number("epsilon", 1e-5)

    def run(env):
        return F.group_norm(env[x], groups, env[scale] if scale else None, env[shift] if shift else None, eps)

    return (f"F.group_norm(groups={groups}, eps={eps:g}, scale={bool(scale)}, shift={bool(shift)})", run)


def lower_instance_norm(n: NodeView) -> Lowered:
    x, scale, shift = n.port("x"), n.opt_port("scale"), n.opt_port("shift")
    eps = n.number("epsilon", 1e-5)

    def run(env):
        # No running statistics: F.instance_norm then normalizes with each instance's own statistics.
        return F.instance_norm(env[x], weight=env[scale] if scale else None, bias=env[shift] if shift else None,
                               eps=eps)

    return (f"F.instance_norm(eps={eps:g}, scale={bool(scale)}, shift={bool(shift)})", run)


def lower_softmax(n: NodeView) -> Lowered:
    x = n.port("x")
    axis = n.integer("axis", -1)
    return (f"F.softmax(dim={axis})", lambda env: F.softmax(env[x], dim=axis))


# A unary op's maker reads the node's attributes (so a dry run checks them) and returns (description, fn).
UnaryMaker = Callable[[NodeView], tuple[str, Callable[[Any], Any]]]


def _unary(make: UnaryMaker) -> Callable[[NodeView], Lowered]:
    def lower(n: NodeView) -> Lowered:
        x = n.port("x")
        desc, fn = make(n)
        return desc, lambda env: fn(env[x])

    return lower


def _plain(module: str, name: str) -> UnaryMaker:
    # Looked up when the op runs: torch is imported lazily, after the plan is built.
    def make(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
        def call(t):
            return getattr(F if module == "F" else torch, name)(t)

        return f"{module}.{name}", call

    return make


def _gelu(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
    # kiln has `gelu` (erf) and `gelu_tanh` as two ops; an `approximate` attribute is honoured as well.
    approximate = n.attr("approximate", "none")
    if approximate is True:
        approximate = "tanh"
    elif approximate is False:
        approximate = "none"
    if approximate not in ("none", "tanh"):
        raise n.error(f"attribute 'approximate': expected 'none' or 'tanh', got {approximate!r}")
    return f"F.gelu(approximate='{approximate}')", lambda t: F.gelu(t, approximate=approximate)


def _gelu_tanh(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
    return "F.gelu(approximate='tanh')", lambda t: F.gelu(t, approximate="tanh")


def _clamp(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
    lo, hi = n.number("min"), n.number("max")
    if lo is None and hi is None:
        raise n.error("expected at least one of the attributes 'min', 'max'")
    return f"torch.clamp(min={lo}, max={hi})", lambda t: torch.clamp(t, min=lo, max=hi)


def _leaky_relu(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
    alpha = n.number("alpha", 0.01)
    return f"F.leaky_relu(negative_slope={alpha:g})", lambda t: F.leaky_relu(t, negative_slope=alpha)


def _elu(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
    alpha = n.number("alpha", 1.0)
    return f"F.elu(alpha={alpha:g})", lambda t: F.elu(t, alpha=alpha)


def _softplus(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
    beta, threshold = n.number("beta", 1.0), n.number("threshold", 20.0)
    return (f"F.softplus(beta={beta:g}, threshold={threshold:g})",
            lambda t: F.softplus(t, beta=beta, threshold=threshold))


def _identity(n: NodeView) -> tuple[str, Callable[[Any], Any]]:
    return "identity (no op)", lambda t: t


UNARY_OPS: dict[str, Callable[[NodeView], Lowered]] = {
    "relu": _unary(_plain("F", "relu")),
    "relu6": _unary(_plain("F", "relu6")),
    "clamp": _unary(_clamp),
    "leaky_relu": _unary(_leaky_relu),
    "elu": _unary(_elu),
    "sigmoid": _unary(_plain("torch", "sigmoid")),
    "tanh": _unary(_plain("torch", "tanh")),
    "gelu": _unary(_gelu),
    "gelu_tanh": _unary(_gelu_tanh),
    "silu": _unary(_plain("F", "silu")),
    "hardswish": _unary(_plain("F", "hardswish")),
    "hardsigmoid": _unary(_plain("F", "hardsigmoid")),
    "softplus": _unary(_softplus),
    "mish": _unary(_plain("F", "mish")),
    "exp": _unary(_plain("torch", "exp")),
    "log": _unary(_plain("torch", "log")),
    "sqrt": _unary(_plain("torch", "sqrt")),
    "rsqrt": _unary(_plain("torch", "rsqrt")),
    "abs": _unary(_plain("torch", "abs")),
    "neg": _unary(_plain("torch", "neg")),
    "reciprocal": _unary(_plain("torch", "reciprocal")),
    "identity": _unary(_identity),
}

BINARY_OPS: dict[str, tuple[str, Callable[[Any, Any], Any]]] = {
    "add": ("+", operator.add),
    "sub": ("-", operator.sub),
    "mul": ("*", operator.mul),
    "div": ("/", operator.truediv),
    "pow": ("**", operator.pow),
    "maximum": ("torch.maximum", None),
    "minimum": ("torch.minimum", None),
}


def lower_binary(n: NodeView) -> Lowered:
    symbol, fn = BINARY_OPS[n.op]
    a_port, b_port = n.opt_port("a"), n.opt_port("b")
    a_const, b_const = n.number("a"), n.number("b")
    for name, port, const in (("a", a_port, a_const), ("b", b_port, b_const)):
        if (port is None) == (const is None):
            raise n.error(f"operand '{name}': expected either the input port or the attribute, not "
                          f"{'both' if port else 'neither'}")
    if a_port is None and b_port is None:
        raise n.error("both operands are constants")

    def operand(env, port, const):
        return env[port] if port is not None else const

    if fn is None:  # maximum / minimum: torch.maximum needs two tensors; a constant side becomes a clamp
        is_max = n.op == "maximum"
        if a_port is not None and b_port is not None:
            pair_fn = torch_maximum if is_max else torch_minimum
            run = lambda env: pair_fn(env[a_port], env[b_port])  # noqa: E731
        else:
            tensor_port = a_port if a_port is not None else b_port
            const = a_const if a_const is not None else b_const
            if is_max:
                run = lambda env: torch.clamp(env[tensor_port], min=const)  # noqa: E731
            else:
                run = lambda env: torch.clamp(env[tensor_port], max=const)  # noqa: E731
    else:
        # Python operators: a float on either side dispatches to Tensor.__radd__ / __rsub__ / __rpow__ ...
        run = lambda env: fn(operand(env, a_port, a_const), operand(env, b_port, b_const))  # noqa: E731
    lhs = "a" if a_port is not None else f"{a_const:g}"
    rhs = "b" if b_port is not None else f"{b_const:g}"
    desc = f"{symbol}({lhs}, {rhs})" if symbol.startswith("torch") else f"{lhs} {symbol} {rhs}"
    return desc, run


def torch_maximum(a, b):
    return torch.maximum(a, b)


def torch_minimum(a, b):
    return torch.minimum(a, b)


def lower_pool2d(n: NodeView) -> Lowered:
    x = n.port("x")
    is_max = n.op == "max_pool2d"
    kernel = n.ints("kernel", 2, required=True)
    stride = n.ints("stride", 2, kernel)
    top, left, bottom, right = _padding4(n, [0, 0])
    ceil_mode = n.boolean("ceil_mode", False)
    include_pad = True if is_max else n.boolean("count_include_pad", True)
    symmetric = top == bottom and left == right

    if symmetric:
        padding = [top, left]
        if is_max:
            run = lambda env: F.max_pool2d(env[x], kernel, stride, padding, ceil_mode=ceil_mode)  # noqa: E731
        else:
            run = lambda env: F.avg_pool2d(env[x], kernel, stride, padding, ceil_mode=ceil_mode,  # noqa: E731
                                           count_include_pad=include_pad)
        call = "F.max_pool2d" if is_max else f"F.avg_pool2d(count_include_pad={include_pad}, ...)"
        return f"{call}(kernel={kernel}, stride={stride}, padding={padding}, ceil_mode={ceil_mode})", run

    # Asymmetric padding: pad explicitly (-inf never wins a max; zeros for the average), pool without
    # padding, then crop to kiln's output size (the padded tensor would allow one more ceil_mode window).
    pads = (left, right, top, bottom)

    def run(env):
        t = env[x]
        h, w = t.shape[2], t.shape[3]
        p = _pool_out(h, kernel[0], stride[0], top, bottom, ceil_mode)
        q = _pool_out(w, kernel[1], stride[1], left, right, ceil_mode)
        if is_max:
            out = F.max_pool2d(F.pad(t, pads, value=float("-inf")), kernel, stride, 0, ceil_mode=ceil_mode)
        elif include_pad:
            out = F.avg_pool2d(F.pad(t, pads), kernel, stride, 0, ceil_mode=ceil_mode, count_include_pad=True)
        else:  # divisor = real input elements in the window: window sums / pooled ones-mask sums
            sums = F.avg_pool2d(F.pad(t, pads), kernel, stride, 0, ceil_mode=ceil_mode, divisor_override=1)
            mask = F.pad(torch.ones((1, 1, h, w), dtype=t.dtype, device=t.device), pads)
            counts = F.avg_pool2d(mask, kernel, stride, 0, ceil_mode=ceil_mode, divisor_override=1)
            out = sums / counts
        return out[:, :, :p, :q]

    return (f"{'max' if is_max else 'avg'} pool via F.pad({list(pads)}) kernel={kernel} stride={stride} "
            f"ceil_mode={ceil_mode}", run)


def lower_global_pool(n: NodeView) -> Lowered:
    x = n.port("x")
    if n.op == "global_avg_pool":
        return "F.adaptive_avg_pool2d(1)", lambda env: F.adaptive_avg_pool2d(env[x], 1)
    return "amax over (H, W), keepdim", lambda env: torch.amax(env[x], dim=(2, 3), keepdim=True)


def lower_layout_convert(n: NodeView) -> Lowered:
    x = n.port("x")
    to = n.attr("to", required=True)
    if to not in LAYOUTS_4D:
        raise n.error(f"attribute 'to': expected one of {sorted(LAYOUTS_4D)}, got {to!r}")
    if to in CHANNELS_LAST_LAYOUTS:
        return "contiguous(channels_last)", lambda env: env[x].contiguous(memory_format=torch.channels_last)
    return "contiguous()", lambda env: env[x].contiguous()


def lower_reshape(n: NodeView) -> Lowered:
    x = n.port("x")
    shape = n.ints("shape", None, required=True)
    # Logical row-major order, as kiln: reshape copies when the memory order is not NCHW-contiguous.
    return f"reshape({shape})", lambda env: env[x].reshape(shape)


def lower_transpose(n: NodeView) -> Lowered:
    x = n.port("x")
    perm = n.ints("perm", None, required=True)
    return f"permute({perm})", lambda env: env[x].permute(*perm)


def lower_concat(n: NodeView) -> Lowered:
    xs = n.list_port("xs")
    axis = n.integer("axis", 1)
    return f"torch.cat({len(xs)} tensors, dim={axis})", lambda env: torch.cat([env[t] for t in xs], dim=axis)


def lower_slice(n: NodeView) -> Lowered:
    x = n.port("x")
    starts = n.ints("starts", None, required=True)
    ends = n.ints("ends", None, required=True)
    steps = n.ints("steps", None, [1] * len(starts))
    if not len(starts) == len(ends) == len(steps):
        raise n.error(f"expected starts, ends and steps of one length, got {starts}, {ends}, {steps}")
    if any(s < 1 for s in steps):
        raise n.error(f"attribute 'steps': expected positive steps, got {steps}")
    # Python slicing has kiln's rules (negative indices from the end, bounds clamp).
    index = tuple(slice(s, e, st) for s, e, st in zip(starts, ends, steps))
    return f"x[{', '.join(f'{s}:{e}:{st}' for s, e, st in zip(starts, ends, steps))}]", lambda env: env[x][index]


def lower_upsample2d(n: NodeView) -> Lowered:
    x = n.port("x")
    scale = n.floats("scale", 2)
    size = n.ints("size", 2)
    mode = n.attr("mode", "nearest")
    align = n.boolean("align_corners", False)
    if (scale is None) == (size is None):
        raise n.error("expected exactly one of the attributes 'scale', 'size'")
    if mode not in ("nearest", "bilinear"):
        raise n.error(f"attribute 'mode': expected 'nearest' or 'bilinear', got {mode!r}")
    size_t = tuple(size) if size else None
    scale_t = tuple(scale) if scale else None
    align_arg = align if mode == "bilinear" else None  # torch rejects align_corners for nearest

    # With scale_factor (and recompute_scale_factor left unset) torch sizes the output floor(in * scale)
    # and maps back with 1 / scale: kiln's rule.
    def run(env):
        return F.interpolate(env[x], size=size_t, scale_factor=scale_t, mode=mode, align_corners=align_arg)

    what = f"size={list(size)}" if size else f"scale_factor={scale}"
    return f"F.interpolate({what}, mode={mode}, align_corners={align_arg})", run


def lower_cast(n: NodeView) -> Lowered:
    x = n.port("x")
    to = n.attr("to", required=True)
    if to not in DTYPE_NAMES:
        raise n.error(f"attribute 'to': expected one of {sorted(DTYPE_NAMES)}, got {to!r}")
    return f"to({DTYPE_NAMES[to]})", lambda env: env[x].to(torch_dtype(to))


LOWERINGS: dict[str, Callable[[NodeView], Lowered]] = {
    "conv2d": lower_conv2d,
    "matmul": lower_matmul,
    "bias_add": lower_bias_add,
    "batch_norm": lower_batch_norm,
    "layer_norm": lower_layer_norm,
    "group_norm": lower_group_norm,
    "instance_norm": lower_instance_norm,
    "rms_norm": lower_rms_norm,
    "softmax": lower_softmax,
    **UNARY_OPS,
    **{op: lower_binary for op in BINARY_OPS},
    "max_pool2d": lower_pool2d,
    "avg_pool2d": lower_pool2d,
    "global_avg_pool": lower_global_pool,
    "global_max_pool": lower_global_pool,
    "layout_convert": lower_layout_convert,
    "reshape": lower_reshape,
    "transpose": lower_transpose,
    "concat": lower_concat,
    "slice": lower_slice,
    "upsample2d": lower_upsample2d,
    "cast": lower_cast,
}


def load_plan(path: str | Path) -> Plan:
    """Parse a kiln graph JSON and lower every node; raises GraphError naming the node and op on failure."""
    path = Path(path)
    try:
        graph = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise GraphError(f"{path}: cannot read the graph: {e}") from e
    if not isinstance(graph, dict) or graph.get("format") != "kiln.graph":
        raise GraphError(f"{path}: not a kiln graph (expected \"format\": \"kiln.graph\")")

    decls: list[TensorDecl] = []
    for i, t in enumerate(graph.get("tensors") or []):
        try:
            dtype = t.get("dtype", "f32")
            if dtype not in DTYPE_NAMES:
                raise GraphError(f"unknown dtype {dtype!r}")
            layout = t.get("layout")
            shape = [int(d) for d in t["shape"]]
            if layout in LAYOUTS_4D and len(shape) != 4:
                raise GraphError(f"layout {layout} on a {len(shape)}-D tensor")
            decls.append(TensorDecl(t["name"], shape, dtype, layout, t.get("kind", "input")))
        except (KeyError, TypeError, ValueError, GraphError) as e:
            raise GraphError(f"{path}: /tensors/{i}: {e}") from e

    known = {d.name for d in decls}
    plan = Plan(graph.get("name", "graph"), str(path), decls, [], [])
    decl_by_name = {d.name: d for d in decls}
    for i, raw in enumerate(graph.get("nodes") or []):
        node = NodeView(raw, i)
        lower = LOWERINGS.get(node.op)
        if lower is None:
            raise GraphError(f"{path}: node '{node.name}' (op '{node.op}'): op not supported by gpu_bench_peers.py "
                             f"(supported: {', '.join(sorted(LOWERINGS))})")
        try:
            desc, run = lower(node)
            node.check_all_used()
        except GraphError as e:
            raise GraphError(f"{path}: {e}") from e
        read: list[str] = []
        for port, value in node.inputs.items():
            names = value if isinstance(value, list) else [value]
            for name in names:
                if name not in known:
                    raise GraphError(f"{path}: node '{node.name}' ({node.op}) input '{port}': unknown tensor '{name}'"
                                     " (not declared and not produced by an earlier node)")
                read.append(name)
                if (node.op, port) in POSITIVE_PORTS and name in decl_by_name:
                    plan.positive.add(name)
                # Weights get randn / sqrt(fan_in) so that deep graphs (ResNet-50 in f16) stay finite.
                if name in decl_by_name and (node.op, port) in (("conv2d", "w"), ("matmul", "b")):
                    shape = decl_by_name[name].shape
                    if node.op == "conv2d":
                        plan.fan_in[name] = math.prod(shape[1:])
                    else:
                        plan.fan_in[name] = shape[-1] if node.attrs.get("transpose_b") else shape[-2]
        if node.output in known:
            raise GraphError(f"{path}: node '{node.name}' ({node.op}): output tensor '{node.output}' already exists")
        known.add(node.output)
        plan.steps.append(Step(node.name, node.op, read, node.output, desc, run))

    for i, out in enumerate(graph.get("outputs") or []):
        name, layout = (out, None) if isinstance(out, str) else (out.get("name"), out.get("layout"))
        if name not in known or name in decl_by_name:
            raise GraphError(f"{path}: /outputs/{i}: '{name}' is not a tensor produced by a node")
        plan.outputs.append((name, layout))
    if not plan.outputs:
        raise GraphError(f"{path}: the graph has no outputs")
    return plan


# ----------------------------------------------------------------------------------------------------
# Execution with torch
# ----------------------------------------------------------------------------------------------------


def make_function(plan: Plan) -> Callable[..., tuple]:
    """fn(*tensors in plan.decls order) -> tuple of graph outputs: a plain Python loop over closures,
    which torch.compile traces into one graph (the loop unrolls; names are constants)."""
    input_names = [d.name for d in plan.decls]
    steps = [(s.output, s.run) for s in plan.steps]
    outputs = list(plan.outputs)

    def finish(t, layout):
        # kiln writes every output densely; a view (slice, permute) would make the peer look free.
        if layout in CHANNELS_LAST_LAYOUTS:
            return t.contiguous(memory_format=torch.channels_last)
        if layout is not None:
            return t.contiguous()
        if t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)):
            return t
        return t.contiguous()

    def run_graph(*tensors):
        env = dict(zip(input_names, tensors))
        for output, run in steps:
            env[output] = run(env)
        return tuple(finish(env[name], layout) for name, layout in outputs)

    return run_graph


def channels_last_for(decl: TensorDecl, suite: str, policy: str) -> bool:
    if len(decl.shape) != 4:
        return False
    if policy == "never":
        return False
    if policy == "all" or decl.layout in CHANNELS_LAST_LAYOUTS:
        return True
    return policy == "conv" and suite == "conv"


def make_input_set(plan: Plan, suite: str, policy: str, device) -> list:
    tensors = []
    for d in plan.decls:
        if d.name in plan.positive:
            t = torch.rand(d.shape, device=device, dtype=torch.float32) + 0.5
        else:
            t = torch.randn(d.shape, device=device, dtype=torch.float32)
            if d.name in plan.fan_in:
                t = t * (1.0 / math.sqrt(max(1, plan.fan_in[d.name])))
        t = t.to(torch_dtype(d.dtype))
        if channels_last_for(d, suite, policy):
            t = t.contiguous(memory_format=torch.channels_last)
        tensors.append(t)
    return tensors


def quantile_stats(times_ms: list[float]) -> dict:
    ordered = sorted(times_ms)
    if len(ordered) >= 2:
        deciles = statistics.quantiles(ordered, n=10, method="inclusive")
        p10, p90 = deciles[0], deciles[8]
    else:
        p10 = p90 = ordered[0]
    return {"ms": statistics.median(ordered), "p10": p10, "p90": p90, "runs": len(ordered),
            "min": ordered[0], "max": ordered[-1]}


def time_cuda(fn: Callable, sets: list[list], warmup: int, min_runs: int, min_time_s: float, max_runs: int) -> dict:
    """Median / p10 / p90 of per-call GPU time between two CUDA events, rotating through the input sets so
    that no run finds its inputs in L2. Each call's span includes any GPU idle time waiting for the CPU to
    launch its kernels: that launch cost is part of what eager execution costs."""
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    times: list[float] = []
    start_wall = time.perf_counter()
    call = 0
    while True:
        chunk = []
        for _ in range(min(10, max_runs - len(times))):
            inputs = sets[call % len(sets)]
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn(*inputs)
            end.record()
            chunk.append((begin, end))
            call += 1
        torch.cuda.synchronize()  # per chunk: elapsed_time needs completed events; keeps the queue short
        times.extend(b.elapsed_time(e) for b, e in chunk)
        if len(times) >= max_runs:
            break
        if len(times) >= min_runs and time.perf_counter() - start_wall >= min_time_s:
            break
    return quantile_stats(times)


def measure_ceilings(device) -> dict:
    result: dict[str, Any] = {}
    try:
        # ~2 GiB device-to-device copy; bandwidth counts the bytes read plus the bytes written.
        src = torch.ones(2**30, dtype=torch.float16, device=device)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        stats = time_cuda(lambda: dst.copy_(src), [[]], 0, 20, 0.0, 20)
        result["copy_bytes"] = 2 * src.numel() * src.element_size()
        result["copy_ms"] = stats["ms"]
        result["copy_gbps"] = result["copy_bytes"] / (stats["ms"] * 1e-3) / 1e9
        del src, dst
    except Exception as e:  # noqa: BLE001 - a ceiling that fails is reported, the run goes on
        result["copy_error"] = f"{type(e).__name__}: {e}"
    try:
        size = 8192
        a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
        b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
        stats = time_cuda(lambda: torch.matmul(a, b), [[]], 5, 10, 0.0, 10)
        result["matmul_shape"] = [size, size, size]
        result["matmul_ms"] = stats["ms"]
        result["matmul_tflops"] = 2 * size**3 / (stats["ms"] * 1e-3) / 1e12
        del a, b
    except Exception as e:  # noqa: BLE001
        result["matmul_error"] = f"{type(e).__name__}: {e}"
    torch.cuda.empty_cache()
    return result


def max_relative_diff(reference: tuple, other: tuple) -> float:
    worst = 0.0
    for r, o in zip(reference, other):
        r32, o32 = r.float(), o.float()
        scale = max(r32.abs().max().item(), 1e-6)
        worst = max(worst, (r32 - o32).abs().max().item() / scale)
    return worst


def time_graphs(fn: Callable, sets: list[list], reference: tuple | None, args) -> dict:
    """The eager function captured into one CUDA graph per input set, timed by replay with time_cuda's loop
    and rotation: GPU time of the same kernels without the Python / launch overhead of an eager call."""
    # Warm up on a side stream first (PyTorch's CUDA-graphs recipe): cudnn.benchmark autotuning, lazy
    # initialisation and the allocator's first allocations must all happen before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(max(3, args.warmup)):
            fn(*sets[i % len(sets)])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graphs: list = []
    outputs: list = []  # each graph's outputs, kept referenced so that its memory stays its own
    try:
        begin = time.perf_counter()
        # At most --max-graphs captures (each costs a synchronize and a private memory pool); with the
        # sets' sizes chosen for 3x the L2, 16 of them still exceed it for every case of gpu_bench.
        for inputs in sets[: args.max_graphs]:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fn(*inputs)
            graphs.append(graph)
            outputs.append(out)
        torch.cuda.synchronize()
        entry: dict[str, Any] = {"status": "ok", "graphs": len(graphs), "capture_s": time.perf_counter() - begin}
        if reference is not None:
            graphs[0].replay()
            torch.cuda.synchronize()
            entry["max_rel_diff_vs_eager"] = max_relative_diff(reference, outputs[0])
        # time_cuda calls fn(*sets[i]): here each "input set" is one graph and the function replays it.
        entry.update(time_cuda(lambda graph: graph.replay(), [[graph] for graph in graphs], args.warmup,
                               args.min_runs, args.min_time_ms / 1e3, args.max_runs))
        return entry
    finally:
        del outputs[:], graphs[:]  # frees the graphs and their private memory pools (also on an error)


def error_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return " ".join(text.split())[:2000]  # one line: torch errors are multi-line


def bench_case(case: dict, plan: Plan, args, device, compile_state: dict) -> dict:
    """Times the eager, eager_graph and compile peers of one case; every failure is recorded, never raised."""
    out: dict[str, Any] = {}
    sets: list[list] = []
    try:
        suite = case.get("suite", "")
        first = make_input_set(plan, suite, args.channels_last, device)
        set_bytes = sum(t.numel() * t.element_size() for t in first)
        # Enough distinct input sets that together they are over 3x L2, so a run never starts warm.
        count = max(1, min(args.max_sets, math.ceil(3 * args.l2_mb * 1e6 / max(1, set_bytes))))
        sets = [first] + [make_input_set(plan, suite, args.channels_last, device) for _ in range(count - 1)]
        out["input_sets"] = count
        out["set_bytes"] = set_bytes
        out["channels_last_inputs"] = [d.name for d in plan.decls if channels_last_for(d, suite, args.channels_last)]
    except Exception as e:  # noqa: BLE001
        for peer in PEERS:
            out[peer] = {"status": "error", "error": "making inputs: " + error_text(e)}
        return out

    fn = make_function(plan)
    reference = None
    try:
        reference = fn(*sets[0])
        out["eager"] = {"status": "ok", **time_cuda(fn, sets, args.warmup, args.min_runs, args.min_time_ms / 1e3,
                                                    args.max_runs)}
    except Exception as e:  # noqa: BLE001
        out["eager"] = {"status": "error", "error": error_text(e)}
        if args.verbose:
            traceback.print_exc()

    if args.no_graph:
        out["eager_graph"] = {"status": "skipped (--no-graph)"}
    else:
        try:
            out["eager_graph"] = time_graphs(fn, sets, reference, args)
        except Exception as e:  # noqa: BLE001 - e.g. an op that synchronizes cannot be captured
            out["eager_graph"] = {"status": "error", "error": error_text(e)}
            if args.verbose:
                traceback.print_exc()
            try:
                torch.cuda.synchronize()  # let a failed capture's leftover work finish before going on
            except Exception:  # noqa: BLE001
                pass

    if args.no_compile:
        out["compile"] = {"status": "skipped (--no-compile)"}
    elif compile_state["spent_s"] >= args.compile_budget_s:
        out["compile"] = {"status": "skipped (budget)"}
    else:
        try:
            # A fresh Dynamo state per case: every case's function shares one code object, and old guards
            # would otherwise count against the recompile limit (raised as well, see configure_torch).
            torch._dynamo.reset()
            compiled = torch.compile(fn)
            begin = time.perf_counter()
            try:
                result = compiled(*sets[0])
                torch.cuda.synchronize()
            finally:
                compile_s = time.perf_counter() - begin
                compile_state["spent_s"] += compile_s
            entry: dict[str, Any] = {"status": "ok", "compile_s": compile_s}
            if reference is not None:
                entry["max_rel_diff_vs_eager"] = max_relative_diff(reference, result)
            entry.update(time_cuda(compiled, sets, args.warmup, args.min_runs, args.min_time_ms / 1e3, args.max_runs))
            out["compile"] = entry
        except Exception as e:  # noqa: BLE001
            out["compile"] = {"status": "error", "error": error_text(e)}
            if args.verbose:
                traceback.print_exc()
    del sets, reference
    torch.cuda.empty_cache()
    return out


def configure_torch(args) -> None:
    torch.backends.cudnn.benchmark = True
    if args.tf32 != "default":
        on = args.tf32 == "on"
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on
    dynamo_config = torch._dynamo.config
    # Renamed over releases (cache_size_limit -> recompile_limit); set whichever exists.
    for name, value in (("cache_size_limit", 4096), ("recompile_limit", 4096),
                        ("accumulated_cache_size_limit", 65536), ("accumulated_recompile_limit", 65536)):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, value)


def torch_environment() -> dict:
    env: dict[str, Any] = {"torch_version": torch.__version__, "python": platform.python_version()}
    env["cuda_version"] = getattr(torch.version, "cuda", None)
    try:
        env["cudnn_version"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        env["cudnn_version"] = None
    if torch.cuda.is_available():
        env["gpu_name"] = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        env["capability"] = f"sm_{major}{minor}"
    try:
        import triton  # noqa: PLC0415 - optional, for the record only

        env["triton_version"] = triton.__version__
    except Exception:  # noqa: BLE001
        env["triton_version"] = None
    env["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    env["matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    env["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
    return env


# ----------------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------------


def derived_numbers(case: dict, ceilings: dict) -> dict:
    kiln_ms = case.get("kiln_ms")
    d: dict[str, Any] = {"kiln_tflops": None, "kiln_gbps": None, "pct_copy": None, "pct_matmul": None,
                         **{f"{peer}_over_kiln": None for peer in PEERS}}
    peers = case.get("peers", {})
    if isinstance(kiln_ms, (int, float)) and kiln_ms > 0:
        seconds = kiln_ms * 1e-3
        if case.get("flops"):
            d["kiln_tflops"] = case["flops"] / seconds / 1e12
            if ceilings.get("matmul_tflops"):
                d["pct_matmul"] = 100 * d["kiln_tflops"] / ceilings["matmul_tflops"]
        if case.get("min_bytes"):
            d["kiln_gbps"] = case["min_bytes"] / seconds / 1e9
            if ceilings.get("copy_gbps"):
                d["pct_copy"] = 100 * d["kiln_gbps"] / ceilings["copy_gbps"]
        for peer in PEERS:
            peer_ms = peers.get(peer, {}).get("ms")
            if peer_ms:
                d[f"{peer}_over_kiln"] = peer_ms / kiln_ms
    return d


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.4f}" if v < 1 else f"{v:.3f}" if v < 100 else f"{v:.1f}"


def fmt_num(v: float | None, spec: str, suffix: str = "") -> str:
    return "—" if v is None else f"{v:{spec}}{suffix}"


def fmt_rate(v: float | None) -> str:
    """Three significant digits or so, for TFLOP/s, GB/s and percentages of very different sizes."""
    if v is None:
        return "—"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def peer_cell(case: dict, peer: str) -> str:
    entry = case.get("peers", {}).get(peer, {})
    if entry.get("status") == "ok":
        return fmt_ms(entry.get("ms"))
    status = entry.get("status", "—")
    return "skip" if status.startswith("skipped") else "err" if status == "error" else status


CASE_W = 46
COLUMNS = [("kiln ms", 9), ("eager ms", 9), ("graph ms", 9), ("compile ms", 10), ("eager/kiln", 10),
           ("graph/kiln", 10), ("compl/kiln", 10), ("TFLOP/s", 8), ("GB/s", 8), ("%copy", 6), ("%mm", 6)]


def table_line(case_text: str, cells: list[str]) -> str:
    parts = [fit(case_text, CASE_W).ljust(CASE_W)] + [c.rjust(w) for c, (_, w) in zip(cells, COLUMNS)]
    return fit(" ".join(parts), LINE_WIDTH)


def print_report(report: dict) -> None:
    env, ceilings = report["environment"], report["ceilings"]
    print(fit(f"GPU: {env.get('gpu_name', '?')} ({env.get('capability', '?')}) | torch {env.get('torch_version')} | "
              f"CUDA {env.get('cuda_version')} | cuDNN {env.get('cudnn_version')} | "
              f"triton {env.get('triton_version')} | "
              f"tf32 matmul/cudnn {env.get('matmul_allow_tf32')}/{env.get('cudnn_allow_tf32')}", LINE_WIDTH))
    kiln_copy = report.get("kiln_copy_gbps")
    copy_text = fmt_num(ceilings.get("copy_gbps"), ".0f", " GB/s") if "copy_error" not in ceilings else \
        "error: " + ceilings["copy_error"]
    mm_text = fmt_num(ceilings.get("matmul_tflops"), ".0f", " TFLOP/s") if "matmul_error" not in ceilings else \
        "error: " + ceilings["matmul_error"]
    print(fit(f"ceilings (this run): copy {copy_text} (gpu_bench copy: {fmt_num(kiln_copy, '.0f', ' GB/s')}); "
              f"bf16 matmul 8192^3 {mm_text}", LINE_WIDTH))
    print(fit("ratios are peer time / kiln time (> 1: kiln faster); TFLOP/s, GB/s and % of ceilings are kiln's "
              "(GB/s = min_bytes / kiln time)", LINE_WIDTH))
    print(fit("eager and compile include Python launch overhead; graph = eager captured in CUDA graphs "
              "(GPU time of cuDNN/PyTorch kernels)", LINE_WIDTH))

    suites: dict[str, list[dict]] = {}
    for case in report["cases"]:
        suites.setdefault(case.get("suite") or "?", []).append(case)
    notes: list[str] = []
    for suite, cases in suites.items():
        print()
        print(f"== suite {suite}: {len(cases)} case(s)")
        print(table_line("case", [name for name, _ in COLUMNS]))
        print("-" * min(LINE_WIDTH, CASE_W + sum(w + 1 for _, w in COLUMNS)))
        for case in cases:
            d = case["derived"]
            check = str(case.get("check", ""))
            mark = "" if check in ("ok", "skipped", "") else " !"
            print(table_line(case.get("name", "?") + mark, [
                fmt_ms(case.get("kiln_ms")), *(peer_cell(case, peer) for peer in PEERS),
                *(fmt_num(d.get(f"{peer}_over_kiln"), ".2f", "x") for peer in PEERS),
                fmt_rate(d["kiln_tflops"]), fmt_rate(d["kiln_gbps"]), fmt_rate(d["pct_copy"]),
                fmt_rate(d["pct_matmul"])]))
            if mark:
                notes.append(f"{case.get('name')}: kiln check {check}")
            if case.get("graph_error"):
                notes.append(f"{case.get('name')}: graph: {case['graph_error']}")
            for peer in PEERS:
                entry = case.get("peers", {}).get(peer, {})
                if entry.get("status") == "error":
                    notes.append(f"{case.get('name')}: {peer}: {entry.get('error')}")
        summary = report["summary"][suite]
        counts = "/".join(str(summary.get(f"{peer}_n", 0)) for peer in PEERS)
        print(table_line(f"geomean (n eager/graph/compile {counts})", [
            "", "", "", "", *(fmt_num(summary.get(f"{peer}_over_kiln"), ".2f", "x") for peer in PEERS),
            "", "", "", ""]).rstrip())
    skipped = [c.get("name") for c in report["cases"]
               if c.get("peers", {}).get("compile", {}).get("status") == "skipped (budget)"]
    if skipped:
        notes.append(f"torch.compile skipped (budget {report['settings']['compile_budget_s']:.0f} s) for "
                     f"{len(skipped)} case(s): {', '.join(skipped)}")
    if notes:
        print()
        print("notes:")
        for note in notes:
            print(fit("  " + note, LINE_WIDTH))


def summarize(cases: list[dict]) -> dict:
    summary: dict[str, dict] = {}
    for case in cases:
        ratios = summary.setdefault(case.get("suite") or "?", {peer: [] for peer in PEERS})
        for peer in PEERS:
            ratio = case["derived"].get(f"{peer}_over_kiln")
            if ratio:
                ratios[peer].append(ratio)
    result: dict[str, dict] = {}
    for suite, ratios in summary.items():
        result[suite] = {}
        for peer in PEERS:
            result[suite][f"{peer}_over_kiln"] = geomean(ratios[peer])
            result[suite][f"{peer}_n"] = len(ratios[peer])
    return result


CSV_FIELDS = ["suite", "name", "dtype", "batch", "kernels", "check", "kiln_ms", "eager_ms", "eager_graph_ms",
              "compile_ms", "eager_over_kiln", "eager_graph_over_kiln", "compile_over_kiln", "kiln_tflops",
              "kiln_gbps", "pct_copy", "pct_matmul", "eager_status", "eager_graph_status", "compile_status",
              "compile_s"]


def write_csv(path: str, cases: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for case in cases:
            peers = case.get("peers", {})
            row = {k: case.get(k) for k in ("suite", "name", "dtype", "batch", "kernels", "check", "kiln_ms")}
            row.update({f"{peer}_over_kiln": case["derived"].get(f"{peer}_over_kiln") for peer in PEERS})
            row.update({k: case["derived"][k] for k in ("kiln_tflops", "kiln_gbps", "pct_copy", "pct_matmul")})
            for peer in PEERS:
                row[f"{peer}_ms"] = peers.get(peer, {}).get("ms")
                row[f"{peer}_status"] = peers.get(peer, {}).get("status")
            row["compile_s"] = peers.get("compile", {}).get("compile_s")
            writer.writerow({k: ("" if v is None else f"{v:.6g}" if isinstance(v, float) else v)
                             for k, v in row.items()})


# ----------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------


def resolve_graph_path(graph: str, results_path: Path) -> Path:
    p = Path(graph)
    if p.is_absolute() or p.exists():
        return p
    beside = results_path.parent / p  # a relative path in the results file: relative to that file
    return beside if beside.exists() else p


def load_results(path: str) -> dict:
    try:
        results = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"gpu_bench_peers: cannot read {path}: {e}")
    if not isinstance(results, dict) or not isinstance(results.get("cases"), list):
        sys.exit(f"gpu_bench_peers: {path}: expected an object with a 'cases' list")
    return results


def dry_run(args) -> int:
    targets: list[tuple[str, str, Path]] = []  # (label, suite, graph path)
    if args.kiln:
        results = load_results(args.kiln)
        for case in results["cases"]:
            targets.append((case.get("name", "?"), case.get("suite", "?"),
                            resolve_graph_path(str(case.get("graph", "")), Path(args.kiln))))
    for g in args.graphs or []:
        targets.append((Path(g).name, "", Path(g)))
    if not targets:
        sys.exit("gpu_bench_peers: --dry-run needs --kiln RESULTS.json or --graphs FILE...")
    failures = 0
    for label, suite, path in targets:
        header = f"{label}" + (f" [suite {suite}]" if suite else "") + f": {path}"
        try:
            plan = load_plan(path)
        except GraphError as e:
            failures += 1
            print(fit(f"FAIL {header}", LINE_WIDTH))
            print(fit(f"  error: {e}", LINE_WIDTH))
            continue
        n_inputs = sum(d.kind != "parameter" for d in plan.decls)
        print(fit(f"OK   {header}", LINE_WIDTH))
        print(fit(f"  graph '{plan.name}': {n_inputs} input(s), {len(plan.decls) - n_inputs} parameter(s), "
                  f"{len(plan.steps)} node(s), outputs {[name for name, _ in plan.outputs]}", LINE_WIDTH))
        cl = [d.name for d in plan.decls if channels_last_for(d, suite, args.channels_last)]
        if cl:
            print(fit(f"  channels_last: {len(cl)} tensor(s): {', '.join(cl)}", LINE_WIDTH))
        if plan.positive:
            print(fit(f"  positive (rand + 0.5): {len(plan.positive)} tensor(s): {', '.join(sorted(plan.positive))}",
                      LINE_WIDTH))
        if args.verbose or len(plan.steps) <= args.dry_run_max_steps:
            for i, step in enumerate(plan.steps):
                print(fit(f"  {i:3d} {step.op:<15} {step.node}: {step.desc}", LINE_WIDTH))
        else:
            counts: dict[str, int] = {}
            for step in plan.steps:
                counts[step.op] = counts.get(step.op, 0) + 1
            print(fit("  ops: " + ", ".join(f"{op} x{n}" for op, n in counts.items())
                      + f" (--verbose lists all {len(plan.steps)})", LINE_WIDTH))
    print(f"dry run: {len(targets) - failures} of {len(targets)} graph(s) interpret" +
          (f", {failures} FAILED" if failures else ""))
    return 1 if failures else 0


def full_run(args) -> int:
    results = load_results(args.kiln)
    import_torch()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench_peers: torch sees no CUDA device")
    configure_torch(args)
    device = torch.device("cuda", 0)
    torch.manual_seed(args.seed)
    environment = torch_environment()
    started = time.time()

    ceilings = {} if args.no_ceilings else measure_ceilings(device)
    print(f"ceilings: {json.dumps(ceilings)}", file=sys.stderr, flush=True)
    compile_state = {"spent_s": 0.0}
    cases_out: list[dict] = []
    with torch.no_grad():
        for index, case in enumerate(results["cases"]):
            record = dict(case)
            record["peers"] = {}
            print(fit(f"[{index + 1}/{len(results['cases'])}] {case.get('name', '?')}", LINE_WIDTH),
                  file=sys.stderr, flush=True)
            try:
                plan = load_plan(resolve_graph_path(str(case.get("graph", "")), Path(args.kiln)))
            except GraphError as e:
                record["graph_error"] = str(e)
                record["peers"] = {p: {"status": "error", "error": "graph: " + str(e)} for p in PEERS}
            else:
                timed = bench_case(case, plan, args, device, compile_state)
                record["peers"] = {peer: timed.pop(peer) for peer in PEERS}
                record.update(timed)
            record["derived"] = derived_numbers(record, ceilings)
            cases_out.append(record)

    report = {
        "tool": "tools/bench/gpu_bench_peers.py",
        "kiln_results": os.path.abspath(args.kiln),
        "kiln_device": results.get("device"),
        "kiln_arch": results.get("arch"),
        "kiln_copy_gbps": results.get("copy_gbps"),
        "environment": environment,
        "ceilings": ceilings,
        "settings": {"warmup": args.warmup, "min_runs": args.min_runs, "min_time_ms": args.min_time_ms,
                     "max_runs": args.max_runs, "l2_mb": args.l2_mb, "max_sets": args.max_sets,
                     "channels_last": args.channels_last, "graph": not args.no_graph,
                     "compile": not args.no_compile,
                     "compile_budget_s": args.compile_budget_s, "compile_spent_s": compile_state["spent_s"],
                     "tf32": args.tf32, "seed": args.seed,
                     "timing": "CUDA events per call (eager_graph: per graph replay), median"},
        "wall_s": time.time() - started,
        "cases": cases_out,
        "summary": summarize(cases_out),
    }
    print_report(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    if args.csv:
        write_csv(args.csv, cases_out)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", metavar="RESULTS.json", help="results file written by gpu_bench")
    p.add_argument("--graphs", nargs="+", metavar="FILE", help="(--dry-run) kiln graph files to interpret")
    p.add_argument("--dry-run", action="store_true", help="no torch: parse the graphs, print the ops it would run")
    p.add_argument("--dry-run-max-steps", type=int, default=40,
                   help="(--dry-run) list ops one per line up to this many nodes, else count them")
    p.add_argument("--out", metavar="PATH.json", help="write everything as JSON")
    p.add_argument("--csv", metavar="PATH.csv", help="write a compact CSV")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    p.add_argument("--no-graph", action="store_true", help="skip the eager_graph peer (eager in CUDA graphs)")
    p.add_argument("--compile-budget-s", type=float, default=150.0,
                   help="total torch.compile time; later cases are 'skipped (budget)' (default 150)")
    p.add_argument("--no-ceilings", action="store_true", help="skip the copy and matmul ceilings")
    p.add_argument("--channels-last", choices=("declared", "conv", "all", "never"), default="conv",
                   help="4-D inputs in channels_last: as declared (NHWC/KRSC); 'conv' (default) also every 4-D "
                        "input of the conv suite; 'all' every 4-D input")
    p.add_argument("--tf32", choices=("default", "on", "off"), default="default",
                   help="f32 matmul/conv TF32 (default: PyTorch's defaults, recorded in the JSON)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up calls before timing (>= 3)")
    p.add_argument("--min-runs", type=int, default=50)
    p.add_argument("--min-time-ms", type=float, default=200.0)
    p.add_argument("--max-runs", type=int, default=1000)
    p.add_argument("--l2-mb", type=float, default=60.0, help="L2 size; input sets total over 3x this")
    p.add_argument("--max-sets", type=int, default=64)
    p.add_argument("--max-graphs", type=int, default=16, help="eager_graph: CUDA graphs captured per case (rotated like input sets)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="tracebacks for errors; list every op in --dry-run")
    args = p.parse_args(argv)
    args.warmup = max(3, args.warmup)
    args.max_runs = max(1, args.max_runs)
    args.min_runs = min(max(1, args.min_runs), args.max_runs)
    args.max_sets = max(1, args.max_sets)
    if not args.dry_run and not args.kiln:
        p.error("--kiln RESULTS.json is required (or --dry-run with --graphs)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return dry_run(args) if args.dry_run else full_run(args)


if __name__ == "__main__":
    sys.exit(main())
