"""The built-in simulator on hand-built traces with hand-computed timelines."""

from __future__ import annotations

import json
import os
import re

import pytest

from costmodel.chakra import et_def_pb2 as pb
from costmodel.chakra.io import encode_trace, make_metadata
from costmodel.simulate import SimulationError, simulate_dir

US = 1000


def comp(i, us, deps=(), ctrl=()):
    n = pb.Node(id=i, name=f"c{i}", type=pb.COMP_NODE, duration_micros=us)
    n.data_deps.extend(deps)
    n.ctrl_deps.extend(ctrl)
    n.attr.add(name="is_cpu_op", bool_val=False)
    return n


def coll(i, size, deps=(), pg=None, ctype=pb.ALL_REDUCE, ctrl=()):
    n = pb.Node(id=i, name=f"ar{i}", type=pb.COMM_COLL_NODE)
    n.data_deps.extend(deps)
    n.ctrl_deps.extend(ctrl)
    n.attr.add(name="is_cpu_op", bool_val=False)
    n.attr.add(name="comm_type", int64_val=ctype)
    n.attr.add(name="comm_size", int64_val=size)
    if pg is not None:
        n.attr.add(name="pg_name", string_val=pg)
    return n


def p2p(i, kind, src, dst, size, tag, deps=()):
    n = pb.Node(id=i, name=f"{kind}{i}", type=pb.COMM_SEND_NODE if kind == "send" else pb.COMM_RECV_NODE)
    n.data_deps.extend(deps)
    for k, v in (("comm_src", src), ("comm_dst", dst), ("comm_size", size), ("comm_tag", tag)):
        n.attr.add(name=k, int64_val=v)
    n.attr.add(name="is_cpu_op", bool_val=False)
    return n


def make_dir(path, ranks, groups=None):
    os.makedirs(path, exist_ok=True)
    for r, nodes in enumerate(ranks):
        with open(os.path.join(path, f"trace.{r}.et"), "wb") as fh:
            fh.write(encode_trace(make_metadata(), nodes))
    with open(os.path.join(path, "comm_group.json"), "w") as fh:
        json.dump(groups or {}, fh)
    return str(path)


def fixed(t_coll=5 * US, t_send=500):
    calls = []

    def comm_time(kind, size, group):
        calls.append((kind, size, tuple(group)))
        return t_send if kind == "send" else t_coll

    comm_time.calls = calls
    return comm_time


def test_worked_example_of_the_spec(tmp_path):
    """2 ranks, Ring 50 GB/s 500 ns; COMP 1000 us then a 1 MiB all-reduce depending on it:
    ASTRA-sim measures 1,024,620 cycles per rank, 24,620 of them exposed communication."""
    from costmodel.systems import GIB_PER_GB, parse_system

    system = parse_system(
        {
            "name": "worked",
            "description": "spec worked example",
            "hardware": "a100-40gb",
            "network": [{"topology": "Ring", "npus_count": 2, "bandwidth_GBps": 50 / GIB_PER_GB, "latency_ns": 500}],
            "astra_sim": {
                "scheduling_policy": "LIFO",
                "collective_optimization": "localBWAware",
                "endpoint_delay_ns": 10,
                "active_chunks_per_dimension": 1,
                "preferred_dataset_splits": 4,
                "local_mem_bw_GBps": 1600,
                "peak_perf_TFLOPS": 100,
            },
        },
        "worked",
    )
    rank = [comp(0, 1000), coll(1, 1 << 20, deps=[0])]
    d = make_dir(tmp_path / "w", [rank, rank])
    rep = simulate_dir(d, system=system)
    assert rep.step_time_ns == 1_024_620
    for r in rep.ranks:
        assert (r.finish_ns, r.compute_ns, r.exposed_comm_ns) == (1_024_620, 1_000_000, 24_620)


def test_overlap_hidden_and_exposed(tmp_path):
    # c0 (10us) -> ar1; c2 (10us) runs during ar1; c3 needs ar1 and c2.
    def graph():
        return [comp(0, 10), coll(1, 64, deps=[0]), comp(2, 10, ctrl=[0]), comp(3, 1, deps=[1, 2])]

    d = make_dir(tmp_path / "a", [graph(), graph()])
    rep = simulate_dir(d, comm_time=fixed(5 * US))
    assert rep.step_time_ns == 21 * US  # hidden: ar1 10..15 us under c2 10..20 us
    assert rep.ranks[0].exposed_comm_ns == 0
    rep = simulate_dir(d, comm_time=fixed(15 * US))
    assert rep.step_time_ns == 26 * US  # ar1 10..25 us, c3 25..26 us
    assert rep.ranks[0].compute_ns == 21 * US
    assert rep.ranks[0].exposed_comm_ns == 5 * US


def test_dependency_chain_and_issue_order(tmp_path):
    # two independent COMPs: the smaller id goes first (ASTRA-sim scans ready ids in order);
    # a chain waits for its predecessor; a 0 us node takes 1 ns.
    nodes = [comp(5, 2), comp(3, 1), comp(7, 4, deps=[5]), comp(9, 0, deps=[7])]
    d = make_dir(tmp_path / "c", [nodes])
    rep = simulate_dir(d, comm_time=fixed(), record=True)
    spans = {name: (s, e) for _r, track, name, s, e, _a in rep.records if track == "compute"}
    assert spans == {"c3": (0, 1000), "c5": (1000, 3000), "c7": (3000, 7000), "c9": (7000, 7001)}
    assert rep.step_time_ns == 7001


def test_grouped_collectives_wait_for_their_members(tmp_path):
    groups = {"1": [0, 1], "2": [2, 3]}
    work = [1, 3, 2, 5]
    ranks = [[comp(0, work[r]), coll(1, 256, deps=[0], pg="1" if r < 2 else "2")] for r in range(4)]
    d = make_dir(tmp_path / "g", ranks, groups)
    ct = fixed(1 * US)
    rep = simulate_dir(d, comm_time=ct)
    assert [r.finish_ns for r in rep.ranks] == [4 * US, 4 * US, 6 * US, 6 * US]
    assert [r.exposed_comm_ns for r in rep.ranks] == [3 * US, 1 * US, 4 * US, 1 * US]
    assert rep.step_time_ns == 6 * US
    assert set(ct.calls) == {("all_reduce", 256, (0, 1)), ("all_reduce", 256, (2, 3))}
    assert rep.collectives == 2


def test_collectives_match_in_issue_order(tmp_path):
    # two all-reduces in a row on the comm stream; the second starts when both ranks issued it
    def graph(us):
        return [comp(0, us), coll(1, 8, deps=[0]), comp(2, us, ctrl=[0]), coll(3, 16, deps=[2], ctrl=[1])]

    d = make_dir(tmp_path / "o", [graph(1), graph(4)])
    rep = simulate_dir(d, comm_time=fixed(2 * US))
    # rank1: c0 0..4, ar1 4..6 (rank0 waits from 1), c2 4..8, ar3 8..10
    assert [r.finish_ns for r in rep.ranks] == [10 * US, 10 * US]


def test_send_recv(tmp_path):
    r0 = [comp(0, 2), p2p(1, "send", 0, 1, 100, 7, deps=[0])]
    r1 = [p2p(0, "recv", 0, 1, 100, 7), comp(1, 1, deps=[0])]
    d = make_dir(tmp_path / "p", [r0, r1])
    ct = fixed(t_send=500)
    rep = simulate_dir(d, comm_time=ct, record=True)
    assert rep.ranks[0].finish_ns == 2500
    assert rep.ranks[1].finish_ns == 3500  # recv completes at 2500, then c1
    assert ("send", 100, (0, 1)) in ct.calls
    assert rep.p2p_messages == 1
    recv = [x for x in rep.records if x[1] == "recv"]
    assert recv and recv[0][3:5] == (0, 2500)


def test_mismatched_collectives_deadlock(tmp_path):
    d = make_dir(tmp_path / "x", [[comp(0, 1), coll(1, 8, deps=[0])], [comp(0, 1)]])
    with pytest.raises(SimulationError, match="deadlock: rank 0"):
        simulate_dir(d, comm_time=fixed())


def test_bad_dependency(tmp_path):
    d = make_dir(tmp_path / "b", [[comp(0, 1, deps=[42])]])
    with pytest.raises(SimulationError, match="node 42"):
        simulate_dir(d, comm_time=fixed())


def test_cli_json_and_perfetto_trace(tmp_path, capsys):
    from costmodel.cli import main

    def graph():
        return [comp(0, 10), coll(1, 64, deps=[0]), comp(2, 10, ctrl=[0]), comp(3, 1, deps=[1, 2])]

    d = make_dir(tmp_path / "t", [graph(), graph()])
    # the CLI needs a system: point the manifest at a preset
    with open(os.path.join(d, "manifest.json"), "w") as fh:
        json.dump({"prefix": "trace", "ranks": 2, "system": {"name": "a100-40gb-x4"}}, fh)
    trace = tmp_path / "trace.json"
    assert main(["simulate", d, "--json", "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_ranks"] == 2 and out["compute_time_ns"] == 21 * US
    doc = json.loads(trace.read_text())
    names = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {(0, "rank 0"), (1, "rank 1")}
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in spans} == {1, 2}  # compute and communication tracks
    assert any(e["name"] == "c0" and e["ts"] == 0 and e["dur"] == 10.0 for e in spans)
    assert main(["simulate", str(tmp_path / "nope")]) == 1


def test_system_with_fewer_npus_than_ranks_is_one_line(tmp_path, capsys):
    """`costmodel simulate DIR --system S` with S smaller than the trace: name both counts
    (it used to end in a CommModelError traceback from the comm model)."""
    from costmodel.cli import main
    from costmodel.systems import load_system

    d = make_dir(tmp_path / "t", [[comp(0, 10), coll(1, 1 << 20, deps=[0])] for _ in range(8)])
    with open(os.path.join(d, "manifest.json"), "w") as fh:
        json.dump({"prefix": "trace", "ranks": 8, "system": {"name": "dgx-h100"}}, fh)
    assert main(["simulate", d]) == 0  # the trace's own 8-GPU system
    capsys.readouterr()
    assert main(["simulate", d, "--system", "a100-40gb-x4"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"costmodel: error: {d}: the trace has 8 ranks but system 'a100-40gb-x4' has only 4 NPUs; "
        "pick a system with at least 8 (see `costmodel systems list`)\n"
    )
    with pytest.raises(SimulationError, match="the trace has 8 ranks but system 'a100-40gb-x4' has only 4 NPUs"):
        simulate_dir(d, system=load_system("a100-40gb-x4"))


def test_bad_system_file_for_simulate_is_one_line(tmp_path, capsys):
    from costmodel.cli import main

    d = make_dir(tmp_path / "t", [[comp(0, 10)] for _ in range(2)])
    bad = tmp_path / "sys.json"
    bad.write_text('{"name": "x", "description": "x", "hardware": "h100-sxm", "network": '
                   '[{"topology": "Ring", "npus_count": 2, "bandwidth_GBps": Infinity, "latency_ns": 1}]}')
    assert main(["simulate", d, "--system", str(bad)]) == 1
    assert capsys.readouterr().err == (
        f"costmodel: error: {bad}: 'network[0].bandwidth_GBps' must be a finite number, got Infinity\n"
    )


def test_in_memory_graphs_simulate_like_the_written_trace(tmp_path):
    """simulate_graphs (costmodel predict without --trace) == simulate_dir of the same export."""
    from costmodel.chakra.export import export_module
    from costmodel.ir import DiagnosticEngine, load_module, make_context
    from costmodel.passes.annotate_cost import annotate_module
    from costmodel.simulate import simulate_dir, simulate_graphs
    from costmodel.systems import load_system

    src = os.path.join(os.path.dirname(__file__), "..", "examples", "transformer_train_2x4.mlir")
    from costmodel.passes import PassSession, get_pass, parse_options

    ctx = make_context()
    with ctx:
        module = load_module(ctx, open(src).read(), "tf")
        session = PassSession(DiagnosticEngine("tf"))
        prop = get_pass("propagate-shardings")
        prop.run(module, parse_options(prop, ""), session)
        annotate_module(module, session.diagnostics, hardware="h100-sxm", backend="calibrated")
        system = load_system("dgx-h100")
        written = export_module(module, system, str(tmp_path / "t"))
        in_memory = export_module(module, system, str(tmp_path / "u"), write=False)
    a = simulate_dir(written.directory, system=system)
    b = simulate_graphs(in_memory.graphs.nodes, in_memory.graphs.comm_groups, system)
    assert not (tmp_path / "u").exists()
    assert (a.step_time_ns, a.compute_time_ns, a.exposed_comm_ns) == (b.step_time_ns, b.compute_time_ns, b.exposed_comm_ns)
    assert a.step_time_ns > 0


def test_equal_time_events_are_handled_in_node_id_order(tmp_path):
    """ar0 (comm) and c1 (compute) both end at 2 us; c1 was scheduled first. Their
    children ar3 (after ar0) and ar2 (after c1) compete for the comm stream: events at
    one time go in (time, rank, node id) order, so ar0's completion is seen first and
    ar3 takes the free stream before ar2 is ready."""
    nodes = [coll(0, 8), comp(1, 2), coll(2, 8, deps=[1]), coll(3, 8, deps=[0])]
    d = make_dir(tmp_path / "t", [nodes])
    rep = simulate_dir(d, comm_time=fixed(2 * US), record=True)
    spans = {name: (s, e) for _r, track, name, s, e, _a in rep.records if track == "comm"}
    assert spans == {"ar0": (0, 2 * US), "ar3": (2 * US, 4 * US), "ar2": (4 * US, 6 * US)}


def test_one_rank_stands_for_symmetric_ranks():
    """simulate(replicas=N) on one graph == simulate on N copies of it, collectives of
    two groups of 2 counted once per group; a collective that takes no time cannot be
    stood for (its completion comes at another rank's turn): _NotSymmetric."""
    from costmodel.simulate import _NotSymmetric, convert_nodes, simulate

    def graph(pg):
        return [comp(0, 3), coll(1, 64, deps=[0], pg=pg), comp(2, 1, ctrl=[0]), comp(3, 2, deps=[1, 2]),
                coll(4, 32, deps=[3], ctrl=[1])]

    groups = {"1": [0, 1], "2": [2, 3]}
    ranks = [convert_nodes(graph("1" if r < 2 else "2"), r, 4, groups) for r in range(4)]
    full = simulate(ranks, fixed(2 * US))
    one = simulate(ranks[:1], fixed(2 * US), replicas=4)
    assert one == full
    assert full.collectives == 2 + 1  # ar1 in each pair, ar4 of everyone
    assert [r.rank for r in one.ranks] == [0, 1, 2, 3]
    with pytest.raises(_NotSymmetric):
        simulate(ranks[:1], fixed(0), replicas=4)
    with pytest.raises(ValueError):
        simulate(ranks[:2], fixed(), replicas=4)


def test_symmetric_graphs_fall_back_to_every_rank_when_a_collective_takes_no_time(monkeypatch):
    """simulate_graphs(symmetric=True) with a zero-time collective simulates every rank:
    the same report as symmetric=False."""
    from costmodel import simulate as sim
    from costmodel.systems import load_system

    monkeypatch.setattr(sim, "comm_time_for_system", lambda system: fixed(0))
    nodes = [comp(0, 3), coll(1, 64, deps=[0]), comp(2, 1, deps=[1])]
    system = load_system("a100-40gb-x4")
    one = sim.simulate_graphs([nodes] * 4, {}, system, symmetric=True)
    assert one == sim.simulate_graphs([nodes] * 4, {}, system)
    assert one.step_time_ns == 4 * US


@pytest.mark.parametrize("manifest, message", [
    ({"prefix": "trace", "ranks": 10**9}, "manifest.json says 1000000000 ranks but the directory has 2 trace.<rank>.et files"),
    ({"prefix": "trace", "ranks": "8"}, "'ranks' a positive integer"),
    (["not", "an", "object"], "manifest.json: not a JSON object"),
])
def test_a_hostile_manifest_is_one_error(tmp_path, manifest, message):
    """A manifest naming 10^9 ranks ran out of memory before reading a file; a 'ranks'
    that is no integer or a manifest that is no object were tracebacks."""
    d = make_dir(tmp_path / "t", [[comp(0, 5)], [comp(0, 5)]])
    with open(os.path.join(d, "manifest.json"), "w") as fh:
        json.dump(manifest, fh)
    with pytest.raises(SimulationError, match=re.escape(message)):
        simulate_dir(d, comm_time=fixed())


def test_a_manifest_system_that_is_no_object_falls_back(tmp_path):
    """manifest 'system' given as a string: the system comes from elsewhere or the error
    says none is usable (it was an AttributeError)."""
    from costmodel.simulate import TraceDir, system_for_dir

    d = make_dir(tmp_path / "t", [[comp(0, 5)], [comp(0, 5)]])
    trace = TraceDir.__new__(TraceDir)
    trace.manifest, trace.directory = {"system": "dgx-h100"}, d
    with pytest.raises(SimulationError, match="cannot tell which system the trace is for"):
        system_for_dir(trace)


def test_perfetto_compute_slices_say_what_they_run(tmp_path, capsys):
    """Audit find: a compute slice of the Perfetto trace was a bare name ("comp.1"); it now
    carries its Chakra node's num_ops (flops), tensor_size (bytes), ops and kernels."""
    from costmodel import driver
    from costmodel.cli import main

    src = tmp_path / "m.mlir"
    src.write_text(
        "module attributes {mhlo.num_replicas = 2 : i32} {\n"
        "  func.func @main(%x: tensor<256x256xf32>, %w: tensor<256x256xf32>) -> tensor<256x256xf32> {\n"
        "    %d = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>\n"
        "    %e = stablehlo.exponential %d : tensor<256x256xf32>\n"
        "    return %e : tensor<256x256xf32>\n  }\n}\n"
    )
    d = tmp_path / "chakra"
    assert driver.main([str(src), "--annotate-cost=hardware=a100-40gb",
                        f"--extract-collectives=system=a100-40gb-x4 chakra-dir={d}", "-o", str(tmp_path / "o.mlir")]) == 0
    capsys.readouterr()
    trace = tmp_path / "trace.json"
    assert main(["simulate", str(d), "--system", "a100-40gb-x4", "--trace", str(trace)]) == 0
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
    assert spans and all({"num_ops", "tensor_size", "ops", "kernels"} <= set(e["args"]) for e in spans)
    rank0 = [e for e in spans if e["pid"] == 0]
    assert sum(e["args"]["num_ops"] for e in rank0) >= 2 * 256 * 256 * 256  # the dot: one FMA = 2 flops
    assert sum(e["args"]["ops"] for e in rank0) == 2 and sum(e["args"]["kernels"] for e in rank0) >= 1
