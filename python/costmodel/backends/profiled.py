"""The `profiled` backend: every kernel measured on this machine.

    stablehlo-opt m.mlir --annotate-cost="backend=profiled hardware=host-cpu"
    stablehlo-opt m.mlir --annotate-cost="backend=profiled hardware=host-cpu fusion=xla-gpu repeats=9 threads=1"

Each kernel of the kernel formation (costmodel.kernels; with `fusion=none` every op is a
kernel of its own) is extracted into a standalone program (profiling/extract.py),
compiled with IREE for llvm-cpu and timed with iree-benchmark-module on the local-task
driver (warm-up, `repeats` repetitions, the median; profiling/ireerun.py). Its time
inside a program is the standalone median minus one program invocation, measured on
this host (profiling/calibrate.py); the module's total gets that invocation once
(`program_overhead_ns`), so `total_time_ns` predicts the whole program as IREE's
llvm-cpu local-task runtime runs it.

Measurements are cached (profiling/cache.py: kernel signature, device, IREE version,
workers, clock, pinning, repeats, min_time_ms, warmup_ms) in the user cache dir ($COSTMODEL_CACHE_DIR): a second run measures
nothing. Kernels that cannot run alone (custom calls, collectives, tokens, dynamic
shapes) or that IREE rejects fall back to `calibrated` on the same host spec (to
`roofline` without a calibration block), marked `profile = "fallback"` with the reason
in their `costmodel.kernel_cost`.
"""

from __future__ import annotations

from ..hardware import HardwareSpec, parse_hardware
from ..rules import MATRIX, OpCost
from ..profiling.options import Option, parse_options
from . import BackendError, KernelCost, estimate_kernel

OPTIONS = (
    Option("repeats", int, 5, "repetitions of each measurement (the median counts)", minimum=1, maximum=1000),
    Option("warmup_ms", float, 20.0, "warm-up time before the repetitions", minimum=0, maximum=60_000),
    Option("min_time_ms", float, 50.0, "minimum time of one repetition", minimum=0.001, maximum=60_000),
    Option("threads", int, 1, "local-task workers (0: one per physical core, IREE's default)", minimum=0, maximum=4096),
    Option("timeout_s", float, 120.0, "limit per kernel (compile or run); past it the kernel falls back", minimum=1, maximum=86_400),
    Option("clock", str, "auto", "auto: process CPU time with one worker, wall time with several; real; cpu", choices=("auto", "real", "cpu")),
    Option("pin", str, "on", "on: with one worker, pin the benchmark to one CPU; off", choices=("on", "off")),
    Option("cache", str, "on", "on: read and write the cache; refresh: measure again; off: no cache", choices=("on", "refresh", "off")),
    Option("fallback", str, "calibrated", "backend of kernels that cannot run alone", choices=("calibrated", "roofline")),
    Option("progress", str, "on", "progress bar on a terminal", choices=("on", "off")),
)


def host_spec_for_threads(hardware: HardwareSpec, threads: int) -> HardwareSpec:
    """The host spec of the cores a run with `threads` workers uses (peaks and bandwidth
    of that share; the generated host-cpu spec only)."""
    from ..profiling.host import host_cpu_json

    if not threads:
        return hardware
    return parse_hardware(host_cpu_json(threads=threads), f"host-cpu (generated, {threads} workers)")


def require_host(backend: str, hardware: HardwareSpec, what: str = "measures on this machine") -> None:
    if hardware.name != "host-cpu":
        raise BackendError(f"backend '{backend}' {what}: use hardware=host-cpu (got '{hardware.name}')")


def make_fallback(name: str, hardware: HardwareSpec):
    from .calibrated import CalibratedBackend
    from .roofline import RooflineBackend

    if name == "calibrated" and hardware.calibration:
        return CalibratedBackend(hardware)
    return RooflineBackend(hardware)


def roofline_ns(hardware: HardwareSpec, kernel) -> tuple[float, float]:
    """(compute_ns, memory_ns) of a kernel at the spec's peaks: no run can be faster
    than the larger of the two."""
    compute_ns = sum(
        work / (hardware.peak_TFLOPS("matrix" if unit == MATRIX else "vector", dtype) * 1e3)
        for (unit, dtype), work in kernel.flops_by_unit.items()
    )
    memory_ns = (kernel.bytes_read + kernel.bytes_written) / hardware.memory_bandwidth_GBps
    return compute_ns, memory_ns


def roofline_bound(hardware: HardwareSpec, kernel, time_ns: float, floor_ns: float) -> str:
    compute_ns, memory_ns = roofline_ns(hardware, kernel)
    if max(compute_ns, memory_ns) < floor_ns:
        return "overhead"
    return "compute" if compute_ns >= memory_ns else "memory"


class ProfiledBackend:
    """Every kernel measured on this CPU with IREE llvm-cpu (local-task), cached; hardware=host-cpu."""

    name = "profiled"
    options = {o.name: o.help for o in OPTIONS}
    # with fusion=none the engine hands every op over as a kernel of its own
    kernels_only = True

    def __init__(self, hardware: HardwareSpec, **options: str) -> None:
        opts = parse_options("profiled", OPTIONS, options)
        require_host("profiled", hardware)
        from ..profiling.ireerun import ProfilingUnavailable
        from ..profiling.profiler import KernelProfiler

        try:
            self.profiler = KernelProfiler(
                threads=opts["threads"],
                repeats=opts["repeats"],
                warmup_ms=opts["warmup_ms"],
                min_time_ms=opts["min_time_ms"],
                timeout_s=opts["timeout_s"],
                cache=opts["cache"],
                clock=opts["clock"],
                pin=opts["pin"] == "on",
                progress=opts["progress"] == "on",
            )
        except ProfilingUnavailable as err:
            raise BackendError(str(err)) from None
        self.hardware = host_spec_for_threads(hardware, self.profiler.threads)
        self.fallback_name = opts["fallback"] if (opts["fallback"] == "roofline" or self.hardware.calibration) else "roofline"
        self.fallback = make_fallback(self.fallback_name, self.hardware)
        self.fallbacks = 0

    def estimate_kernel(self, kernel) -> KernelCost:
        from ..profiling.extract import NotStandalone, kernel_program

        try:
            prog = kernel_program(kernel)
        except NotStandalone as err:
            return self._fallback(kernel, f"cannot run alone: {err}")
        r = self.profiler.profile(prog)
        if r.source == "failed":
            return self._fallback(kernel, r.reason)
        bound = roofline_bound(self.hardware, kernel, r.kernel_ns, self.profiler.dispatch_ns)
        detail = {
            "profile": "measured",
            "from_cache": r.source == "cache",
            "standalone_ns": round(r.standalone_ns, 1),
            "invocation_ns": round(self.profiler.invocation_ns, 1),
            "spread": round(r.spread, 4),
            "executables": r.executables,
            "signature": prog.signature[:16],
        }
        time_ns = r.kernel_ns
        # standalone - invocation can fall below what the kernel's arithmetic allows (a
        # kernel shorter than the invocation is clamped to dispatch_ns; the invocation
        # was calibrated under another load): never below its flops at the peak, and say
        # so (the memory side is no floor: a small kernel's bytes come from the caches,
        # faster than the measured DRAM bandwidth)
        lower = roofline_ns(self.hardware, kernel)[0] if r.executables else 0.0
        if time_ns < lower:
            detail.update(floor="roofline", unfloored_ns=round(time_ns, 1))
            time_ns = lower
        return KernelCost(time_ns, bound, detail)

    def _fallback(self, kernel, reason: str) -> KernelCost:
        self.fallbacks += 1
        kc = estimate_kernel(self.fallback, kernel)
        detail = dict(kc.detail or {})
        detail.update(profile="fallback", fallback_backend=self.fallback_name, fallback_reason=reason[:300])
        return KernelCost(kc.time_ns, kc.bound, detail)

    def estimate(self, cost: OpCost) -> tuple[float, str]:
        """Per-op estimates the engine still asks for (the local work of collectives, ops
        inside reduction bodies): the fallback's."""
        return self.fallback.estimate(cost)

    # -- engine hooks -----------------------------------------------------------------
    def program_overhead_ns(self) -> float:
        """One program invocation: what a whole program pays once on top of its kernels."""
        return self.profiler.invocation_ns

    def host_sync_ns(self) -> float:
        """A host round trip inside a program (IREE evaluates a while condition or a
        case predicate on the host: submit, wait, read back): one invocation's cost."""
        return self.profiler.invocation_ns

    def summary_stats(self) -> dict:
        self.profiler.close()
        return {
            "kernels_measured": self.profiler.measured,
            "kernels_from_cache": self.profiler.cached,
            "kernels_fallback": self.fallbacks,
            "threads": self.profiler.threads,
        }
