"""Measure kernel programs on this host, through the persistent cache.

    prof = KernelProfiler(threads=1, repeats=5)
    r = prof.profile(kernel_program(kernel))    # ProfileResult
    r.kernel_ns      # the kernel's time inside a program: standalone median - invocation_ns
    r.source         # "measured" | "cache" | "failed"
    prof.measured, prof.cached, prof.failed       # counts of this profiler's life
    prof.invocation_ns                            # once per program (calibrate.py)
    prof.measure_program(text)                    # a whole program (the ground truth), cached too

Times are the process CPU time with one worker (threads=1; robust to the other
processes of a shared machine, equal to the wall time on an idle one) and the wall time
with several (calibrate.default_clock; `clock=` overrides).

A kernel's standalone time includes one program invocation (calibrate.py); inside a
program it costs `standalone - invocation_ns`, and never less than `dispatch_ns` (the
marginal cost of one more dispatch), the floor a measured tiny kernel is clamped to.

Cache rows are keyed by everything that changes the number (workers, clock, pinning,
repeats, min_time_ms, warmup_ms: `method`); a timeout failure is no answer for a run
with a longer `timeout_s`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass

from .cache import CachedMeasurement, MeasurementCache
from .calibrate import default_clock, pinned_cpus
from .extract import KernelProgram
from .ireerun import CompileError, RunError, benchmark_vmfb, compile_program, count_dispatches, input_flags, runtime_version

__all__ = ["KernelProfiler", "ProfileResult"]


@dataclass
class ProfileResult:
    source: str  # measured | cache | failed
    standalone_ns: float = 0.0
    kernel_ns: float = 0.0
    spread: float = 0.0
    reason: str = ""
    executables: int = 1  # IREE executables in the compiled kernel (0: no dispatch)


class KernelProfiler:
    def __init__(
        self,
        *,
        threads: int = 1,
        repeats: int = 5,
        warmup_ms: float = 20.0,
        min_time_ms: float = 50.0,
        timeout_s: float = 120.0,
        cache: str = "on",
        progress: bool = True,
        cache_path: str | None = None,
        clock: str = "auto",
        pin: bool = True,
    ):
        from .host import detect_cpu, device_id, host_measurements

        self.runtime = runtime_version()  # ProfilingUnavailable without IREE
        info = detect_cpu()
        self.cores = max(1, int(info["physical_cores"]))
        self.threads_flag = int(threads)
        self.threads = self.cores if threads == 0 else int(threads)
        self.repeats = int(repeats)
        self.warmup_ms = float(warmup_ms)
        self.min_time_ms = float(min_time_ms)
        self.timeout_s = float(timeout_s)
        self.device = device_id(info)
        self.clock = default_clock(self.threads) if clock == "auto" else clock
        self.cpus = pinned_cpus(self.threads, pin)
        # everything that changes the measured number is part of the cache key
        self.method = (
            f"local-task threads={self.threads} clock={self.clock}"
            + (" pinned" if self.cpus else "")
            + f" repeats={self.repeats} min_time_ms={self.min_time_ms:g} warmup_ms={self.warmup_ms:g}"
        )
        self.refresh = cache == "refresh"
        if cache == "off":
            self.cache = MeasurementCache(None)
        elif cache_path is not None:
            self.cache = MeasurementCache(cache_path)
        else:
            self.cache = MeasurementCache.default()
        cal = self._calibration(host_measurements(info)["iree"])
        self.invocation_ns, self.dispatch_ns = cal
        self.measured = 0
        self.cached = 0
        self.failed = 0
        self._memo: dict[str, ProfileResult] = {}
        self._progress = progress
        self._bar = None

    def _calibration(self, iree: dict) -> tuple[float, float]:
        key = f"{self.threads}:{self.clock}"
        inv = iree["invocation_ns_by_threads"].get(key)
        disp = iree["dispatch_ns_by_threads"].get(key)
        if inv is None:  # a worker count the host calibration did not cover: measure it
            from .calibrate import measure_iree_calibration
            from .host import detect_cpu

            extra = measure_iree_calibration(detect_cpu(), threads_list=[self.threads])
            if key not in extra["invocation_ns_by_threads"]:  # a clock of several workers: the wall time
                key = f"{self.threads}:real"
            inv = extra["invocation_ns_by_threads"][key]
            disp = extra["dispatch_ns_by_threads"][key]
        return float(inv), float(disp)

    # -- kernels -----------------------------------------------------------------------
    def lookup(self, signature: str, method: str | None = None) -> CachedMeasurement | None:
        """The cached row, or None; a timeout under a shorter limit than this profiler's
        is no answer (measured again)."""
        row = self.cache.get(signature, self.device, self.runtime, self.method if method is None else method)
        if row is not None and row.status == "failed" and "timeout_s" in row.extra:
            limit = row.extra["timeout_s"]
            if not isinstance(limit, (int, float)) or limit < self.timeout_s:
                return None
        return row

    def profile(self, prog: KernelProgram) -> ProfileResult:
        sig = prog.signature
        hit = self._memo.get(sig)
        if hit is not None:
            return hit
        row = None if self.refresh else self.lookup(sig)
        if row is not None:
            self.cached += 1
            res = self._result(row, "cache")
        else:
            row = self._measure(prog.text, prog.arg_types)
            self.cache.put(sig, self.device, self.runtime, self.method, row)
            if row.status == "measured":
                self.measured += 1
            res = self._result(row, "measured")
        if res.source == "failed":
            self.failed += 1
        self._memo[sig] = res
        return res

    def _result(self, row: CachedMeasurement, source: str) -> ProfileResult:
        if row.status != "measured":
            return ProfileResult("failed", reason=row.reason)
        executables = int(row.extra.get("executables", 1))
        # a program IREE compiled into no dispatch at all (a view, a copy) costs no
        # dispatch inside a program either
        floor = self.dispatch_ns if executables else 0.0
        kernel = max(row.time_ns - self.invocation_ns, floor)
        return ProfileResult(source, row.time_ns, kernel, row.spread, executables=executables)

    def _measure(self, text: str, arg_types) -> CachedMeasurement:
        self._tick()
        try:
            vmfb = compile_program(text, timeout_s=self.timeout_s)
        except CompileError as err:
            if err.timeout_s is not None:  # no answer for a run with a longer timeout_s (lookup)
                return CachedMeasurement("failed", reason=str(err), extra={"timeout_s": err.timeout_s})
            return CachedMeasurement("failed", reason=f"IREE rejects it: {err}")
        with tempfile.TemporaryDirectory(prefix="costmodel-profile-") as tmp:
            path = os.path.join(tmp, "kernel.vmfb")
            with open(path, "wb") as fh:
                fh.write(vmfb)
            try:
                flags = input_flags(arg_types, tmp)
                m = benchmark_vmfb(
                    path,
                    flags,
                    threads=self.threads_flag,
                    repeats=self.repeats,
                    warmup_ms=self.warmup_ms,
                    min_time_ms=self.min_time_ms,
                    timeout_s=self.timeout_s,
                    cpus=self.cpus,
                )
            except RunError as err:
                timed_out = {} if err.timeout_s is None else {"timeout_s": err.timeout_s}
                return CachedMeasurement("failed", reason=str(err), extra=timed_out)
        c = self.clock
        return CachedMeasurement(
            "measured",
            m.median(c),
            m.spread(c),
            m.samples,
            extra={
                "iterations": m.iterations,
                "executables": count_dispatches(vmfb),
                "min_ns": round(m.min(c), 1),
                "real_median_ns": round(m.median("real"), 1),
            },
        )

    # -- whole programs (ground truth) ----------------------------------------------------
    def measure_program(self, text: str, arg_types=None) -> CachedMeasurement:
        """A whole StableHLO program (entry `main`, or its only public function), cached
        under the hash of its text with the method suffixed ' program'."""
        from .ireerun import main_arg_infos

        sig = hashlib.sha256(text.encode()).hexdigest()
        method = self.method + " program"
        row = None if self.refresh else self.lookup(sig, method)
        if row is None:
            row = self._measure(text, main_arg_infos(text) if arg_types is None else arg_types)
            self.cache.put(sig, self.device, self.runtime, method, row)
        return row

    # -- progress --------------------------------------------------------------------------
    def _tick(self) -> None:
        if not self._progress:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(desc="profiling kernels (IREE llvm-cpu)", unit="kernel", disable=None, leave=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
