"""Is a module the per-device program, or a sharded program not yet partitioned?

`propagate-shardings` marks the module it partitioned with the unit attribute
`costmodel.partitioned` (the Shardy shardings stay on it for reference, so they alone
cannot tell). Passes that need the per-device program (`extract-collectives`,
`export-chakra`) call `find_unpartitioned_sharding` and refuse a module that still
computes on sharded global values: writing a trace of 8 ranks that each run the global
program with no collective would be a silently wrong answer.

A value counts as "computed on while sharded" when it carries a non-replicated sharding
(Shardy `sdy.sharding`, or a tiled GSPMD `mhlo.sharding`) and some op other than a
manual-computation boundary uses it, in the function or in a function it is passed to
(func.call, followed into the callee). `shard_map` programs (`sdy.manual_computation`,
whose bodies are per-device already) therefore pass, and so do programs whose
communication Shardy already made explicit (`sdy.all_gather` ... on global shapes, from
`propagate-shardings{per-device=false}`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from costmodel.ir import ir, nested_ops

PARTITIONED_ATTR = "costmodel.partitioned"

# Ops through which a sharded global value may flow in a per-device program.
_BOUNDARY_OPS = {"sdy.manual_computation", "func.return", "func.call", "sdy.return"}
_MANUAL_CUSTOM_CALLS = {"SPMDFullToShardShape", "SPMDShardToFullShape"}
# Ops that only exist before partitioning.
_PRE_PARTITION_OPS = {"sdy.sharding_constraint", "sdy.reshard"}

# Shardy collectives on global shapes (`propagate-shardings{per-device=false}`): the
# program's communication is explicit, its shapes still global (not one device's).
_SDY_COLLECTIVES = {
    "sdy.all_gather",
    "sdy.all_slice",
    "sdy.all_reduce",
    "sdy.all_to_all",
    "sdy.collective_permute",
    "sdy.reduce_scatter",
}

_DIMS_RE = re.compile(r"\[\{.*?\}\]")


@dataclass(frozen=True)
class Unpartitioned:
    op: object  # the op whose location to report
    what: str  # e.g. "%arg0 of @main (#sdy.sharding<@mesh, [{\"d\"}, {}]>) used by stablehlo.dot_general"


def is_marked_partitioned(module) -> bool:
    return PARTITIONED_ATTR in module.attributes


def mark_partitioned(module) -> None:
    with module.context:
        module.attributes[PARTITIONED_ATTR] = ir.UnitAttr.get()


def _sdy_is_sharded(text: str) -> bool:
    """True if an sdy sharding text shards some dimension along an axis."""
    for m in _DIMS_RE.finditer(text):
        if '"' in m.group(0):
            return True
    return False


def _gspmd_is_tiled(text: str) -> bool:
    t = text.strip().strip('"')
    if "devices=" not in t or "manual" in t or "maximal" in t:
        return False
    if "last_tile_dim_replicate" in t or "last_tile_dims" in t:
        # tiled only if some non-replicated tile dimension is larger than 1
        m = re.search(r"devices=\[([0-9,]+)\]", t)
        if m:
            dims = [int(x) for x in m.group(1).split(",") if x]
            return any(d > 1 for d in dims[:-1])
    return True


def _sharding_text(attrs) -> str | None:
    for key in ("sdy.sharding", "mhlo.sharding"):
        if key in attrs:
            return key + "=" + str(attrs[key])
    return None


def _is_sharded(text: str) -> bool:
    key, _, value = text.partition("=")
    return _sdy_is_sharded(value) if key == "sdy.sharding" else _gspmd_is_tiled(value)


def _is_boundary(user) -> bool:
    if user.name in _BOUNDARY_OPS:
        return True
    if user.name == "stablehlo.custom_call" and "call_target_name" in user.attributes:
        return ir.StringAttr(user.attributes["call_target_name"]).value in _MANUAL_CUSTOM_CALLS
    return False


def _users(value):
    for use in value.uses:
        yield use.owner


def _computing_user(value, funcs: dict) -> tuple[object, str] | None:
    """The first op other than a partitioning boundary that uses `value`, following
    func.calls into their callees (a JAX export hands sharded arguments to private
    functions: nested jits, `jnp.sort`, `jnp.take` ...), and the function it is in; None
    when there is none. Iterative: call chains of any depth."""
    stack = [(value, None)]
    seen: set = set()
    while stack:
        v, where = stack.pop()
        for user in _users(v):
            if user.name == "func.call" and "callee" in user.attributes:
                name = ir.FlatSymbolRefAttr(user.attributes["callee"]).value
                callee = funcs.get(name)
                if callee is None or not callee.regions[0].blocks:
                    continue
                args = callee.regions[0].blocks[0].arguments
                for pos, operand in enumerate(user.operands):
                    if operand == v and pos < len(args) and (name, pos) not in seen:
                        seen.add((name, pos))
                        stack.append((args[pos], name))
            elif not _is_boundary(user):
                return user, where
    return None


def may_be_sharded(module) -> bool:
    """A cheap first look (no walk of the ops): a module over several partitions
    (`mhlo.num_partitions` > 1, what JAX writes for any mesh) or with a Shardy mesh may be
    a sharded program; any other module is not one. Replicated programs (pmap,
    `mhlo.num_replicas` only) are per-device already."""
    attrs = module.attributes
    if "mhlo.num_partitions" in attrs:
        try:
            if ir.IntegerAttr(attrs["mhlo.num_partitions"]).value > 1:
                return True
        except (ValueError, TypeError):
            return True
    for op in module.regions[0].blocks[0].operations:
        if op.operation.name == "sdy.mesh":
            return True
    return False


def find_unpartitioned_sharding(module) -> Unpartitioned | None:
    """The first sign that `module` is a sharded program not yet partitioned, or None."""
    if is_marked_partitioned(module):
        return None
    ops = nested_ops(module)
    if any(op.name == "mhlo.fusion" for op in ops):
        # compiled by XLA, which partitions before it fuses: per-device already (the
        # arguments' mhlo.sharding attributes it keeps describe the global layout)
        return None
    for op in ops:
        if op.name in _SDY_COLLECTIVES:
            # global shapes with Shardy's explicit collectives (propagate-shardings
            # per-device=false): costing it as one device's program counts every device's
            # work (8x the flops on 8 devices)
            return Unpartitioned(op, f"'{op.name}' (Shardy's collectives on global shapes: propagate-shardings per-device=false)")
    funcs = {
        ir.StringAttr(op.attributes["sym_name"]).value: op
        for op in ops
        if op.name == "func.func" and "sym_name" in op.attributes
    }
    for op in ops:
        name = op.name
        if name in _PRE_PARTITION_OPS:
            # a constraint that shards no dimension (JAX's PRNG keys on an empty mesh in a
            # one-device program) is no sign of a sharded program
            sharding = str(op.attributes["sharding"]) if "sharding" in op.attributes else '"?"'
            if _sdy_is_sharded(sharding) or not _DIMS_RE.search(sharding):
                return Unpartitioned(op, f"'{name}' (only present before partitioning)")
            continue
        if name == "func.func" and "arg_attrs" in op.attributes and op.regions[0].blocks:
            fname = ir.StringAttr(op.attributes["sym_name"]).value
            block = op.regions[0].blocks[0]
            for i, d in enumerate(ir.ArrayAttr(op.attributes["arg_attrs"])):
                text = _sharding_text(ir.DictAttr(d))
                if text is None or not _is_sharded(text) or i >= len(block.arguments):
                    continue
                hit = _computing_user(block.arguments[i], funcs)
                if hit is not None:
                    user, where = hit
                    via = f" in @{where}, which @{fname} calls" if where else ""
                    return Unpartitioned(op, f"%arg{i} of @{fname} has {text} and is used by '{user.name}'{via}")
            continue
        if name == "sdy.manual_computation" or name in _BOUNDARY_OPS:
            continue
        if name == "stablehlo.custom_call" and _is_boundary(op):
            continue
        text = _sharding_text(op.attributes)
        if text is not None and _is_sharded(text):
            return Unpartitioned(op, f"'{name}' has {text}")
    return None


def unpartitioned_message(pass_name: str, found: Unpartitioned) -> str:
    if found.op is not None and getattr(found.op, "name", "") in _SDY_COLLECTIVES:
        return (
            f"{pass_name}: the module is not partitioned ({found.what}): its shapes are global, every rank "
            "would run every device's work. Run --propagate-shardings with per-device=true (the default) instead"
        )
    return (
        f"{pass_name}: the module is sharded but not partitioned ({found.what}); "
        "every rank would run the global program with no collectives. "
        "Run --propagate-shardings first (it turns the sharded program into the per-device one)"
    )


def find_global_collective(module):
    """The first Shardy collective on global shapes (what propagate-shardings with
    per-device=false writes), or None."""
    for op in nested_ops(module):
        if op.name in _SDY_COLLECTIVES:
            return op
    return None
