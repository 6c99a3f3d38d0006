"""`costmodel kernels FILE`: the top kernels of a program by time."""

from __future__ import annotations

import argparse
import json
import sys

from . import CommandError, partition_if_needed


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "kernels",
        help="list the kernels of a program by time (annotates it first unless it already carries kernels)",
    )
    p.add_argument("file", help="StableHLO module (text or bytecode; '-' for stdin), annotated or not")
    p.add_argument("--top", type=int, default=20, metavar="N",
                   help="show the N costliest kernels, or scopes (default 20; 0: none, the totals only)")
    p.add_argument("--json", action="store_true", help="print every kernel as JSON")
    p.add_argument(
        "--by",
        choices=("kernel", "scope"),
        default="kernel",
        help="kernel: one row per kernel (the default); scope: the kernels' time summed by the JAX name "
        "scope of each kernel's root op (`jit(f)/jvp(M)/encoder`; exports keep op names with "
        "`.as_text(debug_info=True)` or jax.export)",
    )
    p.add_argument("--depth", type=int, metavar="N",
                   help="with --by scope: the first N parts of each scope (2 splits forward `jvp(M)` from "
                   "backward `transpose(jvp(M))`)")
    p.add_argument("--hardware", help="annotate on this hardware (default: keep the file's annotation, else h100-sxm)")
    p.add_argument("--backend", help="cost backend when annotating (default roofline)")
    p.add_argument("--fusion", help="kernel formation when annotating: xla-gpu, xla-tpu, iree (default: by hardware; "
                   "none forms no kernels, so it is refused here)")
    p.add_argument(
        "--unknown-trip-count",
        metavar="N",
        help="when annotating: iterations of every while loop whose trip count the IR does not fix (a "
        "data-dependent loop) and that has no costmodel.trip_count of its own (default: one, with a warning)",
    )
    p.add_argument(
        "--inline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="when annotating, inline private functions first, as XLA does and `costmodel predict` does "
        "(the default; --no-inline forms each function's kernels apart, as stablehlo-opt --annotate-cost)",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..ir import DEEP_RECURSION, recursion_limit

    with recursion_limit(DEEP_RECURSION):
        return _kernels(args)


def _kernels(args) -> int:
    from ..driver import read_input
    from ..ir import DiagnosticEngine, InputError, has_public_body, ir, load_module, make_context
    from ..kernels.report import collect_kernels, has_kernels, render_table
    from ..passes.annotate_cost import DEFAULT_BACKEND, DEFAULT_HARDWARE, annotate_module, not_costed_note, other_warnings

    if args.top < 0:
        raise CommandError(f"--top must be >= 0, got {args.top}")
    if args.depth is not None and args.by != "scope":
        raise CommandError("--depth applies to --by scope")
    if args.depth is not None and args.depth < 1:
        raise CommandError(f"--depth must be >= 1, got {args.depth}")
    trips = None
    if args.unknown_trip_count is not None:
        from ..passes.annotate_cost import trip_option

        if not args.unknown_trip_count.strip():
            raise CommandError("--unknown-trip-count needs a value, got an empty one")
        try:
            trips = trip_option(args.unknown_trip_count.strip())
        except InputError as err:
            raise CommandError(f"--unknown-trip-count {err}") from None
    if args.fusion == "none":
        raise CommandError("--fusion none forms no kernels; use xla-gpu, xla-tpu or iree")
    try:
        data, source = read_input(args.file)
    except InputError as err:
        raise CommandError(str(err)) from None
    ctx = make_context(allow_unregistered_dialects=True)
    diags = DiagnosticEngine(source)
    with ctx:
        try:
            module = load_module(ctx, data, source)
        except ir.MLIRError as err:
            diags.add_mlir(err.error_diagnostics)
            raise CommandError(diags.diagnostics[0].render() if diags.diagnostics else str(err)) from None
        if not has_public_body(module):
            raise CommandError(f"{source} has no public function with a body: no kernels to list")
        notes: list = []
        first_annotation = 0
        if args.hardware or args.backend or args.fusion or trips is not None or not has_kernels(module):
            warned = partition_if_needed(module, diags, notes)
            for line in warned:
                sys.stderr.write(line + "\n")
            if args.inline:
                from ..ir import inline_calls

                try:
                    inline_calls(module, drop_uncalled=True)
                except ir.MLIRError as err:
                    raise CommandError(f"inlining failed: {str(err).splitlines()[0]}") from None
            first_annotation = len(diags.diagnostics)
            annotate_module(
                module,
                diags,
                hardware=args.hardware or DEFAULT_HARDWARE,
                backend=args.backend or DEFAULT_BACKEND,
                fusion=args.fusion or "",
                unknown_trip_count=trips,
                trip_count_option="--unknown-trip-count N",
            )
            if not has_kernels(module):
                from ..predict import _compiled

                if _compiled(module):  # XLA's own kernels, which fusion none costs as ops
                    raise CommandError("no kernels were formed: the module is compiled by XLA (mhlo.fusion) and fusion "
                                       "none costs its kernels as ops; give --fusion xla-gpu to list XLA's kernels")
                raise CommandError("no kernels were formed (is the hardware a CPU? give --fusion xla-gpu)")
        from ..engine import SUMMARY_ATTR
        from ..ir import attr_number

        try:
            # kernels that never run (functions nobody calls, a branch the policy does
            # not take) are not the program's: left out, counted
            every = collect_kernels(module)
            rows = [r for r in every if r.executions]
            not_run = len(every) - len(rows)
            summary = ir.DictAttr(module.attributes[SUMMARY_ATTR])
            total_ns = ir.FloatAttr(summary["total_time_ns"]).value
            hw = ir.StringAttr(summary["hardware"]).value
            backend = ir.StringAttr(summary["backend"]).value
            count = int(attr_number(summary["kernel_count"]))
            kbytes = int(attr_number(summary["kernel_bytes"]))
            fusion = ir.StringAttr(summary["fusion"]).value
        except (ValueError, TypeError, KeyError, IndexError) as err:
            # an input annotated by hand or by another tool: its costmodel.* attributes
            # are not what annotate-cost writes
            raise CommandError(
                f"{source}: its costmodel.summary / costmodel.kernel_cost attributes are malformed ({err}); "
                "give --hardware to annotate it again"
            ) from None
        uncosted = not_costed_note(module, diags)
        for line in other_warnings(diags, first_annotation):  # annotate-cost's, as stablehlo-opt prints them
            sys.stderr.write(line + "\n")
        for note in notes:
            sys.stderr.write(f"note: {note}\n")
    scopes = None
    if args.by == "scope":
        from ..kernels.report import UNNAMED_SCOPE, by_scope

        if rows and not any(r.name for r in rows):
            raise CommandError(
                f"{source}: no kernel's op carries a name, so there are no scopes; JAX writes op names with "
                "`jax.jit(f).lower(...).as_text(debug_info=True)` (or `costmodel workloads export --debug-info`)"
            )
        scopes = by_scope(rows, args.depth)
        unnamed = next((s for s in scopes if s.scope == UNNAMED_SCOPE), None)
    if args.json:
        doc = {
            "hardware": hw,
            "backend": backend,
            "fusion": fusion,
            "kernel_count": count,
            "kernel_bytes": kbytes,
            "total_time_ns": total_ns,
            "not_costed": uncosted,
            "kernels_not_run": not_run,
        }
        if scopes is not None:
            doc["scopes"] = [s.to_dict() for s in scopes]
        else:
            doc["kernels"] = [r.to_dict() for r in rows]
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    sys.stdout.write(
        f"{source}: {count} kernel launches, {kbytes / 1e9:.3f} GB moved, {total_ns / 1e6:.3f} ms "
        f"on {hw} ({backend}, fusion {fusion})\n\n"
    )
    if scopes is not None:
        from ..kernels.report import render_scopes

        if args.top:
            sys.stdout.write(render_scopes(scopes, args.top, total_ns) + "\n")
        if unnamed is not None:
            sys.stdout.write(f"note: {unnamed.kernels} kernel(s) with no op name are under {UNNAMED_SCOPE}\n")
    elif args.top:
        sys.stdout.write(render_table(rows, args.top, total_ns) + "\n")
    if uncosted:
        sys.stdout.write(f"note: {uncosted}\n")
    return 0
