"""`costmodel hardware list` / `costmodel hardware show NAME|PATH`."""

from __future__ import annotations

import json
import sys

from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser("hardware", help="list or show hardware presets")
    sub = p.add_subparsers(dest="hardware_command", metavar="ACTION")
    ls = sub.add_parser("list", help="list the hardware presets")
    ls.set_defaults(func=_list)
    show = sub.add_parser("show", help="print a preset (or a JSON file) with the source of every value")
    show.add_argument("name", help="preset name or path to a .json file")
    show.set_defaults(func=_show)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _list(args) -> int:
    from ..hardware import SpecError, list_hardware, load_hardware

    for name in list_hardware():
        try:
            spec = load_hardware(name)
        except SpecError as err:
            raise CommandError(str(err)) from None
        sys.stdout.write(
            f"{name:<12} {spec.peak_TFLOPS('matrix', 'bf16'):>8g} TFLOP/s bf16  "
            f"{spec.memory_bandwidth_GBps:>7g} GB/s  {spec.description}\n"
        )
    from ..hardware import GENERATED_HARDWARE

    for name, what in sorted(GENERATED_HARDWARE.items()):  # not measured here: `show` does it
        sys.stdout.write(f"{name:<12} {'(generated)':>24}  {what}; `costmodel hardware show {name}`\n")
    return 0


def _show(args) -> int:
    from ..hardware import SpecError, load_hardware

    try:
        spec = load_hardware(args.name)
    except SpecError as err:
        raise CommandError(str(err)) from None
    sys.stdout.write(json.dumps(spec.to_json(), indent=2) + "\n")
    return 0
