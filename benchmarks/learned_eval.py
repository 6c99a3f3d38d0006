"""The learned backend on programs it never saw, against IREE's measured time on this CPU,
side by side with roofline, calibrated and profiled.

Programs: `costmodel.learn.programs.corpus_programs(N, seed)` (default seed 1; the
shipped model was trained on seed 0 and the held-in workloads), minus every program
whose name is in the model's training set (`meta.training_programs`): single-op and
small multi-op programs of every family (GEMMs and convolutions of every layout,
attention, layer norm, reductions, pooling, gather/scatter, sort, fft, loops, ...).

For each: the whole program measured with IREE llvm-cpu local-task (median; the ground
truth), and the module's total_time_ns of

    learned     backend=learned hardware=host-cpu (the model; nothing runs)
    profiled    backend=profiled hardware=host-cpu (its kernels measured)
    calibrated  on the host-cpu spec of the cores the run uses
    roofline    the same spec; and roofline on the generic `cpu` preset

all with the same kernel formation (--fusion, default xla-tpu). Prints MAPE and
Spearman's rank correlation per backend, overall and per family.

Run:  python benchmarks/learned_eval.py [--programs 60] [--seed 1] [--cache-dir DIR] [--model M]

--cache-dir reuses measurements (created if missing; e.g. the one `costmodel learn
collect` of the same programs filled); without it a fresh cache is used. A measurement is
reused only when taken with the same settings (workers, repetitions, their minimum time,
the warm-up): `learn collect` measures with --min-time-ms 20 and a 10 ms warm-up, so pass
`--min-time-ms 20 --warmup-ms 10` to reuse its cache.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fusion", default="xla-tpu")
    ap.add_argument("--model", default="default")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-time-ms", type=float, default=50.0, help="minimum time of one repetition (default 50)")
    ap.add_argument("--warmup-ms", type=float, default=20.0, help="warm-up before the repetitions (default 20)")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--no-profiled", action="store_true", help="skip the profiled backend (it measures every kernel)")
    args = ap.parse_args(argv)

    from costmodel.backends import BackendError
    from costmodel.profiling.evaluate import evaluation_cache

    try:
        host1, cleanup = evaluation_cache(args.cache_dir, "costmodel-learned-eval-", args.threads)
    except BackendError as err:  # --cache-dir a file, a corrupt host calibration ...
        print(f"learned_eval: error: {err}", file=sys.stderr)
        return 1

    from costmodel.backends.learned import shipped_model_path
    from costmodel.learn.model import TreeModel
    from costmodel.learn.programs import corpus_programs
    from costmodel.learn.train import median_ape
    from costmodel.profiling.evaluate import mape, measure_whole, predicted_total_ns, spearman
    from costmodel.profiling.profiler import KernelProfiler

    t0 = time.time()
    model_path = shipped_model_path() if args.model == "default" else args.model
    model = TreeModel.load(model_path)
    seen = set(model.meta.get("training_programs", []))
    candidates = corpus_programs(args.programs + len(seen), args.seed)
    programs = [p for p in candidates if p.name.split("#")[0] not in seen][: args.programs]

    prof = KernelProfiler(
        threads=args.threads, repeats=args.repeats, min_time_ms=args.min_time_ms, warmup_ms=args.warmup_ms, progress=False
    )
    popts = {
        "threads": str(args.threads),
        "repeats": str(args.repeats),
        "min_time_ms": str(args.min_time_ms),
        "warmup_ms": str(args.warmup_ms),
        "progress": "off",
    }
    configs = [("learned", "host-cpu", "learned", {"model": model_path})]
    if not args.no_profiled:
        configs.append(("profiled", "host-cpu", "profiled", popts))
    configs += [
        ("calibrated", host1, "calibrated", {}),
        ("roofline", host1, "roofline", {}),
        ("roofline/cpu", "cpu", "roofline", {}),
    ]
    rows = []
    for i, p in enumerate(programs):
        try:
            meas = measure_whole(p.text, prof)
        except RuntimeError as err:
            print(f"  skip {p.name}: IREE cannot run it ({err})", file=sys.stderr)
            continue
        preds = {}
        for label, hw, backend, opts in configs:
            preds[label] = predicted_total_ns(p.text, hardware=hw, backend=backend, fusion=args.fusion, options=opts)[0]
        rows.append({"program": p.name, "family": p.family, "measured_ns": meas, "pred_ns": preds})
        print(f"  [{i + 1}/{len(programs)}] {p.name}: {meas / 1e3:.1f} us", file=sys.stderr, flush=True)

    labels = [c[0] for c in configs]
    print(
        f"== {len(rows)} programs never seen in training (seed {args.seed}), IREE llvm-cpu local-task, "
        f"{prof.threads} worker(s), clock={prof.clock}, fusion={args.fusion}; model {os.path.basename(model_path)} "
        f"({len(model.trees)} trees, trained on {model.meta.get('rows', '?')} kernels of {len(seen)} programs) =="
    )
    print(f"{'program':<46}{'measured':>11}" + "".join(f"{lab:>16}" for lab in labels))
    for r in rows:
        m = r["measured_ns"]
        cells = "".join(f"{100 * (r['pred_ns'][lab] - m) / m:>+15.0f}%" for lab in labels)
        print(f"{r['program'][:45]:<46}{m / 1e3:>9.1f}us{cells}")
    print()
    meas = [r["measured_ns"] for r in rows]
    summary = {}
    for lab in labels:
        pred = [r["pred_ns"][lab] for r in rows]
        summary[lab] = (mape(pred, meas), spearman(pred, meas))
        print(
            f"MAPE {lab:<14} {summary[lab][0]:7.1f}%   median APE {median_ape(pred, meas):6.1f}%   "
            f"Spearman {summary[lab][1]:+.3f}   ({len(rows)} programs)"
        )
    fams = sorted({r["family"] for r in rows})
    print("\nMAPE by family: " + " ".join(f"{lab:>12}" for lab in labels))
    for fam in fams:
        sub = [r for r in rows if r["family"] == fam]
        cells = " ".join(f"{mape([r['pred_ns'][lab] for r in sub], [r['measured_ns'] for r in sub]):>11.1f}%" for lab in labels)
        print(f"  {fam:<12} ({len(sub):>2}) {cells}")
    lm = summary["learned"][0]
    print(
        f"\ntarget: learned MAPE <= 35% ({'met' if lm <= 35 else 'NOT met'}: {lm:.1f}%) and below roofline's "
        f"({'met' if lm < summary['roofline'][0] else 'NOT met'}: {summary['roofline'][0]:.1f}%); wall time {time.time() - t0:.0f} s"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
