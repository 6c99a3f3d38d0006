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
   identical collectives of one value merged. A convolution's input is all-gathered
   along a sharded spatial dimension where XLA's partitioner gathers it
   (`convolution_strategies`, before the reshards). The halo exchange XLA's partitioner
   performs for every convolution sharded along a spatial dimension its window spans is
   planned (`plan_halo_exchanges`; a warning where it is not reproduced, an error where
   Shardy's per-device convolution could not be built).
5. (per-device=true, the default) `sdy-pad-for-divisibility` and
   `sdy-convert-global-to-local` (loop block arguments localised around it): local
   shapes, `stablehlo` collectives with replica_groups, channel handles and
   use_global_device_ids; the planned halo exchanges inserted (`exchange_halos`:
   collective-permutes, concatenation, the local convolution unpadded along the
   exchanged dimensions, as XLA's); `mhlo.num_partitions` / `mhlo.num_replicas = 1` set; an
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
    module: ir.Operation,
    stage: tuple[str, str],
    session: PassSession,
    progress,
    fix_loops: bool = False,
    then=None,
) -> None:
    """Run one stage. `fix_loops`: the loop block arguments localised around it; `then`:
    a function run on the result before it is verified (the stage's output may not verify
    until it has run: convolutions whose halos are exchanged)."""
    what, pipeline = stage
    progress.stage(what)
    diags = session.diagnostics
    before = sum(1 for d in diags.diagnostics if d.severity == "error")
    with module.context:
        pm = passmanager.PassManager.parse(pipeline)
        if fix_loops or then is not None:
            pm.enable_verifier(False)  # verified below, once the loops are fixed / `then` has run
        try:
            if fix_loops:
                _mark_loop_block_args(module)
            pm.run(module)
            if fix_loops:
                _fix_loop_block_types(module)
                _unmark_loop_block_args(module)
            if then is not None:
                then()
            if fix_loops or then is not None:
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


# ---------------------------------------------------------------------------
# Halo exchange of convolutions sharded along a spatial dimension (XLA's partitioner)
#
# A convolution whose input is sharded along a spatial dimension that its window spans
# needs rows held by the neighbouring shards. Shardy's global-to-local conversion
# exchanges none (each shard pads its own borders); XLA's SPMD partitioner exchanges the
# halos with collective-permutes, concatenates them onto the local input and runs the
# local convolution unpadded along that dimension. The plan (halo sizes per shard, the
# pieces exchanged, the slice of the valid rows) is computed on the global program,
# after Shardy's reshards, as XLA computes it:
#  * kind "window": the kernel replicated, the output sharded as the input
#    (`PartitionConvolutionTiledOutput` -> `PartitionedHlo::ReshardAsWindowedInput`):
#    forward convolutions and the input gradient;
#  * kind "lhs": input and kernel sharded alike along the spatial dimensions, partial
#    sums all-reduced (`PartitionConvolutionWithSpatialDimensionHaloExchangeOnLHS`):
#    weight gradients;
# and the halos are exchanged by `ExchangeHalo` / `ExchangeHaloAndGetValidData`
# (xla/service/spmd/spmd_partitioner_util.cc), applied to the per-device program once
# the conversion has run. What XLA does not do this way (its other strategies) is said
# in a warning at the convolution.

HALO_WARNING = "sharded along its window"


def _trunc_div(a: int, b: int) -> int:
    """C++ integer division (truncation toward zero), as XLA's offset calculations divide."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _trunc_mod(a: int, b: int) -> int:
    return a - b * _trunc_div(a, b)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _NoHalo(Exception):
    """Why a convolution's halo exchange is not reproduced."""


def _meshes(module: ir.Operation) -> dict:
    """mesh name -> (axis names, device ids shaped by the axis sizes)."""
    out = {}
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "sdy.mesh" or "mesh" not in op.attributes:
            continue
        text = str(op.attributes["mesh"])
        axes = [(a, int(n)) for a, n in re.findall(r'"([^"]*)"\s*=\s*(\d+)', text)]
        ids = re.search(r"device_ids\s*=\s*\[([^\]]*)\]", text)
        count = math.prod(n for _, n in axes)
        devices = [int(x) for x in ids.group(1).split(",") if x.strip()] if ids else list(range(count))
        if not axes or len(devices) != count:
            continue
        out[ir.StringAttr(op.attributes["sym_name"]).value] = (
            [a for a, _ in axes],
            np.array(devices, dtype=np.int64).reshape([n for _, n in axes]),
        )
    return out


def _sharding_dims(value, rank: int):
    """(mesh name, axes per dimension) of the sharding Shardy gave `value`: an axis is its
    name, a sub-axis ("x":(1)2) the tuple (name, pre-size, size); (None, all empty) when
    it has none (replicated); None when it cannot be read here."""
    text = xla_spmd._value_sharding(value)
    if text is None:
        owner = value.owner
        owner = getattr(owner, "operation", owner)
        if isinstance(owner, ir.Operation) and "out_sharding" in owner.attributes:  # an sdy collective
            text = str(owner.attributes["out_sharding"])
            text = text[len("#sdy.sharding") :] if text.startswith("#sdy.sharding") else text
    if text is None:
        return None, [[] for _ in range(rank)]
    m = re.fullmatch(r"<@([\w.$-]+),\s*\[([^\[\]]*)\](.*)>", text.strip(), re.S)
    if not m:
        return None
    dims = []
    for body in re.findall(r"\{([^{}]*)\}", m.group(2)):
        names = []
        for item in (x.strip() for x in body.split(",")):
            if not item or item == "?":
                continue
            axis = re.fullmatch(r'"([^"]*)"(?::\((\d+)\)(\d+))?', item)
            if not axis:  # a priority, or something newer
                return None
            name, pre, size = axis.groups()
            names.append(name if pre is None else (name, int(pre), int(size)))
        dims.append(names)
    return (m.group(1), dims) if len(dims) == rank else None


def _axis_text(axis) -> str:
    return axis if isinstance(axis, str) else f"{axis[0]}:({axis[1]}){axis[2]}"


def _shard_groups(mesh, axes: list) -> list[list[int]]:
    """The devices that hold the shards of a dimension sharded on `axes` (names or
    sub-axes), one row per set of devices that exchange among themselves, ordered by
    shard ordinal. A mesh axis of which a sub-axis is used is split at the sub-axis'
    bounds (pre-size: the product of the more major parts)."""
    names, devices = mesh
    cuts = {i: {1, devices.shape[i]} for i in range(len(names))}
    for a in axes:
        if not isinstance(a, str):
            i = names.index(a[0])
            cuts[i] |= {a[1], a[1] * a[2]}
    pieces = []  # (mesh axis, pre-size, size), major to minor
    for i in range(len(names)):
        bounds = sorted(cuts[i])
        pieces += [(i, lo, hi // lo) for lo, hi in zip(bounds, bounds[1:])]
    split = devices.reshape([p[2] for p in pieces] or [1])
    picked = []
    for a in axes:
        i = names.index(a if isinstance(a, str) else a[0])
        lo, hi = (1, devices.shape[i]) if isinstance(a, str) else (a[1], a[1] * a[2])
        picked += [t for t, p in enumerate(pieces) if p[0] == i and lo <= p[1] and p[1] * p[2] <= hi]
    other = [t for t in range(len(pieces)) if t not in picked]
    n = math.prod(pieces[t][2] for t in picked)
    return split.transpose(other + picked).reshape(-1, n).tolist()


def _halo_layout(S: int, n: int, left: list[int], right: list[int], el: int, size_with_halo: int, const_left: bool):
    """XLA's ExchangeHalo + ExchangeHaloAndGetValidData (non-compact, unmasked) for a
    dimension of local size S over n shards, with the halo sizes of each shard: the
    pieces to concatenate (("cp", slice start, slice limit, distance, "left"/"right") or
    ("self", start, limit)), the zero padding of the concatenation and the slice of the
    valid rows ("static" or "dynamic" with an offset per shard ordinal)."""
    if el == left[0]:
        max_halo = max(max(left), max(right))
        max_shard = S + max(a + b for a, b in zip(left, right))
        if max_shard == size_with_halo and max_halo > 2 * size_with_halo:
            raise _NoHalo("its halo spans several shards (XLA's compact halo exchange)")
    max_left = max(left[1:])
    max_right = max(right[:-1])
    if max_left + max_right + S >= S * n and (max_left > S or max_right > S):
        raise _NoHalo("its halo is wider than the neighbouring shards (XLA gathers the dimension instead)")
    left_bound = -max(left)
    right_bound = S + max(right)
    if left_bound >= right_bound:
        raise _NoHalo("no shard holds rows its window reads")
    pieces = []
    i = _ceil_div(max_left, S) - 1
    while i >= 0 and (-i - 1) * S < right_bound:
        incl = min(max_left - S * i, S)
        skips = max(-i * S - right_bound, 0)
        pieces.append(("cp", S - incl, S - skips, i + 1, "left"))
        i -= 1
    if left_bound < S and right_bound > 0:
        pieces.append(("self", max(0, left_bound), min(S, right_bound)))
    skipped = min(max(left_bound - S, 0), max(max_right, 0)) // S
    for i in range(skipped, _ceil_div(max_right, S)):
        incl = min(max_right - S * i, S)
        skips = max(left_bound - (i + 1) * S, 0)
        pieces.append(("cp", skips, incl, i + 1, "right"))
    concat = sum(p[2] - p[1] for p in pieces)
    max_left_or_pad = max(max_left, el)
    offsets = [max_left_or_pad - a for a in left]
    pad_lo = max(0, max_left_or_pad - max(0, max_left))
    pad_hi = max(0, max(offsets) + size_with_halo - concat - pad_lo)
    total = concat + pad_lo + pad_hi
    if total < size_with_halo:
        raise _NoHalo("the exchanged rows do not cover its window")
    valid = None
    if total != size_with_halo:
        valid = ("static", None) if const_left and left[0] == el else ("dynamic", offsets)
    return {"pieces": pieces, "pad": (pad_lo, pad_hi), "valid": valid, "size": size_with_halo}


def _i64s(op, name: str, n: int, default: int) -> list[int]:
    if name not in op.attributes:
        return [default] * n
    return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[name])]


def _conv_padding(op, nsp: int) -> list[list[int]]:
    if "padding" not in op.attributes:
        return [[0, 0] for _ in range(nsp)]
    flat = [int(x) for x in ir.DenseIntElementsAttr(op.attributes["padding"])]
    return [flat[2 * i : 2 * i + 2] for i in range(nsp)]


def _reversed(op, nsp: int) -> list[bool]:
    if "window_reversal" not in op.attributes:
        return [False] * nsp
    return [bool(x) for x in ir.DenseBoolArrayAttr(op.attributes["window_reversal"])]


# A convolution XLA partitions by all-gathering its input along a sharded spatial
# dimension, where Shardy's explicit reshards would do otherwise; set before
# `sdy-insert-explicit-reshards` by `convolution_strategies`, read (and removed) by
# `plan_halo_exchanges`: the spatial dimensions (indices into the spatial dimensions)
# whose input is gathered and whose output stays sharded (each shard's window then cut
# from the gathered input, as XLA's windowed-input reshard of a replicated operand).
GATHERED_WINDOW_ATTR = "costmodel.conv_gathered_window"


def convolution_strategies(module: ir.Operation, session: PassSession) -> int:
    """After propagation, before `sdy-insert-explicit-reshards`: a convolution whose
    input is sharded along a spatial dimension its window spans, where XLA's partitioner
    gathers that dimension (`PartitionConvolution` finds no strategy that keeps it
    sharded with the kernel as it is), has its input resharded (Shardy all-gathers it):
      * feature_group_count > 1 that is not a depthwise convolution (XLA's tiled-output
        and halo strategies reject it): the output is annotated replicated along those
        dimensions as well, so the convolution runs whole on every device and Shardy
        slices the result for its users (XLA: all-gather, the whole convolution, a
        dynamic-slice);
      * a window larger than the output (kernel size > output size along the dimension):
        Shardy's sharding rule then shards the replicated kernel along the window (its
        window-size factor is major) and all-reduces partial sums, which XLA never does
        with a replicated kernel: where the output is sharded along that dimension as the
        input (XLA's windowed input, here from the replicated operand: each shard's
        window cut from the gathered input) the dimensions are marked for
        `plan_halo_exchanges` (GATHERED_WINDOW_ATTR); otherwise the output is annotated
        replicated there too (XLA gathers the input and runs the whole convolution).
    Returns how many convolutions changed."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    changed = 0
    for op in list(walk_ops(module)):
        if op.name != "stablehlo.convolution":
            continue
        try:
            dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
            lhs_t, rhs_t, out_t = (ir.RankedTensorType(t) for t in (op.operands[0].type, op.operands[1].type, op.results[0].type))
        except (ValueError, TypeError, KeyError):
            continue
        if not (lhs_t.has_static_shape and rhs_t.has_static_shape and out_t.has_static_shape):
            continue
        lhs = xla_spmd._value_sharding(op.operands[0])
        owner = op.operands[0].owner
        owner = getattr(owner, "operation", owner)
        if lhs is None and isinstance(owner, ir.Operation) and owner.name in ("sdy.sharding_constraint", "sdy.reshard"):
            lhs = str(owner.attributes["sharding"])[len("#sdy.sharding"):]
        lhs = xla_spmd._parse_dims(lhs) if lhs is not None else None
        if "sdy.sharding" in op.attributes:
            outs = xla_spmd.sharding_list(op.attributes["sdy.sharding"])
            out = xla_spmd._parse_dims(outs[0][len("#sdy.sharding"):]) if outs and len(outs) == 1 else None
        else:  # replicated
            out = (lhs[0] if lhs is not None else None, [[] for _ in range(out_t.rank)])
        rhs = xla_spmd._value_sharding(op.operands[1])
        rhs = xla_spmd._parse_dims(rhs) if rhs is not None else (None, [[] for _ in range(rhs_t.rank)])
        if lhs is None or out is None or rhs is None or len(lhs[1]) != lhs_t.rank or len(out[1]) != out_t.rank:
            continue
        mesh, ldims = lhs
        odims = out[1]
        if out[0] != mesh or (rhs[0] not in (None, mesh)):
            continue
        isp, ksp, osp = dn.input_spatial_dimensions, dn.kernel_spatial_dimensions, dn.output_spatial_dimensions
        if any(rhs[1][k] for k in ksp):
            continue  # the kernel sharded along its window: XLA's halo exchange on the input (kind "lhs")
        fgc = ir.IntegerAttr(op.attributes["feature_group_count"]).value if "feature_group_count" in op.attributes else 1
        grouped = fgc > 1 and fgc != lhs_t.shape[dn.input_feature_dimension]
        rhs_dil = _i64s(op, "rhs_dilation", len(isp), 1)
        lhs_dil = _i64s(op, "lhs_dilation", len(isp), 1)
        padding, reverse = _conv_padding(op, len(isp)), _reversed(op, len(isp))
        whole, windowed = [], []
        for j, (d, k, o) in enumerate(zip(isp, ksp, osp)):
            if not ldims[d] or 1 + (rhs_t.shape[k] - 1) * rhs_dil[j] <= 1:
                continue
            if (
                lhs_t.shape[d] == rhs_t.shape[k]
                and lhs_dil[j] == rhs_dil[j] == 1
                and padding[j] == [0, 0]
                and not reverse[j]
            ):
                continue  # one window over the whole dimension: a contraction to XLA (dot_as_convolution_util)
            if grouped:
                whole.append(j)
            elif out_t.shape[o] < rhs_t.shape[k]:  # Shardy's window-size factor is the major one
                (windowed if odims[o] == ldims[d] and lhs_dil[j] == 1 else whole).append(j)
        if not whole and not windowed:
            continue
        if grouped and windowed:
            whole, windowed = whole + windowed, []
        new_lhs = [[] if d in [isp[j] for j in whole + windowed] else axes for d, axes in enumerate(ldims)]
        op.operands[0] = xla_spmd._reshard(op.operands[0], mesh, new_lhs, op)
        if whole:
            new_out = [[] if o in [osp[j] for j in whole] else axes for o, axes in enumerate(odims)]
            op.attributes["sdy.sharding"] = ir.Attribute.parse(
                "#sdy.sharding_per_value<[" + xla_spmd._dims_text(mesh, new_out) + "]>"
            )
        if windowed:
            with op.context:
                op.attributes[GATHERED_WINDOW_ATTR] = ir.DenseI64ArrayAttr.get(sorted(windowed))
        changed += 1
    return changed


def _plan_convolution(op, meshes: dict):
    """The halo exchange XLA's partitioner performs for one convolution of the global
    program (after Shardy's reshards), or None when its input is not sharded along a
    spatial dimension. Raises _NoHalo(reason) when XLA exchanges halos another way."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    types = [op.operands[0].type, op.operands[1].type, op.results[0].type]
    if any(t.typeid != ir.RankedTensorType.static_typeid for t in types):
        return None
    lhs_t, rhs_t, out_t = (ir.RankedTensorType(t) for t in types)
    if not (lhs_t.has_static_shape and rhs_t.has_static_shape and out_t.has_static_shape):
        return None
    isp, ksp = list(dn.input_spatial_dimensions), list(dn.kernel_spatial_dimensions)
    osp = list(dn.output_spatial_dimensions)
    nsp = len(isp)
    lhs = _sharding_dims(op.operands[0], lhs_t.rank)
    if lhs is None:
        raise _NoHalo("its input's sharding cannot be read")
    mesh_name, ldims = lhs
    sharded = [j for j in range(nsp) if ldims[isp[j]]]
    if not sharded and GATHERED_WINDOW_ATTR not in op.attributes:
        return None
    strides = _i64s(op, "window_strides", nsp, 1)
    lhs_dil = _i64s(op, "lhs_dilation", nsp, 1)
    rhs_dil = _i64s(op, "rhs_dilation", nsp, 1)
    padding = _conv_padding(op, nsp)
    reverse = _reversed(op, nsp)
    fgc = ir.IntegerAttr(op.attributes["feature_group_count"]).value if "feature_group_count" in op.attributes else 1
    mesh = meshes.get(mesh_name)
    if mesh is None:
        raise _NoHalo(f"its mesh @{mesh_name} is not a named mesh of this module")
    rhs = _sharding_dims(op.operands[1], rhs_t.rank)
    out = _sharding_dims(op.results[0], out_t.rank)
    if rhs is None or out is None:
        raise _NoHalo("its kernel's or output's sharding cannot be read")
    if any(m not in (None, mesh_name) for m in (rhs[0], out[0])):
        raise _NoHalo("its operands are sharded over different meshes")
    rdims, odims = rhs[1], out[1]
    if GATHERED_WINDOW_ATTR in op.attributes:
        gathered = [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[GATHERED_WINDOW_ATTR])]
        return _plan_gathered_window(op, mesh, gathered, odims, (lhs_t, rhs_t, out_t), (isp, ksp, osp))
    kernel_spatial = [rdims[ksp[j]] for j in range(nsp)]
    bgc = ir.IntegerAttr(op.attributes["batch_group_count"]).value if "batch_group_count" in op.attributes else 1
    contracting = ldims[dn.input_feature_dimension]
    if not any(rdims) or (
        contracting
        and rdims[dn.kernel_input_feature_dimension] == contracting
        and not any(a for r, a in enumerate(rdims) if r != dn.kernel_input_feature_dimension)
    ):
        # the kernel replicated, or sharded only on the input features as the input is
        # (partial sums, all-reduced after the convolution)
        kind = "window"
        if odims[dn.output_feature_dimension]:
            raise _NoHalo("its output features are sharded")
        if contracting and (rdims[dn.kernel_input_feature_dimension] != contracting or fgc > 1 or bgc > 1):
            raise _NoHalo("its input features are sharded")
        if odims[dn.output_batch_dimension] != ldims[dn.input_batch_dimension] or any(
            odims[osp[j]] != ldims[isp[j]] for j in range(nsp)
        ):
            raise _NoHalo("its output is sharded differently from its input")
    elif any(kernel_spatial) and all(kernel_spatial[j] == ldims[isp[j]] for j in range(nsp)):
        kind = "lhs"
        if ldims[dn.input_batch_dimension] or rdims[dn.kernel_output_feature_dimension]:
            raise _NoHalo("its batch or output feature dimension is sharded")
        if rdims[dn.kernel_input_feature_dimension] != ldims[dn.input_feature_dimension]:
            raise _NoHalo("its input and kernel feature dimensions are sharded differently")
        if fgc > 1 and ldims[dn.input_feature_dimension]:
            raise _NoHalo("its feature groups are sharded")
        if any(lhs_dil[j] != 1 for j in sharded):
            raise _NoHalo("it dilates its input (lhs_dilation) along the sharded dimension")
        if any(reverse[j] for j in sharded):
            raise _NoHalo("it reverses its window along the sharded dimension")
    else:
        raise _NoHalo("its kernel is sharded")
    dims = []
    for j in sorted(sharded, key=lambda j: isp[j]) if kind == "window" else sharded:
        d = isp[j]
        groups = _shard_groups(mesh, ldims[d])
        n = len(groups[0])
        N = lhs_t.shape[d]
        S = _ceil_div(N, n)
        k = rhs_t.shape[ksp[j]]
        s, B, D = strides[j], lhs_dil[j], rhs_dil[j]
        lo, hi = padding[j]
        if kind == "window":
            K = 1 + (k - 1) * D
            full = 1 + (N - 1) * B + lo + hi
            if full < K:
                raise _NoHalo("its window is larger than the padded input")
            wc = (full - K) // s + 1
            if wc < n:
                raise _NoHalo("it has fewer output rows than shards (XLA trims the shards)")
            W = _ceil_div(wc, n)
            el, swd_lo, swd_hi = _trunc_div(lo, B), _trunc_mod(lo, B), 0
            if s != 1 and (s * W) % B:
                raise _NoHalo("its stride and input dilation do not align with the shards")
            span = s * (W - 1) + K
            start = [_trunc_div(s * W * i + B - 1 - swd_lo, B) for i in range(n)]
            limit = [_trunc_div(s * W * i + span + B - 1 - swd_lo, B) for i in range(n)]
            size = max(b - a for a, b in zip(start, limit))
            if B != 1:
                first = [start[i] * B + swd_lo - s * W * i for i in range(n)]
                for i in range(n):
                    swd_hi = max(swd_hi, span - (first[i] + (size - 1) * B + 1))
                if s == 1 and any(f != swd_lo for f in first):
                    raise _NoHalo(
                        "its dilated input's shards start at different window offsets (XLA slices the output)"
                    )
            left = [S * i + el - start[i] for i in range(n)]
            right = [limit[i] - (S * i + S + el) for i in range(n)]
            const_left = B == 1 and S == s * W
            new_pad = [swd_lo, swd_hi]
            expect = {"in": S, "out": W}
        else:
            R = _ceil_div(k, n)
            wc = 1 + (lo + hi + N - (1 + (k - 1) * D)) // s
            el = lo
            left = [(S - R * D) * i + lo for i in range(n)]
            right = [(R * D - S) * (i + 1) + 1 - D + s * (wc - 1) - lo for i in range(n)]
            size = s * (wc - 1) + (R - 1) * D + 1
            const_left = S == R * D
            new_pad = [0, 0]
            expect = {"in": S, "kernel": R, "out": out_t.shape[osp[j]]}
        layout = _halo_layout(S, n, left, right, el, size, const_left)
        pieces = layout["pieces"]
        if (
            not any(p[0] == "cp" for p in pieces)
            and pieces == [("self", 0, S)]
            and layout["pad"] == (0, 0)
            and layout["valid"] is None
            and new_pad == [lo, hi]
        ):
            continue  # nothing to exchange or cut (a window that stays within each shard)
        dims.append({"spatial": j, "dim": d, "groups": groups, "layout": layout, "pad": new_pad, "expect": expect})
    if not dims:
        return None
    # (the per-device convolution is recognised by its place and checked against these)
    return {"kind": kind, "dims": dims, "lhs": list(lhs_t.shape), "dn": str(op.attributes["dimension_numbers"])}


def _plan_gathered_window(op, mesh, gathered: list[int], odims, types, spatial):
    """The plan of a convolution `convolution_strategies` marked: its input gathered
    along the spatial dimensions `gathered` (by Shardy), its output sharded there. As
    XLA's `ReshardAsWindowedInput` of a replicated operand: the gathered input padded and
    each shard's window rows dynamic-sliced (offsets by shard ordinal), the local
    convolution unpadded along that dimension. No collective beyond the gather."""
    lhs_t, rhs_t, out_t = types
    isp, ksp, osp = spatial
    nsp = len(isp)
    strides = _i64s(op, "window_strides", nsp, 1)
    lhs_dil = _i64s(op, "lhs_dilation", nsp, 1)
    rhs_dil = _i64s(op, "rhs_dilation", nsp, 1)
    padding = _conv_padding(op, nsp)
    dims = []
    for j in gathered:
        d, o = isp[j], osp[j]
        if not odims[o]:
            raise _NoHalo("its output is not sharded along the gathered dimension")
        if lhs_dil[j] != 1:
            raise _NoHalo("it dilates its input (lhs_dilation) along the sharded dimension")
        groups = _shard_groups(mesh, odims[o])
        n = len(groups[0])
        N, k, s, D = lhs_t.shape[d], rhs_t.shape[ksp[j]], strides[j], rhs_dil[j]
        lo, hi = padding[j]
        K = 1 + (k - 1) * D
        wc = (N + lo + hi - K) // s + 1
        if wc != out_t.shape[o] or wc < 1:
            raise _NoHalo("its output size is not its window's")
        W = _ceil_div(wc, n)
        span = s * (W - 1) + K
        start = [s * W * i - lo for i in range(n)]
        pad_lo = max(0, -min(start))
        pad_hi = max(0, max(start) + span - N)
        layout = {"gathered": True, "pad": (pad_lo, pad_hi), "offsets": [a + pad_lo for a in start], "size": span}
        dims.append({"spatial": j, "dim": d, "groups": groups, "layout": layout, "pad": [0, 0],
                     "expect": {"in": N, "out": W}})
    return {"kind": "window", "dims": dims, "lhs": list(lhs_t.shape), "dn": str(op.attributes["dimension_numbers"])}


def _permutes(plan) -> int:
    return sum(sum(p[0] == "cp" for p in d["layout"].get("pieces", ())) for d in plan["dims"])


def _spanned(op, dims_of_lhs) -> str:
    """'spatial dimension 0 on x, ...': the sharded spatial dimensions its window spans."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    try:
        dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
        kernel = ir.RankedTensorType(op.operands[1].type).shape
    except (ValueError, TypeError, KeyError):
        return ""
    return ", ".join(
        f"spatial dimension {n} on {'/'.join(_axis_text(a) for a in dims_of_lhs[d])}"
        for n, (d, k) in enumerate(zip(dn.input_spatial_dimensions, dn.kernel_spatial_dimensions))
        if d < len(dims_of_lhs) and dims_of_lhs[d] and kernel[k] > 1
    )


def plan_halo_exchanges(module: ir.Operation, session: PassSession, per_device: bool = True) -> list:
    """On the global program after Shardy's reshards: the halo exchange of every
    convolution (None where there is none), in walk order. A convolution whose input is
    sharded along a dimension its window spans and whose exchange is not reproduced gets
    a warning saying why; with per_device=false, one that is reproduced gets a warning that
    only the per-device program carries it."""
    meshes = _meshes(module)
    plans = []
    unsupported = []
    for op in walk_ops(module):
        if op.name != "stablehlo.convolution":
            continue
        try:
            try:
                plan = _plan_convolution(op, meshes)
            finally:
                if GATHERED_WINDOW_ATTR in op.attributes:
                    del op.attributes[GATHERED_WINDOW_ATTR]
        except _NoHalo as why:
            plan = None
            lhs = _sharding_dims(op.operands[0], ir.RankedTensorType(op.operands[0].type).rank)
            what = _spanned(op, lhs[1]) if lhs is not None else "an unread sharding"
            bad = _local_shape_mismatch(op, meshes) if per_device else ""
            if bad:
                unsupported.append(op)
                session.diagnostics.error(
                    op.location,
                    f"propagate-shardings: unsupported sharded convolution: its input is {HALO_WARNING} ({bad}) "
                    f"and {why}; XLA's partitioner moves rows between the shards to compute it, which is not "
                    "reproduced here, and Shardy's per-device convolution cannot produce its output shard",
                )
            elif what:
                session.diagnostics.warning(
                    op.location,
                    f"propagate-shardings: this convolution's input is {HALO_WARNING} ({what}): XLA's "
                    "partitioner first moves the rows the window reads between the shards (collective-permutes, "
                    f"or an all-gather), which is not reproduced here because {why}, so the per-device program "
                    "lacks that communication",
                )
        except (ValueError, TypeError, KeyError):
            plan = None
        if plan is not None and not per_device:
            n = _permutes(plan)
            what = (
                f"the {n} collective-permute(s) of XLA's halo exchange are"
                if n
                else "the slices of each shard's window rows (XLA's windowed input) are"
            )
            session.diagnostics.warning(
                op.location,
                f"propagate-shardings: this convolution's input is {HALO_WARNING}: {what} added to the per-device "
                "program only (per-device=true)",
            )
        plans.append(plan)
    if unsupported:
        raise PassError("unsupported sharded convolution")
    return plans


def _local_shape_mismatch(op, meshes: dict) -> str:
    """For a convolution whose halo exchange is not reproduced: '' when the local
    convolution Shardy makes (each operand's shard, the window unchanged) has its output
    shard's shape, else which dimension does not ('spatial dimension 0: 5 rows over 4
    shards (x), 3 output rows over 4 shards')."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    types = [ir.RankedTensorType(v.type) for v in (op.operands[0], op.operands[1], op.results[0])]
    shardings = [_sharding_dims(v, t.rank) for v, t in zip((op.operands[0], op.operands[1], op.results[0]), types)]
    if any(sh is None for sh in shardings):
        return ""

    def count(mesh_name, axes) -> int:
        mesh = meshes.get(mesh_name)
        if mesh is None:
            return 0
        names, devices = mesh
        return math.prod(devices.shape[names.index(a)] if isinstance(a, str) else a[2] for a in axes)

    nsp = len(dn.input_spatial_dimensions)
    strides = _i64s(op, "window_strides", nsp, 1)
    lhs_dil, rhs_dil = _i64s(op, "lhs_dilation", nsp, 1), _i64s(op, "rhs_dilation", nsp, 1)
    padding = _conv_padding(op, nsp)
    for j, dims in enumerate(zip(dn.input_spatial_dimensions, dn.kernel_spatial_dimensions, dn.output_spatial_dimensions)):
        parts = [count(sh[0], sh[1][d]) if sh[1][d] else 1 for sh, d in zip(shardings, dims)]
        if 0 in parts:
            return ""
        local = [_ceil_div(t.shape[d], p) for t, d, p in zip(types, dims, parts)]
        lo, hi = padding[j]
        if _conv_output_size(local[0], local[1], strides[j], lo, hi, lhs_dil[j], rhs_dil[j]) != local[2]:
            axes = "/".join(_axis_text(a) for a in shardings[0][1][dims[0]]) or "-"
            return (
                f"spatial dimension {j}: {types[0].shape[dims[0]]} rows over {parts[0]} shards ({axes}), "
                f"{types[2].shape[dims[2]]} output rows over {parts[2]}"
            )
    return ""


def _conv_output_size(in_size: int, k: int, s: int, lo: int, hi: int, B: int, D: int) -> int:
    return ((in_size - 1) * B + 1 + lo + hi - (1 + (k - 1) * D)) // s + 1


def fit_padded_convolutions(module: ir.Operation, plans: list) -> int:
    """After sdy-pad-for-divisibility (run without the verifier): a convolution whose
    output or input it padded along a dimension whose halos are exchanged (30 rows over 4
    devices: 32) no longer verifies; its high padding along that dimension is set to
    produce the rows of its result type. The per-device convolution's padding there is
    then set by the halo exchange (`exchange_halos`), as XLA computes each shard's rows.
    Returns how many it changed."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    convs = [op for op in walk_ops(module) if op.name == "stablehlo.convolution"]
    if len(convs) != len(plans):
        return 0
    changed = 0
    for op, plan in zip(convs, plans):
        if plan is None:
            continue
        dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
        nsp = len(dn.input_spatial_dimensions)
        lhs = ir.RankedTensorType(op.operands[0].type).shape
        rhs = ir.RankedTensorType(op.operands[1].type).shape
        out = ir.RankedTensorType(op.results[0].type).shape
        strides = _i64s(op, "window_strides", nsp, 1)
        lhs_dil, rhs_dil = _i64s(op, "lhs_dilation", nsp, 1), _i64s(op, "rhs_dilation", nsp, 1)
        padding = _conv_padding(op, nsp)
        touched = False
        for d in plan["dims"]:
            j = d["spatial"]
            i, k, o = dn.input_spatial_dimensions[j], dn.kernel_spatial_dimensions[j], dn.output_spatial_dimensions[j]
            lo, hi = padding[j]
            if _conv_output_size(lhs[i], rhs[k], strides[j], lo, hi, lhs_dil[j], rhs_dil[j]) == out[o]:
                continue
            window = 1 + (rhs[k] - 1) * rhs_dil[j]
            padding[j][1] = (out[o] - 1) * strides[j] + window - ((lhs[i] - 1) * lhs_dil[j] + 1) - lo
            touched = True
        if touched:
            _set_conv_padding(op, padding)
            changed += 1
    return changed


def _set_conv_padding(op, padding: list[list[int]]) -> None:
    i64 = ir.IntegerType.get_signless(64)
    with op.location:
        op.attributes["padding"] = ir.DenseIntElementsAttr.get(
            np.array(padding, dtype=np.int64).reshape(len(padding), 2),
            type=ir.RankedTensorType.get([len(padding), 2], i64),
        )


def _create(name: str, results: list, operands: list, attributes: dict | None = None):
    return ir.Operation.create(name, results=results, operands=operands, attributes=attributes or {}).results[0]


def _slice(value, dim: int, start: int, limit: int):
    t = ir.RankedTensorType(value.type)
    shape = list(t.shape)
    starts, limits = [0] * len(shape), list(shape)
    starts[dim], limits[dim] = start, limit
    shape[dim] = limit - start
    return _create(
        "stablehlo.slice",
        [ir.RankedTensorType.get(shape, t.element_type)],
        [value],
        {
            "start_indices": ir.DenseI64ArrayAttr.get(starts),
            "limit_indices": ir.DenseI64ArrayAttr.get(limits),
            "strides": ir.DenseI64ArrayAttr.get([1] * len(shape)),
        },
    )


def _with_dim(t, dim: int, size: int):
    t = ir.RankedTensorType(t)
    shape = list(t.shape)
    shape[dim] = size
    return ir.RankedTensorType.get(shape, t.element_type)


def _partition_table(values: list[int], partitions: int, made: set):
    """values[partition_id] as a scalar i32, the way XLA and Shardy index their tables."""
    i32 = ir.IntegerType.get_signless(32)
    table_attr = ir.DenseIntElementsAttr.get(
        np.array(values, dtype=np.int32), type=ir.RankedTensorType.get([partitions], i32)
    )
    made.add(table_attr)
    table = _create("stablehlo.constant", [table_attr.type], [], {"value": table_attr})
    pid = _create("stablehlo.partition_id", [ir.RankedTensorType.get([], ir.IntegerType.get_unsigned(32))], [])
    index = _create("stablehlo.convert", [ir.RankedTensorType.get([], i32)], [pid])
    one = _create(
        "stablehlo.dynamic_slice",
        [ir.RankedTensorType.get([1], i32)],
        [table, index],
        {"slice_sizes": ir.DenseI64ArrayAttr.get([1])},
    )
    return _create("stablehlo.reshape", [ir.RankedTensorType.get([], i32)], [one])


def _build_exchange(value, d: dict, partitions: int, handles: list, made: set):
    """The ops of one dimension's halo exchange, at the current insertion point; returns
    the local input with its halos."""
    dim, groups, layout = d["dim"], d["groups"], d["layout"]
    i64 = ir.IntegerType.get_signless(64)
    if layout.get("gathered"):
        return _window_of_gathered(value, d, partitions, made)
    n = len(groups[0])
    S = ir.RankedTensorType(value.type).shape[dim]
    pieces = []
    for piece in layout["pieces"]:
        start, limit = piece[1], piece[2]
        src = value if (start, limit) == (0, S) else _slice(value, dim, start, limit)
        if piece[0] == "self":
            pieces.append(src)
            continue
        dist = piece[3]
        if piece[4] == "left":  # from the shard `dist` before
            pairs = [(g[j - dist], g[j]) for g in groups for j in range(dist, n)]
        else:  # from the shard `dist` after
            pairs = [(g[j], g[j - dist]) for g in groups for j in range(dist, n)]
        pairs.sort(key=lambda p: (p[1], p[0]))
        handles[0] += 1
        pieces.append(
            _create(
                "stablehlo.collective_permute",
                [src.type],
                [src],
                {
                    "source_target_pairs": ir.DenseIntElementsAttr.get(
                        np.array(pairs, dtype=np.int64).reshape(len(pairs), 2),
                        type=ir.RankedTensorType.get([len(pairs), 2], i64),
                    ),
                    "channel_handle": ir.Attribute.parse(f"#stablehlo.channel_handle<handle = {handles[0]}, type = 1>"),
                },
            )
        )
    total = sum(ir.RankedTensorType(p.type).shape[dim] for p in pieces)
    out = pieces[0]
    if len(pieces) > 1:
        out = _create(
            "stablehlo.concatenate",
            [_with_dim(value.type, dim, total)],
            pieces,
            {"dimension": ir.IntegerAttr.get(i64, dim)},
        )
    pad_lo, pad_hi = layout["pad"]
    if pad_lo or pad_hi:
        elem = ir.RankedTensorType(value.type).element_type
        zero_attr = _zero_like(ir.RankedTensorType.get([], elem))
        zero = _create("stablehlo.constant", [zero_attr.type], [], {"value": zero_attr})
        rank = ir.RankedTensorType(value.type).rank
        lows, highs = [0] * rank, [0] * rank
        lows[dim], highs[dim] = pad_lo, pad_hi
        total += pad_lo + pad_hi
        out = _create(
            "stablehlo.pad",
            [_with_dim(value.type, dim, total)],
            [out, zero],
            {
                "edge_padding_low": ir.DenseI64ArrayAttr.get(lows),
                "edge_padding_high": ir.DenseI64ArrayAttr.get(highs),
                "interior_padding": ir.DenseI64ArrayAttr.get([0] * rank),
            },
        )
    valid = layout["valid"]
    size = layout["size"]
    if valid is not None and valid[0] == "static":
        out = _slice(out, dim, 0, size)
    elif valid is not None:
        ordinal = {dev: j for g in groups for j, dev in enumerate(g)}
        offsets = [valid[1][ordinal.get(p, 0)] for p in range(partitions)]
        offset = _partition_table(offsets, partitions, made)
        i32 = ir.IntegerType.get_signless(32)
        zero_attr = ir.DenseIntElementsAttr.get_splat(ir.RankedTensorType.get([], i32), ir.IntegerAttr.get(i32, 0))
        zero = _create("stablehlo.constant", [zero_attr.type], [], {"value": zero_attr})
        rank = ir.RankedTensorType(value.type).rank
        starts = [offset if r == dim else zero for r in range(rank)]
        sizes = list(ir.RankedTensorType(out.type).shape)
        sizes[dim] = size
        out = _create(
            "stablehlo.dynamic_slice",
            [_with_dim(value.type, dim, size)],
            [out, *starts],
            {"slice_sizes": ir.DenseI64ArrayAttr.get(sizes)},
        )
    return out


def _pad_dim(value, dim: int, lo: int, hi: int):
    t = ir.RankedTensorType(value.type)
    zero_attr = _zero_like(ir.RankedTensorType.get([], t.element_type))
    zero = _create("stablehlo.constant", [zero_attr.type], [], {"value": zero_attr})
    lows, highs = [0] * t.rank, [0] * t.rank
    lows[dim], highs[dim] = lo, hi
    return _create(
        "stablehlo.pad",
        [_with_dim(value.type, dim, t.shape[dim] + lo + hi)],
        [value, zero],
        {
            "edge_padding_low": ir.DenseI64ArrayAttr.get(lows),
            "edge_padding_high": ir.DenseI64ArrayAttr.get(highs),
            "interior_padding": ir.DenseI64ArrayAttr.get([0] * t.rank),
        },
    )


def _dynamic_slice_dim(value, dim: int, offsets: list[int], size: int, groups: list, partitions: int, made: set):
    """`size` rows of `value` along `dim` from offsets[shard ordinal] on each device."""
    ordinal = {dev: j for g in groups for j, dev in enumerate(g)}
    offset = _partition_table([offsets[ordinal.get(p, 0)] for p in range(partitions)], partitions, made)
    i32 = ir.IntegerType.get_signless(32)
    zero_attr = ir.DenseIntElementsAttr.get_splat(ir.RankedTensorType.get([], i32), ir.IntegerAttr.get(i32, 0))
    zero = _create("stablehlo.constant", [zero_attr.type], [], {"value": zero_attr})
    rank = ir.RankedTensorType(value.type).rank
    sizes = list(ir.RankedTensorType(value.type).shape)
    sizes[dim] = size
    return _create(
        "stablehlo.dynamic_slice",
        [_with_dim(value.type, dim, size)],
        [value, *[offset if r == dim else zero for r in range(rank)]],
        {"slice_sizes": ir.DenseI64ArrayAttr.get(sizes)},
    )


def _window_of_gathered(value, d: dict, partitions: int, made: set):
    """Each shard's window rows of an input gathered along d["dim"] (XLA's windowed input
    of a replicated operand): padded, then dynamic-sliced at the shard's offset."""
    layout = d["layout"]
    pad_lo, pad_hi = layout["pad"]
    if pad_lo or pad_hi:
        value = _pad_dim(value, d["dim"], pad_lo, pad_hi)
    return _dynamic_slice_dim(value, d["dim"], layout["offsets"], layout["size"], d["groups"], partitions, made)


def exchange_halos(module: ir.Operation, plans: list, session: PassSession) -> set:
    """On the per-device program (after sdy-convert-global-to-local, before it is
    verified): every planned convolution's halo exchange is inserted before it (slices,
    collective-permutes over the devices of its mesh axes with fresh channel handles,
    the concatenation, and the slice of each shard's valid rows) and the convolution
    reads the result, unpadded along the exchanged dimensions (the padding XLA gives the
    shard's window). The shapes Shardy made are checked against the plan first; a
    convolution whose shapes differ keeps Shardy's form, with a warning. Returns the
    constant attributes it made (tables indexed by partition id)."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    made: set = set()
    if not any(p is not None for p in plans):
        return made
    convs = [op for op in walk_ops(module) if op.name == "stablehlo.convolution"]
    if len(convs) != len(plans):
        session.diagnostics.warning(
            module.location,
            f"propagate-shardings: the per-device program has {len(convs)} convolutions, the global one "
            f"{len(plans)}; no halo exchange added, so the per-device program lacks that communication",
        )
        return made
    handles = [0]
    for op in walk_ops(module):
        if "channel_handle" in op.attributes:
            m = re.search(r"handle = (\d+)", str(op.attributes["channel_handle"]))
            if m:
                handles[0] = max(handles[0], int(m.group(1)))
    meshes = _meshes(module)
    partitions = max(
        [_int_attr(module, "mhlo.num_partitions") or 0]
        + [int(m[1].max()) + 1 for m in meshes.values()]
    )
    for op, plan in zip(convs, plans):
        if plan is None:
            continue
        dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
        lhs = ir.RankedTensorType(op.operands[0].type).shape
        rhs = ir.RankedTensorType(op.operands[1].type).shape
        out = ir.RankedTensorType(op.results[0].type).shape
        ok = str(op.attributes["dimension_numbers"]) == plan["dn"] and len(lhs) == len(plan["lhs"])
        for d in plan["dims"] if ok else ():
            j, e = d["spatial"], d["expect"]
            ok = ok and lhs[d["dim"]] == e["in"] and out[dn.output_spatial_dimensions[j]] == e["out"]
            if "kernel" in e:
                ok = ok and rhs[dn.kernel_spatial_dimensions[j]] == e["kernel"]
        if not ok:
            session.diagnostics.warning(
                op.location,
                f"propagate-shardings: this convolution's input is {HALO_WARNING}, but its per-device shapes "
                "are not those of XLA's partitioning; no halo exchange added, so the per-device program lacks "
                "that communication",
            )
            continue
        nsp = len(dn.input_spatial_dimensions)
        padding = _conv_padding(op, nsp)
        with ir.InsertionPoint(op), op.location:
            value = op.operands[0]
            for d in plan["dims"]:
                value = _build_exchange(value, d, partitions, handles, made)
                padding[d["spatial"]] = list(d["pad"])
        op.operands[0] = value
        _set_conv_padding(op, padding)
    return made


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
    from costmodel.engine import compiled_by_xla

    if compiled_by_xla(module):
        # XLA's optimized module (mhlo.fusion): an SPMD compilation is per device already
        diags.warning(
            module.location,
            "propagate-shardings: the module is compiled by XLA (mhlo.fusion): XLA partitioned it already; "
            "left unchanged",
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
    progress.stage("xla-strategies")
    with module.context:
        xla_spmd.dot_strategies(module)
        xla_spmd.dynamic_slice_strategies(module)
        xla_spmd.window_and_sort_strategies(module)
        convolution_strategies(module, session)
    _run_pipeline(module, RESHARDS, session, progress)
    _run_pipeline(module, TO_COLLECTIVES, session, progress)
    with module.context:
        xla_spmd.merge_duplicate_reshards(module)
        # convolutions sharded along a spatial dimension their window spans: the halo
        # exchange XLA's partitioner performs, added once the program is per device
        halo_plans = plan_halo_exchanges(module, session, per_device=options["per-device"])
    if not options["per-device"]:
        return
    before = _constant_values(module)
    with module.context:
        xla_spmd.mark_shardy_reductions(module)  # for reductions_as_xla, after the conversion
    _run_pipeline(module, PAD, session, progress, then=lambda: fit_padded_convolutions(module, halo_plans))
    made: set = set()
    _run_pipeline(
        module, TO_LOCAL, session, progress, fix_loops=True,
        then=lambda: made.update(exchange_halos(module, halo_plans, session)),
    )
    _repair_new_constants(module, before | made, session, probe=isolated)
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
