"""costmodel.profiling.extract: a kernel of the kernel formation as a standalone program
(its external inputs the arguments, the values others use its results)."""

from __future__ import annotations

import pytest

from costmodel.backends import KernelCost
from costmodel.engine import CostEngine
from costmodel.ir import DiagnosticEngine, load_module, make_context
from costmodel.profiling.extract import NotStandalone, kernel_program


class Recorder:
    """A kernel-level backend that extracts every kernel it is handed."""

    name = "recorder"
    kernels_only = True

    def __init__(self):
        self.programs = []  # (kernel kind, KernelProgram | NotStandalone)

    def estimate_kernel(self, kernel):
        try:
            self.programs.append((kernel.kind, kernel_program(kernel)))
        except NotStandalone as err:
            self.programs.append((kernel.kind, err))
        return KernelCost(1.0, "compute")

    def estimate(self, cost):
        return 0.0, "overhead"


def extract(text: str, fusion: str = "xla-gpu"):
    ctx = make_context()
    module = load_module(ctx, text, "<test>")
    rec = Recorder()
    CostEngine(rec, "host-cpu", DiagnosticEngine("<test>"), fusion=fusion).run(module)
    return rec.programs


MLP = """\
func.func @main(%x: tensor<8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<32xf32>) -> tensor<8xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<32xf32>) -> tensor<8x32xf32>
  %2 = stablehlo.add %0, %1 : tensor<8x32xf32>
  %c = stablehlo.constant dense<0.0> : tensor<f32>
  %3 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<8x32xf32>
  %4 = stablehlo.maximum %2, %3 : tensor<8x32xf32>
  %5 = stablehlo.exponential %4 : tensor<8x32xf32>
  %6 = stablehlo.reduce(%5 init: %c) applies stablehlo.add across dimensions = [1] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8xf32>
  return %6 : tensor<8xf32>
}
"""


def test_fused_kernel_becomes_a_function_of_its_external_inputs():
    progs = extract(MLP)
    assert all(not isinstance(p, Exception) for _, p in progs)
    (gemm,) = [p for kind, p in progs if kind == "gemm"]
    assert "func.func @main" in gemm.text
    assert [a.shape for a in gemm.arg_types] == [(8, 16), (16, 32)]
    assert [r.shape for r in gemm.result_types] == [(8, 32)]
    # bias, ReLU, exp and the row sum: one input fusion reading b and the dot's result
    (red,) = [p for kind, p in progs if kind == "input"]
    assert [a.shape for a in red.arg_types] == [(32,), (8, 32)]
    assert [r.shape for r in red.result_types] == [(8,)]
    assert red.op_names[-1] == "stablehlo.reduce"
    for p in (gemm, red):
        assert "costmodel." not in p.text and "loc(" not in p.text


def test_splat_constants_outside_the_kernel_are_cloned_in():
    progs = extract(MLP, fusion="none")
    (bcast,) = [p for _, p in progs if p.op_names == ["stablehlo.broadcast_in_dim"] and not p.arg_types]
    assert "stablehlo.constant dense<0.000000e+00>" in bcast.text


def test_every_op_a_kernel_with_fusion_none():
    progs = extract(MLP, fusion="none")
    names = [p.op_names for _, p in progs]
    # the constant alone is no kernel; the reduce is one op (its body goes with it)
    assert ["stablehlo.dot_general"] in names
    assert ["stablehlo.reduce"] in names
    assert all(len(n) == 1 for n in names)


def test_signature_ignores_locations_and_names():
    a = extract(MLP)[0][1]
    renamed = MLP.replace("%x", "%input").replace("@main", "@other")
    b = extract(renamed)[0][1]
    assert a.signature == b.signature and a.text == b.text
    bigger = extract(MLP.replace("8x", "9x").replace("tensor<8xf32>", "tensor<9xf32>"))[0][1]
    assert bigger.signature != a.signature


def test_what_cannot_run_alone_says_why():
    progs = extract(
        """\
func.func @main(%x: tensor<8x16xf32>) -> tensor<8x4xf32> {
  %0:2 = stablehlo.custom_call @TopK(%x) : (tensor<8x16xf32>) -> (tensor<8x4xf32>, tensor<8x4xi32>)
  return %0#0 : tensor<8x4xf32>
}
""",
        fusion="none",
    )
    ((kind, err),) = progs
    assert isinstance(err, NotStandalone) and "custom call" in str(err)


def test_large_constants_become_arguments():
    big = ", ".join(f"{i}.5" for i in range(2048))
    progs = extract(
        f"""\
func.func @main(%x: tensor<2048xf32>) -> tensor<2048xf32> {{
  %w = stablehlo.constant dense<[{big}]> : tensor<2048xf32>
  %0 = stablehlo.multiply %x, %w : tensor<2048xf32>
  return %0 : tensor<2048xf32>
}}
""",
        fusion="none",
    )
    (kind, p), = progs
    assert len(p.arg_types) == 2  # 8 KiB of weights: an input, not text of the program
    assert "dense<[" not in p.text


@pytest.mark.parametrize("fusion", ["none", "xla-gpu"])
def test_loop_bodies_are_extracted_alone(fusion):
    progs = extract(
        """\
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
""",
        fusion=fusion,
    )
    ok = [p for _, p in progs if not isinstance(p, Exception)]
    assert any("stablehlo.tanh" in p.op_names for p in ok)
    assert all("stablehlo.while" not in p.text for p in ok)
