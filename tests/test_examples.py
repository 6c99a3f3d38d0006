"""The README's workflows on the shipped examples, in process."""

from __future__ import annotations

import json
import pathlib

from costmodel.chakra.check import check_dir
from costmodel.cli import main as costmodel_main
from costmodel.driver import main as opt_main
from costmodel.simulate import simulate_dir

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def test_readme_resnet50_workflow(tmp_path, capsys):
    out = tmp_path / "resnet50.cost.mlir"
    chakra = tmp_path / "resnet50.chakra"
    rc = opt_main(
        [
            str(EXAMPLES / "resnet50_train_4dev.mlir"),
            "--annotate-cost=hardware=a100-40gb",
            f"--extract-collectives=system=a100-40gb-x4 chakra-dir={chakra}",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    text = out.read_text()
    assert "costmodel.summary" in text and "unsupported_count = 0 : i64" in text
    assert check_dir(str(chakra)).ok
    manifest = json.loads((chakra / "manifest.json").read_text())
    assert manifest["ranks"] == 4
    capsys.readouterr()
    assert costmodel_main(["simulate", str(chakra), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["step_time_ns"] >= report["compute_time_ns"] > 0


def test_readme_sharded_workflow(tmp_path, capsys):
    out = tmp_path / "tf.cost.mlir"
    chakra = tmp_path / "tf.chakra"
    rc = opt_main(
        [
            str(EXAMPLES / "transformer_train_2x4.mlir"),
            "--propagate-shardings",
            "--annotate-cost=hardware=h100-sxm",
            f"--extract-collectives=system=dgx-h100 chakra-dir={chakra} simulate=true",
            "-o",
            str(out),
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "simulate: step time" in err
    text = out.read_text()
    # per-device program: the 16x512x1024 activations are split 2-way on the batch
    assert "tensor<8x512x1024xbf16>" in text
    assert "costmodel.collective" in text and "unsupported_count = 0 : i64" in text
    report = check_dir(str(chakra))
    assert report.ok, report.violations
    sim = simulate_dir(str(chakra))
    assert len(sim.ranks) == 8 and sim.step_time_ns >= sim.compute_time_ns > 0


def test_readme_main_command_predict(capsys):
    """The README's first command: costmodel predict on the shipped ResNet-50 step,
    three systems, both backends."""
    argv = ["predict", str(EXAMPLES / "resnet50_train_4dev.mlir")]
    for s in ("a100-40gb-x4", "h100-sxm-x4", "h200-x4"):
        argv += ["--system", s]
    argv += ["--backend", "roofline", "--backend", "calibrated", "--json", "--top", "5"]
    assert costmodel_main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 6
    a100 = [r for r in doc["rows"] if r["system"] == "a100-40gb-x4"]
    h200 = [r for r in doc["rows"] if r["system"] == "h200-x4"]
    for a, h in zip(a100, h200):
        assert h["step_time_ms"] < a["step_time_ms"]  # H200 has 3x the bandwidth and peak
    assert len(doc["top_kernels"]) == 5
