"""Gradient-boosted regression trees: trained with scikit-learn, stored as JSON, evaluated
in pure Python (a shipped model loads with no dependency beyond the package).

    model = train(rows, params)          # rows: dataset kernel rows (features, target_ns)
    model.predict_ns(features)           # one kernel
    model.save(path); TreeModel.load(path)   # path ending in .gz: gzip-compressed JSON

The target is log(kernel time / baseline): squared error on it is a relative error,
which is what a cost model is judged by, and times spanning five decades weigh alike.
The baseline (default) is the kernel's roofline on the model's spec plus a floor: the
trees learn an efficiency factor, and a kernel larger than any seen in training scales
with its work instead of saturating at the largest time the trees know.
"""

from __future__ import annotations

import gzip
import json
import math
import struct
from dataclasses import dataclass, field

from .features import FEATURE_NAMES

__all__ = ["TreeModel", "train", "MODEL_FORMAT", "DEFAULT_PARAMS"]

MODEL_FORMAT = "costmodel-gbt-1"
# chosen by 5-fold cross-validation split by program on the training data only
# (benchmarks/scripts/learned_cv.py; docs/learned-model.md)
DEFAULT_PARAMS = {
    "n_estimators": 600,
    "max_depth": 7,
    "learning_rate": 0.05,
    "subsample": 0.8,
    "min_samples_leaf": 2,
    "random_state": 0,
}


@dataclass
class TreeModel:
    features: list[str]
    init: float
    learning_rate: float
    trees: list[dict]  # {"feature": [...], "threshold": [...], "left": [...], "right": [...], "value": [...]}
    meta: dict = field(default_factory=dict)
    # "roofline": the trees predict log(time / (roofline_ns + baseline_floor_ns)), an
    # efficiency factor over the kernel's roofline on the model's spec (sizes beyond the
    # training range then scale with the roofline); "none": log(time) itself
    baseline: str = "none"
    baseline_floor_ns: float = 0.0

    def predict_log(self, x: list[float]) -> float:
        s = self.init
        lr = self.learning_rate
        for t in self.trees:
            feat, thr, left, right, val = t["feature"], t["threshold"], t["left"], t["right"], t["value"]
            i = 0
            while left[i] != -1:
                i = left[i] if x[feat[i]] <= thr[i] else right[i]
            s += lr * val[i]
        return s

    def vector(self, features: dict) -> list[float]:
        """The features in the model's order, as float32 (what scikit-learn's trees
        compare against their thresholds)."""
        vals = [float(features.get(n, 0.0)) for n in self.features]
        return list(struct.unpack(f"{len(vals)}f", struct.pack(f"{len(vals)}f", *vals)))

    def predict_ns(self, features: dict) -> float:
        return math.exp(self.predict_log(self.vector(features))) * baseline_ns(features, self.baseline, self.baseline_floor_ns)

    def to_json(self) -> dict:
        return {
            "format": MODEL_FORMAT,
            "features": self.features,
            "init": self.init,
            "learning_rate": self.learning_rate,
            "trees": self.trees,
            "baseline": self.baseline,
            "baseline_floor_ns": self.baseline_floor_ns,
            "meta": self.meta,
        }

    def save(self, path: str) -> None:
        from ..outputs import write_file

        data = (json.dumps(self.to_json(), separators=(",", ":")) + "\n").encode()
        if path.endswith(".gz"):
            data = gzip.compress(data, 9, mtime=0)
        write_file(path, data)

    @classmethod
    def from_json(cls, d: dict, where: str = "<model>") -> "TreeModel":
        if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
            raise ValueError(f"{where}: not a {MODEL_FORMAT} model file")
        missing = [n for n in d["features"] if n not in FEATURE_NAMES]
        if missing:
            raise ValueError(f"{where}: the model uses features this version does not compute ({', '.join(missing[:3])})")
        baseline = d.get("baseline", "none")
        if baseline not in BASELINES:
            raise ValueError(f"{where}: unknown baseline '{baseline}' (known: {', '.join(BASELINES)})")
        return cls(
            list(d["features"]),
            float(d["init"]),
            float(d["learning_rate"]),
            list(d["trees"]),
            dict(d.get("meta", {})),
            baseline,
            float(d.get("baseline_floor_ns", 0.0)),
        )

    @classmethod
    def load(cls, path: str) -> "TreeModel":
        try:
            with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as fh:
                data = json.load(fh)
        except OSError as err:
            raise ValueError(f"cannot read model '{path}': {err.strerror or err}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: invalid JSON: {err}") from None
        return cls.from_json(data, path)


BASELINES = ("none", "roofline")


def baseline_ns(features: dict, baseline: str, floor_ns: float) -> float:
    """What the trees' factor multiplies: 1, or the kernel's roofline time on the
    model's spec (from the feature log_roofline_ns = log1p(ns)) plus a floor."""
    if baseline == "none":
        return 1.0
    return math.expm1(features.get("log_roofline_ns", 0.0)) + floor_ns


def _short(x: float) -> float:
    """8 significant digits: a threshold is the midpoint of two adjacent float32
    training values (half a float32 step, ~6e-8 relative, from each), so it still
    separates them; the file shrinks by half."""
    return float(f"{float(x):.8g}")


def _dump_tree(est) -> dict:
    t = est.tree_
    leaf = [int(x) == -1 for x in t.children_left]
    return {
        "feature": [0 if lf else int(x) for x, lf in zip(t.feature, leaf)],
        "threshold": [0.0 if lf else _short(x) for x, lf in zip(t.threshold, leaf)],
        "left": [int(x) for x in t.children_left],
        "right": [int(x) for x in t.children_right],
        "value": [_short(v[0][0]) if lf else 0.0 for v, lf in zip(t.value, leaf)],
    }


def train(
    rows: list[dict],
    params: dict | None = None,
    meta: dict | None = None,
    *,
    baseline: str = "roofline",
    baseline_floor_ns: float = 1000.0,
) -> TreeModel:
    """Fit on kernel rows ({"features": {...}, "target_ns": t}); needs scikit-learn."""
    try:
        from sklearn.ensemble import GradientBoostingRegressor
    except ImportError:  # pragma: no cover - the [learn] extra
        from ..ir import InputError

        raise InputError("training needs scikit-learn: pip install 'stablehlo-costmodel[learn]'") from None
    import numpy as np

    if not rows:
        from ..ir import InputError

        raise InputError("no measured kernel to train on")
    p = {"loss": "squared_error", **DEFAULT_PARAMS, **(params or {})}
    X = np.array([[float(r["features"].get(n, 0.0)) for n in FEATURE_NAMES] for r in rows])
    base = np.array([baseline_ns(r["features"], baseline, baseline_floor_ns) for r in rows])
    y = np.log(np.array([max(1.0, float(r["target_ns"])) for r in rows]) / base)
    gbr = GradientBoostingRegressor(**p)
    gbr.fit(X, y)
    init = float(gbr.init_.constant_[0][0]) if hasattr(gbr.init_, "constant_") else float(np.mean(y))
    trees = [_dump_tree(est[0]) for est in gbr.estimators_]
    model = TreeModel(list(FEATURE_NAMES), init, float(gbr.learning_rate), trees, dict(meta or {}), baseline, float(baseline_floor_ns))
    model.meta.setdefault("params", p)
    model.meta.setdefault("rows", len(rows))
    # the training support: per kernel kind, the largest roofline time it saw (the
    # learned backend hands a larger kernel of that kind to its fallback)
    # (rows without a kind, as made by hand, define none: such a model extrapolates)
    support: dict = {}
    for r in rows:
        if "kind" in r:
            support[r["kind"]] = max(support.get(r["kind"], 0.0), float(r["features"].get("log_roofline_ns", 0.0)))
    if support:
        model.meta["support_log_roofline_ns"] = dict(sorted(support.items()))
    return model
