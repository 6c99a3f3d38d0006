#!/usr/bin/env python3
"""Our kernel formation against XLA GPU's, kernel by kernel, on the paper's ResNet-18 step
(a benchmark, not a test).

    python benchmarks/fusion_vs_xla.py                       # ../shared/workloads pair
    python benchmarks/fusion_vs_xla.py --export A.mlir --opt A-opt.mlir [--no-inline] [--kernels CAT]

Ours: the JAX export (resnet18_train_4_devices.mlir) through `annotate-cost` with
`fusion=xla-gpu` (calls inlined first, as XLA does; `--no-inline` keeps calls as
boundaries, where only the totals are comparable). XLA: the same step after XLA's GPU
compiler (resnet18_train_4_devices-opt.mlir): every top-level op of `main` other than
bitcasts, constants and all-reduces is one launch, its bytes its operands and results
(the oracle of tests/test_kernels_oracle.py).

Both sides' kernels are put in the same categories, from the data flow alone:

* phase: a kernel is *backward* when it depends on the first dot of the step (the
  logits), else *forward*;
* *activation-sized* values have at least as many elements as the smallest
  convolution input of the step (smaller ones are parameters, per-channel statistics,
  logits);
* conv fwd / bwd-data / bwd-filter: convolutions by phase and by whether the result is
  activation-sized; loss & head: kernels with a dot, or touching logits-sized values;
  pooling: reduce_window / select_and_scatter / scatter;
  BN fwd stats / bwd reductions: reductions over activation-sized values, by phase;
  BN fwd normalize/relu / bwd dx elementwise: the other activation-sized kernels;
  optimizer update: small backward kernels that read a parameter (a non-scalar
  argument of main) or whose results main returns; small fwd / small bwd: the rest.

For each category it prints launches and bytes (read + written) on both sides, then
what the kernels write: activation-sized outputs by dtype (count, GB), which is where
materialised intermediates show; `--kernels CAT` lists the kernels of one category.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared", "workloads")
EXPORT = os.path.join(SHARED, "resnet18_train_4_devices.mlir")
OPT = os.path.join(SHARED, "resnet18_train_4_devices-opt.mlir")

CATEGORIES = (
    "conv fwd",
    "conv bwd-data",
    "conv bwd-filter",
    "BN fwd stats",
    "BN fwd normalize/relu",
    "BN bwd reductions",
    "bwd dx elementwise",
    "pooling",
    "loss & head",
    "optimizer update",
    "small fwd",
    "small bwd",
    "all-reduce combiner",
    "other",
)
DOTS = ("stablehlo.dot_general", "stablehlo.dot")
POOL_OPS = ("stablehlo.reduce_window", "stablehlo.select_and_scatter", "stablehlo.scatter")


@dataclass
class Val:
    key: object
    shape: tuple
    dtype: str
    nbytes: int
    elems: int


@dataclass
class KRec:
    kind: str
    ops: collections.Counter
    inputs: list  # Val
    outputs: list  # Val
    bytes_read: int
    bytes_written: int
    launches: int
    top_ids: list  # indices of the top-level ops (ours: members) it holds
    adj_read: int = -1  # XLA: bytes as if its convolutions ran in bf16 (see --help)
    adj_written: int = -1
    category: str = ""
    name: str = ""
    detail: dict = field(default_factory=dict)


def _val(key, v) -> Val:
    from costmodel.shapes import type_info

    info = type_info(v.type)
    return Val(key, tuple(info.shape) if info.is_tensor else (), info.dtype, info.nbytes, info.num_elements)


def _main_func(module):
    from costmodel.ir import ir

    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise SystemExit("no @main in the module")


def _inner_ops(op) -> collections.Counter:
    from costmodel.ir import walk_ops

    c = collections.Counter()
    for inner in walk_ops(op):
        if inner.name not in ("mhlo.return", "stablehlo.return", "func.return"):
            c[inner.name] += 1
    return c


# ---------------------------------------------------------------------------
# XLA's side: the -opt module, one launch per top-level compute op of main
# ---------------------------------------------------------------------------


def xla_kernels(module):
    from costmodel.ir import ir

    main = _main_func(module)
    block = main.regions[0].blocks[0]
    alias = {}  # bitcast result -> the value it aliases
    producer = {}  # value -> top-level op index
    ops = [op.operation for op in block.operations]
    deps: list[set] = [set() for _ in ops]
    kernels: dict[int, KRec] = {}
    returned = set()
    args = {a: i for i, a in enumerate(block.arguments)}
    collectives = set()

    def src(v):
        while v in alias:
            v = alias[v]
        return v

    for i, op in enumerate(ops):
        for v in op.operands:
            s = src(v)
            if s in producer:
                deps[i].add(producer[s])
        if op.name == "mhlo.bitcast":
            alias[op.results[0]] = src(op.operands[0])
            continue
        for r in op.results:
            producer[r] = i
        if op.name == "func.return":
            returned = {src(v) for v in op.operands}
            continue
        if op.name == "stablehlo.constant":
            continue
        if op.name == "stablehlo.all_reduce":
            collectives.add(i)
            continue
        inner = _inner_ops(op) if op.regions else collections.Counter({op.name: 1})
        if op.name == "mhlo.fusion":
            text = str(op.attributes["fusion_kind"])
            kind = {"kLoop": "loop", "kInput": "input", "kCustom": "gemm", "kOutput": "gemm"}.get(
                text.rsplit(" ", 1)[-1].rstrip(">"), "fusion"
            )
        elif op.name == "stablehlo.convolution":
            kind = "conv"
        else:
            kind = op.name.split(".", 1)[-1]
        seen = set()
        ins = []
        for v in op.operands:
            s = src(v)
            ins.append(_val(("arg", args[s]) if s in args else ("v", s), v))
            seen.add(s)
        outs = [_val(("v", r), r) for r in op.results]
        k = KRec(
            kind=kind,
            ops=inner,
            inputs=ins,
            outputs=outs,
            bytes_read=sum(x.nbytes for x in ins),
            bytes_written=sum(x.nbytes for x in outs),
            launches=1,
            top_ids=[i],
        )
        k.detail["returned"] = any(r in returned for r in op.results)
        k.detail["reads_arg"] = [args[src(v)] for v in op.operands if src(v) in args]
        k.detail["plain"] = op.name  # a top-level op that is no fusion (slice, concatenate ...)
        kernels[i] = k
    # XLA's all-reduce combiner packs gradients into one buffer (concatenate) and unpacks
    # the reduced buffer (slices): copies our export does not have (144 all-reduces there)
    ar_out = set()
    for i in collectives:
        ar_out.update(ops[i].results)
    for i, k in kernels.items():
        op = ops[i]
        if op.name == "stablehlo.slice" and src(op.operands[0]) in ar_out:
            k.detail["combiner"] = True
        if op.name == "stablehlo.concatenate" and any(
            ops[j].name == "stablehlo.all_reduce" for j in range(i + 1, min(len(ops), i + 3))
        ):
            k.detail["combiner"] = True
    # values a convolution reads or writes in f32: in bf16 had XLA kept the convolutions
    # in bf16, as the export has them (the oracle's float normalization upcast them)
    conv_f32 = set()
    for i, op in enumerate(ops):
        if op.name == "stablehlo.convolution":
            for v in list(op.operands) + list(op.results):
                s_ = src(v)
                key = ("arg", args[s_]) if s_ in args else ("v", s_)
                if _val(key, v).dtype == "f32":
                    conv_f32.add(key)
    for k in kernels.values():
        k.adj_read = sum(x.nbytes // 2 if x.key in conv_f32 else x.nbytes for x in k.inputs)
        k.adj_written = sum(x.nbytes // 2 if x.key in conv_f32 else x.nbytes for x in k.outputs)
    return list(kernels.values()), deps, ops, [len(block.arguments)], args


# ---------------------------------------------------------------------------
# our side: the export through annotate-cost fusion=xla-gpu, kernels recorded
# ---------------------------------------------------------------------------


class _Recorder:
    """A kernel former that forms with our rules and keeps each block's kernels."""

    def __init__(self, policy: str):
        self.policy = policy
        self.blocks = []

    def form(self, nodes):
        from costmodel.kernels import form_kernels

        ks = form_kernels(nodes, self.policy)
        self.blocks.append((nodes, ks))
        return ks

    def summary(self):
        return {}


def our_kernels(path: str, inline: bool, hardware: str = "a100-40gb", normalize: bool = False):
    from costmodel.backends import make_backend
    from costmodel.engine import CostEngine
    from costmodel.hardware import load_hardware
    from costmodel.ir import DiagnosticEngine, inline_calls, ir, load_module, make_context

    ctx = make_context()
    with open(path, "rb") as fh:
        data = fh.read()
    module = load_module(ctx, data, path)
    with ctx, module.location:
        if inline:
            inline_calls(module)
        if normalize:
            from costmodel.kernels.float_normalization import upcast_convolutions

            upcast_convolutions(module)
        spec = load_hardware(hardware)
        rec = _Recorder("xla-gpu")
        engine = CostEngine(
            make_backend("roofline", spec, {}), spec.name, DiagnosticEngine(path), fusion="xla-gpu", kernel_former=rec
        )
        engine.run(module)
        summ = ir.DictAttr(module.attributes["costmodel.summary"])
        totals = (ir.IntegerAttr(summ["kernel_count"]).value, ir.IntegerAttr(summ["kernel_bytes"]).value)
        if not inline:
            return None, None, None, totals, (ctx, module)
        main = _main_func(module)
        block = main.regions[0].blocks[0]
        nodes, ks = next((n, k) for n, k in rec.blocks if n and n[-1].op.parent == main)
        return _records_from_formation(nodes, ks, block), *_op_deps(nodes, block), totals, (ctx, module)


def _op_deps(nodes, block):
    index = {nd.op: i for i, nd in enumerate(nodes)}
    deps = []
    for nd in nodes:
        d = set()
        for v in nd.op.operands:
            owner = v.owner
            owner = getattr(owner, "operation", owner)
            j = index.get(owner)
            if j is not None:
                d.add(j)
        deps.append(d)
    args = {a: i for i, a in enumerate(block.arguments)}
    return deps, [nd.op for nd in nodes]


def _records_from_formation(nodes, ks, block):
    from costmodel.kernels.formation import _owner_op, _splat_or_scalar_constant, _tree_split_bytes

    index = {nd.op: i for i, nd in enumerate(nodes)}
    args = {a: i for i, a in enumerate(block.arguments)}
    users = collections.defaultdict(list)
    ret = set()
    for j, nd in enumerate(nodes):
        for v in nd.op.operands:
            i = index.get(_owner_op(v))
            if i is not None:
                users[i].append(j)
                if nd.name == "func.return":
                    ret.add(i)
    out = []
    for k in ks:
        inside = set(k.node_ids)
        inside_all = inside | set(k.duplicated_ids)
        ins, seen = [], set()
        reads_arg = []
        for i in sorted(inside_all):
            for v in nodes[i].op.operands:
                j = index.get(_owner_op(v))
                if j is not None and (j in inside_all or _splat_or_scalar_constant(nodes[j].op)):
                    continue
                key = ("arg", args[v]) if v in args else ("v", v)
                if key in seen:
                    continue
                seen.add(key)
                if v in args:
                    reads_arg.append(args[v])
                ins.append(_val(key, v))
        outs = []
        returned = False
        for i in k.node_ids:
            if any(u not in inside for u in users[i]) or i in ret:
                returned = returned or i in ret
                for r in nodes[i].op.results:
                    outs.append(_val(("v", r), r))
        rec = KRec(
            kind=k.kind,
            ops=collections.Counter(nodes[i].name for i in inside_all),
            inputs=ins,
            outputs=outs,
            bytes_read=k.bytes_read,
            bytes_written=k.bytes_written,
            launches=k.launches,
            top_ids=list(k.node_ids),
        )
        rec.detail["returned"] = returned
        rec.detail["reads_arg"] = reads_arg
        # XLA's TreeReductionRewriter splits large reductions: the second stages are
        # separate (small) kernels in XLA's module; kept apart for the comparison
        split = [_tree_split_bytes(nodes[i]) for i in k.node_ids if nodes[i].cls == "reduce"]
        split = [b for b in split if b][: max(0, k.launches - 1)]
        rec.detail["split"] = (len(split), sum(split))
        out.append(rec)
    return out


# ---------------------------------------------------------------------------
# categories
# ---------------------------------------------------------------------------


def _descendants(deps, start: int) -> set:
    n = len(deps)
    users = [[] for _ in range(n)]
    for j, d in enumerate(deps):
        for i in d:
            users[i].append(j)
    seen = {start}
    stack = [start]
    while stack:
        x = stack.pop()
        for u in users[x]:
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


def categorize(kernels, deps, ops) -> dict:
    """Sets k.category for every kernel; returns facts used (threshold, pivot)."""
    # the smallest convolution input: the activation-size threshold
    act = min(
        _val(None, op.operands[0]).elems for op in _all_ops(ops) if op.name == "stablehlo.convolution"
    )
    pivot_k = None
    for k in sorted(kernels, key=lambda k: min(k.top_ids)):
        if any(k.ops.get(d) for d in DOTS):
            pivot_k = k
            break
    if pivot_k is None:
        raise SystemExit("no dot in the step: cannot tell forward from backward")
    logits = max(o.elems for o in pivot_k.outputs)
    bwd = set()
    for t in pivot_k.top_ids:
        bwd |= _descendants(deps, t)
    bwd -= set(pivot_k.top_ids)
    for k in kernels:
        back = any(t in bwd for t in k.top_ids)
        vals = k.inputs + k.outputs
        big = any(v.elems >= act for v in vals)
        k.detail["bwd"] = back
        if k.detail.get("combiner"):
            k.category = "all-reduce combiner"
        elif k.kind == "conv" or k.ops.get("stablehlo.convolution"):
            if not back:
                k.category = "conv fwd"
            else:
                k.category = "conv bwd-data" if max(o.elems for o in k.outputs) >= act else "conv bwd-filter"
        elif any(k.ops.get(d) for d in DOTS) or (not big and any(v.elems == logits for v in vals)):
            k.category = "loss & head"
        elif any(k.ops.get(p) for p in POOL_OPS) or (
            big
            and (
                any(v.elems >= act and v.dtype.startswith(("i", "ui")) and v.dtype != "i1" for v in vals)
                or not any(v.elems >= act for v in k.inputs)
            )
        ):
            # max pooling, and the index / padded buffers of its backward
            k.category = "pooling"
        elif big:
            red = bool(k.ops.get("stablehlo.reduce"))
            if back:
                k.category = "BN bwd reductions" if red else "bwd dx elementwise"
            else:
                k.category = "BN fwd stats" if red else "BN fwd normalize/relu"
        elif back:
            params = [a for a in k.detail["reads_arg"] if a not in (0,)]
            k.category = "optimizer update" if (params or k.detail["returned"]) else "small bwd"
        else:
            k.category = "small fwd"
    extra = []
    for k in kernels:
        n_split, b_split = k.detail.get("split", (0, 0))
        if n_split:
            k.launches -= n_split
            k.bytes_read -= b_split
            extra.append(
                KRec(
                    kind="input",
                    ops=collections.Counter({"stablehlo.reduce": n_split}),
                    inputs=[],
                    outputs=[],
                    bytes_read=b_split,
                    bytes_written=0,
                    launches=n_split,
                    top_ids=list(k.top_ids),
                    category="small bwd" if k.detail["bwd"] else "small fwd",
                    name="second stage",
                )
            )
    kernels.extend(extra)
    return {"act_elems": act, "logits_elems": logits}


def _all_ops(ops):
    from costmodel.ir import walk_ops

    for op in ops:
        yield op
        yield from walk_ops(op)


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------


def _gb(x) -> str:
    return f"{x / 1e9:7.2f}"


def _pct(a, b) -> str:
    if not b:
        return "   n/a"
    return f"{100 * (a - b) / b:+5.0f}%"


def report(ours, xla, facts, show: str | None, adjusted: bool = False, out=sys.stdout) -> None:
    p = lambda *a: print(*a, file=out)  # noqa: E731
    by = {s: collections.defaultdict(list) for s in ("ours", "xla")}
    for k in ours:
        by["ours"][k.category].append(k)
    for k in xla:
        by["xla"][k.category].append(k)
    p(
        f"activation-sized: >= {facts['act_elems']:,} elements (smallest convolution input); "
        f"logits: {facts['logits_elems']:,} elements"
    )
    p()
    a_head = f"{'xla16':>7} {'diff':>6}  " if adjusted else ""
    p(f"{'category':<24} {'launches':>8} {'xla':>5} {'diff':>6}  {'GB ours':>7} {'xla':>7} {'diff':>6}  "
      f"{a_head}{'written ours':>12} {'xla':>7}" + (f" {'xla16':>7}" if adjusted else ""))
    tot = {s: [0, 0, 0] for s in by}
    adj = [0, 0]
    for cat in CATEGORIES:
        row = {}
        for s in by:
            ks = by[s].get(cat, [])
            n = sum(k.launches for k in ks)
            b = sum(k.bytes_read + k.bytes_written for k in ks)
            w = sum(k.bytes_written for k in ks)
            row[s] = (n, b, w)
            for t, x in zip(tot[s], (n, b, w)):
                pass
            tot[s][0] += n
            tot[s][1] += b
            tot[s][2] += w
        xs = by["xla"].get(cat, [])
        ab = sum(k.adj_read + k.adj_written for k in xs)
        aw = sum(k.adj_written for k in xs)
        adj[0] += ab
        adj[1] += aw
        if not row["ours"][0] and not row["xla"][0]:
            continue
        (n1, b1, w1), (n2, b2, w2) = row["ours"], row["xla"]
        a_cells = f"{_gb(ab)} {_pct(b1, ab)}  " if adjusted else ""
        p(f"{cat:<24} {n1:>8} {n2:>5} {_pct(n1, n2)}  {_gb(b1)} {_gb(b2)} {_pct(b1, b2)}  {a_cells}"
          f"{_gb(w1):>12} {_gb(w2)}" + (f" {_gb(aw)}" if adjusted else ""))
    (n1, b1, w1), (n2, b2, w2) = tot["ours"], tot["xla"]
    a_cells = f"{_gb(adj[0])} {_pct(b1, adj[0])}  " if adjusted else ""
    p(f"{'total':<24} {n1:>8} {n2:>5} {_pct(n1, n2)}  {_gb(b1)} {_gb(b2)} {_pct(b1, b2)}  {a_cells}"
      f"{_gb(w1):>12} {_gb(w2)}" + (f" {_gb(adj[1])}" if adjusted else ""))
    nc = lambda s: sum(k.bytes_read + k.bytes_written for k in (s) if not k.category.startswith("conv"))  # noqa: E731
    nca = sum(k.adj_read + k.adj_written for k in xla if not k.category.startswith("conv"))
    p(f"{'total outside convs':<24} {'':>8} {'':>5} {'':>6}  {_gb(nc(ours))} {_gb(nc(xla))} {_pct(nc(ours), nc(xla))}  "
      + (f"{_gb(nca)} {_pct(nc(ours), nca)}" if adjusted else ""))
    if adjusted:
        p("(xla16: XLA's bytes with every f32 value a convolution reads or writes counted in bf16, as the export "
          "has it; a rough adjustment: it does not undo what f32 changed in XLA's fusion decisions)")
    p()
    for what, side in (("written", "outputs"), ("read", "inputs")):
        p(f"activation-sized values {what}, by category and dtype (count / GB):")
        for cat in CATEGORIES:
            cells = {}
            for s in by:
                c = collections.Counter()
                g = collections.Counter()
                for k in by[s].get(cat, []):
                    for o in getattr(k, side):
                        if o.elems >= facts["act_elems"]:
                            c[o.dtype] += 1
                            g[o.dtype] += o.nbytes
                cells[s] = ", ".join(f"{c[d]} {d} {g[d] / 1e9:.2f}" for d in sorted(c)) or "-"
            if cells["ours"] == "-" and cells["xla"] == "-":
                continue
            p(f"  {cat:<22} ours: {cells['ours']:<40} xla: {cells['xla']}")
        if what == "written":
            p()
    if show:
        for s in by:
            p()
            p(f"{s}: kernels of '{show}'")
            for k in sorted(by[s].get(show, []), key=lambda k: min(k.top_ids)):
                ins = " ".join(f"{'x'.join(map(str, v.shape))}x{v.dtype}" for v in k.inputs if v.elems >= 1024)
                outs = " ".join(f"{'x'.join(map(str, v.shape))}x{v.dtype}" for v in k.outputs)
                top = ",".join(f"{n.split('.', 1)[-1]}:{c}" for n, c in k.ops.most_common(6))
                p(f"  [{min(k.top_ids):>5}] {k.kind:<6} {_gb(k.bytes_read + k.bytes_written)} GB  in: {ins}  out: {outs}  ops: {top}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", default=EXPORT, help="the JAX export (ours)")
    ap.add_argument("--opt", default=OPT, help="the same step after XLA's GPU compiler (the oracle)")
    ap.add_argument("--no-inline", action="store_true", help="keep calls as kernel boundaries (totals only)")
    ap.add_argument("--kernels", metavar="CATEGORY", help="list the kernels of one category on both sides")
    ap.add_argument(
        "--mode",
        choices=("f32-convs", "as-exported", "both"),
        default="both",
        help="f32-convs: first apply the oracle's float normalization to our copy (convolutions "
        "in f32, f32->bf16->f32 round trips dropped; costmodel.kernels.float_normalization), so "
        "the fusion rules are compared like for like; as-exported: the export as it is (bf16 "
        "convolutions); both (default): the totals of all four, the per-category tables of both",
    )
    args = ap.parse_args(argv)
    for path in (args.export, args.opt):
        if not os.path.exists(path):
            print(f"fusion_vs_xla: error: {path} not found", file=sys.stderr)
            return 1
    from costmodel.ir import load_module, make_context

    ctx = make_context()
    with open(args.opt, "rb") as fh:
        xmod = load_module(ctx, fh.read(), args.opt)
    with ctx:
        xla, xdeps, xops, _nargs, _args = xla_kernels(xmod)
        xfacts = categorize(xla, xdeps, xops)
    n_x = sum(k.launches for k in xla)
    b_x = sum(k.bytes_read + k.bytes_written for k in xla)
    print(f"export: {os.path.basename(args.export)}  oracle: {os.path.basename(args.opt)}")
    print(f"XLA: {n_x} launches, {b_x / 1e9:.2f} GB (top-level ops of main but bitcasts, constants, all-reduces)")
    modes = {"f32-convs": [True], "as-exported": [False], "both": [True, False]}[args.mode]
    inlines = [False] if args.no_inline else ([True, False] if args.mode == "both" else [True])
    print(f"{'ours':<44} {'launches':>8} {'vs XLA':>7} {'GB':>7} {'vs XLA':>7}")
    tables = []
    for normalize in modes:
        for inline in inlines:
            res = our_kernels(args.export, inline=inline, normalize=normalize)
            ours, odeps, oops, totals, (octx, omod) = res
            label = f"{'f32 convolutions (as the oracle)' if normalize else 'as exported (bf16 convolutions)'}, " + (
                "inlined" if inline else "calls kept"
            )
            print(
                f"{label:<44} {totals[0]:>8} {_pct(totals[0], n_x):>7} {totals[1] / 1e9:>7.2f} {_pct(totals[1], b_x):>7}"
            )
            if ours is not None:
                tables.append((label, ours, odeps, oops, octx, omod))
    for label, ours, odeps, oops, octx, _omod in tables:
        bf16 = label.startswith("as exported")
        print()
        print(f"== per category: {label} ==")
        with octx:
            facts = categorize(ours, odeps, oops)
        if facts["act_elems"] != xfacts["act_elems"]:
            print(f"note: activation threshold differs: ours {facts['act_elems']}, xla {xfacts['act_elems']}")
        report(ours, xla, facts, args.kernels, adjusted=bf16)
    return 0


if __name__ == "__main__":
    sys.exit(main())
