"""Group the ops of one block into kernels, the way XLA's GPU/TPU fusion pipeline does.

Rules (the why and the XLA sources are in docs/kernels.md):

1. Classes. Every op has a class: `free` (bitcast-like: constant, reshape, tuple
   plumbing; alone it is no kernel), `elementwise`, `movement` (broadcast, transpose,
   slice, concatenate, pad, gather ...: fusible loop ops), `reduce` (the hero of an
   "input" fusion), `gemm` (dot), `conv`, `collective`, `opaque` (sort, scatter,
   custom_call ...: a kernel of its own) and `boundary` (while/case/call ...: not a
   kernel; their bodies are formed separately).
2. Producer-consumer fusion, consumers first (XLA's instruction/priority fusion): a
   fusible producer whose users are all in one kernel joins it when that kernel accepts
   it (loop and input kernels take elementwise and movement producers; a reduction
   takes an elementwise epilogue of its own output shape; dot kernels take a prologue of
   converts/transposes/broadcasts (Triton GEMM fusion) and, on GPU, a small bias/ReLU
   epilogue (cuBLASLt); convolutions are cuDNN calls that fuse nothing on GPU).
   An expensive producer (transcendental, divide, power) is not fused into a consumer
   that reuses its elements (a broadcast), as XLA avoids duplicated work.
3. Cheap producers with several consumers (broadcast, iota, constant, reshape: no
   flops) are duplicated into every consumer kernel that accepts them.
4. Multi-output fusion: a fusible producer with users in several kernels joins the first
   of them when that creates no cycle; its result is then an extra kernel output.
5. Sibling multi-output fusion: kernels that read the same value and iterate over the
   same shape (two reductions of one tensor: batch-norm statistics) become one kernel.
6. Tree reductions (GPU): a reduction whose reduced extent exceeds XLA's race-free
   bound (rows: 16384 elements, columns: 4096) runs as two kernels.

`policy` is "xla-gpu", "xla-tpu" or "given" (a module already compiled by XLA: every
`mhlo.fusion`, convolution, copy and collective is one kernel, nothing is re-fused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..rules import ELEMENTWISE_OPS, MATRIX, REGION_OPS, TRANSCENDENTAL_OPS, OpCost
from ..shapes import type_info

FUSION_POLICIES = ("xla-gpu", "xla-tpu", "none")

FREE = "free"
ELEMENTWISE = "elementwise"
MOVEMENT = "movement"
REDUCE = "reduce"
GEMM = "gemm"
CONV = "conv"
COLLECTIVE = "collective"
OPAQUE = "opaque"
BOUNDARY = "boundary"

FREE_OPS = frozenset(
    {
        "stablehlo.constant",
        "stablehlo.reshape",
        "mhlo.bitcast",
        "stablehlo.get_tuple_element",
        "stablehlo.tuple",
        "stablehlo.optimization_barrier",
        "stablehlo.after_all",
        "stablehlo.create_token",
        "stablehlo.partition_id",
        "stablehlo.replica_id",
        "stablehlo.get_dimension_size",
        "stablehlo.return",
        "func.return",
        "mhlo.return",
        "sdy.return",
        "sdy.sharding_constraint",
        "sdy.sharding_group",
        "sdy.propagation_barrier",
        "sdy.mesh",
        "stablehlo.async_done",
        "chlo.constant",
    }
)
TERMINATORS = frozenset({"stablehlo.return", "func.return", "mhlo.return", "sdy.return"})
MOVEMENT_OPS = frozenset(
    {
        "stablehlo.broadcast_in_dim",
        "stablehlo.broadcast",
        "stablehlo.transpose",
        "stablehlo.slice",
        "stablehlo.dynamic_slice",
        "stablehlo.real_dynamic_slice",
        "stablehlo.concatenate",
        "stablehlo.pad",
        "stablehlo.reverse",
        "stablehlo.gather",
        "stablehlo.dynamic_update_slice",
        "stablehlo.iota",
        "stablehlo.reduce_window",
        "stablehlo.bitcast_convert",
        "stablehlo.map",
        "stablehlo.rng",
        "chlo.constant_like",
    }
)
COLLECTIVE_OPS = frozenset(
    {
        "stablehlo.all_reduce",
        "stablehlo.all_gather",
        "stablehlo.reduce_scatter",
        "stablehlo.all_to_all",
        "stablehlo.collective_permute",
        "stablehlo.collective_broadcast",
        "stablehlo.send",
        "stablehlo.recv",
        "stablehlo.cross-replica-sum",
    }
)
GEMM_OPS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.einsum", "stablehlo.unary_einsum", "chlo.ragged_dot"})
CONV_OPS = frozenset({"stablehlo.convolution", "stablehlo.dynamic_conv"})
# Region ops the engine recurses into: kernel boundaries, their bodies formed apart.
REGION_BOUNDARY_OPS = REGION_OPS
# Zero-flop producers that XLA duplicates into every consumer fusion.
DUPLICABLE_OPS = frozenset(
    {"stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.reshape", "mhlo.bitcast"}
)
# Ops that read an operand element more than once (fusing an expensive producer into
# them would recompute it).
REUSING_OPS = frozenset(
    {"stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.gather", "stablehlo.reduce_window", "stablehlo.pad"}
)
EXPENSIVE_OPS = TRANSCENDENTAL_OPS | {"stablehlo.divide", "stablehlo.remainder", "stablehlo.power", "stablehlo.atan2"}
# What a dot kernel takes as its prologue on GPU (Triton GEMM fusion).
GEMM_PROLOGUE_OPS = frozenset(
    {"stablehlo.convert", "stablehlo.transpose", "stablehlo.broadcast_in_dim", "stablehlo.reshape", "mhlo.bitcast", "stablehlo.constant"}
)
# What cuBLASLt takes as a GEMM epilogue on GPU: bias add, ReLU, scaling, output cast.
GEMM_EPILOGUE_OPS = frozenset(
    {
        "stablehlo.add",
        "stablehlo.multiply",
        "stablehlo.maximum",
        "stablehlo.convert",
        "stablehlo.broadcast_in_dim",
        "stablehlo.constant",
        "stablehlo.reshape",
    }
)
MAX_EPILOGUE_OPS = 4
# Blocks up to this size get ancestry bitsets for the cycle checks of multi-output and
# sibling fusion (they grow as n^2 bits); larger blocks walk back through operands.
MAX_ANCESTRY_NODES = 40000
# XLA GPU: kMaxOperandsAndOutputsPerFusion (instruction_fusion / gpu_fusible.h).
MAX_FUSION_PARAMS = 96
# XLA GPU ReductionDimensionRaceFreeBound: rows MinThreadsXRowReduction(1024) x 16,
# columns WarpSize(32) x 128; batched row reductions: BatchedReductionRaceFreeBound = 8.
ROW_REDUCTION_BOUND = 1024 * 16
COLUMN_REDUCTION_BOUND = 32 * 128
BATCHED_REDUCTION_BOUND = 8


def op_class(name: str) -> str:
    if name in FREE_OPS:
        return FREE
    if name in ELEMENTWISE_OPS or (name.startswith("chlo.") and name not in ("chlo.top_k", "chlo.ragged_dot", "chlo.scan")):
        return ELEMENTWISE
    if name in MOVEMENT_OPS:
        return MOVEMENT
    if name == "stablehlo.reduce":
        return REDUCE
    if name in GEMM_OPS:
        return GEMM
    if name in CONV_OPS:
        return CONV
    if name in COLLECTIVE_OPS:
        return COLLECTIVE
    if name in REGION_BOUNDARY_OPS:
        return BOUNDARY
    return OPAQUE


def default_policy_for(hardware_name: str) -> str:
    """The compiler that targets this hardware: TPUs -> xla-tpu, the host CPU spec -> none
    (no CPU fusion model yet), every GPU -> xla-gpu."""
    low = hardware_name.lower()
    if low.startswith("tpu"):
        return "xla-tpu"
    if low in ("cpu", "host-cpu"):
        return "none"
    return "xla-gpu"


@dataclass(slots=True)
class Node:
    """One op of the block with its own (unfused) cost; cost None: not costable."""

    op: object
    name: str
    cost: OpCost | None
    cls: str


@dataclass
class GemmShape:
    m: int
    n: int
    k: int
    batch: int
    dtype: str


@dataclass
class Kernel:
    kind: str  # loop | input | gemm | conv | collective | custom | fusion
    ops: list  # member ops in program order (the root, the last one, included)
    root: object
    duplicated: list = field(default_factory=list)  # cheap producers copied in
    flops: int = 0
    transcendentals: int = 0
    flops_by_unit: dict = field(default_factory=dict)  # (unit, dtype) -> flops + transcendentals
    bytes_read: int = 0
    bytes_written: int = 0
    launches: int = 1
    gemm: GemmShape | None = None
    id: int = -1
    node_ids: list = field(default_factory=list)  # indices of the ops in the formed block
    duplicated_ids: list = field(default_factory=list)
    given: bool = False  # formed by the compiler that produced the input (mhlo.fusion)
    attrs: dict = field(default_factory=dict)  # extra facts for costmodel.kernel_cost (str/int)

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def op_names(self) -> list[str]:
        return [op.name for op in self.ops]


# ---------------------------------------------------------------------------
# helpers on values
# ---------------------------------------------------------------------------


def _owner_op(value):
    owner = value.owner
    return getattr(owner, "operation", owner)


def _nbytes(value) -> int:
    info = type_info(value.type)
    return info.nbytes


def _elems(value) -> int:
    return type_info(value.type).num_elements


def _splat_or_scalar_constant(op) -> bool:
    if op.name != "stablehlo.constant":
        return False
    try:
        from ..ir import ir

        attr = op.attributes["value"]
        return ir.DenseElementsAttr(attr).is_splat
    except Exception:  # a non-dense constant: treat as a real buffer
        return False


# ---------------------------------------------------------------------------
# formation
# ---------------------------------------------------------------------------


class _Groups:
    """Union-find over node indices with per-group facts."""

    def __init__(self, n: int):
        self.parent = list(range(n))
        self.kind: list = [None] * n
        self.out_elems = [0] * n
        self.size = [1] * n
        self.max_index = list(range(n))
        self.has_reduce = [False] * n
        self.epilogue_ops = [0] * n
        self.members: dict[int, list[int]] = {i: [i] for i in range(n)}
        self.hero: list = [None] * n  # the reduce node of an input kernel
        # ancestry as Python-int bitsets (set by form_kernels for blocks up to
        # MAX_ANCESTRY_NODES ops): anc[g] = every op some member of g depends on, itself
        # included; mask[g] = the members. None: no cycle checks, no multi-output fusion.
        self.anc: list | None = None
        self.mask: list | None = None
        self.operand_nodes: list = []

    def find(self, i: int) -> int:
        p = self.parent
        root = i
        while p[root] != root:
            root = p[root]
        while p[i] != root:
            p[i], i = root, p[i]
        return root

    def merge_into(self, g: int, i: int, kind: str) -> int:
        """Merge group of i into group g (g keeps its identity); returns g."""
        gi = self.find(i)
        if gi == g:
            return g
        self.parent[gi] = g
        self.members[g].extend(self.members.pop(gi))
        if self.anc is not None:
            self.anc[g] |= self.anc[gi]
            self.mask[g] |= self.mask[gi]
        self.kind[g] = kind
        self.size[g] += self.size[gi]
        self.max_index[g] = max(self.max_index[g], self.max_index[gi])
        self.has_reduce[g] = self.has_reduce[g] or self.has_reduce[gi]
        if self.hero[g] is None:
            self.hero[g] = self.hero[gi]
        return g


def form_kernels(nodes: list[Node], policy: str) -> list[Kernel]:
    """Kernels of one block, in program order of their roots."""
    n = len(nodes)
    if n == 0:
        return []
    # NB: an ir.Operation's hash changes when its attributes change; this map is only
    # used before any attribute is written.
    index = {}
    for i, nd in enumerate(nodes):
        index[nd.op] = i
    users: list[list[int]] = [[] for _ in range(n)]
    external_use = [False] * n
    operand_nodes: list[list] = [None] * n  # per operand: node index or None (block argument / outer value)
    for j, nd in enumerate(nodes):
        ops_j = []
        for v in nd.op.operands:
            owner = _owner_op(v)
            i = index.get(owner) if owner is not None else None
            ops_j.append(i)
            if i is not None:
                if nodes[j].cls == BOUNDARY or nodes[j].name in TERMINATORS:
                    external_use[i] = True
                else:
                    users[i].append(j)
        operand_nodes[j] = ops_j
        if nd.cls == BOUNDARY or (nd.op.regions and nd.cls != REDUCE and policy != "given"):
            # values of this block captured inside nested regions (case branches ...)
            _mark_captured(nd.op, index, external_use)

    g = _Groups(n)
    for i, nd in enumerate(nodes):
        g.kind[i] = _initial_kind(nd, policy)
        if nd.op.results:
            g.out_elems[i] = _elems(nd.op.results[0]) if type_info(nd.op.results[0].type).is_tensor else 0
        g.has_reduce[i] = nd.cls == REDUCE
        if nd.cls == REDUCE:
            g.hero[i] = i

    g.operand_nodes = operand_nodes
    if n <= MAX_ANCESTRY_NODES and policy != "given":
        anc = [0] * n
        for j in range(n):
            a = 1 << j
            for i in operand_nodes[j]:
                if i is not None:
                    a |= anc[i]
            anc[j] = a
        g.anc = anc
        g.mask = [1 << j for j in range(n)]
    duplicated: list[tuple[int, int]] = []  # (group at the time, duplicated node)
    absorbed = [False] * n
    if policy not in ("given",):
        _producer_consumer(nodes, g, users, external_use, duplicated, absorbed, policy)
        _sibling_fusion(nodes, g, users, operand_nodes, policy)

    members = {gid: sorted(ms) for gid, ms in g.members.items()}
    dups_of: dict[int, list[int]] = {}  # groups merged after a copy was made keep it
    for gid, i in duplicated:
        lst = dups_of.setdefault(g.find(gid), [])
        if i not in lst:
            lst.append(i)
    kernels = []
    for root_g in sorted(members, key=lambda r: max(members[r])):
        idx = members[root_g]
        kind = g.kind[root_g]
        if kind is None:
            continue  # boundary / terminators / not costable
        if all(nodes[i].cls == FREE for i in idx):
            continue  # bitcasts and constants: no kernel
        if len(idx) == 1 and absorbed[idx[0]]:
            continue  # a cheap producer copied into all its consumers
        if any(nodes[i].cost is None for i in idx):
            idx = [i for i in idx if nodes[i].cost is not None]
            if not idx:
                continue
        dups = sorted(d for d in dups_of.get(root_g, []) if d not in idx)
        kernels.append(_make_kernel(nodes, idx, dups, kind, operand_nodes, users, external_use, g, policy))
    return kernels


def _mark_captured(op, index, external_use) -> None:
    from ..ir import walk_ops

    for inner in walk_ops(op):
        for v in inner.operands:
            owner = _owner_op(v)
            i = index.get(owner) if owner is not None else None
            if i is not None:
                external_use[i] = True


def _initial_kind(nd: Node, policy: str) -> str | None:
    c = nd.cls
    if nd.cost is None or c == BOUNDARY or nd.name in TERMINATORS:
        return None
    if c in (FREE, ELEMENTWISE, MOVEMENT):
        return "loop"
    if c == REDUCE:
        return "input"
    if c == GEMM:
        return "gemm"
    if c == CONV:
        return "conv"
    if c == COLLECTIVE:
        return None  # communication: costed by extract-collectives, not a compute kernel
    if nd.name == "mhlo.fusion":
        try:
            text = str(nd.op.attributes["fusion_kind"])
        except KeyError:
            return "fusion"
        return {"kLoop": "loop", "kInput": "input", "kOutput": "gemm", "kCustom": "gemm"}.get(
            text.rsplit(" ", 1)[-1].rstrip(">"), "fusion"
        )
    if nd.name == "mhlo.copy":
        return "loop"
    if nd.name == "func.call":  # a call of an outlined XLA fusion (given kernels)
        return "fusion"
    return "custom"


def _accepts(nodes, g: _Groups, gid: int, i: int, policy: str, users) -> bool:
    """May producer node i join kernel gid (all or some of its users are there)?"""
    kind = g.kind[gid]
    nd = nodes[i]
    c = nd.cls
    if kind is None or nd.cost is None:
        return False
    if g.size[gid] >= MAX_FUSION_PARAMS * 4:
        return False
    if kind in ("collective", "custom", "fusion"):
        return False
    if kind == "gemm":
        if policy == "xla-tpu":
            return c in (FREE, ELEMENTWISE, MOVEMENT)
        return nd.name in GEMM_PROLOGUE_OPS
    if kind == "conv":
        if policy == "xla-tpu":
            return c in (FREE, ELEMENTWISE, MOVEMENT)
        return c == FREE
    # loop / input kernels
    if c in (FREE, ELEMENTWISE, MOVEMENT):
        if nd.name in EXPENSIVE_OPS:
            for u in users[i]:
                if g.find(u) == gid and nodes[u].name in REUSING_OPS:
                    return False
        return True
    if c == REDUCE:
        # reduction epilogue fusion: elementwise consumers of the reduce's own shape
        return not g.has_reduce[gid] and g.out_elems[gid] == _elems(nd.op.results[0]) and kind == "loop"
    if c in (GEMM, CONV):
        out = _elems(nd.op.results[0])
        if kind != "loop" or g.out_elems[gid] != out or g.has_reduce[gid]:
            return False
        if policy == "xla-tpu":
            return True
        if c == CONV:
            return False  # cuDNN: the conv kernel is a library call (no epilogue in training graphs)
        return g.epilogue_ops[gid] == 0 and g.size[gid] <= MAX_EPILOGUE_OPS and _all_in(nodes, g, gid, GEMM_EPILOGUE_OPS)
    return False


def _all_in(nodes, g: _Groups, gid: int, allowed) -> bool:
    return all(nodes[j].name in allowed for j in g.members[gid])


def _merged_kind(kind_g: str, producer_cls: str) -> str:
    if producer_cls == GEMM:
        return "gemm"
    if producer_cls == CONV:
        return "conv"
    if producer_cls == REDUCE:
        return "input"
    return kind_g


def _depends(targets, start, g: _Groups, limit: int = 20000) -> bool:
    """Walk back from the ops `targets` through operands: does one of them depend on an
    op of `start`? Ancestors older than the oldest start op cannot, so they are not
    visited. Conservative (True) past `limit` steps. For blocks without ancestry bitsets."""
    start = set(start)
    if not start:
        return False
    lowest = min(start)
    ops = g.operand_nodes
    seen = set()
    stack = list(targets)
    steps = 0
    while stack:
        x = stack.pop()
        for i in ops[x]:
            if i is None or i < lowest or i in seen:
                continue
            if i in start:
                return True
            seen.add(i)
            stack.append(i)
        steps += 1
        if steps > limit:
            return True
    return False


def _reaches(start: list[int], target: int, g: _Groups, users=None) -> bool:
    """Does some op of group `target` depend on one of the ops `start`?"""
    if g.anc is None:
        return _depends(g.members[target], start, g)
    m = 0
    for x in start:
        m |= 1 << x
    return bool(g.anc[target] & m)


def _producer_consumer(nodes, g: _Groups, users, external_use, duplicated, absorbed, policy) -> None:
    n = len(nodes)
    for i in range(n - 1, -1, -1):
        nd = nodes[i]
        if nd.cost is None or nd.cls in (BOUNDARY, COLLECTIVE, OPAQUE):
            continue
        if nd.name in TERMINATORS:
            continue
        us = users[i]
        if not us:
            continue
        ugroups = sorted({g.find(u) for u in us})
        if not external_use[i] and len(ugroups) == 1:
            gid = ugroups[0]
            if _accepts(nodes, g, gid, i, policy, users):
                kind = _merged_kind(g.kind[gid], nd.cls)
                if nd.cls in (GEMM, CONV):
                    g.epilogue_ops[gid] = g.size[gid]
                g.merge_into(gid, i, kind)
                continue
        if nd.name in DUPLICABLE_OPS:
            taken = 0
            for gid in ugroups:
                if _accepts(nodes, g, gid, i, policy, users):
                    duplicated.append((gid, i))
                    if g.anc is not None:
                        g.anc[gid] |= g.anc[i]
                    taken += 1
            if taken == len(ugroups) and not external_use[i]:
                absorbed[i] = True
            continue
        if nd.cls in (ELEMENTWISE, MOVEMENT) and len(ugroups) >= 1:
            for gid in ugroups:
                if g.kind[gid] not in ("loop", "input") or not _accepts(nodes, g, gid, i, policy, users):
                    continue
                others = [u for u in us if g.find(u) != gid]
                if others and _reaches(others, gid, g, users):
                    continue
                g.merge_into(gid, i, g.kind[gid])
                break


def _reduce_key(nd: Node):
    op = nd.op
    try:
        shape = tuple(type_info(op.operands[0].type).shape)
        from ..rules import _i64_list

        dims = tuple(sorted(_i64_list(op, "dimensions") or []))
    except Exception:
        return None
    return shape, dims


def _sibling_fusion(nodes, g: _Groups, users, operand_nodes, policy) -> None:
    """Kernels that read the same value over the same iteration space become one."""
    consumers: dict = {}
    for j, nd in enumerate(nodes):
        if nd.cost is None or nd.cls not in (REDUCE, ELEMENTWISE, MOVEMENT):
            continue
        for pos, v in enumerate(nd.op.operands):
            key = operand_nodes[j][pos]
            if key is None:
                key = ("value", v)
            consumers.setdefault(key, []).append(j)
    for key, js in consumers.items():
        if len(js) < 2:
            continue
        buckets: dict = {}
        for j in js:
            gid = g.find(j)
            kind = g.kind[gid]
            if kind == "input" and g.hero[gid] is not None:
                bkey = ("input", _reduce_key(nodes[g.hero[gid]]))
            elif kind == "loop":
                bkey = ("loop", g.out_elems[gid])
            else:
                continue
            if bkey[1] is None:
                continue
            lst = buckets.setdefault(bkey, [])
            if gid not in lst:
                lst.append(gid)
        for bkey, gids in buckets.items():
            if len(gids) < 2:
                continue
            base = g.find(gids[0])
            for other in gids[1:]:
                other = g.find(other)
                base = g.find(base)
                if other == base:
                    continue
                if g.size[base] + g.size[other] > MAX_FUSION_PARAMS * 4:
                    continue
                if _group_reaches(base, other, g, users, len(nodes)) or _group_reaches(other, base, g, users, len(nodes)):
                    continue
                keep = base if g.max_index[base] >= g.max_index[other] else other
                drop = other if keep == base else base
                g.merge_into(keep, drop, g.kind[keep])
                base = keep


def _group_reaches(src: int, dst: int, g: _Groups, users=None, n: int = 0) -> bool:
    """Does some op of group `dst` depend on an op of group `src`?"""
    if g.anc is None:
        return _depends(g.members[dst], g.members[src], g)
    return bool(g.anc[dst] & g.mask[src])


# ---------------------------------------------------------------------------
# a kernel's counts
# ---------------------------------------------------------------------------


def _make_kernel(nodes, idx, dups, kind, operand_nodes, users, external_use, g, policy) -> Kernel:
    inside = set(idx)
    inside_all = inside | set(dups)
    ops = [nodes[i].op for i in idx]
    k = Kernel(kind=kind, ops=ops, root=ops[-1], duplicated=[nodes[d].op for d in dups])
    k.node_ids = list(idx)
    k.duplicated_ids = list(dups)
    k.given = any(nodes[i].name == "mhlo.fusion" for i in idx)
    for i in list(idx) + list(dups):
        c = nodes[i].cost
        if c is None:
            continue
        k.flops += c.flops
        k.transcendentals += c.transcendentals
        work = c.flops + c.transcendentals
        if work:
            key = (c.unit, c.dtype)
            k.flops_by_unit[key] = k.flops_by_unit.get(key, 0) + work
    # one opaque op (sort, scatter, custom_call, a given fusion ...): the rule's XLA byte
    # accounting; otherwise the kernel's distinct external values
    single = len(idx) == 1 and not dups and nodes[idx[0]].cls == OPAQUE
    if single:
        c = nodes[idx[0]].cost
        k.bytes_read, k.bytes_written = c.bytes_read, c.bytes_written
    else:
        k.bytes_read, k.bytes_written = _external_bytes(nodes, idx, inside, inside_all, operand_nodes, users, external_use)
    gemm_nodes = [i for i in idx if nodes[i].cls in (GEMM, CONV)]
    if gemm_nodes:
        k.gemm = _gemm_shape(nodes[gemm_nodes[0]])
    if policy == "xla-gpu":
        for i in idx:
            if nodes[i].cls == REDUCE:
                extra = _tree_split_bytes(nodes[i])
                if extra:
                    k.launches += 1
                    k.bytes_read += extra
                    k.bytes_written += extra
                    break
    return k


def _external_bytes(nodes, idx, inside, inside_all, operand_nodes, users, external_use) -> tuple[int, int]:
    """Bytes of the values read from outside the kernel (each once; only the sliced part
    when every use slices it) and of the results used outside it."""
    full_size: dict = {}
    partial: dict = {}
    needs_full: dict = {}
    for i in sorted(inside_all):
        nd = nodes[i]
        name = nd.name
        for pos, v in enumerate(nd.op.operands):
            src = operand_nodes[i][pos]
            if src is not None and src in inside_all:
                continue
            if name == "stablehlo.dynamic_update_slice" and pos == 0:
                continue  # updated in place: the buffer is neither read nor rewritten whole
            if src is not None and _splat_or_scalar_constant(nodes[src].op):
                continue  # an inline constant
            key = ("n", src, _result_number(v)) if src is not None else ("v", v)
            if key not in full_size:
                full_size[key] = _nbytes(v)
                partial[key] = 0
                needs_full[key] = False
            if pos == 0 and name in _SLICING_OPS:
                partial[key] += _nbytes(nd.op.results[0])
            else:
                needs_full[key] = True
    read = sum(full if needs_full[key] else min(full, partial[key]) for key, full in full_size.items())
    written = 0
    for i in idx:
        nd = nodes[i]
        outside = external_use[i] or any(u not in inside for u in users[i])
        if not outside:
            continue
        if nd.name == "stablehlo.dynamic_update_slice":
            written += _nbytes(nd.op.operands[1])
        else:
            written += sum(_nbytes(r) for r in nd.op.results)
    return read, written


_SLICING_OPS = frozenset({"stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.gather", "stablehlo.real_dynamic_slice"})


def _result_number(v) -> int:
    try:
        return v.result_number
    except AttributeError:
        return 0


def _gemm_shape(nd: Node) -> GemmShape | None:
    """M x N x K (and batch) of a dot or of a convolution as an implicit GEMM:
    M = batch x output spatial, N = output features, K = flops / (2 M N)."""
    op, c = nd.op, nd.cost
    try:
        out = type_info(op.results[0].type)
        if nd.cls == CONV:
            from jaxlib.mlir.dialects import stablehlo as shlo

            dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            n_ = out.shape[dn.output_feature_dimension]
            m = out.num_elements // max(1, n_)
            k = max(1, c.flops // max(1, 2 * m * n_))
            return GemmShape(m, n_, k, 1, c.dtype)
        from jaxlib.mlir.dialects import stablehlo as shlo

        if nd.name == "stablehlo.dot_general":
            dn = shlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
            lhs = type_info(op.operands[0].type)
            rhs = type_info(op.operands[1].type)
            batch = math.prod(lhs.shape[d] for d in dn.lhs_batching_dimensions)
            k = math.prod(lhs.shape[d] for d in dn.lhs_contracting_dimensions)
            lhs_free = set(range(lhs.rank)) - set(dn.lhs_batching_dimensions) - set(dn.lhs_contracting_dimensions)
            rhs_free = set(range(rhs.rank)) - set(dn.rhs_batching_dimensions) - set(dn.rhs_contracting_dimensions)
            m = math.prod(lhs.shape[d] for d in lhs_free)
            n_ = math.prod(rhs.shape[d] for d in rhs_free)
            return GemmShape(m, n_, k, batch, c.dtype)
        out_n = out.shape[-1] if out.rank else 1
        m = max(1, out.num_elements // max(1, out_n))
        k = max(1, c.flops // max(1, 2 * out.num_elements))
        return GemmShape(m, out_n, k, 1, c.dtype)
    except Exception:  # unusual dimension numbers: no shape, the backend uses flops only
        return None


def _tree_split_bytes(nd: Node) -> int:
    """Bytes of the partial results when XLA GPU splits this reduction in two kernels
    (TreeReductionRewriter), else 0."""
    op = nd.op
    try:
        from ..rules import _i64_list

        shape = list(type_info(op.operands[0].type).shape)
        dims = sorted(_i64_list(op, "dimensions") or [])
        out = type_info(op.results[0].type)
    except Exception:
        return 0
    if not dims or not shape:
        return 0
    rank = len(shape)
    kept = [d for d in range(rank) if d not in dims]
    minor_reduced = []
    d = rank - 1
    while d >= 0 and d in dims:
        minor_reduced.append(d)
        d -= 1
    if minor_reduced:  # row reduction (maybe batched)
        reduced = math.prod(shape[x] for x in minor_reduced)
        major = math.prod(shape[x] for x in dims if x not in minor_reduced)
        if reduced <= ROW_REDUCTION_BOUND and major <= BATCHED_REDUCTION_BOUND:
            return 0
        if reduced > ROW_REDUCTION_BOUND:
            k2 = min(int(math.isqrt(reduced)), ROW_REDUCTION_BOUND)
            partial_elems = out.num_elements * math.ceil(reduced / k2) * max(1, major)
        else:
            partial_elems = out.num_elements * major
    else:  # column reduction: the kept dimensions are the minor ones
        reduced = math.prod(shape[x] for x in dims)
        if reduced <= COLUMN_REDUCTION_BOUND:
            return 0
        k2 = min(int(math.isqrt(reduced)), COLUMN_REDUCTION_BOUND)
        partial_elems = out.num_elements * math.ceil(reduced / k2)
    del kept
    return partial_elems * max(1, out.elem_bytes)


_ = MATRIX  # re-exported unit name used by backends
