"""Differential fuzzing of the communication path: random per-device programs with
collectives (tests/fuzz_programs.py, `collective_programs`) through annotate-cost ->
extract-collectives -> the Chakra trace -> `chakra check` -> the built-in simulator.

For every drawn program (N = 2, 4, 8 or 16 partitions, a system preset with at least N
NPUs):
1. `stablehlo-opt FILE --annotate-cost --extract-collectives="system=S chakra-dir=D"`
   exits 0 and reports no error; every collective op carries `costmodel.collective`
   with its group size, finite non-negative time and byte counts;
2. the summary's `collective_count` is the sum over the collective ops of their
   `executions` (a loop's trip count included);
3. `chakra check D` finds no violation, reads one file per NPU of the system (ranks
   beyond the program's N idle), and says as many collectives per rank as the program
   runs (collective_permutes aside: they are a send and a receive per source-target
   pair, as many messages as check counts);
4. the simulator runs the trace to completion (a deadlock or a mismatched collective
   fails it): its step time is finite, at least the compute time, and its collectives
   per rank equal check's;
5. with `granularity=op` (a node per kernel) the trace checks, with the same collectives
   and messages, and the same compute time (within a nanosecond per node);
6. with `--combine-collectives` first, the trace checks and runs, with the same
   all-reduced bytes in no more all-reduces;
7. the same command twice writes byte-identical trace files.

CI runs 150 seeded examples; COSTMODEL_FUZZ_EXAMPLES=N runs N random
ones (docs/testing.md).
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_programs import Program, collective_programs
from test_fuzz import _dict

_LONG = int(os.environ.get("COSTMODEL_FUZZ_EXAMPLES", "0") or 0)
FUZZ_SETTINGS = settings(
    max_examples=_LONG or 150,
    deadline=None,
    derandomize=not _LONG,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    print_blob=True,
)


def _systems_for(n: int) -> list[str]:
    from costmodel.systems import list_systems, load_system

    return [name for name in list_systems() if load_system(name).num_npus >= n]


@st.composite
def _cases(draw):
    n = draw(st.sampled_from([2, 4, 8, 16]))
    program = draw(collective_programs(n))
    return program, n, draw(st.sampled_from(_systems_for(n)))


def _run(program: Program, system: str, out_dir, extra=(), options="") -> tuple[int, str, str]:
    """The pipeline in-process: (rc, printed module, stderr). `extra`: passes run between
    annotate-cost and extract-collectives; `options`: more extract-collectives options."""
    import contextlib
    import io

    from costmodel import driver

    src = out_dir / "m.mlir"
    src.write_text(program.text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = driver.main([str(src), "--annotate-cost", *extra,
                          f"--extract-collectives=system={system} chakra-dir={out_dir / 'trace'}{options}",
                          "-o", str(out_dir / "out.mlir")])
    printed = (out_dir / "out.mlir").read_text() if rc == 0 else ""
    return rc, printed, err.getvalue()


def _check(program: Program, n: int, system: str, tmp_path) -> None:
    from costmodel.chakra.check import check_dir
    from costmodel.ir import ir, load_module, make_context
    from costmodel.simulate import simulate_dir
    from costmodel.systems import load_system

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    rc, printed, err = _run(program, system, first)
    assert rc == 0 and "error" not in err, err
    # 1. every collective costed
    ctx = make_context()
    module = load_module(ctx, printed, "out.mlir")
    executions = collectives = messages = 0
    with ctx:
        summary = _dict(module.operation.attributes["costmodel.summary"])
        stack = [module.operation]
        while stack:
            op = stack.pop()
            for region in op.regions:
                for block in region.blocks:
                    stack.extend(o.operation for o in block.operations)
            name = op.name.removeprefix("stablehlo.")
            if name not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"):
                continue
            assert "costmodel.collective" in op.attributes, (op.name, err)
            c = _dict(op.attributes["costmodel.collective"])
            for key in ("bytes_in", "bytes_out", "comm_bytes", "group_size", "num_groups", "executions"):
                assert isinstance(c[key], int) and c[key] >= 0, (op.name, key, c)
            assert math.isfinite(c["time_ns"]) and c["time_ns"] >= 0, c
            if name == "collective_permute":  # point to point: a send and a receive per pair
                pairs = ir.DenseIntElementsAttr(op.attributes["source_target_pairs"]).type.shape[0]
                messages += c["executions"] * pairs
            else:
                groups = ir.DenseIntElementsAttr(op.attributes["replica_groups"])
                assert c["group_size"] == groups.type.shape[1], c
                collectives += c["executions"]
            executions += c["executions"]
    # 2. the summary counts every execution
    assert summary["collective_count"] == executions, (summary, executions)
    # 3. the trace holds what the summary says
    report = check_dir(str(first / "trace"))
    assert report.ok, report.violations
    assert report.ranks == load_system(system).num_npus  # a file per NPU (ASTRA-sim's npus_count), idle ones too
    assert report.collectives_per_rank == collectives, (report.collectives_per_rank, collectives)
    assert report.messages == messages, (report.messages, messages)
    # 4. it runs to completion
    sim = simulate_dir(str(first / "trace"))
    assert math.isfinite(sim.step_time_ns) and sim.step_time_ns >= sim.compute_time_ns >= 0
    assert sim.collectives_per_rank == report.collectives_per_rank
    # 5. op granularity: one node per kernel, the same compute and collectives
    third = tmp_path / "c"
    third.mkdir()
    rc3, _, err3 = _run(program, system, third, options=" granularity=op")
    assert rc3 == 0, err3
    op_report = check_dir(str(third / "trace"))
    assert op_report.ok, op_report.violations
    assert (op_report.collectives_per_rank, op_report.messages) == (report.collectives_per_rank, report.messages)
    op_sim = simulate_dir(str(third / "trace"))
    assert abs(op_sim.compute_time_ns - sim.compute_time_ns) <= op_report.nodes, (op_sim.compute_time_ns, sim.compute_time_ns)
    # 6. the all-reduce combiner keeps the all-reduced bytes, and its trace runs
    fourth = tmp_path / "d"
    fourth.mkdir()
    rc4, printed4, err4 = _run(program, system, fourth, extra=["--combine-collectives"])
    assert rc4 == 0, err4
    combined = check_dir(str(fourth / "trace"))
    assert combined.ok, combined.violations
    simulate_dir(str(fourth / "trace"))
    with ctx:
        summary4 = ir.DictAttr(load_module(ctx, printed4, "out.mlir").operation.attributes["costmodel.summary"])
        before = ir.DictAttr(module.operation.attributes["costmodel.summary"])
        kinds = lambda d: {na.name: _dict(na.attr) for na in ir.DictAttr(d["collectives"])} if "collectives" in d else {}
        k1, k4 = kinds(before), kinds(summary4)
    assert k1.get("all_reduce", {}).get("bytes") == k4.get("all_reduce", {}).get("bytes"), (k1, k4)
    assert k4.get("all_reduce", {}).get("count", 0) <= k1.get("all_reduce", {}).get("count", 0)
    # 7. deterministic
    rc2, printed2, err2 = _run(program, system, second)
    assert rc2 == 0 and printed2 == printed, err2
    names = sorted(os.listdir(first / "trace"))
    assert names == sorted(os.listdir(second / "trace"))
    for f in names:
        if f.endswith(".et"):
            assert (first / "trace" / f).read_bytes() == (second / "trace" / f).read_bytes(), f


@FUZZ_SETTINGS
@given(_cases())
def test_random_collective_program(tmp_path_factory, case):
    program, n, system = case
    _check(program, n, system, tmp_path_factory.mktemp("fuzz"))


def test_generator_covers_every_collective_kind_and_mode():
    """Every collective kind is drawn, in both modes (flattened ids over partitions, and
    cross-replica), so none is silently dead: 300 seeded draws cover every pair."""
    from fuzz_programs import COLLECTIVE_KINDS

    seen = set()

    @settings(database=None, derandomize=True, max_examples=300, suppress_health_check=list(HealthCheck))
    @given(collective_programs(4))
    def draw(p):
        mode = "replicas" if "mhlo.num_partitions = 1 :" in p.text else "partitions"
        seen.update((kind, mode) for kind in p.op_kinds if kind in COLLECTIVE_KINDS)

    draw()
    assert seen == {(k, m) for k in COLLECTIVE_KINDS for m in ("replicas", "partitions")}
