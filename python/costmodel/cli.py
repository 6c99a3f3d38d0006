"""`costmodel`: the companion CLI (hardware, systems, backends, chakra, simulate ...).

Subcommands live in `costmodel.commands.<name>` modules; each defines
`register(subparsers)` that adds its parser(s) and sets `func=handler` where
`handler(args) -> int`. User mistakes raise `CommandError` (one line, exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import os
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
    parser.subcommands = sub.choices  # name -> its parser (for its usage on a bad option)
    return parser


def _unknown_options(parser: argparse.ArgumentParser, args, command: str | None, extra: list[str]) -> None:
    """Options the subcommand does not know: its own usage, the closest known option for a
    typo (`--sytem` -> `--system`), exit 2 (argparse's convention)."""
    import difflib

    target = getattr(parser, "subcommands", {}).get(command) if command else None
    target = target or parser
    # nested subcommands (`costmodel systems show`): the deepest parser the words chose
    while True:
        nested = [a for a in target._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, nested[0].dest, None) if nested and nested[0].dest != argparse.SUPPRESS else None
        if not nested or name not in nested[0].choices or nested[0].choices[name] is target:
            break
        target = nested[0].choices[name]
    known = [o for action in target._actions for o in action.option_strings]
    hints = []
    for word in extra:
        if word.startswith("-"):
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1)
            if close:
                hints.append(f"{word.split('=', 1)[0]}: did you mean {close[0]}?")
    target.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if extra:
        _unknown_options(parser, args, getattr(args, "command", None), extra)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    from .outputs import Terminated, termination_as_exception

    try:
        with termination_as_exception():
            rc = int(args.func(args) or 0)
            sys.stdout.flush()
        return rc
    except Terminated as sig:  # SIGTERM / SIGHUP: cleaned up on the way out
        return 128 + sig.signum
    except CommandError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except OSError as err:
        from .outputs import OutputError

        if isinstance(err, OutputError):
            sys.stderr.write(f"{PROG}: error: {err}\n")
            return 1
        if err.filename is None:  # stdout on a full device (`> /dev/full`) and the like
            _silence_stdout()
            sys.stderr.write(f"{PROG}: error: cannot write to standard output: {err.strerror or err}\n")
            return 1
        raise
    except Exception as err:
        if isinstance(err, _user_error_types()):
            sys.stderr.write(f"{PROG}: error: {err}\n")
            return 1
        raise


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _user_error_types() -> tuple[type, ...]:
    """The library's one-line user-error exceptions, from the modules already loaded
    (a subcommand that let one escape still reports it as one line, no traceback)."""
    found: list[type] = []
    for module, name in (
        ("costmodel.ir", "InputError"),
        ("costmodel.hardware", "SpecError"),
        ("costmodel.backends", "BackendError"),
        ("costmodel.systems", "SpecError"),
    ):
        mod = sys.modules.get(module)
        cls = getattr(mod, name, None) if mod is not None else None
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


if __name__ == "__main__":
    sys.exit(main())
