"""Running a user's ASTRA-sim build on a trace directory.

    result = run_astra_sim("out/", binary="/path/to/AstraSim_Analytical_Congestion_Unaware")

The binary is `binary`, else `$ASTRA_SIM`, else `AstraSim_Analytical_Congestion_Unaware`
on PATH. It runs in the trace directory with the flags the manifest lists (it writes its
log/ there). ASTRA-sim exits 0 even when it stops on an error (an unsupported collective,
a missing communicator group ...), so success means: one
`sys[N] finished, C cycles, exposed communication E cycles.` line for every rank, and
exit status 0.

Reading is robust to how the process ends:

- its stdout and stderr are one pipe read line by line as they come (no buffering on our
  side), and ASTRA-sim's own log file (`log/log.log`, what this run appended to it) is
  read too, so a "finished" line that an abort kept from reaching the pipe still counts;
- a teardown abort (SIGABRT, status -6; 134 through a shell) AFTER every rank printed
  "finished" is accepted with a warning: upstream ASTRA-sim since astra-sim PR #351
  (2025-11) frees the shared collective implementations of a communicator sub-group once
  per group in `CollectivePlan::~CollectivePlan` (a double free at exit whenever
  comm_group.json lists groups; see docs/simulator.md). The results were all printed by
  then; nothing after "finished" changes them;
- any other ending (a rank that did not finish, another signal, a non-zero status) fails
  with one line naming the ranks that did not finish and the last lines of output.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import threading

from .jsonio import json_load

__all__ = ["AstraSimError", "AstraSimResult", "find_binary", "parse_output", "run_astra_sim", "DEFAULT_BINARY"]

DEFAULT_BINARY = "AstraSim_Analytical_Congestion_Unaware"
FINISHED_RE = re.compile(
    r"sys\[(\d+)\]\s+finished,\s+(\d+)\s+cycles(?:,\s+exposed communication\s+(\d+)\s+cycles)?"
)


class AstraSimError(Exception):
    """ASTRA-sim could not be run, or did not finish (one line)."""


@dataclasses.dataclass
class AstraSimResult:
    directory: str
    command: list[str]
    returncode: int
    cycles: dict[int, int]  # rank -> finish cycles (1 cycle = 1 ns)
    exposed: dict[int, int | None]  # rank -> exposed communication cycles
    output: str
    warnings: list[str] = dataclasses.field(default_factory=list)

    @property
    def step_time_ns(self) -> int:
        return max(self.cycles.values(), default=0)

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "command": self.command,
            "returncode": self.returncode,
            "step_time_ns": self.step_time_ns,
            "warnings": list(self.warnings),
            "ranks": [
                {"rank": r, "finish_ns": self.cycles[r], "exposed_comm_ns": self.exposed.get(r)}
                for r in sorted(self.cycles)
            ],
        }


def find_binary(binary: str | None = None) -> str:
    """The ASTRA-sim executable to run, or AstraSimError saying how to give one."""
    given = binary or os.environ.get("ASTRA_SIM") or None
    where = "--binary" if binary else ("$ASTRA_SIM" if given else None)
    candidate = given or DEFAULT_BINARY
    if os.sep in candidate or (os.altsep and os.altsep in candidate):
        path = os.path.abspath(candidate)
        if not os.path.exists(path):
            raise AstraSimError(f"ASTRA-sim binary '{candidate}' ({where}) does not exist")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise AstraSimError(f"ASTRA-sim binary '{candidate}' ({where}) is not an executable file")
        return path
    found = shutil.which(candidate)
    if found is None and os.path.exists(candidate):
        kind = "a directory" if os.path.isdir(candidate) else "not on PATH"
        raise AstraSimError(
            f"ASTRA-sim binary '{candidate}' ({where}) is {kind}; to run a file here, give ./{candidate}"
        )
    if found is None:
        if where is None:
            raise AstraSimError(
                f"ASTRA-sim not found: '{DEFAULT_BINARY}' is not on PATH; give --binary PATH or set $ASTRA_SIM "
                "(build it from https://github.com/astra-sim/astra-sim: ./build/astra_analytical/build.sh)"
            )
        raise AstraSimError(f"ASTRA-sim binary '{candidate}' ({where}) is not on PATH")
    return found


def parse_output(text: str) -> tuple[dict[int, int], dict[int, int | None]]:
    cycles: dict[int, int] = {}
    exposed: dict[int, int | None] = {}
    for m in FINISHED_RE.finditer(text):
        rank = int(m.group(1))
        cycles[rank] = int(m.group(2))
        exposed[rank] = int(m.group(3)) if m.group(3) is not None else None
    return cycles, exposed


def _manifest(directory: str) -> dict:
    try:
        with open(os.path.join(directory, "manifest.json")) as fh:
            return json_load(fh)
    except FileNotFoundError:
        raise AstraSimError(f"{directory}: no manifest.json (not a trace directory written by stablehlo-costmodel)") from None
    except (OSError, ValueError) as err:
        raise AstraSimError(f"{directory}/manifest.json: cannot read: {err}") from None


def _tail(text: str, lines: int = 5, width: int = 300) -> str:
    rows = [r for r in text.strip().splitlines() if r.strip()]
    # a line of megabytes (a simulator writing garbage) is cut: the error stays one line
    rows = [r if len(r) <= width else f"{r[:width]}... ({len(r):,} characters)" for r in rows[-lines:]]
    return " | ".join(rows) if rows else "(no output)"


ABORT_STATUSES = (-6, 134)  # SIGABRT as subprocess reports it; 128 + 6 through a shell
UPSTREAM_TEARDOWN_BUG = (
    "upstream ASTRA-sim frees a communicator sub-group's collective implementations once per group at exit "
    "(CollectivePlan::~CollectivePlan deletes the CollectiveImpl objects CollectiveImplLookup shares, since "
    "astra-sim PR #351, 2025-11; docs/simulator.md)"
)
LOG_FILE = os.path.join("log", "log.log")


def _describe_status(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (status {code})"
    return f"exited with status {code}"


def _log_offset(directory: str) -> int:
    try:
        return os.path.getsize(os.path.join(directory, LOG_FILE))
    except OSError:
        return 0


def _log_since(directory: str, offset: int) -> str:
    """What this run appended to ASTRA-sim's log file (all of it when it was rotated)."""
    path = os.path.join(directory, LOG_FILE)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(offset if size >= offset else 0)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _read_lines(stream, sink: list, on_line) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        if on_line is not None:
            on_line(line)
    stream.close()


# The upstream teardown crash happens at a different rank each run (the allocator's check
# fires at the first or a later double free), and with communicator groups the binary now
# and then dies of a signal earlier too (SIGSEGV while it sets up its rings, 1 run in ~40
# here): when a run died of a signal before every rank printed its result, the simulator
# is run again, at most this many runs in all.
ABORT_ATTEMPTS = 4


def _killed(code: int) -> bool:
    """Did the simulator die of a signal (as subprocess reports it, or 128 + N through a shell)?"""
    return code < 0 or 128 < code < 160


def run_astra_sim(
    directory: str,
    binary: str | None = None,
    *,
    extra_args: list[str] | None = None,
    timeout_s: float | None = None,
    on_line=None,
    attempts: int = ABORT_ATTEMPTS,
) -> AstraSimResult:
    """Run ASTRA-sim in `directory`; `on_line(text)` sees each output line as it comes.

    When a run dies of a signal (the upstream teardown abort, now and then a SIGSEGV)
    before every rank printed its result, it is run again, `attempts` runs in all (the
    simulation is deterministic; where the crash strikes is not), and the result says so
    in its warnings."""
    directory = os.path.abspath(directory)
    if not os.path.isdir(directory):
        raise AstraSimError(f"{directory}: not a directory")
    manifest = _manifest(directory)
    exe = find_binary(binary)
    astra = manifest.get("astra_sim") or {}
    args = list(astra.get("args") or [])
    if not args:
        from .chakra.export import astra_sim_args

        args = astra_sim_args(manifest.get("prefix", "trace"), bool(manifest.get("comm_groups")))
    ranks = int(manifest.get("ranks") or 0)
    cmd = [exe, *args, *(extra_args or [])]
    attempts = max(1, int(attempts))
    swallowed = 0  # runs whose teardown abort kept some ranks' results from us
    for attempt in range(1, attempts + 1):
        returncode, output, cycles, exposed = _run_once(directory, cmd, timeout_s, on_line)
        expected = set(range(ranks)) if ranks else set(cycles)
        missing = sorted(expected - set(cycles))
        if missing and _killed(returncode) and attempt < attempts:
            swallowed += 1
            continue
        break
    result = AstraSimResult(directory, cmd, returncode, cycles, exposed, output)
    if missing:
        shown = ", ".join(str(r) for r in missing[:8]) + (", ..." if len(missing) > 8 else "")
        how = "exited 0" if returncode == 0 else _describe_status(returncode)
        hint = "; it stops on errors without a failing status" if returncode == 0 else ""
        if _killed(returncode) and attempts > 1:
            hint = f" (in each of {attempts} runs: a crash before every rank printed its result; {UPSTREAM_TEARDOWN_BUG})"
        raise AstraSimError(
            f"ASTRA-sim {how} but {len(missing)} of {ranks} ranks did not finish (rank {shown}){hint}: {_tail(output)}"
        )
    if not cycles:
        raise AstraSimError(f"ASTRA-sim {_describe_status(returncode)} without reporting any rank: {_tail(output)}")
    if returncode in ABORT_STATUSES:
        seen = "double free" in output or "free()" in output or "corruption" in output
        result.warnings.append(
            f"ASTRA-sim {_describe_status(returncode)} after all {len(cycles)} ranks finished"
            f"{' (' + _first_match(output) + ')' if seen else ''}: a teardown crash, the results are complete; "
            f"{UPSTREAM_TEARDOWN_BUG}"
        )
    elif returncode != 0:
        raise AstraSimError(
            f"ASTRA-sim {_describe_status(returncode)} after all ranks finished (only an abort at teardown, "
            f"SIGABRT, is accepted): {_tail(output)}"
        )
    if swallowed:
        result.warnings.append(
            f"ASTRA-sim was run {swallowed + 1} times: {swallowed} run(s) died of a signal before every rank "
            "printed its result (upstream instability with communicator groups); the results are those of the "
            "last run"
        )
    return result


def _run_once(directory: str, cmd: list[str], timeout_s, on_line) -> tuple[int, str, dict, dict]:
    """One run: (status, output, cycles per rank, exposed cycles per rank)."""
    log_offset = _log_offset(directory)
    # Line-buffered C stdio in the child where coreutils' stdbuf exists (ASTRA-sim's own
    # spdlog sinks flush every line already); the pipe is read line by line here.
    stdbuf = shutil.which("stdbuf")
    launch = [stdbuf, "-oL", "-eL", *cmd] if stdbuf else cmd
    try:
        proc = subprocess.Popen(
            launch,
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
    except OSError as err:
        raise AstraSimError(f"cannot run ASTRA-sim '{cmd[0]}': {err.strerror}") from None
    lines: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines, on_line), daemon=True)
    reader.start()
    try:
        returncode = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        reader.join(5)
        raise AstraSimError(f"ASTRA-sim did not finish within {timeout_s:g} s: {_tail(''.join(lines))}") from None
    except BaseException:  # Ctrl-C: do not leave the simulator running
        _kill(proc)
        raise
    reader.join()
    output = "".join(lines)
    cycles, exposed = parse_output(output)
    # A "finished" line the abort kept from the pipe may still be in the log file.
    log_cycles, log_exposed = parse_output(_log_since(directory, log_offset))
    for r, c in log_cycles.items():
        if r not in cycles:
            cycles[r] = c
            exposed[r] = log_exposed.get(r)
    return returncode, output, cycles, exposed


def _first_match(output: str) -> str:
    for line in output.splitlines():
        if "double free" in line or "free()" in line or "corruption" in line:
            return line.strip()[:120]
    return ""


def _kill(proc) -> None:
    """End the simulator we started (its own session: it and anything it spawned)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
