"""`annotate-cost`: put `costmodel.cost` on every op and `costmodel.summary` on the module.

    stablehlo-opt model.mlir --annotate-cost="backend=roofline hardware=h100-sxm"

`fusion=xla-gpu|xla-tpu|none` chooses the kernel formation (costmodel.kernels): with it,
every op of a kernel carries `costmodel.kernel = <id>`, the kernel's root op carries
`costmodel.kernel_cost`, and time is the kernels' time. Options other than `backend`,
`hardware` and `fusion` are handed to the backend (e.g.
`overhead_ns=500` for roofline); a backend rejects options it does not know.
"""

from __future__ import annotations

from costmodel.backends import BackendError, make_backend
from costmodel.engine import CostEngine
from costmodel.hardware import SpecError, load_hardware
from costmodel.ir import InputError, ir
from costmodel.kernels import FUSION_POLICIES, default_policy_for

from . import PassInfo, PassOption, PassSession, register_pass

DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_BACKEND = "roofline"


def run(module: ir.Operation, options: dict, session: PassSession) -> None:
    try:
        hardware = load_hardware(options["hardware"])
        backend = make_backend(options["backend"], hardware, options["extra"])
    except (SpecError, BackendError) as err:
        raise InputError(str(err)) from None
    fusion = options["fusion"] or default_policy_for(hardware.name)
    if fusion not in FUSION_POLICIES:
        raise InputError(
            f"pass 'annotate-cost': option 'fusion' expects one of {', '.join(FUSION_POLICIES)}, got '{fusion}'"
        )
    engine = CostEngine(backend, hardware.name, session.diagnostics, backend_name=options["backend"], fusion=fusion)
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
            PassOption(
                "fusion",
                str,
                "",
                "kernel formation: xla-gpu, xla-tpu or none (every op its own kernel); default: the "
                "compiler that targets the hardware (TPU: xla-tpu, cpu: none, GPUs: xla-gpu)",
            ),
        ),
        run=run,
        extra_options_help="any other option is passed to the backend (roofline: overhead_ns)",
    )
)
