"""`costmodel simulate DIR [--json] [--trace trace.json]`: the built-in step-time simulator."""

from __future__ import annotations

import json
import sys

from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a Chakra trace directory (ASTRA-sim's analytical semantics) and print the step time",
    )
    p.add_argument("directory", help="trace directory written by extract-collectives / export-chakra")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--full",
        action="store_true",
        help="simulate every node of long loops too (default: a few iterations and the steady state, docs/simulator.md)",
    )
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace (open it in ui.perfetto.dev)")
    p.add_argument(
        "--system",
        metavar="NAME|PATH",
        help="price communication on this system instead of the one the trace was written for",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..commmodel import CommModelError
    from ..hardware import SpecError
    from ..ir import write_atomically
    from ..simulate import SimulationError, simulate_dir

    system = None
    if args.system:
        from ..systems import load_system

        try:
            system = load_system(args.system)
        except SpecError as err:
            raise CommandError(str(err)) from None
    try:
        report = simulate_dir(args.directory, system=system, record=bool(args.trace), full=args.full)
    except SimulationError as err:
        raise CommandError(str(err)) from None
    except CommModelError as err:  # a trace the system cannot price (e.g. a rank beyond it)
        raise CommandError(f"{args.directory}: {err}") from None
    except SpecError as err:
        raise CommandError(str(err)) from None
    if args.trace:
        from ..perfetto import chrome_trace_bytes

        try:
            write_atomically(args.trace, chrome_trace_bytes(report.records, len(report.ranks)))
        except OSError as err:
            raise CommandError(str(err) if err.strerror is None else f"cannot write '{args.trace}': {err.strerror}") from None
    # the trace streamed to standard output: the report goes to stderr, so that stdout
    # stays one JSON document
    from ..outputs import writes_stdout

    out = sys.stderr if args.trace and writes_stdout(args.trace) else sys.stdout
    if args.json:
        out.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        out.write(report.render() + "\n")
        if args.trace and out is sys.stdout:
            out.write(f"\ntrace: {args.trace} (open in https://ui.perfetto.dev)\n")
    return 0
