"""costmodel.reshard_cse: one collective per (value, reshard), as XLA's partitioner
caches its reshards (the LLaMA FSDP oracle in tests/test_workloads_llama.py shows the
effect on a whole training step)."""

from __future__ import annotations

import collections

import pytest

from costmodel.ir import load_module, make_context, walk_ops
from costmodel.reshard_cse import merge_identical_collectives

GATHER = (
    '"stablehlo.all_gather"({x}) <{{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = {h}, '
    "type = 1>, replica_groups = dense<{groups}> : tensor<{shape}xi64>, use_global_device_ids}}> "
    ": (tensor<2x4xf32>) -> tensor<{n}x4xf32>"
)


def gather(x, h, groups="[[0, 1, 2, 3]]", shape="1x4", n=8):
    return GATHER.format(x=x, h=h, groups=groups, shape=shape, n=n)


REDUCE = """"stablehlo.all_reduce"({x}) <{{channel_handle = #stablehlo.channel_handle<handle = {h}, type = 1>,
      replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}}> ({{
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %r = stablehlo.{op} %p, %q : tensor<f32>
      stablehlo.return %r : tensor<f32>
    }}) : (tensor<2x4xf32>) -> tensor<2x4xf32>"""


@pytest.fixture()
def ctx():
    return make_context()


def _run(ctx, text):
    module = load_module(ctx, text, "cse.mlir")
    removed = merge_identical_collectives(module)
    module.verify()
    return removed, collections.Counter(op.name for op in walk_ops(module)), str(module)


def test_forward_and_backward_gathers_of_one_weight_merge(ctx):
    text = f"""
func.func @main(%w: tensor<2x4xf32>, %x: tensor<8x4xf32>) -> tensor<8x4xf32> {{
  %g1 = {gather("%w", 1)}
  %y = stablehlo.add %g1, %x : tensor<8x4xf32>
  %g2 = {gather("%w", 2)}
  %z = stablehlo.multiply %g2, %y : tensor<8x4xf32>
  return %z : tensor<8x4xf32>
}}"""
    removed, hist, out = _run(ctx, text)
    assert removed == 1 and hist["stablehlo.all_gather"] == 1
    assert "stablehlo.multiply %0, %1" in out  # the second use reads the first gather


@pytest.mark.parametrize(
    "second",
    [
        gather("%v", 2),  # another value
        gather("%w", 2, groups="[[0, 2], [1, 3]]", shape="2x2", n=4),  # other groups
    ],
)
def test_different_collectives_stay(ctx, second):
    text = f"""
func.func @main(%w: tensor<2x4xf32>, %v: tensor<2x4xf32>) -> (tensor<8x4xf32>, tensor<{4 if '[1, 3]' in second else 8}x4xf32>) {{
  %g1 = {gather("%w", 1)}
  %g2 = {second}
  return %g1, %g2 : tensor<8x4xf32>, tensor<{4 if '[1, 3]' in second else 8}x4xf32>
}}"""
    removed, hist, _ = _run(ctx, text)
    assert removed == 0 and hist["stablehlo.all_gather"] == 2


def test_all_reduces_merge_only_with_the_same_reduction(ctx):
    text = f"""
func.func @main(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {{
  %a = {REDUCE.format(x="%x", h=1, op="add")}
  %b = {REDUCE.format(x="%x", h=2, op="add")}
  %c = {REDUCE.format(x="%x", h=3, op="maximum")}
  return %a, %b, %c : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}}"""
    removed, hist, _ = _run(ctx, text)
    assert removed == 1 and hist["stablehlo.all_reduce"] == 2


def test_only_a_dominating_collective_is_reused(ctx):
    """A gather inside a loop body may reuse one before the loop; one after the loop may
    not reuse the body's (it does not dominate it)."""
    text = f"""
func.func @main(%w: tensor<2x4xf32>, %i0: tensor<i32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {{
  %g0 = {gather("%w", 1)}
  %r:2 = stablehlo.while(%i = %i0, %acc = %g0) : tensor<i32>, tensor<8x4xf32>
    cond {{
      %c = stablehlo.constant dense<3> : tensor<i32>
      %p = stablehlo.compare LT, %i, %c : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %g1 = {gather("%w", 2)}
      %s = stablehlo.add %acc, %g1 : tensor<8x4xf32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %n, %s : tensor<i32>, tensor<8x4xf32>
    }}
  return %r#1, %g0 : tensor<8x4xf32>, tensor<8x4xf32>
}}"""
    removed, hist, _ = _run(ctx, text)
    assert removed == 1 and hist["stablehlo.all_gather"] == 1

    nested_first = f"""
func.func @main(%w: tensor<2x4xf32>, %i0: tensor<i32>, %a0: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {{
  %r:2 = stablehlo.while(%i = %i0, %acc = %a0) : tensor<i32>, tensor<8x4xf32>
    cond {{
      %c = stablehlo.constant dense<3> : tensor<i32>
      %p = stablehlo.compare LT, %i, %c : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }} do {{
      %g1 = {gather("%w", 1)}
      %s = stablehlo.add %acc, %g1 : tensor<8x4xf32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %n = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %n, %s : tensor<i32>, tensor<8x4xf32>
    }}
  %g2 = {gather("%w", 2)}
  return %r#1, %g2 : tensor<8x4xf32>, tensor<8x4xf32>
}}"""
    removed, hist, _ = _run(ctx, nested_first)
    assert removed == 0 and hist["stablehlo.all_gather"] == 2
