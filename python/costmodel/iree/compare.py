"""Where IREE's fusion and our XLA-style kernel formation disagree on one program.

`compare_formations(text)` annotates the program twice, `fusion=iree` and
`fusion=xla-gpu` (both with calls inlined, as both compilers do before they fuse), and
lines the two kernel sets up op by op. Kernels of the two formations that share an op
are joined into one *group* (the connected components of "kernel A and kernel B hold a
common op"): a group is a set of ops that one formation runs as `xla_kernels` kernels
moving `xla_bytes`, the other as `iree_kernels` kernels moving `iree_bytes` (per
execution of the block, loops not multiplied). Ops that one formation puts in no kernel
(IREE: host code, dead code, folded) form groups with one side empty.
`benchmarks/iree_vs_xla_fusion.py` prints the result for the shipped workloads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["FormationSide", "Group", "Comparison", "compare_formations"]


@dataclass
class FormationSide:
    kernel_count: int  # launches per program run (loops times their trip count)
    kernel_bytes: int
    kernels: dict  # id -> {"kind", "bytes", "launches", "ops"}
    kernel_of: list  # per op (pre-order index): kernel id or None


@dataclass
class Group:
    ops: Counter  # op name -> count
    xla: list = field(default_factory=list)  # kernel ids
    iree: list = field(default_factory=list)
    xla_bytes: int = 0
    iree_bytes: int = 0
    xla_launches: int = 0
    iree_launches: int = 0
    xla_kinds: Counter = field(default_factory=Counter)
    iree_kinds: Counter = field(default_factory=Counter)

    @property
    def byte_difference(self) -> int:
        return self.iree_bytes - self.xla_bytes

    def describe_ops(self, limit: int = 6) -> str:
        parts = [f"{n}x {name.split('.', 1)[-1]}" if n > 1 else name.split(".", 1)[-1] for name, n in self.ops.most_common(limit)]
        rest = sum(self.ops.values()) - sum(n for _, n in self.ops.most_common(limit))
        return ", ".join(parts) + (f", +{rest}" if rest else "")


@dataclass
class Comparison:
    xla: FormationSide
    iree: FormationSide
    groups: list  # Group, every group where the two differ or agree
    placement: dict  # IREE's iree_placement counts
    iree_dispatch_regions: int
    iree_transfers: int

    @property
    def disagreeing(self) -> list:
        """Groups that the two formations do not run as the same kernels."""
        return [g for g in self.groups if not (len(g.xla) == 1 and len(g.iree) == 1 and g.xla_bytes == g.iree_bytes)]


def _side(module) -> FormationSide:
    from ..ir import attr_number, ir, walk_ops

    summary = ir.DictAttr(module.attributes["costmodel.summary"])
    kernels: dict = {}
    kernel_of: list = []
    for op in walk_ops(module):
        kid = ir.IntegerAttr(op.attributes["costmodel.kernel"]).value if "costmodel.kernel" in op.attributes else None
        kernel_of.append(kid)
        if "costmodel.kernel_cost" in op.attributes:
            d = ir.DictAttr(op.attributes["costmodel.kernel_cost"])
            kernels[attr_number(d["id"])] = {
                "kind": ir.StringAttr(d["kind"]).value,
                "bytes": attr_number(d["bytes_read"]) + attr_number(d["bytes_written"]),
                "launches": attr_number(d["launches"]),
                "ops": attr_number(d["ops"]),
            }
    return FormationSide(
        kernel_count=attr_number(summary["kernel_count"]),
        kernel_bytes=attr_number(summary["kernel_bytes"]),
        kernels=kernels,
        kernel_of=kernel_of,
    )


def _annotate(text, source_name: str, fusion: str, prepare=None):
    from ..ir import DiagnosticEngine, load_module, make_context
    from ..passes.annotate_cost import annotate_module

    ctx = make_context()
    module = load_module(ctx, text, source_name)
    if prepare is not None:
        prepare(module)
    annotate_module(module, DiagnosticEngine(source_name), hardware="a100-40gb", fusion=fusion, inline=True)
    return module


def _in_public_functions(module) -> list[bool]:
    """Per op (pre-order): is it in a public function? (Private ones count where they
    are called; after inlining, what is left of them runs nowhere.)"""
    from ..ir import ir, walk_ops

    out: list[bool] = []
    for top in module.regions[0].blocks[0].operations:
        top = top.operation
        public = top.name == "func.func" and (
            "sym_visibility" not in top.attributes or ir.StringAttr(top.attributes["sym_visibility"]).value == "public"
        )
        out.append(public)
        out.extend(public for _ in walk_ops(top))
    return out


def compare_formations(text, source_name: str = "<input>", prepare=None) -> Comparison:
    """Both formations of one program (`prepare(module)` runs first on each copy, e.g.
    --propagate-shardings). Raises costmodel.iree.IreeError when IREE rejects it."""
    from ..ir import attr_number, ir, walk_ops

    iree_module = _annotate(text, source_name, "iree", prepare)
    xla_module = _annotate(text, source_name, "xla-gpu", prepare)
    iree_side, xla_side = _side(iree_module), _side(xla_module)
    names = [op.name for op in walk_ops(iree_module)]
    if len(names) != len(xla_side.kernel_of):
        raise ValueError("the two annotated copies differ in structure")
    counted = _in_public_functions(iree_module)

    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    members: dict = {}
    for i, name in enumerate(names):
        a, b = xla_side.kernel_of[i], iree_side.kernel_of[i]
        if (a is None and b is None) or not counted[i]:
            continue
        nodes = [n for n in (("x", a) if a is not None else None, ("i", b) if b is not None else None) if n]
        for n in nodes:
            find(n)
        if len(nodes) == 2:
            parent[find(nodes[0])] = find(nodes[1])
        members.setdefault(find(nodes[0]), []).append(name)
    by_root: dict = {}
    for key in list(parent):
        root = find(key)
        g = by_root.get(root)
        if g is None:
            g = by_root[root] = Group(ops=Counter())
        side, kid = key
        k = (xla_side if side == "x" else iree_side).kernels.get(kid)
        if k is None:
            continue
        if side == "x":
            g.xla.append(kid)
            g.xla_bytes += k["bytes"]
            g.xla_launches += k["launches"]
            g.xla_kinds[k["kind"]] += 1
        else:
            g.iree.append(kid)
            g.iree_bytes += k["bytes"]
            g.iree_launches += k["launches"]
            g.iree_kinds[k["kind"]] += 1
    for root, ops in members.items():
        by_root[find(root)].ops.update(ops)
    summary = ir.DictAttr(iree_module.attributes["costmodel.summary"])
    placement_attr = ir.DictAttr(summary["iree_placement"])
    placement = {placement_attr[i].name: attr_number(placement_attr[i].attr) for i in range(len(placement_attr))}
    return Comparison(
        xla=xla_side,
        iree=iree_side,
        groups=list(by_root.values()),
        placement=placement,
        iree_dispatch_regions=attr_number(summary["iree_dispatch_regions"]),
        iree_transfers=attr_number(summary["iree_transfers"]),
    )
