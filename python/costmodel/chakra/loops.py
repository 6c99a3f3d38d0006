"""Compact loops in per-rank Chakra graphs: four iterations held, the rest copies.

A long communicating `stablehlo.while` (chakra.export, `TLoop`) is instantiated per rank
with its first `head` + 2 iterations only (head = 2). On a rank its nodes are

    [start, start + first)            iterations 0 .. head-1 (they may differ: the first
                                      ones start from the prologue's values)
    [s1 = start + first, s1 + per)    iteration head     (P)
    [s2 = s1 + per, s2 + per)         iteration head + 1 (P' = P shifted by `per` ids)

and iteration j > head of the full graph is P' shifted by (j - head - 1) x per ids: same
types, durations and attributes, dependencies at or after `start` shifted, those before
it (the prologue: loop-invariant values) kept, point-to-point tags stepped by the tag
difference between P and P'. `check_periodic` verifies exactly that (P' depends on
nothing in the head iterations, and nothing after the loop does), so the expansion is the
unrolled graph.

`expand_ids` maps a compact graph to one whose loop i runs counts[i] iterations (head + 2
or more, up to its trip count): the writer streams the full graph with it, the simulator
builds short ones to measure the steady state (costmodel.simulate).
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Callable, Iterator

from . import et_def_pb2 as pb

__all__ = ["RankLoop", "check_periodic", "expand_ids", "expanded_count", "NodeEncoder"]

P2P_TYPES = (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)


@dataclasses.dataclass(frozen=True)
class RankLoop:
    start: int
    first: int
    per: int
    trips: int
    loc: str = ""
    head: int = 2  # iterations before P

    @property
    def held(self) -> int:
        """Iterations held in the compact graph."""
        return self.head + 2

    @property
    def s1(self) -> int:
        return self.start + self.first

    @property
    def s2(self) -> int:
        return self.start + self.first + self.per

    @property
    def end(self) -> int:
        return self.start + self.first + 2 * self.per

    def to_dict(self) -> dict:
        return {
            "start": self.start, "first": self.first, "per": self.per, "trips": self.trips, "head": self.head,
            "loc": self.loc,
        }


def _tag(node) -> int | None:
    for a in node.attr:
        if a.name == "comm_tag":
            return a.int64_val
    return None


def _attrs_but_tag(node) -> list:
    return [a for a in node.attr if a.name != "comm_tag"]


def check_periodic(nodes: list, loop: RankLoop) -> str | None:
    """None when iteration 2 is iteration 1 shifted (see the module docstring), else why not."""
    s1, s2, per, start = loop.s1, loop.s2, loop.per, loop.start
    for k in range(per):
        a, b = nodes[s1 + k], nodes[s2 + k]
        if a.type != b.type or a.duration_micros != b.duration_micros:
            return f"node {b.id} differs from node {a.id} of the previous iteration"
        if a.type in P2P_TYPES:
            if _attrs_but_tag(a) != _attrs_but_tag(b):
                return f"node {b.id} has other attributes than node {a.id}"
        elif list(a.attr) != list(b.attr):
            return f"node {b.id} has other attributes than node {a.id}"
        for da, db in ((a.data_deps, b.data_deps), (a.ctrl_deps, b.ctrl_deps)):
            if len(da) != len(db):
                return f"node {b.id} has other dependencies than node {a.id}"
            for x, y in zip(da, db):
                want = x + per if x >= start else x
                if y != want or start <= y < s1:
                    return f"node {b.id} depends on node {y}, not on the shifted node {want}"
    return None


def _static_dep_fn(loops: list[RankLoop], counts: list[int]):
    """d -> expanded id of compact node d, seen from a node after every loop that ends at
    or before it (a dependency into the last two iterations of such a loop follows them)."""
    starts = [lp.start for lp in loops]
    extra_before = []  # extra nodes inserted by the loops before loop i
    e = 0
    for lp, m in zip(loops, counts):
        extra_before.append(e)
        e += (m - lp.held) * lp.per

    def static(d: int, c: int) -> int:
        i = bisect.bisect_right(starts, d) - 1
        if i < 0:
            return d
        lp = loops[i]
        if d >= lp.end:  # after loop i (and every loop before it)
            return d + extra_before[i] + (counts[i] - lp.held) * lp.per
        base = d + extra_before[i]
        if c >= lp.end and d >= lp.s1:  # from after the loop: its last iterations
            base += (counts[i] - lp.held) * lp.per
        return base

    return static, extra_before


def expanded_count(num_nodes: int, loops: list[RankLoop], counts: list[int] | None = None) -> int:
    if counts is None:
        counts = [lp.trips for lp in loops]
    return num_nodes + sum((m - lp.held) * lp.per for lp, m in zip(loops, counts))


def expand_ids(
    nodes: list, loops: list[RankLoop], counts: list[int] | None = None
) -> Iterator[tuple[object, int, Callable[[int], int], int]]:
    """(compact node, expanded id, dependency map, tag step multiplier) in expanded order;
    counts[i] iterations of loop i (default: its trips). The tag of a copied p2p node is
    tag(P') + multiplier x (tag(P') - tag(P))."""
    loops = sorted(loops, key=lambda lp: lp.start)
    if counts is None:
        counts = [lp.trips for lp in loops]
    static, extra_before = _static_dep_fn(loops, counts)
    pos = 0
    for i, lp in enumerate(loops):
        m = counts[i]
        e = extra_before[i]
        for c in range(pos, lp.s2):
            yield nodes[c], c + e, (lambda d, c=c: static(d, c)), 0
        if m < lp.held:
            raise ValueError(f"a compact loop expands to at least {lp.held} iterations")
        s1 = lp.s1
        for j in range(lp.head + 1, m):
            sh = e + (j - lp.head - 1) * lp.per

            def dep(d, sh=sh, s1=s1, c=lp.s2):
                return d + sh if d >= s1 else static(d, c)

            for c in range(lp.s2, lp.end):
                yield nodes[c], c + sh, dep, j - lp.head - 1
        pos = lp.end
    e = extra_before[-1] + (counts[-1] - loops[-1].held) * loops[-1].per if loops else 0
    for c in range(pos, len(nodes)):
        yield nodes[c], c + e, (lambda d, c=c: static(d, c)), 0


# ---------------------------------------------------------------------------
# encoding expanded nodes
# ---------------------------------------------------------------------------


class NodeEncoder:
    """Serialises a compact node with a new id, dependencies (and tag): one reusable copy
    per compact node has its fields set and is serialised (protobuf's own encoder, about
    2 us a node; no per-node message is kept)."""

    def __init__(self) -> None:
        self._scratch: dict = {}

    def encode(self, node, new_id: int, dep: Callable[[int], int], tag: int | None = None) -> bytes:
        key = id(node)
        hit = self._scratch.get(key)
        if hit is None:
            copy = pb.Node()
            copy.CopyFrom(node)
            tag_attr = None
            if node.type in P2P_TYPES:
                for a in copy.attr:
                    if a.name == "comm_tag":
                        tag_attr = a
            hit = (copy, tag_attr, node)  # node kept alive: its id() stays unique
            self._scratch[key] = hit
        copy, tag_attr, _ = hit
        copy.id = new_id
        copy.data_deps[:] = [dep(d) for d in node.data_deps]
        copy.ctrl_deps[:] = [dep(d) for d in node.ctrl_deps]
        if tag_attr is not None:
            tag_attr.int64_val = tag if tag is not None else _tag(node)
        return copy.SerializeToString()
