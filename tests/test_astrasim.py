"""`costmodel astra-sim` with fake ASTRA-sim binaries (scripts)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from costmodel.astrasim import AstraSimError, find_binary, parse_output, run_astra_sim


def _trace_dir(tmp_path, ranks=2):
    d = tmp_path / "t"
    d.mkdir()
    manifest = {
        "generator": "stablehlo-costmodel",
        "prefix": "trace",
        "ranks": ranks,
        "astra_sim": {"args": ["--workload-configuration=trace", "--system-configuration=system.json"]},
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return str(d)


def _script(tmp_path, body, name="fake-astra"):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


FINISH_ALL = """echo "$PWD $*" > args.txt
echo "[workload] [info] sys[1] finished, 2000 cycles, exposed communication 300 cycles."
echo "[workload] [info] sys[0] finished, 1900 cycles, exposed communication 200 cycles."
"""


def test_parse_output():
    cycles, exposed = parse_output("sys[3] finished, 10 cycles, exposed communication 4 cycles.\nsys[0] finished, 7 cycles\n")
    assert cycles == {3: 10, 0: 7} and exposed == {3: 4, 0: None}


def test_runs_in_the_directory_with_the_manifest_flags(tmp_path):
    d = _trace_dir(tmp_path)
    res = run_astra_sim(d, _script(tmp_path, FINISH_ALL))
    assert res.cycles == {0: 1900, 1: 2000} and res.exposed == {0: 200, 1: 300}
    assert res.step_time_ns == 2000
    cwd, *args = open(os.path.join(d, "args.txt")).read().split()
    assert cwd == d
    assert args == ["--workload-configuration=trace", "--system-configuration=system.json"]


def test_exit_zero_without_finishing_is_a_failure(tmp_path):
    d = _trace_dir(tmp_path)
    body = 'echo "sys[0] finished, 5 cycles, exposed communication 0 cycles."\necho "invalid comm type" >&2\nexit 0\n'
    with pytest.raises(AstraSimError, match="exited 0 but 1 of 2 ranks did not finish.*invalid comm type"):
        run_astra_sim(d, _script(tmp_path, body))


def test_nonzero_exit(tmp_path):
    d = _trace_dir(tmp_path)
    with pytest.raises(AstraSimError, match="status 3: boom"):
        run_astra_sim(d, _script(tmp_path, "echo boom >&2\nexit 3\n"))


def test_missing_binary(tmp_path, monkeypatch):
    monkeypatch.delenv("ASTRA_SIM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AstraSimError, match="not on PATH; give --binary PATH or set \\$ASTRA_SIM"):
        find_binary()
    with pytest.raises(AstraSimError, match="does not exist"):
        find_binary(str(tmp_path / "nope" / "astra"))
    (tmp_path / "plain").write_text("x")
    with pytest.raises(AstraSimError, match="not an executable"):
        find_binary(str(tmp_path / "plain"))
    monkeypatch.setenv("ASTRA_SIM", str(tmp_path / "gone"))
    with pytest.raises(AstraSimError, match=r"\$ASTRA_SIM"):
        find_binary()


def test_env_variable_and_cli(tmp_path, monkeypatch, capsys):
    from costmodel.cli import main

    d = _trace_dir(tmp_path)
    monkeypatch.setenv("ASTRA_SIM", _script(tmp_path, FINISH_ALL))
    assert main(["astra-sim", d, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step_time_ns"] == 2000 and len(doc["ranks"]) == 2
    assert main(["astra-sim", d]) == 0
    assert "ASTRA-sim step time: 2.000 us" in capsys.readouterr().out
    monkeypatch.setenv("ASTRA_SIM", str(tmp_path / "missing"))
    assert main(["astra-sim", d]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_cli_notes_what_astra_sim_does_not_see_of_a_calibration(tmp_path, monkeypatch, capsys):
    from costmodel.cli import main

    d = _trace_dir(tmp_path)
    monkeypatch.setenv("ASTRA_SIM", _script(tmp_path, FINISH_ALL))
    assert main(["astra-sim", d]) == 0
    assert "calibrated" not in capsys.readouterr().out  # an uncalibrated system: no note
    m = json.loads(open(os.path.join(d, "manifest.json")).read())
    m["system"] = {"name": "dgx-h100", "calibration": {"collective_latency_ns": {"value": 11600, "source": "x"}}}
    open(os.path.join(d, "manifest.json"), "w").write(json.dumps(m))
    assert main(["astra-sim", d]) == 0
    out = capsys.readouterr().out
    assert "note: system 'dgx-h100' is calibrated" in out and "collective_latency_ns = 11600 ns" in out
