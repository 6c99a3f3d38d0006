"""The `profiled` backend against IREE's own whole-program time on this CPU.

For each held-in workload (costmodel.learn.programs.held_in_programs: MLPs, ResNet basic
blocks, transformer blocks, a GEMM sweep; JAX-made, inference, f32):

    measured   IREE llvm-cpu local-task, whole program, median (taken before and after the
               kernels are profiled; their mean, both printed as drift)
    profiled   sum of the program's profiled kernels + one invocation (backend=profiled
               hardware=host-cpu), with four kernel formations: none, xla-gpu, xla-tpu
               and iree (IREE's own dispatch regions, costmodel.iree)
    calibrated / roofline   on the host-cpu spec of the cores the run uses (1 core), and
               roofline on the generic `cpu` preset (the `cpu` preset has no calibration
               block: `calibrated` cannot run on it)

Run:  python benchmarks/profiled_eval.py [--threads 1] [--cache-dir DIR] [--only NAME...]

Without --cache-dir a fresh cache directory is used, so that every kernel is measured
right after its program (a shared machine drifts: see the drift column).
"""

from __future__ import annotations

import argparse
import json
import sys
import time



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cache-dir", default=None, help="reuse this cache directory (default: a fresh one)")
    ap.add_argument("--only", nargs="*", default=None, help="program names to run")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)

    from costmodel.profiling.evaluate import evaluation_cache

    host1, cleanup = evaluation_cache(args.cache_dir, "costmodel-profiled-eval-", args.threads)

    from costmodel.learn.programs import held_in_programs
    from costmodel.profiling.evaluate import mape, measure_whole, predicted_total_ns, spearman
    from costmodel.profiling.profiler import KernelProfiler

    t_start = time.time()
    prof = KernelProfiler(threads=args.threads, repeats=args.repeats)
    popts = {"threads": str(args.threads), "repeats": str(args.repeats), "progress": "off"}
    configs = [
        ("profiled/none", "host-cpu", "profiled", "none", popts),
        ("profiled/xla-gpu", "host-cpu", "profiled", "xla-gpu", popts),
        ("profiled/xla-tpu", "host-cpu", "profiled", "xla-tpu", popts),
        ("profiled/iree", "host-cpu", "profiled", "iree", popts),
        ("calibrated/host", host1, "calibrated", "none", {}),
        ("roofline/host", host1, "roofline", "none", {}),
        ("roofline/cpu", "cpu", "roofline", "none", {}),
    ]
    programs = held_in_programs()
    if args.only:
        programs = [p for p in programs if p.name in args.only]
    rows = []
    for p in programs:
        before = measure_whole(p.text, prof, refresh=True)
        preds = {}
        extra = {}
        for label, hw, backend, fusion, opts in configs:
            total, summary = predicted_total_ns(p.text, hardware=hw, backend=backend, fusion=fusion, options=opts)
            preds[label] = total
            extra[label] = summary
        after = measure_whole(p.text, prof, refresh=True)
        meas = 0.5 * (before + after)
        rows.append({"program": p.name, "family": p.family, "measured_ns": meas, "before_ns": before, "after_ns": after, "pred_ns": preds, "summary": extra})
        print(f"  {p.name}: measured {meas / 1e6:.3f} ms", file=sys.stderr, flush=True)

    labels = [c[0] for c in configs]
    cpu = prof.cpus
    print(
        f"== IREE llvm-cpu local-task, {args.threads} worker(s){' pinned to CPU ' + str(cpu[0]) if cpu else ''}, "
        f"clock={prof.clock}; {prof.runtime}; invocation {prof.invocation_ns / 1e3:.1f} us =="
    )
    head = f"{'program':<30}{'measured':>11}{'drift':>7}" + "".join(f"{lab:>18}" for lab in labels)
    print(head)
    for r in rows:
        m = r["measured_ns"]
        drift = (r["after_ns"] - r["before_ns"]) / m
        cells = "".join(f"{r['pred_ns'][lab] / 1e6:>10.3f}ms {100 * (r['pred_ns'][lab] - m) / m:>+5.0f}%" for lab in labels)
        print(f"{r['program']:<30}{m / 1e6:>9.3f}ms{100 * drift:>+6.0f}%{cells}")
    meas = [r["measured_ns"] for r in rows]
    print()
    for lab in labels:
        pred = [r["pred_ns"][lab] for r in rows]
        kc = sum(r["summary"][lab].get("kernel_count", 0) for r in rows)
        print(f"MAPE {lab:<18} {mape(pred, meas):6.1f}%   Spearman {spearman(pred, meas):+.3f}   kernels {int(kc)}")
    noise = mape([r["after_ns"] for r in rows], [r["before_ns"] for r in rows])
    print(f"noise floor: the second whole-program measurement differs from the first by {noise:.1f}% (MAPE)")
    fb = sum(r["summary"][lab].get("kernels_fallback", 0) for r in rows for lab in labels if lab.startswith("profiled"))
    print(f"\nprofiled kernels that fell back to calibrated: {int(fb)}; wall time {time.time() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
