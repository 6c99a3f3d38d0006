"""Read IREE's program after dispatch creation: its dispatches, its transfers, and which
of our ops each holds.

IREE's `dispatch-creation` phase ends with every kernel as an inline
`flow.dispatch.workgroups` op in the host functions (`util.func`), before they are
outlined into `flow.executable`s (outlining deduplicates identical executables, whose
bodies then carry the locations of only one of their users: so we read them before).
What a dispatch reads and writes is explicit there: `iree_tensor_ext.dispatch.tensor.load`
and `.store` of its bindings. Between dispatches the host function holds
`flow.tensor.*` transfers (update, slice, splat, clone: copies and fills IREE's stream
runs as transfer commands), collectives (`flow.collective.*`), free metadata ops
(`flow.tensor.reshape`, `bitcast`, `tie_shape`, ...) and scalar host code (loop
counters in `scf`/`arith`). Dispatches inside a `util.initializer` run once when the
module loads (IREE's constant evaluation), not in each call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..shapes import elem_bytes_of
from .compiler import markers_of

__all__ = ["Region", "IreeProgram", "read_program", "TRANSFER_OPS"]

DISPATCH_OPS = frozenset({"flow.dispatch.workgroups", "flow.dispatch.region"})
# Host-side ops that move or fill memory: (read what, write what)
TRANSFER_OPS = {
    "flow.tensor.update": ("update", "update"),  # an insert: the update is read and written in place
    "flow.tensor.slice": ("result", "result"),
    "flow.tensor.splat": (None, "result"),
    "flow.tensor.clone": ("result", "result"),
    "flow.tensor.transfer": ("result", "result"),
    "flow.tensor.encode": ("operand", "result"),
}
COLLECTIVE_PREFIX = "flow.collective."
LOAD = "iree_tensor_ext.dispatch.tensor.load"
STORE = "iree_tensor_ext.dispatch.tensor.store"
# Ops of a dispatch body that move or initialise and compute nothing: they carry the
# location of the dispatch's root, also in a dispatch that only copies for it (the
# padding of a convolution's input)
PLUMBING = frozenset(
    {
        LOAD,
        STORE,
        "tensor.empty",
        "linalg.fill",
        "flow.return",
        "iree_tensor_ext.dispatch.workgroup_count_from_slice",
        "arith.constant",
    }
)


@dataclass
class Region:
    """One dispatch region or transfer of IREE's program."""

    ordinal: int  # position in IREE's program (walk order)
    name: str  # IREE's name of a dispatch (<function>_dispatch_<n>), or the transfer op's
    kind: str  # "dispatch" | "transfer"
    op_name: str  # flow.dispatch.workgroups, flow.tensor.update, ...
    func: str  # the host function (or "initializer")
    traced: set = field(default_factory=set)  # our op indices whose locations are inside
    root: set = field(default_factory=set)  # our op indices of the region op's own location
    computed: set = field(default_factory=set)  # ... of the ops that compute (not loads, stores, inits)
    bytes_read: int = 0
    bytes_written: int = 0
    dynamic: bool = False  # some load/store has a dynamic shape (its bytes are not counted)
    hoisted: bool = False  # in a util.initializer: runs once at load time
    linalg_ops: list = field(default_factory=list)  # names of the structured ops inside


@dataclass
class IreeProgram:
    regions: list  # Region, dispatches and transfers in program order
    host: set  # our op indices traced only in host code (scalars, reshapes, loads)
    collectives: set  # our op indices traced in flow.collective ops

    @property
    def dispatch_count(self) -> int:
        return sum(1 for r in self.regions if r.kind == "dispatch" and not r.hoisted)

    @property
    def transfer_count(self) -> int:
        return sum(1 for r in self.regions if r.kind == "transfer" and not r.hoisted)


def _tensor_bytes(t, iree_ir) -> int | None:
    """Bytes of a ranked tensor type of IREE's (None when dynamic)."""
    try:
        st = iree_ir.ShapedType(t)
    except (ValueError, TypeError):
        return 0
    if not st.has_static_shape:
        return None
    n = 1
    for d in st.shape:
        n *= d
    return n * elem_bytes_of(str(st.element_type))


def _is_tensor(t, iree_ir) -> bool:
    try:
        iree_ir.RankedTensorType(t)
    except (ValueError, TypeError):
        return False
    return True


# every op nested in an op, pre-order (iterative: costmodel.ir.walk_ops)
from ..ir import walk_ops as _walk  # noqa: E402


def read_program(module, iree_ir) -> IreeProgram:
    """Dispatches, transfers, collectives and host ops of IREE's module (at the end of
    its dispatch-creation phase), with our op indices in each."""
    regions: list[Region] = []
    host: set = set()
    collectives: set = set()
    for top in module.regions[0].blocks[0].operations:
        top = top.operation
        if top.name == "util.func":
            func = iree_ir.StringAttr(top.attributes["sym_name"]).value
            hoisted = False
        elif top.name == "util.initializer":
            func, hoisted = "initializer", True
        else:
            continue
        _read_body(top, func, hoisted, regions, host, collectives, iree_ir)
    per_func: dict = {}
    for r in regions:
        host -= r.traced
        if r.kind == "dispatch":  # the names IREE's outlining gives them, in this order
            n = per_func.get(r.func, 0)
            per_func[r.func] = n + 1
            r.name = f"{r.func}_dispatch_{n}"
    host -= collectives
    return IreeProgram(regions=regions, host=host, collectives=collectives)


def _read_body(parent, func, hoisted, regions, host, collectives, iree_ir) -> None:
    for region in parent.regions:
        for block in region.blocks:
            for op in block.operations:
                op = op.operation
                name = op.name
                if name in DISPATCH_OPS:
                    regions.append(_dispatch(op, len(regions), func, hoisted, iree_ir))
                    continue
                if name in TRANSFER_OPS:
                    regions.append(_transfer(op, len(regions), func, hoisted, iree_ir))
                    continue
                found = markers_of(op.location, iree_ir)
                if name.startswith(COLLECTIVE_PREFIX):
                    collectives |= found
                elif not hoisted:
                    host |= found
                if op.regions:
                    _read_body(op, func, hoisted, regions, host, collectives, iree_ir)


def _dispatch(op, ordinal, func, hoisted, iree_ir) -> Region:
    r = Region(ordinal=ordinal, name="", kind="dispatch", op_name=op.name, func=func, hoisted=hoisted)
    r.root = markers_of(op.location, iree_ir)
    body = op.regions[0]  # the workgroup body (region 1 is the workgroup count)
    for block in body.blocks:
        for inner in block.operations:
            inner = inner.operation
            for o in [inner, *_walk(inner)]:
                found = markers_of(o.location, iree_ir)
                r.traced |= found
                name = o.name
                if name not in PLUMBING:
                    r.computed |= found
                if name == LOAD:
                    n = _tensor_bytes(o.results[0].type, iree_ir)
                    if n is None:
                        r.dynamic = True
                    else:
                        r.bytes_read += n
                elif name == STORE:
                    n = _tensor_bytes(o.operands[0].type, iree_ir)
                    if n is None:
                        r.dynamic = True
                    else:
                        r.bytes_written += n
                elif name.startswith(("linalg.", "iree_linalg_ext.")) and name not in ("linalg.yield", "linalg.index", "iree_linalg_ext.yield"):
                    r.linalg_ops.append(name)
    r.traced |= r.root
    return r


def _transfer(op, ordinal, func, hoisted, iree_ir) -> Region:
    r = Region(ordinal=ordinal, name=op.name, kind="transfer", op_name=op.name, func=func, hoisted=hoisted)
    r.root = markers_of(op.location, iree_ir)
    r.traced = set(r.root)
    r.computed = set(r.root)
    read, write = TRANSFER_OPS[op.name]

    tensors = [v.type for v in op.operands if _is_tensor(v.type, iree_ir)]

    def size(what):
        if what is None:
            return 0
        if what == "result":
            t = op.results[0].type
        elif what == "update":
            t = tensors[1]  # operands: target, its dims, start indices, update, its dims
        else:
            t = tensors[0]
        n = _tensor_bytes(t, iree_ir)
        if n is None:
            r.dynamic = True
            return 0
        return n

    r.bytes_read = size(read)
    r.bytes_written = size(write)
    return r
