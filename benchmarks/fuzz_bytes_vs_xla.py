#!/usr/bin/env python3
"""Our bytes against XLA's `bytes accessed` on the fuzzer's random programs (a benchmark,
not a test: docs/testing.md says why bytes are not a fuzz property).

    python benchmarks/fuzz_bytes_vs_xla.py [--examples 400] [--kinds unary,broadcast_in_dim]

For each random program of tests/fuzz_programs.py without a loop, call or conditional
(XLA counts those once, we count what runs), it compares `fusion=none`'s total
bytes_read + bytes_written, less the bytes we count for constants (XLA: 0,
docs/cost-rules.md) and plus the 8 bytes per element of the result tuple XLA's module
returns, with XLA HloCostAnalysis's `bytes accessed` of the unoptimized module. It prints
how many agree, and the op kinds of the programs that do not, with one example each.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def xla_bytes(text: str) -> int:
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    comp = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False)
    c = _jax.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), comp.as_hlo_module())
    return int(c.get("bytes accessed", 0))


def our_bytes(text: str) -> int:
    from conftest import run_annotate

    a = run_annotate(text, fusion="none", branch="xla")
    constants = sum(a.cost(op).get("bytes_written", 0) for op in a.ops("stablehlo.constant"))
    returned = len(list(list(a.ops("func.return"))[-1].operands))
    return a.totals.bytes_read + a.totals.bytes_written - constants + (8 * returned if returned > 1 else 0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=400, help="programs drawn (default 400; seeded)")
    ap.add_argument("--kinds", default="", help="comma-separated op kinds (default: all of fuzz_programs.OP_KINDS)")
    args = ap.parse_args(argv)
    from hypothesis import HealthCheck, given, settings

    from fuzz_programs import OP_KINDS, programs

    kinds = tuple(k for k in args.kinds.split(",") if k) or OP_KINDS
    counts, shown = collections.Counter(), {}

    @settings(max_examples=args.examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(programs(kinds=kinds))
    def run(p):
        if p.op_kinds & {"while", "case", "call"}:
            return
        theirs, ours = xla_bytes(p.text), our_bytes(p.text)
        if theirs == ours:
            counts["agree"] += 1
            return
        counts["differ"] += 1
        key = ", ".join(sorted(p.op_kinds))
        counts[key] += 1
        if key not in shown or len(p.text) < len(shown[key][2]):
            shown[key] = (theirs, ours, p.text)

    run()
    total = counts["agree"] + counts["differ"]
    print(f"{total} programs without loops, calls or conditionals: {counts['agree']} agree with XLA's bytes "
          f"accessed, {counts['differ']} differ")
    for key, (theirs, ours, text) in sorted(shown.items(), key=lambda kv: -counts[kv[0]])[:8]:
        print(f"\n{counts[key]} x [{key}]: XLA {theirs} B, ours {ours} B; shortest:\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
