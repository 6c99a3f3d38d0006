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
    with pytest.raises(AstraSimError, match="exited with status 3 but 2 of 2 ranks did not finish .*: boom"):
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


# -- a teardown abort, as upstream ASTRA-sim does whenever comm_group.json lists groups --------------

ABORT_AFTER_FINISH = """echo "[workload] [info] sys[0] finished, 1900 cycles, exposed communication 200 cycles."
echo "[workload] [info] sys[1] finished, 2000 cycles, exposed communication 300 cycles."
echo "[system] [warning] Exiting"
echo "double free or corruption (out)" >&2
kill -ABRT $$
"""


def test_teardown_abort_after_every_rank_finished_is_a_warning(tmp_path):
    d = _trace_dir(tmp_path)
    res = run_astra_sim(d, _script(tmp_path, ABORT_AFTER_FINISH))
    assert res.returncode == -6
    assert res.cycles == {0: 1900, 1: 2000} and res.step_time_ns == 2000
    (w,) = res.warnings
    assert "killed by SIGABRT (status -6) after all 2 ranks finished" in w
    assert "double free or corruption (out)" in w
    assert "CollectivePlan::~CollectivePlan" in w and "PR #351" in w


def test_teardown_abort_through_a_shell_status_134(tmp_path):
    d = _trace_dir(tmp_path)
    body = FINISH_ALL + "exit 134\n"
    res = run_astra_sim(d, _script(tmp_path, body))
    assert res.returncode == 134 and "status 134" in res.warnings[0]


def test_finished_lines_the_abort_kept_from_the_pipe_are_read_from_the_log(tmp_path):
    d = _trace_dir(tmp_path)
    os.makedirs(os.path.join(d, "log"))
    # a previous run's lines in the log must not count for this one
    with open(os.path.join(d, "log", "log.log"), "w") as fh:
        fh.write("sys[1] finished, 99 cycles, exposed communication 9 cycles.\n")
    body = """echo "sys[0] finished, 1900 cycles, exposed communication 200 cycles."
echo "sys[1] finished, 2000 cycles, exposed communication 300 cycles." >> log/log.log
kill -ABRT $$
"""
    res = run_astra_sim(d, _script(tmp_path, body))
    assert res.cycles == {0: 1900, 1: 2000} and res.exposed[1] == 300
    assert len(res.warnings) == 1


def test_abort_before_every_rank_finished_fails_naming_the_ranks(tmp_path):
    d = _trace_dir(tmp_path, ranks=3)
    body = 'echo "sys[1] finished, 2000 cycles, exposed communication 300 cycles."\necho "free(): double free detected in tcache 2" >&2\nkill -ABRT $$\n'
    with pytest.raises(AstraSimError, match=r"killed by SIGABRT \(status -6\) but 2 of 3 ranks did not finish \(rank 0, 2\).*double free"):
        run_astra_sim(d, _script(tmp_path, body))


# the upstream crash strikes at a different rank each run: the first run loses rank 0's
# line, the second one completes (a counter file in the trace directory counts the runs)
ABORT_ONCE = """n=$(cat runs.txt 2>/dev/null || echo 0); n=$((n + 1)); echo $n > runs.txt
echo "sys[1] finished, 2000 cycles, exposed communication 300 cycles."
if [ $n -eq 1 ]; then echo "free(): double free detected in tcache 2" >&2; kill -SIG $$; fi
echo "sys[0] finished, 1900 cycles, exposed communication 200 cycles."
kill -ABRT $$
"""


@pytest.mark.parametrize("sig", ["ABRT", "SEGV"])
def test_a_crash_that_swallowed_ranks_is_run_again(tmp_path, sig):
    d = _trace_dir(tmp_path)
    res = run_astra_sim(d, _script(tmp_path, ABORT_ONCE.replace("-SIG", "-" + sig)))
    assert open(os.path.join(d, "runs.txt")).read().strip() == "2"
    assert res.cycles == {0: 1900, 1: 2000} and res.returncode == -6
    teardown, rerun = res.warnings
    assert "after all 2 ranks finished" in teardown
    assert "run 2 times: 1 run(s) died of a signal before every rank printed its result" in rerun


def test_runs_are_bounded_and_other_failures_are_not_rerun(tmp_path):
    d = _trace_dir(tmp_path, ranks=3)
    body = """n=$(cat runs.txt 2>/dev/null || echo 0); echo $((n + 1)) > runs.txt
echo "sys[1] finished, 2000 cycles, exposed communication 300 cycles."
kill -ABRT $$
"""
    with pytest.raises(AstraSimError, match=r"2 of 3 ranks did not finish \(rank 0, 2\) \(in each of 3 runs: a crash"):
        run_astra_sim(d, _script(tmp_path, body), attempts=3)
    assert open(os.path.join(d, "runs.txt")).read().strip() == "3"
    os.remove(os.path.join(d, "runs.txt"))
    with pytest.raises(AstraSimError, match=r"did not finish \(rank 0, 2\): "):
        run_astra_sim(d, _script(tmp_path, body), attempts=1)
    assert open(os.path.join(d, "runs.txt")).read().strip() == "1"
    # a failing status other than an abort is the simulator's own error: one run
    os.remove(os.path.join(d, "runs.txt"))
    with pytest.raises(AstraSimError, match="exited with status 3"):
        run_astra_sim(d, _script(tmp_path, body.replace("kill -ABRT $$", "exit 3")))
    assert open(os.path.join(d, "runs.txt")).read().strip() == "1"


def test_other_signals_after_finishing_are_failures(tmp_path):
    d = _trace_dir(tmp_path)
    with pytest.raises(AstraSimError, match=r"killed by SIGSEGV .* after all ranks finished \(only an abort at teardown"):
        run_astra_sim(d, _script(tmp_path, FINISH_ALL + "kill -SEGV $$\n"))


def test_lines_are_seen_as_they_come_and_timeout_kills(tmp_path):
    d = _trace_dir(tmp_path)
    seen = []
    body = 'echo "sys[0] finished, 5 cycles, exposed communication 0 cycles."\nsleep 30\n'
    with pytest.raises(AstraSimError, match=r"did not finish within 1 s: .*sys\[0\] finished"):
        run_astra_sim(d, _script(tmp_path, body), timeout_s=1, on_line=seen.append)
    assert seen and "sys[0] finished" in seen[0]


def test_cli_prints_the_teardown_warning_and_succeeds(tmp_path, monkeypatch, capsys):
    from costmodel.cli import main

    d = _trace_dir(tmp_path)
    monkeypatch.setenv("ASTRA_SIM", _script(tmp_path, ABORT_AFTER_FINISH))
    assert main(["astra-sim", d]) == 0
    cap = capsys.readouterr()
    assert "ASTRA-sim step time: 2.000 us" in cap.out
    assert cap.err.startswith("costmodel: warning: ASTRA-sim was killed by SIGABRT")
    assert main(["astra-sim", d, "--json"]) == 0
    assert "SIGABRT" in json.loads(capsys.readouterr().out)["warnings"][0]


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0"])
def test_a_timeout_that_is_no_positive_number_is_refused(tmp_path, capsys, timeout):
    from costmodel.cli import main

    d = _trace_dir(tmp_path)
    assert main(["astra-sim", d, "--binary", _script(tmp_path, "sleep 30\n"), "--timeout", timeout]) == 1
    assert capsys.readouterr().err.startswith("costmodel: error: --timeout expects a positive number of seconds")


def test_a_flood_of_output_is_cut_and_a_directory_is_named(tmp_path, monkeypatch):
    d = _trace_dir(tmp_path)
    flood = _script(tmp_path, "head -c 1000000 /dev/zero | tr '\\0' x\nexit 3\n")
    with pytest.raises(AstraSimError) as err:
        run_astra_sim(d, flood)
    assert len(str(err.value)) < 1000 and "(1,000,000 characters)" in str(err.value)
    (tmp_path / "adir").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AstraSimError, match=r"'adir' \(--binary\) is a directory"):
        find_binary("adir")


def test_sigterm_ends_the_simulator_too(tmp_path):
    """SIGTERM to costmodel ran no cleanup: the simulator it started kept running. Now the
    tool kills it and exits 143 (128 + SIGTERM)."""
    import signal
    import subprocess
    import sys
    import time

    d = _trace_dir(tmp_path)
    pidfile = tmp_path / "child.pid"
    hang = _script(tmp_path, f"echo $$ > {pidfile}\nexec sleep 60\n")
    proc = subprocess.Popen([sys.executable, "-m", "costmodel.cli", "astra-sim", d, "--binary", hang],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(300):  # the simulator has started
        if pidfile.exists() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and b"Traceback" not in err
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


# -- a real ASTRA-sim build (docs/simulator.md says how to build one) ---------------------------------

REAL = os.environ.get("ASTRA_SIM")
# Needs a real build, which CI does not have (third-party code is never a CI dependency):
# without $ASTRA_SIM these tests are deselected by tests/conftest.py, which says so in the
# run's summary line; the fake-binary tests above always run.
needs_real = pytest.mark.real_astra_sim


def _uncalibrated(tmp_path, preset):
    """The preset without its calibration block: ASTRA-sim then sees all our network model sees."""
    from costmodel import systems

    doc = json.loads(open(os.path.join(os.path.dirname(systems.__file__), "data", "systems", f"{preset}.json")).read())
    doc.pop("calibration", None)
    doc["name"] = f"{preset}-uncalibrated"
    path = tmp_path / f"{preset}-uncalibrated.json"
    path.write_text(json.dumps(doc))
    return str(path)


@needs_real
@pytest.mark.parametrize("granularity", ["op", "region"])
@pytest.mark.parametrize(
    "example,hardware,preset,pre",
    [
        ("resnet50_train_4dev.mlir", "a100-40gb", "a100-40gb-x4", []),
        ("transformer_train_2x4.mlir", "h100-sxm", "dgx-h100", ["--propagate-shardings"]),  # 6 sub-groups
    ],
)
def test_real_astra_sim_agrees_with_the_builtin_simulator(tmp_path, capsys, example, hardware, preset, pre, granularity):
    from costmodel import driver
    from costmodel.cli import main

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    system = _uncalibrated(tmp_path, preset)
    out = tmp_path / "trace"
    rc = driver.main(
        [os.path.join(root, "examples", example), *pre, f"--annotate-cost=hardware={hardware}",
         f"--extract-collectives=system={system} chakra-dir={out} granularity={granularity}", "-o", str(tmp_path / "o.mlir")]
    )
    assert rc == 0
    capsys.readouterr()
    assert main(["astra-sim", str(out), "--binary", REAL, "--compare", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    builtin = {r["rank"]: r for r in doc["builtin"]["ranks"]}
    assert len(doc["ranks"]) == json.loads((out / "manifest.json").read_text())["ranks"]
    for r in doc["ranks"]:  # to the nanosecond, every rank
        assert r["finish_ns"] == builtin[r["rank"]]["finish_ns"]
        assert r["exposed_comm_ns"] == builtin[r["rank"]]["exposed_comm_ns"]
