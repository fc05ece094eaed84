"""kiln: a graph-based operation fusion engine for CUDA, from Python (docs/python.md).

    import numpy as np, kiln
    g = kiln.Graph("block")
    x = g.input("x", (1, 8, 16, 16))
    w = g.parameter("w", (8, 8, 3, 3))
    g.output(g.relu(g.conv2d(x, w, padding=(1, 1))), "y")
    exe = kiln.compile(g, device="emu")
    y = exe.run(kiln.random_inputs(g, seed=0))["y"]

Everything but prewarm is the compiled extension kiln._kiln; errors from kiln are kiln.Error.
"""

from ._kiln import (
    CompileReport,
    Error,
    Executable,
    Graph,
    Group,
    Node,
    Plan,
    PrewarmGraph,
    PrewarmReport,
    Tensor,
    __version__,
    backward,
    compile,
    load,
    onnx_available,
    ops,
    plan,
    random_inputs,
    run_reference,
)
from . import _kiln

__all__ = [
    "CompileReport", "Error", "Executable", "Graph", "Group", "Node", "Plan", "PrewarmGraph", "PrewarmReport",
    "Tensor", "__version__", "backward", "compile", "load", "onnx_available", "ops", "plan", "prewarm", "random_inputs",
    "run_reference",
]


def prewarm(graphs, *, arch=None, target=None, jobs=0, allow_uncached=False, layout="auto"):
    """Compiles every kernel of `graphs` (kiln.Graph objects or paths of .json / .onnx files) for each target
    GPU into the kernel cache (KILN_CACHE_DIR, read at each call), as `kiln prewarm` does. Needs no GPU.

    arch: "sm_80" or a list of archs (each arch's default device); target: device names ("h200", "a100") or
    archs. Neither: sm_80's and sm_90's default devices. jobs: parallel compiles, 0 for every core.

    Returns a kiln.PrewarmReport. Raises kiln.Error (with the report as .report) when a kernel failed to
    compile, or (unless allow_uncached) when the cache could not keep a kernel compiled now: a read-only or
    disabled cache, KILN_CACHE_MAX_SIZE too small.
    """
    report = _kiln._prewarm(graphs, arch=arch, target=target, jobs=jobs, allow_uncached=allow_uncached,
                            layout=layout)
    not_kept = 0 if allow_uncached else report.not_kept
    if report.failed or not_kept:
        lines = [f"prewarm: {report.failed} of {report.total} kernels failed" if report.failed else
                 f"prewarm: {not_kept} of {report.total} kernels are not in the kernel cache"]
        if not_kept and report.not_kept_reason:
            lines.append(f"{report.not_kept_reason} (allow_uncached=True accepts that)")
        lines += report.errors[:10]
        if len(report.errors) > 10:
            lines.append(f"... and {len(report.errors) - 10} more")
        error = Error("\n".join(lines))
        error.code = "internal" if report.failed and not not_kept else "io_error"
        error.report = report
        raise error
    return report
