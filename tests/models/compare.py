#!/usr/bin/python3
"""Compares every EXPECTED/<name>.npy with ACTUAL/<name>.npy: relative L2 error ||a - e|| / ||e|| must be
below --max-rel-l2 (default 1e-6). Prints one line per tensor; exit status 1 when any is over or missing."""
import argparse
import os
import sys

import numpy as np


def rel_l2(actual, expected):
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-300))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--max-rel-l2", type=float, default=1e-6)
    args = ap.parse_args()
    names = sorted(f for f in os.listdir(args.expected) if f.endswith(".npy"))
    if not names:
        print(f"error: no .npy files in {args.expected}", file=sys.stderr)
        return 1
    ok = True
    for name in names:
        path = os.path.join(args.actual, name)
        if not os.path.exists(path):
            print(f"error: {path}: missing", file=sys.stderr)
            ok = False
            continue
        e, a = np.load(os.path.join(args.expected, name)), np.load(path)
        if a.shape != e.shape:
            print(f"error: {name}: shape {list(a.shape)}, expected {list(e.shape)}", file=sys.stderr)
            ok = False
            continue
        err = rel_l2(a, e)
        good = err < args.max_rel_l2 and np.isfinite(a).all()
        ok = ok and good
        print(f"{name[:-4]}: relative L2 error {err:.3e} (limit {args.max_rel_l2:g}), max abs error "
              f"{float(np.abs(a.astype(np.float64) - e).max()):.3e}, |expected| max {float(np.abs(e).max()):.3g}: "
              f"{'ok' if good else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
