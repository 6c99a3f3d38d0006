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


CALLS = """
module attributes {{mhlo.num_partitions = 8 : i32}} {{
  sdy.mesh @mesh = <["x"=8]>
  func.func public @main(%x: tensor<64x8xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{}}]>}}) -> tensor<64x8xf32> {{
    %y = call @outer(%x) : (tensor<64x8xf32>) -> tensor<64x8xf32>
    return %y : tensor<64x8xf32>
  }}
  func.func private @outer(%a: tensor<64x8xf32>) -> tensor<64x8xf32> {{
    %b = call @inner(%a) : (tensor<64x8xf32>) -> tensor<64x8xf32>
    return %b : tensor<64x8xf32>
  }}
  func.func private @inner(%a: tensor<64x8xf32>) -> tensor<64x8xf32> {{
    {body}
  }}
}}
"""


def test_a_sharded_argument_computed_on_in_a_callee_needs_partitioning():
    """A JAX export hands sharded arguments to private functions (a nested jit, jnp.sort,
    jnp.take ...): the call is followed into the callee, through any depth of calls.
    Before, such a program passed as per-device (its global shapes costed 8 times over)."""
    body = "%t = stablehlo.tanh %a : tensor<64x8xf32>\n    return %t : tensor<64x8xf32>"
    what = _find(CALLS.format(body=body))
    assert what == (
        "%arg0 of @main has sdy.sharding=#sdy.sharding<@mesh, [{\"x\"}, {}]> and is used by 'stablehlo.tanh'"
        " in @inner, which @main calls"
    )


def test_a_sharded_argument_only_passed_through_calls_is_no_sign():
    """The callee hands it on unchanged (a return): nothing computes on the global value."""
    assert _find(CALLS.format(body="return %a : tensor<64x8xf32>")) is None


def test_recursive_calls_end():
    body = "%r = call @outer(%a) : (tensor<64x8xf32>) -> tensor<64x8xf32>\n    return %r : tensor<64x8xf32>"
    assert _find(CALLS.format(body=body)) is None


def test_may_be_sharded_is_a_cheap_first_look():
    from costmodel.partitioning import may_be_sharded

    ctx = make_context()
    with ctx:
        pmap = load_module(ctx, "module attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {}", "p.mlir")
        gspmd = load_module(ctx, "module attributes {mhlo.num_partitions = 8 : i32} {}", "g.mlir")
        shardy = load_module(ctx, 'module {\n  sdy.mesh @mesh = <["d"=2]>\n}', "s.mlir")
        assert not may_be_sharded(pmap) and may_be_sharded(gspmd) and may_be_sharded(shardy)


COMPILED_DP = """
module @jit_step attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func @main(%w: tensor<64x64xf32> {mhlo.sharding = "{replicated}"}, %x: tensor<64x64xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> tensor<64x64xf32> {
    %0 = "mhlo.fusion"(%x, %w) <{fusion_kind = #mhlo<fusion_kind kCustom>}> ({
    ^bb0(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>):
      %d = stablehlo.dot %a, %b : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
      mhlo.return %d : tensor<64x64xf32>
    }) : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    return %0 : tensor<64x64xf32>
  }
}
"""


def test_a_compiled_module_is_per_device_whatever_its_arguments_say():
    """Audit find: XLA's optimized module of a data-parallel step (converted to MLIR) keeps
    the arguments' mhlo.sharding and num_partitions = 4; it was sent to propagate-shardings,
    which failed on its mhlo.fusion ops (`kernels`, `predict`, `memory` all stopped). XLA
    partitions before it fuses: a module with fusions is one device's program. The same
    module without its fusion is a sharded program to partition."""
    assert _find(COMPILED_DP) is None
    uncompiled = COMPILED_DP.replace(
        COMPILED_DP[COMPILED_DP.index('    %0 = "mhlo.fusion"'):COMPILED_DP.index("    return %0")],
        "    %0 = stablehlo.dot %x, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>\n",
    )
    assert "%arg1 of @main has mhlo.sharding" in _find(uncompiled)
