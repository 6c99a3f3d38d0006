"""`costmodel backends list` and backend discovery: the built-in roofline, a backend
registered in-process with `register_backend()`, and one that another installed
package declares in the `costmodel.backends` entry point group (faked here by
monkeypatching `importlib.metadata.entry_points`). Each must be listed and usable via
`stablehlo-opt --annotate-cost="backend=NAME"`."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap

import pytest

from costmodel import backends as backends_mod
from costmodel import cli, driver

MODULE = """\
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


class ConstantBackend:
    """Every op takes `time` ns (a test backend)."""

    name = "constant"

    def __init__(self, hardware, time="7.5"):
        self.hardware = hardware
        self.time = float(time)

    def estimate(self, cost):
        return self.time, "compute"


EXT_BACKEND_SOURCE = textwrap.dedent(
    '''
    """A backend shipped by another package."""


    class ExtBackend:
        """Third-party backend: time = 3 ns per op."""

        name = "ext"

        def __init__(self, hardware, **options):
            if options:
                from costmodel.backends import BackendError

                raise BackendError(f"backend 'ext' takes no options, got {sorted(options)}")

        def estimate(self, cost):
            return 3.0, "memory"
    '''
)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(backends_mod._REGISTERED, "constant", ConstantBackend)
    return "constant"


@pytest.fixture
def entry_point(monkeypatch, tmp_path):
    """A package `ext_costmodel_backend` on sys.path, declared as an entry point."""
    (tmp_path / "ext_costmodel_backend.py").write_text(EXT_BACKEND_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    real = importlib.metadata.entry_points
    ep = importlib.metadata.EntryPoint(
        name="ext", value="ext_costmodel_backend:ExtBackend", group=backends_mod.ENTRY_POINT_GROUP
    )

    def fake_entry_points(**params):
        found = list(real(**params))
        if params.get("group") == backends_mod.ENTRY_POINT_GROUP:
            found.append(ep)
        return found

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    yield "ext"
    sys.modules.pop("ext_costmodel_backend", None)


def backends_list(capsys) -> dict[str, str]:
    rc = cli.main(["backends", "list"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = {}
    for line in out.splitlines():
        name, rest = line.split(None, 1)
        rows[name] = rest
    return rows


def annotate(capsys, tmp_path, option: str) -> tuple[int, str, str]:
    p = tmp_path / "m.mlir"
    p.write_text(MODULE)
    rc = driver.main([str(p), f"--annotate-cost={option}"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def test_builtin_roofline_is_listed(capsys):
    rows = backends_list(capsys)
    assert "roofline" in rows
    assert "costmodel.backends.roofline:RooflineBackend" in rows["roofline"]


def test_backends_without_action_is_usage(capsys):
    assert cli.main(["backends"]) == 2


def test_register_backend_in_process(capsys, tmp_path, registered):
    rows = backends_list(capsys)
    assert rows["constant"].startswith("registered: ")
    assert "Every op takes `time` ns" in rows["constant"]

    rc, out, err = annotate(capsys, tmp_path, "backend=constant")
    assert rc == 0, err
    assert 'backend = "constant"' in out
    assert 'bound = "compute"' in out and "time_ns = 7.500000e+00 : f64" in out


def test_register_backend_api(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(backends_mod, "_REGISTERED", dict(backends_mod._REGISTERED))
    backends_mod.register_backend("constant2", ConstantBackend)
    assert "constant2" in backends_list(capsys)
    rc, out, err = annotate(capsys, tmp_path, "backend=constant2")
    assert rc == 0 and 'backend = "constant2"' in out, err


def test_backend_options_pass_through(capsys, tmp_path, registered):
    rc, out, err = annotate(capsys, tmp_path, "backend=constant time=2")
    assert rc == 0, err
    assert "time_ns = 2.000000e+00 : f64" in out


def test_entry_point_backend_from_another_package(capsys, tmp_path, entry_point):
    rows = backends_list(capsys)
    assert rows["ext"].startswith("ext_costmodel_backend:ExtBackend")
    assert "Third-party backend" in rows["ext"]
    assert "roofline" in rows  # still there

    rc, out, err = annotate(capsys, tmp_path, "backend=ext hardware=a100-40gb")
    assert rc == 0, err
    assert 'backend = "ext"' in out and 'bound = "memory"' in out
    assert "time_ns = 3.000000e+00 : f64" in out


def test_entry_point_backend_rejects_options_in_one_line(capsys, tmp_path, entry_point):
    rc, out, err = annotate(capsys, tmp_path, "backend=ext speed=11")
    assert rc == 1 and out == ""
    assert err.strip() == "stablehlo-opt: error: backend 'ext' takes no options, got ['speed']"


def test_unknown_backend_names_the_known_ones(capsys, tmp_path, entry_point):
    rc, _, err = annotate(capsys, tmp_path, "backend=nope")
    assert rc == 1
    assert "unknown backend 'nope'" in err and "ext" in err and "roofline" in err


def test_broken_entry_point_does_not_hide_the_others(capsys, monkeypatch):
    real = importlib.metadata.entry_points
    broken = importlib.metadata.EntryPoint(
        name="broken", value="no_such_module_xyz:Backend", group=backends_mod.ENTRY_POINT_GROUP
    )

    def fake_entry_points(**params):
        found = list(real(**params))
        if params.get("group") == backends_mod.ENTRY_POINT_GROUP:
            found.append(broken)
        return found

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    rows = backends_list(capsys)
    assert "cannot load" in rows["broken"] and "roofline" in rows
