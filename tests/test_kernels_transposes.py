"""Kernel formation (xla-gpu) of transposes, as XLA GPU's cost model and simplifiers treat
them: no minor-dimension transpose inside a reduction kernel (IsReadCoalescedHeuristic),
a transpose of a dot's result formed as the dot's output layout (AlgebraicSimplifier /
GPU layout assignment)."""

from __future__ import annotations

from conftest import run_annotate
from test_kernels import BF16, F32, kernel_ids, kernels

N = 8 * 1024 * 1024  # elements of an 8x1024x1024 tensor

# the softmax backward whose gradient is transposed in its two minor dims: the transpose
# does not go into the reduction (XLA: input_transpose_fusion, then the reduction)
TRANSPOSE_REDUCE = """
func.func @main(%dp: tensor<8x1024x1024xbf16>, %p: tensor<8x1024x1024xbf16>) -> tensor<8x1024x1024xbf16> {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %t = stablehlo.transpose %dp, dims = [0, 2, 1] : (tensor<8x1024x1024xbf16>) -> tensor<8x1024x1024xbf16>
  %tf = stablehlo.convert %t : (tensor<8x1024x1024xbf16>) -> tensor<8x1024x1024xf32>
  %pf = stablehlo.convert %p : (tensor<8x1024x1024xbf16>) -> tensor<8x1024x1024xf32>
  %y = stablehlo.multiply %tf, %pf : tensor<8x1024x1024xf32>
  %r = stablehlo.reduce(%y init: %zero) applies stablehlo.add across dimensions = [2] : (tensor<8x1024x1024xf32>, tensor<f32>) -> tensor<8x1024xf32>
  %rb = stablehlo.broadcast_in_dim %r, dims = [0, 1] : (tensor<8x1024xf32>) -> tensor<8x1024x1024xf32>
  %s = stablehlo.subtract %tf, %rb : tensor<8x1024x1024xf32>
  %z = stablehlo.multiply %s, %pf : tensor<8x1024x1024xf32>
  %zb = stablehlo.convert %z : (tensor<8x1024x1024xf32>) -> tensor<8x1024x1024xbf16>
  return %zb : tensor<8x1024x1024xbf16>
}
"""


def test_minor_dimension_transpose_stays_out_of_a_reduction():
    a = run_annotate(TRANSPOSE_REDUCE, fusion="xla-gpu")
    ks = kernels(a)
    ids = kernel_ids(a)
    assert len(ks) == 3
    assert ids["stablehlo.transpose"] != ids["stablehlo.reduce"]
    (t,) = [k for k in ks if k["id"] == ids["stablehlo.transpose"]]
    assert (t["bytes_read"], t["bytes_written"]) == (N * BF16, N * BF16)
    # xla-tpu has no such rule: the transpose is copied into the reduction and the epilogue
    assert len(kernels(run_annotate(TRANSPOSE_REDUCE, fusion="xla-tpu"))) == 2


def test_transposes_that_keep_the_minor_dimension_or_move_a_broadcast_still_fuse():
    keeps = TRANSPOSE_REDUCE.replace("%dp: tensor<8x1024x1024xbf16>", "%dp: tensor<1024x8x1024xbf16>").replace(
        "dims = [0, 2, 1] : (tensor<8x1024x1024xbf16>)", "dims = [1, 0, 2] : (tensor<1024x8x1024xbf16>)")
    assert len(kernels(run_annotate(keeps, fusion="xla-gpu"))) == 2
    bcast = """
func.func @main(%v: tensor<8x1024xbf16>, %p: tensor<8x1024x1024xf32>) -> tensor<8x1024xf32> {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %v, dims = [0, 1] : (tensor<8x1024xbf16>) -> tensor<8x1024x1024xbf16>
  %t = stablehlo.transpose %b, dims = [0, 2, 1] : (tensor<8x1024x1024xbf16>) -> tensor<8x1024x1024xbf16>
  %tf = stablehlo.convert %t : (tensor<8x1024x1024xbf16>) -> tensor<8x1024x1024xf32>
  %y = stablehlo.multiply %tf, %p : tensor<8x1024x1024xf32>
  %r = stablehlo.reduce(%y init: %zero) applies stablehlo.add across dimensions = [2] : (tensor<8x1024x1024xf32>, tensor<f32>) -> tensor<8x1024xf32>
  return %r : tensor<8x1024xf32>
}
"""
    (k,) = kernels(run_annotate(bcast, fusion="xla-gpu"))
    assert k["kind"] == "input"


# a weight gradient as JAX writes it: transpose(dot_general(dy, x))
WGRAD = """
func.func @main(%x: tensor<256x4096xf32>, %dy: tensor<256x4096xf32>) -> tensor<4096x4096xf32> {
  %g = stablehlo.dot_general %dy, %x, contracting_dims = [0] x [0] : (tensor<256x4096xf32>, tensor<256x4096xf32>) -> tensor<4096x4096xf32>
  %t = stablehlo.transpose %g, dims = [1, 0] : (tensor<4096x4096xf32>) -> tensor<4096x4096xf32>
  return %t : tensor<4096x4096xf32>
}
"""


def test_transpose_of_a_dot_is_its_output_layout_on_gpu():
    (k,) = kernels(run_annotate(WGRAD, fusion="xla-gpu"))
    assert k["kind"] == "gemm"
    assert k["bytes_read"] == 2 * 256 * 4096 * F32
    assert k["bytes_written"] == 4096 * 4096 * F32
    # xla-tpu folds it as an epilogue: the same bytes
    (kt,) = kernels(run_annotate(WGRAD, fusion="xla-tpu"))
    assert (kt["bytes_read"], kt["bytes_written"]) == (k["bytes_read"], k["bytes_written"])


def test_transpose_of_a_dot_with_an_epilogue_and_of_a_dot_read_twice():
    mlp = """
func.func @main(%x: tensor<512x1024xbf16>, %w: tensor<1024x2048xbf16>) -> tensor<2048x512xf32> {
  %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<512x1024xbf16>, tensor<1024x2048xbf16>) -> tensor<512x2048xbf16>
  %t = stablehlo.transpose %y, dims = [1, 0] : (tensor<512x2048xbf16>) -> tensor<2048x512xbf16>
  %c = stablehlo.convert %t : (tensor<2048x512xbf16>) -> tensor<2048x512xf32>
  return %c : tensor<2048x512xf32>
}
"""
    (k,) = kernels(run_annotate(mlp, fusion="xla-gpu"))  # the convert: a cuBLAS output type
    assert k["kind"] == "gemm"
    assert k["bytes_written"] == 2048 * 512 * F32
    # the dot's result also read by another op: a transpose kernel of its own, as before
    twice = """
func.func @main(%x: tensor<512x1024xbf16>, %w: tensor<1024x2048xbf16>) -> (tensor<2048x512xbf16>, tensor<512x2048xbf16>) {
  %y = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<512x1024xbf16>, tensor<1024x2048xbf16>) -> tensor<512x2048xbf16>
  %t = stablehlo.transpose %y, dims = [1, 0] : (tensor<512x2048xbf16>) -> tensor<2048x512xbf16>
  return %t, %y : tensor<2048x512xbf16>, tensor<512x2048xbf16>
}
"""
    ks = kernels(run_annotate(twice, fusion="xla-gpu"))
    assert sorted(k["kind"] for k in ks) == ["gemm", "loop"]
