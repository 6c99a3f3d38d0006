"""costmodel.learn.gpu: the learned model's GPU data (plan here, measure on a GPU, import
here) and the learned backend on a GPU spec. The measuring side runs here on jax's CPU
(`allow_cpu`: wall times); its profile parsing is checked on a written trace."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from costmodel.backends import BackendError, make_backend
from costmodel.hardware import load_hardware
from costmodel.learn import gpu
from costmodel.learn.programs import Program

# two kernels under xla-gpu: the dot (a GEMM) and the tanh with the reduction of it (a
# multi-output reduction kernel: the tanh is a result too)
TEXT = """\
func.func @main(%x: tensor<64x128xf32>, %w: tensor<128x32xf32>) -> (tensor<64x32xf32>, tensor<64xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x32xf32>) -> tensor<64x32xf32>
  %1 = stablehlo.tanh %0 : tensor<64x32xf32>
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %2 = stablehlo.reduce(%1 init: %c) applies stablehlo.add across dimensions = [1] : (tensor<64x32xf32>, tensor<f32>) -> tensor<64xf32>
  return %1, %2 : tensor<64x32xf32>, tensor<64xf32>
}
"""


def _plan(tmp_path, fusions=("xla-gpu",)):
    rows = gpu.plan([Program("dot_tanh_sum#0", "test", TEXT)], hardware="h200", fusions=fusions)
    path = str(tmp_path / "plan.jsonl.gz")
    gpu.write_jsonl(rows, path)
    return rows, path


def test_plan_rows(tmp_path):
    rows, path = _plan(tmp_path, fusions=("xla-gpu", "none"))
    assert gpu.read_jsonl(path) == json.loads(json.dumps(rows))  # gzipped JSON lines, read back
    meta, *rest = rows
    assert meta["type"] == "meta" and meta["hardware"] == "h200" and meta["fusions"] == ["xla-gpu", "none"]
    assert meta["spec"]["memory_bandwidth_GBps"] == load_hardware("h200").memory_bandwidth_GBps
    kernels = [r for r in rest if r["type"] == "kernel"]
    fused = [r for r in kernels if r["fusion"] == "xla-gpu"]
    assert [r["kind"] for r in fused] == ["gemm", "input"]
    assert fused[0]["args"] == [[[64, 128], "f32"], [[128, 32], "f32"]]
    assert [r["tokens"] for r in fused] == [["dot_general"], ["tanh", "reduce"]]
    assert fused[1]["args"] == [[[64, 32], "f32"]]
    # fusion=none adds the kernels it forms differently (the tanh alone, the reduction
    # alone); the dot, the same kernel in both formations, is planned once
    assert len({r["signature"] for r in kernels}) == len(kernels)
    assert [(r["kind"], r["tokens"]) for r in kernels if r["fusion"] == "none"] == [("loop", ["tanh"]), ("input", ["reduce"])]
    (prog,) = [r for r in rest if r["type"] == "program"]
    assert prog["program"] == "dot_tanh_sum#0" and prog["args"] == [[[64, 128], "f32"], [[128, 32], "f32"]]
    assert prog["text"] == TEXT


@pytest.mark.parametrize(
    "text, expected",
    [
        ("module {\n}", "module @m7 {\n}"),
        ("module @jit_f attributes {mhlo.num_partitions = 1 : i32} {\n}", "module @m7 attributes {mhlo.num_partitions = 1 : i32} {\n}"),
        ('#loc = loc("x")\nmodule @"a b" {\n}', '#loc = loc("x")\nmodule @m7 {\n}'),
    ],
)
def test_renamed(text, expected):
    assert gpu.renamed(text, "m7") == expected


def test_renamed_implicit_module():
    assert gpu.renamed("func.func @main() {\n  return\n}", "m1") == "module @m1 {\nfunc.func @main() {\n  return\n}\n}\n"


def test_per_call_median_of_calls():
    # 3 calls of 2 kernels each, durations in us: calls sum to 3, 4 and 5 us
    t, spread, kernels = gpu.per_call([1.0, 2.0, 1.5, 2.5, 2.0, 3.0], calls=3)
    assert t == pytest.approx(4.0 * 1e3)  # median call, ns
    assert spread == pytest.approx((5.0 - 3.0) / 4.0)
    assert kernels == 2.0
    assert gpu.per_call([], calls=3) == (0.0, 0.0, 0.0)
    # kernels not divisible by the calls: the mean per call, no spread
    assert gpu.per_call([1.0, 2.0], calls=3) == (pytest.approx(3.0 / 3 * 1e3), 0.0, pytest.approx(2 / 3))


def test_gpu_kernel_times_from_a_trace(tmp_path):
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/host:CPU"}},
        {"ph": "X", "pid": 1, "ts": 20, "dur": 3.0, "name": "loop_add_fusion", "args": {"hlo_module": "m1"}},
        {"ph": "X", "pid": 1, "ts": 10, "dur": 2.0, "name": "gemm_fusion", "args": {"hlo_module": "m1"}},
        {"ph": "X", "pid": 1, "ts": 30, "dur": 9.0, "name": "Memset (Device)", "args": {"hlo_module": "m1"}},
        {"ph": "X", "pid": 1, "ts": 40, "dur": 5.0, "name": "input_reduce_fusion", "args": {"hlo_module": "m2"}},
        {"ph": "X", "pid": 7, "ts": 5, "dur": 50.0, "name": "PjRtExecute", "args": {"hlo_module": "m1"}},
    ]
    d = tmp_path / "plugins" / "profile" / "run"
    d.mkdir(parents=True)
    with gzip.open(d / "perfetto_trace.json.gz", "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    # GPU kernels only, in time order, memsets left out, grouped by module
    assert gpu.gpu_kernel_times(str(tmp_path)) == {"m1": [2.0, 3.0], "m2": [5.0]}
    # with their names (benchmarks/gpu_measure.py: which library kernels a call runs)
    assert gpu.gpu_kernel_events(str(tmp_path)) == {"m1": [("gemm_fusion", 2.0), ("loop_add_fusion", 3.0)],
                                                    "m2": [("input_reduce_fusion", 5.0)]}
    empty = tmp_path / "none"
    empty.mkdir()
    assert gpu.gpu_kernel_times(str(empty)) is None


def test_make_input_types():
    import numpy as np

    rng = np.random.default_rng(0)
    assert gpu.make_input((4, 3), "bf16", rng).dtype.name == "bfloat16"
    ints = gpu.make_input((100,), "i32", rng)
    assert ints.dtype == np.int32 and ints.min() >= 0 and ints.max() <= 3  # valid indices of most gathers
    assert gpu.make_input((5,), "i1", rng).dtype == np.bool_
    assert gpu.make_input((2,), "complex<f32>", rng).dtype == np.complex64
    with pytest.raises(ValueError, match="no input of element type f8E4M3FN"):
        gpu.make_input((2,), "f8E4M3FN", rng)


def test_measure_import_train_predict_cycle(tmp_path, profile_cache):
    """The whole loop on jax's CPU: plan -> measure (wall times) -> dataset -> model ->
    the learned backend on the plan's hardware."""
    pytest.importorskip("sklearn", reason="training needs the [learn] extra (scikit-learn)")
    rows, plan_path = _plan(tmp_path)
    out = str(tmp_path / "measured.json")
    logs = []
    # without a GPU the profile has no GPU line: refused unless allow_cpu
    assert gpu.measure([plan_path], out, calls=2, jobs=2, log=logs.append) == 1
    assert "no GPU here" in logs[-1]
    assert gpu.measure([plan_path], out, calls=2, jobs=2, allow_cpu=True, log=logs.append) == 0
    with open(out) as fh:
        measured = json.load(fh)
    keys = {r["signature"] for r in rows if r["type"] == "kernel"} | {"program:dot_tanh_sum#0"}
    assert set(measured["results"]) == keys
    assert all(r["status"] == "measured" and r["method"] == "wall" and r["kernel_ns"] > 0 for r in measured["results"].values())
    assert measured["env"]["device"].startswith("cpu:")

    data = str(tmp_path / "data.jsonl")
    stats = gpu.import_measurements([plan_path], [out], data)
    assert stats == {"kernel_rows": 2, "programs": 1, "failed": 0}
    from costmodel.learn.dataset import read_dataset

    ds = read_dataset(data)
    assert ds.meta["hardware"] == "h200" and ds.meta["invocation_ns"] == 0.0 and ds.meta["runtime"].startswith("xla-cpu (jax ")
    assert [k["target_ns"] for k in ds.kernels] == [measured["results"][k["signature"]]["kernel_ns"] for k in ds.kernels]
    assert ds.programs[0]["measured_ns"] == measured["results"]["program:dot_tanh_sum#0"]["kernel_ns"]
    assert "text" not in ds.kernels[0] and "args" not in ds.kernels[0]

    from costmodel.learn.train import train_model

    model, _ = train_model(ds, test_fraction=0.0, params={"n_estimators": 5, "max_depth": 2, "min_samples_leaf": 1}, fusion="xla-gpu")
    path = str(tmp_path / "model.json")
    model.save(path)
    from costmodel.profiling.evaluate import predicted_total_ns

    total, summary = predicted_total_ns(TEXT, hardware="h200", backend="learned", fusion="xla-gpu", options={"model": path})
    # two kernels from the model, no invocation overhead (a GPU program's time is its kernels')
    from costmodel.learn.features import SpecNumbers

    expected = sum(model.predict_ns(k["features"]) for k in ds.kernels)
    assert total == pytest.approx(expected, rel=1e-9)
    assert summary["kernels_predicted"] == 2 and summary["kernel_count"] == 2
    assert SpecNumbers.from_json(model.meta["spec"]).bandwidth == load_hardware("h200").memory_bandwidth_GBps
    # a model predicts only the hardware it learned
    with pytest.raises(BackendError, match="learned hardware 'h200' and predicts only it: use hardware=h200 \\(got 'host-cpu'\\)"):
        make_backend("learned", load_hardware("host-cpu"), {"model": path})

    # its training support: per kind, the largest roofline time of its training kernels
    support = model.meta["support_log_roofline_ns"]
    assert support == {k["kind"]: k["features"]["log_roofline_ns"] for k in ds.kernels}  # one kernel of each kind
    # a larger GEMM, and a kind it never saw (an elementwise loop kernel): the fallback
    # (calibrated) answers, marked, unless beyond=extrapolate
    bigger = TEXT.replace("64x128", "2048x4096").replace("128x32", "4096x1024").replace("64x32", "2048x1024").replace("64xf32", "2048xf32")
    loop = "func.func @main(%x: tensor<256x256xf32>) -> tensor<256x256xf32> {\n  %0 = stablehlo.exponential %x : tensor<256x256xf32>\n  return %0 : tensor<256x256xf32>\n}\n"
    calibrated, _ = predicted_total_ns(loop, hardware="h200", backend="calibrated", fusion="xla-gpu")
    total, summary = predicted_total_ns(loop, hardware="h200", backend="learned", fusion="xla-gpu", options={"model": path})
    assert summary["kernels_fallback"] == 1 and summary.get("kernels_predicted", 0) == 0 and total == calibrated
    total, summary = predicted_total_ns(bigger, hardware="h200", backend="learned", fusion="xla-gpu", options={"model": path})
    assert summary["kernels_fallback"] == 2 and summary.get("kernels_predicted", 0) == 0
    _, summary = predicted_total_ns(bigger, hardware="h200", backend="learned", fusion="xla-gpu", options={"model": path, "beyond": "extrapolate"})
    assert summary["kernels_predicted"] == 2 and summary.get("kernels_fallback", 0) == 0
    with pytest.raises(BackendError, match="beyond"):
        make_backend("learned", load_hardware("h200"), {"model": path, "beyond": "maybe"})


def test_import_refuses_plans_of_other_hardware(tmp_path):
    _, a = _plan(tmp_path)
    b = str(tmp_path / "other.jsonl.gz")
    gpu.write_jsonl(gpu.plan([Program("p#1", "test", TEXT)], hardware="h100-sxm"), b)
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"env": {}, "results": {}}))
    with pytest.raises(ValueError, match="different hardware"):
        gpu.import_measurements([a, b], [str(m)], str(tmp_path / "d.jsonl"))
    assert not os.path.exists(tmp_path / "d.jsonl")


def test_read_measurements_merges_runs(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"env": {"jax": "1"}, "calls": 5, "results": {"k1": {"status": "failed"}, "k2": {"status": "measured"}}}))
    b.write_text(json.dumps({"env": {"jax": "2"}, "calls": 5, "results": {"k1": {"status": "measured"}}}))
    m = gpu.read_measurements([str(a), str(b)])
    assert m["env"] == {"jax": "1"}
    assert m["results"] == {"k1": {"status": "measured"}, "k2": {"status": "measured"}}  # a later run wins
    assert [r["file"] for r in m["runs"]] == ["a.json", "b.json"]


def test_shipped_h200_model(profile_cache):
    """The shipped H200 model: the default of backend=learned on hardware=h200; no model
    for a GPU it never measured."""
    from costmodel.backends.learned import model_hardware, shipped_model_path
    from costmodel.learn.model import TreeModel
    from costmodel.profiling.evaluate import predicted_total_ns

    model = TreeModel.load(shipped_model_path("h200"))
    assert model_hardware(model) == "h200" and model.meta["invocation_ns"] == 0.0
    assert "H200" in model.meta["device"]
    total, summary = predicted_total_ns(TEXT, hardware="h200", backend="learned")  # fusion: xla-gpu, h200's default
    assert summary["kernels_predicted"] == 2
    # the two kernels' predictions and nothing else (no invocation overhead on a GPU)
    kernels = [r for r in gpu.plan([Program("p#0", "test", TEXT)], hardware="h200") if r["type"] == "kernel"]
    assert total == pytest.approx(sum(model.predict_ns(k["features"]) for k in kernels), rel=1e-9)
    assert 1e3 < total < 1e6  # two small kernels: microseconds
    assert not (profile_cache / "profiles.sqlite3").exists()  # nothing was measured
    # each kernel says who timed it (costmodel kernels, gpu_eval): a 4096^3 GEMM is beyond
    # the model's GEMMs (its support); the reduction of its 64 MB result (a roofline of
    # ~14 us) is within the support of reduction kernels
    from costmodel.pipeline import step_kernels

    big = TEXT.replace("64x128", "4096x4096").replace("128x32", "4096x4096").replace("64x32", "4096x4096").replace("64xf32", "4096xf32")
    rows = step_kernels(big, hardware="h200", backend="learned")
    assert {r.kind: r.profile for r in rows} == {"gemm": "fallback", "input": "learned"}
    rows = step_kernels(TEXT, hardware="h200", backend="learned")
    assert {r.kind: r.profile for r in rows} == {"gemm": "learned", "input": "learned"}
    assert rows[0].to_dict()["profile"] == "learned"
    calibrated = step_kernels(TEXT, hardware="h200", backend="calibrated")
    assert "profile" not in calibrated[0].to_dict()
    # the kernel table (costmodel kernels) gets a "by" column where a backend says it
    from costmodel.kernels.report import render_table

    table = render_table(rows, top=5).splitlines()
    assert table[0].split()[6] == "by" and all(line.split()[7] == "learned" for line in table[2:])  # time is "N us"
    assert "by" not in render_table(calibrated, top=5).splitlines()[0].split()
    with pytest.raises(BackendError, match="no model is shipped for hardware 'a100-40gb' \\(shipped: h200, host-cpu\\)"):
        make_backend("learned", load_hardware("a100-40gb"), {})


def test_gpu_scale_corpus():
    """The GPU families: training-step sizes (tensors of 1M elements and more), bf16
    convolutions with their input and filter gradients; planned like any program; the
    CPU corpus of a seed is unchanged by their existence."""
    from costmodel.learn.programs import GPU_FAMILIES, corpus_programs
    from costmodel.profiling.ireerun import main_arg_infos

    progs = corpus_programs(24, seed=3, scale="gpu")
    assert len({p.name for p in progs}) == 24 and {p.family for p in progs} <= set(GPU_FAMILIES)
    for p in progs:
        assert max(i.num_elements for i in main_arg_infos(p.text)) >= 1 << 20, p.name
    convs = [p for p in progs if p.family == "conv"]
    assert {p.name.split("-")[1] for p in convs} == {"fwd", "dx", "dw"}
    assert all("bf16" in p.text and "stablehlo.convolution" in p.text for p in convs)
    assert [p.name for p in corpus_programs(3, seed=3)] == [p.name for p in corpus_programs(3, seed=3, scale="cpu")]
    assert not {p.name for p in corpus_programs(24, seed=3)} & {p.name for p in progs}
    rows = gpu.plan(convs[:2], hardware="h200")
    assert {r["program"] for r in rows if r["type"] == "kernel"} == {p.name for p in convs[:2]}
    assert any(r["kind"] == "conv" for r in rows if r["type"] == "kernel")


def test_gpu_kernels_eval_of_a_file_without_measured_programs_is_one_line(tmp_path):
    """A plan given where the imported dataset belongs: one line, exit 1, no NaN table."""
    import subprocess
    import sys

    plan = tmp_path / "plan.jsonl"
    plan.write_text(json.dumps({"type": "meta", "hardware": "h200", "fusions": ["xla-gpu"]}) + "\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, os.path.join(repo, "benchmarks", "gpu_kernels.py"), "eval", str(plan)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"gpu_kernels: error: {plan} holds no measured program (a plan? make the dataset with "
        "`gpu_kernels.py import --plan PLAN --measured MEASURED.json -o DATA` first)"
    ]
    assert "nan" not in proc.stdout
