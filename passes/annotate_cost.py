"""`annotate-cost`: put `costmodel.cost` on every op and `costmodel.summary` on the module.

    stablehlo-opt model.mlir --annotate-cost="backend=roofline hardware=h100-sxm"

Options other than `backend` and `hardware` are handed to the backend (e.g.
`overhead_ns=500` for roofline); a backend rejects options it does not know.
"""

from __future__ import annotations

from costmodel.backends import BackendError, make_backend
from costmodel.engine import CostEngine
from costmodel.hardware import SpecError, load_hardware
from costmodel.ir import InputError, ir

from . import PassInfo, PassOption, PassSession, register_pass, warn_recosting

DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_BACKEND = "roofline"


def run(module: ir.Operation, options: dict, session: PassSession) -> None:
    try:
        hardware = load_hardware(options["hardware"])
        backend = make_backend(options["backend"], hardware, options["extra"])
    except (SpecError, BackendError) as err:
        raise InputError(str(err)) from None
    warn_recosting(module, hardware.name, session)
    engine = CostEngine(backend, hardware.name, session.diagnostics, backend_name=options["backend"])
    engine.run(module)


INFO = register_pass(
    PassInfo(
        argument="annotate-cost",
        summary="Annotate every op with costmodel.cost and the module with costmodel.summary",
        options=(
            PassOption("backend", str, DEFAULT_BACKEND, "cost backend (see `costmodel backends list`)"),
            PassOption(
                "hardware",
                str,
                DEFAULT_HARDWARE,
                "hardware preset (see `costmodel hardware list`) or path to a hardware .json file",
            ),
        ),
        run=run,
        extra_options_help="any other option is passed to the backend (roofline: overhead_ns)",
    )
)
