"""`fusion=iree`: IREE's own dispatch regions as our kernels.

The module (calls inlined first: IREE inlines before it forms dispatches) is compiled
by IREE up to the end of its `dispatch-creation` phase for the llvm-cpu target; every
dispatch region and transfer of IREE's program is read with the ops of ours it holds
(`dispatches.read_program`). For each block the cost engine forms, `form(nodes)` turns
those into `costmodel.kernels.Kernel` objects, so that every kernel-level backend costs
one IREE dispatch as one kernel:

- an op is a MEMBER of one region that holds its location: one where an op computing
  (not a load, store or init) carries it, rooted at it (the region op's own location)
  first, dispatches before transfers; the other regions that hold it list it as
  duplicated (IREE clones cheap producers into each consumer);
- a region with no member of its own (IREE split one op in several dispatches:
  a transposed operand, a split reduction, a concatenate as two updates) is one more
  launch of the kernel of its root op; its bytes are added there; one that holds only a
  region op of ours (the predicate of a case that IREE turned into a select) is one more
  launch of the nearest kernel of the block; one that carries only the function's own
  location (IREE built its op anew: two transposes composed into one) is the kernel of
  the block's tensor ops IREE left without a trace;
- a kernel's flops are its members' (each op's work counts once); its bytes are what
  IREE's dispatches load and store (`dispatch.tensor.load/store`), or what its
  transfers copy; `launches` is its number of IREE regions;
- kind: conv, gemm, custom (sort, scatter, fft, custom_call ...), input (a
  reduction) or loop by the member ops; `copy` for a kernel made of transfers only.

Ops IREE leaves without a trace in any region (folded into indexing maps:
broadcast, transpose, reshape; into a consumer's body: constants) join the kernel of
their consumers, as XLA's producer fusion would: a member of the first consumer kernel,
duplicated in the others. What is left is counted by placement in the summary
(`iree_placement`): `host` (scalar work IREE runs in host code: loop counters; an
untraced op of scalars only counts here too, as IREE folds such ops into its host
control flow), `hoisted` (computed once at load time by IREE's constant evaluation),
`dead` (results
unused: IREE drops them), `merged` (a twin of another op: IREE's CSE computes it once),
`free` (constants, reshapes ... that are no kernel anyway),
`cross_block` (in a region formed in another block, e.g. hoisted out of a loop),
`folded` (none of these: IREE simplified it away, as -(-x) = x; no kernel, a remark).
An IREE region run by no kernel of ours is counted (`iree_regions_without_kernel`) and
warned about. Collectives are not kernels (their
communication is extract-collectives'); they keep their per-op estimate.
"""

from __future__ import annotations

import ctypes
from collections import Counter

from ..kernels.formation import (
    BOUNDARY,
    COLLECTIVE,
    CONV,
    FREE,
    GEMM,
    MOVEMENT,
    OPAQUE,
    REDUCE,
    TERMINATORS,
    Kernel,
    _gemm_shape,
    _nbytes,
)
from ..rules import REGION_OPS
from .compiler import DEFAULT_FLAGS, _api, compile_prepared, prepare
from .dispatches import read_program

__all__ = ["IreeFormation", "op_key", "PLACEMENTS"]

PLACEMENTS = (
    "dispatch",
    "transfer",
    "attached",
    "host",
    "hoisted",
    "dead",
    "merged",
    "free",
    "cross_block",
    "folded",
    "collective",
)

_GET_NAME = ctypes.pythonapi.PyCapsule_GetName
_GET_NAME.restype = ctypes.c_char_p
_GET_NAME.argtypes = [ctypes.py_object]
_GET_POINTER = ctypes.pythonapi.PyCapsule_GetPointer
_GET_POINTER.restype = ctypes.c_void_p
_GET_POINTER.argtypes = [ctypes.py_object, ctypes.c_char_p]


def op_key(op) -> int:
    """The address of the MLIR operation behind a Python handle: stable while the op
    lives (an ir.Operation's hash changes with its attributes)."""
    cap = op._CAPIPtr
    return _GET_POINTER(cap, _GET_NAME(cap))


def _structure(module):
    """Pre-order ops of `module` (the order `prepare` numbers them in) with, for each,
    its node (the op itself when it sits in a block the engine forms kernels of,
    else its nearest such ancestor) and that block's key."""
    node: list[int] = []
    block_of: list[tuple] = []
    top: list[int] = []  # the top-level op (function) each op is in

    def visit(op, parent_idx, parent_node, formed_parent):
        for r_no, region in enumerate(op.regions):
            for b_no, block in enumerate(region.blocks):
                for child in block.operations:
                    child = child.operation
                    i = len(node)
                    top.append(top[parent_idx] if parent_idx >= 0 else i)
                    if formed_parent:
                        node.append(i)
                        block_of.append((parent_idx, r_no, b_no))
                    else:
                        node.append(parent_node)
                        block_of.append(block_of[parent_node] if parent_node >= 0 else (parent_idx, r_no, b_no))
                    formed = child.name == "func.func" or child.name in REGION_OPS
                    visit(child, i, node[i], formed)

    visit(module, -1, -1, True)
    return node, block_of, top


def _live_functions(ops, top) -> set[int]:
    """Indices of the functions IREE compiles: public ones and those still called
    (after inlining, unreferenced private functions are dropped by IREE, and they count
    nowhere in our totals either)."""
    from ..ir import ir

    called = set()
    for op in ops:
        for key in ("callee", "decomposition"):
            if key in op.attributes:
                try:
                    called.add(ir.FlatSymbolRefAttr(op.attributes[key]).value)
                except (ValueError, TypeError):
                    pass
    live = set()
    for i, op in enumerate(ops):
        if top[i] != i or op.name != "func.func":
            continue
        vis = ir.StringAttr(op.attributes["sym_visibility"]).value if "sym_visibility" in op.attributes else "public"
        if vis == "public" or ir.StringAttr(op.attributes["sym_name"]).value in called:
            live.add(i)
    return live


class IreeFormation:
    """IREE's dispatch regions of one module, as kernels of the engine's blocks."""

    def __init__(self, module, *, flags=DEFAULT_FLAGS):
        _, iree_ir = _api()
        prepared = prepare(module)
        compiled = compile_prepared(prepared, compile_to="dispatch-creation", flags=flags)
        self.program = read_program(compiled.module, iree_ir)
        self.warnings = compiled.warnings
        del compiled  # IREE's module is read: its context may go
        ops = prepared.ops
        self.index = {op_key(op): i for i, op in enumerate(ops)}
        self.node, self.block_of, self.top = _structure(module)
        assert len(self.node) == len(ops)
        self.live = _live_functions(ops, self.top)
        self.ops = ops
        self.by_name: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            self.by_name.setdefault(op.name, []).append(i)
        self.placement: Counter = Counter()
        self.used_regions: set = set()  # ordinals of the regions some kernel runs
        self.folded_ops: list = []  # the ops counted as `folded`
        # per node: the (non-hoisted) regions holding it, in program order
        self.regions_of: dict[int, list] = {}
        self.root_regions: dict[int, list] = {}
        self.computed: dict[int, set] = {}  # region ordinal -> nodes it computes
        self.hoisted_nodes: set = set()
        for r in self.program.regions:
            nodes = {self.node[i] for i in r.traced if i < len(ops)}
            if r.hoisted:
                self.hoisted_nodes |= nodes
                continue
            for n in sorted(nodes):
                self.regions_of.setdefault(n, []).append(r)
            for n in sorted({self.node[i] for i in r.root if i < len(ops)}):
                self.root_regions.setdefault(n, []).append(r)
            self.computed[r.ordinal] = {self.node[i] for i in r.computed if i < len(ops)}
        self.host_nodes = {self.node[i] for i in self.program.host if i < len(ops)}
        # the block each region's kernel belongs to: that of its root op, else of the
        # last op it computes, else of the last op it holds; ops of ours that are region
        # ops (a case IREE turned into a select, a loop it unrolled) come last, as they
        # are no kernel of the block they sit in
        self.home: dict[int, tuple] = {}
        # regions whose root carries the function's own location (IREE built their op
        # anew, e.g. one transpose composed of two, and gave it the function's location):
        # their kernel is made of the function's ops that IREE left without a trace (form())
        self.function_level: set = set()
        for r in self.program.regions:
            if r.hoisted:
                continue

            def nodes(indices):
                found = sorted({self.node[i] for i in indices if i < len(ops)})
                return [n for n in found if ops[n].name not in REGION_OPS], found

            roots, roots_all = nodes(r.root)
            computed, _ = nodes(r.computed)
            held, held_all = nodes(r.traced)
            choice = roots[:1] or computed[-1:] or held[-1:] or roots_all[:1] or held_all[-1:]
            if choice and ops[choice[0]].name == "func.func":
                # the function's body: the block whose ops the region computes
                self.home[r.ordinal] = (choice[-1], 0, 0)
                self.function_level.add(r.ordinal)
            elif choice:
                self.home[r.ordinal] = self.block_of[choice[0]]

    # -- the engine's hook ------------------------------------------------------------
    def form(self, nodes) -> list[Kernel]:
        """Kernels of one block (the engine's `Node`s), in program order of their roots."""
        n = len(nodes)
        keys = [op_key(nd.op) for nd in nodes]
        gidx = [self.index.get(k) for k in keys]
        local = {g: j for j, g in enumerate(gidx) if g is not None}
        by_key = {k: j for j, k in enumerate(keys)}
        candidate = [
            nd.cost is not None and nd.cls not in (BOUNDARY, COLLECTIVE) and nd.name not in TERMINATORS for nd in nodes
        ]
        known = [g for g in gidx if g is not None]
        if not known or self.top[known[0]] not in self.live:
            return []  # a function IREE does not compile (unreferenced, private)
        block = self.block_of[known[0]]
        self.placement["collective"] += sum(1 for nd in nodes if nd.cls == COLLECTIVE)

        # 1. traced ops: their primary region (home in this block)
        primary: list = [None] * n
        traced = [False] * n
        for j in range(n):
            g = gidx[j]
            if not candidate[j] or g is None:
                continue
            regs = self.regions_of.get(g, [])
            if regs:
                traced[j] = True
            regs = [r for r in regs if self.home.get(r.ordinal) == block]
            if not regs:
                continue
            rooted = [r for r in self.root_regions.get(g, []) if self.home.get(r.ordinal) == block]
            computing = [r for r in regs if g in self.computed[r.ordinal]]
            # where the op computes (not only where its location marks the loads and
            # stores of a helper: the padding of a convolution's input), rooted at it
            # first, dispatches before transfers
            rooted_at = {r.ordinal for r in rooted}
            choice = (
                [r for r in computing if r.ordinal in rooted_at and r.kind == "dispatch"]
                or [r for r in computing if r.kind == "dispatch"]
                or [r for r in rooted if r.kind == "dispatch"]
                or [r for r in regs if r.kind == "dispatch"]
                or rooted
                or regs
            )
            primary[j] = choice[0]

        # group members by primary region
        group_of_region: dict[int, int] = {}
        groups: list[dict] = []
        for j in range(n):
            r = primary[j]
            if r is None:
                continue
            gid = group_of_region.get(r.ordinal)
            if gid is None:
                gid = len(groups)
                group_of_region[r.ordinal] = gid
                groups.append({"members": [], "regions": [r], "dups": []})
            groups[gid]["members"].append(j)

        # 2. regions of this block with no member of their own: one more launch of the
        # kernel of their root op (else of the first op they hold that has a kernel, else
        # of another region with the same root: IREE turns a case's branch selection into
        # a dispatch of the predicate and one of the select, both located at the case)
        pending = []
        anonymous: list[int] = []  # groups of function-level regions (no op of ours traced)
        seen_regions = set()
        for j in range(n):
            g = gidx[j]
            if g is None:
                continue
            for r in self.regions_of.get(g, []):
                if r.ordinal in seen_regions or self.home.get(r.ordinal) != block:
                    continue
                seen_regions.add(r.ordinal)
                if r.ordinal not in group_of_region:
                    pending.append(r)
        for r in self.program.regions:  # no op of this block carries them
            if r.ordinal in self.function_level and r.ordinal not in seen_regions and self.home.get(r.ordinal) == block:
                seen_regions.add(r.ordinal)
                pending.append(r)
        for r in sorted(pending, key=lambda r: r.ordinal):
            target = None
            if r.ordinal in self.function_level:
                # a region of the function's own location (the ops of ours it traces
                # besides are only read by it): its members are found below (step 3b),
                # from the ops IREE left without a trace
                target = len(groups)
                groups.append({"members": [], "regions": [], "dups": []})
                anonymous.append(target)
                group_of_region[r.ordinal] = target
                groups[target]["regions"].append(r)
                continue
            order = sorted({self.node[i] for i in r.root}) + sorted({self.node[i] for i in r.traced})
            for gi in order:
                k = local.get(gi)
                if k is not None and primary[k] is not None:
                    target = group_of_region[primary[k].ordinal]
                    break
            if target is None:
                for other in self.program.regions:
                    if other.root == r.root and other.ordinal in group_of_region:
                        target = group_of_region[other.ordinal]
                        break
            here = [local[gi] for gi in order if gi in local]
            if target is None and groups and here and all(nodes[k].cls == BOUNDARY for k in here):
                # it holds only a region op of ours (the predicate of a case IREE turned
                # into a select): one more launch of the nearest kernel of the block, the
                # last before that op, else the first after it
                at = min(here)
                if at is not None:
                    # (a function-level region's group has no members yet: step 3b)
                    before = [gid for gid, grp in enumerate(groups) if grp["members"] and max(grp["members"]) < at]
                    after = [gid for gid, grp in enumerate(groups) if grp["members"] and max(grp["members"]) > at]
                    if before:
                        target = max(before, key=lambda gid: max(groups[gid]["members"]))
                    elif after:
                        target = min(after, key=lambda gid: max(groups[gid]["members"]))
            if target is None:
                continue
            group_of_region[r.ordinal] = target
            groups[target]["regions"].append(r)

        # duplicates: traced ops held by other regions of this block
        for j in range(n):
            if primary[j] is None:
                continue
            home_gid = group_of_region[primary[j].ordinal]
            for r in self.regions_of.get(gidx[j], []):
                gid = group_of_region.get(r.ordinal)
                if gid is not None and gid != home_gid and j not in groups[gid]["dups"]:
                    groups[gid]["dups"].append(j)

        # 3. ops without a trace: into their consumers' kernels (consumers first)
        users = self._users(nodes, by_key)
        kernel_of: list = [group_of_region[primary[j].ordinal] if primary[j] is not None else None for j in range(n)]
        attached = [False] * n
        for j in range(n - 1, -1, -1):
            if not candidate[j] or primary[j] is not None or traced[j]:
                continue
            g = gidx[j]
            if g is not None and (g in self.host_nodes or g in self.hoisted_nodes):
                continue
            kernels = sorted({kernel_of[u] for u in users[j] if kernel_of[u] is not None})
            if not kernels:
                continue
            if nodes[j].cls == FREE and len(kernels) > 1:
                for gid in kernels:  # a bitcast or constant read by several kernels
                    groups[gid]["dups"].append(j)
                continue
            kernel_of[j] = kernels[0]
            attached[j] = True
            groups[kernels[0]]["members"].append(j)
            for gid in kernels[1:]:
                groups[gid]["dups"].append(j)

        # dead code (IREE drops it): ops whose every user is dead, none used elsewhere
        dead = [False] * n
        for j in range(n - 1, -1, -1):
            nd = nodes[j]
            if nd.name in TERMINATORS or nd.cls == BOUNDARY or not len(nd.op.results):
                continue
            # (a value is used in its own block or in regions nested in it: `users` has all)
            dead[j] = all(dead[u] for u in users[j])

        # 3b. a region with only the function's location computes what IREE left without
        # a trace: the tensor ops of the block that no region holds, no consumer's kernel
        # took, that are not dead, free, hoisted or a twin of a placed op (their host-side
        # reshapes may carry their location; scalar work stays on the host)
        for target in anonymous:  # the first takes the untraced ops; the others, the fallback below
            for j in range(n):
                nd = nodes[j]
                if not candidate[j] or primary[j] is not None or attached[j] or traced[j]:
                    continue
                g = gidx[j]
                if nd.cls == FREE or dead[j] or _scalar(nd.op) or (g is not None and g in self.hoisted_nodes):
                    continue
                if self._has_twin(nd.op, g):
                    continue
                primary[j] = groups[target]["regions"][0]
                groups[target]["members"].append(j)
            # members' untraced producers read only by them join too, as in step 3
            for j in range(n - 1, -1, -1):
                if not candidate[j] or primary[j] is not None or attached[j] or traced[j] or nodes[j].cls == FREE:
                    continue
                us = [u for u in users[j] if primary[u] is not None]
                if us and all(group_of_region[primary[u].ordinal] == target for u in us) and not dead[j]:
                    attached[j] = True
                    groups[target]["members"].append(j)
            if not groups[target]["members"]:
                # the untraced ops went to their consumer's kernel (step 3: a composed
                # transpose feeding a concatenate): the region is one more launch of it
                took = [
                    kernel_of[j]
                    for j in range(n)
                    if attached[j] and kernel_of[j] is not None and nodes[j].cls != FREE and not _scalar(nodes[j].op)
                ]
                if not took:
                    # else the value IREE materialized: an op of the block with a kernel
                    # whose result is as large as what the region stores (a transposed
                    # operand a scatter updates in place), a data movement op first
                    stored = sum(r.bytes_written for r in groups[target]["regions"])
                    same = [
                        j
                        for j in range(n)
                        if candidate[j]
                        and kernel_of[j] is not None
                        and nodes[j].cls != FREE
                        and not _scalar(nodes[j].op)
                        and sum(_nbytes(v) for v in nodes[j].op.results) == stored
                    ]
                    same.sort(key=lambda j: (nodes[j].cls != MOVEMENT, j))
                    took = [kernel_of[j] for j in same[:1]]
                if took:
                    for r in groups[target]["regions"]:
                        group_of_region[r.ordinal] = took[0]
                        groups[took[0]]["regions"].append(r)
                    groups[target]["regions"] = []

        # placement counts
        for j, nd in enumerate(nodes):
            if not candidate[j]:
                continue
            g = gidx[j]
            if primary[j] is not None:
                self.placement[primary[j].kind] += 1
            elif attached[j]:
                self.placement["attached"] += 1
            elif traced[j]:
                self.placement["cross_block"] += 1
            elif (g is not None and g in self.host_nodes) or _scalar(nd.op):
                # scalar work: IREE runs it in host code or folds it into control flow
                # (a loop counter's compare and increment become an scf.for)
                self.placement["host"] += 1
            elif g is not None and g in self.hoisted_nodes:
                self.placement["hoisted"] += 1
            elif nd.cls == FREE:
                self.placement["free"] += 1
            elif dead[j]:
                self.placement["dead"] += 1
            elif self._has_twin(nd.op, g):
                # a common subexpression: IREE computes it once, in the twin's kernel
                self.placement["merged"] += 1
            else:  # no trace at all, not dead, no twin: IREE simplified it away (-(-x) = x)
                self.placement["folded"] += 1
                self.folded_ops.append(nd.op)

        kernels = []
        for grp in groups:
            if not grp["members"]:
                continue  # a function-level region no op of ours was found for: lost, warned
            self.used_regions.update(r.ordinal for r in grp["regions"])
            members = sorted(set(grp["members"]))
            dups = sorted(set(grp["dups"]) - set(members))
            kernels.append(self._kernel(nodes, members, dups, grp["regions"]))
        kernels.sort(key=lambda k: k.node_ids[-1])
        return kernels

    def _has_twin(self, op, g) -> bool:
        """Another op of the same function computes the same thing, and IREE placed it:
        IREE's CSE keeps one of the two (also across a case that IREE turned into a
        select)."""
        if g is None:
            return False
        for i in self.by_name.get(op.name, ()):
            if i == g or self.top[i] != self.top[g]:
                continue
            if (i in self.regions_of or i in self.host_nodes) and _same_computation(op, self.ops[i]):
                return True
        return False

    @staticmethod
    def _users(nodes, by_key) -> list[list[int]]:
        """Users of each node's results within the block (ops nested in a user count as it)."""
        users: list[list[int]] = [[] for _ in nodes]
        for j, nd in enumerate(nodes):
            for r in nd.op.results:
                for use in r.uses:
                    owner = use.owner
                    owner = getattr(owner, "operation", owner)
                    k = _block_user(owner, by_key)
                    if k is not None and k != j and k not in users[j]:
                        users[j].append(k)
        return users

    def _kernel(self, nodes, members, dups, regions) -> Kernel:
        ops = [nodes[j].op for j in members]
        k = Kernel(kind=_kind(nodes, members, regions), ops=ops, root=ops[-1], duplicated=[nodes[d].op for d in dups])
        k.node_ids = list(members)
        k.duplicated_ids = list(dups)
        for j in members:
            c = nodes[j].cost
            k.flops += c.flops
            k.transcendentals += c.transcendentals
            work = c.flops + c.transcendentals
            if work:
                key = (c.unit, c.dtype)
                k.flops_by_unit[key] = k.flops_by_unit.get(key, 0) + work
        k.bytes_read = sum(r.bytes_read for r in regions)
        k.bytes_written = sum(r.bytes_written for r in regions)
        k.launches = len(regions)
        for j in members:
            if nodes[j].cls in (GEMM, CONV):
                k.gemm = _gemm_shape(nodes[j])
                break
        k.attrs = {"iree_region": regions[0].name}  # the region of its first member
        return k

    def summary(self) -> dict:
        """What the module summary gains: IREE's region counts and where every op went."""
        return {
            "iree_dispatch_regions": self.program.dispatch_count,
            "iree_transfers": self.program.transfer_count,
            "iree_placement": {p: self.placement.get(p, 0) for p in PLACEMENTS},
            "iree_regions_without_kernel": len(self.regions_without_kernel()),
        }

    def regions_without_kernel(self) -> list:
        """IREE regions (run per call) that no kernel of ours runs: they hold only ops we
        cannot cost (`costmodel.unsupported`: dynamic shapes ...), or only region ops of
        ours in a block without a kernel (docs/kernels.md)."""
        return [r for r in self.program.regions if not r.hoisted and r.ordinal not in self.used_regions]

    def messages(self) -> list[tuple[str, str]]:
        """(severity, text) for the pass: a remark when IREE folded ops away (they cost no
        kernel); a warning when some regions move dynamically shaped tensors (bytes not
        counted) or are run by no kernel of ours (their time is missing from the total)."""
        out = []
        n = self.placement.get("folded", 0)
        if n:
            names = sorted({op.name for op in self.folded_ops})
            out.append(
                (
                    "remark",
                    f"fusion=iree: {n} op(s) ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}) have no "
                    "trace in IREE's program (folded away by its simplifications); costed as no kernel "
                    "(`folded` in iree_placement)",
                )
            )
        dynamic = sum(1 for r in self.program.regions if r.dynamic and r.ordinal in self.used_regions)
        if dynamic:
            out.append(
                (
                    "warning",
                    f"fusion=iree: {dynamic} IREE region(s) of our kernels load or store dynamically shaped "
                    "tensors; their kernel bytes count only the statically shaped ones",
                )
            )
        lost = self.regions_without_kernel()
        if lost:
            names = ", ".join(r.name for r in lost[:5]) + (", ..." if len(lost) > 5 else "")
            out.append(
                (
                    "warning",
                    f"fusion=iree: {len(lost)} IREE region(s) hold none of our costable ops and are not costed "
                    f"({names}; iree_regions_without_kernel in costmodel.summary)",
                )
            )
        return out


def _block_user(owner, by_key):
    """The node of the block that holds `owner` (itself, or an ancestor of it)."""
    op = owner
    while op is not None:
        k = by_key.get(op_key(op))
        if k is not None:
            return k
        parent = op.parent
        if parent is None:
            return None
        op = getattr(parent, "operation", parent)
        if op.name in ("builtin.module", "func.func"):
            return None
    return None


def _same_computation(op, o) -> bool:
    """Same op on the same operands, with the same attributes and result types."""
    if o.name != op.name or len(o.operands) != len(op.operands) or len(o.results) != len(op.results):
        return False
    if [str(r.type) for r in o.results] != [str(r.type) for r in op.results]:
        return False
    return all(a == b for a, b in zip(o.operands, op.operands)) and _attrs(o) == _attrs(op)


def _attrs(op) -> dict:
    """The op's attributes but ours, as text."""
    out = {}
    for named in op.attributes:
        name = getattr(named, "name", named)
        if not name.startswith("costmodel."):
            out[name] = str(op.attributes[name])
    return out


def _scalar(op) -> bool:
    """Every result a rank-0 tensor (or no tensor at all)."""
    from ..shapes import type_info

    for r in op.results:
        info = type_info(r.type)
        if info.is_tensor and info.rank > 0:
            return False
    return bool(len(op.results))


def _kind(nodes, members, regions) -> str:
    if all(r.kind == "transfer" for r in regions):
        return "copy"
    classes = {nodes[j].cls for j in members}
    for cls, kind in ((CONV, "conv"), (GEMM, "gemm"), (OPAQUE, "custom"), (REDUCE, "input")):
        if cls in classes:
            return kind
    return "loop"
