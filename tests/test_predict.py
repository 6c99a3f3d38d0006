"""`costmodel predict` end to end on a small data-parallel model: several systems, both
backends, the JSON schema (docs/predict.md), the plot, what-if overrides, traces, and
the mismatched device count error."""

from __future__ import annotations

import json
import os

import pytest

from conftest import SCATTER_ADD
from costmodel import cli
from costmodel.predict import SCHEMA, predict

# A 4-replica MLP training step (pmap style): two matmuls, a gradient all-reduce.
MODEL = """
module @dp_step attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%x: tensor<256x1024xbf16>, %w1: tensor<1024x4096xbf16>, %w2: tensor<4096x1024xbf16>) -> (tensor<1024x4096xbf16>, tensor<256x1024xbf16>) {
    %h = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<256x1024xbf16>, tensor<1024x4096xbf16>) -> tensor<256x4096xbf16>
    %z = stablehlo.constant dense<0.0> : tensor<256x4096xbf16>
    %r = stablehlo.maximum %h, %z : tensor<256x4096xbf16>
    %y = stablehlo.dot_general %r, %w2, contracting_dims = [1] x [0] : (tensor<256x4096xbf16>, tensor<4096x1024xbf16>) -> tensor<256x1024xbf16>
    %g = stablehlo.dot_general %x, %r, contracting_dims = [0] x [0] : (tensor<256x1024xbf16>, tensor<256x4096xbf16>) -> tensor<1024x4096xbf16>
    %s = "stablehlo.all_reduce"(%g) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
      %t = stablehlo.add %a, %b : tensor<bf16>
      stablehlo.return %t : tensor<bf16>
    }) : (tensor<1024x4096xbf16>) -> tensor<1024x4096xbf16>
    return %s, %y : tensor<1024x4096xbf16>, tensor<256x1024xbf16>
  }
}
"""

SYSTEMS = ["a100-40gb-x4", "h100-sxm-x4", "h200-x4"]


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "dp.mlir"
    p.write_text(MODEL)
    return str(p)


def run_cli(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return rc, out, err


def test_rows_for_every_system_and_backend(model):
    res = predict(model, systems=SYSTEMS, backends=["roofline", "calibrated"], top=3)
    assert [(r.system, r.backend) for r in res.rows] == [(s, b) for s in SYSTEMS for b in ("roofline", "calibrated")]
    for r in res.rows:
        assert r.step_time_ms > 0 and r.kernel_count > 0 and 0 < r.mfu < 1
        assert r.step_time_ms == pytest.approx(r.compute_ms + r.exposed_comm_ms, rel=1e-6)
        assert r.comm_ms > 0  # the gradient all-reduce
    by = {(r.system, r.backend): r for r in res.rows}
    for s in SYSTEMS:
        assert by[(s, "calibrated")].step_time_ms >= by[(s, "roofline")].step_time_ms
    # speedup against the first system, same backend; faster hardware, shorter step
    assert by[("a100-40gb-x4", "roofline")].speedup == 1.0
    assert by[("h100-sxm-x4", "roofline")].speedup > 1.0
    assert len(res.top_kernels) == 3 and res.top_kernels_of == "a100-40gb-x4 / roofline"


@pytest.mark.parametrize("source", ["MODEL", "examples/transformer_train_2x4.mlir"])
def test_reused_graphs_change_nothing(source, tmp_path, monkeypatch):
    """predict builds one Chakra graph per (fusion, backend) and re-times it for the other
    systems (chakra.export.retime_template): every row is what a graph built afresh for
    each system gives."""
    from costmodel.chakra import export

    if source == "MODEL":
        path = tmp_path / "dp.mlir"
        path.write_text(MODEL)
    else:  # a Shardy-sharded transformer on 8 devices
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), source)
    systems = SYSTEMS if source == "MODEL" else ["dgx-a100", "dgx-h100", "mi300x-x8"]
    calls = []
    real = export.retime_template

    def counted(template, module):
        out = real(template, module)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(export, "retime_template", counted)
    reused = predict(str(path), systems=systems, backends=["roofline", "calibrated"], top=3)
    assert calls and all(calls)  # every system after the first re-timed the graph
    monkeypatch.setattr(export, "retime_template", lambda template, module: None)
    fresh = predict(str(path), systems=systems, backends=["roofline", "calibrated"], top=3)
    assert [r.to_dict() for r in reused.rows] == [r.to_dict() for r in fresh.rows]


def test_clones_without_nested_costs_give_the_same_rows(tmp_path, monkeypatch):
    """predict's cached clones skip the costs of ops inside cached ops' regions
    (nested_costs=False): every row is what fully annotated clones give."""
    import costmodel.passes.annotate_cost as annotate_cost

    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                       "resnet50_train_4dev.mlir")
    lean = predict(src, systems=SYSTEMS[:2], backends=["roofline", "calibrated"], top=3)
    real = annotate_cost.annotate_module
    seen = []

    def full(*args, **kwargs):
        seen.append(kwargs.get("nested_costs"))
        kwargs["nested_costs"] = True
        return real(*args, **kwargs)

    monkeypatch.setattr(annotate_cost, "annotate_module", full)
    fully = predict(src, systems=SYSTEMS[:2], backends=["roofline", "calibrated"], top=3)
    assert seen and not any(seen)
    assert [r.to_dict() for r in lean.rows] == [r.to_dict() for r in fully.rows]
    assert lean.top_kernels == fully.top_kernels


def test_json_schema(model, capsys):
    rc, out, _ = run_cli(capsys, "predict", model, "--system", "a100-40gb-x4", "--system", "h100-sxm-x4",
                         "--backend", "roofline", "--backend", "calibrated", "--json", "--top", "2")
    assert rc == 0
    doc = json.loads(out)
    assert doc["schema"] == SCHEMA
    assert doc["program"]["devices"] == 4
    required = {"system", "backend", "step_time_ms", "compute_ms", "comm_ms", "exposed_comm_ms", "mfu",
                "peak_memory_GiB", "fits", "kernel_count", "speedup", "memory_bound_share"}
    assert len(doc["rows"]) == 4
    for row in doc["rows"]:
        assert required <= set(row)
    assert len(doc["top_kernels"]) == 2
    assert {"id", "kind", "time_ns", "bytes_read", "bytes_written", "flops", "ops", "shape"} <= set(doc["top_kernels"][0])


def test_table_plot_and_trace(model, capsys, tmp_path):
    png = tmp_path / "plot.png"
    trace = tmp_path / "traces"
    rc, out, _ = run_cli(capsys, "predict", model, "--system", "a100-40gb-x4", "--system", "h200-x4",
                         "--plot", png, "--trace", trace)
    assert rc == 0
    assert "a100-40gb-x4" in out and "h200-x4" in out and "top kernels on" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    names = sorted(os.listdir(trace))
    assert "a100-40gb-x4-roofline" in names and "h200-x4-roofline.perfetto.json" in names
    assert os.path.exists(trace / "a100-40gb-x4-roofline" / "manifest.json")


# A memory-bound step (an elementwise op over 64 MiB) on 4 replicas.
STREAM = """
module @stream attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%x: tensor<4096x4096xf32>) -> tensor<4096x4096xf32> {
    %y = stablehlo.exponential %x : tensor<4096x4096xf32>
    return %y : tensor<4096x4096xf32>
  }
}
"""


@pytest.fixture
def stream(tmp_path):
    p = tmp_path / "stream.mlir"
    p.write_text(STREAM)
    return str(p)


def test_what_if_faster_memory(model, stream):
    base = predict(stream, systems=["a100-40gb-x4"], top=0).rows[0]
    fast = predict(stream, systems=["a100-40gb-x4"], sets=["hardware.memory_bandwidth_GBps=15550"], top=0).rows[0]
    assert fast.system == "a100-40gb-x4 [hardware.memory_bandwidth_GBps=15550]"
    assert fast.compute_ms < base.compute_ms
    # the MLP's matmuls are compute-bound: its compute does not depend on the memory
    base = predict(model, systems=["a100-40gb-x4"], top=0).rows[0]
    fast = predict(model, systems=["a100-40gb-x4"], sets=["hardware.memory_bandwidth_GBps=15550"], top=0).rows[0]
    assert fast.compute_ms <= base.compute_ms


@pytest.mark.parametrize(
    "setting,message",
    [
        ("hardware.memory_bandwidth_GBps=-1", "must be positive"),
        ("hardware.memory_bandwith_GBps=4000", "unknown key 'memory_bandwith_GBps'"),
        ("network.7.bandwidth_GBps=450", "no element 7"),
        ("nonsense", "--set expects KEY=VALUE"),
    ],
)
def test_bad_what_if_is_one_line(model, capsys, setting, message):
    rc, _out, err = run_cli(capsys, "predict", model, "--system", "a100-40gb-x4", "--set", setting)
    assert rc == 1 and message in err and len(err.strip().splitlines()) == 1, err


def test_mismatched_device_count_names_both_counts(model, capsys):
    rc, _out, err = run_cli(capsys, "predict", model, "--system", "a100-40gb-x4", "--system", "dgx-h100")
    assert rc == 1
    assert "the program runs on 4 devices but system 'dgx-h100' has 8 NPUs; systems that fit: a100-40gb-x4" in err


def test_no_system_is_an_error(model, capsys):
    rc, _out, err = run_cli(capsys, "predict", model)
    assert rc == 1 and "give at least one --system" in err


def test_a_program_that_runs_nothing_has_no_speedup(capsys, tmp_path):
    """A step of no kernel and no collective takes 0 ms: its speedup is n/a in the table,
    null in the JSON (strict JSON: never NaN), with a note saying why."""
    src = tmp_path / "identity.mlir"
    src.write_text("func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {\n  return %a : tensor<8xf32>\n}\n")
    rc, out, _ = run_cli(capsys, "predict", src, "--system", "a100-40gb-x4", "--system", "h100-sxm-x4")
    assert rc == 0
    assert "nan" not in out.lower()
    rows = [line for line in out.splitlines() if line.startswith(("a100-40gb-x4 ", "h100-sxm-x4 "))]
    assert len(rows) == 2 and all(line.split()[-1] == "n/a" for line in rows)
    assert "note: h100-sxm-x4 / roofline: the program runs no kernel and no collective here" in out
    assert "0.00ms" in out and "note: times in" not in out  # nothing to scale
    rc, out, _ = run_cli(capsys, "predict", src, "--system", "a100-40gb-x4", "--json")
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert [r["speedup"] for r in doc["rows"]] == [None]


def test_unmeasured_scatter_atomics_are_said(tmp_path):
    """The calibrated backend times a scatter's atomic updates only where the hardware
    spec has measured them (scatter_element_ns: the H100, not the A100); elsewhere the
    row says that it lacks them. The roofline, a lower bound by design, says nothing."""
    p = tmp_path / "scatter.mlir"
    p.write_text(SCATTER_ADD.replace("UNIQUE", "false"))
    res = predict(str(p), systems=["a100-40gb-x4", "h100-sxm-x4"], backends=["roofline", "calibrated"], top=1)
    notes = {(r.system, r.backend): " ".join(r.notes) for r in res.rows}
    assert f"{1024 * 64:,} elements updated by scatters" in notes[("a100-40gb-x4", "calibrated")]
    assert "scatter" not in notes[("h100-sxm-x4", "calibrated")]
    assert "scatter" not in notes[("a100-40gb-x4", "roofline")]


def test_top_kernel_table_says_what_cudnn_runs(tmp_path):
    """The top kernels of `costmodel predict` keep each convolution's kind (as
    `costmodel kernels` shows it)."""
    from costmodel.predict import render_table

    p = tmp_path / "conv.mlir"
    p.write_text("""
func.func @main(%x: tensor<8x56x56x64xbf16>, %w: tensor<3x3x64x64xbf16>) -> tensor<8x56x56x64xbf16> {
  %y = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x56x56x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<8x56x56x64xbf16>
  return %y : tensor<8x56x56x64xbf16>
}
""")
    res = predict(str(p), systems=["h100-sxm-x4"], top=3)
    assert [k.get("conv") for k in res.top_kernels] == ["forward"]
    assert "1: convolution [forward] -> tensor<8x56x56x64xbf16>" in render_table(res)


def test_table_unit_follows_the_step(tmp_path, model):
    """A step under a millisecond is shown in microseconds (not 0.02ms), with a note on
    the trace's resolution; a ResNet-sized one stays in milliseconds."""
    from costmodel.predict import render_table

    res = predict(model, systems=["h100-sxm-x4"], backends=["calibrated"])
    (row,) = res.rows
    assert row.step_time_ms < 1.0
    table = render_table(res)
    assert f"{row.step_time_ms * 1e3:8.2f}us" in table
    assert "ms " not in table.splitlines()[4]  # the row: every time in us
    assert "note: times in us, simulated from the Chakra trace" in table
    import dataclasses

    slow = dataclasses.replace(res, rows=[dataclasses.replace(row, step_time_ms=12.5, compute_ms=12.5)])
    table = render_table(slow)
    assert "   12.50ms" in table and "note: times in" not in table
    # rows far apart: the unit keeps the shortest readable (not 0.00ms), the longest fits
    fast = dataclasses.replace(row, step_time_ms=0.003, compute_ms=0.003)
    mixed = dataclasses.replace(res, rows=[fast, dataclasses.replace(row, step_time_ms=1.85, compute_ms=1.85)])
    table = render_table(mixed)
    assert "    3.00us" in table and " 1850.00us" in table
    huge = dataclasses.replace(res, rows=[fast, dataclasses.replace(row, step_time_ms=250.0, compute_ms=250.0)])
    assert "  250.00ms" in render_table(huge)  # 250000.00us would outgrow the column


def test_a_module_without_a_program_is_one_error(tmp_path):
    from costmodel.predict import PredictError

    p = tmp_path / "empty.mlir"
    p.write_text("module {}\n")
    with pytest.raises(PredictError, match="has no public function with a body: nothing to predict"):
        predict(str(p), systems=["h100-sxm-x4"])


def test_a_step_below_the_trace_resolution_keeps_mfu_and_shares_sane(tmp_path):
    """Kernels shorter than the Chakra trace's microsecond round to (almost) nothing in the
    simulated step; MFU and the top kernels' shares then divide by the kernels' own time
    (never an MFU above 100%), and a note says so."""
    from costmodel.predict import render_table

    p = tmp_path / "tiny.mlir"
    p.write_text("""
func.func @main(%a: tensor<128x128xf32>, %b: tensor<128x128xf32>) -> tensor<128x128xf32> {
  %d = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>
  %e = stablehlo.exponential %d : tensor<128x128xf32>
  return %e : tensor<128x128xf32>
}
""")
    res = predict(str(p), systems=["a100-40gb-x4"], backends=["roofline"], top=2)
    (row,) = res.rows
    assert row.step_time_ms < 1e-3 and row.kernel_time_ms > row.step_time_ms
    flops = 2 * 128 * 128 * 128  # one FMA = 2 flops
    assert row.total_flops >= flops
    assert 0 < row.mfu <= 1.0
    assert any("below the Chakra trace's resolution" in n for n in row.notes)
    shares = [float(w.rstrip("%")) for line in render_table(res).splitlines() for w in line.split() if w.endswith("%") and line.strip()[:1].isdigit()]
    assert shares and all(s <= 100.0 for s in shares)


def test_kernel_time_is_in_every_row(model):
    """`kernel_time_ms` is annotate-cost's total_time_ns: the kernels' own time, of which
    the simulated compute is the whole-microsecond rounding."""
    res = predict(model, systems=["h100-sxm-x4"], backends=["calibrated"])
    (row,) = res.rows
    assert row.kernel_time_ms > 0
    assert abs(row.compute_ms - row.kernel_time_ms) <= 1e-3 * (1 + row.kernel_count)  # < 1 us per kernel
    assert not any("resolution" in n for n in row.notes)


def test_ops_not_costed_are_said(tmp_path, capsys):
    """A step with ops no rule costs is low: one note under the table (and the JSON's
    program.not_costed) says how many, of which kinds, and why the first was not."""
    from conftest import DYNAMIC_MLP

    p = tmp_path / "dyn.mlir"
    p.write_text(DYNAMIC_MLP)
    rc, out, _ = run_cli(capsys, "predict", p, "--system", "h100-sxm-x4")
    assert rc == 0
    notes = [line for line in out.splitlines() if "not costed" in line]
    assert len(notes) == 1 and notes[0].startswith("note: 1 op not costed, counted as no time, so the step is low")
    assert "run --stablehlo-refine-shapes" in notes[0]
    res = predict(str(p), systems=["h100-sxm-x4"])
    assert res.to_json()["program"]["not_costed"] == notes[0][len("note: "):]
    p.write_text(MODEL)
    assert "not_costed" not in predict(str(p), systems=["a100-40gb-x4"]).program


def test_annotate_warnings_are_passed_on(tmp_path, capsys):
    """annotate-cost's other warnings (a while loop of unknown trip count, costed once) go
    to stderr once, whatever the number of rows, and into the JSON's program.warnings."""
    from conftest import DATA_DEPENDENT_WHILE

    p = tmp_path / "loop.mlir"
    p.write_text(DATA_DEPENDENT_WHILE)
    rc, out, err = run_cli(capsys, "predict", p, "--system", "a100-40gb-x4", "--system", "h100-sxm-x4", "--backend", "calibrated")
    assert rc == 0
    warned = [line for line in err.splitlines() if "cannot infer the trip count" in line]
    assert len(warned) == 1 and warned[0].startswith(f"{p}:5:8: warning: ")
    assert "give it with --unknown-trip-count N" in warned[0]  # predict's own option, not annotate-cost's
    doc = predict(str(p), systems=["h100-sxm-x4"]).to_json()
    assert doc["program"]["warnings"] == warned
    p.write_text(MODEL)
    assert "warnings" not in predict(str(p), systems=["h100-sxm-x4"]).program


def test_propagate_shardings_warnings_are_passed_on(tmp_path):
    """predict partitions a sharded program itself: propagate-shardings' warnings (here a
    convolution sharded along its window, whose halo exchange the per-device program
    lacks) are the program's warnings too, as stablehlo-opt prints them."""
    import test_propagate_shardings as tps

    p = tmp_path / "conv.mlir"
    p.write_text(tps.CONV.format(x='{}, {"tp"}, {}, {}', k=3, p=1))
    res = predict(str(p), systems=["dgx-h100"])
    assert res.program["kind"].startswith("sharded")
    warned = res.program["warnings"]
    assert len(warned) == 1 and warned[0].startswith(f"{p}:5:10: warning: propagate-shardings: this convolution")


def test_other_warnings_are_distinct_and_capped():
    from costmodel.ir import DiagnosticEngine
    from costmodel.passes.annotate_cost import other_warnings

    diags = DiagnosticEngine("m.mlir")
    for i in range(8):
        diags.warning(None, f"loop {i} costed once")
        diags.warning(None, f"loop {i} costed once")  # the same message twice: once
    diags.warning(None, "'stablehlo.foo' not costed: no cost rule")  # summed up elsewhere
    lines = other_warnings(diags, limit=5)
    assert lines[:5] == [f"warning: loop {i} costed once" for i in range(5)]
    assert lines[5] == "... and 3 more warnings (stablehlo-opt FILE --annotate-cost lists them)"


def test_unmeasured_cudnn_idle_is_said(tmp_path):
    """A convolution on a GPU whose spec has no library_call_idle_ns (the A100) carries
    no idle around its cuDNN call; the calibrated row says so, the H100's does not."""
    p = tmp_path / "conv.mlir"
    p.write_text("""
func.func @main(%x: tensor<8x56x56x64xbf16>, %w: tensor<3x3x64x64xbf16>) -> tensor<8x56x56x64xbf16> {
  %y = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x56x56x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<8x56x56x64xbf16>
  return %y : tensor<8x56x56x64xbf16>
}
""")
    res = predict(str(p), systems=["a100-40gb-x4", "h100-sxm-x4"], backends=["roofline", "calibrated"], top=0)
    notes = {(r.system, r.backend): " ".join(r.notes) for r in res.rows}
    assert "1 convolution call carries no idle time around it: a100-40gb" in notes[("a100-40gb-x4", "calibrated")]
    assert "idle" not in notes[("h100-sxm-x4", "calibrated")] and "idle" not in notes[("a100-40gb-x4", "roofline")]
    # a compiled module's convolutions are the same library calls (audit: its A100 row
    # had no note)
    text = p.read_text().replace(
        "  return %y", '  %e = "mhlo.fusion"(%y) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({\n'
        "  ^bb0(%a: tensor<8x56x56x64xbf16>):\n    %n = stablehlo.negate %a : tensor<8x56x56x64xbf16>\n"
        "    mhlo.return %n : tensor<8x56x56x64xbf16>\n  }) : (tensor<8x56x56x64xbf16>) -> tensor<8x56x56x64xbf16>\n"
        "  return %e").replace("return %e : tensor<8x56x56x64xbf16>", "return %e : tensor<8x56x56x64xbf16>")
    p.write_text(text)
    row = predict(str(p), systems=["a100-40gb-x4"], backends=["calibrated"], top=0).rows[0]
    assert row.fusion == "given"
    assert "1 convolution call carries no idle time around it: a100-40gb" in " ".join(row.notes)


def test_unpadded_stem_is_said(tmp_path):
    """A 3-channel stem on hardware without gemm_tile_k / conv_channel_multiple (mi300x)
    runs unpadded: the calibrated row says so and names the missing keys; NVIDIA rows,
    which pad it, do not."""
    p = tmp_path / "stem.mlir"
    p.write_text("""
func.func @main(%x: tensor<8x224x224x3xbf16>, %w: tensor<7x7x3x64xbf16>) -> tensor<8x112x112x64xbf16> {
  %y = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 2], pad = [[3, 3], [3, 3]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x224x224x3xbf16>, tensor<7x7x3x64xbf16>) -> tensor<8x112x112x64xbf16>
  return %y : tensor<8x112x112x64xbf16>
}
""")
    res = predict(str(p), systems=["mi300x-x8", "dgx-h100"], backends=["roofline", "calibrated"], top=0)
    notes = {(r.system, r.backend): " ".join(r.notes) for r in res.rows}
    assert ("1 convolution with input channels per filter tap not a multiple of 8 (an image stem: 3) runs unpadded: "
            "mi300x has no gemm_tile_k / conv_channel_multiple") in notes[("mi300x-x8", "calibrated")]
    assert "unpadded" not in notes[("dgx-h100", "calibrated")] and "unpadded" not in notes[("mi300x-x8", "roofline")]


def test_unknown_trip_count_option(tmp_path, capsys):
    """--unknown-trip-count N runs a data-dependent loop N times (no warning); a bad value
    is a one-line error."""
    from conftest import DATA_DEPENDENT_WHILE

    p = tmp_path / "loop.mlir"
    p.write_text(DATA_DEPENDENT_WHILE)
    once = predict(str(p), systems=["h100-sxm-x4"], top=1)
    ten = predict(str(p), systems=["h100-sxm-x4"], top=1, unknown_trip_count=10)
    assert "warnings" in once.program and "warnings" not in ten.program
    assert once.top_kernels[0]["executions"] == 1 and ten.top_kernels[0]["executions"] == 10
    rc, _, err = run_cli(capsys, "predict", p, "--system", "h100-sxm-x4", "--unknown-trip-count", "-3")
    assert rc == 1 and err.strip() == "costmodel: error: --unknown-trip-count expects 0 to 2^63-1 iterations, got -3"


def test_a_backend_a_system_cannot_run_leaves_out_its_row(tmp_path, capsys):
    """calibrated on a TPU preset (no calibration block): that row is left out with a note
    saying why, the others run; when no row can run it is an error, and an unknown
    backend name is one at once."""
    model = tmp_path / "one.mlir"  # one device: it runs on any system
    model.write_text("""
func.func @main(%a: tensor<1024x1024xbf16>, %b: tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16> {
  %d = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<1024x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16>
  return %d : tensor<1024x1024xbf16>
}
""")
    model = str(model)
    res = predict(model, systems=["tpu-v5p-64", "h100-sxm-x4"], backends=["roofline", "calibrated"])
    assert [(r.system, r.backend) for r in res.rows] == [("tpu-v5p-64", "roofline"), ("h100-sxm-x4", "roofline"),
                                                          ("h100-sxm-x4", "calibrated")]
    (why,) = res.program["skipped"]
    assert why.startswith("tpu-v5p-64 / calibrated: backend 'calibrated' needs the hardware spec's 'calibration' block")
    from costmodel.predict import render_table

    assert f"note: no row for {why}" in render_table(res)
    assert res.rows[2].speedup == 1.0  # the first row of its backend
    rc, _, err = run_cli(capsys, "predict", model, "--system", "tpu-v5p-64", "--backend", "calibrated")
    assert rc == 1 and err.startswith("costmodel: error: no system can run the backends asked for: tpu-v5p-64 / calibrated")
    rc, _, err = run_cli(capsys, "predict", model, "--system", "h100-sxm-x4", "--backend", "calibratd")
    assert rc == 1 and "unknown backend 'calibratd'" in err


def test_ragged_all_to_all_communicates(tmp_path):
    """A ragged all-to-all (MoE token dispatch) is a collective in the step: communication
    time, nothing left uncosted."""
    from conftest import RAGGED_ALL_TO_ALL

    p = tmp_path / "ragged.mlir"
    p.write_text(RAGGED_ALL_TO_ALL)
    (row,) = predict(str(p), systems=["dgx-h100"]).rows
    assert row.comm_ms > 0 and row.step_time_ms >= row.comm_ms
    assert "not_costed" not in predict(str(p), systems=["dgx-h100"]).program


TP_LAYER = """
module @tp_decode attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%x: tensor<8x4096xbf16>, %w: tensor<4096x1024xbf16>, %v: tensor<1024x4096xbf16>) -> tensor<8x4096xbf16> {
    %h = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x4096xbf16>, tensor<4096x1024xbf16>) -> tensor<8x1024xbf16>
    %y = stablehlo.dot_general %h, %v, contracting_dims = [1] x [0] : (tensor<8x1024xbf16>, tensor<1024x4096xbf16>) -> tensor<8x4096xbf16>
    %s = "stablehlo.all_reduce"(%y) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
      %t = stablehlo.add %a, %b : tensor<bf16>
      stablehlo.return %t : tensor<bf16>
    }) : (tensor<8x4096xbf16>) -> tensor<8x4096xbf16>
    return %s : tensor<8x4096xbf16>
  }
}
"""


def test_latency_bound_small_collectives_are_flagged(tmp_path, model):
    """A tensor-parallel decode layer: its all-reduce of 8 x 4096 bf16 (64 KiB) is
    latency-bound. On a system without a calibrated step latency the model charges every
    chunk the full per-hop latency (docs/communication-model.md, caveat 2): a note says
    so. The presets pay NCCL's latency once per ring step: no note. The 8 MiB gradient
    all-reduce of the data-parallel step is bandwidth-bound: no note."""
    from costmodel.systems import load_system

    tp = tmp_path / "tp.mlir"
    tp.write_text(TP_LAYER)
    # the preset without NCCL's step latency: ASTRA-sim's per-message, per-chunk latency
    spec = load_system("h100-sxm-x4").to_json()
    for key in ("protocols", "protocol_step_latency_ns", "protocol_max_bandwidth_GBps"):
        spec["calibration"].pop(key)
    spec["name"] = "h100-no-step-latency"
    bare = tmp_path / "h100-no-step-latency.json"
    bare.write_text(json.dumps(spec))
    res = predict(str(tp), systems=[str(bare)])
    notes = [n for n in res.rows[0].notes if "caveat 2" in n]
    assert len(notes) == 1 and notes[0].startswith("1 collective run(s) of under 1 MiB each take")
    # the preset charges NCCL's latency once per ring step: no note, and a shorter step
    with_steps = predict(str(tp), systems=["h100-sxm-x4"])
    assert not [n for n in with_steps.rows[0].notes if "caveat 2" in n]
    assert with_steps.rows[0].comm_ms < res.rows[0].comm_ms
    assert not [n for n in predict(model, systems=[str(bare)]).rows[0].notes if "caveat 2" in n]


def test_set_creates_a_dimensions_calibration_and_null_removes_a_key(model):
    """`--set network.0.calibration.KEY=V` on a dimension without a calibration block makes
    one; `=null` asks "what if the spec had no such key" (here: no NCCL protocols); a key
    that is not there is named with its section."""
    from costmodel.predict import PredictError

    base = predict(model, systems=["h100-sxm-x4"]).rows[0]
    slow = predict(model, systems=["h100-sxm-x4"], sets=["network.0.calibration.bus_efficiency=0.1"]).rows[0]
    assert slow.comm_ms > base.comm_ms
    plain = predict(model, systems=["h100-sxm-x4"], sets=[
        "system.calibration.protocols=null", "system.calibration.protocol_step_latency_ns=null",
        "system.calibration.protocol_max_bandwidth_GBps=null"]).rows[0]
    assert plain.comm_ms != base.comm_ms and "protocols=null" in plain.system
    with pytest.raises(PredictError, match=r"no key 'network\.0\.bogus' \(keys: bandwidth_GBps"):
        predict(model, systems=["h100-sxm-x4"], sets=["network.0.bogus.x=1"])
    with pytest.raises(PredictError, match=r"no key 'system\.calibration\.step_latency_ns' to remove"):
        predict(model, systems=["h100-sxm-x4"], sets=["system.calibration.step_latency_ns=null"])


def test_fusion_none_forms_no_kernels_and_says_so(model):
    """--fusion none prices every op on its own: no kernel count (not 0 kernels)."""
    from costmodel.predict import render_table

    res = predict(model, systems=["h100-sxm-x4"], fusion="none")
    row = res.rows[0]
    assert row.kernel_count is None and row.to_dict()["kernel_count"] is None and row.step_time_ms > 0
    line = next(ln for ln in render_table(res).splitlines() if ln.startswith("h100-sxm-x4"))
    assert line.split()[6] == "-"  # the kernels column
    assert predict(model, systems=["h100-sxm-x4"]).rows[0].kernel_count > 0


def test_a_small_peak_memory_reads_in_mib(tmp_path, model):
    import dataclasses

    from costmodel.predict import render_table

    res = predict(model, systems=["h100-sxm-x4"])
    row = res.rows[0]
    small = dataclasses.replace(res, rows=[dataclasses.replace(row, peak_memory_GiB=0.05)])
    assert "51.2M/80G" in render_table(small)  # not 0.0/80G
    large = dataclasses.replace(res, rows=[dataclasses.replace(row, peak_memory_GiB=12.34)])
    assert " 12.3/80G" in render_table(large)


def test_a_latency_override_the_model_would_not_use_is_refused(model):
    """On a dimension with NCCL's step latency, messages carry no latency of their own:
    `--set network.0.latency_ns=...` would change nothing; the error says what to set."""
    from costmodel.predict import PredictError

    with pytest.raises(PredictError, match="has a calibrated protocol_step_latency_ns, which replaces latency_ns per "
                       "message .*; set system.calibration.protocol_step_latency_ns.Simple instead"):
        predict(model, systems=["h100-sxm-x4"], sets=["network.0.latency_ns=1000000"])
    fast = predict(model, systems=["h100-sxm-x4"]).rows[0].comm_ms
    slow = predict(model, systems=["h100-sxm-x4"], sets=[
        f"system.calibration.protocol_step_latency_ns.{p}=100000" for p in ("LL", "LL128", "Simple")]).rows[0].comm_ms
    assert slow > fast


def test_a_plot_path_that_cannot_be_written_is_refused_first(tmp_path, model, capsys):
    rc, out, err = run_cli(capsys, "predict", model, "--system", "h100-sxm-x4", "--plot", str(tmp_path / "no" / "x.png"))
    assert rc == 1 and "--plot" in err and "no directory" in err and out == ""


TWO_ALL_REDUCES = """
module @dp2 attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> (tensor<1024x1024xf32>, tensor<1024x1024xf32>) {
    %0 = "stablehlo.all_reduce"(%a) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %t = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %t : tensor<f32>
    }) : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    %1 = "stablehlo.all_reduce"(%b) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %t = stablehlo.add %x, %y : tensor<f32>
      stablehlo.return %t : tensor<f32>
    }) : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    return %0, %1 : tensor<1024x1024xf32>, tensor<1024x1024xf32>
  }
}
"""


def test_a_table_of_gpus_and_tpus_says_which_rows_were_combined(tmp_path):
    """XLA GPU's combiner runs on the xla-gpu rows only: a table with a TPU row says so per
    compiler; a backend the first system cannot run (calibrated on a TPU) has its speedups
    against another system, and the table says which."""
    p = tmp_path / "dp2.mlir"
    p.write_text(TWO_ALL_REDUCES)
    res = predict(str(p), systems=["tpu-v3-8", "a100-40gb-x4"], backends=["roofline", "calibrated"], top=0)
    assert res.program["combined"] == ("xla-gpu rows: all-reduces 2 -> 1 (XLA GPU's combiner); "
                                       "xla-tpu rows: all-reduces not combined")
    assert res.program["speedup_against"] == {"roofline": "tpu-v3-8", "calibrated": "a100-40gb-x4"}
    from costmodel.predict import render_table

    text = render_table(res)
    assert "note: speedups are against the first row of each backend: roofline rows against tpu-v3-8, " \
           "calibrated rows against a100-40gb-x4" in text
    # GPUs alone: one compiler, one baseline
    res = predict(str(p), systems=["a100-40gb-x4", "h100-sxm-x4"], backends=["roofline", "calibrated"], top=0)
    assert res.program["combined"] == "all-reduces 2 -> 1 (XLA GPU's combiner)"
    assert "speedup_against" not in res.program


def test_set_system_hardware_picks_the_hardware_the_hardware_keys_change(model, stream, capsys):
    """--set system.hardware=NAME runs the system on that hardware (it was ignored: the
    hardware was read before the overrides), and the hardware. keys change that one; an
    unknown name is a one-line error."""
    base = predict(model, systems=["a100-40gb-x4"], top=0).rows[0]
    swapped = predict(model, systems=["h100-sxm-x4"], sets=["system.hardware=a100-40gb"], top=0).rows[0]
    # the same hardware (its compute), on the H100 board's network
    assert swapped.compute_ms == base.compute_ms and swapped.hbm_GiB == base.hbm_GiB and swapped.hardware == "a100-40gb"
    base = predict(stream, systems=["a100-40gb-x4"], top=0).rows[0]
    faster = predict(stream, systems=["h100-sxm-x4"], sets=["hardware.memory_bandwidth_GBps=15550",
                                                          "system.hardware=a100-40gb"], top=0).rows[0]
    assert faster.hbm_GiB == base.hbm_GiB and faster.compute_ms < base.compute_ms
    rc, _, err = run_cli(capsys, "predict", model, "--system", "h100-sxm-x4", "--set", "system.hardware=nope")
    assert rc == 1 and err.startswith("costmodel: error: --set on h100-sxm-x4: 'hardware': unknown hardware 'nope' (known: a100-40gb")


def test_trace_outputs_are_committed_together(model, tmp_path, monkeypatch):
    """--trace stages every row's trace directory and Perfetto file and commits them once
    the whole prediction succeeded: a run interrupted after its first row leaves the
    previous run's traces as they were (it wrote each row as it went: 2 of 8 entries)."""
    import costmodel.perfetto as perfetto

    out = tmp_path / "traces"
    kw = dict(systems=["a100-40gb-x4", "h100-sxm-x4"], backends=["roofline", "calibrated"], top=0)
    predict(model, trace_dir=str(out), **kw)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert len({p.parts[0] for p in before}) == 8  # 4 trace directories, 4 Perfetto files
    real, calls = perfetto.chrome_trace_bytes, []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(perfetto, "chrome_trace_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        predict(model, trace_dir=str(out), sets=["hardware.memory_bandwidth_GBps=15550"], **kw)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before and sorted(os.listdir(out)) == sorted({str(p.parts[0]) for p in before})


def test_a_learned_row_says_how_many_kernels_its_fallback_costed(tmp_path, capsys):
    """New-user audit: with backend=learned the H200 ResNet-50 row was a quarter the
    calibrated fallback's kernels, and nothing said so."""
    from costmodel import cli

    t = "tensor<16384x16384xbf16>"
    path = tmp_path / "big.mlir"
    path.write_text(  # a GEMM far beyond any of the H200 model's training kernels: the fallback's
        f"func.func @main(%a: {t}, %b: {t}) -> {t} {{\n"
        f"  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}\n"
        f"  %1 = stablehlo.tanh %0 : {t}\n"
        f"  return %1 : {t}\n}}\n"
    )
    assert cli.main(["predict", str(path), "--system", "h200-x4", "--backend", "learned", "--top", "0", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    # the GEMM and its tanh, each larger than any kernel of its kind the model learned
    assert "2 of 2 kernels are the fallback backend's estimate" in " ".join(row["notes"]), row["notes"]


def test_an_all_reduce_is_communication_only(tmp_path):
    """Metamorphic-audit find: an all-reduce's local reduction was charged twice, as
    compute by annotate-cost and inside the communication model (the measured bus
    bandwidth of a calibrated link includes it): a lone 256 MiB all-reduce on h100-sxm-x4
    took 0.19 ms of "compute" beside its 1.13 ms. Its flops are still counted."""
    p = tmp_path / "ar.mlir"
    p.write_text(
        "module @ar attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {\n"
        "  func.func public @main(%g: tensor<8192x8192xf32>) -> tensor<8192x8192xf32> {\n"
        '    %s = "stablehlo.all_reduce"(%g) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({\n'
        "    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n"
        "      %t = stablehlo.add %a, %b : tensor<f32>\n"
        "      stablehlo.return %t : tensor<f32>\n"
        "    }) : (tensor<8192x8192xf32>) -> tensor<8192x8192xf32>\n"
        "    return %s : tensor<8192x8192xf32>\n"
        "  }\n"
        "}\n"
    )
    for backend in ("roofline", "calibrated"):
        row = predict(str(p), systems=["h100-sxm-x4"], backends=[backend], top=0).rows[0]
        assert row.compute_ms == 0 and row.comm_ms > 0
        assert row.step_time_ms == pytest.approx(row.comm_ms, rel=1e-6)


def test_peak_memory_follows_the_rows_fusion(stream, tmp_path):
    """Metamorphic-audit find: `predict --fusion none` printed the xla-gpu kernels' peak
    memory (ResNet-50: 10.34 GiB where `costmodel memory --fusion none` says 28.66). The
    row's fusion is the memory analysis's."""
    from costmodel.ir import load_module, make_context
    from costmodel.memory import peak_memory

    p = tmp_path / "chain.mlir"
    p.write_text(STREAM.replace(
        "    return %y : tensor<4096x4096xf32>",
        "    %n = stablehlo.negate %y : tensor<4096x4096xf32>\n"
        "    %z = stablehlo.add %y, %n : tensor<4096x4096xf32>\n    return %z : tensor<4096x4096xf32>"))
    ctx = make_context()
    with ctx:
        module = load_module(ctx, p.read_text(), str(p))
        expected = {f: peak_memory(module, fusion=f).peak_bytes / 2**30 for f in ("none", "xla-gpu")}
    # unfused, exp's and negate's results are buffers beside the argument (the add writes
    # into one of them); fused, one kernel writes the result
    assert expected["none"] == pytest.approx(3 * 64 / 1024) and expected["xla-gpu"] == pytest.approx(2 * 64 / 1024)
    for fusion, peak in expected.items():
        row = predict(str(p), systems=["h100-sxm-x4"], fusion=fusion, top=0).rows[0]
        assert row.peak_memory_GiB == pytest.approx(peak)


def test_a_step_of_several_public_functions_says_so(stream, tmp_path, capsys):
    """Metamorphic-audit find: a public function nobody calls joined the step silently
    (ResNet-50 + an unused public matmul: +3.5%). predict sums every public function, as
    annotate-cost does, and now says which."""
    p = tmp_path / "two.mlir"
    p.write_text(STREAM.replace(
        "  func.func public @main",
        "  func.func public @other(%x: tensor<8xf32>) -> tensor<8xf32> {\n"
        "    %y = stablehlo.negate %x : tensor<8xf32>\n    return %y : tensor<8xf32>\n  }\n"
        "  func.func public @main"))
    res = predict(str(p), systems=["h100-sxm-x4"], top=0)
    assert res.program["entries"].startswith("the step runs each of the 2 public functions once: @other, @main")
    assert "entries" not in predict(stream, systems=["h100-sxm-x4"], top=0).program
    rc, out, _ = run_cli(capsys, "predict", p, "--system", "h100-sxm-x4", "--top", "0")
    assert rc == 0 and "note: the step runs each of the 2 public functions once" in out


def test_long_system_labels_are_not_cut(stream, tmp_path, capsys):
    """Audit find: the system column cut labels at 24 characters, so two system files in
    a long directory printed as the same row."""
    rc, out, _ = run_cli(capsys, "predict", stream, "--system", "h100-sxm-x4", "--set", "hardware.memory_bandwidth_GBps=4000", "--top", "0")
    assert rc == 0 and "h100-sxm-x4 [hardware.memory_bandwidth_GBps=4000] " in out


def test_mfu_leaves_out_dead_code(stream, tmp_path):
    """Metamorphic-audit find: an unused copy of a convolution changed no kernel and no
    time but raised total_flops, and so MFU (ResNet-50: +1%). The summary now has the
    removed ops' flops (removed_flops) and MFU leaves them out; total_flops stays the
    program as written (XLA's cost analysis counts dead ops too)."""
    model_text = MODEL
    dead = model_text.replace(
        "    return %s, %y",
        "    %dead = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : (tensor<256x1024xbf16>, tensor<1024x4096xbf16>) -> tensor<256x4096xbf16>\n"
        "    return %s, %y")
    assert dead != model_text
    rows = []
    for i, text in enumerate((model_text, dead)):
        p = tmp_path / f"m{i}.mlir"
        p.write_text(text)
        rows.append(predict(str(p), systems=["h100-sxm-x4"], top=0).rows[0])
    live, with_dead = rows
    assert with_dead.step_time_ms == live.step_time_ms and with_dead.kernel_count == live.kernel_count
    assert with_dead.mfu == pytest.approx(live.mfu, rel=1e-12)
    from conftest import run_annotate
    from costmodel.ir import dict_attr_values, ir

    a = run_annotate(dead, fusion="xla-gpu")
    s = dict_attr_values(ir.DictAttr(a.module.attributes["costmodel.summary"]))
    assert s["removed_flops"] == 2 * 256 * 1024 * 4096  # the dead dot: one FMA = 2 flops
    assert s["dead_op_count"] == 1


def test_a_fusion_that_does_not_apply_to_a_compiled_module_is_said(tmp_path):
    """Audit find: on a module XLA already compiled, --fusion xla-tpu was silently replaced
    by its own kernels, and --fusion none priced each of them as one op with no word."""
    p = tmp_path / "compiled.mlir"
    p.write_text(
        "func.func @main(%a: tensor<1024xf32>) -> tensor<1024xf32> {\n"
        '  %0 = "mhlo.fusion"(%a) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({\n'
        "  ^bb0(%x: tensor<1024xf32>):\n    %n = stablehlo.negate %x : tensor<1024xf32>\n"
        "    mhlo.return %n : tensor<1024xf32>\n  }) : (tensor<1024xf32>) -> tensor<1024xf32>\n"
        "  return %0 : tensor<1024xf32>\n}\n"
    )
    tpu = predict(str(p), systems=["h100-sxm-x4"], fusion="xla-tpu", top=0)
    assert tpu.rows[0].fusion == "given" and "--fusion xla-tpu does not apply" in tpu.program["fusion_note"]
    none = predict(str(p), systems=["h100-sxm-x4"], fusion="none", top=0)
    assert "--fusion none costs each of its kernels as one op" in none.program["fusion_note"]
    assert "fusion_note" not in predict(str(p), systems=["h100-sxm-x4"], top=0).program


FP8_MATMUL = """
func.func @main(%a: tensor<4096x4096xf8E4M3FN>, %b: tensor<4096x4096xf8E4M3FN>) -> tensor<4096x4096xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4096x4096xf8E4M3FN>, tensor<4096x4096xf8E4M3FN>) -> tensor<4096x4096xf32>
  return %0 : tensor<4096x4096xf32>
}
"""


def test_a_dtype_without_a_matrix_rate_is_noted(tmp_path):
    """An A100 has no fp8 tensor cores: its fp8 dots are costed at its bf16 rate, and the
    row says so; an H100's row, which has the rate, does not."""
    f = tmp_path / "fp8.mlir"
    f.write_text(FP8_MATMUL)
    res = predict(str(f), systems=["a100-40gb-x4", "h100-sxm-x4"], backends=["roofline"])
    a100, h100 = res.rows
    assert any("a100-40gb has no f8 matrix rate" in n and "bf16 rate (312 TFLOPS)" in n for n in a100.notes)
    assert not any("matrix rate" in n for n in h100.notes)
