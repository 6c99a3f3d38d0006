"""`costmodel systems list` / `costmodel systems show NAME|PATH`."""

from __future__ import annotations

import json
import sys

from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser("systems", help="list or show system presets (network + hardware)")
    sub = p.add_subparsers(dest="systems_command", metavar="ACTION")
    ls = sub.add_parser("list", help="list the system presets")
    ls.set_defaults(func=_list)
    show = sub.add_parser("show", help="print a system (or a JSON file) with the source of every value")
    show.add_argument("name", help="preset name or path to a .json file")
    show.add_argument(
        "--astra-sim", action="store_true", help="print the ASTRA-sim network.yml and system.json instead"
    )
    show.set_defaults(func=_show)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _list(args) -> int:
    from ..hardware import SpecError
    from ..systems import list_systems, load_system

    for name in list_systems():
        try:
            s = load_system(name)
        except SpecError as err:
            raise CommandError(str(err)) from None
        shape = " x ".join(f"{d.topology}({d.npus_count})" for d in s.dims)
        sys.stdout.write(f"{name:<18} {s.num_npus:>4} x {s.hardware:<10} {shape:<32} {s.description}\n")
    return 0


def _show(args) -> int:
    from ..hardware import SpecError
    from ..systems import load_system, to_network_yml, to_remote_memory_json, to_system_json

    try:
        s = load_system(args.name)
    except SpecError as err:
        raise CommandError(str(err)) from None
    if args.astra_sim:
        sys.stdout.write("# network.yml\n" + to_network_yml(s))
        sys.stdout.write("# system.json\n" + json.dumps(to_system_json(s), indent=2) + "\n")
        sys.stdout.write("# remote_memory.json\n" + json.dumps(to_remote_memory_json(s), indent=2) + "\n")
        return 0
    sys.stdout.write(json.dumps(s.to_json(), indent=2) + "\n")
    return 0
