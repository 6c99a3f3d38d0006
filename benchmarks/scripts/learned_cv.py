"""Model selection for the learned backend: k-fold cross-validation split by program,
on the TRAINING dataset only (the evaluation programs of benchmarks/learned_eval.py are
never looked at). Prints kernel- and program-level MAPE/Spearman of each candidate
parameter set; the shipped model uses the best one (docs/learned-model.md).

    python benchmarks/scripts/learned_cv.py TRAIN.jsonl [MORE.jsonl ...] [--folds 5]
"""

from __future__ import annotations

import argparse
import random
import sys


# (baseline, baseline floor ns, GradientBoostingRegressor parameters)
CANDIDATES = {
    "log-time d5": ("none", 0.0, {"n_estimators": 600, "max_depth": 5, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 3}),
    "roofline d5": ("roofline", 1000.0, {"n_estimators": 600, "max_depth": 5, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 3}),
    "roofline d3": ("roofline", 1000.0, {"n_estimators": 800, "max_depth": 3, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 5}),
    "roofline d4 leaf8": ("roofline", 1000.0, {"n_estimators": 400, "max_depth": 4, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 8}),
    "roofline d4 huber": ("roofline", 1000.0, {"n_estimators": 400, "max_depth": 4, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 5, "loss": "huber", "alpha": 0.8}),
    "roofline d7": ("roofline", 1000.0, {"n_estimators": 600, "max_depth": 7, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 2}),
    "roofline d6 800": ("roofline", 1000.0, {"n_estimators": 800, "max_depth": 6, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 2}),
    "roofline d5 floor5us": ("roofline", 5000.0, {"n_estimators": 600, "max_depth": 5, "learning_rate": 0.05, "subsample": 0.8, "min_samples_leaf": 3}),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("data", nargs="+")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fusion", default="xla-tpu")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    from costmodel.learn import model as model_mod
    from costmodel.learn.dataset import Dataset, read_dataset
    from costmodel.learn.train import dedup_kernels, kernel_metrics, program_predictions
    from costmodel.profiling.evaluate import mape, spearman

    ds = read_dataset(args.data)
    names = ds.program_names()
    random.Random(0).shuffle(names)
    folds = [set(names[i :: args.folds]) for i in range(args.folds)]
    for label, (baseline, floor, params) in CANDIDATES.items():
        if args.only and label not in args.only:
            continue
        kp, km, pp, pm = [], [], [], []
        for test in folds:
            tr = dedup_kernels([r for r in ds.kernels if r["program"] not in test])
            seen = {r["signature"] for r in tr}
            te = dedup_kernels([r for r in ds.kernels if r["program"] in test and r["signature"] not in seen and r["target_ns"] > 0])
            m = model_mod.train(tr, params, ds.meta, baseline=baseline, baseline_floor_ns=floor)
            kp += [m.predict_ns(r["features"]) for r in te]
            km += [r["target_ns"] for r in te]
            for p, total in program_predictions(m, [p for p in ds.programs if p["program"] in test], args.fusion):
                pp.append(total)
                pm.append(p["measured_ns"])
        print(
            f"{label:<22} kernels MAPE {mape(kp, km):7.1f}% Spearman {spearman(kp, km):+.3f} ({len(km)})   "
            f"programs MAPE {mape(pp, pm):6.1f}% Spearman {spearman(pp, pm):+.3f} ({len(pm)})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
