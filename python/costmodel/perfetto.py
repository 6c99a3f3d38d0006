"""Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing).

One process per rank, one thread (track) each for compute, communication and posted
receives. Times in the JSON are microseconds (the format's unit) with ns precision.
"""

from __future__ import annotations

import json

__all__ = ["chrome_trace", "chrome_trace_bytes"]

TRACKS = {"compute": (1, "compute"), "comm": (2, "communication"), "recv": (3, "receives")}


def chrome_trace(records, num_ranks: int, *, title: str = "stablehlo-costmodel") -> dict:
    """`records`: (rank, track, name, start_ns, end_ns, args|None) tuples."""
    events: list[dict] = []
    used = {(r, track) for r, track, *_ in records}
    for rank in range(num_ranks):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        for track, (tid, label) in TRACKS.items():
            if track == "recv" and (rank, track) not in used:
                continue
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": label}})
    for rank, track, name, start, end, args in sorted(records, key=lambda r: (r[0], r[3], TRACKS[r[1]][0])):
        ev = {
            "name": name,
            "cat": track,
            "ph": "X",
            "pid": rank,
            "tid": TRACKS[track][0],
            "ts": start / 1000.0,
            "dur": (end - start) / 1000.0,
        }
        if args:
            ev["args"] = args
        events.append(ev)
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"generator": title}}


def chrome_trace_bytes(records, num_ranks: int) -> bytes:
    return (json.dumps(chrome_trace(records, num_ranks), separators=(",", ":")) + "\n").encode("utf-8")
