#!/usr/bin/env python3
"""Writes DenseNet-121 (torchvision's layout: growth 32, bottleneck 4 x 32, blocks of 6/12/24/16 layers) or a
smaller DenseNet-like graph as a kiln graph JSON file, for `kiln plan` / `kiln run` on dense blocks (every
concat's inputs a prefix of the next one's: see docs/architecture.md, in-place concats).

  tools/bench/densenet_graph.py OUT.json [blocks=6,12,24,16] [growth=32] [batch=1] [hw=224] [single=1]

`single=1` (the default) gives the first layer of each block a concat of one tensor, as torchvision's
torch.cat of a one-element list (DenseNet-121: 62 concats); `single=0` reads the block's input directly.
"""
import json
import sys

if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
    sys.exit(__doc__)
out = sys.argv[1]
args = dict(a.split("=", 1) for a in sys.argv[2:])
blocks = [int(b) for b in args.get("blocks", "6,12,24,16").split(",")]
growth, batch, hw = int(args.get("growth", 32)), int(args.get("batch", 1)), int(args.get("hw", 224))
single = args.get("single", "1") == "1"
tensors, nodes = [], []


def param(name, shape):
    tensors.append({"name": name, "shape": shape, "kind": "parameter"})
    return name


def node(op, name, inputs, attrs=None):
    n = {"op": op, "name": name, "inputs": inputs, "outputs": {"y": name + ".y"}}
    if attrs:
        n["attrs"] = attrs
    nodes.append(n)
    return name + ".y"


def bn_relu(x, name, c):
    ins = {"x": x, **{k: param(f"{name}.{k}", [c]) for k in ("scale", "shift", "mean", "var")}}
    return node("relu", name + ".relu", {"x": node("batch_norm", name, ins)})


def conv(x, name, cin, cout, k, s=1, p=0):
    w = param(name + ".weight", [cout, cin, k, k])
    return node("conv2d", name, {"x": x, "w": w}, {"stride": [s, s], "padding": [p, p]})


tensors.append({"name": "x", "shape": [batch, 3, hw, hw]})
y = bn_relu(conv("x", "conv0", 3, 64, 7, 2, 3), "norm0", 64)
y = node("max_pool2d", "pool0", {"x": y}, {"kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]})
c = 64
for bi, layers in enumerate(blocks):
    feats = [y]
    for li in range(layers):
        n, cin = f"b{bi + 1}.l{li + 1}", c + li * growth
        x = feats[0] if len(feats) == 1 and not single else node("concat", n + ".cat", {"xs": list(feats)}, {"axis": 1})
        t = conv(bn_relu(x, n + ".norm1", cin), n + ".conv1", cin, 4 * growth, 1)
        feats.append(conv(bn_relu(t, n + ".norm2", 4 * growth), n + ".conv2", 4 * growth, growth, 3, 1, 1))
    c += layers * growth
    y = node("concat", f"b{bi + 1}.out", {"xs": feats}, {"axis": 1})
    if bi + 1 < len(blocks):
        y = conv(bn_relu(y, f"t{bi + 1}.norm", c), f"t{bi + 1}.conv", c, c // 2, 1)
        c //= 2
        y = node("avg_pool2d", f"t{bi + 1}.pool", {"x": y}, {"kernel": [2, 2], "stride": [2, 2]})
y = node("global_avg_pool", "gap", {"x": bn_relu(y, "norm5", c)})
y = node("reshape", "flat", {"x": y}, {"shape": [batch, c]})
y = node("matmul", "fc", {"a": y, "b": param("fc.weight", [c, 1000]), "bias": param("fc.bias", [1000])})
name = "densenet121" if blocks == [6, 12, 24, 16] and growth == 32 else "densenet"
with open(out, "w") as f:
    json.dump({"format": "kiln.graph", "version": 1, "name": name, "tensors": tensors, "nodes": nodes,
               "outputs": [y]}, f, indent=1)
