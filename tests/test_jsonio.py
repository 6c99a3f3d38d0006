"""costmodel.jsonio: JSON read with its nesting bounded, whatever the caller's recursion
limit (the passes raise it to ir.DEEP_RECURSION, under which json's C parser overflowed
the C stack on 100,000 `[`: a segfault)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from costmodel.ir import DEEP_RECURSION, recursion_limit
from costmodel.jsonio import JSON_MAX_NESTING, json_loads


def _at_depth(n, fn):
    return fn() if n == 0 else _at_depth(n - 1, fn)


def test_nesting_is_bounded_above_the_callers_depth():
    ok = "[" * 100 + "]" * 100
    deep = "[" * (JSON_MAX_NESTING + 500) + "]" * (JSON_MAX_NESTING + 500)
    before = sys.getrecursionlimit()
    with recursion_limit(DEEP_RECURSION):
        for frames in (0, 5_000):  # a caller deep in the IR walkers parses as a shallow one
            assert _at_depth(frames, lambda: json_loads(ok)) == json.loads(ok)
            with pytest.raises(ValueError, match="nested more than 2,000 levels deep"):
                _at_depth(frames, lambda: json_loads(deep))
    assert sys.getrecursionlimit() == before  # restored
    with pytest.raises(json.JSONDecodeError):
        json_loads("[")


def test_deep_json_from_the_user_is_an_error_not_a_crash(tmp_path):
    """A --set value and a hardware spec of 100,000 `[`: one-line errors (the --set value
    segfaulted predict, exit 139)."""
    deep = "[" * 100_000
    spec = tmp_path / "hw.json"
    spec.write_text(deep)
    module = tmp_path / "m.mlir"
    module.write_text("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                      "  %0 = stablehlo.exponential %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
    for argv in (
        ["predict", str(module), "--system", "h100-sxm-x4", "--set", f"network.0.bandwidth_GBps={deep}"],
        ["predict", str(module), "--system", "h100-sxm-x4", "--set", f"hardware.memory_bandwidth_GBps={deep}"],
        ["kernels", str(module), "--hardware", str(spec)],
    ):
        proc = subprocess.run([sys.executable, "-m", "costmodel.cli", *argv], capture_output=True, text=True)
        assert proc.returncode == 1, (argv[:4], proc.returncode, proc.stderr[-300:])
        assert "Traceback" not in proc.stderr
        assert "error:" in proc.stderr
