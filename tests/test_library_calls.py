"""cuBLAS GEMMs and cuDNN convolutions as XLA GPU's optimized HLO has them (custom calls
with a GpuBackendConfig, converted to StableHLO/MHLO), and the kernels of XLA-compiled
modules: their counts (rules.cublas_gemm_rule, cudnn_conv_rule), one kernel each of kind
gemm / conv with the calibrated backend's GEMM model, the kind of a given kCustom
fusion from its contents, and their workspace in `costmodel memory`.

tests/data/xla_compiled: the audit's repro files (cc_gpu: a cuBLAS GEMM and two calls
whose backend_config cannot be read; gemm512_given / _bare: one 512^3 bf16 GEMM as a
given kCustom fusion and as a bare dot; mlp: XLA CPU's compiled MLP step, whose kCustom
fusions hold a dot or only a reduction). XLA's real H100 modules are checked in
tests/test_kernels_xla_hlo.py."""

from __future__ import annotations

import math
import os

import pytest

from conftest import run_annotate
from costmodel.ir import ir
from costmodel.kernels.report import collect_kernels

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "xla_compiled")
BF16 = 2


def _read(name: str) -> str:
    with open(os.path.join(DATA, name)) as fh:
        return fh.read()


def _ty(shape, dtype="bf16") -> str:
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{dtype}>"


def _json(text: str) -> str:
    """A backend_config JSON as an MLIR string literal."""
    return text.replace('"', '\\"')


def _gemm_config(lhs_c, rhs_c, lhs_b=(), rhs_b=(), alpha=1, beta=0, epilogue="DEFAULT") -> str:
    dims = lambda xs: "[" + ",".join(f'"{x}"' for x in xs) + "]"  # proto3 JSON: int64 as strings
    return _json(
        '{"operation_queue_id":"0","gemm_backend_config":{"alpha_real":%s,"alpha_imag":0,"beta":%s,'
        '"dot_dimension_numbers":{"lhs_contracting_dimensions":%s,"rhs_contracting_dimensions":%s,'
        '"lhs_batch_dimensions":%s,"rhs_batch_dimensions":%s},"epilogue":"%s","grad_x":false}}'
        % (alpha, beta, dims(lhs_c), dims(rhs_c), dims(lhs_b), dims(rhs_b), epilogue)
    )


def _conv_config(activation="kNone", scale=1, side=0) -> str:
    return _json(
        '{"cudnn_conv_backend_config":{"activation_mode":"%s","algorithm":{"algo_id":"62"},'
        '"conv_result_scale":%s,"leakyrelu_alpha":0,"side_input_scale":%s},"operation_queue_id":"0"}'
        % (activation, scale, side)
    )


def _call_module(target: str, operands: list, result, config: str, workspace: int = 1024, dtype="bf16") -> str:
    """@main calling one library custom call on its arguments, returning its first result."""
    args = ", ".join(f"%a{i}: {_ty(s, dtype)}" for i, s in enumerate(operands))
    names = ", ".join(f"%a{i}" for i in range(len(operands)))
    in_types = ", ".join(_ty(s, dtype) for s in operands)
    res = _ty(result, dtype)
    tup = f"tuple<{res}, tensor<{workspace}xui8>>"
    return f"""func.func @main({args}) -> {res} {{
  %0 = stablehlo.custom_call @{target}({names}) {{backend_config = "{config}"}} : ({in_types}) -> {tup}
  %1 = stablehlo.get_tuple_element %0[0] : ({tup}) -> {res}
  return %1 : {res}
}}"""


def _the_call(a):
    (op,) = a.ops("stablehlo.custom_call") or a.ops("mhlo.custom_call")
    return op


def _only_kernel(a):
    (row,) = collect_kernels(a.module)
    return row


# ---------------------------------------------------------------------------
# F3: cuBLAS GEMMs
# ---------------------------------------------------------------------------


def test_cublas_gemm_of_the_audit_is_one_gemm_kernel():
    """hand/cc_gpu.mlir: `__cublas$gemm` of two 4096^2 bf16 matrices was 0 launches and
    0 ms; now one gemm launch, 2 M N K flops, its operands read and its result written
    without the 32 MiB u8 workspace."""
    m = n = k = 4096
    a = run_annotate(_read("cc_gpu.mlir"), fusion="xla-gpu", backend="calibrated")
    gemm, conv, lt = a.ops("stablehlo.custom_call")
    assert a.cost(gemm) == {"flops": 2 * m * n * k, "transcendentals": 0,  # one FMA = 2 flops
                            "bytes_read": 2 * m * k * BF16, "bytes_written": m * n * BF16}
    rows = collect_kernels(a.module)
    assert [(r.kind, r.launches, r.target) for r in rows] == [("gemm", 1, "__cublas$gemm")]
    assert rows[0].bytes_written == m * n * BF16  # not the 33,554,432-byte workspace
    assert "tile_efficiency" in rows[0].detail and rows[0].time_ns > 0
    summary = ir.DictAttr(a.module.attributes["costmodel.summary"])
    assert ir.IntegerAttr(summary["kernel_count"]).value == 1
    # the two calls whose backend_config cannot be read stay unsupported, with the reason
    why = {ir.StringAttr(op.attributes["call_target_name"]).value: ir.StringAttr(op.attributes["costmodel.unsupported"]).value
           for op in (conv, lt)}
    assert "is not valid JSON" in why["__cudnn$convForward"] and "cudnn_conv_backend_config" in why["__cudnn$convForward"]
    assert "has no gemm_backend_config" in why["__cublas$lt$matmul"]
    assert a.engine.unsupported_ops == {"stablehlo.custom_call": 2}


@pytest.mark.parametrize(
    "alpha,beta,epilogue,extra_flops,extra_trans",
    [
        (1, 0, "DEFAULT", 0, 0),
        (0.5, 0, "DEFAULT", 1, 0),  # alpha: a multiply per output element
        (1, 1, "DEFAULT", 1, 0),  # beta = 1: C added
        (1, 2, "DEFAULT", 2, 0),  # beta = 2: C scaled and added
        (1, 0, "BIAS", 1, 0),
        (1, 0, "RELU", 1, 0),
        (1, 0, "BIAS_RELU", 2, 0),
        (1, 0, "GELU", 8, 1),  # tanh approximation: 8 multiplies/adds and a tanh
        (1, 0, "BIAS_GELU_AUX", 9, 1),
        (1, 0, 3, 2, 0),  # the enum's number (BIAS_RELU)
    ],
)
def test_cublaslt_epilogues_count_their_elementwise_flops(alpha, beta, epilogue, extra_flops, extra_trans):
    m, k, n = 256, 512, 1024
    ops = [(m, k), (k, n)] + ([(m, n)] if beta else [])
    cfg = _gemm_config([1], [0], alpha=alpha, beta=beta, epilogue=epilogue)
    a = run_annotate(_call_module("__cublas$lt$matmul", ops, (m, n), cfg), fusion="xla-gpu")
    c = a.cost(_the_call(a))
    assert c["flops"] == 2 * m * n * k + extra_flops * m * n
    assert c["transcendentals"] == extra_trans * m * n
    assert c["bytes_read"] == sum(math.prod(s) for s in ops) * BF16
    assert c["bytes_written"] == m * n * BF16


def test_gemm_config_as_a_dictionary_attribute():
    """A typed-FFI call (api_version 4) carries its backend_config as a dictionary, which
    the converter parses from the HLO's text: read the same way."""
    m, k, n = 256, 512, 1024
    tup = f"tuple<{_ty((m, n))}, tensor<8xui8>>"
    cfg = ("{gemm_backend_config = {alpha_real = 2.0 : f64, beta = 0.0 : f64, epilogue = \"RELU\", "
           "dot_dimension_numbers = {lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0], "
           "lhs_batch_dimensions = [], rhs_batch_dimensions = []}}}")
    text = f"""func.func @main(%a: {_ty((m, k))}, %b: {_ty((k, n))}) -> {tup} {{
  %0 = stablehlo.custom_call @__cublas$lt$matmul(%a, %b) {{api_version = 4 : i32, backend_config = {cfg}}} : ({_ty((m, k))}, {_ty((k, n))}) -> {tup}
  return %0 : {tup}
}}"""
    a = run_annotate(text, fusion="xla-gpu")
    assert a.cost(_the_call(a))["flops"] == 2 * m * n * k + (1 + 1) * m * n  # alpha's multiply, the ReLU


def test_batched_gemm_dimension_numbers():
    """The attention scores of XLA's llama3-100m module: (2048, 9, 128) x (2048, 9, 128),
    batch dim 1, contracting dim 2 -> (9, 2048, 2048), scaled by 1/sqrt(128)."""
    b, s, d = 9, 2048, 128
    cfg = _gemm_config([2], [2], [1], [1], alpha=0.08837890625)
    a = run_annotate(_call_module("__cublas$lt$matmul", [(s, b, d), (s, b, d)], (b, s, s), cfg),
                     fusion="xla-gpu", backend="calibrated")
    assert a.cost(_the_call(a))["flops"] == 2 * b * s * s * d + b * s * s  # the GEMMs and alpha's multiply
    assert _only_kernel(a).kind == "gemm"


def test_fp8_gemm_runs_at_the_fp8_rate():
    m = n = k = 4096
    cfg = _gemm_config([1], [1])  # fp8 GEMMs contract the rhs' minor dimension
    text = _call_module("__cublas$lt$matmul$f8", [(m, k), (n, k)], (m, n), cfg, dtype="f8E4M3FN")
    a = run_annotate(text, fusion="xla-gpu", backend="roofline")
    c = a.cost(_the_call(a))
    assert c["flops"] == 2 * m * n * k
    bf16 = run_annotate(_call_module("__cublas$lt$matmul", [(m, k), (n, k)], (m, n), cfg), fusion="xla-gpu")
    # the H100's fp8 matrix peak is twice its bf16 one
    assert _only_kernel(a).time_ns < 0.6 * _only_kernel(bf16).time_ns


def test_cublas_gemm_gets_the_calibrated_model_of_the_same_dot():
    """One 4096^3 and one skinny GEMM: the cuBLAS call and a plain dot_general of the
    same shape get the same time, tile efficiency and split-K on the H100."""
    for m, k, n in ((4096, 4096, 4096), (2048, 576, 1152), (64, 8192, 128)):
        call = run_annotate(_call_module("__cublas$gemm", [(m, k), (k, n)], (m, n), _gemm_config([1], [0])),
                            fusion="xla-gpu", backend="calibrated")
        dot = run_annotate(f"""func.func @main(%a: {_ty((m, k))}, %b: {_ty((k, n))}) -> {_ty((m, n))} {{
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : ({_ty((m, k))}, {_ty((k, n))}) -> {_ty((m, n))}
  return %0 : {_ty((m, n))}
}}""", fusion="xla-gpu", backend="calibrated")
        got, want = _only_kernel(call), _only_kernel(dot)
        assert (got.kind, got.flops, got.bytes_read, got.bytes_written) == (want.kind, want.flops, want.bytes_read,
                                                                            want.bytes_written)
        assert got.time_ns == pytest.approx(want.time_ns, rel=1e-12)
        assert got.detail == want.detail and "tile_efficiency" in got.detail


def test_mhlo_custom_call_is_costed_too():
    """An MHLO import: `mhlo.custom_call` and `mhlo.get_tuple_element`, beta = 1."""
    m, k, n = 256, 512, 1024
    cfg = _gemm_config([1], [0], beta=1)
    res, tup = _ty((m, n)), f"tuple<{_ty((m, n))}, tensor<4194304xui8>>"
    text = f"""func.func @main(%a: {_ty((m, k))}, %b: {_ty((k, n))}, %c: {res}) -> {res} {{
  %0 = "mhlo.custom_call"(%a, %b, %c) {{call_target_name = "__cublas$gemm", api_version = 1 : i32, backend_config = "{cfg}"}} : ({_ty((m, k))}, {_ty((k, n))}, {res}) -> {tup}
  %1 = "mhlo.get_tuple_element"(%0) {{index = 0 : i32}} : ({tup}) -> {res}
  return %1 : {res}
}}"""
    a = run_annotate(text, fusion="xla-gpu", backend="calibrated")
    assert a.engine.unsupported_ops == {}
    assert a.cost(_the_call(a))["flops"] == 2 * m * n * k + m * n  # the GEMM and the add of C
    row = _only_kernel(a)
    assert row.kind == "gemm" and row.bytes_written == m * n * BF16


def test_library_call_fuses_no_prologue_or_epilogue():
    """With xla-gpu formation (a module of custom calls and plain ops) the cuBLAS call
    stays a kernel of its own: its convert producer and add consumer are kernels too."""
    m = 1024
    res, tup = _ty((m, m)), f"tuple<{_ty((m, m))}, tensor<1048576xui8>>"
    text = f"""func.func @main(%a: {_ty((m, m), 'f32')}, %b: {res}) -> {res} {{
  %c = stablehlo.convert %a : ({_ty((m, m), 'f32')}) -> {res}
  %0 = stablehlo.custom_call @__cublas$gemm(%c, %b) {{backend_config = "{_gemm_config([1], [0])}"}} : ({res}, {res}) -> {tup}
  %1 = stablehlo.get_tuple_element %0[0] : ({tup}) -> {res}
  %2 = stablehlo.add %1, %1 : {res}
  return %2 : {res}
}}"""
    rows = collect_kernels(run_annotate(text, fusion="xla-gpu").module)
    assert sorted((r.kind, r.ops[-1]) for r in rows) == [
        ("gemm", "stablehlo.custom_call"), ("loop", "stablehlo.add"), ("loop", "stablehlo.convert")]


@pytest.mark.parametrize(
    "config,reason",
    [
        ('"not json at all {"', "is not valid JSON"),
        ("{odd = 3 : i64}, api_version = 4 : i32", "has no gemm_backend_config"),  # a typed-FFI dictionary
        ('"{}"', "has no gemm_backend_config"),
        (None, "has no backend_config"),
        ('"' + _gemm_config([0], [0]) + '"', "do not fit operands"),  # contracts 256 with 512
        ('"' + _gemm_config([2], [0]) + '"', "does not fit a rank-2 operand"),
    ],
)
def test_unreadable_gemm_config_stays_unsupported(config, reason):
    attrs = f"{{backend_config = {config}}}" if config else ""
    text = f"""func.func @main(%a: {_ty((256, 512))}, %b: {_ty((512, 1024))}) -> tuple<{_ty((256, 1024))}, tensor<8xui8>> {{
  %0 = stablehlo.custom_call @__cublas$lt$matmul(%a, %b) {attrs} : ({_ty((256, 512))}, {_ty((512, 1024))}) -> tuple<{_ty((256, 1024))}, tensor<8xui8>>
  return %0 : tuple<{_ty((256, 1024))}, tensor<8xui8>>
}}"""
    a = run_annotate(text, fusion="xla-gpu")
    op = _the_call(a)
    assert reason in ir.StringAttr(op.attributes["costmodel.unsupported"]).value
    assert "costmodel.cost" not in op.attributes
    assert collect_kernels(a.module) == []  # no kernel, and the report says why (never a silent zero)
    assert any(reason in d.message for d in a.diagnostics)


# ---------------------------------------------------------------------------
# F3: cuDNN convolutions
# ---------------------------------------------------------------------------

# (batch, spatial, in channels, out channels, filter, stride, padding): a 3x3 SAME
# convolution, its stride-2 form, a stride-2 one on an input XLA padded explicitly, the
# ResNet stem (7x7, stride 2, 3 channels), a stride-2 1x1 projection, a 1x1 convolution
CONVS = [(8, 16, 32, 64, 3, 1, 1), (8, 16, 32, 64, 3, 2, 1), (8, 15, 16, 32, 3, 2, 0), (4, 32, 3, 64, 7, 2, 3),
         (8, 16, 64, 128, 1, 2, 0), (8, 16, 64, 64, 1, 1, 0)]


def _jax_convs(n, h, c, k, r, s, p):
    """The forward convolution (NHWC input, OHWI filter, as XLA GPU hands them to cuDNN)
    and its input and filter gradients as JAX exports them: {kind: (MLIR text, operand
    shapes of the cuDNN call, its result shape)}."""
    jax = pytest.importorskip("jax")
    from jax import lax

    x = jax.ShapeDtypeStruct((n, h, h, c), jax.numpy.bfloat16)
    w = jax.ShapeDtypeStruct((k, r, r, c), jax.numpy.bfloat16)

    def f(x, w):
        return lax.conv_general_dilated(x, w, (s, s), [(p, p), (p, p)], dimension_numbers=("NHWC", "OHWI", "NHWC"))

    y = jax.eval_shape(f, x, w)
    fwd = jax.jit(f).lower(x, w).as_text()
    dx = jax.jit(lambda x, w, dy: jax.vjp(f, x, w)[1](dy)[0]).lower(x, w, y).as_text()
    dw = jax.jit(lambda x, w, dy: jax.vjp(f, x, w)[1](dy)[1]).lower(x, w, y).as_text()
    xs, ws, ys = x.shape, w.shape, y.shape
    return {
        "__cudnn$convForward": (fwd, [xs, ws], ys),
        "__cudnn$convBackwardInput": (dx, [ys, ws], xs),
        "__cudnn$convBackwardFilter": (dw, [xs, ys], ws),
    }


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: "n{}_h{}_c{}_k{}_r{}_s{}_p{}".format(*c))
def test_cudnn_call_counts_its_equivalent_convolution(conv):
    """Each cuDNN call (forward, input gradient, filter gradient) counts the flops of the
    stablehlo.convolution JAX exports for it (taps in padding not counted), reads its
    operands and writes its result without the workspace; with the same xla-gpu kernel
    kind and, where our formation runs the plain convolution as the same cuDNN problem
    (no padding legalization: the call's problem is legal already), the same calibrated
    time and detail (tile and channel efficiencies, split-K, library_call_idle_ns) on the
    H100."""
    for target, (text, operands, result) in _jax_convs(*conv).items():
        plain = run_annotate(text, fusion="xla-gpu", backend="calibrated")
        (ref,) = plain.ops("stablehlo.convolution")
        call = run_annotate(_call_module(target, operands, result, _conv_config()), fusion="xla-gpu",
                            backend="calibrated")
        cost = call.cost(_the_call(call))
        assert cost["flops"] == plain.cost(ref)["flops"], target
        assert cost["bytes_read"] == sum(math.prod(s) for s in operands) * BF16
        assert cost["bytes_written"] == math.prod(result) * BF16
        got = _only_kernel(call)
        assert got.kind == "conv" and got.launches == 1 and got.conv == CUDNN_KIND[target]
        assert got.detail["library_idle_ns"] == 4750.0  # the H100's library_call_idle_ns
        (want,) = [r for r in collect_kernels(plain.module) if r.kind == "conv"]
        if "conv_padding" not in want.detail and want.conv == got.conv:
            assert got.time_ns == pytest.approx(want.time_ns, rel=1e-12), target
            assert got.detail == want.detail, target


CUDNN_KIND = {"__cudnn$convForward": "forward", "__cudnn$convBackwardInput": "backward_input",
              "__cudnn$convBackwardFilter": "backward_filter"}


def test_cudnn_stem_counts_valid_taps():
    """The ResNet stem, 256 x 224^2 x 3 -> 64 channels, 7x7, stride 2, padding 3, as
    XLA's H100 module calls it: per spatial dimension 112 outputs x 7 taps less those in
    the padding, where the first window (rows -3..3) has 3, the second (-1..5) 1 and the
    last (219..225) 2 (the window is read from the shapes: out = (224 + 2 x 3 - 7) // 2 +
    1 = 112)."""
    n, h, c, k, r = 256, 224, 3, 64, 7
    taps = 112 * r - (3 + 1) - 2
    a = run_annotate(_call_module("__cudnn$convForward", [(n, h, h, c), (k, r, r, c)], (n, 112, 112, k),
                                  _conv_config(), workspace=205571088), fusion="xla-gpu", backend="calibrated")
    op = _the_call(a)
    assert a.cost(op)["flops"] == 2 * n * k * c * taps * taps
    row = _only_kernel(a)
    # cuDNN's channel padding of the 16-bit stem (C = 3 -> 8), as for a plain convolution
    assert row.detail["padded_channels"] == 8 and row.detail["channel_efficiency"] == pytest.approx(3 / 32)


def test_nchw_convolution_is_read_in_its_layout():
    """An NCHW call (dim_labels bf01_oi01->bf01, which the converter drops): 8 x 32 x 16^2
    -> 64 channels, 3x3 SAME."""
    n, c, h, k = 8, 32, 16, 64
    a = run_annotate(_call_module("__cudnn$convForward", [(n, c, h, h), (k, c, 3, 3)], (n, k, h, h), _conv_config()),
                     fusion="xla-gpu")
    assert a.cost(_the_call(a))["flops"] == 2 * n * k * c * (3 * h - 2) ** 2  # 2 taps per row fall in the padding


def _bias_activation_module(bias: str, side: bool, activation: str, scale=1, side_scale=1) -> str:
    n, h, c, k = 8, 16, 64, 64
    x, w, y = _ty((n, h, h, c)), _ty((k, 3, 3, c)), _ty((n, h, h, k))
    bias_def = {
        "arg": "",
        "zero": f"%z = stablehlo.constant dense<0.0> : tensor<bf16>\n  %bias = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<bf16>) -> {_ty((k,))}",
        "zero_fusion": f"""%bias = "mhlo.fusion"() <{{fusion_kind = #mhlo<fusion_kind kLoop>}}> ({{
    %z = stablehlo.constant dense<0.0> : tensor<bf16>
    %zb = stablehlo.broadcast_in_dim %z, dims = [] : (tensor<bf16>) -> {_ty((k,))}
    mhlo.return %zb : {_ty((k,))}
  }}) : () -> {_ty((k,))}""",
    }[bias]
    bias_name = "%b" if bias == "arg" else "%bias"
    operands = ["%x", "%w", bias_name] + (["%s"] if side else [])
    types = [x, w, _ty((k,))] + ([y] if side else [])
    cfg = _conv_config(activation, scale, side_scale if side else 0)
    tup = f"tuple<{y}, tensor<0xui8>>"
    return f"""func.func @main(%x: {x}, %w: {w}, %b: {_ty((k,))}, %s: {y}) -> {y} {{
  {bias_def}
  %0 = stablehlo.custom_call @__cudnn$convBiasActivationForward({", ".join(operands)}) {{backend_config = "{cfg}"}} : ({", ".join(types)}) -> {tup}
  %1 = stablehlo.get_tuple_element %0[0] : ({tup}) -> {y}
  return %1 : {y}
}}"""


@pytest.mark.parametrize(
    "bias,side,activation,scale,side_scale,per_element,trans",
    [
        ("arg", False, "kRelu", 1, 1, 1 + 1, 0),  # bias add, ReLU
        ("arg", True, "kRelu", 1, 1, 1 + 1 + 1, 0),  # bias, side input, ReLU
        ("arg", True, "kNone", 2, 0.5, 1 + 1 + 2, 0),  # scale, bias, scaled side input (multiply, add)
        ("arg", False, "kElu", 1, 1, 1 + 2, 1),  # ELU: compare, select, expm1
        ("arg", False, "kTanh", 1, 1, 1, 1),
        ("zero", True, "kNone", 1, 1, 1, 0),  # XLA's zero bias for a side input alone: the add only
        ("zero_fusion", True, "kNone", 1, 1, 1, 0),  # ... as XLA's H100 modules compute it (a fusion)
    ],
)
def test_cudnn_bias_activation_epilogue(bias, side, activation, scale, side_scale, per_element, trans):
    n, h, c, k = 8, 16, 64, 64
    conv = 2 * n * k * c * (3 * h - 2) ** 2  # 3x3 SAME: 2 taps per row in the padding
    a = run_annotate(_bias_activation_module(bias, side, activation, scale, side_scale), fusion="xla-gpu")
    cost = a.cost(_the_call(a))
    assert cost["flops"] == conv + per_element * n * h * h * k
    assert cost["transcendentals"] == trans * n * h * h * k


def test_convolution_shapes_fitting_no_layout_stay_unsupported():
    text = _call_module("__cudnn$convForward", [(8, 16, 16, 32), (64, 3, 3, 48)], (8, 16, 16, 64), _conv_config())
    a = run_annotate(text, fusion="xla-gpu")
    why = ir.StringAttr(_the_call(a).attributes["costmodel.unsupported"]).value
    assert "fit neither an NHWC" in why and "dim_labels" in why


@pytest.mark.parametrize("size,k,out,window", [(56, 3, 56, (1, 1)), (224, 7, 112, (2, 3)), (15, 3, 7, (2, 0)),
                                                 (57, 3, 28, (2, 0)), (56, 1, 28, (2, 0)), (7, 7, 1, (1, 0)),
                                                 (10, 3, 20, None)])
def test_window_of_a_cudnn_call_from_its_extents(size, k, out, window):
    from costmodel.rules import infer_conv_window

    assert infer_conv_window(size, k, out) == window
    if window is not None:
        s, p = window
        assert (size + 2 * p - k) // s + 1 == out


# ---------------------------------------------------------------------------
# F6 / F9: given fusions
# ---------------------------------------------------------------------------


def test_given_gemm_fusion_gets_the_gemm_model_of_its_dot():
    """hand/gemm512_given.mlir (a kCustom fusion holding a 512^3 bf16 dot) was 1,591 ns
    without wave quantization; the bare dot 1,819 ns with tile efficiency 0.48 (the best
    tile tried, 64 x 64: 64 tiles in one wave of 132 SMs, 64 / 132 = 0.4848)."""
    given = run_annotate(_read("gemm512_given.mlir"), fusion="xla-gpu", backend="calibrated")
    bare = run_annotate(_read("gemm512_bare.mlir"), fusion="xla-gpu", backend="calibrated")
    assert ir.StringAttr(ir.DictAttr(given.module.attributes["costmodel.summary"])["fusion"]).value == "given"
    g, b = _only_kernel(given), _only_kernel(bare)
    assert g.kind == b.kind == "gemm"
    assert g.time_ns == pytest.approx(b.time_ns, rel=1e-12) and g.time_ns == pytest.approx(1819, abs=1)
    assert g.detail == b.detail
    assert g.detail["tile_efficiency"] == pytest.approx(64 / 132, abs=1e-6) and g.detail["split_k"] == 1


def test_given_fusion_with_an_epilogue_keeps_its_bytes():
    """A kOutput fusion of a dot and a bias add: the GEMM model of the dot, the bytes of the
    fusion (the bias read too), the flops of both."""
    m = k = n = 1024
    text = f"""func.func @main(%a: {_ty((m, k))}, %b: {_ty((k, n))}, %c: {_ty((m, n))}) -> {_ty((m, n))} {{
  %0 = "mhlo.fusion"(%a, %b, %c) <{{fusion_kind = #mhlo<fusion_kind kOutput>}}> ({{
  ^bb0(%x: {_ty((m, k))}, %y: {_ty((k, n))}, %z: {_ty((m, n))}):
    %1 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : ({_ty((m, k))}, {_ty((k, n))}) -> {_ty((m, n))}
    %2 = stablehlo.add %1, %z : {_ty((m, n))}
    mhlo.return %2 : {_ty((m, n))}
  }}) : ({_ty((m, k))}, {_ty((k, n))}, {_ty((m, n))}) -> {_ty((m, n))}
  return %0 : {_ty((m, n))}
}}"""
    a = run_annotate(text, fusion="xla-gpu", backend="calibrated")
    row = _only_kernel(a)
    assert row.kind == "gemm" and "tile_efficiency" in row.detail
    assert row.flops == 2 * m * n * k + m * n
    assert row.bytes_read == (m * k + k * n + m * n) * BF16 and row.bytes_written == m * n * BF16


def test_kcustom_fusion_kind_comes_from_its_contents():
    """gen/mlp.mlir (XLA CPU's compiled MLP): a kCustom fusion holding a dot is a gemm,
    the two kCustom fusions holding only a reduction are input (reduction) kernels, as
    XLA names such fusions; the kLoop fusion stays a loop kernel."""
    a = run_annotate(_read("mlp.mlir"), fusion="xla-gpu", backend="calibrated")
    main = [op for op in a.ops("mhlo.fusion")]
    kinds = [ir.StringAttr(ir.DictAttr(op.attributes["costmodel.kernel_cost"])["kind"]).value for op in main]
    assert kinds == ["gemm", "input", "loop", "input"]
    gemm = [r for r in collect_kernels(a.module) if r.kind == "gemm"]
    assert len(gemm) == 1 and "tile_efficiency" in gemm[0].detail  # 512 x 512 x 512 f32


def test_kcustom_fusion_holding_a_convolution_is_a_conv_kernel():
    n, h, c, k = 8, 16, 64, 64
    x, w, y = _ty((n, h, h, c)), _ty((k, 3, 3, c)), _ty((n, h, h, k))
    text = f"""func.func @main(%x: {x}, %w: {w}) -> {y} {{
  %0 = "mhlo.fusion"(%x, %w) <{{fusion_kind = #mhlo<fusion_kind kCustom>}}> ({{
  ^bb0(%a: {x}, %b: {w}):
    %1 = stablehlo.convolution(%a, %b) dim_numbers = [b, 0, 1, f]x[o, 0, 1, i]->[b, 0, 1, f], window = {{stride = [1, 1], pad = [[1, 1], [1, 1]]}} {{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({x}, {w}) -> {y}
    %2 = stablehlo.maximum %1, %1 : {y}
    mhlo.return %2 : {y}
  }}) : ({x}, {w}) -> {y}
  return %0 : {y}
}}"""
    row = _only_kernel(run_annotate(text, fusion="xla-gpu", backend="calibrated"))
    assert row.kind == "conv" and row.conv == "forward"
    assert row.detail["library_idle_ns"] == 4750.0 and "tile_efficiency" in row.detail


# ---------------------------------------------------------------------------
# F11: the workspace in costmodel memory
# ---------------------------------------------------------------------------


def test_workspace_is_a_temporary_of_the_call_not_an_output():
    """hand/cc_gpu.mlir: its outputs are the GEMM's 4096^2 bf16, the convolution's
    256 x 56^2 x 64 bf16 and the cuBLASLt result (169,869,312 bytes); the cuBLAS call's
    33,554,432-byte u8 workspace was counted as output (output_at_peak 203,423,744 >
    output_bytes). It is a temporary live during the call only."""
    from costmodel.ir import load_module, make_context
    from costmodel.memory import peak_memory

    gemm, conv, ws = 4096 * 4096 * BF16, 256 * 56 * 56 * 64 * BF16, 33554432
    rep = peak_memory(load_module(make_context(), _read("cc_gpu.mlir"), "cc_gpu.mlir"))
    assert rep.output_bytes == 2 * gemm + conv == 169869312
    assert rep.output_at_peak_bytes <= rep.output_bytes
    assert rep.output_at_peak_bytes == 169869312
    assert rep.temp_peak_bytes == ws  # the workspace, during the GEMM
    assert rep.peak_bytes == rep.argument_bytes + rep.output_bytes


def test_workspace_counts_at_the_peak_of_its_call():
    """A GEMM whose 256 MiB workspace dwarfs the rest: the peak is at the call, arguments
    + result + workspace, the workspace a temporary there, the result an output."""
    m = 1024
    ws = 256 << 20
    cfg = _gemm_config([1], [0])
    from costmodel.ir import load_module, make_context
    from costmodel.memory import peak_memory

    rep = peak_memory(load_module(make_context(), _call_module("__cublas$gemm", [(m, m), (m, m)], (m, m), cfg, ws), "t"))
    out = m * m * BF16
    assert rep.output_bytes == out
    assert rep.peak_bytes == 2 * out + out + ws
    assert rep.output_at_peak_bytes == out and rep.temp_at_peak_bytes == ws
    live = {b.kind: b for b in rep.live_at_peak if b.bytes == ws}
    assert "temporary" in live and live["temporary"].name.endswith("workspace")


# ---------------------------------------------------------------------------
# Bad backend_configs: unsupported with the reason, never a traceback or a crash
# ---------------------------------------------------------------------------

_GEMM_OPS = [(64, 32), (32, 16)]


def _gemm_raw(fields: str) -> str:
    """A GemmBackendConfig for a 64x32 by 32x16 GEMM with `fields` (raw JSON) added."""
    return _json('{"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{'
                 '"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],'
                 '"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}%s}}' % fields)


def _assert_unsupported(text: str, reason: str, fusion: str = "xla-gpu"):
    a = run_annotate(text, fusion=fusion)
    op = _the_call(a)
    assert reason in ir.StringAttr(op.attributes["costmodel.unsupported"]).value
    assert "costmodel.cost" not in op.attributes
    assert a.engine.unsupported_ops == {op.name: 1}
    assert any(reason in d.message for d in a.diagnostics)
    return a


@pytest.mark.parametrize("value", ['["BIAS"]', "true", "{}", "1.5", "null"])
def test_gemm_epilogue_of_a_wrong_json_type_is_unsupported(value):
    """audit F2: `"epilogue":["BIAS"]` raised TypeError (unhashable list) and `true` was
    read as BIAS (enum number 1); a GemmBackendConfig's epilogue is a name or a number."""
    text = _call_module("__cublas$gemm", _GEMM_OPS, (64, 16), _gemm_raw(',"epilogue":%s' % value), dtype="f32")
    _assert_unsupported(text, "backend_config field epilogue")


@pytest.mark.parametrize("value,extra_flops", [('"BIAS_RELU"', 2), ("3", 2), ('"3"', 2), ('"GELU"', 8)])
def test_gemm_epilogue_as_a_name_or_its_number(value, extra_flops):
    text = _call_module("__cublas$gemm", _GEMM_OPS, (64, 16), _gemm_raw(',"epilogue":%s' % value), dtype="f32")
    a = run_annotate(text, fusion="xla-gpu")
    assert a.engine.unsupported_ops == {}
    assert a.cost(_the_call(a))["flops"] == 2 * 64 * 16 * 32 + extra_flops * 64 * 16


@pytest.mark.parametrize(
    "fields,reason",
    [
        (',"alpha_real":true', "alpha_real = True is not a number"),
        (',"beta":[0]', "beta = [0] is not a number"),
        (',"epilogue":"\u00b3"', None),  # a unicode digit is a name, not a number: unknown epilogue
    ],
)
def test_gemm_scalars_of_a_wrong_json_type(fields, reason):
    text = _call_module("__cublas$gemm", _GEMM_OPS, (64, 16), _gemm_raw(fields), dtype="f32")
    if reason is None:
        a = run_annotate(text, fusion="xla-gpu")
        assert a.engine.unsupported_ops == {}
        return
    _assert_unsupported(text, reason)


@pytest.mark.parametrize("dims,reason", [('"1"', "is not a list of dimensions"), ("[true]", "is not a count"),
                                         ('{"1": 1}', "is not a list of dimensions"), ("[1.0]", "is not a count")])
def test_gemm_dimension_numbers_of_a_wrong_json_type(dims, reason):
    cfg = _json('{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":%s,'
                '"rhs_contracting_dimensions":["0"]}}}' % dims)
    _assert_unsupported(_call_module("__cublas$gemm", _GEMM_OPS, (64, 16), cfg, dtype="f32"), reason)


@pytest.mark.parametrize("value", ["{}", '["kRelu"]', "false"])
def test_conv_activation_of_a_wrong_json_type_is_unsupported(value):
    """audit F2: `"activation_mode":{}` raised TypeError (unhashable dict)."""
    cfg = _json('{"cudnn_conv_backend_config":{"conv_result_scale":1,"activation_mode":%s}}' % value)
    text = _call_module("__cudnn$convForward", [(8, 16, 16, 4), (8, 3, 3, 4)], (8, 16, 16, 8), cfg, dtype="f32")
    _assert_unsupported(text, "backend_config field activation_mode")


@pytest.mark.parametrize("target,operands,config", [
    ("__cublas$gemm", _GEMM_OPS, _gemm_config([1], [0])),
    ("__cudnn$convForward", [(8, 16, 16, 4), (8, 3, 3, 4)], _conv_config()),
])
def test_library_call_returning_an_empty_tuple_is_unsupported(target, operands, config):
    """audit F3: a cuBLAS / cuDNN call whose result is `tuple<>` raised IndexError."""
    args = ", ".join(f"%a{i}: {_ty(s)}" for i, s in enumerate(operands))
    names = ", ".join(f"%a{i}" for i in range(len(operands)))
    text = f"""func.func @main({args}) {{
  %0 = stablehlo.custom_call @{target}({names}) {{backend_config = "{config}"}} : ({", ".join(_ty(s) for s in operands)}) -> tuple<>
  return
}}"""
    _assert_unsupported(text, "returns no array (an empty tuple)")


@pytest.mark.parametrize("x,w,y", [((8, 16, 16, 0), (8, 3, 3, 4), (8, 16, 16, 8)),  # 0 input features
                                   ((8, 16, 16, 4), (0, 3, 3, 4), (8, 16, 16, 0)),  # 0 output features
                                   ((0, 16, 16, 4), (8, 3, 3, 4), (0, 16, 16, 8))])  # an empty batch
def test_cudnn_conv_with_a_zero_extent_is_unsupported(x, w, y):
    """audit F3: 0 input features raised ZeroDivisionError in cudnn_conv_problem."""
    text = _call_module("__cudnn$convForward", [x, w], y, _conv_config(), dtype="f32")
    _assert_unsupported(text, "have a zero extent")


def test_attention_config_of_a_wrong_json_type_is_unsupported():
    """cudnn_attention_rule: dimensions that are no counts, a mask that is no name, too
    few operands: unsupported with the reason."""
    qkv, out = "tensor<2x128x4x64xbf16>", "tensor<2x4x128x64xbf16>"

    def module(cfg: str, operands: int = 3) -> str:
        args = ", ".join(f"%a{i}: {qkv}" for i in range(operands))
        names = ", ".join(f"%a{i}" for i in range(operands))
        return f"""func.func @main({args}) -> {out} {{
  %0:2 = stablehlo.custom_call @__cudnn$fmhaSoftmax({names}) {{backend_config = "{_json(cfg)}"}} : ({", ".join([qkv] * operands)}) -> ({out}, tensor<0xui8>)
  return %0#0 : {out}
}}"""

    good = '{"cudnn_fmha_backend_config":{"intermediate_tensor_shape":{"dimensions":["2","4","128","128"]}%s}}'
    assert run_annotate(module(good % "")).engine.unsupported_ops == {}
    for cfg, reason in [
        (good.replace('"128","128"', "true,128") % "", "is not a count"),
        (good % ',"mask_type":["CAUSAL"]', "is not a mask name"),
        (good % ',"sliding_window_length":"x"', "is not a count"),
        ('{"cudnn_fmha_backend_config":[]}', "no cudnn_fmha_backend_config with the score shape"),
        ("[[[", "is not valid JSON"),
    ]:
        _assert_unsupported(module(cfg), reason, fusion="none")
    _assert_unsupported(module(good % "", operands=2), "fused attention reads Q, K and V", fusion="none")


def test_json_nesting_is_bounded_relative_to_the_callers_depth():
    """parse_config_json keeps json's C recursion to JSON_MAX_NESTING levels above its
    caller, however deep the caller's (Python) stack is under ir.DEEP_RECURSION: a config
    within the bound parses there, a deeper one is invalid (no crash either way: this
    depth is safe for the C stack)."""
    from costmodel.ir import DEEP_RECURSION, recursion_limit
    from costmodel.jsonio import JSON_MAX_NESTING
    from costmodel.rules import InvalidConfigJSON, parse_config_json

    ok = "[" * 100 + "]" * 100
    deep = "[" * (JSON_MAX_NESTING + 500) + "]" * (JSON_MAX_NESTING + 500)

    def at_depth(n, fn):
        return fn() if n == 0 else at_depth(n - 1, fn)

    with recursion_limit(DEEP_RECURSION):
        for frames in (0, 5_000):
            assert at_depth(frames, lambda: parse_config_json(ok)) is not None
            with pytest.raises(InvalidConfigJSON, match="nested more than"):
                at_depth(frames, lambda: parse_config_json(deep))
    with pytest.raises(InvalidConfigJSON, match="Expecting value"):
        parse_config_json("[")


def test_deeply_nested_backend_config_is_unsupported_not_a_crash(tmp_path):
    """audit F1: a backend_config of 100,000 `[` segfaulted (exit 139) in json.loads,
    which annotate-cost ran under its 200,000-frame recursion limit. Each library call
    that parses JSON (cuBLAS, cuDNN convolution, cuDNN attention, Pallas TPU) is
    unsupported, with the reason, at 20,000 and 100,000 levels. In a subprocess: a
    regression crashes it, not the test run."""
    import subprocess
    import sys

    calls = [("__cublas$gemm", [(64, 32), (32, 16)], (64, 16)),
             ("__cudnn$convForward", [(8, 16, 16, 4), (8, 3, 3, 4)], (8, 16, 16, 8)),
             ("__cudnn$fmhaSoftmax", [(2, 8, 4, 16)] * 3, (2, 4, 8, 16)),
             ("tpu_custom_call", [(64, 32)], (64, 32))]
    for depth in (20_000, 100_000):
        body = []
        for i, (target, operands, result) in enumerate(calls):
            names = ", ".join(f"%x{i}_{j}" for j in range(len(operands)))
            body.append(f'  %r{i} = stablehlo.custom_call @{target}({names}) {{backend_config = "{"[" * depth}"}} : '
                        f'({", ".join(_ty(s, "f32") for s in operands)}) -> {_ty(result, "f32")}')
        args = ", ".join(f"%x{i}_{j}: {_ty(s, 'f32')}" for i, (_, ops, _r) in enumerate(calls) for j, s in enumerate(ops))
        src = tmp_path / f"deep{depth}.mlir"
        src.write_text(f"func.func @main({args}) {{\n" + "\n".join(body) + "\n  return\n}\n")
        out = tmp_path / f"out{depth}.mlir"
        code = "import sys; from costmodel.driver import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.run([sys.executable, "-c", code, str(src), "--annotate-cost", "-o", str(out)],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
        assert proc.stderr.count("backend_config is not valid JSON (nested more than") == len(calls), proc.stderr[-3000:]
        assert out.read_text().count("costmodel.unsupported = ") == len(calls)
        code = "import sys; from costmodel.cli import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.run([sys.executable, "-c", code, "kernels", str(src)], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and "not valid JSON" in proc.stdout + proc.stderr
