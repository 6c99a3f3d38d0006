"""Whole-program predictions against IREE measurements: the helpers of
benchmarks/profiled_eval.py and benchmarks/learned_eval.py.

    predicted_total_ns(text, hardware="host-cpu", backend="profiled", fusion="xla-gpu")
    measure_whole(text, profiler)              # IREE llvm-cpu local-task, median (ns)
    mape(pred, meas), spearman(xs, ys)
"""

from __future__ import annotations

import math

__all__ = ["predicted_total_ns", "measure_whole", "mape", "spearman", "signed_error"]


def predicted_total_ns(
    text: str,
    *,
    hardware: str,
    backend: str,
    fusion: str = "",
    options: dict | None = None,
) -> tuple[float, dict]:
    """The module's `total_time_ns` after annotate-cost, and the summary as a dict."""
    from ..ir import DiagnosticEngine, attr_number, ir, load_module, make_context
    from ..passes.annotate_cost import annotate_module

    ctx = make_context()
    module = load_module(ctx, text, "<program>")
    annotate_module(module, DiagnosticEngine(), hardware=hardware, backend=backend, fusion=fusion, backend_options=options or {})
    with ctx:
        s = ir.DictAttr(module.attributes["costmodel.summary"])
        out = {}
        for key in ("total_time_ns", "kernel_count", "program_overhead_ns", "unsupported_count"):
            if key in s:
                out[key] = attr_number(s[key])
        if "backend_stats" in s:
            stats = ir.DictAttr(s["backend_stats"])
            for name in ("kernels_measured", "kernels_from_cache", "kernels_fallback", "kernels_predicted"):
                if name in stats:
                    out[name] = attr_number(stats[name])
    return float(out["total_time_ns"]), out


def measure_whole(text: str, profiler, *, refresh: bool = False) -> float:
    """The program's median time on IREE llvm-cpu local-task (the profiler's workers,
    clock and pinning), in ns; raises RuntimeError when IREE cannot run it."""
    old = profiler.refresh
    profiler.refresh = refresh or old
    try:
        row = profiler.measure_program(text)
    finally:
        profiler.refresh = old
    if row.status != "measured":
        raise RuntimeError(row.reason)
    return row.time_ns


def evaluation_cache(cache_dir: str | None, prefix: str, threads: int):
    """Set up an evaluation run's measurement cache ($COSTMODEL_CACHE_DIR: `cache_dir`,
    created if need be and kept, or a fresh temporary directory) and write the host-cpu
    spec of `threads` cores into it. Returns (host spec path, cleanup): cleanup() removes
    a temporary cache and leaves a given one. CacheError when `cache_dir` cannot be a
    directory."""
    import json
    import os
    import shutil
    import tempfile

    from .cache import ENV_CACHE_DIR, CacheError
    from .host import host_cpu_json

    if cache_dir:
        try:
            os.makedirs(cache_dir, exist_ok=True)
        except OSError as err:
            raise CacheError(f"cache directory '{cache_dir}': cannot create it ({err.strerror or err})") from None
    tmp = None if cache_dir else tempfile.mkdtemp(prefix=prefix)
    os.environ[ENV_CACHE_DIR] = os.path.abspath(cache_dir) if cache_dir else tmp
    spec = os.path.join(os.environ[ENV_CACHE_DIR], f"host-cpu-{threads}core.json")
    with open(spec, "w") as fh:
        json.dump(host_cpu_json(threads=threads or None), fh, indent=1)

    def cleanup() -> None:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    return spec, cleanup


def signed_error(pred: float, meas: float) -> float:
    return (pred - meas) / meas


def mape(preds, meas) -> float:
    pairs = [(p, m) for p, m in zip(preds, meas) if p is not None and m]
    return 100.0 * sum(abs(p - m) / m for p, m in pairs) / len(pairs) if pairs else math.nan


def _ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (ties get their average rank)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if len(pairs) < 2:
        return math.nan
    rx = _ranks([p[0] for p in pairs])
    ry = _ranks([p[1] for p in pairs])
    n = len(pairs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx and vy else math.nan
