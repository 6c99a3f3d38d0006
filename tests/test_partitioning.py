"""costmodel.partitioning.find_unpartitioned_sharding: which modules are sharded programs
that propagate-shardings must partition first."""

from __future__ import annotations

from costmodel.ir import load_module, make_context
from costmodel.partitioning import find_unpartitioned_sharding

CONSTRAINT = """
module attributes {{mhlo.num_partitions = {parts} : i32}} {{
  sdy.mesh @{mesh} = <[{axes}]>
  func.func public @main(%k: tensor<2xui32>, %x: tensor<8x8xf32>) -> tensor<8x8xf32> {{
    %c = sdy.sharding_constraint %x <@{mesh}, [{dims}, {{}}]> : tensor<8x8xf32>
    %y = stablehlo.add %c, %x : tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }}
}}
"""


def _find(text: str):
    ctx = make_context()
    with ctx:
        module = load_module(ctx, text, "m.mlir")
        found = find_unpartitioned_sharding(module)
        return None if found is None else found.what


def test_a_constraint_that_shards_a_dimension_needs_partitioning():
    what = _find(CONSTRAINT.format(parts=4, mesh="mesh", axes='"d"=4', dims='{"d"}'))
    assert what == "'sdy.sharding_constraint' (only present before partitioning)"


def test_a_replicated_constraint_on_an_empty_mesh_is_no_sharding():
    """JAX wraps PRNG keys of a one-device program in such constraints (jax.random under
    jit): the program is per-device as it is."""
    assert _find(CONSTRAINT.format(parts=1, mesh="empty_mesh", axes="", dims="{}")) is None
