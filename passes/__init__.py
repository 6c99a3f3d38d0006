"""Our MLIR passes (installed as `costmodel.passes`), one module per pass.

Each pass module registers a `PassInfo` with `register_pass`. The driver adds our passes
to an MLIR `PassManager` as Python passes (`PassManager.add(callable, ...)`), mixing
them with any pass registered in the bindings. Passes talk to each other only through
the IR: `costmodel.cost`, `costmodel.collective` and `costmodel.summary` attributes.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from typing import Any, Callable

from costmodel.ir import DiagnosticEngine, InputError, ir

__all__ = [
    "PassOption",
    "PassInfo",
    "PassSession",
    "PassError",
    "register_pass",
    "get_pass",
    "all_passes",
    "parse_options",
]


class PassError(Exception):
    """A pass failed; the diagnostic has already been emitted."""


@dataclasses.dataclass(frozen=True)
class PassOption:
    name: str
    type: type  # str | int | float | bool
    default: Any
    help: str


@dataclasses.dataclass
class PassSession:
    """What a pass may know about the run besides the IR."""

    diagnostics: DiagnosticEngine
    output_path: str | None = None  # the -o file, if any
    input_path: str | None = None
    chunk_index: int | None = None  # with --split-input-file
    cwd: str = dataclasses.field(default_factory=os.getcwd)
    messages: list[str] = dataclasses.field(default_factory=list)  # one-line stderr notes
    # Where passes stage the files they write (a `costmodel.outputs.OutputSet`): the
    # driver commits them with the -o file once the whole pipeline succeeded. None:
    # a pass writes its outputs at once (library use).
    outputs: Any = None


RunFn = Callable[[ir.Operation, dict, PassSession], None]


@dataclasses.dataclass(frozen=True)
class PassInfo:
    argument: str  # kebab-case flag name
    summary: str
    options: tuple[PassOption, ...]
    run: RunFn
    # Accept key=value options not listed (handed to run() under options["extra"]).
    extra_options_help: str | None = None

    def describe(self) -> str:
        lines = [f"  --{self.argument}  {self.summary}"]
        for o in self.options:
            default = "" if o.default in (None, "") else f" (default: {o.default})"
            lines.append(f"      {o.name}=<{o.type.__name__}>  {o.help}{default}")
        if self.extra_options_help:
            lines.append(f"      <key>=<value>  {self.extra_options_help}")
        return "\n".join(lines)


_REGISTRY: dict[str, PassInfo] = {}


def register_pass(info: PassInfo) -> PassInfo:
    _REGISTRY[info.argument] = info
    return info


# Our passes: flag -> module of this package. Modules are imported on first use, so
# running one pass does not pay for importing the others (numpy, protobuf ...).
BUILTIN_PASSES = {
    "annotate-cost": "annotate_cost",
    "propagate-shardings": "propagate_shardings",
    "extract-collectives": "extract_collectives",
    "export-chakra": "export_chakra",
}
_ALL_LOADED = False


def _load(module: str) -> None:
    __import__(f"{__name__}.{module}")  # importing a pass module registers it


def all_passes() -> dict[str, PassInfo]:
    """Every pass: ours (imported now) and any registered with register_pass()."""
    global _ALL_LOADED
    if not _ALL_LOADED:
        for module in BUILTIN_PASSES.values():
            _load(module)
        _ALL_LOADED = True
    return dict(sorted(_REGISTRY.items()))


def get_pass(argument: str) -> PassInfo | None:
    if argument not in _REGISTRY and argument in BUILTIN_PASSES:
        _load(BUILTIN_PASSES[argument])
    return _REGISTRY.get(argument)


def _convert(info: PassInfo, opt: PassOption, raw: str):
    if opt.type is bool:
        low = raw.lower()
        if low in ("1", "true", "yes", "on", ""):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise InputError(f"pass '{info.argument}': option '{opt.name}' expects true or false, got '{raw}'")
    if opt.type is int:
        try:
            return int(raw)
        except ValueError:
            raise InputError(f"pass '{info.argument}': option '{opt.name}' expects an integer, got '{raw}'") from None
    if opt.type is float:
        try:
            return float(raw)
        except ValueError:
            raise InputError(f"pass '{info.argument}': option '{opt.name}' expects a number, got '{raw}'") from None
    return raw


def split_option_text(text: str) -> list[tuple[str, str]]:
    """`a=1 b="x y" c={p q}` -> [(a, 1), (b, x y), (c, p q)] (MLIR pass-option syntax)."""
    pairs: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\n,":
            i += 1
        if i >= n:
            break
        j = i
        while j < n and text[j] not in "= \t\n":
            j += 1
        key = text[i:j]
        if j < n and text[j] == "=":
            j += 1
            if j < n and text[j] in "\"'":
                q = text[j]
                k = text.find(q, j + 1)
                if k < 0:
                    raise InputError(f"unterminated quote in pass options '{text}'")
                value = text[j + 1 : k]
                j = k + 1
            elif j < n and text[j] == "{":
                depth, k = 0, j
                while k < n:
                    if text[k] == "{":
                        depth += 1
                    elif text[k] == "}":
                        depth -= 1
                        if depth == 0:
                            break
                    k += 1
                if k >= n:
                    raise InputError(f"unbalanced braces in pass options '{text}'")
                value = text[j + 1 : k]
                j = k + 1
            else:
                k = j
                while k < n and text[k] not in " \t\n":
                    k += 1
                value = text[j:k]
                j = k
        else:
            value = ""
        if not key:
            raise InputError(f"malformed pass options '{text}'")
        pairs.append((key, value))
        i = j
    return pairs


def parse_options(info: PassInfo, text: str) -> dict:
    """Typed options of `info` from MLIR option text; unknown keys are errors unless the
    pass takes extra options (then they are collected under "extra")."""
    known = {o.name: o for o in info.options}
    values = {o.name: o.default for o in info.options}
    extra: dict[str, str] = {}
    for key, raw in split_option_text(text):
        norm = key.replace("_", "-") if key.replace("_", "-") in known else key
        if norm in known:
            values[norm] = _convert(info, known[norm], raw)
        elif info.extra_options_help is not None:
            extra[key] = raw
        else:
            names = ", ".join(known) or "none"
            raise InputError(f"pass '{info.argument}' has no option '{key}' (options: {names})")
    values["extra"] = extra
    return values


def quote_for_display(text: str) -> str:
    return shlex.quote(text)
