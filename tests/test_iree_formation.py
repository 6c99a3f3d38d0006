"""`fusion=iree` (costmodel.iree.formation): IREE's dispatch regions as our kernels,
mapped back to the StableHLO ops they hold; bytes are what IREE's dispatches load and
store; every op is placed somewhere and counted (docs/kernels.md, "IREE's fusion")."""

from __future__ import annotations

import pytest

from costmodel.ir import DiagnosticEngine, attr_number, ir, load_module, make_context
from costmodel.passes.annotate_cost import annotate_module
from test_iree import PROGRAM

F32 = 4  # bytes per f32 element

# softmax(x @ w + b) over rows: IREE makes two dispatches, the GEMM with its bias and
# exponential, and the row sum with the division (XLA GPU: three kernels).
SOFTMAX = """\
func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<16xf32>) -> tensor<4x16xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = stablehlo.broadcast_in_dim %c, dims = [1] : (tensor<16xf32>) -> tensor<4x16xf32>
  %2 = stablehlo.add %0, %1 : tensor<4x16xf32>
  %3 = stablehlo.exponential %2 : tensor<4x16xf32>
  %cst = stablehlo.constant dense<0.0> : tensor<f32>
  %4 = stablehlo.reduce(%3 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<4x16xf32>, tensor<f32>) -> tensor<4xf32>
  %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<4xf32>) -> tensor<4x16xf32>
  %6 = stablehlo.divide %3, %5 : tensor<4x16xf32>
  return %6 : tensor<4x16xf32>
}
"""


def annotate(text: str, fusion: str = "iree", backend: str = "roofline", hardware: str = "a100-40gb"):
    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    diags = DiagnosticEngine("<test>")
    engine = annotate_module(module, diags, hardware=hardware, backend=backend, fusion=fusion)
    return module, engine, diags.diagnostics


def ops_of(module):
    from costmodel.ir import walk_ops

    return list(walk_ops(module))


def kernels(module) -> list[dict]:
    out = []
    for op in ops_of(module):
        if "costmodel.kernel_cost" in op.attributes:
            d = ir.DictAttr(op.attributes["costmodel.kernel_cost"])
            k = {"root": op.name}
            for i in range(len(d)):
                a = d[i]
                if a.name in ("kind", "bound", "backend", "iree_region"):
                    k[a.name] = ir.StringAttr(a.attr).value
                else:
                    k[a.name] = attr_number(a.attr)
            out.append(k)
    return out


def members(module) -> dict[int, list[str]]:
    by: dict[int, list[str]] = {}
    for op in ops_of(module):
        if "costmodel.kernel" in op.attributes:
            by.setdefault(ir.IntegerAttr(op.attributes["costmodel.kernel"]).value, []).append(op.name)
    return by


def summary(module) -> dict:
    d = ir.DictAttr(module.attributes["costmodel.summary"])
    out = {}
    for i in range(len(d)):
        a = d[i]
        if a.name in ("iree_placement", "unsupported_ops"):
            p = ir.DictAttr(a.attr)
            out[a.name] = {p[j].name: attr_number(p[j].attr) for j in range(len(p))}
        elif isinstance(a.attr, ir.StringAttr):
            out[a.name] = ir.StringAttr(a.attr).value
        elif a.name != "entry_functions":
            out[a.name] = attr_number(a.attr)
    return out


def test_softmax_is_two_dispatches():
    module, _, diags = annotate(SOFTMAX)
    assert not [d for d in diags if d.severity in ("error", "warning")]
    ks = kernels(module)
    assert [(k["kind"], k["root"], k["launches"]) for k in ks] == [
        ("gemm", "stablehlo.exponential", 1),
        ("input", "stablehlo.divide", 1),
    ]
    m = members(module)
    assert m[ks[0]["id"]] == ["stablehlo.dot_general", "stablehlo.broadcast_in_dim", "stablehlo.add", "stablehlo.exponential"]
    assert m[ks[1]["id"]] == ["stablehlo.constant", "stablehlo.reduce", "stablehlo.broadcast_in_dim", "stablehlo.divide"]
    # IREE's loads and stores: the GEMM reads a, b and the bias, writes exp(a b + c);
    # the second dispatch reads that once and writes the softmax
    assert ks[0]["bytes_read"] == (4 * 8 + 8 * 16 + 16) * F32
    assert ks[0]["bytes_written"] == 4 * 16 * F32
    assert ks[1]["bytes_read"] == 4 * 16 * F32
    assert ks[1]["bytes_written"] == 4 * 16 * F32
    # work: each op's own flops once (one FMA = 2 flops; the sum reduces 16 to 1 per row)
    assert ks[0]["flops"] == 2 * 4 * 16 * 8 + 4 * 16  # dot + bias add
    assert ks[0]["transcendentals"] == 4 * 16  # exp
    assert ks[1]["flops"] == 4 * 15 + 4 * 16  # row sums + divide
    s = summary(module)
    assert s["fusion"] == "iree"
    assert s["kernel_count"] == 2 and s["iree_dispatch_regions"] == 2 and s["iree_transfers"] == 0
    assert s["kernel_bytes"] == sum(k["bytes_read"] + k["bytes_written"] for k in ks)
    # the two broadcasts leave no trace in IREE's program (they are indexing maps), nor
    # the reduction's init (an arith.constant without location): they join their consumers
    assert s["iree_placement"]["dispatch"] == 5 and s["iree_placement"]["attached"] == 3
    assert sum(s["iree_placement"].values()) == 8


def test_xla_style_formation_differs_on_softmax():
    module, _, _ = annotate(SOFTMAX, fusion="xla-gpu")
    assert summary(module)["kernel_count"] == 3  # XLA does not fuse the sum and the divide


def test_totals_keep_every_op_once():
    """Per-op counts do not depend on the formation; in each kernel the members' flops
    are its flops (an op's work counts once, in the kernel it is a member of)."""
    iree_module, _, _ = annotate(PROGRAM)
    none_module, _, _ = annotate(PROGRAM, fusion="none")
    s_iree, s_none = summary(iree_module), summary(none_module)
    for key in ("total_flops", "total_transcendentals", "op_count"):
        assert s_iree[key] == s_none[key]
    per_kernel: dict[int, list[int]] = {}
    for op in ops_of(iree_module):
        if "costmodel.kernel" in op.attributes and "costmodel.cost" in op.attributes:
            c = ir.DictAttr(op.attributes["costmodel.cost"])
            kid = ir.IntegerAttr(op.attributes["costmodel.kernel"]).value
            sums = per_kernel.setdefault(kid, [0, 0])
            sums[0] += attr_number(c["flops"])
            sums[1] += attr_number(c["transcendentals"])
    for k in kernels(iree_module):
        assert per_kernel[k["id"]] == [k["flops"], k["transcendentals"]]


def test_every_op_is_placed_and_counted():
    module, _, diags = annotate(PROGRAM)
    placement = summary(module)["iree_placement"]
    # the ops the engine forms kernels of: costable, not a region op, not a terminator
    from costmodel.kernels.formation import TERMINATORS

    formed = 0
    for op in ops_of(module):
        parent = op.parent.name
        if parent not in ("func.func", "stablehlo.while"):
            continue  # inside a reduce body: part of the reduce
        if op.name in TERMINATORS or op.name in ("stablehlo.while", "func.func"):
            continue
        formed += 1
    assert sum(placement.values()) == formed
    assert placement["folded"] == 0
    # and every IREE region is run by a kernel: outside the loop 4 dispatches (GEMM +
    # tanh, convolution, reduction, gather) and the concatenate's 2 transfers; the loop
    # body's 1 dispatch runs 5 times
    s = summary(module)
    assert s["iree_regions_without_kernel"] == 0
    assert (s["iree_dispatch_regions"], s["iree_transfers"]) == (4 + 1, 2)
    assert s["kernel_count"] == 4 + 2 + 5 * 1
    # the loop counter (compare, increment) becomes IREE's scf.for: host work
    assert placement["host"] >= 2
    assert not [d for d in diags if d.severity in ("error", "warning")]


def test_concatenate_is_a_copy_of_two_transfers_and_loops_count_per_trip():
    module, _, _ = annotate(PROGRAM)
    ks = {k["root"]: k for k in kernels(module)}
    cat = ks["stablehlo.concatenate"]
    assert cat["kind"] == "copy" and cat["launches"] == 2  # two flow.tensor.update
    assert cat["bytes_read"] == cat["bytes_written"] == 2 * 8 * 32 * F32
    body = ks["stablehlo.add"]  # exp + add in the loop body: one dispatch
    assert body["kind"] == "loop" and body["ops"] == 2
    s = summary(module)
    trips = 5
    outside = sum(k["launches"] for k in kernels(module)) - body["launches"]
    assert s["kernel_count"] == outside + trips * body["launches"]


def test_dilated_convolution_is_one_kernel_of_three_regions():
    """lhs dilation: IREE fills a dilated buffer (a splat), scatters the input into it
    (a dispatch), then convolves (a dispatch): one kernel of the convolution."""
    text = """\
func.func @main(%lhs: tensor<1x4x4x1xf32>, %rhs: tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32> {
  %0 = stablehlo.convolution(%lhs, %rhs) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [4, 4], lhs_dilate = [2, 2]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x4x4x1xf32>, tensor<3x3x1x1xf32>) -> tensor<1x2x2x1xf32>
  return %0 : tensor<1x2x2x1xf32>
}
"""
    module, _, _ = annotate(text)
    (k,) = kernels(module)
    assert k["kind"] == "conv" and k["launches"] == 3
    dilated = 1 * 7 * 7 * 1 * F32
    # splat: writes the dilated buffer; scatter: reads the input, writes its 16 elements
    # strided into it; conv: reads the dilated input and the filter, writes the output
    assert k["bytes_written"] == dilated + 16 * F32 + 2 * 2 * F32
    assert k["bytes_read"] == 16 * F32 + dilated + 9 * F32
    assert summary(module)["iree_transfers"] == 1


def test_dead_code_and_unreferenced_functions():
    text = """\
func.func private @unused(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.exponential %x : tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func private @relu(%x: tensor<8xf32>) -> tensor<8xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<8xf32>
  %0 = stablehlo.maximum %x, %z : tensor<8xf32>
  return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %d = stablehlo.sine %x : tensor<8xf32>
  %dd = stablehlo.cosine %d : tensor<8xf32>
  %r = func.call @relu(%x) : (tensor<8xf32>) -> tensor<8xf32>
  return %r : tensor<8xf32>
}
"""
    module, _, diags = annotate(text)
    placement = summary(module)["iree_placement"]
    assert placement["dead"] == 2  # sine and cosine: their results feed nothing
    # relu inlined (as IREE does): the maximum is a dispatch, its splat constant folded
    # into it without a location joins it
    assert placement["dispatch"] == 1 and placement["attached"] == 1
    assert sum(placement.values()) == 4  # @unused and the inlined @relu are not compiled
    assert summary(module)["kernel_count"] == 1
    assert not [d for d in diags if d.severity == "warning"]


@pytest.mark.parametrize("backend", ["roofline", "calibrated"])
def test_kernel_backends_cost_each_dispatch(backend):
    module, _, _ = annotate(PROGRAM, backend=backend)
    ks = kernels(module)
    assert ks and all(k["time_ns"] > 0 for k in ks)
    assert summary(module)["total_time_ns"] > 0
    if backend == "calibrated":
        by_kind = {k["kind"]: k for k in ks}
        assert "tile_efficiency" in by_kind["gemm"]  # the GEMM shape reached the backend
        one = next(k for k in ks if k["launches"] == 1)
        assert by_kind["copy"]["launch_ns"] == pytest.approx(2 * one["launch_ns"])  # two transfers


def test_region_of_an_op_we_cannot_cost_is_counted_not_charged_elsewhere():
    """A dynamically shaped op is `costmodel.unsupported` (no cost); IREE still compiles it
    into a dispatch. That dispatch is run by no kernel of ours: counted and warned about,
    not charged to the neighbouring kernel."""
    text = """\
func.func @main(%x: tensor<?x4xf32>, %y: tensor<8x4xf32>) -> (tensor<?x4xf32>, tensor<8x4xf32>) {
  %0 = stablehlo.negate %x : tensor<?x4xf32>
  %1 = stablehlo.exponential %y : tensor<8x4xf32>
  return %0, %1 : tensor<?x4xf32>, tensor<8x4xf32>
}
"""
    module, _, diags = annotate(text)
    (k,) = kernels(module)
    assert (k["root"], k["launches"]) == ("stablehlo.exponential", 1)
    assert k["bytes_read"] == k["bytes_written"] == 8 * 4 * F32
    s = summary(module)
    assert s["iree_regions_without_kernel"] == 1 and s["unsupported_count"] == 1  # the negate (not the return)
    warnings = [d.message for d in diags if d.severity == "warning" and d.message.startswith("fusion=iree")]
    assert warnings == [
        "fusion=iree: 1 IREE region(s) hold none of our costable ops and are not costed "
        "(main_dispatch_0; iree_regions_without_kernel in costmodel.summary)"
    ]
