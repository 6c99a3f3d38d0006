"""Train and evaluate the learned model on a dataset (learn/dataset.py).

    model, report = train_model(ds, test_fraction=0.2, fusion="xla-tpu")
    report = evaluate_model(model, ds, fusion="xla-tpu")

Kernel level: MAPE and Spearman of predicted vs measured kernel time. Program level: the
module's total_time_ns with backend=learned (the kernels of `fusion`, one invocation,
host round trips of loops) vs the program's measured IREE time. A split is by program:
every kernel of a test program stays out of training (a kernel that also occurs in a
training program is dropped from the test kernels: it was seen).
"""

from __future__ import annotations

import math
import os
import tempfile

from ..profiling.evaluate import mape, spearman
from .dataset import Dataset, split_by_program
from .model import TreeModel, train

__all__ = ["train_model", "evaluate_model", "dedup_kernels", "DEFAULT_FUSION"]

# the kernel formation the shipped model's program-level figures use (docs/learned-model.md)
DEFAULT_FUSION = "xla-tpu"


def dedup_kernels(rows: list[dict]) -> list[dict]:
    """One row per kernel signature (the first), so a kernel shared by many programs
    does not weigh more."""
    seen, out = set(), []
    for r in rows:
        if r["signature"] in seen:
            continue
        seen.add(r["signature"])
        out.append(r)
    return out


def kernel_metrics(model: TreeModel, rows: list[dict]) -> dict:
    if not rows:
        return {"kernels": 0}
    pred = [model.predict_ns(r["features"]) for r in rows]
    meas = [r["target_ns"] for r in rows]
    return {
        "kernels": len(rows),
        "mape_pct": round(mape(pred, meas), 2),
        "median_ape_pct": round(median_ape(pred, meas), 2),
        "spearman": round(spearman(pred, meas), 4),
    }


def program_predictions(model: TreeModel, programs: list[dict], fusion: str) -> list[tuple[dict, float]]:
    from ..backends.learned import model_hardware
    from ..profiling.evaluate import predicted_total_ns

    hardware = model_hardware(model)
    with tempfile.TemporaryDirectory(prefix="costmodel-model-") as tmp:
        path = os.path.join(tmp, "model.json")
        model.save(path)
        out = []
        for p in programs:
            if not p.get("measured_ns") or not p.get("text"):
                continue
            total, _ = predicted_total_ns(p["text"], hardware=hardware, backend="learned", fusion=fusion, options={"model": path})
            out.append((p, total))
        from ..backends.learned import _MODELS

        _MODELS.pop(path, None)
    return out


def program_metrics(model: TreeModel, programs: list[dict], fusion: str) -> dict:
    pairs = program_predictions(model, programs, fusion)
    if not pairs:
        return {"programs": 0}
    pred = [t for _, t in pairs]
    meas = [p["measured_ns"] for p, _ in pairs]
    return {
        "programs": len(pairs),
        "mape_pct": round(mape(pred, meas), 2),
        "median_ape_pct": round(median_ape(pred, meas), 2),
        "spearman": round(spearman(pred, meas), 4),
    }


def evaluate_model(model: TreeModel, ds: Dataset, fusion: str = DEFAULT_FUSION, exclude_signatures=()) -> dict:
    excl = set(exclude_signatures)
    rows = [r for r in dedup_kernels(ds.kernels) if r["signature"] not in excl]
    return {"kernel": kernel_metrics(model, rows), "program": program_metrics(model, ds.programs, fusion), "fusion": fusion}


def train_model(
    ds: Dataset,
    *,
    test_fraction: float = 0.2,
    seed: int = 0,
    fusion: str = DEFAULT_FUSION,
    params: dict | None = None,
    refit: bool = True,
    log=None,
    baseline: str = "roofline",
    baseline_floor_ns: float = 1000.0,
) -> tuple[TreeModel, dict]:
    """Held-out evaluation on a program split, then (refit) the model of every program."""
    meta = {k: v for k, v in ds.meta.items() if k != "type"}
    report: dict = {"fusion": fusion, "seed": seed, "test_fraction": test_fraction}
    names = ds.program_names()
    if test_fraction > 0:
        train_names, test_names = split_by_program(names, test_fraction, seed)
        train_rows = dedup_kernels([r for r in ds.kernels if r["program"] in train_names])
        seen = {r["signature"] for r in train_rows}
        test_rows = dedup_kernels([r for r in ds.kernels if r["program"] in test_names and r["signature"] not in seen])
        m = train(train_rows, params, meta, baseline=baseline, baseline_floor_ns=baseline_floor_ns)
        report["split"] = {
            "train_programs": len(train_names),
            "test_programs": len(test_names),
            "train_kernels": len(train_rows),
            "test_kernels_unseen": len(test_rows),
        }
        report["held_out_kernel"] = kernel_metrics(m, test_rows)
        report["held_out_program"] = program_metrics(m, [p for p in ds.programs if p["program"] in test_names], fusion)
        report["train_kernel"] = kernel_metrics(m, train_rows)
        if log:
            log(f"held-out kernels: {fmt_metrics(report['held_out_kernel'])}; programs: {fmt_metrics(report['held_out_program'])}")
        model = m
    if refit or test_fraction <= 0:
        rows = dedup_kernels(ds.kernels)
        model = train(rows, params, meta, baseline=baseline, baseline_floor_ns=baseline_floor_ns)
        report["all_kernels"] = len(rows)
        report["all_programs"] = len(names)
    model.meta["training_report"] = report
    used = names if (refit or test_fraction <= 0) else sorted(train_names)
    used_set = set(used)
    fam: dict = {}
    for p in ds.programs:
        if p["program"] in used_set:
            fam[p.get("family", "?")] = fam.get(p.get("family", "?"), 0) + 1
    kinds: dict = {}
    for r in dedup_kernels([r for r in ds.kernels if r["program"] in used_set]):
        kinds[r.get("kind", "?")] = kinds.get(r.get("kind", "?"), 0) + 1
    model.meta["programs_by_family"] = dict(sorted(fam.items()))
    model.meta["kernels_by_kind"] = dict(sorted(kinds.items()))
    # base names (without the #seed): an evaluation never draws the same shapes again
    model.meta["training_programs"] = sorted({n.split("#")[0] for n in used})
    return model, report


def median_ape(pred, meas) -> float:
    errs = sorted(abs(p - m) / m for p, m in zip(pred, meas) if m)
    if not errs:
        return math.nan
    n = len(errs)
    return 100.0 * (errs[n // 2] if n % 2 else 0.5 * (errs[n // 2 - 1] + errs[n // 2]))


def fmt_metrics(d: dict) -> str:
    if not d or not d.get("kernels", d.get("programs")):
        return "n/a"
    n = d.get("kernels", d.get("programs"))
    what = "kernels" if "kernels" in d else "programs"
    sp = d["spearman"]
    med = f" (median {d['median_ape_pct']:.1f}%)" if "median_ape_pct" in d else ""
    return f"MAPE {d['mape_pct']:.1f}%{med} Spearman {sp:+.3f} over {n} {what}" if not math.isnan(sp) else f"MAPE {d['mape_pct']:.1f}%{med} over {n} {what}"
