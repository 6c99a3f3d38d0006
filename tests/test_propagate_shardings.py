"""The `propagate-shardings` pass on the checked-in inputs (no JAX needed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from costmodel.ir import DiagnosticEngine, load_module, make_context, print_module
from costmodel.passes import PassError, PassSession, get_pass, parse_options

DATA = os.path.join(os.path.dirname(__file__), "data", "sharded")


@pytest.fixture(scope="module")
def ctx():
    return make_context()


def _run(ctx, name_or_text, per_device=True):
    if name_or_text.endswith(".mlir"):
        with open(os.path.join(DATA, name_or_text)) as fh:
            text, src = fh.read(), name_or_text
    else:
        text, src = name_or_text, "in.mlir"
    module = load_module(ctx, text, src)
    session = PassSession(DiagnosticEngine(src))
    get_pass("propagate-shardings").run(module, {"per-device": per_device, "extra": {}}, session)
    module.verify()
    return print_module(module).decode(), session


def test_registered():
    info = get_pass("propagate-shardings")
    assert info is not None and [o.name for o in info.options] == ["per-device", "isolate", "reduce-scatter"]


def test_tp_mlp_per_device(ctx):
    out, session = _run(ctx, "tp_mlp.mlir")
    assert not session.diagnostics.diagnostics
    assert "%arg1: tensor<32x16xf32>" in out and "%arg2: tensor<16x32xf32>" in out
    assert out.count('"stablehlo.all_reduce"') == 1
    assert "replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids" in out
    assert "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>" in out
    assert "mhlo.num_partitions = 8 : i32" in out and "mhlo.num_replicas = 1 : i32" in out
    assert "sdy.all_reduce" not in out


def test_global_shapes_keep_sdy_collectives(ctx):
    out, _ = _run(ctx, "tp_mlp.mlir", per_device=False)
    assert "%arg1: tensor<32x128xf32>" in out
    assert 'sdy.all_reduce {"d"}' in out and "stablehlo.all_reduce" not in out


@pytest.mark.parametrize(
    "case,ops",
    [
        ("dp_mlp.mlir", {"all_reduce": 2}),
        ("fsdp_mlp.mlir", {"all_gather": 2}),
        ("fsdp_mlp_constrained.mlir", {"all_gather": 2}),
        ("transformer_dp_tp.mlir", {"all_reduce": 2}),
        ("transformer_dp_tp_gspmd.mlir", {"all_reduce": 2}),
        ("reshard_all_to_all.mlir", {"all_to_all": 1}),
        ("reshard_all_to_all_gspmd.mlir", {"all_to_all": 1}),
        ("reshard_permute.mlir", {"collective_permute": 1}),
        ("shard_map.mlir", {"all_reduce": 1}),
        ("tp_mlp_gspmd.mlir", {"all_reduce": 1}),
    ],
)
def test_cases_have_their_collectives(ctx, case, ops):
    out, session = _run(ctx, case)
    assert not session.diagnostics.has_errors
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"):
        assert out.count(f'"stablehlo.{kind}"') == ops.get(kind, 0), (case, kind)
    assert "sdy.manual_computation" not in out and "sdy.sharding_constraint" not in out


def test_gspmd_input_is_converted_then_partitioned(ctx):
    out, _ = _run(ctx, "tp_mlp_gspmd.mlir")
    assert "mhlo.sharding" not in out
    assert 'sdy.mesh @mesh = <["axis_0"=8]>' in out


def test_no_shardings_passthrough(ctx):
    text = """module @m {
  func.func @main(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
  func.func private @unused(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    return %arg0 : tensor<4xf32>
  }
}"""
    module = load_module(ctx, text, "in.mlir")
    before = print_module(module)
    session = PassSession(DiagnosticEngine("in.mlir"))
    get_pass("propagate-shardings").run(module, {"per-device": True, "extra": {}}, session)
    assert print_module(module) == before
    assert not session.diagnostics.diagnostics


def test_gspmd_manual_region_becomes_a_manual_computation(ctx):
    """issue 10: GSPMD shard_map exports (@SPMDFullToShardShape / @SPMDShardToFullShape
    {manual}) are converted to sdy.manual_computation; the psum inside stays the one
    collective."""
    out, session = _run(ctx, "shard_map_gspmd.mlir")
    assert not session.diagnostics.has_errors
    assert "SPMDFullToShardShape" not in out and "SPMDShardToFullShape" not in out
    assert out.count('"stablehlo.all_reduce"') == 1
    assert "sdy.manual_computation" not in out  # inlined by the global-to-local conversion
    assert "%arg0: tensor<8x16xf32>" in out  # the per-device shard of the 64x16 input


def test_num_partitions_added_when_missing(ctx):
    text = """module @m {
  sdy.mesh @mesh = <["x"=4]>
  func.func @main(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    return %arg0 : tensor<8x4xf32>
  }
}"""
    out, _ = _run(ctx, text)
    assert "mhlo.num_partitions = 4 : i32" in out and "mhlo.num_replicas = 1 : i32" in out
    assert '"stablehlo.all_gather"' in out and "tensor<2x4xf32>" in out


def test_cli_then_annotate_cost(tmp_path):
    """The documented workflow through the driver, in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "costmodel.driver", os.path.join(DATA, "tp_mlp.mlir"), "--propagate-shardings", "--annotate-cost"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "costmodel.cost" in proc.stdout and "tensor<32x16xf32>" in proc.stdout


def test_cli_bad_gspmd_string_has_location(tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text(
        'module attributes {mhlo.num_partitions = 8 : i32} {\n'
        '  func.func @main(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[4]}"}) -> tensor<8xf32> {\n'
        "    return %arg0 : tensor<8xf32>\n"
        "  }\n"
        "}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "costmodel.driver", str(src), "--propagate-shardings"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert f"{src}:2:3: error: bad sharding '{{devices=[8]<=[4]}}': iota over 4 devices" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_call_graph_and_while(ctx):
    out, session = _run(ctx, "call_while.mlir")
    assert not session.diagnostics.has_errors
    # calls are inlined before Shardy runs (as XLA does), and the callee dropped
    assert "call @mm" not in out and "func.func private @mm" not in out
    assert "stablehlo.while" in out
    assert out.count('"stablehlo.all_reduce"') == 1  # the callee's collective, now inline


def test_recursive_private_call_is_a_clear_error(ctx):
    text = """
module attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func private @f(%a: tensor<8xf32>) -> tensor<8xf32> {
    %0 = func.call @f(%a) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}) -> tensor<8xf32> {
    %0 = func.call @f(%a) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""
    module = load_module(ctx, text, "rec.mlir")
    session = PassSession(DiagnosticEngine("rec.mlir"))
    info = get_pass("propagate-shardings")
    with pytest.raises(PassError):
        info.run(module, parse_options(info, ""), session)
    errors = [d.message for d in session.diagnostics.diagnostics if d.severity == "error"]
    assert errors == ["propagate-shardings: recursive call to @f: a recursive program cannot be partitioned"]


def test_layer_norm_chlo_square_is_partitioned(ctx):
    # issue 10: "failed to legalize operation 'chlo.square'" in Shardy's global-to-local;
    # CHLO is expanded first. Row-parallel matmul: one all-reduce of the 16x64 f32 output.
    out, session = _run(ctx, "tp_layernorm.mlir")
    assert not session.diagnostics.has_errors
    assert "chlo." not in out
    assert out.count('"stablehlo.all_reduce"') == 1
    assert "(tensor<16x64xf32>) -> tensor<16x64xf32>" in out  # 16 * 64 * 4 bytes reduced


def test_fori_loop_under_tensor_parallelism_is_partitioned(ctx):
    # issue 10: "expect operands to be compatible with condition block arguments": Shardy
    # leaves the loop's block arguments global; we give them the operands' local types.
    out, session = _run(ctx, "fori_tp.mlir")
    assert not session.diagnostics.has_errors
    assert "stablehlo.while" in out
    # the row-parallel matmul's all-reduce, in the body, on the local 32x128 f32 block
    assert out.count('"stablehlo.all_reduce"') == 1
    assert "(tensor<32x128xf32>) -> tensor<32x128xf32>" in out


def _collective_operands(module, kind: str) -> list[str]:
    from costmodel.ir import walk_ops

    return [str(op.operands[0].type) for op in walk_ops(module) if op.name == f"stablehlo.{kind}"]


def test_fsdp_gradients_become_reduce_scatters(ctx):
    """issue 10: an all_reduce whose every user keeps 1/n of it (FSDP gradients) is a
    reduce_scatter on GPU/TPU, with the same operand bytes as the all_reduce it replaces."""
    path = os.path.join(DATA, "fsdp_train.mlir")
    with open(path) as fh:
        text = fh.read()
    outs = {}
    for rs in (True, False):
        module = load_module(ctx, text, "fsdp_train.mlir")
        session = PassSession(DiagnosticEngine("fsdp_train.mlir"))
        info = get_pass("propagate-shardings")
        info.run(module, parse_options(info, f"reduce-scatter={'true' if rs else 'false'}"), session)
        assert not session.diagnostics.has_errors
        module.verify()
        outs[rs] = module
    with_rs, without = outs[True], outs[False]
    rs_ops = _collective_operands(with_rs, "reduce_scatter")
    n_ar_with, n_ar_without = len(_collective_operands(with_rs, "all_reduce")), len(_collective_operands(without, "all_reduce"))
    assert len(rs_ops) == n_ar_without - n_ar_with > 0
    # as XLA partitions it: x^T @ g summed over the batch-sharded contraction, each
    # device keeping 512 / 8 columns of the 256x512 product before the transpose
    assert rs_ops == ["tensor<256x512xf32>"]
    assert "scatter_dimension = 1" in str(with_rs) and "-> tensor<256x64xf32>" in str(with_rs)
    # the same operands (so the same bytes) as the all_reduces they replace
    assert sorted(rs_ops) == sorted(_collective_operands(without, "all_reduce"))


def test_reduce_scatter_through_a_transpose(ctx):
    """A weight gradient all-reduced in the dot's dimension order, transposed to the
    parameter's layout, then sliced 1/n (every FSDP gradient of the LLaMA exporter):
    a reduce_scatter along the permuted dimension, then the transpose of the slice."""
    from costmodel.ir import walk_ops
    from costmodel.passes.propagate_shardings import form_reduce_scatters

    text = """
func.func @main(%x: tensor<16x8xf32>, %i: tensor<i32>, %z: tensor<i32>) -> tensor<8x4xf32> {
  %ar = "stablehlo.all_reduce"(%x) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
      replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<16x8xf32>) -> tensor<16x8xf32>
  %t = stablehlo.transpose %ar, dims = [1, 0] : (tensor<16x8xf32>) -> tensor<8x16xf32>
  %d = stablehlo.dynamic_slice %t, %z, %i, sizes = [8, 4] : (tensor<8x16xf32>, tensor<i32>, tensor<i32>) -> tensor<8x4xf32>
  return %d : tensor<8x4xf32>
}"""
    module = load_module(ctx, text, "rs_transpose.mlir")
    with ctx:
        assert form_reduce_scatters(module) == 1
    module.verify()
    ops = {op.name: op for op in walk_ops(module)}
    assert "stablehlo.all_reduce" not in ops and "stablehlo.dynamic_slice" not in ops
    rs = ops["stablehlo.reduce_scatter"]
    assert str(rs.operands[0].type) == "tensor<16x8xf32>"  # the all_reduce's operand: the same bytes
    assert str(rs.results[0].type) == "tensor<4x8xf32>"  # 16 / 4 along dim perm[1] = 0
    assert "scatter_dimension = 0" in str(rs)
    assert str(ops["stablehlo.transpose"].results[0].type) == "tensor<8x4xf32>"

    # a transpose with another user is not looked through
    shared = text.replace("return %d : tensor<8x4xf32>", "return %d, %t : tensor<8x4xf32>, tensor<8x16xf32>").replace(
        "-> tensor<8x4xf32> {", "-> (tensor<8x4xf32>, tensor<8x16xf32>) {"
    )
    module = load_module(ctx, shared, "rs_transpose_shared.mlir")
    with ctx:
        assert form_reduce_scatters(module) == 0


def _kinds(out: str) -> dict:
    kinds = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute")
    return {k: out.count(f'"stablehlo.{k}"') for k in kinds if out.count(f'"stablehlo.{k}"')}


def test_scan_fsdp_training_step(ctx):
    """issue 10: lax.scan over 3 stacked layers, FSDP on the 2x4 mesh, training step. The
    forward and backward scans each all-gather both weights (4 x 8-row shards of 32 and 64
    rows, per layer) and the backward all-reduces both weight gradients (as XLA does; the
    oracle test compares with it)."""
    out, session = _run(ctx, "scan_fsdp.mlir")
    assert not session.diagnostics.has_errors
    assert out.count("stablehlo.while") == 2
    assert _kinds(out) == {"all_gather": 4, "reduce_scatter": 2}  # the gradients' all-reduces, each kept 1/8


def test_scan_over_layer_sharded_stack(ctx):
    """issue 10: the stacked parameters sharded on the layer axis: before, the body's
    collectives computed their local types from the global block arguments
    ('stablehlo.all_to_all' op inferred type(s) 'tensor<8x4x64xf32>' are incompatible with
    return type(s) of operation 'tensor<64x4x64xf32>'). Each device all-gathers the stacks
    (1x32x64 -> 8x32x64, as XLA)."""
    out, session = _run(ctx, "scan_layer_sharded.mlir")
    assert not session.diagnostics.has_errors
    assert _kinds(out) == {"all_gather": 2}
    assert "(tensor<1x32x64xf32>) -> tensor<8x32x64xf32>" in out and "(tensor<1x64x32xf32>) -> tensor<8x64x32xf32>" in out


def test_gspmd_shard_map_over_both_axes(ctx):
    out, session = _run(ctx, "shard_map_full_gspmd.mlir")
    assert not session.diagnostics.has_errors
    assert _kinds(out) == {"all_reduce": 1, "collective_permute": 1, "all_gather": 1}


def test_adamw_with_donation_keeps_aliasing(ctx):
    out, session = _run(ctx, "adamw_fsdp_donated.mlir")
    assert not session.diagnostics.has_errors
    assert out.count("tf.aliasing_output") == 6  # parameters and both moments, 2 arrays each
    assert _kinds(out) == {"all_gather": 1, "all_reduce": 1}  # as XLA (tests/test_spmd_oracle.py)


def _hybrid(offsets: str, other_groups: str) -> str:
    """A per-device gradient step on 8 partitions: an all-reduce over all 8 devices whose
    one user keeps a quarter (dynamic_slice at a partition_id-indexed offset), and another
    all-reduce over `other_groups` (XLA's splitter only splits when such groups exist)."""
    body = """({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      })"""
    return f"""
module attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func @main(%g: tensor<64x32xf32>, %n: tensor<f32>) -> (tensor<16x32xf32>, tensor<f32>) {{
    %r = "stablehlo.all_reduce"(%g) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, use_global_device_ids}}> {body} : (tensor<64x32xf32>) -> tensor<64x32xf32>
    %table = stablehlo.constant dense<{offsets}> : tensor<8xi64>
    %pid = stablehlo.partition_id : tensor<ui32>
    %i = stablehlo.convert %pid : (tensor<ui32>) -> tensor<i64>
    %o1 = stablehlo.dynamic_slice %table, %i, sizes = [1] : (tensor<8xi64>, tensor<i64>) -> tensor<1xi64>
    %o = stablehlo.reshape %o1 : (tensor<1xi64>) -> tensor<i64>
    %zero = stablehlo.constant dense<0> : tensor<i64>
    %q = stablehlo.dynamic_slice %r, %o, %zero, sizes = [16, 32] : (tensor<64x32xf32>, tensor<i64>, tensor<i64>) -> tensor<16x32xf32>
    %m = "stablehlo.all_reduce"(%n) <{{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<{other_groups}> : tensor<2x4xi64>, use_global_device_ids}}> {body} : (tensor<f32>) -> tensor<f32>
    return %q, %m : tensor<16x32xf32>, tensor<f32>
  }}
}}
"""


def _collective_groups(module):
    from costmodel.ir import ir, walk_ops

    out = []
    for op in walk_ops(module):
        if op.name in ("stablehlo.all_reduce", "stablehlo.reduce_scatter"):
            out.append((op.name.split(".")[1], str(op.operands[0].type), str(ir.DenseIntElementsAttr(op.attributes["replica_groups"]))))
    return out


def test_hybrid_all_reduce_is_split_as_xla_gpu_splits_it(ctx):
    """AllReduceSplitter + ReduceScatterCreator: device d keeps quarter d mod 4 of a sum
    over all 8 devices -> a reduce-scatter over {0..3},{4..7}, then an all-reduce of the
    quarter over {0,4},{1,5},{2,6},{3,7}."""
    from passes.propagate_shardings import form_reduce_scatters, split_all_reduces

    module = load_module(ctx, _hybrid("[0, 16, 32, 48, 0, 16, 32, 48]", "[[0, 1, 2, 3], [4, 5, 6, 7]]"), "h.mlir")
    with ctx:
        assert split_all_reduces(module, 8) == 1
        assert form_reduce_scatters(module) == 1
    module.verify()
    got = _collective_groups(module)
    assert ("reduce_scatter", "tensor<64x32xf32>", "dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>") in got
    assert ("all_reduce", "tensor<16x32xf32>", "dense<[[0, 4], [1, 5], [2, 6], [3, 7]]> : tensor<4x2xi64>") in got
    assert not any(g.startswith("dense<[[0, 1, 2, 3, 4, 5, 6, 7]]>") for _, _, g in got)


@pytest.mark.parametrize(
    "offsets, other, why",
    [
        ("[0, 0, 16, 16, 32, 32, 48, 48]", "[[0, 1, 2, 3], [4, 5, 6, 7]]", "slices not at d mod 4: no logical reduce-scatter"),
        ("[0, 16, 32, 48, 0, 16, 32, 48]", "[[0, 2, 4, 6], [1, 3, 5, 7]]", "no all-reduce over either group set: not profitable"),
    ],
)
def test_hybrid_all_reduce_is_left_alone_when_xla_would(ctx, offsets, other, why):
    from passes.propagate_shardings import split_all_reduces

    module = load_module(ctx, _hybrid(offsets, other), "h.mlir")
    with ctx:
        assert split_all_reduces(module, 8) == 0, why


def test_malformed_constants_of_shardy_are_replaced(ctx):
    """Cross-entropy of vocabulary-sharded logits (take_along_axis along the sharded
    dimension): Shardy's sdy-convert-global-to-local writes a constant whose data does not
    fit its type (one i64 for a tensor<i32>), and printing the module then crashed the
    process (SIGSEGV); another of the right size holds uninitialized memory. It is replaced by zeros of its type, with a warning; the module
    prints and parses back, and the gather's masked partial results are all-reduced over
    "model" as XLA's partitioner does (test_spmd_oracle.py compares all collectives)."""
    out, session = _run(ctx, "vocab_xent.mlir")
    warnings = [d.message for d in session.diagnostics.diagnostics if d.severity == "warning"]
    # one whose data does not fit its type, one of the right size holding its bound and
    # then uninitialized memory (the output differed from run to run)
    assert any("wrote 2 malformed constant(s)" in w and "replaced by zeros of their type" in w for w in warnings), warnings
    assert _run(ctx, "vocab_xent.mlir")[0] == out  # deterministic
    assert not session.diagnostics.has_errors
    load_module(ctx, out, "reparsed.mlir").verify()
    assert _kinds(out) == {"all_reduce": 4}
    assert "%arg0: tensor<4x16x128xf32>" in out  # the logits' local shard


def test_malformed_constant_check_reads_in_forked_children(ctx):
    """Reading a malformed constant can crash the reader: _readable runs it in forked
    children and marks the one whose reading killed the child, then goes on with the next."""
    import passes.propagate_shardings as ps

    module = load_module(
        ctx,
        "func.func @f() -> (tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) {\n"
        "  %a = stablehlo.constant dense<1> : tensor<2xi32>\n"
        "  %b = stablehlo.constant dense<[1, 2]> : tensor<2xi32>\n"
        "  %c = stablehlo.constant dense<3> : tensor<2xi32>\n"
        "  return %a, %b, %c : tensor<2xi32>, tensor<2xi32>, tensor<2xi32>\n"
        "}\n",
        "c.mlir",
    )
    ops = [op for op in ps.walk_ops(module) if op.name == "stablehlo.constant"]
    assert ps._readable(ops, ctx) == [True, True, True]

    class Crashing:  # an op whose value attribute kills whoever prints it
        class attributes:  # noqa: N801
            def __getitem__(self, key):
                os.abort()

        attributes = attributes()

    assert ps._readable([ops[0], Crashing(), ops[2]], ctx) == [True, False, True]


def _conv_module(x: str, w: str, k: int, pad: tuple[int, int], h: int = 64) -> str:
    """A bf16 convolution on the 2x4 mesh (device = 4 * dp + tp): input 8 x h x 64 x 32
    (NHWC) sharded as `x`, kernel k x k x 32 x 32 sharded as `w`, stride 1, padding `pad`
    along H and (k - 1) // 2 on both sides along W."""
    pw = (k - 1) // 2
    ho, wo = h + sum(pad) - k + 1, 64 + 2 * pw - k + 1
    return f"""
module @conv attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["dp"=2, "tp"=4]>
  func.func public @main(%x: tensor<8x{h}x64x32xbf16> {{sdy.sharding = #sdy.sharding<@mesh, [{x}]>}}, %w: tensor<{k}x{k}x32x32xbf16> {{sdy.sharding = #sdy.sharding<@mesh, [{w}]>}}) -> tensor<8x{ho}x{wo}x32xbf16> {{
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {{stride = [1, 1], pad = [[{pad[0]}, {pad[1]}], [{pw}, {pw}]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : (tensor<8x{h}x64x32xbf16>, tensor<{k}x{k}x32x32xbf16>) -> tensor<8x{ho}x{wo}x32xbf16>
    return %0 : tensor<8x{ho}x{wo}x32xbf16>
  }}
}}
"""


_REPLICATED = "{}, {}, {}, {}"

# A convolution whose input is sharded along its window and whose halo exchange the pass
# does not reproduce: its kernel is sharded on the output features over "dp" (XLA
# all-gathers the kernel and moves whole shards). Formatted with the input's sharding
# `x`, the kernel size `k` and padding `p`; tests/test_predict.py uses it too.
CONV = """
module @conv attributes {{mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["dp"=2, "tp"=4]>
  func.func public @main(%x: tensor<8x64x64x32xbf16> {{sdy.sharding = #sdy.sharding<@mesh, [{x}]>}}, %w: tensor<{k}x{k}x32x32xbf16> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}, {{}}, {{"dp"}}]>}}) -> tensor<8x64x64x32xbf16> {{
    %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {{stride = [1, 1], pad = [[{p}, {p}], [{p}, {p}]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : (tensor<8x64x64x32xbf16>, tensor<{k}x{k}x32x32xbf16>) -> tensor<8x64x64x32xbf16>
    return %0 : tensor<8x64x64x32xbf16>
  }}
}}
"""


def _ops(module, name: str) -> list:
    from costmodel.ir import walk_ops

    return [op for op in walk_ops(module) if op.name == name]


def _run_module(ctx, text: str, per_device: bool = True):
    module = load_module(ctx, text, "conv.mlir")
    session = PassSession(DiagnosticEngine("conv.mlir"))
    get_pass("propagate-shardings").run(module, {"per-device": per_device, "extra": {}}, session)
    module.verify()
    return module, session


def _permutes(module) -> list[tuple[str, list]]:
    """(operand type, source_target_pairs) of every collective_permute, in program order."""
    import numpy as np

    from costmodel.ir import ir

    return [
        (str(op.operands[0].type), np.array(ir.DenseIntElementsAttr(op.attributes["source_target_pairs"])).reshape(-1, 2).tolist())
        for op in _ops(module, "stablehlo.collective_permute")
    ]


def _conv_flops(op) -> int:
    from costmodel.rules import convolution_rule

    return convolution_rule(op, None).flops


TP_LEFT = [[0, 1], [1, 2], [2, 3], [4, 5], [5, 6], [6, 7]]  # from the shard before, over "tp"
TP_RIGHT = [[1, 0], [2, 1], [3, 2], [5, 4], [6, 5], [7, 6]]  # from the shard after
DP_LEFT, DP_RIGHT = [[0, 4], [1, 5], [2, 6], [3, 7]], [[4, 0], [5, 1], [6, 2], [7, 3]]


@pytest.mark.parametrize(
    "x, k, permutes, conv_in, pad, conv_out",
    [
        # H over "tp" (4 shards of 16 rows), W over "dp" (2 of 32): one row from each
        # neighbour along H, then along W on the H-extended block (its corners), as XLA
        (
            '{}, {"tp"}, {"dp"}, {}',
            3,
            [("8x1x32x32", TP_LEFT), ("8x1x32x32", TP_RIGHT), ("8x18x1x32", DP_LEFT), ("8x18x1x32", DP_RIGHT)],
            "8x18x34x32",
            [[0, 0], [0, 0]],
            "8x16x32x32",
        ),
        # batch over "dp", H over "tp": the exchange within each "tp" group
        (
            '{"dp"}, {"tp"}, {}, {}',
            3,
            [("4x1x64x32", TP_LEFT), ("4x1x64x32", TP_RIGHT)],
            "4x18x64x32",
            [[0, 0], [1, 1]],
            "4x16x64x32",
        ),
        # a 7x7 window: three rows from each neighbour
        (
            '{}, {"tp"}, {}, {}',
            7,
            [("8x3x64x32", TP_LEFT), ("8x3x64x32", TP_RIGHT)],
            "8x22x64x32",
            [[0, 0], [3, 3]],
            "8x16x64x32",
        ),
        ('{"dp", "tp"}, {}, {}, {}', 3, [], "1x64x64x32", [[1, 1], [1, 1]], "1x64x64x32"),  # data parallel: no halo
        ('{}, {"tp"}, {}, {}', 1, [], "8x16x64x32", [[0, 0], [0, 0]], "8x16x64x32"),  # a 1x1 window reads no neighbour
    ],
)
def test_spatially_sharded_convolution_exchanges_halos(ctx, x, k, permutes, conv_in, pad, conv_out):
    """XLA's partitioner exchanges halos (collective-permutes over the devices of the
    sharding axis) for a convolution whose input is sharded along a dimension its window
    spans, concatenates them onto the local input and convolves it unpadded there; the
    per-device program now does the same: the local convolution keeps the output shape
    Shardy gave it and does its shard's share of the global work (a little more: the
    zero rows an edge shard receives count as data, as in XLA's local convolution;
    tests/test_spmd_oracle.py compares these collectives and flops with XLA's)."""
    import numpy as np

    from costmodel.ir import ir

    text = _conv_module(x, _REPLICATED, k, ((k - 1) // 2,) * 2)
    global_module = load_module(ctx, text, "g.mlir")  # (kept alive while its ops are read)
    global_flops = _conv_flops(_ops(global_module, "stablehlo.convolution")[0])
    module, session = _run_module(ctx, text)
    assert [d.message for d in session.diagnostics.diagnostics] == []
    assert _permutes(module) == [(f"tensor<{t}xbf16>", pairs) for t, pairs in permutes]
    handles = [str(op.attributes["channel_handle"]) for op in _ops(module, "stablehlo.collective_permute")]
    assert len(set(handles)) == len(handles) and all("type = 1" in h for h in handles)
    (conv,) = _ops(module, "stablehlo.convolution")
    assert str(conv.operands[0].type) == f"tensor<{conv_in}xbf16>"
    assert np.array(ir.DenseIntElementsAttr(conv.attributes["padding"])).reshape(2, 2).tolist() == pad
    assert str(conv.results[0].type) == f"tensor<{conv_out}xbf16>"  # the shape Shardy made
    local = _conv_flops(conv)
    shards = (2 if '"dp"' in x else 1) * (4 if '"tp"' in x else 1)  # devices with different data
    assert global_flops / shards <= local <= global_flops / shards * 1.05, (local, global_flops / shards)
    assert print_module(_run_module(ctx, text)[0]) == print_module(module)  # deterministic


def test_convolution_with_uneven_output_is_partitioned_as_xla(ctx):
    """A 3x3 convolution unpadded (VALID) along H, 64 rows over the 4 "tp" shards: 62
    output rows, padded to 64 (16 per shard). sdy-pad-for-divisibility left a convolution
    that did not verify ("inferred shape ... incompatible with return type"), and the
    pass failed. Each shard
    now takes two rows from the next one (XLA: one collective-permute of 2 rows, as
    tests/test_spmd_oracle.py's h4_k3_valid checks) and convolves its 18 rows unpadded."""
    module, session = _run_module(ctx, _conv_module('{}, {"tp"}, {}, {}', _REPLICATED, 3, (0, 0)))
    assert not session.diagnostics.has_errors
    assert _permutes(module) == [("tensor<8x2x64x32xbf16>", TP_RIGHT)]
    (conv,) = _ops(module, "stablehlo.convolution")
    assert str(conv.operands[0].type) == "tensor<8x18x64x32xbf16>"
    assert str(conv.results[0].type) == "tensor<8x16x64x32xbf16>"  # (W: padded 1, 1)


@pytest.mark.parametrize(
    "text, what, why",
    [
        # tests/test_predict.py's case: the kernel sharded on its output features
        (CONV.format(x='{}, {"tp"}, {}, {}', k=3, p=1), "spatial dimension 0 on tp", "its kernel is sharded"),
        # 8 rows over 4 shards, a 7x7 window: 3 rows from each side, more than a shard
        # holds; XLA all-gathers the dimension instead
        (
            _conv_module('{}, {"tp"}, {}, {}', _REPLICATED, 7, (3, 3), h=8),
            "spatial dimension 0 on tp",
            "its halo is wider than the neighbouring shards",
        ),
    ],
)
def test_unsupported_halo_exchange_is_said(ctx, text, what, why):
    """Where XLA's partitioner does not exchange halos the way the pass reproduces, the
    convolution keeps Shardy's form and a warning says that the per-device program lacks
    the communication, and why."""
    module, session = _run_module(ctx, text)
    msgs = [d.message for d in session.diagnostics.diagnostics if "sharded along its window" in d.message]
    assert len(msgs) == 1 and f"({what})" in msgs[0] and why in msgs[0] and "lacks that communication" in msgs[0]
    assert _permutes(module) == []


def test_global_program_says_halos_are_added_per_device_only(ctx):
    """per-device=false keeps global shapes (no halo can be written there): a warning says
    the collective-permutes of the halo exchange are in the per-device program only."""
    module, session = _run_module(ctx, _conv_module('{}, {"tp"}, {"dp"}, {}', _REPLICATED, 3, (1, 1)), per_device=False)
    msgs = [d.message for d in session.diagnostics.diagnostics]
    assert len(msgs) == 1 and "the 4 collective-permute(s)" in msgs[0] and "per-device program only" in msgs[0]
    assert _permutes(module) == []


def test_reductions_over_a_sharded_dimension_are_partitioned_as_xla(ctx):
    """Shardy ends a reduction over a sharded dimension with an add all-reduce: a max was
    summed, and an argmax's values and indices were summed apart. A max all-reduces with
    a max; an argmax all-gathers the partial values and indices (4 per device, 4 devices
    of "model") and reduces them again, as XLA's partitioner does (test_spmd_oracle.py
    compares the collectives with XLA's)."""
    out, session = _run(ctx, "max_vocab.mlir")
    assert not session.diagnostics.has_errors
    assert _kinds(out) == {"all_reduce": 1}
    reducer = out[out.index('"stablehlo.all_reduce"'):].split("stablehlo.return")[0]
    assert "stablehlo.maximum" in reducer and "stablehlo.add" not in reducer

    out, session = _run(ctx, "argmax_vocab.mlir")
    assert not session.diagnostics.has_errors
    assert _kinds(out) == {"all_gather": 2}
    assert out.count("stablehlo.reduce(") == 2  # the local argmax, then the one over the gathered partials
    assert "-> tensor<4x4xf32>" in out and "-> tensor<4x4xi32>" in out


@pytest.mark.parametrize("case, gathered", [("topk_vocab.mlir", "(tensor<8x64xf32>) -> tensor<8x512xf32>"),
                                            ("cumsum_vocab.mlir", "(tensor<4x128xf32>) -> tensor<4x512xf32>")])
def test_a_sort_or_scan_along_a_sharded_dimension_gathers_it(ctx, case, gathered):
    """top_k (a sort) and cumsum (a window spanning the dimension) along the sharded
    vocabulary: Shardy's conversion aborted (a CHECK failure) or could not legalize the
    slice. The dimension is all-gathered first, as XLA does (one all-gather;
    test_spmd_oracle.py compares it with XLA's), the iota of sort's indices made whole on
    each device, top_k's slice kept replicated."""
    out, session = _run(ctx, case)
    assert not session.diagnostics.has_errors
    assert _kinds(out) == {"all_gather": 1}
    assert gathered in out


def test_a_users_own_all_reduce_of_a_reduction_is_left_as_written(ctx):
    """shard_map code that sums each device's max (psum of a local max) keeps its add:
    only the all-reduces Shardy makes for a reduction over a sharded dimension take the
    reduction's operation (xla_spmd.mark_shardy_reductions)."""
    text = """
module @psum_of_max attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> tensor<f32> {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, []>] manual_axes={"x"} (%a: tensor<2x16xf32>) {
      %init = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %m = stablehlo.reduce(%a init: %init) applies stablehlo.maximum across dimensions = [0, 1] : (tensor<2x16xf32>, tensor<f32>) -> tensor<f32>
      %s = "stablehlo.all_reduce"(%m) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%p: tensor<f32>, %q: tensor<f32>):
        %t = stablehlo.add %p, %q : tensor<f32>
        stablehlo.return %t : tensor<f32>
      }) : (tensor<f32>) -> tensor<f32>
      sdy.return %s : tensor<f32>
    } : (tensor<8x16xf32>) -> tensor<f32>
    return %0 : tensor<f32>
  }
}
"""
    out, session = _run(ctx, text)
    assert not session.diagnostics.has_errors
    reducer = out[out.index('"stablehlo.all_reduce"'):].split("stablehlo.return")[0]
    assert "stablehlo.add" in reducer and "stablehlo.maximum" not in reducer
    assert "costmodel.shardy_reduced" not in out


def test_global_program_with_shardy_collectives_is_not_costed_as_one_device(tmp_path, capsys):
    """propagate-shardings per-device=false writes global shapes with Shardy's collectives.
    It was taken for a per-device program (8x the flops on 8 devices, `predict` said
    "per-device"), and partitioning it again ran its all-reduce twice. Now: partitioning
    it again, a trace of it, and predict are one-line errors naming the fix; annotating
    its collectives (extract-collectives chakra=false) still works."""
    from costmodel.cli import main as cli_main
    from costmodel.driver import main as opt_main

    g = tmp_path / "global.mlir"
    assert opt_main([os.path.join(DATA, "tp_mlp.mlir"), "--propagate-shardings=per-device=false", "-o", str(g)]) == 0
    assert "sdy.all_reduce" in g.read_text()
    capsys.readouterr()
    assert opt_main([str(g), "--propagate-shardings", "-o", str(tmp_path / "again.mlir")]) == 1
    assert "holds Shardy's collectives on global shapes ('sdy.all_reduce'" in capsys.readouterr().err
    assert opt_main([str(g), "--extract-collectives=system=dgx-h100", f"--export-chakra=chakra-dir={tmp_path}/t"]) == 1
    err = capsys.readouterr().err
    assert "its shapes are global" in err and "per-device=true" in err and not (tmp_path / "t").exists()
    assert opt_main([str(g), "--extract-collectives=system=dgx-h100 chakra=false", "-o", str(tmp_path / "c.mlir")]) == 0
    assert "costmodel.collective" in (tmp_path / "c.mlir").read_text()
    capsys.readouterr()
    assert cli_main(["predict", str(g), "--system", "dgx-h100"]) == 1
    assert "holds Shardy's collectives on global shapes" in capsys.readouterr().err


# Convolutions sharded along their window where XLA's partitioner gathers the dimension
# instead of exchanging halos (cases of an adversarial audit; tests/test_spmd_oracle.py
# compares them with XLA's partitioner): (file, collectives of the per-device program,
# local convolutions (input type, output type)).
GATHERED_CONVOLUTIONS = [
    # feature_group_count = 2 (not depthwise): XLA all-gathers H and convolves whole,
    # then slices each shard's rows of the output (before: 2 collective-permutes and a
    # quarter of the flops, silently)
    ("conv_h4_groups2.mlir", {"all_gather": 1},
     [("tensor<8x32x32x8xf32>", "tensor<8x32x32x16xf32>")]),
    # 1-row shards, a 7x7 window of stride 2, 4 output rows (fewer than the window): XLA
    # all-gathers the 8 rows and convolves whole (before: Shardy sharded the kernel along
    # the window: 6 collective-permutes and an all-reduce of the output)
    ("conv_h8_1row_k7_s2.mlir", {"all_gather": 1},
     [("tensor<8x8x32x8xf32>", "tensor<8x4x16x16xf32>")]),
    # a 23-row window (10 outputs) over 8-row shards, then a SAME 3x3 of the 10 rows
    # (3 per shard, padded to 12): the first gathered and each shard's 25 window rows cut
    # from it (XLA's windowed input of a replicated operand), the second exchanges halos
    ("conv_h4_uneven10_k3.mlir", {"all_gather": 2, "collective_permute": 2},
     [("tensor<8x25x32x8xf32>", "tensor<8x3x32x8xf32>"), ("tensor<8x5x32x8xf32>", "tensor<8x3x32x8xf32>")]),
    ("conv_h4_uneven6_k3.mlir", {"all_gather": 2, "collective_permute": 2},
     [("tensor<8x28x32x8xf32>", "tensor<8x2x32x8xf32>"), ("tensor<8x4x32x8xf32>", "tensor<8x2x32x8xf32>")]),
    # 1-row shards of a 5x5 SAME convolution: gathered, each shard's 5 window rows cut
    # (before: an internal "inferred shape ... incompatible" error of the conversion)
    ("conv_h4_kernel_over_input.mlir", {"all_gather": 2},
     [("tensor<8x29x32x8xf32>", "tensor<8x1x32x8xf32>"), ("tensor<8x5x32x8xf32>", "tensor<8x1x32x8xf32>")]),
]


@pytest.mark.parametrize("name, kinds, convs", GATHERED_CONVOLUTIONS)
def test_convolution_gathered_where_xla_gathers(ctx, name, kinds, convs):
    """Where XLA's partitioner gathers the sharded spatial dimension of a convolution's
    input (feature groups that are not depthwise; a window larger than the output, which
    Shardy's rule would shard the replicated kernel for), the pass gathers it too: no
    warning, XLA's collectives and XLA's local convolutions."""
    with open(os.path.join(DATA, name)) as fh:
        module, session = _run_module(ctx, fh.read())
    assert session.diagnostics.diagnostics == []
    found = {}
    for kind in ("all_gather", "all_reduce", "collective_permute", "all_to_all", "reduce_scatter"):
        n = len(_ops(module, f"stablehlo.{kind}"))
        if n:
            found[kind] = n
    assert found == kinds
    got = sorted((str(op.operands[0].type), str(op.results[0].type)) for op in _ops(module, "stablehlo.convolution"))
    assert got == sorted(convs)


def test_convolution_gathered_window_global_program_says_per_device_only(ctx):
    """per-device=false: the window slices of a gathered convolution input are said to be
    added to the per-device program only (no collective-permute count of 0)."""
    with open(os.path.join(DATA, "conv_h4_kernel_over_input.mlir")) as fh:
        module, session = _run_module(ctx, fh.read(), per_device=False)
    msgs = [d.message for d in session.diagnostics.diagnostics]
    assert len(msgs) == 2 and all("slices of each shard's window rows" in m for m in msgs), msgs
    assert len(_ops(module, "sdy.all_gather")) == 2 and not _ops(module, "sdy.all_slice")
    assert "costmodel.conv_gathered_window" not in str(module)


def test_unsupported_sharded_convolution_is_one_clear_error(ctx):
    """5 rows over 4 shards, then a VALID 3x3: 3 output rows over 4 shards. XLA trims the
    shards (collective-permutes among 3 of the devices), which is not reproduced; Shardy's
    per-device convolution cannot produce its shard. Before: an internal "inferred shape
    ... incompatible with return type" from sdy-pad-for-divisibility; now one error at the
    convolution naming the dimension, its sharding and the reason."""
    with open(os.path.join(DATA, "conv_h4_uneven5_fewer_outputs.mlir")) as fh:
        module = load_module(ctx, fh.read(), "conv_h4_uneven5_fewer_outputs.mlir")
    session = PassSession(DiagnosticEngine("conv_h4_uneven5_fewer_outputs.mlir"))
    with pytest.raises(PassError):
        get_pass("propagate-shardings").run(module, {"per-device": True, "extra": {}}, session)
    diags = session.diagnostics.diagnostics
    assert len(diags) == 1 and diags[0].severity == "error"
    text = diags[0].render()
    assert "conv_h4_uneven5_fewer_outputs.mlir:6:" in text and "unsupported sharded convolution" in text
    assert "5 rows over 4 shards (x), 3 output rows over 4" in text and "fewer output rows than shards" in text
    assert "inferred shape" not in text


def test_a_module_xla_compiled_is_left_as_it_is(tmp_path, capsys):
    """XLA's optimized SPMD module (HLO text with fusions and shardings) is per device
    already: a warning, the module unchanged, not Shardy failing on mhlo.fusion."""
    from costmodel import driver

    hlo = tmp_path / "spmd.hlo"
    hlo.write_text(
        "HloModule m, num_partitions=2\n\n"
        "fused_computation {\n  p = f32[512,1024]{1,0} parameter(0)\n  ROOT e = f32[512,1024]{1,0} exponential(p)\n}\n\n"
        "ENTRY main {\n  x = f32[512,1024]{1,0} parameter(0), sharding={devices=[2,1]<=[2]}\n"
        "  ROOT f = f32[512,1024]{1,0} fusion(x), kind=kLoop, calls=fused_computation, sharding={devices=[2,1]<=[2]}\n}\n"
    )
    out = tmp_path / "o.mlir"
    assert driver.main([str(hlo), "--propagate-shardings", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "compiled by XLA (mhlo.fusion): XLA partitioned it already; left unchanged" in err
    text = out.read_text()
    assert "tensor<512x1024xf32>" in text and "mhlo.fusion" in text and "sdy." not in text
