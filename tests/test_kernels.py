"""Kernel formation (costmodel.kernels) on small modules: what fuses, what does not, and
the bytes of each kernel (external inputs and outputs only)."""

from __future__ import annotations

import re

import pytest

from conftest import run_annotate
from costmodel.ir import ir

F32 = 4  # bytes per f32 element
BF16 = 2


def kernels(a) -> list[dict]:
    """The costmodel.kernel_cost dicts of the module, in walk order."""
    out = []
    for op in a.ops():
        if "costmodel.kernel_cost" in op.attributes:
            d = ir.DictAttr(op.attributes["costmodel.kernel_cost"])
            k = {"root": op.name}
            for key in ("id", "ops", "launches", "flops", "transcendentals", "bytes_read", "bytes_written"):
                k[key] = ir.IntegerAttr(d[key]).value
            k["kind"] = ir.StringAttr(d["kind"]).value
            k["time_ns"] = ir.FloatAttr(d["time_ns"]).value
            out.append(k)
    return out


def summary(a) -> dict:
    d = ir.DictAttr(a.module.attributes["costmodel.summary"])
    return {d[i].name: d[i].attr for i in range(len(d))}


def kernel_ids(a) -> dict[str, int]:
    return {
        op.name: ir.IntegerAttr(op.attributes["costmodel.kernel"]).value
        for op in a.ops()
        if "costmodel.kernel" in op.attributes
    }


CHAIN = """
func.func @main(%x: tensor<1024x1024xf32>, %y: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %0 = stablehlo.add %x, %y : tensor<1024x1024xf32>
  %1 = stablehlo.multiply %0, %x : tensor<1024x1024xf32>
  %2 = stablehlo.exponential %1 : tensor<1024x1024xf32>
  return %2 : tensor<1024x1024xf32>
}
"""


def test_elementwise_chain_is_one_kernel():
    a = run_annotate(CHAIN, fusion="xla-gpu")
    (k,) = kernels(a)
    n = 1024 * 1024
    assert k["kind"] == "loop" and k["ops"] == 3
    assert k["bytes_read"] == 2 * n * F32  # x and y once each; %0 and %1 stay on chip
    assert k["bytes_written"] == n * F32
    assert k["flops"] == 2 * n and k["transcendentals"] == n
    s = summary(a)
    assert ir.IntegerAttr(s["kernel_count"]).value == 1
    assert ir.IntegerAttr(s["kernel_bytes"]).value == 3 * n * F32
    # the time sits on the root, once; the per-op counts stay XLA's unfused ones
    ops = {op.name: a.cost(op) for op in a.ops() if op.name.startswith("stablehlo.")}
    assert ops["stablehlo.add"]["bytes_read"] == 2 * n * F32
    assert a.totals.time_ns == pytest.approx(k["time_ns"])
    assert len(set(kernel_ids(a).values())) == 1


def test_fusion_none_is_per_op_and_has_no_kernel_attributes():
    a = run_annotate(CHAIN, fusion="none")
    assert not kernels(a) and not kernel_ids(a)
    s = summary(a)
    assert "kernel_count" not in s and "fusion" not in s
    n = 1024 * 1024
    # three ops, each reading and writing HBM: (2 + 2 + 1) reads and 3 writes of n f32
    assert a.totals.bytes_read + a.totals.bytes_written == (5 + 3) * n * F32


def test_fused_time_is_below_unfused_time():
    fused = run_annotate(CHAIN, fusion="xla-gpu").totals.time_ns
    unfused = run_annotate(CHAIN, fusion="none").totals.time_ns
    assert fused == pytest.approx(unfused * 3 / 8)  # memory bound: 3 of the 8 tensors move


REDUCTIONS = """
func.func @main(%x: tensor<256x1024xf32>) -> (tensor<256xf32>, tensor<256xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %e = stablehlo.exponential %x : tensor<256x1024xf32>
  %s = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [1] : (tensor<256x1024xf32>, tensor<f32>) -> tensor<256xf32>
  %sq = stablehlo.multiply %x, %x : tensor<256x1024xf32>
  %q = stablehlo.reduce(%sq init: %z) applies stablehlo.add across dimensions = [1] : (tensor<256x1024xf32>, tensor<f32>) -> tensor<256xf32>
  return %s, %q : tensor<256xf32>, tensor<256xf32>
}
"""


def test_sibling_reductions_share_one_input_fusion():
    a = run_annotate(REDUCTIONS, fusion="xla-gpu")
    (k,) = kernels(a)
    assert k["kind"] == "input" and k["launches"] == 1
    assert k["bytes_read"] == 256 * 1024 * F32  # x read once for both reductions
    assert k["bytes_written"] == 2 * 256 * F32


BIAS_BROADCAST = """
func.func @main(%x: tensor<512x256xf32>, %b: tensor<256xf32>, %z: tensor<f32>) -> (tensor<512x256xf32>, tensor<512xf32>) {
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<256xf32>) -> tensor<512x256xf32>
  %0 = stablehlo.add %x, %bb : tensor<512x256xf32>
  %1 = stablehlo.multiply %x, %bb : tensor<512x256xf32>
  %r = stablehlo.reduce(%1 init: %z) applies stablehlo.maximum across dimensions = [1] : (tensor<512x256xf32>, tensor<f32>) -> tensor<512xf32>
  return %0, %r : tensor<512x256xf32>, tensor<512xf32>
}
"""


def test_cheap_broadcast_is_duplicated_into_each_consumer():
    a = run_annotate(BIAS_BROADCAST, fusion="xla-gpu")
    ks = kernels(a)
    assert {k["kind"] for k in ks} == {"loop", "input"} and len(ks) == 2
    for k in ks:
        # each kernel reads x and the 256-element bias (not the broadcast 512x256 tensor)
        assert k["bytes_read"] == 512 * 256 * F32 + 256 * F32 + (4 if k["kind"] == "input" else 0)
    assert "stablehlo.broadcast_in_dim" not in [k["root"] for k in ks]


def test_expensive_producer_is_not_fused_into_a_broadcast():
    text = """
func.func @main(%v: tensor<256xf32>, %x: tensor<256x256xf32>) -> tensor<256x256xf32> {
  %e = stablehlo.exponential %v : tensor<256xf32>
  %b = stablehlo.broadcast_in_dim %e, dims = [0] : (tensor<256xf32>) -> tensor<256x256xf32>
  %0 = stablehlo.add %x, %b : tensor<256x256xf32>
  return %0 : tensor<256x256xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    roots = sorted(k["root"] for k in kernels(a))
    assert roots == ["stablehlo.add", "stablehlo.exponential"]


GEMM_EPILOGUE = """
func.func @main(%x: tensor<512x1024xbf16>, %w: tensor<1024x2048xbf16>, %b: tensor<2048xbf16>) -> tensor<512x2048xbf16> {
  %d = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<512x1024xbf16>, tensor<1024x2048xbf16>) -> tensor<512x2048xbf16>
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<2048xbf16>) -> tensor<512x2048xbf16>
  %0 = stablehlo.add %d, %bb : tensor<512x2048xbf16>
  %z = stablehlo.constant dense<0.0> : tensor<512x2048xbf16>
  %1 = stablehlo.maximum %0, %z : tensor<512x2048xbf16>
  return %1 : tensor<512x2048xbf16>
}
"""


def test_dot_takes_bias_relu_epilogue():
    a = run_annotate(GEMM_EPILOGUE, fusion="xla-gpu")
    (k,) = kernels(a)
    assert k["kind"] == "gemm"
    assert k["flops"] == 2 * 512 * 2048 * 1024 + 2 * 512 * 2048  # one FMA = 2 flops; add + max per element
    assert k["bytes_read"] == (512 * 1024 + 1024 * 2048 + 2048) * BF16
    assert k["bytes_written"] == 512 * 2048 * BF16


CONV_ADD = """
func.func @main(%x: tensor<8x32x32x64xbf16>, %w: tensor<3x3x64x64xbf16>, %y: tensor<8x32x32x64xbf16>) -> tensor<8x32x32x64xbf16> {
  %c = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x32x32x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<8x32x32x64xbf16>
  %0 = stablehlo.add %c, %y : tensor<8x32x32x64xbf16>
  return %0 : tensor<8x32x32x64xbf16>
}
"""


@pytest.mark.parametrize("fusion,count", [("xla-gpu", 2), ("xla-tpu", 1)])
def test_convolution_epilogue_gpu_vs_tpu(fusion, count):
    a = run_annotate(CONV_ADD, fusion=fusion)
    ks = kernels(a)
    assert len(ks) == count
    assert "conv" in {k["kind"] for k in ks}


@pytest.mark.parametrize("fusion,launches", [("xla-gpu", 2), ("xla-tpu", 1)])
def test_large_column_reduction_is_split_on_gpu(fusion, launches):
    text = """
func.func @main(%x: tensor<64x56x56x64xf32>) -> tensor<64xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<64x56x56x64xf32>, tensor<f32>) -> tensor<64xf32>
  return %r : tensor<64xf32>
}
"""
    a = run_annotate(text, fusion=fusion)
    (k,) = kernels(a)
    reduced = 64 * 56 * 56  # > XLA GPU's column race-free bound 32 * 128
    assert reduced > 32 * 128
    assert k["launches"] == launches
    assert ir.IntegerAttr(summary(a)["kernel_count"]).value == launches


def test_collective_is_a_boundary_and_not_a_kernel():
    text = """
module attributes {mhlo.num_replicas = 4 : i32} {
  func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
    %0 = stablehlo.multiply %x, %x : tensor<1024xf32>
    %1 = "stablehlo.all_reduce"(%0) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<1024xf32>) -> tensor<1024xf32>
    %2 = stablehlo.add %1, %x : tensor<1024xf32>
    return %2 : tensor<1024xf32>
  }
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    roots = [k["root"] for k in kernels(a)]
    assert roots == ["stablehlo.multiply", "stablehlo.add"]
    assert "stablehlo.all_reduce" not in kernel_ids(a)


def test_loop_body_kernels_count_per_iteration():
    text = """
func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  %c10 = stablehlo.constant dense<10> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<1024xf32>
   cond {
    %p = stablehlo.compare LT, %i, %c10 : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %n = stablehlo.add %i, %c1 : tensor<i32>
    %e = stablehlo.exponential %v : tensor<1024xf32>
    %m = stablehlo.multiply %e, %v : tensor<1024xf32>
    stablehlo.return %n, %m : tensor<i32>, tensor<1024xf32>
  }
  return %r#1 : tensor<1024xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    s = summary(a)
    trip = 10
    # per iteration: the compare (cond), the counter add, the exp*mul chain
    per_iteration = len([k for k in kernels(a)])
    assert per_iteration == 3
    assert ir.IntegerAttr(s["kernel_count"]).value == trip * per_iteration


def test_given_fusions_are_not_refused():
    text = """
module {
  func.func private @fused_exp(%a: tensor<8xf32>) -> tensor<8xf32> {
    %0 = stablehlo.exponential %a : tensor<8xf32>
    %1 = stablehlo.add %0, %a : tensor<8xf32>
    return %1 : tensor<8xf32>
  }
  func.func @main(%a: tensor<8xf32>) -> tensor<8xf32> {
    %0 = "mhlo.fusion"(%a) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({
    ^bb0(%x: tensor<8xf32>):
      %1 = stablehlo.multiply %x, %x : tensor<8xf32>
      mhlo.return %1 : tensor<8xf32>
    }) : (tensor<8xf32>) -> tensor<8xf32>
    %b = mhlo.bitcast %0 : (tensor<8xf32>) -> tensor<2x4xf32>
    %c = mhlo.bitcast %b : (tensor<2x4xf32>) -> tensor<8xf32>
    %2 = func.call @fused_exp(%c) : (tensor<8xf32>) -> tensor<8xf32>
    %3 = stablehlo.negate %2 : tensor<8xf32>
    return %3 : tensor<8xf32>
  }
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    s = summary(a)
    assert ir.StringAttr(s["fusion"]).value == "given"
    ks = kernels(a)
    assert sorted(k["root"] for k in ks) == ["func.call", "mhlo.fusion", "stablehlo.negate"]
    call = [k for k in ks if k["root"] == "func.call"][0]
    assert call["flops"] == 8 and call["transcendentals"] == 8
    assert call["bytes_read"] == 8 * F32 and call["bytes_written"] == 8 * F32
    assert a.engine.unsupported_ops == {}


def test_fusion_option_in_the_pass(tmp_path):
    from costmodel import driver

    p = tmp_path / "m.mlir"
    p.write_text(CHAIN)
    out = tmp_path / "o.mlir"
    assert driver.main([str(p), "--annotate-cost=hardware=tpu-v5p", "-o", str(out)]) == 0
    assert 'fusion = "xla-tpu"' in out.read_text()
    assert driver.main([str(p), "--annotate-cost=hardware=a100-40gb fusion=bogus", "-o", str(out)]) == 1
    assert driver.main([str(p), "--annotate-cost=hardware=a100-40gb fusion=none", "-o", str(out)]) == 0
    assert "costmodel.kernel" not in out.read_text()
    assert re.search(r"costmodel.kernel = \d", CHAIN) is None
