"""Kernel formation against XLA GPU's own: the paper's ResNet-18 training step, exported
(../shared/workloads/resnet18_train_4_devices.mlir) and as XLA's GPU compiler left it
(resnet18_train_4_devices-opt.mlir). Targets (issue 8): our compute kernel launches and
kernel-boundary bytes on the export within 20% of XLA's; the -opt file costed one
kernel per given fusion. XLA ran the step's convolutions in f32 (float normalization),
so bytes are compared on our copy of the export with the same normalization;
benchmarks/fusion_vs_xla.py prints the comparison per category. Needs ../shared (the paper's files are not ours to copy): the
tests say so and skip when it is absent; CI has it."""

from __future__ import annotations

import pathlib

import pytest

from conftest import run_annotate
from costmodel.ir import ir
from costmodel.shapes import type_info

SHARED = pathlib.Path(__file__).resolve().parents[1] / ".." / "shared" / "workloads"
EXPORT = SHARED / "resnet18_train_4_devices.mlir"
OPT = SHARED / "resnet18_train_4_devices-opt.mlir"
needs_shared = pytest.mark.skipif(not OPT.exists(), reason=f"the paper's workloads are not in {SHARED}")


def _main(module):
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise AssertionError("no @main")


def xla_kernels(module) -> tuple[int, int]:
    """XLA's launches and bytes: main's top-level compute ops other than bitcasts,
    constants and collectives; bytes = operand + result bytes of each."""
    count = 0
    nbytes = 0
    for op in _main(module).regions[0].blocks[0].operations:
        op = op.operation
        if op.name in ("mhlo.bitcast", "func.return", "stablehlo.constant", "stablehlo.all_reduce"):
            continue
        count += 1
        nbytes += sum(type_info(v.type).nbytes for v in op.operands)
        nbytes += sum(type_info(v.type).nbytes for v in op.results)
    return count, nbytes


def _summary_int(a, key) -> int:
    return ir.IntegerAttr(ir.DictAttr(a.module.attributes["costmodel.summary"])[key]).value


@pytest.fixture(scope="module")
def oracle():
    a = run_annotate(OPT.read_text(), hardware="a100-40gb", fusion="xla-gpu")
    return a, xla_kernels(a.module)


@needs_shared
def test_opt_module_is_one_kernel_per_given_fusion(oracle):
    a, (xla_count, _xla_bytes) = oracle
    assert ir.StringAttr(ir.DictAttr(a.module.attributes["costmodel.summary"])["fusion"]).value == "given"
    fusions = [op for op in _main(a.module).regions[0].blocks[0].operations if op.operation.name == "mhlo.fusion"]
    assert len(fusions) == 504  # 259 kLoop + 242 kInput + 3 kCustom, as XLA left them
    for f in fusions:
        assert "costmodel.kernel_cost" in f.operation.attributes
    assert _summary_int(a, "kernel_count") == xla_count
    assert a.engine.unsupported_ops == {}


def _upcast_export() -> str:
    """The export with the oracle's float normalization: its convolutions in f32 as XLA
    ran them (costmodel.kernels.float_normalization)."""
    from costmodel.ir import load_module, make_context, print_module
    from costmodel.kernels.float_normalization import upcast_convolutions

    ctx = make_context()
    module = load_module(ctx, EXPORT.read_text(), str(EXPORT))
    with ctx:
        assert upcast_convolutions(module) == 59  # 20 forward, 19 backward-data, 20 backward-filter
        return print_module(module).decode()


@needs_shared
def test_export_kernels_within_20_percent_of_xla(oracle):
    """Like for like (the convolutions in f32 on both sides): our launches and
    kernel-boundary bytes within 20% of XLA's, with calls inlined as XLA does and with
    calls kept as kernel boundaries."""
    _a, (xla_count, xla_bytes) = oracle
    text = _upcast_export()
    for inline in (True, False):
        ours = run_annotate(text, hardware="a100-40gb", fusion="xla-gpu", inline=inline)
        count = _summary_int(ours, "kernel_count")
        nbytes = _summary_int(ours, "kernel_bytes")
        assert abs(count - xla_count) / xla_count <= 0.20, (inline, count, xla_count)
        assert abs(nbytes - xla_bytes) / xla_bytes <= 0.20, (inline, nbytes, xla_bytes)
        # and far below the unfused accounting of the same module
        unfused = ours.totals.bytes_read + ours.totals.bytes_written
        assert nbytes < unfused / 3


@needs_shared
def test_export_as_is_launches_within_20_percent_of_xla(oracle):
    """The export as it is (bf16 convolutions): the same kernels within 20% of XLA's
    launches; fewer bytes than with the oracle's f32 convolutions (every activation a
    convolution reads or writes is half the size), more than half of them."""
    _a, (xla_count, _xla_bytes) = oracle
    upcast = run_annotate(_upcast_export(), hardware="a100-40gb", fusion="xla-gpu", inline=True)
    ours = run_annotate(EXPORT.read_text(), hardware="a100-40gb", fusion="xla-gpu", inline=True)
    count = _summary_int(ours, "kernel_count")
    assert abs(count - xla_count) / xla_count <= 0.20, (count, xla_count)
    nbytes, f32_bytes = _summary_int(ours, "kernel_bytes"), _summary_int(upcast, "kernel_bytes")
    assert f32_bytes / 2 < nbytes < f32_bytes
