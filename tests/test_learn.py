"""costmodel.learn: kernel features, the tree model (trained with scikit-learn, evaluated
from JSON in pure Python), the `learned` backend and `costmodel learn`."""

from __future__ import annotations

import json
import math
import os

import pytest

from costmodel import cli
from costmodel.backends import BackendError, KernelCost, make_backend
from costmodel.engine import CostEngine
from costmodel.hardware import load_hardware
from costmodel.ir import DiagnosticEngine, load_module, make_context
from costmodel.learn.features import FEATURE_NAMES, SpecNumbers, kernel_features, token_sequence

SPEC = SpecNumbers(0.1, 0.1, 10.0, "test")


class FeatureRecorder:
    name = "features"
    kernels_only = True

    def __init__(self):
        self.rows = []

    def estimate_kernel(self, kernel):
        self.rows.append((kernel, kernel_features(kernel, SPEC), token_sequence(kernel)))
        return KernelCost(1.0, "compute")

    def estimate(self, cost):
        return 0.0, "overhead"


def features_of(text: str, fusion: str = "none"):
    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    rec = FeatureRecorder()
    CostEngine(rec, "host-cpu", DiagnosticEngine("<test>"), fusion=fusion).run(module)
    return [(k.kind, f, t) for k, f, t in rec.rows]


def test_gemm_features():
    M, N, K = 32, 48, 64
    ((kind, f, tokens),) = features_of(
        f"""\
func.func @main(%a: tensor<{M}x{K}xf32>, %b: tensor<{N}x{K}xf32>) -> tensor<{M}x{N}xf32> {{
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [1] : (tensor<{M}x{K}xf32>, tensor<{N}x{K}xf32>) -> tensor<{M}x{N}xf32>
  return %0 : tensor<{M}x{N}xf32>
}}
"""
    )
    assert set(f) == set(FEATURE_NAMES)
    assert kind == "gemm" and f["kind_gemm"] == 1.0 and tokens == ["dot_general"]
    assert f["log_flops"] == pytest.approx(math.log1p(2 * M * N * K))  # one FMA = 2 flops
    assert f["log_matrix_flops"] == f["log_flops"] and f["log_vector_flops"] == 0.0
    assert (f["gemm_log_m"], f["gemm_log_n"], f["gemm_log_k"]) == (math.log2(M), math.log2(N), math.log2(K))
    # lhs contracts its minor dim, rhs its minor dim too (an "NT" GEMM)
    assert f["dot_lhs_contract_minor"] == 1.0 and f["dot_rhs_contract_major"] == 0.0
    bytes_read = 4 * (M * K + N * K)
    assert f["log_bytes_read"] == pytest.approx(math.log1p(bytes_read))
    compute_ns = 2 * M * N * K / (0.1 * 1e3)  # TFLOP/s -> flop/ns
    memory_ns = (bytes_read + 4 * M * N) / 10.0  # GB/s = bytes/ns
    assert f["log_roofline_ns"] == pytest.approx(math.log1p(max(compute_ns, memory_ns)))


def test_conv_layout_and_reduction_features():
    rows = features_of(
        """\
func.func @main(%x: tensor<2x8x16x16xf32>, %w: tensor<4x8x3x3xf32>) -> tensor<2x4xf32> {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x8x16x16xf32>, tensor<4x8x3x3xf32>) -> tensor<2x4x8x8xf32>
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %1 = stablehlo.reduce(%0 init: %c) applies stablehlo.add across dimensions = [2, 3] : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4xf32>
  return %1 : tensor<2x4xf32>
}
"""
    )
    (conv,) = [f for kind, f, _ in rows if kind == "conv"]
    assert conv["conv_window"] == 9 and conv["conv_stride"] == 4
    assert conv["conv_input_channels_last"] == 0.0 and conv["conv_output_channels_last"] == 0.0  # NCHW
    assert conv["conv_log_in_spatial"] == pytest.approx(math.log2(16 * 16))
    (red,) = [f for kind, f, _ in rows if kind == "input"]
    assert red["reduce_minor"] == 1.0 and red["reduce_log_extent"] == pytest.approx(math.log2(64))
    assert red["n_op_reduce"] == 1.0


def _synthetic_rows(n=160):
    """Rows whose target is a known function of two features (tests the learning
    machinery, not the CPU): time = 2000 ns + 3 ns per byte read."""
    import random

    r = random.Random(0)
    rows = []
    for i in range(n):
        nbytes = 2 ** r.uniform(6, 22)
        f = dict.fromkeys(FEATURE_NAMES, 0.0)
        f["log_bytes_read"] = math.log1p(nbytes)
        f["kind_loop"] = float(i % 2)
        rows.append({"program": f"p{i % 40}", "signature": f"s{i}", "features": f, "target_ns": 2000 + 3 * nbytes})
    return rows


def test_tiny_train_predict_cycle(tmp_path):
    pytest.importorskip("sklearn", reason="training needs the [learn] extra (scikit-learn)")
    from costmodel.learn.model import TreeModel, train

    rows = _synthetic_rows()
    model = train(rows, {"n_estimators": 80, "max_depth": 3}, {"device": "test"}, baseline="none")
    # the JSON trees reproduce scikit-learn's own prediction
    from sklearn.ensemble import GradientBoostingRegressor
    import numpy as np

    X = np.array([[r["features"][n] for n in FEATURE_NAMES] for r in rows])
    y = np.log([r["target_ns"] for r in rows])
    ref = GradientBoostingRegressor(**model.meta["params"]).fit(X, y)
    # (leaf values are stored with 8 significant digits)
    assert [model.predict_log(list(x)) for x in X[:10]] == pytest.approx(list(ref.predict(X[:10])), rel=1e-7)
    # it learned the relation: within 10% on its training range, with either target
    roof = train(rows, {"n_estimators": 80, "max_depth": 3}, {"device": "test"})
    assert roof.baseline == "roofline"
    for r in rows[:20]:
        assert model.predict_ns(r["features"]) == pytest.approx(r["target_ns"], rel=0.10)
        assert roof.predict_ns(r["features"]) == pytest.approx(r["target_ns"], rel=0.10)
    # the training support (per kernel kind, the largest log1p(roofline ns) seen): rows
    # without a kind define none, so the model extrapolates
    assert "support_log_roofline_ns" not in model.meta
    kinds = [{**r, "kind": "loop" if r["features"]["kind_loop"] else "input"} for r in rows]
    kinds[0]["features"] = {**kinds[0]["features"], "log_roofline_ns": 9.5}
    supported = train(kinds, {"n_estimators": 5, "max_depth": 2}, {"device": "test"})
    assert supported.meta["support_log_roofline_ns"] == {"input": 9.5, "loop": 0.0}  # rows[0] is an input kernel (i = 0)
    path = tmp_path / "m.json"
    model.save(str(path))
    again = TreeModel.load(str(path))
    assert again.predict_ns(rows[0]["features"]) == model.predict_ns(rows[0]["features"])


def test_learned_backend_options_and_model_errors(tmp_path):
    from costmodel.backends.learned import shipped_model_path

    with pytest.raises(BackendError, match="has no option 'modle' \\(did you mean 'model'\\?\\)"):
        make_backend("learned", load_hardware("cpu"), {"modle": "x"})
    with pytest.raises(BackendError, match="no model is shipped for hardware 'a100-40gb'"):
        make_backend("learned", load_hardware("a100-40gb"), {})
    # the CPU model predicts only the host CPU
    with pytest.raises(BackendError, match=r"learned hardware 'host-cpu' and predicts only it: use hardware=host-cpu \(got 'h200'\)"):
        make_backend("learned", load_hardware("h200"), {"model": shipped_model_path()})


def test_learned_backend_predicts_without_measuring(profile_cache, tmp_path):
    pytest.importorskip("sklearn", reason="training needs the [learn] extra (scikit-learn)")
    from costmodel.learn.model import train
    from costmodel.passes.annotate_cost import annotate_module

    model = train(
        _synthetic_rows(),
        {"n_estimators": 30, "max_depth": 3},
        {"device": "test-device", "threads": 1, "invocation_ns": 5000.0, "spec": SPEC.to_json()},
    )
    path = tmp_path / "model.json"
    model.save(str(path))
    text = """\
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = stablehlo.exponential %x : tensor<64x64xf32>
  %1 = stablehlo.add %0, %x : tensor<64x64xf32>
  return %1 : tensor<64x64xf32>
}
"""
    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    annotate_module(
        module, DiagnosticEngine("<test>"), hardware="host-cpu", backend="learned", fusion="xla-tpu", backend_options={"model": str(path)}
    )
    from costmodel.ir import attr_number, ir

    with ctx:
        s = ir.DictAttr(module.attributes["costmodel.summary"])
        total = attr_number(s["total_time_ns"])
        stats = ir.DictAttr(s["backend_stats"])
        assert attr_number(stats["kernels_predicted"]) == 1
    # one kernel (exp + add fused) from the model + one invocation from the model's metadata
    ((kind, feats, tokens),) = features_of(text, fusion="xla-tpu")
    assert tokens == ["exponential", "add"]
    assert total == pytest.approx(model.predict_ns(feats) + 5000.0, rel=1e-9)
    assert not (profile_cache / "profiles.sqlite3").exists()  # nothing was measured
    with pytest.raises(BackendError, match="not a costmodel-gbt-1 model"):
        bad = tmp_path / "bad.json"
        bad.write_text('{"format": "other"}')
        make_backend("learned", load_hardware("host-cpu"), {"model": str(bad)})
    with pytest.raises(BackendError, match="cannot read model"):
        make_backend("learned", load_hardware("host-cpu"), {"model": str(tmp_path / "missing.json")})


def test_learn_cli_train_and_eval(tmp_path, capsys, profile_cache):
    pytest.importorskip("sklearn", reason="training needs the [learn] extra (scikit-learn)")
    data = tmp_path / "data.jsonl"
    with open(data, "w") as fh:
        fh.write(json.dumps({"type": "meta", "device": "test", "threads": 1, "invocation_ns": 1000.0, "spec": SPEC.to_json()}) + "\n")
        for r in _synthetic_rows(80):
            fh.write(json.dumps({"type": "kernel", **r}) + "\n")
    model = tmp_path / "m.json"
    assert cli.main(["learn", "train", str(data), "--out", str(model), "--test-fraction", "0.25", "--param", "n_estimators=20"]) == 0
    out = capsys.readouterr().out
    assert "split by program: 30 train / 10 test programs" in out and "held-out kernels:  MAPE" in out
    assert json.loads(model.read_text())["meta"]["training_report"]["split"]["test_programs"] == 10
    assert cli.main(["learn", "eval", str(data), "--model", str(model)]) == 0
    assert "kernels:  MAPE" in capsys.readouterr().out
    # user mistakes: one line, exit 1
    assert cli.main(["learn", "train", str(tmp_path / "none.jsonl"), "--out", str(model)]) == 1
    assert "cannot read dataset" in capsys.readouterr().err
    assert cli.main(["learn", "train", str(data), "--out", str(model), "--test-fraction", "1.5"]) == 1
    capsys.readouterr()
    assert cli.main(["learn", "eval", str(data), "--hardware", "a100-40gb"]) == 1
    assert "no model is shipped for hardware 'a100-40gb' (shipped: h200, host-cpu)" in capsys.readouterr().err
    assert cli.main(["learn", "collect", "--out", str(tmp_path / "x.jsonl"), "--families", "nope"]) == 1
    assert "unknown program family 'nope'" in capsys.readouterr().err


def test_the_shipped_model_predicts_without_measuring(profile_cache):
    from costmodel.backends.learned import shipped_model_path
    from costmodel.ir import attr_number, ir
    from costmodel.learn.model import TreeModel
    from costmodel.passes.annotate_cost import annotate_module

    model = TreeModel.load(shipped_model_path())  # pure Python: no scikit-learn needed
    assert model.trees and set(model.features) <= set(FEATURE_NAMES)
    assert model.meta["invocation_ns"] > 0 and model.meta["training_programs"]
    text = """\
func.func @main(%x: tensor<128x256xf32>, %w: tensor<256x64xf32>) -> tensor<128x64xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<128x256xf32>, tensor<256x64xf32>) -> tensor<128x64xf32>
  %1 = stablehlo.tanh %0 : tensor<128x64xf32>
  return %1 : tensor<128x64xf32>
}
"""
    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    annotate_module(module, DiagnosticEngine("<test>"), hardware="host-cpu", backend="learned")
    with ctx:
        s = ir.DictAttr(module.attributes["costmodel.summary"])
        assert ir.StringAttr(s["fusion"]).value == "xla-tpu"  # host-cpu's default formation
        total = attr_number(s["total_time_ns"])
        assert attr_number(ir.DictAttr(s["backend_stats"])["kernels_predicted"]) == 1
    assert model.meta["invocation_ns"] < total < 1e9
    assert not (profile_cache / "profiles.sqlite3").exists()


# -- hostile input to `costmodel learn` and the learned backend (new-user audit) ---------
def _dataset(path, meta=None, rows=None):
    with open(path, "w") as fh:
        fh.write(json.dumps({"type": "meta", "device": "test", "threads": 1, "invocation_ns": 1000.0,
                             "spec": SPEC.to_json(), **(meta or {})}) + "\n")
        for r in rows if rows is not None else _synthetic_rows(40):
            fh.write(json.dumps({"type": "kernel", **r}) + "\n")
    return path


def test_learn_train_never_overwrites_its_dataset(tmp_path, capsys):
    data = _dataset(tmp_path / "d.jsonl")
    before = data.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(data)
    for out in (data, link):
        assert cli.main(["learn", "train", str(data), "--out", str(out), "--test-fraction", "0"]) == 1
        assert "would replace it" in capsys.readouterr().err
    assert data.read_bytes() == before


def test_learn_collect_refuses_outputs_that_are_not_datasets(tmp_path, capsys):
    model = tmp_path / "model.json"
    model.write_text('{"format": "costmodel-gbt-1"}\n')
    cases = [
        (model, "exists and is not a dataset"),
        (tmp_path / "missing" / "d.jsonl", "does not exist"),
        (tmp_path, "not a regular file"),
    ]
    if os.path.exists("/dev/null"):
        cases.append(("/dev/null", "not a regular file"))  # /dev/stdout: the same (read back, it would hang)
    for out, why in cases:
        assert cli.main(["learn", "collect", "--out", str(out), "--programs", "1"]) == 1
        assert why in capsys.readouterr().err
    assert model.read_text() == '{"format": "costmodel-gbt-1"}\n'


def test_learn_collect_holds_its_dataset_locked(tmp_path):
    import fcntl

    from costmodel.ir import InputError
    from costmodel.learn.dataset import _lock

    data = _dataset(tmp_path / "d.jsonl")
    with open(data, "a") as first, open(data, "a") as second:
        fcntl.flock(first.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(InputError, match="another `costmodel learn collect` is writing it"):
            _lock(second, str(data))


def test_datasets_with_bad_rows_or_of_different_machines_are_refused(tmp_path, capsys):
    from costmodel.ir import InputError
    from costmodel.learn.dataset import read_dataset

    good = _synthetic_rows(4)
    for bad, why in (
        ({**good[0], "target_ns": float("nan")}, "'target_ns' must be a finite time > 0"),
        ({**good[0], "target_ns": -5.0}, "'target_ns' must be a finite time > 0"),
        ({**good[0], "target_ns": "fast"}, "'target_ns' must be a finite time > 0"),
        ({k: v for k, v in good[0].items() if k != "features"}, "needs its 'features' object"),
        ({k: v for k, v in good[0].items() if k != "signature"}, "needs 'program' and 'signature'"),
    ):
        path = _dataset(tmp_path / "bad.jsonl", rows=[good[1], bad])
        with pytest.raises(InputError, match=f"bad.jsonl:3: .*{why}"):
            read_dataset(str(path))
    # a row nested deeper than any dataset: one error with its line, not a RecursionError
    deep = tmp_path / "deep.jsonl"
    deep.write_text(open(_dataset(tmp_path / "ok.jsonl", rows=[good[1]])).read() + "[" * 100_000 + "\n")
    with pytest.raises(InputError, match=r"deep.jsonl:3: invalid JSON: nested more than 2,000 levels deep"):
        read_dataset(str(deep))
    a = _dataset(tmp_path / "a.jsonl")
    b = _dataset(tmp_path / "b.jsonl", meta={"device": "other-cpu", "threads": 2})
    with pytest.raises(InputError, match=r"b.jsonl: measured on another machine or with other settings than .*a.jsonl "
                                         r"\(device 'test' vs 'other-cpu', threads 1 vs 2\)"):
        read_dataset([str(a), str(b)])
    assert cli.main(["learn", "train", str(a), str(b), "--out", str(tmp_path / "m.json")]) == 1
    assert "another machine" in capsys.readouterr().err
    # a GPU plan (kernel rows awaiting their measured times) is no dataset to train on
    plan = _dataset(tmp_path / "plan.jsonl", rows=[{k: v for k, v in r.items() if k != "target_ns"} for r in good])
    assert cli.main(["learn", "train", str(plan), "--out", str(tmp_path / "m.json")]) == 1
    assert "4 of 4 kernel rows have no measured time" in capsys.readouterr().err


def test_learn_train_and_eval_option_checks(tmp_path, capsys):
    pytest.importorskip("sklearn", reason="training needs the [learn] extra (scikit-learn)")
    data = _dataset(tmp_path / "d.jsonl")
    out = str(tmp_path / "m.json")
    assert cli.main(["learn", "train", str(data), "--out", out, "--baseline-floor-ns", "inf"]) == 1
    assert "--baseline-floor-ns must be a finite number >= 0, got inf" in capsys.readouterr().err
    assert cli.main(["learn", "train", str(data), "--out", out, "--test-fraction", "0.99"]) == 1
    assert "leaves none of the 40 programs to train on" in capsys.readouterr().err
    # eval: the model of the hardware the dataset was measured on, or a clear refusal
    gpu = _dataset(tmp_path / "gpu.jsonl", meta={"hardware": "h200", "device": "NVIDIA H200"})
    assert cli.main(["learn", "eval", str(gpu), "--model", str(_shipped("host-cpu"))]) == 1
    assert "learned 'host-cpu' but" in capsys.readouterr().err
    assert cli.main(["learn", "eval", str(gpu), "--json"]) == 0  # --hardware from the dataset's meta: h200's model
    report = json.loads(capsys.readouterr().out)  # strict JSON: no NaN
    assert report["kernel"]["kernels"] == 40
    assert cli.main(["learn", "eval", str(data), "--hardware", "h200"]) == 1
    assert "learned 'h200' but" in capsys.readouterr().err


def _shipped(hardware):
    from costmodel.backends.learned import shipped_model_path

    return shipped_model_path(hardware)


def test_malformed_model_files_are_one_line_errors(tmp_path):
    from costmodel.learn.model import TreeModel

    import gzip

    with gzip.open(_shipped("h200"), "rt") as fh:
        good = json.load(fh)
    tree = good["trees"][0]
    cases = {
        "features": ({**good, "features": 5}, "'features' must be a list"),
        "no trees": ({**good, "trees": [{}]}, "tree 0 needs"),
        "child": ({**good, "trees": [{**tree, "left": [10 ** 6] + tree["left"][1:]}]}, "child index out of range"),
        "init": ({**good, "init": 1e6}, "beyond e\\^700"),
        "nan init": ({**good, "init": float("nan")}, "'init' must be a finite number"),
        "nan leaf": ({**good, "trees": [{**tree, "value": [float("nan")] * len(tree["value"])}]}, "malformed"),
        "invocation": ({**good, "meta": {**good["meta"], "invocation_ns": -5e6}}, "meta 'invocation_ns' must be a finite time >= 0"),
        "floor": ({**good, "baseline_floor_ns": -1e9}, "'baseline_floor_ns' must be a finite number >= 0"),
        "bandwidth": ({**good, "meta": {**good["meta"], "spec": {**good["meta"]["spec"], "memory_bandwidth_GBps": 0}}},
                      "memory_bandwidth_GBps' must be a finite number > 0"),
    }
    for name, (doc, why) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(ValueError, match=why):
            TreeModel.load(str(path))
        with pytest.raises(BackendError, match=why):
            make_backend("learned", load_hardware("h200"), {"model": str(path)})


def test_a_cpu_model_on_another_cpu_says_so():
    from costmodel.backends.learned import LearnedBackend
    from costmodel.profiling.host import device_id

    backend = make_backend("learned", load_hardware("host-cpu"), {})
    assert isinstance(backend, LearnedBackend)
    here = device_id()
    backend.model_device = "cpu-some-other-cpu-000000000000"
    (text,) = backend.warnings()
    assert "learned the kernel times of CPU 'cpu-some-other-cpu-000000000000', not of this CPU" in text and here in text
    backend.model_device = here
    assert backend.warnings() == []
    # a GPU model predicts its GPU, wherever it runs
    assert make_backend("learned", load_hardware("h200"), {}).warnings() == []
