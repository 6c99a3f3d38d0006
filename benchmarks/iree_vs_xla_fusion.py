#!/usr/bin/env python3
"""IREE's fusion against our XLA-style kernel formation on the shipped workloads (a
benchmark, not a test; needs the [iree] extra).

    python benchmarks/iree_vs_xla_fusion.py            # every workload IREE accepts
    python benchmarks/iree_vs_xla_fusion.py --top 5    # more of the biggest differences

For each workload (examples/ and ../shared/workloads; the sharded transformer after
--propagate-shardings) it annotates the program with `fusion=iree` (IREE 3.13's
dispatch regions for llvm-cpu) and `fusion=xla-gpu` (both with calls inlined) and
prints:

  kernels        launches per step (loops times their trip count): XLA-style, IREE
  kernel bytes   the kernels' external bytes: XLA-style (our estimate), IREE (what its
                 dispatches load and store, plus its transfers)
  dispatches / transfers   IREE's dispatch regions and flow.tensor transfers
  placement      where IREE put the ops that are in no dispatch of their own

then, per workload, the groups of ops where the two disagree most in bytes
(costmodel.iree.compare: kernels of both formations joined by the ops they share).
Workloads IREE rejects are listed with IREE's reason, as `fusion=iree` reports it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(REPO), "shared", "workloads")

# (label, path, needs --propagate-shardings)
WORKLOADS = [
    ("examples/resnet50_train_4dev", os.path.join(REPO, "examples", "resnet50_train_4dev.mlir"), False),
    ("examples/transformer_train_2x4", os.path.join(REPO, "examples", "transformer_train_2x4.mlir"), True),
    ("shared/resnet_50_inference (1024, 4 dev)", os.path.join(SHARED, "resnet_50_inference_step_4_devices_1024_batch.mlir"), False),
    ("shared/resnet_50_train (1024, 4 dev)", os.path.join(SHARED, "resnet_50_train_step_4_devices_1024_batch.mlir"), False),
    ("shared/resnet18_train_4_devices", os.path.join(SHARED, "resnet18_train_4_devices.mlir"), False),
    ("shared/resnet18_train_4_devices-opt", os.path.join(SHARED, "resnet18_train_4_devices-opt.mlir"), False),
    ("shared/jax_example", os.path.join(SHARED, "jax_example.mlir"), False),
    ("shared/test_split_replica_groups", os.path.join(SHARED, "test_split_replica_groups.mlir"), False),
    ("shared/convolution", os.path.join(SHARED, "convolution.mlir"), False),
    ("shared/custom_call_topk", os.path.join(SHARED, "custom_call_topk.mlir"), False),
]


def _propagate(module) -> None:
    from costmodel.ir import DiagnosticEngine
    from costmodel.passes import PassSession, get_pass, parse_options

    info = get_pass("propagate-shardings")
    info.run(module, parse_options(info, ""), PassSession(DiagnosticEngine("<propagate>")))


def _gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e7 else f"{n / 1e6:.3f} MB"


def _pct(a: float, b: float) -> str:
    return f"{(b - a) / a * 100:+.0f}%" if a else "n/a"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--top", type=int, default=3, help="biggest differences shown per workload (default 3)")
    args = p.parse_args(argv)

    from costmodel.ir import DEEP_RECURSION, recursion_limit
    from costmodel.iree import IreeError
    from costmodel.iree.compare import compare_formations

    rows, rejected, details = [], [], []
    for label, path, propagate in WORKLOADS:
        if not os.path.exists(path):
            rejected.append((label, "file not found (../shared/workloads missing?)"))
            continue
        data = open(path, "rb").read()
        t0 = time.perf_counter()
        try:
            with recursion_limit(DEEP_RECURSION):
                cmp = compare_formations(data, path, prepare=_propagate if propagate else None)
        except IreeError as err:
            rejected.append((label, str(err).replace(path, os.path.basename(path))))
            continue
        seconds = time.perf_counter() - t0
        rows.append((label, cmp, seconds))
        differing = sorted(cmp.disagreeing, key=lambda g: -abs(g.byte_difference))
        details.append((label, cmp, differing))

    print("IREE 3.13 dispatch regions (llvm-cpu) vs our XLA-GPU-style formation; both with calls inlined\n")
    head = f"{'workload':42} {'kernels XLA':>11} {'IREE':>6} {'diff':>6}  {'bytes XLA':>12} {'IREE':>12} {'diff':>6}  {'disp':>5} {'xfer':>5}  {'s':>5}"
    print(head)
    print("-" * len(head))
    for label, cmp, seconds in rows:
        print(
            f"{label:42} {cmp.xla.kernel_count:>11} {cmp.iree.kernel_count:>6} {_pct(cmp.xla.kernel_count, cmp.iree.kernel_count):>6}  "
            f"{_gb(cmp.xla.kernel_bytes):>12} {_gb(cmp.iree.kernel_bytes):>12} {_pct(cmp.xla.kernel_bytes, cmp.iree.kernel_bytes):>6}  "
            f"{cmp.iree_dispatch_regions:>5} {cmp.iree_transfers:>5}  {seconds:>5.1f}"
        )
    print("\nIREE placement of the ops (iree_placement):")
    for label, cmp, _ in rows:
        nonzero = ", ".join(f"{k} {v}" for k, v in cmp.placement.items() if v)
        print(f"  {label}: {nonzero}")
    if rejected:
        print("\nRejected by IREE (fusion=iree reports this error):")
        for label, why in rejected:
            print(f"  {label}: {why}")
    print(f"\nBiggest differences (groups of ops joined by shared kernels; bytes per execution, top {args.top}):")
    for label, cmp, differing in details:
        print(f"  {label}: {len(differing)} of {len(cmp.groups)} groups differ")
        for g in differing[: args.top]:
            xk = "+".join(f"{n} {k}" for k, n in sorted(g.xla_kinds.items())) or "none"
            ik = "+".join(f"{n} {k}" for k, n in sorted(g.iree_kinds.items())) or "none"
            print(
                f"    XLA {g.xla_launches} launch(es) [{xk}] {_gb(g.xla_bytes)}  ->  IREE {g.iree_launches} [{ik}] "
                f"{_gb(g.iree_bytes)} ({_pct(g.xla_bytes, g.iree_bytes)}); ops: {g.describe_ops()}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
