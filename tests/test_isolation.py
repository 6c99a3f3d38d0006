"""costmodel.isolation: a native crash in a forked child becomes one error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from costmodel import isolation
from costmodel.ir import DiagnosticEngine, ir, load_module, make_context, print_module
from costmodel.passes import PassError, PassSession, get_pass, parse_options

DATA = os.path.join(os.path.dirname(__file__), "data", "sharded")
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="crash isolation needs os.fork (POSIX)")

# 12 rows sharded over 8 devices: jaxlib 0.10.2's sdy-convert-global-to-local aborts the
# process on it ("Check failed: localType Failed to compute local type due to
# non-divisible sharding") unless sdy-pad-for-divisibility ran first. A real JAX program
# (with_sharding_constraint on a 12-row array) gives this module; XLA pads it.
NON_DIVISIBLE = """module @m attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func @main(%arg0: tensor<12x16xf32>) -> (tensor<12x16xf32>) {
    %0 = stablehlo.tanh %arg0 : tensor<12x16xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"d"}, {}]> : tensor<12x16xf32>
    %2 = stablehlo.sine %1 : tensor<12x16xf32>
    return %2 : tensor<12x16xf32>
  }
}
"""


@pytest.fixture()
def ctx():
    return make_context()


def _module(ctx, text="module { func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> } }"):
    return load_module(ctx, text, "in.mlir")


def test_result_and_module_come_back(ctx):
    module = _module(ctx)

    def work(child, progress):
        progress.stage("tag")
        child.attributes["costmodel.test"] = ir.StringAttr.get("from the child")
        return {"pid": os.getpid()}

    value = isolation.run_isolated(module, work)
    assert value["pid"] != os.getpid()  # it ran in another process
    assert 'costmodel.test = "from the child"' in print_module(module).decode()
    module.verify()


def test_exceptions_come_back_as_themselves(ctx):
    module = _module(ctx)
    before = print_module(module)

    def work(child, progress):
        child.attributes["costmodel.test"] = ir.UnitAttr.get()
        raise PassError("no")

    with pytest.raises(PassError, match="no"):
        isolation.run_isolated(module, work)
    assert print_module(module) == before  # a failed child's module is not taken


def test_injected_abort_names_the_stage(ctx, monkeypatch):
    monkeypatch.setenv("COSTMODEL_TEST_ABORT_AT", "second")

    def work(child, progress):
        progress.stage("first")
        progress.stage("second")
        return 1

    with pytest.raises(isolation.NativeCrash) as info:
        isolation.run_isolated(_module(ctx), work)
    assert info.value.stage == "second" and info.value.how == "SIGABRT"
    assert str(info.value) == "second crashed (SIGABRT)"


def test_real_shardy_check_failure_is_caught(ctx):
    """The real CHECK failure of the conversion, run without the padding pass."""
    from costmodel.ir import passmanager

    module = load_module(ctx, NON_DIVISIBLE, "nondiv.mlir")
    diags = DiagnosticEngine("nondiv.mlir")
    assert isolation.run_pipeline_isolated(
        module, "builtin.module(sdy-propagation-pipeline)", "sdy-propagation-pipeline", diags
    )
    with pytest.raises(isolation.NativeCrash) as info:
        isolation.run_pipeline_isolated(
            module, "builtin.module(sdy-convert-global-to-local)", "sdy-convert-global-to-local", diags
        )
    assert info.value.stage == "sdy-convert-global-to-local" and info.value.how == "SIGABRT"
    assert info.value.detail == (
        "Check failed: localType Failed to compute local type due to non-divisible sharding "
        "[convert_global_to_local.cc:77]"
    )
    assert passmanager is not None


def test_cli_raw_shardy_pass_crash_is_one_line(tmp_path):
    src = tmp_path / "nondiv.mlir"
    src.write_text(NON_DIVISIBLE)
    proc = subprocess.run(
        [sys.executable, "-m", "costmodel.driver", str(src), "--sdy-propagation-pipeline", "--sdy-convert-global-to-local"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"{src}:1:1: error: sdy-convert-global-to-local crashed (SIGABRT: Check failed: localType Failed to compute "
        "local type due to non-divisible sharding [convert_global_to_local.cc:77])"
    ]
    assert not list(tmp_path.glob("core*"))  # no core dump left in the working directory


def test_cli_propagate_shardings_crash_is_one_line(tmp_path):
    env = dict(os.environ, COSTMODEL_TEST_ABORT_AT="sdy-insert-explicit-reshards")
    proc = subprocess.run(
        [sys.executable, "-m", "costmodel.driver", os.path.join(DATA, "tp_mlp.mlir"), "--propagate-shardings"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"{os.path.join(DATA, 'tp_mlp.mlir')}:1:1: error: propagate-shardings: sdy-insert-explicit-reshards crashed (SIGABRT)"
    ]


def test_non_divisible_sharding_is_padded_not_a_crash(ctx):
    module = load_module(ctx, NON_DIVISIBLE, "nondiv.mlir")
    session = PassSession(DiagnosticEngine("nondiv.mlir"))
    info = get_pass("propagate-shardings")
    info.run(module, parse_options(info, ""), session)
    out = print_module(module).decode()
    assert not session.diagnostics.has_errors
    assert "high = [4, 0]" in out and "tensor<2x16xf32>" in out  # 12 rows padded to 16, 2 per device


@pytest.mark.parametrize("isolate", ["true", "false"])
def test_same_result_isolated_or_not(ctx, isolate):
    with open(os.path.join(DATA, "scan_fsdp.mlir")) as fh:
        text = fh.read()
    outs = []
    for iso in ("true", isolate):
        module = load_module(ctx, text, "scan_fsdp.mlir")
        session = PassSession(DiagnosticEngine("scan_fsdp.mlir"))
        info = get_pass("propagate-shardings")
        info.run(module, parse_options(info, f"isolate={iso}"), session)
        outs.append(print_module(module, debug_info=True))
    assert outs[0] == outs[1]


def test_no_isolation_env(ctx, monkeypatch):
    monkeypatch.setenv("COSTMODEL_NO_ISOLATION", "1")
    assert not isolation.isolation_available()
    assert isolation.run_isolated(_module(ctx), lambda m, p: os.getpid()) == os.getpid()


_INHERITED_CONTEXT = """
import gc, sys
sys.path.insert(0, {python!r})
from costmodel import isolation
from costmodel.ir import load_module, make_context, passmanager

old = make_context()
funcs = "\\n".join(
    f"func.func @f{{i}}(%a: tensor<64xf32>) -> tensor<64xf32> {{{{ %0 = stablehlo.exponential %a : tensor<64xf32> return %0 : tensor<64xf32> }}}}"
    for i in range(64)
)
m = load_module(old, "module {{ " + funcs + " }}", "old.mlir")
with old:
    passmanager.PassManager.parse("builtin.module(func.func(cse))").run(m)  # worker threads ran
cycle = [old, m]
cycle.append(cycle)  # the context is now held by a reference cycle alone
gc.disable()  # (so that this process does not collect it first)
del old, m, cycle
ctx = make_context()
module = load_module(ctx, "module {{ }}", "in.mlir")
gc.enable()

def work(child, progress):
    junk = []
    for i in range(20000):  # allocations enough for automatic collections
        x = []
        x.append(x)
        junk.append(x)
    return "ok"

print(isolation.run_isolated(module, work))
"""


def test_child_destroys_nothing_it_inherited(tmp_path):
    """Regression (found by a test selection: ResNet-50's extract-collectives, then a
    propagate-shardings crashed with SIGSEGV in the child): a context of the parent's
    that only a reference cycle keeps alive, and whose worker threads ran (a pass over
    several functions), was destroyed by a garbage collection in the forked child,
    which joins threads the child does not have (a crash or a hang). The child now
    collects nothing it inherited. Run in its own process, with a timeout."""
    import pathlib

    python = str(pathlib.Path(isolation.__file__).resolve().parents[1])
    script = tmp_path / "inherited.py"
    script.write_text(_INHERITED_CONTEXT.format(python=python))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
