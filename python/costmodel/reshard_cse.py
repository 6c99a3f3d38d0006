"""Merge identical collectives of one value after partitioning (XLA's reshard cache).

Shardy's `sdy-reshard-to-collectives` reshards a value once per use: an FSDP weight
that feeds the forward matmul and, through the transpose, the backward matmul is
all-gathered twice (`all_gather %w` ... `all_gather %w`, equal but for the channel
handle). XLA's SPMD partitioner caches the reshards of each partitioned value
(`PartitionedHlo::Reshard`'s reshard cache), so the program it emits gathers once and
both uses read that result. `merge_identical_collectives` does the same to our
per-device program: a collective whose operands, attributes (the channel handle
aside), result types and reduction body equal those of one that precedes it in the same
block or in an enclosing block is replaced by it.

`propagate-shardings` runs it on Shardy's collectives right after
`sdy-reshard-to-collectives` (`xla_spmd.merge_duplicate_reshards`) and on StableHLO's
after `sdy-convert-global-to-local`, before reduce-scatter formation (docs/sharding.md). The oracle (tests/test_spmd_oracle.py and
tests/test_workloads_llama.py) compares the result with XLA's partitioner.
"""

from __future__ import annotations

from costmodel.ir import ir

COLLECTIVES = frozenset(
    {
        "stablehlo.all_gather",
        "stablehlo.all_reduce",
        "stablehlo.reduce_scatter",
        "stablehlo.all_to_all",
        "stablehlo.collective_permute",
        "stablehlo.collective_broadcast",
    }
)

_IGNORED_ATTRS = frozenset({"channel_handle"})


def _body_key(op) -> tuple:
    """The reduction body as (op name, operand positions) per op: enough to tell an add
    from a max, with the block's argument types."""
    if not len(op.regions):
        return ()
    out = []
    for region in op.regions:
        for block in region.blocks:
            out.append(tuple(str(a.type) for a in block.arguments))
            for inner in block.operations:
                inner = inner.operation
                out.append((inner.name, str(inner.attributes) if len(inner.attributes) else ""))
    return tuple(out)


def _key(op) -> tuple:
    attrs = tuple(
        sorted(
            (op.attributes[i].name, str(op.attributes[i].attr))
            for i in range(len(op.attributes))
            if op.attributes[i].name not in _IGNORED_ATTRS
        )
    )
    # operands compared as SSA values: an ir.Value's hash/eq is its identity
    return (
        op.name,
        tuple(op.operands),
        attrs,
        tuple(str(r.type) for r in op.results),
        _body_key(op),
    )


def merge_identical_collectives(module: ir.Operation, names: frozenset | tuple = COLLECTIVES) -> int:
    """Replace every collective that repeats an earlier, dominating one (see the module
    doc). `names`: the ops to merge (StableHLO's collectives by default;
    `xla_spmd.merge_duplicate_reshards` passes Shardy's, before they are lowered).
    Returns how many were removed."""
    removed = 0

    def visit_block(block, scopes: list[dict]) -> None:
        nonlocal removed
        table: dict = {}
        scopes.append(table)
        for op in list(block.operations):
            op = op.operation
            if op.name in names:
                key = _key(op)
                earlier = next((s[key] for s in reversed(scopes) if key in s), None)
                if earlier is not None:
                    for old, new in zip(op.results, earlier.results):
                        old.replace_all_uses_with(new)
                    op.erase()
                    removed += 1
                    continue
                table[key] = op
            for region in op.regions:
                for inner in region.blocks:
                    visit_block(inner, scopes)
        scopes.pop()

    with module.context:
        for region in module.regions:
            for block in region.blocks:
                for op in block.operations:
                    op = op.operation
                    for r in op.regions:
                        for b in r.blocks:
                            visit_block(b, [])
    return removed
