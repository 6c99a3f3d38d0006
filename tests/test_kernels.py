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
            for key in ("conv_padding", "conv"):
                if key in d:
                    k[key] = ir.StringAttr(d[key]).value
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


def _two_reductions(first_input: str, prologue: str = "") -> str:
    t = "tensor<256x1024xf32>"
    return f"""func.func @main(%x: {t}) -> (tensor<256xf32>, tensor<256xf32>) {{
  %z = stablehlo.constant dense<0.0> : tensor<f32>{prologue}
  %s = stablehlo.reduce({first_input} init: %z) applies stablehlo.add across dimensions = [1] : ({t}, tensor<f32>) -> tensor<256xf32>
  %m = stablehlo.reduce(%x init: %z) applies stablehlo.maximum across dimensions = [1] : ({t}, tensor<f32>) -> tensor<256xf32>
  return %s, %m : tensor<256xf32>, tensor<256xf32>
}}"""


def test_unfused_siblings_do_not_lead_a_merge():
    """XLA's FuseSiblings takes a fusion as the first of a pair: two reductions of a
    function argument, each an unfused op after priority fusion, stay two kernels (each
    reads x); with a producer fused into one of them (a fusion), they share one."""
    ks = kernels(run_annotate(_two_reductions("%x"), fusion="xla-gpu"))
    assert [k["bytes_read"] for k in ks] == [256 * 1024 * F32] * 2
    exp = "\n  %e = stablehlo.exponential %x : tensor<256x1024xf32>"
    (k,) = kernels(run_annotate(_two_reductions("%e", exp), fusion="xla-gpu"))
    assert k["bytes_read"] == 256 * 1024 * F32  # x read once for both


def _slice_siblings(rows: int, cols: int, second: str) -> str:
    """exp(x[0:half]) and exp(x[`second`]) of one 2-D parameter: siblings of x."""
    t = f"tensor<{rows}x{cols}xf32>"
    h = rows // 2
    ht = f"tensor<{h}x{cols}xf32>"
    return f"""func.func @main(%x: {t}) -> ({ht}, {ht}) {{
  %a = stablehlo.slice %x [0:{h}, 0:{cols}] : ({t}) -> {ht}
  %b = stablehlo.slice %x [{second}, 0:{cols}] : ({t}) -> {ht}
  %ea = stablehlo.exponential %a : {ht}
  %eb = stablehlo.exponential %b : {ht}
  return %ea, %eb : {ht}, {ht}
}}"""


@pytest.mark.parametrize(
    "rows, cols, second, kernels_expected",
    [
        (64, 256, "32:64", 2),  # disjoint halves of 64 KiB: nothing shared, two kernels
        (64, 256, "16:48", 1),  # overlapping: one multi-output kernel
        (2, 64, "1:2", 1),  # a parent of 512 bytes (< 1024): merged whatever the slices
    ],
)
def test_siblings_reading_disjoint_slices_stay_apart(rows, cols, second, kernels_expected):
    """ParameterSlicesAreNonOverlapping: siblings that read non-overlapping slices of
    their common parent (of at least 1024 bytes) share nothing worth a multi-output
    kernel."""
    assert len(kernels(run_annotate(_slice_siblings(rows, cols, second), fusion="xla-gpu"))) == kernels_expected


def test_a_returned_producer_joins_a_fusion_before_an_unfused_op():
    """SelectPreferredFusionCandidate: of the consumers a multi-output producer could
    join, the first of the highest FusionPriority. exp(x) is returned and read by a
    lone row sum (an unfused op) and by negate + column max (a fusion); the two
    reductions cannot share a kernel (other dimensions), and exp joins the fusion."""
    t = "tensor<256x1024xf32>"
    text = f"""func.func @main(%x: {t}) -> ({t}, tensor<256xf32>, tensor<1024xf32>) {{
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %e = stablehlo.exponential %x : {t}
  %s = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [1] : ({t}, tensor<f32>) -> tensor<256xf32>
  %n = stablehlo.negate %e : {t}
  %m = stablehlo.reduce(%n init: %z) applies stablehlo.maximum across dimensions = [0] : ({t}, tensor<f32>) -> tensor<1024xf32>
  return %e, %s, %m : {t}, tensor<256xf32>, tensor<1024xf32>
}}"""
    a = run_annotate(text, fusion="xla-gpu")
    ids = kernel_ids(a)
    assert ids["stablehlo.exponential"] == ids["stablehlo.negate"]


BIAS_BROADCAST = """
func.func @main(%x: tensor<512x256xf32>, %b: tensor<256xf32>, %z: tensor<f32>) -> (tensor<512x256xf32>, tensor<512xf32>) {
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<256xf32>) -> tensor<512x256xf32>
  %0 = stablehlo.add %x, %bb : tensor<512x256xf32>
  %1 = stablehlo.multiply %x, %bb : tensor<512x256xf32>
  %r = stablehlo.reduce(%1 init: %z) applies stablehlo.maximum across dimensions = [1] : (tensor<512x256xf32>, tensor<f32>) -> tensor<512xf32>
  return %0, %r : tensor<512x256xf32>, tensor<512xf32>
}
"""


def test_loop_and_reduction_over_one_tensor_are_one_multi_output_kernel():
    """XLA's sibling multi-output fusion: a loop kernel and a reduction that iterate over
    the same shape and read the same tensor share one kernel (ShapesCompatibleFor-
    MultiOutputFusion: a reduction iterates over its input); the broadcast bias is read
    as its 256 elements, not as the 512x256 tensor."""
    a = run_annotate(BIAS_BROADCAST, fusion="xla-gpu")
    (k,) = kernels(a)
    assert k["kind"] == "input"
    assert k["bytes_read"] == 512 * 256 * F32 + 256 * F32 + 4  # x, b and the init scalar %z, once
    assert k["bytes_written"] == 512 * 256 * F32 + 512 * F32  # %0 and %r


BROADCAST_TWO_SHAPES = """
func.func @main(%x: tensor<512x256xf32>, %y: tensor<128x256xf32>, %b: tensor<256xf32>) -> (tensor<512x256xf32>, tensor<128x256xf32>) {
  %bb = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<256xf32>) -> tensor<512x256xf32>
  %0 = stablehlo.add %x, %bb : tensor<512x256xf32>
  %s = stablehlo.slice %bb [0:128, 0:256] : (tensor<512x256xf32>) -> tensor<128x256xf32>
  %1 = stablehlo.multiply %y, %s : tensor<128x256xf32>
  return %0, %1 : tensor<512x256xf32>, tensor<128x256xf32>
}
"""


def test_cheap_broadcast_is_duplicated_into_each_consumer():
    """Priority fusion fuses a producer into all its consumers: the broadcast is copied into
    both kernels (of different shapes, so no sibling fusion); neither reads a 512x256 bias."""
    a = run_annotate(BROADCAST_TWO_SHAPES, fusion="xla-gpu")
    ks = sorted(kernels(a), key=lambda k: k["bytes_written"])
    assert [k["kind"] for k in ks] == ["loop", "loop"]
    assert ks[0]["bytes_read"] == 128 * 256 * F32 + 256 * F32  # y and b
    assert ks[1]["bytes_read"] == 512 * 256 * F32 + 256 * F32  # x and b
    assert "stablehlo.broadcast_in_dim" not in [k["root"] for k in ks]


def test_batch_norm_statistics_read_the_bf16_input_once():
    """BN statistics of a bf16 activation: the widening convert feeds both sums; XLA copies
    it into both reductions (a producer fused into all consumers) instead of writing an f32
    copy, and the two reductions of one input share a kernel."""
    text = """
func.func @main(%x: tensor<8x16x64xbf16>) -> (tensor<64xf32>, tensor<64xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %c = stablehlo.convert %x : (tensor<8x16x64xbf16>) -> tensor<8x16x64xf32>
  %s = stablehlo.reduce(%c init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x16x64xf32>, tensor<f32>) -> tensor<64xf32>
  %sq = stablehlo.multiply %c, %c : tensor<8x16x64xf32>
  %q = stablehlo.reduce(%sq init: %z) applies stablehlo.add across dimensions = [0, 1] : (tensor<8x16x64xf32>, tensor<f32>) -> tensor<64xf32>
  return %s, %q : tensor<64xf32>, tensor<64xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    (k,) = kernels(a)
    assert k["kind"] == "input" and k["launches"] == 1
    assert k["bytes_read"] == 8 * 16 * 64 * BF16  # x once, in bf16
    assert k["bytes_written"] == 2 * 64 * F32


def _many_reductions(n_consumers: int, side: int) -> str:
    """p = a + b read by `n_consumers` reductions over different dimensions (no two of
    them can share a kernel)."""
    t = f"tensor<{side}x{side}x{side}xf32>"
    dims = ([0], [1], [2], [0, 1], [1, 2])[:n_consumers]
    lines = [f"func.func @main(%a: {t}, %b: {t}) -> (" + ", ".join("tensor<*>" for _ in dims) + ") {"]
    lines.append("  %z = stablehlo.constant dense<0.0> : tensor<f32>")
    lines.append(f"  %p = stablehlo.add %a, %b : {t}")
    outs = []
    for i, d in enumerate(dims):
        out = f"tensor<{'x'.join(str(side) for _ in range(3 - len(d)))}xf32>"
        outs.append(out)
        lines.append(
            f"  %r{i} = stablehlo.reduce(%p init: %z) applies stablehlo.add across dimensions = {d} : ({t}, tensor<f32>) -> {out}"
        )
    lines.append("  return " + ", ".join(f"%r{i}" for i in range(len(dims))) + " : " + ", ".join(outs))
    lines.append("}")
    return "\n".join(lines).replace("(" + ", ".join("tensor<*>" for _ in dims) + ")", "(" + ", ".join(outs) + ")")


@pytest.mark.parametrize("n_consumers,copied", [(2, True), (4, False)])
def test_producer_copied_into_its_consumers_only_when_cheaper(n_consumers, copied):
    """XLA's priority (time unfused - time fused, GpuPerformanceModel) in bytes: p = a + b
    (two 8 MiB inputs, an 8 MiB result). Copied into n consumers, they read 2 x 8 MiB
    each; materialised, p costs 3 x 8 MiB and each consumer reads 8 MiB:
    copied: n x 16 MiB; materialised: 24 + n x 8 MiB (+ one launch, 1.555 MB)."""
    side = 128
    tensor = side**3 * F32  # 8 MiB
    a = run_annotate(_many_reductions(n_consumers, side), fusion="xla-gpu")
    ks = kernels(a)
    assert len(ks) == n_consumers
    reads_ab = [k for k in ks if k["bytes_read"] >= 2 * tensor]
    if copied:
        assert n_consumers * 2 * tensor < 3 * tensor + n_consumers * tensor + 1_555_000
        assert len(reads_ab) == n_consumers  # every consumer reads a and b
    else:
        assert n_consumers * 2 * tensor > 3 * tensor + n_consumers * tensor + 1_555_000
        # p is computed once, in the kernel of one reduction (multi-output: it writes p too)
        assert len(reads_ab) == 1 and reads_ab[0]["bytes_written"] > tensor
        # (the large reductions also read back a few KiB of tree-split partial sums)
        assert sum(k["bytes_read"] for k in ks) == pytest.approx(2 * tensor + (n_consumers - 1) * tensor, rel=0.01)


def test_reduction_takes_an_epilogue_but_not_its_broadcast_back():
    """A reduction fuses elementwise consumers of its result (the kernel stays a reduction);
    one that broadcasts the result back over the input (normalisation) is a second kernel
    ("fusion into output of a reduce fusion would create a loop fusion")."""
    text = """
func.func @main(%x: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %n = stablehlo.constant dense<1024.0> : tensor<256xf32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [1] : (tensor<256x1024xf32>, tensor<f32>) -> tensor<256xf32>
  %m = stablehlo.divide %s, %n : tensor<256xf32>
  %b = stablehlo.broadcast_in_dim %m, dims = [0] : (tensor<256xf32>) -> tensor<256x1024xf32>
  %y = stablehlo.subtract %x, %b : tensor<256x1024xf32>
  return %y : tensor<256x1024xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    ks = kernels(a)
    assert [k["kind"] for k in ks] == ["input", "loop"]
    assert ks[0]["root"] == "stablehlo.divide"  # the mean is the reduction's epilogue
    assert ks[0]["bytes_written"] == 256 * F32


def test_reduce_is_not_fused_into_a_reduce():
    text = """
func.func @main(%x: tensor<64x128x256xf32>) -> tensor<64xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [2] : (tensor<64x128x256xf32>, tensor<f32>) -> tensor<64x128xf32>
  %s = stablehlo.reduce(%r init: %z) applies stablehlo.add across dimensions = [1] : (tensor<64x128xf32>, tensor<f32>) -> tensor<64xf32>
  return %s : tensor<64xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    assert [k["kind"] for k in kernels(a)] == ["input", "input"]


def test_siblings_need_a_shared_tensor_not_a_scalar():
    """Sibling fusion merges kernels that read a common operand; effective scalars are no
    profitable shared operand (multi_output_fusion.cc IsProfitableOperand): two
    reductions of different tensors scaled by one scalar stay two kernels."""
    text = """
func.func @main(%x: tensor<256x1024xf32>, %y: tensor<256x1024xf32>, %s: tensor<f32>) -> (tensor<256xf32>, tensor<256xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %sb = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<256x1024xf32>
  %a = stablehlo.multiply %x, %sb : tensor<256x1024xf32>
  %b = stablehlo.multiply %y, %sb : tensor<256x1024xf32>
  %ra = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : (tensor<256x1024xf32>, tensor<f32>) -> tensor<256xf32>
  %rb = stablehlo.reduce(%b init: %z) applies stablehlo.add across dimensions = [1] : (tensor<256x1024xf32>, tensor<f32>) -> tensor<256xf32>
  return %ra, %rb : tensor<256xf32>, tensor<256xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    assert [k["kind"] for k in kernels(a)] == ["input", "input"]


def test_at_most_eight_reductions_per_kernel():
    """kMaxUnnestedReductionOutputsPerFusion = 8: ten sibling reductions of one tensor
    make two kernels."""
    t = "tensor<256x1024xf32>"
    lines = [f"func.func @main(%x: {t}) -> (" + ", ".join(["tensor<256xf32>"] * 10) + ") {"]
    lines.append("  %z = stablehlo.constant dense<0.0> : tensor<f32>")
    for i in range(10):
        lines.append(f"  %c{i} = stablehlo.constant dense<{i + 1}.0> : {t}")
        lines.append(f"  %m{i} = stablehlo.multiply %x, %c{i} : {t}")
        lines.append(
            f"  %r{i} = stablehlo.reduce(%m{i} init: %z) applies stablehlo.add across dimensions = [1] : ({t}, tensor<f32>) -> tensor<256xf32>"
        )
    lines.append("  return " + ", ".join(f"%r{i}" for i in range(10)) + " : " + ", ".join(["tensor<256xf32>"] * 10))
    lines.append("}")
    a = run_annotate("\n".join(lines), fusion="xla-gpu")
    ks = kernels(a)
    assert len(ks) == 2
    assert sorted(k["bytes_written"] // (256 * F32) for k in ks) == [2, 8]  # reductions per kernel


def _sibling_reductions(n: int, shape: tuple, dims: list, dtype: str) -> str:
    """`n` sum reductions of x * c_i over `dims`, all returned."""
    t = f"tensor<{'x'.join(map(str, shape))}x{dtype}>"
    kept = [s for d, s in enumerate(shape) if d not in dims]
    r = f"tensor<{'x'.join(map(str, kept))}x{dtype}>" if kept else f"tensor<{dtype}>"
    lines = [f"func.func @main(%x: {t}) -> (" + ", ".join([r] * n) + ") {"]
    lines.append(f"  %z = stablehlo.constant dense<0.0> : tensor<{dtype}>")
    for i in range(n):
        lines.append(f"  %c{i} = stablehlo.constant dense<{i + 1}.0> : {t}")
        lines.append(f"  %m{i} = stablehlo.multiply %x, %c{i} : {t}")
        lines.append(
            f"  %r{i} = stablehlo.reduce(%m{i} init: %z) applies stablehlo.add across dimensions = {dims} : ({t}, tensor<{dtype}>) -> {r}"
        )
    lines.append("  return " + ", ".join(f"%r{i}" for i in range(n)) + " : " + ", ".join([r] * n))
    lines.append("}")
    return "\n".join(lines)


# XLA GPU's shared memory per reduction (gpu_fusible.cc SharedMemoryUsageNoCache)
COLUMN_SMEM = 4 * 32 * 33  # elements: __shared__[4][32][33]
ROW_SMEM = 32  # elements: __shared__[32]
SMEM_PER_BLOCK = 48 * 1024  # bytes: CUDA's sharedMemPerBlock


@pytest.mark.parametrize(
    "dtype, nbytes, per_kernel",
    [
        ("f32", F32, SMEM_PER_BLOCK // (COLUMN_SMEM * F32)),  # 2: a third one is 50,688 B > 49,152 B
        ("bf16", BF16, SMEM_PER_BLOCK // (COLUMN_SMEM * BF16)),  # 5
    ],
)
def test_column_reductions_per_kernel_bounded_by_shared_memory(dtype, nbytes, per_kernel):
    """FusionFitsInBudget: the reductions of a multi-output kernel share a block's 48 KiB
    of shared memory; a column reduction (the minor dimension kept) takes 4 x 32 x 33
    elements of it. Six sibling column reductions of one tensor (4096 rows, one kernel
    each before fusion, no tree split) make ceil(6 / per_kernel) kernels on xla-gpu; the
    TPU has no such budget (one kernel, at most 8 reductions)."""
    text = _sibling_reductions(6, (4096, 64), [0], dtype)
    a = run_annotate(text, fusion="xla-gpu")
    ks = kernels(a)
    assert len(ks) == -(-6 // per_kernel)
    assert sorted(k["bytes_written"] // (64 * nbytes) for k in ks) == sorted(
        [per_kernel] * (6 // per_kernel) + ([6 % per_kernel] if 6 % per_kernel else [])
    )
    for k in ks:  # each kernel reads x once
        assert k["bytes_read"] == 4096 * 64 * nbytes  # x (the init value is a constant, folded in)
    (k,) = kernels(run_annotate(text, fusion="xla-tpu"))
    assert k["bytes_written"] == 6 * 64 * nbytes


def test_row_reductions_take_little_shared_memory():
    """A row reduction (the minor dimension reduced) takes 32 elements: eight of them
    (the reduction bound) fit in one kernel, as before the shared-memory budget."""
    assert 8 * ROW_SMEM * F32 <= SMEM_PER_BLOCK
    (k,) = kernels(run_annotate(_sibling_reductions(8, (64, 4096), [1], "f32"), fusion="xla-gpu"))
    assert k["bytes_written"] == 8 * 64 * F32


@pytest.mark.parametrize(
    "shape, dims, kind",
    [
        ((256, 1024), [1], (True, (1, 256, 1024))),  # row: [K, R]
        ((4096, 64), [0], (False, (1, 4096, 64))),  # column: [R, K]
        ((8, 512, 64), [1], (False, (8, 512, 64))),  # column: [K, R, K]
        ((8, 512, 64), [0, 2], (True, (8, 512, 64))),  # batched row: [R, K, R]
        ((64, 56, 56, 64), [0, 1, 2], (False, (1, 64 * 56 * 56, 64))),  # batch-norm statistics (NHWC)
        ((64, 56, 56, 64), [1, 2], (False, (64, 56 * 56, 64))),
        ((16, 32), [0, 1], (True, (1, 1, 16 * 32))),  # to a scalar
        ((4, 1, 8), [0, 2], (True, (1, 1, 4 * 8))),  # the kept dimensions have one element
        ((2, 3, 4, 5), [0, 2], None),  # neither consecutive: the elemental emitter
    ],
)
def test_reduction_kind_as_xla_gpu(shape, dims, kind):
    from costmodel.kernels.formation import _reduction_kind

    assert _reduction_kind(list(shape), dims) == kind


def test_small_column_reductions_need_no_shared_memory():
    """IsUnnestedReductionFasterThanElemental: a column reduction over fewer than 32
    rows is emitted elementwise (no shared memory), so eight of them share a kernel."""
    (k,) = kernels(run_annotate(_sibling_reductions(8, (16, 4096), [0], "f32"), fusion="xla-gpu"))
    assert k["bytes_written"] == 8 * 4096 * F32


def test_returned_producer_joins_its_consumer_as_an_extra_output():
    """Producer-consumer multi-output fusion: exp(x) is returned (so it cannot be fused
    away) and reduced; it is computed in the reduction's kernel, which writes it."""
    text = """
func.func @main(%x: tensor<256x1024xf32>) -> (tensor<256x1024xf32>, tensor<256xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %e = stablehlo.exponential %x : tensor<256x1024xf32>
  %r = stablehlo.reduce(%e init: %z) applies stablehlo.add across dimensions = [1] : (tensor<256x1024xf32>, tensor<f32>) -> tensor<256xf32>
  return %e, %r : tensor<256x1024xf32>, tensor<256xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    (k,) = kernels(a)
    assert k["bytes_read"] == 256 * 1024 * F32
    assert k["bytes_written"] == 256 * 1024 * F32 + 256 * F32


def test_multi_output_fusion_creates_no_cycle():
    """exp(x) feeds a dot and a reduction that also reads the dot: fusing it into the
    reduction's kernel would make that kernel both feed and wait for the dot."""
    text = """
func.func @main(%x: tensor<256x256xf32>, %w: tensor<256x256xf32>) -> tensor<256xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %e = stablehlo.exponential %x : tensor<256x256xf32>
  %d = stablehlo.dot_general %e, %w, contracting_dims = [1] x [0] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  %s = stablehlo.add %e, %d : tensor<256x256xf32>
  %r = stablehlo.reduce(%s init: %z) applies stablehlo.add across dimensions = [1] : (tensor<256x256xf32>, tensor<f32>) -> tensor<256xf32>
  return %r : tensor<256xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    assert sorted(k["kind"] for k in kernels(a)) == ["gemm", "input", "loop"]


def test_each_split_reduction_is_a_launch():
    """TreeReductionRewriter splits both statistics of a large column reduction; the first
    stages share a kernel, each second stage reads its own partial sums: 3 launches."""
    text = """
func.func @main(%x: tensor<64x56x56x64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<64x56x56x64xf32>, tensor<f32>) -> tensor<64xf32>
  %sq = stablehlo.multiply %x, %x : tensor<64x56x56x64xf32>
  %q = stablehlo.reduce(%sq init: %z) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<64x56x56x64xf32>, tensor<f32>) -> tensor<64xf32>
  return %s, %q : tensor<64xf32>, tensor<64xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    (k,) = kernels(a)
    assert k["launches"] == 1 + 2


# select_and_scatter's select (>=) and scatter (+) regions, as JAX writes max pooling's gradient
SAS_REGIONS = """({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %c = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }, {
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  })"""

MAX_POOL_BACKWARD = """
func.func @main(%x: tensor<8x8x8x4xf32>, %dy: tensor<8x4x4x4xf32>) -> tensor<8x8x8x4xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = "stablehlo.select_and_scatter"(%x, %dy, %z) <{window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>}> REGIONS : (tensor<8x8x8x4xf32>, tensor<8x4x4x4xf32>, tensor<f32>) -> tensor<8x8x8x4xf32>
  return %r : tensor<8x8x8x4xf32>
}
""".replace("REGIONS", SAS_REGIONS)


def test_select_and_scatter_is_expanded_on_gpu():
    """XLA GPU's SelectAndScatterExpander: init, select (reduce_window writing the value
    and one i32 index per dimension), index packing, scatter: 4 launches."""
    a = run_annotate(MAX_POOL_BACKWARD, fusion="xla-gpu")
    (k,) = kernels(a)
    operand, n, rank = 8 * 8 * 8 * 4 * F32, 8 * 4 * 4 * 4, 4
    index = 4 * rank * n
    assert k["launches"] == 4
    assert k["bytes_read"] == operand + index + (index + n * F32 + n * F32)
    assert k["bytes_written"] == operand + (n * F32 + index) + index + n * F32
    tpu = kernels(run_annotate(MAX_POOL_BACKWARD, fusion="xla-tpu"))
    assert tpu[0]["launches"] == 1 and tpu[0]["bytes_written"] == operand


# max pooling with SAME padding as JAX differentiates it: the operand padded with -inf,
# then select_and_scatter, then the padding sliced off
PADDED_MAX_POOL_BACKWARD = """
func.func @main(%x: tensor<8x8x8x4xf32>, %dy: tensor<8x4x4x4xf32>) -> tensor<8x8x8x4xf32> {
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %p = stablehlo.pad %x, %ninf, low = [0, 0, 0, 0], high = [0, 1, 1, 0], interior = [0, 0, 0, 0] : (tensor<8x8x8x4xf32>, tensor<f32>) -> tensor<8x9x9x4xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = "stablehlo.select_and_scatter"(%p, %dy, %z) <{window_dimensions = array<i64: 1, 3, 3, 1>, window_strides = array<i64: 1, 2, 2, 1>}> REGIONS : (tensor<8x9x9x4xf32>, tensor<8x4x4x4xf32>, tensor<f32>) -> tensor<8x9x9x4xf32>
  %y = stablehlo.slice %r [0:8, 0:8, 0:8, 0:4] : (tensor<8x9x9x4xf32>) -> tensor<8x8x8x4xf32>
  RESULT
}
""".replace("REGIONS", SAS_REGIONS)


@pytest.mark.parametrize("pad_read_elsewhere", [False, True])
def test_pad_of_a_select_and_scatter_operand_fuses_into_its_reduce_window(pad_read_elsewhere):
    """XLA GPU expands select_and_scatter before fusion; the pad of its operand then fuses
    into the reduce_window loop kernel (our H200 HLO of the ResNet step: the pad inside
    fused_reduce_window), which reads the unpadded operand. A pad that something else
    reads too stays a kernel of its own."""
    ret = ("%q = stablehlo.reduce(%p init: %z) applies stablehlo.add across dimensions = [0, 1, 2, 3] : (tensor<8x9x9x4xf32>, tensor<f32>) -> tensor<f32>\n"
           "  return %y, %q : tensor<8x8x8x4xf32>, tensor<f32>") if pad_read_elsewhere else "return %y : tensor<8x8x8x4xf32>"
    text = PADDED_MAX_POOL_BACKWARD.replace("RESULT", ret)
    if pad_read_elsewhere:
        text = text.replace("-> tensor<8x8x8x4xf32> {", "-> (tensor<8x8x8x4xf32>, tensor<f32>) {")
    a = run_annotate(text, fusion="xla-gpu")
    ks = kernels(a)
    sas = next(k for k in ks if k["root"] == "stablehlo.select_and_scatter")
    pads = [k for k in ks if k["root"] == "stablehlo.pad"]
    x, padded = 8 * 8 * 8 * 4 * F32, 8 * 9 * 9 * 4 * F32
    n, rank = 8 * 4 * 4 * 4, 4
    index = 4 * rank * n
    assert sas["launches"] == 4
    if pad_read_elsewhere:
        # the pad's result is needed elsewhere: written (by the reduction's kernel), and read
        assert sas["ops"] == 1
        assert sas["bytes_read"] == padded + index + (index + n * F32 + n * F32)
    else:
        assert sas["ops"] == 2 and pads == []  # the pad is inside, no kernel of its own
        # the select (reduce_window) reads the unpadded operand; init and scatter keep the padded shape
        assert sas["bytes_read"] == x + index + (index + n * F32 + n * F32)
        assert sas["bytes_written"] == padded + (n * F32 + index) + index + n * F32
    tpu = kernels(run_annotate(text, fusion="xla-tpu"))  # the rule is XLA GPU's expansion
    assert next(k for k in tpu if k["root"] == "stablehlo.select_and_scatter")["ops"] == 1


# a relu (max with a zero broadcast) before max pooling's gradient, as in a ResNet stem
RELU_MAX_POOL_BACKWARD = """
func.func @main(%h: tensor<8x8x8x4xf32>, %dy: tensor<8x4x4x4xf32>) -> (tensor<8x8x8x4xf32>, tensor<8x8x8x4xf32>) {
  %c0 = stablehlo.constant dense<ZERO> : tensor<f32>
  %zeros = stablehlo.broadcast_in_dim %c0, dims = [] : (tensor<f32>) -> tensor<8x8x8x4xf32>
  %x = stablehlo.maximum %h, %zeros : tensor<8x8x8x4xf32>
  %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %p = stablehlo.pad %x, %ninf, low = [0, 0, 0, 0], high = [0, 1, 1, 0], interior = [0, 0, 0, 0] : (tensor<8x8x8x4xf32>, tensor<f32>) -> tensor<8x9x9x4xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %r = "stablehlo.select_and_scatter"(%p, %dy, %z) <{window_dimensions = array<i64: 1, 3, 3, 1>, window_strides = array<i64: 1, 2, 2, 1>}> REGIONS : (tensor<8x9x9x4xf32>, tensor<8x4x4x4xf32>, tensor<f32>) -> tensor<8x9x9x4xf32>
  %y = stablehlo.slice %r [0:8, 0:8, 0:8, 0:4] : (tensor<8x9x9x4xf32>) -> tensor<8x8x8x4xf32>
  return %x, %y : tensor<8x8x8x4xf32>, tensor<8x8x8x4xf32>
}
""".replace("REGIONS", SAS_REGIONS)


@pytest.mark.parametrize("zero", ["0.0", "1.0"])
def test_select_and_scatter_init_shared_with_a_zero_broadcast_is_copied(zero):
    """XLA GPU (jax 0.11.2, our H100 and H200 HLO of every ResNet step): the expansion's
    zero-filled operand, of the pool input's shape once the pad is folded, is CSE'd with
    the relu's zero broadcast; the in-place scatter then writes into a copy of that
    buffer (`copy.180`, bf16[256,112,112,64]): the operand read and written once more.
    A broadcast of another value is no such buffer."""
    a = run_annotate(RELU_MAX_POOL_BACKWARD.replace("ZERO", zero), fusion="xla-gpu")
    sas = next(k for k in kernels(a) if k["root"] == "stablehlo.select_and_scatter")
    # its scatter updates one element per source element, atomically (indices not unique)
    root = next(op for op in a.ops() if op.name == "stablehlo.select_and_scatter")
    cost = ir.DictAttr(root.attributes["costmodel.kernel_cost"])
    assert ir.IntegerAttr(cost["scatter_elements"]).value == 8 * 4 * 4 * 4
    x, padded = 8 * 8 * 8 * 4 * F32, 8 * 9 * 9 * 4 * F32
    n, rank = 8 * 4 * 4 * 4, 4
    index = 4 * rank * n
    copy = x if zero == "0.0" else 0  # read and written once more
    assert sas["launches"] == 4
    assert sas["bytes_read"] == x + index + (index + n * F32 + n * F32) + copy
    assert sas["bytes_written"] == padded + (n * F32 + index) + index + n * F32 + copy


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


def test_expensive_producer_stays_out_when_the_broadcast_is_further_down():
    """Batch norm's per-channel scale, rsqrt(var + eps) x gamma, then broadcast: XLA's
    ReusesOperandElements follows the operand through the whole consumer fusion, so the
    rsqrt is not pulled in through the cheap multiply either (XLA GPU's
    `loop_multiply_fusion`, one per batch norm)."""
    text = """
func.func @main(%var: tensor<64xf32>, %gamma: tensor<64xf32>, %x: tensor<64x32x32x64xf32>) -> tensor<64x32x32x64xf32> {
  %r = stablehlo.rsqrt %var : tensor<64xf32>
  %m = stablehlo.multiply %r, %gamma : tensor<64xf32>
  %b = stablehlo.broadcast_in_dim %m, dims = [3] : (tensor<64xf32>) -> tensor<64x32x32x64xf32>
  %0 = stablehlo.multiply %x, %b : tensor<64x32x32x64xf32>
  return %0 : tensor<64x32x32x64xf32>
}
"""
    a = run_annotate(text, fusion="xla-gpu")
    ks = kernels(a)
    assert len(ks) == 2  # the per-channel kernel and the broadcasting one
    small, big = sorted(ks, key=lambda k: k["bytes_written"])
    assert small["root"] in ("stablehlo.rsqrt", "stablehlo.multiply")
    assert small["bytes_written"] == 64 * F32 and small["transcendentals"] == 64
    assert big["transcendentals"] == 0  # no rsqrt recomputed per element


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


# a softmax-like f32 producer whose result a dot reads in bf16 (a narrowing convert), or
# a bf16 producer read in f32 (a widening one)
GEMM_CONVERTED_OPERAND = """
func.func @main(%s: tensor<512x1024xSRC>, %w: tensor<1024x256xDST>) -> tensor<512x256xDST> {
  %e = stablehlo.exponential %s : tensor<512x1024xSRC>
  %c = stablehlo.convert %e : (tensor<512x1024xSRC>) -> tensor<512x1024xDST>
  %d = stablehlo.dot_general %c, %w, contracting_dims = [1] x [0] : (tensor<512x1024xDST>, tensor<1024x256xDST>) -> tensor<512x256xDST>
  return %d : tensor<512x256xDST>
}
"""


@pytest.mark.parametrize("src,dst", [("f32", "bf16"), ("bf16", "f32")])
def test_narrowing_convert_is_no_gemm_prologue(src, dst):
    """XLA GPU's GemmFusion (IsConversionWorthFusing): a narrowing convert is not fused
    into a Triton GEMM as a prologue; it joins its producer, whose kernel then writes the
    narrow type, and the GEMM reads that (our H100 HLO of the LLaMA steps: the softmax
    and norm kernels write bf16 for the dots). A widening convert is a prologue."""
    text = GEMM_CONVERTED_OPERAND.replace("SRC", src).replace("DST", dst)
    ks = kernels(run_annotate(text, fusion="xla-gpu"))
    gemm = next(k for k in ks if k["kind"] == "gemm")
    size = {"f32": F32, "bf16": BF16}
    if size[src] > size[dst]:  # narrowing: exp + convert one loop kernel, the GEMM reads bf16
        assert len(ks) == 2
        loop = next(k for k in ks if k["kind"] == "loop")
        assert loop["root"] == "stablehlo.convert" and loop["bytes_written"] == 512 * 1024 * size[dst]
        assert gemm["bytes_read"] == (512 * 1024 + 1024 * 256) * size[dst]
    else:  # widening: the convert is the GEMM's prologue, which reads the bf16 exp result
        assert len(ks) == 2
        assert gemm["bytes_read"] == 512 * 1024 * size[src] + 1024 * 256 * size[dst]
    tpu = kernels(run_annotate(text, fusion="xla-tpu"))  # XLA TPU fuses both into the dot
    assert len(tpu) == 1


CONV_ADD = """
func.func @main(%x: tensor<8x32x32x64xbf16>, %w: tensor<3x3x64x64xbf16>, %y: tensor<8x32x32x64xbf16>) -> tensor<8x32x32x64xbf16> {
  %c = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x32x32x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<8x32x32x64xbf16>
  %0 = stablehlo.add %c, %y : tensor<8x32x32x64xbf16>
  return %0 : tensor<8x32x32x64xbf16>
}
"""


@pytest.mark.parametrize("fusion,count", [("xla-gpu", 1), ("xla-tpu", 1)])
def test_convolution_epilogue_gpu_vs_tpu(fusion, count):
    """On TPU a convolution takes elementwise consumers. On GPU the add of a forward
    convolution's result and another value is cuDNN's side input (XLA's
    CudnnFusedConvRewriter, FuseBiasOrSideInput: `__cudnn$convBiasActivationForward`):
    one call that reads x, w and y and writes the sum."""
    a = run_annotate(CONV_ADD, fusion=fusion)
    ks = kernels(a)
    assert len(ks) == count
    assert "conv" in {k["kind"] for k in ks}
    if fusion == "xla-gpu":
        (k,) = ks
        act = 8 * 32 * 32 * 64 * BF16
        assert k["bytes_read"] == act + 3 * 3 * 64 * 64 * BF16 + act  # x, w, the side input y
        assert k["bytes_written"] == act  # the sum; the convolution's own result never leaves


def test_convolution_side_input_only_when_the_add_is_its_only_reader():
    """FuseBiasOrSideInput wants the convolution's result read by the add alone
    (WithOneUse): returned as well, it is written, and the add is a loop kernel."""
    text = CONV_ADD.replace("-> tensor<8x32x32x64xbf16> {", "-> (tensor<8x32x32x64xbf16>, tensor<8x32x32x64xbf16>) {")
    text = text.replace("return %0 : tensor<8x32x32x64xbf16>", "return %0, %c : tensor<8x32x32x64xbf16>, tensor<8x32x32x64xbf16>")
    ks = kernels(run_annotate(text, fusion="xla-gpu"))
    assert sorted(k["kind"] for k in ks) == ["conv", "loop"]


def test_one_by_one_input_gradient_is_a_forward_convolution():
    """JAX's input gradient reverses the filter's taps; for 1x1 taps that reverse is a
    no-op, which XLA's simplifier removes before its conv rewriter, so a 1x1 stride-1
    input gradient runs as a forward convolution (the H100 HLO of resnet50: its 1x1
    input gradients are `__cudnn$convForward`, 16 of them with the residual gradient's
    add as side input)."""
    text = """
func.func @main(%dy: tensor<8x14x14x256xbf16>, %w: tensor<1x1x64x256xbf16>) -> tensor<8x14x14x64xbf16> {
  %r = stablehlo.reverse %w, dims = [0, 1] : tensor<1x1x64x256xbf16>
  %dx = stablehlo.convolution(%dy, %r) dim_numbers = [b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[0, 0], [0, 0]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x14x14x256xbf16>, tensor<1x1x64x256xbf16>) -> tensor<8x14x14x64xbf16>
  return %dx : tensor<8x14x14x64xbf16>
}
"""
    convs = [k for k in kernels(run_annotate(text, fusion="xla-gpu")) if k["kind"] == "conv"]
    assert [k["conv"] for k in convs] == ["forward"]
    three = text.replace("1x1x64x256", "3x3x64x256").replace("pad = [[0, 0], [0, 0]]", "pad = [[1, 1], [1, 1]]")
    convs = [k for k in kernels(run_annotate(three, fusion="xla-gpu")) if k["kind"] == "conv"]
    assert [k["conv"] for k in convs] == ["backward_input"]  # 3x3 taps: a real reverse


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


# An XLA-compiled scan step (jax 0.10.2, CPU; the shape of what jax.lax.scan compiles to):
# the loop's init is a copy of a constant, its compare and increment are fusions, and the
# stacking of one row per step is a dynamic_update_slice fusion in place of its parameter.
COMPILED_SCAN = """
module {
  func.func @main(%x: tensor<64x64xf32>, %acc: tensor<16x64x64xf32>) -> tensor<16x64x64xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0 = mhlo.copy %c : tensor<i32>
    %w:3 = stablehlo.while(%i = %0, %v = %x, %s = %acc) : tensor<i32>, tensor<64x64xf32>, tensor<16x64x64xf32>
    cond {
      %n = stablehlo.constant dense<16> : tensor<i32>
      %p = "mhlo.fusion"(%i, %n) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({
      ^bb0(%a: tensor<i32>, %b: tensor<i32>):
        %r = stablehlo.compare LT, %a, %b : (tensor<i32>, tensor<i32>) -> tensor<i1>
        mhlo.return %r : tensor<i1>
      }) : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %i0 = mhlo.copy %i : tensor<i32>
      %one = stablehlo.constant dense<1> : tensor<i32>
      %next = func.call @wrapped_add(%i0, %one) : (tensor<i32>, tensor<i32>) -> tensor<i32>
      %t = "mhlo.fusion"(%v) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({
      ^bb0(%a: tensor<64x64xf32>):
        %r = stablehlo.tanh %a : tensor<64x64xf32>
        mhlo.return %r : tensor<64x64xf32>
      }) : (tensor<64x64xf32>) -> tensor<64x64xf32>
      %u = "mhlo.fusion"(%s, %i0, %t) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({
      ^bb0(%a: tensor<16x64x64xf32>, %j: tensor<i32>, %row: tensor<64x64xf32>):
        %r3 = mhlo.bitcast %row : (tensor<64x64xf32>) -> tensor<1x64x64xf32>
        %z = stablehlo.constant dense<0> : tensor<i32>
        %r = stablehlo.dynamic_update_slice %a, %r3, %j, %z, %z : (tensor<16x64x64xf32>, tensor<1x64x64xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<16x64x64xf32>
        mhlo.return %r : tensor<16x64x64xf32>
      }) : (tensor<16x64x64xf32>, tensor<i32>, tensor<64x64xf32>) -> tensor<16x64x64xf32>
      stablehlo.return %next, %t, %u : tensor<i32>, tensor<64x64xf32>, tensor<16x64x64xf32>
    }
    return %w#2 : tensor<16x64x64xf32>
  }
  func.func private @wrapped_add(%a: tensor<i32>, %b: tensor<i32>) -> tensor<i32> {
    %r = stablehlo.add %a, %b : tensor<i32>
    return %r : tensor<i32>
  }
}
"""


def test_compiled_loop_trip_count_is_inferred_through_copies_and_fusions():
    """Audit find: an XLA-compiled fori_loop/scan was costed once ("cannot infer the trip
    count"): its init is `mhlo.copy` of a constant, its compare and its increment are a
    fusion or a call of an outlined computation. Seen through, it runs 16 times."""
    a = run_annotate(COMPILED_SCAN, fusion="xla-gpu")
    # compiled: its fusions (only in the loop) are the kernels, nothing is re-fused
    assert ir.StringAttr(summary(a)["fusion"]).value == "given"
    (w,) = a.ops("stablehlo.while")
    assert a.cost(w)["trip_count"] == 16
    assert not [d for d in a.diagnostics if "trip count" in d.message]


def test_in_place_update_fusion_reads_and_writes_its_update_only():
    """Audit find: a compiled fusion that dynamic_update_slices one row into its own
    parameter (a scan's stacked output, a KV cache) was costed as reading and writing the
    whole buffer (4,000x too much for a row of a 4096x4096 matrix). XLA emits it in place:
    it reads the row and the index and writes the row."""
    a = run_annotate(COMPILED_SCAN, fusion="xla-gpu")
    (dus,) = [op for op in a.ops("mhlo.fusion") if "dynamic_update_slice" in str(op)]
    c = a.cost(dus)
    row = 64 * 64 * F32
    assert c["bytes_read"] == row + 4  # the row and the i32 index; not the 16-row buffer
    assert c["bytes_written"] == row
    # the same update outlined as a call of a fused computation
    outlined = COMPILED_SCAN.replace(
        "  func.func private @wrapped_add",
        """  func.func private @fused_update(%a: tensor<16x64x64xf32>, %j: tensor<i32>, %row: tensor<64x64xf32>) -> tensor<16x64x64xf32> {
    %r3 = mhlo.bitcast %row : (tensor<64x64xf32>) -> tensor<1x64x64xf32>
    %z = stablehlo.constant dense<0> : tensor<i32>
    %r = stablehlo.dynamic_update_slice %a, %r3, %j, %z, %z : (tensor<16x64x64xf32>, tensor<1x64x64xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<16x64x64xf32>
    return %r : tensor<16x64x64xf32>
  }
  func.func private @wrapped_add""",
    )
    # a call form of the kernel: the fusion swapped for a call of it
    start = outlined.index('      %u = "mhlo.fusion"')
    end = outlined.index("      stablehlo.return %next")
    called = outlined[:start] + (
        "      %u = func.call @fused_update(%s, %i0, %t) : (tensor<16x64x64xf32>, tensor<i32>, tensor<64x64xf32>) -> tensor<16x64x64xf32>\n"
    ) + outlined[end:]
    a = run_annotate(called, fusion="xla-gpu", inline=False)
    (k,) = [k for k in kernels(a) if k["root"] == "func.call" and k["bytes_written"] != 4]  # not the counter's add
    assert (k["bytes_read"], k["bytes_written"]) == (row + 4, row)
    # a buffer also read elsewhere in the fusion is not updated in place: all of it counts
    shared = COMPILED_SCAN.replace(
        "        mhlo.return %r : tensor<16x64x64xf32>\n      }) : (tensor<16x64x64xf32>, tensor<i32>, tensor<64x64xf32>)",
        "        %q = stablehlo.add %r, %a : tensor<16x64x64xf32>\n"
        "        mhlo.return %q : tensor<16x64x64xf32>\n      }) : (tensor<16x64x64xf32>, tensor<i32>, tensor<64x64xf32>)",
    )
    assert shared != COMPILED_SCAN
    a = run_annotate(shared, fusion="xla-gpu")
    (dus,) = [op for op in a.ops("mhlo.fusion") if "dynamic_update_slice" in str(op)]
    assert a.cost(dus)["bytes_read"] == 16 * row + 4 + row


def test_inlining_keeps_the_calls_of_outlined_fusions():
    """Audit find: `costmodel kernels` and `predict` inline calls by default, and in a
    compiled module that turned each `func.call @fused_*` (one kernel) into its ops, each
    then a kernel of its own (7 launches where XLA runs 5). Such calls now stay; other
    calls are inlined as before."""
    fusion = (
        '    %f = "mhlo.fusion"(%a) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({\n'
        "    ^bb0(%x: tensor<64xf32>):\n"
        "      %s = stablehlo.sine %x : tensor<64xf32>\n"
        "      mhlo.return %s : tensor<64xf32>\n"
        "    }) : (tensor<64xf32>) -> tensor<64xf32>\n"
    )
    text = (
        "module {\n"
        "  func.func private @fused_add(%p: tensor<64xf32>, %q: tensor<64xf32>) -> tensor<64xf32> {\n"
        "    %0 = stablehlo.add %p, %q : tensor<64xf32>\n"
        "    %1 = stablehlo.exponential %0 : tensor<64xf32>\n"
        "    return %1 : tensor<64xf32>\n"
        "  }\n"
        "  func.func private @helper(%p: tensor<64xf32>) -> tensor<64xf32> {\n"
        "    %0 = stablehlo.negate %p : tensor<64xf32>\n"
        "    return %0 : tensor<64xf32>\n"
        "  }\n"
        "  func.func @main(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {\n"
        + fusion
        + "    %0 = func.call @fused_add(%f, %b) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>\n"
        "    %1 = func.call @fused_add(%0, %b) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>\n"
        "    %2 = func.call @helper(%1) : (tensor<64xf32>) -> tensor<64xf32>\n"
        "    return %2 : tensor<64xf32>\n"
        "  }\n"
        "}\n"
    )
    inlined = run_annotate(text, fusion="xla-gpu", inline=True)
    calls = [ir.FlatSymbolRefAttr(op.attributes["callee"]).value for op in inlined.ops("func.call")]
    assert calls == ["fused_add", "fused_add"]  # @helper inlined, the fused computation kept
    # the fusion, two calls of the fused computation, the inlined negate
    assert ir.IntegerAttr(summary(inlined)["kernel_count"]).value == 4
    # an uncompiled module's calls of functions so named are inlined as any other
    plain = text.replace(fusion, "    %f = stablehlo.sine %a : tensor<64xf32>\n")
    assert plain != text
    assert not run_annotate(plain, fusion="xla-gpu", inline=True).ops("func.call")


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


# --- the kernels form a DAG ------------------------------------------------------------


class _Recorder:
    """A kernel former that forms kernels with our XLA-GPU rules and keeps every block's."""

    def __init__(self):
        self.blocks = []

    def form(self, nodes):
        from costmodel.kernels import form_kernels

        ks = form_kernels(nodes, "xla-gpu")
        self.blocks.append((nodes, ks))
        return ks

    def summary(self):
        return {}


def _formed_blocks(text: str, inline: bool = False):
    from costmodel.backends import make_backend
    from costmodel.engine import CostEngine
    from costmodel.hardware import load_hardware
    from costmodel.ir import DiagnosticEngine, inline_calls, load_module, make_context

    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    with ctx:
        if inline:
            inline_calls(module)
        hw = load_hardware("a100-40gb")
        rec = _Recorder()
        CostEngine(make_backend("roofline", hw, {}), hw.name, DiagnosticEngine("<test>"), fusion="xla-gpu", kernel_former=rec).run(module)
    return ctx, module, rec.blocks


def assert_kernels_acyclic(nodes, ks) -> None:
    """Every op a kernel reads comes from an earlier kernel (through ops that are no
    kernel: collectives, region ops, bitcasts), and the kernels have a topological order."""
    index = {nd.op: i for i, nd in enumerate(nodes)}
    owner = {}
    for ki, k in enumerate(ks):
        for i in k.node_ids:
            assert i not in owner, "an op in two kernels"
            owner[i] = ki

    def operands(i):
        for v in nodes[i].op.operands:
            o = v.owner
            o = getattr(o, "operation", o)
            j = index.get(o)
            if j is not None:
                yield j

    def producers(j, seen):
        if j in owner:
            yield owner[j]
            return
        if j in seen:
            return
        seen.add(j)
        for p in operands(j):
            yield from producers(p, seen)

    preds = [set() for _ in ks]
    for ki, k in enumerate(ks):
        inside = set(k.node_ids) | set(k.duplicated_ids)
        for i in inside:
            for j in operands(i):
                if j in inside:
                    continue
                for p in producers(j, set()):
                    if p != ki:
                        preds[ki].add(p)
    indeg = [len(p) for p in preds]
    users = [[] for _ in ks]
    for ki, ps in enumerate(preds):
        for p in ps:
            users[p].append(ki)
    ready = [ki for ki, d in enumerate(indeg) if d == 0]
    done = 0
    while ready:
        ki = ready.pop()
        done += 1
        for u in users[ki]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    assert done == len(ks), f"kernel cycle: {len(ks) - done} kernels on cycles"


@pytest.mark.parametrize("inline", [False, True])
def test_resnet50_kernels_form_a_dag(inline):
    """Multi-output fusion must never merge kernels that depend on each other through a
    third one (the kernel ancestry is kept exact across merges)."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "resnet50_train_4dev.mlir"
    _ctx, _module, blocks = _formed_blocks(path.read_text(), inline=inline)
    merged = 0
    for nodes, ks in blocks:
        assert_kernels_acyclic(nodes, ks)
        merged += sum(1 for k in ks if sum(1 for op in k.ops if op.name == "stablehlo.reduce") > 1)
    assert merged > 0  # multi-output fusion happened


from hypothesis import given, settings  # noqa: E402

from fuzz_programs import programs  # noqa: E402


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(programs(max_ops=10))
def test_random_programs_form_kernel_dags(program):
    _ctx, _module, blocks = _formed_blocks(program.text)
    for nodes, ks in blocks:
        assert_kernels_acyclic(nodes, ks)


def test_kernel_operands_stay_within_xla_budget():
    """FusionFitsInBudget: at most 96 operands and outputs per fusion
    (MaxOperandsAndOutputsPerFusion). A chain of 120 adds of distinct inputs would be
    one kernel of 120 operands; it is cut into two."""
    n = 120
    t = "tensor<1024xf32>"
    lines = ["func.func @main(" + ", ".join(f"%x{i}: {t}" for i in range(n)) + f") -> {t} {{"]
    prev = "%x0"
    for i in range(1, n):
        lines.append(f"  %s{i} = stablehlo.add {prev}, %x{i} : {t}")
        prev = f"%s{i}"
    lines.append(f"  return {prev} : {t}")
    lines.append("}")
    a = run_annotate("\n".join(lines), fusion="xla-gpu")
    ks = kernels(a)
    assert len(ks) == 2
    for k in ks:
        operands = k["bytes_read"] // (1024 * F32)
        assert operands + 2 <= 96  # XLA's estimate counts two outputs
    assert sum(k["bytes_read"] // (1024 * F32) for k in ks) == n + 1  # every input once, one partial sum


ALONE = """
func.func @main(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<1024xf32> {
  %0 = stablehlo.add %x, %y : tensor<1024xf32>
  %1 = "stablehlo.all_reduce"(%0) <{replica_groups = dense<GROUPS> : tensor<SHAPExi64>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<1024xf32>) -> tensor<1024xf32>
  %2 = stablehlo.multiply %1, %x : tensor<1024xf32>
  return %2 : tensor<1024xf32>
}
"""


@pytest.mark.parametrize(
    "groups, shape, launches",
    [
        ("0", "1x1", 1),  # one participant: the identity (XLA's AllReduceSimplifier), fused through
        ("[[0], [1]]", "2x1", 1),
        ("[[0, 1]]", "1x2", 2),  # a real all-reduce: a kernel before it and one after
    ],
)
def test_all_reduce_of_one_participant_is_no_kernel_boundary(groups, shape, launches):
    a = run_annotate(ALONE.replace("GROUPS", groups).replace("SHAPE", shape), fusion="xla-gpu")
    ks = kernels(a)
    assert sum(k["launches"] for k in ks) == launches
    n = 1024
    if launches == 1:
        (k,) = ks
        assert k["ops"] == 3  # add, all_reduce (a bitcast), multiply
        assert k["bytes_read"] == 2 * n * F32 and k["bytes_written"] == n * F32


STRIDED = """
func.func @main(%x: tensor<8x32x32x64xbf16>, %w: tensor<3x3x64x64xbf16>, %g: tensor<8x16x16x64xbf16>) -> (tensor<8x16x16x64xbf16>, tensor<DWx64x64xbf16>) {
  %c = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 2], pad = [[PADLO, 1], [PADLO, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x32x32x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<8x16x16x64xbf16>
  %dw = stablehlo.convolution(%x, %g) dim_numbers = [f, 0, 1, b]x[i, 0, 1, o]->[0, 1, b, f], window = {stride = [1, 1], pad = [[PADLO, 1], [PADLO, 1]], rhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x32x32x64xbf16>, tensor<8x16x16x64xbf16>) -> tensor<DWx64x64xbf16>
  return %c, %dw : tensor<8x16x16x64xbf16>, tensor<DWx64x64xbf16>
}
"""


@pytest.mark.parametrize("pad_low, dw, launches", [(0, "3x3", 3), (1, "4x4", 2)])
def test_asymmetric_conv_padding_is_a_pad_kernel_on_gpu(pad_low, dw, launches):
    """XLA GPU's ConvPaddingLegalization: cuDNN pads symmetrically only, so the input of
    a convolution padded (0, 1) is padded by a kernel of its own first, once for the
    forward convolution and its filter gradient alike (XLA's CSE); (1, 1) stays inside."""
    text = STRIDED.replace("PADLO", str(pad_low)).replace("DW", dw)
    a = run_annotate(text, fusion="xla-gpu")
    ks = kernels(a)
    assert sum(k["launches"] for k in ks) == launches
    x = 8 * 32 * 32 * 64 * BF16
    padded = 8 * 33 * 33 * 64 * BF16  # (0, 1) on both spatial dimensions
    w, g = 3 * 3 * 64 * 64 * BF16, 8 * 16 * 16 * 64 * BF16
    fwd, wgrad = sorted(ks, key=lambda k: k["id"])
    if pad_low == 0:
        assert fwd["launches"] == 2 and wgrad["launches"] == 1
        assert fwd["bytes_read"] == x + padded + w  # the pad reads x; the convolution reads its padded copy
        assert fwd["bytes_written"] == padded + g
        assert wgrad["bytes_read"] == padded + g  # the shared padded copy, not a second pad
    else:
        assert fwd["bytes_read"] == x + w and fwd["bytes_written"] == g
    a_tpu = run_annotate(text, fusion="xla-tpu")
    assert sum(k["launches"] for k in kernels(a_tpu)) == 2  # the rule is cuDNN's, GPU only


DGRAD_S2 = """
func.func @main(%dy: tensor<8x16x16x64xbf16>, %w: tensor<3x3x64x64xbf16>, %m: tensor<8x32x32x64xbf16>) -> tensor<8x32x32x64xbf16> {
  %r = stablehlo.reverse %w, dims = [0, 1] : tensor<3x3x64x64xbf16>
  %dx = stablehlo.convolution(%dy, %r) dim_numbers = [b, 0, 1, f]x[0, 1, o, i]->[b, 0, 1, f], window = {stride = [1, 1], pad = [[2, 1], [2, 1]], lhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x16x16x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<8x32x32x64xbf16>
  RESULT
}
"""


@pytest.mark.parametrize("consumer, slice_kernel", [
    ("return %dx : tensor<8x32x32x64xbf16>", True),  # returned: the slice is a kernel of its own
    ("%y = stablehlo.multiply %dx, %m : tensor<8x32x32x64xbf16>\n  return %y : tensor<8x32x32x64xbf16>", False),  # fused into the multiply
])
def test_sliced_output_of_an_input_gradient_is_a_slice_kernel_only_without_a_fusing_consumer(consumer, slice_kernel):
    """A stride-2 input gradient with asymmetric padding computes an output larger by the
    difference (33 x 33), sliced afterwards (XLA GPU's ConvPaddingLegalization). The slice
    fuses into an elementwise consumer; when the result is returned it is a kernel of its
    own (the three kernels of our H200 microbenchmark of such a gradient jitted alone:
    the filter reversed, the convolution, the slice)."""
    a = run_annotate(DGRAD_S2.replace("RESULT", consumer), fusion="xla-gpu")
    conv = next(k for k in kernels(a) if k["kind"] == "conv")
    kept = 8 * 32 * 32 * 64 * BF16
    larger = 8 * 33 * 33 * 64 * BF16
    dy, w = 8 * 16 * 16 * 64 * BF16, 3 * 3 * 64 * 64 * BF16
    if slice_kernel:
        assert conv["launches"] == 2 and conv["conv_padding"] == "sliced output, slice kernel"
        assert conv["bytes_written"] == larger + kept  # the convolution's output, then the slice's
        assert conv["bytes_read"] == dy + w + kept  # the slice reads the part it keeps
    else:
        assert conv["launches"] == 1 and conv["conv_padding"] == "sliced output"
        assert conv["bytes_written"] == larger and conv["bytes_read"] == dy + w


def test_asymmetric_padding_of_a_dynamic_convolution_is_marked_not_guessed():
    text = """
func.func @main(%x: tensor<?x32x32x64xbf16>, %w: tensor<3x3x64x64xbf16>) -> tensor<?x16x16x64xbf16> {
  %c = stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [2, 2], pad = [[0, 1], [0, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<?x32x32x64xbf16>, tensor<3x3x64x64xbf16>) -> tensor<?x16x16x64xbf16>
  return %c : tensor<?x16x16x64xbf16>
}
"""
    a = run_annotate(text, fusion="xla-gpu")  # no crash in the padding rule either
    conv = next(op for op in a.ops() if op.name == "stablehlo.convolution")
    assert "costmodel.unsupported" in conv.attributes and "costmodel.kernel" not in conv.attributes
    assert kernels(a) == []


def _weight_read_by_a_chain(steps: int, independent: int) -> str:
    """One weight %w read by `steps` multiplies chained through all-reduces (each its own
    kernel, each depending on the one before) and by `independent` exponentials, each
    negated (a two-op fusion, which can lead a sibling merge), that depend on nothing
    but %w (returned)."""
    t = "tensor<256x256xf32>"
    body = """({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      })"""
    lines = [
        "module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {",
        f"  func.func @main(%x: {t}, %w: {t}) -> ({', '.join([t] * (independent + 1))}) {{",
    ]
    cur = "%x"
    for i in range(steps):
        lines.append(f"    %m{i} = stablehlo.multiply {cur}, %w : {t}")
        lines.append(
            f'    %r{i} = "stablehlo.all_reduce"(%m{i}) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> {body} : ({t}) -> {t}'
        )
        cur = f"%r{i}"
    outs = [cur]
    unary = ("exponential", "tanh", "sine", "cosine", "logistic", "sqrt")  # distinct: nothing for CSE to merge
    for k in range(independent):
        lines.append(f"    %e{k} = stablehlo.{unary[k % len(unary)]} %w : {t}")
        lines.append(f"    %n{k} = stablehlo.negate %e{k} : {t}")
        outs.append(f"%n{k}")
    lines.append(f"    return {', '.join(outs)} : {', '.join([t] * len(outs))}")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("independent", [0, 5])
def test_sibling_prefilter_changes_no_kernel(independent, monkeypatch):
    """Above SIBLING_PREFILTER readers of one value, readers connected to every other
    reader are set aside before the pairwise sibling checks (XLA compares every pair).
    The kernels are the same as with every pair compared; in a pure chain every reader
    is set aside."""
    from costmodel.kernels import formation

    text = _weight_read_by_a_chain(formation.SIBLING_PREFILTER + 20, independent)
    dropped = []
    real = formation._Formation.connected_to_all

    def recorded(self, cands):
        out = real(self, cands)
        dropped.append(len(out))
        return out

    monkeypatch.setattr(formation._Formation, "connected_to_all", recorded)
    fast = run_annotate(text, "a100-40gb", fusion="xla-gpu")
    if independent == 0:  # a pure chain: every reader depends on or feeds every other
        assert max(dropped) == formation.SIBLING_PREFILTER + 20
    else:  # every multiply has unconnected partners (the exponentials), and some merge
        assert max(dropped) == 0
        # the exponential + negate fusions merge, and one multiply (an unfused op) joins
        assert max(k["ops"] for k in kernels(fast)) == 2 * independent + 1
    monkeypatch.setattr(formation, "SIBLING_PREFILTER", 10**9)
    every_pair = run_annotate(text, "a100-40gb", fusion="xla-gpu")
    assert kernels(fast) == kernels(every_pair)
    assert [str(op) for op in fast.ops()] == [str(op) for op in every_pair.ops()]


DEAD = """
func.func @main(%x: tensor<1024x1024xf32>, %s: tensor<f32>) -> tensor<1024x1024xf32> {
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %b = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<1024x1024xf32>
  %m = stablehlo.multiply %b, %x : tensor<1024x1024xf32>
  %r = stablehlo.reduce(%m init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<1024x1024xf32>, tensor<f32>) -> tensor<1024xf32>
  %e = stablehlo.exponential %x : tensor<1024x1024xf32>
  return %e : tensor<1024x1024xf32>
}
"""


def test_dead_ops_form_no_kernel():
    """XLA's HloDCE runs before fusion: the broadcast -> multiply -> reduce chain that
    nothing reads is removed (its constant init too); only the exponential is a kernel.
    The dead ops' own counts stay in the module's totals, at zero time."""
    a = run_annotate(DEAD, "a100-40gb", fusion="xla-gpu")
    ks = kernels(a)
    assert [k["root"] for k in ks] == ["stablehlo.exponential"]
    s = summary(a)
    assert ir.IntegerAttr(s["dead_op_count"]).value == 4  # constant, broadcast, multiply, reduce
    assert ir.IntegerAttr(s["kernel_count"]).value == 1
    n = 1024 * 1024
    flops = ir.IntegerAttr(s["total_flops"]).value
    assert flops == n + (n - 1024)  # the multiply (one per element) + the reduce's adds, still counted
    unfused = run_annotate(DEAD, "a100-40gb", fusion="none")
    assert "dead_op_count" not in summary(unfused)  # per-op costing removes nothing


# a table each layer recomputes from the same iota (LLaMA's RoPE cosines), read by two
# kernels that a reduction separates
RECOMPUTED_TABLE = """
func.func @main(%x: tensor<64x128xf32>) -> (tensor<64xf32>, tensor<64x128xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %i1 = stablehlo.iota dim = 1 : tensor<64x128xf32>
  %c1 = stablehlo.cosine %i1 : tensor<64x128xf32>
  %a = stablehlo.multiply %x, %c1 : tensor<64x128xf32>
  %r = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : (tensor<64x128xf32>, tensor<f32>) -> tensor<64xf32>
  %rb = stablehlo.broadcast_in_dim %r, dims = [0] : (tensor<64xf32>) -> tensor<64x128xf32>
  %i2 = stablehlo.iota dim = 1 : tensor<64x128xf32>
  %c2 = stablehlo.cosine %i2 : tensor<64x128xf32>
  %b = stablehlo.multiply %rb, %c2 : tensor<64x128xf32>
  return %r, %b : tensor<64xf32>, tensor<64x128xf32>
}
"""


def test_equal_computations_are_merged_before_fusion():
    """XLA's HloCSE runs before fusion: the second cosine of the same iota is the first
    one (the iotas are numbered alike, not merged); it is dead, and the first is copied
    into both kernels that read it. Per-op costing keeps both."""
    a = run_annotate(RECOMPUTED_TABLE, "a100-40gb", fusion="xla-gpu")
    s = summary(a)
    assert ir.IntegerAttr(s["dead_op_count"]).value == 2  # the second cosine and its iota
    cosines = [op for op in a.ops() if op.name == "stablehlo.cosine"]
    assert "costmodel.kernel" in cosines[0].attributes and "costmodel.kernel" not in cosines[1].attributes
    n = 64 * 128
    assert ir.IntegerAttr(s["total_transcendentals"]).value == 2 * n  # both ops' own counts stay
    assert "dead_op_count" not in summary(run_annotate(RECOMPUTED_TABLE, "a100-40gb", fusion="none"))


def test_a_value_read_only_inside_a_region_or_by_a_collective_is_live():
    text = """
module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%x: tensor<64xf32>, %p: tensor<i1>) -> tensor<64xf32> {
    %e = stablehlo.exponential %x : tensor<64xf32>
    %n = stablehlo.negate %x : tensor<64xf32>
    %a = "stablehlo.all_reduce"(%n) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%u: tensor<f32>, %v: tensor<f32>):
      %t = stablehlo.add %u, %v : tensor<f32>
      stablehlo.return %t : tensor<f32>
    }) : (tensor<64xf32>) -> tensor<64xf32>
    %r = "stablehlo.if"(%p) ({
      stablehlo.return %e : tensor<64xf32>
    }, {
      stablehlo.return %x : tensor<64xf32>
    }) : (tensor<i1>) -> tensor<64xf32>
    return %r : tensor<64xf32>
  }
}
"""
    a = run_annotate(text, "a100-40gb", fusion="xla-gpu")
    assert "dead_op_count" not in summary(a)  # %e is read in a branch; %n by the collective
    ids = kernel_ids(a)
    assert "stablehlo.exponential" in ids and "stablehlo.negate" in ids  # both in a kernel (one, as siblings)


# --- XLA GPU's DotMerger ---------------------------------------------------------------
BF16_T = "tensor<256x512xbf16>"
BF16_W = "tensor<512x512xbf16>"


def _qkv(order: str = "dots first", dtype_v: str = "bf16") -> str:
    """Three projections of one activation (a layer's q, k and v)."""
    wv = BF16_W.replace("bf16", dtype_v)
    tv = BF16_T.replace("bf16", dtype_v)
    dot = "stablehlo.dot_general %x, {w}, contracting_dims = [1] x [0] : ({t}, {wt}) -> {rt}"
    q = "%q = " + dot.format(w="%wq", t=BF16_T, wt=BF16_W, rt=BF16_T)
    k = "%k = " + dot.format(w="%wk", t=BF16_T, wt=BF16_W, rt=BF16_T)
    xv = "%xv = stablehlo.convert %x : (" + BF16_T + ") -> " + tv if dtype_v != "bf16" else ""
    v = "%v = " + dot.format(w="%wv", t=tv, wt=wv, rt=tv).replace("%x,", "%xv," if dtype_v != "bf16" else "%x,")
    e = "%e = stablehlo.exponential %q : " + BF16_T
    body = [q, e, k, xv, v] if order == "reader between" else [q, k, xv, v, e]
    return (
        f"func.func @main(%x: {BF16_T}, %wq: {BF16_W}, %wk: {BF16_W}, %wv: {wv}) -> ({BF16_T}, {BF16_T}, {tv}) {{\n  "
        + "\n  ".join(line for line in body if line)
        + f"\n  return %e, %k, %v : {BF16_T}, {BF16_T}, {tv}\n}}"
    )


def _kernel_attr(a, key):
    """The first kernel_cost entry `key` of the module (int or float), or None."""
    from costmodel.ir import attr_number

    for op in a.ops():
        if "costmodel.kernel_cost" in op.attributes:
            d = ir.DictAttr(op.attributes["costmodel.kernel_cost"])
            if key in d:
                return attr_number(d[key])
    return None


@pytest.mark.parametrize("order", ["dots first", "reader between"])
def test_dots_sharing_an_operand_merge_into_one_gemm(order):
    """XLA GPU's DotMerger (before fusion): q, k and v of one activation become one GEMM
    over the concatenated weights, written first by a concatenate kernel (2 launches);
    the exponential of q reads its slice of the result. Also when a reader of q comes
    before the last dot in program order."""
    a = run_annotate(_qkv(order), fusion="xla-gpu")
    ks = kernels(a)
    gemm = next(k for k in ks if k["kind"] == "gemm")
    x, w, out = 256 * 512 * BF16, 512 * 512 * BF16, 256 * 512 * BF16
    assert len(ks) == 2 and gemm["ops"] == 3 and gemm["launches"] == 2
    assert gemm["flops"] == 3 * 2 * 256 * 512 * 512  # one FMA = 2 flops
    # the GEMM reads x and the concatenation; the concatenate reads the three weights
    assert gemm["bytes_read"] == x + 3 * w + 3 * w
    assert gemm["bytes_written"] == 3 * out + 3 * w  # q, k, v; the concatenation
    assert _kernel_attr(a, "merged_dots") == 3
    _ctx, _module, blocks = _formed_blocks(_qkv(order))
    for nodes, ks in blocks:
        assert_kernels_acyclic(nodes, ks)


def test_merged_dots_are_one_wider_gemm_for_the_backend():
    """The merged GEMM's N is the sum of the dots' N (3 x 512): the calibrated backend
    sees one 256 x 1536 x 512 problem, not three 256 x 512 x 512 ones."""
    from costmodel.backends import make_backend
    from costmodel.hardware import load_hardware

    a = run_annotate(_qkv(), fusion="xla-gpu", backend="calibrated", hardware="h100-sxm")
    eff = _kernel_attr(a, "tile_efficiency")
    backend = make_backend("calibrated", load_hardware("h100-sxm"), {})
    assert eff == pytest.approx(backend.tile_efficiency(256, 3 * 512, 1, 512), rel=1e-6)


def test_dots_of_other_types_or_on_tpu_do_not_merge():
    """DotMerger needs equal element types; and it is XLA GPU's (xla-tpu keeps 3 GEMMs)."""
    a = run_annotate(_qkv(dtype_v="f32"), fusion="xla-gpu")
    gemms = sorted((k["launches"], k["ops"]) for k in kernels(a) if k["kind"] == "gemm")
    assert gemms == [(1, 2), (2, 2)]  # v (f32, with its input's convert) alone; q and k merged
    assert sum(1 for k in kernels(run_annotate(_qkv(), fusion="xla-tpu")) if k["kind"] == "gemm") == 3


def test_dependent_or_large_dots_do_not_merge():
    """A chain x @ w @ w reads w twice, but the second dot needs the first; and two dots
    that each move more than 32 MiB (xla_gpu_dot_merger_threshold_mb) stay apart."""
    t, w = "tensor<256x512xbf16>", "tensor<512x512xbf16>"
    chain = f"""func.func @main(%x: {t}, %w: {w}) -> {t} {{
  %a = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : ({t}, {w}) -> {t}
  %b = stablehlo.dot_general %a, %w, contracting_dims = [1] x [0] : ({t}, {w}) -> {t}
  return %b : {t}
}}"""
    assert [k["launches"] for k in kernels(run_annotate(chain, fusion="xla-gpu"))] == [1, 1]
    big_t, big_w = "tensor<4096x2048xbf16>", "tensor<2048x4096xbf16>"
    size = 4096 * 2048 * 2 + 2048 * 4096 * 2 + 4096 * 4096 * 2  # operands and result
    assert size > 32 << 20
    big = f"""func.func @main(%x: {big_t}, %w1: {big_w}, %w2: {big_w}) -> (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) {{
  %a = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0] : ({big_t}, {big_w}) -> tensor<4096x4096xbf16>
  %b = stablehlo.dot_general %x, %w2, contracting_dims = [1] x [0] : ({big_t}, {big_w}) -> tensor<4096x4096xbf16>
  return %a, %b : tensor<4096x4096xbf16>, tensor<4096x4096xbf16>
}}"""
    assert [k["launches"] for k in kernels(run_annotate(big, fusion="xla-gpu"))] == [1, 1]


def test_dots_sharing_the_rhs_merge_along_m():
    """Two activations times one weight: the lhs are concatenated (M = 2 x 256)."""
    t, w = "tensor<256x512xbf16>", "tensor<512x512xbf16>"
    text = f"""func.func @main(%x: {t}, %y: {t}, %w: {w}) -> ({t}, {t}) {{
  %a = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : ({t}, {w}) -> {t}
  %b = stablehlo.dot_general %y, %w, contracting_dims = [1] x [0] : ({t}, {w}) -> {t}
  return %a, %b : {t}, {t}
}}"""
    (k,) = kernels(run_annotate(text, fusion="xla-gpu"))
    x = 256 * 512 * BF16
    assert k["launches"] == 2
    assert k["bytes_read"] == 512 * 512 * BF16 + 2 * x + 2 * x  # w; x and y; their concatenation
    assert k["bytes_written"] == 2 * x + 2 * x  # a and b; the concatenation


from hypothesis import strategies as st  # noqa: E402


@st.composite
def _dot_blocks(draw):
    """A block of dots and adds over 64x64 values, each operand any earlier value (the
    arguments included), so that many dots share operands, in every order."""
    t = "tensor<64x64xbf16>"
    values = ["%a0", "%a1", "%a2"]
    lines = []
    for i in range(draw(st.integers(2, 9))):
        lhs = draw(st.sampled_from(values))
        rhs = draw(st.sampled_from(values))
        if draw(st.integers(0, 3)) == 0:
            lines.append(f"%v{i} = stablehlo.add {lhs}, {rhs} : {t}")
        else:
            lines.append(f"%v{i} = stablehlo.dot_general {lhs}, {rhs}, contracting_dims = [1] x [0] : ({t}, {t}) -> {t}")
        values.append(f"%v{i}")
    outs = values[3:]
    return (
        f"func.func @main(%a0: {t}, %a1: {t}, %a2: {t}) -> ({', '.join([t] * len(outs))}) {{\n  "
        + "\n  ".join(lines)
        + f"\n  return {', '.join(outs)} : {', '.join([t] * len(outs))}\n}}"
    )


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(_dot_blocks())
def test_merged_dots_keep_the_kernel_dag_and_the_counts(text):
    """DotMerger on random blocks of dots sharing operands: the kernels still form a
    DAG, every dot is in one kernel, and the kernels' flops are the ops' flops."""
    _ctx, _module, blocks = _formed_blocks(text)
    for nodes, ks in blocks:
        assert_kernels_acyclic(nodes, ks)
        dots = [i for i, nd in enumerate(nodes) if nd.name == "stablehlo.dot_general"]
        in_kernels = [i for k in ks for i in k.node_ids if nodes[i].name == "stablehlo.dot_general"]
        assert sorted(in_kernels) == dots
        assert sum(k.flops for k in ks) == sum(nd.cost.flops for nd in nodes if nd.cost is not None and not nd.dead)
        for k in ks:
            merged = sum(1 for i in k.node_ids if nodes[i].name == "stablehlo.dot_general")
            assert k.launches == (2 if merged > 1 else 1)


def test_a_given_fusion_holding_a_scatter_pays_its_atomic_updates():
    """Audit find: XLA's scatter fusion in a compiled module (the max-pool gradient of
    the compiled ResNet-18) had no atomic-update cost with `calibrated`: 0.69 ms where
    the same scatter uncompiled costs 1.52 ms on h100-sxm. Its updates are now counted."""
    rows, cols = 64, 128
    text = f"""
module {{
  func.func @main(%t: tensor<1024x{cols}xf32>, %i: tensor<{rows}x1xi32>, %u: tensor<{rows}x{cols}xf32>) -> tensor<1024x{cols}xf32> {{
    %0 = "mhlo.fusion"(%t, %i, %u) <{{fusion_kind = #mhlo<fusion_kind kInput>}}> ({{
    ^bb0(%a: tensor<1024x{cols}xf32>, %b: tensor<{rows}x1xi32>, %c: tensor<{rows}x{cols}xf32>):
      %s = "stablehlo.scatter"(%a, %b, %c) ({{
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %z = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %z : tensor<f32>
      }}) {{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}} : (tensor<1024x{cols}xf32>, tensor<{rows}x1xi32>, tensor<{rows}x{cols}xf32>) -> tensor<1024x{cols}xf32>
      mhlo.return %s : tensor<1024x{cols}xf32>
    }}) : (tensor<1024x{cols}xf32>, tensor<{rows}x1xi32>, tensor<{rows}x{cols}xf32>) -> tensor<1024x{cols}xf32>
    return %0 : tensor<1024x{cols}xf32>
  }}
}}
"""
    a = run_annotate(text, hardware="h100-sxm", fusion="xla-gpu", backend="calibrated")
    (fusion,) = a.ops("mhlo.fusion")
    d = ir.DictAttr(fusion.attributes["costmodel.kernel_cost"])
    assert ir.IntegerAttr(d["scatter_elements"]).value == rows * cols  # one atomic add per update element
    assert ir.FloatAttr(d["scatter_atomic_ns"]).value > 0
    # indices known unique: plain stores, no atomics
    unique = run_annotate(text.replace("unique_indices = false", "unique_indices = true"), hardware="h100-sxm",
                          fusion="xla-gpu", backend="calibrated")
    (fusion,) = unique.ops("mhlo.fusion")
    assert "scatter_elements" not in ir.DictAttr(fusion.attributes["costmodel.kernel_cost"])


def test_an_outlined_gemm_fusion_call_gets_the_gemm_model():
    """A call of XLA's outlined GEMM fusion (a compiled module's `gemm_fusion_*`) is costed
    as the dot it holds: kind gemm, the matrix units at its type's rate, the calibrated
    backend's tile and wave model; it was a vector kernel at the f32 rate."""
    dot = "stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>"
    outlined = f"""
module {{
  func.func private @gemm_fusion_dot(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> tensor<512x512xbf16> {{
    %0 = {dot}
    return %0 : tensor<512x512xbf16>
  }}
  func.func @main(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> tensor<512x512xbf16> {{
    %f = "mhlo.fusion"(%a) <{{fusion_kind = #mhlo<fusion_kind kLoop>}}> ({{
    ^bb0(%x: tensor<512x512xbf16>):
      %s = stablehlo.negate %x : tensor<512x512xbf16>
      mhlo.return %s : tensor<512x512xbf16>
    }}) : (tensor<512x512xbf16>) -> tensor<512x512xbf16>
    %0 = func.call @gemm_fusion_dot(%f, %b) : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>
    return %0 : tensor<512x512xbf16>
  }}
}}
"""
    bare = f"func.func @main(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> tensor<512x512xbf16> {{\n  %0 = {dot}\n  return %0 : tensor<512x512xbf16>\n}}\n"
    call = run_annotate(outlined, fusion="xla-gpu", backend="calibrated")
    (k,) = [k for k in kernels(call) if k["root"] == "func.call"]
    (ref,) = kernels(run_annotate(bare, fusion="xla-gpu", backend="calibrated"))
    assert k["kind"] == ref["kind"] == "gemm"
    assert k["flops"] == ref["flops"] == 2 * 512 * 512 * 512  # one FMA = 2 flops
    assert k["time_ns"] == pytest.approx(ref["time_ns"], rel=1e-9)
