"""`extract-collectives`: find every collective, decode its devices, size and time it.

    stablehlo-opt model.mlir --annotate-cost --extract-collectives="system=dgx-h100"

Each collective op gets `costmodel.collective = {kind, bytes_in, bytes_out, comm_bytes,
group_size, num_groups, replica_groups, algorithm, time_ns, mode, executions}`; the module's
`costmodel.summary` keeps its keys and gains the collective totals (counts, bytes and times
weighted by while trip counts and call sites). The time of an op is the largest time over
its process groups (every group runs concurrently, the op ends when the slowest does).
Afterwards the Chakra exporter writes the execution trace (`chakra=false` skips it).
See docs/collectives.md.
"""

from __future__ import annotations

from costmodel.collectives import (
    CollectiveError,
    CollectiveInfo,
    decode_collective,
    find_collectives,
    grid_size,
    sdy_meshes,
)
from costmodel.commmodel import ALGORITHM_NAMES, CommModelError, implements, resolve_algorithm
from costmodel.engine import COST_ATTR, SUMMARY_ATTR
from costmodel.ir import InputError, count_attr, f64_attr, ir

from . import PassError, PassInfo, PassOption, PassSession, register_pass
from .export_chakra import CHAKRA_OPTIONS, SYSTEM_OPTION

COLLECTIVE_ATTR = "costmodel.collective"
GRANULARITIES = ("op", "region")
# the kinds a collective algorithm applies to (the others are point-to-point or broadcasts)
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
# Distinct groups timed per op; beyond this the op's time is the max over the first ones
# (groups of one op almost always have the same shape on the network).
MAX_TIMED_GROUPS = 256


def device_grid(module) -> tuple[int, int]:
    """(num_replicas, num_partitions); a module without `mhlo.num_*` attributes but with
    Shardy meshes gets one replica x the largest mesh's device count partitions."""
    attrs = module.attributes
    r, p = grid_size(module)
    if "mhlo.num_replicas" not in attrs and "mhlo.num_partitions" not in attrs:
        meshes = sdy_meshes(module)
        if meshes:
            p = max(max(m.size, max(m.device_ids, default=-1) + 1) for m in meshes.values())
    return r, p


def _load_system(spec: str):
    from costmodel.hardware import SpecError
    from costmodel.systems import load_system

    try:
        return load_system(spec)
    except SpecError as err:
        raise InputError(str(err)) from None


class _Timer:
    def __init__(self, system, algorithm: str | None):
        from costmodel.commmodel import collective_time_ns

        self._fn = collective_time_ns
        self.system = system
        # the ASTRA-sim implementation forced by algorithm= (None: the system's)
        self.algorithm = resolve_algorithm(algorithm) if algorithm else None
        self.not_applied: set[str] = set()  # collective kinds the forced algorithm does not run
        self._cache: dict = {}

    def time(self, kind: str, comm_bytes: int, group: list[int]) -> tuple[float, str]:
        key = (kind, comm_bytes, tuple(group))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        algorithm = self.algorithm
        if algorithm is not None and not implements(algorithm, kind):
            if kind in COLLECTIVE_KINDS:
                self.not_applied.add(kind)
            algorithm = None
        try:
            if algorithm is None:
                t, alg = self._fn(self.system, kind, comm_bytes, list(group))
            else:
                t, alg = self._fn(self.system, kind, comm_bytes, list(group), algorithm=algorithm)
        except CommModelError as err:
            raise InputError(f"extract-collectives: {err}") from None
        res = (float(t), str(alg))
        self._cache[key] = res
        return res

    def op_time(self, info: CollectiveInfo) -> tuple[float, str]:
        """Max over the op's process groups (pairs for permutes) of the group's time."""
        if info.kind == "all_slice":
            return 0.0, "none"
        if info.host_transfer:
            return 0.0, "host_transfer"
        best_t, best_alg = 0.0, "none"
        seen: set = set()
        for g in info.groups:
            if len(set(g)) < 2:  # one device (or a permute pair onto itself): no traffic
                continue
            key = tuple(g)
            if key in seen:
                continue
            seen.add(key)
            t, alg = self.time(info.kind, info.comm_bytes, g)
            if t > best_t or best_alg == "none":
                best_t, best_alg = t, alg
            if len(seen) >= MAX_TIMED_GROUPS:
                break
        return best_t, best_alg


def _collective_attr(info: CollectiveInfo, algorithm: str, time_ns: float, executions: int):
    # the model names "implementation/protocol" on systems with protocols (NCCL's LL, LL128,
    # Simple): the protocol is a key of its own
    algorithm, _, protocol = algorithm.partition("/")
    extra = {"protocol": ir.StringAttr.get(protocol)} if protocol else {}
    return ir.DictAttr.get(
        extra | {
            "kind": ir.StringAttr.get(info.kind),
            "bytes_in": count_attr(info.bytes_in),
            "bytes_out": count_attr(info.bytes_out),
            "comm_bytes": count_attr(info.comm_bytes),
            "group_size": count_attr(info.group_size),
            "num_groups": count_attr(info.num_groups),
            "replica_groups": ir.StringAttr.get(info.groups_text()),
            "mode": ir.StringAttr.get(info.mode),
            "algorithm": ir.StringAttr.get(algorithm),
            "time_ns": f64_attr(time_ns),
            "executions": _expected(executions),
        }
    )


def _expected(value):
    """A count, or (annotate-cost's branch=mean: a collective in one of N branches runs
    1/N times on average) an expected count as f64."""
    if float(value).is_integer():
        return count_attr(int(value))
    return f64_attr(float(value))


def _write_summary(module, system, system_name: str, per_kind: dict, ops: int, unsupported: int) -> None:
    entries = {}
    if SUMMARY_ATTR in module.attributes:
        old = ir.DictAttr(module.attributes[SUMMARY_ATTR])
        for i in range(len(old)):
            na = old[i]
            entries[na.name] = na.attr
    count = sum(v["count"] for v in per_kind.values())
    nbytes = sum(v["bytes"] for v in per_kind.values())
    t = sum(v["time_ns"] for v in per_kind.values())
    entries["system"] = ir.StringAttr.get(system_name)
    hw_spec = getattr(system, "hardware_spec", None)
    if hw_spec is not None:  # what annotate-cost compares its hardware with (warn_recosting)
        entries["system_hardware"] = ir.StringAttr.get(hw_spec.name)
    entries["collective_ops"] = count_attr(ops)
    entries["collective_count"] = _expected(count)
    entries["collective_bytes"] = _expected(nbytes)
    entries["comm_time_ns"] = f64_attr(t)
    entries["collectives"] = ir.DictAttr.get(
        {
            kind: ir.DictAttr.get(
                {
                    "count": _expected(v["count"]),
                    "bytes": _expected(v["bytes"]),
                    "time_ns": f64_attr(v["time_ns"]),
                }
            )
            for kind, v in sorted(per_kind.items())
        }
    )
    if unsupported:
        entries["collective_unsupported_count"] = count_attr(unsupported)
    module.attributes[SUMMARY_ATTR] = ir.DictAttr.get(entries)


def _ensure_costed(module: ir.Operation, system, system_name: str, session: PassSession) -> None:
    """A system names its per-device hardware, so `system=` alone costs a program: when
    annotate-cost has not run, cost the compute as `--annotate-cost="hardware=<the
    system's>"` does (its default backend, kernels formed as the target compiler forms
    them: what `costmodel predict` costs too); when it ran for other hardware, say so."""
    hw_name = getattr(system, "hardware", None)
    summary = module.attributes[SUMMARY_ATTR] if SUMMARY_ATTR in module.attributes else None
    if summary is not None and "total_time_ns" in ir.DictAttr(summary):
        costed_for = ir.StringAttr(ir.DictAttr(summary)["hardware"]).value
        if hw_name and costed_for != hw_name:
            session.diagnostics.warning(
                module.location,
                f"compute was costed for hardware '{costed_for}' but system '{system_name}' has "
                f"'{hw_name}' devices; pass --annotate-cost=\"hardware={hw_name}\" to cost them on the system's hardware",
            )
        return
    if not hw_name:
        return
    from .annotate_cost import DEFAULT_BACKEND, annotate_module

    # exactly what --annotate-cost="hardware=<the system's>" does: its default backend and
    # the kernel formation of the compiler that targets the hardware (costmodel predict's)
    annotate_module(module, session.diagnostics, hardware=hw_name, session=session)
    fusion = ""
    if SUMMARY_ATTR in module.attributes and "fusion" in ir.DictAttr(module.attributes[SUMMARY_ATTR]):
        fusion = f", kernels formed as {ir.StringAttr(ir.DictAttr(module.attributes[SUMMARY_ATTR])['fusion']).value}"
    session.messages.append(
        f"extract-collectives: the module had no costs; costed its compute as --annotate-cost=\"hardware={hw_name}\" "
        f"does (backend '{DEFAULT_BACKEND}'{fusion}), {hw_name} being the hardware of system '{system_name}'"
    )


def refuse_unpartitioned(module: ir.Operation, pass_name: str, session: PassSession,
                         explicit_ok: bool = False) -> None:
    """Error out on a sharded program that was not partitioned (see costmodel.partitioning).
    `explicit_ok`: Shardy's collectives on global shapes (propagate-shardings
    per-device=false) may be annotated, one collective at a time (no trace: a trace would
    run every device's work on every rank)."""
    from costmodel.partitioning import find_global_collective, find_unpartitioned_sharding, unpartitioned_message

    if explicit_ok and find_global_collective(module) is not None:
        return
    found = find_unpartitioned_sharding(module)
    if found is not None:
        session.diagnostics.error(found.op.location, unpartitioned_message(pass_name, found))
        raise PassError("unpartitioned module")


def _warn_unused_trace_options(module: ir.Operation, options: dict, session: PassSession) -> None:
    """chakra=false writes no trace: say so for every trace option given a non-default value."""
    given = [
        f"{o.name}={str(options[o.name]).lower() if o.type is bool else options[o.name]}"
        for o in CHAKRA_OPTIONS
        if options.get(o.name, o.default) != o.default
    ]
    if given:
        what = "the simulator runs on the trace, so nothing is simulated" if options.get("simulate") else "no trace is written"
        session.diagnostics.warning(
            module.location,
            f"extract-collectives: {', '.join(given)} ignored with chakra=false ({what}); "
            f"drop chakra=false to write the Chakra trace",
        )


def run(module: ir.Operation, options: dict, session: PassSession) -> None:
    if options["granularity"] not in GRANULARITIES:
        raise InputError(
            f"pass 'extract-collectives': option 'granularity' expects op or region, got '{options['granularity']}'"
        )
    refuse_unpartitioned(module, "extract-collectives", session, explicit_ok=not options["chakra"])
    system = _load_system(options["system"])
    system_name = getattr(system, "name", options["system"])
    try:
        timer = _Timer(system, options.get("algorithm") or None)
    except CommModelError as err:
        raise InputError(f"pass 'extract-collectives': option 'algorithm': {err}") from None
    diags = session.diagnostics
    if not options["chakra"]:
        _warn_unused_trace_options(module, options, session)
    _ensure_costed(module, system, system_name, session)
    R, P = device_grid(module)
    meshes = sdy_meshes(module)
    num_npus = getattr(system, "num_npus", None)
    if num_npus is not None and R * P > num_npus:
        raise InputError(
            f"the program runs on {R * P} devices (num_replicas {R} x num_partitions {P}) but system "
            f"'{system_name}' has {num_npus}"
        )

    def unknown_trip(while_op):
        if COST_ATTR not in while_op.attributes:  # annotate-cost already warned otherwise
            diags.warning(
                while_op.location,
                "cannot infer the trip count of this 'stablehlo.while'; counting its collectives once",
            )

    def recursion(call_op, callee):
        diags.warning(call_op.location, f"recursive call to @{callee}: its collectives are counted once")

    per_kind: dict[str, dict] = {}
    groups_cache: dict = {}  # decode_collective: one per distinct replica_groups attribute
    decoded: dict = {}  # op -> (R, P, info): the Chakra exporter reuses them
    failed = False
    ops = 0
    unsupported = 0
    with module.context, module.location:
        for op, mult in find_collectives(module, on_unknown_trip_count=unknown_trip, on_recursion=recursion):
            ops += 1
            try:
                info = decode_collective(op, R, P, meshes=meshes, cache=groups_cache)
            except CollectiveError as err:
                msg = str(err)
                if msg.startswith("dynamic shapes"):
                    diags.warning(op.location, f"'{op.name}' not costed: {msg}")
                    unsupported += 1
                    continue
                diags.error(op.location, f"'{op.name}': {msg}")
                failed = True
                continue
            if info.kind in ("send", "recv") and not info.pairs and not info.host_transfer:
                diags.warning(
                    op.location,
                    f"'{op.name}' has no source_target_pairs: its peer devices are unknown, so it is not timed",
                )
            t, alg = timer.op_time(info)
            op.attributes[COLLECTIVE_ATTR] = _collective_attr(info, alg, t, mult)
            if options["chakra"]:
                decoded[op] = (R, P, info)  # (keyed with its final attributes)
            k = per_kind.setdefault(info.kind, {"count": 0, "bytes": 0, "time_ns": 0.0})
            k["count"] += mult
            k["bytes"] += info.comm_bytes * mult
            k["time_ns"] += t * mult
        if failed:
            raise PassError("extract-collectives failed")
        _write_summary(module, system, system_name, per_kind, ops, unsupported)

    if timer.not_applied:
        kinds = ", ".join(k for k in COLLECTIVE_KINDS if k in timer.not_applied)
        session.messages.append(
            f"extract-collectives: algorithm '{options['algorithm']}' ({timer.algorithm}) does not implement "
            f"{kinds}; those use the implementation of system '{system_name}'"
        )
    if options["algorithm"] and options["chakra"]:
        session.messages.append(
            f"extract-collectives: algorithm '{options['algorithm']}' applies to the costmodel.collective times; "
            f"the Chakra trace keeps the implementations of system '{system_name}'"
        )
    if options["chakra"]:
        from costmodel.chakra.export import run_from_pass

        run_from_pass(module, system, options, session, decoded)


INFO = register_pass(
    PassInfo(
        argument="extract-collectives",
        summary="Annotate every collective with costmodel.collective (devices, bytes, time) and add totals to costmodel.summary",
        options=(
            SYSTEM_OPTION,
            PassOption(
                "algorithm",
                str,
                "",
                "force a collective algorithm (tree: double binary tree, all_reduce only; halving_doubling: "
                "no all_to_all; kinds it does not implement keep the system's)",
                choices=ALGORITHM_NAMES,
            ),
            PassOption("chakra", bool, True, "also write the Chakra execution trace for ASTRA-sim"),
            *CHAKRA_OPTIONS,
        ),
        run=run,
    )
)
