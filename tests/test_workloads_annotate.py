"""Every op in every module of ../shared/workloads gets a cost; zero unsupported."""

from __future__ import annotations

import pathlib
import pytest

from conftest import run_annotate

WORKLOADS = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "workloads"
FILES = sorted(WORKLOADS.glob("*.mlir"))


def test_workloads_present():
    if not WORKLOADS.is_dir():
        pytest.skip(f"needs ../shared/workloads beside the repository (CI has it; a fresh clone does not)")
    assert len(FILES) >= 6, f"expected the shared workloads in {WORKLOADS}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_workload_fully_costed(path):
    a = run_annotate(path.read_text())
    assert a.engine.unsupported_ops == {}
    for op in a.ops():
        if op.name.startswith(("stablehlo.", "chlo.", "func.call", "sdy.")) or op.name == "func.func":
            assert "costmodel.cost" in op.attributes, op.name
            assert "costmodel.unsupported" not in op.attributes, op.name
