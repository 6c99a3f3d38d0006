"""The persistent measurement cache of the `profiled` backend.

One SQLite file, `<cache dir>/profiles.sqlite3`, keyed by

    (signature, device, runtime, method)

- signature: sha256 of the kernel's canonical standalone program (extract.py),
- device: the host id (host.device_id(): CPU model, ISA, logical CPUs),
- runtime: the IREE compiler/runtime versions that compiled and ran it,
- method: what changes the measured quantity (the local-task worker count, the clock,
  the pinning, and the timing settings: repetitions, their minimum time, the warm-up).

A row holds a measurement (status "measured": median time and the samples' spread) or a
failure (status "failed": the reason, e.g. IREE rejected an op), so a second run of the
same workload neither measures nor recompiles anything. A failure that was a timeout
records its limit (`extra["timeout_s"]`): a run with a longer limit measures again. SQLite
serializes concurrent writers (several processes profiling at once share the file).

A cache that cannot be opened or holds a row no measurement can have (not a database, a
directory, a time that is not a positive finite number of ns below a day, extra that is
not a JSON object) is a CacheError (one line naming the file).

The cache directory is `$COSTMODEL_CACHE_DIR`, else `$XDG_CACHE_HOME/costmodel`, else
`~/.cache/costmodel`.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, field

from ..backends import BackendError
from ..ir import InputError

__all__ = ["cache_dir", "MeasurementCache", "CachedMeasurement", "CacheError"]

ENV_CACHE_DIR = "COSTMODEL_CACHE_DIR"

# no measurement of one invocation takes longer than a day (the longest timeout_s)
MAX_TIME_NS = 86_400e9


class CacheError(BackendError, InputError):
    """The measurement cache or the host calibration is unreadable or corrupt (one line,
    naming the file and what to do). A BackendError (backend construction, the CLI) and
    an InputError (raised while a pass runs: an error diagnostic, no traceback)."""


def cache_dir() -> str:
    """The user cache directory of costmodel (created on demand by its users)."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "costmodel")


@dataclass
class CachedMeasurement:
    status: str  # measured | failed
    time_ns: float = 0.0  # median of the repetitions, as measured (standalone invocation)
    spread: float = 0.0  # (max - min) / median of the repetitions
    samples: int = 0
    reason: str = ""
    extra: dict = field(default_factory=dict)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    signature TEXT NOT NULL,
    device TEXT NOT NULL,
    runtime TEXT NOT NULL,
    method TEXT NOT NULL,
    status TEXT NOT NULL,
    time_ns REAL NOT NULL,
    spread REAL NOT NULL,
    samples INTEGER NOT NULL,
    reason TEXT NOT NULL,
    extra TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (signature, device, runtime, method)
)
"""


class MeasurementCache:
    """Rows of measurements; `path=None` keeps them in memory (cache=off)."""

    def __init__(self, path: str | None):
        self.path = path
        try:
            if path is not None:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._db = sqlite3.connect(path if path is not None else ":memory:", timeout=60.0)
            self._db.execute(_SCHEMA)
            self._db.commit()
        except (OSError, sqlite3.Error) as err:
            raise self._error(f"cannot open it ({_reason(err)})", "delete it or point $COSTMODEL_CACHE_DIR elsewhere") from None

    def _error(self, what: str, fix: str) -> CacheError:
        return CacheError(f"measurement cache '{self.path}': {what}; {fix}")

    @classmethod
    def default(cls) -> "MeasurementCache":
        return cls(os.path.join(cache_dir(), "profiles.sqlite3"))

    def get(self, signature: str, device: str, runtime: str, method: str) -> CachedMeasurement | None:
        try:
            row = self._db.execute(
                "SELECT status, time_ns, spread, samples, reason, extra FROM measurements "
                "WHERE signature=? AND device=? AND runtime=? AND method=?",
                (signature, device, runtime, method),
            ).fetchone()
        except sqlite3.Error as err:
            raise self._error(f"cannot read it ({_reason(err)})", "delete it or point $COSTMODEL_CACHE_DIR elsewhere") from None
        if row is None:
            return None
        bad = _invalid(row)
        if bad:
            raise self._error(
                f"corrupt row for signature {str(signature)[:16]} ({bad})",
                "rerun with cache=refresh to measure it again, or delete the file",
            )
        status, time_ns, spread, samples, reason, extra = row
        return CachedMeasurement(status, float(time_ns), float(spread), int(samples), str(reason), json.loads(extra))

    def put(self, signature: str, device: str, runtime: str, method: str, m: CachedMeasurement) -> None:
        try:
            self._put(signature, device, runtime, method, m)
        except sqlite3.Error as err:
            raise self._error(f"cannot write it ({_reason(err)})", "delete it or point $COSTMODEL_CACHE_DIR elsewhere") from None

    def _put(self, signature: str, device: str, runtime: str, method: str, m: CachedMeasurement) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO measurements VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                signature,
                device,
                runtime,
                method,
                m.status,
                float(m.time_ns),
                float(m.spread),
                int(m.samples),
                m.reason,
                json.dumps(m.extra, sort_keys=True),
                time.time(),
            ),
        )
        self._db.commit()

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]

    def close(self) -> None:
        self._db.close()


def _reason(err: BaseException) -> str:
    return (str(err) or type(err).__name__).splitlines()[0][:200]


def _finite(x, low: float, high: float = math.inf) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and low <= x <= high


def _invalid(row) -> str:
    """What makes a cached row one no measurement can have ('' when it is sound)."""
    status, time_ns, spread, samples, reason, extra = row
    if status not in ("measured", "failed"):
        return f"status {status!r}"
    try:
        extra = json.loads(extra) if isinstance(extra, str) else None
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        return "extra is not a JSON object"
    if status == "failed":
        return ""
    if not _finite(time_ns, 0.0, MAX_TIME_NS) or time_ns <= 0:
        return f"time_ns {time_ns!r} is not a positive number of ns below a day"
    if not _finite(spread, 0.0):
        return f"spread {spread!r}"
    if not isinstance(samples, int) or samples < 1:
        return f"samples {samples!r}"
    executables = extra.get("executables", 1)
    if not isinstance(executables, int) or isinstance(executables, bool) or executables < 0:
        return f"executables {executables!r}"
    return ""
