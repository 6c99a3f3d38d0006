"""`export-chakra`: write the Chakra execution trace of an annotated module.

    stablehlo-opt model.mlir --annotate-cost --export-chakra="system=dgx-h100 chakra-dir=trace"

The same export `extract-collectives` performs at its end (see docs/chakra.md), for
pipelines that do not run it. Needs `costmodel.cost` (run annotate-cost first); the
collectives are decoded here, so `costmodel.collective` is not required.
"""

from __future__ import annotations

from costmodel.ir import InputError, ir

from . import PassInfo, PassOption, PassSession, register_pass

DEFAULT_SYSTEM = "dgx-h100"


def run(module: ir.Operation, options: dict, session: PassSession) -> None:
    from costmodel.chakra.export import run_from_pass
    from costmodel.hardware import SpecError
    from costmodel.systems import load_system

    from .extract_collectives import refuse_unpartitioned

    refuse_unpartitioned(module, "export-chakra", session)
    try:
        system = load_system(options["system"])
    except SpecError as err:
        raise InputError(str(err)) from None
    run_from_pass(module, system, dict(options, chakra=True), session)


# The trace options, shared with extract-collectives (which writes the trace at its end).
SYSTEM_OPTION = PassOption(
    "system",
    str,
    DEFAULT_SYSTEM,
    "system preset (see `costmodel systems list`) or path to a system .json file",
)
CHAKRA_OPTIONS = (
    PassOption(
        "chakra-dir",
        str,
        "",
        "trace directory (default: <output stem>.chakra/ beside a -o file, else ./chakra/)",
    ),
    PassOption("chakra-prefix", str, "trace", "trace file prefix: DIR/<prefix>.<rank>.et"),
    PassOption("granularity", str, "region", "compute nodes: op (one per op) or region (merged chains)"),
    PassOption("simulate", bool, False, "run the built-in simulator on the trace and print the step time"),
)

INFO = register_pass(
    PassInfo(
        argument="export-chakra",
        summary="Write the Chakra execution trace (one .et per rank + ASTRA-sim configs) of an annotated module",
        options=(SYSTEM_OPTION, *CHAKRA_OPTIONS),
        run=run,
    )
)
