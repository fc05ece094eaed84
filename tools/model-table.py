#!/usr/bin/env python3
"""One row per exported model: its convolutions, matmuls and non-global pools (from the graph), and what
the current planner makes of it (`kiln plan`'s totals: kernels, weight transforms, bytes moved, the
unfused baseline and their ratio).

    tools/model-table.py [--kiln build/kiln] [--dtype f32] [--target T] [--markdown] [GRAPH.json | DIR ...]

Without arguments it reads the graphs the `models` tests export, build/models/<model>/<dtype>/graph.json
(make them with `cd build && ctest -R models.export`, or tools/torch2kiln.py). Needs no PyTorch.
Exit status: 0 ok, 1 a graph kiln cannot plan (its error printed), 2 no graphs found."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOTALS = {"kernels": r"kernels:\s+([\d,]+)", "transforms": r"weight transforms:\s+([\d,]+)",
          "moved": r"bytes moved:\s+([\d,]+)", "baseline": r"unfused baseline:\s+([\d,]+)",
          "ratio": r"fused / unfused:\s+([\d.]+)"}
COLUMNS = [("model", "model"), ("convs", "convs"), ("matmuls", "matmuls"), ("pools", "pools (non-global)"),
           ("kernels", "kernels"), ("transforms", "weight transforms"), ("moved", "bytes moved"),
           ("baseline", "unfused baseline"), ("ratio", "fused/unfused")]


def graph_counts(path):
    with open(path) as f:
        graph = json.load(f)
    ops = [n["op"] for n in graph["nodes"]]
    return {"model": graph.get("name", os.path.basename(os.path.dirname(path))), "convs": ops.count("conv2d"),
            "matmuls": ops.count("matmul"), "pools": ops.count("max_pool2d") + ops.count("avg_pool2d")}


def plan_totals(kiln, path, target):
    cmd = [kiln, "plan", path] + (["--target", target] if target else [])
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {run.returncode}\n{run.stderr.strip()}")
    totals = run.stdout[run.stdout.rfind("totals:"):]
    row = {}
    for key, pattern in TOTALS.items():
        m = re.search(pattern, totals)
        if not m:
            raise RuntimeError(f"{' '.join(cmd)}: no '{pattern}' in its totals")
        row[key] = m.group(1) if key == "ratio" else int(m.group(1).replace(",", ""))
    return row


def graphs(args):
    paths = []
    for p in args.paths or [os.path.join(ROOT, "build", "models")]:
        if os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(p, "*", args.dtype, "graph.json")))
            paths += found or sorted(glob.glob(os.path.join(p, "graph.json")))
        else:
            paths.append(p)
    return paths


def render(rows, markdown):
    cells = [[h for _, h in COLUMNS]] + [[f"{r[k]:,}" if isinstance(r[k], int) else str(r[k])
                                          for k, _ in COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    def line(row):
        padded = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return ("| " + " | ".join(padded) + " |") if markdown else "  ".join(padded)
    out = [line(cells[0])]
    if markdown:
        out.append("|" + "|".join("-" * (w + 1) + (":" if i else "-") for i, w in enumerate(widths)) + "|")
    return "\n".join(out + [line(r) for r in cells[1:]])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="graph files, or directories of <model>/<dtype>/graph.json")
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--dtype", default="f32", help="which exported dtype to read from a directory (f32)")
    ap.add_argument("--target", help="kiln plan --target (default: kiln's, h200)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = ap.parse_args()
    paths = graphs(args)
    if not paths:
        print("error: no graphs found; export them with `cd build && ctest -R models.export`", file=sys.stderr)
        return 2
    rows, failed = [], False
    for path in paths:
        try:
            rows.append({**graph_counts(path), **plan_totals(args.kiln, path, args.target)})
        except (OSError, ValueError, RuntimeError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            failed = True
    print(render(rows, args.markdown))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
