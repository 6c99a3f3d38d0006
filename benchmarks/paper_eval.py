"""The ISPASS 2026 paper's evaluation, on our tool: ResNet training steps on 4 x A100-40GB
predicted from the IR alone, against the measured step times, beside the paper tool's
own predictions; then the same workloads across architectures.

    python benchmarks/paper_eval.py [--workloads DIR] [--backend roofline --backend calibrated]
                                    [--quick] [--json FILE]

Workloads: resnet18 is the paper's own export (../shared/workloads/
resnet18_train_4_devices.mlir, bf16 mixed precision); resnet34..200 are our exports of
the same configuration (`costmodel workloads export resnetN --mode train --devices 4
--global-batch 1024 --dtype bf16`; `python benchmarks/export_resnets.py` writes them into
benchmarks/data/workloads/). Rows whose workload is missing are reported as missing.

References (../shared/refs): resnet_train.csv (measured, A100) and peer_predictions.csv
(hespas: sub-modules timed on the real GPU, compute only). They are printed for
validation; nothing here is fitted to them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared")
MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet200")
SYSTEM = "a100-40gb-x4"
CROSS = (
    ("a100-40gb-x4", "A100_40GB_4GPU"),
    ("h100-sxm-x4", "H100_80GB_4GPU"),
    ("h200-x4", "H200_4GPU"),
    ("b200-x4", "B200_4GPU"),
    ("mi300x-x8", None),
    ("tpu-v3-8", None),
)


def workload_path(model: str, directory: str) -> str | None:
    if model == "resnet18":
        paper = os.path.join(SHARED, "workloads", "resnet18_train_4_devices.mlir")
        if os.path.exists(paper):
            return paper
    for name in (f"{model}_train_4_devices.mlir", f"{model}_train_bf16_4dev.mlir", f"{model}.mlir"):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    return None


def read_refs():
    measured, peer = {}, {}
    with open(os.path.join(SHARED, "refs", "resnet_train.csv")) as fh:
        for row in csv.DictReader(fh):
            measured[(row["system"], row["workload"])] = float(row["runtime_s"]) * 1e3
    with open(os.path.join(SHARED, "refs", "peer_predictions.csv")) as fh:
        for row in csv.DictReader(fh):
            if row["mode"] == "train":
                peer[(row["system"], row["workload"])] = float(row["predicted_compute_s"]) * 1e3
    return measured, peer


def predict(path: str, system: str, backend: str):
    from costmodel.ir import InputError
    from costmodel.pipeline import predict_step

    with open(path, "rb") as fh:
        data = fh.read()
    try:
        return predict_step(data, system=system, backend=backend, source=os.path.basename(path))
    except InputError as err:  # e.g. no calibration for this hardware
        return str(err)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=os.path.join(HERE, "data", "workloads"))
    p.add_argument("--backend", action="append", help="roofline and/or calibrated (default both)")
    p.add_argument("--quick", action="store_true", help="resnet18 only")
    p.add_argument("--json", metavar="FILE", help="also write every prediction as JSON")
    args = p.parse_args(argv)
    backends = args.backend or ["roofline", "calibrated"]
    measured, peer = read_refs()
    models = MODELS[:1] if args.quick else MODELS
    paths = {m: workload_path(m, args.workloads) for m in models}
    doc = {"accuracy": [], "cross_architecture": []}

    print(f"== Step time on 4 x A100-40GB ({SYSTEM}), predicted from the IR vs measured ==")
    print(f"{'model':<10} {'measured':>9} {'hespas':>9} {'err':>6} " + " ".join(f"{b:>11} {'err':>6}" for b in backends))
    errs = {b: [] for b in backends + ["hespas"]}
    preds = {b: {} for b in backends}
    better = {b: True for b in backends}
    for m in models:
        meas = measured.get(("A100_40GB_4GPU", m))
        hes = peer.get(("A100_40GB_4GPU", m))
        path = paths[m]
        if path is None:
            print(f"{m:<10} {meas:>8.1f}  workload missing (python benchmarks/export_resnets.py)")
            continue
        he = (hes - meas) / meas
        errs["hespas"].append(abs(he))
        cells = []
        for b in backends:
            t0 = time.perf_counter()
            r = predict(path, SYSTEM, b)
            dt = time.perf_counter() - t0
            if isinstance(r, str):
                cells.append(f"{'n/a':>11} {'':>6}")
                continue
            preds[b][m] = r.step_time_ms
            e = (r.step_time_ms - meas) / meas
            errs[b].append(abs(e))
            better[b] = better[b] and abs(e) < abs(he)
            cells.append(f"{r.step_time_ms:>9.1f}ms {100 * e:>+5.0f}%")
            doc["accuracy"].append(
                {"model": m, "backend": b, "measured_ms": meas, "hespas_ms": hes, **r.to_dict(), "tool_seconds": dt}
            )
        print(f"{m:<10} {meas:>7.1f}ms {hes:>7.1f}ms {100 * he:>+5.0f}% " + " ".join(cells))
    print()
    for b in ["hespas"] + backends:
        if errs[b]:
            mape = 100 * sum(errs[b]) / len(errs[b])
            line = f"MAPE {b:<11} {mape:5.1f}% over {len(errs[b])} rows"
            if b in preds and len(preds[b]) == len(models) and len(models) > 1:
                order = [preds[b][m] for m in models]
                line += f"; ordering resnet18 < ... < resnet200 {'holds' if order == sorted(order) else 'BROKEN'}"
            if b != "hespas":
                line += f"; closer than hespas on every row: {'yes' if better[b] else 'no'}"
            print(line)
    print()

    print("== Across architectures (step time, speedup vs A100; hespas: compute only, its speedup) ==")
    header = f"{'model':<10} {'backend':<11} " + " ".join(f"{s:>18}" for s, _ in CROSS)
    print(header)
    for m in models:
        path = paths[m]
        if path is None:
            continue
        for b in backends:
            cells, base = [], None
            for system, _ref in CROSS:
                r = predict(path, system, b)
                if isinstance(r, str):
                    cells.append(f"{'n/a':>18}")
                    continue
                base = base or r.step_time_ms
                cells.append(f"{r.step_time_ms:>9.2f}ms {base / r.step_time_ms:>5.2f}x ")
                doc["cross_architecture"].append({"model": m, "backend": b, **r.to_dict()})
            print(f"{m:<10} {b:<11} " + " ".join(cells))
        hes = [peer.get((ref, m)) if ref else None for _s, ref in CROSS]
        base = hes[0]
        cells = [f"{h:>9.2f}ms {base / h:>5.2f}x " if h else f"{'-':>18}" for h in hes]
        print(f"{m:<10} {'hespas':<11} " + " ".join(cells))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
