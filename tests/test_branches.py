"""costmodel.branches: the branch policy of stablehlo.case/if, one choice for every consumer
(cost summary, kernel report, memory, collectives, Chakra trace)."""

from __future__ import annotations

import pytest

from costmodel.branches import chosen, parse_policy, weights_for
from costmodel.ir import DiagnosticEngine, InputError, ir, load_module, make_context
from costmodel.passes import PassSession, get_pass, parse_options

# A per-device program on 4 devices. Branch 0 all-reduces a 64x64 f32 block (16 KiB) and
# multiplies it twice by a 64x64 block (16 KiB temporaries), then negates; branch 1
# multiplies 8x8 blocks (no communication). Branch 0 is the costliest on any system.
PROGRAM = """module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%i: tensor<i32>, %a: tensor<64x64xf32>, %b: tensor<8x8xf32>) -> (tensor<64x64xf32>, tensor<8x8xf32>) {
    %0:2 = "stablehlo.case"(%i) ({
      %1 = "stablehlo.all_reduce"(%a) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %s = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<64x64xf32>) -> tensor<64x64xf32>
      %2 = stablehlo.dot_general %1, %a, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
      %3 = stablehlo.dot_general %2, %a, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
      %4 = stablehlo.negate %3 : tensor<64x64xf32>
      stablehlo.return %4, %b : tensor<64x64xf32>, tensor<8x8xf32>
    }, {
      %1 = stablehlo.dot_general %b, %b, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      stablehlo.return %a, %1 : tensor<64x64xf32>, tensor<8x8xf32>
    }) : (tensor<i32>) -> (tensor<64x64xf32>, tensor<8x8xf32>)
    return %0#0, %0#1 : tensor<64x64xf32>, tensor<8x8xf32>
  }
}
"""
SYSTEM = "a100-40gb-x4"


def test_parse_policy():
    assert [parse_policy(x) for x in ("max", "mean", "xla", "0", "3", 2)] == ["max", "mean", "xla", 0, 3, 2]
    for bad in ("largest", "-1", "1.5", ""):
        with pytest.raises(InputError):
            parse_policy(bad)


def test_weights_for():
    assert weights_for("max", [1.0, 3.0, 3.0]) == [0.0, 1.0, 0.0]  # ties: the lowest index
    assert weights_for("mean", [1.0, 2.0, 3.0, 4.0]) == [0.25] * 4
    assert weights_for(5, [1.0, 2.0]) == [0.0, 1.0]  # out of range: the last branch (stablehlo.case)
    assert chosen([0.0, 1.0]) == 1 and chosen([0.5, 0.5]) is None


def _annotated(branch: str):
    ctx = make_context()
    module = load_module(ctx, PROGRAM, "case.mlir")
    session = PassSession(DiagnosticEngine("case.mlir"))
    info = get_pass("annotate-cost")
    info.run(module, parse_options(info, f"hardware=a100-40gb branch={branch}"), session)
    ext = get_pass("extract-collectives")
    ext.run(module, parse_options(ext, f"system={SYSTEM} chakra=false"), session)
    assert not session.diagnostics.has_errors, [d.render() for d in session.diagnostics.diagnostics]
    return ctx, module


def _op(module, name):
    from costmodel.ir import walk_ops

    return next(op for op in walk_ops(module) if op.name == name)


def _executions(module) -> float:
    from costmodel.ir import attr_number

    d = ir.DictAttr(_op(module, "stablehlo.all_reduce").attributes["costmodel.collective"])
    return attr_number(d["executions"])


def _kernel_executions(module) -> dict:
    from costmodel.kernels.report import collect_kernels

    return {tuple(r.ops)[-1]: r.executions for r in collect_kernels(module)}


@pytest.mark.parametrize(
    "branch,weights", [("max", [1.0, 0.0]), ("0", [1.0, 0.0]), ("1", [0.0, 1.0]), ("mean", [0.5, 0.5])]
)
def test_every_consumer_follows_the_policy(branch, weights):
    from costmodel.ir import attr_number
    from costmodel.memory import peak_memory

    _, module = _annotated(branch)
    case = _op(module, "stablehlo.case")
    assert [float(x) for x in ir.DenseF64ArrayAttr(case.attributes["costmodel.branch_weights"])] == weights
    # collectives: the all-reduce of branch 0 runs weights[0] times per step
    assert _executions(module) == weights[0]
    summary = ir.DictAttr(module.attributes["costmodel.summary"])
    assert attr_number(summary["collective_count"]) == weights[0]
    assert attr_number(summary["collective_bytes"]) == weights[0] * 64 * 64 * 4
    assert ir.StringAttr(summary["branch"]).value == branch
    # kernel report: the negation kernel (branch 0) and the matmul (branch 1)
    ex = _kernel_executions(module)
    assert ex["stablehlo.negate"] == weights[0]
    # memory: the branch chosen (or, for mean, the branches weighed): see test_memory_follows_the_policy
    assert peak_memory(module).peak_bytes > 0


def test_memory_follows_the_policy():
    """Branch 0 holds 64x64 f32 temporaries (the all-reduce result, the products), branch 1
    none: the peak under each policy is ordered so."""
    from costmodel.memory import peak_memory

    peaks = {b: peak_memory(_annotated(b)[1]).peak_bytes for b in ("max", "0", "1", "mean")}
    assert peaks["max"] == peaks["0"] > peaks["1"]
    # mean: half of branch 0's 32 KiB of temporaries, which the case's own 16.25 KiB of
    # results cover: no more than branch 1
    assert peaks["1"] <= peaks["mean"] < peaks["0"]


def test_chakra_trace_runs_the_chosen_branch(tmp_path):
    from costmodel.chakra.export import export_module
    from costmodel.systems import load_system

    for branch, comm_nodes in (("max", 1), ("1", 0)):
        _, module = _annotated(branch)
        result = export_module(module, load_system(SYSTEM), str(tmp_path / branch))
        assert result.graphs.node_counts[0].get("COMM_COLL_NODE", 0) == comm_nodes, branch


def test_chakra_trace_refuses_mean(tmp_path):
    from costmodel.chakra.export import export_module
    from costmodel.systems import load_system

    _, module = _annotated("mean")
    with pytest.raises(InputError, match="branch=mean: a trace runs one branch"):
        export_module(module, load_system(SYSTEM), str(tmp_path / "mean"))
