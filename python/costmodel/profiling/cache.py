"""The persistent measurement cache of the `profiled` backend.

One SQLite file, `<cache dir>/profiles.sqlite3`, keyed by

    (signature, device, runtime, method)

- signature: sha256 of the kernel's canonical standalone program (extract.py),
- device: the host id (host.device_id(): CPU model, ISA, logical CPUs),
- runtime: the IREE compiler/runtime versions that compiled and ran it,
- method: what changes the measured quantity (the local-task worker count).

A row holds a measurement (status "measured": median time and the samples' spread) or a
failure (status "failed": the reason, e.g. IREE rejected an op), so a second run of the
same workload neither measures nor recompiles anything. SQLite serializes concurrent
writers (several processes profiling at once share the file).

The cache directory is `$COSTMODEL_CACHE_DIR`, else `$XDG_CACHE_HOME/costmodel`, else
`~/.cache/costmodel`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field

__all__ = ["cache_dir", "MeasurementCache", "CachedMeasurement"]

ENV_CACHE_DIR = "COSTMODEL_CACHE_DIR"


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
        if path is not None:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._db = sqlite3.connect(path if path is not None else ":memory:", timeout=60.0)
        self._db.execute(_SCHEMA)
        self._db.commit()

    @classmethod
    def default(cls) -> "MeasurementCache":
        return cls(os.path.join(cache_dir(), "profiles.sqlite3"))

    def get(self, signature: str, device: str, runtime: str, method: str) -> CachedMeasurement | None:
        row = self._db.execute(
            "SELECT status, time_ns, spread, samples, reason, extra FROM measurements "
            "WHERE signature=? AND device=? AND runtime=? AND method=?",
            (signature, device, runtime, method),
        ).fetchone()
        if row is None:
            return None
        status, time_ns, spread, samples, reason, extra = row
        return CachedMeasurement(status, time_ns, spread, samples, reason, json.loads(extra))

    def put(self, signature: str, device: str, runtime: str, method: str, m: CachedMeasurement) -> None:
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
