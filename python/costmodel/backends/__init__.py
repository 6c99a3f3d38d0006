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

from typing import Protocol

from ..hardware import HardwareSpec
from ..rules import OpCost

__all__ = ["Backend", "BackendError", "register_backend", "get_backend", "list_backends", "make_backend"]

ENTRY_POINT_GROUP = "costmodel.backends"


class BackendError(ValueError):
    """Unknown backend or bad backend option (one-line user error)."""


class Backend(Protocol):
    name: str

    def __init__(self, hardware: HardwareSpec, **options: str) -> None: ...

    def estimate(self, cost: OpCost) -> tuple[float, str]: ...


_REGISTERED: dict[str, type] = {}


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
    out = {"roofline": "costmodel.backends.roofline:RooflineBackend"}
    for name, ep in _entry_points().items():
        out[name] = ep.value
    for name, cls in _REGISTERED.items():
        out[name] = f"registered: {cls.__module__}.{cls.__qualname__}"
    return dict(sorted(out.items()))


def get_backend(name: str) -> type:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name == "roofline":  # built in: no entry-point scan (also works from a source tree)
        from .roofline import RooflineBackend

        return RooflineBackend
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
