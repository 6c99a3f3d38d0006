"""`propagate-shardings`: turn a sharded, not-yet-partitioned program into the program
each device runs, with its collectives, using Shardy's own passes.

    stablehlo-opt train_step.mlir --propagate-shardings --annotate-cost

Steps (docs/sharding.md has the long version):
1. GSPMD input (`mhlo.sharding` strings, shard_map regions included) is converted to
   `sdy.mesh` + `sdy.sharding` + `sdy.manual_computation` (`costmodel.gspmd`); a module
   with Shardy shardings is taken as is.
2. Private calls inlined; the program put in the form XLA's HLO import gives Shardy
   (`costmodel.xla_spmd`: size-1 broadcasts as reshapes, post-order op order); CHLO
   expanded.
3. `sdy-propagation-pipeline`.
4. dot_general / dynamic_slice operands resharded as XLA's SPMD partitioner does
   (`costmodel.xla_spmd`), then `sdy-insert-explicit-reshards{enable-full-version=true}`
   and `sdy-reshard-to-collectives`: every reshard an `sdy` collective on global shapes;
   identical collectives of one value merged.
5. (per-device=true, the default) `sdy-pad-for-divisibility` and
   `sdy-convert-global-to-local` (loop block arguments localised around it): local
   shapes, `stablehlo` collectives with replica_groups, channel handles and
   use_global_device_ids; `mhlo.num_partitions` / `mhlo.num_replicas = 1` set; an
   all_reduce whose every user dynamic-slices 1/n of it becomes a reduce_scatter (option
   reduce-scatter, XLA GPU/TPU's ReduceScatterCreator; FSDP gradients), after hybrid
   (dp x fsdp) gradients are split as XLA GPU's AllReduceSplitter splits them; the unit
   attribute `costmodel.partitioned` marks the per-device program (running the pass
   again leaves it unchanged, with a warning).

With `isolate=true` (the default where os.fork exists) all of it runs in a forked child
(`costmodel.isolation`): a CHECK failure inside Shardy is one error naming the stage,
not a core dump.

A module without any sharding (no `sdy.*` op or attribute, no `mhlo.sharding`) passes
through unchanged. See docs/sharding.md.
"""

from __future__ import annotations

import math
import os
import warnings
import re

import numpy as np

from costmodel import gspmd, xla_spmd
from costmodel.collectives import _dense_rows
from costmodel.ir import DiagnosticEngine, ir, passmanager, walk_ops
from costmodel.partitioning import PARTITIONED_ATTR, find_global_collective, is_marked_partitioned, mark_partitioned
from costmodel.reshard_cse import merge_identical_collectives

from . import PassError, PassInfo, PassOption, PassSession, register_pass

# (stage name, pipeline): each runs on its own so that a crash names the pass
LEGALIZE_CHLO = ("chlo-legalize-to-stablehlo", "builtin.module(func.func(chlo-legalize-to-stablehlo))")
PROPAGATE = ("sdy-propagation-pipeline", "builtin.module(sdy-propagation-pipeline)")
RESHARDS = (
    "sdy-insert-explicit-reshards",
    "builtin.module(func.func(sdy-insert-explicit-reshards{enable-full-version=true}))",
)
TO_COLLECTIVES = ("sdy-reshard-to-collectives", "builtin.module(func.func(sdy-reshard-to-collectives))")
# XLA pads a dimension its sharding does not divide; without this the conversion aborts
# ("Check failed: localType Failed to compute local type due to non-divisible sharding")
PAD = ("sdy-pad-for-divisibility", "builtin.module(func.func(sdy-pad-for-divisibility))")
TO_LOCAL = ("sdy-convert-global-to-local", "builtin.module(sdy-convert-global-to-local)")

# sdy ops that may remain in a per-device program
_ALLOWED_SDY_LOCAL = {"sdy.mesh"}


def _has_sdy_attr(attrs) -> bool:
    for i in range(len(attrs)):
        if attrs[i].name.startswith("sdy."):
            return True
    return False


def module_has_shardy(module: ir.Operation) -> bool:
    for op in walk_ops(module):
        if op.name.startswith("sdy."):
            return True
        if _has_sdy_attr(op.attributes):
            return True
        if op.name == "func.func":
            for key in ("arg_attrs", "res_attrs"):
                if key in op.attributes:
                    for d in ir.ArrayAttr(op.attributes[key]):
                        d = ir.DictAttr(d)
                        if any(d[i].name.startswith("sdy.") for i in range(len(d))):
                            return True
    return False


_LOCALIZE_MARK = "costmodel.localize_block_arg"


def _mark_loop_block_args(module: ir.Operation) -> int:
    """Before `sdy-convert-global-to-local`: route every sharded block argument of a
    while loop through an identity `stablehlo.reshape` carrying the loop's sharding of
    that value.

    This jaxlib's conversion types a block argument only for func arguments; a while
    loop's block arguments keep their global types while the ops in the body are
    converted, and a collective whose operand is such an argument computes its local
    result from the global operand (`lax.scan` over stacked, sharded parameters:
    `all_to_all`/`all_gather` "inferred type(s) ... are incompatible with return
    type(s)"). The marker's result gets its local type from its own sharding, so the
    ops of the body see local operands; `_unmark_loop_block_args` removes the markers
    once the block arguments have their local types. Returns the number of markers."""
    n = 0
    for op in list(walk_ops(module)):
        if op.name != "stablehlo.while" or "sdy.sharding" not in op.attributes:
            continue
        per_value = ir.Attribute(op.attributes["sdy.sharding"])
        shardings = xla_spmd.sharding_list(per_value)
        if shardings is None or len(shardings) != len(op.results):
            continue
        for region in op.regions:
            block = region.blocks[0]
            first = block.operations[0] if len(block.operations) else None
            for arg, sharding in zip(block.arguments, shardings):
                if not xla_spmd.is_sharded(sharding) or arg.type.typeid != ir.RankedTensorType.static_typeid:
                    continue
                uses = [(u.owner, u.operand_number) for u in arg.uses]
                if not uses:
                    continue
                with ir.InsertionPoint(first) if first is not None else ir.InsertionPoint(block), op.location:
                    mark = ir.Operation.create(
                        "stablehlo.reshape",
                        results=[arg.type],
                        operands=[arg],
                        attributes={
                            "sdy.sharding": ir.Attribute.parse(f"#sdy.sharding_per_value<[{sharding}]>"),
                            _LOCALIZE_MARK: ir.UnitAttr.get(),
                        },
                    )
                for owner, index in uses:
                    owner = getattr(owner, "operation", owner)
                    owner.operands[index] = mark.results[0]
                n += 1
    return n


def _unmark_loop_block_args(module: ir.Operation) -> int:
    n = 0
    for op in list(walk_ops(module)):
        if op.name == "stablehlo.reshape" and _LOCALIZE_MARK in op.attributes:
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()
            n += 1
    return n


def _fix_loop_block_types(module: ir.Operation) -> int:
    """Shardy's global-to-local conversion (this jaxlib's) localises a while loop's
    operands and results but leaves its regions' block arguments global (give them the
    operands' types), and leaves dynamic_slice's slice_sizes global (give them the local
    result shape). Returns how many it changed."""
    changed = 0
    for op in walk_ops(module):
        if op.name == "stablehlo.dynamic_slice" and "slice_sizes" in op.attributes:
            # its slice_sizes stay global too; the result type (= the slice) is local
            local = list(ir.RankedTensorType(op.results[0].type).shape)
            if [int(x) for x in ir.DenseI64ArrayAttr(op.attributes["slice_sizes"])] != local:
                op.attributes["slice_sizes"] = ir.DenseI64ArrayAttr.get(local)
                changed += 1
            continue
        if op.name != "stablehlo.while":
            continue
        operands = list(op.operands)
        for region in op.regions:
            for block in region.blocks:
                for arg, value in zip(block.arguments, operands):
                    if arg.type != value.type:
                        arg.set_type(value.type)
                        changed += 1
    return changed


def _run_pipeline(
    module: ir.Operation, stage: tuple[str, str], session: PassSession, progress, fix_loops: bool = False
) -> None:
    what, pipeline = stage
    progress.stage(what)
    diags = session.diagnostics
    before = sum(1 for d in diags.diagnostics if d.severity == "error")
    with module.context:
        pm = passmanager.PassManager.parse(pipeline)
        if fix_loops:
            pm.enable_verifier(False)  # verified below, once the loops are fixed
        try:
            if fix_loops:
                _mark_loop_block_args(module)
            pm.run(module)
            if fix_loops:
                _fix_loop_block_types(module)
                _unmark_loop_block_args(module)
                module.verify()
        except ir.MLIRError as err:
            after = sum(1 for d in diags.diagnostics if d.severity == "error")
            if after == before:
                # no handler collected them (library use): take them from the exception
                diags.add_mlir(err.error_diagnostics)
            if sum(1 for d in diags.diagnostics if d.severity == "error") == before:
                diags.error(module.location, f"propagate-shardings: {what} failed: {str(err).splitlines()[0]}")
            diags.error(module.location, f"propagate-shardings: {what} failed (pipeline {pipeline})")
            raise PassError(what) from None


_CONSTANT_OPS = ("stablehlo.constant", "sdy.constant")


def _constant_values(module: ir.Operation) -> set:
    """The value attributes of the program's constants (attributes are uniqued: equal
    ones are one object)."""
    return {op.attributes["value"] for op in walk_ops(module) if op.name in _CONSTANT_OPS and "value" in op.attributes}


def _readable(ops: list, context) -> list[bool]:
    """Whether each op's value attribute can be printed and parsed back. A malformed one
    can crash the printer, so the reading runs in forked children (one per crash, with
    os.fork; without it, in-process)."""
    def check(op) -> bool:
        try:
            ir.Attribute.parse(str(op.attributes["value"]), context=context)
        except ir.MLIRError:
            return False
        return True

    if not hasattr(os, "fork"):
        return [check(op) for op in ops]
    ok = [True] * len(ops)
    start = 0
    while start < len(ops):
        r, w = os.pipe()
        with warnings.catch_warnings():
            # JAX, when imported (library use, tests), warns at every fork; the child reads
            # attributes of this context only and ends with os._exit (costmodel.isolation)
            warnings.simplefilter("ignore", RuntimeWarning)
            pid = os.fork()
        if pid == 0:  # never returns
            try:
                import faulthandler

                faulthandler.disable()  # (a crash here is expected: no report of it)
                os.close(r)
                for i in range(start, len(ops)):
                    os.write(w, b"T%d\n" % i)
                    if not check(ops[i]):
                        os.write(w, b"B%d\n" % i)
                os.write(w, b"D\n")
            finally:
                os._exit(0)
        os.close(w)
        chunks = []
        with os.fdopen(r, "rb") as fh:
            for chunk in iter(lambda: fh.read(65536), b""):
                chunks.append(chunk)
        os.waitpid(pid, 0)
        lines = b"".join(chunks).split()
        for line in lines:
            if line.startswith(b"B"):
                ok[int(line[1:])] = False
        if lines and lines[-1] == b"D":
            break
        tried = [int(line[1:]) for line in lines if line.startswith(b"T")]
        if not tried:  # the child died before it read any: read them in-process
            return [check(op) for op in ops]
        ok[tried[-1]] = False  # reading it crashed the child
        start = tried[-1] + 1
    return ok


def _suspect_table(value, partitions: int) -> bool:
    """A non-splat integer constant that is no table indexed by partition id (1-D, one
    entry per partition)."""
    try:
        attr = ir.DenseElementsAttr(value)
        t = ir.RankedTensorType(attr.type)
    except (ValueError, TypeError):
        return False
    if attr.is_splat or not isinstance(t.element_type, ir.IntegerType):
        return False
    return not (t.rank == 1 and t.shape[0] == partitions)


def _zero_like(type_: ir.Type):
    """A splat of zeros of a ranked tensor type of ints, floats or i1; None otherwise."""
    try:
        elem = ir.RankedTensorType(type_).element_type
        if isinstance(elem, ir.IntegerType):
            zero = ir.IntegerAttr.get(elem, 0)
        elif isinstance(elem, ir.FloatType):
            zero = ir.FloatAttr.get(elem, 0.0)
        else:
            return None
        return ir.DenseElementsAttr.get_splat(type_, zero)
    except (ValueError, TypeError):
        return None


def _repair_new_constants(module: ir.Operation, before: set, session: PassSession, probe: bool) -> None:
    """Shardy's sdy-convert-global-to-local can write constants whose data does not fit
    their type (the clipping bounds of a gather from an operand sharded along the
    gathered dimension, `take_along_axis` of vocabulary-sharded logits: one i64 for a
    tensor of i32); printing or reading such a module later crashes the process. Every
    constant the conversion made is read back (in forked children when `probe`); a
    malformed one is replaced by zeros of its type, with a warning: a constant's values
    change no cost (its type and whether it is a splat do), and the collectives and
    shapes around it are Shardy's, as XLA's partitioner forms them."""
    ops = [
        op
        for op in walk_ops(module)
        if op.name in _CONSTANT_OPS and "value" in op.attributes and op.attributes["value"] not in before
    ]
    if not ops:
        return
    ok = _readable(ops, module.context) if probe else [True] * len(ops)
    bad = [op for op, fine in zip(ops, ok) if not fine]
    # The same bug with a buffer of the right size: its first element is the bound, the
    # rest uninitialized memory (the output then differs from run to run). The only
    # non-splat integer constants the conversion makes correctly are its tables indexed
    # by partition id (a shard's offsets: one entry per partition); any other is suspect.
    parts = _int_attr(module, "mhlo.num_partitions") or 0
    for op, fine in zip(ops, ok):
        if fine and op not in bad and _suspect_table(op.attributes["value"], parts):
            bad.append(op)
    for op in bad:
        zero = _zero_like(op.result.type)
        if zero is None:
            session.diagnostics.error(
                op.location,
                f"propagate-shardings: Shardy's sdy-convert-global-to-local wrote a malformed constant of "
                f"{op.result.type} (its data does not fit its type); the per-device program cannot be used",
            )
            raise PassError("malformed constant")
        op.attributes["value"] = zero
    if bad:
        session.diagnostics.warning(
            bad[0].location,
            f"propagate-shardings: Shardy's sdy-convert-global-to-local wrote {len(bad)} malformed "
            f"constant(s) (data that does not fit the type, or uninitialized memory; first: {bad[0].result.type}); "
            "replaced by zeros of their type, which changes no cost",
        )


def _warn_spatially_sharded_convolutions(module: ir.Operation, session: PassSession) -> int:
    """A convolution whose input is sharded along a spatial dimension its window spans
    (kernel size > 1) needs each shard's neighbours' border rows: XLA's partitioner
    exchanges those halos (two collective-permutes per such dimension) before the local
    convolution. Shardy's global-to-local conversion exchanges none; each shard pads
    its own borders. The per-device program then lacks that communication, which is
    said here, once per convolution. Returns how many were found."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    found = 0
    for op in walk_ops(module):
        if op.name != "stablehlo.convolution":
            continue
        src = xla_spmd._value_sharding(op.operands[0])
        parsed = xla_spmd._parse_dims(src) if src is not None else None
        if parsed is None:
            continue
        _mesh, dims = parsed
        try:
            dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            kernel = ir.RankedTensorType(op.operands[1].type).shape
        except (ValueError, TypeError, KeyError):
            continue
        spanned = [
            (n, dims[d])
            for n, (d, k) in enumerate(zip(dn.input_spatial_dimensions, dn.kernel_spatial_dimensions))
            if d < len(dims) and dims[d] and kernel[k] > 1
        ]
        if not spanned:
            continue
        found += 1
        what = ", ".join(f"spatial dimension {n} on {'/'.join(axes)}" for n, axes in spanned)
        session.diagnostics.warning(
            op.location,
            f"propagate-shardings: this convolution's input is sharded along its window ({what}): XLA "
            "exchanges the shards' border rows first (collective-permutes), Shardy's partitioner does not, "
            "so the per-device program lacks that communication",
        )
    return found


def _inline_private_calls(module: ir.Operation, session: PassSession) -> None:
    """Inline every func.call first, as XLA does before it partitions: JAX exports call
    private functions (`@relu`, `@_where` ...) from sharded code, sometimes with different
    shardings at different call sites, which Shardy's global-to-local conversion cannot
    type. The functions no longer called are dropped (symbol-dce). A recursive call is an
    error."""
    from costmodel.ir import inline_calls

    with module.context:
        if not any(op.name == "func.call" for op in walk_ops(module)):
            return
        inline_calls(module, drop_uncalled=True)
        left = [op for op in walk_ops(module) if op.name == "func.call"]
        if left:
            callee = ir.FlatSymbolRefAttr(left[0].attributes["callee"]).value
            session.diagnostics.error(
                left[0].location,
                f"propagate-shardings: recursive call to @{callee}: a recursive program cannot be partitioned",
            )
            raise PassError("recursive call")


def _scatter_slices(src, users, gsize: int):
    """(dimension, slice type) if every user dynamic-slices 1/gsize of `src` along the
    same single dimension, else None."""
    if not users or any(u.name != "stablehlo.dynamic_slice" or u.operands[0] != src for u in users):
        return None
    rt = ir.RankedTensorType(src.type)
    dim, st = None, None
    for u in users:
        ut = ir.RankedTensorType(u.results[0].type)
        diff = [d for d in range(rt.rank) if ut.shape[d] != rt.shape[d]]
        if len(diff) != 1 or rt.shape[diff[0]] != ut.shape[diff[0]] * gsize or dim not in (None, diff[0]):
            return None
        dim, st = diff[0], u.results[0].type
    return dim, st


def _users(value) -> list:
    return [getattr(u.owner, "operation", u.owner) for u in value.uses]


def form_reduce_scatters(module: ir.Operation) -> int:
    """An all_reduce whose every user dynamic-slices 1/n of it along one dimension (n the
    group size) becomes a reduce_scatter, as XLA's ReduceScatterCreator does on GPU/TPU.
    A transpose between them (a weight gradient computed in the dot's dimension order,
    then transposed to the parameter's layout: every FSDP gradient of the LLaMA
    exporter's einsums) is looked through: `reduce_scatter` on the all_reduce's operand
    along the permuted dimension, then the transpose of the slice (the same bytes
    reduced; XLA GPU forms one reduce-scatter per FSDP weight matrix there too)."""
    i64 = ir.IntegerType.get_signless(64)
    n = 0
    for ar in [op for op in walk_ops(module) if op.name == "stablehlo.all_reduce"]:
        if len(ar.results) != 1 or "replica_groups" not in ar.attributes:
            continue
        gtype = ir.RankedTensorType(ir.DenseIntElementsAttr(ar.attributes["replica_groups"]).type)
        if gtype.rank != 2 or gtype.shape[1] < 2:
            continue
        gsize = gtype.shape[1]
        users = _users(ar.results[0])
        transpose = None
        found = _scatter_slices(ar.results[0], users, gsize)
        if found is None and len(users) == 1 and users[0].name == "stablehlo.transpose":
            transpose = users[0]
            found = _scatter_slices(transpose.results[0], _users(transpose.results[0]), gsize)
        if found is None:
            continue
        dim, st = found
        slice_users = _users((transpose or ar).results[0])
        if transpose is not None:
            perm = [int(p) for p in ir.DenseI64ArrayAttr(transpose.attributes["permutation"])]
            dim = perm[dim]
            shape = list(ir.RankedTensorType(ar.results[0].type).shape)
            shape[dim] //= gsize
            rs_type = ir.RankedTensorType.get(
                shape, ir.RankedTensorType(ar.results[0].type).element_type, loc=ar.location
            )
        else:
            rs_type = st
        attrs = {"scatter_dimension": ir.IntegerAttr.get(i64, dim), "replica_groups": ar.attributes["replica_groups"]}
        for k in ("channel_handle", "use_global_device_ids"):
            if k in ar.attributes:
                attrs[k] = ar.attributes[k]
        with ir.InsertionPoint(ar), ar.location:
            rs = ir.Operation.create(
                "stablehlo.reduce_scatter", results=[rs_type], operands=[ar.operands[0]], attributes=attrs, regions=1
            )
            old = ar.regions[0].blocks[0]
            new = rs.regions[0].blocks.append(*[a.type for a in old.arguments])
        for a, b in zip(old.arguments, new.arguments):
            a.replace_all_uses_with(b)
        for o in list(old.operations):
            new.append(o.operation)
        result = rs.results[0]
        if transpose is not None:
            with ir.InsertionPoint(transpose), transpose.location:
                tr = ir.Operation.create(
                    "stablehlo.transpose",
                    results=[st],
                    operands=[result],
                    attributes={"permutation": transpose.attributes["permutation"]},
                )
            result = tr.results[0]
        for u in slice_users:
            u.results[0].replace_all_uses_with(result)
            u.erase()
        if transpose is not None:
            transpose.erase()
        ar.erase()
        n += 1
    return n


# ops whose value on one device the splitter evaluates (dynamic_slice offsets: a table of
# offsets indexed by partition_id, or arithmetic on it)
_SCALAR_BINARY = {
    "stablehlo.add": lambda a, b: a + b,
    "stablehlo.subtract": lambda a, b: a - b,
    "stablehlo.multiply": lambda a, b: a * b,
    "stablehlo.divide": lambda a, b: int(a / b) if b else None,  # integer division truncates
    "stablehlo.remainder": lambda a, b: a - b * int(a / b) if b else None,
    "stablehlo.minimum": min,
    "stablehlo.maximum": max,
}


def _device_value(value, partition: int, depth: int = 0):
    """The integer `value` (a scalar or a 1-element tensor) holds on `partition` (one
    replica, SPMD), or None when it is not a function of the partition id alone."""
    if depth > 32:
        return None
    op = value.owner
    op = getattr(op, "operation", op)
    name = getattr(op, "name", None)
    if name == "stablehlo.partition_id":
        return partition
    if name == "stablehlo.replica_id":
        return 0
    if name == "stablehlo.constant":
        try:
            vals = [int(x) for x in ir.DenseIntElementsAttr(op.attributes["value"])]
        except (ValueError, TypeError):
            return None
        return vals[0] if len(vals) == 1 else None
    if name in ("stablehlo.convert", "stablehlo.reshape", "stablehlo.broadcast_in_dim"):
        return _device_value(op.operands[0], partition, depth + 1)
    if name in _SCALAR_BINARY:
        a = _device_value(op.operands[0], partition, depth + 1)
        b = _device_value(op.operands[1], partition, depth + 1)
        return None if a is None or b is None else _SCALAR_BINARY[name](a, b)
    if name == "stablehlo.dynamic_slice" and len(op.operands) == 2:
        table = op.operands[0].owner
        table = getattr(table, "operation", table)
        if getattr(table, "name", None) != "stablehlo.constant":
            return None
        try:
            vals = [int(x) for x in ir.DenseIntElementsAttr(table.attributes["value"])]
        except (ValueError, TypeError):
            return None
        i = _device_value(op.operands[1], partition, depth + 1)
        if i is None or ir.RankedTensorType(op.results[0].type).shape != [1]:
            return None
        return vals[min(max(i, 0), len(vals) - 1)]  # dynamic_slice clamps its start
    return None


def split_all_reduces(module: ir.Operation, num_partitions: int) -> int:
    """XLA GPU's AllReduceSplitter (before ReduceScatterCreator): an all_reduce over all
    `num_partitions` devices whose one user dynamic-slices 1/k of it (1 < k < devices;
    through a transpose, as form_reduce_scatters looks through one),
    each device the slice of its position in consecutive groups of k (hybrid sharding:
    FSDP inside data parallelism), becomes an all_reduce over those groups, the slice,
    and an all_reduce of the slice over the devices holding the same slice (groups
    {g, g+k, ...}) — when the module already has an all_reduce over either set of
    groups (XLA's profitability test). form_reduce_scatters then makes the first a
    reduce-scatter. Returns how many it split."""
    i64 = ir.IntegerType.get_signless(64)
    ars = [op for op in walk_ops(module) if op.name == "stablehlo.all_reduce"]

    def groups_of(op):
        try:
            return [list(map(int, row)) for row in _dense_rows(op.attributes["replica_groups"], "replica_groups")]
        except Exception:  # absent or malformed: not split
            return None

    existing = {tuple(map(tuple, g)) for g in (groups_of(op) for op in ars) if g}
    handles = [0]
    for op in walk_ops(module):
        if "channel_handle" in op.attributes:
            m = re.search(r"handle = (\d+)", str(op.attributes["channel_handle"]))
            if m:
                handles.append(int(m.group(1)))
    next_handle = max(handles) + 1
    n = 0
    for ar in ars:
        if len(ar.results) != 1 or len(ar.operands) != 1 or "use_global_device_ids" not in ar.attributes:
            continue
        if groups_of(ar) != [list(range(num_partitions))]:
            continue
        users = _users(ar.results[0])
        src = ar.results[0]
        if len(users) == 1 and users[0].name == "stablehlo.transpose":
            # a weight gradient transposed to the parameter's layout, then sliced: looked
            # through, as form_reduce_scatters does
            src = users[0].results[0]
            users = _users(src)
        if len(users) != 1 or users[0].name != "stablehlo.dynamic_slice" or users[0].operands[0] != src:
            continue
        ds = users[0]
        if len(_users(ds.results[0])) > 1:
            continue
        full = list(ir.RankedTensorType(src.type).shape)
        part = list(ir.RankedTensorType(ds.results[0].type).shape)
        dims = [d for d in range(len(full)) if full[d] != part[d]]
        if len(dims) != 1 or part[dims[0]] == 0 or full[dims[0]] % part[dims[0]]:
            continue
        dim = dims[0]
        k = full[dim] // part[dim]
        if k in (1, num_partitions) or num_partitions % k:
            continue
        first = [list(range(u, u + k)) for u in range(0, num_partitions, k)]
        second = [list(range(g, num_partitions, k)) for g in range(k)]
        if tuple(map(tuple, first)) not in existing and tuple(map(tuple, second)) not in existing:
            continue  # IsProfitableToSplit
        # a logical reduce-scatter over `first`: device d takes slice d mod k
        offsets = list(ds.operands[1:])
        ok = True
        for d in range(num_partitions):
            for j, off in enumerate(offsets):
                want = (d % k) * part[dim] if j == dim else 0
                if _device_value(off, d) != want:
                    ok = False
                    break
            if not ok:
                break
        if not ok:
            continue

        def make_ar(operand, result_type, groups, where):
            nonlocal next_handle
            with ar.location:
                attrs = {
                    "replica_groups": ir.DenseIntElementsAttr.get(
                        np.array(groups, dtype=np.int64), type=ir.RankedTensorType.get([len(groups), len(groups[0])], i64)
                    ),
                    "channel_handle": ir.Attribute.parse(f"#stablehlo.channel_handle<handle = {next_handle}, type = 1>"),
                    "use_global_device_ids": ar.attributes["use_global_device_ids"],
                }
                next_handle += 1
                with ir.InsertionPoint(where):
                    new = ir.Operation.create(
                        "stablehlo.all_reduce", results=[result_type], operands=[operand], attributes=attrs, regions=1
                    )
                old = ar.regions[0].blocks[0]
                body = new.regions[0].blocks.append(*[a.type for a in old.arguments])
                mapping = {a: b for a, b in zip(old.arguments, body.arguments)}
                with ir.InsertionPoint(body):
                    for o in old.operations:
                        clone = o.operation.clone()
                        for i, v in enumerate(clone.operands):
                            if v in mapping:
                                clone.operands[i] = mapping[v]
                        for r_old, r_new in zip(o.operation.results, clone.results):
                            mapping[r_old] = r_new
            return new

        ar1 = make_ar(ar.operands[0], ar.results[0].type, first, ar)
        ar.results[0].replace_all_uses_with(ar1.results[0])
        ar2 = make_ar(ds.results[0], ds.results[0].type, second, ds)
        # the second all_reduce reads the slice: it goes right after it
        ar2.move_after(ds)
        ds.results[0].replace_all_uses_with(ar2.results[0])
        ar2.operands[0] = ds.results[0]  # (replace_all_uses_with rewired its own operand too)
        ar.erase()
        n += 1
    return n


def _int_attr(module: ir.Operation, name: str) -> int | None:
    return ir.IntegerAttr(module.attributes[name]).value if name in module.attributes else None


def _mesh_sizes(module: ir.Operation) -> dict[str, int]:
    sizes = {}
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "sdy.mesh":
            text = str(op.attributes["mesh"])
            import re

            axes = [int(m) for m in re.findall(r'"[^"]*"\s*=\s*(\d+)', text)]
            name = ir.StringAttr(op.attributes["sym_name"]).value
            sizes[name] = math.prod(axes) if axes else 1
    return sizes


def run(module: ir.Operation, options: dict, session: PassSession) -> None:
    """The pass. Shardy's passes abort the process on an internal CHECK failure, so with
    `isolate=true` (the default where os.fork exists) everything runs in a forked child
    (costmodel.isolation): a crash becomes one error naming the stage."""
    from costmodel import isolation

    if not options.get("isolate", True) or not isolation.isolation_available():
        return _run(module, options, session, isolation.Progress())
    diags = session.diagnostics

    def work(child: ir.Operation, progress):
        child_session = PassSession(
            DiagnosticEngine(diags.source_name),
            output_path=session.output_path,
            input_path=session.input_path,
            chunk_index=session.chunk_index,
            cwd=session.cwd,
        )
        child_session.diagnostics.input_is_bytecode = diags.input_is_bytecode
        # MLIR's own diagnostics (Shardy's warnings, verifier errors) into the child's engine
        child.context.attach_diagnostic_handler(lambda d: child_session.diagnostics.add_mlir([d]) or True)
        failure = None
        try:
            _run(child, options, child_session, progress, isolated=True)
        except PassError as err:
            failure = err
            progress.send_module = False  # (maybe invalid IR; the run failed anyway)
        return child_session.diagnostics.diagnostics, child_session.messages, failure

    try:
        found, messages, failure = isolation.run_isolated(module, work, source_name=diags.source_name)
    except isolation.NativeCrash as crash:
        diags.error(module.location, f"propagate-shardings: {crash}")
        raise PassError("native crash") from None
    diags.diagnostics.extend(found)
    session.messages.extend(messages)
    if failure is not None:
        raise failure


# the most devices a mesh may have (Shardy and the partitioner allocate per device: a mesh
# of 2^30 ran out of memory); no machine we model comes near it
MAX_MESH_DEVICES = 1 << 22
_MESH_AXIS_RE = re.compile(r'"[^"]*"\s*=\s*(\d+)')


def _run(module: ir.Operation, options: dict, session: PassSession, progress, isolated: bool = False) -> None:
    diags = session.diagnostics
    if is_marked_partitioned(module):
        # Partitioning the per-device program again would shard it a second time
        # (shapes divided again, collectives doubled).
        diags.warning(
            module.location,
            f"propagate-shardings: the module is already partitioned ({PARTITIONED_ATTR}); left unchanged",
        )
        return
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "sdy.mesh" and "mesh" in op.attributes:
            devices = math.prod(int(n) for n in _MESH_AXIS_RE.findall(str(op.attributes["mesh"])))
            if devices > MAX_MESH_DEVICES:
                diags.error(
                    op.location,
                    f"propagate-shardings: mesh of {devices:,} devices; at most {MAX_MESH_DEVICES:,} are supported",
                )
                raise PassError("mesh too large")
    explicit = find_global_collective(module)
    if explicit is not None:
        # Shardy's collectives are already in place, on global shapes: partitioning again
        # inserts its own next to them (the audit's all-reduce ran twice)
        diags.error(
            explicit.location,
            f"propagate-shardings: the module holds Shardy's collectives on global shapes ('{explicit.name}', "
            "as propagate-shardings per-device=false writes them); partition the original sharded module instead",
        )
        raise PassError("explicit collectives")
    has_sdy = module_has_shardy(module)
    if not has_sdy:
        if not gspmd.module_has_gspmd_shardings(module):
            return  # nothing sharded: unchanged
        progress.stage("gspmd-to-shardy")
        if not gspmd.convert_module(module, diags):
            if not diags.has_errors:
                diags.error(module.location, "propagate-shardings: cannot convert the GSPMD shardings")
            raise PassError("gspmd")
    elif gspmd.module_has_gspmd_shardings(module):
        diags.warning(
            module.location,
            "propagate-shardings: module has both Shardy and GSPMD (mhlo.sharding) shardings; "
            "the mhlo.sharding strings are ignored",
        )

    progress.stage("inline-calls")
    _inline_private_calls(module, session)
    progress.stage("xla-import-form")
    with module.context:
        # the program as XLA's HLO import gives it to Shardy (costmodel.xla_spmd)
        xla_spmd.broadcasts_as_hlo(module)
        xla_spmd.order_as_hlo(module)
    if any(op.name.startswith("chlo.") for op in walk_ops(module)):
        # Shardy's global-to-local conversion has no rule for CHLO ops (chlo.square of a
        # layer norm): expand them into StableHLO first, as XLA's own import does.
        _run_pipeline(module, LEGALIZE_CHLO, session, progress)
    _run_pipeline(module, PROPAGATE, session, progress)
    with module.context:
        _warn_spatially_sharded_convolutions(module, session)
    progress.stage("xla-strategies")
    with module.context:
        xla_spmd.dot_strategies(module)
        xla_spmd.dynamic_slice_strategies(module)
        xla_spmd.window_and_sort_strategies(module)
    _run_pipeline(module, RESHARDS, session, progress)
    _run_pipeline(module, TO_COLLECTIVES, session, progress)
    with module.context:
        xla_spmd.merge_duplicate_reshards(module)
    if not options["per-device"]:
        return
    before = _constant_values(module)
    with module.context:
        xla_spmd.mark_shardy_reductions(module)  # for reductions_as_xla, after the conversion
    _run_pipeline(module, PAD, session, progress)
    _run_pipeline(module, TO_LOCAL, session, progress, fix_loops=True)
    _repair_new_constants(module, before, session, probe=isolated)
    with module.context:
        # Shardy ends a reduction over a sharded dimension with add all-reduces (a max
        # summed, an argmax's values and indices summed apart): XLA's way instead
        xla_spmd.reductions_as_xla(module)
    progress.stage("per-device-cleanup")

    leftovers = {}
    for op in walk_ops(module):
        if op.name.startswith("sdy.") and op.name not in _ALLOWED_SDY_LOCAL:
            leftovers.setdefault(op.name, op)
    for name, op in leftovers.items():
        diags.error(op.location, f"propagate-shardings: '{name}' was not converted to a per-device op")
    if leftovers:
        raise PassError("leftover sdy ops")

    # one collective per (value, reshard), as XLA's partitioner caches reshards
    # (Shardy reshards once per use: FSDP weights were gathered twice)
    merge_identical_collectives(module)

    sizes = _mesh_sizes(module)
    if options.get("reduce-scatter", True):
        with module.context:
            if "mhlo.num_replicas" not in module.attributes or _int_attr(module, "mhlo.num_replicas") == 1:
                devices = _int_attr(module, "mhlo.num_partitions") or max(
                    [s for k, s in sizes.items() if not k.startswith("maximal_mesh")] + [1]
                )
                split_all_reduces(module, devices)
            form_reduce_scatters(module)

    with module.context:
        i32 = ir.IntegerType.get_signless(32)
        if "mhlo.num_partitions" not in module.attributes:
            n = max([s for k, s in sizes.items() if not k.startswith("maximal_mesh")] + [1])
            module.attributes["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, n)
        if "mhlo.num_replicas" not in module.attributes:
            module.attributes["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
    mark_partitioned(module)


INFO = register_pass(
    PassInfo(
        argument="propagate-shardings",
        summary="Propagate shardings with Shardy and partition into a per-device program with collectives",
        options=(
            PassOption(
                "per-device",
                bool,
                True,
                "export to local (per-device) shapes with stablehlo collectives; false keeps global "
                "shapes with sdy collectives",
            ),
            PassOption(
                "isolate",
                bool,
                True,
                "run Shardy in a forked child process, so that an internal CHECK failure of the native code "
                "becomes one error naming the pass instead of a core dump (POSIX; false runs it in-process)",
            ),
            PassOption(
                "reduce-scatter",
                bool,
                True,
                "an all_reduce whose every user dynamic-slices 1/n of it becomes a reduce_scatter, as XLA's GPU "
                "and TPU pipelines form it (ReduceScatterCreator); false keeps XLA CPU's all_reduce + slice",
            ),
        ),
        run=run,
    )
)
