"""Hand a module of ours to IREE's compiler, in this process, and get the result back.

IREE's compiler (`iree-base-compiler`) carries its own MLIR build: the jaxlib objects we
work on cannot be passed to it. The module crosses as text (IREE 3.13 also reads
jaxlib 0.10's MLIR bytecode and StableHLO portable artifacts 1.0.0 ... 1.17.0; text is
what a user's `stablehlo-opt ... -o f.mlir && iree-compile f.mlir` exchanges too, so it
is the path we test). IREE runs in process through its C API (`iree.compiler.api`:
session, invocation, source), so a pipeline of ours and IREE's share one Python process
and no temporary files.

Before it is handed over, a CLONE of the module gets one unique location per op
(`loc("costmodel-op":<pre-order index + 1>:0)`): IREE keeps the location of every
StableHLO op on what it lowers it to (and fuses locations when it merges ops), so the
locations inside IREE's output say which of our ops each dispatch holds, and IREE's
diagnostics say which of our ops it rejects; we report those at the op's own location.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field

from ..ir import InputError, captured_stderr, ir, print_module, walk_ops

__all__ = [
    "MARKER",
    "DEFAULT_FLAGS",
    "IreeError",
    "IreeDiagnostic",
    "Prepared",
    "available",
    "prepare",
    "compile_prepared",
    "compile_module",
    "markers_of",
]

# The file name of the unique per-op locations (line = pre-order index + 1).
MARKER = "costmodel-op"
# IREE's llvm-cpu target for the host, with a generic CPU so that the result does not
# depend on the machine (and IREE does not warn about an unspecified CPU).
DEFAULT_FLAGS = (
    "--iree-hal-target-device=local",
    "--iree-hal-local-target-device-backends=llvm-cpu",
    "--iree-llvmcpu-target-cpu=generic",
)
EXTRA_HINT = "pip install 'stablehlo-costmodel[iree]'"


class IreeError(InputError):
    """IREE is missing or rejected the module. `diagnostics` holds what IREE said,
    mapped back to our ops (the first one is the message)."""

    def __init__(self, message: str, diagnostics: list | None = None):
        super().__init__(message)
        self.diagnostics: list[IreeDiagnostic] = list(diagnostics or [])


@dataclass
class IreeDiagnostic:
    severity: str  # error | warning | note | remark
    message: str  # one line
    op: object = None  # the op of OUR module it is about (None: the module / unknown)

    @property
    def location(self):
        return self.op.location if self.op is not None else None


@dataclass
class Prepared:
    """A module ready for IREE: the text handed over, and our ops by marker index."""

    text: bytes
    ops: list  # pre-order ops of OUR module; marker line i + 1 is ops[i]
    module: object  # our module
    names: set = field(default_factory=set)  # op names present


def available() -> bool:
    """Is IREE's compiler installed (the [iree] extra)?"""
    try:
        import iree.compiler.api  # noqa: F401
    except ImportError:
        return False
    return True


def _api():
    try:
        from iree.compiler import api
        from iree.compiler import ir as iree_ir
    except ImportError:
        raise IreeError(f"IREE's compiler is not installed ({EXTRA_HINT})") from None
    return api, iree_ir


# ---------------------------------------------------------------------------
# our module -> text for IREE
# ---------------------------------------------------------------------------


def prepare(module) -> Prepared:
    """Clone `module`, give every op of the clone a unique location, drop Shardy's
    leftovers of a partitioned program (the mesh, `sdy.*` attributes: IREE has no
    Shardy dialect), and print it. Raises IreeError (with the op) for a sharded program
    not yet partitioned: IREE would compile the global program, not a device's."""
    from ..partitioning import find_unpartitioned_sharding

    found = find_unpartitioned_sharding(module)
    if found is not None:
        d = IreeDiagnostic(
            "error",
            f"IREE cannot compile a sharded module that is not partitioned ({found.what}): IREE compiles "
            "one device's program; run --propagate-shardings first",
            found.op,
        )
        raise IreeError(_located(d), [d])
    ops = list(walk_ops(module))
    clone = module.clone()
    clone_ops = list(walk_ops(clone))
    with module.context:
        clone.location = ir.Location.file(MARKER, 0, 0)
        for i, op in enumerate(clone_ops):
            op.location = ir.Location.file(MARKER, i + 1, 0)
        _strip_shardy(clone, clone_ops)
    names = {op.name for op in walk_ops(clone)}
    text = print_module(clone, debug_info=True)
    return Prepared(text=text, ops=ops, module=module, names=names)


def _strip_shardy(clone, ops) -> None:
    """Mesh ops and `sdy.*` attributes go (a partitioned program computes without them),
    and so do sharding constraints that shard nothing (a one-device program's PRNG keys
    on an empty mesh: the identity; prepare refused any other before)."""
    for op in ops:
        if op.name == "sdy.mesh":
            op.erase()
            continue
        if op.name in ("sdy.sharding_constraint", "sdy.reshard"):
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()
            continue
        for key in [k for k in _names(op.attributes) if k.startswith("sdy.")]:
            del op.attributes[key]
        if op.name == "func.func":
            for key in ("arg_attrs", "res_attrs"):
                if key not in op.attributes:
                    continue
                dicts = []
                changed = False
                for d in ir.ArrayAttr(op.attributes[key]):
                    d = ir.DictAttr(d)
                    kept = {k: d[k] for k in _names(d) if not k.startswith("sdy.")}
                    changed |= len(kept) != len(d)
                    dicts.append(ir.DictAttr.get(kept))
                if changed:
                    op.attributes[key] = ir.ArrayAttr.get(dicts)
    for key in [k for k in _names(clone.attributes) if k.startswith("sdy.")]:
        del clone.attributes[key]


def _names(attrs) -> list[str]:
    """Attribute names of an op's attributes or a DictAttr (the bindings iterate either
    names or NamedAttributes)."""
    return [getattr(a, "name", a) for a in attrs]


# ---------------------------------------------------------------------------
# locations -> our ops
# ---------------------------------------------------------------------------


def markers_of(loc, iree_ir) -> set[int]:
    """Op indices (0-based) named by the markers inside an IREE location. Call sites
    count by their callee only (the caller is the function IREE inlined into its ABI
    wrapper); fused locations by all their parts."""
    out: set[int] = set()
    stack = [loc]
    while stack:
        loc = stack.pop()
        tid = loc.typeid
        if tid == iree_ir.FileLineColLoc.static_typeid:
            f = iree_ir.FileLineColLoc(loc)
            if f.filename == MARKER and f.start_line > 0:
                out.add(f.start_line - 1)
        elif tid == iree_ir.FusedLoc.static_typeid:
            stack.extend(iree_ir.FusedLoc(loc).locations)
        elif tid == iree_ir.CallSiteLoc.static_typeid:
            stack.append(iree_ir.CallSiteLoc(loc).callee)
        elif tid == iree_ir.NameLoc.static_typeid:
            stack.append(iree_ir.NameLoc(loc).child_loc)
    return out


_ILLEGAL_OP_TEXT = re.compile(r":\s*(%|\")")


def _one_line(message: str, limit: int = 240) -> str:
    """IREE's message without the op it prints after it ("...illegal: %12 = ...")."""
    first = message.strip().splitlines()[0] if message.strip() else "failed"
    m = _ILLEGAL_OP_TEXT.search(first)
    if m:
        first = first[: m.start()]
    return first if len(first) <= limit else first[: limit - 3] + "..."


_LOC_ALIAS = re.compile(rb'^#(loc\d+) = loc\("' + MARKER.encode() + rb'":(\d+):0\)', re.M)
_LOC_USE = re.compile(rb"loc\(#(loc\d+)\)")


def _op_of_text_line(prepared: Prepared, line: int):
    """Our op printed on `line` of the text handed to IREE (for parse errors, whose
    location is a position in that text)."""
    lines = prepared.text.split(b"\n")
    if not 1 <= line <= len(lines):
        return None
    aliases = {m.group(1): int(m.group(2)) for m in _LOC_ALIAS.finditer(prepared.text)}
    for m in _LOC_USE.finditer(lines[line - 1]):
        idx = aliases.get(m.group(1))
        if idx is not None and 0 < idx <= len(prepared.ops):
            return prepared.ops[idx - 1]
    return None


# ---------------------------------------------------------------------------
# compiling
# ---------------------------------------------------------------------------


@dataclass
class Compiled:
    """What IREE returned: `module` (IREE's own MLIR, alive while this object is) for a
    phase, or `vmfb` bytes for a full compilation."""

    module: object = None
    vmfb: bytes | None = None
    warnings: list = field(default_factory=list)  # IreeDiagnostic
    _keep: tuple = ()  # the session and invocation that own `module`'s context


# One IREE session kept for asking which ops IREE registers: reading a session's
# `context` keeps that whole session alive (about 3.4 MiB each, never freed: a fuzz run of
# 3,000 compilations grew to 11 GB), so it is read once per process, not per compilation.
_REGISTRY: list = []


def _registry_context(api):
    if not _REGISTRY:
        session = api.Session()
        ctx = session.context
        ctx.load_all_available_dialects()
        _REGISTRY.extend((session, ctx))
    return _REGISTRY[1]


def _check_ops_known(prepared: Prepared, iree_ctx) -> None:
    """Ops of dialects IREE does not have (mhlo, sdy ...) fail its parser with a position
    in our text; name them ourselves."""
    unknown = sorted(n for n in prepared.names if not iree_ctx.is_registered_operation(n))
    if not unknown:
        return
    diags = []
    for name in unknown:
        op = next(op for op in prepared.ops if op.name == name)
        diags.append(
            IreeDiagnostic("error", f"IREE cannot compile '{name}': IREE has no such op (it takes StableHLO, CHLO and func)", op)
        )
    raise IreeError(_located(diags[0]), diags)


def compile_prepared(
    prepared: Prepared,
    *,
    compile_to: str = "end",
    flags: tuple | list = DEFAULT_FLAGS,
    source_name: str = "module.mlir",
) -> Compiled:
    """Run IREE's pipeline on a prepared module up to phase `compile_to` (`input`,
    `global-optimization`, `dispatch-creation`, `flow`, ..., or `end` for a VM
    flatbuffer). Raises IreeError with IREE's errors mapped to our ops."""
    api, _ = _api()
    session = api.Session()
    try:
        session.set_flags(*flags)
    except ValueError as err:
        raise IreeError(f"bad IREE flag: {str(err).strip().splitlines()[-1].strip()}") from None
    _check_ops_known(prepared, _registry_context(api))
    inv = session.invocation()
    seen: list = []
    callback = _enable_callback_diagnostics(inv, seen)
    if compile_to != "end":
        _set_compile_to(api, inv, compile_to)
    source = api.Source.wrap_buffer(session, prepared.text, buffer_name=source_name)
    with captured_stderr() as cap:
        ok = inv.parse_source(source) and inv.execute()
        vmfb = None
        module = None
        if ok:
            if compile_to == "end":
                out = api.Output.open_membuffer()
                inv.output_vm_bytecode(out)
                vmfb = bytes(out.map_memory())
                out.close()
            else:
                module = inv.export_module()
    diags = [_map_diagnostic(prepared, severity, text, source_name) for severity, text in seen]
    errors = [d for d in diags if d.severity == "error"]
    if not ok or errors:
        if not errors:
            text = cap.text.strip().splitlines()
            errors = [IreeDiagnostic("error", _one_line(text[0]) if text else "IREE's pipeline failed")]
        errors = [
            IreeDiagnostic(
                d.severity,
                f"IREE cannot compile '{d.op.name}': {d.message}" if d.op is not None else f"IREE: {d.message}",
                d.op,
            )
            for d in errors
        ]
        raise IreeError(_located(errors[0]), errors)
    return Compiled(
        module=module,
        vmfb=vmfb,
        warnings=[d for d in diags if d.severity == "warning"],
        _keep=(session, inv, source, callback),
    )


def _located(d: IreeDiagnostic) -> str:
    """`file:line:col: message` (the one-line form of an IreeError)."""
    from ..ir import format_location

    if d.op is None:
        return d.message
    return f"{format_location(d.op.location, fallback='<unknown>')}: {d.message}"


_DIAG_LINE = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+): (?P<msg>.*)$")
_SEVERITIES = {0: "note", 1: "warning", 2: "error", 3: "remark"}  # iree_compiler_diagnostic_severity_t


def _enable_callback_diagnostics(inv, seen: list):
    """Collect IREE's diagnostics through the embedding API's callback (a ctypes
    callback takes the GIL itself: IREE calls it from any thread, with the GIL released
    by the ctypes call that runs the pipeline, where a Python handler on the MLIR
    context would crash the process). Returns the callback, to keep it alive."""
    from iree.compiler.api import ctypes_dl

    proto = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)

    def on_diagnostic(severity, message, size, _user):
        try:
            seen.append((_SEVERITIES.get(severity, "error"), ctypes.string_at(message, size).decode("utf-8", "replace")))
        except Exception:  # never raise into C
            pass

    callback = proto(on_diagnostic)
    fn = ctypes_dl._dylib.ireeCompilerInvocationEnableCallbackDiagnostics
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, proto, ctypes.c_void_p]
    fn.restype = None
    fn(inv._inv_p, 0, callback, None)
    return callback


def _map_diagnostic(prepared: Prepared, severity: str, text: str, source_name: str) -> IreeDiagnostic:
    """IREE's formatted diagnostic (`file:line:col: message`, then its notes) -> the op
    of ours it is about: a marker location names it; a position in the text we handed
    over (a parse error) names the op printed on that line."""
    first = text.strip().splitlines()[0] if text.strip() else "failed"
    m = _DIAG_LINE.match(first)
    op = None
    message = first
    if m:
        message = m.group("msg")
        line = int(m.group("line"))
        if m.group("file") == MARKER:
            if 0 < line <= len(prepared.ops):
                op = prepared.ops[line - 1]
        elif m.group("file") == source_name:
            op = _op_of_text_line(prepared, line)
    return IreeDiagnostic(severity, _one_line(message), op)


def _set_compile_to(api, inv, phase: str) -> None:
    """`--compile-to=<phase>` of iree-compile: a C API call that iree.compiler.api does
    not wrap (ireeCompilerInvocationSetCompileToPhase)."""
    from iree.compiler.api import ctypes_dl

    fn = getattr(ctypes_dl._dylib, "ireeCompilerInvocationSetCompileToPhase", None)
    if fn is None:
        raise IreeError("this iree-base-compiler cannot stop at a phase (no ireeCompilerInvocationSetCompileToPhase)")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    fn.restype = None
    fn(inv._inv_p, phase.encode())


def compile_module(
    module,
    *,
    compile_to: str = "end",
    flags: tuple | list = DEFAULT_FLAGS,
    source_name: str = "module.mlir",
) -> Compiled:
    """Compile one of our modules (a jaxlib `builtin.module`, annotated or not) with IREE
    in this process. Raises IreeError whose message names the first op IREE rejects."""
    return compile_prepared(prepare(module), compile_to=compile_to, flags=flags, source_name=source_name)
