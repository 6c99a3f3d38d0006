"""`costmodel predict`: one program, several systems and backends, one table.

    from costmodel.predict import predict, Scenario
    result = predict("step.mlir", systems=["a100-40gb-x4", "h100-sxm-x4"], backends=["roofline", "calibrated"])
    result.rows[0].step_time_ms

The module is parsed once, partitioned once when it is sharded (propagate-shardings),
private functions are inlined once (XLA inlines before it fuses; `inline=False` keeps
calls as kernel boundaries; docs/kernels.md "Validation" compares both with XLA GPU's
kernels); every
(system, backend) then runs on a clone: annotate-cost -> extract-collectives -> Chakra
-> simulate. The JSON document is described in docs/predict.md (schema
"costmodel.predict/1").
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field

from .jsonio import json_loads
from .hardware import SpecError, dtype_family
from .ir import DiagnosticEngine, InputError, attr_number, has_public_body, ir, load_module, make_context, nested_ops

SCHEMA = "costmodel.predict/1"


class PredictError(InputError):
    """A user mistake (one line)."""


@dataclass
class Row:
    system: str  # the label: preset name plus any --set overrides
    system_name: str
    hardware: str
    backend: str
    fusion: str
    num_npus: int
    step_time_ms: float
    compute_ms: float
    comm_ms: float
    exposed_comm_ms: float
    kernel_count: int | None  # None: no kernels formed (--fusion none: every op priced on its own)
    kernel_bytes: int
    total_flops: int
    mfu: float
    memory_bound_share: float
    # the kernels' own time per device (annotate-cost's total_time_ns); the simulated
    # compute is this in the trace's whole microseconds. MFU and the top kernels' shares
    # divide by the larger of it and the step, so that a step shorter than the trace's
    # resolution does not read as an MFU above 100%
    kernel_time_ms: float
    peak_memory_GiB: float | None
    hbm_GiB: float
    fits: bool | None
    # against the first system with the same backend; None where either step is empty
    # (a program that runs nothing has no speed to compare)
    speedup: float | None = 1.0
    overrides: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PredictResult:
    model: str
    program: dict
    rows: list[Row]
    top_kernels: list[dict]
    top_kernels_of: str

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "model": self.model,
            "program": self.program,
            "rows": [r.to_dict() for r in self.rows],
            "top_kernels_of": self.top_kernels_of,
            "top_kernels": self.top_kernels,
        }


# ---------------------------------------------------------------------------
# what-if overrides (--set)
# ---------------------------------------------------------------------------


def _coerce(text: str):
    try:
        value = json_loads(text)
    except ValueError:
        return text
    return value


# objects a spec may lack that `--set` creates on the way (a dimension's calibration ...)
_OPTIONAL_OBJECTS = {"calibration", "astra_sim", "protocols", "protocol_step_latency_ns", "protocol_max_bandwidth_GBps"}


def _set_path(doc, path: list[str], value, where: str, prefix: str = "") -> None:
    """Set `prefix + path` to value in the spec's JSON; JSON null removes the key."""
    cur = doc
    for i, key in enumerate(path[:-1]):
        if isinstance(cur, list):
            if not key.isdigit() or int(key) >= len(cur):
                raise PredictError(f"--set {where}: no element {key} (the list has {len(cur)})")
            cur = cur[int(key)]
        elif isinstance(cur, dict):
            if key not in cur and value is not None and (key in _OPTIONAL_OBJECTS or (i > 0 and path[i - 1] == "protocols")):
                cur[key] = {}
            if key not in cur:
                raise PredictError(
                    f"--set {where}: no key '{prefix}{'.'.join(path[: i + 1])}' (keys: {', '.join(sorted(cur))})"
                )
            cur = cur[key]
        else:
            raise PredictError(f"--set {where}: '{'.'.join(path[:i])}' is a value, not an object")
    last = path[-1]
    if isinstance(cur, list):
        if not last.isdigit() or int(last) >= len(cur):
            raise PredictError(f"--set {where}: no element {last}")
        cur[int(last)] = value
        return
    if not isinstance(cur, dict):
        raise PredictError(f"--set {where}: cannot set a key inside a value")
    if value is None:  # null: what if the spec had no such key
        if last not in cur:
            raise PredictError(f"--set {where}: no key '{prefix}{'.'.join(path)}' to remove")
        del cur[last]
        return
    old = cur.get(last)
    if isinstance(old, dict) and "value" in old:
        cur[last] = {"value": value, "source": f"what-if: --set {where}"}
    else:
        cur[last] = value  # a new key is validated (and rejected) by the spec parser


def _refuse_unused_latency(item: str, sys_doc: dict, system: str) -> None:
    """`network.N.latency_ns` on a dimension with a calibrated step_latency_ns changes
    nothing the model computes (messages there carry no latency of their own): say so,
    and what to set instead."""
    parts = item.split("=", 1)[0].strip().split(".")
    if len(parts) != 3 or parts[0] != "network" or parts[2] != "latency_ns" or not parts[1].isdigit():
        return
    i = int(parts[1])
    dims = sys_doc.get("network", [])
    if i >= len(dims):
        return
    own_cal, top_cal = dims[i].get("calibration") or {}, sys_doc.get("calibration") or {}
    for key, example in (("step_latency_ns", ""), ("protocol_step_latency_ns", ".Simple")):
        own, top = own_cal.get(key), top_cal.get(key)
        if own is not None or top is not None:
            where = f"network.{i}.calibration.{key}" if own is not None else f"system.calibration.{key}"
            raise PredictError(
                f"--set {item}: dimension {i} of {system} has a calibrated {key}, which replaces "
                f"latency_ns per message (docs/communication-model.md); set {where}{example} instead"
            )


def apply_overrides(system: str, sets: list[str], tmpdir: str) -> tuple[str, str]:
    """(label, path of a system JSON with the overrides) or (system, system) when none.

    `hardware.KEY[.SUB]=V` changes the system's per-device hardware spec,
    `network.N.KEY=V` dimension N of its network, `system.KEY=V` any other system key.
    The results are validated exactly like spec files."""
    if not sets:
        return system, system
    from .hardware import parse_hardware, read_preset_or_file
    from .systems import parse_system

    from .systems import resolve_hardware_path

    sys_doc, where = read_preset_or_file("systems", system)
    resolve_hardware_path(sys_doc, where if where == system else None)
    parsed = []
    for item in sets:
        if "=" not in item:
            raise PredictError(f"--set expects KEY=VALUE, got '{item}'")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) < 2 or parts[0] not in ("hardware", "network", "system"):
            raise PredictError(f"--set {item}: the key must start with hardware., network.N. or system.")
        parsed.append((item, parts, _coerce(raw)))
    # the system's own keys first: `system.hardware=NAME` picks the hardware that the
    # `hardware.` keys then change
    for item, parts, value in parsed:
        if parts[0] == "network":
            _set_path(sys_doc["network"], parts[1:], value, item, "network.")
        elif parts[0] == "system":
            _set_path(sys_doc, parts[1:], value, item, "system.")
    if not isinstance(sys_doc.get("hardware"), str) or not sys_doc["hardware"]:
        raise PredictError(f"--set on {system}: 'hardware' must be a hardware preset name or a .json path")
    try:
        hw_doc, _ = read_preset_or_file("hardware", sys_doc["hardware"])
    except SpecError as err:
        raise PredictError(f"--set on {system}: 'hardware': {err}") from None
    for item, parts, value in parsed:
        if parts[0] == "hardware":
            _set_path(hw_doc, parts[1:], value, item, "hardware.")
    label = f"{system} [{', '.join(sets)}]"
    for item in sets:
        _refuse_unused_latency(item, sys_doc, system)
    try:
        parse_hardware(hw_doc, f"--set on {system}")
    except SpecError as err:
        raise PredictError(str(err)) from None
    hw_path = os.path.join(tmpdir, f"{len(os.listdir(tmpdir))}-hardware.json")
    with open(hw_path, "w") as fh:
        json.dump(hw_doc, fh)
    sys_doc["hardware"] = hw_path
    try:
        parse_system(sys_doc, f"--set on {system}")
    except SpecError as err:
        raise PredictError(str(err)) from None
    sys_path = os.path.join(tmpdir, f"{len(os.listdir(tmpdir))}-system.json")
    with open(sys_path, "w") as fh:
        json.dump(sys_doc, fh)
    return label, sys_path


# ---------------------------------------------------------------------------
# the program
# ---------------------------------------------------------------------------


def _summary(module) -> dict:
    from .engine import SUMMARY_ATTR

    from .ir import dict_attr_values

    return dict_attr_values(ir.DictAttr(module.attributes[SUMMARY_ATTR]))


def _compiled(module) -> bool:
    """A module XLA already compiled (engine.compiled_by_xla)."""
    from .engine import compiled_by_xla

    return compiled_by_xla(module)


def _entry_functions(module) -> list[str]:
    """The public functions annotate-cost summed (its summary's entry_functions)."""
    from .engine import SUMMARY_ATTR

    d = ir.DictAttr(module.attributes[SUMMARY_ATTR])
    if "entry_functions" not in d:
        return []
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(d["entry_functions"])]


def _matrix_dtype(module) -> str:
    """The element type of the program's dot/convolution operands (most common), for MFU."""
    from .shapes import type_info

    counts: dict[str, int] = {}
    for op in nested_ops(module):
        if op.name in ("stablehlo.dot_general", "stablehlo.convolution", "stablehlo.dot"):
            dt = type_info(op.operands[0].type).dtype
            counts[dt] = counts.get(dt, 0) + 1
    return max(counts, key=counts.get) if counts else "f32"


def predict(path: str, **kwargs) -> PredictResult:
    """See `_predict`; nesting depth of the program bounded by memory, not by Python."""
    from .ir import DEEP_RECURSION, recursion_limit

    with recursion_limit(DEEP_RECURSION):
        return _predict(path, **kwargs)


def _predict(
    path: str,
    *,
    systems: list[str],
    backends: list[str] | None = None,
    fusion: str = "",
    sets: list[str] | None = None,
    top: int = 10,
    trace_dir: str | None = None,
    progress=None,
    inline: bool = True,
    combine: bool | None = None,
    unknown_trip_count: int | str | None = None,
) -> PredictResult:
    from .chakra.export import export_module, retime_template, run_from_pass
    from .combiner import combine_all_reduces, compiler_combines
    from .driver import read_input
    from .passes.extract_collectives import device_grid
    from .kernels.report import collect_kernels
    from .passes import PassError, PassSession, get_pass, parse_options
    from .passes.annotate_cost import annotate_module, not_costed_note, other_warnings
    from .partitioning import find_unpartitioned_sharding
    from .simulate import simulate_dir, simulate_graphs
    from .systems import load_system

    from .passes.annotate_cost import trip_option

    backends = backends or ["roofline"]
    try:  # a whole number of iterations >= 0 (annotate-cost's unknown-trip-count)
        trips = trip_option(str(unknown_trip_count)) if unknown_trip_count is not None else None
    except InputError as err:
        raise PredictError(f"--unknown-trip-count {err}") from None
    if not systems:
        raise PredictError("give at least one --system (see `costmodel systems list`)")
    data, source = read_input(path)
    tmp = tempfile.mkdtemp(prefix="costmodel-predict-")
    # --trace: every row's trace directory and Perfetto file is staged and committed
    # together once the whole prediction succeeded (costmodel.outputs), so that an
    # interrupted or failed run leaves the previous traces, and two runs do not mix
    outs = None
    if trace_dir:
        from .outputs import OutputSet

        outs = OutputSet()
    try:
        scenarios = []
        for name in systems:
            label, sys_arg = apply_overrides(name, sets or [], tmp)
            try:
                spec = load_system(sys_arg)
            except SpecError as err:
                raise PredictError(str(err)) from None
            scenarios.append((label, sys_arg, spec))

        ctx = make_context(allow_unregistered_dialects=False)
        diags = DiagnosticEngine(source)
        session = PassSession(diagnostics=diags, outputs=outs)

        def fail(stage: str) -> PredictError:
            errors = [d for d in diags.diagnostics if d.severity == "error"]
            if errors and errors[0].message.startswith(f"{stage}:"):
                return PredictError(errors[0].render())  # it names the stage already
            return PredictError(f"{stage}: {errors[0].render() if errors else 'failed'}")

        with ctx:
            try:
                module = load_module(ctx, data, source)
            except ir.MLIRError as err:
                diags.add_mlir(err.error_diagnostics)
                raise fail("cannot parse the model") from None
            if not has_public_body(module):
                raise PredictError(f"{source} has no public function with a body: nothing to predict")
            kind = "per-device"
            first_warning = len(diags.diagnostics)  # propagate-shardings' and annotate-cost's from here
            try:
                if find_unpartitioned_sharding(module) is not None:
                    kind = "sharded (partitioned once by propagate-shardings)"
                    prop = get_pass("propagate-shardings")
                    prop.run(module, parse_options(prop, ""), session)
                if inline:
                    from .ir import inline_calls

                    inline_calls(module, drop_uncalled=True)
            except PassError:
                raise fail("propagate-shardings") from None
            except ir.MLIRError as err:
                raise PredictError(f"inlining failed: {str(err).splitlines()[0]}") from None
            # checked (and partitioned if needed) once: the clones skip the per-pass check
            from .partitioning import mark_partitioned

            mark_partitioned(module)
            r_, p_ = device_grid(module)
            devices = r_ * p_
            fits = [lbl for lbl, _a, s in scenarios if s.num_npus == devices]
            for label, _arg, spec in scenarios:
                if devices > 1 and spec.num_npus != devices:
                    raise PredictError(
                        f"the program runs on {devices} devices but system '{label}' has {spec.num_npus} NPUs"
                        + (f"; systems that fit: {', '.join(fits)}" if fits else "")
                        + f" (systems with {devices} NPUs in `costmodel systems list`)"
                    )
            mm_dtype = _matrix_dtype(module)
            program = {"devices": devices, "kind": kind, "matrix_dtype": mm_dtype}
            if fusion and fusion != "given" and _compiled(module):
                # XLA's own kernels are costed whatever fusion says (docs/kernels.md)
                program["fusion_note"] = (
                    f"the module is already compiled by XLA (mhlo.fusion): --fusion {fusion} "
                    + ("costs each of its kernels as one op, with no kernel report" if fusion == "none"
                       else "does not apply, its own kernels are costed")
                )

            rows: list[Row] = []
            formation_cache: dict = {}  # one kernel formation per fusion policy
            templates: dict = {}  # one Chakra template graph per (policy, backend): retime_template
            memory_by_policy: dict = {}  # and one memory analysis
            combined_by_policy: dict = {}  # what the all-reduce combiner did
            combine_plans: dict = {}  # and which all-reduces it combined: the other clones replay it
            policies_seen: set = set()
            top_kernels: list[dict] = []
            top_of = ""
            total = len(scenarios) * len(backends)
            done = 0
            first = True
            skipped: list[str] = []
            from .backends import BackendError, get_backend, make_backend

            for backend in backends:
                try:
                    get_backend(backend)  # an unknown name is the user's mistake: an error
                except BackendError as err:
                    raise PredictError(str(err)) from None
            for label, sys_arg, spec in scenarios:
                from .hardware import load_hardware

                hw = load_hardware(spec.hardware)
                for backend in backends:
                    try:  # a backend this hardware cannot run (calibrated without a calibration block)
                        make_backend(backend, hw, {})
                    except BackendError as err:
                        skipped.append(f"{label} / {backend}: {err}")
                        done += 1
                        if progress is not None:
                            progress(done, total, f"{label} / {backend}")
                        continue
                    clone = module.clone()
                    try:
                        annotate_module(
                            clone,
                            diags,
                            hardware=spec.hardware,
                            backend=backend,
                            fusion=fusion,
                            formation_cache=formation_cache,
                            # the clones are read for their totals, kernels and graphs,
                            # never printed: reducers inside cached ops stay uncosted
                            nested_costs=bool(trace_dir),
                            unknown_trip_count=trips,
                            trip_count_option="--unknown-trip-count N",
                        )
                        if first:  # the first clone, annotated in full: what annotate-cost warned of
                            first = False
                            uncosted = not_costed_note(clone, diags)
                            if uncosted:
                                program["not_costed"] = uncosted
                            warned = other_warnings(diags, first_warning)
                            if warned:
                                program["warnings"] = warned
                            entries = _entry_functions(clone)
                            if len(entries) > 1:
                                # a step is one run of every public function: say which
                                program["entries"] = (
                                    f"the step runs each of the {len(entries)} public functions once: "
                                    + ", ".join(f"@{e}" for e in entries[:8]) + (" ..." if len(entries) > 8 else "")
                                    + " (make a function private to leave it out)"
                                )
                        policy = str(_summary(clone).get("fusion", "none"))
                        policies_seen.add(policy)
                        if combine if combine is not None else compiler_combines(policy):
                            # after fusion, as XLA runs it (costmodel.combiner)
                            stats = combine_all_reduces(clone, plans=combine_plans)
                            if stats.combined:
                                combined_by_policy[policy] = f"all-reduces {stats.all_reduces} -> {stats.after} (XLA GPU's combiner)"
                        extract = get_pass("extract-collectives")
                        extract.run(clone, parse_options(extract, f"system={sys_arg} chakra=false"), session)
                        sub = _trace_name(label, backend)
                        if trace_dir:
                            try:
                                result = run_from_pass(
                                    clone,
                                    spec,
                                    {"chakra": True, "chakra-dir": os.path.join(trace_dir, sub), "granularity": "region"},
                                    session,
                                )
                            except InputError as err:
                                text = str(err)
                                if "Chakra has no loops" not in text or "; give chakra=false" not in text:
                                    raise
                                # the pass's hint (chakra=false) is no option of predict
                                raise PredictError(
                                    text.split("; give chakra=false")[0]
                                    + "; leave out --trace: without it `costmodel predict` simulates such a loop in memory"
                                ) from None
                        else:  # the same graphs, simulated in memory
                            # the graph's shape is the same on every system: built once per
                            # fusion policy and backend (which ops take time: roofline prices
                            # a kernel that moves no byte at zero, calibrated at a launch),
                            # re-timed from each clone's costs after that
                            key = (_summary(clone).get("fusion", "none"), backend)
                            template = templates.get(key)
                            if template is not None:
                                template = retime_template(template, clone)
                            result = export_module(
                                clone, spec, os.path.join(tmp, sub), diags=diags, write=False,
                                template=template, record=key not in templates,
                            )
                            templates.setdefault(key, result.template)
                    except PassError:
                        raise fail(f"{label} / {backend}") from None
                    if trace_dir:  # read back where it is staged
                        report = simulate_dir(result.staged or result.directory, system=spec, record=True)
                    else:
                        g = result.graphs
                        report = simulate_graphs(g.nodes, g.comm_groups, spec, loops=g.loops, symmetric=g.symmetric)
                    if trace_dir:
                        from .perfetto import chrome_trace_bytes

                        outs.stage_file(
                            os.path.join(trace_dir, sub + ".perfetto.json"),
                            chrome_trace_bytes(report.records, len(report.ranks)),
                        )
                    s = _summary(clone)
                    rows.append(_row(label, spec, hw, backend, s, report, result, mm_dtype, sets or []))
                    small = _small_collectives_note(clone, rows[-1].step_time_ms * 1e6) if not all(
                        d.has_step_latency for d in spec.dims) else None
                    if small:
                        rows[-1].notes.append(small)
                    coarse = _below_resolution(rows[-1])
                    if coarse:
                        rows[-1].notes.append(coarse)
                    if s.get("kernel_count"):
                        rows[-1].notes.extend(_unmeasured(clone, hw, backend, str(s.get("fusion", ""))))
                    used = hw.rate_family("matrix", mm_dtype)
                    if used != dtype_family(mm_dtype):
                        rows[-1].notes.append(
                            f"{hw.name} has no {dtype_family(mm_dtype)} matrix rate: the program's {mm_dtype} dots and "
                            f"convolutions are costed at its {used} rate "
                            f"({hw.matrix_peak_TFLOPS[used]:g} TFLOPS), as a compiler without such units upcasts them"
                        )
                    fell = _fallback_note(clone)
                    if fell:
                        rows[-1].notes.append(fell)
                    if not top_kernels and s.get("kernel_count"):
                        # (kernels that never run, in a branch the policy does not take: left out)
                        top_kernels = [k.to_dict() for k in collect_kernels(clone) if k.executions][:top]
                        top_of = f"{label} / {backend}"
                    policy = str(s.get("fusion", "none"))
                    if policy not in memory_by_policy:  # same kernels, same buffers: once per policy
                        memory_by_policy[policy] = _peak_memory(clone, policy)
                    mem = memory_by_policy[policy]
                    if mem is not None:
                        rows[-1].peak_memory_GiB = mem / 2**30
                        rows[-1].fits = mem <= hw.memory_capacity_GiB * 2**30
                        if not rows[-1].fits:
                            rows[-1].notes.append(
                                f"peak memory {mem / 2**30:.1f} GiB exceeds the {hw.memory_capacity_GiB:g} GiB of HBM: "
                                "the step does not fit as is"
                            )
                    clone.erase()
                    done += 1
                    if progress is not None:
                        progress(done, total, f"{label} / {backend}")
        if skipped:
            if not rows:
                raise PredictError("no system can run the backends asked for: " + "; ".join(skipped))
            program["skipped"] = skipped
        # speedup: against the first system with a row of the same backend
        base: dict[str, float] = {}
        base_system: dict[str, str] = {}
        for r in rows:
            base.setdefault(r.backend, r.step_time_ms)
            base_system.setdefault(r.backend, r.system)
            r.speedup = base[r.backend] / r.step_time_ms if (r.step_time_ms and base[r.backend]) else None
            if not r.step_time_ms:
                r.notes.append("the program runs no kernel and no collective here: its step takes no time, and has no speedup")
        if len(set(base_system.values())) > 1:
            # a backend some systems cannot run (calibrated on a TPU preset): its speedups
            # have another baseline; say which
            program["speedup_against"] = dict(base_system)
        if combined_by_policy:
            if policies_seen - set(combined_by_policy):
                # rows of several compilers: say which were combined and which were not
                labels = {k: f"{k} rows: {v}" for k, v in combined_by_policy.items()}
                labels |= {k: f"{k} rows: all-reduces not combined" for k in policies_seen - set(combined_by_policy)}
                program["combined"] = "; ".join(v for _k, v in sorted(labels.items()))
            else:
                program["combined"] = "; ".join(
                    f"{v}" if len(combined_by_policy) == 1 else f"{k}: {v}" for k, v in sorted(combined_by_policy.items())
                )
        if outs is not None:
            from .outputs import OutputError

            try:
                outs.commit()
            except OutputError as err:
                raise PredictError(str(err)) from None
        return PredictResult(os.path.abspath(path) if path != "-" else "<stdin>", program, rows, top_kernels, top_of)
    finally:
        if outs is not None:
            outs.discard()
        shutil.rmtree(tmp, ignore_errors=True)


def _trace_name(label: str, backend: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return f"{safe}-{backend}"


SMALL_COLLECTIVE_BYTES = 1 << 20


def _small_collectives_note(module, step_ns: float) -> str | None:
    """A note when collectives that move under 1 MiB each take most of the collectives'
    time, and a tenth of the step or more, on a system whose network has no calibrated
    `step_latency_ns`: the model then charges every chunk of a message the full per-hop
    latency (ASTRA-sim's semantics), which overstates small collectives
    (docs/communication-model.md, caveat 2: a 64 KiB all-reduce over 8 GPUs on NVSwitch
    takes 117 us that way, about 20 us by NCCL's own latency model, which the presets'
    step latency follows). Tensor-parallel inference steps are made of such all-reduces."""
    from .passes.extract_collectives import COLLECTIVE_ATTR

    small_ns = total_ns = 0.0
    runs = 0
    for op in nested_ops(module):
        if COLLECTIVE_ATTR not in op.attributes:
            continue
        d = ir.DictAttr(op.attributes[COLLECTIVE_ATTR])
        if "time_ns" not in d:
            continue
        n = attr_number(d["executions"]) if "executions" in d else 1
        t = ir.FloatAttr(d["time_ns"]).value * n
        total_ns += t
        if "comm_bytes" in d and attr_number(d["comm_bytes"]) < SMALL_COLLECTIVE_BYTES:
            small_ns += t
            runs += n
    if not total_ns or small_ns < 0.5 * total_ns or small_ns < 0.1 * step_ns:
        return None
    return (
        f"{runs} collective run(s) of under 1 MiB each take {small_ns / 1e6:.3f} of the collectives' "
        f"{total_ns / 1e6:.3f} ms (summed over the program): small collectives are latency-bound, and the model "
        "charges each chunk of a message the full per-hop latency, which likely overstates them "
        "(docs/communication-model.md, caveat 2)"
    )


def _peak_memory(module, policy: str = "auto") -> int | None:
    """Peak live bytes per device (costmodel.memory) with the kernels of `policy` (the
    row's fusion: with `none` every op's result is a buffer, as `costmodel memory --fusion
    none` says; it read the xla-gpu kernels' peak), None when the analysis is absent."""
    try:
        from .memory import peak_memory
    except ImportError:
        return None
    return peak_memory(module, fusion=policy if policy == "none" else "auto").peak_bytes


def _unmeasured(module, hw, backend: str, fusion: str) -> list[str]:
    """Notes where the calibrated backend lacks a measurement that the program needs
    (docs/backends.md): scatters on hardware without scatter_element_ns are costed by
    their bytes only (on an H100 the ResNet max-pool gradient's atomics take 0.8 ms
    more); cuDNN convolutions on a GPU without library_call_idle_ns carry no idle time
    around their calls (4.75 us per call on an H100); convolutions with few input channels
    per filter tap on hardware without gemm_tile_k or conv_channel_multiple run
    unpadded."""
    if backend != "calibrated":
        return []
    from .kernels.report import collect_kernels

    kernels = None
    notes = []
    if "scatter_element_ns" not in hw.calibration:
        kernels = collect_kernels(module)
        n = sum(int(k.detail.get("scatter_elements", 0) * k.executions) for k in kernels)
        if n:
            notes.append(f"{n:,} elements updated by scatters are costed by their bytes only: {hw.name} has no measured "
                         "scatter_element_ns for their atomic updates (docs/backends.md), so this step is likely low")
    if fusion in ("xla-gpu", "given") and "library_call_idle_ns" not in hw.calibration:
        kernels = kernels if kernels is not None else collect_kernels(module)
        calls = sum(k.executions for k in kernels if k.conv)
        if calls:
            many = calls != 1
            notes.append(f"{calls:,.0f} convolution call{'s carry' if many else ' carries'} no idle time around "
                         f"{'them' if many else 'it'}: {hw.name} has no measured "
                         "library_call_idle_ns (the GPU's idle at and within each convolution library call: cuDNN, MIOpen; docs/backends.md), so "
                         "this step is likely low")
    if not ("gemm_tile_k" in hw.calibration and "conv_channel_multiple" in hw.calibration):
        kernels = kernels if kernels is not None else collect_kernels(module)
        convs = sum(k.executions for k in kernels if k.conv and "unpadded_channels" in k.detail)
        if convs:
            missing = " / ".join(key for key in ("gemm_tile_k", "conv_channel_multiple") if key not in hw.calibration)
            notes.append(f"{convs:,.0f} convolution{'s' if convs != 1 else ''} with input channels per filter tap not a "
                         f"multiple of 8 (an image stem: 3) run{'' if convs != 1 else 's'} unpadded: {hw.name} has no "
                         f"{missing} (the convolution library's K tile and channel padding; docs/backends.md; on the "
                         "NVIDIA presets a 3-channel stem uses 3 of each 64-deep K step), so this step is likely low")
    return notes


def _fallback_note(module) -> str | None:
    """A note when a measuring or learned backend left kernels to its fallback (kernels
    that cannot run alone, or beyond a model's training data): the row is then partly
    the fallback's estimate."""
    from .engine import SUMMARY_ATTR
    from .ir import dict_attr_values

    summary = ir.DictAttr(module.attributes[SUMMARY_ATTR])
    if "backend_stats" not in summary:
        return None
    stats = dict_attr_values(ir.DictAttr(summary["backend_stats"]))
    if not stats.get("kernels_fallback"):
        return None
    fell = int(stats["kernels_fallback"])
    own = int(stats.get("kernels_predicted", 0)) + int(stats.get("kernels_measured", 0)) + int(stats.get("kernels_from_cache", 0))
    return (f"{fell:,} of {fell + own:,} kernels are the fallback backend's estimate (they cannot run alone or lie "
            "beyond the model's training data; each says why in its fallback_reason)")


def _below_resolution(row: Row) -> str | None:
    """A note when the simulated step is shorter than the kernels' own time: each kernel of
    the Chakra trace lasts whole microseconds (rounded, the error carried to the next), so a
    program of sub-microsecond kernels can simulate to almost nothing."""
    if row.kernel_time_ms <= row.step_time_ms or row.step_time_ms >= 1e-3:
        return None
    return (
        f"the kernels take {row.kernel_time_ms * 1e6:.0f} ns in all, below the Chakra trace's resolution (whole "
        f"microseconds per kernel): the simulated step reads {row.step_time_ms * 1e6:.0f} ns; MFU and the kernels' "
        "shares use the kernels' own time"
    )


def _row(label, spec, hw, backend, s, report, result, mm_dtype, sets) -> Row:
    step_ns = report.step_time_ns
    # the flops the kernels run: dead code the compiler removes does no work
    flops = int(s.get("total_flops", 0)) - int(s.get("removed_flops", 0))
    peak = hw.peak_TFLOPS("matrix", mm_dtype) * 1e12
    kernel_ns = float(s.get("total_time_ns", 0.0))
    ratio_ns = max(step_ns, kernel_ns)
    mfu = flops / (peak * ratio_ns * 1e-9) if ratio_ns and peak else 0.0
    total_ns = kernel_ns or 1.0
    return Row(
        system=label,
        system_name=spec.name,
        hardware=hw.name,
        backend=backend,
        fusion=str(s.get("fusion", "none")),
        num_npus=spec.num_npus,
        step_time_ms=step_ns / 1e6,
        compute_ms=report.compute_time_ns / 1e6,
        comm_ms=result.manifest["predicted"]["comm_time_ns_max"] / 1e6,
        exposed_comm_ms=report.exposed_comm_ns / 1e6,
        kernel_count=int(s["kernel_count"]) if "kernel_count" in s else None,
        kernel_bytes=int(s.get("kernel_bytes", 0)),
        total_flops=flops,
        mfu=mfu,
        kernel_time_ms=kernel_ns / 1e6,
        memory_bound_share=float(s.get("memory_bound_time_ns", 0.0)) / total_ns,
        peak_memory_GiB=None,
        hbm_GiB=hw.memory_capacity_GiB,
        fits=None,
        overrides=list(sets),
    )


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------


def render_table(res: PredictResult) -> str:
    from .kernels.report import KernelRow, render_table as kernel_table

    # the system column as wide as the longest label (a path, --set overrides), at least 24
    w = max([24] + [len(r.system) for r in res.rows])
    head = (
        f"{'system':<{w}} {'backend':<10} {'step':>10} {'compute':>10} {'comm':>9} {'exposed':>9} "
        f"{'kernels':>7} {'MFU':>5} {'mem-bd':>6} {'peak mem':>12} {'speedup':>7}"
    )
    lines = [
        f"{res.model}: {res.program['devices']} device(s), {res.program['kind']}"
        + (f"; {res.program['combined']}" if res.program.get("combined") else ""),
        "",
        head,
        "-" * len(head),
    ]
    # one time unit for the whole table: the largest that keeps the shortest step >= 1 (a
    # small program reads 17.93us, not 0.02ms; a 3 us roofline row beside a 1.85 ms
    # calibrated one reads 3.00us and 1850.00us, not 0.00ms), unless the longest would
    # then outgrow the column (>= 100000)
    longest = max((max(r.step_time_ms, r.compute_ms, r.comm_ms) for r in res.rows), default=0.0)
    shortest = min((r.step_time_ms for r in res.rows if r.step_time_ms > 0), default=longest)
    unit, scale = ("ms", 1.0)  # also for a program that runs nothing (0 ms)
    if longest > 0:
        units = (("ms", 1.0), ("us", 1e3), ("ns", 1e6))
        k = next((j for j, (_u, f) in enumerate(units) if shortest * f >= 1.0), len(units) - 1)
        while k > 0 and longest * units[k][1] >= 1e5:
            k -= 1
        unit, scale = units[k]
    for r in res.rows:
        if r.peak_memory_GiB is None:
            mem = "n/a"
        else:
            # GiB with one decimal; under a tenth of one, MiB (a small program's peak read 0.0/80G)
            peak = f"{r.peak_memory_GiB:5.1f}" if r.peak_memory_GiB >= 0.1 else f"{r.peak_memory_GiB * 1024:4.1f}M"
            mem = f"{peak}/{r.hbm_GiB:g}G" + ("" if r.fits else " !")
        lines.append(
            f"{r.system:<{w}} {r.backend:<10} {r.step_time_ms * scale:>8.2f}{unit} {r.compute_ms * scale:>8.2f}{unit} "
            f"{r.comm_ms * scale:>7.2f}{unit} {r.exposed_comm_ms * scale:>7.2f}{unit} {'-' if r.kernel_count is None else r.kernel_count:>7} {100 * r.mfu:>4.0f}% "
            f"{100 * r.memory_bound_share:>5.0f}% {mem:>12} " + (f"{r.speedup:>6.2f}x" if r.speedup is not None else f"{'n/a':>7}")
        )
    if res.program.get("not_costed"):
        lines.append(f"note: {res.program['not_costed']}")
    if res.program.get("entries"):
        lines.append(f"note: {res.program['entries']}")
    if res.program.get("fusion_note"):
        lines.append(f"note: {res.program['fusion_note']}")
    for why in res.program.get("skipped", []):
        lines.append(f"note: no row for {why}")
    if res.program.get("speedup_against"):
        lines.append("note: speedups are against the first row of each backend: "
                     + ", ".join(f"{b} rows against {s}" for b, s in res.program["speedup_against"].items()))
    for r in res.rows:
        for note in r.notes:
            lines.append(f"note: {r.system} / {r.backend}: {note}")
    if unit != "ms" and res.rows:
        lines.append(
            "note: times in " + unit + ", simulated from the Chakra trace, whose kernels last whole microseconds "
            "(duration_micros); `costmodel kernels FILE` lists the kernels' own times"
        )
    if res.top_kernels:
        lines += ["", f"top kernels on {res.top_kernels_of}:"]
        rows = [
            KernelRow(
                id=k["id"],
                kind=k["kind"],
                time_ns=k["time_ns"],
                bound=k["bound"],
                flops=k["flops"],
                bytes_read=k["bytes_read"],
                bytes_written=k["bytes_written"],
                launches=k["launches"],
                executions=k["executions"],
                ops=k["ops"],
                shape=k["shape"],
                profile=k.get("profile", ""),
                conv=k.get("conv", ""),
                target=k.get("target", ""),
            )
            for k in res.top_kernels
        ]
        step_ns = next(
            (max(r.step_time_ms, r.kernel_time_ms) * 1e6 for r in res.rows if f"{r.system} / {r.backend}" == res.top_kernels_of),
            None,
        )
        lines.append(kernel_table(rows, len(rows), step_ns))
    return "\n".join(lines)


def plot(res: PredictResult, path: str) -> None:
    """A stacked bar per (system, backend): compute and exposed communication."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PredictError("--plot needs matplotlib: pip install 'stablehlo-costmodel[plot]'") from None
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg", ".pdf"):
        raise PredictError(f"--plot writes .png, .svg or .pdf files, got '{path}'")
    labels = [f"{r.system}\n{r.backend}" for r in res.rows]
    compute = [r.compute_ms for r in res.rows]
    exposed = [r.exposed_comm_ms for r in res.rows]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(labels) + 1.5))
    y = list(range(len(labels)))
    ax.barh(y, compute, label="compute", color="#4C72B0")
    ax.barh(y, exposed, left=compute, label="exposed communication", color="#DD8452")
    for i, r in enumerate(res.rows):
        speed = f" ({r.speedup:.2f}x)" if r.speedup is not None else ""
        ax.text(r.step_time_ms, i, f" {r.step_time_ms:.1f} ms{speed}", va="center", fontsize=8)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("predicted step time (ms)")
    ax.set_title(os.path.basename(res.model), fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0, max((r.step_time_ms for r in res.rows), default=1) * 1.35)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=ext[1:])
    plt.close(fig)
    from .outputs import write_file

    write_file(path, buf.getvalue())
