"""The learned model's dataset: JSON lines, one object per line.

    {"type": "meta", "device", "runtime", "threads", "clock", "invocation_ns", "dispatch_ns", "spec": {...}}
    {"type": "kernel", "program", "family", "fusion", "signature", "kind", "features": {...},
     "tokens": [...], "target_ns", "standalone_ns", "spread"}
    {"type": "program", "program", "family", "text", "measured_ns", "spread", "profiled_ns": {fusion: ns}}

`collect()` fills it (`costmodel learn collect`): each program is costed with the
profiled backend under several kernel formations (a kernel measured once serves all:
the cache), every measured kernel becomes a row with its features, and the whole program
is measured as well (the ground truth of program-level evaluation). A collection can be
resumed: programs already in the file are skipped.
"""

from __future__ import annotations

import json
import math
import random

from ..jsonio import json_loads
from .features import SpecNumbers, kernel_features, token_sequence

__all__ = ["collect", "read_dataset", "split_by_program", "Dataset"]


class Dataset:
    def __init__(self, meta: dict | None, kernels: list[dict], programs: list[dict]):
        self.meta = meta or {}
        self.kernels = kernels
        self.programs = programs

    def unmeasured_kernels(self) -> int:
        """Kernel rows without a measured time (a GPU plan before its import)."""
        return sum(1 for r in self.kernels if r.get("target_ns") is None)

    def program_names(self) -> list[str]:
        names = {r["program"] for r in self.kernels} | {p["program"] for p in self.programs}
        return sorted(names)


# what makes two collections comparable: the machine and how it was measured
_META_IDENTITY = ("hardware", "device", "runtime", "threads", "clock", "pinned")


def meta_identity(meta: dict | None) -> dict:
    """The entries of a dataset's meta that say where and how it was measured."""
    return {k: (meta or {}).get(k) for k in _META_IDENTITY}


def meta_difference(a: dict | None, b: dict | None) -> str:
    """How two metas' identities differ ('' when they do not): "device 'x' vs 'y', ..."."""
    ia, ib = meta_identity(a), meta_identity(b)
    return ", ".join(f"{k} {ia[k]!r} vs {ib[k]!r}" for k in _META_IDENTITY if ia[k] != ib[k])


def read_dataset(paths) -> Dataset:
    """Read datasets (JSON lines); InputError, one line with file:line, for a line that is
    not a valid row, and for datasets measured on different machines or settings (their
    meta rows differ: a model of both would be of neither)."""
    if isinstance(paths, str):
        paths = [paths]
    meta_box, kernels, programs = [None], [], []
    first_meta: tuple | None = None
    for path in paths:
        meta_box_path = [None]  # this file's meta
        try:
            fh = open(path)
        except OSError as err:
            from ..ir import InputError

            raise InputError(f"cannot read dataset '{path}': {err.strerror}") from None
        with fh:
            lineno = 0
            try:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json_loads(line)
                    except json.JSONDecodeError as err:
                        from ..ir import InputError

                        raise InputError(f"{path}:{lineno}:{err.colno}: invalid JSON: {err.msg}") from None
                    except ValueError as err:  # nested too deep (jsonio)
                        from ..ir import InputError

                        raise InputError(f"{path}:{lineno}: invalid JSON: {err}") from None
                    if not isinstance(row, dict):
                        from ..ir import InputError

                        raise InputError(f"{path}:{lineno}: a dataset line must be a JSON object")
                    why = _row_problem(row)
                    if why:
                        from ..ir import InputError

                        raise InputError(f"{path}:{lineno}: {why}")
                    _add_row(row, kernels, programs, meta_box_path)
            except UnicodeDecodeError:
                from ..ir import InputError

                raise InputError(f"{path}:{lineno + 1}: not a text (JSON lines) dataset: not UTF-8") from None
        meta = meta_box_path[0]
        if meta is not None:
            if first_meta is None:
                first_meta = (path, meta)
                meta_box[0] = meta
            else:
                diff = meta_difference(first_meta[1], meta)
                if diff:
                    from ..ir import InputError

                    raise InputError(
                        f"{path}: measured on another machine or with other settings than {first_meta[0]} ({diff}); "
                        "train or evaluate each on its own"
                    )
    return Dataset(meta_box[0], kernels, programs)


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _row_problem(row: dict) -> str | None:
    """Why a row cannot be used (None: it can): the fields training and evaluation read."""
    kind = row.get("type")
    if kind == "kernel":
        if not isinstance(row.get("program"), str) or not isinstance(row.get("signature"), str):
            return "a kernel row needs 'program' and 'signature' strings"
        if not isinstance(row.get("features"), dict):
            return "a kernel row needs its 'features' object"
        t = row.get("target_ns")
        if t is not None and not _finite_positive(t):  # absent: a plan's row, not measured yet
            return f"a kernel row's 'target_ns' must be a finite time > 0, got {t!r}"
    elif kind == "program":
        if not isinstance(row.get("program"), str):
            return "a program row needs its 'program' name"
        m = row.get("measured_ns")
        if m is not None and not _finite_positive(m):
            return f"a program row's 'measured_ns' must be a finite time > 0 or null, got {m!r}"
        if "text" in row and not isinstance(row["text"], str):
            return "a program row's 'text' must be a string"
    return None


def _add_row(row: dict, kernels: list, programs: list, meta_box: list) -> None:
    """One line's row, by its type (the first meta row is kept; unknown types skipped)."""
    kind = row.get("type")
    if kind == "meta":
        meta_box[0] = meta_box[0] or row
    elif kind == "kernel":
        kernels.append(row)
    elif kind == "program":
        programs.append(row)


def _lock(fh, path: str) -> None:
    """An exclusive lock on the open dataset (POSIX), or InputError when another process
    holds it."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks: nothing to hold
        return
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        from ..ir import InputError

        raise InputError(f"{path}: another `costmodel learn collect` is writing it; wait for it or collect into another file") from None


def split_by_program(names: list[str], test_fraction: float, seed: int = 0) -> tuple[set, set]:
    """Programs (not kernels) go to one side: a test program is never seen in training."""
    names = sorted(names)
    r = random.Random(seed)
    r.shuffle(names)
    n_test = int(round(len(names) * test_fraction))
    return set(names[n_test:]), set(names[:n_test])


def kernel_fields(kernel, spec: SpecNumbers) -> dict:
    """What a dataset row says of a kernel itself: its kind, features and op tokens."""
    return {"kind": kernel.kind, "features": kernel_features(kernel, spec), "tokens": token_sequence(kernel)}


class KernelRowRecorder:
    """A backend wrapped so that its kernels become rows (`rows`) as the engine costs
    them; everything but `estimate_kernel` (estimate, overheads, stats) is the wrapped
    backend's. Subclasses say which kernels and what a row holds."""

    kernels_only = True

    def __init__(self, inner, spec: SpecNumbers):
        self.inner = inner
        self.spec = spec
        self.rows: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _Collector(KernelRowRecorder):
    """Wraps a ProfiledBackend: every measured kernel also becomes a dataset row."""

    name = "profiled"

    def estimate_kernel(self, kernel):
        kc = self.inner.estimate_kernel(kernel)
        d = kc.detail or {}
        if d.get("profile") == "measured":
            self.rows.append(
                {
                    "signature": d["signature"],
                    **kernel_fields(kernel, self.spec),
                    "target_ns": kc.time_ns,
                    "standalone_ns": d["standalone_ns"],
                    "spread": d["spread"],
                }
            )
        return kc


def collect(
    programs,
    out_path: str,
    *,
    fusions=("none", "xla-gpu", "xla-tpu"),
    threads: int = 1,
    repeats: int = 5,
    min_time_ms: float = 20.0,
    warmup_ms: float = 10.0,
    measure_programs: bool = True,
    progress: bool = True,
    log=None,
) -> dict:
    """Profile the kernels (and whole programs) of `programs` into `out_path` (appended)."""
    from ..backends import make_backend
    from ..engine import CostEngine
    from ..hardware import load_hardware
    from ..ir import DiagnosticEngine, load_module, make_context
    from ..profiling.evaluate import measure_whole

    host = load_hardware("host-cpu")
    backend = make_backend(
        "profiled",
        host,
        {
            "threads": str(threads),
            "repeats": str(repeats),
            "min_time_ms": str(min_time_ms),
            "warmup_ms": str(warmup_ms),
            "progress": "on" if progress else "off",
        },
    )
    prof = backend.profiler
    spec = SpecNumbers.of(backend.hardware)
    stats = {"programs": 0, "skipped": 0, "kernel_rows": 0, "failed_programs": 0}
    meta = {
        "type": "meta",
        "device": prof.device,
        "runtime": prof.runtime,
        "threads": prof.threads,
        "clock": prof.clock,
        "pinned": bool(prof.cpus),
        "invocation_ns": prof.invocation_ns,
        "dispatch_ns": prof.dispatch_ns,
        "spec": spec.to_json(),
    }
    with open(out_path, "a") as out:
        _lock(out, out_path)  # one collector per dataset: a second one would write every program twice
        done: set = set()
        ds = read_dataset(out_path)
        if ds.meta:
            diff = meta_difference(ds.meta, meta)
            if diff:
                from ..ir import InputError

                raise InputError(f"{out_path}: collected on another machine or with other settings ({diff}); "
                                 "collect into a new file")
            done = {p["program"] for p in ds.programs}
        else:
            out.write(json.dumps(meta) + "\n")
        for i, p in enumerate(programs):
            if p.name in done:
                stats["skipped"] += 1
                continue
            rows = []
            totals = {}
            for fusion in fusions:
                col = _Collector(backend, spec)
                ctx = make_context()
                module = load_module(ctx, p.text, p.name)
                eng = CostEngine(col, "host-cpu", DiagnosticEngine(p.name), backend_name="profiled", fusion=fusion)
                totals[fusion] = eng.run(module).time_ns
                seen = {r["signature"] for r in rows}
                for r in col.rows:
                    if r["signature"] not in seen:
                        seen.add(r["signature"])
                        rows.append({"type": "kernel", "program": p.name, "family": p.family, "fusion": fusion, **r})
            prow = {"type": "program", "program": p.name, "family": p.family, "text": p.text, "profiled_ns": totals}
            if measure_programs:
                try:
                    prow["measured_ns"] = measure_whole(p.text, prof)
                except RuntimeError as err:
                    prow["measured_ns"] = None
                    prow["failure"] = str(err)[:300]
                    stats["failed_programs"] += 1
            for r in rows:
                out.write(json.dumps(r) + "\n")
            out.write(json.dumps(prow) + "\n")
            out.flush()
            stats["programs"] += 1
            stats["kernel_rows"] += len(rows)
            if log is not None:
                m = prow.get("measured_ns")
                log(f"[{i + 1}/{len(programs)}] {p.name}: {len(rows)} kernels" + (f", {m / 1e3:.1f} us" if m else ""))
    stats["measured"] = prof.measured
    stats["from_cache"] = prof.cached
    prof.close()
    return stats
