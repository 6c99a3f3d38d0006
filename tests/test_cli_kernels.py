"""`costmodel kernels FILE`: the top kernels of a program by time, as a table or JSON,
and one-line errors for user mistakes."""

import json

import pytest

from costmodel.cli import main

# a convolution, its filter gradient and a ReLU (bf16, NHWC as JAX writes them)
PROGRAM = """
func.func @main(%x: tensor<8x56x56x64xbf16>, %w: tensor<3x3x64x64xbf16>, %dy: tensor<8x56x56x64xbf16>) -> (tensor<8x56x56x64xbf16>, tensor<3x3x64x64xbf16>) {
  %y = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x56x56x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<8x56x56x64xbf16>
  %z = stablehlo.constant dense<0.0> : tensor<8x56x56x64xbf16>
  %r = stablehlo.maximum %y, %z : tensor<8x56x56x64xbf16>
  %dw = stablehlo.convolution(%x, %dy) dim_numbers = [f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x56x56x64xbf16>, tensor<8x56x56x64xbf16>) -> tensor<3x3x64x64xbf16>
  return %r, %dw : tensor<8x56x56x64xbf16>, tensor<3x3x64x64xbf16>
}
"""


def test_table_lists_kernels_by_time_with_what_cudnn_runs(tmp_path, capsys):
    f = tmp_path / "p.mlir"
    f.write_text(PROGRAM)
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--backend", "calibrated"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "kernel launches" in out[0] and "on h100-sxm (calibrated, fusion xla-gpu)" in out[0]
    rows = [line for line in out[4:] if line.strip()]  # after the title, a blank line, the header and its rule
    assert len(rows) == 3  # the forward convolution, its filter gradient, the ReLU
    assert sum("[forward]" in r for r in rows) == 1 and sum("[backward_filter]" in r for r in rows) == 1
    assert any("maximum" in r and "[" not in r.split(":", 1)[1].split("->")[0] for r in rows)
    # --top limits the rows; the costliest comes first
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--top", "1"]) == 0
    assert len([line for line in capsys.readouterr().out.splitlines()[4:] if line.strip()]) == 1


def test_json_carries_every_kernel_and_the_conv_kind(tmp_path, capsys):
    f = tmp_path / "p.mlir"
    f.write_text(PROGRAM)
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hardware"] == "h100-sxm" and doc["fusion"] == "xla-gpu"
    assert doc["kernel_count"] == sum(k["launches"] for k in doc["kernels"])
    convs = sorted(k["conv"] for k in doc["kernels"] if k["kind"] == "conv")
    assert convs == ["backward_filter", "forward"]
    assert all("conv" not in k for k in doc["kernels"] if k["kind"] != "conv")
    times = [k["total_time_ns"] for k in doc["kernels"]]
    assert times == sorted(times, reverse=True)


def test_json_carries_the_backend_detail_of_each_kernel(tmp_path, capsys):
    """Why a kernel takes its time: the calibrated backend's plan of the filter gradient
    (its split-K count and tile efficiency) and each kernel's launch time, as plain
    values under `detail`."""
    f = tmp_path / "p.mlir"
    f.write_text(PROGRAM)
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--backend", "calibrated", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dw = next(k for k in doc["kernels"] if k.get("conv") == "backward_filter")
    assert isinstance(dw["detail"]["split_k"], int) and dw["detail"]["split_k"] >= 1
    assert 0 < dw["detail"]["tile_efficiency"] <= 1
    assert all(k["detail"]["launch_ns"] > 0 for k in doc["kernels"])
    assert all(key not in k["detail"] for k in doc["kernels"] for key in ("id", "kind", "time_ns", "conv"))


def test_user_mistakes_are_one_line_errors(tmp_path, capsys):
    f = tmp_path / "p.mlir"
    f.write_text(PROGRAM)
    assert main(["kernels", str(f), "--top", "-1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--top must be >= 0" in err
    assert main(["kernels", str(f), "--fusion", "none"]) == 1
    assert "forms no kernels" in capsys.readouterr().err
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main() {\n  %0 = stablehlo.bogus\n}\n")
    assert main(["kernels", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.mlir:2:" in err
    assert main(["kernels", str(tmp_path / "missing.mlir")]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_ops_not_costed_are_said(tmp_path, capsys):
    """Ops that no rule costs (here a dynamic shape) count as no time: the table ends with
    a note giving their count, kinds and the first reason; the JSON carries it."""
    from conftest import DYNAMIC_MLP

    f = tmp_path / "dyn.mlir"
    f.write_text(DYNAMIC_MLP)
    assert main(["kernels", str(f), "--hardware", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    note = out.splitlines()[-1]
    # the dot, not the return that hands its result back (audit: terminators were counted)
    assert note.startswith("note: 1 op not costed, counted as no time")
    assert "(stablehlo.dot_general 1)" in note and "dynamic shape tensor<?x128xf32>" in note
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_costed"] == note[len("note: "):]
    f.write_text(PROGRAM)
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_costed"] is None


def test_annotate_warnings_go_to_stderr(tmp_path, capsys):
    from conftest import DATA_DEPENDENT_WHILE

    f = tmp_path / "loop.mlir"
    f.write_text(DATA_DEPENDENT_WHILE)
    assert main(["kernels", str(f), "--hardware", "h100-sxm"]) == 0
    captured = capsys.readouterr()
    assert "cannot infer the trip count" in captured.err and "cannot infer" not in captured.out


def test_a_custom_call_kernel_names_its_target(tmp_path, capsys):
    """A library call's kernel says which (`@cusolver_potrf_ffi`), in the table and the JSON."""
    f = tmp_path / "chol.mlir"
    f.write_text("""
func.func @main(%a: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %0:2 = stablehlo.custom_call @cusolver_potrf_ffi(%a) {mhlo.backend_config = {lower = true}} : (tensor<256x256xf32>) -> (tensor<256x256xf32>, tensor<i32>)
  return %0#0 : tensor<256x256xf32>
}
""")
    assert main(["kernels", str(f), "--hardware", "h100-sxm"]) == 0
    assert "1: custom_call @cusolver_potrf_ffi -> tensor<256x256xf32>" in capsys.readouterr().out
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--json"]) == 0
    (k,) = json.loads(capsys.readouterr().out)["kernels"]
    assert k["target"] == "cusolver_potrf_ffi" and k["flops"] == round(256**3 / 3)  # Cholesky: n^3 / 3


def test_kernels_of_a_composites_decomposition_run_once_per_composite(tmp_path, capsys):
    """A composite runs its decomposition (`lax.ragged_dot` exported for CUDA): the
    decomposition's kernels run as often as the composite, not zero times."""
    f = tmp_path / "composite.mlir"
    f.write_text("""
func.func @main(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %0 = stablehlo.composite "my.matmul" %a, %b {decomposition = @my.matmul.impl} : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %1 = stablehlo.composite "my.matmul" %a, %b {decomposition = @my.matmul.impl} : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  %2 = stablehlo.add %0, %1 : tensor<64x16xf32>
  return %2 : tensor<64x16xf32>
}
func.func private @my.matmul.impl(%a: tensor<64x32xf32>, %b: tensor<32x16xf32>) -> tensor<64x16xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x32xf32>, tensor<32x16xf32>) -> tensor<64x16xf32>
  return %0 : tensor<64x16xf32>
}
""")
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--json"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    (gemm,) = [k for k in kernels if k["kind"] == "gemm"]
    assert gemm["executions"] == 2 and gemm["flops"] == 2 * 64 * 16 * 32  # one FMA = 2 flops


CALLED_RELU = """
func.func @main(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %0 = call @relu(%x) : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %1 = stablehlo.multiply %0, %x : tensor<1024x1024xf32>
  return %1 : tensor<1024x1024xf32>
}
func.func private @relu(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<1024x1024xf32>
  %0 = stablehlo.maximum %x, %z : tensor<1024x1024xf32>
  return %0 : tensor<1024x1024xf32>
}
"""


def test_calls_are_inlined_as_predict_does(tmp_path, capsys):
    """`costmodel kernels` forms the kernels `costmodel predict` does: calls inlined first
    (as XLA does), the functions no longer called dropped; --no-inline keeps each
    function's kernels apart, as stablehlo-opt --annotate-cost."""
    from costmodel.predict import predict

    f = tmp_path / "relu.mlir"
    f.write_text(CALLED_RELU)
    assert main(["kernels", str(f), "--json"]) == 0
    inlined = json.loads(capsys.readouterr().out)
    assert inlined["kernel_count"] == 1  # maximum and multiply in one loop kernel
    assert [k["executions"] for k in inlined["kernels"]] == [1]
    res = predict(str(f), systems=["dgx-h100"])
    assert res.rows[0].kernel_count == inlined["kernel_count"]
    assert main(["kernels", str(f), "--json", "--no-inline"]) == 0
    apart = json.loads(capsys.readouterr().out)
    assert apart["kernel_count"] == 2 and sorted(k["executions"] for k in apart["kernels"]) == [1, 1]


def test_a_sharded_program_is_partitioned_first(capsys):
    """A sharded export not yet partitioned: its kernels are one device's, as predict
    forms them (a note says it was partitioned), never the global program's."""
    import os

    from costmodel.predict import predict

    f = os.path.join(os.path.dirname(__file__), "data", "sharded", "tp_mlp.mlir")
    assert main(["kernels", f, "--json"]) == 0
    captured = capsys.readouterr()
    assert "note: the module was sharded but not partitioned: analysed after propagate-shardings" in captured.err
    doc = json.loads(captured.out)
    assert doc["kernel_count"] == predict(f, systems=["dgx-h100"]).rows[0].kernel_count
    # the hidden layer, 128 wide, is 16 wide on each of the 8 devices
    shapes = [k["shape"] for k in doc["kernels"]]
    assert "tensor<16x16xf32>" in shapes and "tensor<16x128xf32>" not in shapes


def test_a_module_without_a_program_is_one_error(tmp_path, capsys):
    f = tmp_path / "empty.mlir"
    f.write_text("module {}\n")
    assert main(["kernels", str(f)]) == 1
    assert "has no public function with a body: no kernels to list" in capsys.readouterr().err


def _fan_out(depth: int) -> str:
    """f0 calls f1 twice, f1 calls f2 twice, ...: 2^depth calls of the last one's add."""
    t = "tensor<4xf32>"
    lines = []
    for i in range(depth):
        vis = "" if i == 0 else "private "
        lines.append(f"func.func {vis}@f{i}(%x: {t}) -> {t} {{\n"
                     f"  %a = func.call @f{i + 1}(%x) : ({t}) -> {t}\n"
                     f"  %b = func.call @f{i + 1}(%a) : ({t}) -> {t}\n"
                     f"  return %b : {t}\n}}")
    lines.append(f"func.func private @f{depth}(%x: {t}) -> {t} {{\n  %y = stablehlo.add %x, %x : {t}\n  return %y : {t}\n}}")
    return "\n".join(lines) + "\n"


def test_a_call_tree_that_fans_out(tmp_path, capsys):
    """A call tree of 2^40 paths: inlining it is refused in milliseconds with the option
    that avoids it (it grew memory until the machine killed it); with --no-inline its
    kernel's executions are counted per function, not per path (it ran for minutes)."""
    f = tmp_path / "fan.mlir"
    f.write_text(_fan_out(40))
    assert main(["kernels", str(f)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("costmodel: error: inlining the calls of 'f") and " would make " in err and "--no-inline" in err
    assert main(["kernels", str(f), "--no-inline", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["kernels"]
    assert row["executions"] == 2**40


def test_malformed_annotations_are_one_line(tmp_path, capsys):
    """A module whose costmodel.kernel_cost is not what annotate-cost writes (edited by
    hand): a one-line error, not a traceback."""
    f = tmp_path / "bad.mlir"
    f.write_text(
        'module attributes {costmodel.summary = {kernel_count = "x", total_time_ns = 1.0 : f64}} {\n'
        "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        '  %0 = stablehlo.add %a, %a {costmodel.kernel = 0 : i64, costmodel.kernel_cost = "junk"} : tensor<4xf32>\n'
        "  return %0 : tensor<4xf32>\n}\n}\n")
    assert main(["kernels", str(f)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("costmodel: error: ") and "attributes are malformed" in err and len(err.splitlines()) == 1


def test_top_zero_prints_the_totals_only(tmp_path, capsys):
    """Audit find: `--top 0` meant "none" in predict but was an error in kernels and
    memory. All three now take it."""
    f = tmp_path / "p.mlir"
    f.write_text(PROGRAM)
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "kernel launches" in out and "ops / shape" not in out
    assert main(["memory", str(f), "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "peak" in out and "largest temporaries" not in out


def test_kernels_that_never_run_are_left_out(tmp_path, capsys):
    """Audit find: the JSON of the compiled ResNet-18 listed 879 kernels for its 647
    launches: 232 never run (outlined computations nobody calls, reducers). Kernels of no
    execution are left out of the table and the JSON, which counts them."""
    text = PROGRAM.replace("func.func @main", """func.func private @unused(%a: tensor<64xf32>) -> tensor<64xf32> {
  %0 = stablehlo.exponential %a : tensor<64xf32>
  return %0 : tensor<64xf32>
}
func.func @main""")
    f = tmp_path / "p.mlir"
    f.write_text(text)
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--no-inline", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kernels_not_run"] == 1 and len(doc["kernels"]) == doc["kernel_count"] == 3
    assert all(k["executions"] >= 1 for k in doc["kernels"])


def test_runs_of_a_weighted_branch_are_rounded():
    """Audit find: with branch=mean the runs column printed 0.3333333333333333."""
    from costmodel.kernels.report import KernelRow, render_table

    row = KernelRow(id=0, kind="loop", time_ns=1.0, bound="memory", flops=0, bytes_read=4, bytes_written=4,
                    launches=1, shape="tensor<f32>", location="")
    row.executions = 1 / 3
    assert " 0.33 " in render_table([row], 5).splitlines()[2]


def test_a_compiled_module_on_the_cpu_preset_says_how_to_list_its_kernels(capsys):
    """Audit find: on the cpu preset (fusion none) a compiled module's kernels were not
    listed and the error suggested the hardware was the cause."""
    import pathlib

    f = pathlib.Path(__file__).parent / "data" / "xla_compiled" / "gemm512_given.mlir"
    assert main(["kernels", str(f), "--hardware", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compiled by XLA (mhlo.fusion)" in err and "--fusion xla-gpu" in err
    assert main(["kernels", str(f), "--hardware", "cpu", "--fusion", "xla-gpu"]) == 0
    assert "fusion given" in capsys.readouterr().out


# JAX's op names as `.as_text(debug_info=True)` writes them: a name per op (its scope and
# primitive), a private function whose ops are named relative to it, called from a scope
NAMED = """
#a = loc("jit(loss)/jvp(M)/encoder/dot_general")
#b = loc("jit(loss)/jvp(M)/jit(relu)")
#c = loc("max")
#d = loc("jit(loss)/transpose(jvp(M))/head/dot_general")
#e = loc("jit(loss)/transpose(jvp(M))/head/exp")
module @jit_loss {
  func.func public @main(%x: tensor<256x512xf32>, %w: tensor<512x1024xf32>, %v: tensor<1024x512xf32>) -> (tensor<256x1024xf32>, tensor<256x512xf32>) {
    %h = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<256x512xf32>, tensor<512x1024xf32>) -> tensor<256x1024xf32> loc(#a)
    %r = call @relu(%h) : (tensor<256x1024xf32>) -> tensor<256x1024xf32> loc(#b)
    %y = stablehlo.dot_general %r, %v, contracting_dims = [1] x [0] : (tensor<256x1024xf32>, tensor<1024x512xf32>) -> tensor<256x512xf32> loc(#d)
    %e = stablehlo.exponential %y : tensor<256x512xf32> loc(#e)
    %z = stablehlo.divide %e, %e : tensor<256x512xf32> loc("div")
    return %r, %z : tensor<256x1024xf32>, tensor<256x512xf32>
  }
  func.func private @relu(%arg0: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<256x1024xf32> loc(#c)
    %0 = stablehlo.maximum %arg0, %cst : tensor<256x1024xf32> loc(#c)
    return %0 : tensor<256x1024xf32>
  }
}
"""


def test_by_scope_sums_kernels_by_their_jax_scope(tmp_path, capsys):
    f = tmp_path / "named.mlir"
    f.write_text(NAMED)
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--json"]) == 0
    kernels = json.loads(capsys.readouterr().out)["kernels"]
    names = sorted(k["name"] for k in kernels)
    # the inlined ReLU is named by its call site, then by its own name
    assert "jit(loss)/jvp(M)/jit(relu)/max" in names
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--by", "scope", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    scopes = {s["scope"]: s for s in doc["scopes"]}
    assert "kernels" not in doc
    by_kernel = {}
    for k in kernels:
        from costmodel.kernels.report import scope_of

        by_kernel.setdefault(scope_of(k["name"]), []).append(k)
    assert set(scopes) == set(by_kernel)
    for scope, ks in by_kernel.items():
        assert scopes[scope]["time_ns"] == pytest.approx(sum(k["total_time_ns"] for k in ks))
        assert scopes[scope]["kernels"] == len(ks)
    assert sum(s["launches"] for s in doc["scopes"]) == doc["kernel_count"]
    # depth 2: the forward and the backward of M
    assert main(["kernels", str(f), "--hardware", "h100-sxm", "--by", "scope", "--depth", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[-1] for line in out.splitlines()[4:] if line.strip()]
    assert set(rows) <= {"jit(loss)/jvp(M)", "jit(loss)/transpose(jvp(M))", "scope)"}
    assert "jit(loss)/jvp(M)" in rows and "jit(loss)/transpose(jvp(M))" in rows


def test_kernel_table_says_where_each_kernel_is(tmp_path, capsys):
    f = tmp_path / "named.mlir"
    f.write_text(NAMED)
    assert main(["kernels", str(f), "--hardware", "h100-sxm"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()[4:] if line.strip()]
    assert any(r.endswith("in jit(loss)/transpose(jvp(M))/head") and "1: dot_general" in r for r in rows)
    # the first GEMM's epilogue is the inlined ReLU: the kernel is where its root is
    assert any(r.endswith("in jit(loss)/jvp(M)/jit(relu)") and "dot_general,maximum" in r for r in rows)
    assert any(r.endswith("in (no scope)") for r in rows)  # `div`: a primitive outside every scope


def test_by_scope_errors_are_one_line(tmp_path, capsys):
    f = tmp_path / "p.mlir"
    f.write_text(PROGRAM)  # no op names
    assert main(["kernels", str(f), "--by", "scope"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no kernel's op carries a name" in err and "debug_info=True" in err
    assert main(["kernels", str(f), "--depth", "2"]) == 1
    assert "--depth applies to --by scope" in capsys.readouterr().err
    assert main(["kernels", str(f), "--by", "scope", "--depth", "0"]) == 1
    assert "--depth must be >= 1" in capsys.readouterr().err


LOOP = """
func.func @main(%x: tensor<64x256xf32>, %w: tensor<256x256xf32>, %n: tensor<i32>) -> tensor<64x256xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %h = %x) : tensor<i32>, tensor<64x256xf32>
    cond {
      %lt = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    } do {
      %d = stablehlo.dot_general %h, %w, contracting_dims = [1] x [0] : (tensor<64x256xf32>, tensor<256x256xf32>) -> tensor<64x256xf32>
      %t = stablehlo.tanh %d : tensor<64x256xf32>
      %j = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %j, %t : tensor<i32>, tensor<64x256xf32>
    }
  return %r#1 : tensor<64x256xf32>
}
"""


def test_unknown_trip_count_is_given_as_predict_gives_it(tmp_path, capsys):
    f = tmp_path / "loop.mlir"
    f.write_text(LOOP)
    assert main(["kernels", str(f), "--json"]) == 0
    captured = capsys.readouterr()
    assert "--unknown-trip-count N" in captured.err  # the warning names this command's flag
    once = {k["ops"][-1]: k["executions"] for k in json.loads(captured.out)["kernels"]}
    assert main(["kernels", str(f), "--unknown-trip-count", "5", "--json"]) == 0
    five = {k["ops"][-1]: k["executions"] for k in json.loads(capsys.readouterr().out)["kernels"]}
    assert once["stablehlo.tanh"] == 1 and five["stablehlo.tanh"] == 5
    for bad, message in (("x", "expects a whole number"), ("-3", "expects 0 to 2^63-1"), (" ", "needs a value")):
        assert main(["kernels", str(f), "--unknown-trip-count", bad]) == 1
        assert message in capsys.readouterr().err
