"""Group the ops of one block into kernels, the way XLA's GPU/TPU fusion pipeline does.

Rules (the why and the XLA sources are in docs/kernels.md), in XLA GPU's pass order:

1. Classes. Every op has a class: `free` (bitcast-like: constant, reshape, tuple
   plumbing; alone it is no kernel), `elementwise`, `movement` (broadcast, transpose,
   slice, concatenate, pad, gather ...: fusible loop ops), `reduce` (the hero of an
   "input" fusion), `gemm` (dot), `conv`, `collective`, `opaque` (sort, scatter,
   custom_call ...: a kernel of its own) and `boundary` (while/case/call ...: not a
   kernel; their bodies are formed separately).
2. Legality (PriorityFusion's CanFuse): loop and input kernels take elementwise,
   movement and bitcast producers; no reduce into a reduce; a reduction takes an
   epilogue of its own output shape, never a broadcast back; an expensive producer does
   not go into a consumer that reuses its elements; at most 96 operands and outputs.
3. Priority fusion: a producer goes into all its consumers (copied when there are
   several) or into none, most profitable first, when XLA's priority (time unfused -
   time fused, here in bytes of memory-bound kernels plus one launch) is >= 0.
4. GEMM/convolution: dots take a Triton prologue and a small cuBLASLt epilogue; cuDNN
   convolutions fuse nothing on GPU; on TPU both take elementwise producers/consumers.
5. Sibling multi-output fusion: the loop/reduction kernels that read one (non-scalar)
   value and iterate over the same shape merge (at most 8 reductions), without cycles.
6. Producer-consumer multi-output fusion: a loop kernel read by several kernels joins
   one of the same shape when that closes no cycle; its result is an extra output.
7. Tree reductions (GPU): a reduction past XLA's race-free bound (rows: 16384 elements,
   columns: 4096) runs as two kernels; each split reduction is one more launch.
8. select_and_scatter (GPU) is expanded as XLA does: four launches.

`policy` is "xla-gpu", "xla-tpu", "given" (a module already compiled by XLA: every
`mhlo.fusion`, convolution, copy and collective is one kernel, nothing is re-fused) or
"none" (every op a kernel of its own: what backends that measure or learn kernels get
with `fusion=none`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from ..collectives import GROUP_COLLECTIVE_OPS
from ..ir import callee_of
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
        "mhlo.get_tuple_element",  # a library call's (result, workspace) in an MHLO import
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
COLLECTIVE_OPS = GROUP_COLLECTIVE_OPS | frozenset(
    {
        "stablehlo.send",
        "stablehlo.recv",
        "stablehlo.cross-replica-sum",
    }
)
GEMM_OPS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.einsum", "stablehlo.unary_einsum", "chlo.ragged_dot"})
CONV_OPS = frozenset({"stablehlo.convolution", "stablehlo.dynamic_conv"})
# Region ops the engine recurses into: kernel boundaries, their bodies formed apart.
REGION_BOUNDARY_OPS = REGION_OPS
# Bitcast-like ops that fuse into any loop/input kernel (XLA fuses bitcasts first).
FUSIBLE_FREE_OPS = frozenset({"stablehlo.reshape", "mhlo.bitcast"})
# In-place ops (HloDataflowAnalysis::GetInPlaceInputOutputPairs): no multi-output producer.
IN_PLACE_OPS = frozenset({"stablehlo.dynamic_update_slice", "stablehlo.scatter"})
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
# Blocks with up to this many kernels after priority fusion get kernel ancestry bitsets for
# the cycle checks of multi-output fusion (they grow as k^2 bits); larger ones walk back
# through operands instead (conservative past a step limit). Formerly nodes: see below.
# sibling fusion (they grow as n^2 bits); larger blocks walk back through operands.
MAX_ANCESTRY_NODES = 40000
# XLA GPU: kMaxOperandsAndOutputsPerFusion (instruction_fusion / gpu_fusible.h).
MAX_FUSION_PARAMS = 96
# XLA GPU gpu_fusible.cc: kMaxUnnestedReductionOutputsPerFusion.
MAX_UNNESTED_REDUCTIONS = 8
# XLA GPU gpu_fusible.cc FusionFitsInBudget: the shared memory of the reductions of a fused
# kernel at most the device's `shared_memory_per_block`, CUDA's sharedMemPerBlock: 48 KiB
# (49,152 bytes, the static per-block limit on every NVIDIA GPU since compute capability
# 3.0, CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
# SharedMemoryUsageNoCache: a row reduction uses __shared__[32] of its input's element
# type, a column reduction __shared__[4][32][33] (per output of a variadic reduce).
SHARED_MEMORY_PER_BLOCK = 48 * 1024
WARP_SIZE = 32
# XLA GPU's kKernelLaunchOverhead (gpu_performance_model_base.h: 1 us), the launch a fusion
# saves, in bytes of memory traffic at 1,555 GB/s (A100-40GB HBM2, datasheet), so that
# kernel formation stays independent of the hardware that costs it.
LAUNCH_OVERHEAD_BYTES = 1555 * 1000
# Multi-output merges are replayed lazily on the kernels they concern in runs of this many.
EVENT_CHUNK = 32
# Sibling multi-output fusion compares every pair of a value's readers (as XLA does, with
# O(1) reachability in C++); above this many readers, those that depend on (or feed) every
# other reader are dropped first, found with two sweeps of bitsets (_Formation.isolated):
# they could never merge, and a chain of thousands of kernels reading one weight would
# otherwise cost millions of pair checks.
SIBLING_PREFILTER = 48
# XLA GPU's DotMerger (xla/service/dot_merger.cc; gpu_compiler.cc runs it before fusion
# with max_size_to_merge = xla_gpu_dot_merger_threshold_mb, 32 MiB by default): two dots
# that read one operand merge into one dot over the concatenation of their other
# operands when one of them moves at most this many bytes (result plus operands).
DOT_MERGER_MAX_BYTES = 32 << 20
# XLA GPU ReductionDimensionRaceFreeBound: rows MinThreadsXRowReduction(1024) x 16,
# columns WarpSize(32) x 128; batched row reductions: BatchedReductionRaceFreeBound = 8.
ROW_REDUCTION_BOUND = 1024 * 16
COLUMN_REDUCTION_BOUND = 32 * 128
BATCHED_REDUCTION_BOUND = 8


@functools.lru_cache(maxsize=None)
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
    """The compiler that targets this hardware: TPUs -> xla-tpu, the generic CPU spec ->
    none (no CPU fusion model), every GPU -> xla-gpu. `host-cpu` (this machine, whose
    programs the profiled/learned backends time with IREE llvm-cpu) -> xla-tpu: of the
    three formations it put the profiled backend closest to IREE's whole-program time
    on the held-in workloads, on average over four runs of benchmarks/profiled_eval.py
    (conv/matmul with their elementwise epilogues in one kernel, as IREE's dispatches;
    docs/backends.md). It needs no IREE, unlike fusion=iree."""
    low = hardware_name.lower()
    if low.startswith("tpu") or low == "host-cpu":
        return "xla-tpu"
    if low == "cpu":
        return "none"
    return "xla-gpu"


@dataclass(slots=True)
class Node:
    """One op of the block with its own (unfused) cost; cost None: not costable.
    `passthrough`: an op XLA replaces by its operand before fusing (a collective of one
    participant, `single_participant`), formed as a bitcast."""

    op: object
    name: str
    cost: OpCost | None
    cls: str
    passthrough: bool = False
    # the op's operand and result values and (operand types, result types), when the
    # caller fetched them already (None: formation asks the op)
    operands: tuple | None = None
    results: tuple | None = None
    types: tuple | None = None
    # set by form_kernels: no result is used and the op has no side effect, so the
    # compiler removes it (XLA's HloDCE): it is in no kernel
    dead: bool = False


# Collectives that are the identity when every group has one participant (XLA's
# AllReduceSimplifier, xla/service/all_reduce_simplifier.cc, replaces such an all-reduce
# by its operand; an all-gather, reduce-scatter or all-to-all of one device copies its
# operand unchanged, and XLA's simplifiers drop those too).
IDENTITY_WHEN_ALONE = frozenset(
    {"stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.reduce_scatter", "stablehlo.all_to_all"}
)


def single_participant(op) -> bool:
    """A collective whose explicit replica_groups all have one member (a one-device
    program: `costmodel workloads export --devices 1`, whose cross-replica means run
    over one replica). Empty groups (all devices) are not decided here."""
    if op.name not in IDENTITY_WHEN_ALONE or "replica_groups" not in op.attributes:
        return False
    try:
        from jaxlib.mlir import ir as _ir

        groups = _ir.DenseElementsAttr(op.attributes["replica_groups"])
        shape = list(_ir.ShapedType(groups.type).shape)
    except (ValueError, TypeError):
        return False
    if len(shape) != 2 or shape[1] != 1 or shape[0] < 1:
        return False
    return len(op.results) == len(op.operands) and all(r.type == v.type for r, v in zip(op.results, op.operands))


@dataclass
class GemmShape:
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    # a convolution's input features read per filter tap (its K is taps x these);
    # None for dots, grouped convolutions and filter gradients
    channels_per_tap: int | None = None
    # what cuDNN is asked to run (XLA GPU's conv rewriter, _conv_kind): "forward" or
    # "backward_filter"; None for dots, grouped and other convolutions
    conv_kind: str | None = None
    # the input channels C of that problem (forward: the activations' features; a
    # filter gradient: the activations' batch dimension, M = C x filter taps) and the
    # bytes of the activations operand, which a library padding C copies once
    conv_channels: int | None = None
    conv_activation_bytes: int = 0


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
    # elements a scatter updates with atomic read-modify-writes (XLA GPU's scatter
    # emitter, indices not known unique; a select_and_scatter's expansion too): 0 for others
    scatter_elements: int = 0
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


def _operand_type(nd: Node, pos: int):
    """The type of operand `pos` of a node's op (the types the caller fetched, if any)."""
    return nd.types[0][pos] if nd.types is not None else nd.op.operands[pos].type


def _result_type(nd: Node, pos: int):
    """The type of result `pos` of a node's op."""
    return nd.types[1][pos] if nd.types is not None else nd.op.results[pos].type


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
        self.out_elems = [0] * n  # elements of the root's first result (a loop kernel's loop shape)
        self.size = [1] * n
        self.max_index = list(range(n))
        self.has_reduce = [False] * n
        self.nred = [0] * n  # reductions in the kernel (XLA: unnested reduction outputs)
        # merged dots (DotMerger): group -> operand position (0: lhs, 1: rhs) the dots share
        self.dot_merged: dict[int, int] = {}
        self.epilogue_ops = [0] * n
        self.multi = [False] * n  # a multi-output fusion (sibling or producer-consumer MOF)
        self.expensive = [False] * n  # holds an expensive op (XLA IsExpensive)
        self.reuses = [False] * n  # holds an op that reads operand elements several times
        self.computes = [False] * n  # holds an op that is no bitcast/constant (a kernel)
        self.nopnd = [0] * n  # operands of its ops: an upper bound of the kernel's operands
        self.no_mof = [False] * n  # holds an in-place or transposing op: no MOF producer
        # holds a transpose of the minor dimension (not of a broadcast or iota): reads that
        # XLA's cost model counts as uncoalesced outside a transpose emitter (_minor_transpose)
        self.minor_transpose = [False] * n
        self.inline: set = set()  # splat / scalar constants: folded into kernels, never read
        self.members: dict[int, list[int]] = {i: [i] for i in range(n)}
        self.dups: dict[int, set] = {}  # cheap producers copied into the group (priority fusion)
        self.hero: list = [None] * n  # the reduce node of an input kernel
        # kernel ancestry (multi-output fusion): Python-int bitsets over the kernels left
        # by priority fusion, indexed by group; anc[g] = every kernel g depends on through
        # any chain of kernels, itself included; mask[g] = its own bit(s). None: cycle
        # checks walk back through operands instead.
        self.anc: dict | None = None
        self.mask: dict | None = None
        self.operand_nodes: list = []
        self.ext: dict = {}  # gid -> {value key: (producer, bytes)} read from outside (cached)
        self.opfacts: dict = {}  # node -> [(value key, producer node or None, bytes)] per operand
        self.resbytes: dict = {}  # node -> bytes of its results

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
        d = self.dups.pop(gi, None)
        if d:
            self.dups.setdefault(g, set()).update(d)
        if self.anc is not None and gi in self.anc:
            self.anc[g] |= self.anc.pop(gi)
            self.mask[g] |= self.mask.pop(gi)
        self.kind[g] = kind
        self.size[g] += self.size[gi]
        self.nopnd[g] += self.nopnd[gi]
        self.nred[g] += self.nred[gi]
        if self.max_index[gi] > self.max_index[g]:
            self.max_index[g] = self.max_index[gi]
        # the flags: true when either side's is
        for flags in (self.has_reduce, self.multi, self.expensive, self.reuses, self.computes, self.no_mof, self.minor_transpose):
            if flags[gi]:
                flags[g] = True
        if self.hero[g] is None:
            self.hero[g] = self.hero[gi]
        self.ext.pop(g, None)
        self.ext.pop(gi, None)
        return g

    def add_dup(self, g: int, i: int) -> None:
        self.dups.setdefault(g, set()).add(i)
        self.size[g] += 1
        self.nopnd[g] += len(self.operand_nodes[i])
        self.reuses[g] = self.reuses[g] or self.reuses[i]
        self.minor_transpose[g] = self.minor_transpose[g] or self.minor_transpose[i]
        self.ext.pop(g, None)


def form_kernels(nodes: list[Node], policy: str) -> list[Kernel]:
    """Kernels of one block (its nodes in program order), in program order of their roots.
    XLA's fusion passes walk the block in its instruction post order (kernels/order.py), and
    so does this; each kernel's members, copies and root (its last member) are then given in
    program order."""
    from .order import xla_post_order

    order = xla_post_order(nodes) if policy in ("xla-gpu", "xla-tpu") else None
    if order is None:
        return _form_kernels(nodes, policy)
    kernels = _form_kernels([nodes[i] for i in order], policy)
    for k in kernels:
        k.node_ids = ids = sorted(order[j] for j in k.node_ids)
        k.ops = [nodes[i].op for i in ids]
        k.root = k.ops[-1]
        k.duplicated_ids = dups = sorted(order[j] for j in k.duplicated_ids)
        k.duplicated = [nodes[i].op for i in dups]
    kernels.sort(key=lambda k: k.node_ids[-1])
    return kernels


def _form_kernels(nodes: list[Node], policy: str) -> list[Kernel]:
    """form_kernels over the nodes in the order given."""
    n = len(nodes)
    if n == 0:
        return []
    # the operands, results and their types of every op (fetched by the caller, or here)
    operands_of = [None] * n
    results_of = [None] * n
    types_of = [None] * n
    # the node defining each value of the block (values defined outside it are absent)
    defined: dict = {}
    for j, nd in enumerate(nodes):
        op = nd.op
        operands = nd.operands if nd.operands is not None else tuple(op.operands)
        results = nd.results if nd.results is not None else tuple(op.results)
        types = nd.types
        if types is None:
            types = (tuple(v.type for v in operands), tuple(v.type for v in results))
        operands_of[j], results_of[j], types_of[j] = operands, results, types
        for r in results:
            defined[r] = j
    users: list[list[int]] = [[] for _ in range(n)]
    external_use = [False] * n
    operand_nodes: list[list] = [None] * n  # per operand: node index or None (block argument / outer value)
    outer_users: dict = {}  # values defined outside the block -> the nodes reading them
    g = _Groups(n)
    nres = [1] * n
    rbytes = [0] * n  # bytes of a single-result op's result
    opfacts = g.opfacts
    resbytes = g.resbytes
    for j, nd in enumerate(nodes):
        op = nd.op
        name = nd.name
        cls = nd.cls
        results = results_of[j]
        in_types, out_types = types_of[j]
        nres[j] = len(results)
        ops_j = []
        facts = []
        boundary = cls == BOUNDARY or name in TERMINATORS
        for pos, v in enumerate(operands_of[j]):
            i = defined.get(v)
            ops_j.append(i)
            if i is not None:
                if nres[i] == 1:
                    facts.append((i, i, rbytes[i]))
                else:
                    facts.append(((i, _result_number(v)), i, type_info(in_types[pos]).nbytes))
                if boundary:
                    external_use[i] = True
                else:
                    users[i].append(j)
            else:
                facts.append((v, None, type_info(in_types[pos]).nbytes))
                if not boundary:
                    outer_users.setdefault(v, []).append(j)
        operand_nodes[j] = ops_j
        opfacts[j] = facts
        g.nopnd[j] = len(ops_j)
        if cls == BOUNDARY or (op.regions and cls != REDUCE and policy != "given"):
            # values of this block captured inside nested regions (case branches ...)
            _mark_captured(op, defined, external_use)
        # per-node facts of the groups
        g.kind[j] = _initial_kind(nd, policy)
        if results:
            r0 = type_info(out_types[0])
            g.out_elems[j] = r0.num_elements if r0.is_tensor else 0
            if len(results) == 1:
                rbytes[j] = resbytes[j] = r0.nbytes
        if cls == REDUCE:
            g.has_reduce[j] = True
            g.hero[j] = j
            g.nred[j] = 1
        elif name in EXPENSIVE_OPS:
            g.expensive[j] = True
        if name in REUSING_OPS:
            g.reuses[j] = True
        if cls != FREE:
            g.computes[j] = True
        if name in IN_PLACE_OPS or name == "stablehlo.transpose":
            g.no_mof[j] = True
        if name == "stablehlo.constant" and _splat_or_scalar_constant(op):
            g.inline.add(j)

    g.operand_nodes = operand_nodes
    if policy == "xla-gpu":
        for j, nd in enumerate(nodes):
            if nd.name == "stablehlo.transpose" and _minor_transpose(nodes, operand_nodes, j):
                g.minor_transpose[j] = True
    if policy not in ("given", "none"):
        _cse(nodes, g, operand_nodes, operands_of, types_of, users, external_use, nres, rbytes)
        _remove_dead(nodes, g, users, operand_nodes, outer_users, external_use, nres)
    if policy == "xla-gpu":
        _fold_dot_transposes(nodes, g, users, operand_nodes, external_use)
        _dot_merger(nodes, g, operand_nodes, types_of)
        _fuse_conv_side_input(nodes, g, users, operand_nodes, external_use)
    absorbed = [False] * n
    if policy not in ("given", "none"):
        st = _Formation(nodes, g, users, operand_nodes, external_use, absorbed, policy)
        st.priority_fusion()
        st.multi_output_fusion(outer_users)
        for dead in st.redirect:
            g.kind[dead] = None

    roots = [
        gid
        for gid, ms in g.members.items()
        # a kernel: not a boundary/terminator, not only bitcasts and constants, not a
        # producer copied into all its consumers
        if g.kind[gid] is not None and g.computes[gid] and not (len(ms) == 1 and absorbed[ms[0]])
    ]
    pads: dict = {}  # conv padding legalization: (input, padding) -> padded bytes, once per block
    kernels = []
    for root_g in sorted(roots, key=g.max_index.__getitem__):
        idx = sorted(g.members[root_g])
        kind = g.kind[root_g]
        if any(nodes[i].cost is None for i in idx):
            idx = [i for i in idx if nodes[i].cost is not None]
            if not idx:
                continue
        dups = sorted(d for d in g.dups.get(root_g, ()) if d not in idx)
        kernels.append(_make_kernel(nodes, idx, dups, kind, operand_nodes, users, external_use, g, policy, pads))
    # An op copied into several kernels belongs to the first (it carries that kernel's id);
    # in the others its work is recomputed: counted in their flops, and said so.
    owned: set = set()
    for k in kernels:
        rf = rt = 0
        for d in k.duplicated_ids:
            if d in owned:
                c = nodes[d].cost
                if c is not None:
                    rf += c.flops
                    rt += c.transcendentals
            else:
                owned.add(d)
        if rf or rt:
            k.attrs["recomputed_flops"] = rf
            k.attrs["recomputed_transcendentals"] = rt
    return kernels


# Ops without side effects: removed by XLA's HloDCE when nothing reads their results.
_PURE_CLASSES = frozenset({FREE, ELEMENTWISE, MOVEMENT, REDUCE, GEMM, CONV})


# Ops that priority fusion copies into every consumer anyway: CSE numbers them (so that
# equal computations over them are found) but leaves each where it is.
_CSE_KEEP = frozenset({"stablehlo.constant", "stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.iota"})


def _cse(nodes, g, operand_nodes, operands_of, types_of, users, external_use, nres, rbytes) -> int:
    """XLA's HloCSE, which runs before fusion, on the computations that read no value of
    the program (constants, iotas and what is computed from them only): an op (pure, one
    result, no regions) with the name, attributes, operands and result types of an
    earlier one is that one; its readers read the earlier op instead, and it is dead
    (_remove_dead drops it). A JAX export recomputes per layer what does not depend on
    the layer (LLaMA's RoPE tables: 56 kernels of ours, 2 in XLA's H100 HLO of the
    llama3-100m step). Constants, broadcasts and iotas are numbered, not merged (priority
    fusion copies them into every consumer anyway). XLA merges equal ops over the
    program's values too; merging those here (a batch norm's forward and backward
    converts of one activation) kept f32 copies alive across a step in `costmodel
    memory`, where XLA converts inside each kernel. Returns the number of ops merged."""
    seen: dict = {}
    number: dict = {}  # node -> the node it equals (itself if first)
    constant = [False] * len(nodes)  # reads no value of the program, through any chain
    merged = 0
    opfacts = g.opfacts
    for j, nd in enumerate(nodes):
        ops_j = operand_nodes[j]
        constant[j] = all(i is not None and constant[i] for i in ops_j) and nd.cls in _PURE_CLASSES and nres[j] == 1
        if not constant[j] or external_use[j] or nd.name in TERMINATORS:
            continue
        op = nd.op
        if len(op.regions):
            constant[j] = False
            continue  # computations are not compared
        try:
            attrs = op.attributes
            akey = tuple((a, attrs[a]) for a in attrs)
            key = (nd.name, tuple(number.get(i, i) for i in ops_j), akey, types_of[j][1])
            r = seen.get(key)
        except TypeError:  # an unhashable attribute: not compared
            continue
        if r is None:
            seen[key] = j
            continue
        number[j] = r
        if nd.name in _CSE_KEEP:
            continue
        for u in dict.fromkeys(users[j]):  # its readers read r
            operand_nodes[u] = [r if i == j else i for i in operand_nodes[u]]
            opfacts[u] = [(r, r, rbytes[r]) if src == j else (k, src, b) for k, src, b in opfacts[u]]
        users[r].extend(users[j])
        users[j] = []
        merged += 1
    return merged


def _remove_dead(nodes, g, users, operand_nodes, outer_users, external_use, nres) -> None:
    """XLA's HloDCE, which runs before fusion: an op without side effects whose results
    nobody reads (in the block, a nested region, or the block's terminator), nor any op
    reading them but dead ones, is removed. Such a node forms no kernel (`Node.dead`)."""
    n = len(nodes)
    dead = [False] * n
    found = []
    for j in range(n - 1, -1, -1):
        nd = nodes[j]
        if nres[j] == 0 or external_use[j] or nd.cls not in _PURE_CLASSES or nd.name in TERMINATORS:
            continue
        if all(dead[u] for u in users[j]):
            dead[j] = True
            found.append(j)
    if not found:
        return
    gone = set(found)
    for j in found:
        nodes[j].dead = True
        g.kind[j] = None
        g.computes[j] = False
        users[j] = []
        for i in operand_nodes[j]:
            if i is not None and not dead[i]:
                users[i] = [u for u in users[i] if u not in gone]
    for v, js in list(outer_users.items()):
        kept = [u for u in js if u not in gone]
        if kept:
            outer_users[v] = kept
        else:
            del outer_users[v]


def _mark_captured(op, defined, external_use) -> None:
    from ..ir import walk_ops

    for inner in walk_ops(op):
        for v in inner.operands:
            i = defined.get(v)
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
        text = text.rsplit(" ", 1)[-1].rstrip(">")
        if text in ("kCustom", "kOutput"):
            # XLA's kCustom is more than GEMMs (Triton softmax and reduction fusions, cuDNN
            # fusions; on CPU reductions too): the kind of what it holds
            return _given_fusion_kind(nd.op)
        return {"kLoop": "loop", "kInput": "input"}.get(text, "fusion")
    if nd.name == "mhlo.copy":
        return "loop"
    if nd.name == "func.call":  # a call of an outlined XLA fusion (given kernels)
        callee = callee_of(nd.op)
        return _given_fusion_kind(callee) if callee is not None else "fusion"
    return "custom"



def _given_fusion_kind(op) -> str:
    """The kind of a given fusion from its body: a convolution inside, conv; a dot, gemm;
    otherwise as XLA names its loop and input fusions (ChooseFusionKind: a reduction
    inside, input; else loop)."""
    classes = set()
    for block in op.regions[0].blocks if op.regions else ():
        for inner in block.operations:
            classes.add(op_class(inner.operation.name))
    for cls, kind in ((CONV, "conv"), (GEMM, "gemm"), (REDUCE, "input")):
        if cls in classes:
            return kind
    return "loop"


def _given_gemm_op(op):
    """The one dot or convolution a given fusion's body holds (None: none, or several)."""
    found = None
    for block in op.regions[0].blocks if op.regions else ():
        for inner in block.operations:
            inner = inner.operation
            if op_class(inner.name) in (GEMM, CONV):
                if found is not None:
                    return None
                found = inner
    return found


def _fusible_producer(nd: Node) -> bool:
    """XLA's IsFusible/IsLoopFusibleAsProducer: elementwise and data-movement ops, a
    reduction (into its own epilogue), dots/convolutions (into an epilogue), bitcasts.
    Constants are left out: XLA fuses small ones at the very end (their bytes are inline
    here anyway: a splat or scalar constant is never read) and never larger ones (a
    buffer every kernel reads)."""
    c = nd.cls
    if c in (ELEMENTWISE, MOVEMENT, REDUCE, GEMM, CONV):
        return True
    return c == FREE and (nd.name in FUSIBLE_FREE_OPS or nd.passthrough)


class _Formation:
    """XLA GPU's fusion passes over one block, in their order: priority fusion (a
    producer fused into all its consumers, copied when there are several, or into none,
    the most profitable producer first), then multi-output fusion (siblings, then
    producer-consumer)."""

    def __init__(self, nodes, g, users, operand_nodes, external_use, absorbed, policy):
        self.nodes = nodes
        self.g = g
        self.users = users
        self.operand_nodes = operand_nodes
        self.external_use = external_use
        self.absorbed = absorbed  # node -> copied into other kernels, no kernel of its own
        self.policy = policy
        self.homes: dict[int, list] = {}  # absorbed node -> the groups holding its copies
        self.redirect: dict[int, list] = {}  # dead group -> the groups it was copied into
        self.root = list(range(len(nodes)))  # group -> its sink node (the op whose result leaves)
        self._res_bytes: dict[int, int] = {}
        self._in_keys: dict[int, list] = {}
        self._reduce_keys: dict[int, tuple] = {}
        self._smem: dict[int, int] = {}  # reduce node -> its shared memory bytes
        self._smem_group: dict[int, tuple] = {}  # kernel -> (its op count then, its bytes)

    # -- value facts -------------------------------------------------------------------
    def res_bytes(self, i: int) -> int:
        return _result_bytes(self.nodes, self.g, i)

    def in_keys(self, i: int) -> list:
        """(key, producer node or None, bytes) of the distinct values node i reads
        (inline constants left out); key: the producer node, or the value itself."""
        ks = self._in_keys.get(i)
        if ks is None:
            ks, seen = [], set()
            inline = self.g.inline
            for key, src, b in _operand_facts(self.nodes, self.operand_nodes, self.g, i):
                if (src is not None and src in inline) or key in seen:
                    continue
                seen.add(key)
                ks.append((key, src, b))
            self._in_keys[i] = ks
        return ks

    def ext(self, gid: int) -> dict:
        """Values kernel gid reads from outside: key -> (producer node or None, bytes)."""
        g = self.g
        e = g.ext.get(gid)
        if e is None:
            inside = set(g.members[gid])
            inside.update(g.dups.get(gid, ()))
            e = {}
            for i in inside:
                for key, src, b in self.in_keys(i):
                    if src is not None and src in inside:
                        continue
                    e[key] = (src, b)
            g.ext[gid] = e
        return e

    def ext_bytes(self, gid: int) -> int:
        return sum(b for _, b in self.ext(gid).values())

    def absorbed_users(self, i: int) -> bool:
        absorbed = self.absorbed
        return any(absorbed[u] for u in self.users[i])

    def resolve(self, hs) -> list:
        """Live groups behind group ids (a dead group: the groups it was copied into)."""
        g = self.g
        out = {}
        stack = list(hs)
        while stack:
            h = g.find(stack.pop())
            r = self.redirect.get(h)
            if r is not None:
                stack.extend(r)
            else:
                out[h] = None
        return list(out)

    def consumer_groups(self, i: int) -> list:
        """The kernels that read node i: its users' groups, or, for a user copied into
        several kernels, each of those."""
        us = self.users[i]
        absorbed = self.absorbed
        if len(us) == 1 and not absorbed[us[0]]:
            return [self.g.find(us[0])]
        find = self.g.find
        out = {}  # insertion-ordered set
        for u in us:
            if absorbed[u]:
                for h in self.resolve(self.homes[u]):
                    out[h] = None
            else:
                out[find(u)] = None
        return list(out)

    def users_in(self, i: int, gid: int) -> list:
        g = self.g
        d = g.dups.get(gid, ())
        return [u for u in self.users[i] if (u in d) or (not self.absorbed[u] and g.find(u) == gid)]

    # -- priority fusion ------------------------------------------------------------------
    def producer_ok(self, pg: int) -> bool:
        """XLA IsFusible(producer): loop and reduction fusions (kCustom ones are not:
        GEMM/convolution library calls fuse only through their own rewriters, below);
        not a value the block returns or hands to a region op."""
        g = self.g
        if g.kind[pg] is None or pg in self.redirect:
            return False
        r = self.root[pg]
        if self.external_use[r] or not self.users[r]:
            return False
        nd = self.nodes[r]
        if nd.cost is None:
            return False
        if g.size[pg] == 1:
            return _fusible_producer(nd)
        return g.kind[pg] in ("loop", "input") or (g.kind[pg] == "gemm" and self.policy == "xla-tpu")

    def accepts(self, cg: int, pg: int) -> bool:
        """May producer kernel pg be fused into consumer kernel cg (XLA: CanFuse)?"""
        return self.legal(cg, pg) and self.within_budget(cg, pg, self.root[pg])

    def legal(self, cg: int, pg: int) -> bool:
        """CanFuse's rules other than the operand budget."""
        g, nodes, policy = self.g, self.nodes, self.policy
        kind = g.kind[cg]
        if kind is None:
            return False
        if g.size[cg] + g.size[pg] > MAX_FUSION_PARAMS * 4:  # FusionFitsInBudget (a proxy on op count)
            return False
        r = self.root[pg]
        nd = nodes[r]
        if kind == "custom" and policy == "xla-gpu" and g.size[cg] == 1 and g.size[pg] == 1:
            # XLA GPU expands select_and_scatter before fusion (rule 8); the pad of its
            # operand fuses into the expansion's reduce_window loop kernel (our H200 HLO:
            # the pad inside fused_reduce_window), so it is no kernel of its own
            return (_pad_of_select_and_scatter(nodes, self.operand_nodes, self.root[cg], r)
                    and self.users[r] == [self.root[cg]] and not self.external_use[r])
        if kind in ("collective", "custom", "fusion"):
            return False
        c = nd.cls
        single = g.size[pg] == 1
        if kind == "gemm":
            if policy == "xla-tpu":
                return g.kind[pg] == "loop"
            if cg in g.dot_merged:
                # merged dots (DotMerger) run as one library call on the concatenation of
                # their other operands: a producer of those goes into the concatenate's
                # kernel (counted with this one), the shared operand's stays apart
                shared = g.dot_merged[cg]
                return single and nd.name in GEMM_PROLOGUE_OPS and all(
                    self.operand_nodes[d][shared] != r for d in g.members[cg] if nodes[d].cls == GEMM
                )
            # Triton GEMM prologue (XLA's GemmFusion: IsInputWorthFusing, IsConversionWorthFusing)
            return single and nd.name in GEMM_PROLOGUE_OPS and self.input_worth_fusing(r)
        if kind == "conv":
            if policy == "xla-tpu":
                return g.kind[pg] == "loop"
            return single and c == FREE
        # loop / input kernels
        croot = self.root[cg]
        if nodes[croot].cls == FREE and g.size[cg] == 1:
            return False  # "not fusing into a single bitcast as consumer"
        pkind = g.kind[pg]
        if pkind in ("gemm", "conv"):
            out = g.out_elems[pg]
            if kind != "loop" or g.out_elems[cg] != out or g.has_reduce[cg] or g.size[pg] != 1:
                return False
            if policy == "xla-tpu":
                return True
            if pkind == "conv":
                return False  # cuDNN: the conv kernel is a library call (no epilogue in training graphs)
            # cuBLASLt epilogue: bias add / scale / ReLU / output convert of the dot's shape
            # (a transpose folded into the dot, _fold_dot_transposes, is a bitcast)
            return (g.epilogue_ops[cg] == 0 and g.size[cg] <= MAX_EPILOGUE_OPS
                    and all(nodes[j].name in GEMM_EPILOGUE_OPS or nodes[j].passthrough for j in g.members[cg]))
        if g.has_reduce[pg]:
            # "both the producer and the consumer contain a reduce"; and "fusion into output
            # of a reduce fusion would create a loop fusion": the consumer must work on the
            # reduction's result shape, not broadcast it back
            return kind == "loop" and not g.has_reduce[cg] and g.out_elems[cg] == g.out_elems[pg]
        if pkind != "loop":
            return False
        if (g.minor_transpose[pg] or g.minor_transpose[cg]) and (g.has_reduce[cg] or g.has_reduce[pg]):
            # XLA GPU's IsReadCoalescedHeuristic (model/coalescing_analysis.cc): outside a
            # transpose emitter, a fusion holding a transpose of the minor dimension reads
            # uncoalesced, at element size / DRAM transaction size of the bandwidth
            # (GetCoalescingUtilizationRate, gpu_performance_model_base.cc: 1/16 for f32 on
            # 64-byte transactions), so fusing it into a reduction never pays; XLA forms a
            # transpose kernel instead (llama3-100m H100 HLO: an input_transpose_fusion
            # writes what each softmax-backward reduction reads)
            return False
        if g.expensive[pg] and g.reuses[cg] and self.reuses_elements(r, cg):
            return False  # the producer is expensive, and the consumer reuses its elements
        return True

    def input_worth_fusing(self, r: int) -> bool:
        """XLA GPU's GemmFusion (triton_tiling_propagation.cc, IsConversionWorthFusing): a
        narrowing convert is no Triton GEMM prologue; it rather goes into its producer's
        kernel, which then writes the narrow type (our H100 HLO of the LLaMA steps: the
        softmax and norm kernels write bf16 for the dots). The other prologue ops read at
        most what they write, which IsInputWorthFusing always accepts."""
        nd = self.nodes[r]
        if self.policy != "xla-gpu" or nd.name != "stablehlo.convert":
            return True
        try:
            return type_info(_operand_type(nd, 0)).nbytes <= type_info(_result_type(nd, 0)).nbytes
        except Exception:
            return True

    def reuses_elements(self, r: int, cg: int) -> bool:
        """Does kernel cg read the elements of node r several times? XLA's
        ReusesOperandElements of a fusion follows the operand through the fused
        computation (FusionReusesParamElements): a broadcast, gather, pad or
        reduce_window anywhere downstream of it inside the kernel reuses it."""
        nodes = self.nodes
        seen: set = set()
        stack = list(self.users_in(r, cg))
        while stack:
            u = stack.pop()
            if u in seen:
                continue
            seen.add(u)
            if nodes[u].name in REUSING_OPS:
                return True
            stack.extend(self.users_in(u, cg))
        return False

    def benefit(self, pg: int, cons: list) -> float:
        """XLA's priority of a producer: time_unfused - time_fused
        (GpuPerformanceModel::EstimateRunTimesForPriorityFusion), in bytes of memory-bound
        kernels: unfused, the producer reads its inputs and writes its result, which
        every consumer reads; fused, every consumer reads the producer's inputs it does
        not read already; one launch fewer."""
        e = self.ext(pg)
        in_b = sum(b for _, b in e.values())
        out_b = self.res_bytes(self.root[pg])
        gain = LAUNCH_OVERHEAD_BYTES + in_b + out_b
        for cg in cons:
            ec = self.ext(cg)
            gain += out_b - sum(b for k, (_, b) in e.items() if k not in ec)
        return gain

    def candidate(self, pg: int):
        """(consumers, benefit) when producer kernel pg may fuse into all its consumers
        with a benefit >= 0, else None."""
        if not self.producer_ok(pg):
            return None
        cons = self.consumer_groups(self.root[pg])
        if not cons or pg in cons:
            return None
        if not all(self.accepts(cg, pg) for cg in cons):
            return None  # "Don't fuse if we can't fuse in all users"
        if self.g.size[pg] == 1 and self.nodes[pg].cls == FREE:
            return cons, float("inf")  # "Bitcasts should always be fused first"
        b = self.benefit(pg, cons)
        return (cons, b) if b >= 0 else None

    def fuse(self, pg: int, cons: list, track: bool = True) -> list:
        """Fuse producer kernel pg into its consumer kernels; returns the kernels whose
        priority changes (track=False: none are computed). Cached external inputs of the
        consumers are updated, not dropped (track: computed if missing)."""
        g = self.g
        r = self.root[pg]
        affected = []
        pe = None

        def grown(ce: dict | None):
            nonlocal pe
            if ce is None:
                return None
            if pe is None:
                pe = self.ext(pg)
            ne = {k: v for k, v in ce.items() if not (k == r or (isinstance(k, tuple) and k[0] == r))}
            ne.update(pe)
            return ne

        if len(cons) == 1:
            cg = cons[0]
            ce = self.ext(cg) if track else g.ext.get(cg)
            ne = grown(ce)
            kind = g.kind[cg]
            if g.has_reduce[pg]:
                kind = "input"
            elif g.kind[pg] in ("gemm", "conv"):
                kind = g.kind[pg]
                g.epilogue_ops[cg] = g.size[cg]
            g.merge_into(cg, pg, kind)
            if ne is not None:
                g.ext[cg] = ne
            affected.append(cg)
        else:
            ms = list(g.members[pg])
            ds = list(g.dups.get(pg, ()))
            for cg in cons:
                ce = self.ext(cg) if track else g.ext.get(cg)
                ne = grown(ce)
                for m in ms:
                    g.add_dup(cg, m)
                for d in ds:
                    g.add_dup(cg, d)
                if ne is not None:
                    g.ext[cg] = ne
                affected.append(cg)
            for m in ms:
                self.absorbed[m] = True
                self.homes[m] = list(cons)
            self.redirect[pg] = list(cons)
            g.ext.pop(pg, None)
        if not track:
            return []
        # the producers of the grown kernels see a changed consumer (those read by this
        # kernel only were settled by single_consumer_fusion: growth does not make them legal)
        users, root = self.users, self.root
        for cg in list(affected):
            for src, _b in self.ext(cg).values():
                if src is not None and not self.absorbed[src] and len(users[src]) > 1:
                    h = g.find(src)
                    if h not in affected and root[h] == src:
                        affected.append(h)
        return affected

    def within_budget(self, a: int, b: int, producer: int | None = None) -> bool:
        """FusionFitsInBudget: the fused kernel's distinct operands plus its outputs (two
        here, as XLA's first estimate) at most MaxOperandsAndOutputsPerFusion (96); a
        producer's result is no operand of the kernel it is fused into."""
        g = self.g
        if g.nopnd[a] + g.nopnd[b] + 2 <= MAX_FUSION_PARAMS:
            return True  # even if no two ops read the same value
        ea, eb = self.ext(a), self.ext(b)
        if len(ea) + len(eb) + 2 <= MAX_FUSION_PARAMS:
            return True
        keys = set(ea)
        keys.update(eb)
        if producer is not None:
            keys = {k for k in keys if not (k == producer or (isinstance(k, tuple) and k[0] == producer))}
        return len(keys) + 2 <= MAX_FUSION_PARAMS

    def single_consumer_fusion(self) -> None:
        """A first sweep, consumers before producers, of the fusions whose priority is
        positive whatever else is fused (a fast path of the priority queue): a producer
        read by one kernel (a launch plus twice its result bytes at least), and one read
        by several that gains even if none of them reads any of its inputs already
        (launch + inputs + result + n x (result - inputs) >= 0: broadcasts, widening
        converts, bitcasts ...). XLA fuses every legal one of them."""
        g, nodes, users = self.g, self.nodes, self.users
        external_use = self.external_use
        for i in range(len(nodes) - 1, -1, -1):
            if not users[i] or external_use[i]:
                continue
            nd = nodes[i]
            if nd.cost is None or not _fusible_producer(nd):
                continue
            if g.parent[i] != i:
                continue  # fused into a consumer already
            pg = i
            cons = self.consumer_groups(i)
            if not cons or pg in cons:
                continue
            if len(cons) == 1:
                if self.accepts(cons[0], pg):
                    self.fuse(pg, cons, track=False)
                continue
            if nd.cls != FREE:
                in_b = sum(b for _k, _s, b in self.in_keys(i))
                out_b = self.res_bytes(i)
                if LAUNCH_OVERHEAD_BYTES + in_b + out_b + len(cons) * (out_b - in_b) < 0:
                    continue  # for the priority queue
            if all(self.accepts(cg, pg) for cg in cons):
                self.fuse(pg, cons, track=False)

    def priority_fusion(self) -> None:
        import heapq

        self.single_consumer_fusion()
        g = self.g
        n = len(self.nodes)
        version = [0] * n
        heap = []

        # Lazy priorities: a kernel is queued with an upper bound of its benefit (all its
        # consumers reading nothing new); popped, its exact benefit is computed, and it is
        # fused when that still beats the best bound left, else requeued with it. The
        # order is then XLA's (the most profitable producer first), at a fraction of the
        # evaluations.
        inf = float("inf")

        def push(pg: int) -> None:
            version[pg] += 1
            if not self.producer_ok(pg):
                return
            r = self.root[pg]
            if g.size[pg] == 1 and self.nodes[r].cls == FREE:
                bound = inf
            else:
                n_cons = len(self.consumer_groups(r))
                if n_cons < 2 and not self.absorbed_users(r):
                    return  # one consumer: settled by single_consumer_fusion
                bound = LAUNCH_OVERHEAD_BYTES + self.ext_bytes(pg) + (n_cons + 1) * self.res_bytes(r)
            heapq.heappush(heap, (-bound, -pg, version[pg], pg, False))

        for i in range(n - 1, -1, -1):
            if g.parent[i] == i and len(self.users[self.root[i]]) > 1:
                push(i)
        while heap:
            negb, _, ver, pg, exact = heapq.heappop(heap)
            if ver != version[pg] or g.find(pg) != pg or pg in self.redirect:
                continue
            c = self.candidate(pg)
            if c is None:
                continue
            cons, b = c
            if not exact and heap and b < -heap[0][0]:
                version[pg] += 1
                heapq.heappush(heap, (-b, -pg, version[pg], pg, True))
                continue
            for a in self.fuse(pg, cons):
                a = g.find(a)
                if a not in self.redirect:
                    push(a)

    # -- multi-output fusion ------------------------------------------------------------
    def loop_shape(self, gid: int):
        """(elements of the iteration space, reduction key or None): a reduction kernel
        iterates over its hero's input, a loop kernel over its root's result."""
        g = self.g
        h = g.hero[gid]
        if h is not None:
            key = self._reduce_keys.get(h)
            if key is None:
                nd = self.nodes[h]
                key = self._reduce_keys[h] = (type_info(_operand_type(nd, 0)).num_elements, _reduce_key(nd))
            return key
        return g.out_elems[gid], None

    def compatible(self, a: int, b: int) -> bool:
        """ShapesCompatibleForMultiOutputFusion: one common parallel loop; two reductions
        need the same input shape and reduced dimensions."""
        ea, ra = self.loop_shape(a)
        eb, rb = self.loop_shape(b)
        if ea != eb:
            return False
        if ra is not None and rb is not None:
            return ra == rb
        return True

    def mof_root(self, gid: int) -> bool:
        """IsFusibleAsMultiOutputFusionRoot: reduction and loop fusions."""
        g = self.g
        if g.kind[gid] not in ("loop", "input") or gid in self.redirect:
            return False
        return g.computes[gid]

    def fits(self, a: int, b: int) -> bool:
        """FusionFitsInBudget: at most 8 unnested reductions, their shared memory within
        a block's (xla-gpu), and the operand budget."""
        g = self.g
        return (
            g.nred[a] + g.nred[b] <= MAX_UNNESTED_REDUCTIONS
            and not (
                g.nred[a]
                and g.nred[b]
                and self.policy == "xla-gpu"
                and self.shared_memory(a) + self.shared_memory(b) > SHARED_MEMORY_PER_BLOCK
            )
            and g.size[a] + g.size[b] <= MAX_FUSION_PARAMS * 4
            and self.within_budget(a, b)
        )

    def shared_memory(self, gid: int) -> int:
        """Shared memory bytes of kernel gid's reductions (SharedMemoryUsage; computed
        when two kernels with reductions are about to merge)."""
        size = self.g.size[gid]
        hit = self._smem_group.get(gid)
        if hit is not None and hit[0] == size:  # no op joined it since
            return hit[1]
        nodes, cache = self.nodes, self._smem
        total = 0
        for i in self.g.members[gid]:
            if nodes[i].cls == REDUCE:
                b = cache.get(i)
                if b is None:
                    b = cache[i] = _reduction_shared_memory(nodes[i])
                total += b
        self._smem_group[gid] = (size, total)
        return total

    def depends(self, dst: int, src: int) -> bool:
        """Does kernel dst depend on kernel src (through any chain of kernels)?"""
        g = self.g
        if g.anc is None:
            return _depends(g.members[dst], g.members[src], g)
        if dst not in g.anc or src not in g.mask:
            return False  # not a kernel (bitcasts, constants): nothing depends through it
        m = g.mask[src]
        if g.anc[dst] & m:
            return True  # a stale ancestry is a subset of the true one
        self.sync(dst)
        return bool(g.anc[dst] & m)

    def sync(self, x: int) -> None:
        """Bring kernel x's ancestry up to date with the multi-output merges made since it
        was last used: a kernel that depended on either side of a merge depends on all
        the merged kernel depended on then (exact, and lazy: only kernels whose ancestry
        is asked for pay for it). Events come in chunks with the union of their masks and
        the union of their ancestries, so that a run of merges x does not depend on, or
        whose ancestries x holds already, is skipped in one test."""
        events = self.events
        k = self.synced.get(x, 0)
        n = len(events)
        if k == n:
            return
        anc = self.g.anc
        a = anc[x]
        chunk_or, chunk_anc = self.chunk_or, self.chunk_anc
        c = -(-k // EVENT_CHUNK)  # the first whole chunk from k
        head = min(n, c * EVENT_CHUNK)
        for m, snap in events[k:head]:
            if a & m:
                a |= snap
        full = len(chunk_or)  # whole chunks (the events after them: the tail)
        while c < full:
            if a & chunk_or[c] and (chunk_anc[c] | a) != a:
                for m, snap in events[c * EVENT_CHUNK : (c + 1) * EVENT_CHUNK]:
                    if a & m:
                        a |= snap
            c += 1
        for m, snap in events[max(head, full * EVENT_CHUNK) : n]:
            if a & m:
                a |= snap
        anc[x] = a
        self.synced[x] = n

    def merge(self, keep: int, drop: int) -> int:
        """Multi-output merge of two kernels (kernel ancestry kept exact, see sync)."""
        g = self.g
        if g.anc is not None:
            self.sync(keep)
            self.sync(drop)
            merged_mask = g.mask[keep] | g.mask[drop]
        kind = "input" if "input" in (g.kind[keep], g.kind[drop]) else g.kind[keep]
        g.merge_into(keep, drop, kind)
        g.multi[keep] = True
        if g.anc is not None:
            self.events.append((merged_mask, g.anc[keep]))
            n = len(self.events)
            if n % EVENT_CHUNK == 0:
                u = v = 0
                for m, snap in self.events[n - EVENT_CHUNK :]:
                    u |= m
                    v |= snap
                self.chunk_or.append(u)
                self.chunk_anc.append(v)
            self.synced[keep] = n
        self.live.discard(drop)
        return keep

    def slice_windows(self, cands: list, readers, nbytes: int) -> dict | None:
        """ParameterSlicesAreNonOverlapping: for a parent of at least 1024 bytes, the
        (starts, limits) of the one slice through which each candidate kernel reads it
        (None: it reads it otherwise, or more than once). None when no kernel reads a slice."""
        if nbytes < 1024:
            return None
        g, nodes = self.g, self.nodes
        slicers = [u for u in readers if nodes[u].name == "stablehlo.slice"]
        if not slicers:
            return None
        readers = set(readers)
        out = {}
        for c in cands:
            inside = [u for u in g.members[c] if u in readers] + [u for u in g.dups.get(c, ()) if u in readers]
            win = None
            if len(inside) == 1 and nodes[inside[0]].name == "stablehlo.slice":
                from ..rules import _i64_list

                op = nodes[inside[0]].op
                starts, limits = _i64_list(op, "start_indices"), _i64_list(op, "limit_indices")
                if starts is not None and limits is not None:
                    win = (starts, limits)
            out[c] = win
        return out

    def fusion_priority(self, gid: int) -> int:
        """XLA's FusionPriority: 2 for a multi-output fusion, 1 for a fusion, 0 for an
        op priority fusion left alone."""
        g = self.g
        return 2 if g.multi[gid] else (1 if g.size[gid] > 1 else 0)

    def fuse_siblings(self, cands: list, readers=(), parent_bytes: int = 0) -> None:
        g = self.g
        cands = [c for c in cands if self.mof_root(c)]
        windows = self.slice_windows(cands, readers, parent_bytes) if readers else None
        # FuseSiblings: multi-output fusions first, then fusions, then single ops (a
        # stable sort by XLA's FusionPriority)
        cands.sort(key=lambda c: -self.fusion_priority(c))
        if len(cands) > SIBLING_PREFILTER:
            never = self.connected_to_all(cands)
            if never:
                cands = [c for c in cands if g.find(c) not in never]
        i = 0
        while i < len(cands):
            a = g.find(cands[i])
            if g.size[a] == 1:
                break  # the rest are single ops: XLA takes a fusion as the first of a pair
            j = i + 1
            while j < len(cands):
                b = g.find(cands[j])
                if a == b:
                    del cands[j]
                    continue
                if windows is not None and _disjoint(windows.get(a), windows.get(b)):
                    j += 1  # they read non-overlapping slices of the parent: nothing shared
                    continue
                if self.compatible(a, b) and self.fits(a, b) and not self.depends(a, b) and not self.depends(b, a):
                    keep, drop = (a, b) if g.max_index[a] >= g.max_index[b] else (b, a)
                    a = self.merge(keep, drop)
                    if windows is not None:
                        windows[a] = None  # reads the parent twice now
                    del cands[j]
                    continue
                j += 1
            cands[i] = a
            i += 1

    def connected_to_all(self, cands: list) -> set:
        """The kernels among `cands` that depend on or feed every other one of them: no
        sibling merge can take them (a merge needs two unconnected kernels, and merges
        only add connections). Connections are taken from the ops' data flow (two sweeps
        over the block with one bit per kernel): that can miss a connection through a
        multi-output kernel (a kernel is then kept, never wrongly dropped)."""
        g, nodes = self.g, self.nodes
        groups = list(dict.fromkeys(g.find(c) for c in cands))
        if len(groups) < 3:
            return set()
        bit: dict[int, int] = {}  # member node -> its kernel's bit (copied producers: none)
        lo, hi = len(nodes), -1
        for k, h in enumerate(groups):
            for i in g.members[h]:
                if not self.absorbed[i]:
                    bit[i] = 1 << k
                    lo, hi = min(lo, i), max(hi, i)
        operand_nodes, users = self.operand_nodes, self.users
        up: dict[int, int] = {}  # node -> bits of the kernels it depends on (through any ops)
        for i in range(lo, hi + 1):
            r = 0
            for p in operand_nodes[i]:
                if p is not None and p >= lo:
                    r |= up.get(p, 0) | bit.get(p, 0)
            if r:
                up[i] = r
        down: dict[int, int] = {}  # node -> bits of the kernels that depend on it
        for i in range(hi, lo - 1, -1):
            r = 0
            for u in users[i]:
                if u <= hi:
                    r |= down.get(u, 0) | bit.get(u, 0)
            if r:
                down[i] = r
        everyone = (1 << len(groups)) - 1
        reach = [0] * len(groups)
        for i, b in bit.items():
            k = b.bit_length() - 1
            reach[k] |= up.get(i, 0) | down.get(i, 0)
        return {h for k, h in enumerate(groups) if (reach[k] | (1 << k)) & everyone == everyone}

    def producer_consumer_mof(self, p: int) -> None:
        """GetProducerConsumerMultiOutputFusionCandidates: a loop kernel whose result is
        read by several kernels joins one of them that iterates over the same shape,
        when that creates no cycle; its result becomes an extra output."""
        g = self.g
        pg = g.find(p)
        if g.kind[pg] != "loop" or g.multi[pg] or not self.mof_root(pg):
            return
        if g.no_mof[pg]:
            return  # in-place operations / physically transposing producers are not MOF producers
        cons = [c for c in self.consumer_groups(p) if c != pg]
        if not cons or (len(cons) == 1 and not g.multi[cons[0]] and not self.external_use[p]):
            return  # one consumer: priority fusion already considered (and refused) it
        best = None
        for c in cons:
            if not self.mof_root(c) or not self.compatible(c, pg) or not self.fits(c, pg):
                continue
            if self.creates_cycle(pg, c):
                continue
            # SelectPreferredFusionCandidate: the first of the highest FusionPriority
            # (multi-output fusion, then fusion, then an unfused op)
            if best is None or self.fusion_priority(c) > self.fusion_priority(best):
                best = c
        if best is not None:
            self.merge(best, pg)

    def creates_cycle(self, pg: int, c: int) -> bool:
        """Would merging producer kernel pg into consumer kernel c close a cycle: does c
        read a kernel (other than pg) that depends on pg?"""
        g = self.g
        seen = set()
        for src, _b in self.ext(c).values():
            if src is None:
                continue
            hs = self.resolve(self.homes[src]) if self.absorbed[src] else (g.find(src),)
            for h in hs:
                if h == pg or h == c or h in seen:
                    continue
                seen.add(h)
                if self.depends(h, pg):
                    return True
        return False

    def build_ancestry(self, group_of: list) -> None:
        """Kernel ancestry after priority fusion (`group_of`: the group of every op then).
        Every kernel then has one sink (its root, the last of its ops in program order,
        which every other op of it feeds), so the roots' order is a topological order of
        the kernels."""
        g = self.g
        # every group, kernels and the ops that are none (collectives, region ops): paths
        # between kernels run through those too
        groups = {group_of[i] for i in range(len(self.nodes)) if not self.absorbed[i]}
        live = sorted((h for h in groups if h not in self.redirect), key=lambda h: g.max_index[h])
        if len(live) > MAX_ANCESTRY_NODES:
            g.anc = None
            return
        if g.dot_merged:
            # a merged GEMM's dots are spread over the block: a reader of its first dot
            # may come before its last one, so the roots' order is no topological order
            live = self._topological(live, group_of)
        anc, mask = {}, {}
        absorbed, operand_nodes = self.absorbed, self.operand_nodes
        for pos, h in enumerate(live):
            a = 1 << pos
            d = g.dups.get(h)
            inside = g.members[h] if not d else list(g.members[h]) + list(d)
            seen = set()
            for i in inside:
                for src in operand_nodes[i]:
                    if src is None or src in seen:
                        continue
                    seen.add(src)
                    if not absorbed[src]:
                        p = group_of[src]
                        if p != h:
                            a |= anc.get(p, 0)
                    elif not (d and src in d):
                        for p in self.resolve(self.homes[src]):
                            if p != h:
                                a |= anc.get(p, 0)
            anc[h] = a
            mask[h] = 1 << pos
        g.anc, g.mask = anc, mask

    def _group_inputs(self, h: int, group_of: list) -> set:
        """The groups kernel h reads from (through copied producers: where they live)."""
        g = self.g
        d = g.dups.get(h)
        inside = g.members[h] if not d else list(g.members[h]) + list(d)
        out = set()
        for i in inside:
            for src in self.operand_nodes[i]:
                if src is None:
                    continue
                if not self.absorbed[src]:
                    out.add(group_of[src])
                elif not (d and src in d):
                    out.update(self.resolve(self.homes[src]))
        out.discard(h)
        return out

    def _topological(self, live: list, group_of: list) -> list:
        """`live` (in root order) reordered so that every kernel comes after the kernels it
        reads (Kahn's algorithm, the root order breaking ties)."""
        import heapq

        pos = {h: k for k, h in enumerate(live)}
        waits = {}
        readers: dict = {}
        for h in live:
            ins = {p for p in self._group_inputs(h, group_of) if p in pos}
            waits[h] = len(ins)
            for p in ins:
                readers.setdefault(p, []).append(h)
        ready = [(pos[h], h) for h in live if waits[h] == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            _, h = heapq.heappop(ready)
            out.append(h)
            for r in readers.get(h, ()):
                waits[r] -= 1
                if waits[r] == 0:
                    heapq.heappush(ready, (pos[r], r))
        if len(out) != len(live):  # a cycle cannot be (merges are checked); keep them all
            seen = set(out)
            out.extend(h for h in live if h not in seen)
        return out

    def multi_output_fusion(self, outer_users: dict) -> None:
        g, nodes = self.g, self.nodes
        self.events = []  # (mask of a merged kernel, its ancestry then)
        self.chunk_or = []  # union of the masks of every EVENT_CHUNK events
        self.chunk_anc = []  # union of their ancestries
        self.synced = {}
        self.live = set()
        find = g.find
        group_of = [find(i) for i in range(len(nodes))]  # after priority fusion
        for i, h in enumerate(group_of):
            if g.kind[h] is not None and h not in self.redirect and not self.absorbed[i]:
                self.live.add(h)
        self.build_ancestry(group_of)
        absorbed = self.absorbed
        out_elems = g.out_elems
        # a value read outside its kernel is the result of a kernel's sink (the op every
        # other op of it feeds, whose index names the group after priority fusion) or one
        # the block hands out; no other op has readers outside its kernel
        external_use = self.external_use
        sinks = {group_of[i] for i in range(len(nodes)) if not absorbed[i]}
        sinks.update(i for i in range(len(nodes)) if external_use[i] and not absorbed[i])
        for h in g.dot_merged:  # every dot of a merged GEMM: its result leaves the kernel
            sinks.update(g.members.get(h, ()))
        for p in sorted(sinks, reverse=True):
            us = self.users[p]
            if not us or absorbed[p] or out_elems[p] <= 1 or nodes[p].name == "stablehlo.constant":
                continue  # constants are never multi-output fused; scalars are no shared operand
            pg = find(p)
            ext_use = self.external_use[p]
            cands = self.consumer_groups(p)
            if len(cands) == 1 and (cands[0] == pg or (not ext_use and not g.multi[cands[0]])):
                continue  # read by one kernel (its own, or one priority fusion did not join)
            if len(cands) > 1:
                self.fuse_siblings(cands, us, self.res_bytes(p))
            if nodes[p].cost is not None and find(p) in self.live:
                self.producer_consumer_mof(p)
        for v, js in outer_users.items():
            if len(js) < 2 and not any(self.absorbed[u] for u in js):
                continue
            try:
                if type_info(v.type).num_elements <= 1:
                    continue
            except Exception:
                continue
            cands = []
            seen: set = set()  # (a value read by every op of a long chain has as many readers)
            for u in js:
                hs = self.resolve(self.homes[u]) if self.absorbed[u] else [g.find(u)]
                for h in hs:
                    if h not in seen:
                        seen.add(h)
                        cands.append(h)
            if len(cands) > 1:
                self.fuse_siblings(cands, js, type_info(v.type).nbytes)


def _minor_transpose(nodes, operand_nodes, j: int) -> bool:
    """XLA GPU's TransposesMinorDimension (gpu_fusible.cc) for transpose node j, in the
    default (row-major) layouts: the most minor dimension of size > 1 of its result is not
    that of its operand; IsReadCoalescedHeuristic's exceptions left out: a transpose of a
    broadcast or iota (through bitcasts and one-operand elementwise ops), and one of a
    dot's result, which GPU layout assignment makes a bitcast (the dot writes the
    transposed layout)."""
    nd = nodes[j]
    try:
        from ..rules import _i64_list

        perm = _i64_list(nd.op, "permutation")
        shape = type_info(_operand_type(nd, 0)).shape
    except Exception:
        return False
    if not perm or len(perm) != len(shape):
        return False
    in_minor = next((d for d in range(len(shape) - 1, -1, -1) if shape[d] != 1), None)
    out_minor = next((o for o in range(len(perm) - 1, -1, -1) if shape[perm[o]] != 1), None)
    if in_minor is None or out_minor is None or perm[out_minor] == in_minor:
        return False
    src = operand_nodes[j][0]
    if src is not None and nodes[src].cls == GEMM:
        return False  # the dot's output layout (a dot behind a convert is not: XLA's H100 HLO of
        # the llama3-100m step transposes convert(cuBLAS result) in a transpose fusion)
    while src is not None:
        snd = nodes[src]
        if snd.name in ("stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.iota"):
            return False
        ops = operand_nodes[src]
        if len(ops) != 1 or not (snd.name in FUSIBLE_FREE_OPS or snd.cls == ELEMENTWISE):
            return True
        src = ops[0]
    return True


def _disjoint(w1, w2) -> bool:
    """Two slices (starts, limits) that share no element (strides left aside, as XLA's)."""
    if w1 is None or w2 is None:
        return False
    (s1, l1), (s2, l2) = w1, w2
    return any(not (a < d and c < b) for a, b, c, d in zip(s1, l1, s2, l2))


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


def _reduce_key(nd: Node):
    """(operand shape, reduced dimensions sorted) of a reduce, or None: what sibling
    compatibility compares, and what XLA's reduction kind is computed from."""
    op = nd.op
    try:
        shape = tuple(type_info(_operand_type(nd, 0)).shape)
        from ..rules import _i64_list

        dims = tuple(sorted(_i64_list(op, "dimensions") or []))
    except Exception:
        return None
    return shape, dims


# ---------------------------------------------------------------------------
# a kernel's counts
# ---------------------------------------------------------------------------


def _make_kernel(nodes, idx, dups, kind, operand_nodes, users, external_use, g, policy, pads=None) -> Kernel:
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
    sas = target = None  # the select_and_scatter that XLA GPU expands, the type it fills
    expanded = _select_and_scatter_expanded(nodes[idx[0]]) if single and policy == "xla-gpu" else None
    if expanded is not None:
        sas, target = idx[0], _operand_type(nodes[idx[0]], 0)
    if (expanded is None and policy == "xla-gpu" and len(idx) == 2 and not dups
            and _pad_of_select_and_scatter(nodes, operand_nodes, idx[1], idx[0])):
        # its reduce_window reads the pad's operand, padding in registers (and the
        # scatter writes the unpadded shape: XLA folds the pad away)
        target = _operand_type(nodes[idx[0]], 0)
        expanded = _select_and_scatter_expanded(nodes[idx[1]], type_info(target))
        sas = idx[1]
    if expanded is not None:
        k.bytes_read, k.bytes_written, k.launches = expanded
        k.attrs["expanded"] = "select_and_scatter"
        k.scatter_elements = type_info(_operand_type(nodes[sas], 1)).num_elements  # one per source element
        if _init_shared_with_a_broadcast(nodes, operand_nodes, users, sas, target):
            # XLA's CSE makes the expansion's zero-filled operand one buffer with an
            # equal broadcast other ops read (a relu's zero); the in-place scatter then
            # writes into a copy of it (copy insertion), the zeros written by a kernel
            # that reads them anyway: the init kernel becomes a copy, reading and
            # writing the operand once more
            nbytes = type_info(target).nbytes
            k.bytes_read += nbytes
            k.bytes_written += nbytes
            k.attrs["expanded"] = "select_and_scatter, init copied"
    elif single:
        c = nodes[idx[0]].cost
        k.bytes_read, k.bytes_written = c.bytes_read, c.bytes_written
        if policy in ("xla-gpu", "given"):  # a scatter's atomic updates (rules.scatter_rule; in a given fusion, mhlo_fusion_rule)
            k.scatter_elements = c.extra.get("atomic_elements", 0)
    else:
        k.bytes_read, k.bytes_written = _external_bytes(nodes, idx, inside, inside_all, operand_nodes, users, external_use, g)
    if k.scatter_elements:  # shown in costmodel.kernel_cost
        k.attrs["scatter_elements"] = k.scatter_elements
    if single and kind == "custom" and nodes[idx[0]].cost.extra.get("library_call") in ("gemm", "conv"):
        # a cuBLAS GEMM or cuDNN convolution call (rules): formed as any custom call (a
        # kernel of its own, fusing nothing), reported as what it runs
        k.kind = kind = nodes[idx[0]].cost.extra["library_call"]
    # a dot/convolution, or one opaque op that is one: a cuBLAS/cuDNN call, a given
    # fusion holding one (its kind says so)
    gemm_nodes = [i for i in idx if nodes[i].cls in (GEMM, CONV) or (kind in ("gemm", "conv") and nodes[i].cls == OPAQUE)]
    if gemm_nodes:
        k.gemm = _gemm_shape(nodes[gemm_nodes[0]])
        if k.gemm is not None and k.gemm.conv_kind:  # what cuDNN is asked to run, shown in the IR
            k.attrs["conv"] = k.gemm.conv_kind
        shared = g.dot_merged.get(g.find(gemm_nodes[0])) if len(gemm_nodes) > 1 else None
        if shared is not None:
            _merged_dot_kernel(k, nodes, gemm_nodes, shared)
    if policy == "xla-gpu":
        # TreeReductionRewriter runs before fusion: every reduction past the race-free
        # bound becomes two; the first stages share this kernel, each second stage reads
        # its own partial results and is a launch of its own
        for i in idx:
            if nodes[i].cls == REDUCE:
                extra = _tree_split_bytes(nodes[i])
                if extra:
                    k.launches += 1
                    k.bytes_read += extra
                    k.bytes_written += extra
            elif nodes[i].cls == CONV:
                legal = _conv_padding_legalization(nodes[i])
                if legal is not None:
                    key, in_bytes, padded_bytes, out_extra = legal
                    if padded_bytes:
                        if pads is None or key not in pads:  # the pad kernel, once per input and padding
                            k.launches += 1
                            k.bytes_read += in_bytes
                            k.bytes_written += padded_bytes
                            if pads is not None:
                                pads[key] = padded_bytes
                        k.bytes_read += padded_bytes - in_bytes  # the convolution reads the padded input
                        k.attrs["conv_padding"] = "pad"
                    if out_extra:
                        k.bytes_written += out_extra
                        k.attrs["conv_padding"] = "sliced output"
                        # the slice fuses into a consumer kernel; when the result leaves
                        # the block or only non-fusible ops read it, it is a kernel of its
                        # own that reads the part it keeps and writes it
                        if external_use[i] or not any(nodes[u].cls in _SLICE_FUSING_CLASSES for u in users[i]):
                            kept = _result_bytes(nodes, g, i)
                            k.launches += 1
                            k.bytes_read += kept
                            k.bytes_written += kept
                            k.attrs["conv_padding"] = "sliced output, slice kernel"
    return k


# consumers a slice fuses into as a producer (XLA GPU's loop and input fusions)
_SLICE_FUSING_CLASSES = frozenset({ELEMENTWISE, MOVEMENT, REDUCE, FREE})


def _fuse_conv_side_input(nodes, g: _Groups, users, operand_nodes, external_use) -> int:
    """XLA GPU's CudnnFusedConvRewriter (FuseBiasOrSideInput), which runs before fusion:
    an add of a forward convolution's result (read by nothing else) and another value of
    its type becomes one cuDNN call (`__cudnn$convBiasActivationForward`) that reads that
    value as its side input and writes the sum. In XLA's H100 HLO of the resnet50 step,
    16 such calls: the 1x1 input gradients (forward convolutions, _conv_kind) added to
    the residual gradient. Returns the number of adds taken."""
    taken = 0
    for c, nd in enumerate(nodes):
        if nd.cls != CONV or nd.dead or external_use[c] or len(users[c]) != 1:
            continue
        a = users[c][0]
        add = nodes[a]
        if add.name != "stablehlo.add" or add.dead or operand_nodes[a].count(c) != 1:
            continue
        if g.find(a) != a or g.find(c) != c or g.size[c] != 1:
            continue
        try:
            if _result_type(add, 0) != _result_type(nd, 0):
                continue
        except Exception:
            continue
        shape = _gemm_shape(nd)
        if shape is None or shape.conv_kind != "forward":
            continue
        g.merge_into(a, c, "conv")
        taken += 1
    return taken


def _fold_dot_transposes(nodes, g: _Groups, users, operand_nodes, external_use) -> int:
    """XLA GPU writes a dot's result in the layout its only reader, a transpose, wants:
    AlgebraicSimplifier rewrites transpose(dot(a, b)) as dot(b, a)
    (AlgebraicSimplifierVisitor::HandleTranspose, xla/hlo/transforms/simplifiers/
    algebraic_simplifier.cc) and GPU layout assignment (GpuLayoutAssignment,
    xla/service/gpu/transforms/layout_assignment.cc) makes a transpose left after a dot a
    bitcast of the dot's result. JAX writes a weight gradient as transpose(dot_general(dy,
    x)); XLA's H100 HLO of the llama3-100m step has no transpose kernel for one (every
    wrapped_transpose there moves an activation). Such a transpose is formed as a bitcast
    (free, fused into its readers; the dot writes its bytes). Returns the number folded."""
    folded = 0
    for t, nd in enumerate(nodes):
        if nd.name != "stablehlo.transpose" or nd.dead or not operand_nodes[t]:
            continue
        d = operand_nodes[t][0]
        if d is None or nodes[d].cls != GEMM or nodes[d].dead or external_use[d] or users[d] != [t]:
            continue
        nd.cls = FREE
        nd.passthrough = True
        g.computes[t] = False
        g.no_mof[t] = False
        g.minor_transpose[t] = False
        folded += 1
    return folded


def _dot_merger(nodes, g: _Groups, operand_nodes, types_of) -> None:
    """XLA GPU's DotMerger, which runs before fusion: dots that read the same operand (in
    the same position) with the same dimension numbers, precision and element types,
    neither depending on the other, one of them moving at most DOT_MERGER_MAX_BYTES,
    become one dot over the concatenation of their other operands (a concatenate kernel
    of its own) whose result the old users read as slices (e.g. a layer's q, k and v
    projections: one GEMM). As XLA's, the pairs of each class (one shared operand) are
    tried in program order, a merged dot grows by further dots of its class and takes
    part in no other class. Each merge is a union of the dots' groups, marked in
    g.dot_merged with the shared position; merged groups take no epilogue (their size
    > 1 already makes them no producer)."""
    dots = [j for j, nd in enumerate(nodes) if nd.name == "stablehlo.dot_general" and nd.cost is not None and not nd.dead]
    if len(dots) < 2:
        return
    # dots by the value they read in one position (a node, or a value from outside)
    by_operand: dict = {}
    for j in dots:
        srcs = operand_nodes[j]
        if len(srcs) != 2:
            continue
        for pos in (0, 1):
            key = srcs[pos]
            if key is None:
                vals = nodes[j].operands
                key = vals[pos] if vals is not None else nodes[j].op.operands[pos]
            by_operand.setdefault((pos, key), []).append(j)
    sigs: dict = {}  # dot -> (signature, bytes of its operands and result)

    def sig_of(j):
        f = sigs.get(j)
        if f is None:
            ins, outs = types_of[j]
            attrs = nodes[j].op.attributes
            a, b, r = type_info(ins[0]), type_info(ins[1]), type_info(outs[0])
            sig = (
                attrs["dot_dimension_numbers"] if "dot_dimension_numbers" in attrs else None,
                attrs["precision_config"] if "precision_config" in attrs else None,
                attrs["algorithm"] if "algorithm" in attrs else None,
                a.dtype,
                b.dtype,
                r.dtype,
            )
            f = sigs[j] = (sig, a.nbytes + b.nbytes + r.nbytes)
        return f

    # (position, shared operand, signature) -> its dots in program order; only dots of
    # one signature can merge, so the classes are split by it up front
    classes: dict = {}
    for (pos, key), js in by_operand.items():
        if len(js) > 1:
            for j in js:
                classes.setdefault((pos, key, sig_of(j)[0]), []).append(j)
    classes = {k: v for k, v in classes.items() if len(v) > 1 and any(sigs[x][1] <= DOT_MERGER_MAX_BYTES for x in v)}
    if not classes:
        return
    # the dots each candidate depends on: one sweep in program order with a bit per dot
    cand = sorted({j for v in classes.values() for j in v})
    bit = {j: 1 << k for k, j in enumerate(cand)}
    lo, hi = cand[0], cand[-1]
    # reach[i - lo]: the candidates node i depends on, or is (its own bit)
    reach = [0] * (hi - lo + 1)
    for j, b in bit.items():
        reach[j - lo] = b
    for i in range(lo + 1, hi + 1):
        r = 0
        for p in operand_nodes[i]:
            if p is not None and p >= lo:
                r |= reach[p - lo]
        if r:
            reach[i - lo] |= r
    # group mask -> the dots it depends on (transitively), itself left out
    anc = {b: reach[j - lo] & ~b for j, b in bit.items()}
    group_of = {j: bit[j] for j in cand}  # dot -> its group's mask
    merged: dict = {}  # group mask -> (dots, shared position)
    taken: set = set()
    for (pos, _key, _sig), members in classes.items():
        members = [j for j in members if j not in taken]
        if all(anc[bit[b]] & bit[a] for a, b in zip(members, members[1:])):
            continue  # a chain (each dot needs the one before): no two are independent
        i = 0
        while i < len(members):
            a = members[i]
            ma = group_of[a]
            group = [a]
            size_a = sigs[a][1]
            j = i + 1
            while j < len(members):
                b = members[j]
                mb = group_of[b]
                if (size_a <= DOT_MERGER_MAX_BYTES or sigs[b][1] <= DOT_MERGER_MAX_BYTES) and not (
                    anc[ma] & mb or anc[mb] & ma
                ):
                    m = ma | mb
                    a_m = anc.pop(ma) | anc.pop(mb)
                    anc[m] = a_m
                    for x in group + [b]:
                        group_of[x] = m
                    # whatever depended on either side now depends on all the merged dot does
                    for other, oa in anc.items():
                        if oa & m and other != m:
                            anc[other] = oa | a_m
                    group.append(b)
                    ma = m
                    taken.update((a, b))
                    del members[j]
                    size_a = _merged_size(group, types_of, pos)
                    continue
                j += 1
            if len(group) > 1:
                merged[ma] = (sorted(group), pos)
            i += 1
    for group, pos in merged.values():
        keep = group[-1]
        for x in group[:-1]:
            g.merge_into(keep, x, "gemm")
        g.kind[keep] = "gemm"
        g.dot_merged[keep] = pos


def _merged_size(group, types_of, pos: int) -> int:
    """Bytes of a merged dot: the shared operand once, the other operands and the
    results of every merged dot."""
    ins0, _ = types_of[group[0]]
    total = type_info(ins0[pos]).nbytes
    for j in group:
        ins, outs = types_of[j]
        total += type_info(ins[1 - pos]).nbytes + type_info(outs[0]).nbytes
    return total


def _merged_dot_kernel(k: Kernel, nodes, gemm_nodes, shared: int) -> None:
    """A kernel of dots merged by DotMerger: one GEMM whose free dimension on the side
    that is not shared is the sum of theirs, after a concatenate kernel (one launch
    more) that writes the concatenation of their other operands, which the GEMM then
    reads (the kernel's external bytes count those operands, or the inputs of their
    fused producers, once)."""
    shapes = [_gemm_shape(nodes[i]) for i in gemm_nodes]
    if any(sh is None for sh in shapes):
        return
    first = shapes[0]
    if shared == 0:  # the lhs is shared: the rhs are concatenated, N grows
        k.gemm = GemmShape(first.m, sum(sh.n for sh in shapes), first.k, first.batch, first.dtype)
    else:
        k.gemm = GemmShape(sum(sh.m for sh in shapes), first.n, first.k, first.batch, first.dtype)
    concat = sum(_nbytes(nodes[i].op.operands[1 - shared]) for i in gemm_nodes)
    k.launches += 1
    k.bytes_written += concat  # the concatenate writes it
    k.bytes_read += concat  # the GEMM reads it
    k.attrs["merged_dots"] = len(gemm_nodes)


def _conv_padding_legalization(nd: Node):
    """XLA GPU's ConvPaddingLegalization (xla/service/gpu/transforms/
    conv_padding_legalization.cc): cuDNN takes symmetric, non-negative padding only.
    - A forward convolution with asymmetric padding gets its input padded by a kernel
      of its own (all of the padding moves to it);
    - a filter gradient (window dilation, as JAX writes it): the rewriter first moves
      its high padding to the low one when the result is the same (GpuConvRewriter's
      MatchBackwardFilter: any high padding from the minimum to the minimum + stride - 1
      gives the same windows); what stays asymmetric gets the input padded by the
      difference;
    - an input gradient (base dilation) with asymmetric padding computes an output
      larger by the difference, sliced afterwards (the slice fuses into its consumer).
    Returns (key, input bytes, padded input bytes, extra output bytes) or None; key
    names the input value and its padding, so that identical pads (XLA's CSE: the
    forward convolution and its filter gradient pad the same activation alike) count
    once."""
    op = nd.op
    try:
        from ..rules import _i64_list

        pad_attr = op.attributes["padding"] if "padding" in op.attributes else None
        pads = [int(x) for x in pad_attr] if pad_attr is not None else []
        lhs_dil = _i64_list(op, "lhs_dilation") or []
        rhs_dil = _i64_list(op, "rhs_dilation") or []
        from jaxlib.mlir.dialects import stablehlo as shlo

        dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
        lhs = type_info(_operand_type(nd, 0))
        out = type_info(_result_type(nd, 0))
        spatial = list(dn.input_spatial_dimensions)
        out_spatial = list(dn.output_spatial_dimensions)
    except Exception:
        return None
    if len(pads) != 2 * len(spatial) or not spatial or not lhs.is_tensor or not out.is_tensor:
        return None
    if any(d < 0 for d in lhs.shape) or any(d < 0 for d in out.shape):
        return None  # dynamic shapes: no static pad size
    lo_hi = [(pads[2 * d], pads[2 * d + 1]) for d in range(len(spatial))]
    if all(lo == hi for lo, hi in lo_hi) and all(lo >= 0 for lo, _ in lo_hi):
        return None  # canonical: cuDNN pads inside
    base_dilated = any(x != 1 for x in lhs_dil)
    window_dilated = any(x != 1 for x in rhs_dil)
    if base_dilated:  # input gradient: a larger output, then a slice
        if any(lo < 0 or hi < 0 for lo, hi in lo_hi):
            return None
        grow = 1.0
        for d, (lo, hi) in enumerate(lo_hi):
            size = out.shape[out_spatial[d]]
            grow *= (size + abs(lo - hi)) / max(1, size)
        return None if grow == 1.0 else (None, 0, 0, int(out.nbytes * (grow - 1)))
    if window_dilated:  # filter gradient (GpuConvRewriter's MatchBackwardFilter)
        if any(lo < 0 for lo, _ in lo_hi):
            return None  # not matched as a backward filter convolution
        try:
            rhs = type_info(_operand_type(nd, 1))
            kernel_spatial = list(dn.kernel_spatial_dimensions)
        except Exception:
            return None
        moved = []
        for d, (lo, _hi) in enumerate(lo_hi):
            # any high padding from min_high to min_high + stride - 1 gives the same
            # result; the rewriter takes the low padding when it is in that range
            stride = rhs_dil[d] if d < len(rhs_dil) else 1
            padded_size = out.shape[out_spatial[d]] + (rhs.shape[kernel_spatial[d]] - 1) * stride
            min_high = padded_size - lhs.shape[spatial[d]] - lo
            hi = lo if min_high <= lo <= min_high + stride - 1 else (min_high if lo < min_high else min_high + stride - 1)
            if hi < 0:
                return None
            moved.append((lo - min(lo, hi), hi - min(lo, hi)))  # the legalization pads the difference
    else:  # forward: every positive padding moves into the pad
        moved = [(max(lo, 0), max(hi, 0)) for lo, hi in lo_hi]
    elems = lhs.num_elements
    padded = elems
    for d, (lo, hi) in enumerate(moved):
        size = lhs.shape[spatial[d]]
        padded = padded * (size + lo + hi) // max(1, size)
    if padded == elems:
        return None
    per = lhs.nbytes // max(1, elems)
    key = (op.operands[0], tuple(moved))
    return key, lhs.nbytes, padded * per, 0


def _operand_facts(nodes, operand_nodes, g, i: int) -> list:
    """(value key, producer node or None, bytes) of each operand of node i (cached on g):
    key: the producer node (or (node, result number) for a multi-result op), or the
    value itself for one defined outside the block."""
    facts = g.opfacts.get(i)
    if facts is None:
        facts = []
        srcs = operand_nodes[i]
        for pos, v in enumerate(nodes[i].op.operands):
            src = srcs[pos]
            if src is not None:
                key = src if len(nodes[src].op.results) == 1 else (src, _result_number(v))
            else:
                key = v
            facts.append((key, src, _nbytes(v)))
        g.opfacts[i] = facts
    return facts


def _result_bytes(nodes, g, i: int) -> int:
    b = g.resbytes.get(i)
    if b is None:
        b = g.resbytes[i] = sum(_nbytes(r) for r in nodes[i].op.results)
    return b


def _external_bytes(nodes, idx, inside, inside_all, operand_nodes, users, external_use, g) -> tuple[int, int]:
    """Bytes of the values read from outside the kernel (each once; only the sliced part
    when every use slices it) and of the results used outside it."""
    full_size: dict = {}
    partial: dict = {}
    needs_full: set = set()
    inline = g.inline
    for i in inside_all:
        name = nodes[i].name
        slicing = name in _SLICING_OPS
        for pos, (key, src, b) in enumerate(_operand_facts(nodes, operand_nodes, g, i)):
            if src is not None and (src in inside_all or src in inline):
                continue  # computed inside, or an inline constant
            if pos == 0 and name == "stablehlo.dynamic_update_slice":
                continue  # updated in place: the buffer is neither read nor rewritten whole
            if key not in full_size:
                full_size[key] = b
                partial[key] = 0
            if pos == 0 and slicing:
                partial[key] += _result_bytes(nodes, g, i)
            else:
                needs_full.add(key)
    read = sum(full if key in needs_full else min(full, partial[key]) for key, full in full_size.items())
    written = 0
    for i in idx:
        nd = nodes[i]
        outside = external_use[i] or not inside.issuperset(users[i])
        if not outside:
            continue
        if nd.name == "stablehlo.dynamic_update_slice":
            written += type_info(_operand_type(nd, 1)).nbytes
        else:
            written += _result_bytes(nodes, g, i)
    return read, written


_SLICING_OPS = frozenset({"stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.gather", "stablehlo.real_dynamic_slice"})


def _result_number(v) -> int:
    try:
        return v.result_number
    except AttributeError:
        return 0


def _gemm_shape(nd: Node) -> GemmShape | None:
    """M x N x K (and batch) of a dot or of a convolution as an implicit GEMM:
    M = batch x output spatial, N = output features, K = flops / (2 M N). A cuBLAS/cuDNN
    call: the shape its rule worked out (`extra["gemm_shape"]`, rules.cublas_gemm_rule /
    cudnn_conv_rule); a given fusion: the shape of the one dot or convolution it holds."""
    op, c = nd.op, nd.cost
    if nd.cls == OPAQUE:
        if c is not None and "gemm_shape" in c.extra:
            return GemmShape(*c.extra["gemm_shape"])
        given = op if nd.name == "mhlo.fusion" else callee_of(op) if nd.name == "func.call" else None
        inner = _given_gemm_op(given) if given is not None else None
        if inner is None:
            return None
        from ..rules import rule_for

        try:  # the dot/convolution rules need no environment
            cost = rule_for(inner.name)(inner, None)
        except Exception:  # unsupported (a dynamic shape ...): no shape
            return None
        return _gemm_shape(Node(inner, inner.name, cost, op_class(inner.name)))
    try:
        out = type_info(_result_type(nd, 0))
        if nd.cls == CONV:
            from jaxlib.mlir.dialects import stablehlo as shlo

            from ..rules import _int_attr

            dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            n_ = out.shape[dn.output_feature_dimension]
            m = out.num_elements // max(1, n_)
            k = max(1, c.flops // max(1, 2 * m * n_))
            cpt = kind = channels = None
            act_bytes = 0
            if _int_attr(op, "feature_group_count", 1) == 1 and _int_attr(op, "batch_group_count", 1) == 1:
                lhs = type_info(_operand_type(nd, 0))
                cpt = lhs.shape[dn.input_feature_dimension]
                kind = _conv_kind(op, dn, lhs, type_info(_operand_type(nd, 1)), out)
                if kind == "forward":
                    channels = cpt
                elif kind == "backward_filter":
                    # cuDNN's K runs over images x output pixels, not filter taps x
                    # channels: no per-tap channel tiles
                    channels, cpt = lhs.shape[dn.input_batch_dimension], None
                act_bytes = lhs.nbytes
            return GemmShape(m, n_, k, 1, c.dtype, cpt, kind, channels, act_bytes)
        from jaxlib.mlir.dialects import stablehlo as shlo

        if nd.name == "stablehlo.dot_general":
            dn = shlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
            lhs = type_info(_operand_type(nd, 0))
            rhs = type_info(_operand_type(nd, 1))
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


def _conv_kind(op, dn, lhs, rhs, out) -> str:
    """What XLA GPU's conv rewriter (conv_rewriter.cc) makes of an ungrouped
    convolution, in its order: "backward_filter" when MatchBackwardFilter takes it (not
    LooksLikeForwardConvolution: batch and feature counts carried through with no filter
    extent above the output's; stride 1, no input dilation, and a filter dilation or no
    filter extent within the output's: the output is the filter, the 'filter' the output
    gradient); "backward_input" when MatchBackwardInput takes it (stride 1, no filter
    dilation, and a filter reversed in every spatial dimension, or an input dilation
    with a 1x1 or constant filter); else "forward" (CanImplementAsGpuForwardConv)."""
    from ..rules import _i64_list

    nsp = len(dn.output_spatial_dimensions)
    kernel = [rhs.shape[d] for d in dn.kernel_spatial_dimensions]
    outsp = [out.shape[d] for d in dn.output_spatial_dimensions]
    strides = _i64_list(op, "window_strides") or [1] * nsp
    lhs_dil = _i64_list(op, "lhs_dilation") or [1] * nsp
    rhs_dil = _i64_list(op, "rhs_dilation") or [1] * nsp
    unit_strides = all(s_ == 1 for s_ in strides)
    looks_forward = (
        lhs.shape[dn.input_batch_dimension] == out.shape[dn.output_batch_dimension]
        and rhs.shape[dn.kernel_output_feature_dimension] == out.shape[dn.output_feature_dimension]
        and all(kd <= od for kd, od in zip(kernel, outsp))
    )
    if not looks_forward and unit_strides and all(d == 1 for d in lhs_dil):
        small = sum(1 for kd, od in zip(kernel, outsp) if kd <= od)
        if small == 0 or any(d != 1 for d in rhs_dil):
            return "backward_filter"
    if unit_strides and all(d == 1 for d in rhs_dil):
        from ..ir import defining_op

        producer = defining_op(op.operands[1])
        name = producer.name if producer is not None else ""
        reversed_filter = False
        if name == "stablehlo.reverse":
            # a reverse of 1x1 taps is a no-op, which XLA's AlgebraicSimplifier removes
            # before the conv rewriter: a 1x1 stride-1 input gradient is a forward conv
            reversed_filter = (sorted(_i64_list(producer, "dimensions") or []) == sorted(dn.kernel_spatial_dimensions)
                               and any(kd != 1 for kd in kernel))
        base_dilated = any(d != 1 for d in lhs_dil)
        if reversed_filter or (base_dilated and (name == "stablehlo.constant" or all(kd == 1 for kd in kernel))):
            return "backward_input"
    return "forward"


def _pad_of_select_and_scatter(nodes, operand_nodes, s: int, p: int) -> bool:
    """Is node p a pad whose result is node s's select_and_scatter operand (and read by
    nothing else)?"""
    return (
        nodes[s].name == "stablehlo.select_and_scatter"
        and nodes[p].name == "stablehlo.pad"
        and bool(operand_nodes[s])
        and operand_nodes[s][0] == p
        and all(q != p for q in operand_nodes[s][1:])
    )


def _zero_splat(nd: Node) -> bool:
    """A stablehlo.constant whose every element is zero."""
    if nd.name != "stablehlo.constant":
        return False
    try:
        from ..ir import ir

        attr = ir.DenseElementsAttr(nd.op.attributes["value"])
        if not attr.is_splat:
            return False
        v = attr.get_splat_value()
        return float(v.value if isinstance(v, (ir.FloatAttr, ir.IntegerAttr)) else ir.FloatAttr(v).value) == 0.0
    except Exception:
        return False


def _init_shared_with_a_broadcast(nodes, operand_nodes, users, s: int, want) -> bool:
    """Does the block broadcast the init value of select_and_scatter node s (a zero) to
    `want` (the type its expansion fills) elsewhere, for ops that read it? XLA's CSE
    then merges the expansion's filled operand with that broadcast."""
    ops = operand_nodes[s] or []
    if len(ops) < 3 or ops[2] is None or not _zero_splat(nodes[ops[2]]):
        return False
    for b, nd in enumerate(nodes):
        if (nd.name == "stablehlo.broadcast_in_dim" and not nd.dead and users[b] and operand_nodes[b]
                and operand_nodes[b][0] is not None and _zero_splat(nodes[operand_nodes[b][0]])
                and _result_type(nd, 0) == want):
            return True
    return False


def _select_and_scatter_expanded(nd: Node, selected_from=None):
    """XLA GPU rewrites select_and_scatter (SelectAndScatterExpander, gpu_compiler.cc:
    "Rewrite select-and-scatter as a scatter and a reduce-window") into four kernels:
    the operand-shaped output filled with the init value; a variadic reduce_window that
    reads the operand and writes, per source element, the selected value and its index
    in every dimension (i32); the indices packed into one [source elements, rank] array;
    a scatter that reads those and the source and updates the selected elements in place.
    `selected_from`: the type the reduce_window reads when a pad of the operand is fused
    into it (the pad's own operand). Returns (bytes_read, bytes_written, launches), or
    None for other ops."""
    if nd.name != "stablehlo.select_and_scatter":
        return None
    try:
        operand = type_info(_operand_type(nd, 0))
        source = type_info(_operand_type(nd, 1))
    except Exception:
        return None
    n, rank, eo = source.num_elements, max(1, operand.rank), max(1, operand.elem_bytes)
    index_bytes = 4 * rank * n  # one i32 per dimension and source element
    read = written = 0
    written += operand.nbytes  # 1: init
    read += (selected_from or operand).nbytes  # 2: select (reduce_window with indices)
    written += n * eo + index_bytes
    read += index_bytes  # 3: pack the indices
    written += index_bytes
    read += index_bytes + source.nbytes + n * eo  # 4: scatter, in place
    written += n * eo
    return read, written, 4


def _reduction_shared_memory(nd: Node) -> int:
    """Bytes of shared memory XLA GPU's reduction emitter gives this reduce in a kernel
    (gpu_fusible.cc SharedMemoryUsageNoCache): 32 elements for a row reduction (the
    minor dimension reduced), 4 x 32 x 33 for a column reduction (minor dimensions
    kept), per output; 0 when XLA emits it elementwise, not as an unnested reduction
    (IsReductionFromOrToContiguousDimensions: neither the kept nor the reduced dimensions
    consecutive, or IsUnnestedReductionFasterThanElemental false)."""
    key = _reduce_key(nd)
    if key is None:
        return 0
    shape, dims = key
    esize = type_info(_operand_type(nd, 0)).elem_bytes
    if not dims or not shape or esize <= 0:
        return 0
    kind = _reduction_kind(shape, dims)
    if kind is None:
        return 0  # neither the kept nor the reduced dimensions consecutive: elemental
    row, (_depth, height, width) = kind
    if height <= 0 or width <= 0:
        return 0  # an empty tensor: nothing to reduce
    if row:  # IsUnnestedReductionFasterThanElemental, rows: the minor reduced extent
        if not (width >= WARP_SIZE or WARP_SIZE % width == 0):
            return 0
    elif (
        height < WARP_SIZE
        or (height < 2 * WARP_SIZE and width < WARP_SIZE)
        or (height < 4 * WARP_SIZE and width < 8)
        or (height < 8 * WARP_SIZE and width < 3)
    ):
        return 0  # a small column reduction: the elemental emitter
    outputs = max(1, len(nd.results) if nd.results is not None else len(nd.op.results))
    per_output = WARP_SIZE if row else 4 * WARP_SIZE * 33
    return per_output * esize * outputs


def _reduction_kind(shape: list, dims: list) -> tuple | None:
    """XLA GPU's GetReductionKindAndContiguousComponents (row-major layouts): (is a row
    reduction, (depth, height, width)): rows reduce [D, H, W] -> [H] (W the minor reduced
    extent), columns [D, H, W] -> [D, W] (H reduced); None when neither the kept nor the
    reduced dimensions are consecutive."""
    rank = len(shape)
    kept = [d for d in range(rank) if d not in dims]
    if not kept:
        return True, (1, 1, math.prod(shape))

    def consecutive(ds):
        return ds[-1] - ds[0] == len(ds) - 1

    if consecutive(kept):
        a = math.prod(shape[: kept[0]])
        b = math.prod(shape[kept[0] : kept[-1] + 1])
        c = math.prod(shape[kept[-1] + 1 :])
        if b == 1:
            return True, (1, 1, a * c)
        if c == 1:
            return False, (1, a, b)
        return True, (a, b, c)
    if consecutive(dims):
        a = math.prod(shape[: dims[0]])
        b = math.prod(shape[dims[0] : dims[-1] + 1])
        c = math.prod(shape[dims[-1] + 1 :])
        if c == 1:
            return True, (1, a, b)
        return False, (a, b, c)
    return None


def _tree_split_bytes(nd: Node) -> int:
    """Bytes of the partial results when XLA GPU splits this reduction in two kernels
    (TreeReductionRewriter, for reductions from or to contiguous dimensions: the row or
    column reduction of _reduction_kind), else 0."""
    key = _reduce_key(nd)
    if key is None:
        return 0
    shape, dims = key
    try:
        out = type_info(_result_type(nd, 0))
    except Exception:
        return 0
    if not dims or not shape:
        return 0
    kind = _reduction_kind(shape, dims)
    if kind is None:
        return 0
    row, (major, _kept, minor) = kind
    if row:  # [D, H, W] -> [H]: W the minor reduced extent, D the batched one
        reduced = minor
        if reduced <= ROW_REDUCTION_BOUND and major <= BATCHED_REDUCTION_BOUND:
            return 0
        if reduced > ROW_REDUCTION_BOUND:
            k2 = min(int(math.isqrt(reduced)), ROW_REDUCTION_BOUND)
            partial_elems = out.num_elements * math.ceil(reduced / k2) * max(1, major)
        else:
            partial_elems = out.num_elements * major
    else:  # column: [D, H, W] -> [D, W], H reduced
        reduced = kind[1][1]
        if reduced <= COLUMN_REDUCTION_BOUND:
            return 0
        k2 = min(int(math.isqrt(reduced)), COLUMN_REDUCTION_BOUND)
        partial_elems = out.num_elements * math.ceil(reduced / k2)
    return partial_elems * max(1, out.elem_bytes)


_ = MATRIX  # re-exported unit name used by backends
