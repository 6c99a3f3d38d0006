"""The kernels of XLA's optimized HLO text (`compiled.as_text()`), as an oracle for
kernel formation: what XLA GPU launched for a program, and the bytes each launch reads
and writes (its operands and results, the measure of issue 8 and of
benchmarks/fusion_vs_xla.py).

Only the ENTRY computation is read (the step programs have no loops at the top level;
a `while`/`conditional` is counted as one entry and reported in `control_flow`).
Instructions that launch nothing are left out: parameters, constants, tuples,
get-tuple-element, bitcasts (layout-only) and the async plumbing of copies. Every
other top-level instruction (fusions, cuDNN/cuBLAS custom-calls, copies, collectives,
...) is one launch; cuDNN may run several kernels for one custom-call (padding,
reductions of split-K), so the profile of a run can count a few more.

    from costmodel.kernels.xla_hlo import read_hlo_kernels
    k = read_hlo_kernels(text)
    k.launches, k.bytes, k.by_kind
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ELEMENT_BYTES = {
    "pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
    "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
    "f32": 4, "s32": 4, "u32": 4,
    "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16,
}  # fmt: skip

NO_LAUNCH = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "copy-start", "copy-done",
             "after-all", "partition-id", "replica-id", "opt-barrier"}
CONTROL_FLOW = {"while", "conditional", "call"}

_TYPE = re.compile(r"\b(" + "|".join(sorted(ELEMENT_BYTES, key=len, reverse=True)) + r")\[([\d,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([\w\-]+)\((.*)$")


class HloParseError(ValueError):
    """The text has no ENTRY computation this reader understands."""


def type_bytes(text: str) -> int:
    """Bytes of every array type in an HLO type string (tuples summed)."""
    total = 0
    for dtype, dims in _TYPE.findall(text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * ELEMENT_BYTES[dtype]
    return total


@dataclass
class HloKernel:
    name: str
    opcode: str  # fusion, custom-call, copy, all-reduce, ...
    kind: str  # fusion kind (kLoop, kInput, kOutput, kCustom) or custom-call target or opcode
    bytes_read: int
    bytes_written: int


@dataclass
class HloKernels:
    kernels: list = field(default_factory=list)
    control_flow: list = field(default_factory=list)

    @property
    def launches(self) -> int:
        return len(self.kernels)

    @property
    def bytes(self) -> int:
        return sum(k.bytes_read + k.bytes_written for k in self.kernels)

    @property
    def by_kind(self) -> dict:
        out: dict = {}
        for k in self.kernels:
            out[k.kind] = out.get(k.kind, 0) + 1
        return out


def _split_operands(args: str) -> list[str]:
    """The operand names of `a, b), attr=...` (everything up to the closing parenthesis)."""
    depth, end = 0, len(args)
    for i, ch in enumerate(args):
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            if depth == 0:
                end = i
                break
            depth -= 1
    names = []
    for part in args[:end].split(","):
        part = part.strip()
        if part:
            names.append(part.split()[-1].lstrip("%"))
    return names


def read_hlo_kernels(text: str) -> HloKernels:
    start = text.find("\nENTRY")
    if start < 0:
        if not text.startswith("ENTRY"):
            raise HloParseError("no ENTRY computation in the HLO text")
        start = 0
    body = text[start:].split("\n", 1)[1] if "\n" in text[start + 1 :] else ""
    sizes: dict[str, int] = {}
    out = HloKernels()
    for line in body.splitlines():
        if line.startswith("}"):
            break
        m = _INSTR.match(line)
        if not m:
            continue
        name, typ, opcode, rest = m.groups()
        nbytes = type_bytes(typ)
        sizes[name] = nbytes
        if opcode in NO_LAUNCH:
            continue
        if opcode in CONTROL_FLOW:
            out.control_flow.append(name)
            continue
        read = sum(sizes.get(o, 0) for o in _split_operands(rest))
        written = nbytes
        kind = opcode
        if opcode == "fusion":
            km = re.search(r"kind=(k\w+)", rest)
            kind = km.group(1) if km else "fusion"
        elif opcode == "custom-call":
            tm = re.search(r'custom_call_target="([^"]+)"', rest)
            kind = tm.group(1) if tm else "custom-call"
            if typ.startswith("("):  # (result, scratch): the scratch is workspace, not output
                written = type_bytes(typ[1:].split("{", 1)[0].split(", ")[0])
        out.kernels.append(HloKernel(name, opcode, kind, read, written))
    return out


def hlo_to_mlir_text(text: str) -> str:
    """XLA's optimized HLO text as MLIR (StableHLO with the MHLO ops XLA's passes made:
    mhlo.fusion, cuBLAS/cuDNN custom calls), converted by jaxlib's `hlo_to_stablehlo` as
    a user converts a compiled module: what the `given` kernel policy costs one kernel per
    XLA launch (benchmarks/gpu_eval.py section 1c, tests/test_kernels_xla_hlo.py)."""
    from ..ir import load_module, make_context

    ctx = make_context()
    with ctx:
        return load_module(ctx, text, "<hlo>").get_asm(large_elements_limit=16)
