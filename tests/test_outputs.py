"""costmodel.outputs and the tools' outputs fed hostile targets (issue 12, items 1, 4, 5,
12, 19): devices and pipes are streamed to and never replaced, symlinks are followed,
hard links and modes are kept, a failed run changes nothing, concurrent runs never mix,
a full device is a one-line error."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from costmodel import outputs
from costmodel.outputs import OutputError, OutputSet, write_file

DATA = os.path.join(os.path.dirname(__file__), "data")
SHARDED = os.path.join(DATA, "sharded", "tp_mlp.mlir")
OPT = [sys.executable, "-m", "costmodel.driver"]
CLI = [sys.executable, "-m", "costmodel.cli"]


def _is_char_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


# --------------------------------------------------------------------------- write_file


def test_dev_null_is_streamed_not_replaced():
    before = os.stat("/dev/null")
    write_file("/dev/null", b"x" * 1000)
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_full_device_is_an_error_and_stays_a_device():
    with pytest.raises(OutputError, match="cannot write '/dev/full': No space left on device"):
        write_file("/dev/full", b"x" * 100_000)
    assert _is_char_device("/dev/full")


def test_fifo_is_streamed(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []

    def reader():
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=reader)
    t.start()
    write_file(str(fifo), b"hello pipe")
    t.join(10)
    assert got == [b"hello pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_symlink_is_followed(tmp_path):
    target = tmp_path / "real.txt"
    target.write_bytes(b"old")
    link = tmp_path / "link.txt"
    link.symlink_to("real.txt")
    write_file(str(link), b"new")
    assert os.path.islink(link) and os.readlink(link) == "real.txt"
    assert target.read_bytes() == b"new"


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to("made.txt")
    write_file(str(link), b"data")
    assert os.path.islink(link) and (tmp_path / "made.txt").read_bytes() == b"data"


def test_hard_links_and_mode_are_kept(tmp_path):
    a = tmp_path / "a.txt"
    a.write_bytes(b"old content that is longer")
    os.chmod(a, 0o600)
    b = tmp_path / "b.txt"
    os.link(a, b)
    write_file(str(a), b"new")
    assert os.stat(a).st_ino == os.stat(b).st_ino and os.stat(a).st_nlink == 2
    assert b.read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(a).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]  # no temp file left


def test_mode_of_a_replaced_file_is_kept(tmp_path):
    p = tmp_path / "out.mlir"
    p.write_bytes(b"old")
    os.chmod(p, 0o640)
    write_file(str(p), b"new")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640 and p.read_bytes() == b"new"


def test_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_file(str(tmp_path / "n.txt"), b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "n.txt").st_mode) == 0o666 & ~0o027


def test_directory_target_is_an_error(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        write_file(str(tmp_path), b"x")


# --------------------------------------------------------------------------- OutputSet


def test_output_set_commits_together_and_discard_leaves_nothing(tmp_path):
    out = tmp_path / "o.txt"
    d = tmp_path / "trace"
    with OutputSet() as outs:
        staged = outs.stage_dir(str(d), {"manifest.json": b'{"generator": "g"}', "a": b"1"}, "g")
        outs.stage_file(str(out), b"file")
        assert os.path.isdir(staged) and not d.exists() and not out.exists()
    # discarded: nothing written, nothing staged left
    assert os.listdir(tmp_path) == []
    with OutputSet() as outs:
        outs.stage_dir(str(d), {"manifest.json": b'{"generator": "g"}', "a": b"1"}, "g")
        outs.stage_file(str(out), b"file")
        outs.commit()
    assert out.read_bytes() == b"file" and (d / "a").read_bytes() == b"1"
    assert sorted(os.listdir(tmp_path)) == ["o.txt", "trace"]


def test_trace_dir_keeps_user_files_and_drops_our_stale_ones(tmp_path):
    d = tmp_path / "trace"
    m1 = json.dumps({"generator": "g", "written_files": ["manifest.json", "old.et", "x"]}).encode()
    outputs.write_dir(str(d), {"manifest.json": m1, "old.et": b"1", "x": b"1"}, "g")
    (d / "notes.txt").write_text("mine")
    m2 = json.dumps({"generator": "g", "written_files": ["manifest.json", "x"]}).encode()
    outputs.write_dir(str(d), {"manifest.json": m2, "x": b"2"}, "g")
    assert sorted(os.listdir(d)) == ["manifest.json", "notes.txt", "x"]
    assert (d / "x").read_bytes() == b"2" and (d / "notes.txt").read_text() == "mine"


def test_foreign_directory_is_refused(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "thesis.tex").write_text("precious")
    with pytest.raises(OutputError, match="not a trace directory written by stablehlo-costmodel"):
        outputs.write_dir(str(d), {"manifest.json": b"{}"}, "g")
    assert (d / "thesis.tex").read_text() == "precious"


def test_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert outputs.expand_path("~/x") == os.path.join(str(tmp_path), "x")
    assert outputs.expand_path("a~b") == "a~b"


# --------------------------------------------------------------------------- the tools


def _run(argv, cwd, **kw):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, **kw)


def test_opt_to_dev_null_and_dev_stdout(tmp_path):
    r = _run(OPT + [SHARDED, "--propagate-shardings", "-o", "/dev/null"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _is_char_device("/dev/null")
    r = _run(OPT + [SHARDED, "--propagate-shardings", "-o", "/dev/stdout"], tmp_path)
    assert r.returncode == 0 and "module @jit_tp_mlp" in r.stdout
    assert os.path.islink("/dev/stdout") or not os.path.exists("/dev/stdout") or not os.path.isfile("/dev/stdout")


@pytest.mark.parametrize("how", ["-o", "redirect"])
def test_opt_full_device_is_one_line(tmp_path, how):
    argv = OPT + [SHARDED, "--propagate-shardings"]
    if how == "-o":
        r = _run(argv + ["-o", "/dev/full"], tmp_path)
    else:
        with open("/dev/full", "w") as full:
            r = subprocess.run(argv, cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "No space left on device" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert _is_char_device("/dev/full")


def test_costmodel_cli_full_device_is_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        r = subprocess.run(CLI + ["hardware", "list"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 1
    assert r.stderr.strip() == "costmodel: error: cannot write to standard output: No space left on device"


def _pipeline(inp, outdir, extra=()):
    return OPT + [
        str(inp),
        "--propagate-shardings",
        f"--extract-collectives=system=dgx-h100 chakra-dir={outdir}/t.chakra",
        *extra,
        "-o",
        f"{outdir}/t.cost.mlir",
    ]


def _snapshot(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def test_failed_run_changes_no_output(tmp_path):
    r = _run(_pipeline(SHARDED, tmp_path), tmp_path)
    assert r.returncode == 0, r.stderr
    trace_before = _snapshot(tmp_path / "t.chakra")
    out_before = (tmp_path / "t.cost.mlir").read_bytes()
    # a pass after extract-collectives fails: neither the trace nor -o may change
    r = _run(_pipeline(SHARDED, tmp_path, ["--annotate-cost=hardware=no-such-gpu"]), tmp_path)
    assert r.returncode == 1 and "unknown hardware 'no-such-gpu'" in r.stderr
    assert _snapshot(tmp_path / "t.chakra") == trace_before
    assert (tmp_path / "t.cost.mlir").read_bytes() == out_before
    assert sorted(os.listdir(tmp_path)) == ["t.chakra", "t.cost.mlir"]  # nothing staged left


def test_concurrent_runs_never_mix(tmp_path):
    text = open(SHARDED).read()
    inputs = []
    for name in ("alpha", "beta"):
        p = tmp_path / f"{name}.mlir"
        p.write_text(text.replace("module @jit_tp_mlp", f"module @{name}", 1))
        inputs.append(p)
    out = tmp_path / "out"
    out.mkdir()
    for _trial in range(3):
        procs = [
            subprocess.Popen(_pipeline(p, out), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for p in inputs
        ]
        for pr in procs:
            assert pr.wait(300) == 0, pr.stderr.read()
        manifest = json.loads((out / "t.chakra" / "manifest.json").read_text())
        winner = os.path.splitext(os.path.basename(manifest["source"]))[0]
        assert f"module @{winner} " in (out / "t.cost.mlir").read_text()
        assert sorted(os.listdir(out)) == ["t.chakra", "t.cost.mlir"]


def test_chakra_dir_tilde(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))
    r = _run(
        OPT + [SHARDED, "--propagate-shardings", "--extract-collectives=system=dgx-h100 chakra-dir=~/tr", "-o", "/dev/null"],
        tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "tr" / "manifest.json").exists() and not (tmp_path / "~").exists()


def test_simulate_trace_to_dev_null_and_symlink(tmp_path):
    r = _run(_pipeline(SHARDED, tmp_path), tmp_path)
    assert r.returncode == 0, r.stderr
    r = _run(CLI + ["simulate", str(tmp_path / "t.chakra"), "--trace", "/dev/null"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert _is_char_device("/dev/null")
    (tmp_path / "real.json").write_text("")
    (tmp_path / "link.json").symlink_to("real.json")
    r = _run(CLI + ["simulate", str(tmp_path / "t.chakra"), "--trace", str(tmp_path / "link.json")], tmp_path)
    assert r.returncode == 0, r.stderr
    assert os.path.islink(tmp_path / "link.json")
    assert json.loads((tmp_path / "real.json").read_text())["traceEvents"]


@pytest.mark.parametrize("target", ["/dev/null", "/dev/stdout"])
def test_default_trace_dir_of_a_device_output_is_the_working_directory(tmp_path, target):
    """`-o /dev/null` with extract-collectives and no chakra-dir: the trace goes to
    ./chakra/ as for stdout, never into a `/dev/null.chakra/` folder beside the device."""
    r = _run(OPT + [SHARDED, "--propagate-shardings", "--extract-collectives=system=dgx-h100", "-o", target], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "chakra" / "manifest.json").is_file()
    assert not os.path.exists(target + ".chakra")
    assert _is_char_device("/dev/null")


def test_a_trace_directory_swapped_by_another_run_counts_as_absent(tmp_path, monkeypatch):
    """Outside the commit's lock another run may rename the directory away between two
    questions about it (the race behind 'exists and is not a directory' in CI): a
    directory gone meanwhile is absent, not an error; a file or dangling link still is."""
    d = tmp_path / "t.chakra"
    d.mkdir()
    real_listdir = os.listdir

    def vanished(path):
        if str(path) == str(d):
            raise FileNotFoundError(path)
        return real_listdir(path)

    monkeypatch.setattr(outputs.os, "listdir", vanished)
    outputs.check_dir_target(str(d), "stablehlo-costmodel")  # no error
    monkeypatch.setattr(outputs.os, "listdir", real_listdir)
    f = tmp_path / "file"
    f.write_text("x")
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere")
    for path in (f, link):
        with pytest.raises(OutputError, match="exists and is not a directory"):
            outputs.check_dir_target(str(path), "stablehlo-costmodel")
    outputs.check_dir_target(str(tmp_path / "absent"), "stablehlo-costmodel")


@pytest.mark.parametrize("how", ["-o", "redirect"])
def test_a_full_device_output_installs_no_trace_directory(tmp_path, how):
    """The module's output is streamed before the trace directory is renamed into place:
    when it fails (/dev/full), the previous trace stays and no "wrote" line is said."""
    r = _run(_pipeline(SHARDED, tmp_path), tmp_path)
    assert r.returncode == 0, r.stderr
    before = _snapshot(tmp_path / "t.chakra")
    argv = OPT + [SHARDED, "--propagate-shardings", "--annotate-cost=hardware=a100-40gb",
                  f"--extract-collectives=system=dgx-h100 chakra-dir={tmp_path}/t.chakra"]
    if how == "-o":
        r = _run(argv + ["-o", "/dev/full"], tmp_path)
    else:
        with open("/dev/full", "w") as full:
            r = subprocess.run(argv, cwd=tmp_path, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 1 and "No space left on device" in r.stderr and "chakra: wrote" not in r.stderr
    assert _snapshot(tmp_path / "t.chakra") == before
    assert sorted(os.listdir(tmp_path)) == ["t.chakra", "t.cost.mlir"]  # nothing staged left
    assert _is_char_device("/dev/full")


def test_a_symlinked_trace_directory_is_written_through(tmp_path):
    """chakra-dir naming a symlink to a directory writes where it points; the link stays
    (it was swapped for a directory, the old target kept, a staged link left behind)."""
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "link")
    write_dir_files = {"manifest.json": json.dumps({"generator": "g", "written_files": ["manifest.json", "a"]}).encode(),
                       "a": b"1"}
    outputs.write_dir(str(tmp_path / "link"), write_dir_files, "g")
    assert os.path.islink(tmp_path / "link") and os.readlink(tmp_path / "link") == "real"
    assert (tmp_path / "real" / "a").read_bytes() == b"1"
    outputs.write_dir(str(tmp_path / "link"), {**write_dir_files, "a": b"2"}, "g")
    assert os.path.islink(tmp_path / "link") and (tmp_path / "real" / "a").read_bytes() == b"2"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_an_output_file_inside_the_trace_directory_is_refused_clearly(tmp_path):
    """-o inside chakra-dir failed with 'exists and is not a trace directory' (the run's own
    staged file); it is now said what is wrong, and nothing is left behind."""
    (tmp_path / "t.chakra").mkdir()
    r = _run(OPT + [SHARDED, "--propagate-shardings", f"--extract-collectives=system=dgx-h100 chakra-dir={tmp_path}/t.chakra",
                    "-o", f"{tmp_path}/t.chakra/out.mlir"], tmp_path)
    assert r.returncode == 1 and "is inside the trace directory" in r.stderr and "write it elsewhere" in r.stderr
    assert os.listdir(tmp_path / "t.chakra") == [] and sorted(os.listdir(tmp_path)) == ["t.chakra"]
