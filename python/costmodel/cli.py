"""`costmodel`: the companion CLI (hardware, systems, backends, chakra, simulate ...).

Subcommands live in `costmodel.commands.<name>` modules; each defines
`register(subparsers)` that adds its parser(s) and sets `func=handler` where
`handler(args) -> int`. User mistakes raise `CommandError` (one line, exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import __version__
from .commands import CommandError

PROG = "costmodel"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="stablehlo-costmodel companion tool")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from . import commands

    for mod in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{mod.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except CommandError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
