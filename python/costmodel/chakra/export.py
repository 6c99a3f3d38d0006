"""Chakra execution graphs from an annotated module: one `.et` file per rank.

Input: a module that `annotate-cost` has costed (`costmodel.cost` on every op,
`costmodel.summary` on the module); collectives are decoded with
`costmodel.collectives.decode_collective` (the `extract-collectives` pass does the same
and annotates `costmodel.collective`). Output: a trace directory that ASTRA-sim's
analytical backend runs as is, and that `costmodel simulate` reads.

How the program becomes a graph (docs/chakra.md has the long version):

- The program is walked in program order from its public functions. `func.call`,
  `stablehlo.composite`, `sdy.manual_computation` ... are inlined when they contain
  communication; a `stablehlo.while` that contains communication is UNROLLED by its trip
  count (so every collective of every iteration appears, in order). A long one (see
  `COMPACT_MIN_NODES`) is kept COMPACT in memory: four iterations are built, and when the
  fourth is the third shifted by one iteration on every rank, the others are copies of it
  (`RankLoop`); the writer streams them into the `.et` files and the simulator runs a few
  of them and extrapolates (costmodel.simulate, docs/simulator.md, "Long loops"). Control flow without
  communication is FOLDED: it is one compute op with the total cost the engine put on it.
  A `stablehlo.case`/`if` with communication exports the branch annotate-cost's
  `branch` option chose (default: the costliest; `branch=mean` has no trace: an error).
- Compute: with `granularity=region` (default) consecutive compute ops are merged into
  one COMP node until a communication point: a collective is issued, or an op uses the
  result of a collective that the running node does not depend on yet. With
  `granularity=op` every op with a non-zero time is its own COMP node. Ops with zero time
  (constants, tuples, reshapes the backend prices at zero) add no node; their users
  depend on what they depend on.
- COMP nodes run in program order on the rank's compute stream (a ctrl dep on the
  previous COMP node), communication nodes in program order on its communication stream
  (a ctrl dep on the previous communication node). So every rank issues its collectives in
  the same order, as ASTRA-sim requires, and compute overlaps communication exactly where
  the data dependencies allow.
- `duration_micros` is rounded with the error carried forward (the running sum is
  rounded, not each node), so a rank's durations add up to its predicted compute time to
  within 0.5 us. `num_ops` (flops, at least 1) and `tensor_size` (bytes read + written,
  at least 1) make ASTRA-sim's roofline mode work.
- Collectives (all_reduce, all_gather, reduce_scatter, all_to_all) are COMM_COLL nodes
  with `comm_type`, `comm_size` (ASTRA-sim's meaning, see `costmodel.collective`) and
  `pg_name` for sub-groups (keys of comm_group.json). collective_broadcast is a
  BROADCAST node that ASTRA-sim replays from `duration_micros` (our model's time).
  collective_permute, send and recv become COMM_SEND / COMM_RECV pairs (all sends of an
  op before its receives, so no rank can block a peer). A rank that takes no part in a
  communication op (not in any group of size > 1, no pair) gets no node for it.
- A collective's local work (an all_reduce's reduction) takes no time of its own:
  annotate-cost gives it none, the communication model prices it. Local work that has a
  time (a collective of dynamic shapes, exported as local work) joins the compute
  before the collective.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import time
from typing import Callable

from ..jsonio import json_load
from ..engine import COST_ATTR, KERNEL_COST_ATTR, SUMMARY_ATTR, infer_trip_count
from ..collectives import custom_collective_kind
from ..ir import InputError, format_location, ir, attr_number
from . import et_def_pb2 as pb
from .io import CHAKRA_VERSION, encode_trace, make_metadata

__all__ = [
    "ExportResult",
    "TemplateGraph",
    "build_template",
    "instantiate",
    "export_module",
    "write_trace_dir",
    "run_from_pass",
    "resolve_output_dir",
    "COMM_OP_KINDS",
    "COMM_TYPE_OF_KIND",
    "KIND_OF_COMM_TYPE",
    "ASTRA_SIM_BINARY",
    "MANIFEST",
    "COMM_GROUP_FILE",
]

ASTRA_SIM_BINARY = "AstraSim_Analytical_Congestion_Unaware"
MANIFEST = "manifest.json"
COMM_GROUP_FILE = "comm_group.json"
SYSTEM_FILE = "system.json"
NETWORK_FILE = "network.yml"
REMOTE_MEMORY_FILE = "remote_memory.json"
GENERATOR = "stablehlo-costmodel"

# A graph larger than this (nodes per rank) is refused: unrolling went too far.
MAX_NODES_PER_RANK = 2_000_000
# A communicating while loop whose unrolled graph would have at least this many nodes (and
# that runs at least COMPACT_MIN_TRIPS times) is kept compact: 3 iterations in memory.
COMPACT_MIN_NODES = 20_000
COMPACT_MIN_TRIPS = 8
# The streamed .et files of compact loops: at most this many nodes per rank are written.
MAX_WRITTEN_NODES_PER_RANK = 50_000_000

COMM_OP_KINDS = {
    "stablehlo.all_reduce": "all_reduce",
    "stablehlo.all_gather": "all_gather",
    "stablehlo.reduce_scatter": "reduce_scatter",
    "stablehlo.all_to_all": "all_to_all",
    "stablehlo.collective_permute": "collective_permute",
    "stablehlo.collective_broadcast": "collective_broadcast",
    "stablehlo.send": "send",
    "stablehlo.recv": "recv",
}
COMM_TYPE_OF_KIND = {
    "all_reduce": pb.ALL_REDUCE,
    "all_gather": pb.ALL_GATHER,
    "reduce_scatter": pb.REDUCE_SCATTER,
    "all_to_all": pb.ALL_TO_ALL,
    "collective_broadcast": pb.BROADCAST,
}
KIND_OF_COMM_TYPE = {v: k for k, v in COMM_TYPE_OF_KIND.items()}
for _dialect in ("mhlo",):
    for _k in list(COMM_OP_KINDS.values()):
        COMM_OP_KINDS[f"{_dialect}.{_k}"] = _k
for _k in ("all_gather", "all_reduce", "reduce_scatter", "all_to_all", "collective_permute", "all_slice"):
    COMM_OP_KINDS[f"sdy.{_k}"] = _k
P2P_KINDS = ("collective_permute", "send", "recv")

# Ops whose regions are control flow (walked when they contain communication).
CONTROL_OPS = frozenset(
    {
        "stablehlo.while",
        "stablehlo.case",
        "stablehlo.if",
        "func.call",
        "stablehlo.composite",
        "stablehlo.async_start",
        "sdy.manual_computation",
        "sdy.named_computation",
        "chlo.scan",
    }
)
CALL_OPS = {"func.call": "callee", "stablehlo.composite": "decomposition", "stablehlo.async_start": "called_computation"}
TERMINATORS = frozenset({"func.return", "stablehlo.return", "sdy.return", "mhlo.return", "chlo.return"})

NODE_TYPE_NAMES = {v: k for k, v in pb.NodeType.items()}


# ---------------------------------------------------------------------------
# the rank-independent template graph
# ---------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class TNode:
    idx: int
    kind: str  # "comp" | "coll" | "p2p"
    name: str
    deps: set
    time_ns: float = 0.0
    flops: int = 0
    nbytes: int = 0
    op_count: int = 0
    kernel_count: int = 0  # kernels (costmodel.kernel_cost roots) in this node
    duration_us: int = 0
    # communication
    comm_kind: str = ""
    comm_bytes: int = 0
    groups: list | None = None
    pairs: list | None = None
    tag: int = 0
    loc: str = ""


@dataclasses.dataclass
class TLoop:
    """A compact while loop in the template: nodes [start, start + first) are iterations
    0 and 1, the next `per` iteration 2, the next `per` iteration 3; iterations 3..trips-1
    are iteration 3 shifted (checked here and per rank by `instantiate`, chakra.loops)."""

    start: int
    first: int
    per: int
    trips: int
    loc: str = ""
    compute_ns_first: float = 0.0  # exact compute time of iteration 0 / of one later one
    compute_ns_per: float = 0.0

    @property
    def end(self) -> int:
        return self.start + self.first + 2 * self.per


@dataclasses.dataclass
class TemplateGraph:
    nodes: list[TNode]
    num_replicas: int
    num_partitions: int
    granularity: str
    compute_time_ns: float  # sum over COMP nodes (one rank)
    unrolled_loops: int = 0
    folded_loops: int = 0
    warnings: list[str] = dataclasses.field(default_factory=list)
    loops: list[TLoop] = dataclasses.field(default_factory=list)
    retime: "RetimePlan | None" = None  # build_template(record=True): see retime_template

    @property
    def num_devices(self) -> int:
        return self.num_replicas * self.num_partitions


@dataclasses.dataclass
class RetimePlan:
    """What a template's compute times were made of, by op position (pre-order walk of
    the module, costmodel.ir.walk_ops): `checks` every op whose cost decided the graph's
    shape (a time above zero makes or joins a COMP node, zero adds none) with that
    decision; `contrib` per COMP node the ops whose times it added, in order."""

    checks: list[tuple[int, bool]]
    contrib: dict[int, list[int]]


class _Builder:
    def __init__(self, module: ir.Operation, granularity: str, num_replicas: int, num_partitions: int, decode, diags):
        self.granularity = granularity
        self.region_mode = granularity == "region"
        self.num_replicas = num_replicas
        self.num_partitions = num_partitions
        self.decode = decode
        self.diags = diags
        self.nodes: list[TNode] = []
        self.vals: dict = {}
        self.comm_idx: set[int] = set()
        self.chain: TNode | None = None
        self.funcs: dict[str, ir.Operation] = {}
        self._cost_cache: dict = {}
        self._func_comm: dict[str, bool] = {}
        self._op_comm: dict = {}
        self._stack: list[str] = []
        self._chain_count = 0
        self.p2p_count = 0
        self.unrolled = 0
        self.folded = 0
        self.compact = True  # keep long communicating loops compact (TLoop)
        self.loops: list[TLoop] = []
        self._loop_depth = 0
        self.warnings: list[str] = []
        self._warned: set = set()
        self.record = False  # RetimePlan: the ops (not yet positions) behind the graph
        self.retimable = True
        self.checks: list = []
        self.contrib: dict[int, list] = {}
        for op in module.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "func.func":
                self.funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op

    # -- helpers -------------------------------------------------------------------
    def warn(self, op, message: str) -> None:
        key = (message,)
        if key in self._warned:
            return
        self._warned.add(key)
        self.warnings.append(message)
        if self.diags is not None:
            self.diags.warning(op.location, message)

    def _new(self, kind: str, name: str, deps: set) -> TNode:
        if len(self.nodes) >= MAX_NODES_PER_RANK:
            raise InputError(
                f"the Chakra graph would have more than {MAX_NODES_PER_RANK:,} nodes per rank (loops that "
                "communicate are unrolled: Chakra has no loops); give chakra=false to keep the costs and "
                "collective totals without a trace, or use a smaller trip count"
            )
        node = TNode(len(self.nodes), kind, name, deps)
        self.nodes.append(node)
        return node

    def cost(self, op) -> tuple:
        attrs = op.attributes
        if COST_ATTR not in attrs:
            return (0.0, 0, 0, None)
        a = attrs[COST_ATTR]
        hit = self._cost_cache.get(a)
        if hit is None:
            d = ir.DictAttr(a)
            t = ir.FloatAttr(d["time_ns"]).value if "time_ns" in d else 0.0
            flops = int(attr_number(d["flops"])) if "flops" in d else 0
            nbytes = (int(attr_number(d["bytes_read"])) if "bytes_read" in d else 0) + (
                int(attr_number(d["bytes_written"])) if "bytes_written" in d else 0
            )
            trip = int(attr_number(d["trip_count"])) if "trip_count" in d else None
            hit = (t, flops, nbytes, trip)
            self._cost_cache[a] = hit
        return hit

    def deps_of(self, values) -> set:
        out: set = set()
        vals = self.vals
        for v in values:
            d = vals.get(v)
            if d:
                out.update(d)
        return out

    def bind(self, values, deps_list) -> None:
        vals = self.vals
        values = list(values)
        if len(values) == len(deps_list):
            for v, d in zip(values, deps_list):
                vals[v] = d
        else:
            union: set = set()
            for d in deps_list:
                union.update(d)
            t = tuple(union)
            for v in values:
                vals[v] = t

    # -- communication content -------------------------------------------------
    def func_has_comm(self, name: str) -> bool:
        hit = self._func_comm.get(name)
        if hit is not None:
            return hit
        fn = self.funcs.get(name)
        self._func_comm[name] = False  # recursion guard
        result = fn is not None and any(self._region_has_comm(r) for r in fn.regions)
        self._func_comm[name] = result
        return result

    def _region_has_comm(self, region) -> bool:
        for block in region.blocks:
            for op in block.operations:
                op = op.operation
                name = op.name
                if name in COMM_OP_KINDS or (name == "stablehlo.custom_call" and custom_collective_kind(op)):
                    return True
                if name in CONTROL_OPS and self.has_comm(op):
                    return True
        return False

    def has_comm(self, op) -> bool:
        hit = self._op_comm.get(op)
        if hit is not None:
            return hit
        key = CALL_OPS.get(op.name)
        if key is not None and key in op.attributes:  # (an async_start may hold its region inline)
            try:
                callee = ir.FlatSymbolRefAttr(op.attributes[key]).value
            except (KeyError, ValueError):
                result = False
            else:
                result = self.func_has_comm(callee)
        else:
            result = any(self._region_has_comm(r) for r in op.regions)
        self._op_comm[op] = result
        return result

    # -- walking -----------------------------------------------------------------
    def run(self, entries: list[str]) -> None:
        for name in entries:
            fn = self.funcs[name]
            self._stack.append(name)
            for block in fn.regions[0].blocks:
                self.walk_block(block)
            self._stack.pop()
        self.chain = None

    def walk_block(self, block) -> list:
        vals = self.vals
        for op in block.operations:
            op = op.operation
            name = op.name
            if name in TERMINATORS:
                return [vals.get(v, ()) for v in op.operands]
            self.visit(op, name)
        return []

    def visit(self, op, name: str) -> None:
        kind = COMM_OP_KINDS.get(name)
        if kind is None and name == "stablehlo.custom_call":
            kind = custom_collective_kind(op)  # ragged_all_to_all
        if kind is not None:
            info = self._decode(op)
            if info is not None:
                self.visit_comm(op, kind, info)
                return
        if name in CONTROL_OPS and self.has_comm(op):
            self.visit_control(op, name)
            return
        c = self.cost(op)
        if name in CONTROL_OPS:
            self.folded += 1
        if self.record:
            self.checks.append((op, c[0] > 0.0))
        if c[0] > 0.0:
            res = self.add_compute(op, name, c, self.deps_of(op.operands))
        else:
            res = tuple(self.deps_of(op.operands))
        vals = self.vals
        for r in op.results:
            vals[r] = res

    def _kernel(self, op):
        """(name, flops, bytes, ops) of the kernel `op` is the root of, or None."""
        if KERNEL_COST_ATTR not in op.attributes:
            return None
        d = ir.DictAttr(op.attributes[KERNEL_COST_ATTR])

        def i(key):
            return int(attr_number(d[key])) if key in d else 0

        name = f"kernel.{i('id')}.{ir.StringAttr(d['kind']).value}"
        return name, i("flops") + i("transcendentals"), i("bytes_read") + i("bytes_written"), i("ops")

    def add_compute(self, op, name: str, c: tuple, deps: set) -> tuple:
        t, flops, nbytes, _ = c
        kernel = self._kernel(op)
        if not self.region_mode:
            if kernel is not None:  # one node per kernel: its other ops carry no time
                node = self._new("comp", kernel[0], deps)
                node.time_ns, node.flops, node.nbytes, node.op_count = t, kernel[1], kernel[2], kernel[3]
                node.kernel_count = 1
            else:
                node = self._new("comp", f"{name.split('.', 1)[-1]}.{len(self.nodes)}", deps)
                node.time_ns, node.flops, node.nbytes, node.op_count = t, flops, nbytes, 1
            if self.record:
                self.contrib[node.idx] = [op]
            return (node.idx,)
        ch = self.chain
        if ch is not None:
            new_comm = (deps & self.comm_idx) - ch.deps
            if new_comm:
                ch = None  # a communication point: the op waits for a collective
        if ch is None:
            self._chain_count += 1
            ch = self._new("comp", f"comp.{self._chain_count}", set())
            self.chain = ch
        deps.discard(ch.idx)
        ch.deps |= deps
        ch.time_ns += t
        if self.record:
            self.contrib.setdefault(ch.idx, []).append(op)
        if kernel is not None:
            ch.flops += kernel[1]
            ch.nbytes += kernel[2]
            ch.op_count += kernel[3]
            ch.kernel_count += 1
        else:
            ch.flops += flops
            ch.nbytes += nbytes
            ch.op_count += 1
        return (ch.idx,)

    def _decode(self, op):
        """CollectiveInfo, or None for an op that does not communicate (a local
        all_slice, a host transfer, dynamic shapes: warned)."""
        try:
            info = self.decode(op, self.num_replicas, self.num_partitions)
        except Exception as err:  # CollectiveError: a collective that breaks the spec
            msg = str(err)
            if msg.startswith("dynamic shapes"):
                self.warn(op, f"Chakra export: '{op.name}' has dynamic shapes; it is exported as local work")
                return None
            where = format_location(op.location, "")
            raise InputError(f"{where + ': ' if where else ''}'{op.name}': {msg}") from None
        if getattr(info, "kind", None) == "all_slice" or getattr(info, "host_transfer", False):
            return None
        return info

    def visit_comm(self, op, kind: str, info) -> None:
        deps = self.deps_of(op.operands)
        c = self.cost(op)
        if self.record:
            self.checks.append((op, c[0] > 0.0))
        if c[0] > 0.0:
            deps = set(self.add_compute(op, op.name + ".local", c, deps))
        self.chain = None
        node = self._new("p2p" if kind in P2P_KINDS else "coll", "", deps)
        node.comm_kind = getattr(info, "kind", kind) or kind
        node.comm_bytes = int(getattr(info, "comm_bytes", 0) or 0)
        groups = getattr(info, "groups", None)
        node.groups = [list(g) for g in groups] if groups else []
        pairs = getattr(info, "pairs", None)
        node.pairs = [tuple(p) for p in pairs] if pairs else []
        node.loc = format_location(op.location, "")
        node.name = f"{node.comm_kind}.{len(self.comm_idx) + 1}"
        if node.kind == "p2p":
            channel = _channel_id(op) if kind in ("send", "recv") else None
            self.p2p_count += 1
            node.tag = channel if channel is not None else (1 << 20) + self.p2p_count
        self.comm_idx.add(node.idx)
        res = (node.idx,)
        vals = self.vals
        for r in op.results:
            vals[r] = res

    def _comm_per_run(self, op, stack=()) -> int:
        """Communication ops one execution of `op` (a region op or a call) issues, nested
        loops counted trip times: what unrolling it would add to the graph, at least."""
        n = 0
        key = CALL_OPS.get(op.name)
        regions = list(op.regions)
        if key is not None and key in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes[key]).value
            fn = self.funcs.get(callee)
            if fn is None or callee in stack:
                return 0
            regions = list(fn.regions)
            stack = stack + (callee,)
        for region in regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    if inner.name in COMM_OP_KINDS or custom_collective_kind(inner):
                        n += 1
                    elif inner.name in CONTROL_OPS and self.has_comm(inner):
                        times = 1
                        if inner.name == "stablehlo.while":
                            times = self.cost(inner)[3] or infer_trip_count(inner) or 1
                        n += times * self._comm_per_run(inner, stack)
        return n

    def _check_unroll(self, op, trip: int) -> None:
        """Fail in milliseconds, before unrolling, when a loop would blow the node limit."""
        per_iteration = max(1, self._comm_per_run(op))
        estimate = trip * per_iteration
        if len(self.nodes) + estimate > MAX_NODES_PER_RANK:
            where = format_location(op.location, "")
            raise InputError(
                f"{where + ': ' if where else ''}this stablehlo.while runs {trip:,} times with {per_iteration:,} "
                f"communication op(s) per iteration: unrolled (Chakra has no loops) its graph would need at least "
                f"{estimate:,} nodes per rank, over the limit of {MAX_NODES_PER_RANK:,}; give chakra=false to keep "
                "the costs and collective totals without a trace, or export the program with a smaller trip count"
            )

    def _compact_loop(self, op, cond, body, trip: int, operand_deps) -> None:
        """Build iterations 0-3 of a long loop (compute chains cut at iteration
        boundaries) and record a TLoop: 0 and 1 as they come, 3 must be 2 shifted."""
        self.unrolled += 1
        self.chain = None
        start = len(self.nodes)
        bounds = [start]
        carried = operand_deps
        self._loop_depth += 1
        for _ in range(4):
            self.bind(cond.arguments, carried)
            self.walk_block(cond)
            self.bind(body.arguments, carried)
            carried = self.walk_block(body)
            self.chain = None
            bounds.append(len(self.nodes))
        self._loop_depth -= 1
        self.bind(op.results, carried)
        loc = format_location(op.location, "")
        lp = TLoop(start, bounds[2] - start, bounds[3] - bounds[2], trip, loc)
        why = _template_periodic(self.nodes, lp) if bounds[4] - bounds[3] == lp.per else "iteration sizes differ"
        if why is not None:
            raise _NotPeriodic(f"{loc}: {why}" if loc else why)
        self.loops.append(lp)

    def visit_control(self, op, name: str) -> None:
        vals = self.vals
        operand_deps = [vals.get(v, ()) for v in op.operands]
        if name == "stablehlo.while":
            trip = self.cost(op)[3]
            if trip is None:
                trip = infer_trip_count(op)
            if trip is None:
                self.warn(
                    op,
                    "Chakra export: cannot infer the trip count of a 'stablehlo.while' that communicates; "
                    "exporting one iteration",
                )
                trip = 1
            cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
            if self.compact and self._loop_depth == 0 and trip >= COMPACT_MIN_TRIPS:
                per_estimate = max(1, self._comm_per_run(op))
                if trip * per_estimate >= COMPACT_MIN_NODES:
                    self._compact_loop(op, cond, body, trip, operand_deps)
                    return
            self._check_unroll(op, trip)
            self.unrolled += 1
            carried = operand_deps
            self._loop_depth += 1
            for _ in range(trip):
                self.bind(cond.arguments, carried)
                self.walk_block(cond)
                self.bind(body.arguments, carried)
                carried = self.walk_block(body)
            self._loop_depth -= 1
            self.bind(op.results, carried)
            return
        if name in ("stablehlo.case", "stablehlo.if"):
            from ..branches import chosen, op_weights

            self.retimable = False  # the branch taken may depend on the times

            weights = op_weights(op)
            if weights is not None and len(weights) == len(op.regions):
                k = chosen(weights)
                if k is None:
                    where = format_location(op.location, "")
                    raise InputError(
                        f"{where + ': ' if where else ''}'{name}' contains communication and annotate-cost weighed its "
                        "branches with branch=mean: a trace runs one branch; annotate with branch=max or branch=<index>"
                    )
                best = op.regions[k]
                self.warn(op, f"Chakra export: '{name}' contains communication; exporting branch {k} (annotate-cost's branch choice)")
            else:  # not annotated by this version: the most expensive branch, as branch=max
                best, best_t = None, -1.0
                for region in op.regions:
                    t = 0.0
                    for block in region.blocks:
                        for inner in block.operations:
                            t += self.cost(inner.operation)[0]
                    if t > best_t:
                        best, best_t = region, t
                self.warn(op, f"Chakra export: '{name}' contains communication; exporting its most expensive branch")
            ret: list = []
            for block in best.blocks:
                ret = self.walk_block(block)
            self.bind(op.results, ret)
            return
        key = CALL_OPS.get(name)
        if key is not None and key in op.attributes:
            callee = ir.FlatSymbolRefAttr(op.attributes[key]).value
            fn = self.funcs.get(callee)
            if fn is None or callee in self._stack:
                c = self.cost(op)
                if self.record:
                    self.checks.append((op, c[0] > 0))
                res = self.add_compute(op, name, c, set().union(*operand_deps)) if c[0] > 0 else ()
                self.bind(op.results, [res] * len(op.results))
                return
            self._stack.append(callee)
            blocks = list(fn.regions[0].blocks)
            self.bind(blocks[0].arguments, operand_deps)
            ret: list = []
            for block in blocks:
                ret = self.walk_block(block)
            self._stack.pop()
            self.bind(op.results, ret)
            return
        # manual_computation, named_computation, scan, an async_start holding its
        # computation inline (XLA's async collectives), unknown: each region once
        # (chlo.scan: `length` times), block arguments bound to the operands.
        repeat = self.cost(op)[3] if name == "chlo.scan" else None
        ret = []
        for _ in range(repeat or 1):
            for region in op.regions:
                for block in region.blocks:
                    self.bind(block.arguments, operand_deps)
                    ret = self.walk_block(block)
        self.bind(op.results, ret)


def _channel_id(op) -> int | None:
    if "channel_handle" not in op.attributes:
        return None
    text = str(op.attributes["channel_handle"])
    # #stablehlo.channel_handle<handle = 1, type = 2>
    import re

    m = re.search(r"handle\s*=\s*(-?\d+)", text)
    return int(m.group(1)) if m else None


def _int_attr(op, name: str, default: int) -> int:
    if name in op.attributes:
        try:
            return int(ir.IntegerAttr(op.attributes[name]).value)
        except (ValueError, TypeError):
            return default
    return default


def module_devices(module: ir.Operation) -> tuple[int, int]:
    """(num_replicas, num_partitions) as extract-collectives reads them: the `mhlo.num_*`
    attributes, else one replica x the largest Shardy mesh."""
    r = _int_attr(module, "mhlo.num_replicas", 1)
    p = _int_attr(module, "mhlo.num_partitions", 1)
    if "mhlo.num_replicas" not in module.attributes and "mhlo.num_partitions" not in module.attributes:
        try:
            from ..collectives import sdy_meshes

            meshes = sdy_meshes(module)
        except Exception:
            meshes = {}
        if meshes:
            p = max(max(m.size, max(m.device_ids, default=-1) + 1) for m in meshes.values())
    return r, p


def entry_functions(module: ir.Operation) -> list[str]:
    names = []
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "func.func":
            continue
        vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
        if vis is None or ir.StringAttr(vis).value == "public":
            names.append(ir.StringAttr(op.attributes["sym_name"]).value)
    return names


def summary_total_ns(module: ir.Operation) -> float | None:
    if SUMMARY_ATTR not in module.attributes:
        return None
    d = ir.DictAttr(module.attributes[SUMMARY_ATTR])
    if "total_time_ns" not in d:
        return None
    return ir.FloatAttr(d["total_time_ns"]).value


def _default_decoder(module, decoded: dict | None = None):
    """decode_collective for the builder. `decoded`: what extract-collectives decoded in
    this run, op -> (num_replicas, num_partitions, info), keyed once the op's attributes
    were final (an ir.Operation's hash follows its attributes): reused instead of
    decoded again."""
    from ..collectives import decode_collective, sdy_meshes

    meshes = sdy_meshes(module)
    groups_cache: dict = {}
    known = decoded or {}

    def decode(op, num_replicas, num_partitions):
        hit = known.get(op)
        if hit is not None and hit[0] == num_replicas and hit[1] == num_partitions:
            return hit[2]
        return decode_collective(op, num_replicas, num_partitions, meshes=meshes, cache=groups_cache)

    return decode


def build_template(
    module: ir.Operation,
    granularity: str = "region",
    *,
    decode: Callable | None = None,
    diags=None,
    compact: bool = True,
    record: bool = False,
) -> TemplateGraph:
    """The program as one rank-independent graph (collectives carry all their groups);
    `compact=False` unrolls every loop; `record=True` keeps a RetimePlan, so that
    `retime_template` can give the graph of a copy of the module costed for other
    hardware without walking it again."""
    if granularity not in ("op", "region"):
        raise InputError(f"granularity must be 'op' or 'region', got '{granularity}'")
    if SUMMARY_ATTR not in module.attributes:
        raise InputError("the module has no costmodel.summary: run --annotate-cost before exporting a Chakra trace")
    num_replicas, num_partitions = module_devices(module)
    with module.context:
        builder = _Builder(
            module, granularity, num_replicas, num_partitions, decode or _default_decoder(module), diags
        )
        builder.compact = compact
        builder.record = record
        builder.run(entry_functions(module))
    nodes = builder.nodes
    cum = _round_durations(nodes, builder.loops, builder.warnings)
    plan = None
    if record and builder.retimable and not builder.loops:  # compact loops: periodicity depends on the times
        from ..ir import nested_ops

        pos = {op: i for i, op in enumerate(nested_ops(module))}
        plan = RetimePlan(
            [(pos[op], positive) for op, positive in builder.checks],
            {idx: [pos[op] for op in ops] for idx, ops in builder.contrib.items()},
        )
    return TemplateGraph(
        nodes=nodes,
        num_replicas=num_replicas,
        num_partitions=num_partitions,
        granularity=granularity,
        compute_time_ns=cum,
        unrolled_loops=builder.unrolled,
        folded_loops=builder.folded,
        warnings=builder.warnings,
        loops=builder.loops,
        retime=plan,
    )


def retime_template(template: TemplateGraph, module: ir.Operation) -> TemplateGraph | None:
    """The template `build_template(module)` would build, from `template` (built with
    record=True from a copy of `module` costed for other hardware or by another backend:
    same ops, same kernels): its compute nodes re-timed from `module`'s costs, added in
    the same order (so the sums are the same floats). None when the graph's shape would
    differ (an op's time is zero on one and not on the other): build it then."""
    plan = template.retime
    if plan is None:
        return None
    from ..ir import nested_ops

    ops = nested_ops(module)
    reader = _Builder.__new__(_Builder)  # only its cost() and cost cache
    reader._cost_cache = {}
    cache: dict[int, float] = {}

    def time_at(p: int) -> float:
        t = cache.get(p)
        if t is None:
            t = cache[p] = reader.cost(ops[p])[0]
        return t

    with module.context:
        if len(ops) <= max((p for p, _ in plan.checks), default=-1):
            return None
        for p, positive in plan.checks:
            if (time_at(p) > 0.0) != positive:
                return None
        nodes = [dataclasses.replace(nd) for nd in template.nodes]
        for idx, positions in plan.contrib.items():
            t = 0.0
            for p in positions:
                t += time_at(p)
            nodes[idx].time_ns = t
    warnings = list(template.warnings)
    cum = _round_durations(nodes, [], warnings)
    return dataclasses.replace(template, nodes=nodes, compute_time_ns=cum, warnings=warnings)


def _template_periodic(nodes: list[TNode], lp: TLoop) -> str | None:
    """None when the loop's iteration 3 is iteration 2 shifted by one iteration."""
    s1, per, start = lp.start + lp.first, lp.per, lp.start
    for k in range(per):
        a, b = nodes[s1 + k], nodes[s1 + per + k]
        if (a.kind, a.time_ns, a.flops, a.nbytes, a.op_count, a.kernel_count, a.comm_kind, a.comm_bytes) != (
            b.kind, b.time_ns, b.flops, b.nbytes, b.op_count, b.kernel_count, b.comm_kind, b.comm_bytes
        ) or a.groups != b.groups or a.pairs != b.pairs:
            return f"node {b.idx} is not node {a.idx} of the previous iteration"
        want = {d + per if d >= start else d for d in a.deps}
        if b.deps != want or any(start <= d < s1 for d in b.deps):
            return f"node {b.idx} depends on other nodes than node {a.idx} does, shifted"
    return None


class _NotPeriodic(Exception):
    """A compact loop whose iterations are not shifted copies of each other (on some
    rank): the template is built again with the loop unrolled."""


def _round_durations(nodes: list[TNode], loops: list[TLoop], warnings: list[str]) -> float:
    """`duration_us` of COMP nodes: rounding with the error carried forward (node k gets
    round(S_k) - round(S_{k-1})), so a rank's durations add up to its compute time within
    0.5 us. In a compact loop, iterations 1 and 2 are rounded on their own (carry reset at
    the iteration start) so that every later iteration is the same; the loop's error then
    is trips x that iteration's (warned when it exceeds 1% of the loop's compute).
    Returns the exact compute time of one rank, every iteration counted."""
    cum = 0.0  # the rounded-so-far total, in ns, that the next node continues from
    prev_us = 0
    exact = 0.0
    bounds = {}
    for lp in loops:
        bounds[lp.start + lp.first] = lp  # iteration 1 starts
    i, n = 0, len(nodes)
    while i < n:
        lp = bounds.get(i)
        if lp is not None:
            # iterations 1 and 2: the same rounding for both (carry reset)
            for it in range(2):
                lo = lp.start + lp.first + it * lp.per
                local, local_prev = 0.0, 0
                for node in nodes[lo:lo + lp.per]:
                    if node.kind == "comp":
                        local += node.time_ns
                        us = math.floor(local / 1000.0 + 0.5)
                        node.duration_us = us - local_prev
                        local_prev = us
                if it == 0:
                    lp.compute_ns_per = local
                    per_us = local_prev
            lp.compute_ns_first = sum(x.time_ns for x in nodes[lp.start:lp.start + lp.first] if x.kind == "comp")
            rest = lp.trips - 2  # iterations from 2 on: P's rounding
            exact += lp.compute_ns_per * rest
            # the rest of the trace continues after the loop's rounded total
            cum = prev_us * 1000.0 + per_us * 1000.0 * rest
            prev_us = math.floor(cum / 1000.0 + 0.5)
            off_ns = abs(per_us * 1000.0 - lp.compute_ns_per) * rest
            if lp.compute_ns_per > 0 and off_ns > 0.01 * lp.compute_ns_per * rest:
                warnings.append(
                    f"Chakra's whole microseconds: one iteration of the loop at {lp.loc or 'an unknown location'} "
                    f"computes {lp.compute_ns_per / 1000:.3f} us, written as {per_us} us; over {lp.trips:,} trips the "
                    f"trace's compute is off by {off_ns / 1000:.1f} us"
                )
            i = lp.start + lp.first + 2 * lp.per
            continue
        node = nodes[i]
        if node.kind == "comp":
            exact += node.time_ns
            cum += node.time_ns
            us = math.floor(cum / 1000.0 + 0.5)
            node.duration_us = us - prev_us
            prev_us = us
        i += 1
    return exact


# ---------------------------------------------------------------------------
# per-rank graphs
# ---------------------------------------------------------------------------


INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


def _attr(node: pb.Node, name: str, **value) -> None:
    """A Chakra attribute; an int64 count beyond its range (the flops of a loop of 10^18
    trips as one node) saturates at 2^63 - 1: the field cannot hold it, and the node's
    duration, not its counts, is what the simulators replay."""
    a = node.attr.add()
    a.name = name
    for k, v in value.items():
        if k == "int64_val" and v > INT64_MAX:
            v = INT64_MAX
        setattr(a, k, v)


@dataclasses.dataclass
class RankGraphs:
    nodes: list[list[pb.Node]]  # per rank (compact loops: 3 iterations, see chakra.loops)
    comm_groups: dict[str, list[int]]  # pg_name -> ranks
    comm_time_ns: list[float]  # per rank: our model's time of its communication ops (every iteration)
    node_counts: list[dict[str, int]]  # per rank, every iteration counted
    compute_us: list[int]
    loops: list[list] = dataclasses.field(default_factory=list)  # per rank: chakra.loops.RankLoop
    # every rank runs rank 0's timeline (`symmetric_ranks`): simulate_graphs runs rank 0 only;
    # the ranks then share rank 0's node objects (a collective of another group excepted)
    symmetric: bool = False

    def expanded_nodes(self, rank: int) -> int:
        from .loops import expanded_count

        return expanded_count(len(self.nodes[rank]), self.loops[rank] if self.loops else [])


def _comp_node(tn) -> pb.Node:
    """A template compute node's Chakra node, without id and dependencies."""
    node = pb.Node(name=tn.name, type=pb.COMP_NODE, duration_micros=min(tn.duration_us, UINT64_MAX))
    _attr(node, "is_cpu_op", bool_val=False)
    _attr(node, "num_ops", int64_val=max(1, tn.flops))
    _attr(node, "tensor_size", int64_val=max(1, tn.nbytes))
    _attr(node, "op_count", int64_val=tn.op_count)
    if tn.kernel_count:
        _attr(node, "kernel_count", int64_val=tn.kernel_count)
    return node


def _group_full(group, n: int) -> bool:
    return len(group) == n and sorted(group) == list(range(n))


def symmetric_ranks(template: TemplateGraph, num_ranks: int, active_ranks: int, priced: Callable) -> bool:
    """Whether every rank runs the same timeline: all ranks active, nothing point to
    point, and each collective either skipped by every rank (groups of one) or split
    into groups of one size that cover every rank once and cost the same
    (`priced(kind, bytes, group)`). Rank r's graph then differs from rank 0's at most in
    the names of its groups, its collectives start when it issues them (its peers
    issue them at the same time) and take as long as rank 0's."""
    if num_ranks < 2 or active_ranks != num_ranks:
        return False
    for tn in template.nodes:
        if tn.kind == "comp":
            continue
        if tn.kind != "coll":
            return False
        groups = [g for g in tn.groups or () if len(g) > 1]
        if not groups:
            continue  # no rank takes part
        size = len(groups[0])
        if any(len(g) != size for g in groups) or size * len(groups) != num_ranks:
            return False
        if len({r for g in groups for r in g}) != num_ranks:
            return False
        if len({priced(tn.comm_kind, tn.comm_bytes, g) for g in groups}) != 1:
            return False
    return True


def instantiate(
    template: TemplateGraph, num_ranks: int, comm_time: Callable, *, active_ranks: int | None = None
) -> RankGraphs:
    """Per-rank node lists. `comm_time(kind, comm_bytes, group) -> ns` prices communication.
    Ranks from `active_ranks` on (the system is bigger than the program) get no nodes."""
    if active_ranks is None:
        active_ranks = num_ranks
    tnodes = template.nodes
    group_ids: dict[tuple, str] = {}
    membership: dict[int, dict[int, list[int]]] = {}
    for tn in tnodes:
        if tn.kind == "coll":
            m: dict[int, list[int]] = {}
            for g in tn.groups or ():
                for r in g:
                    m[r] = g
            membership[tn.idx] = m
            for g in tn.groups or ():
                bad = [r for r in g if not 0 <= r < num_ranks]
                if bad:
                    raise InputError(
                        f"{tn.comm_kind} at {tn.loc or 'an unknown location'} names device {bad[0]} "
                        f"but the trace has {num_ranks} ranks"
                    )
                if len(g) > 1 and not _group_full(g, num_ranks) and tuple(g) not in group_ids:
                    group_ids[tuple(g)] = str(len(group_ids) + 1)
    comm_cache: dict = {}

    def priced(kind, size, group):
        key = (kind, size, tuple(group))
        t = comm_cache.get(key)
        if t is None:
            t = float(comm_time(kind, size, list(group)))
            comm_cache[key] = t
        return t

    all_nodes: list[list[pb.Node]] = []
    all_loops: list[list] = []
    comm_totals: list[float] = []
    counts: list[dict[str, int]] = []
    compute_us: list[int] = []
    COMP, COLL, SEND, RECV = pb.COMP_NODE, pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE
    protos: dict = {}  # template node (and group) -> its node without id and deps
    from ..progress import progress

    def coll_proto(tn, g, t_ns, keep: bool = True):
        key = (tn.idx, id(g))  # every member of a group shares its list `g`
        proto = protos.get(key)
        if proto is None:
            proto = pb.Node(name=tn.name, type=COLL)
            if tn.comm_kind == "collective_broadcast":
                proto.duration_micros = min(math.floor(t_ns / 1000.0 + 0.5), UINT64_MAX)
            _attr(proto, "is_cpu_op", bool_val=False)
            _attr(proto, "comm_type", int64_val=COMM_TYPE_OF_KIND[tn.comm_kind])
            _attr(proto, "comm_size", int64_val=tn.comm_bytes)
            if not _group_full(g, num_ranks):
                _attr(proto, "pg_name", string_val=group_ids[tuple(g)])
            if keep:
                protos[key] = proto
        return proto

    symmetric = symmetric_ranks(template, num_ranks, active_ranks, priced)
    coll_at: list[tuple[int, int]] = []  # rank 0: (node id, template index) of its collectives
    group_nodes: dict = {}  # symmetric: (node id, group) -> the node every member of the group shares
    for rank in progress(range(num_ranks), total=num_ranks, desc="chakra: rank graphs", unit="rank"):
        if symmetric and rank > 0:
            # rank 0's nodes (not mutated later: shared), but a collective of another
            # group than rank 0's gets the node of its group (its pg_name), which the
            # group's members share; ids, dependencies, loops and totals are rank 0's
            # (symmetric_ranks)
            out = all_nodes[0]
            for pos, tidx in coll_at:
                m = membership[tidx]
                g = m.get(rank)
                if g is m.get(0):
                    continue
                if out is all_nodes[0]:
                    out = list(out)
                n = group_nodes.get((pos, id(g)))
                if n is None:
                    tn, n0 = tnodes[tidx], out[pos]
                    n = group_nodes[(pos, id(g))] = coll_proto(tn, g, priced(tn.comm_kind, tn.comm_bytes, g), keep=False)
                    n.id = n0.id
                    n.data_deps.extend(n0.data_deps)
                    n.ctrl_deps.extend(n0.ctrl_deps)
                out[pos] = n
            all_nodes.append(out)
            all_loops.append(all_loops[0])
            comm_totals.append(comm_totals[0])
            counts.append(dict(counts[0]))
            compute_us.append(compute_us[0])
            continue
        idmap: list = [()] * len(tnodes)
        out: list[pb.Node] = []
        last_comp = last_comm = None
        comm_ns = 0.0
        us_sum = 0
        c = {"COMP_NODE": 0, "COMM_COLL_NODE": 0, "COMM_SEND_NODE": 0, "COMM_RECV_NODE": 0}
        if rank >= active_ranks:
            all_nodes.append(out)
            all_loops.append([])
            comm_totals.append(0.0)
            counts.append(c)
            compute_us.append(0)
            continue

        def resolve(deps):
            s = set()
            for d in deps:
                s.update(idmap[d])
            return sorted(s)

        marks: dict[int, int] = {}  # template index -> rank node count there (compact loop bounds)
        for lp in template.loops:
            for b in (lp.start, lp.start + lp.first, lp.start + lp.first + lp.per, lp.end):
                marks[b] = -1
        node_comm: list[float] = []  # per rank node: its communication time (comm_ns adds these)
        for tn in tnodes:
            if tn.idx in marks:
                marks[tn.idx] = len(out)
            while len(node_comm) < len(out):
                node_comm.append(0.0)
            comm_before = comm_ns
            deps = resolve(tn.deps)
            if tn.kind == "comp":
                if symmetric:  # built for rank 0 alone: the other ranks share its nodes
                    n = _comp_node(tn)
                else:
                    proto = protos.get(tn.idx)
                    if proto is None:  # the same on every rank: built once, copied (C) per rank
                        proto = protos[tn.idx] = _comp_node(tn)
                    n = pb.Node()
                    n.CopyFrom(proto)
                n.id = len(out)
                n.data_deps.extend(deps)
                if last_comp is not None and last_comp not in deps:
                    n.ctrl_deps.append(last_comp)
                last_comp = n.id
                out.append(n)
                idmap[tn.idx] = (n.id,)
                us_sum += tn.duration_us
                c["COMP_NODE"] += 1
                continue
            created: list[pb.Node] = []
            if tn.kind == "coll":
                g = membership[tn.idx].get(rank)
                if g is None or len(g) < 2:
                    idmap[tn.idx] = tuple(deps)
                    continue
                t_ns = priced(tn.comm_kind, tn.comm_bytes, g)
                comm_ns += t_ns
                if symmetric:  # rank 0 alone builds it: the node itself, no copy kept
                    n = coll_proto(tn, g, t_ns, keep=False)
                    coll_at.append((len(out), tn.idx))
                else:
                    n = pb.Node()
                    n.CopyFrom(coll_proto(tn, g, t_ns))
                n.id = len(out)
                created.append(n)
            else:
                pairs = tn.pairs or []
                sends = [p for p in pairs if p[0] == rank and p[0] != p[1]] if tn.comm_kind != "recv" else []
                recvs = [p for p in pairs if p[1] == rank and p[0] != p[1]] if tn.comm_kind != "send" else []
                for src, dst in sends:
                    n = pb.Node(id=len(out) + len(created), name=f"{tn.name}.send", type=SEND)
                    _attr(n, "is_cpu_op", bool_val=False)
                    _attr(n, "comm_src", int64_val=src)
                    _attr(n, "comm_dst", int64_val=dst)
                    _attr(n, "comm_size", int64_val=tn.comm_bytes)
                    _attr(n, "comm_tag", int64_val=tn.tag)
                    comm_ns += priced("send", tn.comm_bytes, (src, dst))
                    created.append(n)
                for src, dst in recvs:
                    n = pb.Node(id=len(out) + len(created), name=f"{tn.name}.recv", type=RECV)
                    _attr(n, "is_cpu_op", bool_val=False)
                    _attr(n, "comm_src", int64_val=src)
                    _attr(n, "comm_dst", int64_val=dst)
                    _attr(n, "comm_size", int64_val=tn.comm_bytes)
                    _attr(n, "comm_tag", int64_val=tn.tag)
                    created.append(n)
                if not created:
                    idmap[tn.idx] = tuple(deps)
                    continue
            for n in created:
                n.data_deps.extend(deps)
                if last_comm is not None and last_comm not in deps:
                    n.ctrl_deps.append(last_comm)
                last_comm = n.id
                out.append(n)
                c[NODE_TYPE_NAMES[n.type]] += 1
            idmap[tn.idx] = tuple(n.id for n in created)
            if template.loops:
                while len(node_comm) < len(out):
                    node_comm.append(0.0)
                node_comm[len(out) - len(created)] = comm_ns - comm_before
        rank_loops = []
        if template.loops:
            from .loops import RankLoop, check_periodic

            for b, v in marks.items():
                if v < 0:
                    marks[b] = len(out)
            while len(node_comm) < len(out):
                node_comm.append(0.0)
            for lp in template.loops:
                start_r, s1, s2 = marks[lp.start], marks[lp.start + lp.first], marks[lp.start + lp.first + lp.per]
                end_r = marks.get(lp.end, len(out))
                rl = RankLoop(start_r, s1 - start_r, s2 - s1, lp.trips, lp.loc)
                if end_r - s2 != rl.per:
                    raise _NotPeriodic(f"rank {rank}: iterations 1 and 2 have {rl.per} and {end_r - s2} nodes")
                why = check_periodic(out, rl)
                if why is not None:
                    raise _NotPeriodic(f"rank {rank}: {why}")
                for n in out[end_r:]:
                    for d in (*n.data_deps, *n.ctrl_deps):
                        if start_r <= d < s1:
                            raise _NotPeriodic(f"rank {rank}: node {n.id} after the loop depends on its iteration 0")
                mult = lp.trips - rl.held
                for n in out[s2:end_r]:
                    c[NODE_TYPE_NAMES[n.type]] += mult
                    if n.type == COMP:
                        us_sum += mult * n.duration_micros
                comm_ns += mult * sum(node_comm[s2:end_r])
                rank_loops.append(rl)
        all_nodes.append(out)
        all_loops.append(rank_loops)
        comm_totals.append(comm_ns)
        counts.append(c)
        compute_us.append(us_sum)
    groups = {gid: list(g) for g, gid in group_ids.items()}
    return RankGraphs(all_nodes, groups, comm_totals, counts, compute_us, all_loops, symmetric)


# ---------------------------------------------------------------------------
# the trace directory
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class ExportResult:
    directory: str
    num_ranks: int
    manifest: dict
    template: TemplateGraph
    graphs: RankGraphs
    staged: str | None = None  # where the directory can be read before the run commits


def _system_texts(system) -> dict[str, str]:
    from .. import systems as systems_mod

    def text(value, kind):
        if isinstance(value, (bytes, bytearray)):
            return value.decode("utf-8")
        if isinstance(value, str):
            return value
        if kind == "json":
            return json.dumps(value, indent=2) + "\n"
        raise TypeError(f"unexpected {type(value).__name__}")

    return {
        NETWORK_FILE: text(systems_mod.to_network_yml(system), "yml"),
        SYSTEM_FILE: text(systems_mod.to_system_json(system), "json"),
        REMOTE_MEMORY_FILE: text(systems_mod.to_remote_memory_json(system), "json"),
    }


def _system_comm_time(system) -> Callable:
    from ..commmodel import collective_time_ns

    def comm_time(kind, size, group):
        t, _algorithm = collective_time_ns(system, kind, size, group)
        return t

    return comm_time


def system_summary(system) -> dict:
    out = {
        "name": getattr(system, "name", None),
        "hardware": getattr(system, "hardware", None),
        "num_npus": getattr(system, "num_npus", None),
    }
    source = getattr(system, "source", None) or getattr(system, "path", None)
    if source:
        # a user's file by its absolute path: `costmodel simulate` runs from anywhere
        out["source"] = os.path.abspath(source) if os.path.isfile(str(source)) else str(source)
    to_json = getattr(system, "to_json", None)
    if callable(to_json):
        out["spec"] = to_json()  # the whole spec: the trace is priced as written, whatever the file becomes
    dims = getattr(system, "dims", None)
    if dims is not None:
        out["dims"] = [_dim_summary(d) for d in dims]
    calibration = getattr(system, "calibration", None)
    if calibration is not None:
        # what ASTRA-sim sees of it: the bandwidth in network.yml is already x bus_efficiency,
        # but it has no per-op latency and still charges its local reduction (docs/communication-model.md)
        out["calibration"] = system.calibration_json()["calibration"]
        out["calibration"]["astra_sim"] = (
            f"network.yml bandwidth = bandwidth_GBps x bus_efficiency; not in ASTRA-sim's files: "
            f"collective_latency_ns = {system.collective_latency_ns:g} per communication op, the fused "
            f"reduction on calibrated dimensions (ASTRA-sim charges 3 x message / local-mem-bw per reduced message)"
            + (", and step_latency_ns once per step of a collective (ASTRA-sim charges hops x latency_ns per "
               "message of every chunk)" if any(d.has_step_latency for d in system.dims) else "")
            + (", and the protocols (" + ", ".join(p.name for p in system.calibration.protocols) + "), each "
               "collective running with the fastest" if system.calibration.protocols else "")
            + (", and rings on a FullyConnected dimension over a rank's n - 1 links at once (ASTRA-sim: one link)"
               if any(d.topology == "FullyConnected" for d in system.dims) else "")
        )
    return out


def _dim_summary(d) -> dict:
    out = dataclasses.asdict(d) if dataclasses.is_dataclass(d) else dict(d)
    for key, default in (("bus_efficiency", None), ("protocol_step_latency_ns", None),
                         ("protocol_max_bandwidth_GBps", None), ("bandwidth_factor", 1.0),
                         ("bandwidth_cap_factor", None)):
        if key in out and out[key] == default:  # not calibrated so: the manifest reads as before
            del out[key]
    for key in ("protocol_step_latency_ns", "protocol_max_bandwidth_GBps"):
        if key in out:
            out[key] = dict(out[key])
    return out


def astra_sim_args(prefix: str, with_groups: bool) -> list[str]:
    args = [
        f"--workload-configuration={prefix}",
        f"--system-configuration={SYSTEM_FILE}",
        f"--network-configuration={NETWORK_FILE}",
        f"--remote-memory-configuration={REMOTE_MEMORY_FILE}",
    ]
    if with_groups:
        args.append(f"--comm-group-configuration={COMM_GROUP_FILE}")
    return args


def is_our_trace_dir(path: str) -> bool:
    try:
        with open(os.path.join(path, MANIFEST)) as fh:
            return json_load(fh).get("generator") == GENERATOR
    except (OSError, ValueError, AttributeError):
        return False


def write_trace_dir(directory: str, files: dict[str, bytes], outputs=None) -> str:
    """Write all `files` as the trace directory `directory` (costmodel.outputs rules: an
    existing directory is replaced only when it is empty or one of ours, and only the
    files we wrote are removed). With an `OutputSet`, the directory is only staged and
    the staged path returned; the run commits it with its other outputs."""
    from costmodel.outputs import OutputError, OutputSet

    try:
        if outputs is not None:
            return outputs.stage_dir(directory, files, GENERATOR)
        with OutputSet() as outs:
            outs.stage_dir(directory, files, GENERATOR)
            outs.commit()
        return os.path.abspath(directory)
    except OutputError as err:
        raise InputError(str(err)) from None


def export_module(
    module: ir.Operation,
    system,
    directory: str,
    *,
    prefix: str = "trace",
    granularity: str = "region",
    diags=None,
    decode: Callable | None = None,
    comm_time: Callable | None = None,
    system_files: dict[str, str] | None = None,
    source: str | None = None,
    outputs=None,
    write: bool = True,
    template: TemplateGraph | None = None,
    record: bool = False,
) -> ExportResult:
    """Build and write the trace directory for `module` on `system` (staged in
    `outputs`, a `costmodel.outputs.OutputSet`, when given: `ExportResult.staged` is
    then where it can be read until the run commits). `template`: the module's graph,
    already built (retime_template); `record`: keep a RetimePlan in the result's
    template."""
    _check_prefix(prefix)
    if template is not None:
        if template.granularity != granularity:
            raise ValueError("export_module: the template was built with another granularity")
        return _export(module, template, system, directory, prefix, granularity, diags, decode, comm_time,
                       system_files, source, outputs, write)
    try:
        template = build_template(module, granularity, decode=decode, diags=diags, record=record)
        return _export(module, template, system, directory, prefix, granularity, diags, decode, comm_time,
                       system_files, source, outputs, write)
    except _NotPeriodic as why:
        # iterations of a long loop are not copies of each other: unroll it (node limit applies)
        template = build_template(module, granularity, decode=decode, diags=None, compact=False)
        template.warnings.append(f"a long loop was unrolled: its iterations differ ({why})")
        return _export(module, template, system, directory, prefix, granularity, diags, decode, comm_time,
                       system_files, source, outputs, write)


def _export(module, template, system, directory, prefix, granularity, diags, decode, comm_time, system_files,
            source, outputs, write) -> ExportResult:
    devices = template.num_devices
    npus = getattr(system, "num_npus", None) if system is not None else None
    if npus is None:
        num_ranks = devices
    elif devices > npus:
        raise InputError(
            f"the program runs on {devices} devices (num_replicas {template.num_replicas} x num_partitions "
            f"{template.num_partitions}) but system '{getattr(system, 'name', '?')}' has {npus} NPUs"
        )
    else:
        num_ranks = npus
    if devices < num_ranks:
        template.warnings.append(
            f"the program runs on {devices} device(s) and the system has {num_ranks} NPUs: "
            f"ranks {devices}..{num_ranks - 1} are idle (empty graphs)"
        )
    if comm_time is None:
        comm_time = _system_comm_time(system)
    graphs = instantiate(template, num_ranks, comm_time, active_ranks=devices)
    if system_files is None:
        system_files = _system_texts(system)
    total_ns = summary_total_ns(module)
    files: dict = {}
    ranks_meta = []
    if template.loops and write:
        biggest = max(graphs.expanded_nodes(r) for r in range(num_ranks))
        if biggest > MAX_WRITTEN_NODES_PER_RANK:
            lp = max(template.loops, key=lambda x: x.trips * x.per)
            raise InputError(
                f"{lp.loc + ': ' if lp.loc else ''}this stablehlo.while runs {lp.trips:,} times with "
                f"{lp.per:,} node(s) per iteration: the Chakra trace (Chakra has no loops) would have "
                f"{biggest:,} nodes per rank, over the limit of {MAX_WRITTEN_NODES_PER_RANK:,} written; give "
                "chakra=false to keep the costs and collective totals without a trace (`costmodel predict` "
                "simulates such a loop in memory), or export the program with a smaller trip count"
            )
    from ..progress import progress

    encoded: dict = {}  # encode_trace: the nodes that symmetric ranks share, encoded once
    for rank, nodes in progress(
        enumerate(graphs.nodes), total=num_ranks, desc="chakra: encoding", unit="rank"
    ):
        meta = make_metadata({"generator": GENERATOR, "rank": rank, "num_ranks": num_ranks})
        name = f"{prefix}.{rank}.et"
        entry = {
            "rank": rank,
            "file": name,
            "nodes": graphs.expanded_nodes(rank),
            "node_counts": graphs.node_counts[rank],
            "compute_duration_us": graphs.compute_us[rank],
            "comm_time_ns": graphs.comm_time_ns[rank],
        }
        rank_loops = graphs.loops[rank] if graphs.loops else []
        if rank_loops:
            entry["loops"] = [lp.to_dict() for lp in rank_loops]
            files[name] = _streamed_trace(meta, nodes, rank_loops, entry)
        elif write:
            files[name] = encode_trace(meta, nodes, encoded if graphs.symmetric else None)
        ranks_meta.append(entry)
    files[COMM_GROUP_FILE] = (json.dumps(graphs.comm_groups, indent=2) + "\n").encode()
    for name, text in system_files.items():
        files[name] = text.encode("utf-8")
    totals: dict[str, int] = {}
    for c in graphs.node_counts:
        for k, v in c.items():
            totals[k] = totals.get(k, 0) + v
    args = astra_sim_args(prefix, bool(graphs.comm_groups))
    directory = expand_path(directory)
    abs_dir = os.path.abspath(directory)
    manifest = {
        "generator": GENERATOR,
        "chakra_version": CHAKRA_VERSION,
        "source": source,
        "prefix": prefix,
        "ranks": num_ranks,
        "files": [r["file"] for r in ranks_meta],
        "granularity": granularity,
        "loops": {
            "with_communication": "unrolled by trip count",
            "without_communication": "folded into one compute op with the total cost",
            "unrolled": template.unrolled_loops,
            "folded_control_ops": template.folded_loops,
        },
        "system": system_summary(system) if system is not None else None,
        "num_replicas": template.num_replicas,
        "num_partitions": template.num_partitions,
        "node_counts": totals,
        "per_rank": ranks_meta,
        "comm_groups": graphs.comm_groups,
        "predicted": {
            "compute_time_ns": template.compute_time_ns,
            "module_total_time_ns": total_ns,
            "compute_duration_us": max(graphs.compute_us) if graphs.compute_us else 0,
            "comm_time_ns_max": max(graphs.comm_time_ns) if graphs.comm_time_ns else 0.0,
            "comm_time_ns_sum_over_ranks": sum(graphs.comm_time_ns),
        },
        "astra_sim": {
            "binary": ASTRA_SIM_BINARY,
            "cwd": abs_dir,
            "args": args,
            "command": f"cd {shlex.quote(abs_dir)} && {ASTRA_SIM_BINARY} " + " ".join(args),
        },
        "warnings": template.warnings,
    }
    if template.loops:
        manifest["loops"]["compact"] = [
            {"loc": lp.loc, "trips": lp.trips, "template_nodes_per_iteration": lp.per} for lp in template.loops
        ]
        manifest["loops"]["with_communication"] = (
            "unrolled by trip count (long loops streamed from three iterations; per_rank[].loops says where "
            "their iterations are, for costmodel simulate)"
        )
    manifest["written_files"] = sorted([*files, MANIFEST])
    # the manifest is written last: streamed traces fill in their byte offsets first
    files[MANIFEST] = lambda fh: fh.write((json.dumps(manifest, indent=2) + "\n").encode())
    if not write:  # in-memory use (costmodel predict without --trace): simulate_graphs
        return ExportResult(abs_dir, num_ranks, manifest, template, graphs, staged=None)
    staged = write_trace_dir(directory, files, outputs)
    return ExportResult(abs_dir, num_ranks, manifest, template, graphs, staged=staged)


def _streamed_trace(meta, nodes: list, rank_loops: list, entry: dict):
    """A writer of one rank's full `.et` file from its compact graph: every iteration of
    its compact loops, encoded one node at a time (memory stays that of the compact
    graph). It records in `entry["loops"]` the byte range of the iterations that the
    simulator may skip (4 .. trips - 1), so `costmodel simulate` reads them back compact."""

    def write(fh) -> None:
        from .io import encode_varint
        from .loops import NodeEncoder, expand_ids, expanded_count

        enc = NodeEncoder()
        head = meta.SerializeToString()
        fh.write(encode_varint(len(head)) + head)
        pos = fh.tell()
        loops = sorted(rank_loops, key=lambda lp: lp.start)
        spans = {i: [None, None] for i in range(len(loops))}
        # expanded id ranges of iterations 3 .. trips-1 of every loop
        extra = 0
        skip = []
        for lp in loops:
            lo = lp.end + extra  # the first iteration after the ones held
            hi = lp.s2 + extra + (lp.trips - lp.head - 1) * lp.per  # the loop's end
            skip.append((lo, hi))
            extra += (lp.trips - lp.held) * lp.per
        buf = []
        size = 0
        k = 0
        from ..progress import progress

        total = expanded_count(len(nodes), loops)
        stream = progress(expand_ids(nodes, loops), total=total, desc=f"chakra: {entry['file']}", unit="node",
                          min_total=100_000)
        for node, new_id, dep, mult in stream:
            while k < len(skip) and new_id >= skip[k][1]:
                if spans[k][1] is None:
                    spans[k][1] = pos + size
                if spans[k][0] is None:  # no node on this rank in the skipped iterations
                    spans[k][0] = spans[k][1]
                k += 1
            if k < len(skip) and new_id == skip[k][0] and spans[k][0] is None:
                spans[k][0] = pos + size
            tag = None
            if mult and node.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                tag = _p2p_tag(nodes, node, rank_loops, mult)
            data = enc.encode(node, new_id, dep, tag)
            chunk = encode_varint(len(data)) + data
            buf.append(chunk)
            size += len(chunk)
            if len(buf) >= 4096:
                fh.write(b"".join(buf))
                buf.clear()
        fh.write(b"".join(buf))
        end = pos + size
        for i, lp in enumerate(loops):
            lo, hi = spans[i]
            d = entry["loops"][i]
            d["skip_bytes"] = [lo if lo is not None else end, hi if hi is not None else end]
        entry["file_bytes"] = end

    return write


def _p2p_tag(nodes: list, node, rank_loops: list, mult: int) -> int | None:
    """tag(iteration 2) + mult x (tag(2) - tag(1)) for a p2p node of a loop's iteration 2."""
    from .loops import _tag

    for lp in rank_loops:
        if lp.s2 <= node.id < lp.end:
            t2, t1 = _tag(node), _tag(nodes[node.id - lp.per])
            if t2 is None or t1 is None or t2 == t1:
                return None
            return t2 + mult * (t2 - t1)
    return None


def expand_path(path: str) -> str:
    from costmodel.outputs import expand_path as _expand

    return _expand(path)


def _check_prefix(prefix: str) -> None:
    if not prefix or "/" in prefix or os.sep in prefix or prefix in (".", ".."):
        raise InputError(f"chakra-prefix must be a plain file name prefix, got '{prefix}'")


# ---------------------------------------------------------------------------
# pass entry
# ---------------------------------------------------------------------------


def busiest_rank_collectives(manifest: dict) -> int:
    """Collectives of the busiest rank: the one count that the export message, `costmodel
    simulate` and `costmodel chakra check` all report as "collectives per rank" (idle
    ranks of a system larger than the program do not dilute it)."""
    return _busiest_rank(manifest, "COMM_COLL_NODE")


def _busiest_rank(manifest: dict, node_type: str) -> int:
    per_rank = manifest.get("per_rank") or []
    return max((int((r.get("node_counts") or {}).get(node_type, 0)) for r in per_rank), default=0)


def resolve_output_dir(options: dict, session) -> str:
    given = expand_path(options.get("chakra-dir") or "")
    cwd = getattr(session, "cwd", None) or os.getcwd()
    if given:
        path = given if os.path.isabs(given) else os.path.join(cwd, given)
    else:
        out = getattr(session, "output_path", None)
        if out and out != "-":
            out = out if os.path.isabs(out) else os.path.join(cwd, out)
        if out and out != "-" and (os.path.isfile(out) or not os.path.exists(out)):
            # beside a regular output file; an output that is a device or a pipe
            # (-o /dev/null, /dev/stdout) has no folder of ours beside it: as for stdout
            stem = os.path.splitext(os.path.basename(out))[0]
            path = os.path.join(os.path.dirname(out), f"{stem}.chakra")
        else:
            path = os.path.join(cwd, "chakra")
    chunk = getattr(session, "chunk_index", None)
    if chunk is not None:
        path = f"{path.rstrip(os.sep)}.{chunk}"
    return os.path.normpath(path)


def _display(path: str, cwd: str) -> str:
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def run_from_pass(
    module: ir.Operation, system, options: dict, session, decoded: dict | None = None
) -> ExportResult | None:
    """What `extract-collectives` and `export-chakra` call at their end (`decoded`: the
    collectives extract-collectives decoded, see _default_decoder)."""
    if not options.get("chakra", True):
        return None
    if system is None:
        raise InputError("a Chakra trace needs a system: give system=<preset or .json> (see `costmodel systems list`)")
    granularity = options.get("granularity") or "region"
    if granularity not in ("op", "region"):
        raise InputError(f"option 'granularity' expects 'op' or 'region', got '{granularity}'")
    prefix = options.get("chakra-prefix") or "trace"
    directory = resolve_output_dir(options, session)
    try:
        result = export_module(
            module,
            system,
            directory,
            prefix=prefix,
            granularity=granularity,
            diags=session.diagnostics,
            source=getattr(session, "input_path", None),
            outputs=getattr(session, "outputs", None),
            decode=_default_decoder(module, decoded) if decoded else None,
        )
    except (ValueError, TypeError) as err:
        if not str(err).startswith("Cannot cast attribute"):
            raise
        # an input annotated by hand or by another tool: a costmodel.* attribute is not
        # what annotate-cost writes
        raise InputError(
            f"the module's costmodel.* attributes are malformed ({err}); run --annotate-cost on it first"
        ) from None
    cwd = getattr(session, "cwd", None) or os.getcwd()
    counts = result.manifest["node_counts"]
    total_nodes = sum(counts.values())
    # point-to-point traffic (collective-permutes, send/recv: a pipeline's stages) too,
    # which a count of collectives alone hides
    sends = _busiest_rank(result.manifest, "COMM_SEND_NODE")
    session.messages.append(
        f"chakra: wrote {result.num_ranks} ranks ({total_nodes} nodes, "
        f"{busiest_rank_collectives(result.manifest)} collectives"
        f"{f' and {sends} point-to-point send' + ('s' if sends != 1 else '') if sends else ''} per rank) "
        f"to {_display(result.directory, cwd)}/"
    )
    for w in result.manifest["warnings"]:
        if "idle" in w:
            session.messages.append(f"chakra: note: {w}")
    if options.get("simulate"):
        from ..simulate import simulate_graphs

        # The graphs just written are still in memory: simulate them as `costmodel
        # simulate DIR` would read them back (tested equal), without the round trip.
        report = simulate_graphs(result.graphs.nodes, result.graphs.comm_groups, system, loops=result.graphs.loops,
                                 symmetric=result.graphs.symmetric)
        report.directory = result.directory
        session.messages.append("simulate: " + report.one_line())
    return result
