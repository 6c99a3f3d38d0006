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
from .ir import attr_number, count_attr, f64_attr, ir
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
        stack = [op]
        while stack:
            o = stack.pop()
            for r in o.regions:
                for b in r.blocks:
                    for inner in b.operations:
                        inner = inner.operation
                        for v in inner.operands:
                            j = index.get(v)
                            if j is not None and j not in seen:
                                seen.add(j)
                                out.append(j)
                        if len(inner.regions):
                            stack.append(inner)
    return out


class _BlockState:
    """The block's ops in program order, the inputs of each, the all-reduces still to
    visit (position -> key), the all-reduce ancestry of every op (bitsets over
    positions) and XLA's post order."""

    def __init__(self, block):
        self.ops = ops = [o.operation for o in block.operations]
        index = {}
        for i, o in enumerate(ops):
            for r in o.results:
                index[r] = i
        self.inputs = [_inputs(o, index) for o in ops]
        n = len(ops)
        self.keys = {}
        for i, o in enumerate(ops):
            if o.name == "stablehlo.all_reduce" and _VISITED_ATTR not in o.attributes:
                k = _key(o)
                if k is not None:
                    self.keys[i] = k
        anc = [0] * n
        users = [0] * n
        for i in range(n):
            a = 0
            for j in self.inputs[i]:
                a |= anc[j]
                users[j] += 1
            if i in self.keys:
                a |= 1 << i
            anc[i] = a
        self.anc = anc
        # MakeInstructionPostOrder: depth-first from every op nobody reads (the
        # terminator, the block's result, among them), operands first, in order
        order, done = [], [False] * n
        for s in range(n):
            if users[s] or done[s]:
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
        self.post_order = order


_VISITED_ATTR = "costmodel.combiner_visited"  # transient: taken by a walk, not combined


def compiler_combines(policy: str) -> bool:
    """Whether the compiler whose kernels `policy` forms combines all-reduces as
    modelled here (XLA GPU; XLA TPU's thresholds have no source here)."""
    return policy == "xla-gpu"


def combine_all_reduces(module, threshold_bytes: int = XLA_GPU_THRESHOLD_BYTES,
                        threshold_count: int = XLA_GPU_THRESHOLD_COUNT) -> CombineStats:
    """Combine the module's all-reduces as XLA GPU's AllReduceCombiner does (see the
    module docstring); returns what it did."""
    stats = CombineStats()
    with module.context:
        for block in _blocks(module):
            _combine_block(block, threshold_bytes, threshold_count, stats)
    return stats


def _blocks(module) -> list:
    """Bodies of functions and of the while/case/if inside them."""
    out = []
    stack = [module.operation]
    while stack:
        op = stack.pop()
        for r in op.regions:
            for b in r.blocks:
                if op.name in _CONTROL_FLOW:
                    out.append(b)
                for o in b.operations:
                    o = o.operation
                    if o.name in _CONTROL_FLOW:
                        stack.append(o)
    return out


def _combine_block(block, threshold_bytes: int, threshold_count: int, stats: CombineStats) -> None:
    state = _BlockState(block)
    stats.all_reduces += len(state.keys)
    visited = []  # taken alone or above the threshold: marked so that a rebuild skips them

    def leave(i: int) -> None:
        op = state.ops[i]
        op.attributes[_VISITED_ATTR] = ir.UnitAttr.get()
        visited.append(op)
        del state.keys[i]

    try:
        while state.keys:
            to_combine: list[int] = []
            nbytes = mask = 0
            key = None
            for i in state.post_order:
                k = state.keys.get(i)
                if k is None:
                    continue
                if not to_combine:
                    key = k
                elif k != key:
                    continue
                size = type_info(state.ops[i].results[0].type).nbytes
                if size > threshold_bytes:  # never combined
                    leave(i)
                    continue
                if nbytes + size > threshold_bytes or state.anc[i] & mask:
                    break
                to_combine.append(i)
                mask |= 1 << i
                nbytes += size
                if len(to_combine) >= threshold_count:
                    break
            if not to_combine:
                break
            if len(to_combine) == 1:  # taken alone: XLA leaves it as it is
                leave(to_combine[0])
            elif to_combine:
                _merge(state, to_combine)
                stats.combined += len(to_combine)
                stats.groups += 1
                stats.bytes_combined += nbytes
                state = _BlockState(block)  # positions changed
    finally:
        for op in visited:
            del op.attributes[_VISITED_ATTR]


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


def _merge(state: _BlockState, members: list[int]) -> ir.Operation:
    """Replace the all-reduces at `members` (positions, in the order taken) by one."""
    ops = state.ops
    last_pos = max(members)
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
        ip=ir.InsertionPoint(ops[last_pos + 1]),
    )
    list(first.regions[0].blocks)[0].append_to(combined.regions[0])  # the reduction body
    cost = _summed_cost([ops[m] for m in members])
    if cost is not None:
        combined.attributes[COST_ATTR] = cost
    # ops before the last member that read an earlier one move after the combined op
    earlier = 0
    for m in members:
        if m != last_pos:
            earlier |= 1 << m
    prev = combined
    member_set = set(members)
    for p in range(min(members) + 1, last_pos):
        if p not in member_set and state.anc[p] & earlier:
            ops[p].move_after(prev)
            prev = ops[p]
    for n, m in enumerate(members):
        ops[m].results[0].replace_all_uses_with(combined.results[n])
        ops[m].erase()
    return combined
