"""The kernels of an annotated module, for `costmodel kernels FILE` and `costmodel predict`.

Reads `costmodel.kernel` (every op) and `costmodel.kernel_cost` (each kernel's root) and
counts how often each kernel runs in one execution of the program (loop trip counts x
call sites), walking from the public functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import ir

KERNEL_ATTR = "costmodel.kernel"
KERNEL_COST_ATTR = "costmodel.kernel_cost"


@dataclass
class KernelRow:
    id: int
    kind: str
    time_ns: float
    bound: str
    flops: int
    bytes_read: int
    bytes_written: int
    launches: int
    executions: int | float = 0  # fractional under annotate-cost's branch=mean
    ops: list = field(default_factory=list)  # op names (root last)
    shape: str = ""  # the root's result type
    location: str = ""
    # the name of its root's location: JAX's op name (`jit(f)/transpose(jvp(M))/head/dot_general`),
    # what XLA's profiles call the kernel's op_name; empty when the export has none
    name: str = ""
    # who timed it, where the backend says (profiled/learned: measured, cache, learned,
    # fallback); empty for roofline and calibrated
    profile: str = ""
    # a convolution kernel: what the library is asked to run (forward, backward_input,
    # backward_filter: XLA GPU's conv rewriter); empty otherwise
    conv: str = ""
    # a custom call's kernel: its call_target_name (lapack_ssyevd_ffi, TopK ...); empty otherwise
    target: str = ""
    # the other facts of its costmodel.kernel_cost: the formation's (expanded,
    # conv_padding, scatter_elements ...) and the backend's detail (tile_efficiency,
    # split_k, padding_ns, scatter_atomic_ns ...)
    detail: dict = field(default_factory=dict)

    @property
    def total_time_ns(self) -> float:
        return self.time_ns * self.executions

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "kind": self.kind,
            "executions": self.executions,
            "time_ns": self.time_ns,
            "total_time_ns": self.total_time_ns,
            "bound": self.bound,
            "flops": self.flops,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "launches": self.launches,
            "ops": self.ops,
            "shape": self.shape,
            "location": self.location,
            **({"name": self.name} if self.name else {}),
            **({"profile": self.profile} if self.profile else {}),
            **({"conv": self.conv} if self.conv else {}),
            **({"target": self.target} if self.target else {}),
            **({"detail": dict(self.detail)} if self.detail else {}),
        }


def has_kernels(module) -> bool:
    from ..engine import SUMMARY_ATTR

    if SUMMARY_ATTR not in module.attributes:
        return False
    d = ir.DictAttr(module.attributes[SUMMARY_ATTR])
    return "kernel_count" in d


def _int(d, key) -> int:
    from ..ir import attr_number

    return int(attr_number(d[key])) if key in d else 0


# keys of costmodel.kernel_cost that KernelRow has fields for
_ROW_KEYS = frozenset({"id", "kind", "time_ns", "bound", "flops", "transcendentals", "bytes_read", "bytes_written",
                       "launches", "ops", "backend", "profile", "conv"})


def _detail(d) -> dict:
    """The other entries of a costmodel.kernel_cost dict, as plain Python values."""
    from ..ir import dict_attr_values

    return dict_attr_values(d, skip=_ROW_KEYS)


# ops that run a function: the attribute naming it
_CALLS = {"func.call": "callee", "stablehlo.composite": "decomposition"}


def collect_kernels(module) -> list[KernelRow]:
    """Every kernel of the module with its executions per program run."""
    from ..ir import format_location, location_op_name

    rows: dict[int, KernelRow] = {}
    members: dict[int, list] = {}
    funcs = {}
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    # pass 1: kernels and their members
    stack = [module]
    while stack:
        op = stack.pop()
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    child = child.operation
                    attrs = child.attributes
                    if KERNEL_ATTR in attrs:
                        kid = ir.IntegerAttr(attrs[KERNEL_ATTR]).value
                        members.setdefault(kid, []).append(child.name)
                    if KERNEL_COST_ATTR in attrs:
                        d = ir.DictAttr(attrs[KERNEL_COST_ATTR])
                        kid = _int(d, "id")
                        shape = str(child.results[0].type) if len(child.results) else ""
                        rows[kid] = KernelRow(
                            id=kid,
                            kind=ir.StringAttr(d["kind"]).value,
                            time_ns=ir.FloatAttr(d["time_ns"]).value,
                            bound=ir.StringAttr(d["bound"]).value,
                            flops=_int(d, "flops") + _int(d, "transcendentals"),
                            bytes_read=_int(d, "bytes_read"),
                            bytes_written=_int(d, "bytes_written"),
                            launches=_int(d, "launches") or 1,
                            shape=shape,
                            location=format_location(child.location, ""),
                            name=location_op_name(child.location) or "",
                            profile=ir.StringAttr(d["profile"]).value if "profile" in d else "",
                            conv=ir.StringAttr(d["conv"]).value if "conv" in d else "",
                            target=(ir.StringAttr(attrs["call_target_name"]).value
                                    if child.name == "stablehlo.custom_call" and "call_target_name" in attrs else ""),
                            detail=_detail(d),
                        )
                    stack.append(child)
    for kid, names in members.items():
        if kid in rows:
            rows[kid].ops = names
    # pass 2: executions, from the public functions
    entries = []
    for name, fn in funcs.items():
        vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
        if vis is None or ir.StringAttr(vis).value == "public":
            entries.append(fn)
    from ..branches import CASE_OPS, op_weights

    # each function's body walked once, per call of it: its kernels' executions and its
    # calls; then the calls of every function from the entries down the call graph (a
    # call tree that fans out has 2^depth paths: walking each path took forever)
    kernel_runs: dict = {}  # function name -> {kernel id: runs per call}
    call_runs: dict = {}  # function name -> {callee: calls per call}
    for name, fn in funcs.items():
        kr, cr = kernel_runs.setdefault(name, {}), call_runs.setdefault(name, {})
        work = [(fn, 1)]
        while work:
            op, times = work.pop()
            # a case/if: each branch as often as the branch policy of annotate-cost says
            weights = op_weights(op) if op.name in CASE_OPS else None
            for r_index, region in enumerate(op.regions):
                if weights is not None and r_index < len(weights):
                    if not weights[r_index]:
                        continue
                    region_times = times * weights[r_index]
                    if float(region_times).is_integer():
                        region_times = int(region_times)
                else:
                    region_times = times
                for block in region.blocks:
                    for child in block.operations:
                        child = child.operation
                        attrs = child.attributes
                        if KERNEL_COST_ATTR in attrs:
                            kid = _int(ir.DictAttr(attrs[KERNEL_COST_ATTR]), "id")
                            if kid in rows:
                                kr[kid] = kr.get(kid, 0) + region_times
                        n = region_times
                        if child.name in ("stablehlo.while", "chlo.scan") and "costmodel.cost" in attrs:
                            d = ir.DictAttr(attrs["costmodel.cost"])
                            if "trip_count" in d:
                                n = times * max(0, _int(d, "trip_count"))
                        if child.name in _CALLS and _CALLS[child.name] in attrs:
                            # a call, or a composite run as its decomposition (as the engine costs it)
                            callee = ir.FlatSymbolRefAttr(attrs[_CALLS[child.name]]).value
                            if callee in funcs:
                                cr[callee] = cr.get(callee, 0) + n
                            continue
                        if child.regions:
                            work.append((child, n))
    # the call graph from the entries; a call back into a function on the current chain
    # (recursion) is not followed
    from ..ir import call_graph_order

    order, back = call_graph_order(call_runs, [ir.StringAttr(fn.attributes["sym_name"]).value for fn in entries])
    calls_of: dict = {}
    for fn in entries:
        root = ir.StringAttr(fn.attributes["sym_name"]).value
        calls_of[root] = calls_of.get(root, 0) + 1
    for name in reversed(order):  # callers before their callees
        n = calls_of.get(name, 0)
        if not n:
            continue
        for callee, m in call_runs[name].items():
            if (name, callee) not in back:
                calls_of[callee] = calls_of.get(callee, 0) + n * m
        for kid, runs in kernel_runs[name].items():
            rows[kid].executions += n * runs
    return sorted(rows.values(), key=lambda r: (-r.total_time_ns, r.id))


def _fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _ops_text(names: list[str], width: int = 40) -> str:
    short = [n.split(".", 1)[-1] for n in names]
    text = ",".join(short)
    return text if len(text) <= width else text[: width - 3] + "..."


def _fmt_runs(n) -> str:
    """A kernel's runs per program run: whole, or with two decimals where branch=mean
    weighs a branch's kernels by 1/N (it printed 0.3333333333333333)."""
    return str(int(n)) if float(n).is_integer() else f"{n:.2f}"


def render_table(rows: list[KernelRow], top: int, total_ns: float | None = None) -> str:
    total = total_ns if total_ns else sum(r.total_time_ns for r in rows) or 1.0
    # who timed each kernel, where the backend says (profiled, learned): a column of its own
    by = any(r.profile for r in rows[:top])
    header = (
        f"{'id':>5} {'kind':<7} {'runs':>5} {'time':>10} {'share':>6} {'bound':<8} "
        + (f"{'by':<9} " if by else "")
        + f"{'bytes':>10} {'flops':>10}  ops / shape"
    )
    lines = [header, "-" * len(header)]
    for r in rows[:top]:
        lines.append(
            f"{r.id:>5} {r.kind:<7} {_fmt_runs(r.executions):>5} {_fmt_ns(r.total_time_ns):>10} "
            f"{100 * r.total_time_ns / total:>5.1f}% {r.bound:<8} "
            + (f"{r.profile or '-':<9} " if by else "")
            + f"{_fmt_bytes(r.bytes_read + r.bytes_written):>10} "
            f"{r.flops:>10.3g}  {len(r.ops)}: {_ops_text(r.ops)}{f' [{r.conv}]' if r.conv else ''}"
            f"{f' @{r.target}' if r.target else ''} -> {r.shape}"
            # where in the program, when the export names its ops (JAX's debug info)
            + (f"  in {scope_of(r.name)}" if r.name else "")
        )
    return "\n".join(lines)


# -- time by source scope ---------------------------------------------------------------

UNNAMED_SCOPE = "(no name)"
TOP_SCOPE = "(no scope)"  # an op named by its primitive alone: outside every named scope


def name_parts(name: str) -> list[str]:
    """A JAX op name split at its `/`s outside parentheses: `jit(f)/transpose(jvp(M))/head/
    dot_general` -> ['jit(f)', 'transpose(jvp(M))', 'head', 'dot_general']."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(name):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "/" and depth == 0:
            parts.append(name[start:i])
            start = i + 1
    parts.append(name[start:])
    return [p for p in parts if p]


def scope_of(name: str, depth: int | None = None) -> str:
    """The scope of an op named `name`: its name without the last part (the primitive, as
    JAX names ops), cut to its first `depth` parts; UNNAMED_SCOPE for no name, TOP_SCOPE
    for a name of one part (a primitive outside every scope). The
    forward and the backward of a module are apart from the second part on
    (`jvp(M)` and `transpose(jvp(M))`)."""
    parts = name_parts(name)
    if not parts:
        return UNNAMED_SCOPE
    if len(parts) == 1:
        return TOP_SCOPE
    parts = parts[:-1]
    if depth is not None:
        parts = parts[:depth]
    return "/".join(parts)


@dataclass
class ScopeRow:
    scope: str
    kernels: int = 0  # distinct kernels whose root is in the scope
    launches: int | float = 0  # launches per program run
    time_ns: float = 0.0  # per program run
    flops: int | float = 0
    bytes: int | float = 0

    def to_dict(self) -> dict:
        return {"scope": self.scope, "kernels": self.kernels, "launches": self.launches,
                "time_ns": self.time_ns, "flops": self.flops, "bytes": self.bytes}


def by_scope(rows: list[KernelRow], depth: int | None = None) -> list[ScopeRow]:
    """The kernels' time, launches, flops and bytes per program run, summed by the scope of
    each kernel's root (`scope_of`), costliest first."""
    out: dict[str, ScopeRow] = {}
    for r in rows:
        scope = scope_of(r.name, depth)
        s = out.get(scope)
        if s is None:
            s = out[scope] = ScopeRow(scope)
        n = r.executions
        s.kernels += 1
        s.launches += r.launches * n
        s.time_ns += r.total_time_ns
        s.flops += r.flops * n
        s.bytes += (r.bytes_read + r.bytes_written) * n
    return sorted(out.values(), key=lambda s: (-s.time_ns, s.scope))


def render_scopes(scopes: list[ScopeRow], top: int, total_ns: float | None = None) -> str:
    total = total_ns if total_ns else sum(s.time_ns for s in scopes) or 1.0
    header = f"{'time':>10} {'share':>6} {'kernels':>7} {'launches':>8} {'bytes':>10} {'flops':>10}  scope"
    lines = [header, "-" * len(header)]
    for s in scopes[:top]:
        lines.append(
            f"{_fmt_ns(s.time_ns):>10} {100 * s.time_ns / total:>5.1f}% {s.kernels:>7} {_fmt_runs(s.launches):>8} "
            f"{_fmt_bytes(s.bytes):>10} {s.flops:>10.3g}  {s.scope}"
        )
    return "\n".join(lines)
