"""Cost backends: turn an op's counts into time on a piece of hardware.

A backend is a class constructed as `Backend(hardware, **options)` (options are the
string `key=value` pairs of the pass that the pass itself does not know) with

    name: str                                    # e.g. "roofline"
    def estimate(self, cost: OpCost) -> tuple[float, str]   # (time_ns, bound)

where bound is "compute", "memory" or "overhead". Backends are found through the entry
point group `costmodel.backends` (so any installed package can add one) and through
`register_backend()` for in-process use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..hardware import HardwareSpec
from ..rules import MATRIX, NONE, VECTOR, OpCost

__all__ = [
    "Backend",
    "BackendError",
    "KernelCost",
    "estimate_kernel",
    "register_backend",
    "get_backend",
    "list_backends",
    "make_backend",
]

ENTRY_POINT_GROUP = "costmodel.backends"


class BackendError(ValueError):
    """Unknown backend or bad backend option (one-line user error)."""


@dataclass
class KernelCost:
    """What a backend says about one kernel: its time, what bounds it, and any detail
    it wants to expose (written into `costmodel.kernel_cost`: ints, floats, strings)."""

    time_ns: float
    bound: str  # compute | memory | overhead
    detail: dict = field(default_factory=dict)


class Backend(Protocol):
    name: str

    def __init__(self, hardware: HardwareSpec, **options: str) -> None: ...

    def estimate(self, cost: OpCost) -> tuple[float, str]: ...

    # Optional, kernel level (costmodel.kernels.Kernel: ops, kind, flops_by_unit,
    # bytes_read/written of its external values, launches, gemm shape). Backends without
    # it get `estimate()` of the kernel's summed counts (see estimate_kernel).
    # def estimate_kernel(self, kernel) -> KernelCost: ...


def kernel_as_op_cost(kernel) -> OpCost:
    """A kernel's counts as one OpCost (for per-op backends): the unit and element type
    of its largest share of work."""
    unit, dtype = NONE, "f32"
    if kernel.flops_by_unit:
        unit, dtype = max(kernel.flops_by_unit.items(), key=lambda kv: (kv[0][0] == MATRIX, kv[1]))[0]
    elif kernel.ops:
        unit = VECTOR
    return OpCost(
        flops=kernel.flops,
        transcendentals=kernel.transcendentals,
        bytes_read=kernel.bytes_read,
        bytes_written=kernel.bytes_written,
        unit=unit,
        dtype=dtype,
    )


def estimate_kernel(backend, kernel) -> KernelCost:
    """The backend's kernel-level estimate, or its per-op estimate of the summed counts."""
    fn = getattr(backend, "estimate_kernel", None)
    if fn is not None:
        return fn(kernel)
    t, bound = backend.estimate(kernel_as_op_cost(kernel))
    return KernelCost(float(t), bound)


_REGISTERED: dict[str, type] = {}
_BUILTIN = {
    "calibrated": "costmodel.backends.calibrated:CalibratedBackend",
    "learned": "costmodel.backends.learned:LearnedBackend",
    "profiled": "costmodel.backends.profiled:ProfiledBackend",
    "roofline": "costmodel.backends.roofline:RooflineBackend",
}


def register_backend(name: str, cls: type) -> None:
    """Register a backend class in-process (takes precedence over entry points)."""
    _REGISTERED[name] = cls


def _entry_points() -> dict:
    from importlib import metadata  # scanning installed metadata costs ~20 ms: only when needed

    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10 API
        eps = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    return {ep.name: ep for ep in eps}


def list_backends() -> dict[str, str]:
    """name -> where it comes from ("builtin", an entry point value, or "registered")."""
    out = dict(_BUILTIN)
    for name, ep in _entry_points().items():
        out[name] = ep.value
    for name, cls in _REGISTERED.items():
        out[name] = f"registered: {cls.__module__}.{cls.__qualname__}"
    return dict(sorted(out.items()))


def get_backend(name: str) -> type:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in _BUILTIN:  # built in: no entry-point scan (also works from a source tree)
        import importlib

        module, cls = _BUILTIN[name].split(":")
        return getattr(importlib.import_module(module), cls)
    eps = _entry_points()
    if name in eps:
        return eps[name].load()
    raise BackendError(f"unknown backend '{name}' (known: {', '.join(list_backends())})")


def make_backend(name: str, hardware: HardwareSpec, options: dict[str, str]):
    cls = get_backend(name)
    try:
        return cls(hardware, **options)
    except TypeError as err:
        raise BackendError(f"backend '{name}': {err}") from None
