"""`costmodel memory FILE`: the per-device peak memory of a program (costmodel.memory)."""

from __future__ import annotations

import json
import sys

from . import CommandError, partition_if_needed


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "memory",
        help="per-device peak memory of a program: peak, what is live there, the largest temporaries",
    )
    p.add_argument("file", help="StableHLO module (text or bytecode; '-' for stdin), per device or sharded")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument("--function", help="entry function (default: main, else the public function with the highest peak)")
    p.add_argument(
        "--fusion",
        default="auto",
        help="which ops allocate: auto (the file's kernel annotation, else xla-gpu kernels), xla-gpu, xla-tpu, "
        "none (every op's result is a buffer)",
    )
    p.add_argument(
        "--schedule",
        default="auto",
        help="op order: auto (the lower of program order and a memory-minimizing list schedule), program, list",
    )
    p.add_argument(
        "--branch",
        default="max",
        help="which branch of a stablehlo.case/if counts when the file carries no choice of annotate-cost: max "
        "(the costliest; here the branch of the largest peak), mean, a branch index, or xla (as max here)",
    )
    p.add_argument("--top", type=int, default=10, metavar="N", help="show the N largest temporaries (default 10; 0: none)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..ir import DEEP_RECURSION, recursion_limit

    with recursion_limit(DEEP_RECURSION):  # nesting depth bounded by memory, as annotate-cost
        return _memory(args)


def _memory(args) -> int:
    from ..driver import read_input
    from ..ir import DiagnosticEngine, InputError, ir, load_module, make_context
    from ..memory import FUSION_CHOICES, SCHEDULE_CHOICES, peak_memory, render_report

    if args.top < 0:
        raise CommandError(f"--top must be >= 0, got {args.top}")
    if args.fusion not in FUSION_CHOICES:
        raise CommandError(f"--fusion must be one of {', '.join(FUSION_CHOICES)}, got '{args.fusion}'")
    if args.schedule not in SCHEDULE_CHOICES:
        raise CommandError(f"--schedule must be one of {', '.join(SCHEDULE_CHOICES)}, got '{args.schedule}'")
    from ..branches import parse_policy

    try:
        parse_policy(args.branch)
    except InputError as err:
        raise CommandError(f"--branch: {err}") from None
    try:
        data, source = read_input(args.file)
    except InputError as err:
        raise CommandError(str(err)) from None
    ctx = make_context(allow_unregistered_dialects=True)
    diags = DiagnosticEngine(source)
    notes = []
    with ctx:
        try:
            module = load_module(ctx, data, source)
        except ir.MLIRError as err:
            diags.add_mlir(err.error_diagnostics)
            raise CommandError(diags.diagnostics[0].render() if diags.diagnostics else str(err)) from None
        warned = partition_if_needed(module, diags, notes)
        try:
            report = peak_memory(
                module, function=args.function, fusion=args.fusion, schedule=args.schedule, top=args.top,
                branch=args.branch,
            )
        except InputError as err:
            raise CommandError(str(err)) from None
    for line in warned:
        sys.stderr.write(line + "\n")
    for note in notes:
        sys.stderr.write(f"note: {note}\n")
    if args.json:
        doc = {"file": source, **report.to_dict()}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    sys.stdout.write(render_report(report, source) + "\n")
    return 0
