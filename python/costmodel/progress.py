"""Progress bars for long runs: tqdm on stderr, shown only when a run lasts more than a
second and stderr is a terminal, or always when `COSTMODEL_PROGRESS=1` (never with
`COSTMODEL_PROGRESS=0`). Output files and stdout are never touched.

    for rank in progress(range(n), total=n, desc="chakra: ranks", unit="rank"):
        ...
"""

from __future__ import annotations

import os
import sys

__all__ = ["progress", "enabled"]

DELAY_S = 1.0


def enabled() -> bool | None:
    """True (forced on), False (forced off) or None (tqdm decides: a terminal)."""
    value = os.environ.get("COSTMODEL_PROGRESS", "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def progress(iterable, *, total: int | None = None, desc: str = "", unit: str = "it", min_total: int = 1000):
    """`iterable`, wrapped in a delayed tqdm bar when it is long enough (`min_total`
    items) to be worth one; the iterable itself otherwise or when tqdm is missing."""
    if total is None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    on = enabled()
    if on is False or (total is not None and total < min_total):
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:  # an optional nicety
        return iterable
    if on is None and not _tty(sys.stderr):
        return iterable
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        delay=0.0 if on else DELAY_S,
        leave=False,
        mininterval=0.5,
        unit_scale=True,
    )


def _tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
