#!/usr/bin/env python3
"""Measure, on a real GPU, the kernels and training steps the cost model predicts (a
benchmark run by hand on a machine with a GPU; never part of the tests).

    OUT=/tmp/h100 python benchmarks/gpu_measure.py            # on the GPU machine
    OUT=/tmp/smoke python benchmarks/gpu_measure.py --smoke   # anywhere: tiny sizes, CPU ok

Writes under $OUT (each file rewritten after every part, so a run stopped by a time limit
still leaves what it finished):

- `results.json`: the machine (nvidia-smi, jax versions), the microbenchmarks and, per
  ResNet, its training step on ONE device at the paper's per-device batch (global 1024
  over 4 devices = 256, bf16, the step of costmodel.workloads.export with devices=1; the
  cross-replica means are over one replica, so no collective runs): compile time, step
  times (each step timed on its own, and 10 steps back to back), XLA's cost and memory
  analyses, and a summary of a profiled run of 3 steps (kernels per step, kernel time
  per step, by profiler line);
- `hlo.tar`: XLA's optimized HLO of each step (`compiled.as_text()`, gzipped): the
  GPU compiler's own fusion decisions, an oracle for costmodel.kernels;
- `traces.tar`: the profiler's Perfetto traces (every kernel's name and duration).

Microbenchmarks (each a sequence of kernels in one jitted function, separated by
`lax.optimization_barrier` so XLA cannot fuse them; per-kernel time = wall time of
the whole call / kernels, median over repeats):

- `launch`: 1,000 kernels on a 4 KiB array: the time of a kernel that does ~nothing;
- `bandwidth`: 20 kernels `y = y * a + b` (bf16) per size from 1 MiB to 1 GiB, bytes
  read + written per kernel = 2 x size;
- `bandwidth_kinds` (not in the default set; `--micro bandwidth_kinds`): at 256 MiB,
  1 GiB and 4 GiB, profiled GPU time per kernel of `y * a + b` in bf16 and f32, `x + y`
  and a read-only f32 sum: which streaming kernel reaches what a step's large kernels
  reach (on the H200 the first gave 3.24 TB/s, XLA's 0.1-1 GB fusions 3.5 TB/s);
- `matmul`: bf16 square products 1024..8192;
- `reduce`: batch-norm statistics (sum and sum of squares over N, H, W in f32) of the
  bf16 activations of ResNet-18/50 at batch 256, profiled kernel time per call (and,
  since 2026-11-27 evening, each kernel's name and time);
- `library_gaps` (not in the default set): the GPU's idle time per call of a chain of
  32 (3x3 convolution, elementwise) pairs against 64 elementwise kernels, from the
  profile's timeline: what a library call outside XLA's command buffers costs beyond
  its kernels;
- `pool` (not in the default set; `--micro pool`): the ResNet stem's max pool, forward
  and gradient, and a bf16 scatter-add of its size with overlapping and with unique
  indices: each kernel's name and time (XLA's scatter kernel rate);
- `conv`: the convolutions of ResNet-18/50 at batch 256 (bf16, NHWC/HWIO), forward,
  gradient wrt the input and wrt the filter, each on its own: GPU kernel time per call
  from a profile (`<what>_s`; the wall time per call, `<what>_wall_s`, has a floor of
  host dispatch, tens of microseconds). Runs before 2026-11-27 02:10 stored the wall
  time as `<what>_s`.

benchmarks/gpu_eval.py reads these files (from benchmarks/data/gpu/<device>/) and sets
the predictions beside them.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

OUT = os.environ.get("OUT") or os.path.join(tempfile.gettempdir(), "gpu_measure")
RESULTS: dict = {"env": {}, "micro": {}, "steps": {}, "errors": []}
HLO: dict[str, bytes] = {}
TRACES: dict[str, bytes] = {}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def save() -> None:
    os.makedirs(OUT, exist_ok=True)
    tmp = os.path.join(OUT, ".results.json.tmp")
    with open(tmp, "w") as f:
        json.dump(RESULTS, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(OUT, "results.json"))
    for name, files in (("hlo.tar", HLO), ("traces.tar", TRACES)):
        if not files:
            continue
        tmp = os.path.join(OUT, f".{name}.tmp")
        with tarfile.open(tmp, "w") as tar:
            for fname, data in sorted(files.items()):
                info = tarfile.TarInfo(fname)
                info.size = len(data)
                info.mtime = 0
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, os.path.join(OUT, name))


def guarded(part: str):
    def wrap(fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            except Exception as err:  # a failed part is recorded; the others still run
                RESULTS["errors"].append({"part": part, "error": f"{type(err).__name__}: {err}",
                                          "traceback": traceback.format_exc()[-4000:]})
                log(f"{part} FAILED: {type(err).__name__}: {err}")
            finally:
                log(f"{part}: {time.perf_counter() - t0:.1f} s")
                save()
        return run
    return wrap


def wall_per_call(fn, args, repeats: int, inner: int = 1) -> dict:
    """Median and min wall seconds of `inner` back-to-back calls (blocked at the end)."""
    import jax

    jax.block_until_ready(fn(*args))  # compiled and warm
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = None
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / inner)
    return {"median_s": statistics.median(times), "min_s": min(times), "repeats": repeats, "inner": inner}


# ---------------------------------------------------------------------------
# the machine
# ---------------------------------------------------------------------------


@guarded("env")
def env() -> None:
    import jax

    e = RESULTS["env"]
    e["jax"] = jax.__version__
    try:
        import jaxlib
        import flax
        import optax

        e["jaxlib"], e["flax"], e["optax"] = jaxlib.__version__, flax.__version__, optax.__version__
    except Exception as err:  # versions are informative only
        e["versions_error"] = str(err)
    e["devices"] = [f"{d.platform}:{d.device_kind}" for d in jax.devices()]
    e["python"] = sys.version.split()[0]
    e["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
    e["nvidia_smi"] = nvidia_smi()


def nvidia_smi() -> str:
    if not shutil.which("nvidia-smi"):
        return "nvidia-smi not found"
    q = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
    r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True)
    return (r.stdout or r.stderr).strip()


# ---------------------------------------------------------------------------
# microbenchmarks
# ---------------------------------------------------------------------------


def chain(n: int, body):
    """jit(x -> body applied n times, an optimization barrier after each): n kernels."""
    import jax
    from jax import lax

    def f(x):
        for _ in range(n):
            x = lax.optimization_barrier(body(x))
        return x

    return jax.jit(f)


@guarded("micro.launch")
def micro_launch(smoke: bool) -> None:
    import jax.numpy as jnp

    n = 100 if smoke else 1000
    x = jnp.ones((2048,), jnp.bfloat16)  # 4 KiB
    f = chain(n, lambda y: y * 1.0001 + 1)
    r = wall_per_call(f, (x,), repeats=5 if smoke else 20)
    r["kernels"] = n
    r["per_kernel_ns"] = r["median_s"] / n * 1e9
    RESULTS["micro"]["launch"] = r
    log(f"launch: {r['per_kernel_ns']:.0f} ns per kernel")


@guarded("micro.bandwidth")
def micro_bandwidth(smoke: bool) -> None:
    import jax.numpy as jnp

    rows = []
    sizes_log2 = range(20, 24) if smoke else range(20, 31)
    n = 20
    f = chain(n, lambda y: y * 1.0001 + 1)
    for p in sizes_log2:
        size = 2**p
        x = jnp.ones((size // 2,), jnp.bfloat16)
        r = wall_per_call(f, (x,), repeats=3 if smoke else 10)
        per_kernel_s = r["median_s"] / n
        rows.append({"bytes": size, "per_kernel_s": per_kernel_s,
                     "GBps_read_plus_written": 2 * size / per_kernel_s / 1e9})
        del x
    RESULTS["micro"]["bandwidth"] = rows
    log("bandwidth: " + ", ".join(f"{r['bytes'] >> 20}MiB {r['GBps_read_plus_written']:.0f}" for r in rows))


@guarded("micro.bandwidth_kinds")
def micro_bandwidth_kinds(smoke: bool) -> None:
    """Which streaming kernel reaches the bandwidth of a step's large kernels: per kind
    and size, the GPU time per kernel from a profile (no host floor). Kinds: y = y * a + b
    in bf16 and in f32 (read + write), z = x + y (two reads, one write), and a sum of all
    elements in f32 (read only)."""
    import jax
    import jax.numpy as jnp

    # 16 MiB .. 4 GiB: the steps' fusion kernels run at 2.5-2.8 TB/s at 10-100 MB and
    # 3.5 TB/s at 0.1-1 GB on the H200 (gpu_eval.py section 2b); where does a streaming
    # kernel's bandwidth ramp up, without the host floor of micro_bandwidth's wall clock?
    sizes_log2 = (20, 22) if smoke else (24, 26, 28, 30, 32)
    n = 4 if smoke else 10
    axpb = chain(n, lambda y: y * 1.0001 + 1)
    add2 = chain(n, lambda xy: (xy[0] + xy[1], xy[1]))
    total = jax.jit(lambda x: jnp.sum(x, dtype=jnp.float32))
    rows = []
    for p in sizes_log2:
        size = 2**p
        for kind, dt, fn, moved in (("axpb", jnp.bfloat16, axpb, 2), ("axpb", jnp.float32, axpb, 2),
                                    ("add2", jnp.bfloat16, add2, 3), ("sum", jnp.bfloat16, total, 1)):
            x = jnp.ones((size // jnp.dtype(dt).itemsize,), dt)
            args = ((x, x + 1),) if kind == "add2" else (x,)
            jax.block_until_ready(fn(*args))
            kernel_s, kernels = kernel_time_per_call(fn, args, calls=3)
            if not kernel_s:  # no GPU line (a CPU): wall time, host floor included
                kernel_s, kernels = wall_per_call(fn, args, repeats=3)["median_s"], n if kind != "sum" else 1
            per_kernel = kernel_s / max(kernels, 1)
            rows.append({"kind": kind, "dtype": jnp.dtype(dt).name, "bytes": size, "bytes_moved_per_kernel": moved * size,
                         "kernels_per_call": kernels, "per_kernel_s": per_kernel, "GBps": moved * size / per_kernel / 1e9})
            del x, args
    RESULTS["micro"]["bandwidth_kinds"] = rows
    log("bandwidth by kind: " + ", ".join(f"{r['kind']}-{r['dtype']} {r['bytes'] >> 20}MiB {r['GBps']:.0f}" for r in rows))


@guarded("micro.matmul")
def micro_matmul(smoke: bool) -> None:
    import jax
    import jax.numpy as jnp

    rows = []
    key = jax.random.PRNGKey(1)
    for n in ((256, 512) if smoke else (1024, 2048, 4096, 8192)):
        a = jax.random.normal(key, (n, n), jnp.bfloat16)
        b = jax.random.normal(jax.random.fold_in(key, 1), (n, n), jnp.bfloat16)
        f = jax.jit(lambda a, b: a @ b)
        r = wall_per_call(f, (a, b), repeats=3 if smoke else 10, inner=5 if smoke else 20)
        r.update(m=n, n=n, k=n, flops=2 * n**3, TFLOPS=2 * n**3 / r["median_s"] / 1e12)
        rows.append(r)
    RESULTS["micro"]["matmul"] = rows
    log("matmul: " + ", ".join(f"{r['m']} {r['TFLOPS']:.0f}" for r in rows))


def profiled(fn, args, calls: int, read):
    """read(trace_dir) of a profile of `calls` calls of fn (jax's profiler, Perfetto
    trace), the trace removed afterwards."""
    import jax

    trace_dir = tempfile.mkdtemp(prefix="trace_micro_")
    try:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            out = None
            for _ in range(calls):
                out = fn(*args)
            jax.block_until_ready(out)
        return read(trace_dir)
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)


def profiled_kernels(fn, args, calls: int) -> list[tuple[str, float]] | None:
    """[(kernel name, us)] of the GPU kernels of `calls` profiled calls, in order (memsets
    and copies left out); None when the profile has no GPU line (on a CPU)."""
    from costmodel.learn.gpu import gpu_kernel_events

    by_module = profiled(fn, args, calls, gpu_kernel_events)
    return None if by_module is None else [k for per_module in by_module.values() for k in per_module]


def kernel_time_per_call(fn, args, calls: int) -> tuple[float, float]:
    """(GPU kernel seconds per call, kernels per call) from a profile of `calls` calls:
    the time the device spends in the call's kernels, without the host's dispatch (a
    jitted call costs tens of microseconds on the host, more than a short kernel).
    (0, 0) when the profile has no GPU line (on a CPU)."""
    kernels = profiled_kernels(fn, args, calls)
    if kernels is None:
        return 0.0, 0.0
    return sum(d for _name, d in kernels) / calls / 1e6, len(kernels) / calls


def kernel_names_of_a_call(fn, args, calls: int = 2) -> list[tuple[str, float]]:
    """[(kernel name, us)] of the last of `calls` profiled calls: which library kernels
    (cuDNN's tile sizes, split-K, padding and slice kernels) a call runs. [] without a
    GPU line (on a CPU)."""
    kernels = profiled_kernels(fn, args, calls) or []
    per_call = len(kernels) // calls if len(kernels) % calls == 0 else len(kernels)
    return [(name[:300], dur) for name, dur in kernels[-per_call:]] if per_call else []


# 3x3 stride-1 convolutions at 56x56, batch 256, C in = C out: which tile cuDNN picks by
# channel count (docs/backends.md: the 64-channel ones run 256x64x32 tiles at 485 TFLOP/s
# on the H200 where 128-channel ones run 128x128x64 at 740-820)
CONV_TILE_CHANNELS = (32, 48, 64, 96, 128, 192, 256)


@guarded("micro.conv_tiles")
def micro_conv_tiles(smoke: bool) -> None:
    """Per channel count: forward, input and filter gradient of a 3x3 convolution, GPU
    kernel time per call and the kernels' names (the tile sizes cuDNN picks); then the
    stride-2 input gradient of ResNet-18's 56 -> 28 convolution with a consumer that the
    slice of XLA's padding legalization fuses into (as in a training step), against the
    same gradient returned alone (three kernels, one of them that slice)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    batch, hw = (2, 8) if smoke else (256, 56)
    key = jax.random.PRNGKey(7)
    rows = []

    def conv_fn(s):
        return lambda x, wt: lax.conv_general_dilated(x, wt, (s, s), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    for c in (CONV_TILE_CHANNELS[:2] if smoke else CONV_TILE_CHANNELS):
        conv = conv_fn(1)
        x = jax.random.normal(key, (batch, hw, hw, c), jnp.bfloat16)
        wt = jax.random.normal(jax.random.fold_in(key, 1), (3, 3, c, c), jnp.bfloat16) * 0.05
        g = jax.random.normal(jax.random.fold_in(key, 2), (batch, hw, hw, c), jnp.bfloat16)
        row = {"channels": c, "batch": batch, "h": hw, "w": hw, "kernel": 3, "stride": 1,
               "flops": 2 * batch * hw * hw * c * c * 9}  # one FMA = 2 flops
        fns = (("fwd", jax.jit(conv), (x, wt)),
               ("bwd_input", jax.jit(lambda x, wt, g, conv=conv: jax.vjp(lambda x: conv(x, wt), x)[1](g)[0]), (x, wt, g)),
               ("bwd_filter", jax.jit(lambda x, wt, g, conv=conv: jax.vjp(lambda wt: conv(x, wt), wt)[1](g)[0]), (x, wt, g)))
        for what, fn, args in fns:
            jax.block_until_ready(fn(*args))
            kernel_s, kernels = kernel_time_per_call(fn, args, calls=3 if smoke else 10)
            row[f"{what}_s"], row[f"{what}_kernels"] = kernel_s, kernels
            row[f"{what}_names"] = kernel_names_of_a_call(fn, args)
        rows.append(row)
        log(f"conv_tiles C={c}: fwd {row['fwd_s'] * 1e6:.1f} us, dx {row['bwd_input_s'] * 1e6:.1f} us, "
            f"dw {row['bwd_filter_s'] * 1e6:.1f} us")
    # the stride-2 input gradient, returned alone and with a fusing consumer (x 2)
    c_in, c_out = (8, 16) if smoke else (64, 128)
    conv = conv_fn(2)
    x = jax.random.normal(key, (batch, hw, hw, c_in), jnp.bfloat16)
    wt = jax.random.normal(jax.random.fold_in(key, 1), (3, 3, c_in, c_out), jnp.bfloat16) * 0.05
    y = jax.eval_shape(conv, x, wt)
    g = jax.random.normal(jax.random.fold_in(key, 2), y.shape, jnp.bfloat16)
    strided = {}
    for what, fn in (("alone", jax.jit(lambda x, wt, g: jax.vjp(lambda x: conv(x, wt), x)[1](g)[0])),
                     ("consumed", jax.jit(lambda x, wt, g: jax.vjp(lambda x: conv(x, wt), x)[1](g)[0] * 2))):
        jax.block_until_ready(fn(x, wt, g))
        kernel_s, kernels = kernel_time_per_call(fn, (x, wt, g), calls=3 if smoke else 10)
        strided[what] = {"s": kernel_s, "kernels": kernels, "names": kernel_names_of_a_call(fn, (x, wt, g))}
        log(f"strided input gradient {what}: {kernel_s * 1e6:.1f} us in {kernels:.0f} kernels")
    RESULTS["micro"]["conv_tiles"] = {"rows": rows, "strided_input_gradient": {"batch": batch, "h": hw, "c_in": c_in,
                                                                                "c_out": c_out, **strided}}


# activations of ResNet-18/50 at batch 256 (NHWC, bf16) whose batch-norm statistics are reduced
REDUCE_SHAPES = [(256, 112, 112, 64), (256, 56, 56, 64), (256, 56, 56, 256), (256, 28, 28, 128),
                 (256, 14, 14, 256), (256, 7, 7, 512), (256, 7, 7, 2048)]


@guarded("micro.reduce")
def micro_reduce(smoke: bool) -> None:
    """Batch-norm-style column reductions: sum and sum of squares over N, H, W of a bf16
    NHWC activation, in f32 (one jitted function; XLA forms its reduction kernels).
    GPU kernel time per call (profiled) against the bytes of the input read once."""
    import jax
    import jax.numpy as jnp

    rows = []
    key = jax.random.PRNGKey(5)
    shapes = [(2, 16, 16, 8)] if smoke else REDUCE_SHAPES
    for shape in shapes:
        x = jax.random.normal(key, shape, jnp.bfloat16)

        def stats(x):
            xf = x.astype(jnp.float32)
            return jnp.sum(xf, axis=(0, 1, 2)), jnp.sum(xf * xf, axis=(0, 1, 2))

        fn = jax.jit(stats)
        wall = wall_per_call(fn, (x,), repeats=3 if smoke else 7, inner=3 if smoke else 10)
        kernel_s, kernels = kernel_time_per_call(fn, (x,), calls=3 if smoke else 10)
        t = kernel_s or wall["median_s"]
        nbytes = x.size * 2
        rows.append({"shape": list(shape), "bytes_read": nbytes, "kernel_s": kernel_s, "wall_s": wall["median_s"],
                     "kernels_per_call": kernels, "GBps": nbytes / t / 1e9,
                     # the first reduction and its finalizing ones apart (docs/backends.md)
                     "names": kernel_names_of_a_call(fn, (x,))})
        log(f"reduce {shape}: {nbytes / t / 1e9:.0f} GB/s ({kernels:.0f} kernels)")
    RESULTS["micro"]["reduce"] = rows


# the ResNet stem's max pool (3x3, stride 2, SAME) at batch 256, bf16 NHWC
POOL_SHAPE = (256, 112, 112, 64)


@guarded("micro.pool")
def micro_pool(smoke: bool) -> None:
    """The max pool of the ResNet stem, forward and gradient (select_and_scatter, which
    XLA GPU rewrites into a reduce_window with indices and a scatter), each kernel's name
    and time; then a plain scatter-add of bf16 updates into an array of the pool input's
    size, with the indices of the pool's windows (overlapping: XLA cannot prove them
    unique) and with unique ones: the rate of XLA's scatter kernel, which runs at about
    1.2 TB/s of its HLO bytes in the H100 steps where a loop kernel streams 2.9 TB/s
    (benchmarks/gap_eval.py)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    shape = (2, 16, 16, 8) if smoke else POOL_SHAPE
    key = jax.random.PRNGKey(9)
    x = jax.random.normal(key, shape, jnp.bfloat16)

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

    y = jax.eval_shape(pool, x)
    g = jax.random.normal(jax.random.fold_in(key, 1), y.shape, jnp.bfloat16)
    out = {"shape": list(shape), "bytes_in": x.size * 2, "bytes_out": g.size * 2}
    fns = (("fwd", jax.jit(pool), (x,)),
           ("bwd", jax.jit(lambda x, g: jax.vjp(pool, x)[1](g)[0]), (x, g)))
    # scatter-add of the pooled gradient into the input's shape: the window's top-left
    # element (unique per output element) and a 3x3-overlapping index set
    n, h, w, c = shape
    oh, ow = y.shape[1], y.shape[2]
    bi, hi, wi, ci = jnp.meshgrid(jnp.arange(n), jnp.arange(oh), jnp.arange(ow), jnp.arange(c), indexing="ij")
    unique = jnp.stack([bi, 2 * hi, 2 * wi, ci], -1).reshape(-1, 4).astype(jnp.int32)
    overlapping = jnp.stack([bi, jnp.minimum(2 * hi + 1, h - 1), jnp.minimum(2 * wi + 1, w - 1), ci], -1)
    overlapping = overlapping.reshape(-1, 4).astype(jnp.int32)
    dnums = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0, 1, 2, 3),
                                        scatter_dims_to_operand_dims=(0, 1, 2, 3))
    zeros = jnp.zeros(shape, jnp.bfloat16)
    upd = g.reshape(-1)

    def scatter(unique_indices):
        return jax.jit(lambda z, i, u: lax.scatter_add(z, i, u, dnums, unique_indices=unique_indices))

    fns += (("scatter_add", scatter(False), (zeros, overlapping, upd)),
            ("scatter_add_unique", scatter(True), (zeros, unique, upd)))
    for what, fn, args in fns:
        jax.block_until_ready(fn(*args))
        kernel_s, kernels = kernel_time_per_call(fn, args, calls=3 if smoke else 10)
        out[f"{what}_s"], out[f"{what}_kernels"] = kernel_s, kernels
        out[f"{what}_names"] = kernel_names_of_a_call(fn, args)
        log(f"pool {what}: {kernel_s * 1e6:.1f} us in {kernels:.0f} kernels")
    out["index_bytes"] = unique.size * 4
    RESULTS["micro"]["pool"] = out


def profiled_timeline(fn, args, calls: int) -> list[tuple[str, float, float, str]] | None:
    """[(name, start us, duration us, hlo_op)] of every GPU event (kernels, memsets,
    copies) of `calls` profiled calls, in time order; None without a GPU line."""
    from costmodel.learn.gpu import gpu_trace_events

    events = profiled(fn, args, calls, gpu_trace_events)
    if events is None:
        return None
    return [(str(e.get("name", "")), float(e.get("ts", 0.0)), float(e.get("dur", 0.0)),
             str(e.get("args", {}).get("hlo_op", ""))) for e in events]


def idle_us(rows) -> float:
    """Time between the first event's start and the last one's end when none runs."""
    idle, end = 0.0, None
    for _name, t0, dur, _op in rows:
        if end is not None and t0 > end:
            idle += t0 - end
        end = t0 + dur if end is None else max(end, t0 + dur)
    return idle


@guarded("micro.library_gaps")
def micro_library_gaps(smoke: bool) -> None:
    """The GPU's idle time at the boundaries of library calls: in our H100 profiles of the
    ResNet steps (benchmarks/gap_eval.py) the GPU idles 2-3 us wherever a command buffer
    (XLA's fusions) and a cuDNN call (launched on its own) meet, and 1.6 us between the
    kernels of one cuDNN call. A jitted chain of n (3x3 convolution, elementwise) pairs,
    each depending on the last, against a chain of 2n elementwise kernels: the idle time
    per call of each, from the profile's timeline, and the events per call."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    n = 4 if smoke else 32
    batch, hw, c = (2, 8, 8) if smoke else (32, 28, 128)
    key = jax.random.PRNGKey(11)
    x = jax.random.normal(key, (batch, hw, hw, c), jnp.bfloat16)
    ws = [jax.random.normal(jax.random.fold_in(key, i), (3, 3, c, c), jnp.bfloat16) * 0.05 for i in range(n)]

    def convs(x, ws):
        for w in ws:
            x = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
            x = lax.optimization_barrier(jnp.maximum(x, 0) * 0.5)
        return x

    def elementwise(x, ws):
        for _ in ws:
            x = lax.optimization_barrier(x * 1.0001 + 1)
            x = lax.optimization_barrier(jnp.maximum(x, 0) * 0.5)
        return x

    out = {"pairs": n, "shape": [batch, hw, hw, c]}
    for what, f in (("conv_chain", jax.jit(convs)), ("elementwise_chain", jax.jit(elementwise))):
        jax.block_until_ready(f(x, ws))
        calls = 2 if smoke else 5
        rows = profiled_timeline(f, (x, ws), calls)
        if rows is None:  # no GPU line (a CPU)
            out[what] = {"idle_us_per_call": 0.0, "events_per_call": 0.0}
            continue
        # idle within each call: split the timeline at the calls' boundaries (the largest gaps)
        per_call = len(rows) // calls
        idles = [idle_us(rows[i * per_call:(i + 1) * per_call]) for i in range(calls)]
        out[what] = {"idle_us_per_call": statistics.median(idles), "events_per_call": per_call,
                     "busy_us_per_call": sum(r[2] for r in rows) / calls,
                     "names": sorted({r[0][:120] for r in rows[:per_call]})}
        log(f"library gaps {what}: {out[what]['idle_us_per_call']:.1f} us idle per call, "
            f"{per_call} events per call")
    RESULTS["micro"]["library_gaps"] = out


# (name, H, W, C_in, C_out, kernel, stride): the convolutions of ResNet-18 and -50 at 224x224
CONVS = [
    ("stem_7x7_s2", 224, 224, 3, 64, 7, 2),
    ("r18_56_3x3_64", 56, 56, 64, 64, 3, 1),
    ("r18_28_3x3_128", 28, 28, 128, 128, 3, 1),
    ("r18_14_3x3_256", 14, 14, 256, 256, 3, 1),
    ("r18_7_3x3_512", 7, 7, 512, 512, 3, 1),
    ("r18_56_3x3_s2_128", 56, 56, 64, 128, 3, 2),
    ("r50_56_1x1_64_256", 56, 56, 64, 256, 1, 1),
    ("r50_56_1x1_256_64", 56, 56, 256, 64, 1, 1),
    ("r50_28_1x1_512_128", 28, 28, 512, 128, 1, 1),
    ("r50_14_1x1_1024_256", 14, 14, 1024, 256, 1, 1),
    ("r50_7_1x1_512_2048", 7, 7, 512, 2048, 1, 1),
]


@guarded("micro.conv")
def micro_conv(smoke: bool) -> None:
    import jax
    import jax.numpy as jnp
    from jax import lax

    batch = 2 if smoke else 256
    rows = []
    key = jax.random.PRNGKey(2)
    for name, h, w, cin, cout, k, s in (CONVS[:2] if smoke else CONVS):
        x = jax.random.normal(key, (batch, h, w, cin), jnp.bfloat16)
        wt = jax.random.normal(jax.random.fold_in(key, 1), (k, k, cin, cout), jnp.bfloat16) * 0.05
        pad = "SAME"

        def conv(x, wt, s=s):
            return lax.conv_general_dilated(x, wt, (s, s), pad, dimension_numbers=("NHWC", "HWIO", "NHWC"))

        y = jax.eval_shape(conv, x, wt)
        g = jax.random.normal(jax.random.fold_in(key, 2), y.shape, jnp.bfloat16)
        oh, ow = y.shape[1], y.shape[2]
        flops = 2 * batch * oh * ow * cout * cin * k * k  # one FMA = 2 flops
        fwd = jax.jit(conv)
        dx = jax.jit(lambda x, wt, g: jax.vjp(lambda x: conv(x, wt), x)[1](g)[0])
        dw = jax.jit(lambda x, wt, g: jax.vjp(lambda wt: conv(x, wt), wt)[1](g)[0])
        row = {"name": name, "batch": batch, "h": h, "w": w, "c_in": cin, "c_out": cout, "kernel": k,
               "stride": s, "flops": flops}
        for what, fn, args in (("fwd", fwd, (x, wt)), ("bwd_input", dx, (x, wt, g)), ("bwd_filter", dw, (x, wt, g))):
            r = wall_per_call(fn, args, repeats=3 if smoke else 7, inner=3 if smoke else 10)
            row[f"{what}_wall_s"] = r["median_s"]  # per call; bounded below by host dispatch
            kernel_s, kernels = kernel_time_per_call(fn, args, calls=3 if smoke else 10)
            row[f"{what}_kernels"] = kernels
            row[f"{what}_s"] = kernel_s if kernel_s else r["median_s"]
            row[f"{what}_TFLOPS"] = flops / row[f"{what}_s"] / 1e12
            row[f"{what}_names"] = kernel_names_of_a_call(fn, args)  # cuDNN's tiles, pads, slices
        rows.append(row)
        log(f"conv {name}: fwd {row['fwd_TFLOPS']:.0f}, dx {row['bwd_input_TFLOPS']:.0f}, "
            f"dw {row['bwd_filter_TFLOPS']:.0f} TFLOP/s")
    RESULTS["micro"]["conv"] = rows


# ---------------------------------------------------------------------------
# training steps
# ---------------------------------------------------------------------------


def summarize_trace(path: str, steps: int) -> dict:
    """Per (process, thread) line of a Perfetto trace: events and summed duration per step."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    pname, tname = {}, {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pname[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            tname[(e["pid"], e.get("tid"))] = e["args"]["name"]
    lines: dict = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        p = pname.get(e["pid"], str(e["pid"]))
        if "host" in p.lower() and "gpu" not in p.lower():
            continue
        key = f"{p} | {tname.get((e['pid'], e.get('tid')), e.get('tid'))}"
        line = lines.setdefault(key, {"events": 0, "dur_us": 0.0})
        line["events"] += 1
        line["dur_us"] += float(e.get("dur", 0))
    return {k: {"events_per_step": v["events"] / steps, "ms_per_step": v["dur_us"] / steps / 1e3}
            for k, v in sorted(lines.items())}


TRACES_MAX_BYTES = 15 << 20  # one file back from the device machine: 16 MiB at most


def profile(name: str, rec: dict, step, state, steps: int = 3):
    """Profile `steps` calls of `state, out = step(state)`; keep the Perfetto trace (while the
    traces stay under TRACES_MAX_BYTES) and its per-line summary in rec["profile"]."""
    import jax

    trace_dir = tempfile.mkdtemp(prefix=f"trace_{name}_")
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        out = None
        for _ in range(steps):
            state, out = step(state)
        jax.block_until_ready((state, out))
    found = glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)
    if found:
        rec["profile"] = {"steps": steps, "lines": summarize_trace(found[0], steps)}
        with open(found[0], "rb") as f:
            data = f.read()
        if sum(map(len, TRACES.values())) + len(data) <= TRACES_MAX_BYTES:
            TRACES[f"{name}_1_device_{steps}_steps.perfetto.json.gz"] = data
        else:
            rec["profile"]["trace_not_kept"] = f"{len(data)} bytes would pass the {TRACES_MAX_BYTES}-byte limit"
    else:
        rec["profile"] = {"error": f"no perfetto trace under {trace_dir}"}
    shutil.rmtree(trace_dir, ignore_errors=True)
    return state


def step_for(name: str, smoke: bool, mode: str = "train"):
    import jax
    import jax.numpy as jnp

    from costmodel.workloads.export import ExportOptions, make_step, model_and_init

    if smoke:
        opts = ExportOptions(model=name, mode=mode, devices=1, global_batch=2, image_size=64, num_classes=10)
    else:
        opts = ExportOptions(model=name, mode=mode, devices=1, global_batch=256)  # the paper's per-device batch
    device = jax.devices()[0]
    _model, init = model_and_init(opts)
    with jax.default_device(jax.devices("cpu")[0]):  # on the GPU, init's autotuning took minutes (resnet200)
        state = jax.jit(init)()
    state = jax.device_put(state, device)
    dtype = jnp.bfloat16 if opts.dtype == "bf16" else jnp.float32
    key = jax.random.PRNGKey(3)
    b, s = opts.per_device_batch, opts.image_size
    batch = {
        "image": jax.device_put(jax.random.normal(key, (1, b, s, s, 3), dtype), device),
        "label": jax.device_put(jax.random.randint(key, (1, b), 0, opts.num_classes, jnp.int32), device),
    }
    out_axes = (None, 0) if mode == "train" else 0
    step = jax.pmap(make_step(opts), axis_name="batch", in_axes=(None, 0), out_axes=out_axes, devices=[device])
    return opts, step, state, batch


def run_step(name: str, smoke: bool, mode: str = "train") -> None:
    import jax

    rec = RESULTS["steps"].setdefault(name if mode == "train" else f"{name}_{mode}", {})
    opts, step, state, batch = step_for(name, smoke, mode)
    train = mode == "train"

    def one(state):  # one step; returns (next state, what to block on)
        if train:
            return compiled(state, batch)
        return state, compiled(state, batch)

    rec["options"] = json.loads(opts.to_json())
    t0 = time.perf_counter()
    lowered = step.lower(state, batch)
    rec["lower_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    rec["compile_s"] = time.perf_counter() - t0
    log(f"{name}: compiled in {rec['compile_s']:.1f} s")
    HLO[f"{name}_{mode}_1_device.hlo.txt.gz"] = gzip.compress(compiled.as_text().encode(), mtime=0)
    try:
        ca = compiled.cost_analysis()
        ca = ca[0] if isinstance(ca, (list, tuple)) else ca
        rec["xla_cost_analysis"] = {k: float(v) for k, v in (ca or {}).items()
                                   if k in ("flops", "bytes accessed", "transcendentals", "optimal_seconds")}
    except Exception as err:
        rec["xla_cost_analysis_error"] = str(err)
    try:
        ma = compiled.memory_analysis()
        rec["xla_memory_analysis"] = {k: int(getattr(ma, k)) for k in dir(ma)
                                      if k.endswith("size_in_bytes") and not k.startswith("_")}
    except Exception as err:
        rec["xla_memory_analysis_error"] = str(err)
    save()

    for _ in range(3):  # warm-up (autotuning is done at compile time; first runs allocate)
        state, out = one(state)
    jax.block_until_ready((state, out))
    each = []
    for _ in range(3 if smoke else 10):
        t0 = time.perf_counter()
        state, out = one(state)
        jax.block_until_ready((state, out))
        each.append(time.perf_counter() - t0)
    n = 3 if smoke else 10
    t0 = time.perf_counter()
    for _ in range(n):
        state, out = one(state)
    jax.block_until_ready((state, out))
    rec["step_s"] = {"each_median": statistics.median(each), "each_min": min(each), "each": each,
                     "back_to_back_mean": (time.perf_counter() - t0) / n, "back_to_back_steps": n}
    rec["finite"] = bool(jax.numpy.isfinite(out["loss"] if train else out).all())
    log(f"{name}: step {rec['step_s']['each_median'] * 1e3:.2f} ms (median of {len(each)}), "
        f"back to back {rec['step_s']['back_to_back_mean'] * 1e3:.2f} ms")
    save()

    state = profile(f"{name}_{mode}", rec, one, state)
    rec["nvidia_smi_after"] = nvidia_smi()


def run_llama(name: str, smoke: bool) -> None:
    """A LLaMA-3 training step on one device, one sequence (the per-device work of the
    4-device FSDP export, without its collectives): parameters random, AdamW state zero."""
    import jax
    import jax.numpy as jnp

    from costmodel.workloads.export import LlamaExportOptions, lower_llama

    rec = RESULTS["steps"].setdefault(name, {})
    opts = LlamaExportOptions(model=name, mesh={"dp": 1, "fsdp": 1, "tp": 1}, global_batch=1,
                              seq_len=128 if smoke else 2048, layers=2 if smoke else None)
    rec["options"] = json.loads(opts.to_json())
    t0 = time.perf_counter()
    lowered = lower_llama(opts, jax.devices()[:1])
    rec["lower_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = lowered.compile()
    rec["compile_s"] = time.perf_counter() - t0
    log(f"{name}: compiled in {rec['compile_s']:.1f} s")
    HLO[f"{name}_train_1_device.hlo.txt.gz"] = gzip.compress(compiled.as_text().encode(), mtime=0)
    key = jax.random.PRNGKey(4)
    infos, tree = jax.tree_util.tree_flatten(lowered.args_info[0])  # (params, opt_state, batch)
    arrays = []
    for i, a in enumerate(infos):
        k = jax.random.fold_in(key, i)
        if jnp.issubdtype(a.dtype, jnp.integer):
            arrays.append(jax.random.randint(k, a.shape, 0, 1000, a.dtype))
        else:
            arrays.append((jax.random.normal(k, a.shape, jnp.float32) * 0.02).astype(a.dtype))
    params, opt_state, batch = jax.tree_util.tree_unflatten(tree, arrays)
    opt_state = jax.tree_util.tree_map(jnp.zeros_like, opt_state)
    for _ in range(3):
        params, opt_state, metrics = compiled(params, opt_state, batch)
    jax.block_until_ready(metrics)
    each = []
    for _ in range(3 if smoke else 10):
        t0 = time.perf_counter()
        params, opt_state, metrics = compiled(params, opt_state, batch)
        jax.block_until_ready(metrics)
        each.append(time.perf_counter() - t0)
    # back to back, as the ResNet steps (run_step): a step timed alone with a block
    # waits for the host to dispatch it, 9-15% more on our H100/H200 runs
    n = 3 if smoke else 10
    t0 = time.perf_counter()
    for _ in range(n):
        params, opt_state, metrics = compiled(params, opt_state, batch)
    jax.block_until_ready(metrics)
    rec["step_s"] = {"each_median": statistics.median(each), "each_min": min(each), "each": each,
                     "back_to_back_mean": (time.perf_counter() - t0) / n, "back_to_back_steps": n}
    rec["finite"] = bool(jnp.isfinite(metrics["loss"]).all())
    log(f"{name}: step {rec['step_s']['each_median'] * 1e3:.2f} ms (median of {len(each)}), "
        f"back to back {rec['step_s']['back_to_back_mean'] * 1e3:.2f} ms")
    save()
    def llama_step(st):
        p, o, m = compiled(*st, batch)
        return (p, o), m

    profile(f"{name}_train", rec, llama_step, (params, opt_state))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (a check of the script, any machine)")
    ap.add_argument("--models", default="resnet18,resnet50,resnet34,resnet101,resnet200")
    ap.add_argument("--llama", default="llama3-100m", help="LLaMA-3 models to time on one device (comma-separated)")
    ap.add_argument("--mode", choices=("train", "inference"), default="train", help="ResNet step (default train)")
    ap.add_argument("--no-micro", action="store_true")
    ap.add_argument("--micro", default="launch,bandwidth,matmul,conv,reduce", help="which microbenchmarks (comma-separated)")
    args = ap.parse_args(argv)
    log(f"writing to {OUT}")
    RESULTS["argv"] = sys.argv[1:]
    env()
    models = [m for m in args.models.split(",") if m]
    if models:
        guarded(f"step.{models[0]}")(run_step)(models[0], args.smoke, args.mode)
    if not args.no_micro:
        chosen = set(args.micro.split(","))
        for name, fn in (("launch", micro_launch), ("bandwidth", micro_bandwidth), ("bandwidth_kinds", micro_bandwidth_kinds),
                         ("matmul", micro_matmul), ("conv", micro_conv), ("conv_tiles", micro_conv_tiles),
                         ("reduce", micro_reduce), ("pool", micro_pool), ("library_gaps", micro_library_gaps)):
            if name in chosen:
                fn(args.smoke)
    for name in models[1:]:
        guarded(f"step.{name}")(run_step)(name, args.smoke, args.mode)
    for name in [m for m in args.llama.split(",") if m]:
        guarded(f"step.{name}")(run_llama)(name, args.smoke)
    save()
    log(f"done; {len(RESULTS['errors'])} part(s) failed")
    return 1 if RESULTS["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
