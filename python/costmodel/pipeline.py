"""The whole prediction in process: annotate-cost -> extract-collectives -> Chakra ->
simulate, for one module on one system with one backend.

    from costmodel.pipeline import predict_step
    p = predict_step(text, system="a100-40gb-x4", backend="calibrated")
    p.step_time_ms, p.compute_ms, p.exposed_comm_ms, p.kernel_count

The module text is parsed afresh for every call (the passes annotate it in place). A
module that is sharded but not partitioned is partitioned first (propagate-shardings);
Private functions are inlined before kernel formation, as XLA does before it fuses
(`inline=False` keeps calls as kernel boundaries, as `annotate-cost` does by default;
docs/kernels.md "Validation" compares both with XLA GPU's own kernels).
`backend_options` gives the backend its own options, as annotate-cost's extra keys do
(e.g. {"beyond": "extrapolate"} for `learned`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from .ir import DiagnosticEngine, InputError, ir, load_module, make_context


@dataclass
class StepPrediction:
    system: str
    hardware: str
    backend: str
    fusion: str
    step_time_ms: float
    compute_ms: float
    exposed_comm_ms: float
    comm_ms: float  # our model's time of the communication ops (max over ranks)
    kernel_count: int
    kernel_bytes: int
    total_flops: int
    num_ranks: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class PipelineError(InputError):
    """A stage failed; the message names it and carries the first error diagnostic."""


def _summary(module) -> dict:
    from .engine import SUMMARY_ATTR

    d = ir.DictAttr(module.attributes[SUMMARY_ATTR])
    out = {}
    for i in range(len(d)):
        named = d[i]
        attr = named.attr
        for cast in (ir.IntegerAttr, ir.FloatAttr, ir.StringAttr):
            try:
                out[named.name] = cast(attr).value
                break
            except (ValueError, TypeError):
                continue
    return out


def _partition_inline_annotate(module, session, *, hardware: str, backend: str, fusion: str, inline: bool, backend_options=None) -> None:
    """What predict_step does to a program before it extracts the collectives: a sharded
    program partitioned first (propagate-shardings), every call inlined (as XLA does
    before it fuses), then annotate-cost."""
    from .partitioning import find_unpartitioned_sharding
    from .passes import get_pass, parse_options
    from .passes.annotate_cost import annotate_module

    if find_unpartitioned_sharding(module) is not None:
        prop = get_pass("propagate-shardings")
        prop.run(module, parse_options(prop, ""), session)
    if inline:
        from .ir import inline_calls

        inline_calls(module)
    annotate_module(module, session.diagnostics, hardware=hardware, backend=backend, fusion=fusion, backend_options=backend_options or {})


def step_kernels(
    text: str | bytes, *, hardware: str, backend: str = "calibrated", fusion: str = "", source: str = "<module>", backend_options=None
):
    """The kernels (costmodel.kernels.report.KernelRow) of a step as predict_step forms
    them (partitioned when sharded, calls inlined), for comparisons with a compiler's
    own kernels (tests/test_kernels_xla_hlo.py, benchmarks/gpu_eval.py). Raises
    PipelineError when a pass fails. `backend_options`: the backend's own options
    (e.g. {"beyond": "extrapolate"} for learned)."""
    from .ir import DEEP_RECURSION, recursion_limit
    from .kernels.report import collect_kernels
    from .passes import PassError, PassSession

    ctx = make_context()
    diags = DiagnosticEngine(source)
    with recursion_limit(DEEP_RECURSION), ctx:
        try:
            module = load_module(ctx, text, source)
        except ir.MLIRError as err:
            diags.add_mlir(err.error_diagnostics)
            raise PipelineError(f"parse: {diags.diagnostics[0].render() if diags.diagnostics else 'failed'}") from None
        try:
            _partition_inline_annotate(
                module, PassSession(diagnostics=diags), hardware=hardware, backend=backend, fusion=fusion, inline=True, backend_options=backend_options
            )
        except PassError:
            errors = [d for d in diags.diagnostics if d.severity == "error"]
            raise PipelineError(f"pipeline: {errors[0].render() if errors else 'failed'}") from None
        return collect_kernels(module)


def predict_step(text: str | bytes, **kwargs) -> StepPrediction:
    """See `_predict_step`; nesting depth bounded by memory, not by Python."""
    from .ir import DEEP_RECURSION, recursion_limit

    with recursion_limit(DEEP_RECURSION):
        return _predict_step(text, **kwargs)


def _predict_step(
    text: str | bytes,
    *,
    system: str,
    backend: str = "roofline",
    fusion: str = "",
    hardware: str | None = None,
    source: str = "<module>",
    granularity: str = "region",
    inline: bool = True,
    backend_options: dict | None = None,
    combine: bool | None = None,
) -> StepPrediction:
    from .chakra.export import run_from_pass
    from .combiner import combine_all_reduces, compiler_combines
    from .passes import PassError, PassSession, get_pass, parse_options
    from .simulate import simulate_dir
    from .systems import load_system

    sys_spec = load_system(system)
    hw = hardware or sys_spec.hardware
    ctx = make_context()
    diags = DiagnosticEngine(source)
    session = PassSession(diagnostics=diags)

    def first_error(stage: str) -> PipelineError:
        errors = [d for d in diags.diagnostics if d.severity == "error"]
        return PipelineError(f"{stage}: {errors[0].render() if errors else 'failed'}")

    tmp = tempfile.mkdtemp(prefix="costmodel-predict-")
    try:
        with ctx:
            try:
                module = load_module(ctx, text, source)
            except ir.MLIRError as err:
                diags.add_mlir(err.error_diagnostics)
                raise first_error("parse") from None
            try:
                _partition_inline_annotate(module, session, hardware=hw, backend=backend, fusion=fusion, inline=inline, backend_options=backend_options)
                if combine if combine is not None else compiler_combines(str(_summary(module).get("fusion", "none"))):
                    combine_all_reduces(module)  # after fusion, as XLA runs it
                extract = get_pass("extract-collectives")
                extract.run(module, parse_options(extract, f"system={system} chakra=false"), session)
                result = run_from_pass(
                    module,
                    sys_spec,
                    {"chakra": True, "chakra-dir": os.path.join(tmp, "trace"), "granularity": granularity},
                    session,
                )
            except PassError:
                raise first_error("pipeline") from None
            summary = _summary(module)
        report = simulate_dir(result.directory, system=sys_spec)
        comm_ns = result.manifest["predicted"]["comm_time_ns_max"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return StepPrediction(
        system=sys_spec.name,
        hardware=hw,
        backend=backend,
        fusion=str(summary.get("fusion", "none")),
        step_time_ms=report.step_time_ns / 1e6,
        compute_ms=report.compute_time_ns / 1e6,
        exposed_comm_ms=report.exposed_comm_ns / 1e6,
        comm_ms=comm_ns / 1e6,
        kernel_count=int(summary.get("kernel_count", 0)),
        kernel_bytes=int(summary.get("kernel_bytes", 0)),
        total_flops=int(summary.get("total_flops", 0)),
        num_ranks=result.num_ranks,
    )
