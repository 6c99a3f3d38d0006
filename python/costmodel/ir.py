"""The one place that knows how to build an MLIR context and move modules in and out.

Everything else in the package receives a context (or an operation that carries one).
The bindings are jaxlib's (`jaxlib.mlir`), built with the StableHLO, CHLO, MHLO and
Shardy dialects and their passes.
"""

from __future__ import annotations

import dataclasses
import io
import os
from typing import Iterable

from jaxlib.mlir import ir, passmanager  # noqa: F401  (re-exported for the package)
from jaxlib.mlir._mlir_libs import _jax_mlir_ext
from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo

__all__ = [
    "ir",
    "passmanager",
    "make_context",
    "load_module",
    "print_module",
    "format_location",
    "location_parts",
    "Diagnostic",
    "DiagnosticEngine",
    "InputError",
    "MLIR_BYTECODE_MAGIC",
]

MLIR_BYTECODE_MAGIC = b"ML\xefR"

_PASSES_REGISTERED = False


class InputError(Exception):
    """A user mistake that is reported as one line (no traceback)."""


def _register_passes_once() -> None:
    global _PASSES_REGISTERED
    if not _PASSES_REGISTERED:
        stablehlo.register_stablehlo_passes()
        mhlo.register_mhlo_passes()
        _PASSES_REGISTERED = True


def make_context(*, allow_unregistered_dialects: bool = False) -> ir.Context:
    """A context with every dialect the bindings carry, and their passes registered."""
    registry = ir.DialectRegistry()
    _jax_mlir_ext.register_dialects(registry)
    ctx = ir.Context()
    ctx.append_dialect_registry(registry)
    stablehlo.register_dialect(ctx)
    chlo.register_dialect(ctx)
    sdy.register_dialect(ctx)
    mhlo.register_mhlo_dialect(ctx)
    ctx.load_all_available_dialects()
    ctx.allow_unregistered_dialects = allow_unregistered_dialects
    _register_passes_once()
    return ctx


# ---------------------------------------------------------------------------
# Diagnostics
# ---------------------------------------------------------------------------

_SEVERITY_NAMES = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.NOTE: "note",
    ir.DiagnosticSeverity.REMARK: "remark",
}


def location_parts(loc: ir.Location) -> tuple[str, int, int] | None:
    """(file, line, col) of the first file location inside `loc`, or None.

    Name locations yield their child, call sites their callee, fused locations their
    first member that has a file position (as MLIR's diagnostic printer does).
    """
    tid = loc.typeid
    if tid == ir.FileLineColLoc.static_typeid:
        f = ir.FileLineColLoc(loc)
        return f.filename, f.start_line, f.start_col
    if tid == ir.NameLoc.static_typeid:
        return location_parts(ir.NameLoc(loc).child_loc)
    if tid == ir.CallSiteLoc.static_typeid:
        return location_parts(ir.CallSiteLoc(loc).callee)
    if tid == ir.FusedLoc.static_typeid:
        for sub in ir.FusedLoc(loc).locations:
            parts = location_parts(sub)
            if parts is not None:
                return parts
    return None


def format_location(loc: ir.Location | None, fallback: str = "<unknown>") -> str:
    """`file:line:col` as mlir-opt prints it, or `fallback` for unknown locations."""
    if loc is None:
        return fallback
    parts = location_parts(loc)
    if parts is None:
        return fallback
    return f"{parts[0]}:{parts[1]}:{parts[2]}"


@dataclasses.dataclass
class Diagnostic:
    severity: str  # error | warning | note | remark
    file: str | None
    line: int
    col: int
    message: str
    notes: list["Diagnostic"] = dataclasses.field(default_factory=list)

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.file is not None else ""
        text = f"{where}{self.severity}: {self.message}"
        for note in self.notes:
            text += "\n" + note.render()
        return text


class DiagnosticEngine:
    """Collects diagnostics from MLIR (parse errors, pass failures) and from our passes.

    Our Python passes report warnings and remarks through `emit`; errors go through
    `emit` too and additionally make the pass fail. The driver prints them in order (or
    checks them against `expected-*` comments under --verify-diagnostics).
    """

    def __init__(self, source_name: str = "<stdin>") -> None:
        self.source_name = source_name
        self.diagnostics: list[Diagnostic] = []

    def _make(self, severity: str, loc: ir.Location | None, message: str) -> Diagnostic:
        parts = location_parts(loc) if loc is not None else None
        if parts is None:
            return Diagnostic(severity, self.source_name if loc is not None else None, 0, 0, message)
        return Diagnostic(severity, parts[0], parts[1], parts[2], message)

    def emit(self, severity: str, loc: ir.Location | None, message: str) -> Diagnostic:
        diag = self._make(severity, loc, message)
        self.diagnostics.append(diag)
        return diag

    def error(self, loc: ir.Location | None, message: str) -> Diagnostic:
        return self.emit("error", loc, message)

    def warning(self, loc: ir.Location | None, message: str) -> Diagnostic:
        return self.emit("warning", loc, message)

    def remark(self, loc: ir.Location | None, message: str) -> Diagnostic:
        return self.emit("remark", loc, message)

    def add_mlir(self, infos: Iterable) -> None:
        for info in infos:
            self.diagnostics.append(self._from_info(info))

    def _from_info(self, info) -> Diagnostic:
        diag = self._make(_SEVERITY_NAMES.get(info.severity, "error"), info.location, info.message)
        diag.notes = [self._from_info(n) for n in info.notes]
        return diag

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.diagnostics)


# ---------------------------------------------------------------------------
# Reading and writing modules
# ---------------------------------------------------------------------------


def _wrap_in_module(ctx: ir.Context, op: ir.Operation) -> ir.Operation:
    with ctx, op.location:
        module = ir.Module.create()
        module.body.append(op)
        return module.operation


def load_module(ctx: ir.Context, data: bytes | str, source_name: str) -> ir.Operation:
    """Parse text or bytecode (plain MLIR bytecode or a StableHLO portable artifact).

    Returns the top-level `builtin.module` operation; a file holding other top-level
    ops is wrapped in an implicit module as mlir-opt does. VHLO input (portable
    artifacts, or VHLO text) is upgraded to StableHLO. Raises `ir.MLIRError` with the
    parser's diagnostics on malformed input.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    if data.startswith(MLIR_BYTECODE_MAGIC):
        op = _load_bytecode(ctx, data, source_name)
    else:
        text = data.decode("utf-8", errors="replace")
        with ctx:
            try:
                op = ir.Operation.parse(text, source_name=source_name)
            except ir.MLIRError as err:
                if "single top-level operation" not in str(err):
                    raise
                # Several top-level ops: wrap them in an implicit module. The prefix sits
                # on line 1 so that line numbers of the user's text are unchanged.
                op = ir.Operation.parse("module {" + text + "\n}", source_name=source_name)
        op = op.operation
    if op.name != "builtin.module":
        op = _wrap_in_module(ctx, op)
    if _has_vhlo(op):
        _legalize_vhlo(ctx, op)
    return op


def _load_bytecode(ctx: ir.Context, data: bytes, source_name: str) -> ir.Operation:
    with ctx:
        try:
            op = ir.Operation.parse(data, source_name=source_name)
            return op.operation
        except ir.MLIRError:
            pass
        try:
            # StableHLO portable artifacts: VHLO bytecode.
            module = stablehlo.deserialize_portable_artifact(ctx, data)
            return module.operation
        except Exception as err:  # the binding raises a plain exception on bad input
            raise InputError(f"{source_name}: cannot read MLIR bytecode: {err}") from None


def _has_vhlo(op: ir.Operation) -> bool:
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                return child.operation.name.startswith("vhlo.")
    return False


def _legalize_vhlo(ctx: ir.Context, op: ir.Operation) -> None:
    with ctx:
        pm = passmanager.PassManager.parse("builtin.module(vhlo-to-version{target=current},vhlo-legalize-to-stablehlo)")
        pm.run(op)


def print_module(
    op: ir.Operation,
    *,
    bytecode: bool = False,
    debug_info: bool = False,
    generic: bool = False,
) -> bytes:
    """The module as text (utf-8) or bytecode."""
    if bytecode:
        buf = io.BytesIO()
        op.write_bytecode(buf)
        return buf.getvalue()
    text = op.get_asm(
        large_elements_limit=None,
        enable_debug_info=debug_info,
        print_generic_op_form=generic,
        assume_verified=True,
    )
    if not text.endswith("\n"):
        text += "\n"
    return text.encode("utf-8")


def write_atomically(path: str, data: bytes) -> None:
    """Write `data` to `path` through a temp file + rename: never a half-written file."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
