"""Invariants of a Chakra trace directory, as ASTRA-sim needs them.

`check_dir(DIR)` returns a `CheckReport` whose `violations` are one-line strings:

- every rank 0..N-1 has its `<prefix>.<rank>.et` (N: manifest.json, else the product of
  `npus_count` in network.yml, else the highest rank found + 1);
- each file is a length-delimited stream whose first message is a GlobalMetadata (with a
  version) and whose other messages are Nodes;
- node ids are unique, every data/ctrl dependency names a node of the same file, and the
  dependencies have no cycle;
- node types are ones ASTRA-sim runs; accelerator work is marked `is_cpu_op = false`;
  integer attributes (comm_type, comm_size, comm_src, comm_dst, comm_tag, num_ops,
  tensor_size) are held in integer fields; COMP nodes carry num_ops and tensor_size when
  system.json enables the roofline;
- COMM_COLL nodes: a simulated comm_type (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER,
  ALL_TO_ALL; BROADCAST is replayed), comm_size > 0, `pg_name` "" / "0" or a key of
  comm_group.json whose group holds the rank;
- every member of a group issues the same collectives (type and size) in the same order
  (the order is the dependency order, ties broken by node id, as ASTRA-sim issues them);
- COMM_SEND / COMM_RECV: comm_src (recv) / comm_dst (send) another existing rank, sends
  issued by their comm_src and receives by their comm_dst, and for every
  (src, dst, tag, size) as many sends on src as receives on dst;
- finally, when nothing else is wrong, the graph runs to completion in the simulator
  with unit times (no deadlock).
"""

from __future__ import annotations

import dataclasses
import glob
import heapq
import math
import os
import re

from ..jsonio import json_load
from . import et_def_pb2 as pb
from .io import TraceFormatError, attr_int, attr_value, iter_messages

__all__ = ["CheckReport", "check_dir", "MAX_REPORTED"]

MAX_REPORTED = 50
SIMULATED_COLL = {pb.ALL_REDUCE, pb.ALL_GATHER, pb.REDUCE_SCATTER, pb.ALL_TO_ALL, pb.BROADCAST}
INT_ATTRS = ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag", "num_ops", "tensor_size")
RUNNABLE = {pb.COMP_NODE, pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE, pb.METADATA_NODE, pb.INVALID_NODE}


@dataclasses.dataclass
class CheckReport:
    directory: str
    prefix: str | None = None
    ranks: int = 0
    nodes: int = 0
    collectives: int = 0  # collective issues, summed over ranks
    collectives_per_rank: int = 0  # collectives of the busiest rank (as export and simulate say)
    messages: int = 0
    violations: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, text: str) -> None:
        self.violations.append(text)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"ok": self.ok}


def _read_json(path: str, report: CheckReport):
    try:
        with open(path) as fh:
            return json_load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        report.add(f"{os.path.basename(path)}: cannot read: {err}")
        return None


def _network_npus(path: str) -> int | None:
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError:
        return None
    m = re.search(r"^\s*npus_count\s*:\s*\[([^\]]*)\]", text, re.M)
    if not m:
        return None
    try:
        return math.prod(int(x) for x in m.group(1).split(",") if x.strip())
    except ValueError:
        return None


def _discover(directory: str, manifest, report: CheckReport) -> tuple[str | None, int]:
    found: dict[str, set[int]] = {}
    for path in glob.glob(os.path.join(glob.escape(directory), "*.et")):
        m = re.fullmatch(r"(.+)\.(\d+)\.et", os.path.basename(path))
        if m:
            found.setdefault(m.group(1), set()).add(int(m.group(2)))
    prefix = manifest.get("prefix") if isinstance(manifest, dict) else None
    if prefix is None:
        if not found:
            report.add("no <prefix>.<rank>.et files")
            return None, 0
        if len(found) > 1:
            report.add(f"several trace prefixes: {', '.join(sorted(found))}")
        prefix = sorted(found)[0]
    ranks = None
    if isinstance(manifest, dict) and isinstance(manifest.get("ranks"), int):
        ranks = manifest["ranks"]
    npus = _network_npus(os.path.join(directory, "network.yml"))
    if npus is not None:
        if ranks is not None and ranks != npus:
            report.add(f"manifest.json says {ranks} ranks but network.yml has {npus} NPUs")
        ranks = npus if ranks is None else ranks
    if ranks is None:
        ranks = max(found.get(prefix, {-1})) + 1
    have = len(found.get(prefix, ()))
    if ranks - have > 1024:
        # a manifest or network.yml naming more ranks than there are files: said once,
        # not once per missing rank (10^9 of them ran out of memory)
        report.add(f"{ranks} ranks are named but only {have} {prefix}.<rank>.et files are present")
        ranks = max(found.get(prefix, {-1})) + 1
    extra = sorted(r for r in found.get(prefix, ()) if r >= ranks)
    if extra:
        report.add(f"{prefix}.{extra[0]}.et is beyond the {ranks} ranks")
    return prefix, ranks


def _topo_order(nodes: dict[int, pb.Node]) -> list[int] | None:
    """Dependency order, ties by smallest id; None on a cycle."""
    pending = {}
    children: dict[int, list[int]] = {}
    for nid, n in nodes.items():
        deps = {d for d in list(n.data_deps) + list(n.ctrl_deps) if d in nodes}
        pending[nid] = len(deps)
        for d in deps:
            children.setdefault(d, []).append(nid)
    ready = [nid for nid, c in pending.items() if c == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        nid = heapq.heappop(ready)
        order.append(nid)
        for c in children.get(nid, ()):
            pending[c] -= 1
            if pending[c] == 0:
                heapq.heappush(ready, c)
    return order if len(order) == len(nodes) else None


def check_dir(directory: str) -> CheckReport:
    report = CheckReport(directory)
    if not os.path.isdir(directory):
        report.add(f"{directory}: not a directory")
        return report
    manifest = _read_json(os.path.join(directory, "manifest.json"), report)
    groups_raw = _read_json(os.path.join(directory, "comm_group.json"), report) or {}
    system_json = _read_json(os.path.join(directory, "system.json"), report) or {}
    roofline = bool(int(system_json.get("roofline-enabled", 0) or 0)) if isinstance(system_json, dict) else False
    groups: dict[str, list[int]] = {}
    if not isinstance(groups_raw, dict):
        report.add("comm_group.json: not a JSON object")
    else:
        for k, v in groups_raw.items():
            if not isinstance(v, list) or not all(isinstance(r, int) for r in v):
                report.add(f"comm_group.json: group '{k}' is not a list of ranks")
                continue
            if k == "0":
                report.add("comm_group.json: group id '0' means all ranks to ASTRA-sim; use ids from 1")
            groups[str(k)] = v
    prefix, num_ranks = _discover(directory, manifest, report)
    report.prefix, report.ranks = prefix, num_ranks
    if prefix is None:
        return report
    for k, v in groups.items():
        bad = [r for r in v if not 0 <= r < num_ranks]
        if bad:
            report.add(f"comm_group.json: group '{k}' names rank {bad[0]} of {num_ranks}")
    everyone = tuple(range(num_ranks))
    # per rank: ordered collectives per group, sends, receives
    coll_seq: dict[tuple, dict[int, list]] = {}
    sends: dict[tuple, int] = {}
    recvs: dict[tuple, int] = {}
    parsed: list[list[pb.Node] | None] = []
    per_rank_colls: dict[int, int] = {}
    for rank in range(num_ranks):
        fname = f"{prefix}.{rank}.et"
        path = os.path.join(directory, fname)
        if not os.path.exists(path):
            report.add(f"{fname}: missing (ASTRA-sim aborts without every rank 0..{num_ranks - 1})")
            parsed.append(None)
            continue
        nodes = _check_file(path, fname, rank, num_ranks, groups, roofline, report)
        parsed.append(nodes)
        if nodes is None:
            continue
        report.nodes += len(nodes)
        by_id = {n.id: n for n in nodes}
        order = _topo_order(by_id)
        if order is None:
            report.add(f"{fname}: the dependencies have a cycle")
            continue
        for nid in order:
            n = by_id[nid]
            attrs = {a.name: a for a in n.attr}
            if n.type == pb.COMM_COLL_NODE:
                per_rank_colls[rank] = per_rank_colls.get(rank, 0) + 1
                ct = attr_int(attrs["comm_type"]) if "comm_type" in attrs else None
                size = attr_int(attrs["comm_size"]) if "comm_size" in attrs else None
                pg = str(attr_value(attrs["pg_name"]) or "") if "pg_name" in attrs else ""
                if ct == pb.BROADCAST:
                    continue  # replayed locally, not matched
                group = everyone if pg in ("", "0") else tuple(groups.get(pg, ()))
                coll_seq.setdefault(group, {}).setdefault(rank, []).append((ct, size, n.id))
                report.collectives += 1
            elif n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                src = attr_int(attrs["comm_src"]) if "comm_src" in attrs else rank
                dst = attr_int(attrs["comm_dst"]) if "comm_dst" in attrs else rank
                tag = attr_int(attrs["comm_tag"]) if "comm_tag" in attrs else 0
                size = attr_int(attrs["comm_size"]) if "comm_size" in attrs else None
                key = (src, dst, tag, size)
                table = sends if n.type == pb.COMM_SEND_NODE else recvs
                table[key] = table.get(key, 0) + 1
                if n.type == pb.COMM_SEND_NODE:
                    report.messages += 1
    # collectives: same order, types and sizes on every member of a group
    names = pb.CollectiveCommType.Name
    for group, per_rank in coll_seq.items():
        members = list(group)
        label = "all ranks" if group == everyone else f"group {list(group)}"
        ref_rank = next((r for r in members if r in per_rank), None)
        ref = per_rank.get(ref_rank, [])
        for r in members:
            if r >= len(parsed) or parsed[r] is None:
                continue
            seq = per_rank.get(r, [])
            if len(seq) != len(ref):
                report.add(
                    f"{label}: rank {r} issues {len(seq)} collectives but rank {ref_rank} issues {len(ref)}"
                )
                continue
            for i, (a, b) in enumerate(zip(seq, ref)):
                if a[:2] != b[:2]:
                    ta = names(a[0]) if a[0] in pb.CollectiveCommType.values() else a[0]
                    tb = names(b[0]) if b[0] in pb.CollectiveCommType.values() else b[0]
                    report.add(
                        f"{label}: collective #{i} is {ta} of {a[1]} bytes on rank {r} (node {a[2]}) "
                        f"but {tb} of {b[1]} bytes on rank {ref_rank} (node {b[2]})"
                    )
                    break
    for key in sorted(set(sends) | set(recvs), key=str):
        s, r = sends.get(key, 0), recvs.get(key, 0)
        if s != r:
            src, dst, tag, size = key
            report.add(
                f"messages {src}->{dst} tag {tag} of {size} bytes: {s} send(s) on rank {src} "
                f"but {r} receive(s) on rank {dst}"
            )
    if report.ok and all(p is not None for p in parsed):
        _check_runs(parsed, groups, num_ranks, report)
    if len(report.violations) > MAX_REPORTED:
        extra = len(report.violations) - MAX_REPORTED
        report.violations = report.violations[:MAX_REPORTED] + [f"... and {extra} more violations"]
    report.collectives_per_rank = max(per_rank_colls.values(), default=0)
    return report


def _check_file(path, fname, rank, num_ranks, groups, roofline, report) -> list[pb.Node] | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        report.add(f"{fname}: cannot read: {err.strerror}")
        return None
    if not data:
        report.add(f"{fname}: empty (the GlobalMetadata message is missing)")
        return None
    try:
        raw = list(iter_messages(data))
    except TraceFormatError as err:
        report.add(f"{fname}: {err}")
        return None
    meta = pb.GlobalMetadata()
    try:
        meta.ParseFromString(raw[0])
    except Exception:
        meta = None
    if meta is None or not meta.version:
        report.add(
            f"{fname}: the first message is not a GlobalMetadata with a version "
            "(ASTRA-sim would swallow the first node as metadata)"
        )
        return None
    nodes: list[pb.Node] = []
    for i, payload in enumerate(raw[1:], start=1):
        n = pb.Node()
        try:
            n.ParseFromString(payload)
        except Exception as err:
            report.add(f"{fname}: message {i} is not a Node: {err}")
            return None
        nodes.append(n)
    ids: set[int] = set()
    for n in nodes:
        if n.id in ids:
            report.add(f"{fname}: node id {n.id} used twice")
        ids.add(n.id)
    for n in nodes:
        where = f"{fname}: node {n.id} ({n.name})"
        for d in list(n.data_deps) + list(n.ctrl_deps):
            if d not in ids:
                report.add(f"{where}: depends on node {d}, which is not in this file")
            elif d == n.id:
                report.add(f"{where}: depends on itself")
        if n.type not in RUNNABLE:
            report.add(f"{where}: node type {pb.NodeType.Name(n.type) if n.type in pb.NodeType.values() else n.type} is not run by ASTRA-sim's analytical backend")
            continue
        attrs = {a.name: a for a in n.attr}
        for key in INT_ATTRS:
            if key in attrs and attr_int(attrs[key]) is None:
                report.add(f"{where}: attribute '{key}' is not held in an integer field")
        if n.type in (pb.COMP_NODE, pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            cpu = attrs.get("is_cpu_op")
            if cpu is None or cpu.WhichOneof("value") != "bool_val":
                report.add(f"{where}: no bool attribute 'is_cpu_op' (ASTRA-sim may take it for CPU work)")
            elif cpu.bool_val:
                report.add(f"{where}: is_cpu_op is true")
        if n.type == pb.COMP_NODE and roofline:
            for key in ("num_ops", "tensor_size"):
                if key not in attrs:
                    report.add(f"{where}: system.json enables the roofline but the node has no '{key}'")
        if n.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            size = attr_int(attrs["comm_size"]) if "comm_size" in attrs else None
            if size is None:
                report.add(f"{where}: no integer 'comm_size'")
            elif size <= 0:
                report.add(f"{where}: comm_size {size} (must be > 0)")
        if n.type == pb.COMM_COLL_NODE:
            ct = attr_int(attrs["comm_type"]) if "comm_type" in attrs else None
            if ct is None:
                report.add(f"{where}: no integer 'comm_type'")
            elif ct not in SIMULATED_COLL:
                name = pb.CollectiveCommType.Name(ct) if ct in pb.CollectiveCommType.values() else str(ct)
                report.add(f"{where}: comm_type {name} is not simulated by ASTRA-sim (it stops, exiting 0)")
            if "pg_name" in attrs:
                a = attrs["pg_name"]
                if a.WhichOneof("value") != "string_val":
                    report.add(f"{where}: pg_name is not a string")
                pg = str(attr_value(a) or "")
                if pg not in ("", "0"):
                    if pg not in groups:
                        report.add(f"{where}: pg_name '{pg}' is not a key of comm_group.json")
                    elif rank not in groups[pg]:
                        report.add(f"{where}: rank {rank} is not in its group '{pg}' {groups[pg]}")
        elif n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            is_send = n.type == pb.COMM_SEND_NODE
            peer_key = "comm_dst" if is_send else "comm_src"
            own_key = "comm_src" if is_send else "comm_dst"
            peer = attr_int(attrs[peer_key]) if peer_key in attrs else None
            own = attr_int(attrs[own_key]) if own_key in attrs else rank
            if peer is None:
                report.add(f"{where}: no integer '{peer_key}'")
            elif not 0 <= peer < num_ranks or peer == rank:
                report.add(f"{where}: {peer_key} {peer} is not another rank of 0..{num_ranks - 1}")
            if own != rank:
                report.add(f"{where}: {own_key} is {own} but the node is in rank {rank}'s file")
            if "comm_tag" not in attrs:
                report.add(f"{where}: no 'comm_tag'")
    return nodes


def _check_runs(parsed, groups, num_ranks, report: CheckReport) -> None:
    from ..simulate import SimulationError, convert_nodes, simulate

    try:
        ranks = [convert_nodes(nodes, r, num_ranks, groups) for r, nodes in enumerate(parsed)]
        simulate(ranks, lambda kind, size, group: 1.0)
    except SimulationError as err:
        report.add(f"the graph does not run to completion: {err}")
