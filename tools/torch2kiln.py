#!/usr/bin/python3
"""Exports a PyTorch model to a kiln graph (docs/graph-format.md) through torch.fx.

    tools/torch2kiln.py MODEL --out DIR [--resolution H[,W]] [--batch N] [--dtype f32|f16|bf16]
                        [--weights] [--seed S]

MODEL is a torchvision classification model (resnet18, mobilenet_v3_small, ...) or FILE.py:FUNCTION, a
function returning an nn.Module. Writes DIR/graph.json: one input `image` [N, 3, H, W], one output `logits`.
With --weights also DIR/inputs/<tensor>.npy for the input and every parameter (random weights from the
seed, batch-norm statistics and affine randomized too) and DIR/expected/logits.npy: the model's output
computed by PyTorch in float64 from the same values rounded to the dtype, to compare with
`kiln run DIR/graph.json --device ref --inputs DIR/inputs`.

Exit status: 0 ok, 1 a failure (no torch, an unknown model, a write error), 2 the model has nodes kiln
cannot run (each listed on stderr with its module path and op) or cannot be traced by torch.fx.

As a module (tools/ on sys.path): `graph, weights = torch2kiln.export(module, (1, 3, 64, 64))`.
"""
import argparse
import contextlib
import importlib.util
import os
import sys

try:
    import numpy as np
    import torch
    import torchvision
    from torch import fx, nn
    from torch.fx.passes.shape_prop import ShapeProp
except ImportError as e:
    if __name__ != "__main__":
        raise
    sys.exit(f"error: torch2kiln needs PyTorch, torchvision and NumPy for {sys.executable} ({e}); install them "
             "with `tools/setup.sh --torch` (Debian: python3-torch python3-torchvision python3-numpy)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch2kiln_ops  # noqa: E402
from torch2kiln_graph import Builder, Converter, ExportError, PathTracer, Unsupported, dumps  # noqa: E402

__all__ = ["export", "ExportError", "TraceError", "Unsupported", "dumps", "main"]

# Constructor arguments for models whose defaults do not suit an export (aux heads are training-only).
MODEL_KWARGS = {"googlenet": {"aux_logits": False, "init_weights": True},
                "inception_v3": {"aux_logits": False, "init_weights": True}}


class TraceError(Exception):
    """torch.fx could not trace the model (data-dependent control flow, ...)."""


def trace(module, example_shape):
    """The module traced by torch.fx, every node annotated with its shape and module path."""
    try:
        gm = fx.GraphModule(module, PathTracer().trace(module))
    except Exception as e:  # noqa: BLE001 - fx raises many kinds
        raise TraceError(f"torch.fx cannot trace {type(module).__name__}: {type(e).__name__}: {e}") from e
    dtype = next((p.dtype for p in module.parameters()), torch.float32)
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(torch.zeros(example_shape, dtype=dtype))
    except RuntimeError as e:
        cause = str(e.__cause__ or e).strip().splitlines()[0]
        raise TraceError(f"{type(module).__name__} fails in PyTorch on an input of shape {list(example_shape)}: "
                         f"{cause}") from e
    return gm


def export(module, example_shape, dtype="f32", name=None, input_name="image", output_name="logits"):
    """Converts `module` (put in eval mode) for an input of `example_shape` into a kiln graph.

    Returns (graph, weights): the graph as a dict (JSON-ready, format kiln.graph v1) and a dict of the
    parameters' values, kiln tensor name -> float32 numpy array. Raises ExportError listing every
    unsupported node, TraceError when torch.fx cannot trace the module.
    """
    module.eval()
    gm = trace(module, example_shape)
    builder = Builder(dtype, reserved=(input_name, output_name))
    converter = Converter(gm, builder, torch2kiln_ops, input_name, output_name)
    converter.run()
    return builder.graph(name or type(module).__name__, converter.outputs), builder.weights


# ---- models and their weights ----

@contextlib.contextmanager
def parameters_uninitialized():
    """torch.nn.init's in-place initializers do nothing (a graph-only export needs no values: faster)."""
    names = [n for n in dir(nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(nn.init, n) for n in names}
    for n in names:
        setattr(nn.init, n, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(nn.init, n, f)


def build_model(spec):
    """A torchvision model name, or FILE.py:FUNCTION (a function returning an nn.Module)."""
    if ":" in spec:
        path, func = spec.rsplit(":", 1)
        loader = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        mod = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(mod)
        return getattr(mod, func)()
    if spec not in torchvision.models.list_models(module=torchvision.models):
        raise ValueError(f"unknown model '{spec}': not a torchvision classification model "
                       "(see torchvision.models.list_models()) nor FILE.py:FUNCTION")
    return torchvision.models.get_model(spec, weights=None, **MODEL_KWARGS.get(spec, {}))


def uniform(t, lo, hi, gen):
    t.copy_(torch.rand(t.shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo)


def randomize(model, seed):
    """Random values where the model's init is constant: zero biases, ConvNeXt's layer scale (1e-6), and
    every norm's affine and running statistics, so that each of them shows in the output."""
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
                uniform(p, -0.1, 0.1, gen) if p.flatten()[0] == 0 else uniform(p, 0.5, 1.5, gen)
        for m in model.modules():
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)):
                if getattr(m, "weight", None) is not None:
                    uniform(m.weight, 0.5, 1.5, gen)
                if getattr(m, "bias", None) is not None:
                    uniform(m.bias, -0.2, 0.2, gen)
            if getattr(m, "running_mean", None) is not None:
                uniform(m.running_mean, -0.2, 0.2, gen)
                uniform(m.running_var, 0.5, 2.0, gen)


def rounded(a, dtype):
    """A float32 array rounded to the graph dtype, as kiln reads it (.npy: f32 <f4, f16 <f2, bf16 <f4)."""
    if dtype == "f16":
        return a.astype(np.float16)
    if dtype == "bf16":
        return torch.from_numpy(np.ascontiguousarray(a, np.float32)).bfloat16().float().numpy()
    return a.astype(np.float32, copy=False)


def expected_output(model, image, dtype):
    """The model's output in float64, from its parameters and the input rounded to `dtype` (in place)."""
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point() and dtype != "f32":
                t.copy_(torch.from_numpy(rounded(t.detach().numpy(), dtype).astype(np.float32)))
        return model.double()(torch.from_numpy(image.astype(np.float64))).numpy()


def save_npy(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, array)


def write_weights(out, model, graph, weights, shape, args):
    gen = torch.Generator().manual_seed(args.seed)
    image = rounded(torch.randn(shape, generator=gen).numpy(), args.dtype)
    input_name = next(t["name"] for t in graph["tensors"] if t["kind"] == "input")
    save_npy(os.path.join(out, "inputs", f"{input_name}.npy"), image)
    for name, value in weights.items():
        save_npy(os.path.join(out, "inputs", f"{name}.npy"), rounded(value, args.dtype))
    logits = expected_output(model, image, args.dtype)
    save_npy(os.path.join(out, "expected", f"{graph['outputs'][0]}.npy"), logits)
    return len(weights) + 1


# ---- command line ----

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="torch2kiln.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="torchvision model name (resnet18, ...) or FILE.py:FUNCTION")
    ap.add_argument("--out", required=True, help="output directory (graph.json, inputs/, expected/)")
    ap.add_argument("--resolution", default="224", help="input H[,W] (default 224)")
    ap.add_argument("--batch", type=int, default=1, help="batch size N (default 1)")
    ap.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32")
    ap.add_argument("--weights", action="store_true", help="also write inputs/*.npy and expected/logits.npy")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weights and the input (default 0)")
    args = ap.parse_args(argv)
    try:
        hw = [int(v) for v in args.resolution.split(",")]
        args.hw = hw * 2 if len(hw) == 1 else hw
        assert len(args.hw) == 2 and min(args.hw) > 0 and args.batch > 0
    except (ValueError, AssertionError):
        ap.error(f"bad --resolution '{args.resolution}' or --batch {args.batch}: expected H or H,W, N > 0")
    return args


def summary(graph, weights):
    counts = {}
    for node in graph["nodes"]:
        counts[node["op"]] = counts.get(node["op"], 0) + 1
    ops = ", ".join(f"{op} {n}" for op, n in counts.items())
    elements = sum(int(np.prod(w.shape)) for w in weights.values())
    return f"{len(graph['nodes'])} nodes ({ops}); {len(weights)} parameters, {elements:,} elements"


def export_or_report(model, shape, args, name):
    """(graph, weights), or None after printing every problem to stderr."""
    try:
        return export(model, shape, args.dtype, name=name)
    except ExportError as e:
        for p in e.problems:
            print(f"error: {args.model}: unsupported: {p}", file=sys.stderr)
        print(f"error: {args.model}: {len(e.problems)} node(s) kiln cannot run; nothing written", file=sys.stderr)
    except TraceError as e:
        print(f"error: {args.model}: {e}", file=sys.stderr)
    return None


def main(argv):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    try:
        with contextlib.nullcontext() if args.weights else parameters_uninitialized():
            model = build_model(args.model)
    except (ValueError, OSError, AttributeError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.weights:
        randomize(model, args.seed)
    shape = (args.batch, 3, *args.hw)
    name = os.path.splitext(os.path.basename(args.model.split(":")[0]))[0]
    exported = export_or_report(model, shape, args, name)
    if exported is None:
        return 2
    graph, weights = exported
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "graph.json"), "w") as f:
        f.write(dumps(graph))
    print(f"{name} [{', '.join(map(str, shape))}] {args.dtype}: {summary(graph, weights)}")
    print(f"wrote {os.path.join(args.out, 'graph.json')}")
    if args.weights:
        n = write_weights(args.out, model, graph, weights, shape, args)
        print(f"wrote {n} tensors to {os.path.join(args.out, 'inputs')}, float64 PyTorch output to "
              f"{os.path.join(args.out, 'expected', graph['outputs'][0] + '.npy')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
