"""One-line errors and clean outputs for hostile values a second audit found (issue 12):
each feeds the bad input to the command, in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from costmodel.cli import main

DATA = os.path.join(os.path.dirname(__file__), "data")
SHARDED = os.path.join(DATA, "sharded", "tp_mlp.mlir")


def _err(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", [["learn", "eval"], ["learn", "train", "-o", "m.json"]])
def test_a_binary_dataset_is_one_line(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "garbage.bin").write_bytes(b"\x00\x01\x95\xff" * 64)
    argv = command[:2] + ["garbage.bin"] + command[2:]
    assert main(argv) == 1
    assert _err(capsys).strip() == "costmodel: error: garbage.bin:1: not a text (JSON lines) dataset: not UTF-8"


def test_elide_limit_beyond_int64_is_a_usage_error(tmp_path, capsys):
    from costmodel.driver import main as opt_main

    p = tmp_path / "m.mlir"
    p.write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n")
    assert opt_main([str(p), "--mlir-elide-elementsattrs-if-larger=99999999999999999999999"]) != 0
    assert "expects an integer from 0 to 2^63-1" in _err(capsys)


def test_chakra_dump_limit_below_zero(tmp_path, capsys):
    assert main(["chakra", "dump", str(tmp_path / "x.et"), "--limit", "-1"]) == 1
    assert _err(capsys).strip() == "costmodel: error: --limit must be at least 0, got -1"


def test_simulate_trace_to_stdout_keeps_stdout_one_document(tmp_path):
    """--trace - streams the Perfetto JSON to stdout; the report then goes to stderr (they
    were mixed on stdout, which no JSON reader could parse)."""
    from costmodel.driver import main as opt_main

    d = tmp_path / "t.chakra"
    assert opt_main([SHARDED, "--propagate-shardings", "--annotate-cost=hardware=h100-sxm",
                     f"--extract-collectives=system=dgx-h100 chakra-dir={d}", "-o", os.devnull]) == 0
    for extra in ([], ["--json"]):
        r = subprocess.run([sys.executable, "-m", "costmodel.cli", "simulate", str(d), "--trace", "-", *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "traceEvents" in json.loads(r.stdout)  # the Perfetto trace, alone
        assert "step time" in r.stderr or '"step_time_ns"' in r.stderr


def test_predict_trace_of_a_huge_loop_names_predicts_own_way_out(tmp_path, capsys):
    """A loop too long to write as a trace: predict --trace says to leave out --trace (the
    pass's hint, chakra=false, is no option of predict)."""
    p = os.path.join(DATA, "collectives", "loop_1e9_all_reduce.mlir")
    rc = main(["predict", p, "--system", "h100-sxm-x4", "--trace", str(tmp_path / "T")])
    err = _err(capsys)
    assert rc == 1 and "leave out --trace: without it `costmodel predict` simulates such a loop in memory" in err
    assert "chakra=false" not in err
    assert not (tmp_path / "T").exists() or os.listdir(tmp_path / "T") == []  # nothing of the run in place


@pytest.mark.parametrize("flag", ["--trace", "--fusion", "--unknown-trip-count", "--plot"])
def test_predict_empty_option_values_are_errors(capsys, flag):
    """`--trace ''` was taken as no --trace (and so on): an empty value is an error."""
    assert main(["predict", SHARDED, "--system", "dgx-h100", flag, ""]) == 1
    assert _err(capsys).strip() == f"costmodel: error: {flag} needs a value, got an empty one"


def test_predict_plot_extension_is_checked_before_the_work(tmp_path, capsys, monkeypatch):
    import costmodel.predict as pr

    monkeypatch.setattr(pr, "predict", lambda *a, **k: pytest.fail("predicted before checking --plot"))
    assert main(["predict", SHARDED, "--system", "dgx-h100", "--plot", str(tmp_path / "x.txt")]) == 1
    assert "--plot writes .png, .svg or .pdf files" in _err(capsys)


def test_a_mesh_of_a_billion_devices_is_refused(tmp_path, capsys):
    """A mesh of 2^30 devices ran Shardy out of memory ('internal error ... bad_alloc')."""
    from costmodel.driver import main as opt_main

    text = open(SHARDED).read()
    import re

    n = 1 << 30
    text = re.sub(r'"d"=\d+', f'"d"={n}', text).replace("size = 8 : i64", f"size = {n} : i64")
    text = re.sub(r"mhlo.num_partitions = \d+", f"mhlo.num_partitions = {n}", text)
    p = tmp_path / "huge.mlir"
    p.write_text(text)
    assert opt_main([str(p), "--propagate-shardings", "-o", os.devnull]) == 1
    err = _err(capsys)
    assert "propagate-shardings: mesh of 1,073,741,824 devices; at most 4,194,304 are supported" in err
