"""Run a risky native step in a forked child, so that a crash of the native code becomes
a one-line error instead of killing the tool with a core dump.

Shardy's passes (run from jaxlib's bindings) report internal failures with `CHECK`,
which aborts the whole process (`LLVM ERROR: F... convert_global_to_local.cc:77] Check
failed: ...`, SIGABRT, core dump): a Python `try` cannot catch it. `run_isolated` forks
after the module was parsed; the child gets a copy of the module (as bytecode, parsed
into a fresh single-threaded context: the parent's context may own worker threads the
child would not have), runs the work, and sends back the resulting module and a
picklable value. The parent puts the child's module in place of its own. If the child
dies, the parent raises `NativeCrash` naming the stage the child had reached (work
reports stages through `progress`) and the CHECK message the child printed.

Cost: one fork, one bytecode write and parse each way (docs/sharding.md gives the
figures; benchmarks/propagate.py prints them).

Where `os.fork` is missing (not POSIX) or `COSTMODEL_NO_ISOLATION=1` is set, the work
runs in-process (a crash then ends the process as before).

Test-only hook: `COSTMODEL_TEST_ABORT_AT=<stage>` makes the child abort when it reaches
that stage (tests/test_isolation.py), as a native CHECK failure would.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import signal
import tempfile
import traceback
import warnings
from typing import Any, Callable

from .ir import ir

__all__ = ["NativeCrash", "ChildError", "isolation_available", "run_isolated", "run_pipeline_isolated"]

_ABORT_HOOK = "COSTMODEL_TEST_ABORT_AT"


class NativeCrash(Exception):
    """The child running a native step died (a signal or an exit without a result)."""

    def __init__(self, stage: str | None, how: str, detail: str | None) -> None:
        self.stage, self.how, self.detail = stage, how, detail
        what = stage if stage else "the native code"
        super().__init__(f"{what} crashed ({how}{': ' + detail if detail else ''})")


class ChildError(Exception):
    """A Python exception in the child that cannot travel back as itself."""

    def __init__(self, text: str, tb: str) -> None:
        super().__init__(text)
        self.child_traceback = tb


def isolation_available() -> bool:
    return hasattr(os, "fork") and os.environ.get("COSTMODEL_NO_ISOLATION", "") not in ("1", "true", "yes")


class Progress:
    """Stages the work reaches, written to a file the parent reads after a crash."""

    def __init__(self, fh=None) -> None:
        self._fh = fh
        self.last: str | None = None
        # False: the work failed and its module (possibly invalid IR) is not sent back;
        # the parent's module is left as it was
        self.send_module = True

    def stage(self, name: str) -> None:
        self.last = name
        if self._fh is not None:
            os.write(self._fh.fileno(), (name + "\n").encode())
        if os.environ.get(_ABORT_HOOK) == name:
            os.abort()  # test-only: what a native CHECK failure does


def _bytecode(module: ir.Operation) -> bytes:
    buf = io.BytesIO()
    module.write_bytecode(buf)
    return buf.getvalue()


def replace_module(module: ir.Operation, new: ir.Operation) -> None:
    """Give `module` (a builtin.module) the body and attributes of `new` (same context)."""
    body = module.regions[0].blocks[0]
    for op in list(body.operations):
        op.operation.erase()
    for op in list(new.regions[0].blocks[0].operations):
        body.append(op.operation)
    old_names = [module.attributes[i].name for i in range(len(module.attributes))]
    new_attrs = {new.attributes[i].name: new.attributes[i].attr for i in range(len(new.attributes))}
    for name in old_names:
        if name not in new_attrs:
            del module.attributes[name]
    for name, attr in new_attrs.items():
        module.attributes[name] = attr


def _detail(stderr: str) -> str | None:
    """The line of the child's stderr that says what failed (a CHECK, an LLVM ERROR)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        m = re.search(r"\] (Check failed: .*)", ln) or re.search(r"(Check failed: .*)", ln)
        if m:
            src = re.search(r"([\w.]+\.(?:cc|cpp|h)):(\d+)\]", ln)
            return m.group(1)[:300] + (f" [{src.group(1)}:{src.group(2)}]" if src else "")
    for ln in lines:
        if ln.startswith("LLVM ERROR") or "fatal" in ln.lower():
            return ln[:300]
    return lines[-1][:300] if lines else None


def run_isolated(
    module: ir.Operation,
    work: Callable[[ir.Operation, Progress], Any],
    *,
    source_name: str = "<input>",
) -> Any:
    """`work(module_copy, progress)` in a forked child; `module` then holds the child's
    result and the call returns work's (picklable) value. Exceptions raised by work are
    raised here (the picklable ones as themselves, others as ChildError); a crash of
    the child raises NativeCrash."""
    from .ir import load_module, make_context

    if not isolation_available():
        return work(module, Progress())
    data = _bytecode(module)
    with tempfile.TemporaryFile() as result_fh, tempfile.TemporaryFile() as err_fh, tempfile.TemporaryFile() as stage_fh:
        with warnings.catch_warnings():
            # JAX, when imported (library use, tests), warns at every fork that JAX is
            # multithreaded; the child touches nothing of JAX nor the parent's MLIR
            # context (a fresh single-threaded one), so no lock of those threads matters
            warnings.simplefilter("ignore", RuntimeWarning)
            pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 70
            # Nothing the child inherited may be destroyed here: an MLIR context of the
            # parent's (one kept alive only by a cache, or by a reference cycle) would
            # join its worker threads, which a forked child does not have (a crash,
            # SIGSEGV). So no garbage collection, and the type cache that make_context
            # clears keeps its entries alive; the child ends with os._exit.
            import gc

            gc.disable()
            from . import shapes

            _inherited = dict(shapes._CACHE)  # noqa: F841 (kept alive until os._exit)
            try:
                import faulthandler

                faulthandler.disable()  # (pytest's would print the crash to the real stderr)
                os.dup2(err_fh.fileno(), 2)
                os.dup2(err_fh.fileno(), 1)
                ctx = make_context(allow_unregistered_dialects=module.context.allow_unregistered_dialects)
                ctx.enable_multithreading(False)
                with ctx:
                    child = load_module(ctx, data, source_name)
                    progress = Progress(stage_fh)
                    try:
                        value = work(child, progress)
                        payload = {"value": value}
                    except BaseException as err:  # noqa: BLE001 - everything goes back to the parent
                        progress.send_module = False
                        try:
                            pickle.dumps(err)
                            payload = {"error": err}
                        except Exception:
                            payload = {"child_error": (repr(err), traceback.format_exc())}
                    if progress.send_module:
                        payload["module"] = _bytecode(child)
                blob = pickle.dumps(payload)
                os.write(result_fh.fileno(), blob)
                code = 0
            except BaseException:  # noqa: BLE001
                try:
                    os.write(2, traceback.format_exc().encode())
                except Exception:
                    pass
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        result_fh.seek(0)
        blob = result_fh.read()
        if not blob or not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            stage_fh.seek(0)
            stages = stage_fh.read().decode(errors="replace").split()
            err_fh.seek(0)
            stderr = err_fh.read().decode(errors="replace")
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                try:
                    how = signal.Signals(sig).name
                except ValueError:
                    how = f"signal {sig}"
            else:
                how = f"exit status {os.WEXITSTATUS(status)}"
            raise NativeCrash(stages[-1] if stages else None, how, _detail(stderr))
    payload = pickle.loads(blob)
    if "child_error" in payload:
        raise ChildError(*payload["child_error"])
    if "module" in payload:
        replace_module(module, load_module(module.context, payload["module"], source_name))
    if "error" in payload:
        raise payload["error"]
    return payload["value"]


def run_pipeline_isolated(module: ir.Operation, pipeline: str, stage: str, diagnostics) -> bool:
    """Run an MLIR pass pipeline (`builtin.module(...)` text) on `module` in a forked
    child; MLIR's diagnostics go to `diagnostics` (a DiagnosticEngine). Returns whether
    the pipeline succeeded; raises NativeCrash if the child died."""
    from .ir import DiagnosticEngine, passmanager

    def work(child: ir.Operation, progress: Progress):
        found = DiagnosticEngine(diagnostics.source_name)
        found.input_is_bytecode = diagnostics.input_is_bytecode
        child.context.attach_diagnostic_handler(lambda d: found.add_mlir([d]) or True)
        progress.stage(stage)
        ok = True
        with child.context:
            try:
                passmanager.PassManager.parse(pipeline).run(child)
            except ir.MLIRError as err:
                if not found.has_errors:
                    found.add_mlir(err.error_diagnostics)
                ok = False
        progress.send_module = ok
        return found.diagnostics, ok

    found, ok = run_isolated(module, work, source_name=diagnostics.source_name)
    diagnostics.diagnostics.extend(found)
    return ok
