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

from ..jsonio import json_load
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
        _validate(d, where)
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
                data = json_load(fh)
        except OSError as err:
            raise ValueError(f"cannot read model '{path}': {err.strerror or err}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path}: invalid JSON: {err}") from None
        return cls.from_json(data, path)


BASELINES = ("none", "roofline")


# exp() of a predicted log factor beyond this overflows a float
_MAX_LOG = 700.0


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _validate(d: dict, where: str) -> None:
    """A model file whose trees or numbers cannot give a finite, positive time is refused
    at load (ValueError, one line): every tree well formed (children after their parent,
    feature indices in range, finite thresholds and leaves), the factor it can predict
    within exp(700), the collection metadata non-negative."""
    feats = d.get("features")
    if not isinstance(feats, list) or not all(isinstance(f, str) for f in feats):
        raise ValueError(f"{where}: 'features' must be a list of feature names")
    for key in ("init", "learning_rate"):
        if not _finite(d.get(key)):
            raise ValueError(f"{where}: '{key}' must be a finite number, got {d.get(key)!r}")
    if not d["learning_rate"] > 0:
        raise ValueError(f"{where}: 'learning_rate' must be > 0, got {d['learning_rate']!r}")
    floor = d.get("baseline_floor_ns", 0.0)
    if not (_finite(floor) and floor >= 0):
        raise ValueError(f"{where}: 'baseline_floor_ns' must be a finite number >= 0, got {floor!r}")
    trees = d.get("trees")
    if not isinstance(trees, list):
        raise ValueError(f"{where}: 'trees' must be a list")
    reach = abs(d["init"])
    for t, tree in enumerate(trees):
        cols = [tree.get(k) if isinstance(tree, dict) else None for k in ("feature", "threshold", "left", "right", "value")]
        if not all(isinstance(c, list) for c in cols) or len({len(c) for c in cols}) != 1 or not cols[0]:
            raise ValueError(f"{where}: tree {t} needs 'feature', 'threshold', 'left', 'right' and 'value' lists of one length")
        feat, thr, left, right, val = cols
        n = len(feat)
        for i in range(n):
            if not (_finite(val[i]) and isinstance(left[i], int) and isinstance(right[i], int)):
                raise ValueError(f"{where}: tree {t} node {i}: malformed (children must be indices, values finite)")
            if left[i] == -1:
                continue
            if not (i < left[i] < n and i < right[i] < n):
                raise ValueError(f"{where}: tree {t} node {i}: child index out of range")
            if not (isinstance(feat[i], int) and 0 <= feat[i] < len(feats) and _finite(thr[i])):
                raise ValueError(f"{where}: tree {t} node {i}: feature index or threshold out of range")
        reach += d["learning_rate"] * max(abs(v) for v in val)
    if reach > _MAX_LOG:
        raise ValueError(f"{where}: its trees can predict a time factor beyond e^{_MAX_LOG:.0f} (not a finite time)")
    meta = d.get("meta", {})
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: 'meta' must be an object")
    for key in ("invocation_ns", "dispatch_ns"):
        if key in meta and not (_finite(meta[key]) and meta[key] >= 0):
            raise ValueError(f"{where}: meta '{key}' must be a finite time >= 0, got {meta[key]!r}")
    spec = meta.get("spec")
    if isinstance(spec, dict):
        for key in ("matrix_f32_TFLOPS", "vector_f32_TFLOPS", "memory_bandwidth_GBps"):
            if key in spec and not (_finite(spec[key]) and spec[key] > 0):
                raise ValueError(f"{where}: meta spec '{key}' must be a finite number > 0, got {spec[key]!r}")


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
