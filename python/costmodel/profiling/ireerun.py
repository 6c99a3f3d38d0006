"""Compile StableHLO with IREE (llvm-cpu) and time it with `iree-benchmark-module` on the
`local-task` driver: the measuring instrument of the `profiled` backend and the ground
truth of every CPU accuracy figure (whole programs: `measure_program`).

IREE has its own MLIR: programs cross over as text (`iree.compiler.tools.compile_str`
runs `iree-compile`), never as jaxlib objects. Timing is Google Benchmark's, inside
`iree-benchmark-module`: a warm-up of `warmup_ms`, then `repeats` repetitions of at least
`min_time_ms` each; the result is the median repetition (and the spread of them), by
wall clock and by the process's CPU time (see Measurement). The
task system gets `threads` workers (`--task_topology_group_count`; 0 = IREE's default,
one per physical core). Inputs are random (normal floats, small non-negative integers,
fair booleans), written as .npy files (f64 ones as f32: iree-compile demotes f64 to f32);
element types numpy cannot write (bf16, f8 ...) are zero-filled by the tool (a rank-0
one as `--input=bf16=0`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

from ..shapes import TensorInfo

__all__ = [
    "ProfilingUnavailable",
    "CompileError",
    "RunError",
    "Measurement",
    "runtime_version",
    "compile_program",
    "benchmark_vmfb",
    "measure_text",
    "input_flags",
    "count_dispatches",
]


class ProfilingUnavailable(RuntimeError):
    """IREE is not installed (the `[iree]` extra)."""


class CompileError(RuntimeError):
    """IREE rejected the program (the message is IREE's first error line), or its
    compilation ran past `timeout_s` (then set: the limit; None otherwise)."""

    def __init__(self, message: str, timeout_s: float | None = None):
        super().__init__(message)
        self.timeout_s = timeout_s


class RunError(RuntimeError):
    """The compiled program failed or timed out in iree-benchmark-module (`timeout_s`:
    the limit it ran past, None for other failures)."""

    def __init__(self, message: str, timeout_s: float | None = None):
        super().__init__(message)
        self.timeout_s = timeout_s


CLOCKS = ("cpu", "real")


@dataclass
class Measurement:
    """Per-invocation times of the repetitions, by clock: "real" (wall time) and "cpu"
    (the process's CPU time, all threads: with one worker it is the wall time the run
    would take on an otherwise idle machine; other processes' time slices do not count)."""

    times_ns: dict  # clock -> sorted per-invocation times of the repetitions
    iterations: int  # invocations per repetition

    def median(self, clock: str) -> float:
        t = self.times_ns[clock]
        n = len(t)
        return t[n // 2] if n % 2 else 0.5 * (t[n // 2 - 1] + t[n // 2])

    def spread(self, clock: str) -> float:
        """(max - min) / median of the repetitions."""
        t = self.times_ns[clock]
        med = self.median(clock)
        return (t[-1] - t[0]) / med if med > 0 else 0.0

    def min(self, clock: str) -> float:
        return self.times_ns[clock][0]

    @property
    def samples(self) -> int:
        return len(self.times_ns["real"])


_VERSION: str | None = None


def runtime_version() -> str:
    """'iree-compiler=X iree-runtime=Y' (part of every cache key)."""
    global _VERSION
    if _VERSION is None:
        from importlib import metadata

        try:
            comp = metadata.version("iree-base-compiler")
            run = metadata.version("iree-base-runtime")
        except metadata.PackageNotFoundError:
            raise ProfilingUnavailable(
                "the profiled backend needs IREE: pip install 'stablehlo-costmodel[iree]' "
                "(iree-base-compiler and iree-base-runtime)"
            ) from None
        _VERSION = f"iree-compiler={comp} iree-runtime={run}"
    return _VERSION


def _benchmark_exe() -> str:
    runtime_version()
    import iree.runtime as rt

    return rt.benchmark_exe()


COMPILE_FLAGS = ("--iree-llvmcpu-target-cpu=host",)


def compile_program(text: str, *, timeout_s: float = 600.0) -> bytes:
    """IREE llvm-cpu flatbuffer of a StableHLO module (text), for this host's CPU."""
    runtime_version()
    from iree.compiler.tools import core

    # iree.compiler.tools.compile_str's command line, run here with a time limit (its own
    # invocation has none)
    options = core.CompilerOptions(input_type="stablehlo", target_backends=["llvm-cpu"], extra_args=list(COMPILE_FLAGS))
    with core.TempFileSaver.implicit() as tfs:
        cl = core.build_compile_command_line("-", tfs, options)
    try:
        proc = subprocess.run(cl, input=text.encode(), capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CompileError(f"iree-compile ran longer than {timeout_s:g} s", timeout_s) from None
    if proc.returncode != 0:
        raise CompileError(_first_error(proc.stderr.decode(errors="replace") or f"iree-compile exit {proc.returncode}"))
    return proc.stdout


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.split("error:", 1)[1].strip()[:300]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (lines[0] if lines else "iree-compile failed")[:300]


_NUMPY_DTYPES = {
    # iree-compile demotes f64 to f32 by default (--iree-input-demote-f64-to-f32): the
    # compiled function takes f32, and an f64 buffer is rejected
    "f64": "float32",
    "f32": "float32",
    "f16": "float16",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "ui64": "uint64",
    "ui32": "uint32",
    "ui16": "uint16",
    "ui8": "uint8",
    "i1": "bool",
    "complex<f32>": "complex64",
    "complex<f64>": "complex128",
}


def input_flags(infos: list[TensorInfo], directory: str, seed: int = 0) -> list[str]:
    """`--input=` flags for random arguments of these types (files under `directory`)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    flags = []
    for i, info in enumerate(infos):
        shape = "x".join(str(d) for d in info.shape)
        np_dtype = _NUMPY_DTYPES.get(info.dtype)
        if np_dtype is None:  # bf16, f8...: zeros of the right type (the tool's own fill)
            # a rank-0 spec needs a value: `--input=bf16` alone is "invalid tensor
            # specification", `--input=bf16=0` is a zero scalar
            flags.append(f"--input={shape}x{info.dtype}" if shape else f"--input={info.dtype}=0")
            continue
        dims = tuple(info.shape)
        if np_dtype.startswith("float"):
            arr = rng.standard_normal(dims).astype(np_dtype)
        elif np_dtype.startswith("complex"):
            arr = (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(np_dtype)
        elif np_dtype == "bool":
            arr = rng.integers(0, 2, dims).astype(bool)
        else:  # small non-negative integers: valid indices of most gathers
            arr = rng.integers(0, 4, dims).astype(np_dtype)
        path = os.path.join(directory, f"arg{i}.npy")
        np.save(path, np.asarray(arr))
        flags.append(f"--input=@{path}")
    return flags


def benchmark_vmfb(
    vmfb_path: str,
    inputs: list[str],
    *,
    threads: int = 1,
    repeats: int = 5,
    warmup_ms: float = 20.0,
    min_time_ms: float = 50.0,
    timeout_s: float = 120.0,
    function: str = "main",
    cpus: tuple[int, ...] | None = None,
) -> Measurement:
    """Times of one invocation of `function` (ns); `cpus`: run the tool pinned to these
    CPUs (its main thread and its workers)."""
    out_json = vmfb_path + ".bench.json"
    args = [
        _benchmark_exe(),
        f"--module={vmfb_path}",
        "--device=local-task",
        f"--function={function}",
        f"--task_topology_group_count={int(threads)}",
        f"--benchmark_repetitions={int(repeats)}",
        f"--benchmark_min_time={min_time_ms / 1e3:.4f}s",
        f"--benchmark_min_warmup_time={warmup_ms / 1e3:.4f}",
        f"--benchmark_out={out_json}",
        "--benchmark_out_format=json",
        "--print_statistics=false",
        *inputs,
    ]
    try:
        with _affinity(cpus):  # the child inherits this thread's CPU set (no preexec_fn: no fork)
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RunError(f"iree-benchmark-module ran longer than {timeout_s:g} s", timeout_s) from None
    if proc.returncode != 0 or not os.path.exists(out_json):
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise RunError(f"iree-benchmark-module failed: {(msg[-1] if msg else 'exit ' + str(proc.returncode))[:300]}")
    with open(out_json) as fh:
        report = json.load(fh)
    runs = [b for b in report.get("benchmarks", []) if b.get("run_type") == "iteration"]
    if not runs:
        raise RunError("iree-benchmark-module reported no repetition")
    unit = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    times = {
        clock: sorted(float(b[f"{clock}_time"]) * unit[b.get("time_unit", "ns")] for b in runs) for clock in CLOCKS
    }
    return Measurement(times, int(runs[0].get("iterations", 0)))


class _affinity:
    """Restrict the calling thread to `cpus` for the `with` block (Linux: pid 0 is the
    calling thread), so that a process it spawns starts pinned."""

    def __init__(self, cpus):
        self.cpus = cpus
        self.old = None

    def __enter__(self):
        if self.cpus and hasattr(os, "sched_setaffinity"):
            self.old = os.sched_getaffinity(0)
            os.sched_setaffinity(0, self.cpus)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            os.sched_setaffinity(0, self.old)
        return False


_DISPATCH_RE = re.compile(rb"_dispatch_(\d+)")


def count_dispatches(vmfb: bytes) -> int:
    """Dispatches (executable entry points `<fn>_dispatch_<n>_...`) in a compiled
    program; 0 when IREE turned it into copies/views alone."""
    return len(set(_DISPATCH_RE.findall(vmfb)))


def measure_text(
    text: str,
    *,
    threads: int = 1,
    repeats: int = 5,
    warmup_ms: float = 20.0,
    min_time_ms: float = 50.0,
    timeout_s: float = 120.0,
    arg_infos: list[TensorInfo] | None = None,
    seed: int = 0,
) -> Measurement:
    """Compile a StableHLO module whose entry is `@main` and time it (ns, median)."""
    vmfb = compile_program(text, timeout_s=timeout_s)
    if arg_infos is None:
        arg_infos = main_arg_infos(text)
    with tempfile.TemporaryDirectory(prefix="costmodel-profile-") as tmp:
        path = os.path.join(tmp, "program.vmfb")
        with open(path, "wb") as fh:
            fh.write(vmfb)
        flags = input_flags(arg_infos, tmp, seed)
        return benchmark_vmfb(
            path,
            flags,
            threads=threads,
            repeats=repeats,
            warmup_ms=warmup_ms,
            min_time_ms=min_time_ms,
            timeout_s=timeout_s,
        )


def main_arg_infos(text: str) -> list[TensorInfo]:
    """TensorInfo of the arguments of the module's `main` (or only public) function."""
    from ..ir import load_module, make_context
    from ..shapes import type_info

    ctx = make_context(allow_unregistered_dialects=True)
    module = load_module(ctx, text, "<program>")
    from ..ir import ir

    with ctx:
        public = []
        for op in module.regions[0].blocks[0].operations:
            op = op.operation
            if op.name != "func.func":
                continue
            name = ir.StringAttr(op.attributes["sym_name"]).value
            vis = ir.StringAttr(op.attributes["sym_visibility"]).value if "sym_visibility" in op.attributes else "public"
            if vis == "public":
                public.append((name, op))
        pick = [fn for name, fn in public if name == "main"] or [fn for _, fn in public[:1]]
        if not pick:
            raise RunError("the program has no public function")
        ftype = ir.FunctionType(ir.TypeAttr(pick[0].attributes["function_type"]).value)
        return [type_info(t) for t in ftype.inputs]
