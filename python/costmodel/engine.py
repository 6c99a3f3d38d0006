"""The cost engine behind `annotate-cost`: walks a module, applies the rule table,
recurses through region ops and the call graph, asks the backend for times and writes
`costmodel.cost` on every op, per-function totals on `func.func` and
`costmodel.summary` on the module.

Conventions:
- An op's `costmodel.cost` is the cost of ONE execution of it. Ops inside a `while`
  body carry per-iteration costs and the `while` carries (cond + body) x trip_count;
  ops inside an applied computation (a reduce body ...) carry the cost of one
  application, and the parent counts applications. So totals are never double counted.
- The module total is the sum of the public functions' costs (private functions count
  where they are called).
- An op without a rule, or with dynamic shapes, gets `costmodel.unsupported = "why"`,
  no `costmodel.cost` (unknown is the key absent), and a warning; it adds nothing to
  the totals and is counted in `unsupported_count`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .ir import TRIP_COUNT_ATTR, OUTLINED_FUSION_PREFIXES, DiagnosticEngine, callee_of, count_attr, defining_op, f64_attr, ir
from .kernels.formation import COLLECTIVE_OPS
from .rules import REGION_OPS, NotDecomposed, OpCost, Unsupported, rule_for
from .shapes import type_info

__all__ = [
    "CostEngine",
    "Totals",
    "COST_ATTR",
    "SUMMARY_ATTR",
    "UNSUPPORTED_ATTR",
    "KERNEL_ATTR",
    "KERNEL_COST_ATTR",
    "REMOVED_ATTR",
    "infer_trip_count",
    "trip_count_hint",
    "TRIP_COUNT_ATTR",
]

COST_ATTR = "costmodel.cost"
KERNEL_ATTR = "costmodel.kernel"  # on every op of a kernel: the kernel id
KERNEL_COST_ATTR = "costmodel.kernel_cost"  # once per kernel, on its root op
# on an op that is no kernel's member but copied into N kernels (recomputed in each, no buffer)
KERNEL_COPIES_ATTR = "costmodel.kernel_copies"
SUMMARY_ATTR = "costmodel.summary"
UNSUPPORTED_ATTR = "costmodel.unsupported"
# on an op XLA removes before it fuses (HloCSE: it equals an earlier op; HloDCE: nothing
# reads it): kernel formation puts it in no kernel, costmodel memory gives it no buffer
REMOVED_ATTR = "costmodel.removed"

BOUNDS = ("compute", "memory", "overhead")


@dataclass(slots=True)
class Totals:
    flops: int = 0
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    time_ns: float = 0.0
    time_by_bound: dict = field(default_factory=lambda: {b: 0.0 for b in BOUNDS})
    unsupported: int = 0
    kernel_count: int = 0  # kernel launches (kernel formation on)
    kernel_bytes: int = 0  # external bytes of those kernels
    removed_flops: int = 0  # flops of ops the compiler removes (dead code: in no kernel)

    def add(self, other: "Totals", times: int = 1) -> None:
        self.flops += other.flops * times
        self.transcendentals += other.transcendentals * times
        self.bytes_read += other.bytes_read * times
        self.bytes_written += other.bytes_written * times
        self.time_ns += other.time_ns * times
        for b, t in other.time_by_bound.items():
            self.time_by_bound[b] += t * times
        self.unsupported += other.unsupported * times
        self.kernel_count += other.kernel_count * times
        self.kernel_bytes += other.kernel_bytes * times
        self.removed_flops += other.removed_flops * times

    def add_leaf(self, cost: OpCost, time_ns: float, bound: str) -> None:
        self.flops += cost.flops
        self.transcendentals += cost.transcendentals
        self.bytes_read += cost.bytes_read
        self.bytes_written += cost.bytes_written
        self.time_ns += time_ns
        self.time_by_bound[bound] += time_ns

    @property
    def bound(self) -> str:
        best = max(BOUNDS, key=lambda b: self.time_by_bound[b])
        return best if self.time_by_bound[best] > 0 else "overhead"


# XLA's copies of a value (an optimized module's loop carries: `mhlo.copy` of the init)
_COPIES = ("mhlo.copy", "stablehlo.copy")


def _uncopied(value):
    """The value a chain of copies starts from (the value itself when it is no copy)."""
    while True:
        op = defining_op(value)
        if op is None or op.name not in _COPIES:
            return value
        value = op.operands[0]


def _scalar_const(value) -> int | None:
    """Integer value of a scalar/splat stablehlo.constant (or arith.constant), perhaps
    through copies (an XLA-compiled loop's init)."""
    op = defining_op(_uncopied(value))
    if op is None or op.name not in ("stablehlo.constant", "arith.constant"):
        return None
    attr = op.attributes["value"]
    try:
        dense = ir.DenseIntElementsAttr(attr)
    except (ValueError, TypeError):
        try:
            return int(ir.IntegerAttr(attr).value)
        except (ValueError, TypeError):
            return None
    if not dense.is_splat and len(dense) != 1:
        return None
    return int(dense.get_splat_value().value) if dense.is_splat else int(dense[0])


def _block_arg_index(value, block) -> int | None:
    value = _uncopied(value)
    if isinstance(value, ir.BlockArgument):
        if value.owner == block:
            return value.arg_number
    return None



def trip_count_hint(while_op: ir.Operation) -> int | None:
    """The iterations a user gave a loop whose count the IR does not fix (a data-dependent
    `stablehlo.while`): `costmodel.trip_count = N : i64` on the op; None when absent."""
    if TRIP_COUNT_ATTR not in while_op.attributes:
        return None
    try:
        n = ir.IntegerAttr(while_op.attributes[TRIP_COUNT_ATTR]).value
    except (ValueError, TypeError):
        return None
    return n if n >= 0 else None


def infer_trip_count(while_op: ir.Operation) -> int | None:
    """Trip count of a counted loop (jax fori_loop / scan); else the op's
    costmodel.trip_count hint (trip_count_hint); else None."""
    n = _counted_loop_trips(while_op)
    return n if n is not None else trip_count_hint(while_op)


def _single_op_of(value):
    """(name, operands, op with its attributes) of the op that defines `value`; through a
    compiled kernel (an `mhlo.fusion` computing that value with one op of its parameters
    and constants: an XLA-compiled loop's compare or increment), the inner op with its
    parameters mapped to the fusion's operands. None when nothing defines it."""
    op = defining_op(value)
    if op is None:
        return None
    if op.name == "func.call" and len(op.results) == 1:  # a call of an outlined fusion
        body = callee_of(op)
        if body is None or len(body.regions[0].blocks) != 1:
            return None
        block = body.regions[0].blocks[0]
    elif op.name == "mhlo.fusion" and len(op.results) == 1 and len(op.regions[0].blocks) == 1:
        block = op.regions[0].blocks[0]
    else:
        return op.name, list(op.operands), op
    ops = list(block.operations)
    root = defining_op(ops[-1].operands[0]) if ops and len(ops[-1].operands) == 1 else None
    if root is None or any(o.operation.name not in ("stablehlo.constant", "mhlo.constant") for o in ops[:-1] if o.operation != root):
        return None
    outer = list(op.operands)
    mapped = []
    for v in root.operands:
        i = v.arg_number if isinstance(v, ir.BlockArgument) and v.owner == block else None
        mapped.append(outer[i] if i is not None else v)
    return root.name, mapped, root


def _counted_loop_trips(while_op: ir.Operation) -> int | None:
    """Trip count of a counted loop (jax fori_loop / scan), or None.

    Pattern: cond returns `compare DIR, %iv, %bound` where %iv is a loop-carried value
    with a constant init whose body update is `%iv + const` (or - const), and %bound is
    a constant or a loop-invariant carried value with a constant init.
    """
    try:
        cond_block = while_op.regions[0].blocks[0]
        body_block = while_op.regions[1].blocks[0]
        ret = list(cond_block.operations)[-1]
        found = _single_op_of(ret.operands[0])
        if found is None or found[0] != "stablehlo.compare":
            return None
        _name, (lhs, rhs), pred = found
        direction = str(pred.attributes["comparison_direction"])
        # '#stablehlo<comparison_direction LT>' -> LT
        direction = direction.rsplit(" ", 1)[-1].rstrip(">")
        body_ret = list(body_block.operations)[-1]
        inits = list(while_op.operands)

        def carried_invariant_const(v) -> int | None:
            c = _scalar_const(v)
            if c is not None:
                return c
            idx = _block_arg_index(v, cond_block)
            if idx is None:
                return None
            # invariant: body returns its own block argument at idx
            if _block_arg_index(body_ret.operands[idx], body_block) != idx:
                return None
            return _scalar_const(inits[idx])

        def induction(v):
            idx = _block_arg_index(v, cond_block)
            if idx is None:
                return None
            start = _scalar_const(inits[idx])
            if start is None:
                return None
            found = _single_op_of(body_ret.operands[idx])
            if found is None or found[0] not in ("stablehlo.add", "stablehlo.subtract"):
                return None
            upd_name, (a, b), _upd = found
            if _block_arg_index(a, body_block) == idx and _scalar_const(b) is not None:
                step = _scalar_const(b)
            elif upd_name == "stablehlo.add" and _block_arg_index(b, body_block) == idx and _scalar_const(a) is not None:
                step = _scalar_const(a)
            else:
                return None
            if upd_name == "stablehlo.subtract":
                step = -step
            return start, step

        flip = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}
        iv = induction(lhs)
        bound = carried_invariant_const(rhs)
        if iv is None or bound is None:
            iv = induction(rhs)
            bound = carried_invariant_const(lhs)
            direction = flip.get(direction, direction)
        if iv is None or bound is None:
            return None
        start, step = iv
        if step == 0:
            return None
        span = bound - start
        if direction == "LT" and step > 0:
            return max(0, -(-span // step))
        if direction == "LE" and step > 0:
            return max(0, span // step + 1)
        if direction == "GT" and step < 0:
            return max(0, -(-(-span) // -step))
        if direction == "GE" and step < 0:
            return max(0, (-span) // -step + 1)
        if direction == "NE" and span % step == 0 and span // step >= 0:
            return span // step
        return None
    except (IndexError, KeyError, ValueError, TypeError, AttributeError):
        return None


class CostEngine:
    """Costs one module with one backend. Create one per run."""

    def __init__(
        self,
        backend,
        hardware_name: str,
        diagnostics: DiagnosticEngine,
        *,
        backend_name: str | None = None,
        fusion: str = "none",
        formation_cache: dict | None = None,
        kernel_former=None,
        branch: str | int = "max",
        nested_costs: bool = True,
        unknown_trip_count: int | None = None,
        trip_count_option: str = "annotate-cost's unknown-trip-count=N",
    ):
        from .branches import parse_policy

        # how the warning on a loop of unknown trip count names the option that gives it
        # (costmodel predict: its own --unknown-trip-count N)
        self.trip_count_option = trip_count_option

        # the iterations of a while loop whose count neither the IR nor a
        # costmodel.trip_count hint gives (None: one, with a warning)
        self.unknown_trip_count = unknown_trip_count

        self.backend = backend
        # kernels formed elsewhere (fusion=iree: IREE's dispatch regions): an object with
        # form(nodes) -> [Kernel] per block and summary() -> extra summary entries
        self.kernel_former = kernel_former
        # which branch of a case/if counts (costmodel.branches): max, mean or an index
        self.branch = parse_policy(branch)
        # kernel formation policy: "none" (every op its own kernel, no kernel attributes),
        # "xla-gpu", "xla-tpu"; "given" is chosen for modules XLA already fused.
        self.fusion = fusion
        self.policy = fusion
        if fusion == "none" and getattr(backend, "kernels_only", False):
            # a backend that measures or learns kernels (profiled, learned): every op is
            # handed over as a kernel of its own (formation policy "none": no fusion)
            self.fusion = "ops"
        self._next_kernel = 0
        self._leaf_cache: dict = {}
        # Kernel formation does not depend on the hardware or the backend: callers that
        # cost clones of one module several times (costmodel predict) share this dict, and
        # the n-th block formed reuses the grouping of the n-th block of the first run.
        self._formation_cache = formation_cache
        # False: an op whose cost comes from the formation cache leaves the ops inside its
        # regions (a reducer, a comparator) without a costmodel.cost of their own; its own
        # cost and the totals are the same (costmodel predict's clones, never printed)
        self._nested_costs = nested_costs
        self._nested_visits = 0  # regions costed so far (apply_cost, region_totals)
        self._block_seq = 0
        self._leaf_seq = 0
        self.backend_name = backend_name or getattr(backend, "name", type(backend).__name__)
        self.hardware_name = hardware_name
        self.diags = diagnostics
        self._attr_cache: dict = {}
        self._int_attrs: dict = {}  # value -> its i64 attribute (_cnt)
        self._str_attrs: dict = {}  # text -> its string attribute (_str)
        self._signature_cache: dict = {}
        self._func_totals: dict[str, Totals] = {}
        self._in_progress: set[str] = set()
        self._funcs: dict[str, ir.Operation] = {}
        self.op_count = 0
        self.dead_ops = 0  # ops no kernel runs: nothing reads them (kernel formation's DCE)
        self.unsupported_ops: dict[str, int] = {}
        self._i64 = None
        self._backend_attr = None
        self._decomp_cache: dict = {}
        self.program_overhead_ns = 0.0

    # -- attributes -----------------------------------------------------------
    def _cnt(self, value: int):
        """An i64 count attribute (count_attr's fast path: the i64 type is cached, and
        each value's attribute is made once per run)."""
        attr = self._int_attrs.get(value)
        if attr is None:
            if -(1 << 63) <= value < (1 << 63):
                attr = ir.IntegerAttr.get(self._i64, value)
            else:
                attr = count_attr(value)  # (an f64, with its overflow recorded: not kept)
                return attr
            self._int_attrs[value] = attr
        return attr

    def _str(self, text: str):
        attr = self._str_attrs.get(text)
        if attr is None:
            attr = self._str_attrs[text] = ir.StringAttr.get(text)
        return attr

    def _cost_attr(self, flops, transc, br, bw, time_ns, bound, trip_count=None):
        key = (flops, transc, br, bw, time_ns, bound, trip_count)
        attr = self._attr_cache.get(key)
        if attr is None:
            d = {
                "backend": self._backend_attr,
                "flops": self._cnt(flops),
                "transcendentals": self._cnt(transc),
                "bytes_read": self._cnt(br),
                "bytes_written": self._cnt(bw),
                "time_ns": f64_attr(time_ns),
                "bound": ir.StringAttr.get(bound),
            }
            if trip_count is not None:
                d["trip_count"] = self._cnt(trip_count)
            attr = ir.DictAttr.get(d)
            self._attr_cache[key] = attr
        return attr

    def _set_totals_attr(self, op: ir.Operation, t: Totals, trip_count=None) -> None:
        op.attributes[COST_ATTR] = self._cost_attr(
            t.flops, t.transcendentals, t.bytes_read, t.bytes_written, t.time_ns, t.bound, trip_count
        )

    # -- entry ------------------------------------------------------------------
    def run(self, module: ir.Operation) -> Totals:
        ctx = module.context
        with ctx, module.location:
            self._i64 = ir.IntegerType.get_signless(64)
            self._backend_attr = ir.StringAttr.get(self.backend_name)
            self._removed_attr = ir.UnitAttr.get()
            funcs = []
            for op in module.regions[0].blocks[0].operations:
                op = op.operation
                if op.name == "func.func":
                    name = ir.StringAttr(op.attributes["sym_name"]).value
                    self._funcs[name] = op
                    funcs.append((name, op))
            if not funcs:
                self.diags.warning(module.location, "the module holds no function: nothing to cost")
            cache = self._formation_cache
            if cache is not None:  # clones of one module: asked once
                fused = cache.get(("already fused",))
                if fused is None:
                    fused = cache[("already fused",)] = _already_fused(funcs)
            else:
                fused = self.fusion != "none" and _already_fused(funcs)
            if self.fusion != "none" and fused:
                self.policy = "given"
            total = Totals()
            entries = []
            for name, fn in funcs:
                t = self.func_totals(name)
                if t is None:  # a declaration: costed (unsupported) where it is called
                    continue
                vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
                if vis is None or ir.StringAttr(vis).value == "public":
                    total.add(t)
                    entries.append(name)
            # backends that predict a whole program's run (profiled, learned) add what it
            # pays once (one invocation of the runtime) on top of its kernels
            overhead = getattr(self.backend, "program_overhead_ns", None)
            self.program_overhead_ns = float(overhead()) if overhead is not None and entries else 0.0
            if self.program_overhead_ns:
                total.time_ns += self.program_overhead_ns
                total.time_by_bound["overhead"] += self.program_overhead_ns
            self._write_summary(module, total, entries)
            from . import ir as ir_mod

            if ir_mod.OVERFLOWED_COUNTS:
                biggest = max(ir_mod.OVERFLOWED_COUNTS)
                ir_mod.OVERFLOWED_COUNTS.clear()
                self.diags.warning(
                    module.location,
                    f"counts beyond int64 (up to {float(biggest):.3e}) are written as f64 attributes",
                )
            return total

    def _write_summary(self, module, total: Totals, entries: list[str]) -> None:
        d = {
            "hardware": ir.StringAttr.get(self.hardware_name),
            "backend": ir.StringAttr.get(self.backend_name),
            "entry_functions": ir.ArrayAttr.get([ir.StringAttr.get(e) for e in entries]),
            "total_flops": self._cnt(total.flops),
            "total_transcendentals": self._cnt(total.transcendentals),
            "total_bytes": self._cnt(total.bytes_read + total.bytes_written),
            "total_bytes_read": self._cnt(total.bytes_read),
            "total_bytes_written": self._cnt(total.bytes_written),
            "total_time_ns": f64_attr(total.time_ns),
            "compute_bound_time_ns": f64_attr(total.time_by_bound["compute"]),
            "memory_bound_time_ns": f64_attr(total.time_by_bound["memory"]),
            "overhead_bound_time_ns": f64_attr(total.time_by_bound["overhead"]),
            "op_count": self._cnt(self.op_count),
            "unsupported_count": self._cnt(sum(self.unsupported_ops.values())),
        }
        d["branch"] = ir.StringAttr.get(str(self.branch))
        if self.fusion != "none":
            d["fusion"] = ir.StringAttr.get(self.policy)
            d["kernel_count"] = self._cnt(total.kernel_count)
            d["kernel_bytes"] = self._cnt(total.kernel_bytes)
            if self.dead_ops:
                d["dead_op_count"] = self._cnt(self.dead_ops)
                # their flops, in total_flops (the program as written, as XLA's cost
                # analysis counts it) but run by no kernel: MFU leaves them out
                d["removed_flops"] = self._cnt(total.removed_flops)
        if self.kernel_former is not None:
            for key, value in self.kernel_former.summary().items():
                if isinstance(value, dict):
                    d[key] = ir.DictAttr.get({k: self._cnt(v) for k, v in value.items()})
                else:
                    d[key] = self._cnt(value) if isinstance(value, int) else ir.StringAttr.get(str(value))
        if self.program_overhead_ns:
            d["program_overhead_ns"] = f64_attr(self.program_overhead_ns)
        notes = getattr(self.backend, "warnings", None)
        for text in notes() if notes is not None else ():  # e.g. learned: a model of another CPU
            self.diags.warning(module.location, text)
        stats = getattr(self.backend, "summary_stats", None)
        if stats is not None:  # e.g. profiled: kernels measured / from cache / fallen back
            d["backend_stats"] = ir.DictAttr.get(
                {k: (f64_attr(v) if isinstance(v, float) else self._cnt(int(v))) for k, v in sorted(stats().items())}
            )
        if self.unsupported_ops:
            d["unsupported_ops"] = ir.DictAttr.get(
                {k: self._cnt(v) for k, v in sorted(self.unsupported_ops.items())}
            )
        module.attributes[SUMMARY_ATTR] = ir.DictAttr.get(d)

    # -- functions and blocks -----------------------------------------------------
    def func_totals(self, name: str) -> Totals | None:
        if name in self._func_totals:
            return self._func_totals[name]
        fn = self._funcs.get(name)
        if fn is None or not self.has_body(name):
            return None  # absent, or a declaration (an external function): reported at the call site
        if name in self._in_progress:
            return None  # recursion: reported at the call site
        self._in_progress.add(name)
        t = Totals()
        outlined = self.policy == "given" and name.startswith(OUTLINED_FUSION_PREFIXES)
        for block in fn.regions[0].blocks:
            if outlined:  # the body of one given kernel: its ops are not kernels
                for op in block.operations:
                    self.cost_op(op.operation, t)
            else:
                t.add(self.block_totals(block))
        self._in_progress.discard(name)
        self._func_totals[name] = t
        self._set_totals_attr(fn, t)
        return t

    def has_body(self, name: str) -> bool:
        """Does the module define function @name (a func.func with a body, not a
        declaration such as `func.func private @f(...)`, whose work is unknown)?"""
        fn = self._funcs.get(name)
        return fn is not None and bool(fn.regions) and len(fn.regions[0].blocks) > 0

    def block_totals(self, block) -> Totals:
        if self.fusion != "none":
            return self._kernel_block_totals(block)
        t = Totals()
        for op in block.operations:
            self.cost_op(op.operation, t)
        return t

    # -- kernel formation ----------------------------------------------------------
    def _leaf_cost(self, op: ir.Operation, into: Totals, types=None) -> OpCost | None:
        """The op's own (unfused) cost from the rule table, no attribute written; None
        (and the op marked unsupported) when it cannot be costed. `types`: the op's
        (operand types, result types) when the caller has them. With a shared formation
        cache (clones of one module), the n-th leaf of this run reuses the n-th leaf's
        cost of the first run: rules do not depend on the hardware or the backend."""
        cache = self._formation_cache
        if cache is None:
            return self._leaf_cost_uncached(op, into, types)
        self._leaf_seq += 1
        key = ("leaf", self._leaf_seq, op.name)
        hit = cache.get(key)
        if hit is not None:
            kind, value, ops_counted, regions = hit
            if regions and self._nested_costs:
                # its rule also costs the op's regions (a reducer, a comparator, the body
                # of an op without a rule), annotating their ops: run it on this clone too
                return self._leaf_cost_uncached(op, into, types)
            self.op_count += ops_counted
            if kind == "cost":
                return value
            self._mark_unsupported(op, value)
            into.unsupported += 1
            return None
        before, visits = self.op_count, self._nested_visits
        cost = self._leaf_cost_uncached(op, into, types)
        regions = self._nested_visits != visits
        if cost is None:
            why = ir.StringAttr(op.attributes[UNSUPPORTED_ATTR]).value if UNSUPPORTED_ATTR in op.attributes else "?"
            cache[key] = ("unsupported", why, self.op_count - before, regions)
        else:
            cache[key] = ("cost", cost, self.op_count - before, regions)
        return cost

    def _leaf_cost_uncached(self, op: ir.Operation, into: Totals, types=None) -> OpCost | None:
        name = op.name
        rule = rule_for(name)
        if rule is None:
            if op.regions and any(len(r.blocks) for r in op.regions):
                for r in op.regions:
                    self.region_totals(r)
            self._mark_unsupported(op, "no cost rule for this op")
            into.unsupported += 1
            return None
        key = None
        if getattr(rule, "type_only", False) or getattr(rule, "attrs_only", False):
            if types is None:
                types = (tuple(v.type for v in op.operands), tuple(v.type for v in op.results))
            key = (name, types[0], types[1])
            if getattr(rule, "attrs_only", False):  # attributes are uniqued: equal ones are one object
                attrs = op.attributes
                key += (tuple((a, attrs[a]) for a in attrs),)
            hit = self._leaf_cache.get(key)
            if hit is not None:
                return hit
        try:
            cost = rule(op, self)
        except Unsupported as err:
            self._mark_unsupported(op, str(err))
            into.unsupported += 1
            return None
        if key is not None:
            self._leaf_cache[key] = cost
        return cost

    def _kernel_block_totals(self, block) -> Totals:
        from .backends import estimate_kernel
        from .kernels import Node
        from .collectives import custom_collective_kind
        from .kernels.formation import BOUNDARY, COLLECTIVE, FREE, OPAQUE, op_class, single_participant

        t = Totals()
        nodes = []
        for op in block.operations:
            op = op.operation
            name = op.name
            self.op_count += 1
            if name == "func.call" and self.policy == "given":
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                if callee.startswith(OUTLINED_FUSION_PREFIXES) and callee in self._funcs:
                    ft = self.func_totals(callee)
                    if ft is not None:
                        nodes.append(Node(op, name, _call_kernel_cost(op, ft, self._funcs[callee]), OPAQUE))
                        continue
            if name in REGION_OPS:
                rt = self._region_op(op)
                if rt is not None:
                    t.add(rt)
                nodes.append(Node(op, name, None, BOUNDARY))
                continue
            cls = op_class(name)
            if cls == OPAQUE and name == "stablehlo.custom_call" and custom_collective_kind(op):
                cls = COLLECTIVE  # a collective exported as a custom call (ragged_all_to_all)
            if cls == COLLECTIVE and single_participant(op):
                nodes.append(Node(op, name, OpCost(), FREE, passthrough=True))
                continue
            cache = self._formation_cache
            if cache is not None and ("leaf", self._leaf_seq + 1, name) in cache:
                # a clone of a module costed before: its leaf cost is known, and its
                # formation too unless the block differs (formation then asks the ops)
                nodes.append(Node(op, name, self._leaf_cost(op, t), cls))
                continue
            # the operands and results, fetched once for the rules and the formation
            # (each binding call costs about a microsecond)
            operands = tuple(op.operands)
            results = tuple(op.results)
            types = (tuple(v.type for v in operands), tuple(v.type for v in results))
            # most ops share the signature of an op of a type-only rule costed before
            cost = self._leaf_cache.get((name, *types)) if self._formation_cache is None else None
            if cost is None:
                cost = self._leaf_cost(op, t, types)
            nodes.append(Node(op, name, cost, cls, operands=operands, results=results, types=types))
        kernels = self._form(nodes)
        placed: dict = {}
        copies: dict = {}
        for k in kernels:
            k.id = self._next_kernel
            self._next_kernel += 1
            kc = estimate_kernel(self.backend, k)
            t.time_ns += kc.time_ns
            t.time_by_bound[kc.bound] += kc.time_ns
            t.kernel_count += k.launches
            t.kernel_bytes += k.bytes_read + k.bytes_written
            id_attr = self._cnt(k.id)
            # keyed by node index: an ir.Operation's hash changes with its attributes
            for i in k.node_ids:
                placed[i] = (k, kc, id_attr)
            for i in k.duplicated_ids:
                placed.setdefault(i, (k, kc, id_attr))
                copies[i] = copies.get(i, 0) + 1
        members = {i for k in kernels for i in k.node_ids}
        for k in kernels:
            k.root.attributes[KERNEL_COST_ATTR] = self._kernel_attr(k, placed[k.node_ids[-1]][1])
        for i, nd in enumerate(nodes):
            cost = nd.cost
            if cost is None:
                continue
            op = nd.op
            hit = placed.get(i)
            if hit is None:
                if nd.cls == COLLECTIVE:
                    # communication is extract-collectives' business, its reduction
                    # included (_collective_time)
                    time_ns, bound = self._collective_time(op, cost)
                else:  # no kernel: bitcast-like ops, constants, tuple plumbing, dead ops
                    time_ns, bound = 0.0, "overhead"
                    if nd.dead:
                        self.dead_ops += 1
                        t.removed_flops += cost.flops
                        # XLA's CSE or DCE removes it before fusion: no kernel, no buffer
                        # (costmodel memory reads this)
                        op.attributes[REMOVED_ATTR] = self._removed_attr
                op.attributes[COST_ATTR] = self._cost_attr(
                    cost.flops, cost.transcendentals, cost.bytes_read, cost.bytes_written, time_ns, bound
                )
                t.add_leaf(cost, time_ns, bound)
                continue
            k, kc, id_attr = hit
            time_ns = kc.time_ns if i == k.node_ids[-1] else 0.0
            attrs = op.attributes
            attrs[COST_ATTR] = self._cost_attr(
                cost.flops, cost.transcendentals, cost.bytes_read, cost.bytes_written, time_ns, kc.bound
            )
            attrs[KERNEL_ATTR] = id_attr
            if i in copies and i not in members:
                attrs[KERNEL_COPIES_ATTR] = self._cnt(copies[i])
            # counts per op; the kernel's time was added above, once
            t.flops += cost.flops
            t.transcendentals += cost.transcendentals
            t.bytes_read += cost.bytes_read
            t.bytes_written += cost.bytes_written
        return t

    def _form(self, nodes):
        from .kernels import form_kernels

        if self.kernel_former is not None:
            return self.kernel_former.form(nodes)
        self._block_seq += 1
        cache = self._formation_cache
        if cache is None:
            return form_kernels(nodes, self.policy)
        key = (self.policy, self._block_seq, len(nodes), tuple(nd.name for nd in nodes))
        hit = cache.get(key)
        if hit is None:
            kernels = form_kernels(nodes, self.policy)
            cache[key] = (
                [dataclasses.replace(k, ops=[], root=None, duplicated=[]) for k in kernels],
                [i for i, nd in enumerate(nodes) if nd.dead],
            )
            return kernels
        hit, dead = hit
        for i in dead:
            nodes[i].dead = True
        out = []
        new = object.__new__
        for k in hit:
            # what dataclasses.replace(k, ops=, root=, duplicated=, id=-1) gives, without
            # its per-field __init__ (Kernel has no __post_init__): a shallow copy
            nk = new(type(k))
            nk.__dict__.update(k.__dict__)
            nk.ops = ops = [nodes[i].op for i in k.node_ids]
            nk.root = ops[-1]
            nk.duplicated = [nodes[i].op for i in k.duplicated_ids]
            nk.id = -1
            out.append(nk)
        return out

    def _kernel_attr(self, k, kc):
        d = {
            "id": self._cnt(k.id),
            "kind": self._str(k.kind),
            "ops": self._cnt(len(k.ops) + len(k.duplicated)),
            "launches": self._cnt(k.launches),
            "flops": self._cnt(k.flops),
            "transcendentals": self._cnt(k.transcendentals),
            "bytes_read": self._cnt(k.bytes_read),
            "bytes_written": self._cnt(k.bytes_written),
            "time_ns": f64_attr(kc.time_ns),
            "bound": self._str(kc.bound),
            "backend": self._backend_attr,
        }
        for key, value in sorted({**k.attrs, **(kc.detail or {})}.items()):
            if isinstance(value, bool) or isinstance(value, str):
                d[key] = ir.BoolAttr.get(value) if isinstance(value, bool) else self._str(value)
            elif isinstance(value, int):
                d[key] = self._cnt(value)
            elif isinstance(value, float):
                d[key] = f64_attr(value)
        return ir.DictAttr.get(d)

    def region_totals(self, region) -> Totals:
        self._nested_visits += 1
        t = Totals()
        for block in region.blocks:
            t.add(self.block_totals(block))
        return t

    # -- one op ------------------------------------------------------------------
    def _mark_unsupported(self, op: ir.Operation, why: str) -> None:
        op.attributes[UNSUPPORTED_ATTR] = ir.StringAttr.get(why)
        if COST_ATTR in op.attributes:  # a stale cost of an earlier run: unknown now
            del op.attributes[COST_ATTR]
        self.unsupported_ops[op.name] = self.unsupported_ops.get(op.name, 0) + 1
        self.diags.warning(op.location, f"'{op.name}' not costed: {why}; marked {UNSUPPORTED_ATTR}")

    def cost_op(self, op: ir.Operation, into: Totals) -> None:
        """Cost `op`, annotate it, and add one execution of it to `into`."""
        name = op.name
        self.op_count += 1
        if name in REGION_OPS:
            t = self._region_op(op)
            if t is not None:
                into.add(t)
            return
        rule = rule_for(name)
        if rule is None:
            if op.regions and any(len(r.blocks) for r in op.regions):
                # Unknown op with regions: cost what is inside, flag the op itself.
                for r in op.regions:
                    self.region_totals(r)
            self._mark_unsupported(op, "no cost rule for this op")
            into.unsupported += 1
            return
        key = None
        if getattr(rule, "type_only", False):
            # The cost depends on the op name and types alone: cost each signature once.
            key = (name, tuple(v.type for v in op.operands), tuple(v.type for v in op.results))
            hit = self._signature_cache.get(key)
            if hit is not None:
                cost, time_ns, bound, attr = hit
                op.attributes[COST_ATTR] = attr
                into.add_leaf(cost, time_ns, bound)
                return
        try:
            cost = rule(op, self)
        except Unsupported as err:
            self._mark_unsupported(op, str(err))
            into.unsupported += 1
            return
        if name in COLLECTIVE_OPS:
            time_ns, bound = self._collective_time(op, cost)
        else:
            time_ns, bound = self.backend.estimate(cost)
        attr = self._cost_attr(cost.flops, cost.transcendentals, cost.bytes_read, cost.bytes_written, time_ns, bound)
        op.attributes[COST_ATTR] = attr
        into.add_leaf(cost, time_ns, bound)
        if key is not None:
            self._signature_cache[key] = (cost, time_ns, bound, attr)

    def _collective_time(self, op, cost: OpCost) -> tuple[float, str]:
        """The compute time of a collective's local work: none. Its flops and bytes are
        counted (XLA's cost analysis counts an all-reduce's reduction), but the reduction
        runs inside the collective (NCCL reduces in its copy kernel, a TPU in its ICI
        transfers): the communication model prices it, in the measured bus bandwidth of a
        calibrated link, as `red(msg)` on another (docs/communication-model.md). Charging
        it here too counted it twice (a 256 MiB all-reduce on h100-sxm-x4: 0.19 ms of
        compute beside its 1.13 ms). A collective of dynamic shape, which the Chakra trace
        cannot communicate (it exports it as local work), keeps its estimate."""
        if any(type_info(v.type).dynamic for v in op.results):
            return self.backend.estimate(cost)
        return 0.0, "overhead"

    # RuleEnv: one application of a scalar computation (reduce bodies ...)
    def apply_cost(self, region) -> OpCost:
        self._nested_visits += 1
        per = OpCost()
        for block in region.blocks:
            t = Totals()
            for op in block.operations:
                self.cost_op(op.operation, t)
            per.flops += t.flops
            per.transcendentals += t.transcendentals
        return per

    def _host_sync_ns(self) -> float:
        """What one host round trip costs with this backend (0 for device-side control
        flow; profiled/learned: IREE reads a loop condition or branch predicate back)."""
        fn = getattr(self.backend, "host_sync_ns", None)
        return float(fn()) if fn is not None else 0.0

    def _scan_length(self, op) -> int:
        return _scan_length_of(op)

    # RuleEnv: cost of the ops a decomposition pass rewrites `op` into
    def decomposed_cost(self, op: ir.Operation, pipeline: str) -> OpCost:
        attrs = {k: op.attributes[k] for k in (getattr(a, "name", a) for a in op.attributes) if not k.startswith("costmodel.")}
        in_types = [v.type for v in op.operands]
        out_types = [v.type for v in op.results]
        key = (
            pipeline,
            op.name,
            tuple(str(t) for t in in_types),
            tuple(str(t) for t in out_types),
            tuple(sorted((k, str(v)) for k, v in attrs.items())),
        )
        hit = self._decomp_cache.get(key)
        if hit is not None:
            if isinstance(hit, Exception):
                raise hit
            return OpCost(flops=hit[0], transcendentals=hit[1])
        try:
            flops, transc = _cost_decomposition(op.context, op.name, in_types, out_types, attrs, pipeline)
        except Unsupported as err:
            self._decomp_cache[key] = err
            raise
        self._decomp_cache[key] = (flops, transc)
        return OpCost(flops=flops, transcendentals=transc)

    def _region_op(self, op: ir.Operation) -> Totals | None:
        name = op.name
        if name == "stablehlo.while":
            cond = self.region_totals(op.regions[0])
            body = self.region_totals(op.regions[1])
            trip = infer_trip_count(op)
            if trip is None and self.unknown_trip_count is not None:
                trip = self.unknown_trip_count  # the user's, for every such loop
            t = Totals()
            # a runtime that evaluates the condition on the host (IREE) waits for the
            # device once per iteration: the backend says what that round trip costs
            sync = self._host_sync_ns() * (trip if trip is not None else 1)
            if sync:
                t.time_ns += sync
                t.time_by_bound["overhead"] += sync
            if trip is None:
                self.diags.warning(
                    op.location,
                    "cannot infer the trip count of this 'stablehlo.while' (not a counted loop with "
                    "constant start, bound and step); costing one iteration (give it with "
                    f"{self.trip_count_option}, or {TRIP_COUNT_ATTR} = N : i64 on the op)",
                )
                t.add(cond)
                t.add(body)
            else:
                # cond runs trip+1 times in reality; XLA and we count (cond + body) x trip.
                t.add(cond, trip)
                t.add(body, trip)
            self._set_totals_attr(op, t, trip)
            return t
        if name in ("stablehlo.case", "stablehlo.if"):
            # The branch policy (costmodel.branches): every property from the same branch
            # (max: the costliest, <k>: branch k), or the mean over the branches. The
            # weights go on the op for the kernel report, memory, collectives and Chakra.
            from .branches import set_op_weights, weights_for

            branches = [self.region_totals(r) for r in op.regions]
            weights = weights_for(self.branch, [b.time_ns for b in branches])
            t = Totals()
            for b, w in zip(branches, weights):
                if w:
                    t.add(b, int(w) if float(w).is_integer() else w)
            if any(0 < w < 1 for w in weights):  # mean: whole counts
                for f in ("flops", "transcendentals", "bytes_read", "bytes_written", "kernel_count", "kernel_bytes", "removed_flops"):
                    setattr(t, f, int(round(getattr(t, f))))
            if self.branch == "xla":  # each count its maximum over the branches (XLA's cost analysis)
                for f in ("flops", "transcendentals", "bytes_read", "bytes_written", "kernel_count", "kernel_bytes", "removed_flops"):
                    setattr(t, f, max([getattr(b, f) for b in branches] + [0]))
            # an op we cannot cost in any branch stays flagged
            t.unsupported = max([b.unsupported for b in branches] + [0])
            sync = self._host_sync_ns()  # the predicate read back on the host (IREE)
            if sync:
                t.time_ns += sync
                t.time_by_bound["overhead"] += sync
            set_op_weights(op, weights)
            self._set_totals_attr(op, t)
            return t
        if name == "chlo.scan":
            body = Totals()
            for r in op.regions:
                body.add(self.region_totals(r))
            length = self._scan_length(op)
            t = Totals()
            t.add(body, length)
            self._set_totals_attr(op, t, length)
            return t
        key = {"func.call": "callee", "stablehlo.composite": "decomposition"}.get(name, "called_computation")
        if name in ("func.call", "stablehlo.composite") or (name == "stablehlo.async_start" and key in op.attributes):
            callee = ir.FlatSymbolRefAttr(op.attributes[key]).value
            ft = self.func_totals(callee)
            if ft is None:
                if callee in self._in_progress:
                    why = f"recursive call to @{callee}"
                elif callee in self._funcs:
                    why = (f"calls @{callee}, which has no body (a declaration of an external function): "
                           "its work is unknown")
                else:
                    why = f"callee @{callee} is not a func.func in this module"
                self._mark_unsupported(op, why)
                t = Totals()
                t.unsupported = 1
                return t
            t = Totals()
            t.add(ft)
            self._set_totals_attr(op, t)
            return t
        # sdy.manual_computation, sdy.named_computation, async_start with an inline
        # region: the body once.
        t = Totals()
        for r in op.regions:
            t.add(self.region_totals(r))
        self._set_totals_attr(op, t)
        return t




def _already_fused(funcs) -> bool:
    """A module XLA already compiled (mhlo.fusion ops in a function body, or in the body
    of its loops and conditionals: a compiled scan's step)."""
    stack = [fn.regions[0] for _name, fn in funcs]
    while stack:
        for block in stack.pop().blocks:
            for op in block.operations:
                op = op.operation
                name = op.name
                if name == "mhlo.fusion":
                    return True
                if name in ("stablehlo.while", "stablehlo.case", "stablehlo.if"):
                    stack.extend(op.regions)
    return False


def compiled_by_xla(module) -> bool:
    """A module XLA already compiled (an mhlo.fusion in a function, its loops included):
    its kernels are XLA's and, when it ran SPMD, it is partitioned per device."""
    funcs = [(None, op.operation) for op in module.regions[0].blocks[0].operations if op.operation.name == "func.func"]
    return _already_fused(funcs)


def _call_kernel_cost(op, ft: Totals, callee=None) -> OpCost:
    """A call of an outlined XLA fusion: the callee's work, the call's operand and result
    bytes (what the kernel reads and writes; an update in place of a parameter: the update
    only, rules.in_place_update_savings)."""
    from .rules import in_place_update_savings

    nbytes_in = sum(type_info(v.type).nbytes for v in op.operands)
    nbytes_out = sum(type_info(v.type).nbytes for v in op.results)
    from .rules import MATRIX, VECTOR, _dot_dtype

    unit, dtype = VECTOR, "f32"
    if callee is not None and len(callee.regions[0].blocks):
        not_read, not_written = in_place_update_savings(callee.regions[0].blocks[0])
        nbytes_in -= not_read
        nbytes_out -= not_written
        # a dot or convolution inside: the kernel runs on the matrix units (mhlo_fusion_rule)
        for inner in callee.regions[0].blocks[0].operations:
            inner = inner.operation
            if inner.name in ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"):
                unit = MATRIX
                dtype = _dot_dtype(type_info(inner.operands[0].type), type_info(inner.operands[1].type))
                break
    return OpCost(flops=ft.flops, transcendentals=ft.transcendentals, bytes_read=nbytes_in, bytes_written=nbytes_out,
                  unit=unit, dtype=dtype)


def _scan_length_of(op) -> int:
    dim = int(ir.IntegerAttr(op.attributes["dimension"]).value)
    if "scan_dim_size" in op.attributes:
        return int(ir.IntegerAttr(op.attributes["scan_dim_size"]).value)
    for v in list(op.operands) + list(op.results):
        info = type_info(v.type)
        if info.is_tensor and not info.dynamic and len(info.shape) > dim:
            return info.shape[dim]
    return 1


def _cost_decomposition(ctx, name, in_types, out_types, attrs, pipeline) -> tuple[int, int]:
    """Build `func @f(args) { name(args) }`, run `pipeline` on it and cost the result."""
    from jaxlib.mlir.dialects import func as func_d
    from jaxlib.mlir.passmanager import PassManager

    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            fn = func_d.FuncOp("f", ir.FunctionType.get(in_types, out_types))
            block = fn.add_entry_block()
            with ir.InsertionPoint(block):
                new = ir.Operation.create(name, results=out_types, operands=list(block.arguments), attributes=attrs)
                func_d.ReturnOp(list(new.results))
        try:
            PassManager.parse(f"builtin.module({pipeline})").run(module.operation)
        except Exception as err:  # MLIRError: the pass cannot decompose this instance
            raise Unsupported(f"cannot decompose with {pipeline}: {str(err).splitlines()[0]}") from None
        sub = CostEngine(_NullBackend(), "none", DiagnosticEngine())
        sub._i64 = ir.IntegerType.get_signless(64)
        sub._backend_attr = ir.StringAttr.get("null")
        t = Totals()
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func":
                for b in op.regions[0].blocks:
                    out_text = [str(t) for t in out_types]
                    for inner in b.operations:
                        if inner.operation.name == name and [str(r.type) for r in inner.operation.results] == out_text:
                            raise NotDecomposed(f"{pipeline} does not decompose this '{name}'")
                    # The HLO conversion constant-folds ops of constants (log(0.5) ...):
                    # they cost nothing, as in XLA.
                    folded: set = set()
                    for inner in b.operations:
                        inner = inner.operation
                        if inner.name.startswith(("shape.", "tensor.", "arith.")):
                            continue  # shape bookkeeping of the broadcast expansion
                        if inner.name == "stablehlo.constant" or (
                            not len(inner.regions)
                            and len(inner.operands)
                            and all(v in folded for v in inner.operands)
                        ):
                            folded.update(inner.results)
                            continue
                        sub.cost_op(inner, t)
        if sub.unsupported_ops:
            raise Unsupported(f"its decomposition has ops without a cost: {', '.join(sorted(sub.unsupported_ops))}")
        return t.flops, t.transcendentals


class _NullBackend:
    name = "null"

    def estimate(self, cost):
        return 0.0, "overhead"


def dynamic_operands(op: ir.Operation) -> bool:
    return any(type_info(v.type).dynamic for v in list(op.operands) + list(op.results))
