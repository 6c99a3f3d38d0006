"""`costmodel chakra check`: each invariant is detected; `chakra dump` prints JSON."""

from __future__ import annotations

import json
import os

from costmodel.chakra import et_def_pb2 as pb
from costmodel.chakra.check import check_dir
from costmodel.chakra.io import encode_trace, make_metadata, write_message

from test_simulate import comp, coll, make_dir, p2p


def _good(tmp_path, name="d"):
    ranks = [[comp(0, 5), coll(1, 64, deps=[0]), comp(2, 1, deps=[1])] for _ in range(2)]
    d = make_dir(tmp_path / name, ranks)
    with open(os.path.join(d, "network.yml"), "w") as fh:
        fh.write("topology: [ Ring ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n")
    return d


def _rewrite(d, rank, nodes, meta=True):
    with open(os.path.join(d, f"trace.{rank}.et"), "wb") as fh:
        if meta:
            fh.write(encode_trace(make_metadata(), nodes))
        else:
            for n in nodes:
                write_message(fh, n)


def _one(report, text):
    assert any(text in v for v in report.violations), report.violations


def test_good_directory(tmp_path):
    r = check_dir(_good(tmp_path))
    assert r.ok and r.ranks == 2 and r.nodes == 6 and r.collectives == 2


def test_missing_rank_and_metadata(tmp_path):
    d = _good(tmp_path)
    os.unlink(os.path.join(d, "trace.1.et"))
    _one(check_dir(d), "trace.1.et: missing")
    d = _good(tmp_path, "m")
    _rewrite(d, 1, [comp(0, 5), coll(1, 64, deps=[0])], meta=False)
    _one(check_dir(d), "not a GlobalMetadata")


def test_dependencies(tmp_path):
    d = _good(tmp_path)
    _rewrite(d, 0, [comp(0, 5), coll(1, 64, deps=[0]), comp(2, 1, deps=[1, 9])])
    _one(check_dir(d), "depends on node 9, which is not in this file")
    _rewrite(d, 0, [comp(0, 5, deps=[2]), coll(1, 64, deps=[0]), comp(2, 1, deps=[1])])
    _one(check_dir(d), "cycle")
    _rewrite(d, 0, [comp(0, 5), comp(0, 1)])
    _one(check_dir(d), "node id 0 used twice")


def test_collective_order_types_and_sizes(tmp_path):
    d = _good(tmp_path)
    _rewrite(d, 0, [comp(0, 5), coll(1, 64, deps=[0]), coll(2, 32, deps=[0], ctrl=[1])])
    _rewrite(d, 1, [comp(0, 5), coll(1, 32, deps=[0]), coll(2, 64, deps=[0], ctrl=[1])])
    _one(check_dir(d), "collective #0 is ALL_REDUCE of 32 bytes on rank 1")
    _rewrite(d, 1, [comp(0, 5), coll(1, 64, deps=[0], ctype=pb.ALL_GATHER), coll(2, 32, deps=[0], ctrl=[1])])
    _one(check_dir(d), "ALL_GATHER of 64 bytes")
    _rewrite(d, 1, [comp(0, 5), coll(1, 64, deps=[0])])
    _one(check_dir(d), "rank 1 issues 1 collectives but rank 0 issues 2")


def test_attribute_rules(tmp_path):
    d = _good(tmp_path)
    bad = coll(1, 64, deps=[0])
    for a in bad.attr:
        if a.name == "comm_size":
            a.double_val = 64.0
    _rewrite(d, 0, [comp(0, 5), bad])
    r = check_dir(d)
    _one(r, "'comm_size' is not held in an integer field")
    _rewrite(d, 0, [comp(0, 5), coll(1, 0, deps=[0])])
    _one(check_dir(d), "comm_size 0")
    _rewrite(d, 0, [comp(0, 5), coll(1, 64, deps=[0], ctype=pb.REDUCE)])
    _one(check_dir(d), "comm_type REDUCE is not simulated")
    n = pb.Node(id=0, name="x", type=pb.COMP_NODE, duration_micros=1)
    _rewrite(d, 0, [n])
    _one(check_dir(d), "is_cpu_op")
    _rewrite(d, 0, [comp(0, 5), coll(1, 64, deps=[0], pg="7")])
    _one(check_dir(d), "pg_name '7' is not a key of comm_group.json")
    with open(os.path.join(d, "comm_group.json"), "w") as fh:
        json.dump({"1": [1]}, fh)
    _rewrite(d, 0, [comp(0, 5), coll(1, 64, deps=[0], pg="1")])
    _one(check_dir(d), "rank 0 is not in its group '1'")
    with open(os.path.join(d, "system.json"), "w") as fh:
        json.dump({"roofline-enabled": 1}, fh)
    n = pb.Node(id=0, name="x", type=pb.COMP_NODE, duration_micros=1)
    n.attr.add(name="is_cpu_op", bool_val=False)
    _rewrite(d, 0, [n])
    _one(check_dir(d), "enables the roofline but the node has no 'num_ops'")


def test_send_recv_pairing(tmp_path):
    d = make_dir(tmp_path / "p", [[p2p(0, "send", 0, 1, 8, 3)], [p2p(0, "recv", 0, 1, 8, 3)]])
    assert check_dir(d).ok
    d = make_dir(tmp_path / "q", [[p2p(0, "send", 0, 1, 8, 3)], [p2p(0, "recv", 0, 1, 8, 4)]])
    _one(check_dir(d), "messages 0->1 tag 3 of 8 bytes: 1 send(s) on rank 0 but 0 receive(s) on rank 1")
    d = make_dir(tmp_path / "r", [[p2p(0, "send", 1, 0, 8, 3)], [p2p(0, "recv", 1, 0, 8, 3)]])
    _one(check_dir(d), "comm_src is 1 but the node is in rank 0's file")


def test_deadlock_is_reported(tmp_path):
    # each rank waits for a receive before its send: counts match, but it never runs
    r0 = [p2p(0, "recv", 1, 0, 8, 1), p2p(1, "send", 0, 1, 8, 2, deps=[0])]
    r1 = [p2p(0, "recv", 0, 1, 8, 2), p2p(1, "send", 1, 0, 8, 1, deps=[0])]
    d = make_dir(tmp_path / "x", [r0, r1])
    _one(check_dir(d), "does not run to completion")


def test_cli(tmp_path, capsys):
    from costmodel.cli import main

    d = _good(tmp_path)
    assert main(["chakra", "check", d]) == 0
    assert capsys.readouterr().out.startswith("ok:")
    _rewrite(d, 0, [comp(0, 5), coll(1, 64, deps=[0]), comp(2, 1, deps=[1, 9])])
    assert main(["chakra", "check", d]) == 1
    out, err = capsys.readouterr()
    assert "depends on node 9" in out and "1 violation" in err
    assert main(["chakra", "check", d, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
    assert main(["chakra", "dump", os.path.join(d, "trace.1.et")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metadata"]["version"] == "0.0.4"
    assert [n["type"] for n in doc["nodes"]] == ["COMP_NODE", "COMM_COLL_NODE", "COMP_NODE"]
    assert {"name": "comm_size", "int64_val": 64} in doc["nodes"][1]["attr"]
    assert main(["chakra", "dump", os.path.join(d, "nope.et")]) == 1


def test_a_manifest_naming_a_billion_ranks_is_said_once(tmp_path):
    """A manifest whose 'ranks' is 10^9 (edited by hand) ran chakra check out of memory,
    one violation per missing rank: now one violation, and the present ranks checked."""
    d = _good(tmp_path)
    with open(os.path.join(d, "manifest.json"), "w") as fh:
        json.dump({"generator": "stablehlo-costmodel", "prefix": "trace", "ranks": 10**9}, fh)
    r = check_dir(d)
    _one(r, "1000000000 ranks are named but only 2 trace.<rank>.et files are present")
    assert len(r.violations) <= 2 and r.ranks == 2
