"""costmodel.xla_spmd: the program as XLA's HLO import gives it to Shardy, and XLA's
partitioning choices (each checked end to end against XLA in tests/test_spmd_oracle.py)."""

from __future__ import annotations

import pytest

from costmodel import xla_spmd
from costmodel.ir import load_module, make_context, print_module, walk_ops


@pytest.fixture()
def ctx():
    return make_context()


def _names(module, func="main"):
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func":
            return [o.operation.name for o in op.regions[0].blocks[0].operations]
    raise AssertionError


def test_broadcasts_as_hlo(ctx):
    text = """func.func @main(%a: tensor<4x8xf32>, %s: tensor<f32>) -> (tensor<1x4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = stablehlo.broadcast_in_dim %a, dims = [1, 2] : (tensor<4x8xf32>) -> tensor<1x4x8xf32>
  %1 = stablehlo.broadcast_in_dim %a, dims = [1, 0] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %2 = stablehlo.broadcast_in_dim %a, dims = [0, 1] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
  return %0, %1, %2, %3 : tensor<1x4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}"""
    module = load_module(ctx, text, "b.mlir")
    with ctx:
        assert xla_spmd.broadcasts_as_hlo(module) == 3
    module.verify()
    out = print_module(module).decode()
    assert "stablehlo.reshape %arg0 : (tensor<4x8xf32>) -> tensor<1x4x8xf32>" in out
    assert "stablehlo.transpose %arg0, dims = [1, 0]" in out
    assert out.count("broadcast_in_dim") == 1  # the real broadcast of the scalar stays
    assert "return %0, %1, %arg0, %2" in out  # the identity one is gone


def test_order_as_hlo_is_the_post_order_from_the_root(ctx):
    # JAX order: exp (used by the second result) before negate (the first result). XLA's
    # import walks operands of the root first to last: negate first.
    text = """func.func @main(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = stablehlo.exponential %a : tensor<4xf32>
  %1 = stablehlo.add %0, %0 : tensor<4xf32>
  %2 = stablehlo.negate %a : tensor<4xf32>
  return %2, %1 : tensor<4xf32>, tensor<4xf32>
}"""
    module = load_module(ctx, text, "o.mlir")
    with ctx:
        xla_spmd.order_as_hlo(module)
    module.verify()
    assert _names(module) == ["stablehlo.negate", "stablehlo.exponential", "stablehlo.add", "func.return"]


def test_merge_duplicate_reshards(ctx):
    text = """module {
  sdy.mesh @mesh = <["d"=4]>
  func.func @main(%a: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
    %0 = sdy.all_gather [{"d"}, {}] %a out_sharding=<@mesh, [{}, {}]> : tensor<8x4xf32>
    %1 = stablehlo.negate %0 : tensor<8x4xf32>
    %2 = sdy.all_gather [{"d"}, {}] %a out_sharding=<@mesh, [{}, {}]> : tensor<8x4xf32>
    %3 = stablehlo.abs %2 : tensor<8x4xf32>
    return %1, %3 : tensor<8x4xf32>, tensor<8x4xf32>
  }
}"""
    module = load_module(ctx, text, "m.mlir")
    with ctx:
        assert xla_spmd.merge_duplicate_reshards(module) == 1
    module.verify()
    assert [op.name for op in walk_ops(module)].count("sdy.all_gather") == 1


# After propagation: x batch-sharded, w sharded on its contracting dimension (FSDP), the
# product batch-sharded; and the weight gradient x^T g contracting over the batch.
FSDP = """module {
  sdy.mesh @mesh = <["d"=4]>
  func.func @main(%x: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %w: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %g: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<16x32xf32>, tensor<8x32xf32>) {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"d"}, {}]>]>} : (tensor<16x8xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
    %1 = stablehlo.dot_general %x, %g, contracting_dims = [0] x [0] {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"d"}, {}]>]>} : (tensor<16x8xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    return %0, %1 : tensor<16x32xf32>, tensor<8x32xf32>
  }
}"""


def test_dot_strategies(ctx):
    module = load_module(ctx, FSDP, "fsdp.mlir")
    with ctx:
        assert xla_spmd.dot_strategies(module) == 2
    module.verify()
    out = print_module(module).decode()
    # forward: x is sharded as the product, so the weight is replicated (all-gathered)
    assert 'sdy.reshard %arg1 <@mesh, [{}, {}]> : tensor<8x32xf32>' in out
    # gradient: both contract over "d": the product is computed replicated (an all-reduce)
    # and resharded to its propagated sharding for its users
    assert 'sdy.sharding_per_value<[<@mesh, [{}, {}]>]>} : (tensor<16x8xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>' in out
    assert 'sdy.reshard %2 <@mesh, [{"d"}, {}]> : tensor<8x32xf32>' in out and "return %1, %3" in out


def test_dynamic_slice_strategies(ctx):
    text = """module {
  sdy.mesh @mesh = <["d"=4]>
  func.func @main(%s: tensor<4x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}, %i: tensor<i32>) -> tensor<1x8xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %s, %i, %c, sizes = [1, 8] : (tensor<4x8xf32>, tensor<i32>, tensor<i32>) -> tensor<1x8xf32>
    return %0 : tensor<1x8xf32>
  }
}"""
    module = load_module(ctx, text, "ds.mlir")
    with ctx:
        assert xla_spmd.dynamic_slice_strategies(module) == 1
    module.verify()
    # the slice has no sharding (replicated): the stack is all-gathered, as XLA does
    assert 'sdy.reshard %arg0 <@mesh, [{}, {}]> : tensor<4x8xf32>' in print_module(module).decode()


def test_sharding_list():
    from costmodel.ir import ir

    with make_context():
        attr = ir.Attribute.parse('#sdy.sharding_per_value<[<@mesh, [{"a", "b"}, {}]>, <@mesh, []>]>')
        assert xla_spmd.sharding_list(attr) == ['#sdy.sharding<@mesh, [{"a", "b"}, {}]>', "#sdy.sharding<@mesh, []>"]
        assert xla_spmd.is_sharded('#sdy.sharding<@mesh, [{"a"}, {}]>')
        assert not xla_spmd.is_sharded("#sdy.sharding<@mesh, [{}, {}]>")
