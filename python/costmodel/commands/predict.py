"""`costmodel predict MODEL --system S [--system S2 ...]`: the step time of one program on
several systems and backends, in one table (or JSON, or a plot)."""

from __future__ import annotations

import json
import os
import sys

from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predict the step time of a program on several systems and backends (one table)",
        description="Parse once, partition once if sharded, then annotate-cost -> extract-collectives -> "
        "Chakra -> simulate for every (system, backend). See docs/predict.md.",
    )
    p.add_argument("model", help="StableHLO module (text, bytecode or portable artifact; '-' for stdin)")
    p.add_argument("--system", action="append", default=[], metavar="NAME|PATH", help="system preset or .json (repeat)")
    p.add_argument(
        "--backend", action="append", default=[], metavar="NAME", help="cost backend (repeat; default roofline)"
    )
    p.add_argument("--fusion", default=None, help="kernel formation: xla-gpu, xla-tpu, iree or none (every op its own "
                   "cost, no kernels formed; default: by hardware)")
    p.add_argument(
        "--inline",
        action="store_true",
        default=True,
        help="inline private functions before kernel formation, as XLA does (the default; docs/kernels.md)",
    )
    p.add_argument(
        "--no-inline",
        dest="inline",
        action="store_false",
        help="keep calls as kernel boundaries (as annotate-cost does by default)",
    )
    p.add_argument(
        "--combine",
        dest="combine",
        action="store_true",
        default=None,
        help="combine independent all-reduces as XLA GPU's AllReduceCombiner does "
        "(default: with fusion xla-gpu; docs/collectives.md)",
    )
    p.add_argument(
        "--no-combine", dest="combine", action="store_false", help="keep every all-reduce as exported"
    )
    p.add_argument(
        "--unknown-trip-count",
        metavar="N",
        help="iterations of every while loop whose trip count the IR does not fix (a data-dependent loop) and "
        "that has no costmodel.trip_count of its own (default: one, with a warning)",
    )
    p.add_argument("--top", type=int, default=10, metavar="N", help="top kernels to list (default 10; 0: none)")
    p.add_argument("--json", action="store_true", help="print the JSON document (docs/predict.md) instead of the table")
    p.add_argument("--trace", metavar="DIR", help="write each run's Chakra trace and Perfetto timeline into DIR")
    p.add_argument("--plot", metavar="FILE", help="draw the step-time breakdown (.png, .svg or .pdf; needs matplotlib)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="what-if override of every system: hardware.memory_bandwidth_GBps=4000, network.0.bandwidth_GBps=450 ...",
    )
    p.set_defaults(func=_run)


def _progress():
    """A tqdm bar on stderr, shown only on a terminal and after a second."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None, None
    bar = None

    def update(done: int, total: int, what: str) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, file=sys.stderr, delay=1.0, disable=None, leave=False, unit="run")
        bar.set_description(what[:40])
        bar.update(1)

    def close() -> None:
        if bar is not None:
            bar.close()

    return update, close


def _run(args) -> int:
    from ..ir import InputError
    from ..predict import PredictError, plot, predict, render_table

    if args.top < 0:
        raise CommandError(f"--top must be >= 0, got {args.top}")
    for flag, value in (("--fusion", args.fusion), ("--trace", args.trace), ("--plot", args.plot),
                        ("--unknown-trip-count", args.unknown_trip_count)):
        if value is not None and not value.strip():  # given empty: not the same as not given
            raise CommandError(f"{flag} needs a value, got an empty one")
    if args.plot:
        # a plot that cannot be written is known before the work, not after it
        if os.path.splitext(args.plot)[1].lower() not in (".png", ".svg", ".pdf"):
            raise CommandError(f"--plot writes .png, .svg or .pdf files, got '{args.plot}'")
        folder = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(folder):
            raise CommandError(f"--plot {args.plot}: no directory '{folder}'")
    update, close = _progress()
    try:
        res = predict(
            args.model,
            systems=args.system,
            backends=args.backend or ["roofline"],
            fusion=args.fusion or "",
            sets=args.set,
            top=args.top,
            trace_dir=args.trace,
            progress=update,
            inline=args.inline,
            combine=args.combine,
            unknown_trip_count=args.unknown_trip_count,
        )
    except (PredictError, InputError) as err:
        raise CommandError(str(err)) from None
    finally:
        if close is not None:
            close()
    for line in res.program.get("warnings", []):  # propagate-shardings' and annotate-cost's, as stablehlo-opt prints them
        sys.stderr.write(line + "\n")
    if args.plot:
        plot(res, args.plot)
    if args.json:
        sys.stdout.write(json.dumps(res.to_json(), indent=2) + "\n")
    else:
        sys.stdout.write(render_table(res) + "\n")
        if args.trace:
            sys.stdout.write(f"\ntraces: {args.trace}/ (Chakra per run, *.perfetto.json for ui.perfetto.dev)\n")
        if args.plot:
            sys.stdout.write(f"plot: {args.plot}\n")
    return 0
