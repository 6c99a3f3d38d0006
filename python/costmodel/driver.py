"""`stablehlo-opt`: an mlir-opt style driver for our passes and every pass in the bindings.

    stablehlo-opt [options] [input-file|-]

Passes run in command-line order, given either as flags (`--annotate-cost`,
`--annotate-cost="hardware=h100-sxm"`, `--canonicalize`, `--sdy-propagation-pipeline`)
or as one `--pass-pipeline="builtin.module(canonicalize, annotate-cost{hardware=h100-sxm})"`.

Exit codes: 0 success, 1 bad input or pass failure (diagnostics on stderr), 2 usage.

This module is the command-line hot path: it imports nothing heavy at module level
(the MLIR bindings come in through `costmodel.ir` only once there is work to do), so
that `--help` is instant and a whole run stays well under a second.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

PROG = "stablehlo-opt"

USAGE = f"""usage: {PROG} [options] [input-file|-]

Reads a StableHLO/MLIR module (text, MLIR bytecode, a StableHLO portable artifact or a
serialized jax.export.Exported), runs the passes given on the command line in order,
and prints the result.

options:
  -h, --help                 show this help (with our passes and their options)
  -o FILE                    output file (default: stdout); written only on success
  --emit-bytecode            write MLIR bytecode instead of text
  --pass-pipeline=PIPELINE   textual pipeline, e.g. "builtin.module(canonicalize, annotate-cost{{hardware=h100-sxm}})"
  --split-input-file[=MARKER]  process '// -----' separated chunks independently
  --verify-diagnostics[=all|only-expected]
                             check 'expected-error/warning/remark/note' comments against diagnostics
  --verify-each[=true|false] verify the IR after each pass (default: true)
  --mlir-print-debuginfo     print locations
  --mlir-print-op-generic    print ops in generic form
  --mlir-elide-elementsattrs-if-larger=N  print large constants as dense_resource / elided
  --mlir-disable-threading   run MLIR single-threaded
  --allow-unregistered-dialect  accept ops of unknown dialects
  --list-passes              list our passes and their options
  --version                  print the version
  --<pass>[=OPTIONS]         run a pass: one of ours (below) or any registered MLIR pass
                             (canonicalize, cse, stablehlo-*, sdy-*, ...)
"""


class UsageError(Exception):
    """Bad command line: one line, exit 2."""


@dataclass
class Options:
    input: str = "-"
    output: str | None = None
    emit_bytecode: bool = False
    split_marker: str | None = None  # set by --split-input-file
    verify_diagnostics: str | None = None  # None | "all" | "only-expected"
    verify_each: bool = True
    print_debuginfo: bool = False
    print_generic: bool = False
    elide_limit: int | None = None
    disable_threading: bool = False
    allow_unregistered: bool = False
    pipeline_text: str | None = None
    pass_flags: list[tuple[str, str | None]] = field(default_factory=list)
    show_help: bool = False
    list_passes: bool = False
    show_version: bool = False

    @property
    def split_input_file(self) -> bool:
        return self.split_marker is not None


DEFAULT_SPLIT_MARKER = "// -----"

# flag -> (attribute, kind): "bool" takes no value, "value" needs one.
_FLAGS = {
    "--emit-bytecode": ("emit_bytecode", "bool"),
    "--mlir-print-debuginfo": ("print_debuginfo", "bool"),
    "--mlir-print-op-generic": ("print_generic", "bool"),
    "--mlir-disable-threading": ("disable_threading", "bool"),
    "--allow-unregistered-dialect": ("allow_unregistered", "bool"),
    "--list-passes": ("list_passes", "bool"),
    "--version": ("show_version", "bool"),
    "--pass-pipeline": ("pipeline_text", "value"),
    "--mlir-elide-elementsattrs-if-larger": ("elide_limit", "value"),
}
# Driver-looking flags that are not passes: a typo in them is a usage error, not an
# "unknown pass".
_DRIVER_PREFIXES = ("--mlir-", "--verify-", "--split-", "--emit-", "--print-", "--debug", "--pass-", "--allow-")


def _parse_bool(flag: str, value: str) -> bool:
    low = value.lower()
    if low in ("", "1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"option '{flag}' expects true or false, got '{value}'")


def parse_args(argv: list[str]) -> Options:
    o = Options()
    positional: list[str] = []
    seen_output = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional.extend(argv[i:])
            break
        if arg in ("-h", "--help", "-help"):
            o.show_help = True
            continue
        if arg == "-" or not arg.startswith("-"):
            positional.append(arg)
            continue
        # -o FILE, -oFILE, -o=FILE, --o=FILE
        if arg == "-o" or arg.startswith("-o") and not arg.startswith("--") or arg.startswith("--o="):
            if seen_output:
                raise UsageError("option '-o' given more than once")
            seen_output = True
            if arg == "-o":
                if i >= len(argv):
                    raise UsageError("option '-o' needs a value")
                o.output = argv[i]
                i += 1
            else:
                o.output = arg.split("=", 1)[1] if "=" in arg[:4] else arg[2:]
            if not o.output:
                raise UsageError("option '-o' needs a value")
            continue
        name, eq, value = arg.partition("=")
        if not name.startswith("--"):
            if len(name) <= 2:
                raise UsageError(f"unknown option '{arg}'")
            name = "-" + name  # LLVM's cl accepts single-dash long flags (-split-input-file)
        if name == "--split-input-file":
            o.split_marker = value if eq and value else DEFAULT_SPLIT_MARKER
            continue
        if name == "--verify-diagnostics":
            mode = value if eq else "all"
            if mode not in ("all", "only-expected"):
                raise UsageError(f"option '--verify-diagnostics' expects 'all' or 'only-expected', got '{value}'")
            o.verify_diagnostics = mode
            continue
        if name == "--verify-each":
            o.verify_each = _parse_bool(name, value if eq else "")
            continue
        if name in _FLAGS:
            attr, kind = _FLAGS[name]
            if kind == "bool":
                if eq:
                    raise UsageError(f"option '{name}' takes no value")
                setattr(o, attr, True)
                continue
            if not eq:
                if i >= len(argv):
                    raise UsageError(f"option '{name}' needs a value")
                value = argv[i]
                i += 1
            if attr == "elide_limit":
                try:
                    o.elide_limit = int(value)
                except ValueError:
                    raise UsageError(f"option '{name}' expects an integer, got '{value}'") from None
                if not 0 <= o.elide_limit <= 2**63 - 1:
                    raise UsageError(f"option '{name}' expects an integer from 0 to 2^63-1, got '{value}'")
            else:
                if o.pipeline_text is not None:
                    raise UsageError(f"option '{name}' given more than once")
                o.pipeline_text = value
            continue
        if name.startswith(_DRIVER_PREFIXES):
            raise UsageError(f"unknown option '{name}'")
        if not re.fullmatch(r"--[A-Za-z0-9][A-Za-z0-9_.\-]*", name):
            raise UsageError(f"unknown option '{arg}'")
        o.pass_flags.append((name[2:], value if eq else None))
    if len(positional) > 1:
        raise UsageError(f"too many input files: {' '.join(positional)} (give one, or '-' for stdin)")
    if positional:
        o.input = positional[0]
    if o.pipeline_text is not None and o.pass_flags:
        names = ", ".join("--" + n for n, _ in o.pass_flags)
        raise UsageError(f"'--pass-pipeline' cannot be combined with individual pass flags ({names})")
    if o.emit_bytecode and o.split_input_file:
        raise UsageError("'--emit-bytecode' cannot be combined with '--split-input-file'")
    return o


# ---------------------------------------------------------------------------
# pipelines
# ---------------------------------------------------------------------------


@dataclass
class Step:
    kind: str  # "ours" | "mlir"
    text: str  # for mlir: pipeline element text; for ours: the pass argument
    info: object = None
    options: dict | None = None


def _split_top_level(text: str) -> list[str]:
    """Split `a, b{x=1, y=2}, func.func(c, d)` at top-level commas."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


_ELEM_RE = re.compile(r"^([A-Za-z0-9_.\-]+)\s*(\{(.*)\})?\s*$", re.S)
_ANCHOR_RE = re.compile(r"^builtin\.module\s*\((.*)\)\s*$", re.S)


def build_steps(opts: Options) -> list[Step]:
    """Our passes (options parsed and typed now) and MLIR pipeline elements, in order."""
    from costmodel.ir import InputError
    from costmodel.passes import get_pass, parse_options

    steps: list[Step] = []
    if opts.pipeline_text is not None:
        text = opts.pipeline_text.strip()
        if text.count("(") != text.count(")") or text.count("{") != text.count("}"):
            raise InputError(f"malformed pass pipeline '{text}': unbalanced brackets")
        m = _ANCHOR_RE.match(text)
        if not m:
            raise InputError(
                f"pass pipeline must be anchored on the module: 'builtin.module(...)', got '{text}'"
            )
        body = m.group(1)
        elements = _split_top_level(body) if body.strip() else []
        for elem in elements:
            if not elem:
                raise InputError(f"malformed pass pipeline '{text}': empty pipeline element")
            em = _ELEM_RE.match(elem)
            info = get_pass(em.group(1)) if em else None
            if info is not None:
                steps.append(Step("ours", em.group(1), info, parse_options(info, em.group(3) or "")))
            else:
                steps.append(Step("mlir", elem))
    else:
        for name, value in opts.pass_flags:
            info = get_pass(name)
            if info is not None:
                steps.append(Step("ours", name, info, parse_options(info, value or "")))
            else:
                steps.append(Step("mlir", name if value is None else f"{name}{{{value}}}"))
    return steps


_UNREGISTERED_RE = re.compile(r"'([^']+)' does not refer to a registered pass")


def _mlir_step_error(step: Step, message: str, captured: str) -> str:
    """One line for a pipeline element the bindings refused."""
    from costmodel.passes import get_pass

    m = _UNREGISTERED_RE.search(message)
    if m:
        name = m.group(1)
        if get_pass(name) is not None:
            return (
                f"pass '{name}' runs on the whole module: put it at the top level of "
                f"'builtin.module(...)', not inside '{step.text}'"
            )
        import difflib

        from costmodel.passes import all_passes

        close = difflib.get_close_matches(name, list(all_passes()), n=1, cutoff=0.75)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown pass '{name}' ({hint}see '{PROG} --help' for our passes; any registered MLIR pass works too)"
    em = _ELEM_RE.match(step.text)
    name = em.group(1) if em else step.text
    details = []
    for line in (captured + "\n" + message).splitlines():
        line = line.strip().lstrip(":").strip()
        if not line or line.startswith("failed to add"):
            continue
        line = line.replace("<Pass-Options-Parser>:", "").strip()
        if line not in details:
            details.append(line)
    detail = "; ".join(details) or "cannot be added to the pipeline"
    if em and em.group(3) is not None:
        return f"pass '{name}': bad options '{em.group(3)}': {detail}"
    return f"pass '{name}': {detail}"


_NEST_RE = re.compile(r"restricted to '([A-Za-z0-9_.]+)' on a PassManager intended to run on")


def _add_mlir_step(pm, text: str, added: list | None = None) -> tuple[str, str] | None:
    """Add a pipeline element; None on success, else (error message, captured stderr).

    Like mlir-opt (implicit nesting), a pass that runs on a nested op kind
    (`func.func`) given at the module level is nested for you (the text added is
    appended to `added`).
    """
    from costmodel.ir import captured_stderr

    for _ in range(3):
        with captured_stderr() as cap:
            try:
                pm.add(text)
                if added is not None:
                    added.append(text)
                return None
            except Exception as err:  # ValueError / MLIRError from the parser
                message = str(err)
        m = _NEST_RE.search(message)
        if not m:
            return message, cap.text
        text = f"{m.group(1)}({text})"
    return message, cap.text


_RISKY_RE = re.compile(r"(^|[(,\s])sdy-")


def _resolve_mlir_step(text: str):
    """The pipeline text (`builtin.module(...)`) one element becomes, nested like
    `_add_mlir_step` nests it, or `_add_mlir_step`'s (error, captured) when it is bad."""
    from costmodel.ir import passmanager

    probe, added = passmanager.PassManager("builtin.module"), []
    err = _add_mlir_step(probe, text, added)
    if err is not None:
        return err
    return f"builtin.module({added[0]})"


@dataclass
class ChunkResult:
    ok: bool
    output: bytes = b""
    diagnostics: list = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    input_error: str | None = None


@dataclass
class Prepared:
    ctx: object
    pm: object
    diags: object
    session: object
    failures: list = field(default_factory=list)


class Runner:
    """One MLIR context + pass manager per chunk (chunks are independent, as in mlir-opt)."""

    def __init__(self, opts: Options, steps: list[Step], source_name: str, outputs=None) -> None:
        self.opts = opts
        self.steps = steps
        self.source_name = source_name
        self.outputs = outputs  # costmodel.outputs.OutputSet shared by every chunk

    def prepare(self, chunk_index: int | None = None) -> Prepared:
        """A fresh context, diagnostics and pass manager holding every step.

        Raises InputError (one line) for an unknown MLIR pass or bad MLIR pass options,
        so that a bad command line is reported before any input is read.
        """
        from costmodel.ir import DiagnosticEngine, InputError, make_context, passmanager
        from costmodel.passes import PassSession

        opts = self.opts
        ctx = make_context(allow_unregistered_dialects=opts.allow_unregistered)
        if opts.disable_threading:
            ctx.enable_multithreading(False)
        diags = DiagnosticEngine(self.source_name)
        session = PassSession(
            diagnostics=diags,
            output_path=opts.output if opts.output not in (None, "-") else None,
            input_path=None if opts.input == "-" else opts.input,
            chunk_index=chunk_index,
            outputs=self.outputs,
        )

        def handler(d) -> bool:
            try:
                diags.add_mlir([d])
            except Exception:  # never let a diagnostic crash the run
                return False
            return True

        ctx.attach_diagnostic_handler(handler)
        prep = Prepared(ctx, None, diags, session)
        with ctx:
            pm = passmanager.PassManager("builtin.module")
            pm.enable_verifier(opts.verify_each)
            for s in self.steps:
                if s.kind == "ours":
                    pm.add(self._wrap(s, prep), name=s.text, argument=s.text)
                    continue
                if _RISKY_RE.search(s.text):
                    # Shardy's passes abort the process on an internal CHECK failure:
                    # run them in a forked child (costmodel.isolation)
                    from costmodel.isolation import isolation_available

                    if isolation_available():
                        resolved = _resolve_mlir_step(s.text)
                        if isinstance(resolved, tuple):
                            raise InputError(_mlir_step_error(s, *resolved))
                        pm.add(self._wrap_isolated(s, resolved, prep), name=s.text, argument=s.text)
                        continue
                err_text = _add_mlir_step(pm, s.text)
                if err_text is not None:
                    raise InputError(_mlir_step_error(s, *err_text))
        prep.pm = pm
        return prep

    @staticmethod
    def _wrap(step: Step, prep: Prepared):
        from costmodel.ir import DEEP_RECURSION, InputError, ir, recursion_limit
        from costmodel.passes import PassError

        diags, session, failures = prep.diags, prep.session, prep.failures

        def _errors() -> int:
            return sum(1 for d in diags.diagnostics if d.severity == "error")

        def _run(op, pass_):
            try:
                before = _errors()
                with recursion_limit(DEEP_RECURSION):  # nesting depth bounded by memory
                    step.info.run(op, step.options, session)
                if _errors() > before:
                    failures.append(PassError(step.text))
                    pass_.signal_pass_failure()
            except (PassError, InputError) as err:
                failures.append(err)
                pass_.signal_pass_failure()
            except ir.MLIRError as err:
                diags.add_mlir(err.error_diagnostics)
                failures.append(err)
                pass_.signal_pass_failure()
            except MemoryError as err:  # the input is too large for this machine: no bug of ours
                failures.append(err)
                diags.error(op.location, f"{step.text}: ran out of memory ({err or 'MemoryError'}); the input is too "
                            "large for this machine's memory")
                pass_.signal_pass_failure()
            except Exception as err:  # a bug of ours: say so, with the traceback
                import traceback

                failures.append(err)
                diags.error(
                    op.location,
                    f"internal error in pass '{step.text}' (please report): {err!r}\n"
                    + traceback.format_exc().rstrip(),
                )
                pass_.signal_pass_failure()

        return _run

    @staticmethod
    def _wrap_isolated(step: Step, pipeline: str, prep: Prepared):
        """An MLIR pipeline element run in a forked child: a native crash becomes one
        error naming the pass (`sdy-convert-global-to-local crashed (SIGABRT: Check
        failed: ...)`), not a core dump."""
        from costmodel.isolation import NativeCrash, run_pipeline_isolated

        def _run(op, pass_):
            try:
                ok = run_pipeline_isolated(op, pipeline, step.text, prep.diags)
            except NativeCrash as crash:
                prep.diags.error(op.location, str(crash))
                ok = False
            if not ok:
                prep.failures.append(RuntimeError(step.text))
                pass_.signal_pass_failure()

        return _run

    def run(self, data: bytes, prep: Prepared) -> ChunkResult:
        from costmodel.ir import InputError, ir, load_module, print_module

        from costmodel.ir import MLIR_BYTECODE_MAGIC

        opts, diags, session = self.opts, prep.diags, prep.session
        # File positions in bytecode come from the text an earlier run read, not from this input.
        diags.input_is_bytecode = data.startswith(MLIR_BYTECODE_MAGIC)
        with prep.ctx:
            try:
                module = load_module(prep.ctx, data, self.source_name)
            except ir.MLIRError as err:
                diags.add_mlir(err.error_diagnostics)
                return ChunkResult(False, diagnostics=diags.diagnostics)
            if self.steps:
                try:
                    prep.pm.run(module)
                except ir.MLIRError as err:
                    diags.add_mlir(err.error_diagnostics)
                    input_errors = [str(f) for f in prep.failures if isinstance(f, InputError)]
                    if not diags.has_errors and not input_errors:
                        diags.emit("error", None, "pass pipeline failed")
                    return ChunkResult(
                        False,
                        diagnostics=diags.diagnostics,
                        messages=session.messages,
                        input_error=input_errors[0] if input_errors else None,
                    )
            out = print_module(
                module,
                bytecode=opts.emit_bytecode,
                debug_info=opts.print_debuginfo,
                generic=opts.print_generic,
                large_elements_limit=opts.elide_limit,
                size_hint=len(data),
            )
        return ChunkResult(True, out, diags.diagnostics, session.messages)


def split_chunks(data: bytes, marker: str = DEFAULT_SPLIT_MARKER) -> list[bytes]:
    """Chunks of marker-separated input (the marker alone on its line), each padded with
    newlines so that line numbers in diagnostics are those of the original file."""
    split_re = re.compile(rb"^[ \t]*" + re.escape(marker.encode()) + rb"[ \t]*\r?$", re.M)
    bounds = []
    pos = 0
    for m in split_re.finditer(data):
        bounds.append((pos, m.start()))
        pos = m.end()
    bounds.append((pos, len(data)))
    return [b"\n" * data.count(b"\n", 0, start) + data[start:end] for start, end in bounds]


def read_input(path: str) -> tuple[bytes, str]:
    from costmodel.ir import InputError

    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        with open(path, "rb") as fh:
            return fh.read(), path
    except OSError as err:
        raise InputError(f"cannot open input file '{path}': {err.strerror}") from None


def help_text() -> str:
    return USAGE + "\nour passes:\n" + passes_text()


def passes_text() -> str:
    from costmodel.passes import all_passes

    return "".join(info.describe() + "\n" for info in all_passes().values())


def _err(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    from costmodel.outputs import Terminated, termination_as_exception

    try:
        with termination_as_exception():  # SIGTERM / SIGHUP clean up as Ctrl-C does
            rc = _main(sys.argv[1:] if argv is None else list(argv))
            sys.stdout.flush()
        return rc
    except KeyboardInterrupt:
        return 130
    except Terminated as sig:
        return 128 + sig.signum
    except BrokenPipeError:
        # The reader went away (`stablehlo-opt ... | head`): not an error of ours.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except OSError as err:  # stdout on a full device (`> /dev/full`) and the like
        _silence_stdout()
        _err(f"cannot write to standard output: {err.strerror or err}")
        return 1


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _main(argv: list[str]) -> int:
    try:
        opts = parse_args(argv)
    except UsageError as err:
        _err(f"{err}\n{PROG}: try '{PROG} --help'")
        return 2
    if opts.show_help:
        sys.stdout.write(help_text())
        return 0
    if opts.list_passes:
        sys.stdout.write(passes_text())
        return 0
    if opts.show_version:
        from costmodel import __version__

        sys.stdout.write(f"{PROG} (stablehlo-costmodel) {__version__}\n")
        return 0

    from costmodel.ir import InputError
    from costmodel.outputs import OutputError, OutputSet

    outputs = OutputSet()
    try:
        return _run_all(opts, outputs)
    except InputError as err:
        _err(str(err))
        return 1
    except OutputError as err:
        _err(str(err))
        return 1
    finally:
        outputs.discard()  # whatever a failed or interrupted run staged


def _write_stdout(data: bytes) -> None:
    from costmodel.outputs import OutputError

    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as err:  # e.g. `> /dev/full`
        raise OutputError("<stdout>", err.strerror or str(err)) from None


def _run_all(opts: Options, outputs) -> int:
    from costmodel.ir import MLIR_BYTECODE_MAGIC, InputError
    from costmodel.verify import verify_diagnostics

    steps = build_steps(opts)
    source_name = "<stdin>" if opts.input == "-" else opts.input
    runner = Runner(opts, steps, source_name, outputs)
    # Unknown MLIR passes and bad options are reported before the input is read.
    first = runner.prepare()
    data, _ = read_input(opts.input)

    if opts.split_input_file and not data.startswith(MLIR_BYTECODE_MAGIC):
        chunks = split_chunks(data, opts.split_marker)
    else:
        chunks = [data]

    outputs_text: list[bytes] = []
    written: list[str] = []
    ok = True
    for idx, chunk in enumerate(chunks):
        try:
            index = idx if len(chunks) > 1 else None
            if idx == 0:
                first.session.chunk_index = index
            res = runner.run(chunk, first if idx == 0 else runner.prepare(index))
        except InputError as err:
            _err(str(err))
            return 1
        # the passes' notes ("chakra: wrote ... to DIR/", "simulate: ...") are said once the
        # run's outputs are in place; a failed run says no "wrote"
        written += res.messages
        if res.input_error:
            for d in res.diagnostics:
                if d.severity != "error":
                    sys.stderr.write(d.render() + "\n")
            _err(res.input_error)
            return 1
        if opts.verify_diagnostics:
            problems = verify_diagnostics(
                chunk, source_name, res.diagnostics, only_expected=opts.verify_diagnostics == "only-expected"
            )
            for p in problems:
                sys.stderr.write(p + "\n")
            if problems:
                ok = False
        else:
            for d in res.diagnostics:
                sys.stderr.write(d.render() + "\n")
            if not res.ok:
                ok = False
        if res.ok:
            outputs_text.append(res.output)
    sys.stderr.flush()

    payload = _join(outputs_text, opts)
    to_file = bool(opts.output and opts.output != "-")
    if not ok:
        # As mlir-opt: the chunks that succeeded still go to stdout, but an -o file (and
        # any trace directory) is only ever written whole, on success.
        outputs.discard()
        for msg in written:
            if not msg.startswith("chakra: wrote "):
                sys.stderr.write(msg + "\n")
        if outputs_text and not to_file:
            _write_stdout(payload)
        return 1
    # Every output of the run (trace directories staged by the passes, the -o file) is
    # committed together, now that the whole pipeline succeeded.
    if to_file:
        outputs.stage_file(opts.output, payload)
    else:  # stdout first: a write that fails (`> /dev/full`) installs no trace directory
        _write_stdout(payload)
    outputs.commit()
    for msg in written:
        sys.stderr.write(msg + "\n")
    return 0


def _join(outputs: list[bytes], opts: Options) -> bytes:
    if opts.emit_bytecode or len(outputs) <= 1:
        return b"".join(outputs)
    return ((opts.split_marker or DEFAULT_SPLIT_MARKER) + "\n").encode().join(outputs)


if __name__ == "__main__":
    sys.exit(main())
