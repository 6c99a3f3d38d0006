"""JSON read with its nesting bounded (specs, trace manifests, backend_configs, --set
values): pure Python, no MLIR import."""

from __future__ import annotations

import json
import sys

# How deep JSON we read may nest (all of ours nest a few levels). json's C parser recurses
# on the C stack and stops only at Python's recursion limit, which the passes raise to
# ir.DEEP_RECURSION for the IR walkers: under it, 100,000 `[` in a backend_config or a
# --set value overflowed the C stack (a segfault).
JSON_MAX_NESTING = 2_000


def _stack_depth() -> int:
    """The Python frames on the stack (what the recursion limit counts, to a few C-level
    calls)."""
    frame, depth = sys._getframe(1), 1
    while frame is not None:
        frame = frame.f_back
        depth += 1
    return depth


def json_loads(text, **kw):
    """`json.loads` with nesting bounded to JSON_MAX_NESTING levels above the caller,
    whatever the caller's recursion limit (raised for the IR walkers, or not); too deep is
    a ValueError ("nested more than 2,000 levels deep"), as malformed JSON is
    (json.JSONDecodeError)."""
    limit = _stack_depth() + JSON_MAX_NESTING
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)  # exactly: below DEEP_RECURSION, above a deep caller's frames
    try:
        return json.loads(text, **kw)
    except RecursionError:
        raise ValueError(f"nested more than {JSON_MAX_NESTING:,} levels deep") from None
    finally:
        sys.setrecursionlimit(old)


def json_load(fh, **kw):
    """`json.load` of an open file, bounded as `json_loads`."""
    return json_loads(fh.read(), **kw)
