#!/usr/bin/python3
"""The `models.export` fixture: exports every model given as MODEL:RESOLUTION, graph only, once per dtype,
to OUT/<name>/<dtype>/graph.json (name: MODEL, or FILE's base name for FILE.py:FUNCTION) (through torch2kiln's command line, in one process: torch loads once).

    tests/models/export_all.py OUT --dtypes f32,f16 resnet18:64 vgg11_bn:32 ...

Exit status: 0 when every export succeeds, else the worst exporter status (each failure printed)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
try:
    import torch2kiln  # noqa: E402
except ImportError as e:
    sys.exit(f"error: the models tests need PyTorch, torchvision and NumPy for {sys.executable} ({e}); install "
             "them with `tools/setup.sh --torch` (Debian: python3-torch python3-torchvision python3-numpy)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("models", nargs="+", help="MODEL:RESOLUTION (MODEL: a torchvision name or FILE.py:FUNCTION)")
    ap.add_argument("--dtypes", default="f32,f16")
    args = ap.parse_args()
    worst = 0
    for spec in args.models:
        model, _, res = spec.rpartition(":")  # MODEL may be FILE.py:FUNCTION
        name = os.path.splitext(os.path.basename(model.split(":")[0]))[0]
        for dtype in args.dtypes.split(","):
            start = time.monotonic()
            out = os.path.join(args.out, name, dtype)
            rc = torch2kiln.main([model, "--out", out, "--resolution", res, "--dtype", dtype])
            print(f"  {name} {dtype}: exit {rc} ({time.monotonic() - start:.1f} s)", flush=True)
            worst = max(worst, rc)
    return worst


if __name__ == "__main__":
    sys.exit(main())
