"""Built-in step-time simulator for Chakra trace directories.

Semantics follow ASTRA-sim's workload layer with the analytical congestion-unaware
network (astra-sim main, 2026-03), so that both give the same answer on the same input:

- Per rank one compute stream and one communication stream. A node is ready when all of
  its data_deps and ctrl_deps have finished. Whenever a stream is free, the ready node of
  that stream with the SMALLEST id is issued (ASTRA-sim scans its dependency-free nodes
  in id order and issues those whose resource is free).
- COMP nodes take `duration_micros` x 1000 ns; 0 counts as 1 ns. With
  `roofline-enabled` in system.json they take num_ops / min(local-mem-bw x num_ops /
  tensor_size, peak-perf) instead (truncated to whole ns).
- COMM_COLL nodes (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL) of a group are
  matched across ranks by issue order within the group (`pg_name`; all ranks when it is
  empty or "0"). A collective starts when the last member issues it and ends, on every
  member at once, after the time `costmodel.commmodel.collective_time_ns` gives.
  BROADCAST is replayed from `duration_micros` without synchronisation, as ASTRA-sim does.
- COMM_SEND occupies the communication stream for the point-to-point time and delivers
  the message at its end; COMM_RECV does not occupy the stream (ASTRA-sim lets receives
  through) and finishes when it has been posted and the matching message (same src, dst,
  tag and size, in order) has arrived.
- A rank finishes when its last node finishes. Exposed communication is finish time minus
  the rank's total COMP time (ASTRA-sim's "exposed communication" figure).
"""

from __future__ import annotations

import dataclasses
import glob
import heapq
import json
import os
import re
from typing import Callable

from .jsonio import json_load
from .chakra import et_def_pb2 as pb
from .chakra.io import TraceFormatError, attr_int, attr_value, read_trace

__all__ = [
    "SimNode",
    "RankResult",
    "SimReport",
    "SimulationError",
    "load_trace_dir",
    "simulate",
    "simulate_dir",
    "system_for_dir",
]

COMP, COLL, SEND, RECV = pb.COMP_NODE, pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE
KIND_OF_COMM_TYPE = {
    pb.ALL_REDUCE: "all_reduce",
    pb.ALL_GATHER: "all_gather",
    pb.REDUCE_SCATTER: "reduce_scatter",
    pb.ALL_TO_ALL: "all_to_all",
    pb.BROADCAST: "collective_broadcast",
}


class SimulationError(Exception):
    """A trace that cannot be simulated (one line)."""


@dataclasses.dataclass(slots=True)
class SimNode:
    id: int
    type: int
    name: str
    deps: list
    duration_ns: int = 1
    comm_kind: str = ""
    comm_size: int = 0
    group: tuple = ()
    src: int = -1
    dst: int = -1
    tag: int = 0
    # a compute node's (flops, bytes, ops, kernels) from its Chakra attributes, for the
    # Perfetto trace's slice arguments (None: not a compute node, or none given)
    info: tuple | None = None


@dataclasses.dataclass
class TraceDir:
    directory: str
    prefix: str
    ranks: list[list[SimNode]]
    groups: dict[str, list[int]]
    manifest: dict | None
    system_json: dict | None
    loops: list[list] | None = None  # per rank: chakra.loops.RankLoop of a compact read


@dataclasses.dataclass
class RankResult:
    rank: int
    finish_ns: int
    compute_ns: int
    exposed_comm_ns: int
    comm_busy_ns: int
    nodes: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SimReport:
    step_time_ns: int
    ranks: list[RankResult]
    collectives: int
    p2p_messages: int
    records: list | None = None  # (rank, track, name, start_ns, end_ns, args)
    directory: str | None = None
    collectives_per_rank: int = 0  # collectives of the busiest rank (as export and check say)
    notes: list = dataclasses.field(default_factory=list)  # how long loops were simulated

    @property
    def compute_time_ns(self) -> int:
        return max((r.compute_ns for r in self.ranks), default=0)

    @property
    def exposed_comm_ns(self) -> int:
        """Exposed communication of the slowest rank."""
        slow = max(self.ranks, key=lambda r: r.finish_ns, default=None)
        return slow.exposed_comm_ns if slow else 0

    def one_line(self) -> str:
        return (
            f"step time {_fmt_ns(self.step_time_ns)} (compute {_fmt_ns(self.compute_time_ns)}, "
            f"exposed communication {_fmt_ns(self.exposed_comm_ns)}) over {len(self.ranks)} ranks"
        )

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "step_time_ns": self.step_time_ns,
            "compute_time_ns": self.compute_time_ns,
            "exposed_comm_ns": self.exposed_comm_ns,
            "num_ranks": len(self.ranks),
            "collectives": self.collectives,
            "collectives_per_rank": self.collectives_per_rank,
            "p2p_messages": self.p2p_messages,
            "ranks": [r.to_dict() for r in self.ranks],
            "notes": list(self.notes),
        }

    def render(self) -> str:
        lines = [
            f"step time:              {_fmt_ns(self.step_time_ns)}",
            f"compute time:           {_fmt_ns(self.compute_time_ns)}",
            f"exposed communication:  {_fmt_ns(self.exposed_comm_ns)}",
            f"ranks: {len(self.ranks)}, collectives per rank: {self.collectives_per_rank}, "
            f"collective instances: {self.collectives}, p2p messages: {self.p2p_messages}",
            "",
            f"{'rank':>4}  {'finish':>14}  {'compute':>14}  {'exposed comm':>14}  {'comm busy':>14}  {'nodes':>7}",
        ]
        for r in self.ranks:
            lines.append(
                f"{r.rank:>4}  {_fmt_ns(r.finish_ns):>14}  {_fmt_ns(r.compute_ns):>14}  "
                f"{_fmt_ns(r.exposed_comm_ns):>14}  {_fmt_ns(r.comm_busy_ns):>14}  {r.nodes:>7}"
            )
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3f} us"
    return f"{int(ns)} ns"


# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------


def _find_prefix(directory: str, manifest: dict | None) -> tuple[str, int]:
    found: dict[str, set[int]] = {}
    for path in glob.glob(os.path.join(glob.escape(directory), "*.et")):
        m = re.fullmatch(r"(.+)\.(\d+)\.et", os.path.basename(path))
        if m:
            found.setdefault(m.group(1), set()).add(int(m.group(2)))
    if manifest and manifest.get("prefix") and manifest.get("ranks"):
        prefix, ranks = manifest["prefix"], manifest["ranks"]
        if not isinstance(prefix, str) or isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise SimulationError(f"{directory}/manifest.json: 'prefix' must be a string and 'ranks' a positive integer")
        have = len(found.get(prefix, ()))
        if ranks > have:  # checked before anything is allocated per rank
            raise SimulationError(
                f"{directory}/manifest.json says {ranks} ranks but the directory has {have} {prefix}.<rank>.et files"
            )
        return prefix, ranks
    if not found:
        raise SimulationError(f"{directory}: no <prefix>.<rank>.et files")
    if len(found) > 1:
        raise SimulationError(f"{directory}: several trace prefixes ({', '.join(sorted(found))}); keep one")
    prefix, ranks = next(iter(found.items()))
    return prefix, max(ranks) + 1


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as fh:
            return json_load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise SimulationError(f"{path}: cannot read: {err}") from None


def _roofline(system_json: dict | None):
    if not system_json or not int(system_json.get("roofline-enabled", 0) or 0):
        return None
    try:
        bw = float(system_json["local-mem-bw"]) * 1e9
        peak = float(system_json["peak-perf"]) * 1e12
    except (KeyError, TypeError, ValueError):
        raise SimulationError("system.json enables the roofline but lacks local-mem-bw or peak-perf") from None
    return bw, peak


_EVERYONE: dict[int, tuple] = {}


def _everyone(num_ranks: int) -> tuple:
    """range(num_ranks) as a tuple, built once per rank count (not once per rank: a
    1M-NPU system would make that quadratic)."""
    hit = _EVERYONE.get(num_ranks)
    if hit is None:
        _EVERYONE.clear()
        hit = _EVERYONE[num_ranks] = tuple(range(num_ranks))
    return hit


def convert_nodes(nodes: list, rank: int, num_ranks: int, groups: dict, roofline=None) -> list[SimNode]:
    out = []
    if not nodes:
        return out
    everyone = _everyone(num_ranks)
    for n in nodes:
        attrs = {a.name: a for a in n.attr}
        deps = list(n.data_deps) + [d for d in n.ctrl_deps]
        s = SimNode(n.id, n.type, n.name, deps)
        if n.type == COMP:
            if roofline is not None:
                num_ops = attr_int(attrs["num_ops"]) if "num_ops" in attrs else None
                tensor = attr_int(attrs["tensor_size"]) if "tensor_size" in attrs else None
                if num_ops is None or tensor is None:
                    raise SimulationError(f"rank {rank} node {n.id}: roofline mode needs num_ops and tensor_size")
                if tensor == 0:
                    s.duration_ns = 0  # ASTRA-sim skips such a node
                else:
                    perf = min(roofline[0] * (num_ops / tensor), roofline[1])
                    s.duration_ns = int(num_ops / perf * 1e9) if perf > 0 else 0
            else:
                s.duration_ns = n.duration_micros * 1000 if n.duration_micros else 1
            if "op_count" in attrs:
                s.info = tuple(attr_int(attrs[k]) if k in attrs else 0
                               for k in ("num_ops", "tensor_size", "op_count", "kernel_count"))
        elif n.type in (COLL, SEND, RECV):
            size = attr_int(attrs["comm_size"]) if "comm_size" in attrs else None
            if size is None:
                raise SimulationError(f"rank {rank} node {n.id} ({n.name}): communication node without comm_size")
            s.comm_size = size
            if n.type == COLL:
                ct = attr_int(attrs["comm_type"]) if "comm_type" in attrs else 0
                kind = KIND_OF_COMM_TYPE.get(ct)
                if kind is None:
                    name = pb.CollectiveCommType.Name(ct) if ct in pb.CollectiveCommType.values() else str(ct)
                    raise SimulationError(
                        f"rank {rank} node {n.id}: collective type {name} is not simulated (ASTRA-sim stops on it too)"
                    )
                s.comm_kind = kind
                pg = attr_value(attrs["pg_name"]) if "pg_name" in attrs else ""
                pg = "" if pg is None else str(pg)
                if pg in ("", "0"):
                    s.group = everyone
                else:
                    if pg not in groups:
                        raise SimulationError(f"rank {rank} node {n.id}: communicator group '{pg}' not in comm_group.json")
                    s.group = tuple(groups[pg])
                if kind == "collective_broadcast":
                    s.duration_ns = n.duration_micros * 1000 if n.duration_micros else 1
            else:
                s.src = attr_int(attrs["comm_src"]) if "comm_src" in attrs else rank
                s.dst = attr_int(attrs["comm_dst"]) if "comm_dst" in attrs else rank
                s.tag = attr_int(attrs["comm_tag"]) if "comm_tag" in attrs else 0
        else:
            s.duration_ns = 0  # metadata / invalid / memory nodes: skipped
        out.append(s)
    return out


def load_trace_dir(directory: str, *, full: bool = False) -> TraceDir:
    """The trace's per-rank graphs; long loops the manifest lists stay compact (three
    iterations, `TraceDir.loops`) unless `full`."""
    if not os.path.isdir(directory):
        raise SimulationError(f"{directory}: not a directory")
    manifest = _read_json(os.path.join(directory, "manifest.json"))
    if manifest is not None and not isinstance(manifest, dict):
        raise SimulationError(f"{directory}/manifest.json: not a JSON object")
    prefix, num_ranks = _find_prefix(directory, manifest)
    groups_raw = _read_json(os.path.join(directory, "comm_group.json")) or {}
    groups = {str(k): [int(r) for r in v] for k, v in groups_raw.items()}
    system_json = _read_json(os.path.join(directory, "system.json"))
    roofline = _roofline(system_json)
    ranks = []
    loops: list[list] = []
    per_rank = {}
    if full is False and manifest and manifest.get("prefix") == prefix:
        per_rank = {int(r.get("rank", -1)): r for r in manifest.get("per_rank") or [] if isinstance(r, dict)}
    from .progress import progress

    for rank in progress(range(num_ranks), total=num_ranks, desc="simulate: reading", unit="rank"):
        path = os.path.join(directory, f"{prefix}.{rank}.et")
        if not os.path.exists(path):
            raise SimulationError(f"{path}: missing (the trace has {num_ranks} ranks)")
        compact = _read_compact(path, per_rank.get(rank)) if per_rank else None
        if compact is not None:
            nodes, rank_loops = compact
        else:
            try:
                _meta, nodes = read_trace(path)
            except TraceFormatError as err:
                raise SimulationError(str(err)) from None
            rank_loops = []
        ranks.append(convert_nodes(nodes, rank, num_ranks, groups, roofline))
        loops.append(rank_loops)
    return TraceDir(directory, prefix, ranks, groups, manifest, system_json, loops)


def _read_compact(path: str, entry: dict | None):
    """(nodes, RankLoops) of a rank whose manifest entry lists compact loops, reading
    iterations 0-2 and what follows each loop and skipping the byte ranges of the other
    iterations (the file as the exporter wrote it: same size); None to read it all."""
    from .chakra.io import iter_messages
    from .chakra.loops import RankLoop, expanded_count

    if not entry or not entry.get("loops"):
        return None
    try:
        rank_loops = [
            RankLoop(int(d["start"]), int(d["first"]), int(d["per"]), int(d["trips"]), str(d.get("loc", "")),
                     int(d.get("head", 2)))
            for d in entry["loops"]
        ]
        skips = [(int(d["skip_bytes"][0]), int(d["skip_bytes"][1])) for d in entry["loops"]]
        if os.path.getsize(path) != int(entry["file_bytes"]):
            return None
    except (KeyError, TypeError, ValueError, IndexError, OSError):
        return None
    rank_loops.sort(key=lambda lp: lp.start)
    with open(path, "rb") as fh:
        data = fh.read(skips[0][0])
        for i, (lo, hi) in enumerate(skips):
            fh.seek(hi)
            data += fh.read((skips[i + 1][0] - hi) if i + 1 < len(skips) else -1)
    # expanded-id bounds of every loop: last two iterations map back to iterations 1 and 2
    bounds = []
    extra = 0
    for lp in rank_loops:
        skipped = (lp.trips - lp.held) * lp.per
        last2 = lp.s1 + extra + skipped  # expanded id of iteration trips-2
        bounds.append((lp.end + extra, last2, lp.end + extra + skipped, skipped))
        extra += skipped

    def compact_id(e: int) -> int | None:
        out = e
        for kept_end, last2, end, skipped in bounds:
            if e >= end:
                out -= skipped
            elif e >= last2:
                return out - skipped
            elif e >= kept_end:
                return None  # into a skipped iteration other than the last two
            else:
                return out
        return out

    try:
        messages = iter_messages(data)
        meta = next(messages)
        del meta
        nodes = []
        for raw in messages:
            node = pb.Node()
            node.ParseFromString(raw)
            nodes.append(node)
    except Exception:
        return None
    if expanded_count(len(nodes), rank_loops) != int(entry.get("nodes", -1)):
        return None
    for i, node in enumerate(nodes):
        cid = compact_id(node.id)
        if cid != i:
            return None
        for field in (node.data_deps, node.ctrl_deps):
            mapped = [compact_id(d) for d in field]
            if any(m is None for m in mapped):
                return None
            field[:] = mapped
        node.id = i
    return nodes, rank_loops


def system_for_dir(trace: TraceDir):
    """The SystemSpec a trace directory was written for (manifest, else network.yml)."""
    from . import systems

    manifest = trace.manifest if isinstance(trace.manifest, dict) else {}
    info = manifest.get("system")
    if not isinstance(info, dict):  # a manifest edited by hand: fall back to network.yml
        info = {}
    spec = info.get("spec")
    if isinstance(spec, dict):  # the spec as the trace was written for it
        try:
            return systems.parse_system(spec, os.path.join(trace.directory, "manifest.json"))
        except Exception:  # e.g. a hardware file that moved: the references below
            pass
    for key in ("source", "name"):
        ref = info.get(key)
        if ref and isinstance(ref, str):
            try:
                return systems.load_system(ref)
            except Exception:  # a preset renamed, a file moved: fall back to network.yml
                pass
    loader = getattr(systems, "from_network_yml", None) or getattr(systems, "load_network_yml", None)
    net = os.path.join(trace.directory, "network.yml")
    if loader is not None and os.path.exists(net):
        return loader(net)
    raise SimulationError(
        f"{trace.directory}: cannot tell which system the trace is for (no usable manifest.json system entry)"
    )


def comm_time_for_system(system) -> Callable:
    from .commmodel import collective_time_ns

    cache: dict = {}

    def comm_time(kind: str, size: int, group) -> float:
        key = (kind, size, tuple(group))
        t = cache.get(key)
        if t is None:
            t = collective_time_ns(system, kind, size, list(group))[0]
            cache[key] = t
        return t

    return comm_time


# ---------------------------------------------------------------------------
# the event loop
# ---------------------------------------------------------------------------


class _RankState:
    __slots__ = (
        "rank",
        "nodes",
        "pending",
        "children",
        "ready_comp",
        "ready_comm",
        "comp_busy",
        "comm_busy",
        "done",
        "finish",
        "compute",
        "comm_busy_ns",
        "coll_seq",
        "waiting",
    )

    def __init__(self, rank: int, nodes: list[SimNode]):
        self.rank = rank
        self.nodes = {n.id: n for n in nodes}
        if len(self.nodes) != len(nodes):
            raise SimulationError(f"rank {rank}: duplicate node ids")
        self.pending = {}
        self.children: dict[int, list[int]] = {}
        self.ready_comp: list[int] = []
        self.ready_comm: list[int] = []
        self.comp_busy = False
        self.comm_busy = False
        self.done = 0
        self.finish = 0
        self.compute = 0
        self.comm_busy_ns = 0
        self.coll_seq: dict[tuple, int] = {}
        self.waiting: dict[int, str] = {}
        for n in nodes:
            deps = set(n.deps)
            for d in deps:
                if d not in self.nodes:
                    raise SimulationError(f"rank {rank} node {n.id} depends on node {d}, which is not in the file")
                self.children.setdefault(d, []).append(n.id)
            self.pending[n.id] = len(deps)


class _NotSymmetric(Exception):
    """The one-rank simulation of a symmetric program met a case it cannot stand for."""


def simulate(
    ranks: list[list[SimNode]],
    comm_time: Callable,
    *,
    record: bool = False,
    replicas: int = 0,
) -> SimReport:
    """Run the per-rank graphs; `comm_time(kind, size, group) -> ns` prices communication.

    Events at the same time are handled in the order (time, rank, node id), whatever
    order they were scheduled in: a rank's timeline then depends only on when its own
    events happen. `replicas=N` (with one graph in `ranks`): the program is symmetric,
    N ranks run this same graph and every collective's members issue it together, so
    one rank is simulated and its result stands for all N (see `symmetric_ranks`; a
    collective that takes no time would complete at another rank's turn in the full
    run, so it raises _NotSymmetric and the caller simulates every rank)."""
    if replicas and (len(ranks) != 1 or record):
        raise ValueError("simulate: replicas needs exactly one graph and no records")
    num_ranks = len(ranks)
    states = [_RankState(r, nodes) for r, nodes in enumerate(ranks)]
    events: list = []  # (time, rank, node id, kind, start time): one event per node
    records: list | None = [] if record else None
    collectives: dict[tuple, dict] = {}  # (group, index) -> {rank: issue time}
    coll_count = 0
    p2p_count = 0
    messages: dict[tuple, list] = {}  # (src, dst, tag, size) -> [arrival times] not yet received
    posted: dict[tuple, list] = {}  # (src, dst, tag, size) -> [(rank, node id, post time)]

    def push(t, kind, rank, nid, t_start):
        heapq.heappush(events, (t, rank, nid, kind, t_start))

    def finish_node(st: _RankState, node: SimNode, t: int):
        st.done += 1
        if t > st.finish:
            st.finish = t
        for c in st.children.get(node.id, ()):
            st.pending[c] -= 1
            if st.pending[c] == 0:
                make_ready(st, st.nodes[c], t)

    def make_ready(st: _RankState, node: SimNode, t: int):
        if node.type == COMP:
            heapq.heappush(st.ready_comp, node.id)
        elif node.type in (COLL, SEND):
            heapq.heappush(st.ready_comm, node.id)
        elif node.type == RECV:
            post_recv(st, node, t)
        else:
            push(t, "done", st.rank, node.id, t)  # skipped node types finish at once

    def post_recv(st: _RankState, node: SimNode, t: int):
        key = (node.src, st.rank, node.tag, node.comm_size)
        queue = messages.get(key)
        if queue:
            arrival = queue.pop(0)
            end = max(t, arrival)
            if records is not None:
                records.append((st.rank, "recv", node.name, t, end, {"src": node.src, "bytes": node.comm_size}))
            push(end, "done", st.rank, node.id, t)
        else:
            posted.setdefault(key, []).append((st.rank, node.id, t))
            st.waiting[node.id] = f"recv from rank {node.src} (tag {node.tag}, {node.comm_size} bytes)"

    def issue(st: _RankState, t: int):
        nonlocal coll_count, p2p_count
        if not st.comp_busy and st.ready_comp:
            nid = heapq.heappop(st.ready_comp)
            node = st.nodes[nid]
            st.comp_busy = True
            st.compute += node.duration_ns
            if records is not None:
                info = node.info
                args = None if info is None else {"num_ops": info[0], "tensor_size": info[1], "ops": info[2], "kernels": info[3]}
                records.append((st.rank, "compute", node.name, t, t + node.duration_ns, args))
            push(t + node.duration_ns, "comp_done", st.rank, nid, t)
        if not st.comm_busy and st.ready_comm:
            nid = heapq.heappop(st.ready_comm)
            node = st.nodes[nid]
            st.comm_busy = True
            if node.type == SEND:
                p2p_count += 1
                dur = int(round(comm_time("send", node.comm_size, (st.rank, node.dst))))
                arrival = t + dur
                key = (st.rank, node.dst, node.tag, node.comm_size)
                waiting = posted.get(key)
                if waiting:
                    r, rid, t_post = waiting.pop(0)
                    peer = states[r]
                    peer.waiting.pop(rid, None)
                    if records is not None:
                        peer_node = peer.nodes[rid]
                        records.append((r, "recv", peer_node.name, t_post, arrival, {"src": st.rank, "bytes": node.comm_size}))
                    push(arrival, "done", r, rid, t_post)
                else:
                    messages.setdefault(key, []).append(arrival)
                if records is not None:
                    records.append((st.rank, "comm", node.name, t, arrival, {"dst": node.dst, "bytes": node.comm_size}))
                push(arrival, "comm_done", st.rank, nid, t)
            elif node.comm_kind == "collective_broadcast":
                coll_count += replicas or 1  # every member counts its own
                if records is not None:
                    records.append((st.rank, "comm", node.name, t, t + node.duration_ns, {"bytes": node.comm_size}))
                push(t + node.duration_ns, "comm_done", st.rank, nid, t)
            else:
                group = node.group
                if st.rank not in group:
                    raise SimulationError(f"rank {st.rank} node {nid}: rank is not a member of its collective's group")
                k = st.coll_seq.get(group, 0)
                st.coll_seq[group] = k + 1
                inst = collectives.setdefault((group, k), {"arrivals": {}, "nodes": {}, "desc": None})
                desc = (node.comm_kind, node.comm_size)
                if inst["desc"] is None:
                    inst["desc"] = desc
                elif inst["desc"] != desc:
                    raise SimulationError(
                        f"collective #{k} of group {list(group)}: rank {st.rank} issues {desc[0]} of {desc[1]} bytes "
                        f"but another member issued {inst['desc'][0]} of {inst['desc'][1]} bytes"
                    )
                inst["arrivals"][st.rank] = t
                inst["nodes"][st.rank] = nid
                st.waiting[nid] = f"{node.comm_kind} #{k} of group {list(group)}"
                if replicas or len(inst["arrivals"]) == len(group):
                    coll_count += replicas // len(group) if replicas else 1  # once per group
                    start = max(inst["arrivals"].values())
                    dur = int(round(comm_time(node.comm_kind, node.comm_size, group)))
                    if replicas and dur == 0:
                        raise _NotSymmetric(f"{node.comm_kind} #{k} takes no time")
                    for r, rid in inst["nodes"].items():
                        states[r].waiting.pop(rid, None)
                        if records is not None:
                            rn = states[r].nodes[rid]
                            records.append(
                                (r, "comm", rn.name, inst["arrivals"][r], start + dur,
                                 {"bytes": rn.comm_size, "group": list(group), "wait_ns": start - inst["arrivals"][r]})
                            )
                        push(start + dur, "comm_done", r, rid, inst["arrivals"][r])
                    del collectives[(group, k)]

    # initial ready sets
    for st in states:
        for nid, cnt in st.pending.items():
            if cnt == 0:
                make_ready(st, st.nodes[nid], 0)
    for st in states:
        issue(st, 0)

    from .progress import progress

    bar = progress(None, total=sum(len(st.nodes) for st in states), desc="simulate", unit="node", min_total=200_000)
    tick = 0
    while events:
        t, rank, nid, kind, t_start = heapq.heappop(events)
        if bar is not None:
            tick += 1
            if tick == 4096:
                bar.update(tick)
                tick = 0
        st = states[rank]
        node = st.nodes[nid]
        if kind == "comp_done":
            st.comp_busy = False
        elif kind == "comm_done":
            st.comm_busy = False
            st.comm_busy_ns += t - t_start
        finish_node(st, node, t)
        issue(st, t)
        # a collective completion or a delivered message may unblock several ranks at
        # the same time; they are handled by their own events.

    if bar is not None:
        bar.close()
    stuck = [st for st in states if st.done != len(st.nodes)]
    if stuck:
        st = stuck[0]
        why = next(iter(st.waiting.values()), "a dependency that never finishes")
        raise SimulationError(
            f"deadlock: rank {st.rank} finished {st.done} of {len(st.nodes)} nodes; it waits for {why}"
        )
    results = [
        RankResult(
            rank=rank,
            finish_ns=st.finish,
            compute_ns=st.compute,
            exposed_comm_ns=st.finish - st.compute,
            comm_busy_ns=st.comm_busy_ns,
            nodes=len(st.nodes),
        )
        for st in states
        for rank in (range(replicas) if replicas else (st.rank,))
    ]
    step = max((r.finish_ns for r in results), default=0)
    per_rank = max((sum(1 for n in nodes if n.type == COLL) for nodes in ranks), default=0)
    return SimReport(step, results, coll_count, p2p_count, records, collectives_per_rank=per_rank)


# ---------------------------------------------------------------------------
# long loops: a few iterations simulated, the steady state extrapolated
# ---------------------------------------------------------------------------

# Iteration counts tried for the steady state of a compact loop (K, then K+1, K+2).
STEADY_TRIES = (4, 8, 16, 32, 64, 128)
# A loop that is not steady by then is simulated in full when it has at most this many nodes per rank.
FULL_FALLBACK_NODES = 400_000


def expand_simnodes(nodes: list[SimNode], loops: list, counts: list[int]) -> list[SimNode]:
    """The rank's graph with counts[i] iterations of its compact loop i (chakra.loops)."""
    from .chakra.loops import expand_ids

    if not loops:
        return nodes
    out = []
    ordered = sorted(loops, key=lambda lp: lp.start)
    for node, new_id, dep, mult in expand_ids(nodes, ordered, counts):
        tag = node.tag
        if mult and node.type in (SEND, RECV):
            for lp in ordered:
                if lp.s2 <= node.id < lp.end:
                    step = node.tag - nodes[node.id - lp.per].tag
                    tag = node.tag + mult * step
                    break
        out.append(
            SimNode(new_id, node.type, node.name, [dep(d) for d in node.deps], node.duration_ns, node.comm_kind,
                    node.comm_size, node.group, node.src, node.dst, tag, node.info)
        )
    return out


def _metrics(rep: SimReport) -> list[int]:
    out = [rep.collectives, rep.p2p_messages, rep.collectives_per_rank]
    for r in rep.ranks:
        out += [r.finish_ns, r.compute_ns, r.comm_busy_ns, r.nodes]
    return out


def simulate_loops(
    ranks: list[list[SimNode]], loops: list[list], comm_time: Callable, *, record: bool = False, replicas: int = 0
) -> SimReport:
    """Simulate per-rank graphs whose long loops are compact (`loops[r]`: RankLoops of
    rank r; every rank with loops has the same ones, in the same order).

    Loop i is simulated with K, K+1 and K+2 iterations (the others with the 4 held) for
    K = 4, 8, 16 ...; once one more iteration adds the same amount D to every figure twice in a row
    (per rank finish, compute, busy communication, and the counts), the loop is in its
    steady state and its trips T contribute what K iterations add plus (T - K) x D.
    Exact when, from iteration K on, each iteration's schedule is the previous one shifted
    by D (identical iterations that do not depend on more than their predecessor, as the
    compact form guarantees for the graph, reach such a periodic schedule; the test is
    that two successive increments agree). Several loops add their contributions (each
    measured with the others at 4 iterations). A loop that is not steady by K = 128 is
    simulated in full when small enough, else extrapolated from its last increment with
    a note saying so."""
    if not any(loops):
        return simulate(ranks, comm_time, record=record, replicas=replicas)
    ref = max(loops, key=len)
    n = len(ref)
    if any(rl and len(rl) != n for rl in loops):
        raise SimulationError("the ranks' compact loops do not match (a trace edited by hand?); simulate it with --full")

    def run(counts, rec=False):
        graphs = [expand_simnodes(nodes, rl, counts) if rl else nodes for nodes, rl in zip(ranks, loops)]
        return simulate(graphs, comm_time, record=rec, replicas=replicas)

    base_counts = [lp.held for lp in ref]
    base = run(base_counts, record)
    total = _metrics(base)
    notes = []
    for i in range(n):
        trips = ref[i].trips
        where = f"the loop at {ref[i].loc}" if ref[i].loc else f"loop {i + 1}"
        done = False
        last = None
        for k in STEADY_TRIES:
            if k + 2 >= trips:
                break
            ms = []
            for extra in (0, 1, 2):
                counts = list(base_counts)
                counts[i] = k + extra
                ms.append(_metrics(run(counts)) if k + extra != base_counts[i] else _metrics(base))
            d1 = [b - a for a, b in zip(ms[0], ms[1])]
            d2 = [b - a for a, b in zip(ms[1], ms[2])]
            last = (k, ms[0], d2)
            if d1 == d2:
                total = [t + (mk - b) + (trips - k) * d for t, mk, b, d in zip(total, ms[0], _metrics(base), d1)]
                notes.append(
                    f"{where}: {trips:,} iterations; steady from iteration {k} on (simulated {k + 2}), "
                    f"one iteration adds {_fmt_ns(max(d1[3::4] or [0]))} to the step"
                )
                done = True
                break
        if done:
            continue
        full = [expanded_count_sim(nodes, rl, i, trips) for nodes, rl in zip(ranks, loops) if rl]
        if max(full, default=0) <= FULL_FALLBACK_NODES or last is None:
            counts = list(base_counts)
            counts[i] = trips
            m = _metrics(run(counts))
            total = [t + (a - b) for t, a, b in zip(total, m, _metrics(base))]
            notes.append(f"{where}: {trips:,} iterations, simulated in full (no steady state by {STEADY_TRIES[-1]})")
        else:
            k, mk, d = last
            total = [t + (a - b) + (trips - k) * x for t, a, b, x in zip(total, mk, _metrics(base), d)]
            notes.append(
                f"{where}: {trips:,} iterations; NOT steady after {k + 2} simulated (successive iterations add "
                f"different times): extrapolated from the last one, approximate"
            )
    report = SimReport(
        step_time_ns=0,
        ranks=[],
        collectives=total[0],
        p2p_messages=total[1],
        records=base.records,
        collectives_per_rank=total[2],
    )
    for r in range(len(base.ranks)):
        finish, compute, busy, nodes = total[3 + 4 * r: 7 + 4 * r]
        report.ranks.append(RankResult(r, finish, compute, finish - compute, busy, nodes))
    report.step_time_ns = max((r.finish_ns for r in report.ranks), default=0)
    if record:
        notes.append("the timeline (--trace) shows the run with 4 iterations of each long loop")
    report.notes = notes
    return report


def expanded_count_sim(nodes, rank_loops, i, trips) -> int:
    return len(nodes) + (trips - rank_loops[i].held) * rank_loops[i].per


def simulate_graphs(
    rank_nodes: list, groups: dict, system, *, record: bool = False, loops=None, symmetric: bool = False
) -> SimReport:
    """Simulate Chakra graphs held in memory (the exporter's `RankGraphs.nodes` and
    `comm_groups`), exactly as `simulate_dir` would once they are written and read back.

    `symmetric` (`RankGraphs.symmetric`): every rank runs the same graph, each collective's
    groups split the ranks evenly and cost the same, and nothing is point to point; every
    rank's timeline is then rank 0's, so rank 0 alone is simulated (the same report, as
    the tie rule of `simulate` makes a rank's timeline depend on its own events only)."""
    from .chakra.export import _system_texts

    system_json = json.loads(_system_texts(system)["system.json"])
    roofline = _roofline(system_json)
    groups = {str(k): [int(r) for r in v] for k, v in groups.items()}
    comm_time = comm_time_for_system(system)
    n = len(rank_nodes)
    if symmetric and n > 1 and not record:
        one = [convert_nodes(rank_nodes[0], 0, n, groups, roofline)]
        try:
            if loops and any(loops):
                return simulate_loops(one, loops[:1], comm_time, replicas=n)
            return simulate(one, comm_time, replicas=n)
        except _NotSymmetric:
            pass  # every rank, below
    ranks = [convert_nodes(nodes, rank, n, groups, roofline) for rank, nodes in enumerate(rank_nodes)]
    if loops and any(loops):
        return simulate_loops(ranks, loops, comm_time, record=record)
    return simulate(ranks, comm_time, record=record)


def simulate_dir(
    directory: str, *, system=None, comm_time: Callable | None = None, record: bool = False, full: bool = False
) -> SimReport:
    trace = load_trace_dir(directory, full=full)
    if comm_time is None:
        if system is None:
            system = system_for_dir(trace)
        num_npus = getattr(system, "num_npus", None)
        if num_npus is not None and num_npus < len(trace.ranks):
            raise SimulationError(
                f"{directory}: the trace has {len(trace.ranks)} ranks but system "
                f"'{getattr(system, 'name', '?')}' has only {num_npus} NPUs; pick a system with at least "
                f"{len(trace.ranks)} (see `costmodel systems list`)"
            )
        comm_time = comm_time_for_system(system)
    if trace.loops and any(trace.loops):
        report = simulate_loops(trace.ranks, trace.loops, comm_time, record=record)
    else:
        report = simulate(trace.ranks, comm_time, record=record)
    report.directory = directory
    return report
