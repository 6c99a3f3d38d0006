"""`stablehlo-opt`: an mlir-opt style driver for our passes and every pass in the bindings.

    stablehlo-opt [options] [input-file|-]

Passes run in command-line order, given either as flags (`--annotate-cost`,
`--annotate-cost="hardware=h100-sxm"`, `--canonicalize`, `--sdy-propagation-pipeline`)
or as one `--pass-pipeline="builtin.module(canonicalize, annotate-cost{hardware=h100-sxm})"`.

Exit codes: 0 success, 1 bad input or pass failure (diagnostics on stderr), 2 usage.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

PROG = "stablehlo-opt"

USAGE = f"""usage: {PROG} [options] [input-file|-]

Reads a StableHLO/MLIR module (text, MLIR bytecode, or a StableHLO portable artifact),
runs the passes given on the command line in order, and prints the result.

options:
  -h, --help                 show this help (with our passes and their options)
  -o FILE                    output file (default: stdout); written only on success
  --emit-bytecode            write MLIR bytecode instead of text
  --pass-pipeline=PIPELINE   textual pipeline, e.g. "builtin.module(canonicalize, annotate-cost{{hardware=h100-sxm}})"
  --split-input-file         process '// -----' separated chunks independently
  --verify-diagnostics       check 'expected-error/warning/remark' comments against diagnostics
  --mlir-print-debuginfo     print locations
  --mlir-print-op-generic    print ops in generic form
  --allow-unregistered-dialect  accept ops of unknown dialects
  --list-passes              list our passes and their options
  --version                  print the version
  --<pass>[=OPTIONS]         run a pass: one of ours (below) or any registered MLIR pass
                             (canonicalize, cse, stablehlo-*, sdy-*, ...)
"""


class UsageError(Exception):
    pass


@dataclass
class Options:
    input: str = "-"
    output: str | None = None
    emit_bytecode: bool = False
    split_input_file: bool = False
    verify_diagnostics: bool = False
    print_debuginfo: bool = False
    print_generic: bool = False
    allow_unregistered: bool = False
    pipeline_text: str | None = None
    pass_flags: list[tuple[str, str | None]] = field(default_factory=list)
    show_help: bool = False
    list_passes: bool = False
    show_version: bool = False


_VALUE_FLAGS = {"-o", "--output", "--pass-pipeline"}


def parse_args(argv: list[str]) -> Options:
    o = Options()
    positional: list[str] = []
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
        name, eq, value = arg.partition("=")
        if name.startswith("--") is False and name.startswith("-") and name not in ("-o",):
            # single-dash long flags as LLVM's cl accepts them (-split-input-file)
            if len(name) > 2:
                name = "-" + name
        if name in _VALUE_FLAGS:
            if not eq:
                if i >= len(argv):
                    raise UsageError(f"option '{name}' needs a value")
                value = argv[i]
                i += 1
            if name in ("-o", "--output"):
                o.output = value
            else:
                o.pipeline_text = value
            continue
        if name.startswith("-o") and name != "-o" and not name.startswith("--"):
            o.output = name[2:]
            continue
        simple = {
            "--emit-bytecode": "emit_bytecode",
            "--split-input-file": "split_input_file",
            "--verify-diagnostics": "verify_diagnostics",
            "--mlir-print-debuginfo": "print_debuginfo",
            "--mlir-print-op-generic": "print_generic",
            "--allow-unregistered-dialect": "allow_unregistered",
            "--list-passes": "list_passes",
            "--version": "show_version",
        }
        if name in simple:
            if eq:
                raise UsageError(f"option '{name}' takes no value")
            setattr(o, simple[name], True)
            continue
        if name.startswith("--") and len(name) > 2:
            o.pass_flags.append((name[2:], value if eq else None))
            continue
        raise UsageError(f"unknown option '{arg}'")
    if len(positional) > 1:
        raise UsageError(f"too many positional arguments: {' '.join(positional)}")
    if positional:
        o.input = positional[0]
    if o.pipeline_text is not None and o.pass_flags:
        raise UsageError("'--pass-pipeline' cannot be combined with individual pass flags")
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
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


_ELEM_RE = re.compile(r"^([A-Za-z0-9_.\-]+)\s*(\{(.*)\})?\s*$", re.S)


def build_steps(opts: Options) -> list[Step]:
    from costmodel.ir import InputError
    from costmodel.passes import get_pass, parse_options

    steps: list[Step] = []

    def add(name: str, option_text: str | None, raw: str) -> None:
        info = get_pass(name)
        if info is not None:
            steps.append(Step("ours", name, info, parse_options(info, option_text or "")))
        else:
            steps.append(Step("mlir", raw))

    if opts.pipeline_text is not None:
        text = opts.pipeline_text.strip()
        m = re.match(r"^builtin\.module\s*\((.*)\)\s*$", text, re.S)
        if not m:
            if text.startswith("any(") or re.match(r"^[A-Za-z0-9_.]+\(", text):
                raise InputError(
                    f"pass pipeline must be anchored on 'builtin.module(...)', got '{text}'"
                )
            raise InputError(f"malformed pass pipeline '{text}' (expected 'builtin.module(...)')")
        for elem in _split_top_level(m.group(1)):
            em = _ELEM_RE.match(elem)
            if em and get_pass(em.group(1)) is not None:
                add(em.group(1), em.group(3), elem)
            else:
                steps.append(Step("mlir", elem))
    else:
        for name, value in opts.pass_flags:
            raw = name if value is None else f"{name}{{{value}}}"
            add(name, value, raw)
    return steps


def validate_mlir_steps(ctx, steps: list[Step]) -> None:
    """Unknown MLIR passes / options: one-line error before any work."""
    from costmodel.ir import InputError, ir, passmanager

    for s in steps:
        if s.kind != "mlir":
            continue
        with ctx:
            try:
                passmanager.PassManager.parse(f"builtin.module({s.text})")
            except (ir.MLIRError, ValueError) as err:
                msg = str(err).strip().splitlines()
                detail = ""
                for line in msg:
                    if "error:" in line:
                        detail = line.split("error:", 1)[1].strip()
                        break
                name = _ELEM_RE.match(s.text).group(1) if _ELEM_RE.match(s.text) else s.text
                if "does not refer to a registered pass" in detail or not detail:
                    raise InputError(f"unknown pass '{name}' (see --help for our passes)") from None
                raise InputError(f"pass '{name}': {detail}") from None


# ---------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------


@dataclass
class ChunkResult:
    ok: bool
    output: bytes = b""
    diagnostics: list = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    input_error: str | None = None


def run_chunk(data: bytes, source_name: str, opts: Options, steps: list[Step], chunk_index=None) -> ChunkResult:
    from costmodel.ir import DiagnosticEngine, InputError, ir, load_module, make_context, passmanager, print_module
    from costmodel.passes import PassError, PassSession

    ctx = make_context(allow_unregistered_dialects=opts.allow_unregistered)
    validate_mlir_steps(ctx, steps)
    diags = DiagnosticEngine(source_name)
    session = PassSession(
        diagnostics=diags,
        output_path=opts.output,
        input_path=None if opts.input == "-" else opts.input,
        chunk_index=chunk_index,
    )

    def handler(d):
        diags.add_mlir([d])
        return True

    ctx.attach_diagnostic_handler(handler)
    try:
        module = load_module(ctx, data, source_name)
    except ir.MLIRError as err:
        diags.add_mlir(err.error_diagnostics)
        return ChunkResult(False, diagnostics=diags.diagnostics)
    except InputError as err:
        return ChunkResult(False, diagnostics=diags.diagnostics, input_error=str(err))

    # Verify the input as mlir-opt does.
    with ctx:
        try:
            module.verify()
        except ir.MLIRError as err:
            diags.add_mlir(err.error_diagnostics)
            return ChunkResult(False, diagnostics=diags.diagnostics)

    failures: list[BaseException] = []

    def wrap(step: Step):
        def _run(op, pass_):
            try:
                step.info.run(op, step.options, session)
                if diags.has_errors:
                    pass_.signal_pass_failure()
            except PassError as err:
                failures.append(err)
                pass_.signal_pass_failure()
            except InputError as err:
                failures.append(err)
                pass_.signal_pass_failure()
            except ir.MLIRError as err:
                diags.add_mlir(err.error_diagnostics)
                failures.append(err)
                pass_.signal_pass_failure()
            except Exception as err:  # a bug of ours: say so, with the traceback
                import traceback

                failures.append(err)
                diags.error(op.location, f"internal error in pass '{step.text}': {err!r}\n{traceback.format_exc()}")
                pass_.signal_pass_failure()

        return _run

    with ctx:
        pm = passmanager.PassManager("builtin.module")
        for s in steps:
            if s.kind == "ours":
                pm.add(wrap(s), name=s.text, argument=s.text)
            else:
                pm.add(s.text)
        try:
            pm.run(module)
        except ir.MLIRError as err:
            if not failures or any(isinstance(f, ir.MLIRError) for f in failures) is False and not diags.has_errors:
                diags.add_mlir(err.error_diagnostics)
            input_errors = [str(f) for f in failures if isinstance(f, InputError)]
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
        )
    return ChunkResult(True, out, diags.diagnostics, session.messages)


SPLIT_RE = re.compile(rb"^// -----.*$", re.M)


def split_chunks(data: bytes) -> list[bytes]:
    """Chunks of `// -----` separated input, each padded with newlines so that line
    numbers in diagnostics are those of the original file."""
    chunks = []
    pos = 0
    for m in SPLIT_RE.finditer(data):
        chunks.append((pos, data[pos : m.start()]))
        pos = m.end()
    chunks.append((pos, data[pos:]))
    out = []
    for start, text in chunks:
        line_offset = data.count(b"\n", 0, start)
        out.append(b"\n" * line_offset + text)
    return out


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
    from costmodel.passes import all_passes

    lines = [USAGE, "our passes:"]
    for info in all_passes().values():
        lines.append(info.describe())
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_args(argv)
    except UsageError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n{PROG}: try '{PROG} --help'\n")
        return 2
    if opts.show_help or opts.list_passes:
        sys.stdout.write(help_text() if opts.show_help else help_text().split("our passes:\n", 1)[1])
        return 0
    if opts.show_version:
        from costmodel import __version__

        sys.stdout.write(f"{PROG} (stablehlo-costmodel) {__version__}\n")
        return 0
    from costmodel.ir import InputError, write_atomically
    from costmodel.verify import verify_diagnostics

    try:
        steps = build_steps(opts)
        data, source_name = read_input(opts.input)
    except InputError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 1

    from costmodel.ir import MLIR_BYTECODE_MAGIC

    if opts.split_input_file and not data.startswith(MLIR_BYTECODE_MAGIC):
        chunks = split_chunks(data)
    else:
        chunks = [data]

    outputs: list[bytes] = []
    ok = True
    for idx, chunk in enumerate(chunks):
        try:
            res = run_chunk(chunk, source_name, opts, steps, idx if len(chunks) > 1 else None)
        except InputError as err:
            sys.stderr.write(f"{PROG}: error: {err}\n")
            return 1
        if res.input_error and not opts.verify_diagnostics:
            for d in res.diagnostics:
                if d.severity != "error":
                    sys.stderr.write(d.render() + "\n")
            sys.stderr.write(f"{PROG}: error: {res.input_error}\n")
            return 1
        for msg in res.messages:
            sys.stderr.write(msg + "\n")
        if opts.verify_diagnostics:
            problems = verify_diagnostics(chunk, source_name, res.diagnostics)
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
            outputs.append(res.output)

    if not ok:
        return 1
    if opts.emit_bytecode:
        payload = b"".join(outputs)
    else:
        payload = b"// -----\n".join(outputs)
    if opts.output and opts.output != "-":
        try:
            write_atomically(opts.output, payload)
        except OSError as err:
            sys.stderr.write(f"{PROG}: error: cannot write '{opts.output}': {err.strerror}\n")
            return 1
    else:
        try:
            sys.stdout.buffer.write(payload)
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
