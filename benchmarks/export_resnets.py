#!/usr/bin/env python3
"""Export the five evaluation ResNets and time each export (a benchmark, not a test).

    python benchmarks/export_resnets.py                     # into benchmarks/data/workloads/
    python benchmarks/export_resnets.py /tmp/workloads --mode inference --dtype f32

Writes `<model>_<mode>_<devices>_devices.mlir` for resnet18/34/50/101/200 (default: the
paper's setting, train, bf16, 4 devices, global batch 1024) and prints, per model, the
lowering time (trace + lower + replica-form rewrite, in this process after a one-time
jax/flax import that is printed on its own), the file size and the number of
convolutions and all_reduces against the formulas of `costmodel.workloads.configs`.
Needs the `[jax]` extra. Exit status 1 when an export fails or a count is off.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "data", "workloads")


def main(argv: list[str] | None = None) -> int:
    from costmodel.workloads import configs
    from costmodel.workloads.export import DTYPES, MODES, ExportError, ExportOptions, export_text

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("directory", nargs="?", default=DEFAULT_DIR, help=f"output directory (default {DEFAULT_DIR})")
    ap.add_argument("--mode", choices=MODES, default="train")
    ap.add_argument("--dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--global-batch", type=int, default=1024)
    ap.add_argument("--models", default=",".join(configs.MODELS), help="comma-separated subset")
    args = ap.parse_args(argv)

    os.makedirs(args.directory, exist_ok=True)
    start = time.perf_counter()
    import flax.linen  # noqa: F401  (timed on its own: the first export would pay for it)
    import jax  # noqa: F401

    print(f"import jax + flax: {time.perf_counter() - start:.2f} s")
    print(f"{'model':<10} {'export_s':>8} {'size_MB':>8} {'convs':>6} {'all_reduces':>11}  file")
    failed = 0
    total_s = 0.0
    for name in args.models.split(","):
        opts = ExportOptions(
            model=name, mode=args.mode, devices=args.devices, global_batch=args.global_batch, dtype=args.dtype
        )
        t0 = time.perf_counter()
        try:
            text = export_text(opts, cpu_only=True)
        except ExportError as err:
            print(f"{name:<10} FAILED: {err}")
            failed += 1
            continue
        export_s = time.perf_counter() - t0
        total_s += export_s
        path = os.path.join(args.directory, f"{name}_{args.mode}_{args.devices}_devices.mlir")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        cfg = configs.MODELS[name]
        convs = text.count("stablehlo.convolution")
        all_reduces = text.count('"stablehlo.all_reduce"')
        want_convs = configs.num_train_convs(cfg) if args.mode == "train" else configs.num_forward_convs(cfg)
        want_all_reduces = configs.train_all_reduces(cfg) if args.mode == "train" else 0
        note = ""
        if (convs, all_reduces) != (want_convs, want_all_reduces):
            note = f"  MISMATCH: expected {want_convs} convolutions and {want_all_reduces} all_reduces"
            failed += 1
        print(f"{name:<10} {export_s:>8.2f} {len(text) / 1e6:>8.2f} {convs:>6} {all_reduces:>11}  {path}{note}")
    print(f"total export time: {total_s:.2f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
