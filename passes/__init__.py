"""Our MLIR passes (installed as `costmodel.passes`), one module per pass.

Each pass module registers a `PassInfo` with `register_pass`. The driver adds our passes
to an MLIR `PassManager` as Python passes (`PassManager.add(callable, ...)`), mixing
them with any pass registered in the bindings. Passes talk to each other only through
the IR: `costmodel.cost`, `costmodel.collective` and `costmodel.summary` attributes.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
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
    "warn_recosting",
]


class PassError(Exception):
    """A pass failed; the diagnostic has already been emitted."""


@dataclasses.dataclass(frozen=True)
class PassOption:
    name: str
    type: type  # str | int | float | bool
    default: Any
    help: str
    # str options: the accepted values (None: any string; the default is always accepted).
    choices: tuple[str, ...] | None = None
    # int/float options: the accepted closed range (None: no bound on that side). Numbers
    # are always finite, and ints fit in int64 (IR attributes are i64).
    minimum: float | None = None
    maximum: float | None = None
    # str options: checks the value (raises InputError with a one-line reason)
    validate: Callable[[str], Any] | None = None


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
            allowed = ""
            if o.choices is not None:
                allowed = f" [{'|'.join(o.choices)}]"
            elif o.minimum is not None or o.maximum is not None:
                lo = "" if o.minimum is None else f"{o.minimum:g} <= "
                hi = "" if o.maximum is None else f" <= {o.maximum:g}"
                allowed = f" [{lo}{o.name}{hi}]"
            lines.append(f"      {o.name}=<{o.type.__name__}>  {o.help}{allowed}{default}")
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
    "combine-collectives": "combine_collectives",
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


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# Extra (pass-through) options whose key ends in one of these units are quantities: a
# finite number >= 0 (house style: the unit is part of the name, e.g. overhead_ns).
QUANTITY_SUFFIXES = ("_ns", "_us", "_ms", "_bytes", "_GiB", "_GBps", "_TFLOPS")


def _range_error(info: PassInfo, opt: PassOption, raw: str) -> InputError:
    lo, hi = opt.minimum, opt.maximum
    noun = "an integer" if opt.type is int else "a number"
    if lo is not None and hi is not None:
        want = f"{noun} from {lo:g} to {hi:g}"
    elif lo is not None:
        want = f"{noun} >= {lo:g}"
    else:
        want = f"{noun} <= {hi:g}"
    return InputError(f"pass '{info.argument}': option '{opt.name}' expects {want}, got '{raw}'")


def _convert(info: PassInfo, opt: PassOption, raw: str):
    where = f"pass '{info.argument}': option '{opt.name}'"
    if opt.type is bool:
        low = raw.lower()
        if low in ("1", "true", "yes", "on", ""):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise InputError(f"{where} expects true or false, got '{raw}'")
    if opt.type is int:
        try:
            value = int(raw)
        except ValueError:
            raise InputError(f"{where} expects an integer, got '{raw}'") from None
        if not INT64_MIN <= value <= INT64_MAX:
            raise InputError(f"{where} expects an integer that fits in 64 bits, got '{raw}'")
    elif opt.type is float:
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"{where} expects a number, got '{raw}'") from None
        if not math.isfinite(value):  # inf, nan, and 1e400 (which reads as inf)
            raise InputError(f"{where} expects a finite number, got '{raw}'")
    else:
        if opt.choices is not None and raw not in opt.choices and raw != opt.default:
            raise InputError(f"{where} expects one of {', '.join(opt.choices)}, got '{raw}'")
        if opt.validate is not None:
            try:
                opt.validate(raw)
            except InputError as err:
                raise InputError(f"{where}: {err}") from None
        return raw
    if (opt.minimum is not None and value < opt.minimum) or (opt.maximum is not None and value > opt.maximum):
        raise _range_error(info, opt, raw)
    return value


def _check_extra(info: PassInfo, key: str, raw: str) -> None:
    """Pass-through options stay strings for whoever takes them, but a value that reads
    as a number must be finite, and a quantity (unit-suffixed key) a number >= 0."""
    where = f"pass '{info.argument}': option '{key}'"
    try:
        value = float(raw)
    except ValueError:
        if key.endswith(QUANTITY_SUFFIXES):
            raise InputError(f"{where} expects a number >= 0, got '{raw}'") from None
        return
    if not math.isfinite(value):
        raise InputError(f"{where} expects a finite number, got '{raw}'")
    if key.endswith(QUANTITY_SUFFIXES) and value < 0:
        raise InputError(f"{where} expects a number >= 0, got '{raw}'")


def _norm_key(key: str) -> str:
    return key.replace("_", "-").lower()


def closest_option(key: str, names, cutoff: float = 0.6) -> str | None:
    """The known option name closest to a misspelt `key` (difflib), if any is close."""
    names = list(names)
    by_norm = {_norm_key(n): n for n in names}
    hits = difflib.get_close_matches(_norm_key(key), list(by_norm), n=1, cutoff=cutoff)
    return by_norm[hits[0]] if hits else None


def _unknown_option(info: PassInfo, key: str, suggestion: str | None) -> InputError:
    names = ", ".join(o.name for o in info.options) or "none"
    hint = f"; did you mean '{suggestion}'?" if suggestion else ""
    return InputError(f"pass '{info.argument}' has no option '{key}'{hint} (options: {names})")


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


# How close (difflib ratio) a pass-through key must be to one of the pass's own options to
# be taken for a misspelling of it: hardwre/hardware 0.93, backnd/backend 0.92.
TYPO_CUTOFF = 0.8


def parse_options(info: PassInfo, text: str) -> dict:
    """Typed options of `info` from MLIR option text; unknown keys are errors unless the
    pass takes extra options (then they are collected under "extra")."""
    known = {o.name: o for o in info.options}
    values = {o.name: o.default for o in info.options}
    extra: dict[str, str] = {}
    seen: set[str] = set()
    for key, raw in split_option_text(text):
        norm = key.replace("_", "-") if key.replace("_", "-") in known else key
        if norm in seen:  # as mlir-opt: an option may occur once (the last one silently won)
            raise InputError(f"pass '{info.argument}': option '{norm}' given more than once")
        seen.add(norm)
        if norm in known:
            values[norm] = _convert(info, known[norm], raw)
        elif info.extra_options_help is not None:
            # Pass-through keys may be anything, but one a letter or two away from an
            # option of the pass itself is a typo (hardwre=...), not a backend option.
            near = closest_option(key, known, cutoff=TYPO_CUTOFF)
            if near is not None:
                raise _unknown_option(info, key, near)
            _check_extra(info, key, raw)
            extra[key] = raw
        else:
            raise _unknown_option(info, key, closest_option(key, known))
    values["extra"] = extra
    return values


def warn_recosting(module: ir.Operation, hardware_name: str, session: PassSession) -> None:
    """Before annotate-cost costs a module that extract-collectives already annotated: its
    `costmodel.collective` times stay those of that run's system, and the new summary
    drops the collective totals. Warn when that system's devices are not `hardware_name`
    (the module would mix two machines)."""
    attrs = module.attributes
    if "costmodel.summary" not in attrs:  # costmodel.engine.SUMMARY_ATTR
        return
    summary = ir.DictAttr(attrs["costmodel.summary"])
    if "system" not in summary:  # extract-collectives has not run
        return
    system = ir.StringAttr(summary["system"]).value
    system_hw = ir.StringAttr(summary["system_hardware"]).value if "system_hardware" in summary else None
    if system_hw == hardware_name:
        return
    devices = f"'{system_hw}' devices" if system_hw else "devices of unknown hardware"
    session.diagnostics.warning(
        module.location,
        f"annotate-cost: costing for hardware '{hardware_name}' a module whose collectives extract-collectives "
        f"timed for system '{system}' ({devices}): the costmodel.collective times stay those of '{system}' "
        f"and the summary loses its collective totals; run --annotate-cost before --extract-collectives",
    )


def quote_for_display(text: str) -> str:
    return shlex.quote(text)
