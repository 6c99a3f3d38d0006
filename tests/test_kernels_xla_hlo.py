"""costmodel.kernels.xla_hlo (XLA's optimized HLO as a kernel oracle) and the oracle
itself: XLA GPU's own kernels of the ResNet and LLaMA-3 training steps it compiled on an
H100 (benchmarks/data/gpu/h100-sxm, benchmarks/gpu_measure.py) against our formation."""

from __future__ import annotations

import gzip
import math
import os
import re
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


# ---------------------------------------------------------------------------
# XLA's optimized modules themselves, converted to StableHLO: cuBLAS and cuDNN calls
# ---------------------------------------------------------------------------

_CONV_CALL = re.compile(r"custom-call\(([^)]*)\), window=\{([^}]*)\}, dim_labels=([^,]+), "
                        r"custom_call_target=\"(__cudnn\$conv\w+)\"")
_DEF = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\(.*?\)|[a-z0-9]+\[[\d,]*\](?:\{[^}]*\})?)\s")
_ARRAY = re.compile(r"[a-z0-9]+\[([\d,]*)\]")


def _hlo_text(name: str) -> str:
    with tarfile.open(H100_TRAIN) as tar:
        return gzip.decompress(tar.extractfile(f"{name}_train_1_device.hlo.txt.gz").read()).decode()


def _converted(text: str) -> str:
    """The optimized HLO as `hlo_to_stablehlo` converts it (what the audit fed in)."""
    from costmodel.kernels.xla_hlo import hlo_to_mlir_text

    return hlo_to_mlir_text(text)


def _dims(t: str) -> tuple:
    return tuple(int(x) for x in _ARRAY.search(t).group(1).split(",") if x)


def _calls(text: str, pattern):
    """(line, call match, definition match, the shapes defined so far) of every line of
    the HLO text that defines a value by a call `pattern` matches."""
    shapes = {}
    for line in text.splitlines():
        d = _DEF.match(line)
        if d:
            shapes[d.group(1)] = d.group(2)
        c = pattern.search(line)
        if c and d:
            yield line, c, d, shapes


def _xla_conv_flops(text: str) -> list:
    """(target, result shape, flops) of every cuDNN call of the HLO text, from its window
    and dim_labels (which the conversion drops): 2 x batch x out features x in features
    per group x the (output, tap) pairs inside the input, counted one by one, plus the
    side input's add of a fused convolution (its bias is XLA's zero broadcast)."""
    out = []
    for line, c, d, shapes in _calls(text, _CONV_CALL):
        a, b = (_dims(shapes[o.strip().lstrip("%")]) for o in c.group(1).split(",")[:2])
        res, target = _dims(d.group(2)), c.group(4)
        x, w, y = (res, b, a) if target.endswith("BackwardInput") else (a, res, b) if target.endswith("BackwardFilter") \
            else (a, b, res)
        win = dict(kv.split("=") for kv in c.group(2).split())
        nsp = len(x) - 2
        stride = [int(s) for s in win.get("stride", "x".join("1" * nsp)).split("x")]
        pad_lo = [int(p.split("_")[0]) for p in win["pad"].split("x")] if "pad" in win else [0] * nsp
        assert "lhs_dilate" not in win and "rhs_dilate" not in win
        lin, rest = c.group(3).split("_", 1)
        lw, lout = rest.split("->")
        pairs = 1
        for s in range(nsp):
            i, k, o = x[lin.index(str(s))], w[lw.index(str(s))], y[lout.index(str(s))]
            pairs *= sum(1 for p in range(o) for t in range(k) if 0 <= p * stride[s] - pad_lo[s] + t < i)
        flops = 2 * x[lin.index("b")] * w[lw.index("o")] * w[lw.index("i")] * pairs
        if target.endswith("BiasActivationForward"):
            assert '"side_input_scale":1' in line and '"activation_mode":"kNone"' in line
            flops += math.prod(res)
        out.append((target, res, flops))
    return out


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "llama3-100m"])
def test_xla_compiled_h100_module_costs_every_library_call(name):
    """XLA GPU's optimized H100 module of the training step, converted to StableHLO (given
    kernels): every cuDNN convolution and cuBLAS GEMM costed (none unsupported; before,
    59 / 158 / 73 calls were 0 launches and 0 ms), as one launch each, so the launches are
    XLA's (478 / 1,225 / 645); each call's bytes are XLA's (operands read, result written
    without the workspace: read_hlo_kernels); each convolution's flops are those of the
    window and dim_labels of XLA's HLO text, which the conversion drops and the rule reads
    back from the shapes."""
    from collections import Counter

    from conftest import run_annotate
    from costmodel.ir import ir
    from costmodel.kernels.report import collect_kernels
    from costmodel.shapes import type_info

    text = _hlo_text(name)
    xla = read_hlo_kernels(text)
    a = run_annotate(_converted(text), fusion="xla-gpu", backend="calibrated")
    assert a.engine.unsupported_ops == {}
    summary = ir.DictAttr(a.module.attributes["costmodel.summary"])
    assert ir.StringAttr(summary["fusion"]).value == "given"
    assert ir.IntegerAttr(summary["kernel_count"]).value == xla.launches == {"resnet18": 478, "resnet50": 1225,
                                                                             "llama3-100m": 645}[name]
    rows = collect_kernels(a.module)
    library = [r for r in rows if r.target.startswith(("__cudnn", "__cublas"))]
    assert Counter((r.target, r.bytes_read, r.bytes_written) for r in library) == Counter(
        (k.kind, k.bytes_read, k.bytes_written) for k in xla.kernels if k.kind.startswith(("__cudnn", "__cublas")))
    assert all(r.kind == ("conv" if r.target.startswith("__cudnn") else "gemm") for r in library)
    assert all("tile_efficiency" in r.detail for r in library)
    calls = [op for op in a.ops("stablehlo.custom_call") if "costmodel.kernel" in op.attributes]
    ours = Counter((ir.StringAttr(op.attributes["call_target_name"]).value,
                    type_info(ir.TupleType(op.results[0].type).get_type(0)).shape, a.cost(op)["flops"])
                   for op in calls if ir.StringAttr(op.attributes["call_target_name"]).value.startswith("__cudnn"))
    assert ours == Counter(_xla_conv_flops(text))
    assert sum(ours.values()) == {"resnet18": 59, "resnet50": 158, "llama3-100m": 0}[name]
    gemms = Counter((ir.StringAttr(op.attributes["call_target_name"]).value,
                     type_info(ir.TupleType(op.results[0].type).get_type(0)).shape, a.cost(op)["flops"])
                    for op in calls if ir.StringAttr(op.attributes["call_target_name"]).value.startswith("__cublas"))
    assert gemms == Counter(_xla_gemm_flops(text))
    assert sum(gemms.values()) == {"resnet18": 0, "resnet50": 0, "llama3-100m": 73}[name]


_GEMM_CALL = re.compile(r"custom-call\(([^)]*)\), custom_call_target=\"(__cublas\$[\w$]+)\".*backend_config=(\{.*\})\s*$")


def _xla_gemm_flops(text: str) -> list:
    """(target, result shape, flops) of every cuBLAS call of the HLO text: XLA's
    GpuHloCostAnalysis count, 2 x result elements x the lhs' contracted size, plus a
    multiply per result element where alpha scales it (the attention scores' 1/sqrt(d))."""
    import json

    out = []
    for line, g, d, shapes in _calls(text, _GEMM_CALL):
        lhs = _dims(shapes[g.group(1).split(",")[0].strip().lstrip("%")])
        res = _dims(d.group(2))
        cfg = json.loads(g.group(3))["gemm_backend_config"]
        k = math.prod(lhs[int(i)] for i in cfg["dot_dimension_numbers"]["lhs_contracting_dimensions"])
        assert cfg["beta"] == 0 and cfg["epilogue"] == "DEFAULT"
        out.append((g.group(2), res, 2 * math.prod(res) * k + (math.prod(res) if cfg["alpha_real"] != 1 else 0)))
    return out
