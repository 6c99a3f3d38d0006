#!/usr/bin/env python3
"""Would compiling kernel formation with mypyc meet the speed targets? (an experiment, not a test)

    pip install mypy                        # mypyc ships with it; a C compiler and Python headers too
    python benchmarks/compiled_formation.py [--resnet FILE] [--repeat 5]

Issue 8's speed target asks annotate-cost on ResNet-50 train to take at most 1.5x the
time of parsing and printing its own output; kernel formation (python/costmodel/kernels/
formation.py) is most of the pass (`benchmarks/annotate.py`). This script measures what
compiling that one module to C with mypyc (part of mypy, a well-kept compiler of typed
Python) would give, without touching the package:

1. copies python/costmodel to a temporary directory and, in the copy only, applies the
   few source edits mypyc needs (`EDITS`: precise annotations where mypyc's runtime type
   checks would reject what the code really passes, a renamed variable that held two
   types, a lazy import that breaks a circular import of the compiled module, a kernel
   copy that does not go through `object.__new__`), failing loudly if one no longer applies;
2. compiles formation.py there with mypyc;
3. runs one annotate-cost on ResNet-50 with the package as it is and with the compiled
   copy (PYTHONPATH), each in a fresh process, best of `--repeat`, and checks that both
   print the same annotated module, byte for byte.

It prints the pass time of both (parse and print are native either way) and the ratio
annotate / parse+print of each against the 1.5x target.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESNET = os.path.join(os.path.dirname(REPO), "shared", "workloads", "resnet_50_train_step_4_devices_1024_batch.mlir")

# (file in the package, old text, new text): each must occur exactly once
EDITS = [
    ("kernels/formation.py", "import functools\n", "import functools\nfrom typing import Any\n"),
    ("kernels/formation.py", "    op: object\n", "    op: Any\n"),
    ("kernels/formation.py", "    root: object\n", "    root: Any\n"),
    ("kernels/formation.py", "self.anc: dict | None = None", "self.anc: Any = None"),
    ("kernels/formation.py", "self.mask: dict | None = None", "self.mask: Any = None"),
    ("kernels/formation.py", "    operands_of = [None] * n", "    operands_of: list[Any] = [None] * n"),
    ("kernels/formation.py", "    results_of = [None] * n", "    results_of: list[Any] = [None] * n"),
    ("kernels/formation.py", "    types_of = [None] * n", "    types_of: list[Any] = [None] * n"),
    ("kernels/formation.py", "operand_nodes: list[list] = [None] * n", "operand_nodes: list[Any] = [None] * n"),
    ("kernels/formation.py", "absorbed, policy):", "absorbed, policy) -> None:"),
    ("kernels/formation.py", "        out = {}\n        for", "        out: dict = {}\n        for"),
    ("kernels/formation.py", "        out = {}  # insertion-ordered set", "        out: dict = {}  # insertion-ordered set"),
    ("kernels/formation.py", "        out = {}\n        stack", "        out: dict = {}\n        stack"),
    ("kernels/formation.py", "            dn = shlo.ConvDimensionNumbers(", "            dn: Any = shlo.ConvDimensionNumbers("),
    ("kernels/formation.py", "        pe = None\n", "        pe: dict | None = None\n"),
    ("kernels/formation.py", "        heap = []\n", "        heap: list = []\n"),
    ("kernels/formation.py", "                bound = inf\n", "                bound: float = inf\n"),
    ("kernels/formation.py", "                bound = LAUNCH_OVERHEAD_BYTES", "                bound = 0.0 + LAUNCH_OVERHEAD_BYTES"),
    ("kernels/formation.py", "        best = None\n        for c in cons:", "        best: int | None = None\n        for c in cons:"),
    ("kernels/formation.py", "        anc, mask = {}, {}\n", "        anc: dict = {}\n        mask: dict = {}\n"),
    ("kernels/formation.py", "self.events = []", "self.events: list = []"),
    ("kernels/formation.py", "self.chunk_or = []", "self.chunk_or: list = []"),
    ("kernels/formation.py", "self.chunk_anc = []", "self.chunk_anc: list = []"),
    ("kernels/formation.py", "self.synced = {}", "self.synced: dict = {}"),
    ("kernels/formation.py", "    sas = target = None", "    sas: Any = None\n    target: Any = None"),
    ("kernels/formation.py", "key, in_bytes, padded_bytes, out_extra = legal", "pad_key, in_bytes, padded_bytes, out_extra = legal"),
    ("kernels/formation.py", "if pads is None or key not in pads:", "if pads is None or pad_key not in pads:"),
    ("kernels/formation.py", "pads[key] = padded_bytes", "pads[pad_key] = padded_bytes"),
    ("kernels/formation.py", "    shapes = [_gemm_shape(nodes[i]) for i in gemm_nodes]", "    shapes: list[Any] = [_gemm_shape(nodes[i]) for i in gemm_nodes]"),
    ("kernels/formation.py", "    first = shapes[0]", "    first: Any = shapes[0]"),
    ("kernels/formation.py", "    op, c = nd.op, nd.cost\n    try:", "    op = nd.op\n    c: Any = nd.cost\n    try:"),
    ("kernels/formation.py", "def _reduction_kind(shape: list, dims: list)", "def _reduction_kind(shape: Any, dims: Any)"),
    # a compiled module cannot be imported while its package initialises (circular import)
    ("kernels/__init__.py",
     "from .formation import (\n    FUSION_POLICIES,\n    Kernel,\n    Node,\n    default_policy_for,\n    form_kernels,\n    op_class,\n)\n",
     "def __getattr__(name):\n    from . import formation\n\n    return getattr(formation, name)\n"),
    # native classes have no __dict__ to copy
    ("engine.py",
     "            nk = new(type(k))\n            nk.__dict__.update(k.__dict__)\n"
     "            nk.ops = ops = [nodes[i].op for i in k.node_ids]\n            nk.root = ops[-1]\n"
     "            nk.duplicated = [nodes[i].op for i in k.duplicated_ids]\n            nk.id = -1\n",
     "            ops = [nodes[i].op for i in k.node_ids]\n"
     "            nk = dataclasses.replace(k, ops=ops, root=ops[-1], duplicated=[nodes[i].op for i in k.duplicated_ids], id=-1)\n"),
]

TIMER = r"""
import sys, time
sys.path.insert(0, {bench!r})
import annotate as A
path, hw, repeat, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
import costmodel.kernels.formation as F
A.run_driver([path, f"--annotate-cost=hardware={{hw}}", "-o", out])  # warm-up
best = min(A.stages(path, hw)["annotate"] for _ in range(repeat))
p, a = A.measure(path, hw, repeat, out)
print(F.__file__, best, p, a)
"""


def apply_edits(root: str) -> None:
    for rel, old, new in EDITS:
        path = os.path.join(root, "costmodel", rel)
        with open(path) as fh:
            text = fh.read()
        n = text.count(old)
        if n != 1:
            raise SystemExit(f"edit no longer applies to {rel} ({n} matches): {old[:60]!r}")
        with open(path, "w") as fh:
            fh.write(text.replace(old, new))


def timed(pythonpath: str | None, resnet: str, hw: str, repeat: int, out: str) -> tuple[str, float, float, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    code = TIMER.format(bench=HERE)
    res = subprocess.run([sys.executable, "-c", code, resnet, hw, str(repeat), out], env=env,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"the timing run failed:\n{res.stderr[-3000:]}")
    where, best, p, a = res.stdout.split()[-4:]
    return where, float(best), float(p), float(a)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resnet", default=RESNET)
    ap.add_argument("--hardware", default="a100-40gb")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    mypyc = shutil.which("mypyc") or os.path.join(os.path.dirname(sys.executable), "mypyc")
    if not os.path.exists(mypyc):
        print("mypyc not found: pip install mypy (it ships mypyc)", file=sys.stderr)
        return 2
    if not os.path.exists(args.resnet):
        print(f"{args.resnet} not found (--resnet FILE)", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="costmodel-mypyc-")
    try:
        shutil.copytree(os.path.join(REPO, "python", "costmodel"), os.path.join(tmp, "costmodel"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        apply_edits(tmp)
        env = dict(os.environ, CFLAGS="-Wno-array-bounds")  # gcc's -Werror=array-bounds on mypyc's None checks
        res = subprocess.run([mypyc, "--ignore-missing-imports", "costmodel/kernels/formation.py"], cwd=tmp, env=env,
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(res.stdout[-3000:], res.stderr[-3000:], file=sys.stderr)
            return 1
        out_pure, out_compiled = os.path.join(tmp, "pure.mlir"), os.path.join(tmp, "compiled.mlir")
        w0, pass0, p0, a0 = timed(None, args.resnet, args.hardware, args.repeat, out_pure)
        w1, pass1, p1, a1 = timed(tmp, args.resnet, args.hardware, args.repeat, out_compiled)
        if not w1.endswith(".so"):
            raise SystemExit(f"the compiled run imported {w1}, not the compiled module")
        with open(out_pure, "rb") as f0, open(out_compiled, "rb") as f1:
            same = f0.read() == f1.read()
        print(f"ResNet-50 train, annotate-cost=hardware={args.hardware}, best of {args.repeat} "
              f"({os.cpu_count()} CPUs)")
        print(f"{'formation.py':<22} {'pass':>8} {'parse+print':>12} {'+annotate':>10} {'ratio':>6}")
        for name, ps, p, a in (("as is (Python)", pass0, p0, a0), ("compiled (mypyc)", pass1, p1, a1)):
            print(f"{name:<22} {ps:>7.3f}s {p:>11.3f}s {a:>9.3f}s {a / p:>5.2f}x")
        print(f"pass {pass0 / pass1:.2f}x faster compiled; same annotated module: {'yes' if same else 'NO'}")
        print("(ratio: annotate-cost run over parse+print of the input, as benchmarks/annotate.py's first table; "
              "its target line divides by parse+print of the larger annotated output)")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
