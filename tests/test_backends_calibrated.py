"""The calibrated backend: efficiency curves bounded by the peak and monotone in size,
every kernel at least as slow as its roofline, and clear errors without calibration."""

from __future__ import annotations

import pytest

from conftest import SCATTER_ADD, run_annotate
from costmodel.backends import BackendError, make_backend
from costmodel.hardware import load_hardware
from costmodel.ir import ir


@pytest.fixture(scope="module")
def a100():
    return make_backend("calibrated", load_hardware("a100-40gb"), {})


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (100, 100, 100), (4096, 4096, 4096), (1000, 64, 802816), (576, 64, 200704)])
def test_tile_efficiency_is_a_fraction(a100, m, n, k):
    eff, split = a100.gemm_plan(m, n, k)
    assert 0 < eff <= 1.0 and split >= 1


def test_large_square_gemm_has_no_quantization_loss(a100):
    # 108 SMs, 128x256 tiles: 8192x8192 -> 64 x 32 = 2048 tiles = 18.96 waves; the best
    # tile shape keeps the loss small
    assert a100.tile_efficiency(8192, 8192) > 0.95


def test_efficiency_grows_with_size(a100):
    sizes = [64, 128, 256, 512, 1024, 2048, 4096, 8192]
    effs = [a100.tile_efficiency(s, s, k=s) for s in sizes]
    # not strictly monotone (waves quantize), but a big GEMM fills the GPU better than a tiny one
    assert effs[0] < effs[-1]
    assert min(effs[3:]) > effs[0]


def test_split_k_fills_the_gpu_for_weight_gradients(a100):
    # a 3x3x64x64 weight gradient: M x N = 576 x 64, K = batch x pixels = 256 x 56 x 56
    eff_split, split = a100.gemm_plan(576, 64, 256 * 56 * 56)
    eff_plain, _ = a100.gemm_plan(576, 64, 1)  # no K to split
    assert split > 1 and eff_split > 3 * eff_plain


def test_split_k_takes_the_splits_that_fit_in_one_wave():
    """A 3x3x128x128 weight gradient on an H100 (132 SMs): M x N = 1152 x 128 is 9 tiles
    of 128 x 128; 14 splits of K make 126 work units, one wave (15 would make 135, a
    second wave for 3 of them: half the rate)."""
    h100 = make_backend("calibrated", load_hardware("h100-sxm"), {})
    m, n, k = 3 * 3 * 128, 128, 256 * 28 * 28
    tiles = (m // 128) * (n // 128)
    eff, split, narrow, _chan = h100.plan(m, n, k, conv=True)
    assert split == 132 // tiles == 14
    assert eff == pytest.approx(tiles * split / 132)  # whole tiles: the idle SMs are the loss
    assert narrow == 1.0  # a 128-wide tile

    # a short K is not split: the f32 partial sums would cost more than the idle SMs
    # (2048 x 576 x 1152, a LLaMA-3-100m-sized projection: 2.7 GFLOP, 4 us, against 9 MB of
    # partial sums per split)
    assert h100.plan(2048, 576, 1152)[1] == 1


def test_narrow_tiles_run_at_their_measured_rate():
    """At 64 channels cuDNN runs 64-wide tiles (256x64x32 in our H100 and H200 profiles),
    at gemm_narrow_tile_efficiency of the wide tiles' rate: the 64-channel 3x3 ResNet
    convolution, with the FLOPs of the 128-channel one, is that much slower."""
    spec = load_hardware("h100-sxm")
    h100 = make_backend("calibrated", spec, {})
    narrow = spec.calibration["gemm_narrow_tile_efficiency"]
    assert 0 < narrow < 1
    # implicit GEMM: M = images x output pixels, N = output features, K = taps x channels
    eff64, _s, rate64, chan64 = h100.plan(256 * 56 * 56, 64, 9 * 64, channels_per_tap=64, conv=True)
    eff128, _s, rate128, chan128 = h100.plan(256 * 28 * 28, 128, 9 * 128, channels_per_tap=128, conv=True)
    assert rate64 == narrow and rate128 == 1.0
    assert chan64 == chan128 == 1.0  # whole K tiles (32 or 64 deep) at 64 and 128 channels
    assert eff64 * rate64 / (eff128 * rate128) == pytest.approx(narrow, rel=0.01)
    # the wide tile is still taken where it wins: N = 128 on a 128 x 128 tile
    assert h100.plan(256 * 28 * 28, 128, 9 * 128, conv=True)[2] == 1.0
    # measured on cuDNN's convolutions: a dot (cuBLAS, Triton) with N = 64 is timed as before
    assert h100.plan(256 * 56 * 56, 64, 9 * 64)[2] == 1.0


def test_specs_without_a_narrow_tile_rate_time_all_tiles_alike():
    """No measurement of narrow tiles on the A100 (nor B200, MI300X): every tile runs at
    the calibrated rate, and the channels of a tap pad to gemm_tile_k."""
    a100 = make_backend("calibrated", load_hardware("a100-40gb"), {})
    assert "gemm_narrow_tile_efficiency" not in a100.hardware.calibration
    _eff, _s, rate, chan = a100.plan(256 * 56 * 56, 64, 9 * 64, channels_per_tap=3, conv=True)
    assert rate == 1.0
    assert chan == 3 / a100.hardware.calibration["gemm_tile_k"]


GEMM = """
func.func @main(%a: tensor<{m}x{k}xbf16>, %b: tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xbf16> {{
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{m}x{k}xbf16>, tensor<{k}x{n}xbf16>) -> tensor<{m}x{n}xbf16>
  %1 = stablehlo.exponential %0 : tensor<{m}x{n}xbf16>
  return %1 : tensor<{m}x{n}xbf16>
}}
"""


@pytest.mark.parametrize("hw", ["a100-40gb", "h100-sxm", "h200", "b200", "mi300x"])
@pytest.mark.parametrize("m,n,k", [(128, 128, 128), (1024, 4096, 1024), (8192, 8192, 8192)])
def test_calibrated_is_never_faster_than_the_roofline(hw, m, n, k):
    text = GEMM.format(m=m, n=n, k=k)
    cal = run_annotate(text, hardware=hw, fusion="xla-gpu", backend="calibrated")
    roof = run_annotate(text, hardware=hw, fusion="xla-gpu", backend="roofline")
    assert cal.totals.time_ns >= roof.totals.time_ns > 0
    # the big GEMM is compute bound and reaches at most the measured efficiency of the peak
    if m == 8192:
        spec = load_hardware(hw)
        flops = 2 * m * n * k  # one FMA = 2 flops
        achieved_TFLOPS = flops / cal.totals.time_ns / 1e3
        assert achieved_TFLOPS <= spec.peak_TFLOPS("matrix", "bf16") * spec.calibration["matrix_efficiency"]
        assert achieved_TFLOPS > 0.8 * spec.peak_TFLOPS("matrix", "bf16") * spec.calibration["matrix_efficiency"]


def test_memory_bound_kernel_runs_at_measured_bandwidth_plus_launch():
    n = 64 * 1024 * 1024
    text = f"""
func.func @main(%x: tensor<{n}xf32>) -> tensor<{n}xf32> {{
  %0 = stablehlo.add %x, %x : tensor<{n}xf32>
  return %0 : tensor<{n}xf32>
}}
"""
    a = run_annotate(text, hardware="a100-40gb", fusion="xla-gpu", backend="calibrated")
    spec = load_hardware("a100-40gb")
    cal = spec.calibration
    nbytes = 2 * n * 4  # read x, write the sum
    memory_ns = nbytes / (spec.memory_bandwidth_GBps * cal["memory_efficiency"])
    flops_ns = n / (spec.peak_TFLOPS("vector", "f32") * 1e3)
    expected = memory_ns + flops_ns - cal["compute_memory_overlap"] * flops_ns + cal["kernel_launch_ns"]
    assert a.totals.time_ns == pytest.approx(expected)


@pytest.mark.parametrize("unique", [False, True])
def test_scatter_pays_an_atomic_update_per_element_where_measured(unique):
    """XLA GPU's scatter emitter updates each element with an atomic read-modify-write
    unless the indices are known unique: scatter_element_ns per element (an embedding
    gradient's, measured on the H100) on top of the kernel's bytes and launch. Specs
    without the measurement (the A100's) have no such term."""
    text = SCATTER_ADD.replace("UNIQUE", "true" if unique else "false")
    spec = load_hardware("h100-sxm")
    cal = spec.calibration
    a = run_annotate(text, hardware="h100-sxm", fusion="xla-gpu", backend="calibrated")
    elements = 1024 * 64  # the updates, one atomic add each
    upd_bytes = elements * 2
    nbytes = 2 * upd_bytes + 1024 * 4 + upd_bytes  # the scatter rule's bytes: updates read twice, indices, updates written
    atomic_ns = 0.0 if unique else elements * cal["scatter_element_ns"]
    memory_ns = nbytes / (spec.memory_bandwidth_GBps * cal["memory_efficiency"]) + atomic_ns
    flops_ns = elements / (spec.peak_TFLOPS("vector", "bf16") * 1e3)
    expected = memory_ns + flops_ns - cal["compute_memory_overlap"] * min(flops_ns, memory_ns) + cal["kernel_launch_ns"]
    assert a.totals.time_ns == pytest.approx(expected)
    # the same op costed on its own (fusion=none) pays the same
    per_op = run_annotate(text, hardware="h100-sxm", fusion="none", backend="calibrated")
    assert per_op.totals.time_ns == pytest.approx(expected)
    root = next(op for op in a.ops() if op.name == "stablehlo.scatter")
    cost = ir.DictAttr(root.attributes["costmodel.kernel_cost"])
    assert ("scatter_elements" in cost) is (not unique)  # shown in the IR
    assert "scatter_element_ns" not in load_hardware("a100-40gb").calibration
    a100 = run_annotate(text, hardware="a100-40gb", fusion="xla-gpu", backend="calibrated")
    a100_spec = load_hardware("a100-40gb")
    a100_memory = nbytes / (a100_spec.memory_bandwidth_GBps * a100_spec.calibration["memory_efficiency"])
    assert a100.totals.time_ns < a100_memory + a100_spec.calibration["kernel_launch_ns"] + 1e3  # bytes and launch only


def test_hardware_without_calibration_is_a_clear_error():
    with pytest.raises(BackendError, match="needs the hardware spec's 'calibration' block; 'tpu-v5p' lacks"):
        make_backend("calibrated", load_hardware("tpu-v5p"), {})


def test_calibrated_per_op_mode_costs_bookkeeping_at_zero():
    text = "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n return %x : tensor<4xf32>\n}\n"
    a = run_annotate(text, hardware="h100-sxm", fusion="none", backend="calibrated")
    assert a.totals.time_ns == 0.0
    ret = a.ops("func.return")[0]
    assert ir.FloatAttr(ir.DictAttr(ret.attributes["costmodel.cost"])["time_ns"]).value == 0.0


@pytest.mark.parametrize("channels", [1, 3, 8, 63, 64, 65, 96, 128, 2048])
def test_channel_efficiency_pads_each_tap_to_whole_k_tiles(channels):
    import math

    h100 = make_backend("calibrated", load_hardware("h100-sxm"), {})
    tile_k = load_hardware("h100-sxm").calibration["gemm_tile_k"]
    # CUTLASS implicit GEMM: taps x ceil(C / tile_k) K steps of tile_k channels each
    assert h100.channel_efficiency(channels) == channels / (math.ceil(channels / tile_k) * tile_k)
    assert h100.channel_efficiency(None) == 1.0  # dots, grouped convolutions
    # a spec without gemm_tile_k (no cited source for its library): no padding
    assert "gemm_tile_k" not in load_hardware("mi300x").calibration
    assert make_backend("calibrated", load_hardware("mi300x"), {}).channel_efficiency(channels) == 1.0


CONV = """
func.func @main(%x: tensor<8x224x224x{c}xbf16>, %w: tensor<7x7x{c}x64xbf16>) -> tensor<8x112x112x64xbf16> {{
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {{stride = [2, 2], pad = [[3, 3], [3, 3]]}} {{batch_group_count = 1 : i64, feature_group_count = {g} : i64}} : (tensor<8x224x224x{c}xbf16>, tensor<7x7x{c}x64xbf16>) -> tensor<8x112x112x64xbf16>
  return %0 : tensor<8x112x112x64xbf16>
}}
"""


def _conv_kernel(text: str, hw: str = "h100-sxm"):
    a = run_annotate(text, hardware=hw, fusion="xla-gpu", backend="calibrated")
    conv = a.ops("stablehlo.convolution")[0]
    return a, ir.DictAttr(conv.attributes["costmodel.kernel_cost"])


def test_image_stem_convolution_pays_for_channel_padding():
    """An image stem (C = 3, 64 output features) runs on a narrow tile (64 wide, 32 deep
    in K: cuDNN's 256x64_32 kernel in our H100 and H200 profiles) and fills 3 of the 32
    channels of each K tile; its time is the matrix work at 3/32 of the narrow tile's rate
    (our H100 measurement of the ResNet stem through XLA: 1.786 ms, and 1.545 ms
    predicted, benchmarks/gpu_eval.py). cuDNN first copies the input padded to 8 channels
    (conv_channel_multiple) into a zeroed buffer: a memset and a padding kernel, the input
    read once and 8/3 of it written twice."""
    a, kc = _conv_kernel(CONV.format(c=3, g=1))
    spec = load_hardware("h100-sxm")
    cal = spec.calibration
    assert cal["gemm_narrow_tile_k"] == 32
    assert ir.FloatAttr(kc["channel_efficiency"]).value == pytest.approx(3 / 32)
    assert ir.FloatAttr(kc["narrow_tile_efficiency"]).value == pytest.approx(cal["gemm_narrow_tile_efficiency"])
    assert ir.IntegerAttr(kc["padded_channels"]).value == 8
    flops = ir.IntegerAttr(kc["flops"]).value
    tile_eff = ir.FloatAttr(kc["tile_efficiency"]).value
    narrow = cal["gemm_narrow_tile_efficiency"]
    rate_per_ns = spec.peak_TFLOPS("matrix", "bf16") * 1e3 * cal["matrix_efficiency"] * tile_eff * narrow * (3 / 32)
    compute_ns = flops / rate_per_ns
    x_bytes = 8 * 224 * 224 * 3 * 2  # bf16 input
    nbytes = ir.IntegerAttr(kc["bytes_read"]).value + ir.IntegerAttr(kc["bytes_written"]).value
    bandwidth = spec.memory_bandwidth_GBps * cal["memory_efficiency"]  # bytes per ns
    memory_ns = nbytes / bandwidth
    # before it, in sequence: the padded buffer zeroed, then x read and written into it
    padding_ns = (x_bytes * 8 // 3 + x_bytes + x_bytes * 8 // 3) / bandwidth + 2 * cal["kernel_launch_ns"]
    assert ir.FloatAttr(kc["padding_ns"]).value == pytest.approx(padding_ns)
    idle_ns = cal["library_call_idle_ns"]  # the GPU idle around the cuDNN call
    expected = compute_ns + memory_ns - cal["compute_memory_overlap"] * min(compute_ns, memory_ns) + cal["kernel_launch_ns"] + padding_ns + idle_ns
    assert a.totals.time_ns == pytest.approx(expected)
    assert ir.StringAttr(kc["bound"]).value == "compute"
    assert ir.IntegerAttr(kc["launches"]).value == 1  # the kernel XLA launches: its count is unchanged


# The stem's filter gradient as JAX writes it: the activations' channels are the
# convolution's batch dimension, the output gradient is the 'filter' (112 > 7: XLA's
# MatchBackwardFilter makes it a cuDNN backward-filter convolution).
WGRAD = """
func.func @main(%x: tensor<8x224x224x{c}xbf16>, %dy: tensor<8x112x112x64xbf16>) -> tensor<7x7x{c}x64xbf16> {{
  %0 = stablehlo.convolution(%x, %dy) dim_numbers = [f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f], window = {{stride = [1, 1], pad = [[3, 2], [3, 2]], lhs_dilate = [1, 1], rhs_dilate = [2, 2]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : (tensor<8x224x224x{c}xbf16>, tensor<8x112x112x64xbf16>) -> tensor<7x7x{c}x64xbf16>
  return %0 : tensor<7x7x{c}x64xbf16>
}}
"""


def test_filter_gradient_of_few_channels_computes_the_padded_filter():
    """cuDNN computes the filter gradient of the 8-channel padded input: M = C x taps
    becomes 8 x 49 and the matrix work grows by 8/3; the padding kernel reads the input
    and writes it padded (our H200 profile: nhwcAddPaddingKernel before the GEMM)."""
    import math

    backend = make_backend("calibrated", load_hardware("h100-sxm"), {})
    spec = backend.hardware
    cal = spec.calibration
    _, kc = _conv_kernel(WGRAD.format(c=3))
    assert ir.IntegerAttr(kc["padded_channels"]).value == 8
    assert "channel_efficiency" not in kc  # K runs over images x pixels, not channels
    flops = ir.IntegerAttr(kc["flops"]).value
    # 2 x M x N x K (one FMA = 2 flops), less the taps that land in the padding
    assert 0.95 * 2 * (7 * 7 * 3) * 64 * (8 * 112 * 112) < flops <= 2 * (7 * 7 * 3) * 64 * (8 * 112 * 112)
    m, n, k = 7 * 7 * 8, 64, 8 * 112 * 112  # M of the padded channels
    tile_eff, split, narrow, chan = backend.plan(m, n, k, conv=True)
    assert chan == 1.0
    assert ir.FloatAttr(kc["tile_efficiency"]).value == pytest.approx(round(tile_eff, 6))
    assert ir.IntegerAttr(kc["split_k"]).value == split
    if narrow < 1.0:  # N = 64 output features: a 64-wide tile
        assert ir.FloatAttr(kc["narrow_tile_efficiency"]).value == pytest.approx(narrow)
    compute_ns = flops * 8 / 3 / (spec.peak_TFLOPS("matrix", "bf16") * 1e3 * cal["matrix_efficiency"] * tile_eff * narrow)
    x_bytes = 8 * 224 * 224 * 3 * 2
    bandwidth = spec.memory_bandwidth_GBps * cal["memory_efficiency"]
    nbytes = ir.IntegerAttr(kc["bytes_read"]).value + ir.IntegerAttr(kc["bytes_written"]).value
    if split > 1:
        nbytes += 2 * 4 * m * n * split  # f32 partial sums written and read back
    memory_ns = nbytes / bandwidth
    padding_ns = (x_bytes * 8 // 3 + x_bytes + x_bytes * 8 // 3) / bandwidth + 2 * cal["kernel_launch_ns"]  # memset, pad
    idle_ns = cal["library_call_idle_ns"]  # the GPU idle around the cuDNN call
    expected = compute_ns + memory_ns - cal["compute_memory_overlap"] * min(compute_ns, memory_ns) + cal["kernel_launch_ns"] + padding_ns + idle_ns
    assert ir.FloatAttr(kc["time_ns"]).value == pytest.approx(expected)
    assert math.isfinite(expected)


@pytest.mark.parametrize(
    "text, padded",
    [
        (CONV.format(c=8, g=1), False),  # a multiple of 8
        (CONV.format(c=64, g=1), False),
        (WGRAD.format(c=16), False),
        (CONV.format(c=3, g=1).replace("bf16", "f32"), False),  # TF32: no 16-bit rule
        (WGRAD.format(c=3).replace("bf16", "f32"), False),
        (CONV.format(c=12, g=1), True),  # 12 -> 16
        (WGRAD.format(c=5), True),
    ],
)
def test_channel_padding_only_for_16_bit_convolutions_off_the_multiple(text, padded):
    _, kc = _conv_kernel(text)
    assert ("padded_channels" in kc) == padded


def test_specs_without_a_channel_multiple_do_not_pad():
    """MI300X (MIOpen: no cited source for its padding) and the TPUs have no
    conv_channel_multiple: the stem is costed as before."""
    assert "conv_channel_multiple" not in load_hardware("mi300x").calibration
    _, kc = _conv_kernel(CONV.format(c=3, g=1), hw="mi300x")
    assert "padded_channels" not in kc
    _, kc = _conv_kernel(WGRAD.format(c=3), hw="mi300x")
    assert "padded_channels" not in kc


def test_whole_k_tiles_and_grouped_convolutions_have_no_channel_padding():
    _, kc = _conv_kernel(CONV.format(c=64, g=1))
    assert "channel_efficiency" not in kc  # 64 channels: one whole tile per tap
    # a grouped convolution (4 groups of 1 channel) is not costed as a padded implicit GEMM
    grouped = CONV.format(c=4, g=4).replace("7x7x4x64", "7x7x1x64")
    _, kc = _conv_kernel(grouped)
    assert "channel_efficiency" not in kc


def test_conv_kind_follows_xla_gpu_conv_rewriter():
    """Forward, filter gradient and input gradient of the stem as JAX writes them."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    from costmodel.kernels.formation import _conv_kind
    from costmodel.shapes import type_info

    dgrad = """
func.func @main(%dy: tensor<8x112x112x64xbf16>, %w: tensor<7x7x3x64xbf16>) -> tensor<8x224x224x3xbf16> {
  %r = stablehlo.reverse %w, dims = [0, 1] : tensor<7x7x3x64xbf16>
  %0 = stablehlo.convolution(%dy, %r) dim_numbers = [b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[3, 4], [3, 4]], lhs_dilate = [2, 2], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x112x112x64xbf16>, tensor<7x7x3x64xbf16>) -> tensor<8x224x224x3xbf16>
  return %0 : tensor<8x224x224x3xbf16>
}
"""
    # a stride-1 input gradient: no input dilation, the reversed filter with its features swapped
    dgrad_s1 = """
func.func @main(%dy: tensor<8x56x56x128xbf16>, %w: tensor<3x3x64x128xbf16>) -> tensor<8x56x56x64xbf16> {
  %r = stablehlo.reverse %w, dims = [0, 1] : tensor<3x3x64x128xbf16>
  %0 = stablehlo.convolution(%dy, %r) dim_numbers = [b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x56x56x128xbf16>, tensor<3x3x64x128xbf16>) -> tensor<8x56x56x64xbf16>
  return %0 : tensor<8x56x56x64xbf16>
}
"""
    # MatchBackwardInput's other case: an input dilation with a 1x1 filter, not reversed
    dgrad_1x1 = """
func.func @main(%dy: tensor<8x28x28x128xbf16>, %w: tensor<1x1x64x128xbf16>) -> tensor<8x56x56x64xbf16> {
  %0 = stablehlo.convolution(%dy, %w) dim_numbers = [b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[0, 1], [0, 1]], lhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x28x28x128xbf16>, tensor<1x1x64x128xbf16>) -> tensor<8x56x56x64xbf16>
  return %0 : tensor<8x56x56x64xbf16>
}
"""
    # an input dilation with a 3x3 filter that is not reversed: not matched, a forward convolution
    dilated_3x3 = dgrad.replace("%r = stablehlo.reverse %w, dims = [0, 1] : tensor<7x7x3x64xbf16>\n", "").replace("(%dy, %r)", "(%dy, %w)")
    assert "reverse" not in dilated_3x3
    kinds = []
    for text in (CONV.format(c=3, g=1), WGRAD.format(c=3), dgrad, dgrad_s1, dgrad_1x1, dilated_3x3):
        a = run_annotate(text, hardware="h100-sxm", fusion="xla-gpu", backend="calibrated")
        op = a.ops("stablehlo.convolution")[0]
        dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
        lhs, rhs, out = (type_info(t) for t in (op.operands[0].type, op.operands[1].type, op.results[0].type))
        kinds.append(_conv_kind(op, dn, lhs, rhs, out))
        # the kernel says so in the IR, and the kernel listing reads it back
        kc = ir.DictAttr(op.attributes["costmodel.kernel_cost"])
        assert ir.StringAttr(kc["conv"]).value == kinds[-1]
        from costmodel.kernels.report import collect_kernels

        (row,) = [r for r in collect_kernels(a.module) if r.kind == "conv"]
        assert row.conv == kinds[-1] and row.to_dict()["conv"] == kinds[-1]
    assert kinds == ["forward", "backward_filter", "backward_input", "backward_input", "backward_input", "forward"]


def test_a_cudnn_call_adds_the_measured_idle_once():
    """A convolution is a cuDNN call launched between XLA's command buffers: its kernel
    adds library_call_idle_ns (the H100's, measured), once, and says so in its detail; a
    GEMM or an elementwise kernel does not, nor does hardware without the measurement."""
    a, kc = _conv_kernel(CONV.format(c=64, g=1))
    idle = load_hardware("h100-sxm").calibration["library_call_idle_ns"]
    assert ir.FloatAttr(kc["library_idle_ns"]).value == idle
    dot = run_annotate(
        "func.func @main(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> tensor<512x512xbf16> {\n"
        "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>\n"
        "  return %0 : tensor<512x512xbf16>\n}", hardware="h100-sxm", fusion="xla-gpu", backend="calibrated")
    assert "library_idle_ns" not in ir.DictAttr(dot.ops("stablehlo.dot_general")[0].attributes["costmodel.kernel_cost"])
    _, kc = _conv_kernel(CONV.format(c=64, g=1), hw="a100-40gb")
    assert "library_call_idle_ns" not in load_hardware("a100-40gb").calibration and "library_idle_ns" not in kc


def test_a_stem_on_hardware_without_channel_padding_is_marked_unpadded():
    """mi300x has neither gemm_tile_k nor conv_channel_multiple: a 3-channel stem runs
    unpadded (no measured K tile to pad to) and its detail says so, for `costmodel predict`
    to note; with both (h100-sxm) or with channels a multiple of 8 nothing is marked."""
    cal = load_hardware("mi300x").calibration
    assert "gemm_tile_k" not in cal and "conv_channel_multiple" not in cal
    _, kc = _conv_kernel(CONV.format(c=3, g=1), hw="mi300x")
    assert ir.IntegerAttr(kc["unpadded_channels"]).value == 3
    assert "channel_efficiency" not in kc and "padded_channels" not in kc
    _, kc = _conv_kernel(CONV.format(c=8, g=1), hw="mi300x")
    assert "unpadded_channels" not in kc
    _, kc = _conv_kernel(CONV.format(c=3, g=1), hw="h100-sxm")
    assert "unpadded_channels" not in kc and "padded_channels" in kc
