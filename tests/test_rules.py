"""Per-rule tests: expected values written as formulas."""

from __future__ import annotations

import pathlib

import pytest

from conftest import run_annotate
from costmodel import coverage
from costmodel.rules import RULES, TRANSCENDENTAL_OPS

DTYPES = ["f32", "bf16", "f16", "i8", "i1", "complex<f32>"]
ELEM_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i8": 1, "i1": 1, "complex<f32>": 8}


def test_every_dialect_op_has_a_rule():
    missing = [n for n in coverage.dialect_ops() if n not in RULES]
    assert coverage.dialect_ops(), "no ops found in the bindings"
    assert missing == []


def test_op_coverage_doc_is_current():
    doc = pathlib.Path(__file__).resolve().parents[1] / "docs" / "op-coverage.md"
    assert doc.read_text() == coverage.generate(), "run: python -m costmodel.coverage > docs/op-coverage.md"


def _single(op_text: str, args: str, result: str):
    a = run_annotate(f"func.func public @main({args}) -> {result} {{\n {op_text}\n}}")
    assert a.totals.unsupported == 0, [d.message for d in a.diagnostics]
    return a


_BINARY_CASES = [
    (op, dtype)
    for op in ["stablehlo.add", "stablehlo.multiply", "stablehlo.maximum", "stablehlo.subtract"]
    for dtype in DTYPES
    # subtract/multiply are not defined on i1, maximum not on complex
    if not (dtype == "i1" and op in ("stablehlo.subtract", "stablehlo.multiply"))
    and not (dtype.startswith("complex") and op == "stablehlo.maximum")
]


@pytest.mark.parametrize("op,dtype", _BINARY_CASES)
def test_binary_elementwise(op, dtype):
    t = f"tensor<3x5x{dtype}>"
    a = _single(f"%0 = {op} %a, %b : {t}\n return %0 : {t}", f"%a: {t}, %b: {t}", t)
    n, eb = 3 * 5, ELEM_BYTES[dtype]
    assert a.cost(a.ops(op)[0]) == {"flops": n, "transcendentals": 0, "bytes_read": 2 * n * eb, "bytes_written": n * eb}


@pytest.mark.parametrize("op", sorted(o for o in TRANSCENDENTAL_OPS if o.startswith("stablehlo.") and o not in ("stablehlo.power", "stablehlo.atan2")))
@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_unary_transcendental(op, dtype):
    t = f"tensor<7x{dtype}>"
    a = _single(f"%0 = {op} %a : {t}\n return %0 : {t}", f"%a: {t}", t)
    c = a.cost(a.ops(op)[0])
    assert (c["flops"], c["transcendentals"]) == (0, 7)  # one transcendental per element


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (8, 16, 32), (3, 5, 7)])
def test_dot_general(m, n, k, dtype):
    out = "i32" if dtype == "i8" else dtype
    a = _single(
        f"%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{m}x{k}x{dtype}>, tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{out}>\n"
        f" return %0 : tensor<{m}x{n}x{out}>", f"%a: tensor<{m}x{k}x{dtype}>, %b: tensor<{k}x{n}x{dtype}>", f"tensor<{m}x{n}x{out}>")
    assert a.cost(a.ops("stablehlo.dot_general")[0])["flops"] == 2 * m * n * k  # one FMA = 2 flops


def test_batched_dot_general():
    b, m, n, k = 4, 3, 5, 6
    a = _single(
        f"%0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : "
        f"(tensor<{b}x{m}x{k}xf32>, tensor<{b}x{k}x{n}xf32>) -> tensor<{b}x{m}x{n}xf32>\n return %0 : tensor<{b}x{m}x{n}xf32>",
        f"%a: tensor<{b}x{m}x{k}xf32>, %b: tensor<{b}x{k}x{n}xf32>", f"tensor<{b}x{m}x{n}xf32>")
    assert a.totals.flops == 2 * b * m * n * k


def test_convolution_nchw_padded():
    # 1x1x5x5 input, 3x3 kernel, pad 1: in-bounds taps per dim = 3*5 - 2 = 13
    a = _single(
        "%0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = "
        "{stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : "
        "(tensor<2x3x5x5xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x5x5xf32>\n return %0 : tensor<2x4x5x5xf32>",
        "%x: tensor<2x3x5x5xf32>, %w: tensor<4x3x3x3xf32>", "tensor<2x4x5x5xf32>")
    assert a.totals.flops == 2 * 2 * 4 * 3 * 13 * 13  # 2 * batch * out_f * in_f * taps_h * taps_w


def test_convolution_grouped_strided():
    a = _single(
        "%0 = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = "
        "{stride = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 2 : i64} : "
        "(tensor<1x6x6x4xf32>, tensor<2x2x2x6xf32>) -> tensor<1x3x3x6xf32>\n return %0 : tensor<1x3x3x6xf32>",
        "%x: tensor<1x6x6x4xf32>, %w: tensor<2x2x2x6xf32>", "tensor<1x3x3x6xf32>")
    assert a.totals.flops == 2 * 1 * 6 * (4 // 2) * (3 * 2) * (3 * 2)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "i8"])
def test_reduce(dtype):
    t = f"tensor<6x10x{dtype}>"
    zero = "0" if dtype == "i8" else "0.0"
    a = _single(
        f"%z = stablehlo.constant dense<{zero}> : tensor<{dtype}>\n"
        f" %0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : ({t}, tensor<{dtype}>) -> tensor<6x{dtype}>\n"
        f" return %0 : tensor<6x{dtype}>", f"%a: {t}", f"tensor<6x{dtype}>")
    assert a.cost(a.ops("stablehlo.reduce")[0])["flops"] == 6 * 10 - 6  # in - out applications


def test_sort_counts_whole_tensor():
    a = _single(
        '%0 = "stablehlo.sort"(%a) ({\n ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n'
        "   %c = stablehlo.compare GT, %x, %y : (tensor<f32>, tensor<f32>) -> tensor<i1>\n   stablehlo.return %c : tensor<i1>\n"
        " }) {dimension = 1 : i64} : (tensor<3x10xf32>) -> tensor<3x10xf32>\n return %0 : tensor<3x10xf32>",
        "%a: tensor<3x10xf32>", "tensor<3x10xf32>")
    n = 30
    assert a.cost(a.ops("stablehlo.sort")[0])["flops"] == n * 5  # n * ceil(log2 n), XLA


@pytest.mark.parametrize("n", [16, 32000])
def test_long_scan_counts_xlas_tree_rewrite(n):
    """jnp.cumsum as a reduce_window whose window spans the dimension: up to 16 elements
    XLA's count, (n - 1) applications per output; longer, the applications of the tree
    XLA's ReduceWindowRewriter turns it into (base 16), not the quadratic window."""
    from costmodel.rules import _tree_scan_applications

    t = f"tensor<8x{n}xf32>"
    a = _single(
        "%z = stablehlo.constant dense<0.0> : tensor<f32>\n"
        f' %0 = "stablehlo.reduce_window"(%a, %z) <{{padding = dense<[[0, 0], [{n - 1}, 0]]> : tensor<2x2xi64>, '
        f"window_dimensions = array<i64: 1, {n}>}}> ({{\n ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
        "   %s = stablehlo.add %x, %y : tensor<f32>\n   stablehlo.return %s : tensor<f32>\n"
        f" }}) : ({t}, tensor<f32>) -> {t}\n return %0 : {t}", f"%a: {t}", t)
    flops = a.cost(a.ops("stablehlo.reduce_window")[0])["flops"]
    if n <= 16:
        assert flops == 8 * n * (n - 1)
    else:
        # 32000 = 2000 runs of 16: 15 adds per element in the runs, 1 to combine; then the
        # 2000 run totals (125 runs), then 125 (padded to 128: 8 runs), then 8 plainly
        expected = 8 * (32000 * 16 + 2000 * 16 + 128 * 16 + 8 * 7)
        assert flops == expected == _tree_scan_applications(n, 8)
        assert flops < 8 * n * (n - 1) / 1000


def test_custom_call_unknown_is_unsupported():
    a = run_annotate(
        "func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        ' %0 = stablehlo.custom_call @my_kernel(%a) : (tensor<4xf32>) -> tensor<4xf32>\n return %0 : tensor<4xf32>\n}')
    op = a.ops("stablehlo.custom_call")[0]
    assert "costmodel.unsupported" in op.attributes
    assert a.totals.unsupported == 1


def test_custom_call_sharding_is_free():
    a = _single(' %0 = stablehlo.custom_call @Sharding(%a) : (tensor<4xf32>) -> tensor<4xf32>\n return %0 : tensor<4xf32>',
                "%a: tensor<4xf32>", "tensor<4xf32>")
    assert a.cost(a.ops("stablehlo.custom_call")[0])["flops"] == 0


def test_host_offloading_copies_are_marked_not_costed():
    """jax.device_put(x, memory_kind="pinned_host") under jit and back: two copies over
    the host link, which we do not model: each is marked with its bytes and direction,
    never a silent zero. A placement on the device of a device value is free."""
    a = run_annotate(
        "func.func public @main(%a: tensor<1024x256xf32>) -> tensor<1024x256xf32> {\n"
        ' %0 = stablehlo.custom_call @annotate_device_placement(%a) {has_side_effect = true, '
        'mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}} : (tensor<1024x256xf32>) -> tensor<1024x256xf32>\n'
        ' %1 = stablehlo.custom_call @annotate_device_placement(%0) {has_side_effect = true, '
        'mhlo.frontend_attributes = {_xla_buffer_placement = "device"}} : (tensor<1024x256xf32>) -> tensor<1024x256xf32>\n'
        ' %2 = stablehlo.custom_call @annotate_device_placement(%1) {has_side_effect = true, '
        'mhlo.frontend_attributes = {_xla_buffer_placement = "device"}} : (tensor<1024x256xf32>) -> tensor<1024x256xf32>\n'
        " return %2 : tensor<1024x256xf32>\n}")
    to_host, to_device, stay = a.ops("stablehlo.custom_call")
    nbytes = 1024 * 256 * 4
    assert f"a copy of {nbytes} bytes from device to host memory" in str(to_host.attributes["costmodel.unsupported"])
    assert f"a copy of {nbytes} bytes from host to device memory" in str(to_device.attributes["costmodel.unsupported"])
    assert "costmodel.unsupported" not in stay.attributes and a.cost(stay)["bytes_read"] == 0
    assert a.totals.unsupported == 2


def test_dynamic_shape_is_unsupported_with_hint():
    a = run_annotate("func.func public @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n"
                     " %0 = stablehlo.add %a, %a : tensor<?xf32>\n return %0 : tensor<?xf32>\n}")
    op = a.ops("stablehlo.add")[0]
    assert "costmodel.unsupported" in op.attributes
    assert any("--stablehlo-refine-shapes" in d.message and d.line > 0 for d in a.diagnostics)


# --------------------------------------------------------------------------- linear algebra calls


def _linalg(target: str, operands: list[str], results: list[str], config: str = "") -> dict:
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operands))
    names = ", ".join(f"%a{i}" for i in range(len(operands)))
    cfg = f" {{mhlo.backend_config = {{{config}}}}}" if config else ""
    res = results[0] if len(results) == 1 else "(" + ", ".join(results) + ")"
    lhs = "%0" if len(results) == 1 else f"%0:{len(results)}"
    ret = "%0" if len(results) == 1 else "%0#0"
    a = _single(
        f"{lhs} = stablehlo.custom_call @{target}({names}){cfg} : ({', '.join(operands)}) -> {res}\n return {ret} : {results[0]}",
        args,
        results[0],
    )
    return a.cost(a.ops("stablehlo.custom_call")[0])


def test_lu_counts_lawn41():
    m, n = 64, 32  # LAWN 41: getrf of an m x n matrix, m >= n
    c = _linalg("lapack_sgetrf_ffi", [f"tensor<{m}x{n}xf32>"], [f"tensor<{m}x{n}xf32>", f"tensor<{n}xi32>", "tensor<i32>"])
    assert c["flops"] == round(m * n**2 - n**3 / 3)
    assert c["bytes_read"] == m * n * 4 and c["bytes_written"] == m * n * 4 + n * 4 + 4


def test_batched_eigh_with_vectors_counts_golub_van_loan():
    b, n = 3, 16  # symmetric QR with eigenvectors: 9 n^3 per matrix (GvL 4th ed. sec. 8.3)
    c = _linalg("cusolver_syevd_ffi", [f"tensor<{b}x{n}x{n}xf32>"], [f"tensor<{b}x{n}x{n}xf32>", f"tensor<{b}x{n}xf32>", f"tensor<{b}xi32>"])
    assert c["flops"] == b * 9 * n**3
    c = _linalg("lapack_ssyevd_ffi", [f"tensor<{n}x{n}xf32>"], [f"tensor<{n}x{n}xf32>", f"tensor<{n}xf32>", "tensor<i32>"], "mode = 78 : ui8")
    assert c["flops"] == round(4 * n**3 / 3)  # mode 'N': eigenvalues only


@pytest.mark.parametrize("mode,formula", [
    (ord("N"), lambda m, n: 4 * m * n**2 - 4 * n**3 / 3),          # singular values only
    (ord("S"), lambda m, n: 14 * m * n**2 + 8 * n**3),              # thin U and V
    (ord("A"), lambda m, n: 4 * m**2 * n + 8 * m * n**2 + 9 * n**3),  # full U and V
])
def test_svd_counts_golub_reinsch(mode, formula):
    m, n = 48, 16
    c = _linalg("lapack_sgesdd_ffi", [f"tensor<{m}x{n}xf32>"], [f"tensor<{m}x{n}xf32>", f"tensor<{n}xf32>", "tensor<i32>"], f"mode = {mode} : ui8")
    assert c["flops"] == round(formula(m, n))
    # a wide matrix counts as its transpose
    c = _linalg("lapack_sgesdd_ffi", [f"tensor<{n}x{m}xf32>"], [f"tensor<{n}x{m}xf32>", f"tensor<{n}xf32>", "tensor<i32>"], f"mode = {mode} : ui8")
    assert c["flops"] == round(formula(m, n))


def test_complex_qr_is_four_real_flops_per_flop():
    m, n = 32, 32  # geqrf: 2 m n^2 - 2 n^3 / 3 (LAWN 41); a complex flop = 4 real ones
    c = _linalg("lapack_cgeqrf_ffi", [f"tensor<{m}x{n}xcomplex<f32>>"], [f"tensor<{m}x{n}xcomplex<f32>>", f"tensor<{n}xcomplex<f32>>"])
    assert c["flops"] == round(4 * (2 * m * n**2 - 2 * n**3 / 3))


def test_cpu_triangular_solve_is_xla_count():
    n, k = 32, 8  # as stablehlo.triangular_solve: 2 x n x elements of b
    c = _linalg("lapack_strsm_ffi", [f"tensor<{n}x{n}xf32>", f"tensor<{n}x{k}xf32>"], [f"tensor<{n}x{k}xf32>"])
    assert c["flops"] == 2 * n * (n * k)


def test_pivots_to_permutation_moves_bytes_only():
    c = _linalg("cu_lu_pivots_to_permutation", ["tensor<4x64xi32>"], ["tensor<4x64xi32>"])
    assert c == {"flops": 0, "transcendentals": 0, "bytes_read": 4 * 64 * 4, "bytes_written": 4 * 64 * 4}


def test_unknown_linalg_routine_and_shape_assertion():
    a = run_annotate('func.func public @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {\n'
                     ' %0 = stablehlo.custom_call @lapack_sfoo_ffi(%a) : (tensor<4x4xf32>) -> tensor<4x4xf32>\n return %0 : tensor<4x4xf32>\n}')
    assert a.totals.unsupported == 1
    # JAX's shape-polymorphic exports check dimension sizes with @shape_assertion: free
    a = _single(' %c = stablehlo.constant dense<true> : tensor<i1>\n'
                ' stablehlo.custom_call @shape_assertion(%c) {has_side_effect = true} : (tensor<i1>) -> ()\n return %a : tensor<4xf32>',
                "%a: tensor<4xf32>", "tensor<4xf32>")
    assert a.totals.flops == 0


def test_known_uncosted_custom_calls_say_what_is_left_out():
    """A Pallas kernel stays uncosted, with a reason that says its work is not in the step;
    a ragged all-to-all (a collective, costmodel.collectives) moves its bytes locally, as
    stablehlo.all_to_all does."""
    a = run_annotate('func.func public @main(%a: tensor<64x128xbf16>) -> tensor<64x128xbf16> {\n'
                     ' %0 = stablehlo.custom_call @tpu_custom_call(%a) {backend_config = "x"} : (tensor<64x128xbf16>) -> tensor<64x128xbf16>\n'
                     ' return %0 : tensor<64x128xbf16>\n}')
    assert a.totals.unsupported == 1
    (d,) = a.diagnostics
    assert "'tpu_custom_call' is a Pallas/Mosaic TPU kernel without a cost estimate" in d.message
    assert "its work is not in the step" in d.message
    from conftest import RAGGED_ALL_TO_ALL

    a = run_annotate(RAGGED_ALL_TO_ALL)
    c = a.cost(a.ops("stablehlo.custom_call")[0])
    data, ints = 64 * 128 * 2, 8 * 4  # bf16 operand and output buffer; four i32 vectors
    assert c == {"flops": 0, "transcendentals": 0, "bytes_read": 2 * data + 4 * ints, "bytes_written": data}


def test_pallas_tpu_kernel_costs_its_declared_estimate():
    """pallas_call(..., cost_estimate=pl.CostEstimate(flops, transcendentals,
    bytes_accessed)) on TPU: JAX writes the estimate into the custom call's backend_config
    (as XLA reads it); the kernel costs it, its result bytes written, the rest read."""
    n = 256 * 256
    cfg = ('{\\22custom_call_config\\22: {\\22body\\22: \\22TUzv\\22, \\22cost_estimate\\22: {\\22bytes_accessed\\22: '
           f'{3 * n * 4}, \\22flops\\22: {2 * n}, \\22remote_bytes_transferred\\22: 0, \\22transcendentals\\22: {n}}}}}}}')
    a = _single(f' %0 = stablehlo.custom_call @tpu_custom_call(%a, %b) {{backend_config = "{cfg}", kernel_name = "kernel"}} : '
                '(tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>\n return %0 : tensor<256x256xf32>',
                "%a: tensor<256x256xf32>, %b: tensor<256x256xf32>", "tensor<256x256xf32>")
    c = a.cost(a.ops("stablehlo.custom_call")[0])
    assert c == {"flops": 2 * n, "transcendentals": n, "bytes_read": 2 * n * 4, "bytes_written": n * 4}


def _fmha(target: str, mask: str, window: int = 0) -> dict:
    b, t, n, h = 2, 128, 4, 64  # BTNH, as jax.nn.dot_product_attention(implementation="cudnn")
    cfg = ('{\\22operation_queue_id\\22: \\220\\22, \\22cudnn_fmha_backend_config\\22: {\\22intermediate_tensor_shape\\22: '
           f'{{\\22dimensions\\22: [\\22{b}\\22, \\22{n}\\22, \\22{t}\\22, \\22{t}\\22]}}, \\22mask_type\\22: \\22{mask}\\22, '
           f'\\22sliding_window_length\\22: {window}}}}}')
    qkv = f"tensor<{b}x{t}x{n}x{h}xbf16>"
    out = f"tensor<{b}x{n}x{t}x{h}xbf16>"
    a = _single(f' %0:3 = stablehlo.custom_call @{target}(%q, %k, %v) {{backend_config = "{cfg}"}} : '
                f'({qkv}, {qkv}, {qkv}) -> ({out}, tensor<{b}x{n}x{t}xf32>, tensor<0xui8>)\n return %0#0 : {out}',
                f"%q: {qkv}, %k: {qkv}, %v: {qkv}", out)
    return a.cost(a.ops("stablehlo.custom_call")[0])


def test_cudnn_flash_attention_counts():
    """cuDNN's fused attention: forward 2 x B x N x pairs x (H_qk + H_v) flops, backward
    five matmuls (FlashAttention-2: 2 x B x N x pairs x (3 H_qk + 2 H_v)); a causal mask
    keeps the pairs on and below the diagonal, a sliding window fewer still."""
    b, t, n, h = 2, 128, 4, 64
    full = t * t
    causal = t * (t + 1) // 2
    assert _fmha("__cudnn$fmhaSoftmax", "NO_MASK")["flops"] == 2 * b * n * full * (h + h)
    c = _fmha("__cudnn$fmhaSoftmax", "CAUSAL")
    assert c["flops"] == 2 * b * n * causal * (h + h) and c["transcendentals"] == b * n * causal
    assert _fmha("__cudnn$fmhaSoftmaxBackward", "CAUSAL")["flops"] == 2 * b * n * causal * (3 * h + 2 * h)
    w = 32  # each query sees at most the 32 keys up to itself
    windowed = w * (w + 1) // 2 + (t - w) * w
    assert _fmha("__cudnn$fmhaSoftmax", "CAUSAL", w)["flops"] == 2 * b * n * windowed * (h + h)


def test_block_scaled_dot_is_a_gemm():
    """jax.nn.scaled_matmul on GPU (MXFP8): (batch, M, K) x (batch, N, K) -> (batch, M, N)."""
    bt, m, n, k = 2, 64, 32, 128
    a = _single(f' %0 = stablehlo.custom_call @__op$block_scaled_dot(%a, %b, %sa, %sb) : (tensor<{bt}x{m}x{k}xf8E4M3FN>, '
                f'tensor<{bt}x{n}x{k}xf8E4M3FN>, tensor<{bt}x{m}x4xf8E8M0FNU>, tensor<{bt}x{n}x4xf8E8M0FNU>) -> tensor<{bt}x{m}x{n}xbf16>\n'
                f' return %0 : tensor<{bt}x{m}x{n}xbf16>',
                f"%a: tensor<{bt}x{m}x{k}xf8E4M3FN>, %b: tensor<{bt}x{n}x{k}xf8E4M3FN>, %sa: tensor<{bt}x{m}x4xf8E8M0FNU>, "
                f"%sb: tensor<{bt}x{n}x4xf8E8M0FNU>", f"tensor<{bt}x{m}x{n}xbf16>")
    c = a.cost(a.ops("stablehlo.custom_call")[0])
    assert c["flops"] == 2 * bt * m * n * k  # one FMA = 2 flops
    assert c["bytes_read"] == bt * (m + n) * k + bt * (m + n) * 4 and c["bytes_written"] == bt * m * n * 2


def test_valid_taps_loops_over_the_shorter_of_kernel_and_output():
    """_valid_taps counts (output, tap) pairs that read a real input element as XLA's
    GetConvolutionFlops does; it loops over taps or over outputs, whichever is fewer (a
    10^10-tap window over one output hung annotate-cost), both equal to brute force, and
    a window too large both ways is unsupported with a reason."""
    import random

    from costmodel.rules import Unsupported, _valid_taps

    def brute(i, k, o, s, p, ld, rd):
        top = (i - 1) * ld
        return sum(1 for oo in range(o) for kk in range(k)
                   if 0 <= oo * s - p + kk * rd <= top and (oo * s - p + kk * rd) % ld == 0)

    rng = random.Random(7)
    for _ in range(500):
        args = (rng.randint(1, 10), rng.randint(1, 10), rng.randint(1, 12), rng.randint(1, 3),
                rng.randint(-3, 5), rng.randint(1, 3), rng.randint(1, 3))
        assert _valid_taps(*args) == brute(*args), args
    assert _valid_taps(10**10, 10**10, 1, 1, 0, 1, 1) == 10**10  # one output reads every tap
    with pytest.raises(Unsupported, match="too large to count its valid taps"):
        _valid_taps(10**10, 10**10, 10**9, 1, 0, 1, 1)
