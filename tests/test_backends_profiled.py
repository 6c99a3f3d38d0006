"""The `profiled` backend: kernels measured with IREE llvm-cpu on this host, cached;
fallbacks; options; the generated `host-cpu` spec. Measurements here are tiny programs
with short repetitions (the real runs: benchmarks/profiled_eval.py)."""

from __future__ import annotations

import pytest

from costmodel.backends import BackendError, make_backend
from costmodel.hardware import load_hardware, parse_hardware
from costmodel.ir import DiagnosticEngine, attr_number, ir, load_module, make_context
from costmodel.passes.annotate_cost import annotate_module

FAST = {"repeats": "2", "min_time_ms": "1", "warmup_ms": "0", "progress": "off"}

PROGRAM = """\
func.func @main(%x: tensor<32x64xf32>, %w: tensor<64x64xf32>) -> tensor<32x64xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
  %1 = stablehlo.tanh %0 : tensor<32x64xf32>
  %2 = stablehlo.add %1, %x : tensor<32x64xf32>
  return %2 : tensor<32x64xf32>
}
"""


def annotate(text, fusion="none", **options):
    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    annotate_module(
        module, DiagnosticEngine("<test>"), hardware="host-cpu", backend="profiled", fusion=fusion, backend_options={**FAST, **options}
    )
    return ctx, module


def summary(ctx, module) -> dict:
    with ctx:
        s = ir.DictAttr(module.attributes["costmodel.summary"])
        out = {k: attr_number(s[k]) for k in ("total_time_ns", "program_overhead_ns", "kernel_count") if k in s}
        stats = ir.DictAttr(s["backend_stats"])
        for k in ("kernels_measured", "kernels_from_cache", "kernels_fallback"):
            out[k] = attr_number(stats[k])
    return out


def kernel_costs(ctx, module) -> list[dict]:
    out = []
    with ctx:
        for op in _walk(module):
            if "costmodel.kernel_cost" in op.attributes:
                d = ir.DictAttr(op.attributes["costmodel.kernel_cost"])
                row = {"op": op.name}
                for key in ("time_ns", "standalone_ns", "invocation_ns"):
                    if key in d:
                        row[key] = attr_number(d[key])
                for key in ("profile", "fallback_backend", "fallback_reason"):
                    if key in d:
                        row[key] = ir.StringAttr(d[key]).value
                if "from_cache" in d:
                    row["from_cache"] = ir.BoolAttr(d["from_cache"]).value
                out.append(row)
    return out


def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                yield inner
                yield from _walk(inner)


# -- options (no measurement) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        ({"repeat": "3"}, "has no option 'repeat' (did you mean 'repeats'?)"),
        ({"repeats": "0"}, "option 'repeats' expects a value >= 1, got '0'"),
        ({"repeats": "many"}, "option 'repeats' expects an integer, got 'many'"),
        ({"threads": "-1"}, "option 'threads' expects a value >= 0"),
        ({"warmup_ms": "nan"}, "option 'warmup_ms' expects a finite number"),
        ({"cache": "maybe"}, "option 'cache' expects one of on, refresh, off, got 'maybe'"),
        ({"fallback": "oracle"}, "option 'fallback' expects one of calibrated, roofline"),
    ],
)
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(BackendError) as err:
        make_backend("profiled", load_hardware("cpu"), options)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_profiled_measures_this_machine_only():
    with pytest.raises(BackendError, match="measures on this machine: use hardware=host-cpu"):
        make_backend("profiled", load_hardware("h100-sxm"), {})


# -- the host-cpu spec ------------------------------------------------------------------------


def test_host_cpu_spec_fits_the_hardware_schema(host_calibration, monkeypatch):
    monkeypatch.setenv("COSTMODEL_CACHE_DIR", str(host_calibration))
    from costmodel.profiling.host import host_cpu_json

    data = host_cpu_json()
    spec = parse_hardware(data, "host-cpu")  # exact validation: unknown keys, ranges, sources
    assert spec.name == "host-cpu"
    assert spec.memory_bandwidth_GBps > 0 and spec.peak_TFLOPS("matrix", "f32") > 0
    assert set(spec.calibration) >= {"matrix_efficiency", "kernel_launch_ns", "compute_units", "gemm_tile_m"}
    # every value says where it comes from
    for key in ("memory_bandwidth_GBps", "memory_capacity_GiB", "matrix_peak_TFLOPS.f32", "calibration.matrix_efficiency"):
        assert spec.sources[key]
    assert "measured on this machine" in spec.sources["memory_bandwidth_GBps"]
    one = parse_hardware(host_cpu_json(threads=1), "host-cpu-1")
    cores = int(spec.calibration["compute_units"])
    assert one.peak_TFLOPS("vector", "f32") == pytest.approx(spec.peak_TFLOPS("vector", "f32") / cores, rel=1e-3)


def test_detect_cpu_reads_proc_cpuinfo():
    from costmodel.profiling.host import detect_cpu, device_id, simd_f32_lanes

    text = "\n\n".join(
        f"processor\t: {i}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
        f"model name\t: Test CPU\nstepping\t: 8\ncpu MHz\t\t: 2500.000\nphysical id\t: 0\ncore id\t\t: {i // 2}\n"
        "flags\t\t: fpu sse avx avx2 fma avx512f avx512_bf16\n"
        for i in range(4)
    )
    info = detect_cpu(text, sys_cpu="/nonexistent")
    assert info["logical_cpus"] == 4 and info["physical_cores"] == 2  # two hyperthreads per core
    assert info["mhz"] == 2500.0 and "avx512f" in info["flags"]
    assert simd_f32_lanes(info["flags"])[0] == 16
    assert device_id(info) == device_id(detect_cpu(text, sys_cpu="/nonexistent"))
    assert device_id(info).startswith("cpu-test-cpu-")


# -- measuring ------------------------------------------------------------------------------------


def test_second_run_measures_nothing(profile_cache):
    ctx, m1 = annotate(PROGRAM)
    first = summary(ctx, m1)
    costs1 = kernel_costs(ctx, m1)
    assert first["kernels_measured"] == 3 and first["kernels_from_cache"] == 0 and first["kernels_fallback"] == 0
    assert all(k["profile"] == "measured" and k["from_cache"] is False for k in costs1)
    assert (profile_cache / "profiles.sqlite3").exists()

    ctx2, m2 = annotate(PROGRAM)
    second = summary(ctx2, m2)
    costs2 = kernel_costs(ctx2, m2)
    assert second["kernels_measured"] == 0 and second["kernels_from_cache"] == 3
    assert [k["time_ns"] for k in costs2] == [k["time_ns"] for k in costs1]
    assert all(k["from_cache"] for k in costs2)
    # in-program time = standalone - one invocation (never below the floor); the total
    # gets that invocation once
    for k in costs1:
        assert k["time_ns"] >= 0 and k["time_ns"] >= k["standalone_ns"] - k["invocation_ns"] - 1.0  # details are rounded to 0.1 ns
    assert first["program_overhead_ns"] == pytest.approx(costs1[0]["invocation_ns"])
    assert first["total_time_ns"] == pytest.approx(sum(k["time_ns"] for k in costs1) + first["program_overhead_ns"])

    # cache=refresh measures again; a fused formation makes other kernels (new signatures)
    ctx3, m3 = annotate(PROGRAM, cache="refresh")
    assert summary(ctx3, m3)["kernels_measured"] == 3
    ctx4, m4 = annotate(PROGRAM, fusion="xla-tpu")
    s4 = summary(ctx4, m4)
    assert s4["kernel_count"] == 1 and s4["kernels_measured"] == 1


FALLBACKS = """\
func.func @main(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> (tensor<16x16xf32>, tensor<16x4xf32>) {
  %0 = "stablehlo.triangular_solve"(%a, %b) {left_side = true, lower = true, transpose_a = #stablehlo<transpose NO_TRANSPOSE>, unit_diagonal = false} : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %1:2 = stablehlo.custom_call @TopK(%a) : (tensor<16x16xf32>) -> (tensor<16x4xf32>, tensor<16x4xi32>)
  return %0, %1#0 : tensor<16x16xf32>, tensor<16x4xf32>
}
"""


def test_kernels_that_cannot_run_alone_fall_back_to_calibrated(profile_cache):
    ctx, module = annotate(FALLBACKS)
    costs = {k["op"]: k for k in kernel_costs(ctx, module)}
    tri = costs["stablehlo.triangular_solve"]
    topk = costs["stablehlo.custom_call"]
    for k in (tri, topk):
        assert k["profile"] == "fallback" and k["fallback_backend"] == "calibrated" and k["time_ns"] > 0
    assert "IREE rejects it" in tri["fallback_reason"] and "triangular_solve" in tri["fallback_reason"]
    assert "custom call" in topk["fallback_reason"]
    s = summary(ctx, module)
    assert s["kernels_fallback"] == 2 and s["kernels_measured"] == 0
    # the rejection is cached: the second run compiles nothing either
    from costmodel.profiling.cache import MeasurementCache

    assert MeasurementCache.default().count() == 1
    ctx2, m2 = annotate(FALLBACKS)
    s2 = summary(ctx2, m2)
    assert s2["kernels_fallback"] == 2 and s2["kernels_from_cache"] == 1


def test_loops_pay_a_host_round_trip_per_iteration(profile_cache):
    loop = """\
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.constant dense<5> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %h = %x) : tensor<i32>, tensor<16x16xf32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %t = stablehlo.tanh %h : tensor<16x16xf32>
      %j = stablehlo.add %i, %c1 : tensor<i32>
      stablehlo.return %j, %t : tensor<i32>, tensor<16x16xf32>
    }
  return %r#1 : tensor<16x16xf32>
}
"""
    ctx, module = annotate(loop)
    s = summary(ctx, module)
    body = sum(k["time_ns"] for k in kernel_costs(ctx, module))
    inv = s["program_overhead_ns"]
    trips = 5
    # (cond + body) x trips + one round trip per iteration + the program's invocation
    assert s["total_time_ns"] == pytest.approx(trips * body + trips * inv + inv)


def test_whole_program_ground_truth_is_measured_and_cached(profile_cache):
    from costmodel.profiling.profiler import KernelProfiler

    prof = KernelProfiler(repeats=2, min_time_ms=1, warmup_ms=0, progress=False)
    row = prof.measure_program(PROGRAM)
    assert row.status == "measured" and row.time_ns > 0 and row.samples == 2
    again = KernelProfiler(repeats=2, min_time_ms=1, warmup_ms=0, progress=False).measure_program(PROGRAM)
    assert again.time_ns == row.time_ns  # from the cache
