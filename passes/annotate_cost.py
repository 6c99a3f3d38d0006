"""`annotate-cost`: put `costmodel.cost` on every op and `costmodel.summary` on the module.

    stablehlo-opt model.mlir --annotate-cost="backend=roofline hardware=h100-sxm"

`fusion=xla-gpu|xla-tpu|iree|none` chooses the kernel formation (costmodel.kernels, or
IREE's own dispatch regions with `iree`: costmodel.iree): with it,
every op of a kernel carries `costmodel.kernel = <id>`, the kernel's root op carries
`costmodel.kernel_cost`, and time is the kernels' time. Options other than `backend`,
`hardware` and `fusion` are handed to the backend (e.g.
`overhead_ns=500` for roofline); a backend rejects options it does not know.
"""

from __future__ import annotations

import contextlib
import gc

from costmodel.backends import BackendError, make_backend
from costmodel.branches import parse_policy
from costmodel.engine import CostEngine
from costmodel.hardware import SpecError, load_hardware
from costmodel.ir import InputError, ir
from costmodel.kernels import FUSION_POLICIES, default_policy_for

from . import PassError, PassInfo, PassOption, PassSession, register_pass, warn_recosting

DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_BACKEND = "roofline"
# fusion=iree: IREE's dispatch regions (costmodel.iree, needs the [iree] extra)
ANNOTATE_FUSIONS = (*FUSION_POLICIES, "iree")


def annotate_module(
    module: ir.Operation,
    diagnostics,
    *,
    hardware: str = DEFAULT_HARDWARE,
    backend: str = DEFAULT_BACKEND,
    fusion: str = "",
    backend_options: dict | None = None,
    session: PassSession | None = None,
    formation_cache: dict | None = None,
    inline: bool = False,
    branch: str | int = "max",
    nested_costs: bool = True,
    unknown_trip_count: int | None = None,
    trip_count_option: str | None = None,
) -> CostEngine:
    """What the pass does, callable in-process (`costmodel kernels`, `predict`).
    `nested_costs=False` (with a formation cache): see CostEngine.
    Raises InputError for a bad hardware, backend or fusion name."""
    try:
        spec = load_hardware(hardware)
        impl = make_backend(backend, spec, backend_options or {})
    except (SpecError, BackendError) as err:
        raise InputError(str(err)) from None
    policy = fusion or default_policy_for(spec.name)
    if policy not in ANNOTATE_FUSIONS:
        raise InputError(
            f"pass 'annotate-cost': option 'fusion' expects one of {', '.join(ANNOTATE_FUSIONS)}, got '{policy}'"
        )
    if session is not None:
        warn_recosting(module, spec.name, session)
    if inline or policy == "iree":  # IREE inlines every call before it forms dispatches
        from costmodel.ir import inline_calls

        with module.context:
            inline_calls(module)
    former = _iree_formation(module, diagnostics, session) if policy == "iree" else None
    engine = CostEngine(
        impl,
        spec.name,
        diagnostics,
        backend_name=backend,
        fusion=policy,
        formation_cache=formation_cache,
        kernel_former=former,
        branch=parse_policy(branch),
        nested_costs=nested_costs,
        unknown_trip_count=unknown_trip_count,
        **({"trip_count_option": trip_count_option} if trip_count_option else {}),
    )
    with _gc_paused():
        engine.run(module)
    if former is not None:
        for severity, message in former.messages():
            diagnostics.emit(severity, module.location, message)
    return engine


def other_warnings(diagnostics, start: int = 0, limit: int = 5) -> list[str]:
    """annotate-cost's warnings from `diagnostics.diagnostics[start:]` other than the ops
    not costed (not_costed_note sums those up), rendered with their locations, one per
    distinct message, at most `limit` (then one line for the rest): what a report
    (`costmodel predict`, `costmodel kernels`) passes on, e.g. a while loop whose trip
    count is unknown and is costed once."""
    seen: dict = {}
    for d in diagnostics.diagnostics[start:]:
        if d.severity == "warning" and " not costed: " not in d.message and d.message not in seen:
            seen[d.message] = d.render()
    lines = list(seen.values())
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more warnings (stablehlo-opt FILE --annotate-cost lists them)"]
    return lines


def not_costed_note(module: ir.Operation, diagnostics) -> str | None:
    """One line for a report (`costmodel predict`, `costmodel kernels`) when annotate-cost
    left ops uncosted: how many, of which kinds, and the first reason (a dynamic shape says
    to refine the shapes first). Those ops count as no time, so the report's step is low;
    stablehlo-opt prints every such warning with its location. None when every op was
    costed."""
    from costmodel.engine import SUMMARY_ATTR
    from costmodel.ir import attr_number, dict_attr_values

    if SUMMARY_ATTR not in module.attributes:
        return None
    attr = ir.DictAttr(module.attributes[SUMMARY_ATTR])
    count = int(dict_attr_values(attr).get("unsupported_count", 0))
    if not count:
        return None
    kinds = {}
    if "unsupported_ops" in attr:
        ops = ir.DictAttr(attr["unsupported_ops"])
        kinds = {ops[i].name: int(attr_number(ops[i].attr)) for i in range(len(ops))}
    by_kind = ", ".join(f"{name} {int(n)}" for name, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    first = next((d.message for d in diagnostics.diagnostics if d.severity == "warning" and " not costed: " in d.message), None)
    return (
        f"{count} op{'s' if count != 1 else ''} not costed, counted as no time, so the step is low"
        + (f" ({by_kind})" if by_kind else "")
        + (f"; first: {first}" if first else "")
        + "; `stablehlo-opt FILE --annotate-cost` lists each with its location"
    )


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic garbage collector paused while the engine runs: costing a module
    allocates hundreds of thousands of small objects (nodes, groups, costs) that live
    until its end, and every collection they trigger walks all of them again (about 5%
    of the pass on ResNet-50). What they leave behind is collected once it is resumed."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _iree_formation(module: ir.Operation, diagnostics, session: PassSession | None):
    """IREE's dispatch regions of `module` (costmodel.iree). When IREE rejects the module:
    in the pass, its errors become diagnostics at our ops and the pass fails; called as
    a library, the IreeError (an InputError: one line, with the op's location) goes up."""
    from costmodel.iree import IreeError, IreeFormation

    try:
        return IreeFormation(module)
    except IreeError as err:
        if session is None or not err.diagnostics:
            raise
        for d in err.diagnostics:
            diagnostics.error(d.location or module.location, d.message)
        raise PassError(str(err)) from None


def run(module: ir.Operation, options: dict, session: PassSession) -> None:
    from costmodel.partitioning import find_unpartitioned_sharding, may_be_sharded

    found = find_unpartitioned_sharding(module) if may_be_sharded(module) else None
    if found is not None and found.op.name.startswith("sdy.") and found.op.name != "sdy.sharding_constraint" \
            and "per-device=false" in found.what:
        session.diagnostics.warning(
            found.op.location,
            f"annotate-cost: the module is not partitioned ({found.what}): these are the costs of the whole "
            "global program on one device; partition the original sharded module with --propagate-shardings "
            "(per-device=true, the default) for the per-device program",
        )
    elif found is not None:
        # what was asked for, but rarely what is meant: the global program on one device
        session.diagnostics.warning(
            found.op.location,
            f"annotate-cost: the module is sharded but not partitioned ({found.what}): these are the costs of "
            "the whole global program on one device; run --propagate-shardings first for the per-device program "
            "(costmodel predict, kernels and memory do)",
        )
    annotate_module(
        module,
        session.diagnostics,
        hardware=options["hardware"],
        backend=options["backend"],
        fusion=options["fusion"],
        backend_options=options["extra"],
        session=session,
        inline=options["inline"],
        branch=options["branch"],
        unknown_trip_count=trip_option(options["unknown-trip-count"]),
    )


def trip_option(raw: str) -> int | None:
    """`unknown-trip-count`: '' (not given) or a whole number of iterations >= 0."""
    if raw == "":
        return None
    try:
        n = int(raw)
    except ValueError:
        raise InputError(f"expects a whole number of iterations, got '{raw}'") from None
    if not 0 <= n < 2**63:
        raise InputError(f"expects 0 to 2^63-1 iterations, got {n}")
    return n


INFO = register_pass(
    PassInfo(
        argument="annotate-cost",
        summary="Annotate every op with costmodel.cost and the module with costmodel.summary",
        options=(
            PassOption("backend", str, DEFAULT_BACKEND, "cost backend (see `costmodel backends list`)"),
            PassOption(
                "hardware",
                str,
                DEFAULT_HARDWARE,
                "hardware preset (see `costmodel hardware list`) or path to a hardware .json file",
            ),
            PassOption(
                "fusion",
                str,
                "",
                "kernel formation: xla-gpu, xla-tpu, iree (IREE's dispatch regions for llvm-cpu; calls are "
                "inlined first) or none (every op its own kernel); default: the compiler that targets the "
                "hardware (TPU and host-cpu: xla-tpu, cpu: none, GPUs: xla-gpu)",
            ),
            PassOption(
                "branch",
                str,
                "max",
                "which branch of a stablehlo.case/if counts: max (the costliest, by predicted time), mean (each of "
                "N branches with weight 1/N), a branch index (out of range: the last, as case runs it), or xla "
                "(each count its maximum over the branches, as XLA's cost analysis; otherwise as max); the kernel "
                "report, memory, collectives and the Chakra trace follow the same choice",
                validate=parse_policy,
            ),
            PassOption(
                "unknown-trip-count",
                str,
                "",
                "iterations of every while loop whose trip count the IR does not fix (a data-dependent loop) and "
                "that has no costmodel.trip_count = N : i64 of its own; not given: one iteration, with a warning. "
                "The loop's costmodel.cost then carries it, so extract-collectives, the Chakra trace and the "
                "kernel report follow",
                validate=trip_option,
            ),
            PassOption(
                "inline",
                bool,
                False,
                "inline every func.call first, as XLA does before it fuses (kernels then form across calls; "
                "the output holds the inlined program)",
            ),
        ),
        run=run,
        extra_options_help="any other option is passed to the backend (roofline: overhead_ns)",
    )
)
