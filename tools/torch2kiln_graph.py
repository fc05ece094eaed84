"""The graph side of tools/torch2kiln.py: a kiln graph being built (tensors, nodes, weights), and the
conversion of a traced torch.fx graph into it, node by node (the mappings are in torch2kiln_ops.py)."""
import dis
import json
import sys

import torch
from torch import fx


class Unsupported(Exception):
    """A node kiln cannot run (its op, or the configuration of a supported op); the message says why."""


class ExportError(Exception):
    """Every unsupported node of one export, one line each."""

    def __init__(self, problems):
        super().__init__("\n".join(problems))
        self.problems = problems


class KT(str):
    """A kiln tensor name: a str, so handlers can tell tensors from Python constants (which may be str)."""


class Builder:
    """A kiln graph under construction: declared tensors, nodes in execution order, parameter values."""

    def __init__(self, dtype, reserved=()):
        self.dtype = dtype
        self.tensors, self.nodes = [], []
        self.weights = {}  # kiln parameter name -> float32 numpy array
        self.param_names = {}  # qualified torch name -> kiln parameter name
        self.tensor_names, self.node_names = set(reserved), set()
        self.shapes = {}  # kiln tensor name -> shape (from the fx shape propagation)

    @staticmethod
    def _unique(base, used):
        name, i = base, 1
        while name in used:
            name, i = f"{base}_{i}", i + 1
        used.add(name)
        return name

    def input(self, name, shape):
        self.tensor_names.discard(name)
        name = self._unique(name, self.tensor_names)
        self.tensors.append({"name": name, "shape": list(shape), "dtype": self.dtype, "kind": "input"})
        self.shapes[name] = list(shape)
        return KT(name)

    def param(self, qualname, value):
        """The kiln parameter holding `value` (a torch tensor); a tensor used twice is declared once."""
        if qualname in self.param_names:
            return KT(self.param_names[qualname])
        value = value.detach().to(torch.float32).cpu()
        if value.dim() == 0:
            value = value.reshape(1)
        name = self._unique(qualname, self.tensor_names)
        self.param_names[qualname] = name
        self.tensors.append({"name": name, "shape": list(value.shape), "dtype": self.dtype, "kind": "parameter"})
        self.weights[name] = value.numpy().copy()
        self.shapes[name] = list(value.shape)
        return KT(name)

    def op(self, op, name, inputs, attrs=None, out=None):
        """Appends a node; returns the name of the tensor it writes (`out`, or the node's name, made unique)."""
        node_name = self._unique(name, self.node_names)
        y = self._unique(out or node_name, self.tensor_names)
        node = {"op": op, "name": node_name, "inputs": inputs, "outputs": {"y": y}}
        if attrs:
            node["attrs"] = attrs
        self.nodes.append(node)
        return KT(y)

    def rename(self, old, new):
        """Renames the intermediate tensor `old` to `new` everywhere (the graph output gets its public name)."""
        for node in self.nodes:
            for port, v in node["inputs"].items():
                node["inputs"][port] = [new if t == old else t for t in v] if isinstance(v, list) else (
                    new if v == old else v)
            if node["outputs"]["y"] == old:
                node["outputs"]["y"] = new
        self.shapes[new] = self.shapes.get(old)

    def graph(self, name, outputs):
        return {"format": "kiln.graph", "version": 1, "name": name, "tensors": self.tensors, "nodes": self.nodes,
                "outputs": outputs}


def dumps(graph):
    """The graph as JSON text, one tensor or node per line."""
    def block(key):
        items = ",\n".join("    " + json.dumps(x) for x in graph[key])
        return f'  "{key}": [\n{items}\n  ]'
    head = f'  "format": "kiln.graph",\n  "version": 1,\n  "name": {json.dumps(graph["name"])}'
    tail = f'  "outputs": {json.dumps(graph["outputs"])}'
    return "{\n" + ",\n".join([head, block("tensors"), block("nodes"), tail]) + "\n}\n"


def type_name(t):
    """torch.nn.ConvTranspose2d for torch.nn's own modules, else the module-qualified class name."""
    if getattr(torch.nn, t.__name__, None) is t:
        return f"torch.nn.{t.__name__}"
    return f"{t.__module__}.{t.__qualname__}"


def target_name(target):
    try:
        return fx.node._get_qualified_name(target)
    except Exception:  # noqa: BLE001 - anything without a qualified name
        return getattr(target, "__name__", str(target))


class Ctx:
    """What a handler sees of the node it converts: its names, shapes, and ops/parameters to add."""

    def __init__(self, b, node):
        self.b, self.node = b, node
        self.name = node.target if node.op == "call_module" else node.name
        meta = node.meta.get("tensor_meta")
        self.out_shape = list(meta.shape) if hasattr(meta, "shape") else None

    def shape(self, t):
        return self.b.shapes[t]

    def op(self, op, inputs, attrs=None, suffix=None):
        if suffix is None:
            return self.b.op(op, self.name, inputs, attrs, out=self.node.name)
        return self.b.op(op, f"{self.name}.{suffix}", inputs, attrs, out=f"{self.node.name}_{suffix}")

    def param(self, module, attr, qualname=None):
        return self.b.param(f"{self.name}.{qualname or attr}", getattr(module, attr))

    def const(self, qualname, value):
        return self.b.param(f"{self.name}.{qualname}", value)


class Converter:
    """Walks the fx graph in order; each node becomes zero or more kiln nodes (see torch2kiln_ops)."""

    def __init__(self, gm, builder, ops, input_name, output_name):
        self.gm, self.b, self.ops = gm, builder, ops
        self.modules = dict(gm.named_modules())
        self.input_name, self.output_name = input_name, output_name
        self.env, self.failed, self.stood_in, self.problems = {}, set(), set(), []
        self.outputs = []

    def run(self):
        for node in self.gm.graph.nodes:
            if any(a in self.failed for a in node.all_input_nodes):
                self.failed.add(node)  # reported where it started
                continue
            try:
                self.env[node] = self.convert(node)
            except Unsupported as e:
                if not any(a in self.stood_in for a in node.all_input_nodes):  # else maybe caused by one
                    self.problems.append(self.describe(node, str(e)))
                self.stand_in(node)
        if self.problems:
            raise ExportError(self.problems)

    def stand_in(self, node):
        """After an unsupported node: a placeholder tensor of its shape, so that the nodes after it are still
        checked (the graph is not written); without a shape, what depends on it is skipped."""
        meta = node.meta.get("tensor_meta")
        if not hasattr(meta, "shape"):
            self.failed.add(node)
            return
        self.stood_in.add(node)
        name = KT(f"<unsupported {node.name}>")
        self.b.shapes[name] = list(meta.shape)
        self.env[node] = name

    def convert(self, node):
        if node.op == "placeholder":
            if self.b.shapes.get(self.input_name):
                raise Unsupported("a second input: the exporter handles models with one input tensor")
            return self.b.input(self.input_name, node.meta["tensor_meta"].shape)
        if node.op == "get_attr":
            return self.b.param(node.target, fetch_attr(self.gm, node.target))
        if node.op == "output":
            return self.finish(fx.node.map_arg(node.args[0], lambda n: self.env[n]))
        meta = node.meta.get("tensor_meta")
        if hasattr(meta, "dtype") and not meta.dtype.is_floating_point:
            raise Unsupported(f"makes a {meta.dtype} tensor: kiln computes on f32, f16 and bf16 only")
        args = fx.node.map_arg(node.args, lambda n: self.env[n])
        kwargs = fx.node.map_arg(node.kwargs, lambda n: self.env[n])
        ctx = Ctx(self.b, node)
        if node.op == "call_module":
            return self.call_module(ctx, self.modules[node.target], args, kwargs)
        result = self.ops.call(ctx, node.op, node.target, args, kwargs)
        if isinstance(result, KT) and ctx.out_shape is not None:
            self.b.shapes.setdefault(result, ctx.out_shape)
        return result

    def call_module(self, ctx, module, args, kwargs):
        handler = self.ops.module_handler(type(module))
        if handler is None:
            raise Unsupported("")
        if getattr(handler, "takes_args", False):  # e.g. MultiheadAttention(q, k, v, need_weights=False)
            return handler(ctx, module, args, kwargs)
        if kwargs or len(args) != 1 or not isinstance(args[0], KT):
            raise Unsupported("called with other than one tensor argument")
        result = handler(ctx, module, args[0])
        self.b.shapes.setdefault(result, ctx.out_shape)
        return result

    def finish(self, value):
        if not isinstance(value, KT):
            raise Unsupported("the model returns other than one tensor (a tuple, a dict or a constant)")
        if any(n["outputs"]["y"] == value for n in self.b.nodes):
            self.b.rename(value, self.output_name)
        else:  # the output is the input or a parameter
            self.b.op("identity", self.output_name, {"x": value}, out=self.output_name)
        self.outputs.append(self.output_name)
        return self.output_name

    def describe(self, node, reason):
        path = node.meta.get("module_path") or "<root>"
        if node.op == "call_module":
            what = f"module '{node.target}' ({type_name(type(self.modules[node.target]))})"
        elif node.op == "call_function":
            what = f"node '{node.name}' in module '{path}': function {target_name(node.target)}"
        elif node.op == "call_method":
            what = f"node '{node.name}' in module '{path}': method Tensor.{node.target}"
        else:
            what = f"node '{node.name}' ({node.op})"
        return f"{what}: {reason or 'not supported by kiln'}"


def fetch_attr(gm, target):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise Unsupported(f"attribute '{target}' is a {getattr(value, 'dtype', type(value).__name__)}, not a "
                          "floating-point tensor")
    return value


class PathTracer(fx.Tracer):
    """symbolic_trace, plus node.meta['module_path']: the module each node was traced in (for errors)."""

    def __init__(self):
        super().__init__()
        self.stack = []

    def call_module(self, m, forward, args, kwargs):
        self.stack.append(self.path_of_module(m))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self.stack.pop()

    def trace(self, root, concrete_args=None):
        saved = fx.Proxy.__iter__  # its f_lasti // 2 lookup can raise IndexError on 3.11: all through iter()
        fx.Proxy.__iter__ = lambda proxy: proxy.tracer.iter(proxy)
        try:
            return super().trace(root, concrete_args)
        finally:
            fx.Proxy.__iter__ = saved

    def iter(self, obj):
        """Tuple unpacking of a proxy (`n, c, h, w = x.size()`). torch 1.13's Proxy.__iter__ finds the
        UNPACK_SEQUENCE at index f_lasti // 2, which Python 3.11's inline caches break; here by offset."""
        frame = sys._getframe(2)  # iter <- the Proxy.__iter__ set in trace() <- the traced code
        inst = next((i for i in dis.get_instructions(frame.f_code) if i.offset == frame.f_lasti), None)
        if inst is not None and inst.opname == "UNPACK_SEQUENCE":
            return (obj[i] for i in range(inst.argval))
        return super().iter(obj)

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["module_path"] = self.stack[-1] if self.stack else ""
        return node
