"""Measurements of IREE's llvm-cpu runtime on this host that turn standalone kernel times
into times inside a program (used by the `profiled` and `learned` backends and the
`host-cpu` calibration block).

A standalone kernel program pays once per invocation what a whole program pays once:
waking the task system, submitting the command buffer, waiting for it, handing results
back. A chain of n tiny dependent dispatches (8 x 8 dots: no fusion possible) costs

    t(n) = invocation_ns + n x dispatch_ns

(least squares over n = 1, 8, 64, the median of 3 interleaved rounds of 15
repetitions each; per worker count and clock), so a kernel inside a program costs its
standalone time minus `invocation_ns`, and a whole program its kernels plus one
`invocation_ns`. The f32 GEMM figure is the `calibrated` backend's matrix efficiency.
"""

from __future__ import annotations

import os
import tempfile

from .ireerun import benchmark_vmfb, compile_program, input_flags, runtime_version

__all__ = ["measure_iree_calibration", "chain_program", "gemm_program", "CHAIN_LENGTHS", "GEMM_SIZES"]

CHAIN_LENGTHS = (1, 8, 64)
# rounds of the chain measurements, interleaved (the median per length counts): a shared
# machine's other processes come and go
CHAIN_ROUNDS = 3
# f32 GEMM cubes timed for the matrix efficiency; the best one counts (an autotuned
# library's peak; IREE's default llvm-cpu GEMM falls off once a cube leaves the L2).
GEMM_SIZES = (256, 512, 1024)


def chain_program(n: int, size: int = 8) -> str:
    t = f"tensor<{size}x{size}xf32>"
    lines = [f"func.func @main(%arg0: {t}) -> {t} {{"]
    v = "%arg0"
    for i in range(n):
        lines.append(f"  %{i} = stablehlo.dot_general {v}, %arg0, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}")
        v = f"%{i}"
    lines.append(f"  return {v} : {t}\n}}")
    return "\n".join(lines)


def gemm_program(m: int, n: int, k: int) -> str:
    return (
        f"func.func @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{\n"
        f"  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : "
        f"(tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>\n"
        f"  return %0 : tensor<{m}x{n}xf32>\n}}"
    )


def pinned_cpus(threads: int, pin: bool = True) -> tuple[int, ...] | None:
    """With one worker, the benchmark process is pinned to one CPU (the last one this
    process may use): the worker and the thread that waits for it then hand over on one
    core, whose cost varies far less than a wake-up across (virtual) cores."""
    if not pin or threads != 1 or not hasattr(os, "sched_getaffinity"):
        return None
    return (sorted(os.sched_getaffinity(0))[-1],)


def default_clock(threads: int) -> str:
    """The process CPU time with one worker (robust to other processes on a shared
    machine; equal to the wall time on an idle one), the wall time with several."""
    return "cpu" if threads == 1 else "real"


def clocks_for(threads: int) -> tuple[str, ...]:
    return ("cpu", "real") if threads == 1 else ("real",)


def _fit(xs, ys) -> tuple[float, float]:
    """Least squares y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def measure_iree_calibration(info, *, threads_list=None, quick: bool = False) -> dict:
    """{runtime, invocation_ns_by_threads, dispatch_ns_by_threads, gemm_GFLOPS_by_threads, ...}
    `quick`: one round of shorter repetitions and one GEMM size (tests; recorded)."""
    n_rounds = 1 if quick else CHAIN_ROUNDS
    reps, min_ms = (5, 5) if quick else (15, 20)
    gemm_sizes = (256,) if quick else GEMM_SIZES
    from ..shapes import TensorInfo

    cores = max(1, int(info["physical_cores"]))
    threads_list = sorted({1, cores}) if threads_list is None else sorted(set(threads_list))
    out = {
        "runtime": runtime_version(),
        "chain_max": CHAIN_LENGTHS[-1],
        "gemm_shape": "best of " + ", ".join(f"{s}^3" for s in gemm_sizes),
        "quick": quick,
        "invocation_ns_by_threads": {},
        "dispatch_ns_by_threads": {},
        "gemm_GFLOPS_by_threads": {},
        "chain_ns_by_threads": {},
    }
    with tempfile.TemporaryDirectory(prefix="costmodel-calibrate-") as tmp:
        chains = {}
        for n in CHAIN_LENGTHS:
            path = os.path.join(tmp, f"chain{n}.vmfb")
            with open(path, "wb") as fh:
                fh.write(compile_program(chain_program(n)))
            chains[n] = path
        cflags = input_flags([TensorInfo((8, 8), "f32", 4, 64, 256)], tmp)
        gemms = {}
        for s in gemm_sizes:
            gdir = os.path.join(tmp, f"g{s}")
            os.makedirs(gdir)
            gpath = os.path.join(gdir, "gemm.vmfb")
            with open(gpath, "wb") as fh:
                fh.write(compile_program(gemm_program(s, s, s)))
            info = TensorInfo((s, s), "f32", 4, s * s, 4 * s * s)
            gemms[s] = (gpath, input_flags([info, info], gdir))
        for t in threads_list:
            rounds = [
                [
                    benchmark_vmfb(chains[n], cflags, threads=t, repeats=reps, min_time_ms=min_ms, cpus=pinned_cpus(t))
                    for n in CHAIN_LENGTHS
                ]
                for _ in range(n_rounds)
            ]
            for clock in clocks_for(t):
                key = f"{t}:{clock}"
                times = [sorted(r[i].median(clock) for r in rounds)[len(rounds) // 2] for i in range(len(CHAIN_LENGTHS))]
                a, b = _fit(list(CHAIN_LENGTHS), times)
                out["invocation_ns_by_threads"][key] = round(max(a, 0.0), 1)
                out["dispatch_ns_by_threads"][key] = round(max(b, 10.0), 1)
                out["chain_ns_by_threads"][key] = [round(x, 1) for x in times]
            best = 0.0
            for s, (gpath, gflags) in gemms.items():
                g = benchmark_vmfb(gpath, gflags, threads=t, repeats=3 if quick else 5, min_time_ms=min_ms * 5, cpus=pinned_cpus(t))
                g = g.median(default_clock(t))
                best = max(best, 2 * s * s * s / g)  # one FMA = 2 flops; flop/ns = GFLOP/s
            out["gemm_GFLOPS_by_threads"][str(t)] = round(best, 2)
    return out
