"""The one place that knows how to build an MLIR context and move modules in and out.

Everything else in the package receives a context (or an operation that carries one).
The bindings are jaxlib's (`jaxlib.mlir`), built with the StableHLO, CHLO, MHLO and
Shardy dialects and their passes.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import struct
import sys
from typing import Iterable


def _import_bindings():
    """Import jaxlib's MLIR bindings without dragging numpy in.

    `jaxlib.mlir.ir` imports numpy (~50 ms, a tenth of a `stablehlo-opt` run) only to
    register attribute builders for `F64ElementsAttr`-style op arguments, which none of
    the dialects we use need. When nobody has imported numpy yet, hide it for the
    duration of the import; numpy stays importable afterwards (DenseElementsAttr's
    buffer protocol still works once numpy is imported by whoever needs it).
    """
    hide = "numpy" not in sys.modules and "jaxlib.mlir.ir" not in sys.modules
    if hide:
        sys.modules["numpy"] = None  # type: ignore[assignment]  # makes `import numpy` fail fast
    try:
        from jaxlib.mlir import ir as _ir, passmanager as _pm
    finally:
        if hide and sys.modules.get("numpy", 0) is None:
            del sys.modules["numpy"]
    if hide:
        _register_elements_builders(_ir)
    return _ir, _pm


def _register_elements_builders(_ir) -> None:
    """The four builders `jaxlib.mlir.ir` registers when numpy is importable, with numpy
    imported on first use instead (op builders such as stablehlo.PadOp need them when
    handed Python lists)."""

    def make(get_type, np_dtype):
        def build(x, context):
            import numpy as np

            return _ir.DenseElementsAttr.get(
                np.array(x, dtype=np_dtype), type=get_type(context), context=context
            )

        return build

    builders = {
        "F64ElementsAttr": (lambda c: _ir.F64Type.get(context=c), "float64"),
        "I32ElementsAttr": (lambda c: _ir.IntegerType.get_signless(32, context=c), "int32"),
        "I64ElementsAttr": (lambda c: _ir.IntegerType.get_signless(64, context=c), "int64"),
        "IndexElementsAttr": (lambda c: _ir.IndexType.get(context=c), "int64"),
    }
    for kind, (get_type, np_dtype) in builders.items():
        if not _ir.AttrBuilder.contains(kind):
            _ir.AttrBuilder.insert(kind, make(get_type, np_dtype))


ir, passmanager = _import_bindings()  # re-exported for the package
from jaxlib.mlir._mlir_libs import _jax_mlir_ext  # noqa: E402
from jaxlib.mlir.dialects import chlo, mhlo, sdy, stablehlo  # noqa: E402

__all__ = [
    "ir",
    "passmanager",
    "make_context",
    "load_module",
    "print_module",
    "format_location",
    "location_name",
    "location_parts",
    "Diagnostic",
    "DiagnosticEngine",
    "InputError",
    "MLIR_BYTECODE_MAGIC",
    "write_atomically",
    "count_attr",
    "recursion_limit",
    "attr_number",
    "captured_stderr",
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
    from .shapes import clear_type_cache  # its cache would keep the previous contexts alive

    clear_type_cache()
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


def location_name(loc: ir.Location) -> str | None:
    """The first name inside `loc` (JAX's op path such as `jit(f)/jit(main)/dot_general`,
    or an argument name), or None: what identifies an op of a serialized export whose
    locations carry no file position."""
    tid = loc.typeid
    if tid == ir.NameLoc.static_typeid:
        name = ir.NameLoc(loc)
        return name.name_str or location_name(name.child_loc)
    if tid == ir.CallSiteLoc.static_typeid:
        return location_name(ir.CallSiteLoc(loc).callee)
    if tid == ir.FusedLoc.static_typeid:
        for sub in ir.FusedLoc(loc).locations:
            found = location_name(sub)
            if found:
                return found
    return None


def location_op_name(loc: ir.Location) -> str | None:
    """The op's full JAX name (`jit(f)/jvp(M)/jit(relu)/max`), or None: as `location_name`,
    but an op inlined from a private function (a call-site location) is named by its call
    site's name followed by its own, which JAX gives relative to the function (`max`)."""
    if loc.typeid == ir.CallSiteLoc.static_typeid:
        site = ir.CallSiteLoc(loc)
        callee, caller = location_op_name(site.callee), location_op_name(site.caller)
        if callee and caller:
            return f"{caller}/{callee}"
        return callee or caller
    return location_name(loc)


def format_location(loc: ir.Location | None, fallback: str = "<unknown>") -> str:
    """`file:line:col` as mlir-opt prints it; else the location's name (serialized JAX
    exports: `jit(f)/jit(main)/dot_general`); else `fallback` for unknown locations."""
    if loc is None:
        return fallback
    parts = location_parts(loc)
    if parts is None or parts[1] <= 0:
        return location_name(loc) or fallback
    return f"{parts[0]}:{parts[1]}:{parts[2]}"


@dataclasses.dataclass
class Diagnostic:
    severity: str  # error | warning | note | remark
    file: str | None
    line: int
    col: int
    message: str
    notes: list["Diagnostic"] = dataclasses.field(default_factory=list)
    name: str | None = None  # the location's name when it has no file position

    def where(self) -> str:
        """`file:line:col: `; with no file position (unknown or name-only locations of
        serialized exports) the file alone, never a made-up `file:0:0`."""
        if self.file is None:
            return ""
        if self.line > 0:
            return f"{self.file}:{self.line}:{self.col}: "
        return f"{self.file}: "

    def text(self) -> str:
        """The message, with the location's name when that is all that identifies the op."""
        return f'{self.message} (at "{self.name}")' if self.name else self.message

    def render(self) -> str:
        text = f"{self.where()}{self.severity}: {self.text()}"
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
        self.input_is_bytecode = False  # then a `<stdin>` position is an earlier run's
        self.diagnostics: list[Diagnostic] = []

    def _make(self, severity: str, loc: ir.Location | None, message: str) -> Diagnostic:
        parts = location_parts(loc) if loc is not None else None
        if parts is None or parts[1] <= 0:
            name = location_name(loc) if loc is not None else None
            return Diagnostic(severity, self.source_name if loc is not None else None, 0, 0, message, name=name)
        if parts[0] == "<stdin>" and (self.source_name != "<stdin>" or self.input_is_bytecode):
            # A file written by an earlier run that read stdin: that stream is gone, so
            # `<stdin>:L:C` would point nowhere. Name the file we read and keep the old
            # position as a hint.
            return Diagnostic(severity, self.source_name, 0, 0, message,
                              name=f"<stdin>:{parts[1]}:{parts[2]} of the input it was made from")
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


def _load_hlo_text(ctx: ir.Context, text: str, source_name: str) -> ir.Operation:
    """XLA HLO text (an `--xla_dump_to` file, `jax.jit(f).lower(x).compile().as_text()`),
    converted as jaxlib converts it (`hlo_to_stablehlo`): an optimized module becomes
    StableHLO with XLA's fusions (`mhlo.fusion`) and library calls, which annotate-cost
    costs one kernel per XLA launch; an unoptimized one plain StableHLO."""
    from jaxlib import _hlo, _jax

    try:
        proto = _hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
        data = _jax.mlir.hlo_to_stablehlo(proto)
    except Exception as err:  # XLA's parser or converter: its status message
        lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
        # "was parsing 5:19: error: ..." -> "file:5:19: error: ..."
        where = next((m for m in (re.match(r"was parsing (\d+:\d+): (.*)", line) for line in lines) if m), None)
        if where is not None:
            raise InputError(f"{source_name}:{where.group(1)}: {where.group(2)}") from None
        raise InputError(f"{source_name}: not XLA HLO text XLA can read: {lines[0] if lines else type(err).__name__}") from None
    with ctx:
        try:
            op = ir.Module.parse(data).operation
        except ir.MLIRError as err:  # XLA read it, but its StableHLO does not verify
            first = err.error_diagnostics[0].message if err.error_diagnostics else str(err)
            first = first.strip().splitlines()[0] if first.strip() else "it does not verify"
            raise InputError(f"{source_name}: XLA HLO that is not a valid program: {first}") from None
        _hlo_header_attrs(op, text)
        _hlo_known_trip_counts(op, text)
    return op


# a loop's trip count given by the user or by XLA (`known_trip_count`): annotate-cost reads it
TRIP_COUNT_ATTR = "costmodel.trip_count"

# the HloModule line's replica and partition counts (HloModule::ToString prints each when
# it is not 1), which XLA's converter does not carry into the module
_HLO_HEADER_COUNT = re.compile(r"[,\s](replica_count|num_partitions)=(\d+)")


def _hlo_header_attrs(op: ir.Operation, text: str) -> None:
    """`mhlo.num_replicas` / `mhlo.num_partitions` from the HloModule line, as JAX's
    lowering writes them: a partitioned dump's collectives name devices beyond device 0."""
    header = hlo_text_start(text).split("\n", 1)[0]
    keys = {"replica_count": "mhlo.num_replicas", "num_partitions": "mhlo.num_partitions"}
    for key, value in _HLO_HEADER_COUNT.findall(header):
        if keys[key] not in op.attributes and 1 <= int(value) < 2**31:
            op.attributes[keys[key]] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), int(value))


_HLO_WHILE = re.compile(r"\swhile\(")
_HLO_KNOWN_TRIPS = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')
_HLO_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')


def _hlo_known_trip_counts(op: ir.Operation, text: str) -> None:
    """XLA's `known_trip_count` of each while loop (its backend_config, which the
    converter drops) as `costmodel.trip_count` on the converted `stablehlo.while`. Loops
    are matched by their op name (the location the converter gives them, from the
    instruction's metadata): all loops of one name get the count when the HLO gives
    them all the same one, and there are as many of them on both sides."""
    counts: dict = {}
    for line in text.splitlines():
        if not _HLO_WHILE.search(line):
            continue
        trips = _HLO_KNOWN_TRIPS.search(line)
        name = _HLO_OP_NAME.search(line)
        key = name.group(1).replace('\\"', '"').replace("\\\\", "\\") if name else None
        counts.setdefault(key, []).append(int(trips.group(1)) if trips else None)
    if not any(n is not None for ns in counts.values() for n in ns):
        return
    loops: dict = {}
    for child in walk_ops(op):
        if child.name == "stablehlo.while":
            loops.setdefault(location_name(child.location), []).append(child)
    i64 = ir.IntegerType.get_signless(64)
    for key, ns in counts.items():
        ops = loops.get(key, [])
        if len(ops) != len(ns) or None in ns or len(set(ns)) != 1 or ns[0] >= 2**63:
            continue
        for w in ops:
            if TRIP_COUNT_ATTR not in w.attributes:
                w.attributes[TRIP_COUNT_ATTR] = ir.IntegerAttr.get(i64, ns[0])


def hlo_text_start(text: str) -> str:
    """`text` from its first line that is not blank or a comment (`//`, `/* */`): HLO
    text starts there with `HloModule`."""
    pos, n = 0, len(text)
    while pos < n:
        if text[pos].isspace():
            pos += 1
        elif text.startswith("//", pos):
            end = text.find("\n", pos)
            pos = n if end < 0 else end + 1
        elif text.startswith("/*", pos):
            end = text.find("*/", pos + 2)
            pos = n if end < 0 else end + 2
        else:
            break
    return text[pos:]


def load_module(ctx: ir.Context, data: bytes | str, source_name: str) -> ir.Operation:
    """Parse text or bytecode (plain MLIR bytecode or a StableHLO portable artifact).

    Accepts: MLIR text (StableHLO, or VHLO as printed from a portable artifact), MLIR
    bytecode, StableHLO portable artifacts (`jax.export`'s `mlir_module_serialized`),
    and a whole serialized `jax.export.Exported` (`Exported.serialize()`, a flatbuffer
    that wraps the portable artifact), and XLA HLO text (`HloModule ...`: an XLA dump,
    `compiled.as_text()`; `_load_hlo_text`). Returns the top-level `builtin.module`
    operation, verified; a file holding other top-level ops is wrapped in an implicit
    module as mlir-opt does. VHLO is upgraded to StableHLO. Raises `ir.MLIRError`
    with the parser's diagnostics on malformed text, `InputError` (one line) on
    unreadable bytes.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    if data.startswith(MLIR_BYTECODE_MAGIC):
        op = _load_bytecode(ctx, data, source_name)
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            embedded = _embedded_artifact(data)
            if embedded is None:
                raise InputError(
                    f"{source_name}: not MLIR text (invalid UTF-8 at byte {err.start}) "
                    "nor MLIR bytecode"
                ) from None
            op = _load_bytecode(ctx, embedded, source_name)
        else:
            if text.startswith("\ufeff"):  # a byte order mark, as some editors write
                text = text[1:]
            if hlo_text_start(text).startswith("HloModule"):
                op = _load_hlo_text(ctx, text, source_name)
            else:
                op = _parse_text(ctx, text, source_name)
    if op.name != "builtin.module":
        op = _wrap_in_module(ctx, op)
    if _has_vhlo(op):
        _legalize_vhlo(ctx, op)
    return op


def _parse_text(ctx: ir.Context, text: str, source_name: str) -> ir.Operation:
    with ctx:
        try:
            return ir.Operation.parse(text, source_name=source_name).operation
        except ir.MLIRError as err:
            if not any("single top-level operation" in d.message for d in err.error_diagnostics):
                raise
        # Several top-level ops (or none): wrap them in an implicit module. The prefix
        # sits on line 1 so that line numbers of the user's text are unchanged (only
        # columns of something on line 1 shift, by 8).
        return ir.Operation.parse("module {" + text + "\n}", source_name=source_name).operation


def _embedded_artifact(data: bytes) -> bytes | None:
    """The portable artifact inside a serialized `jax.export.Exported`, if `data` is one.

    The flatbuffer stores `mlir_module_serialized` as a byte vector: a little-endian
    u32 length right before the bytes, which start with the MLIR bytecode magic.
    """
    pos = data.find(MLIR_BYTECODE_MAGIC)
    while pos >= 4:
        (length,) = struct.unpack_from("<I", data, pos - 4)
        if pos + length <= len(data) and length > len(MLIR_BYTECODE_MAGIC):
            return data[pos : pos + length]
        pos = data.find(MLIR_BYTECODE_MAGIC, pos + 1)
    return None


def _load_bytecode(ctx: ir.Context, data: bytes, source_name: str) -> ir.Operation:
    with ctx:
        try:
            return ir.Module.parse(data).operation
        except ir.MLIRError as err:
            first = err.error_diagnostics[0].message if err.error_diagnostics else str(err)
        try:
            # Portable artifacts of an older StableHLO: the deserializer upgrades them.
            with captured_stderr():  # it prints its complaints straight to fd 2
                return stablehlo.deserialize_portable_artifact(ctx, data).operation
        except Exception:  # the binding raises a plain ValueError on bad input
            pass
    first = first.strip().splitlines()[0] if first.strip() else "malformed bytecode"
    raise InputError(f"{source_name}: cannot read MLIR bytecode: {first}")


def _has_vhlo(op: ir.Operation) -> bool:
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                if child.operation.name.startswith("vhlo."):
                    return True
    return False


def _legalize_vhlo(ctx: ir.Context, op: ir.Operation) -> None:
    with ctx:
        target = stablehlo.get_current_version()
        pm = passmanager.PassManager.parse(
            f"builtin.module(vhlo-to-version{{target={target}}},vhlo-legalize-to-stablehlo)"
        )
        pm.run(op)


def print_module(
    op: ir.Operation,
    *,
    bytecode: bool = False,
    debug_info: bool = False,
    generic: bool = False,
    large_elements_limit: int | None = None,
    size_hint: int | None = None,
) -> bytes:
    """The module as text (utf-8) or bytecode.

    Text comes from MLIR's printer writing a file natively (`_print_native`) when the
    temporary directory has room for it, else from `get_asm`; both give the same bytes.
    `size_hint` is the size of the input the module was parsed from (bytes), for the room
    check."""
    if bytecode:
        buf = io.BytesIO()
        op.write_bytecode(buf)
        return buf.getvalue()
    text = _print_native(
        op,
        debug_info=debug_info,
        generic=generic,
        large_elements_limit=large_elements_limit,
        size_hint=size_hint,
    )
    if text is not None:
        return text
    # binary=True hands back bytes: no utf-8 decode/encode round trip of a large string.
    text = op.get_asm(
        binary=True,
        large_elements_limit=large_elements_limit,
        enable_debug_info=debug_info,
        print_generic_op_form=generic,
        assume_verified=True,
    )
    if not text.endswith(b"\n"):
        text += b"\n"
    return text


# Room the native printer needs in the temporary directory, beyond the input's size times
# the factor: annotations add a few hundred bytes per op, and bytecode input prints several
# times larger as text. Without room, text comes from get_asm (slower, never a failure).
NATIVE_PRINT_BASE_BYTES = 256 << 20
NATIVE_PRINT_INPUT_FACTOR = 32
NATIVE_PRINT_DEFAULT_BYTES = 2 << 30  # the room asked for when the input size is unknown
NO_RESOURCE_LIMIT = (1 << 62)  # a resource-string limit no blob reaches


def _no_op_pass(op, pass_) -> None:
    """The pass after which the IR printer writes the module (it changes nothing)."""


def _print_native(op, *, debug_info: bool, generic: bool, large_elements_limit, size_hint) -> bytes | None:
    """The module's text as `get_asm` gives it, printed by MLIR's IR printer into a file.

    Why: the bindings' `get_asm`/`print(file=)` hand every token to a Python callback through
    an unbuffered stream (about 22 million calls for a 70 MB module), which takes half the
    time of printing a large module. The IR printer of a pass manager, given a directory,
    writes through a buffered file stream instead. It prints the module after a no-op pass,
    preceded by one header line and followed by blank lines, which are dropped here.

    None when this path is unavailable (not a builtin.module, no room in the temporary
    directory, a module that does not verify, any failure): the caller then uses get_asm.
    LLVM ends the process on a write error of that file, hence the room check before
    printing."""
    import glob
    import shutil
    import tempfile

    if op.name != "builtin.module":
        return None
    try:
        if op.parent is not None:  # a nested module: its own text is what get_asm prints
            return None
    except ValueError:  # the bindings' answer for a detached (top-level) operation
        pass
    tmp = tempfile.gettempdir()
    need = NATIVE_PRINT_DEFAULT_BYTES if size_hint is None else NATIVE_PRINT_BASE_BYTES + NATIVE_PRINT_INPUT_FACTOR * size_hint
    try:
        if shutil.disk_usage(tmp).free < need:
            return None
        d = tempfile.mkdtemp(prefix="costmodel-print-", dir=tmp)
    except OSError:
        return None
    try:
        pm = passmanager.PassManager("builtin.module", context=op.context)
        pm.add(_no_op_pass, "costmodel-print")
        pm.enable_verifier(False)
        pm.enable_ir_printing(
            print_before_all=False,
            print_after_all=True,
            print_module_scope=False,  # the module is the op printed; needs no single-threaded context
            large_elements_limit=large_elements_limit,
            # resources are kept whole, as get_asm keeps them (by default the IR printer
            # elides them at the elements limit too)
            large_resource_limit=None if large_elements_limit is None else NO_RESOURCE_LIMIT,
            enable_debug_info=debug_info,
            print_generic_op_form=generic,
            tree_printing_dir_path=d,
        )
        with captured_stderr():  # "Error opening output file ...": the fallback says nothing
            pm.run(op)
        files = glob.glob(os.path.join(glob.escape(d), "**", "*.mlir"), recursive=True)
        if len(files) != 1:
            return None
        with open(files[0], "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - 8))
            tail = f.read()
            trailing = len(tail) - len(tail.rstrip(b"\n"))
            f.seek(0)
            header = f.readline()
            if not header.startswith(b"// -----// IR Dump After ") or trailing < 1:
                return None
            # the module's text and one newline, read once (no copy of a large buffer)
            text = f.read(size - len(header) - trailing + 1)
        if not generic and text.startswith(b'"builtin.module"'):
            # the printer verifies first and prints a module that fails in generic form;
            # get_asm (assume_verified) prints what the passes left, as before
            return None
        return text
    except (ir.MLIRError, OSError, RuntimeError, ValueError):
        return None
    finally:
        shutil.rmtree(d, ignore_errors=True)


class captured_stderr:
    """Capture what native code writes straight to file descriptor 2 (LLVM's `errs()`:
    pass-option parse errors, the portable-artifact deserializer) so that it can be
    folded into a one-line error instead of leaking onto the terminal.

        with captured_stderr() as cap:
            ...
        cap.text   # what was written
    """

    def __init__(self) -> None:
        self.text = ""
        self._saved = -1
        self._tmp = None

    def __enter__(self) -> "captured_stderr":
        import tempfile

        try:
            sys.stderr.flush()
            self._tmp = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._tmp.fileno(), 2)
        except (OSError, ValueError):  # no usable fd 2 (embedded interpreters): capture nothing
            self._saved = -1
        return self

    def __exit__(self, *exc) -> None:
        if self._saved >= 0:
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._tmp.seek(0)
            self.text = self._tmp.read().decode("utf-8", errors="replace")
        if self._tmp is not None:
            self._tmp.close()


def write_atomically(path: str, data: bytes) -> None:
    """Write one output file safely (`costmodel.outputs.write_file`): regular files
    through a temp file + rename (mode kept, symlinks followed), devices and pipes
    streamed to, never replaced. Raises `costmodel.outputs.OutputError` (an OSError)."""
    from costmodel.outputs import write_file

    write_file(path, data)


def f64_attr(value: float):
    """An f64 FloatAttr that prints as a decimal literal.

    MLIR prints an integral double it cannot write in 6-digit scientific form (e.g.
    10215264.0) as a hex bit pattern; moving such a value by one ulp (a relative change
    of 1e-16) makes it print as a plain decimal. Needs an active context.
    """
    import math

    value = float(value)
    if value == int(value) and abs(value) >= 1e6 and math.isfinite(value):
        digits = f"{value:.5e}"
        if float(digits) != value:
            value = math.nextafter(value, math.inf)
    return ir.FloatAttr.get_f64(value)


class recursion_limit:
    """Set Python's recursion limit for a block, then restore it.

    `recursion_limit(200_000)` around our IR walkers (pure Python frames, which CPython
    3.11+ keeps off the C stack) bounds nesting depth by memory, not by the default 1000;
    `recursion_limit(2_000)` around C code that recurses on the C stack and trusts the
    limit (json) keeps it from overflowing that stack."""

    def __init__(self, limit: int, *, at_least: bool = True) -> None:
        self.limit = limit
        self.at_least = at_least
        self._old = 0

    def __enter__(self):
        self._old = sys.getrecursionlimit()
        new = max(self._old, self.limit) if self.at_least else min(self._old, self.limit)
        sys.setrecursionlimit(new)
        return self

    def __exit__(self, *exc) -> None:
        sys.setrecursionlimit(self._old)


DEEP_RECURSION = 200_000
INT64_MAX = (1 << 63) - 1
# Counts that overflowed int64 and were written as f64 (read by the passes to warn once).
OVERFLOWED_COUNTS: list[int] = []


def count_attr(value: int):
    """An i64 IntegerAttr for a count, or an f64 FloatAttr when it does not fit in int64
    (a tensor<4294967296x4294967296x1024xf32> has 1.8e22 elements); needs an active
    context. Overflows are recorded in OVERFLOWED_COUNTS."""
    value = int(value)
    if -INT64_MAX - 1 <= value <= INT64_MAX:
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    OVERFLOWED_COUNTS.append(value)
    return f64_attr(float(value))


def dict_attr_values(d, skip=()) -> dict:
    """{name: value} of a DictAttr's bool, integer, float and string entries (others and
    the names in `skip` left out)."""
    out = {}
    for i in range(len(d)):
        entry = d[i]
        if entry.name in skip:
            continue
        for cast in (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr):
            try:
                out[entry.name] = cast(entry.attr).value
                break
            except (ValueError, TypeError):
                continue
    return out


def dict_entry(op, attr_name: str, key: str):
    """Entry `key` of the DictAttr `op.attributes[attr_name]` (a custom call's
    `backend_config` or `mhlo.backend_config`); None when either is absent or the
    attribute is no dictionary (an opaque string config)."""
    if attr_name not in op.attributes:
        return None
    try:
        d = ir.DictAttr(op.attributes[attr_name])
    except (ValueError, TypeError):
        return None
    return d[key] if key in d else None


def attr_number(attr) -> int | float:
    """The value of an integer or float attribute (counts may be either, see count_attr)."""
    try:
        return ir.IntegerAttr(attr).value
    except (ValueError, TypeError):
        return ir.FloatAttr(attr).value


def has_public_body(module: ir.Operation) -> bool:
    """Does the module define a public function with a body (a program to run)?"""
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and op.regions[0].blocks:
            vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
            if vis is None or ir.StringAttr(vis).value == "public":
                return True
    return False


# Computations XLA outlined from its fusions (an optimized module converted to MLIR, the
# *-opt.mlir workloads): a call of one is one kernel, never inlined nor re-fused.
OUTLINED_FUSION_PREFIXES = ("fused_", "gemm_fusion_", "loop_", "input_", "wrapped_", "triton_")


def inline_calls(module: ir.Operation, max_rounds: int = 64, drop_uncalled: bool = False) -> int:
    """Inline every `func.call` of a function with a one-block body, as XLA does before
    it fuses (the MLIR `inline` pass does nothing here: jaxlib's bindings register no
    inliner for func/StableHLO). Calls inside inlined bodies are inlined in the next
    round; a recursive cycle stops after `max_rounds`. With `drop_uncalled`, the private
    functions no longer referenced are then removed (`symbol-dce`: their kernels would
    never run). In a module XLA already compiled (an `mhlo.fusion` in it), calls of its
    outlined fusions (OUTLINED_FUSION_PREFIXES) stay: each is one kernel. Needs the
    module's context active. Returns the number of calls inlined."""
    funcs = {}
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks) == 1:
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    _check_inlined_size(funcs)
    done = 0
    compiled = None
    for _ in range(max_rounds):
        calls = []
        for op in nested_ops(module):
            name = op.name
            if name == "func.call":
                calls.append(op)
            elif compiled is None and name == "mhlo.fusion":
                compiled = True
        inlined = 0
        for call in calls:
            name = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
            callee = funcs.get(name)
            if callee is None or (compiled and name.startswith(OUTLINED_FUSION_PREFIXES)):
                continue
            with ir.InsertionPoint(call), call.location:
                outs = _jax_mlir_ext.inlined_func_call(callee, list(call.operands), call.location)
            for r, v in zip(call.results, outs):
                r.replace_all_uses_with(v)
            call.erase()
            inlined += 1
        done += inlined
        if not inlined:
            break
    if done and drop_uncalled:
        passmanager.PassManager.parse("builtin.module(symbol-dce)").run(module)
    return done


# the most ops a module may grow to by inlining its calls (each op costs MLIR a few hundred
# bytes: this is several GB); a call tree that fans out (f calls g twice, g calls h twice,
# ...) reaches it long before its text is large
MAX_INLINED_OPS = 10_000_000


def _check_inlined_size(funcs: dict) -> None:
    """InputError when inlining every call would make more than MAX_INLINED_OPS ops: the
    inlined size of a function is its own ops plus its callees' inlined sizes, once per
    call (a recursive call counts as one op: it is never fully inlined)."""
    own: dict = {}
    calls: dict = {}
    for name, fn in funcs.items():
        n, callees = 0, []
        for o in nested_ops(fn):
            if o.name == "func.call":
                callee = ir.FlatSymbolRefAttr(o.attributes["callee"]).value
                if callee in funcs:
                    callees.append(callee)
                    continue
            n += 1
        own[name], calls[name] = n, callees
    order, back = call_graph_order(calls, list(funcs))
    size: dict = {}
    for name in order:  # callees before their callers
        total = own[name] + sum(1 if (name, c) in back else size[c] for c in calls[name])
        size[name] = total
        if total > MAX_INLINED_OPS:
            raise InputError(
                f"inlining the calls of '{name}' would make {total:,} ops (its calls fan out: a function called "
                f"several times calls others several times); at most {MAX_INLINED_OPS:,}: keep the calls as "
                "kernel boundaries (costmodel predict / kernels --no-inline)"
            )


def call_graph_order(calls: dict, roots) -> tuple[list, set]:
    """(post-order, back edges) of a call graph (`calls`: function -> the functions it
    calls) from `roots`, depth first and iterative (call chains deeper than Python's
    stack): every callee comes before its callers, except along a back edge (caller,
    callee), a call into a function still on the chain (recursion)."""
    order: list = []
    back: set = set()
    state: dict = {}  # 1: on the chain, 2: done
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(list(calls[root])))]
        while stack:
            name, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[name] = 2
                order.append(name)
            elif state.get(nxt) == 1:
                back.add((name, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(list(calls[nxt]))))
    return order, back


def nested_ops(op) -> list:
    """Every op nested in `op`'s regions, pre-order (not `op` itself), as a list walked
    by MLIR itself (about twice as fast as `walk_ops`). A snapshot: for reading; a loop
    that erases or inserts ops walks with `walk_ops`."""
    out: list = []
    add = out.append
    advance = ir.WalkResult.ADVANCE

    def visit(o):
        add(o)
        return advance

    op.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out[1:]


def callee_of(call):
    """The func.func a func.call calls (looked up in the enclosing module's symbol table),
    or None when it cannot be found."""
    try:
        name = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        top = call
        while top.parent is not None:
            top = top.parent
        return ir.SymbolTable(top)[name]
    except (KeyError, ValueError, TypeError, AttributeError):
        return None


def defining_op(value):
    """The operation that defines `value` (an ir.Operation), or None for a block
    argument."""
    if isinstance(value, ir.BlockArgument):
        return None
    owner = value.owner
    return owner.operation if hasattr(owner, "operation") else owner


def _child_ops(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation


def walk_ops(op):
    """Every op nested in `op`'s regions, pre-order (not `op` itself), lazily: an op's
    children are read after it is yielded. An explicit stack, not recursive generators
    (each op of a nest d deep passed through d of them: 600 nested whiles took 29 s)."""
    stack = [_child_ops(op)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        yield child
        stack.append(_child_ops(child))
