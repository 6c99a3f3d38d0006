"""jax's `pmap` lowering (jit + one fully manual shard_map) -> the classic replica form.

In jax 0.10 (the version this project pins), `jax.pmap` is `jit(shard_map(...))`: its
lowering has `mhlo.num_partitions = N`, an `sdy.mesh` with one axis of size N, and a
`main` whose body is one `sdy.manual_computation` over that axis, whose collectives use
flattened device ids (`channel_handle` + `use_global_device_ids`). Older jax lowered `pmap` to N replicas:
`mhlo.num_replicas = N`, `mhlo.num_partitions = 1`, the per-device program as `main`
(mapped arguments keep a leading axis of 1), cross-replica collectives, and
`mhlo.is_same_data_across_replicas` on the broadcast (in_axes=None) arguments. That is the
form of the ISPASS 2026 paper's workloads; `to_replica_form` rewrites the first into the
second. Both run the same per-device program with the same device groups: with one
partition, the flattened id of replica r is r.
"""

from __future__ import annotations

from ..collectives import GROUP_COLLECTIVE_OPS
from ..ir import InputError, ir, load_module, make_context, print_module, walk_ops

# collectives whose groups switch from flattened ids to replica ids when channel_handle
# and use_global_device_ids are dropped (the StableHLO spec's cross_replica mode)
_GROUPED = GROUP_COLLECTIVE_OPS


class ReplicaFormError(InputError):
    """The module is not a pmap-style shard_map lowering this rewrite understands."""


def _int_attr(op, name: str, default: int) -> int:
    if name not in op.attributes:
        return default
    return ir.IntegerAttr(op.attributes[name]).value


def to_replica_form(text: str, num_devices: int, *, module_name: str | None = None, debug_info: bool = False) -> str:
    """The replica form of jax's pmap lowering `text` (see the module doc); `debug_info`
    keeps the ops' locations (JAX's op names)."""
    ctx = make_context()
    with ctx, ir.Location.unknown(ctx):
        module = load_module(ctx, text, "<pmap lowering>")
        _rewrite(module, num_devices)
        if module_name:
            module.attributes["sym_name"] = ir.StringAttr.get(module_name)
        module.verify()
        return print_module(module, debug_info=debug_info).decode("utf-8")


def _rewrite(module, n: int) -> None:
    if _int_attr(module, "mhlo.num_replicas", 1) != 1 or _int_attr(module, "mhlo.num_partitions", 1) != n:
        raise ReplicaFormError(f"expected mhlo.num_partitions = {n} and one replica in the pmap lowering")
    top = list(module.regions[0].blocks[0].operations)
    meshes = [op.operation for op in top if op.operation.name == "sdy.mesh"]
    if len(meshes) != 1:
        raise ReplicaFormError(f"expected one sdy.mesh in the pmap lowering, found {len(meshes)}")
    mains = [
        op.operation
        for op in top
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main"
    ]
    if len(mains) != 1:
        raise ReplicaFormError("expected one func.func @main in the pmap lowering")
    main = mains[0]
    block = main.regions[0].blocks[0]
    body_ops = [op.operation for op in block.operations]
    if n == 1 and not any(op.name == "sdy.manual_computation" for op in body_ops):
        # one device: jax inlines the shard_map body into @main (mapped arguments keep
        # their leading axis of 1, as in the replica form); only the mesh and the
        # shardings go
        meshes[0].erase()
        for key, count in (("arg_attrs", len(list(block.arguments))), ("res_attrs", _num_results(main))):
            if key in main.attributes:
                main.attributes[key] = ir.ArrayAttr.get(
                    [_arg_attrs(main, key, i, replicated=False) for i in range(count)]
                )
        _collectives_to_replicas(module)
        return
    if len(body_ops) != 2 or body_ops[0].name != "sdy.manual_computation" or body_ops[1].name != "func.return":
        raise ReplicaFormError("expected @main to hold one sdy.manual_computation and its return")
    mc, ret = body_ops
    args = list(block.arguments)
    if not _same_values(mc.operands, args):
        raise ReplicaFormError("expected the sdy.manual_computation to take @main's arguments in order")
    if not _same_values(ret.operands, mc.results):
        raise ReplicaFormError("expected @main to return the sdy.manual_computation's results in order")
    in_shardings = _shardings(mc, "in_shardings")

    # the per-device body becomes main's body
    inner = mc.regions[0].blocks[0]
    inner_ops = [op.operation for op in inner.operations]
    inner_return = inner_ops[-1]
    if inner_return.name != "sdy.return":
        raise ReplicaFormError("expected the sdy.manual_computation body to end in sdy.return")
    for outer_arg, inner_arg in zip(args, inner.arguments):
        outer_arg.set_type(inner_arg.type)
        inner_arg.replace_all_uses_with(outer_arg)
    for op in inner_ops[:-1]:
        op.move_before(mc)
    results = list(inner_return.operands)
    with ir.InsertionPoint(ret):
        ir.Operation.create("func.return", operands=results)
    ret.erase()
    mc.erase()
    meshes[0].erase()

    # signature: per-device types, no shardings, replicated arguments marked as such
    result_types = [v.type for v in results]
    main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([a.type for a in args], result_types))
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(
        [_arg_attrs(main, "arg_attrs", i, replicated=not in_shardings[i]) for i in range(len(args))]
    )
    main.attributes["res_attrs"] = ir.ArrayAttr.get(
        [_arg_attrs(main, "res_attrs", i, replicated=False) for i in range(len(results))]
    )
    module.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), n)
    module.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 1)

    _collectives_to_replicas(module)


def _num_results(func) -> int:
    return len(ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).results)


def _collectives_to_replicas(module) -> None:
    """Collectives: flattened ids over the N partitions -> cross-replica over the N replicas."""
    for op in list(walk_ops(module)):
        name = op.name
        if name.startswith("sdy."):
            raise ReplicaFormError(f"unexpected {name} inside the pmap body")
        if name in _GROUPED:
            if "channel_handle" in op.attributes:
                del op.attributes["channel_handle"]
            if "use_global_device_ids" in op.attributes:
                del op.attributes["use_global_device_ids"]
        elif name == "stablehlo.partition_id":
            with ir.InsertionPoint(op):
                new = ir.Operation.create("stablehlo.replica_id", results=[op.results[0].type])
            op.results[0].replace_all_uses_with(new.results[0])
            op.erase()
        elif name in ("stablehlo.send", "stablehlo.recv"):
            raise ReplicaFormError(f"{name} has no replica form (channels are per partition)")


def _same_values(a, b) -> bool:
    a, b = list(a), list(b)
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def _shardings(mc, name: str) -> list[bool]:
    """For each operand: is it split over a mesh axis (a mapped pmap argument)?"""
    text = str(mc.attributes[name])
    # #sdy.sharding_per_value<[<@mesh, [{"batch"}, {}]>, <@mesh, []>, ...]>
    body = text[text.index("[") + 1 : text.rindex("]")]
    out, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                out.append('"' in body[start : i + 1])
        elif ch == "," and depth == 0:
            start = i + 1
    if len(out) != len(list(mc.operands)):
        raise ReplicaFormError(f"cannot read the {name} of the sdy.manual_computation")
    return out


def _arg_attrs(func, key: str, index: int, *, replicated: bool):
    entries = {}
    if key in func.attributes:
        old = ir.DictAttr(ir.ArrayAttr(func.attributes[key])[index])
        for i in range(len(old)):
            named = old[i]
            if not named.name.startswith("sdy."):
                entries[named.name] = named.attr
    if replicated:
        entries["mhlo.is_same_data_across_replicas"] = ir.BoolAttr.get(True)
    return ir.DictAttr.get(entries)
