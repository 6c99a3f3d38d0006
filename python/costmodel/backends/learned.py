"""The `learned` backend: kernel times predicted by gradient-boosted trees trained on
kernels the `profiled` backend measured (costmodel.learn; docs/learned-model.md).

    stablehlo-opt m.mlir --annotate-cost="backend=learned hardware=host-cpu"
    stablehlo-opt m.mlir --annotate-cost="backend=learned hardware=host-cpu model=my-model.json"
    stablehlo-opt m.mlir --annotate-cost="backend=learned hardware=h200"   # the H200 model

Each kernel's features (learn/features.py: op histogram, shapes and element types, work
and bytes by unit, dot/conv dimensions and layouts, kind) go through the model; nothing
is compiled or run. Like `profiled`, the module's total adds one program invocation and
a host round trip per loop iteration, both as measured where the model's data was
collected (its `meta`). The roofline features use the peaks and bandwidth stored in the
model (the machine it learned), so a prediction does not depend on this host's
measurements. Kernels that cannot run alone (custom calls, kernels XLA formed) fall
back to `calibrated` (or `roofline`), marked `profile = "fallback"`; so do kernels
beyond the model's training data (`beyond=fallback`, the default): a kernel whose
roofline time is above the largest the model saw for its kind, or of a kind it never
saw, which trees can only extrapolate (`beyond=extrapolate` lets the model answer).

Two models are shipped (`costmodel/data/models`): `host-cpu.json.gz`, trained on one
machine's CPU through IREE (its `meta.device`; on another CPU it still predicts, says
so in each kernel's `model_device` detail and warns once: `warnings()`), and `h200.json.gz`, trained on GPU kernel
times of an NVIDIA H200 through XLA (learn/gpu.py; no invocation overhead: a GPU
program's time is its kernels'). A model predicts only the hardware it learned (its
`meta.hardware`).
"""

from __future__ import annotations

import math
from importlib import resources

from ..hardware import HardwareSpec
from ..profiling.options import Option, parse_options
from ..rules import OpCost
from . import BackendError, KernelCost, estimate_kernel

OPTIONS = (
    Option("model", str, "default", "a model JSON file (`costmodel learn train`); default: the shipped model of the hardware (host-cpu, h200)"),
    Option("fallback", str, "calibrated", "backend of kernels that cannot run alone", choices=("calibrated", "roofline")),
    Option(
        "beyond",
        str,
        "fallback",
        "a kernel larger (roofline time) than any of its kind in the model's training data: the fallback answers, or the model extrapolates",
        choices=("fallback", "extrapolate"),
    ),
)

# hardware name -> the model shipped for it (costmodel/data/models; docs/learned-model.md)
SHIPPED_MODELS = {"host-cpu": "host-cpu.json.gz", "h200": "h200.json.gz"}
SHIPPED_MODEL = SHIPPED_MODELS["host-cpu"]


def shipped_model_path(hardware: str = "host-cpu") -> str:
    """The shipped model of `hardware`; BackendError where none is shipped."""
    name = SHIPPED_MODELS.get(hardware)
    if name is None:
        raise BackendError(
            f"backend 'learned': no model is shipped for hardware '{hardware}' (shipped: {', '.join(sorted(SHIPPED_MODELS))}); "
            "give one with model=FILE (`costmodel learn train`)"
        )
    return str(resources.files("costmodel").joinpath("data", "models", name))


def model_hardware(model) -> str:
    """The hardware a model learned (models before GPU data: host-cpu)."""
    return str(model.meta.get("hardware") or "host-cpu")


_MODELS: dict = {}


def load_model(path: str):
    from ..learn.model import TreeModel

    hit = _MODELS.get(path)
    if hit is None:
        hit = TreeModel.load(path)
        _MODELS[path] = hit
    return hit


class LearnedBackend:
    """Kernel times predicted from their MLIR by gradient-boosted trees trained on measured kernels; hardware=host-cpu or h200."""

    name = "learned"
    options = {o.name: o.help for o in OPTIONS}
    kernels_only = True

    def __init__(self, hardware: HardwareSpec, **options: str) -> None:
        opts = parse_options("learned", OPTIONS, options)
        from .profiled import make_fallback

        path = shipped_model_path(hardware.name) if opts["model"] == "default" else opts["model"]
        try:
            self.model = load_model(path)
        except ValueError as err:
            raise BackendError(f"backend 'learned': {err}") from None
        learned_on = model_hardware(self.model)
        if learned_on != hardware.name:
            raise BackendError(
                f"backend 'learned': model '{path}' learned hardware '{learned_on}' and predicts only it: use hardware={learned_on} (got '{hardware.name}')"
            )
        from ..learn.features import SpecNumbers

        meta = self.model.meta
        try:
            self.spec = SpecNumbers.from_json(meta["spec"])
            self.invocation_ns = float(meta["invocation_ns"])
        except (KeyError, TypeError, ValueError):
            raise BackendError(f"backend 'learned': model '{path}' lacks its collection metadata (spec, invocation_ns)") from None
        self.model_device = str(meta.get("device", "?"))
        self.threads = int(meta.get("threads", 1))
        self.hardware = hardware
        if self.threads and hardware.calibration:
            from .profiled import host_spec_for_threads

            hardware = host_spec_for_threads(hardware, self.threads)
        self.fallback_name = opts["fallback"] if (opts["fallback"] == "roofline" or hardware.calibration) else "roofline"
        self.fallback = make_fallback(self.fallback_name, hardware)
        # per kernel kind, the largest log1p(roofline ns) of the training kernels (models
        # trained before 2026-11-27 have none: they always extrapolate)
        self.support = dict(self.model.meta.get("support_log_roofline_ns") or {}) if opts["beyond"] == "fallback" else {}
        self.predicted = 0
        self.fallbacks = 0
        self.beyond = 0

    def estimate_kernel(self, kernel) -> KernelCost:
        from ..learn.features import kernel_features
        from ..profiling.extract import standalone_problem

        why = standalone_problem(kernel)
        if why is not None:
            return self._fallback(kernel, f"cannot run alone: {why}")
        features = kernel_features(kernel, self.spec)
        if self.support:
            seen = self.support.get(kernel.kind)
            if seen is None or features.get("log_roofline_ns", 0.0) > seen:
                self.beyond += 1
                what = "no kernel of its kind" if seen is None else f"a roofline time above the largest of its kind ({math.expm1(seen) / 1e3:.1f} us)"
                return self._fallback(kernel, f"beyond the model's training data: {what}")
        t = self.model.predict_ns(features)
        self.predicted += 1
        from .profiled import roofline_bound

        return KernelCost(
            t,
            roofline_bound(self.hardware, kernel, t, 0.0),
            {"profile": "learned", "model_device": self.model_device},
        )

    def _fallback(self, kernel, reason: str) -> KernelCost:
        self.fallbacks += 1
        kc = estimate_kernel(self.fallback, kernel)
        detail = dict(kc.detail or {})
        detail.update(profile="fallback", fallback_backend=self.fallback_name, fallback_reason=reason[:300])
        return KernelCost(kc.time_ns, kc.bound, detail)

    def estimate(self, cost: OpCost) -> tuple[float, str]:
        return self.fallback.estimate(cost)

    def program_overhead_ns(self) -> float:
        return self.invocation_ns

    def host_sync_ns(self) -> float:
        return self.invocation_ns

    def warnings(self) -> list[str]:
        """What the module's summary should warn of: a CPU model (it learned one CPU's
        kernel times through IREE) predicting for another CPU."""
        if model_hardware(self.model) != "host-cpu" or self.model_device == "?":
            return []
        from ..profiling.host import device_id

        try:
            here = device_id()
        except (OSError, KeyError, ValueError):  # no /proc/cpuinfo: nothing to compare
            return []
        if here == self.model_device:
            return []
        return [f"backend 'learned': the model learned the kernel times of CPU '{self.model_device}', not of this "
                f"CPU ('{here}'): its times are that CPU's; train a model here (`costmodel learn collect` + "
                "`learn train`, docs/learned-model.md) or use backend=profiled"]

    def summary_stats(self) -> dict:
        stats = {"kernels_predicted": self.predicted, "kernels_fallback": self.fallbacks, "kernels_beyond_training": self.beyond}
        if self.threads:  # the IREE workers of a CPU model's measurements (a GPU model has none)
            stats["threads"] = self.threads
        return stats
