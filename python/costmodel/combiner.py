"""XLA GPU's all-reduce combiner, on StableHLO: independent all-reduces become one.

XLA GPU runs `AllReduceCombiner(xla_gpu_all_reduce_combine_threshold_bytes = 30 MiB,
combine_threshold_count = 256)` after fusion (gpu_compiler.cc, "post-fusion
optimization"): all-reduces that may be combined (the same `GetAllReduceKey`: reduction,
element type, replica groups, channel id present or not, use_global_device_ids) and that
do not depend on each other become one all-reduce of several operands, one NCCL call
instead of many. The data-parallel ResNet-18 step of the paper exports 144 all-reduces;
XLA's module of it has 36: each batch norm's statistics, and every weight gradient in two
buffers under 30 MiB (docs/kernels.md).

The grouping is `CombineInstructionsByKey` (xla/service/collective_combiner_utils.h),
step for step: repeated walks over the computation in XLA's post order (a depth-first
walk from the results, operands first, as `MakeInstructionPostOrder` makes it); a walk
takes the first remaining all-reduce's key, skips all-reduces of other keys, drops one
above the threshold, and adds the next ones of its key until one would pass the byte or
count threshold or depends on one already taken; a group of two or more is combined. The
post order matters: an all-reduce that only the optimizer reads is visited when the walk
reaches its update, after the whole backward pass, so the weight gradients group together
while each batch norm's statistics (needed at once) stay alone.

The combined op is a `stablehlo.all_reduce` of all operands (variadic, one reduction
body), placed after the last member; ops that read an earlier member and stood before it
move after it, in their order (none of them feeds a member: the members are
independent). It carries `costmodel.combined = <members>`. Functions, and the bodies of
while/case/if, are combined separately (XLA: one computation at a time).

XLA combines after fusion, so the pass belongs after annotate-cost (kernels formed on
the program as exported; the combined op's `costmodel.cost` is its members' summed) and
before extract-collectives. Only all-reduces are combined (XLA GPU also combines
all-gathers and reduce-scatters; not modelled yet).
"""

from __future__ import annotations

import dataclasses

from .engine import COST_ATTR
from .ir import attr_number, count_attr, f64_attr, ir, walk_ops
from .shapes import type_info

XLA_GPU_THRESHOLD_BYTES = 30 * 1024 * 1024  # xla_gpu_all_reduce_combine_threshold_bytes
XLA_GPU_THRESHOLD_COUNT = 256  # gpu_compiler.cc: AllReduceCombiner(..., 256)
COMBINED_ATTR = "costmodel.combined"
_CONTROL_FLOW = ("stablehlo.while", "stablehlo.case", "stablehlo.if", "func.func")
_KEPT_ATTRS = ("replica_groups", "channel_handle", "use_global_device_ids")


@dataclasses.dataclass
class CombineStats:
    all_reduces: int = 0  # all-reduces seen (those of one operand with a simple reduction)
    combined: int = 0  # of them, merged into a combined op
    groups: int = 0  # combined ops made
    bytes_combined: int = 0

    @property
    def after(self) -> int:
        return self.all_reduces - self.combined + self.groups


def _key(op):
    """XLA's AllReduceKey of a one-operand all-reduce whose body is one binary op of its
    two arguments (None: not combinable, e.g. one already combined)."""
    if op.name != "stablehlo.all_reduce" or len(op.operands) != 1 or len(op.results) != 1:
        return None
    blocks = list(op.regions[0].blocks)
    if len(blocks) != 1 or len(blocks[0].arguments) != 2:
        return None
    body = list(blocks[0].operations)
    if len(body) != 2 or len(body[0].operands) != 2:
        return None
    info = type_info(op.results[0].type)
    if not info.is_tensor or info.dynamic:
        return None
    attrs = op.attributes
    groups = str(attrs["replica_groups"]) if "replica_groups" in attrs else ""
    global_ids = "use_global_device_ids" in attrs and str(attrs["use_global_device_ids"]) != "false"
    return (body[0].name, info.dtype, groups, "channel_handle" in attrs, global_ids)


def _inputs(op, index: dict) -> list[int]:
    """Block positions of the ops whose results `op` reads: its operands, then values
    its regions capture from the block."""
    out = []
    for v in op.operands:
        j = index.get(v)
        if j is not None:
            out.append(j)
    if len(op.regions):
        seen = set(out)
        for inner in walk_ops(op):
            for v in inner.operands:
                j = index.get(v)
                if j is not None and j not in seen:
                    seen.add(j)
                    out.append(j)
    return out


class _Graph:
    """One block as a plain graph, built once (MLIR is read here only): node i is the
    i-th op; `inputs` the nodes it reads (operands, then values its regions capture),
    `users`, the all-reduce `key` and `size` of each candidate, and `order`, the node's
    place in the block (kept in step with the ops the merges move)."""

    def __init__(self, block):
        self.ops = ops = [o.operation for o in block.operations]
        index = {}
        for i, o in enumerate(ops):
            for r in o.results:
                index[r] = i
        n = len(ops)
        self.inputs = [_inputs(o, index) for o in ops]
        self.users: list[set] = [set() for _ in range(n)]
        for i, ins in enumerate(self.inputs):
            for j in ins:
                self.users[j].add(i)
        self.alive = [True] * n
        self.order = [float(i) for i in range(n)]
        self.key: dict[int, tuple] = {}
        self.size: dict[int, int] = {}
        for i, o in enumerate(ops):
            if o.name == "stablehlo.all_reduce":
                k = _key(o)
                if k is not None:
                    self.key[i] = k
                    self.size[i] = type_info(o.results[0].type).nbytes

    def post_order(self) -> list[int]:
        """MakeInstructionPostOrder: depth-first from every op nobody reads (the
        terminator, the block's result, among them), in block order, operands first."""
        n = len(self.ops)
        starts = sorted((i for i in range(n) if self.alive[i] and not self.users[i]), key=self.order.__getitem__)
        order, done = [], [False] * n
        for s in starts:
            if done[s]:
                continue
            stack = [(s, 0)]
            while stack:
                i, k = stack.pop()
                if done[i]:
                    continue
                ins = self.inputs[i]
                while k < len(ins) and done[ins[k]]:
                    k += 1
                if k < len(ins):
                    stack.append((i, k + 1))
                    stack.append((ins[k], 0))
                else:
                    done[i] = True
                    order.append(i)
        return order


def _reaches(graph: _Graph, node: int, members: set, floor: int, rank: list) -> bool:
    """Whether `node` depends on one of `members` (a path through its inputs); nodes
    placed before `floor` in the post order (`rank`) cannot: the post order is a
    topological order."""
    stack, seen = [node], {node}
    inputs = graph.inputs
    while stack:
        i = stack.pop()
        for j in inputs[i]:
            if j in members:
                return True
            if j not in seen and rank[j] >= floor:
                seen.add(j)
                stack.append(j)
    return False


def compiler_combines(policy: str) -> bool:
    """Whether the compiler whose kernels `policy` forms combines all-reduces as
    modelled here (XLA GPU; XLA TPU's thresholds have no source here)."""
    return policy == "xla-gpu"


def combine_all_reduces(module, threshold_bytes: int = XLA_GPU_THRESHOLD_BYTES,
                        threshold_count: int = XLA_GPU_THRESHOLD_COUNT, plans: dict | None = None) -> CombineStats:
    """Combine the module's all-reduces as XLA GPU's AllReduceCombiner does (see the
    module docstring); returns what it did.

    `plans`: a dict shared by clones of one module (costmodel predict): the first clone
    records which all-reduces each block combined, in order, and the others replay it
    (the combination depends on the IR alone, not on the costs; a block whose recorded
    members are not combinable alike is combined afresh)."""
    stats = CombineStats()
    with module.context:
        for seq, block in enumerate(_blocks(module)):
            key = ("combine", threshold_bytes, threshold_count, seq)
            plan = plans.get(key) if plans is not None else None
            if plan is not None and _replay(block, plan, stats):
                continue
            groups: list = []
            _combine_block(block, threshold_bytes, threshold_count, stats, groups)
            if plans is not None:
                plans[key] = (len(list(block.operations)) + sum(len(m) - 1 for m in groups), groups)
    return stats


def _replay(block, plan, stats: CombineStats) -> bool:
    """Merge `plan`'s recorded groups in `block` (False, nothing changed: the block is
    not the one recorded)."""
    n_ops, groups = plan
    g = _Graph(block)
    if len(g.ops) != n_ops:
        return False
    for members in groups:
        keys = {g.key.get(m) for m in members}
        if None in keys or len(keys) != 1:
            return False
    stats.all_reduces += len(g.key)
    for members in groups:
        _merge_counted(g, members, stats)
    return True


def _merge_counted(g: "_Graph", members: list[int], stats: CombineStats) -> None:
    """_merge, counted in `stats`."""
    nbytes = sum(g.size[m] for m in members)
    _merge(g, members)
    stats.combined += len(members)
    stats.groups += 1
    stats.bytes_combined += nbytes


def _blocks(module) -> list:
    """Bodies of functions and of the while/case/if inside them."""
    return [b for op in walk_ops(module.operation) if op.name in _CONTROL_FLOW for r in op.regions for b in r.blocks]


def _combine_block(block, threshold_bytes: int, threshold_count: int, stats: CombineStats, groups: list) -> None:
    """Combine one block's all-reduces; `groups` receives each combined set of nodes, in
    the order merged."""
    g = _Graph(block)
    stats.all_reduces += len(g.key)
    remaining = set(g.key)  # XLA's `keys`: all-reduces not yet taken by a walk
    if len(remaining) < 2:
        return
    post = g.post_order()
    rank = [0] * len(g.ops)
    for r, i in enumerate(post):
        rank[i] = r
    start = 0  # walks begin at the first all-reduce left (the prefix before it is done)
    while remaining:
        while start < len(post) and post[start] not in remaining:
            start += 1
        to_combine: list[int] = []
        members: set = set()
        nbytes = 0
        key = None
        floor = 0
        for idx in range(start, len(post)):
            i = post[idx]
            if i not in remaining:
                continue
            k = g.key[i]
            if not to_combine:
                key = k
            elif k != key:
                continue
            size = g.size[i]
            if size > threshold_bytes:  # never combined
                remaining.discard(i)
                continue
            if nbytes + size > threshold_bytes or (members and _reaches(g, i, members, floor, rank)):
                break
            if not to_combine:
                floor = rank[i]
            to_combine.append(i)
            members.add(i)
            nbytes += size
            remaining.discard(i)
            if len(to_combine) >= threshold_count:
                break
        if not to_combine:
            break
        if len(to_combine) > 1:  # a lone one: XLA leaves it as it is
            groups.append(list(to_combine))
            _merge_counted(g, to_combine, stats)
            post = g.post_order()  # the graph changed: XLA rebuilds its order too
            for r, i in enumerate(post):
                rank[i] = r
            start = 0


def _summed_cost(ops):
    """The members' `costmodel.cost` (annotate-cost ran first, as XLA fuses before it
    combines) added up: counts and times summed, the bound of the longest; None when
    any member has none."""
    dicts = []
    for op in ops:
        if COST_ATTR not in op.attributes:
            return None
        dicts.append(ir.DictAttr(op.attributes[COST_ATTR]))
    out = {}
    for key in ("flops", "transcendentals", "bytes_read", "bytes_written"):
        out[key] = count_attr(sum(int(attr_number(d[key])) for d in dicts if key in d))
    times = [attr_number(d["time_ns"]) if "time_ns" in d else 0.0 for d in dicts]
    out["time_ns"] = f64_attr(sum(times))
    longest = dicts[max(range(len(dicts)), key=times.__getitem__)]
    for key in ("bound", "backend"):
        if key in longest:
            out[key] = longest[key]
    return ir.DictAttr.get(out)


def _merge(g: _Graph, members: list[int]) -> None:
    """Replace the all-reduces `members` (nodes, in the order taken) by one, in the
    block and in the graph: it takes the place of the last one in the block; what read
    an earlier one and stood before that place moves after it, in its order."""
    ops = g.ops
    rep = max(members, key=g.order.__getitem__)
    first = ops[members[0]]
    loc = ir.Location.fused([ops[m].location for m in members])
    attrs = {a: first.attributes[a] for a in _KEPT_ATTRS if a in first.attributes}
    attrs[COMBINED_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), len(members))
    combined = ir.Operation.create(
        "stablehlo.all_reduce",
        results=[ops[m].results[0].type for m in members],
        operands=[ops[m].operands[0] for m in members],
        attributes=attrs,
        regions=1,
        loc=loc,
        ip=ir.InsertionPoint(ops[rep]),
    )
    combined.move_after(ops[rep])
    list(first.regions[0].blocks)[0].append_to(combined.regions[0])  # the reduction body
    cost = _summed_cost([ops[m] for m in members])
    if cost is not None:
        combined.attributes[COST_ATTR] = cost
    # readers of the earlier members placed before the combined op: moved after it
    limit = g.order[rep]
    moved, stack, seen = [], [m for m in members if m != rep], set(members)
    while stack:
        i = stack.pop()
        for u in g.users[i]:
            if u not in seen and g.order[u] < limit:
                seen.add(u)
                moved.append(u)
                stack.append(u)
    if moved:
        moved.sort(key=g.order.__getitem__)
        later = [o for j, o in enumerate(g.order) if g.alive[j] and o > limit]
        nxt = min(later) if later else limit + 1.0
        prev = combined
        for k, u in enumerate(moved, 1):
            ops[u].move_after(prev)
            prev = ops[u]
            g.order[u] = limit + (nxt - limit) * k / (len(moved) + 1)
    # MLIR: results replaced, members erased; the graph: the combined op is node `rep`
    for n, m in enumerate(members):
        ops[m].results[0].replace_all_uses_with(combined.results[n])
        ops[m].erase()
    inputs: list[int] = []
    users: set = set()
    for m in members:
        for x in g.inputs[m]:
            if x not in inputs:
                inputs.append(x)
            g.users[x].discard(m)
        users |= g.users[m]
    users -= set(members)
    for x in inputs:
        g.users[x].add(rep)
    for u in users:
        g.inputs[u] = [rep if j in members else j for j in g.inputs[u]]
        # one input listed once
        seen_j: list[int] = []
        for j in g.inputs[u]:
            if j not in seen_j:
                seen_j.append(j)
        g.inputs[u] = seen_j
    for m in members:
        if m != rep:
            g.alive[m] = False
            g.inputs[m] = []
            g.users[m] = set()
    ops[rep] = combined
    g.inputs[rep] = inputs
    g.users[rep] = users
    g.key.pop(rep, None)
