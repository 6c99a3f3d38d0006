"""The analytical roofline backend.

    time_ns = max(flops / peak(unit, dtype), bytes_accessed / memory_bandwidth, overhead_ns)

`peak` is the matrix-unit rate of the operand type for dot/convolution (bf16 x bf16 ->
f32 runs at the bf16 rate) and the vector rate of the element type for everything else;
transcendentals count as one flop each on the vector unit. `bound` names the largest
term (ties go to compute). docs/roofline.md has the derivation.
"""

from __future__ import annotations

from ..hardware import HardwareSpec
from ..rules import OpCost
from . import BackendError, KernelCost


class RooflineBackend:
    name = "roofline"
    options = {"overhead_ns": "fixed time added as a floor per op (default 0)"}

    def __init__(self, hardware: HardwareSpec, overhead_ns: str | float = 0, **unknown: str) -> None:
        if unknown:
            key = sorted(unknown)[0]
            raise BackendError(f"backend 'roofline' has no option '{key}' (options: overhead_ns)")
        try:
            self.overhead_ns = float(overhead_ns)
        except ValueError:
            raise BackendError(f"overhead_ns must be a number of nanoseconds, got '{overhead_ns}'") from None
        if self.overhead_ns < 0:
            raise BackendError(f"overhead_ns must be >= 0, got {overhead_ns}")
        self.hardware = hardware
        # bytes per ns = GB/s
        self._bytes_per_ns = hardware.memory_bandwidth_GBps
        self._peak_cache: dict[tuple[str, str], float] = {}

    def _flops_per_ns(self, unit: str, dtype: str) -> float:
        key = (unit, dtype)
        v = self._peak_cache.get(key)
        if v is None:
            # TFLOP/s = 1e12 flop/s = 1e3 flop/ns
            v = self.hardware.peak_TFLOPS("matrix" if unit == "matrix" else "vector", dtype) * 1e3
            self._peak_cache[key] = v
        return v

    def estimate_kernel(self, kernel) -> KernelCost:
        """The roofline of a whole kernel: every (unit, element type) share of its work at
        its peak, its external bytes at the memory bandwidth, the larger one wins."""
        compute_ns = 0.0
        for (unit, dtype), work in kernel.flops_by_unit.items():
            compute_ns += work / self._flops_per_ns(unit, dtype)
        memory_ns = (kernel.bytes_read + kernel.bytes_written) / self._bytes_per_ns
        floor_ns = self.overhead_ns * max(1, kernel.launches)
        t = max(compute_ns, memory_ns, floor_ns)
        if t == 0.0 or (floor_ns >= compute_ns and floor_ns >= memory_ns and floor_ns > 0):
            return KernelCost(t, "overhead")
        return KernelCost(t, "compute" if compute_ns >= memory_ns else "memory")

    def estimate(self, cost: OpCost) -> tuple[float, str]:
        work = cost.flops + cost.transcendentals
        compute_ns = work / self._flops_per_ns(cost.unit, cost.dtype) if work else 0.0
        memory_ns = (cost.bytes_read + cost.bytes_written) / self._bytes_per_ns
        t = max(compute_ns, memory_ns, self.overhead_ns)
        if t == 0.0 or (self.overhead_ns >= compute_ns and self.overhead_ns >= memory_ns and self.overhead_ns > 0):
            return t, "overhead"
        return t, ("compute" if compute_ns >= memory_ns else "memory")
