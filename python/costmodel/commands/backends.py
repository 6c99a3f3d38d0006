"""`costmodel backends list`: the cost backends `annotate-cost` can use.

Backends come from the entry point group `costmodel.backends` (any installed package
can add one) and from `costmodel.backends.register_backend()` in-process; each is
usable as `stablehlo-opt --annotate-cost="backend=NAME"`.
"""

from __future__ import annotations

import sys

from . import CommandError


def register(subparsers) -> None:
    p = subparsers.add_parser("backends", help="list the cost backends")
    sub = p.add_subparsers(dest="backends_command", metavar="ACTION")
    ls = sub.add_parser("list", help="list the cost backends (entry points and in-process registrations)")
    ls.set_defaults(func=_list)
    p.set_defaults(func=lambda args: (p.print_help(sys.stderr), 2)[1])


def _summary(cls) -> str:
    doc = (getattr(cls, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


def backend_rows() -> list[tuple[str, str, str]]:
    """(name, where it comes from, one-line description) for every backend."""
    from ..backends import BackendError, get_backend, list_backends

    rows = []
    for name, origin in list_backends().items():
        try:
            summary = _summary(get_backend(name))
        except BackendError as err:
            summary = f"(cannot load: {err})"
        except Exception as err:  # a broken third-party entry point must not hide the others
            summary = f"(cannot load: {type(err).__name__}: {err})"
        rows.append((name, origin, summary))
    return rows


def _list(args) -> int:
    try:
        rows = backend_rows()
    except Exception as err:  # e.g. unreadable package metadata
        raise CommandError(f"cannot list backends: {err}") from None
    width = max((len(r[0]) for r in rows), default=0)
    for name, origin, summary in rows:
        line = f"{name:<{width}}  {origin}"
        if summary:
            line += f"  -- {summary}"
        sys.stdout.write(line + "\n")
    return 0
