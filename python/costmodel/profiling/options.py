"""Typed `key=value` options of the measuring/learning backends, validated exactly."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

__all__ = ["Option", "parse_options"]


@dataclass(frozen=True)
class Option:
    name: str
    kind: type  # int | float | str
    default: object
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()


def parse_options(backend: str, spec: tuple[Option, ...], given: dict) -> dict:
    """Defaults overridden by `given` (strings, or values of the right type); raises
    BackendError with one line naming the backend, the option and the value."""
    from ..backends import BackendError

    known = {o.name: o for o in spec}
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (options: {', '.join(sorted(known))})"
            raise BackendError(f"backend '{backend}' has no option '{key}'{hint}")
    out = {}
    for o in spec:
        raw = given.get(o.name, o.default)
        out[o.name] = _value(backend, o, raw)
    return out


def _value(backend: str, o: Option, raw):
    from ..backends import BackendError

    def bad(expect: str):
        return BackendError(f"backend '{backend}': option '{o.name}' expects {expect}, got '{raw}'")

    if o.kind is str:
        v = str(raw)
        if o.choices and v not in o.choices:
            raise bad("one of " + ", ".join(o.choices))
        return v
    if o.kind is int:
        try:
            v = int(str(raw), 10) if not isinstance(raw, int) or isinstance(raw, bool) else raw
        except ValueError:
            raise bad("an integer") from None
    else:
        try:
            v = float(raw)
        except (TypeError, ValueError):
            raise bad("a number") from None
        if not math.isfinite(v):
            raise bad("a finite number")
    if o.minimum is not None and v < o.minimum:
        raise bad(f"a value >= {o.minimum:g}")
    if o.maximum is not None and v > o.maximum:
        raise bad(f"a value <= {o.maximum:g}")
    return v
