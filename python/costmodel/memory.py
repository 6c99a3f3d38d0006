"""Per-device memory footprint: the peak of live buffer bytes over a program's order.

    from costmodel.memory import peak_memory
    report = peak_memory(module)            # a builtin.module operation (costmodel.ir.load_module)
    report.peak_bytes, report.temp_peak_bytes, report.to_dict()

The model (docs/memory.md has the why and the validation against XLA):

- The entry function (`main`, else the only public function, else the public function
  with the highest peak) runs its ops in order. Its arguments are live throughout;
  each buffer an op allocates is live from the op to the last use of any value stored
  in it (a use inside a nested region counts as a use by the region op); values the
  function returns stay live to the end.
- Order ("schedule"): program order, or a memory-minimizing list schedule of each block
  (of the ops whose operands are ready, the one that frees the most bytes net), the
  lower of the two by default, as XLA's scheduler keeps the schedule of least memory.
- What allocates: the outputs of kernels. With kernel annotations (`annotate-cost` with
  `fusion=xla-gpu|xla-tpu`, or an XLA-compiled module's `mhlo.fusion` ops) a value
  used only inside its own kernel allocates nothing, and a producer copied into its
  consumer kernels (`costmodel.kernel_copies`: a broadcast, a convert, `x - mean` ...)
  is recomputed there. Without annotations
  `peak_memory` inlines the calls and forms kernels on a copy of the module (`fusion`,
  default xla-gpu); `fusion="none"` makes every op's result a buffer.
- Bookkeeping ops alias their operand and allocate nothing: reshape, bitcast,
  get_tuple_element, tuple, optimization_barrier, `mhlo.bitcast`, sharding
  annotations. Constants live in the executable (`constant_bytes`), not in the peak.
- In place, as XLA's buffer assignment does: an elementwise kernel whose operand of the
  same size dies at it writes its result into that operand's buffer;
  dynamic_update_slice and scatter update their operand in place when it dies there.
  Entry arguments are never overwritten unless donated.
- Donation: an argument donated to an output (`tf.aliasing_output`, `jax.buffer_donor`,
  module `mhlo.input_output_alias`) is live only to its last read, and the output it
  aliases may be written in its place (`alias_bytes`: counted once). When a reader of
  the argument is not ordered before the write by data dependencies, XLA copies the
  argument first (`donation_copies`); that costs a copy's time, not memory (the
  argument's own buffer is then free until the output is written).
- stablehlo.while: the carried values are buffers live across the loop (an init value
  that dies at the loop becomes the loop state in place; a value the body passes
  through unchanged keeps its buffer); the body's (or condition's) own peak adds on top
  once, at the loop. func.call: the callee's own peak (memoised; a recursive call is
  reported in `warnings`) adds at the call. case/if: the largest branch.

The analysis is per device: give it a partitioned (per-device) module. A module that is
sharded but not yet partitioned is refused (`InputError`); run `--propagate-shardings`
first.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .collectives import GROUP_COLLECTIVE_OPS
from .ir import InputError, defining_op, format_location, ir
from .shapes import packed_nbytes, type_info

__all__ = ["MemoryReport", "LiveBuffer", "DonationCopy", "peak_memory", "FUSION_CHOICES", "render_report"]

FUSION_CHOICES = ("auto", "xla-gpu", "xla-tpu", "none")
SCHEDULE_CHOICES = ("auto", "program", "list")

from .engine import KERNEL_ATTR, KERNEL_COST_ATTR, REMOVED_ATTR  # noqa: E402

KERNEL_COPIES_ATTR = "costmodel.kernel_copies"  # engine.py: an op copied into N kernels

# Results that are their operand's buffer (no allocation).
ALIAS_OPS = frozenset(
    {
        "stablehlo.reshape",
        "stablehlo.bitcast",
        "mhlo.bitcast",
        "stablehlo.get_tuple_element",
        "mhlo.get_tuple_element",
        "stablehlo.tuple",
        "stablehlo.optimization_barrier",
        "sdy.sharding_constraint",
        "sdy.propagation_barrier",
    }
)
GET_TUPLE_ELEMENT_OPS = frozenset({"stablehlo.get_tuple_element", "mhlo.get_tuple_element"})
# Ops that allocate nothing at all.
NOTHING_OPS = frozenset(
    {
        "stablehlo.after_all",
        "stablehlo.create_token",
        "sdy.sharding_group",
        "sdy.mesh",
    }
)
CONSTANT_OPS = frozenset({"stablehlo.constant", "chlo.constant", "mhlo.constant", "arith.constant"})
TERMINATORS = frozenset({"stablehlo.return", "func.return", "mhlo.return", "sdy.return"})
# Ops that read their first operand and rewrite it in place when it dies there.
IN_PLACE_OPERAND0_OPS = frozenset({"stablehlo.dynamic_update_slice", "stablehlo.scatter"})
CALL_OPS = frozenset({"func.call", "stablehlo.composite"})
CASE_OPS = frozenset({"stablehlo.case", "stablehlo.if"})
WHILE_OPS = frozenset({"stablehlo.while"})
# Ops whose region is a body executed with the op's operands as its arguments.
BODY_OPS = frozenset({"sdy.manual_computation", "sdy.named_computation"})
# Cheap producers that kernel formation copies into every consumer kernel.
DUPLICABLE_OPS = frozenset(
    {"stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.reshape", "mhlo.bitcast"}
)
_JAX_ANNOTATION_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement")


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------


@dataclass
class LiveBuffer:
    """One buffer live at the peak (or a nested region's share of it)."""

    kind: str  # argument | output | temporary | region
    name: str  # %argN, the defining op's name, or the region op's name
    bytes: int
    location: str = ""
    shape: str = ""  # the value's type
    inner: list = field(default_factory=list)  # region: what is live inside at its peak
    ret_index: int | None = field(default=None, repr=False)  # inside a region: its op's result k

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "name": self.name, "bytes": self.bytes, "location": self.location, "shape": self.shape}
        if self.inner:
            d["inner"] = [b.to_dict() for b in self.inner]
        return d


@dataclass
class DonationCopy:
    argument: int
    bytes: int
    reason: str

    def to_dict(self) -> dict:
        return {"argument": self.argument, "bytes": self.bytes, "reason": self.reason}


@dataclass
class MemoryReport:
    """Peak live bytes of one device running the entry function once."""

    function: str
    fusion: str  # the kernels used: "xla-gpu", "xla-tpu", "given", "none", or "annotated:<policy>"
    schedule: str  # the entry function's order at the peak: "program" or "list"
    peak_bytes: int  # max over program points of every live buffer
    argument_bytes: int  # all arguments (live throughout)
    output_bytes: int  # all results (XLA's output size: one buffer per returned value)
    alias_bytes: int  # outputs written into donated arguments (counted once)
    temp_peak_bytes: int  # max over program points of the live temporaries (copies and loop/call/branch peaks included)
    temp_at_peak_bytes: int  # temporaries live at the peak
    output_at_peak_bytes: int  # outputs (not in donated arguments) already defined at the peak
    constant_bytes: int  # constants (in the executable, not in the peak)
    peak_index: int  # position of the peak op in the entry function's schedule
    peak_op: str  # its name
    peak_location: str  # its file:line:col ("" when unknown)
    peak_path: list = field(default_factory=list)  # region ops from the entry down to the innermost peak op
    live_at_peak: list = field(default_factory=list)  # LiveBuffer, largest first
    top_temporaries: list = field(default_factory=list)  # the largest temporaries live at the peak (nested ones included)
    donation_copies: list = field(default_factory=list)  # DonationCopy: copies XLA inserts (time, not memory)
    warnings: list = field(default_factory=list)  # things the numbers do not cover
    op_count: int = 0

    def to_dict(self) -> dict:
        return {
            "function": self.function,
            "fusion": self.fusion,
            "schedule": self.schedule,
            "peak_bytes": self.peak_bytes,
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "alias_bytes": self.alias_bytes,
            "temp_peak_bytes": self.temp_peak_bytes,
            "temp_at_peak_bytes": self.temp_at_peak_bytes,
            "output_at_peak_bytes": self.output_at_peak_bytes,
            "constant_bytes": self.constant_bytes,
            "peak": {
                "index": self.peak_index,
                "op": self.peak_op,
                "location": self.peak_location,
                "path": list(self.peak_path),
            },
            "live_at_peak": [b.to_dict() for b in self.live_at_peak],
            "top_temporaries": [b.to_dict() for b in self.top_temporaries],
            "donation_copies": [c.to_dict() for c in self.donation_copies],
            "warnings": list(self.warnings),
            "op_count": self.op_count,
        }


# ---------------------------------------------------------------------------
# analysis of one block
# ---------------------------------------------------------------------------


@dataclass
class _Buffer:
    size: int
    start: int  # index of the op that writes it (-1: an argument)
    end: int  # index of the last op that reads it
    kind: str  # argument | external | state | temporary
    name: str  # %argN or the defining op's name
    location: str = ""
    shape: str = ""
    counted: bool = True  # a caller's or the loop's buffer is not this block's bytes
    output_start: int | None = None  # from this index on the buffer holds a returned value
    arg_index: int = -1
    donated: bool = False
    ret_index: int | None = None  # a nested block's returned value k: the region op's result k


@dataclass
class _BlockResult:
    inner_peak: int  # peak bytes of what the block allocates (arguments of a nested block excluded)
    temp_peak: int  # peak of its temporaries alone
    peak_index: int
    peak_op: str
    peak_location: str
    peak_path: list
    live: list  # LiveBuffer at the peak
    ret_alias: list  # per returned value: None, ("pass", j) or ("inplace", j)
    copies: list = field(default_factory=list)  # DonationCopy (entry)
    schedule: str = "program"
    inplace_args: dict = field(default_factory=dict)  # argument index -> bytes overwritten in place
    temp_peak_noret: int = 0  # a nested block: the peak of its temporaries other than what it returns
    temp_at_peak: int = 0  # its temporaries live at its peak (inner_peak's moment)


class _Block:
    """Buffers and live ranges of one block (a function body, a loop body, a branch).

    role: "entry" (arguments counted, live throughout unless donated), "callee" /
    "branch" (arguments are the caller's buffers), "state" (a loop body or condition:
    the arguments are the loop's state, which the body may update in place)."""

    def __init__(
        self, an: "_Analyzer", block, role: str, donation: dict | None = None, order: list | None = None,
        like: "_Block | None" = None,
    ):
        """`order`: the ops' indices in `like` (the program-order pass of the same block)
        in the order to run them; what the ops read is taken from `like`."""
        self.an = an
        self.role = role
        self.first = order is None  # the program-order pass (counts constants once)
        if order is None:
            self.ops = ops = [op.operation for op in block.operations]
        else:
            self.ops = ops = [like.ops[j] for j in order]
        self.n = n = len(ops)
        self.index_of = index_of = {}
        if order is None:
            for i, op in enumerate(ops):
                for r in op.results:
                    index_of[r] = i
        else:
            new_pos = [0] * n
            for i, j in enumerate(order):
                new_pos[j] = i
            for v, j in like.index_of.items():
                index_of[v] = new_pos[j]
        self.args = args = list(block.arguments) if like is None else like.args
        # the local values each op reads; a use inside a nested region is a use by the region op
        self.last_use: dict = {}
        self.users: list = [None] * n
        if order is None:
            local = set(index_of)
            local.update(args)
            for i, op in enumerate(ops):
                read = [v for v in op.operands if v in local]
                if op.regions:
                    for inner in _walk(op):
                        read.extend(v for v in inner.operands if v in local)
                self.users[i] = read
        else:
            for i, j in enumerate(order):
                self.users[i] = like.users[j]
        for i, read in enumerate(self.users):
            for v in read:
                self.last_use[v] = i
        self.term = ops[-1] if ops and ops[-1].name in TERMINATORS else None
        self.returned = list(self.term.operands) if self.term is not None else []
        self.donation = donation or {}
        self.bufs: list[_Buffer] = []
        self.vbufs: dict = {}  # value -> tuple of buffer ids
        self.tuple_elems: dict = {}  # tuple value -> per-element buffer ids
        self.extra = [0] * n  # nested peaks at region ops
        self.extra_temp = [0] * n
        # op index -> (LiveBuffer of the region, its _BlockResult, the op's result buffers the
        # region's peak already holds: not listed again outside it)
        self.extra_live: dict = {}
        # op index -> ([(weight, _BlockResult)], copies for in-place updates, ((k, buffer), ...)):
        # what the region adds to the temporaries, settled once outputs are known (sweep)
        self.region_temps: dict = {}
        self.scratch_live: dict = {}  # op index -> LiveBuffer of an op's own expansion (extra_temp)
        self._taken: tuple = (-1, set())  # buffers reused in place by the op at this index
        self.inplace_args: dict = {}  # argument index -> bytes: a caller's buffer overwritten in place

    # -- buffers ---------------------------------------------------------------------
    def register(self, v, ids: tuple) -> None:
        self.vbufs[v] = ids
        lu = self.last_use.get(v)
        if lu is not None:
            for b in ids:
                if self.bufs[b].end < lu:
                    self.bufs[b].end = lu

    def new_buffer(self, v, i: int, op) -> int:
        self.bufs.append(
            _Buffer(self.an.size(v), i, i, "temporary", op.name, format_location(op.location, ""), str(v.type))
        )
        return len(self.bufs) - 1

    def reusable(self, ids: tuple, i: int, size: int, *, external: bool = False) -> int | None:
        """The buffer among `ids` that op i may overwrite in place: it dies at op i, has
        the result's size, and is this block's own (a temporary, the loop state, a
        donated argument) or, with `external`, a caller's (decided at the call)."""
        if len(ids) != 1:
            return None
        b = ids[0]
        buf = self.bufs[b]
        if buf.end != i or buf.size != size or buf.output_start is not None:
            return None
        if self._taken[0] == i and b in self._taken[1]:
            return None  # another result of this op took it
        ok = buf.kind in ("temporary", "state") or (buf.kind == "argument" and buf.donated)
        if not ok and not (buf.kind == "external" and external):
            return None
        if self._taken[0] != i:
            self._taken = (i, set())
        self._taken[1].add(b)
        if buf.kind == "external":
            self.inplace_args[buf.arg_index] = buf.size
        return b

    def buffer_readers(self, b: int) -> list:
        """The ops (indices) that read buffer b (for the list scheduler)."""
        if not hasattr(self, "_readers"):
            rd: dict = {}
            for j in range(self.n):
                for v in self.users[j]:
                    for x in self.vbufs.get(v, ()):
                        rd.setdefault(x, set()).add(j)
            self._readers = rd
        return self._readers.get(b, ())

    # -- the walk --------------------------------------------------------------------------
    def run(self) -> _BlockResult:
        an, ops, n = self.an, self.ops, self.n
        donated_args = set(self.donation.values())
        for j, a in enumerate(self.args):
            if self.role == "entry":
                donated = j in donated_args
                buf = _Buffer(an.size(a), -1, -1 if donated else n, "argument", f"%arg{j}", shape=str(a.type),
                              arg_index=j, donated=donated)
            else:
                kind = "state" if self.role == "state" else "external"
                buf = _Buffer(an.size(a), -1, -1, kind, f"%arg{j}", shape=str(a.type), counted=False, arg_index=j)
            self.bufs.append(buf)
            self.register(a, (len(self.bufs) - 1,))
        for i, op in enumerate(ops):
            if op is self.term:
                continue
            name = op.name
            if name in CONSTANT_OPS:
                for r in op.results:
                    if self.first:
                        an.constant_bytes += an.size(r)
                    self.register(r, ())
            elif name in NOTHING_OPS:
                for r in op.results:
                    self.register(r, ())
            elif _is_alias_op(op) or (an.use_kernels and _folded_dot_transpose(op)):
                self.alias(op)
            elif name in WHILE_OPS:
                self.while_op(op, i)
            elif name in CASE_OPS:
                self.case_op(op, i)
            elif (name in CALL_OPS and KERNEL_ATTR not in op.attributes) or (
                name in BODY_OPS and op.regions and op.regions[0].blocks
            ):
                self.call_op(op, i)
            else:
                self.compute(op, i)
                if name == "stablehlo.select_and_scatter" and not an.use_kernels:
                    self.expansion(op, i, select_and_scatter_expansion_bytes(op))
        copies = self.outputs()
        return self.sweep(copies)

    def expansion(self, op, i: int, nbytes: int) -> None:
        """Temporaries a compiler pass creates inside one op (live while it runs)."""
        if nbytes <= 0:
            return
        self.extra[i] = max(self.extra[i], nbytes)
        self.extra_temp[i] = max(self.extra_temp[i], nbytes)
        self.scratch_live[i] = LiveBuffer(
            "temporary", f"{op.name} expansion (XLA CPU)", nbytes, format_location(op.location, "")
        )

    def alias(self, op) -> None:
        name, vb = op.name, self.vbufs
        if name == "stablehlo.tuple":
            elems = [vb.get(v, ()) for v in op.operands]
            self.tuple_elems[op.results[0]] = elems
            self.register(op.results[0], tuple(sorted({b for e in elems for b in e})))
        elif name in GET_TUPLE_ELEMENT_OPS:
            src = op.operands[0]
            idx = ir.IntegerAttr(op.attributes["index"]).value
            elems = self.tuple_elems.get(src)
            self.register(op.results[0], elems[idx] if elems is not None and idx < len(elems) else vb.get(src, ()))
        elif len(op.results) == len(op.operands):
            for r, v in zip(op.results, op.operands):
                self.register(r, vb.get(v, ()))
        else:
            ids = tuple(sorted({b for v in op.operands for b in vb.get(v, ())}))
            for r in op.results:
                self.register(r, ids)

    def compute(self, op, i: int) -> None:
        """A kernel, or an op of one."""
        operand_ids = [self.vbufs.get(v, ()) for v in op.operands]
        external = self.role in ("callee", "state")
        for r in op.results:
            if not self.an.allocates(op, r):
                # a fused intermediate: the kernel's inputs stay live until it is consumed
                self.register(r, tuple(sorted({b for ids in operand_ids for b in ids})))
                continue
            if r.type.typeid == ir.TupleType.static_typeid:
                self.tuple_result(op, i, r)
                continue
            size = self.an.size(r)
            b = None
            if op.name in IN_PLACE_OPERAND0_OPS and operand_ids:
                b = self.reusable(operand_ids[0], i, size, external=external)
            elif op.name == "mhlo.fusion" and op.regions and len(op.regions[0].blocks):
                # a compiled kernel updating one of its operands in place (a scan's stacked
                # output, a KV cache: rules.in_place_updates) writes into that buffer
                k = _in_place_updates(op).get(r.result_number)
                if k is not None and k < len(operand_ids):
                    b = self.reusable(operand_ids[k], i, size, external=external)
            elif _elementwise_root(op):
                for ids in operand_ids:
                    b = self.reusable(ids, i, size, external=external)
                    if b is not None:
                        break
            self.register(r, (b,) if b is not None else (self.new_buffer(r, i, op),))

    def tuple_result(self, op, i: int, r) -> None:
        """A tuple result (a cuBLAS/cuDNN call's (result, workspace)): a buffer per element,
        as XLA's buffer assignment gives each. A library call's workspace
        (rules.workspace_index) is a temporary of the call, live only while it runs (unless
        something reads it), never an output."""
        from .rules import workspace_index

        tt = ir.TupleType(r.type)
        ws = workspace_index(op)
        loc = format_location(op.location, "")
        ids = []
        for j in range(tt.num_types):
            t = tt.get_type(j)
            info = type_info(t)
            if info.dynamic:
                self.an.dynamic_types.add(str(t))
            name = f"{op.name} workspace" if j == ws else op.name
            self.bufs.append(_Buffer(packed_nbytes(info), i, i, "temporary", name, loc, str(t)))
            ids.append(len(self.bufs) - 1)
        self.tuple_elems[r] = [(b,) for b in ids]
        self.register(r, tuple(b for j, b in enumerate(ids) if j != ws))

    def _region_entry(self, op, res: _BlockResult, label: str, nbytes: int, unhonored: int = 0) -> LiveBuffer:
        inner = list(res.live)
        if unhonored:  # the callee updates an argument in place: here, on a copy of it
            inner.append(LiveBuffer("temporary", "copy of an operand updated in place", unhonored,
                                    format_location(op.location, "")))
        return LiveBuffer("region", f"{op.name} {label}".strip(), nbytes, format_location(op.location, ""),
                          inner=inner)

    def _nested(
        self, op, i: int, res: _BlockResult | None, label: str, new_bytes: int, unhonored: int = 0,
        inner_peak: int | None = None, results: tuple = (), weighted: list | None = None,
    ) -> None:
        """The region's peak adds to the live bytes at op i, less `new_bytes`: the op's result
        buffers `results` ((result index, buffer) pairs), which the region's own peak holds
        (a branch's or callee's returned values are the op's results). At the peak they are
        listed inside the region only, as what they are outside it (an output or a temporary)."""
        if res is None:
            return
        peak = res.inner_peak if inner_peak is None else inner_peak
        self.extra[i] = max(0, peak + unhonored - new_bytes)
        self.region_temps[i] = (weighted or [(1.0, res)], unhonored, tuple(results))
        self.extra_live[i] = (self._region_entry(op, res, label, peak + unhonored, unhonored), res, tuple(results))

    def while_op(self, op, i: int) -> None:
        an = self.an
        cond = an.nested(op, 0, "state")
        body = an.nested(op, 1, "state") if len(op.regions) > 1 else None
        for k, r in enumerate(op.results):
            init_ids = self.vbufs.get(op.operands[k], ()) if k < len(op.operands) else ()
            alias = body.ret_alias[k] if body is not None and k < len(body.ret_alias) else None
            if alias == ("pass", k):
                self.register(r, init_ids)  # loop-invariant: the body only reads it
                continue
            b = self.reusable(init_ids, i, an.size(r))
            self.register(r, (b,) if b is not None else (self.new_buffer(r, i, op),))
        # the loop state is live throughout; the body's (or condition's) own peak adds once
        best = max((x for x in (body, cond) if x is not None), key=lambda x: x.inner_peak, default=None)
        self._nested(op, i, best, "body" if best is body else "cond", 0)

    def case_op(self, op, i: int) -> None:
        from .branches import chosen, op_weights, weights_for

        results = [self.an.nested(op, k, "branch") for k in range(len(op.regions))]
        new_bytes = 0
        new: list = []
        for k, r in enumerate(op.results):
            b = self.new_buffer(r, i, op)
            self.register(r, (b,))
            new_bytes += self.bufs[b].size
            new.append((k, b))
        present = [k for k, r in enumerate(results) if r is not None]
        if not present:
            return
        # annotate-cost's branch choice (costmodel.branches); without it, this analysis's own
        weights = op_weights(op)
        if weights is None or len(weights) != len(results):
            policy = self.an.branch
            if policy == "max":  # not annotated: the branch of the largest peak
                best = max(present, key=lambda k: results[k].inner_peak)
                weights = [1.0 if k == best else 0.0 for k in range(len(results))]
            else:
                weights = weights_for(policy, [0.0] * len(results))
        k = chosen(weights)
        if k is not None:
            if results[k] is not None:
                self._nested(op, i, results[k], f"branch {k}", new_bytes, results=tuple(new))
            return
        # mean: the branches' peaks weighed (the expected peak of this op)
        best = max(present, key=lambda j: results[j].inner_peak)
        mean_peak = int(round(sum(weights[j] * results[j].inner_peak for j in present)))
        self._nested(op, i, results[best], f"branches (mean of {len(results)}; the largest shown)", new_bytes,
                     inner_peak=mean_peak, results=tuple(new), weighted=[(weights[j], results[j]) for j in present])

    def call_op(self, op, i: int) -> None:
        an = self.an
        if op.name in CALL_OPS:
            attr = "callee" if op.name == "func.call" else "decomposition"
            try:
                callee = ir.FlatSymbolRefAttr(op.attributes[attr]).value
            except (KeyError, ValueError):
                callee = None
            res = an.callee(callee, op.location) if callee else None
            label = f"@{callee}" if callee else ""
        else:
            res = an.nested(op, 0, "callee")
            label = "body"
        new_bytes = unhonored = 0
        new: list = []
        external = self.role in ("callee", "state")
        # the callee overwrites some arguments in place: fine where the operand dies here
        # and is ours to overwrite, else it works on a copy
        honored: dict = {}
        for j, size in sorted((res.inplace_args if res is not None else {}).items()):
            if j < len(op.operands):
                honored[j] = self.reusable(self.vbufs.get(op.operands[j], ()), i, size, external=external)
                if honored[j] is None:
                    unhonored += size
        for k, r in enumerate(op.results):
            alias = res.ret_alias[k] if res is not None and k < len(res.ret_alias) else None
            if alias is not None and alias[1] < len(op.operands):
                if alias[0] == "pass":
                    self.register(r, self.vbufs.get(op.operands[alias[1]], ()))  # the callee hands an argument back
                    continue
                if honored.get(alias[1]) is not None:  # updated in place, in the caller's buffer
                    self.register(r, (honored[alias[1]],))
                    continue
            b = self.new_buffer(r, i, op)
            self.register(r, (b,))
            new_bytes += self.bufs[b].size
            new.append((k, b))
        self._nested(op, i, res, label, new_bytes, unhonored, results=tuple(new))

    # -- the end of the block ---------------------------------------------------------------
    def outputs(self) -> list:
        """Mark the returned values' buffers live to the end; XLA copies a returned
        argument (unless donated to that output), constant or repeated buffer into an
        output buffer of its own. Returns the copies XLA inserts for donated arguments."""
        bufs, n = self.bufs, self.n
        self.ret_alias = []
        seen: set = set()
        for k, v in enumerate(self.returned):
            ids = self.vbufs.get(v, ())
            alias = None
            if len(ids) == 1 and bufs[ids[0]].kind in ("external", "state"):
                j = bufs[ids[0]].arg_index
                alias = ("pass", j) if _reads_only(v, self.index_of, self.ops) else ("inplace", j)
            self.ret_alias.append(alias)
            if self.role != "entry":
                for b in ids:
                    if bufs[b].kind == "temporary":
                        bufs[b].end = n
                        if bufs[b].ret_index is None:
                            bufs[b].ret_index = k
                continue
            donated_to_me = self.donation.get(k)
            own = [b for b in ids if bufs[b].kind == "temporary" or (bufs[b].kind == "argument" and bufs[b].donated
                                                                     and bufs[b].arg_index == donated_to_me)]
            if not ids or len(own) != len(ids) or any(b in seen for b in ids):
                bufs.append(_Buffer(self.an.size(v), n - 1, n, "temporary", "copy to output", shape=str(v.type),
                                    output_start=n - 1))
                seen.add(len(bufs) - 1)
                continue
            d = self.index_of.get(v, -1)
            if d >= 0 and self.ops[d].name in GET_TUPLE_ELEMENT_OPS:
                # an element of a tuple result: written by the op that returns the tuple
                d = self.index_of.get(self.ops[d].operands[0], d)
            for b in ids:
                buf = bufs[b]
                buf.end = n
                if buf.output_start is None or d < buf.output_start:
                    buf.output_start = max(buf.start, d)
                seen.add(b)
        if self.role != "entry":
            return []
        return self.donation_copies()

    def donation_copies(self) -> list:
        """XLA's copy insertion orders by data dependencies, not by program order: when
        an op that reads a donated argument is not an ancestor of the op that writes the
        aliased output, XLA copies the argument first. The copy costs time, not memory:
        the argument's buffer is then free until the output is written (what we count)."""
        copies = []
        readers: dict = {}
        for p, read in enumerate(self.users):
            if self.ops[p] is self.term:
                continue
            for v in read:
                if self.index_of.get(v) is None:  # a block argument
                    readers.setdefault(v, set()).add(p)
        for k, j in sorted(self.donation.items()):
            if k >= len(self.returned) or j >= len(self.args):
                continue
            out = _through_aliases(self.returned[k], self.index_of, self.ops)
            w = self.index_of.get(out)
            if w is None:
                continue
            reads = {p for p in readers.get(self.args[j], ()) if p != w}
            if not reads or _all_ancestors(self.index_of, w, reads, self.users):
                continue
            last = max(reads)
            copies.append(
                DonationCopy(j, self.bufs[j].size,
                             f"%arg{j} is donated to result {k} but {self.ops[last].name} at "
                             f"{format_location(self.ops[last].location, '?')} reads it without being ordered before the write")
            )
        return copies

    def _is_output(self, b: int, i: int, noret: bool) -> bool:
        """Whether buffer b holds a returned value at op i: an output of the entry function
        from its output_start on, or (noret) a value this nested block returns."""
        buf = self.bufs[b]
        if buf.output_start is not None and i >= buf.output_start:
            return True
        return noret and buf.ret_index is not None

    def _temps(self, noret: bool) -> list:
        """Live temporaries at each op, nested regions and expansions included. A region
        adds its block's temporary peak less the op's result buffers counted here; where
        those results are outputs here, its peak without what it returns."""
        n, bufs = self.n, self.bufs
        tdelta = [0] * (n + 2)
        for b, buf in enumerate(bufs):
            if not buf.counted or buf.size == 0 or n == 0 or buf.kind != "temporary":
                continue
            if noret and buf.ret_index is not None:
                continue
            s = max(buf.start, 0)
            e = min(max(buf.end, s), n - 1)
            te = e if buf.output_start is None else min(e, buf.output_start - 1)
            if te >= s:
                tdelta[s] += buf.size
                tdelta[te + 1] -= buf.size
        out = [0] * n
        tlive = 0
        for i in range(n):
            tlive += tdelta[i]
            extra = self.extra_temp[i]
            info = self.region_temps.get(i)
            if info is not None:
                weighted, unhonored, results = info
                all_out = bool(results) and all(self._is_output(b, i, noret) for _k, b in results)
                inner = sum(w * (r.temp_peak_noret if all_out else r.temp_peak) for w, r in weighted)
                counted_here = sum(bufs[b].size for _k, b in results
                                   if bufs[b].counted and not self._is_output(b, i, noret))
                extra = max(extra, int(round(inner)) + unhonored - counted_here, 0)
            out[i] = tlive + extra
        return out

    def _relabel(self, items: list, results: tuple, at: int) -> list:
        """A region's live list as this block sees it: what the region returns is this op's
        result k, so its index becomes that buffer's own return index here (None: not
        returned), and its kind an output where that buffer is one here; at every depth."""
        mapping = {k: (self.bufs[b].ret_index, self._is_output(b, at, False)) for k, b in results}
        out = []
        for x in items:
            if x.ret_index is not None:
                r_new, is_out = mapping.get(x.ret_index, (None, False))
                x = dataclasses.replace(x, ret_index=r_new,
                                        kind="output" if is_out and x.kind == "temporary" else x.kind)
            if x.inner:
                x = dataclasses.replace(x, inner=self._relabel(x.inner, results, at))
            out.append(x)
        return out

    def sweep(self, copies) -> _BlockResult:
        n, bufs = self.n, self.bufs
        delta = [0] * (n + 2)
        for buf in bufs:
            if not buf.counted or buf.size == 0 or n == 0:
                continue
            s = max(buf.start, 0)
            e = min(max(buf.end, s), n - 1)
            delta[s] += buf.size
            delta[e + 1] -= buf.size
        live = 0
        peak, at = -1, -1
        for i in range(n):
            live += delta[i]
            if live + self.extra[i] > peak:
                peak, at = live + self.extra[i], i
        temps = self._temps(noret=False)
        temp_peak = max(temps, default=0)
        temp_at_peak = temps[at] if 0 <= at < n else 0
        temp_peak_noret = temp_peak if self.role == "entry" else max(self._temps(noret=True), default=0)
        live_list: list[LiveBuffer] = []
        # a region op at the peak: its result buffers are in the region's own peak
        hidden = {b for _k, b in self.extra_live[at][2]} if at in self.extra_live and self.extra[at] > 0 else ()
        for b_id, buf in enumerate(bufs):
            if not buf.counted or buf.size == 0 or at < 0 or not (max(buf.start, 0) <= at <= max(buf.end, buf.start)):
                continue
            if b_id in hidden:
                continue
            if buf.output_start is not None and at >= buf.output_start:
                kind = "output"
            elif buf.kind == "argument":
                kind = "argument"
            else:
                kind = "temporary"
            live_list.append(LiveBuffer(kind, buf.name, buf.size, buf.location, buf.shape, ret_index=buf.ret_index))
        ops = self.ops
        peak_op = ops[at].name if 0 <= at < n else ""
        peak_loc = format_location(ops[at].location, "") if 0 <= at < n else ""
        path: list = []
        if at in self.scratch_live:
            live_list.append(self.scratch_live[at])
        elif at in self.extra_live and self.extra[at] > 0:
            entry, inner, results = self.extra_live[at]
            # the region's returned values are this op's results: listed inside it, as what
            # they are here (an output of the entry function, or a temporary)
            entry = dataclasses.replace(entry, inner=self._relabel(entry.inner, results, at))
            live_list.append(entry)
            path = [f"{peak_op}@{peak_loc}" if peak_loc else peak_op] + inner.peak_path
            if inner.peak_op:
                peak_op, peak_loc = inner.peak_op, inner.peak_location
        live_list.sort(key=lambda b: -b.bytes)
        return _BlockResult(max(peak, 0), temp_peak, at, peak_op, peak_loc, path, live_list, self.ret_alias, copies,
                            inplace_args=dict(self.inplace_args), temp_peak_noret=temp_peak_noret,
                            temp_at_peak=temp_at_peak)


def select_and_scatter_expansion_bytes(op) -> int:
    """The temporaries of XLA CPU's SelectAndScatterExpander
    (xla/service/select_and_scatter_expander.cc), which XLA CPU runs on every
    select_and_scatter (GPUs run it as one kernel): one s32 iota per dimension of the
    operand's shape, reduced by one multi-output reduce_window to the source's shape (the
    selected value and one s32 index per dimension), the indices reshaped and
    concatenated into [source dims..., rank] s32, then scattered into a broadcast of the
    init value (the op's own result, counted as such). The most live at once besides the
    result: the iotas with the reduce_window's outputs (then the index outputs with their
    concatenation)."""
    try:
        operand, source = type_info(op.operands[0].type), type_info(op.operands[1].type)
    except (IndexError, ValueError, TypeError):
        return 0
    if operand.dynamic or source.dynamic:
        return 0
    rank = operand.rank
    iotas = rank * operand.num_elements * 4
    reduce_window_out = source.num_elements * (operand.elem_bytes + 4 * rank)
    indices = source.num_elements * 4 * rank
    return max(iotas + reduce_window_out, 2 * indices)


class _Analyzer:
    def __init__(self, module, policy_label: str, use_kernels: bool, schedule: str = "auto", branch="max"):
        self.module = module
        self.branch = branch  # case/if without annotate-cost's weights (costmodel.branches)
        self.policy_label = policy_label
        self.use_kernels = use_kernels
        self.funcs: dict = {}
        for op in module.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "func.func":
                self.funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
        self.memo: dict = {}
        self.nested_memo: dict = {}
        self.alloc_memo: dict = {}  # result value -> allocates()
        self.schedule = schedule
        self.in_progress: set = set()
        self.warnings: list[str] = []
        self.dynamic_types: set = set()
        self.constant_bytes = 0
        self.op_count = 0
        # values at a manual computation's boundary have global types but per-device buffers
        self.manual = any(op.name in BODY_OPS for op in _walk(module))
        self.local_memo: dict = {}

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def size(self, value) -> int:
        t = self.local_type(value) if self.manual else None
        info = type_info(t if t is not None else value.type)
        if info.dynamic:
            self.dynamic_types.add(str(value.type))
        return packed_nbytes(info)  # sub-byte elements packed, as XLA's buffers

    def local_type(self, value):
        """The per-device type of a value of global type at a manual computation's
        boundary (shard_map), None for any other value: a manual computation's result is
        its body's returned value; a block argument read only by manual computations
        (an entry argument handed to shard_map) is their body's argument."""
        hit = self.local_memo.get(value, False)
        if hit is not False:
            return hit
        t = None
        owner = value.owner
        owner = getattr(owner, "operation", owner)
        if isinstance(owner, ir.Operation):
            if owner.name == "sdy.manual_computation" and owner.regions[0].blocks:
                body = owner.regions[0].blocks[0]
                k = next(j for j, r in enumerate(owner.results) if r == value)
                term = list(body.operations)[-1]
                if k < len(term.operands):
                    t = term.operands[k].type
        else:
            local = []
            for use in value.uses:
                user = use.owner
                user = getattr(user, "operation", user)
                if user.name != "sdy.manual_computation" or not user.regions[0].blocks:
                    local = None
                    break
                args = user.regions[0].blocks[0].arguments
                local += [args[j].type for j, v in enumerate(user.operands) if v == value and j < len(args)]
            if local:
                t = max(local, key=lambda x: type_info(x).nbytes)
        self.local_memo[value] = t
        return t

    def block(self, block, role: str, donation: dict | None = None) -> _BlockResult:
        """The block's peak in program order, or in a memory-minimizing order when that is
        lower (schedule "auto", as XLA's scheduler picks the schedule of least memory)."""
        first = _Block(self, block, role, donation)
        self.op_count += first.n
        res = first.run()
        res.schedule = "program"
        if self.schedule == "program" or first.n < 3:
            return res
        order = _list_schedule(first)
        if order is None:  # the list schedule is the program order
            if self.schedule == "list":
                res.schedule = "list"
            return res
        other = _Block(self, block, role, donation, order=order, like=first).run()
        other.schedule = "list"
        if self.schedule == "list" or other.inner_peak < res.inner_peak:
            return other
        return res

    def nested(self, op, region_index: int, role: str) -> _BlockResult | None:
        """The result of a region op's block, once per op (both schedules of the parent ask)."""
        key = (op, region_index)
        if key not in self.nested_memo:
            region = op.regions[region_index]
            self.nested_memo[key] = self.block(region.blocks[0], role) if region.blocks else None
        return self.nested_memo[key]

    def callee(self, name: str, at) -> _BlockResult | None:
        """A function's own peak, once per function; None for a recursive call or a
        function without a body (with a warning)."""
        if name in self.memo:
            return self.memo[name]
        fn = self.funcs.get(name)
        if fn is None or not fn.regions[0].blocks:
            self.warn(f"@{name} has no body: its calls add nothing but their results")
            return None
        if name in self.in_progress:
            self.warn(f"recursive call of @{name} at {format_location(at, '?')}: its own peak is not counted again")
            return None
        self.in_progress.add(name)
        try:
            res = self.block(fn.regions[0].blocks[0], "callee")
        finally:
            self.in_progress.discard(name)
        self.memo[name] = res
        return res

    def allocates(self, op, r) -> bool:
        """Does this result get a buffer of its own (is it a kernel output)? (Asked by both
        schedules of a block: answered once per value.)"""
        if not self.use_kernels:
            return True
        hit = self.alloc_memo.get(r)
        if hit is None:
            hit = self.alloc_memo[r] = self._allocates(op, r)
        return hit

    def _allocates(self, op, r) -> bool:
        attrs = op.attributes
        if REMOVED_ATTR in attrs:
            return False  # removed by XLA's CSE/DCE before fusion (an equal op's result is read)
        if KERNEL_ATTR not in attrs:
            return True  # not in a kernel: collectives, ops the engine could not cost ...
        if KERNEL_COPIES_ATTR in attrs or (op.name in DUPLICABLE_OPS and KERNEL_COST_ATTR not in attrs):
            return False  # a producer copied into the kernels that read it (recomputed there)
        kid = ir.IntegerAttr(attrs[KERNEL_ATTR]).value
        for use in r.uses:
            user = use.owner
            user = getattr(user, "operation", user)
            if KERNEL_ATTR not in user.attributes:
                return True  # a return, a region op, an op outside every kernel
            if ir.IntegerAttr(user.attributes[KERNEL_ATTR]).value != kid:
                return True  # kernel ids are unique across blocks: a nested use is another kernel's
        return False


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _list_schedule(blk: "_Block") -> list | None:
    """A memory-minimizing order (indices) of the block's ops (XLA's ListMemoryScheduler): of the
    ops whose operands are ready, run the one that frees the most bytes net of what it
    allocates, ties in program order. Buffers and their readers come from the analysis
    of the program order. None when the block keeps its order (nothing to gain)."""
    import heapq

    ops, n, bufs = blk.ops, blk.n, blk.bufs
    term = n - 1 if blk.term is not None else None
    deps: list = [set() for _ in range(n)]
    prev_effect = None
    for j, op in enumerate(ops):
        for v in blk.users[j]:
            i = blk.index_of.get(v)
            if i is not None:
                deps[j].add(i)
        if not op.results or op.name in _ORDERED_OPS or (op.name == "stablehlo.custom_call" and not _is_alias_op(op)):
            # side effects (and ops without results): keep their relative order
            if prev_effect is not None:
                deps[j].add(prev_effect)
            prev_effect = j
    if term is not None:
        deps[term] = set(range(n - 1))
    succ: list = [[] for _ in range(n)]
    for j in range(n):
        for i in deps[j]:
            succ[i].append(j)
    # buffers each op reads, and how many ops read each buffer
    reads: list = [set() for _ in range(n)]
    for j in range(n):
        for v in blk.users[j]:
            reads[j].update(blk.vbufs.get(v, ()))
    remaining = [0] * len(bufs)
    for j in range(n):
        for b in reads[j]:
            remaining[b] += 1
    freeable = [
        buf.counted and buf.size > 0 and buf.output_start is None and (buf.kind != "argument" or buf.donated)
        for buf in bufs
    ]
    defined = [0] * n
    for b, buf in enumerate(bufs):
        if buf.counted and buf.kind == "temporary" and 0 <= buf.start < n:
            defined[buf.start] += buf.size

    def priority(j: int) -> int:
        freed = sum(bufs[b].size for b in reads[j] if freeable[b] and remaining[b] == 1)
        return freed - defined[j] - blk.extra[j]

    waiting = [len(deps[j]) for j in range(n)]
    heap = []
    version = [0] * n
    for j in range(n):
        if waiting[j] == 0:
            heapq.heappush(heap, (-priority(j), j, 0))
    order = []
    done = [False] * n
    while heap:
        negp, j, ver = heapq.heappop(heap)
        if done[j] or ver != version[j]:
            continue
        done[j] = True
        order.append(j)
        touched = set()
        for b in reads[j]:
            remaining[b] -= 1
            if remaining[b] == 1:
                touched.add(b)
        for b in touched:  # the last reader of b now frees it: raise its priority
            for k in blk.buffer_readers(b):
                if not done[k] and waiting[k] == 0:
                    version[k] += 1
                    heapq.heappush(heap, (-priority(k), k, version[k]))
        for k in succ[j]:
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(heap, (-priority(k), k, version[k]))
    if len(order) != n or order == list(range(n)):
        return None
    return order


_ORDERED_OPS = GROUP_COLLECTIVE_OPS | frozenset(
    {
        "stablehlo.send",
        "stablehlo.recv",
        "stablehlo.outfeed",
        "stablehlo.infeed",
        "stablehlo.rng_bit_generator",
    }
)


# every op nested in an op, pre-order (iterative: costmodel.ir.walk_ops)
from .ir import walk_ops as _walk  # noqa: E402


def _is_alias_op(op) -> bool:
    name = op.name
    if name in ALIAS_OPS:
        return True
    if name == "stablehlo.custom_call":
        try:
            target = ir.StringAttr(op.attributes["call_target_name"]).value
        except (KeyError, ValueError):
            return False
        return target in _JAX_ANNOTATION_TARGETS
    return False


def _folded_dot_transpose(op) -> bool:
    """A transpose of a dot's result that kernel formation made the GEMM's output layout
    (xla-gpu, `_fold_dot_transposes`: in no kernel, neither removed nor copied): XLA's dot
    writes the transposed result, one buffer."""
    if op.name != "stablehlo.transpose" or len(op.operands) != 1:
        return False
    attrs = op.attributes
    if KERNEL_ATTR in attrs or REMOVED_ATTR in attrs or KERNEL_COPIES_ATTR in attrs:
        return False
    producer = defining_op(op.operands[0])
    return producer is not None and producer.name in ("stablehlo.dot_general", "stablehlo.dot")


def _in_place_updates(fusion) -> dict[int, int]:
    """{result: operand} of an mhlo.fusion that updates operands in place (rules)."""
    from .rules import in_place_updates

    return in_place_updates(fusion.regions[0].blocks[0])


def _elementwise_root(op) -> bool:
    from .rules import ELEMENTWISE_OPS

    name = op.name
    if name in ELEMENTWISE_OPS or name in ("stablehlo.select", "stablehlo.clamp", "stablehlo.compare"):
        return True
    return name.startswith("chlo.") and name not in ("chlo.top_k", "chlo.ragged_dot", "chlo.scan")


def _through_aliases(v, index_of, ops):
    """The value an output really is: through reshapes and bitcasts of this block."""
    seen = 0
    while seen < 64:
        i = index_of.get(v)
        if i is None:
            return v
        op = ops[i]
        if op.name in ("stablehlo.reshape", "stablehlo.bitcast", "mhlo.bitcast") and op.operands:
            v = op.operands[0]
            seen += 1
            continue
        return v
    return v


def _reads_only(v, index_of, ops) -> bool:
    """Is `v` a block argument itself (or an alias of one), not a value written from it?"""
    seen = 0
    while seen < 64:
        i = index_of.get(v)
        if i is None:
            return True
        op = ops[i]
        if not _is_alias_op(op) or not op.operands:
            return False
        if op.name == "stablehlo.optimization_barrier":
            v = op.operands[v.result_number]
        else:
            v = op.operands[0]
        seen += 1
    return False


def _all_ancestors(index_of, i, reads, users) -> bool:
    """Is every op at a position in `reads` an ancestor (through data dependencies) of op i?"""
    need = set(reads)
    low = min(need)
    if max(need) > i:
        return False
    seen = {i}
    stack = [i]
    while stack and need:
        p = stack.pop()
        for v in users[p]:
            q = index_of.get(v)
            if q is None or q < low or q in seen:
                continue
            seen.add(q)
            need.discard(q)
            stack.append(q)
    return not need


def _donation(module, fn) -> dict:
    """output index -> argument index of donated arguments."""
    out: dict = {}
    nargs = len(fn.regions[0].blocks[0].arguments) if fn.regions[0].blocks else 0
    res_types = list(ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).results)
    donors: list[int] = []
    if "arg_attrs" in fn.attributes:
        for j, d in enumerate(ir.ArrayAttr(fn.attributes["arg_attrs"])):
            d = ir.DictAttr(d)
            if "tf.aliasing_output" in d:
                k = ir.IntegerAttr(d["tf.aliasing_output"]).value
                if 0 <= k < len(res_types) and k not in out:
                    out[k] = j
            elif "jax.buffer_donor" in d and ir.BoolAttr(d["jax.buffer_donor"]).value:
                donors.append(j)
    if "mhlo.input_output_alias" in module.attributes:
        for entry in ir.ArrayAttr(module.attributes["mhlo.input_output_alias"]):
            try:
                e = ir.DictAttr(entry)
                alias = ir.DictAttr(e["alias"])
                j = ir.IntegerAttr(alias["parameter_number"]).value
                idx = list(ir.DenseI64ArrayAttr(e["output_index"])) if "output_index" in e else []
            except (KeyError, ValueError, TypeError):
                continue
            k = idx[0] if idx else 0
            if 0 <= k < len(res_types) and 0 <= j < nargs and k not in out:
                out[k] = j
    if donors:
        arg_types = list(ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).inputs)
        for j in donors:
            for k, t in enumerate(res_types):
                if k not in out and t == arg_types[j]:
                    out[k] = j
                    break
    return out


def _public_functions(funcs: dict) -> list[str]:
    names = []
    for name, fn in funcs.items():
        vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
        if (vis is None or ir.StringAttr(vis).value == "public") and fn.regions[0].blocks:
            names.append(name)
    return names


def _has_kernels(module) -> str | None:
    """The fusion policy of the module's kernel annotations, or None."""
    from .engine import SUMMARY_ATTR

    if SUMMARY_ATTR not in module.attributes:
        return None
    d = ir.DictAttr(module.attributes[SUMMARY_ATTR])
    if "kernel_count" not in d or "fusion" not in d:
        return None
    return ir.StringAttr(d["fusion"]).value


def _flatten_temps(live: list, out: list) -> None:
    for b in live:
        if b.kind == "region":
            _flatten_temps(b.inner, out)
        elif b.kind == "temporary":
            out.append(b)


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------


def peak_memory(
    module,
    *,
    function: str | None = None,
    fusion: str = "auto",
    schedule: str = "auto",
    top: int = 10,
    branch: str | int = "max",
) -> MemoryReport:
    """The per-device memory footprint of one run of the module's entry function.

    `module`: a builtin.module operation (costmodel.ir.load_module), per device.
    `function`: the entry function (default: `main`, else the only public function,
    else the public function with the highest peak).
    `fusion`: which ops allocate. "auto": the module's kernel annotations when it carries
    them (annotate-cost with fusion), else kernels formed like XLA GPU ("xla-gpu") on a
    copy of the module; "xla-gpu" / "xla-tpu": those kernels (re-formed unless the
    module's annotation is that policy); "none": every op's result is a buffer.
    `schedule`: "program" (the ops in the order written), "list" (a memory-minimizing
    list schedule of each block), "auto" (the lower of the two per block, as XLA's
    scheduler keeps the schedule of least memory).
    `branch`: which branch of a case/if counts when annotate-cost did not choose
    (costmodel.branches): "max" (here: the branch of the largest peak), "mean", or an
    index; a module annotate-cost costed (or the copy this function annotates) carries
    its choice, which wins.
    Raises InputError (one line) for a bad function, fusion or branch, or a module that
    is sharded but not partitioned.
    """
    from .branches import parse_policy

    branch = parse_policy(branch)
    if fusion not in FUSION_CHOICES:
        raise InputError(f"memory: fusion must be one of {', '.join(FUSION_CHOICES)}, got '{fusion}'")
    if schedule not in SCHEDULE_CHOICES:
        raise InputError(f"memory: schedule must be one of {', '.join(SCHEDULE_CHOICES)}, got '{schedule}'")
    from .partitioning import find_unpartitioned_sharding

    found = find_unpartitioned_sharding(module)
    if found is not None:
        where = format_location(found.op.location, "")
        raise InputError(
            f"memory: the module is sharded but not partitioned ({found.what}{' at ' + where if where else ''}); "
            "the analysis is per device: run --propagate-shardings first"
        )
    annotated = _has_kernels(module)
    target = module
    if fusion == "none":
        label, use_kernels = "none", False
    elif annotated is not None and (fusion == "auto" or annotated in (fusion, "given")):
        label, use_kernels = f"annotated:{annotated}", True
    else:
        policy = "xla-gpu" if fusion == "auto" else fusion
        target, label = _annotated_copy(module, policy, branch)
        use_kernels = True

    with module.context:
        an = _Analyzer(target, label, use_kernels, schedule, branch)
        publics = _public_functions(an.funcs)
        if function is not None:
            if function not in an.funcs or not an.funcs[function].regions[0].blocks:
                known = ", ".join(sorted(publics)) or "none"
                raise InputError(f"memory: no function @{function} with a body (public functions: {known})")
            names = [function]
        elif "main" in publics:
            names = ["main"]
        elif publics:
            names = publics
        else:
            raise InputError("memory: the module has no public function with a body")
        best = None
        for name in names:
            an_f = _Analyzer(target, label, use_kernels, schedule, branch) if len(names) > 1 else an
            rep = _report_for(an_f, name, top)
            if best is None or rep.peak_bytes > best.peak_bytes:
                best = rep
        if len(names) > 1:
            best.warnings.append(f"{len(names)} public functions and no @main: reporting @{best.function}, the largest")
        return best


def _annotated_copy(module, policy: str, branch="max"):
    """A copy of the module with its calls inlined and kernels formed by `policy`."""
    from .engine import _already_fused
    from .ir import DiagnosticEngine, inline_calls
    from .passes.annotate_cost import DEFAULT_BACKEND, annotate_module

    with module.context:
        copy = module.clone().operation
        funcs = [(None, op.operation) for op in copy.regions[0].blocks[0].operations if op.operation.name == "func.func"]
        if not _already_fused(funcs):  # (an XLA-compiled module's calls are its outlined fusions)
            inline_calls(copy)  # XLA inlines every call before it fuses
        hw = "tpu-v5p" if policy == "xla-tpu" else "h100-sxm"
        annotate_module(
            copy, DiagnosticEngine("<memory>"), hardware=hw, backend=DEFAULT_BACKEND, fusion=policy, branch=branch
        )
        label = _has_kernels(copy) or policy
    return copy, label


def _report_for(an: _Analyzer, name: str, top: int) -> MemoryReport:
    fn = an.funcs[name]
    block = fn.regions[0].blocks[0]
    if len(fn.regions[0].blocks) > 1:
        an.warn(f"@{name} has {len(fn.regions[0].blocks)} blocks: only the first is analysed")
    donation = _donation(an.module, fn)
    res = an.block(block, "entry", donation)
    args = list(block.arguments)
    arg_sizes = [an.size(a) for a in args]  # per device (an.local_type: shard_map's arguments)
    argument_bytes = sum(arg_sizes)
    res_types = list(ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).results)
    returned = list(list(block.operations)[-1].operands) if len(block.operations) else []
    if len(returned) == len(res_types):
        out_sizes = [an.size(v) for v in returned]
    else:
        out_sizes = [packed_nbytes(type_info(t)) for t in res_types]
    output_bytes = sum(out_sizes)
    alias_bytes = sum(out_sizes[k] for k, j in donation.items() if out_sizes[k] == arg_sizes[j])
    temps: list = []
    _flatten_temps(res.live, temps)
    temps.sort(key=lambda b: -b.bytes)
    if an.dynamic_types:
        an.warn(
            f"{len(an.dynamic_types)} dynamically shaped types (e.g. {sorted(an.dynamic_types)[0]}) are counted as 0 bytes"
        )
    return MemoryReport(
        function=name,
        fusion=an.policy_label,
        schedule=res.schedule,
        peak_bytes=res.inner_peak,
        argument_bytes=argument_bytes,
        output_bytes=output_bytes,
        alias_bytes=alias_bytes,
        temp_peak_bytes=res.temp_peak,
        temp_at_peak_bytes=res.temp_at_peak,
        # what is live at the peak besides arguments and temporaries (outputs inside a
        # region included)
        output_at_peak_bytes=max(0, res.inner_peak - res.temp_at_peak
                                 - sum(b.bytes for b in res.live if b.kind == "argument")),
        constant_bytes=an.constant_bytes,
        peak_index=res.peak_index,
        peak_op=res.peak_op,
        peak_location=res.peak_location,
        peak_path=res.peak_path,
        live_at_peak=res.live,
        top_temporaries=temps[:top],
        donation_copies=res.copies,
        warnings=list(an.warnings),
        op_count=an.op_count,
    )


# ---------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def render_report(rep: MemoryReport, source: str = "") -> str:
    lines = []
    head = f"{source}: " if source else ""
    lines.append(
        f"{head}peak {fmt_bytes(rep.peak_bytes)} per device in @{rep.function} "
        f"(kernels: {rep.fusion}, schedule: {rep.schedule})"
    )
    where = rep.peak_op + (f" at {rep.peak_location}" if rep.peak_location else "")
    if rep.peak_path:
        where += " (inside " + " > ".join(rep.peak_path) + ")"
    lines.append(f"  at {where}")
    lines.append(
        f"  arguments {fmt_bytes(rep.argument_bytes)}, outputs {fmt_bytes(rep.output_bytes)}"
        f" ({fmt_bytes(rep.alias_bytes)} in donated arguments), temporaries at peak {fmt_bytes(rep.temp_at_peak_bytes)},"
        f" temporaries max {fmt_bytes(rep.temp_peak_bytes)}"
    )
    if rep.constant_bytes:
        lines.append(f"  constants (in the executable, not counted): {fmt_bytes(rep.constant_bytes)}")
    kinds: dict = {}
    for b in rep.live_at_peak:
        kinds[b.kind] = kinds.get(b.kind, 0) + b.bytes
    lines.append("")
    lines.append("live at the peak:")
    for kind in ("argument", "output", "temporary", "region"):
        if kind in kinds:
            count = sum(1 for b in rep.live_at_peak if b.kind == kind)
            label = {"region": "loop/call/branch peak"}.get(kind, kind)
            lines.append(f"  {label:<22} {fmt_bytes(kinds[kind]):>12}  ({count})")
    if rep.top_temporaries:
        lines.append("")
        lines.append("largest temporaries at the peak:")
        for b in rep.top_temporaries:
            loc = f"  {b.location}" if b.location else ""
            lines.append(f"  {fmt_bytes(b.bytes):>12}  {b.name}  {b.shape}{loc}")
    for c in rep.donation_copies:
        lines.append(f"note: XLA copies donated argument {c.argument} ({fmt_bytes(c.bytes)}, time only): {c.reason}")
    for w in rep.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
