"""HloSharding text parser and GSPMD -> Shardy conversion (costmodel.gspmd)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import gspmd
from costmodel.gspmd import ShardingParseError, parse_sharding, plan_mesh
from costmodel.ir import DiagnosticEngine, load_module, make_context, print_module

# ---------------------------------------------------------------------------
# parser: every syntax form
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["replicated", "manual", "unknown"])
def test_simple_kinds(kind):
    s = parse_sharding("{" + kind + "}")
    assert s.kind == kind and str(s) == "{" + kind + "}"


def test_maximal():
    s = parse_sharding("{maximal device=3}")
    assert s.kind == "maximal" and s.device == 3
    assert str(s) == "{maximal device=3}"


def test_iota_plain():
    s = parse_sharding("{devices=[2,4]<=[8]}")
    assert s.kind == "tiled" and s.is_iota
    assert s.tile_dims == (2, 4) and s.iota_reshape == (8,) and s.iota_perm == (0,)
    assert s.data_rank == 2 and s.subgroup_types == ()
    assert s.device_array().tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_iota_transpose():
    s = parse_sharding("{devices=[4,2]<=[2,4]T(1,0)}")
    assert s.iota_reshape == (2, 4) and s.iota_perm == (1, 0)
    assert s.device_array().tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert str(s) == "{devices=[4,2]<=[2,4]T(1,0)}"


def test_last_tile_dim_replicate():
    s = parse_sharding("{devices=[2,1,4]<=[8] last_tile_dim_replicate}")
    assert s.subgroup_types == ("replicated",) and s.data_rank == 2
    assert str(s) == "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"


def test_last_tile_dims():
    s = parse_sharding("{devices=[2,1,2,2]<=[8] last_tile_dims={manual, replicated}}")
    assert s.subgroup_types == ("manual", "replicated") and s.data_rank == 2
    assert str(s) == "{devices=[2,1,2,2]<=[8] last_tile_dims={manual, replicated}}"


def test_explicit_device_list():
    s = parse_sharding("{devices=[2,2]0,2,1,3}")
    assert not s.is_iota and s.devices == (0, 2, 1, 3)
    assert s.device_array().tolist() == [[0, 2], [1, 3]]
    assert str(s) == "{devices=[2,2]0,2,1,3}"


def test_explicit_with_replicate_and_metadata():
    s = parse_sharding(
        '{devices=[2,1,2]3,2,1,0 last_tile_dim_replicate metadata={op_name="a{b}" source_file="x.py" source_line=3}}'
    )
    assert s.devices == (3, 2, 1, 0) and s.subgroup_types == ("replicated",)


def test_tuple():
    s = parse_sharding("{{replicated}, {devices=[2,1]<=[2]}, {maximal device=0}}")
    assert s.kind == "tuple" and [e.kind for e in s.elements] == ["replicated", "tiled", "maximal"]
    assert str(s) == "{{replicated}, {devices=[2,1]<=[2]}, {maximal device=0}}"


def test_empty_tuple_and_nested_metadata():
    assert parse_sharding("{}").kind == "tuple"
    s = parse_sharding('{replicated metadata={{op_name="a"}, {op_name="b"}}}')
    assert s.kind == "replicated"


def test_shard_as_like():
    s = parse_sharding("{devices=[4]<=[4] shard_as 1}")
    assert s.shard_group == ("shard_as", 1)
    assert parse_sharding("{replicated shard_like 2}").shard_group == ("shard_like", 2)


def test_whitespace_tolerated():
    s = parse_sharding("  { devices = [ 2 , 2 ] <= [ 4 ] last_tile_dim_replicate }  ")
    assert s.tile_dims == (2, 2) and s.subgroup_types == ("replicated",)


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("replicated", "expected '{' to start a sharding"),
        ("{replicated", "expected '}'"),
        ("{bogus}", "unknown sharding attribute 'bogus'"),
        ("{maximal}", "expected 'device=N'"),
        ("{maximal device=x}", "expected a device id"),
        ("{devices=[2,2]<=[8]}", "iota over 8 devices for tile dimensions [2, 2]"),
        ("{devices=[2,2]0,1,2}", "3 devices listed for tile dimensions [2, 2]"),
        ("{devices=[2,2]0,1,1,2}", "negative or repeated ids"),
        ("{devices=[2,4]<=[2,4]T(0,0)}", "is not a permutation"),
        ("{devices=[0,2]<=[2]}", "non-positive tile dimension"),
        ("{devices=[]<=[1]}", "empty tile dimensions"),
        ("{devices=[2]<=[2] last_tile_dims={bogus}}", "unknown subgroup type 'bogus'"),
        ("{replicated last_tile_dim_replicate}", "cannot have last_tile_dim_replicate"),
        (
            "{devices=[2,2]<=[4] last_tile_dim_replicate last_tile_dims={manual}}",
            "both last_tile_dim_replicate and last_tile_dims",
        ),
        ("{replicated} x", "unexpected text after the sharding"),
        ("{replicated manual}", "'manual' after 'replicated'"),
        ('{replicated metadata={op_name="a}', "unterminated string in metadata"),
        ("{{replicated} {manual}}", "expected ',' or '}' after a tuple element"),
        ("{last_tile_dim_replicate}", "names no kind"),
        ("{devices=[2]x}", "expected a device list or '<=[...]'"),
    ],
)
def test_errors_quote_the_text(text, fragment):
    with pytest.raises(ShardingParseError) as info:
        parse_sharding(text)
    msg = str(info.value)
    assert fragment in msg
    assert f"'{text}'" in msg
    assert "\n" not in msg


# ---------------------------------------------------------------------------
# mesh planning
# ---------------------------------------------------------------------------


def _check_plan(texts, n=None):
    """Every sharding's device array equals the one implied by its mesh axes."""
    shardings = [parse_sharding(t) for t in texts]
    plan = plan_mesh(shardings, n)
    for s in shardings:
        mesh, per_dim = plan.axes_of[str(s)]
        axes, ids = plan.meshes[mesh]
        sizes = dict(axes)
        names = [a for a, _ in axes]
        dev = np.array(ids if ids is not None else range(int(np.prod([sz for _, sz in axes] or [1]))))
        arr = dev.reshape([sz for _, sz in axes] or [1])
        used = [a for dim in per_dim for a in dim]
        rest = [a for a in names if a not in used]
        order = [names.index(a) for a in used + rest]
        arr = arr.transpose(order)
        shape = [int(np.prod([sizes[a] for a in dim])) if dim else 1 for dim in per_dim]
        arr = arr.reshape(shape + [-1])
        expected = s.device_array().reshape(s.tile_dims + (1,))
        # replicated subgroup dims may hold devices in any order of the remaining axes
        data = len(s.tile_dims)
        assert arr.shape[:data] == expected.shape[:data]
        assert np.array_equal(arr.reshape(s.tile_dims + (-1,))[..., 0], expected[..., 0]), s.text
    return plan


def test_plan_shares_one_mesh_for_jax_shardings():
    plan = _check_plan(
        [
            "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
            "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
            "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
        ]
    )
    assert list(plan.meshes) == ["mesh"]
    assert plan.meshes["mesh"] == ([("axis_0", 2), ("axis_1", 4)], None)
    assert plan.axes_of["{devices=[2,1,4]<=[8] last_tile_dim_replicate}"][1][:2] == [["axis_0"], []]
    assert plan.axes_of["{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"][1][:2] == [[], ["axis_1"]]


def test_plan_refines_axes_and_orders_them():
    plan = _check_plan(["{devices=[8]<=[8]}", "{devices=[4,2]<=[2,4]T(1,0)}", "{devices=[2,4]<=[2,4]T(1,0)}"])
    assert plan.meshes["mesh"][0] == [("axis_0", 2), ("axis_1", 2), ("axis_2", 2)]
    assert plan.axes_of["{devices=[8]<=[8]}"][1] == [["axis_0", "axis_1", "axis_2"]]
    assert plan.axes_of["{devices=[4,2]<=[2,4]T(1,0)}"][1] == [["axis_1", "axis_2"], ["axis_0"]]
    # [[0,4,1,5],[2,6,3,7]]: dim 0 steps by 2 (axis_1); dim 1 by 1 (major, axis_2) then 4 (axis_0)
    assert plan.axes_of["{devices=[2,4]<=[2,4]T(1,0)}"][1] == [["axis_1"], ["axis_2", "axis_0"]]


def test_plan_multi_axis_dim_transposed():
    _check_plan(["{devices=[8,1]<=[2,4]T(1,0)}", "{devices=[2,2,2]<=[2,2,2]T(2,0,1)}"])


def test_plan_explicit_iota_list_is_recognized():
    plan = _check_plan(["{devices=[2,2]0,2,1,3}", "{devices=[2,2]<=[4]}"])
    assert list(plan.meshes) == ["mesh"]


def test_plan_non_iota_list_gets_device_ids():
    plan = _check_plan(["{devices=[2,2]3,1,0,2}"])
    (name,) = plan.meshes
    assert name.startswith("mesh_explicit") and plan.meshes[name][1] == [3, 1, 0, 2]


def test_plan_extends_to_num_partitions_and_maximal():
    plan = plan_mesh([parse_sharding("{devices=[2,1,2]<=[4] last_tile_dim_replicate}"), parse_sharding("{maximal device=1}")], 8)
    assert plan.meshes["mesh"][0] == [("axis_0", 2), ("axis_1", 2), ("axis_2", 2)]
    assert plan.meshes["maximal_mesh_1"] == ([], [1])


# ---------------------------------------------------------------------------
# module conversion
# ---------------------------------------------------------------------------

GSPMD_MODULE = """
module @m attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<16x32xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"},
                         %arg1: tensor<32x64xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"})
      -> (tensor<16x64xf32> {jax.result_info = "result", mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
    %1 = stablehlo.custom_call @Sharding(%0) {backend_config = "unspecified_dims=[1]", mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<16x64xf32>) -> tensor<16x64xf32>
    %2 = stablehlo.negate %1 {mhlo.sharding = "{{devices=[2,4]<=[8]}}"} : tensor<16x64xf32>
    return %2 : tensor<16x64xf32>
  }
}
"""


@pytest.fixture(scope="module")
def ctx():
    return make_context()


def _convert(ctx, text):
    module = load_module(ctx, text, "in.mlir")
    diags = DiagnosticEngine("in.mlir")
    ok = gspmd.convert_module(module, diags)
    return ok, module, diags


def test_convert_module(ctx):
    ok, module, diags = _convert(ctx, GSPMD_MODULE)
    assert ok and not diags.diagnostics
    text = print_module(module).decode()
    module.verify()
    assert 'sdy.mesh @mesh = <["axis_0"=2, "axis_1"=4]>' in text
    assert '%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"axis_0"}, {}]>}' in text
    assert '%arg1: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"axis_1"}]>}' in text
    assert 'jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>' in text
    assert 'sdy.sharding_constraint %0 <@mesh, [{"axis_0", "axis_1"}, {?}]>' in text
    assert 'sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"axis_0"}, {"axis_1"}]>]>' in text
    assert "mhlo.sharding" not in text and "custom_call" not in text


def test_convert_reports_bad_string_with_location(ctx):
    bad = GSPMD_MODULE.replace("{devices=[8,1]<=[8]}", "{devices=[8,1]<=[4]}")
    ok, module, diags = _convert(ctx, bad)
    assert not ok
    (d,) = diags.diagnostics
    assert d.severity == "error" and d.line == 7
    assert "iota over 4 devices for tile dimensions [8, 1]" in d.message and "'{devices=[8,1]<=[4]}'" in d.message
    assert "mhlo.sharding" in print_module(module).decode()  # unchanged


def test_convert_rank_mismatch(ctx):
    bad = GSPMD_MODULE.replace('"{replicated}"', '"{devices=[2,2,2]<=[8]}"')
    ok, _, diags = _convert(ctx, bad)
    assert not ok
    assert "has 3 data tile dimensions but the value has rank 2" in diags.diagnostics[0].message


def test_convert_manual_region_without_shard_to_full_is_rejected(ctx):
    text = """
module {
  func.func @main(%arg0: tensor<64x16xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"}) -> tensor<8x16xf32> {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<64x16xf32>) -> tensor<64x16xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<64x16xf32>) -> tensor<8x16xf32>
    return %1 : tensor<8x16xf32>
  }
}
"""
    ok, _, diags = _convert(ctx, text)
    assert not ok
    assert [d.message for d in diags.diagnostics] == [
        "'func.return' uses a value of a GSPMD shard_map region (local shape, after @SPMDFullToShardShape) "
        "that leaves it without @SPMDShardToFullShape"
    ]
    assert diags.diagnostics[0].line == 6


def test_convert_explicit_and_maximal(ctx):
    text = """
module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<4x4xf32> {mhlo.sharding = "{devices=[2,2]3,1,0,2}"}, %arg1: tensor<4xf32> {mhlo.sharding = "{maximal device=2}"}) -> tensor<4x4xf32> {
    return %arg0 : tensor<4x4xf32>
  }
}
"""
    ok, module, diags = _convert(ctx, text)
    assert ok, [d.render() for d in diags.diagnostics]
    out = print_module(module).decode()
    assert 'sdy.mesh @mesh_explicit_0 = <["axis_0"=2, "axis_1"=2], device_ids=[3, 1, 0, 2]>' in out
    assert "sdy.mesh @maximal_mesh_2 = <[], device_ids=[2]>" in out
    assert '#sdy.sharding<@mesh_explicit_0, [{"axis_0"}, {"axis_1"}]>' in out
    # Shardy's verifier: a sharding on a maximal mesh has rank 0, whatever the value's rank
    assert "#sdy.sharding<@maximal_mesh_2, []>" in out
    module.verify()


def test_maximal_sharding_goes_through_the_partitioner(tmp_path):
    """A value placed on one device ({maximal device=2}) beside tiled ones: converted to a
    sharding Shardy accepts, partitioned, costed (it was a verifier error before)."""
    from costmodel import driver

    src = tmp_path / "maximal.mlir"
    src.write_text(
        """module attributes {mhlo.num_partitions = 4 : i32} {
  func.func @main(%arg0: tensor<4x4xf32> {mhlo.sharding = "{devices=[2,2]3,1,0,2}"}, %arg1: tensor<4xf32> {mhlo.sharding = "{maximal device=2}"}) -> (tensor<4x4xf32>, tensor<4xf32>) {
    %1 = stablehlo.add %arg0, %arg0 : tensor<4x4xf32>
    %2 = stablehlo.multiply %arg1, %arg1 : tensor<4xf32>
    return %1, %2 : tensor<4x4xf32>, tensor<4xf32>
  }
}
"""
    )
    out = tmp_path / "out.mlir"
    assert driver.main([str(src), "--propagate-shardings", "--annotate-cost", "-o", str(out)]) == 0
    text = out.read_text()
    assert "%arg0: tensor<2x2xf32>" in text  # the tiled argument: one 2x2 tile per device
    assert "%arg1: tensor<4xf32> {sdy.sharding = #sdy.sharding<@maximal_mesh_2, []>}" in text
    assert "unsupported_count = 0" in text


def test_no_gspmd_means_nothing_to_do(ctx):
    ok, module, _ = _convert(ctx, "module { func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> { return %a : tensor<2xf32> } }")
    assert not ok
    assert not gspmd.module_has_gspmd_shardings(module)
