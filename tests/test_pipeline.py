"""costmodel.pipeline: step_kernels forms a step's kernels as predict_step does."""

from __future__ import annotations

import pathlib

import pytest

from costmodel.pipeline import PipelineError, predict_step, step_kernels

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"

T, W = "tensor<256x512xbf16>", "tensor<512x512xbf16>"
PROGRAM = f"""
func.func private @proj(%x: {T}, %w: {W}) -> {T} {{
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : ({T}, {W}) -> {T}
  return %0 : {T}
}}
func.func public @main(%x: {T}, %wq: {W}, %wk: {W}) -> ({T}, {T}) {{
  %q = func.call @proj(%x, %wq) : ({T}, {W}) -> {T}
  %k = func.call @proj(%x, %wk) : ({T}, {W}) -> {T}
  return %q, %k : {T}, {T}
}}
"""


def test_calls_are_inlined_before_the_kernels_form():
    """Inlined, the two projections of %x are one merged GEMM (DotMerger); the kernels
    are those predict_step counts."""
    rows = step_kernels(PROGRAM, hardware="h100-sxm")
    # (the private function's own kernel stays in the module, run zero times)
    (gemm,) = [r for r in rows if r.kind == "gemm" and r.executions]
    assert sum(1 for op in gemm.ops if op.endswith("dot_general")) == 2 and gemm.launches == 2
    step = predict_step(PROGRAM, system="h100-sxm-x4", backend="calibrated")
    assert sum(r.launches * r.executions for r in rows) == step.kernel_count
    assert sum((r.bytes_read + r.bytes_written) * r.executions for r in rows) == step.kernel_bytes


def test_a_sharded_step_is_partitioned_first():
    """The transformer example (Shardy, 2 x 4 mesh): per-device kernels, as predict_step's."""
    text = (EXAMPLES / "transformer_train_2x4.mlir").read_text()
    rows = step_kernels(text, hardware="h100-sxm")
    step = predict_step(text, system="dgx-h100", backend="calibrated")
    assert rows and sum(r.launches * r.executions for r in rows) == step.kernel_count
    # per-device bytes (the global program would move about 6 x as much)
    assert sum((r.bytes_read + r.bytes_written) * r.executions for r in rows) == step.kernel_bytes


def test_bad_input_is_one_pipeline_error():
    with pytest.raises(PipelineError, match=r"^parse: .*1:1"):
        step_kernels("this is not MLIR", hardware="h100-sxm", source="bad.mlir")


RECURSIVE = """
module attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func private @f(%a: tensor<8xf32>) -> tensor<8xf32> {
    %0 = func.call @f(%a) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}) -> tensor<8xf32> {
    %e = stablehlo.exponential %a : tensor<8xf32>
    %0 = func.call @f(%e) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"""


def test_a_failing_pass_is_one_pipeline_error():
    """A sharded program partitioning rejects (a recursive call): one line naming the
    stage and the first error, no traceback."""
    with pytest.raises(PipelineError, match=r"^pipeline: .*recursive call to @f") as info:
        step_kernels(RECURSIVE, hardware="h100-sxm", source="rec.mlir")
    assert "\n" not in str(info.value)
