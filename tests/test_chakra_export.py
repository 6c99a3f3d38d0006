"""Chakra export: graph structure, per-rank files, the trace directory, and the checker
over real workloads and sharded programs."""

from __future__ import annotations

import json
import math
import os

import pytest

from costmodel.chakra import et_def_pb2 as pb
from costmodel.chakra.check import check_dir
from costmodel.chakra.export import export_module, resolve_output_dir, run_from_pass
from costmodel.chakra.io import attr_int, attr_value, read_trace
from costmodel.ir import InputError
from costmodel.simulate import simulate_dir

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(os.path.dirname(HERE), "..", "shared", "workloads")
DATA = os.path.join(HERE, "data")

AR_BODY = """({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    })"""

OVERLAP = f"""
module attributes {{mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32}} {{
  func.func @main(%x: tensor<512x512xf32>, %w: tensor<512x512xf32>) -> tensor<512x512xf32> {{
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
    %1 = "stablehlo.all_reduce"(%0) <{{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}}> {AR_BODY} : (tensor<512x512xf32>) -> tensor<512x512xf32>
    %2 = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0] : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
    %3 = stablehlo.add %2, %1 : tensor<512x512xf32>
    %4 = stablehlo.multiply %3, %3 : tensor<512x512xf32>
    return %4 : tensor<512x512xf32>
  }}
}}
"""

LOOP = f"""
module attributes {{mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32}} {{
  func.func @main(%x: tensor<4096xf32>) -> tensor<4096xf32> {{
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<4096xf32>
     cond {{
      %c3 = stablehlo.constant dense<3> : tensor<i32>
      %p = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      %m = stablehlo.multiply %v, %v : tensor<4096xf32>
      %a = "stablehlo.all_reduce"(%m) <{{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}}> {AR_BODY} : (tensor<4096xf32>) -> tensor<4096xf32>
      stablehlo.return %n, %a : tensor<i32>, tensor<4096xf32>
    }}
    %s:2 = stablehlo.while(%i = %c0, %v = %r#1) : tensor<i32>, tensor<4096xf32>
     cond {{
      %c5 = stablehlo.constant dense<5> : tensor<i32>
      %p = stablehlo.compare LT, %i, %c5 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      %m = stablehlo.exponential %v : tensor<4096xf32>
      stablehlo.return %n, %m : tensor<i32>, tensor<4096xf32>
    }}
    return %s#1 : tensor<4096xf32>
  }}
}}
"""

GROUPS = """
module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%x: tensor<8xf32>) -> tensor<16xf32> {
    %0 = stablehlo.exponential %x : tensor<8xf32>
    %1 = "stablehlo.all_gather"(%0) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> : (tensor<8xf32>) -> tensor<16xf32>
    %2 = "stablehlo.collective_permute"(%1) <{source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>}> : (tensor<16xf32>) -> tensor<16xf32>
    %3 = stablehlo.exponential %2 : tensor<16xf32>
    return %3 : tensor<16xf32>
  }
}
"""


def _system(name="a100-40gb-x4"):
    from costmodel.systems import load_system

    return load_system(name)


def _export(annotate, text, tmp_path, granularity="region", system="a100-40gb-x4", name="out"):
    a = annotate(text, "a100-40gb")
    res = export_module(a.module, _system(system), str(tmp_path / name), granularity=granularity)
    return a, res


def _nodes(directory, rank=0, prefix="trace"):
    meta, nodes = read_trace(os.path.join(directory, f"{prefix}.{rank}.et"))
    assert meta.version
    return nodes


def _attrs(node):
    return {a.name: a for a in node.attr}


def _summary_total(module):
    from costmodel.chakra.export import summary_total_ns

    return summary_total_ns(module)


def test_region_graph_splits_at_communication_points(annotate, tmp_path):
    a, res = _export(annotate, OVERLAP, tmp_path)
    assert sorted(os.listdir(res.directory)) == sorted(
        ["comm_group.json", "manifest.json", "network.yml", "remote_memory.json", "system.json"]
        + [f"trace.{r}.et" for r in range(4)]
    )
    nodes = _nodes(res.directory)
    kinds = [pb.NodeType.Name(n.type) for n in nodes]
    # [dot] -> AR; [independent dot]; [add, multiply] after the AR (the all-reduce's
    # reduction is the communication model's: no compute of its own)
    assert kinds == ["COMP_NODE", "COMM_COLL_NODE", "COMP_NODE", "COMP_NODE"]
    c1, ar, c2, c3 = nodes
    assert list(ar.data_deps) == [c1.id]
    assert c2.id not in ar.data_deps and ar.id not in c2.data_deps
    assert list(c2.ctrl_deps) == [c1.id]  # in-order compute stream
    assert set(c3.data_deps) == {ar.id, c2.id}
    at = _attrs(ar)
    assert attr_int(at["comm_type"]) == pb.ALL_REDUCE
    assert attr_int(at["comm_size"]) == 512 * 512 * 4
    assert "pg_name" not in at  # all ranks
    for n in (c1, c2, c3):
        ca = _attrs(n)
        assert ca["is_cpu_op"].WhichOneof("value") == "bool_val" and not ca["is_cpu_op"].bool_val
        assert attr_int(ca["num_ops"]) >= 1 and attr_int(ca["tensor_size"]) >= 1
    assert attr_int(_attrs(c1)["op_count"]) == 1
    assert attr_int(_attrs(c3)["op_count"]) == 2
    # every rank the same here; durations add up to the annotated total
    total_us = sum(n.duration_micros for n in nodes)
    assert abs(total_us * 1000 - _summary_total(a.module)) <= 500
    for r in range(1, 4):
        assert _nodes(res.directory, r) == nodes
    m = json.loads(open(os.path.join(res.directory, "manifest.json")).read())
    assert m["ranks"] == 4 and m["granularity"] == "region"
    assert m["node_counts"] == {"COMP_NODE": 12, "COMM_COLL_NODE": 4, "COMM_SEND_NODE": 0, "COMM_RECV_NODE": 0}
    assert m["astra_sim"]["args"][0] == "--workload-configuration=trace"
    assert "AstraSim_Analytical_Congestion_Unaware" in m["astra_sim"]["command"]
    assert m["predicted"]["module_total_time_ns"] == pytest.approx(_summary_total(a.module))
    assert check_dir(res.directory).violations == []


def test_op_granularity(annotate, tmp_path):
    a, res = _export(annotate, OVERLAP, tmp_path, granularity="op")
    nodes = _nodes(res.directory)
    kinds = [pb.NodeType.Name(n.type) for n in nodes]
    # dot, AR, dot, add, multiply
    assert kinds == ["COMP_NODE"] + ["COMM_COLL_NODE"] + ["COMP_NODE"] * 3
    assert abs(sum(n.duration_micros for n in nodes) * 1000 - _summary_total(a.module)) <= 500
    assert check_dir(res.directory).ok
    # same timeline as region granularity up to rounding
    region = simulate_dir(_export(annotate, OVERLAP, tmp_path, name="r")[1].directory)
    op = simulate_dir(res.directory)
    assert abs(op.step_time_ns - region.step_time_ns) <= 2000


def test_loop_with_communication_is_unrolled_and_without_folded(annotate, tmp_path):
    a, res = _export(annotate, LOOP, tmp_path)
    nodes = _nodes(res.directory)
    colls = [n for n in nodes if n.type == pb.COMM_COLL_NODE]
    assert len(colls) == 3  # trip count 3
    for prev, nxt in zip(colls, colls[1:]):
        assert prev.id in nxt.ctrl_deps or prev.id in nxt.data_deps
    m = res.manifest
    assert m["loops"]["unrolled"] == 1 and m["loops"]["folded_control_ops"] == 1
    total_us = sum(n.duration_micros for n in nodes if n.type == pb.COMP_NODE)
    assert abs(total_us * 1000 - _summary_total(a.module)) <= 500
    rep = simulate_dir(res.directory)
    assert rep.collectives == 3
    assert check_dir(res.directory).ok


def test_groups_and_permutes(annotate, tmp_path):
    a, res = _export(annotate, GROUPS, tmp_path)
    groups = json.loads(open(os.path.join(res.directory, "comm_group.json")).read())
    assert groups == {"1": [0, 1], "2": [2, 3]}
    assert "--comm-group-configuration=comm_group.json" in res.manifest["astra_sim"]["args"]
    for rank in range(4):
        nodes = _nodes(res.directory, rank)
        coll = [n for n in nodes if n.type == pb.COMM_COLL_NODE]
        assert len(coll) == 1
        at = _attrs(coll[0])
        assert attr_int(at["comm_type"]) == pb.ALL_GATHER
        assert attr_int(at["comm_size"]) == 32  # the per-rank INPUT shard
        assert attr_value(at["pg_name"]) == ("1" if rank < 2 else "2")
        send = [n for n in nodes if n.type == pb.COMM_SEND_NODE]
        recv = [n for n in nodes if n.type == pb.COMM_RECV_NODE]
        assert len(send) == len(recv) == 1
        sa, ra = _attrs(send[0]), _attrs(recv[0])
        assert (attr_int(sa["comm_src"]), attr_int(sa["comm_dst"])) == (rank, (rank + 1) % 4)
        assert (attr_int(ra["comm_src"]), attr_int(ra["comm_dst"])) == ((rank - 1) % 4, rank)
        assert attr_int(sa["comm_size"]) == 64 and attr_int(sa["comm_tag"]) == attr_int(ra["comm_tag"])
        assert send[0].id < recv[0].id  # sends first: no rank blocks its peer
        last = nodes[-1]
        assert last.type == pb.COMP_NODE and recv[0].id in last.data_deps
    assert check_dir(res.directory).ok
    rep = simulate_dir(res.directory)
    assert rep.p2p_messages == 4 and rep.collectives == 2


def test_idle_ranks_when_the_system_is_bigger(annotate, tmp_path):
    _a, res = _export(annotate, OVERLAP, tmp_path, system="dgx-h100")
    assert res.num_ranks == 8
    assert len(_nodes(res.directory, 7)) == 0 and len(_nodes(res.directory, 0)) == 4
    # the all-reduce over ranks 0..3 is a sub-group now
    assert json.loads(open(os.path.join(res.directory, "comm_group.json")).read()) == {"1": [0, 1, 2, 3]}
    assert check_dir(res.directory).ok
    assert any("idle" in w for w in res.manifest["warnings"])


def test_too_many_devices_for_the_system(annotate, tmp_path):
    text = OVERLAP.replace("mhlo.num_replicas = 4", "mhlo.num_replicas = 16").replace(
        "dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>", "dense<[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]]> : tensor<1x16xi64>"
    )
    with pytest.raises(InputError, match="16 devices"):
        _export(annotate, text, tmp_path)


def test_unannotated_module_is_refused(tmp_path):
    from costmodel.ir import load_module, make_context

    m = load_module(make_context(), OVERLAP, "x")
    with pytest.raises(InputError, match="annotate-cost"):
        export_module(m, _system(), str(tmp_path / "o"))


def test_directory_replacement_is_safe(annotate, tmp_path):
    a = annotate(OVERLAP, "a100-40gb")
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("precious")
    with pytest.raises(InputError, match="not a trace directory"):
        export_module(a.module, _system(), str(target))
    assert (target / "notes.txt").read_text() == "precious"
    out = tmp_path / "trace"
    export_module(a.module, _system(), str(out), prefix="step")
    export_module(a.module, _system(), str(out), prefix="step2")  # replaces our own directory whole
    names = os.listdir(out)
    assert "step2.0.et" in names and "step.0.et" not in names
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temp dirs left
    with pytest.raises(InputError, match="prefix"):
        export_module(a.module, _system(), str(out), prefix="a/b")


class _Session:
    def __init__(self, cwd, output_path=None):
        from costmodel.ir import DiagnosticEngine

        self.cwd = str(cwd)
        self.output_path = output_path
        self.input_path = None
        self.chunk_index = None
        self.messages = []
        self.diagnostics = DiagnosticEngine()


def test_output_directory_rules(tmp_path):
    s = _Session(tmp_path)
    assert resolve_output_dir({"chakra-dir": "x/y"}, s) == str(tmp_path / "x" / "y")
    assert resolve_output_dir({"chakra-dir": "/abs/t"}, s) == "/abs/t"
    s.output_path = "sub/model.annotated.mlir"
    assert resolve_output_dir({}, s) == str(tmp_path / "sub" / "model.annotated.chakra")
    s.output_path = None
    assert resolve_output_dir({}, s) == str(tmp_path / "chakra")
    s.chunk_index = 2
    assert resolve_output_dir({"chakra-dir": "t"}, s) == str(tmp_path / "t.2")


def test_run_from_pass_message_and_simulate(annotate, tmp_path):
    a = annotate(OVERLAP, "a100-40gb")
    s = _Session(tmp_path)
    assert run_from_pass(a.module, _system(), {"chakra": False}, s) is None
    assert not os.path.exists(tmp_path / "chakra")
    res = run_from_pass(a.module, _system(), {"chakra": True, "chakra-dir": "", "simulate": True}, s)
    assert res.directory == str(tmp_path / "chakra")
    assert s.messages[0].startswith("chakra: wrote 4 ranks") and s.messages[0].endswith("to chakra/")
    assert s.messages[1].startswith("simulate: step time")
    with pytest.raises(InputError, match="granularity"):
        run_from_pass(a.module, _system(), {"granularity": "block"}, s)


# ---------------------------------------------------------------------------
# the pipeline, real workloads and sharded programs
# ---------------------------------------------------------------------------


def _opt(args, capsys):
    from costmodel.driver import main

    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 0, err
    return err


def test_pipeline_default_directory_beside_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "m.mlir"
    src.write_text(GROUPS)
    err = _opt([str(src), "--annotate-cost", "--extract-collectives=system=a100-40gb-x4", "-o", "res/m.out.mlir"], capsys)
    assert "chakra: wrote 4 ranks" in err and "res/m.out.chakra/" in err
    assert check_dir(str(tmp_path / "res" / "m.out.chakra")).ok


WORKLOADS = sorted(f for f in os.listdir(SHARED) if f.endswith(".mlir")) if os.path.isdir(SHARED) else []


@pytest.mark.parametrize("name", WORKLOADS)
def test_workloads_export_check_simulate(name, annotate, tmp_path):
    a = annotate(open(os.path.join(SHARED, name)).read(), "a100-40gb")
    res = export_module(a.module, _system(), str(tmp_path / "t"))
    report = check_dir(res.directory)
    assert report.violations == []
    total = _summary_total(a.module)
    sim = simulate_dir(res.directory)
    busy = [r for r in sim.ranks if r.nodes]
    for r, rr in enumerate(busy):
        nodes = _nodes(res.directory, rr.rank)
        us = sum(n.duration_micros for n in nodes if n.type == pb.COMP_NODE)
        assert abs(us * 1000 - total) <= 1000  # per-rank durations equal the annotated total
        zero = sum(1 for n in nodes if n.type == pb.COMP_NODE and n.duration_micros == 0)
        assert rr.compute_ns == us * 1000 + zero  # simulated compute = the durations (0 us -> 1 ns)
    if name.startswith("resnet_50_train"):
        assert res.manifest["node_counts"]["COMM_COLL_NODE"] == 4 * 375
        assert sim.collectives == 375
        assert sim.step_time_ns > sim.compute_time_ns


SHARDED = [
    ("sharded/dp_mlp.mlir", True),
    ("sharded/fsdp_mlp.mlir", True),
    ("sharded/transformer_dp_tp.mlir", True),
    ("sharded/reshard_permute.mlir", True),
    ("sharded/reshard_all_to_all.mlir", True),
    ("sharded/shard_map.mlir", True),
    ("collectives/shard_map_collectives.mlir", False),
    ("collectives/shard_map_loop_call.mlir", False),
]


@pytest.mark.parametrize("path,propagate", SHARDED, ids=[p for p, _ in SHARDED])
def test_sharded_programs_on_8_devices(path, propagate, tmp_path, capsys):
    src = os.path.join(DATA, path)
    out = tmp_path / "t"
    args = [src] + (["--propagate-shardings"] if propagate else []) + [
        "--annotate-cost=hardware=h100-sxm",
        f"--export-chakra=system=dgx-h100 chakra-dir={out}",
        "-o",
        str(tmp_path / "o.mlir"),
    ]
    _opt(args, capsys)
    report = check_dir(str(out))
    assert report.violations == []
    assert report.ranks == 8
    assert report.collectives + report.messages > 0
    sim = simulate_dir(str(out))
    assert sim.step_time_ns > 0


def test_a_global_program_with_shardy_collectives_is_not_traced(tmp_path, capsys):
    """Shardy's collectives on global shapes (propagate-shardings per-device=false): a trace
    would run every device's work on every rank, so it is refused with the way out."""
    from costmodel import driver

    out = tmp_path / "t"
    rc = driver.main([os.path.join(DATA, "collectives", "sdy_collectives.mlir"), "--annotate-cost=hardware=h100-sxm",
                      f"--export-chakra=system=dgx-h100 chakra-dir={out}", "-o", str(tmp_path / "o.mlir")])
    err = capsys.readouterr().err
    assert rc == 1 and "its shapes are global" in err and "per-device=true" in err
    assert not out.exists() and not (tmp_path / "o.mlir").exists()


def test_one_collective_count_with_idle_ranks(tmp_path, capsys):
    """issue 12 item 15: the export message, `chakra check` and `simulate` report the
    same collectives per rank, also when idle ranks of a larger system dilute averages."""
    from costmodel import cli, driver

    module = tmp_path / "dp.mlir"
    module.write_text(
        """
module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
    %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<1024xf32>) -> tensor<1024xf32>
    %1 = stablehlo.multiply %0, %0 : tensor<1024xf32>
    %2 = "stablehlo.all_reduce"(%1) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<1024xf32>) -> tensor<1024xf32>
    return %2 : tensor<1024xf32>
  }
}
"""
    )
    trace = tmp_path / "t"
    rc = driver.main([str(module), f"--extract-collectives=system=dgx-a100 chakra-dir={trace}", "-o", "/dev/null"])
    err = capsys.readouterr().err
    assert rc == 0 and "chakra: wrote 8 ranks" in err and "2 collectives per rank" in err  # not 2 * 4 / 8 = 1
    assert cli.main(["chakra", "check", str(trace)]) == 0
    assert "2 collectives per rank" in capsys.readouterr().out
    assert cli.main(["simulate", str(trace)]) == 0
    assert "collectives per rank: 2" in capsys.readouterr().out


def test_huge_communicating_loop_fails_up_front(tmp_path, capsys):
    """issue 12 item 13: a while with an all_reduce and 1e9 trips used to run for minutes;
    now a one-line error in milliseconds naming chakra=false, which does work."""
    import time

    from costmodel import driver

    src = os.path.join(DATA, "collectives", "loop_1e9_all_reduce.mlir")
    t0 = time.perf_counter()
    rc = driver.main([src, f"--extract-collectives=system=a100-40gb-x4 chakra-dir={tmp_path / 't'}", "-o", "/dev/null"])
    elapsed_s = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == 1 and elapsed_s < 10
    assert "runs 1,000,000,000 times with" in err and "chakra=false" in err
    assert not (tmp_path / "t").exists()
    rc = driver.main([src, "--extract-collectives=system=a100-40gb-x4 chakra=false"])
    out = capsys.readouterr().out
    assert rc == 0 and "collective_count = 1000000000 : i64" in out


# ---------------------------------------------------------------------------
# calibrated systems: the exporter and the built-in simulator price collectives through
# the same function (commmodel.collective_time_ns), so they agree; ASTRA-sim sees only
# the bandwidth part of the calibration (network.yml)
# ---------------------------------------------------------------------------


def test_a_trace_is_simulated_with_the_spec_it_was_written_for(annotate, tmp_path, monkeypatch):
    """The manifest holds the whole system spec (and a user file by its absolute path):
    `costmodel simulate` prices the trace as written, from any directory, whatever the
    file becomes afterwards."""
    from costmodel.systems import load_system

    spec = load_system("a100-40gb-x4").to_json()
    spec["name"] = "mine"
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "mine.json").write_text(json.dumps(spec))
    monkeypatch.chdir(tmp_path)
    r = export_module(annotate(OVERLAP, "a100-40gb").module, load_system("specs/mine.json"), str(tmp_path / "t"))
    assert r.manifest["system"]["source"] == str(tmp_path / "specs" / "mine.json")
    assert r.manifest["system"]["spec"]["name"] == "mine"
    before = simulate_dir(r.directory).step_time_ns
    spec["calibration"]["protocols"]["LL"]["base_latency_ns"] = 1e9  # the file changes afterwards
    (tmp_path / "specs" / "mine.json").write_text(json.dumps(spec))
    monkeypatch.chdir("/")
    assert simulate_dir(r.directory).step_time_ns == before


@pytest.mark.parametrize("text", [OVERLAP, GROUPS], ids=["all_reduce", "groups_permute"])
def test_calibrated_system_exporter_and_simulator_agree(annotate, tmp_path, text):
    from costmodel.commmodel import collective_time_ns
    from costmodel.systems import load_system, parse_system, to_network_yml

    cal = load_system("a100-40gb-x4")
    assert cal.calibrated and cal.collective_latency_ns == 5000 and cal.calibration.protocols
    plain_json = cal.to_json()
    plain_json.pop("calibration")
    plain_file = tmp_path / "plain.json"
    plain_file.write_text(json.dumps(plain_json))
    plain = load_system(str(plain_file))
    a = annotate(text, "a100-40gb")
    res = {}
    for label, system in (("cal", cal), ("plain", plain)):
        r = export_module(a.module, system, str(tmp_path / label))
        sim = simulate_dir(r.directory)  # the system comes back from the manifest (preset name / file path)
        for rank in sim.ranks:
            # the simulator's communication time per rank = what the exporter priced for that rank
            assert rank.comm_busy_ns == pytest.approx(r.manifest["per_rank"][rank.rank]["comm_time_ns"], abs=1)
        res[label] = (r, sim)
    r, sim = res["cal"]
    assert r.manifest["system"]["calibration"]["collective_latency_ns"]["value"] == 5000
    assert "bandwidth_GBps x bus_efficiency" in r.manifest["system"]["calibration"]["astra_sim"]
    assert "the protocols (LL, LL128, Simple)" in r.manifest["system"]["calibration"]["astra_sim"]
    assert "rings on a FullyConnected dimension over a rank's n - 1 links at once" in \
        r.manifest["system"]["calibration"]["astra_sim"]
    assert "bandwidth_cap_factor" not in r.manifest["system"]["dims"][0]  # the model's own field
    assert r.manifest["system"]["dims"][0]["protocol_step_latency_ns"] == {"LL": 600, "LL128": 1900, "Simple": 3400}
    assert "calibration" not in res["plain"][0].manifest["system"]
    assert "bus_efficiency" not in res["plain"][0].manifest["system"]["dims"][0]
    # network.yml of the calibrated trace: the achievable bandwidth
    with open(os.path.join(r.directory, "network.yml")) as fh:
        assert fh.read() == to_network_yml(cal)
    assert sim.step_time_ns != res["plain"][1].step_time_ns
    if text is OVERLAP:
        nbytes = 512 * 512 * 4
        t_cal = collective_time_ns(cal, "all_reduce", nbytes, range(4))[0]
        t_plain = collective_time_ns(plain, "all_reduce", nbytes, range(4))[0]
        assert sim.ranks[0].comm_busy_ns == pytest.approx(t_cal, abs=1)
        assert res["plain"][1].ranks[0].comm_busy_ns == pytest.approx(t_plain, abs=1)
        # calibrated: 4 chunks of a ring all-reduce over 4 GPUs, each 6 messages of a
        # quarter chunk (64 KiB) over a GPU's 3 links at once (NCCL's rings over the fully
        # connected board), at NCCL's LL (the fastest at 1 MiB): 0.5 x 3 x 78% of 100 GB/s,
        # capped at its 87.7 GB/s, and no latency of their own; 7 injections of 10 ns; then
        # the 6 ring steps at LL's 0.6 us, its 6.6 us base latency and XLA's 5 us launch once
        assert collective_time_ns(cal, "all_reduce", nbytes, range(4))[1] == "ring/LL"
        msg_ns = math.floor(nbytes // 4 // 4 / min(0.5 * 3 * 100 * 0.78, 87.7))
        assert t_cal == pytest.approx(4 * (6 * msg_ns + 7 * 10) + 6 * 600 + 6600 + 5000, abs=4 * 6)


# -- re-timing a template (costmodel predict: one graph per fusion policy) ----------------


def _node_facts(template):
    return [
        (n.idx, n.kind, n.name, sorted(n.deps), n.time_ns, n.duration_us, n.flops, n.nbytes, n.op_count,
         n.kernel_count, n.comm_kind, n.comm_bytes, n.groups, n.pairs, n.tag)
        for n in template.nodes
    ]


@pytest.mark.parametrize("granularity", ["region", "op"])
@pytest.mark.parametrize("backend", ["roofline", "calibrated"])
@pytest.mark.parametrize("source", ["OVERLAP", "GROUPS", "examples/resnet50_train_4dev.mlir"])
def test_retimed_template_equals_a_fresh_build(source, backend, granularity, annotate):
    """The graph of a module costed by the same backend for other hardware, re-timed from
    a recorded template, is the graph build_template makes of it: the same nodes, the
    same dependencies, the same float times and rounded durations."""
    from costmodel.chakra.export import build_template, retime_template

    text = open(os.path.join(os.path.dirname(HERE), source)).read() if source.endswith(".mlir") else globals()[source]
    first = annotate(text, "a100-40gb", fusion="xla-gpu", backend=backend)
    recorded = build_template(first.module, granularity, record=True)
    assert recorded.retime is not None
    for hw in ["h100-sxm", "b200", "a100-40gb"]:
        other = annotate(text, hw, fusion="xla-gpu", backend=backend)
        retimed = retime_template(recorded, other.module)
        fresh = build_template(other.module, granularity)
        assert retimed is not None
        assert _node_facts(retimed) == _node_facts(fresh)
        assert retimed.compute_time_ns == fresh.compute_time_ns
        assert retimed.warnings == fresh.warnings


def test_retime_refuses_a_graph_of_another_shape(annotate):
    """An op whose time is zero on one module and not on the other changes the graph's
    shape: retime_template says so (None) instead of re-timing the wrong graph."""
    from costmodel.chakra.export import build_template, retime_template
    from costmodel.ir import ir

    first = annotate(OVERLAP, "a100-40gb", fusion="none")
    recorded = build_template(first.module, "op", record=True)
    other = annotate(OVERLAP, "h100-sxm", fusion="none")
    # the multiply (the last op with a cost) now costs nothing on `other`
    ops = [op for op in other.module.regions[0].blocks[0].operations[0].regions[0].blocks[0].operations]
    mul = next(op.operation for op in ops if op.operation.name == "stablehlo.multiply")
    with other.module.context:
        d = {a.name: a.attr for a in ir.DictAttr(mul.attributes["costmodel.cost"])}
        d["time_ns"] = ir.FloatAttr.get_f64(0.0)
        mul.attributes["costmodel.cost"] = ir.DictAttr.get(d)
    assert retime_template(recorded, other.module) is None
    # loops keep their own periodicity check: no plan is recorded for a compact loop's template
    looped = annotate(LOOP, "a100-40gb", fusion="none")
    assert build_template(looped.module, "region", record=True).retime is not None  # short loops are unrolled


# -- symmetric ranks: one rank simulated for all (simulate_graphs) ---------------------------

_GROUPED_AR = """
module attributes {{mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32}} {{
  func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {{
    %0 = stablehlo.exponential %x : tensor<1024xf32>
    %1 = "stablehlo.all_reduce"(%0) <{{replica_groups = dense<{groups}> : {gtype}}}> {body} : (tensor<1024xf32>) -> tensor<1024xf32>
    %2 = stablehlo.multiply %1, %1 : tensor<1024xf32>
    %3 = "stablehlo.all_reduce"(%2) <{{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}}> {body} : (tensor<1024xf32>) -> tensor<1024xf32>
    return %3 : tensor<1024xf32>
  }}
}}
"""


def _grouped(groups: str, gtype: str) -> str:
    return _GROUPED_AR.format(groups=groups, gtype=gtype, body=AR_BODY)


@pytest.mark.parametrize(
    "text,symmetric,shared",
    [
        (OVERLAP, True, True),  # one group of every rank: each rank's list is rank 0's
        (_grouped("[[0, 1], [2, 3]]", "tensor<2x2xi64>"), True, False),  # even groups, named per rank
        (_grouped("[[0], [1], [2], [3]]", "tensor<4x1xi64>"), True, True),  # nobody takes part
        (_grouped("[[0, 1, 2], [3, -1, -1]]", "tensor<2x3xi64>"), False, False),  # uneven: rank 3 skips it
        (GROUPS, False, False),  # a collective_permute (point to point)
    ],
)
def test_symmetric_ranks_detected_and_simulated_as_one(annotate, text, symmetric, shared):
    """RankGraphs.symmetric holds exactly when every rank runs rank 0's timeline; then
    simulating rank 0 alone gives the report of simulating every rank."""
    from costmodel.simulate import simulate_graphs

    system = _system()
    a = annotate(text, "a100-40gb")
    g = export_module(a.module, system, "unused", write=False).graphs
    assert g.symmetric is symmetric
    assert all(nodes is g.nodes[0] for nodes in g.nodes) is shared
    full = simulate_graphs(g.nodes, g.comm_groups, system, loops=g.loops)
    one = simulate_graphs(g.nodes, g.comm_groups, system, loops=g.loops, symmetric=g.symmetric)
    assert one == full
    assert full.step_time_ns > 0


def test_symmetric_ranks_on_a_system_bigger_than_the_program(annotate):
    """Idle ranks (the program runs on 4 of 8 NPUs) are not rank 0's timeline."""
    g = export_module(annotate(OVERLAP, "h100-sxm").module, _system("dgx-h100"), "unused", write=False).graphs
    assert not g.symmetric
    assert g.nodes[4] == [] and g.nodes[0]


def test_symmetric_compact_loop_simulates_like_every_rank():
    """A 1e9-trip loop (compact: three iterations held) on 4 symmetric ranks: the steady
    state found on rank 0 alone is the one found on all four."""
    from costmodel.chakra.export import export_module as export
    from costmodel.ir import DiagnosticEngine, load_module, make_context
    from costmodel.passes.annotate_cost import annotate_module
    from costmodel.simulate import simulate_graphs

    text = open(os.path.join(DATA, "collectives", "loop_1e9_all_reduce.mlir")).read()
    system = _system()
    with make_context() as ctx:
        module = load_module(ctx, text, "loop")
        annotate_module(module, DiagnosticEngine("loop"), hardware="a100-40gb")
        g = export(module, system, "unused", write=False).graphs
    assert g.symmetric and any(g.loops)
    full = simulate_graphs(g.nodes, g.comm_groups, system, loops=g.loops)
    one = simulate_graphs(g.nodes, g.comm_groups, system, loops=g.loops, symmetric=True)
    assert one == full
    assert full.collectives == 4 * 1_000_000_000 // 4  # one all_reduce of one group per trip


@pytest.mark.parametrize("source", ["OVERLAP", "GROUPED", "examples/transformer_train_2x4.mlir"])
def test_symmetric_instantiation_writes_the_same_files(source, tmp_path, monkeypatch):
    """Symmetric ranks share rank 0's node objects (a collective of another group gets its
    own) and are encoded once: every file is byte for byte what the per-rank build writes."""
    import costmodel.chakra.export as export_mod
    from costmodel.ir import DiagnosticEngine, load_module, make_context
    from costmodel.passes import PassSession, get_pass, parse_options
    from costmodel.passes.annotate_cost import annotate_module

    if source == "GROUPED":
        text = _grouped("[[0, 1], [2, 3]]", "tensor<2x2xi64>")
    elif source.endswith(".mlir"):
        text = open(os.path.join(os.path.dirname(HERE), source)).read()
    else:
        text = globals()[source]
    system = _system("dgx-h100" if "2x4" in source else "a100-40gb-x4")
    with make_context() as ctx:
        module = load_module(ctx, text, source)
        session = PassSession(DiagnosticEngine(source))
        if source.endswith(".mlir"):
            prop = get_pass("propagate-shardings")
            prop.run(module, parse_options(prop, ""), session)
        annotate_module(module, session.diagnostics, hardware="h100-sxm")
        fast = export_module(module, system, str(tmp_path / "fast"))
        monkeypatch.setattr(export_mod, "symmetric_ranks", lambda *args: False)
        slow = export_module(module, system, str(tmp_path / "slow"))
    assert fast.graphs.symmetric and not slow.graphs.symmetric
    names = sorted(os.listdir(tmp_path / "fast"))
    assert names == sorted(os.listdir(tmp_path / "slow")) and any(n.endswith(".et") for n in names)
    for name in names:
        want = (tmp_path / "slow" / name).read_bytes()
        if name == "manifest.json":  # the directory's own path differs
            want = want.replace(b"/slow", b"/fast")
        assert (tmp_path / "fast" / name).read_bytes() == want, name


def test_extract_collectives_hands_its_decoded_collectives_to_the_exporter(tmp_path, capsys, monkeypatch):
    """--extract-collectives (chakra=true) decodes each collective once: the exporter
    reuses its CollectiveInfo, and writes the trace a standalone export-chakra (which
    decodes on its own) writes of the same module."""
    import costmodel.collectives as coll
    import costmodel.passes.extract_collectives as extract

    calls = []
    real = coll.decode_collective

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(coll, "decode_collective", spy)
    monkeypatch.setattr(extract, "decode_collective", spy)
    src = tmp_path / "g.mlir"
    src.write_text(GROUPS)
    _opt([str(src), "--annotate-cost=hardware=a100-40gb",
          f"--extract-collectives=system=a100-40gb-x4 chakra-dir={tmp_path / 'one'}", "-o", str(tmp_path / "x.mlir")],
         capsys)
    assert len(calls) == 2  # the all_gather and the collective_permute, once each
    _opt([str(tmp_path / "x.mlir"), f"--export-chakra=system=a100-40gb-x4 chakra-dir={tmp_path / 'two'}",
          "-o", str(tmp_path / "y.mlir")], capsys)
    assert len(calls) == 4
    for name in sorted(os.listdir(tmp_path / "one")):
        if name.endswith(".et") or name == "comm_group.json":
            assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_counts_beyond_int64_saturate_in_the_trace(tmp_path):
    """A loop of 2^63 - 1 trips (a user's unknown-trip-count) as one region node: its
    flops overflow Chakra's int64 num_ops, which saturates; no traceback, the trace is
    written and reads back."""
    from conftest import DATA_DEPENDENT_WHILE
    from costmodel import driver
    from costmodel.chakra.export import INT64_MAX

    src = tmp_path / "loop.mlir"
    src.write_text(DATA_DEPENDENT_WHILE)
    trace = tmp_path / "t"
    rc = driver.main([str(src), f"--annotate-cost=unknown-trip-count={INT64_MAX}",
                      f"--extract-collectives=system=dgx-h100 chakra-dir={trace}", "-o", str(tmp_path / "o.mlir")])
    assert rc == 0
    nodes = [n for n in read_trace(str(trace / "trace.0.et"))[1] if n.type == pb.COMP_NODE]
    (loop,) = [n for n in nodes if any(a.name == "num_ops" and a.int64_val == INT64_MAX for a in n.attr)]
    assert loop.duration_micros > 0


def test_async_collectives_of_xla_hlo_reach_the_trace_and_sends_are_said(tmp_path, capsys):
    """XLA's async pairs (`all-reduce-start`/`-done` ...) come from HLO text as async_start
    ops holding their collective inline: each is a communication node of the trace, and
    the export message counts point-to-point sends beside the collectives."""
    from costmodel import cli, driver
    from test_ir import HLO_SPMD

    module = tmp_path / "spmd.hlo"
    module.write_text(HLO_SPMD)
    trace = tmp_path / "t"
    rc = driver.main([str(module), "--annotate-cost=hardware=h100-sxm",
                      f"--extract-collectives=system=h100-sxm-x4 chakra-dir={trace}", "-o", "/dev/null"])
    err = capsys.readouterr().err
    # the all-reduce and the all-gather; the collective-permute's one send per rank
    assert rc == 0 and "chakra: wrote 4 ranks" in err and "2 collectives and 1 point-to-point send per rank" in err
    report = check_dir(str(trace))
    assert report.ok and report.collectives_per_rank == 2 and report.messages == 4  # a ring of 4 ranks
    # predict prices them (it read 0 communication before)
    assert cli.main(["predict", str(module), "--system", "h100-sxm-x4", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["rows"][0]
    assert run["comm_ms"] > 0
