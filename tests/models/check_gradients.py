#!/usr/bin/python3
"""Every parameter's gradient of a torchvision model: kiln's training graph (`kiln grad`, run on ref) against
PyTorch autograd in float64, from the same float32 weights and inputs.

    tests/models/check_gradients.py MODEL[:RES] --kiln PATH [--device ref|emu] [--batch N] [--max-rel-l2 X]
                                    [--keep DIR]

The model is in eval mode (batch norms with their running statistics; torch2kiln randomizes them and the
affines), exported by tools/torch2kiln.py; the loss is sum(logits * r) with a random r, so every gradient is a
random-looking tensor. Prints one line per parameter and exits 1 when any relative L2 error exceeds
--max-rel-l2 (default 1e-5: kiln's ref rounds every intermediate to float32) or a gradient is missing."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import torch2kiln  # noqa: E402


def rel_l2(a, e):
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-300))


def check_sgd(a, work, graph, weights, model, image, r):
    """`kiln train` for a.sgd_steps SGD steps against torch.optim.SGD on the same loss: each parameter's update
    (after - before) by relative L2. The batch norms' running statistics are inputs here (PyTorch's buffers)."""
    for t in graph["tensors"]:
        if t["name"].endswith((".running_mean", ".running_var")):
            t["kind"] = "input"
    data, params = os.path.join(work, "data"), os.path.join(work, "params")
    os.makedirs(data, exist_ok=True)
    os.makedirs(params, exist_ok=True)
    np.save(os.path.join(data, "image.npy"), image)
    np.save(os.path.join(data, "r.npy"), r)
    for n, v in weights.items():
        np.save(os.path.join(data if n.endswith((".running_mean", ".running_var")) else params, f"{n}.npy"),
                v.astype(np.float32))
    with open(os.path.join(work, "sgd.json"), "w") as f:
        f.write(torch2kiln.dumps(graph))
    cmd = [a.kiln, "train", "sgd.json", "--loss", "loss", "--data", "data", "--params", "params", "--steps",
           str(a.sgd_steps), "--lr", str(a.sgd_lr), "--momentum", "0.9", "--device", a.device, "-o", "trained"]
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"error: {' '.join(cmd)} (in {work}): {done.stderr}", file=sys.stderr)
        return False
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=a.sgd_lr, momentum=0.9)
    x, rr = torch.from_numpy(image.astype(np.float64)), torch.from_numpy(r.astype(np.float64))
    for _ in range(a.sgd_steps):
        opt.zero_grad()
        (model(x) * rr).sum().backward()
        opt.step()
    worst_p = worst_u = 0.0
    ok = True
    for n, p in model.named_parameters():
        path = os.path.join(work, "trained", f"{n}.npy")
        if not os.path.exists(path):
            print(f"error: {n}: kiln train saved no value ({path})", file=sys.stderr)
            ok = False
            continue
        got, want, start = np.load(path).astype(np.float64), p.detach().numpy(), before[n].numpy()
        worst_p = max(worst_p, rel_l2(got, want))
        worst_u = max(worst_u, rel_l2(got - start, want - start))
    ok = ok and worst_p <= 1e-5
    print(f"after {a.sgd_steps} SGD steps (momentum 0.9, lr {a.sgd_lr:g}): parameters worst rel L2 {worst_p:.3e} (limit 1e-05), "
          f"their updates {worst_u:.3e}: {'ok' if ok else 'FAILED'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--device", default="ref", choices=["ref", "emu", "cuda"])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-rel-l2", type=float, default=1e-5)
    ap.add_argument("--keep", help="work in this directory and keep it")
    ap.add_argument("--sgd-steps", type=int, default=0,
                    help="also take this many SGD steps (momentum 0.9, lr --sgd-lr) with `kiln train` and torch.optim.SGD "
                         "and compare the parameters' updates")
    ap.add_argument("--sgd-lr", type=float, default=1e-4)
    a = ap.parse_args()
    name, _, res = a.model.partition(":")
    res = int(res or 32)
    torch.manual_seed(0)
    model = torchvision.models.__dict__[name](weights=None, **torch2kiln.MODEL_KWARGS.get(name, {}))
    torch2kiln.randomize(model, 0)
    model.eval()
    shape = (a.batch, 3, res, res)
    graph, weights = torch2kiln.export(model, shape)
    logits = graph["outputs"][0]
    with torch.no_grad():
        classes = model(torch.zeros(shape)).shape[-1]
    graph["tensors"].append({"name": "r", "shape": [a.batch, classes], "dtype": "f32", "kind": "input"})
    graph["nodes"] += [
        {"name": "loss.mul", "op": "mul", "inputs": {"a": logits, "b": "r"}, "outputs": {"y": "loss.terms"}},
        {"name": "loss.sum", "op": "reduce_sum", "inputs": {"x": "loss.terms"}, "outputs": {"y": "loss"}}]
    graph["outputs"] = ["loss"]

    work = a.keep or tempfile.mkdtemp(prefix="kiln_grads_")
    os.makedirs(os.path.join(work, "inputs"), exist_ok=True)
    with open(os.path.join(work, "graph.json"), "w") as f:
        f.write(torch2kiln.dumps(graph))
    gen = torch.Generator().manual_seed(1)
    image = torch.randn(shape, generator=gen).numpy().astype(np.float32)
    r = torch.randn((a.batch, classes), generator=gen).numpy().astype(np.float32)
    np.save(os.path.join(work, "inputs", "image.npy"), image)
    np.save(os.path.join(work, "inputs", "r.npy"), r)
    for n, v in weights.items():
        np.save(os.path.join(work, "inputs", f"{n}.npy"), v.astype(np.float32))
    for cmd in ([a.kiln, "grad", "graph.json", "--loss", "loss", "-o", "train.json"],
                [a.kiln, "run", "train.json", "--device", a.device, "--inputs", "inputs", "--save-outputs", "out"]):
        done = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"error: {' '.join(cmd)} (in {work}): {done.stderr}", file=sys.stderr)
            return 1

    model = model.double()
    x = torch.from_numpy(image.astype(np.float64))
    (model(x) * torch.from_numpy(r.astype(np.float64))).sum().backward()
    ok, worst = True, 0.0
    for n, p in model.named_parameters():
        path = os.path.join(work, "out", "grad", f"{n}.npy")
        if not os.path.exists(path):
            print(f"error: {n}: kiln wrote no gradient ({path})", file=sys.stderr)
            ok = False
            continue
        err = rel_l2(np.load(path).astype(np.float64), p.grad.numpy())
        worst = max(worst, err)
        good = err <= a.max_rel_l2
        ok = ok and good
        print(f"{n:<40} {list(p.shape)!s:<20} rel L2 {err:.3e}{'' if good else '  OVER'}")
    print(f"{name} at {res}x{res}, batch {a.batch}, {a.device}: {sum(1 for _ in model.parameters())} gradients, worst rel L2 "
          f"{worst:.3e} (limit {a.max_rel_l2:g}): {'ok' if ok else 'FAILED'}")
    if ok and a.sgd_steps > 0:
        ok = check_sgd(a, work, graph, weights, model, image, r)
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
