"""The `extract-collectives` pass through the stablehlo-opt driver (in process)."""

from __future__ import annotations

import os
import re

import pytest

from conftest import shared_path

from costmodel.driver import main

DATA = os.path.join(os.path.dirname(__file__), "data", "collectives")
SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "workloads")
RESNET = os.path.join(SHARED, "resnet_50_train_step_4_devices_1024_batch.mlir")


def run_opt(tmp_path, inp, *flags):
    out = tmp_path / "out.mlir"
    rc = main([str(inp), *flags, "-o", str(out)])
    return rc, (out.read_text() if out.exists() else "")


def load_out(text):
    from costmodel.ir import load_module, make_context

    return load_module(make_context(), text, "<out>")


def collectives_of(module):
    from costmodel.ir import ir

    found = []

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner = inner.operation
                    if "costmodel.collective" in inner.attributes:
                        d = ir.DictAttr(inner.attributes["costmodel.collective"])
                        found.append((inner, {d[i].name: _py(d[i].attr) for i in range(len(d))}))
                    walk(inner)

    walk(module)
    return found


def _py(attr):
    from costmodel.ir import ir

    for cls, get in ((ir.IntegerAttr, lambda a: a.value), (ir.FloatAttr, lambda a: a.value), (ir.StringAttr, lambda a: a.value)):
        try:
            return get(cls(attr))
        except (ValueError, TypeError):
            pass
    try:
        d = ir.DictAttr(attr)
        return {d[i].name: _py(d[i].attr) for i in range(len(d))}
    except (ValueError, TypeError):
        return str(attr)


def summary_of(module):
    return _py(module.attributes["costmodel.summary"])


def test_shard_map_program(tmp_path):
    rc, text = run_opt(tmp_path, os.path.join(DATA, "shard_map_collectives.mlir"), "--extract-collectives=chakra=false")
    assert rc == 0
    module = load_out(text)
    found = collectives_of(module)
    kinds = [c["kind"] for _, c in found]
    assert kinds == ["all_reduce", "all_gather", "collective_permute", "all_to_all", "reduce_scatter"]
    for _, c in found:
        assert c["comm_bytes"] == 256 and c["time_ns"] > 0 and c["algorithm"]
        assert c["executions"] == 1
    assert found[0][1]["replica_groups"] == "[[0,1,2,3],[4,5,6,7]]"
    assert found[0][1]["group_size"] == 4 and found[0][1]["num_groups"] == 2
    s = summary_of(module)
    assert s["system"] == "dgx-h100"
    assert s["collective_count"] == 5 and s["collective_bytes"] == 5 * 256
    assert s["comm_time_ns"] == pytest.approx(sum(c["time_ns"] for _, c in found))
    assert s["collectives"]["all_gather"] == {"count": 1, "bytes": 256, "time_ns": found[1][1]["time_ns"]}


def test_loop_and_call_multiplicities_in_summary(tmp_path):
    rc, text = run_opt(
        tmp_path,
        os.path.join(DATA, "shard_map_loop_call.mlir"),
        "--annotate-cost",
        "--extract-collectives=chakra=false system=dgx-h100",
    )
    assert rc == 0
    module = load_out(text)
    s = summary_of(module)
    # kept annotate-cost's keys
    assert "total_flops" in s and s["hardware"] == "h100-sxm"
    assert s["collective_ops"] == 2
    assert s["collectives"]["all_reduce"]["count"] == 5 and s["collectives"]["all_reduce"]["bytes"] == 5 * 256
    assert s["collectives"]["all_gather"]["count"] == 2
    found = collectives_of(module)
    ar = found[0][1]
    assert s["collectives"]["all_reduce"]["time_ns"] == pytest.approx(5 * ar["time_ns"])


def test_sdy_collectives_pass(tmp_path):
    rc, text = run_opt(tmp_path, os.path.join(DATA, "sdy_collectives.mlir"), "--extract-collectives=chakra=false")
    assert rc == 0
    found = collectives_of(load_out(text))
    by_kind = {c["kind"]: c for _, c in found}
    assert by_kind["all_slice"]["time_ns"] == 0.0 and by_kind["all_slice"]["comm_bytes"] == 0
    assert by_kind["all_gather"]["time_ns"] > 0


def test_misc_forms_pass(tmp_path, capsys):
    rc, text = run_opt(tmp_path, os.path.join(DATA, "misc_forms.mlir"), "--extract-collectives=chakra=false system=a100-40gb-x4")
    assert rc == 0
    found = collectives_of(load_out(text))
    assert [c["kind"] for _, c in found] == [
        "all_reduce",
        "all_reduce",
        "all_gather",
        "send",
        "recv",
        "collective_broadcast",
        "send",
    ]
    assert found[-1][1]["algorithm"] == "host_transfer" and found[-1][1]["time_ns"] == 0.0


def test_group_beyond_grid_fails_with_location(tmp_path, capsys):
    src = tmp_path / "bad.mlir"
    src.write_text(
        """module attributes {mhlo.num_replicas = 4 : i32} {
  func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1, 2, 3, 4]]> : tensor<1x5xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""
    )
    rc, _ = run_opt(tmp_path, src, "--extract-collectives=chakra=false")
    err = capsys.readouterr().err
    assert rc == 1
    assert re.search(r"bad\.mlir:3:10: error: 'stablehlo.all_reduce': replica_groups names replica 4, beyond "
                     r"num_replicas x num_partitions = 4 x 1", err), err
    assert "Traceback" not in err


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    inp = os.path.join(DATA, "shard_map_collectives.mlir")
    assert run_opt(tmp_path, inp, "--extract-collectives=system=no-such-system chakra=false")[0] == 1
    assert run_opt(tmp_path, inp, "--extract-collectives=granularity=block chakra=false")[0] == 1
    # 8 devices do not fit a 4-GPU box
    assert run_opt(tmp_path, inp, "--extract-collectives=system=a100-40gb-x4 chakra=false")[0] == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "granularity" in err and "no-such-system" in err and "8 devices" in err


def test_resnet_375_all_reduces(tmp_path):
    rc, text = run_opt(tmp_path, shared_path(os.path.basename(RESNET)), "--extract-collectives=chakra=false system=a100-40gb-x4")
    assert rc == 0
    module = load_out(text)
    found = collectives_of(module)
    assert len(found) == 375
    from costmodel.shapes import type_info

    for op, c in found:
        assert op.name == "stablehlo.all_reduce"
        assert c["replica_groups"] == "[[0,1,2,3]]" and c["group_size"] == 4 and c["num_groups"] == 1
        operand_bytes = sum(type_info(v.type).nbytes for v in op.operands)
        assert c["comm_bytes"] == c["bytes_in"] == c["bytes_out"] == operand_bytes
    s = summary_of(module)
    assert s["collective_count"] == 375
    assert s["collective_bytes"] == sum(c["comm_bytes"] for _, c in found)


def test_chakra_export_integration(tmp_path):
    out_dir = tmp_path / "trace"
    rc, _ = run_opt(
        tmp_path,
        os.path.join(DATA, "shard_map_collectives.mlir"),
        f"--extract-collectives=chakra-dir={out_dir}",
    )
    assert rc == 0
    names = sorted(os.listdir(out_dir))
    assert [f"trace.{r}.et" for r in range(8)] == [n for n in names if n.endswith(".et")]


def test_permute_pair_onto_itself_costs_no_traffic(tmp_path):
    """A source_target pair [i, i] moves nothing; it must not reach the comm model."""
    src = tmp_path / "self_pair.mlir"
    src.write_text(
        """module attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "stablehlo.collective_permute"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 0], [1, 1]]> : tensor<2x2xi64>}> : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""
    )
    rc, text = run_opt(tmp_path, src, "--annotate-cost", "--extract-collectives=system=dgx-h100 chakra=false")
    assert rc == 0
    ((_, c),) = collectives_of(load_out(text))
    assert c["time_ns"] == 0.0


def test_system_alone_costs_compute_on_its_hardware(tmp_path, capsys):
    """`system=` names the per-device hardware: no annotate-cost needed."""
    rc, text = run_opt(tmp_path, shared_path(os.path.basename(RESNET)), "--extract-collectives=system=a100-40gb-x4 chakra=false")
    assert rc == 0
    assert "the hardware of system 'a100-40gb-x4'" in capsys.readouterr().err
    assert 'hardware = "a100-40gb"' in text and 'backend = "roofline"' in text
    assert "unsupported_count = 0 : i64" in text
    # exactly what --annotate-cost="hardware=a100-40gb" costs (XLA GPU's kernels), so that
    # the trace's compute is the one costmodel predict simulates
    assert 'fusion = "xla-gpu"' in text
    rc, costed = run_opt(tmp_path, shared_path(os.path.basename(RESNET)), "--annotate-cost=hardware=a100-40gb",
                         "--extract-collectives=system=a100-40gb-x4 chakra=false")
    assert rc == 0
    summary = re.compile(r"costmodel.summary = \{[^}]*\}")
    assert summary.search(text).group(0) == summary.search(costed).group(0)


def test_hardware_mismatch_with_system_warns(tmp_path, capsys):
    rc, _ = run_opt(tmp_path, shared_path(os.path.basename(RESNET)), "--annotate-cost=hardware=h100-sxm", "--extract-collectives=system=a100-40gb-x4 chakra=false")
    assert rc == 0
    err = capsys.readouterr().err
    assert "warning: compute was costed for hardware 'h100-sxm' but system 'a100-40gb-x4' has 'a100-40gb'" in err


def test_times_print_as_decimals_not_hex(tmp_path):
    rc, text = run_opt(tmp_path, shared_path(os.path.basename(RESNET)), "--annotate-cost=hardware=a100-40gb", "--extract-collectives=system=a100-40gb-x4 chakra=false")
    assert rc == 0
    assert re.search(r"0x[0-9A-F]{16} : f64", text) is None


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "transformer_train_2x4.mlir")


@pytest.mark.parametrize(
    "algorithm, implementation",
    [("tree", "doubleBinaryTree"), ("halving_doubling", "halvingDoubling"), ("ring", "ring"), ("direct", "direct"),
     ("doubleBinaryTree", "doubleBinaryTree")],
)
def test_every_documented_algorithm_is_accepted(tmp_path, capsys, algorithm, implementation):
    """`--help` lists ring, tree, direct, halving_doubling: each times the collectives with
    its ASTRA-sim implementation (they used to end in 'internal error (please report)')."""
    rc, text = run_opt(
        tmp_path, EXAMPLE, "--propagate-shardings", f"--extract-collectives=algorithm={algorithm} chakra=false"
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "Traceback" not in err and "internal error" not in err
    found = collectives_of(load_out(text))
    assert found and all(c["algorithm"].endswith(implementation) for _, c in found), {c["algorithm"] for _, c in found}
    # the default system (dgx-h100) carries NCCL's protocols: each collective names the one it runs with
    assert all(c["protocol"] in ("LL", "LL128", "Simple") for _, c in found)


def test_unknown_algorithm_is_one_line_listing_the_names(tmp_path, capsys):
    rc, _ = run_opt(tmp_path, EXAMPLE, "--propagate-shardings", "--extract-collectives=algorithm=bogus chakra=false")
    assert rc == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [
        "stablehlo-opt: error: pass 'extract-collectives': option 'algorithm' expects one of ring, tree, direct, "
        "halving_doubling, oneRing, doubleBinaryTree, oneDirect, halvingDoubling, oneHalvingDoubling, got 'bogus'"
    ]


GATHER_AND_REDUCE = """\
module attributes {mhlo.num_replicas = 1 : i32, mhlo.num_partitions = 8 : i32} {
  func.func @main(%arg0: tensor<1024xf32>) -> tensor<1024xf32> {
    %0 = "stablehlo.all_gather"(%arg0) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> : (tensor<1024xf32>) -> tensor<8192xf32>
    %1 = "stablehlo.all_reduce"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<1024xf32>) -> tensor<1024xf32>
    return %1 : tensor<1024xf32>
  }
}
"""


def test_tree_on_an_all_gather_keeps_the_systems_implementation_and_says_so(tmp_path, capsys):
    src = tmp_path / "gather_reduce.mlir"
    src.write_text(GATHER_AND_REDUCE)
    rc, text = run_opt(tmp_path, src, "--extract-collectives=algorithm=tree chakra=false system=dgx-h100")
    err = capsys.readouterr().err
    assert rc == 0, err
    algs = {c["kind"]: c["algorithm"] for _, c in collectives_of(load_out(text))}
    assert algs == {"all_gather": "ring", "all_reduce": "doubleBinaryTree"}
    assert ("extract-collectives: algorithm 'tree' (doubleBinaryTree) does not implement all_gather; "
            "those use the implementation of system 'dgx-h100'") in err


def test_algorithm_with_chakra_says_the_trace_keeps_the_systems(tmp_path, capsys):
    src = tmp_path / "gather_reduce.mlir"
    src.write_text(GATHER_AND_REDUCE)
    rc, _ = run_opt(tmp_path, src, f"--extract-collectives=algorithm=direct chakra-dir={tmp_path / 'trace'}")
    err = capsys.readouterr().err
    assert rc == 0, err
    assert ("extract-collectives: algorithm 'direct' applies to the costmodel.collective times; "
            "the Chakra trace keeps the implementations of system 'dgx-h100'") in err


def test_simulate_without_chakra_warns(tmp_path, capsys):
    src = tmp_path / "gather_reduce.mlir"
    src.write_text(GATHER_AND_REDUCE)
    rc, _ = run_opt(tmp_path, src, "--extract-collectives=chakra=false simulate=true")
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (f"{src}:1:1: warning: extract-collectives: simulate=true ignored with chakra=false (the simulator "
            "runs on the trace, so nothing is simulated); drop chakra=false to write the Chakra trace") in err
    assert "simulate:" not in err  # and indeed nothing was simulated


def test_chakra_false_alone_does_not_warn(tmp_path, capsys):
    src = tmp_path / "gather_reduce.mlir"
    src.write_text(GATHER_AND_REDUCE)
    rc, _ = run_opt(tmp_path, src, "--extract-collectives=chakra=false")
    err = capsys.readouterr().err
    assert rc == 0 and "warning" not in err, err


def test_annotate_cost_after_extract_collectives_on_other_hardware_warns(tmp_path, capsys):
    src = tmp_path / "gather_reduce.mlir"
    src.write_text(GATHER_AND_REDUCE)
    rc, text = run_opt(
        tmp_path, src, "--extract-collectives=system=dgx-h100 chakra=false", "--annotate-cost=hardware=a100-40gb"
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (f"{src}:1:1: warning: annotate-cost: costing for hardware 'a100-40gb' a module whose collectives "
            "extract-collectives timed for system 'dgx-h100' ('h100-sxm' devices)") in err
    assert 'hardware = "a100-40gb"' in text


def test_annotate_cost_after_extract_collectives_on_the_systems_hardware_is_quiet(tmp_path, capsys):
    src = tmp_path / "gather_reduce.mlir"
    src.write_text(GATHER_AND_REDUCE)
    rc, text = run_opt(
        tmp_path, src, "--extract-collectives=system=dgx-h100 chakra=false", "--annotate-cost=hardware=h100-sxm"
    )
    err = capsys.readouterr().err
    assert rc == 0 and "warning" not in err, err
    assert summary_of(load_out(text))["hardware"] == "h100-sxm"


def test_every_algorithm_in_help_resolves(capsys):
    """The names --help lists for algorithm= are exactly the ones the comm model takes."""
    from costmodel.commmodel import ALGORITHM_NAMES, resolve_algorithm
    from costmodel.passes import get_pass, parse_options

    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    listed = help_text.split("algorithm=<str>", 1)[1].splitlines()[0].rsplit("[", 1)[1].rstrip("]").split("|")
    assert tuple(listed) == ALGORITHM_NAMES
    for name in listed:
        assert parse_options(get_pass("extract-collectives"), f"algorithm={name}")["algorithm"] == name
        assert resolve_algorithm(name)


def test_malformed_costmodel_attributes_are_one_line(tmp_path, capsys):
    """A kernel_cost that is no dictionary (an input edited by hand) is a one-line error
    naming the fix, not an 'internal error' with a traceback."""
    p = os.path.join(DATA, "malformed_kernel_cost.mlir")  # an annotated module, one kernel_cost = "junk"
    rc, _ = run_opt(tmp_path, p, f"--extract-collectives=system=a100-40gb-x4 chakra-dir={tmp_path}/t.chakra")
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and "internal error" not in err
    assert "costmodel.* attributes are malformed" in err and "run --annotate-cost on it first" in err
    assert not (tmp_path / "t.chakra").exists()
