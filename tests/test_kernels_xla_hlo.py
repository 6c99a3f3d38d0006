"""costmodel.kernels.xla_hlo (XLA's optimized HLO as a kernel oracle) and the oracle
itself: XLA GPU's own kernels of the ResNet and LLaMA-3 training steps it compiled on an
H100 (benchmarks/data/gpu/h100-sxm, benchmarks/gpu_measure.py) against our formation."""

from __future__ import annotations

import gzip
import os
import tarfile

import pytest

from costmodel.kernels.xla_hlo import HloParseError, read_hlo_kernels, type_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100_TRAIN = os.path.join(ROOT, "benchmarks", "data", "gpu", "h100-sxm", "train", "hlo.tar")

HLO = """HloModule jit_f, entry_computation_layout={(f32[64,32]{1,0})->bf16[64,32]{1,0}}

%fused_add (p0: f32[64,32]) -> bf16[64,32] {
  %p0 = f32[64,32]{1,0} parameter(0)
  %a = f32[64,32]{1,0} add(%p0, %p0)
  ROOT %c = bf16[64,32]{1,0} convert(%a)
}

ENTRY %main.1 (x: f32[64,32], w: bf16[3,3,32,16]) -> (bf16[64,32], bf16[8,8,8,16]) {
  %x = f32[64,32]{1,0} parameter(0)
  %w = bf16[3,3,32,16]{3,2,1,0} parameter(1)
  %loop_add_fusion = bf16[64,32]{1,0} fusion(%x), kind=kLoop, calls=%fused_add
  %b = bf16[8,8,8,32]{3,2,1,0} bitcast(%loop_add_fusion)
  %cudnn-conv = (bf16[8,8,8,16]{3,2,1,0}, u8[1024]{0}) custom-call(%b, %w), window={size=3x3}, custom_call_target="__cudnn$convForward"
  %gte = bf16[8,8,8,16]{3,2,1,0} get-tuple-element(%cudnn-conv), index=0
  ROOT %t = (bf16[64,32]{1,0}, bf16[8,8,8,16]{3,2,1,0}) tuple(%loop_add_fusion, %gte)
}
"""


def test_reads_kernels_and_their_bytes():
    k = read_hlo_kernels(HLO)
    assert [x.name for x in k.kernels] == ["loop_add_fusion", "cudnn-conv"]  # no bitcast, gte, tuple
    fusion, conv = k.kernels
    assert fusion.kind == "kLoop"
    assert fusion.bytes_read == 64 * 32 * 4 and fusion.bytes_written == 64 * 32 * 2
    assert conv.kind == "__cudnn$convForward"
    # operands: the bitcast input and the filter; the result without the u8 workspace
    assert conv.bytes_read == 8 * 8 * 8 * 32 * 2 + 3 * 3 * 32 * 16 * 2
    assert conv.bytes_written == 8 * 8 * 8 * 16 * 2
    assert k.launches == 2 and k.bytes == sum(x.bytes_read + x.bytes_written for x in k.kernels)
    assert k.by_kind == {"kLoop": 1, "__cudnn$convForward": 1}


def test_type_bytes_of_tuples():
    assert type_bytes("(bf16[2,3]{1,0}, f32[4], pred[])") == 2 * 3 * 2 + 4 * 4 + 1


def test_text_without_entry_is_an_error():
    with pytest.raises(HloParseError):
        read_hlo_kernels("HloModule m\n")


def test_resnet18_step_against_xla_gpu_on_h100(tmp_path):
    """Our kernels of the one-device resnet18 training step (per-device batch 256, bf16:
    what each of the paper's 4 GPUs runs, without collectives) within 20% of the kernels
    XLA GPU compiled for it on an H100, in launches and in bytes (issue 8's measure).
    Measured there: 478 launches, 26.6 GB; ours: 472 and 25.6 GB (docs/kernels.md)."""
    from costmodel.pipeline import predict_step
    from costmodel.workloads.export import ExportOptions, export_text

    with tarfile.open(H100_TRAIN) as tar:
        text = gzip.decompress(tar.extractfile("resnet18_train_1_device.hlo.txt.gz").read()).decode()
    xla = read_hlo_kernels(text)
    module = export_text(ExportOptions(model="resnet18", devices=1, global_batch=256))
    ours = predict_step(module, system="h100-sxm-x4", backend="calibrated")
    assert abs(ours.kernel_count - xla.launches) <= 0.2 * xla.launches, (ours.kernel_count, xla.launches)
    assert abs(ours.kernel_bytes - xla.bytes) <= 0.2 * xla.bytes, (ours.kernel_bytes, xla.bytes)


def test_llama3_100m_step_against_xla_gpu_on_h100():
    """The same for a transformer: the one-device llama3-100m training step (one
    2048-token sequence, AdamW), partitioned first as predict_step does (the export
    carries a one-device mesh). XLA GPU on the H100: 645 launches, 25.96 GB, 150 GEMMs
    of which 28 merged by its DotMerger; ours 641 and 28.81 GB, the same GEMMs
    (docs/kernels.md rule 12)."""
    from costmodel.pipeline import predict_step, step_kernels
    from costmodel.workloads.export import LlamaExportOptions, export_text

    with tarfile.open(H100_TRAIN) as tar:
        text = gzip.decompress(tar.extractfile("llama3-100m_train_1_device.hlo.txt.gz").read()).decode()
    xla = read_hlo_kernels(text)
    module = export_text(LlamaExportOptions(model="llama3-100m", mesh={"dp": 1, "fsdp": 1, "tp": 1}, global_batch=1))
    ours = predict_step(module, system="h100-sxm-x4", backend="calibrated")
    assert abs(ours.kernel_count - xla.launches) <= 0.2 * xla.launches, (ours.kernel_count, xla.launches)
    assert abs(ours.kernel_bytes - xla.bytes) <= 0.2 * xla.bytes, (ours.kernel_bytes, xla.bytes)
    # the GEMMs: XLA's cuBLAS calls and Triton GEMM fusions against our gemm kernels
    xla_gemms = [k for k in xla.kernels if k.kind == "__cublas$lt$matmul" or k.name.startswith("gemm_fusion")]
    ours_gemms = [k for k in step_kernels(module, hardware="h100-sxm") if k.kind == "gemm"]
    assert len(ours_gemms) == len(xla_gemms) == 150
    merged = [k for k in ours_gemms if sum(1 for op in k.ops if op.endswith("dot_general")) > 1]
    assert len(merged) == 28  # XLA's GEMMs that read a concatenation of merged dots' operands
