"""The learned model's data on a GPU: plan here, measure there, import here.

A GPU is rarely on the machine that trains the model (and this package's MLIR side need
not run there), so a GPU collection is three steps around one plain file:

    rows = plan(programs, hardware="h200")            # here: kernels, features, texts
    write_jsonl(rows, "plan.jsonl.gz")
    measure(["plan.jsonl.gz"], "measured.json")       # on the GPU (jax alone; benchmarks/gpu_kernels.py measure)
    stats = import_measurements(["plan.jsonl.gz"], ["measured.json"], "h200.jsonl")

`plan` forms the kernels of each program (kernel formation `fusions`, costs from the
calibrated backend on `hardware`, which the features' roofline terms read), extracts every
kernel as a standalone program (profiling/extract.py) and keeps its features; each whole
program is planned too (the ground truth of program-level evaluation). The measuring side
compiles each text with XLA's GPU compiler and reads the GPU's own kernel times from a
profile (the sum of the device kernels of one call, memsets and copies left out: the
time the program keeps the GPU busy, without the host's dispatch). `import_measurements`
writes the dataset in the format of `costmodel learn collect` (learn/dataset.py), so
`costmodel learn train|eval` read it unchanged; its meta says which GPU measured it.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from .dataset import KernelRowRecorder, kernel_fields, read_dataset
from .features import SpecNumbers

__all__ = ["plan", "measure", "write_jsonl", "read_jsonl", "read_measurements", "import_measurements"]


def _args(infos) -> list[list]:
    return [[list(i.shape), i.dtype] for i in infos]


class _Planner(KernelRowRecorder):
    """Wraps a backend: every kernel that can run alone becomes a plan row."""

    name = "calibrated"

    def estimate_kernel(self, kernel):
        from ..backends import estimate_kernel
        from ..profiling.extract import NotStandalone, kernel_program

        try:
            prog = kernel_program(kernel)
        except NotStandalone:
            pass  # not measurable alone: no row (the program row still covers it)
        else:
            self.rows.append({"signature": prog.signature, **kernel_fields(kernel, self.spec), "text": prog.text, "args": _args(prog.arg_types)})
        return estimate_kernel(self.inner, kernel)


def plan(programs, *, hardware: str = "h200", fusions=("xla-gpu",), log=None) -> list[dict]:
    """Kernel rows ({"type": "kernel", program, family, fusion, signature, kind, features,
    tokens, text, args}) and program rows ({"type": "program", program, family, text,
    args}) of `programs`; a kernel shared by several formations of one program is planned
    once. The first row is the meta ({"type": "meta", hardware, spec, fusions})."""
    from ..backends import make_backend
    from ..engine import CostEngine
    from ..hardware import load_hardware
    from ..ir import DiagnosticEngine, load_module, make_context
    from ..profiling.ireerun import main_arg_infos

    hw = load_hardware(hardware)
    inner = make_backend("calibrated", hw, {})
    spec = SpecNumbers.of(hw)
    out: list[dict] = [{"type": "meta", "hardware": hardware, "spec": spec.to_json(), "fusions": list(fusions)}]
    for i, p in enumerate(programs):
        seen: set = set()
        rows = []
        for fusion in fusions:
            planner = _Planner(inner, spec)
            ctx = make_context()
            module = load_module(ctx, p.text, p.name)
            CostEngine(planner, hardware, DiagnosticEngine(p.name), backend_name="calibrated", fusion=fusion).run(module)
            for r in planner.rows:
                if r["signature"] not in seen:
                    seen.add(r["signature"])
                    rows.append({"type": "kernel", "program": p.name, "family": p.family, "fusion": fusion, **r})
        out.extend(rows)
        out.append({"type": "program", "program": p.name, "family": p.family, "text": p.text, "args": _args(main_arg_infos(p.text))})
        if log is not None:
            log(f"[{i + 1}/{len(programs)}] {p.name}: {len(rows)} kernels")
    return out


def write_jsonl(rows, path: str) -> None:
    """JSON lines, gzipped when `path` ends in .gz (temp file, then rename)."""
    tmp = f"{path}.tmp{os.getpid()}"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(tmp, "wt") as fh:
        for r in rows:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def read_measurements(paths) -> dict:
    """The measurement files of one plan's runs as one: their results merged (a later run
    wins), the first run's env, each run's figures under "runs"."""
    if isinstance(paths, str):
        paths = [paths]
    merged: dict = {"results": {}, "runs": []}
    for path in paths:
        with open(path) as fh:
            m = json.load(fh)
        merged.setdefault("env", m.get("env", {}))
        merged["results"].update(m.get("results", {}))
        merged["runs"].append({**{k: v for k, v in m.items() if k not in ("results", "env")}, "file": os.path.basename(path)})
    return merged


def import_measurements(plan_paths, measured_paths, out_path: str) -> dict:
    """The dataset (learn/dataset.py format) of plans and their GPU measurements: a kernel
    row per measured kernel (target_ns = the GPU kernel time of one call), a program row
    per program (measured_ns likewise, None where it failed). Overwrites `out_path`."""
    if isinstance(plan_paths, str):
        plan_paths = [plan_paths]
    rows = [r for path in plan_paths for r in read_jsonl(path)]
    measured = read_measurements(measured_paths)
    times = measured["results"]
    meta_plan = rows[0] if rows and rows[0].get("type") == "meta" else {}
    if any(r.get("type") == "meta" and r.get("spec") != meta_plan.get("spec") for r in rows):
        raise ValueError("the plans were made for different hardware")
    env = measured.get("env", {})
    meta = {
        "type": "meta",
        "device": env.get("device", "gpu"),
        # xla-gpu, or xla-cpu where --allow-cpu took wall times (a test of the scripts)
        "runtime": f"xla-{str(env.get('device', 'gpu')).split(':')[0]} (jax {env.get('jax', '?')})",
        "hardware": meta_plan.get("hardware"),
        "threads": 0,
        "clock": "gpu-kernels",
        "pinned": False,
        # a GPU program's measured time is the time its kernels keep the GPU busy: no
        # invocation or host round trip is part of it
        "invocation_ns": 0.0,
        "dispatch_ns": 0.0,
        "spec": meta_plan.get("spec"),
        "measurement": {"runs": measured["runs"], "env": env},
    }
    stats = {"kernel_rows": 0, "programs": 0, "failed": 0}
    out = [meta]
    for r in rows:
        kind = r.get("type")
        if kind == "kernel":
            m = times.get(r["signature"])
            if not m or m.get("status") != "measured":
                stats["failed"] += 1
                continue
            row = {k: v for k, v in r.items() if k not in ("text", "args")}
            row.update(target_ns=m["kernel_ns"], standalone_ns=m["kernel_ns"], spread=m.get("spread", 0.0),
                       gpu_kernels=m.get("kernels", 0.0))
            out.append(row)
            stats["kernel_rows"] += 1
        elif kind == "program":
            m = times.get("program:" + r["program"])
            row = {k: v for k, v in r.items() if k != "args"}
            row["profiled_ns"] = {}
            if m and m.get("status") == "measured":
                row["measured_ns"] = m["kernel_ns"]
                row["gpu_kernels"] = m.get("kernels", 0.0)
            else:
                row["measured_ns"] = None
                row["failure"] = (m or {}).get("reason", "not measured")[:300]
                stats["failed"] += 1
            out.append(row)
            stats["programs"] += 1
    write_jsonl(out, out_path)
    read_dataset(out_path)  # the result reads back as a dataset
    return stats


# ---------------------------------------------------------------------------
# the measuring side (on the GPU machine: jax and numpy, nothing of MLIR)
# ---------------------------------------------------------------------------

_MODULE = re.compile(r'^module(?:\s+@(?:"[^"]*"|[\w$.\-]+))?', re.MULTILINE)


def renamed(text: str, name: str) -> str:
    """The module's text with its name set to `name` (the profile's hlo_module); bare
    functions (an implicit module) get a module of that name around them."""
    out, n = _MODULE.subn(f"module @{name}", text, count=1)
    return out if n else f"module @{name} {{\n{text}\n}}\n"


def plan_items(plan_paths: list[str]) -> list[tuple[str, str, list]]:
    """(key, text, args) of every distinct kernel (key: its signature) and program
    (key: 'program:<name>') of the plans."""
    items, seen = [], set()
    for line in _lines(plan_paths):
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("type") == "kernel":
            key = r["signature"]
        elif r.get("type") == "program":
            key = "program:" + r["program"]
        else:
            continue
        if key not in seen:
            seen.add(key)
            items.append((key, r["text"], r["args"]))
    return items


def _lines(paths):
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as fh:
            yield from fh


_NP = {"f64": "float64", "f32": "float32", "f16": "float16", "i64": "int64", "i32": "int32", "i16": "int16",
       "i8": "int8", "ui64": "uint64", "ui32": "uint32", "ui16": "uint16", "ui8": "uint8", "i1": "bool",
       "complex<f32>": "complex64", "complex<f64>": "complex128"}


def make_input(shape, dtype: str, rng):
    """A random argument: normal floats, small non-negative integers (valid indices of
    most gathers), random booleans."""
    import numpy as np

    if dtype == "bf16":
        import ml_dtypes

        return rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)
    np_dtype = _NP.get(dtype)
    if np_dtype is None:
        raise ValueError(f"no input of element type {dtype}")
    if np_dtype.startswith("float"):
        return rng.standard_normal(shape).astype(np_dtype)
    if np_dtype.startswith("complex"):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np_dtype)
    if np_dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 4, shape).astype(np_dtype)


def compile_text(backend, text: str, device):
    try:
        return backend.compile_and_load(text, [device])
    except TypeError:  # a jaxlib whose compile_and_load takes a DeviceList
        from jax._src.lib import xla_client

        return backend.compile_and_load(text, xla_client.DeviceList((device,)))


def gpu_kernel_times(trace_dir: str) -> dict[str, list[float]] | None:
    """{hlo_module: [duration us of each GPU kernel, in order]}; None without a GPU line."""
    events = gpu_kernel_events(trace_dir)
    return None if events is None else {mod: [d for _name, d in ks] for mod, ks in events.items()}


def gpu_trace_events(trace_dir: str) -> list[dict] | None:
    """Every GPU event (kernels, memsets, copies) of the profiler's Perfetto trace under
    trace_dir, in time order; None without a trace or a GPU line."""
    found = glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)
    if not found:
        return None
    with gzip.open(found[0], "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    gpu = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
           and "gpu" in str(e.get("args", {}).get("name", "")).lower()}
    if not gpu:
        return None
    return sorted((e for e in events if e.get("ph") == "X" and e.get("pid") in gpu), key=lambda e: e.get("ts", 0))


def gpu_kernel_events(trace_dir: str) -> dict[str, list[tuple[str, float]]] | None:
    """{hlo_module: [(kernel name, duration us) of each GPU kernel, in order]}, memsets and
    copies left out; None without a GPU line."""
    events = gpu_trace_events(trace_dir)
    if events is None:
        return None
    out: dict[str, list] = {}
    for e in events:
        if str(e.get("name", "")).lower().startswith(("memset", "memcpy")):
            continue
        mod = str(e.get("args", {}).get("hlo_module", ""))
        out.setdefault(mod, []).append((str(e.get("name", "")), float(e.get("dur", 0.0))))
    return out


def per_call(durations: list[float], calls: int) -> tuple[float, float, float]:
    """(median ns per call, spread (max-min)/median, kernels per call) of `calls` calls
    whose kernels are listed in order (each call the same number of kernels)."""
    n = len(durations)
    if n == 0:
        return 0.0, 0.0, 0.0
    if n % calls:
        t = sum(durations) / calls * 1e3
        return t, 0.0, n / calls
    k = n // calls
    sums = [sum(durations[i * k:(i + 1) * k]) * 1e3 for i in range(calls)]
    med = statistics.median(sums)
    return med, (max(sums) - min(sums)) / med if med else 0.0, float(k)


def measure(
    plan_paths,
    output: str,
    *,
    calls: int = 5,
    chunk: int = 200,
    jobs: int = 8,
    start: int = 0,
    limit: int = 0,
    deadline_s: float = 0.0,
    allow_cpu: bool = False,
    log=print,
) -> int:
    """Compile and profile every program of the plans into `output` (JSON: env, calls,
    results {key: {status, kernel_ns, spread, kernels, method, wall_ns} or {status:
    failed, reason}}); rewritten after every chunk. Returns 0, or 1 when the profile has no
    GPU line and not `allow_cpu`. Needs jax (and numpy) only."""
    import numpy as np
    import jax
    from concurrent.futures import ThreadPoolExecutor
    from jax._src import xla_bridge

    t_start = time.perf_counter()
    items = plan_items(plan_paths)[start:]
    if limit:
        items = items[:limit]
    device = jax.devices()[0]
    backend = xla_bridge.get_backend(device.platform)
    env = {"jax": jax.__version__, "device": f"{device.platform}:{device.device_kind}", "python": sys.version.split()[0]}
    if shutil.which("nvidia-smi"):
        q = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem"
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv"], capture_output=True, text=True)
        env["nvidia_smi"] = (r.stdout or r.stderr).strip()
    results: dict[str, dict] = {}
    out = {"env": env, "calls": calls, "plans": [os.path.basename(p) for p in plan_paths], "items": len(items), "results": results}

    def save():
        tmp = output + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(out, fh, sort_keys=True)
        os.replace(tmp, output)

    log(f"{len(items)} programs to measure on {env['device']}")
    for first in range(0, len(items), chunk):  # first: the index in this run's items
        if deadline_s and time.perf_counter() - t_start > deadline_s:
            out["stopped"] = f"deadline after {first} programs"
            log(out["stopped"])
            break
        batch = list(enumerate(items[first:first + chunk], first))

        def build(entry):
            i, (key, text, arg_list) = entry
            try:
                exe = compile_text(backend, renamed(text, f"m{i}"), device)
                inputs = [jax.device_put(make_input(tuple(s), d, np.random.default_rng(i)), device) for s, d in arg_list]
                jax.block_until_ready(exe.execute(inputs))  # warm
                return i, key, exe, inputs, None
            except Exception as err:  # recorded; the others still run
                return i, key, None, None, f"{type(err).__name__}: {str(err)[:300]}"

        with ThreadPoolExecutor(jobs) as pool:
            built = list(pool.map(build, batch))
        ready = []
        for i, key, exe, inputs, err in built:
            if err is not None:
                results[key] = {"status": "failed", "reason": err}
            else:
                ready.append((i, key, exe, inputs))
        trace_dir = tempfile.mkdtemp(prefix="gpu_kernels_")
        walls = {}
        try:
            with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
                for i, key, exe, inputs in ready:
                    t0 = time.perf_counter()
                    res = None
                    for _ in range(calls):
                        res = exe.execute(inputs)
                    jax.block_until_ready(res)
                    walls[key] = (time.perf_counter() - t0) / calls * 1e9
            by_module = gpu_kernel_times(trace_dir)
        finally:
            shutil.rmtree(trace_dir, ignore_errors=True)
        if by_module is None and not allow_cpu:
            log("the profile has no GPU line: no GPU here (--allow-cpu to take wall times)")
            return 1
        for i, key, exe, inputs in ready:
            if by_module is None:
                results[key] = {"status": "measured", "kernel_ns": walls[key], "spread": 0.0, "kernels": 0.0,
                                "method": "wall", "wall_ns": walls[key]}
            else:
                t, spread, k = per_call(by_module.get(f"m{i}", []), calls)
                results[key] = {"status": "measured", "kernel_ns": t, "spread": spread, "kernels": k,
                                "method": "gpu-profile", "wall_ns": walls[key]}
        del ready, built
        save()
        done = first + len(batch)
        log(f"{done}/{len(items)} measured ({sum(r['status'] == 'failed' for r in results.values())} failed), "
            f"{time.perf_counter() - t_start:.0f} s")
    out["seconds"] = round(time.perf_counter() - t_start, 1)
    save()
    return 0
