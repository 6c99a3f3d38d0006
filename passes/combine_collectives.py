"""`combine-collectives`: XLA GPU's all-reduce combiner (costmodel.combiner).

    stablehlo-opt model.mlir --annotate-cost --combine-collectives --extract-collectives

Independent all-reduces of one kind (reduction, element type, replica groups, channel,
global device ids) become one variadic `stablehlo.all_reduce` up to `threshold-bytes`
and `threshold-count`, as XLA GPU's AllReduceCombiner groups them (defaults: XLA GPU's
30 MiB and 256). Run it on the per-device program (after --propagate-shardings), after
annotate-cost (XLA combines after fusion: the kernels are formed on the program as
exported) and before extract-collectives. See docs/collectives.md.
"""

from __future__ import annotations

from costmodel.combiner import XLA_GPU_THRESHOLD_BYTES, XLA_GPU_THRESHOLD_COUNT, combine_all_reduces
from costmodel.ir import ir

from . import PassInfo, PassOption, PassSession, register_pass


def run(module: ir.Operation, options: dict, session: PassSession) -> None:
    stats = combine_all_reduces(module, options["threshold-bytes"], options["threshold-count"])
    session.messages.append(
        f"combine-collectives: {stats.all_reduces} all-reduces -> {stats.after} "
        f"({stats.combined} combined into {stats.groups})"
    )


INFO = register_pass(
    PassInfo(
        argument="combine-collectives",
        summary="Combine independent all-reduces as XLA GPU's AllReduceCombiner does",
        options=(
            PassOption("threshold-bytes", int, XLA_GPU_THRESHOLD_BYTES,
                       "largest combined all-reduce (bytes; XLA GPU: xla_gpu_all_reduce_combine_threshold_bytes)",
                       minimum=0),
            PassOption("threshold-count", int, XLA_GPU_THRESHOLD_COUNT,
                       "most all-reduces in one (XLA GPU: 256)", minimum=1),
        ),
        run=run,
    )
)
