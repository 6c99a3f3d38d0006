"""costmodel.iree.compare: IREE's fusion and the XLA-style formation lined up op by op
(what benchmarks/iree_vs_xla_fusion.py prints for the shipped workloads)."""

from __future__ import annotations

from costmodel.iree.compare import compare_formations
from test_iree_formation import SOFTMAX

F32 = 4


def test_softmax_groups_three_xla_kernels_against_two_dispatches():
    cmp = compare_formations(SOFTMAX, "softmax.mlir")
    assert (cmp.xla.kernel_count, cmp.iree.kernel_count) == (3, 2)
    # XLA: GEMM + bias | exp + row sum | divide; IREE: GEMM + bias + exp | sum + divide.
    # Every kernel shares an op with the next one: one group of all 8 ops.
    (g,) = cmp.groups
    assert sum(g.ops.values()) == 8
    assert (g.xla_launches, g.iree_launches) == (3, 2)
    assert (g.xla_bytes, g.iree_bytes) == (cmp.xla.kernel_bytes, cmp.iree.kernel_bytes)
    # IREE keeps exp(x) in its GEMM dispatch's output, read once by the second dispatch;
    # XLA writes the GEMM's output, reads it back for exp + sum, and again for the divide
    assert g.iree_bytes == ((4 * 8 + 8 * 16 + 16) + 4 * 16) * F32 + 2 * 4 * 16 * F32
    assert g.iree_bytes < g.xla_bytes
    assert cmp.disagreeing == [g]
    assert cmp.placement["folded"] == 0
