"""costmodel.memory: per-device peak memory. Exact numbers on small hand-written
modules (the model's rules, docs/memory.md), then the validation against XLA's own
buffer assignment on the CPU: programs built with jax in-process
(benchmarks/memory_vs_xla.py), lowered to StableHLO text, compiled by XLA;
`memory_analysis()` gives XLA's footprint (arguments + outputs + temporaries - aliased)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

from costmodel.ir import InputError, load_module, make_context
from costmodel.memory import MemoryReport, peak_memory, render_report

ROOT = pathlib.Path(__file__).resolve().parents[1]


def analyse(text: str, **kw) -> MemoryReport:
    ctx = make_context()
    return peak_memory(load_module(ctx, text, "<test>"), **kw)


# ---------------------------------------------------------------------------
# the rules, on hand-written modules
# ---------------------------------------------------------------------------

CHAIN = """
func.func @main(%a: tensor<256xf32>) -> tensor<f32> {
  %0 = stablehlo.exponential %a : tensor<256xf32>
  %1 = stablehlo.multiply %0, %0 : tensor<256xf32>
  %cst = stablehlo.constant dense<0.0> : tensor<f32>
  %2 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<256xf32>, tensor<f32>) -> tensor<f32>
  return %2 : tensor<f32>
}
"""


def test_unfused_chain_and_in_place_elementwise():
    r = analyse(CHAIN, fusion="none")
    # argument 1024 + exp 1024 (the multiply writes over it: it dies there) + result 4
    assert r.peak_bytes == 1024 + 1024 + 4
    assert (r.argument_bytes, r.output_bytes, r.alias_bytes) == (1024, 4, 0)
    assert r.temp_peak_bytes == 1024
    assert r.peak_op == "stablehlo.reduce"
    assert r.constant_bytes == 4
    assert [b.name for b in r.top_temporaries] == ["stablehlo.exponential"]


MAXPOOL_GRAD = """
func.func @main(%x: tensor<2x8x8x4xf32>, %g: tensor<2x4x4x4xf32>) -> tensor<2x8x8x4xf32> {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = "stablehlo.select_and_scatter"(%x, %g, %zero) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %p = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  }, {
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>} : (tensor<2x8x8x4xf32>, tensor<2x4x4x4xf32>, tensor<f32>) -> tensor<2x8x8x4xf32>
  return %0 : tensor<2x8x8x4xf32>
}
"""


def test_select_and_scatter_expansion_of_xla_cpu():
    """Every op its own buffer (XLA CPU): select_and_scatter runs as XLA CPU's expander
    builds it: 4 s32 iotas of the operand's shape live with the reduce_window's outputs
    (the selected f32 value and 4 s32 indices per pooled element). GPU kernels: one
    kernel, no expansion."""
    x = 2 * 8 * 8 * 4  # operand elements
    g = 2 * 4 * 4 * 4  # pooled (source) elements
    args, result = 4 * x + 4 * g, 4 * x
    iotas = 4 * (4 * x)  # rank 4, s32
    reduce_window_out = g * (4 + 4 * 4)  # the value and 4 indices
    r = analyse(MAXPOOL_GRAD, fusion="none")
    assert r.peak_bytes == args + result + iotas + reduce_window_out
    assert r.temp_peak_bytes == iotas + reduce_window_out  # (the result is an output)
    assert r.peak_op == "stablehlo.select_and_scatter"
    assert any("expansion (XLA CPU)" in b.name and b.bytes == iotas + reduce_window_out for b in r.top_temporaries)
    assert analyse(MAXPOOL_GRAD, fusion="xla-gpu").peak_bytes == args + result


def test_fused_intermediates_allocate_nothing():
    r = analyse(CHAIN, fusion="xla-gpu")  # exp, multiply and reduce: one kernel
    assert r.peak_bytes == 1024 + 4
    assert r.temp_peak_bytes == 0
    assert r.fusion == "xla-gpu"


def test_a_transpose_folded_into_its_dot_is_the_dots_buffer():
    """JAX's weight gradient transpose(dot(dy, x)): xla-gpu forms the transpose as the
    GEMM's output layout, one buffer (XLA's dot writes it transposed); per op it is a copy
    of the dot's result."""
    from test_kernels_transposes import WGRAD  # x, dy: 256 x 4096 f32; the gradient 4096 x 4096

    args = 2 * 256 * 4096 * 4
    grad = 4096 * 4096 * 4
    assert analyse(WGRAD, fusion="xla-gpu").peak_bytes == args + grad
    assert analyse(WGRAD, fusion="none").peak_bytes == args + 2 * grad


def test_uses_the_modules_own_kernel_annotation():
    from conftest import run_annotate

    annotated = run_annotate(CHAIN, fusion="xla-gpu")
    r = peak_memory(annotated.module)
    assert r.fusion == "annotated:xla-gpu"
    assert r.peak_bytes == 1024 + 4
    # an annotation without kernels: we form them on a copy (the module is left alone)
    plain = run_annotate(CHAIN, fusion="none")
    r = peak_memory(plain.module)
    assert r.fusion == "xla-gpu" and r.peak_bytes == 1024 + 4
    assert "costmodel.kernel" not in str(plain.module)


def test_reshape_aliases_its_operand():
    r = analyse(
        """
func.func @main(%a: tensor<256xf32>) -> tensor<16x16xf32> {
  %0 = stablehlo.exponential %a : tensor<256xf32>
  %1 = stablehlo.reshape %0 : (tensor<256xf32>) -> tensor<16x16xf32>
  %2 = stablehlo.transpose %1, dims = [1, 0] : (tensor<16x16xf32>) -> tensor<16x16xf32>
  return %2 : tensor<16x16xf32>
}""",
        fusion="none",
    )
    assert r.peak_bytes == 3 * 1024  # argument, exp (= the reshape), transpose
    kinds = sorted((b.kind, b.name) for b in r.live_at_peak)
    assert kinds == [("argument", "%arg0"), ("output", "stablehlo.transpose"), ("temporary", "stablehlo.exponential")]


SGD = """
func.func @main(%p: tensor<1024xf32>{ATTR}, %g: tensor<1024xf32>) -> tensor<1024xf32> {
  %1 = stablehlo.subtract %p, %g : tensor<1024xf32>
  return %1 : tensor<1024xf32>
}
"""


@pytest.mark.parametrize(
    "attr,module_attr",
    [
        (" {tf.aliasing_output = 0 : i32}", ""),
        (" {jax.buffer_donor = true}", ""),
        (
            "",
            'attributes {mhlo.input_output_alias = [{alias = {kind = "may_alias", parameter_index = array<i64>, '
            "parameter_number = 0 : i64}, output_index = array<i64: 0>}]} ",
        ),
    ],
    ids=["tf.aliasing_output", "jax.buffer_donor", "mhlo.input_output_alias"],
)
def test_donated_argument_holds_its_output(attr, module_attr):
    text = f"module {module_attr}{{{SGD.replace('{ATTR}', attr)}}}"
    donated = analyse(text, fusion="none")
    plain = analyse(f"module {{{SGD.replace('{ATTR}', '')}}}", fusion="none")
    assert plain.peak_bytes == 3 * 4096 and plain.alias_bytes == 0
    assert donated.peak_bytes == 2 * 4096  # the update is written over %p
    assert donated.alias_bytes == 4096


def test_donated_argument_dies_at_its_last_read():
    r = analyse(
        """
func.func @main(%p: tensor<1024xf32> {tf.aliasing_output = 0 : i32}, %x: tensor<4096xf32>) -> tensor<1024xf32> {
  %0 = stablehlo.negate %p : tensor<1024xf32>
  %1 = stablehlo.exponential %x : tensor<4096xf32>
  %2 = stablehlo.slice %1 [0:1024] : (tensor<4096xf32>) -> tensor<1024xf32>
  %3 = stablehlo.add %0, %2 : tensor<1024xf32>
  return %3 : tensor<1024xf32>
}""",
        fusion="none",
        schedule="program",
    )
    # at the slice: %x 16384 + exp 16384 + negate 4096 + slice 4096; %p (read by the
    # negate only) is already free
    assert r.peak_bytes == 16384 + 16384 + 4096 + 4096


def test_returned_argument_is_copied_to_an_output():
    r = analyse(
        """
func.func @main(%a: tensor<1024xf32>) -> (tensor<1024xf32>, tensor<1024xf32>) {
  %0 = stablehlo.negate %a : tensor<1024xf32>
  return %a, %0 : tensor<1024xf32>, tensor<1024xf32>
}""",
        fusion="none",
    )
    assert r.peak_bytes == 3 * 4096
    assert r.output_bytes == 2 * 4096


LOOP = """
func.func @main(%x: tensor<64xf32>, %w: tensor<1024xf32>) -> tensor<64xf32> {
  %c = stablehlo.constant dense<0> : tensor<i32>
  %0:3 = stablehlo.while(%i = %c, %s = %x, %ww = %w) : tensor<i32>, tensor<64xf32>, tensor<1024xf32>
  cond {
    %n = stablehlo.constant dense<4> : tensor<i32>
    %p = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %one = stablehlo.constant dense<1> : tensor<i32>
    %i1 = stablehlo.add %i, %one : tensor<i32>
    %t = stablehlo.exponential %ww : tensor<1024xf32>
    %sl = stablehlo.slice %t [0:64] : (tensor<1024xf32>) -> tensor<64xf32>
    %s1 = stablehlo.add %s, %sl : tensor<64xf32>
    stablehlo.return %i1, %s1, %ww : tensor<i32>, tensor<64xf32>, tensor<1024xf32>
  }
  return %0#1 : tensor<64xf32>
}
"""


def assert_parts_add_up(r: MemoryReport) -> None:
    """What the report lists live at the peak adds up to the peak, and its temporaries at
    the peak are at most the temporaries' maximum."""
    assert sum(b.bytes for b in r.live_at_peak) == r.peak_bytes
    assert r.temp_at_peak_bytes <= r.temp_peak_bytes


def test_while_state_plus_body_peak_once():
    r = analyse(LOOP, fusion="none")
    # arguments 64*4 + 1024*4; the state: i 4 and s 256 (the invariant %w keeps its
    # buffer); the body's own peak (exp 4096 + slice 256) adds once
    assert r.peak_bytes == 4352 + 4 + 256 + 4096 + 256
    assert r.peak_op == "stablehlo.slice"
    assert r.peak_path and r.peak_path[0].startswith("stablehlo.while")
    region = [b for b in r.live_at_peak if b.kind == "region"]
    assert len(region) == 1 and region[0].bytes == 4096 + 256
    assert {b.name for b in r.top_temporaries} >= {"stablehlo.exponential", "stablehlo.slice"}
    assert_parts_add_up(r)
    # fused, the body allocates nothing but the updated state (in place)
    assert analyse(LOOP, fusion="xla-gpu").peak_bytes == 4352 + 4 + 256 + 1


def test_call_adds_the_callees_peak():
    text = """
func.func @main(%a: tensor<1024xf32>) -> tensor<1024xf32> {
  %0 = func.call @f(%a) : (tensor<1024xf32>) -> tensor<1024xf32>
  %1 = func.call @f(%0) : (tensor<1024xf32>) -> tensor<1024xf32>
  return %1 : tensor<1024xf32>
}
func.func private @f(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %0 = stablehlo.concatenate %x, %x, dim = 0 : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<2048xf32>
  %1 = stablehlo.exponential %0 : tensor<2048xf32>
  %2 = stablehlo.slice %1 [0:1024] : (tensor<2048xf32>) -> tensor<1024xf32>
  return %2 : tensor<1024xf32>
}"""
    r = analyse(text, fusion="none")
    # inside @f: concatenate 8192 (exp writes over it) + slice 4096 = 12288; at the
    # second call %a (4096) and %0 (4096) are live besides
    assert r.peak_bytes == 4096 + 4096 + 12288
    assert r.peak_path[-1].startswith("func.call")
    assert r.warnings == []
    assert_parts_add_up(r)


def test_recursion_is_reported_not_looped():
    r = analyse(
        """
func.func @main(%a: tensor<1024xf32>) -> tensor<1024xf32> {
  %0 = func.call @f(%a) : (tensor<1024xf32>) -> tensor<1024xf32>
  return %0 : tensor<1024xf32>
}
func.func private @f(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %0 = stablehlo.negate %x : tensor<1024xf32>
  %1 = func.call @f(%0) : (tensor<1024xf32>) -> tensor<1024xf32>
  return %1 : tensor<1024xf32>
}""",
        fusion="none",
    )
    assert any("recursive call of @f" in w for w in r.warnings)
    assert r.peak_bytes >= 3 * 4096


def test_case_takes_the_largest_branch():
    r = analyse(
        """
func.func @main(%i: tensor<i32>, %a: tensor<1024xf32>) -> tensor<1024xf32> {
  %0 = "stablehlo.case"(%i) ({
    %1 = stablehlo.negate %a : tensor<1024xf32>
    stablehlo.return %1 : tensor<1024xf32>
  }, {
    %1 = stablehlo.concatenate %a, %a, dim = 0 : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<2048xf32>
    %2 = stablehlo.slice %1 [0:1024] : (tensor<2048xf32>) -> tensor<1024xf32>
    stablehlo.return %2 : tensor<1024xf32>
  }) : (tensor<i32>) -> tensor<1024xf32>
  return %0 : tensor<1024xf32>
}""",
        fusion="none",
    )
    assert r.peak_bytes == 4 + 4096 + 8192 + 4096
    assert r.peak_path[0].startswith("stablehlo.case")
    # the case's result is the branch's returned slice: listed once, inside the branch, as
    # what it is in @main (its output); the concatenate is the one temporary
    assert_parts_add_up(r)
    assert [b.kind for b in r.live_at_peak if b.kind != "argument"] == ["region"]
    inner = next(b.inner for b in r.live_at_peak if b.kind == "region")
    assert sorted((b.kind, b.bytes) for b in inner) == [("output", 4096), ("temporary", 8192)]
    assert [b.bytes for b in r.top_temporaries] == [8192] and r.temp_at_peak_bytes == r.temp_peak_bytes == 8192


def test_dynamic_shapes_are_flagged():
    r = analyse(
        """
func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {
  %0 = stablehlo.negate %a : tensor<?xf32>
  return %0 : tensor<?xf32>
}""",
        fusion="none",
    )
    assert any("dynamically shaped" in w and "0 bytes" in w for w in r.warnings)


def test_sharded_unpartitioned_module_is_refused():
    text = (ROOT / "tests" / "data" / "sharded" / "dp_mlp.mlir").read_text()
    with pytest.raises(InputError, match="sharded but not partitioned.*propagate-shardings"):
        analyse(text)


def test_bad_options_are_one_line_errors():
    with pytest.raises(InputError, match="fusion must be one of"):
        analyse(CHAIN, fusion="xla-cpu")
    with pytest.raises(InputError, match="schedule must be one of"):
        analyse(CHAIN, schedule="fifo")
    with pytest.raises(InputError, match=r"no function @nope .*public functions: main"):
        analyse(CHAIN, function="nope")


def test_to_dict_and_text():
    r = analyse(LOOP, fusion="none")
    d = json.loads(json.dumps(r.to_dict()))
    for key in (
        "peak_bytes",
        "argument_bytes",
        "output_bytes",
        "alias_bytes",
        "temp_peak_bytes",
        "peak",
        "live_at_peak",
        "top_temporaries",
        "fusion",
        "schedule",
    ):
        assert key in d
    assert d["peak"]["op"] == "stablehlo.slice"
    region = [b for b in d["live_at_peak"] if b["kind"] == "region"][0]
    assert {b["name"] for b in region["inner"]} == {"stablehlo.exponential", "stablehlo.slice"}
    text = render_report(r, "loop.mlir")
    assert text.startswith("loop.mlir: peak 8.75 KiB per device in @main")
    assert "largest temporaries at the peak:" in text


def test_cli(tmp_path, capsys):
    from costmodel.cli import main

    f = tmp_path / "loop.mlir"
    f.write_text(LOOP)
    assert main(["memory", str(f), "--fusion", "none"]) == 0
    out = capsys.readouterr().out
    assert "peak 8.75 KiB" in out and "stablehlo.exponential" in out
    assert main(["memory", str(f), "--json", "--top", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["file"] == str(f) and len(doc["top_temporaries"]) <= 1
    assert main(["memory", str(f), "--fusion", "bogus"]) == 1
    assert "--fusion must be one of" in capsys.readouterr().err
    sharded = ROOT / "tests" / "data" / "sharded" / "dp_mlp.mlir"
    assert main(["memory", str(sharded), "--json"]) == 0
    captured = capsys.readouterr()
    assert "propagate-shardings" in captured.err
    assert json.loads(captured.out)["peak_bytes"] > 0


# ---------------------------------------------------------------------------
# against XLA's buffer assignment (CPU)
# ---------------------------------------------------------------------------


def _bench():
    spec = importlib.util.spec_from_file_location("memory_vs_xla", ROOT / "benchmarks" / "memory_vs_xla.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


VALIDATED = [
    "mlp_sgd", "mlp_sgd_donated", "convnet_sgd", "convnet_sgd_donated", "fori_loop", "scan", "scan_grad",
    "convnet_maxpool_sgd",
]


@pytest.fixture(scope="module")
def rows():
    pytest.importorskip("jax")
    bench = _bench()
    return {name: bench.measure(name) for name in VALIDATED}


@pytest.mark.parametrize("name", VALIDATED)
def test_within_20_percent_of_xla_cpu(rows, name):
    # every op its own buffer (our cpu preset's policy) against XLA CPU
    r = rows[name]
    assert abs(r.diff("none")) <= 0.20, (name, r)


@pytest.mark.parametrize("name", ["mlp_sgd", "mlp_sgd_donated", "fori_loop", "scan", "scan_grad"])
def test_xla_gpu_kernels_within_20_percent_of_xla_cpu(rows, name):
    r = rows[name]
    assert abs(r.diff("xla-gpu")) <= 0.20, (name, r)


def test_conv_net_with_gpu_kernels_is_below_xla_cpu(rows):
    # XLA CPU materializes broadcasts for its conv/dot library fusions and transposes
    # the operands of the weight-gradient convolutions; GPU kernels do neither
    # (docs/memory.md)
    r = rows["convnet_sgd"]
    assert r.ours_xla_gpu_bytes < r.ours_none_bytes
    assert -0.45 <= r.diff("xla-gpu") < 0


def test_donation_lowers_ours_like_xlas(rows):
    plain, donated = rows["mlp_sgd"], rows["mlp_sgd_donated"]
    assert donated.xla_alias_bytes > 0 and donated.xla_bytes < plain.xla_bytes
    assert donated.ours_alias_bytes == donated.xla_alias_bytes
    assert donated.ours_none_bytes < plain.ours_none_bytes
    assert donated.ours_xla_gpu_bytes < plain.ours_xla_gpu_bytes
    xla_drop = 1 - donated.xla_bytes / plain.xla_bytes
    for which in ("ours_none_bytes", "ours_xla_gpu_bytes"):
        drop = 1 - getattr(donated, which) / getattr(plain, which)
        assert 0.5 * xla_drop <= drop <= 2 * xla_drop, (which, drop, xla_drop)


SHARD_MAP = """
module attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%x: tensor<1024x1024xf32>, %w: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
    %0 = sdy.manual_computation(%x, %w) in_shardings=[<@mesh, [{"x"}, {}]>, <@mesh, [{}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%a: tensor<256x1024xf32>, %b: tensor<1024x1024xf32>) {
      %c0 = stablehlo.constant dense<0> : tensor<i32>
      %z = stablehlo.constant dense<0.0> : tensor<256x1024xf32>
      %r:3 = stablehlo.while(%i = %c0, %acc = %z, %bb = %b) : tensor<i32>, tensor<256x1024xf32>, tensor<1024x1024xf32>
        cond {
          %c4 = stablehlo.constant dense<4> : tensor<i32>
          %lt = stablehlo.compare LT, %i, %c4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
          stablehlo.return %lt : tensor<i1>
        } do {
          %d = stablehlo.dot_general %a, %bb, contracting_dims = [1] x [0] : (tensor<256x1024xf32>, tensor<1024x1024xf32>) -> tensor<256x1024xf32>
          %t = stablehlo.tanh %d : tensor<256x1024xf32>
          %s = stablehlo.add %acc, %t : tensor<256x1024xf32>
          %c1 = stablehlo.constant dense<1> : tensor<i32>
          %n = stablehlo.add %i, %c1 : tensor<i32>
          stablehlo.return %n, %s, %bb : tensor<i32>, tensor<256x1024xf32>, tensor<1024x1024xf32>
        }
      sdy.return %r#1 : tensor<256x1024xf32>
    } : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    return %0 : tensor<1024x1024xf32>
  }
}
"""


def test_shard_map_arguments_and_outputs_are_per_device():
    """A shard_map program's @main has global types; each device holds its shard of an
    argument handed to the manual computation and of its result (XLA's memory_analysis of
    the same program: arguments 5 MiB, outputs 1 MiB). Before, the global sizes were
    counted, and the body's temporaries vanished under the 4 MiB global output."""
    rep = analyse(SHARD_MAP, fusion="none")
    local_x = 256 * 1024 * 4  # 1024 rows over 4 devices, f32
    w = 1024 * 1024 * 4  # replicated
    assert rep.argument_bytes == local_x + w
    assert rep.output_bytes == 256 * 1024 * 4
    # at the peak: the arguments, the accumulator (the loop state, then the output), the
    # body's dot result (tanh and add in place) and the i32 loop counter
    assert rep.peak_bytes == (local_x + w) + local_x + local_x + 4


def test_sub_byte_buffers_are_packed():
    """An s4 argument takes half a byte per element, as XLA's buffer assignment packs it
    (its memory_analysis of s4[4096,4096]: 8 MiB); i1 a byte per element."""
    rep = analyse(
        "func.func @main(%w: tensor<4096x4096xi4>, %p: tensor<4096xi1>) -> tensor<4096x4096xbf16> {\n"
        "  %0 = stablehlo.convert %w : (tensor<4096x4096xi4>) -> tensor<4096x4096xbf16>\n"
        "  return %0 : tensor<4096x4096xbf16>\n"
        "}\n",
        fusion="none",
    )
    assert rep.argument_bytes == 4096 * 4096 // 2 + 4096  # two s4 per byte; one byte per pred
    assert rep.output_bytes == 4096 * 4096 * 2


def test_ops_removed_by_cse_before_fusion_have_no_buffer():
    """Two equal computations on constants (an iota times 7, twice): XLA's CSE keeps one,
    kernel formation too (the second is `costmodel.removed`, in no kernel), and it has no
    buffer (XLA's memory_analysis: the 8 MiB argument and the 8 MiB output, nothing else)."""
    text = """
func.func @main(%x: tensor<2048x1024xf32>) -> tensor<2048x1024xf32> {
  %i1 = stablehlo.iota dim = 1 : tensor<2048x1024xf32>
  %c1 = stablehlo.constant dense<7.0> : tensor<2048x1024xf32>
  %a = stablehlo.multiply %i1, %c1 : tensor<2048x1024xf32>
  %i2 = stablehlo.iota dim = 1 : tensor<2048x1024xf32>
  %c2 = stablehlo.constant dense<7.0> : tensor<2048x1024xf32>
  %b = stablehlo.multiply %i2, %c2 : tensor<2048x1024xf32>
  %s = stablehlo.add %x, %a : tensor<2048x1024xf32>
  %t = stablehlo.add %s, %b : tensor<2048x1024xf32>
  return %t : tensor<2048x1024xf32>
}
"""
    rep = analyse(text, fusion="xla-gpu")
    mib8 = 2048 * 1024 * 4
    assert rep.peak_bytes == 2 * mib8 and rep.temp_peak_bytes == 0


def test_a_result_made_after_the_callees_peak_is_not_taken_off_its_temporaries():
    """The callee's result is made after its 4 KiB concatenate died; it is @main's output.
    The temporaries at the peak are the concatenate's (and the reduce's scalar): the
    result is not taken off them (it is not live there), and it is no temporary."""
    r = analyse(
        """
func.func @main(%a: tensor<256xf32>) -> tensor<256xf32> {
  %0 = func.call @f(%a) : (tensor<256xf32>) -> tensor<256xf32>
  return %0 : tensor<256xf32>
}
func.func private @f(%x: tensor<256xf32>) -> tensor<256xf32> {
  %c = stablehlo.concatenate %x, %x, %x, %x, dim = 0 : (tensor<256xf32>, tensor<256xf32>, tensor<256xf32>, tensor<256xf32>) -> tensor<1024xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%c init: %z) applies stablehlo.add across dimensions = [0] : (tensor<1024xf32>, tensor<f32>) -> tensor<f32>
  %b = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<256xf32>
  return %b : tensor<256xf32>
}""",
        fusion="none",
    )
    assert r.peak_bytes == 1024 + 4096 + 4  # the argument, the concatenate, the sum
    assert r.temp_at_peak_bytes == r.temp_peak_bytes == 4096 + 4
    assert_parts_add_up(r)


def test_a_nested_branchs_result_returned_from_main_is_an_output_at_every_depth():
    r = analyse(
        """
func.func @main(%i: tensor<i32>, %j: tensor<i32>, %a: tensor<256xf32>) -> tensor<256xf32> {
  %0 = "stablehlo.case"(%i) ({
    %1 = "stablehlo.case"(%j) ({
      %2 = stablehlo.concatenate %a, %a, dim = 0 : (tensor<256xf32>, tensor<256xf32>) -> tensor<512xf32>
      %3 = stablehlo.slice %2 [0:256] : (tensor<512xf32>) -> tensor<256xf32>
      stablehlo.return %3 : tensor<256xf32>
    }, {
      stablehlo.return %a : tensor<256xf32>
    }) : (tensor<i32>) -> tensor<256xf32>
    stablehlo.return %1 : tensor<256xf32>
  }, {
    %4 = stablehlo.negate %a : tensor<256xf32>
    stablehlo.return %4 : tensor<256xf32>
  }) : (tensor<i32>) -> tensor<256xf32>
  return %0 : tensor<256xf32>
}""",
        fusion="none",
    )
    assert r.peak_bytes == 8 + 1024 + 2048 + 1024
    assert_parts_add_up(r)

    def leaves(items):
        for b in items:
            yield from leaves(b.inner) if b.kind == "region" else [b]

    kinds = sorted((b.kind, b.name) for b in leaves(r.live_at_peak) if b.kind != "argument")
    assert kinds == [("output", "stablehlo.slice"), ("temporary", "stablehlo.concatenate")]
    assert r.temp_at_peak_bytes == 2048 and r.output_at_peak_bytes == 1024


def _nested_whiles(depth: int) -> str:
    """main runs `depth` whiles nested in each other's bodies, one trip each."""
    t = "tensor<4xf32>"
    head, tail = [], []
    for d in range(depth):
        head.append(
            f"%c{d} = stablehlo.constant dense<0> : tensor<i32>\n"
            f"%w{d}:2 = stablehlo.while(%i{d} = %c{d}, %x{d + 1} = %x{d}) : tensor<i32>, {t}\n"
            f" cond {{\n  %n{d} = stablehlo.constant dense<1> : tensor<i32>\n"
            f"  %p{d} = stablehlo.compare LT, %i{d}, %n{d} : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
            f"  stablehlo.return %p{d} : tensor<i1>\n }} do {{\n"
            f"  %one{d} = stablehlo.constant dense<1> : tensor<i32>\n"
            f"  %j{d} = stablehlo.add %i{d}, %one{d} : tensor<i32>")
        inner = f"%w{d + 1}#1" if d + 1 < depth else f"%x{d + 1}"
        tail.insert(0, f"  stablehlo.return %j{d}, {inner} : tensor<i32>, {t}\n }}")
    return (f"func.func @main(%a: {t}) -> {t} {{\n%x0 = stablehlo.add %a, %a : {t}\n" + "\n".join(head) + "\n"
            + "\n".join(tail) + f"\nreturn %w0#1 : {t}\n}}\n")


def test_memory_of_deeply_nested_whiles_is_not_a_recursion_error(tmp_path, capsys):
    """300 nested whiles (issue 12 item 8, found again in `costmodel memory`): the walkers
    run under the deep recursion limit, as annotate-cost and kernels do."""
    from costmodel.cli import main

    p = tmp_path / "deep.mlir"
    p.write_text(_nested_whiles(300))
    assert main(["memory", str(p), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["peak_bytes"] >= 2 * 16  # the argument and its doubled copy, f32 x 4 each


def test_a_compiled_in_place_update_writes_into_its_operand():
    """Audit find: XLA's compiled scan stacks one row per step with a fusion that updates
    the stacked buffer in place; the memory analysis gave that fusion's result a buffer of
    its own (a second copy of the stacked output: 16 x 64 x 64 f32 more at the peak)."""
    from test_kernels import COMPILED_SCAN

    r = analyse(COMPILED_SCAN)
    stacked, row = 16 * 64 * 64 * 4, 64 * 64 * 4
    # the argument (not donated: the loop runs on a copy of it, the output), the row
    # argument, the tanh's row and its loop carry: no third stacked buffer (835,596 bytes)
    assert r.argument_bytes == stacked + row and r.output_bytes == stacked
    assert r.peak_bytes == 2 * stacked + 3 * row + 12  # + the i32 counter's copies
