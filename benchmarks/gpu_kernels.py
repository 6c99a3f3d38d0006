#!/usr/bin/env python3
"""The learned model's GPU data: plan the kernels here, measure them on a GPU, import the
measurements here (a benchmark run by hand; costmodel.learn.gpu says why three steps).

    python benchmarks/gpu_kernels.py plan --programs 400 --seed 0 --held-in -o plan.jsonl.gz
    python benchmarks/gpu_kernels.py measure plan.jsonl.gz [more plans] -o measured.json   # on the GPU
    python benchmarks/gpu_kernels.py import --plan plan.jsonl.gz --measured measured.json -o h200.jsonl

`measure` (costmodel.learn.gpu.measure; it runs the plan's texts with jax alone): each
kernel program and whole program of the plan is compiled by XLA (the module renamed
`m<index>`, its name in the profile), run once to warm up, then `--calls` times inside
one profile per chunk of programs; a program's time is the median over its calls of the
sum of its GPU kernels' durations (memsets and copies left out), read from the
profiler's Perfetto trace by `hlo_module`. On a machine without a GPU the profile has no
GPU line and `--allow-cpu` takes the wall time per call instead (to test the script).
Results are rewritten after every chunk, so a run stopped by a time limit keeps what it
finished; `--deadline-s` stops it cleanly before. `eval` sets the predictions of the
backends beside the measured times of programs never seen in training.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# the commands (costmodel.learn.gpu does the work)
# ---------------------------------------------------------------------------


def _package():
    sys.path.insert(0, os.path.join(HERE, "..", "python"))


def measure_cmd(args) -> int:
    _package()
    from costmodel.learn import gpu

    return gpu.measure(args.plan, args.output, calls=args.calls, chunk=args.chunk, jobs=args.jobs, start=args.start,
                       limit=args.limit, deadline_s=args.deadline_s, allow_cpu=args.allow_cpu, log=log)


def plan_cmd(args) -> int:
    _package()
    from costmodel.learn import gpu, programs as P

    progs = P.corpus_programs(args.programs, seed=args.seed, scale=args.scale)
    if args.held_in:
        progs = P.held_in_programs() + progs
    for spec in args.workload or []:  # NAME=FILE: a whole step (its kernels at full scale)
        name, _, path = spec.partition("=")
        with open(path) as fh:
            progs.append(P.Program(name, "workload", fh.read()))
    if args.exclude:
        names = {r["program"] for r in gpu.read_jsonl(args.exclude) if r.get("type") == "program"}
        progs = [p for p in progs if p.name not in names]
    rows = gpu.plan(progs, hardware=args.hardware, fusions=tuple(args.fusion.split(",")), log=log if args.verbose else None)
    gpu.write_jsonl(rows, args.output)
    k = sum(r["type"] == "kernel" for r in rows)
    log(f"{len(progs)} programs, {k} kernel rows ({len({r['signature'] for r in rows if r['type'] == 'kernel'})} distinct) -> {args.output}")
    return 0


def import_cmd(args) -> int:
    _package()
    from costmodel.learn import gpu

    stats = gpu.import_measurements(args.plan, args.measured, args.output)
    log(f"{stats} -> {args.output}")
    return 0


def eval_cmd(args) -> int:
    """Programs never seen in training: predicted vs measured GPU time, per backend."""
    _package()
    from costmodel.learn.dataset import read_dataset
    from costmodel.learn.train import mape, median_ape, spearman
    from costmodel.profiling.evaluate import predicted_total_ns

    ds = read_dataset(args.data)
    hardware = ds.meta.get("hardware") or "h200"
    measured_kernels: dict = {}
    for r in ds.kernels:
        measured_kernels.setdefault(r["program"], []).append(r)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    cols = ["kernel sum"] + backends
    rows = []
    for p in ds.programs:
        if not p.get("measured_ns"):
            continue
        row = {"program": p["program"], "family": p["family"], "measured_ns": p["measured_ns"]}
        # the measured kernels of our formation, summed: what a perfect per-kernel model gives
        ks = [k for k in measured_kernels.get(p["program"], []) if k["fusion"] == args.fusion]
        row["kernel sum"] = sum(k["target_ns"] for k in ks) if ks else None
        for b in backends:
            opts = {"model": args.model} if (b == "learned" and args.model) else {}
            row[b], summary = predicted_total_ns(p["text"], hardware=hardware, backend=b, fusion=args.fusion, options=opts)
            if b == "learned":
                row["learned_fallback_kernels"] = summary.get("kernels_fallback", 0)
                row["learned_kernels"] = summary.get("kernels_predicted", 0)
        rows.append(row)
    if not rows:
        data = ", ".join(args.data) if isinstance(args.data, list) else args.data
        print(f"gpu_kernels: error: {data} holds no measured program (a plan? make the dataset with "
              f"`gpu_kernels.py import --plan PLAN --measured MEASURED.json -o DATA` first)", file=sys.stderr)
        return 1
    print(f"{len(rows)} programs measured on {ds.meta.get('device')} ({ds.meta.get('runtime')}); predicted for {hardware}, fusion={args.fusion}")
    if "learned" in backends:
        fb = sum(r["learned_fallback_kernels"] for r in rows)
        print(f"learned: {sum(r['learned_kernels'] for r in rows):.0f} kernels from the model, {fb:.0f} from its fallback "
              "(beyond its training data, or not standalone)")
    print(f"{'':<12} {'MAPE':>8} {'median APE':>11} {'Spearman':>9}")
    out = {"programs": len(rows), "hardware": hardware, "fusion": args.fusion, "metrics": {}, "families": {}}
    for c in cols:
        pairs = [(r[c], r["measured_ns"]) for r in rows if r.get(c) is not None]
        pred, meas = [a for a, _ in pairs], [b for _, b in pairs]
        m = {"mape_pct": mape(pred, meas), "median_ape_pct": median_ape(pred, meas), "spearman": spearman(pred, meas), "programs": len(pairs)}
        out["metrics"][c] = m
        print(f"{c:<12} {m['mape_pct']:>7.1f}% {m['median_ape_pct']:>10.1f}% {m['spearman']:>+9.3f}")
    print("\nMAPE by family (programs): " + " ".join(f"{c}" for c in cols))
    for fam in sorted({r["family"] for r in rows}):
        sub = [r for r in rows if r["family"] == fam]
        cells = []
        for c in cols:
            pairs = [(r[c], r["measured_ns"]) for r in sub if r.get(c) is not None]
            v = mape([a for a, _ in pairs], [b for _, b in pairs]) if pairs else float("nan")
            out["families"].setdefault(fam, {})[c] = v
            cells.append(f"{v:>8.1f}%")
        print(f"{fam:<12} {len(sub):>3} " + " ".join(cells))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**out, "rows": rows}, fh, indent=1)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="form and extract the kernels of generated programs (here)")
    p.add_argument("--programs", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--held-in", action="store_true", help="add the held-in workloads (learn.programs)")
    p.add_argument("--scale", choices=("cpu", "gpu"), default="cpu",
                   help="the generated programs' sizes: the CPU corpus (the shipped H200 model's), or training-step sizes on one GPU")
    p.add_argument("--exclude", metavar="PLAN", help="leave out programs of this plan")
    p.add_argument("--workload", action="append", metavar="NAME=FILE", help="a whole program (e.g. an exported step) to plan too")
    p.add_argument("--hardware", default="h200")
    p.add_argument("--fusion", default="xla-gpu,none")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("-v", "--verbose", action="store_true")
    m = sub.add_parser("measure", help="compile and profile every program of a plan (on the GPU)")
    m.add_argument("plan", nargs="+")
    m.add_argument("-o", "--output", required=True)
    m.add_argument("--calls", type=int, default=5)
    m.add_argument("--chunk", type=int, default=200)
    m.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    m.add_argument("--start", type=int, default=0, help="skip the plans' first N programs (measured by an earlier run)")
    m.add_argument("--limit", type=int, default=0)
    m.add_argument("--deadline-s", type=float, default=0.0)
    m.add_argument("--allow-cpu", action="store_true")
    i = sub.add_parser("import", help="a dataset of a plan and its measurements (here)")
    i.add_argument("--plan", action="append", required=True, help="a plan (repeat for several)")
    i.add_argument("--measured", action="append", required=True, help="a measurement file of them (repeat: runs merged)")
    i.add_argument("-o", "--output", required=True)
    e = sub.add_parser("eval", help="predicted vs measured GPU time of a dataset's programs (here)")
    e.add_argument("data", nargs="+", help="datasets (import's output)")
    e.add_argument("--backends", default="learned,calibrated,roofline")
    e.add_argument("--model", default="", help="the learned backend's model file (default: the shipped one)")
    e.add_argument("--fusion", default="xla-gpu")
    e.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    _package()
    from costmodel.ir import InputError

    try:
        return {"plan": plan_cmd, "measure": measure_cmd, "import": import_cmd, "eval": eval_cmd}[args.cmd](args)
    except (OSError, ValueError, InputError) as err:  # a missing or unreadable file, plans of other hardware: one line
        print(f"gpu_kernels: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
