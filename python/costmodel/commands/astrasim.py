"""`costmodel astra-sim DIR [--binary PATH]`: run ASTRA-sim on a trace directory."""

from __future__ import annotations

import json
import sys

from ..jsonio import json_load
from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "astra-sim",
        help="run ASTRA-sim (analytical, congestion-unaware) on a trace directory and report its step time",
    )
    p.add_argument("directory", help="trace directory written by extract-collectives / export-chakra")
    p.add_argument(
        "--binary",
        metavar="PATH",
        help="ASTRA-sim executable (default: $ASTRA_SIM, else AstraSim_Analytical_Congestion_Unaware on PATH)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--compare", action="store_true", help="also run the built-in simulator and show both")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="give up after S seconds")
    p.set_defaults(func=_run)


def _fmt(ns) -> str:
    from ..simulate import _fmt_ns

    return "-" if ns is None else _fmt_ns(ns)


def _run(args) -> int:
    import math

    from ..astrasim import AstraSimError, run_astra_sim

    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise CommandError(f"--timeout expects a positive number of seconds, got {args.timeout}")
    try:
        result = run_astra_sim(args.directory, args.binary, timeout_s=args.timeout)
    except AstraSimError as err:
        raise CommandError(str(err)) from None
    for w in result.warnings:
        sys.stderr.write(f"costmodel: warning: {w}\n")
    ours = None
    if args.compare:
        from ..simulate import SimulationError, simulate_dir

        try:
            ours = simulate_dir(args.directory)
        except SimulationError as err:
            raise CommandError(str(err)) from None
    if args.json:
        doc = result.to_dict()
        if ours is not None:
            doc["builtin"] = ours.to_dict()
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    sys.stdout.write(f"ASTRA-sim step time: {_fmt(result.step_time_ns)}\n\n")
    header = f"{'rank':>4}  {'finish':>14}  {'exposed comm':>14}"
    if ours is not None:
        header += f"  {'built-in finish':>16}  {'difference':>10}"
    sys.stdout.write(header + "\n")
    for r in sorted(result.cycles):
        line = f"{r:>4}  {_fmt(result.cycles[r]):>14}  {_fmt(result.exposed.get(r)):>14}"
        if ours is not None and r < len(ours.ranks):
            mine = ours.ranks[r].finish_ns
            diff = (mine - result.cycles[r]) / result.cycles[r] * 100 if result.cycles[r] else 0.0
            line += f"  {_fmt(mine):>16}  {diff:>+9.2f}%"
        sys.stdout.write(line + "\n")
    note = _calibration_note(args.directory)
    if note:
        sys.stdout.write("\n" + note + "\n")
    return 0


def _calibration_note(directory: str) -> str:
    """One line when the trace's system is calibrated: what ASTRA-sim does not see of it."""
    try:
        with open(f"{directory}/manifest.json") as fh:
            system = (json_load(fh).get("system") or {})
    except (OSError, ValueError, AttributeError):
        return ""
    cal = system.get("calibration") if isinstance(system, dict) else None
    if not isinstance(cal, dict):
        return ""
    lat = cal.get("collective_latency_ns", 0)
    lat = lat.get("value", 0) if isinstance(lat, dict) else lat
    return (
        f"note: system '{system.get('name')}' is calibrated; ASTRA-sim sees its bus_efficiency (network.yml "
        f"bandwidth) but not collective_latency_ns = {lat:g} ns per communication op, the fused reduction, "
        f"nor a step_latency_ns{', nor the protocols' if cal.get('protocols') else ''}, which the built-in "
        f"simulator applies (docs/communication-model.md, Calibration)"
    )
