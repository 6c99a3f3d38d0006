import pytest

from costmodel.backends import BackendError
from costmodel.backends.roofline import RooflineBackend
from costmodel.hardware import load_hardware
from costmodel.rules import OpCost


def test_matmul_bf16_compute_bound():
    hw = load_hardware("h100-sxm")
    m = n = k = 8192
    cost = OpCost(flops=2 * m * n * k, bytes_read=2 * (m * k + k * n), bytes_written=4 * m * n,
                  unit="matrix", dtype="bf16")
    t, bound = RooflineBackend(hw).estimate(cost)
    # TFLOP/s x 1e3 = flop/ns ; GB/s = bytes/ns
    assert t == pytest.approx(2 * m * n * k / (989 * 1e3))
    assert bound == "compute"


def test_f32_dot_at_tf32_rate_and_elementwise_at_vector_rate():
    hw = load_hardware("a100-40gb")
    dot = OpCost(flops=2 * 4096**3, bytes_read=2 * 4 * 4096**2, bytes_written=4 * 4096**2, unit="matrix", dtype="f32")
    t, _ = RooflineBackend(hw).estimate(dot)
    assert t == pytest.approx(2 * 4096**3 / (156 * 1e3))
    add = OpCost(flops=1 << 20, bytes_read=8 << 20, bytes_written=4 << 20, unit="vector", dtype="f32")
    t, bound = RooflineBackend(hw).estimate(add)
    assert t == pytest.approx((12 << 20) / 1555)
    assert bound == "memory"


def test_transcendentals_on_vector_unit():
    hw = load_hardware("tpu-v4")
    c = OpCost(flops=0, transcendentals=10**9, bytes_read=4, bytes_written=4, unit="vector", dtype="f32")
    t, bound = RooflineBackend(hw).estimate(c)
    assert t == pytest.approx(10**9 / (hw.vector_peak_TFLOPS["f32"] * 1e3))
    assert bound == "compute"


def test_overhead_and_options():
    hw = load_hardware("h100-sxm")
    t, bound = RooflineBackend(hw, overhead_ns="1000").estimate(OpCost(bytes_read=4, bytes_written=4))
    assert (t, bound) == (1000.0, "overhead")
    assert RooflineBackend(hw).estimate(OpCost()) == (0.0, "overhead")
    with pytest.raises(BackendError, match="no option 'peak'"):
        RooflineBackend(hw, peak="1")
    with pytest.raises(BackendError, match="overhead_ns must be >= 0"):
        RooflineBackend(hw, overhead_ns="-1")
