"""Shared pytest fixtures: run annotate-cost in-process on MLIR text."""

from __future__ import annotations

import dataclasses
import os

import pytest

# The project's ../shared (third-party workloads and references). A fresh clone has no
# ../shared: the tests that read it skip with this reason; CI has it (and fails on skips).
SHARED_WORKLOADS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "workloads")
SHARED_REASON = "needs ../shared/workloads beside the repository (CI has it; a fresh clone does not)"


def shared_path(name: str) -> str:
    """Path of a ../shared/workloads file, or skip the calling test with the reason."""
    path = os.path.join(SHARED_WORKLOADS, name)
    if not os.path.exists(path):
        pytest.skip(f"{SHARED_REASON}: {name}")
    return path


@dataclasses.dataclass
class Annotated:
    module: object  # the annotated builtin.module operation
    engine: object  # the CostEngine that ran
    totals: object  # its Totals
    diagnostics: list  # costmodel.ir.Diagnostic

    def ops(self, name: str | None = None) -> list:
        """Every op in the module (walk order), optionally only those named `name`."""
        found = []

        def walk(op):
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        inner = inner.operation
                        if name is None or inner.name == name:
                            found.append(inner)
                        walk(inner)

        walk(self.module)
        return found

    def cost(self, op) -> dict:
        """costmodel.cost of `op` as a python dict."""
        from costmodel.ir import ir

        d = ir.DictAttr(op.attributes["costmodel.cost"])
        out = {}
        for key in ("flops", "transcendentals", "bytes_read", "bytes_written", "trip_count"):
            if key in d:
                out[key] = ir.IntegerAttr(d[key]).value
        return out


def run_annotate(
    text: str,
    hardware: str = "h100-sxm",
    fusion: str = "none",
    backend: str = "roofline",
    inline: bool = False,
    branch: str | int = "max",
    unknown_trip_count: int | None = None,
) -> Annotated:
    from costmodel.backends import make_backend
    from costmodel.engine import CostEngine
    from costmodel.hardware import load_hardware
    from costmodel.ir import DiagnosticEngine, load_module, make_context

    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    if inline:
        from costmodel.ir import inline_calls

        with ctx:
            inline_calls(module)
    hw = load_hardware(hardware)
    diags = DiagnosticEngine("<test>")
    engine = CostEngine(make_backend(backend, hw, {}), hw.name, diags, backend_name=backend, fusion=fusion, branch=branch,
                        unknown_trip_count=unknown_trip_count)
    totals = engine.run(module)
    return Annotated(module, engine, totals, diags.diagnostics)


@pytest.fixture
def annotate():
    return run_annotate


# -- the profiled/learned backends: IREE on this host --------------------------------------
@pytest.fixture(scope="session")
def host_calibration(tmp_path_factory):
    """A cache dir holding this host's measurements (quick ones: 64 MiB copies, one round
    of IREE dispatch chains, one GEMM), measured once per session; skips without IREE."""
    pytest.importorskip("iree.compiler", reason="needs the [iree] extra (iree-base-compiler)")
    pytest.importorskip("iree.runtime", reason="needs the [iree] extra (iree-base-runtime)")
    from costmodel.profiling.host import host_measurements

    root = tmp_path_factory.mktemp("costmodel-cache")
    old = os.environ.get("COSTMODEL_CACHE_DIR")
    os.environ["COSTMODEL_CACHE_DIR"] = str(root)
    try:
        host_measurements(quick=True)
    finally:
        if old is None:
            del os.environ["COSTMODEL_CACHE_DIR"]
        else:
            os.environ["COSTMODEL_CACHE_DIR"] = old
    return root


@pytest.fixture
def profile_cache(host_calibration, tmp_path, monkeypatch):
    """A fresh, empty measurement cache with the session's host measurements."""
    import shutil

    root = tmp_path / "cache"
    shutil.copytree(host_calibration / "host", root / "host")
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(root))
    return root


# ---------------------------------------------------------------------------
# Tests that need a real ASTRA-sim build ($ASTRA_SIM, docs/simulator.md)
# ---------------------------------------------------------------------------

_NO_ASTRA_SIM = "no real ASTRA-sim build: set $ASTRA_SIM to AstraSim_Analytical_Congestion_Unaware (docs/simulator.md)"


def _have_astra_sim() -> bool:
    real = os.environ.get("ASTRA_SIM")
    return bool(real and os.path.isfile(real) and os.access(real, os.X_OK))


def pytest_configure(config):
    config.addinivalue_line("markers", "real_astra_sim: needs a real ASTRA-sim build ($ASTRA_SIM)")


def pytest_collection_modifyitems(config, items):
    if _have_astra_sim():
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("real_astra_sim") else keep).append(item)
    if drop:
        items[:] = keep
        config.hook.pytest_deselected(items=drop)
        config._costmodel_no_astra_sim = len(drop)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = getattr(config, "_costmodel_no_astra_sim", 0)
    if n:
        terminalreporter.write_line(f"{n} tests deselected: {_NO_ASTRA_SIM}")


# a bf16 scatter-add of 1024 rows of 64 into a 4096 x 64 table (unique_indices = UNIQUE:
# true or false)
SCATTER_ADD = """
func.func @main(%t: tensor<4096x64xbf16>, %i: tensor<1024x1xi32>, %u: tensor<1024x64xbf16>) -> tensor<4096x64xbf16> {
  %0 = "stablehlo.scatter"(%t, %i, %u) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = UNIQUE}> ({
  ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
    %s = stablehlo.add %a, %b : tensor<bf16>
    stablehlo.return %s : tensor<bf16>
  }) : (tensor<4096x64xbf16>, tensor<1024x1xi32>, tensor<1024x64xbf16>) -> tensor<4096x64xbf16>
  return %0 : tensor<4096x64xbf16>
}
"""


# A program with a dynamic dimension (a shape-polymorphic JAX export): the matmul and the
# ReLU cannot be costed until the shapes are refined, and every report must say so.
DYNAMIC_MLP = """
func.func @main(%x: tensor<?x128xf32>, %w: tensor<128x64xf32>, %s: tensor<64xf32>) -> (tensor<?x64xf32>, tensor<64xf32>) {
  %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x64xf32>) -> tensor<?x64xf32>
  %e = stablehlo.exponential %s : tensor<64xf32>
  return %y, %e : tensor<?x64xf32>, tensor<64xf32>
}
"""


# A while loop whose trip count depends on the data: annotate-cost costs one iteration and
# warns; every report passes the warning on.
DATA_DEPENDENT_WHILE = """
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %limit = stablehlo.constant dense<1.0e+06> : tensor<f32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.while(%it = %x) : tensor<64x64xf32>
  cond {
    %s = stablehlo.reduce(%it init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<64x64xf32>, tensor<f32>) -> tensor<f32>
    %c = stablehlo.compare LT, %s, %limit : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %n = stablehlo.multiply %it, %it : tensor<64x64xf32>
    stablehlo.return %n : tensor<64x64xf32>
  }
  return %r : tensor<64x64xf32>
}
"""


# lax.ragged_all_to_all under shard_map over 8 devices, as JAX 0.10 exports it: a custom
# call with its groups and channel in backend_config (MoE token dispatch).
RAGGED_ALL_TO_ALL = """
module @jit_f attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<64x128xbf16>, %out: tensor<64x128xbf16>, %in_off: tensor<8xi32>, %send: tensor<8xi32>, %out_off: tensor<8xi32>, %recv: tensor<8xi32>) -> tensor<64x128xbf16> {
    %0 = stablehlo.custom_call @ragged_all_to_all(%x, %out, %in_off, %send, %out_off, %recv) {api_version = 4 : i32, backend_config = {channel_id = 1 : i64, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>}} : (tensor<64x128xbf16>, tensor<64x128xbf16>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>, tensor<8xi32>) -> tensor<64x128xbf16>
    return %0 : tensor<64x128xbf16>
  }
}
"""
