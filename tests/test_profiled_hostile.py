"""The `profiled` backend fed bad input: rank-0 arguments of types numpy cannot write,
measurement settings that must not share cache rows, corrupt caches and host
calibrations (one-line errors, never a traceback or a silent wrong number)."""

from __future__ import annotations

import glob
import json
import os
import sqlite3

import pytest

from costmodel.backends import BackendError
from costmodel.ir import InputError, dict_attr_values, ir, walk_ops
from costmodel.shapes import TensorInfo

from test_backends_profiled import annotate

TANH = """\
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = stablehlo.tanh %x : tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}
"""


def kernel_details(ctx, module) -> list[dict]:
    """The costmodel.kernel_cost of every kernel, as dicts (walk order)."""
    with ctx:
        return [dict_attr_values(ir.DictAttr(op.attributes["costmodel.kernel_cost"]))
                for op in walk_ops(module.operation) if "costmodel.kernel_cost" in op.attributes]


# -- 1. rank-0 arguments of every element type ------------------------------------------------


def test_rank0_arguments_get_a_value(tmp_path):
    from costmodel.profiling.ireerun import input_flags

    infos = [TensorInfo((), dt, 2, 1, 2) for dt in ("bf16", "f8E4M3FN")] + [TensorInfo((2, 3), "bf16", 2, 6, 12)]
    flags = input_flags(infos, str(tmp_path))
    # `--input=bf16` alone is "invalid tensor specification" to iree-benchmark-module
    assert flags == ["--input=bf16=0", "--input=f8E4M3FN=0", "--input=2x3xbf16"]
    # iree-compile demotes f64 to f32: an f64 buffer would be rejected
    import numpy as np

    input_flags([TensorInfo((), "f64", 8, 1, 8)], str(tmp_path))
    assert np.load(tmp_path / "arg0.npy").dtype == np.float32


def test_rank0_bf16_argument_is_measured(profile_cache):
    text = """\
func.func @main(%x: tensor<64x64xbf16>, %s: tensor<bf16>) -> tensor<64x64xbf16> {
  %0 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<bf16>) -> tensor<64x64xbf16>
  %1 = stablehlo.multiply %x, %0 : tensor<64x64xbf16>
  return %1 : tensor<64x64xbf16>
}
"""
    ctx, module = annotate(text, fusion="xla-tpu")
    rows = kernel_details(ctx, module)
    assert rows and all(r["profile"] == "measured" for r in rows), rows


# -- 2. measurement settings are part of the cache key -------------------------------------------


def test_repeats_do_not_share_cache_rows(profile_cache):
    ctx, m = annotate(TANH)
    assert kernel_details(ctx, m)[0]["from_cache"] is False
    ctx, m = annotate(TANH, repeats="3")  # not answered from the 2-repeat row
    assert kernel_details(ctx, m)[0]["from_cache"] is False
    ctx, m = annotate(TANH, min_time_ms="2")
    assert kernel_details(ctx, m)[0]["from_cache"] is False
    ctx, m = annotate(TANH)
    assert kernel_details(ctx, m)[0]["from_cache"] is True


def test_a_timeout_is_not_the_answer_for_a_longer_timeout(profile_cache, monkeypatch):
    import costmodel.profiling.profiler as profiler
    from costmodel.profiling.ireerun import RunError

    real = profiler.benchmark_vmfb

    def slow(*args, timeout_s, **kw):  # a kernel that needs more than 1 s
        if timeout_s < 2:
            raise RunError(f"iree-benchmark-module ran longer than {timeout_s:g} s", timeout_s)
        return real(*args, timeout_s=timeout_s, **kw)

    monkeypatch.setattr(profiler, "benchmark_vmfb", slow)
    ctx, m = annotate(TANH, timeout_s="1")
    first = kernel_details(ctx, m)[0]
    assert first["profile"] == "fallback" and "longer than 1 s" in first["fallback_reason"]
    ctx, m = annotate(TANH, timeout_s="1")  # the same limit: the cached failure holds
    assert kernel_details(ctx, m)[0]["profile"] == "fallback"
    ctx, m = annotate(TANH)  # the default 120 s: measured, not the cached fallback
    row = kernel_details(ctx, m)[0]
    assert row["profile"] == "measured" and row["from_cache"] is False


def test_compilation_has_the_time_limit_too(profile_cache, monkeypatch):
    """`timeout_s` covers compiling as documented ("compile or run"): iree-compile runs
    under it, and a compile that ran past it is no answer for a longer limit either."""
    import costmodel.profiling.profiler as profiler
    from costmodel.profiling.ireerun import CompileError, compile_program

    with pytest.raises(CompileError, match="iree-compile ran longer than 0.001 s") as err:
        compile_program(TANH, timeout_s=0.001)
    assert err.value.timeout_s == 0.001
    real = profiler.compile_program

    def slow(text, timeout_s):
        if timeout_s < 2:
            raise CompileError(f"iree-compile ran longer than {timeout_s:g} s", timeout_s)
        return real(text, timeout_s=timeout_s)

    monkeypatch.setattr(profiler, "compile_program", slow)
    ctx, m = annotate(TANH, timeout_s="1")
    assert "iree-compile ran longer than 1 s" in kernel_details(ctx, m)[0]["fallback_reason"]
    ctx, m = annotate(TANH)
    assert kernel_details(ctx, m)[0]["profile"] == "measured"


# -- 3. corrupt caches and host calibrations ---------------------------------------------------------


def _one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize("kind", ["garbage", "truncated", "directory"])
def test_an_unreadable_cache_file_is_one_line(tmp_path, kind):
    from costmodel.profiling.cache import CachedMeasurement, CacheError, MeasurementCache

    path = tmp_path / "profiles.sqlite3"
    if kind == "directory":
        path.mkdir()
    elif kind == "garbage":
        path.write_bytes(b"not a database at all\n" * 200)
    else:
        good = MeasurementCache(str(path))
        for i in range(200):
            good.put(f"sig{i}", "dev", "rt", "m", CachedMeasurement("measured", 1000.0, 0.1, 2, extra={"executables": 1}))
        good.close()
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    with pytest.raises(CacheError) as err:
        cache = MeasurementCache(str(path))
        cache.get("sig150", "dev", "rt", "m")
    assert str(path) in _one_line(err)
    assert isinstance(err.value, BackendError) and isinstance(err.value, InputError)


def test_a_cache_dir_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    from costmodel.profiling.cache import CacheError, MeasurementCache

    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(f))
    with pytest.raises(CacheError) as err:
        MeasurementCache.default()
    assert str(f) in _one_line(err)


@pytest.mark.parametrize(
    "update, what",
    [
        ("extra='notjson'", "extra is not a JSON object"),
        ("extra='[]'", "extra is not a JSON object"),
        ("extra='{\"executables\":\"x\"}'", "executables 'x'"),
        ("time_ns=1e300", "time_ns"),
        ("time_ns=-5", "time_ns"),
        ("time_ns=0", "time_ns"),
        ("status='maybe'", "status"),
    ],
)
def test_a_corrupt_cache_row_is_one_line(tmp_path, update, what):
    from costmodel.profiling.cache import CachedMeasurement, CacheError, MeasurementCache

    path = str(tmp_path / "profiles.sqlite3")
    cache = MeasurementCache(path)
    cache.put("sig", "dev", "rt", "m", CachedMeasurement("measured", 1000.0, 0.1, 2, extra={"executables": 1}))
    assert cache.get("sig", "dev", "rt", "m").time_ns == 1000.0
    db = sqlite3.connect(path)
    db.execute("UPDATE measurements SET " + update)
    db.commit()
    db.close()
    with pytest.raises(CacheError) as err:
        cache.get("sig", "dev", "rt", "m")
    text = _one_line(err)
    assert path in text and what in text and "cache=refresh" in text


def test_a_corrupt_row_stops_the_pass_with_one_line(profile_cache):
    annotate(TANH)
    db = sqlite3.connect(str(profile_cache / "profiles.sqlite3"))
    db.execute("UPDATE measurements SET time_ns=1e300")
    db.commit()
    db.close()
    # raised while the pass runs: an InputError (one error diagnostic, no traceback)
    with pytest.raises(InputError, match="corrupt row .* cache=refresh"):
        annotate(TANH)
    ctx, m = annotate(TANH, cache="refresh")  # measured again, the row replaced
    assert kernel_details(ctx, m)[0]["profile"] == "measured"
    ctx, m = annotate(TANH)
    assert kernel_details(ctx, m)[0]["from_cache"] is True


@pytest.mark.parametrize(
    "corrupt, what",
    [
        (lambda d: [], "a JSON list"),
        (lambda d: d["iree"].pop("invocation_ns_by_threads"), "invocation_ns_by_threads"),
        (lambda d: d["iree"]["invocation_ns_by_threads"].update({"1:cpu": float("nan")}), "nan"),
        (lambda d: d["iree"]["invocation_ns_by_threads"].update({"1:cpu": -5.0}), "-5"),
        (lambda d: d["iree"]["dispatch_ns_by_threads"].clear(), "dispatch_ns_by_threads"),
        (lambda d: d.update(iree="x"), "'iree' is not an object"),
        (lambda d: d.update(copy_GBps={"1": "fast"}), "copy_GBps"),
    ],
)
def test_a_corrupt_host_calibration_is_one_line(profile_cache, corrupt, what):
    from costmodel.profiling.cache import CacheError
    from costmodel.profiling.host import host_measurements

    (path,) = glob.glob(str(profile_cache / "host" / "*.json"))
    with open(path) as fh:
        data = json.load(fh)
    out = corrupt(data)
    with open(path, "w") as fh:
        json.dump(out if isinstance(out, list) else data, fh)
    with pytest.raises(CacheError) as err:
        host_measurements()
    text = _one_line(err)
    assert path in text and what in text
    with pytest.raises(InputError, match="host calibration"):
        annotate(TANH)


def test_truncated_host_calibration_is_one_line(profile_cache):
    from costmodel.profiling.cache import CacheError
    from costmodel.profiling.host import host_measurements

    (path,) = glob.glob(str(profile_cache / "host" / "*.json"))
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text[: len(text) // 2])
    with pytest.raises(CacheError) as err:
        host_measurements()
    assert path in _one_line(err)


# -- 4. evaluation caches ---------------------------------------------------------------------------------


def test_evaluation_cache_creates_a_new_directory(tmp_path, monkeypatch):
    import costmodel.profiling.host as host
    from costmodel.profiling.cache import CacheError
    from costmodel.profiling.evaluate import evaluation_cache

    monkeypatch.setattr(host, "host_cpu_json", lambda threads=None: {"name": "host-cpu"})
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(tmp_path))  # restored after the test
    new = tmp_path / "new" / "cache"
    spec, cleanup = evaluation_cache(str(new), "x-", 1)
    assert os.path.isfile(spec) and os.path.dirname(spec) == str(new)
    cleanup()
    assert new.is_dir()  # a given directory is kept
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(CacheError) as err:
        evaluation_cache(str(f), "x-", 1)
    assert str(f) in _one_line(err)


# -- 5. a measured kernel is never priced below its arithmetic at the peak ------------------------------------


def test_a_kernel_is_never_below_its_compute_roofline(profile_cache):
    (path,) = glob.glob(str(profile_cache / "host" / "*.json"))
    with open(path) as fh:
        data = json.load(fh)
    # an invocation calibrated far longer than the kernels (another load): standalone -
    # invocation would be clamped to dispatch_ns, far below a 128^3 GEMM's flops at the peak
    for key in data["iree"]["invocation_ns_by_threads"]:
        data["iree"]["invocation_ns_by_threads"][key] = 3.6e12
    with open(path, "w") as fh:
        json.dump(data, fh)
    text = """\
func.func @main(%x: tensor<128x128xf32>, %w: tensor<128x128xf32>) -> tensor<128x128xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>
  return %0 : tensor<128x128xf32>
}
"""
    ctx, m = annotate(text)
    (row,) = kernel_details(ctx, m)
    assert row["profile"] == "measured" and row["floor"] == "roofline"
    assert row["unfloored_ns"] < row["time_ns"]
    from costmodel.hardware import load_hardware

    spec = load_hardware("host-cpu")
    peak_flops_per_ns = spec.peak_TFLOPS("matrix", "f32") * 1e3  # all cores: threads=1 has a 1-core spec, slower
    assert row["time_ns"] >= 2 * 128**3 / peak_flops_per_ns
