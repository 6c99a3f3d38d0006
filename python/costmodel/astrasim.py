"""Running a user's ASTRA-sim build on a trace directory.

    result = run_astra_sim("out/", binary="/path/to/AstraSim_Analytical_Congestion_Unaware")

The binary is `binary`, else `$ASTRA_SIM`, else `AstraSim_Analytical_Congestion_Unaware`
on PATH. It runs in the trace directory with the flags the manifest lists (it writes its
log/ there). ASTRA-sim exits 0 even when it stops on an error (an unsupported collective,
a missing communicator group ...), so success means: exit status 0 AND one
`sys[N] finished, C cycles, exposed communication E cycles.` line for every rank.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess

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

    @property
    def step_time_ns(self) -> int:
        return max(self.cycles.values(), default=0)

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "command": self.command,
            "returncode": self.returncode,
            "step_time_ns": self.step_time_ns,
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
            return json.load(fh)
    except FileNotFoundError:
        raise AstraSimError(f"{directory}: no manifest.json (not a trace directory written by stablehlo-costmodel)") from None
    except (OSError, ValueError) as err:
        raise AstraSimError(f"{directory}/manifest.json: cannot read: {err}") from None


def _tail(text: str, lines: int = 5) -> str:
    rows = [r for r in text.strip().splitlines() if r.strip()]
    return " | ".join(rows[-lines:]) if rows else "(no output)"


def run_astra_sim(
    directory: str,
    binary: str | None = None,
    *,
    extra_args: list[str] | None = None,
    timeout_s: float | None = None,
) -> AstraSimResult:
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
    try:
        proc = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AstraSimError(f"ASTRA-sim did not finish within {timeout_s:g} s") from None
    except OSError as err:
        raise AstraSimError(f"cannot run ASTRA-sim '{exe}': {err.strerror}") from None
    output = (proc.stdout or "") + (proc.stderr or "")
    cycles, exposed = parse_output(output)
    result = AstraSimResult(directory, cmd, proc.returncode, cycles, exposed, output)
    if proc.returncode != 0:
        raise AstraSimError(f"ASTRA-sim exited with status {proc.returncode}: {_tail(output)}")
    missing = [r for r in range(ranks) if r not in cycles]
    if missing:
        raise AstraSimError(
            f"ASTRA-sim exited 0 but {len(missing)} of {ranks} ranks did not finish "
            f"(first: rank {missing[0]}); it stops on errors without a failing status: {_tail(output)}"
        )
    return result
