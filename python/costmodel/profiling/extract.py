"""A kernel as a standalone program: its external inputs become the arguments of a
`func.func @main`, the values it hands to the rest of the program its results.

    prog = kernel_program(kernel)      # raises NotStandalone(reason)
    prog.text                          # canonical StableHLO text (no locations, no costmodel.* attributes)
    prog.signature                     # sha256 of the text: the key of the measurement cache
    prog.arg_types, prog.result_types  # TensorInfo of each

The kernel's ops (costmodel.kernels.Kernel: its members and the cheap producers copied
into it) are cloned in program order into a new module of the same context (no new
context: ir.py is the only place that builds them). Splat constants and small constants
(at most SMALL_CONSTANT_BYTES) defined outside the kernel are cloned in, as a compiler
inlines them; every other external value is an argument. A value produced in the kernel
is a result when an op outside the kernel (or a terminator) uses it; a kernel whose values
nobody uses returns its root's results (the work is then still done).

What cannot run alone raises NotStandalone: custom calls, collectives, ops with tokens or
tuples, dynamic shapes, kernels XLA formed already (mhlo.fusion), ops of other dialects
than stablehlo/chlo.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..ir import ir
from ..shapes import TensorInfo, type_info

__all__ = ["NotStandalone", "KernelProgram", "kernel_program", "program_from_ops", "standalone_problem", "SMALL_CONSTANT_BYTES"]

# Constants up to this size are cloned into the kernel (a compiler inlines them); larger
# ones are arguments (weights).
SMALL_CONSTANT_BYTES = 4096

# Attributes that describe the surrounding program, not the kernel's work.
_DROP_PREFIXES = ("costmodel.", "mhlo.sharding", "mhlo.frontend_attributes", "sdy.", "jax.", "mhlo.layout_mode")

_STANDALONE_DIALECTS = ("stablehlo.", "chlo.")
# Ops that never run as a kernel of their own here (their cost comes from elsewhere).
_NOT_ALONE = {
    "stablehlo.custom_call": "a custom call (its implementation lives outside the IR)",
    "stablehlo.infeed": "infeed is I/O",
    "stablehlo.outfeed": "outfeed is I/O",
    "stablehlo.send": "a collective (communication)",
    "stablehlo.recv": "a collective (communication)",
    "stablehlo.all_reduce": "a collective (communication)",
    "stablehlo.all_gather": "a collective (communication)",
    "stablehlo.all_to_all": "a collective (communication)",
    "stablehlo.reduce_scatter": "a collective (communication)",
    "stablehlo.collective_permute": "a collective (communication)",
    "stablehlo.collective_broadcast": "a collective (communication)",
    "stablehlo.partition_id": "depends on the device's place in a mesh",
    "stablehlo.replica_id": "depends on the device's place in a mesh",
}


class NotStandalone(Exception):
    """The kernel cannot be extracted into a program of its own (the message says why)."""


@dataclass
class KernelProgram:
    text: str
    signature: str
    arg_types: list[TensorInfo]
    result_types: list[TensorInfo]
    op_names: list[str]


def _owner(value):
    owner = value.owner
    return getattr(owner, "operation", owner)


def _is_small_constant(op) -> bool:
    if op is None or getattr(op, "name", None) != "stablehlo.constant":
        return False
    try:
        attr = ir.DenseElementsAttr(op.attributes["value"])
        if attr.is_splat:
            return True
    except Exception:  # not a dense attribute (resources ...)
        return False
    info = type_info(op.results[0].type)
    return info.is_tensor and not info.dynamic and info.nbytes <= SMALL_CONSTANT_BYTES


def _check_type(t, what: str) -> TensorInfo:
    info = type_info(t)
    if not info.is_tensor:
        raise NotStandalone(f"{what} of type {t} is no tensor (tokens and tuples cannot be inputs of a benchmark)")
    if info.dynamic:
        raise NotStandalone(f"{what} of type {t} has a dynamic shape")
    return info


def kernel_program(kernel) -> KernelProgram:
    """The standalone program of a costmodel.kernels.Kernel."""
    if getattr(kernel, "given", False):
        raise NotStandalone("a fusion XLA already formed (mhlo.fusion)")
    pairs = list(zip(kernel.node_ids, kernel.ops)) + list(zip(kernel.duplicated_ids, kernel.duplicated))
    if len(pairs) != len(kernel.ops) + len(kernel.duplicated):  # formed outside the engine
        pairs = [(i, op) for i, op in enumerate(list(kernel.duplicated) + list(kernel.ops))]
    pairs.sort(key=lambda p: p[0])
    own = {id(op) for op in kernel.ops}
    ordered = [op for _, op in pairs]
    return program_from_ops(ordered, outputs_of=[op for op in ordered if id(op) in own])


def program_from_ops(ops: list, outputs_of: list | None = None) -> KernelProgram:
    """Clone `ops` (one block's ops, in program order) into `func.func @main`."""
    if not ops:
        raise NotStandalone("no ops")
    _check_ops(ops)
    outputs_of = ops if outputs_of is None else outputs_of
    ctx = ops[0].context
    produced = set()
    for op in ops:
        for r in op.results:
            produced.add(r)
    # the member ops themselves, to tell inside uses from outside ones (an ir.Operation
    # compares equal to another handle of the same op)
    members = list(ops)

    def is_member(owner) -> bool:
        owner = getattr(owner, "operation", owner)
        return any(owner == m for m in members)

    # external values, in first-use order (nested regions included)
    args: list = []
    arg_index: dict = {}
    inline_consts: list = []
    inline_seen: set = set()
    for op in ops:
        for inner in _self_and_nested(op):
            for v in inner.operands:
                if v in produced or v in arg_index or v in inline_seen:
                    continue
                owner = _owner(v)
                if inner is not op and _defined_inside(v, op):
                    continue
                if not isinstance(v, ir.BlockArgument) and _is_small_constant(owner):
                    inline_seen.add(v)
                    inline_consts.append(owner)
                    continue
                arg_index[v] = len(args)
                args.append(v)
    results: list = []
    for op in outputs_of:
        for r in op.results:
            for use in r.uses:
                if not is_member(use.owner):
                    results.append(r)
                    break
    if not results:
        results = list(outputs_of[-1].results)
    if not results:
        raise NotStandalone("the kernel produces no value")
    arg_infos = [_check_type(v.type, "an input") for v in args]
    res_infos = [_check_type(v.type, "a result") for v in results]
    for op in ops:
        for r in op.results:
            _check_type(r.type, f"a value of '{op.name}'")

    from jaxlib.mlir.dialects import func as func_d

    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            fn = func_d.FuncOp("main", ir.FunctionType.get([v.type for v in args], [v.type for v in results]))
            block = fn.add_entry_block()
            mapping: dict = {v: block.arguments[i] for i, v in enumerate(args)}
            with ir.InsertionPoint(block):
                for c in inline_consts:
                    new = c.clone()
                    _strip(new)
                    mapping[c.results[0]] = new.results[0]
                for op in ops:
                    new = op.clone()
                    for inner in _self_and_nested(new):
                        operands = inner.operands
                        for i in range(len(operands)):
                            m = mapping.get(operands[i])
                            if m is not None:
                                operands[i] = m
                    _strip(new)
                    for old_r, new_r in zip(op.results, new.results):
                        mapping[old_r] = new_r
                func_d.ReturnOp([mapping[v] for v in results])
        if not module.operation.verify():  # pragma: no cover - verify raises on failure
            raise NotStandalone("the extracted program does not verify")
        text = module.operation.get_asm(enable_debug_info=False)
    del module
    sig = hashlib.sha256(text.encode()).hexdigest()
    return KernelProgram(text, sig, arg_infos, res_infos, [op.name for op in ops])


def _check_ops(ops) -> None:
    for op in ops:
        for inner in _self_and_nested(op):
            name = inner.name
            if name in _NOT_ALONE:
                raise NotStandalone(f"'{name}': {_NOT_ALONE[name]}")
            if not name.startswith(_STANDALONE_DIALECTS) and inner is not op and name not in ("func.return",):
                raise NotStandalone(f"'{name}' is no StableHLO/CHLO op")
        if not op.name.startswith(_STANDALONE_DIALECTS):
            raise NotStandalone(f"'{op.name}' is no StableHLO/CHLO op")
        for r in op.results:
            _check_type(r.type, f"a value of '{op.name}'")


def standalone_problem(kernel) -> str | None:
    """Why the kernel cannot run alone (None: it can), without building its program."""
    if getattr(kernel, "given", False):
        return "a fusion XLA already formed (mhlo.fusion)"
    try:
        _check_ops(list(kernel.ops) + list(kernel.duplicated))
    except NotStandalone as err:
        return str(err)
    return None


def _defined_inside(value, op) -> bool:
    """Is `value` defined within op's regions (a block argument or an op result there)?"""
    owner = value.owner
    if isinstance(value, ir.BlockArgument):
        parent = owner.owner if hasattr(owner, "owner") else None
        p = getattr(parent, "operation", parent)
    else:
        p = getattr(owner, "operation", owner)
        p = p.parent if p is not None else None
    while p is not None:
        p = getattr(p, "operation", p)
        if p == op:
            return True
        p = p.parent
    return False


def _self_and_nested(op):
    from ..ir import walk_ops

    yield op
    yield from walk_ops(op)


def _strip(op) -> None:
    for inner in _self_and_nested(op):
        names = [getattr(a, "name", a) for a in inner.attributes]
        for name in names:
            if name.startswith(_DROP_PREFIXES):
                del inner.attributes[name]
