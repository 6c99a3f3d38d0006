"""`--verify-diagnostics`: check `expected-*` comments against emitted diagnostics.

Syntax as in mlir-opt:

    // expected-error {{message substring}}        on this line
    // expected-warning@+1 {{...}}                  on the next line (@-N: N lines above)
    // expected-remark@above {{...}} / @below
    // expected-note@+2 {{...}}

Every expected diagnostic must be produced (same severity, same line of the input file,
message containing the text). Every produced error, warning or remark must be expected
(mode "all", the default) unless the mode is "only-expected"; unexpected notes are
ignored, as notes hang off a diagnostic that was itself checked. Problems are reported
as `file:line:col: error: ...` lines, as mlir-opt does.
"""

from __future__ import annotations

import re

__all__ = ["parse_expectations", "verify_diagnostics", "Expectation"]

EXPECT_RE = re.compile(
    r"expected-(error|warning|remark|note)\s*(?:@(above|below|[+-]\d+))?\s*\{\{(.*?)\}\}"
)
# Catches misspelt annotations (`expected-error@+1 {{` without the closing braces,
# `expected-eror {{`), which would otherwise silently check nothing.
_LOOSE_RE = re.compile(r"expected-([a-z]+)(@\S*)?\s*\{\{")


class Expectation:
    __slots__ = ("severity", "line", "message", "at_line", "at_col", "matched")

    def __init__(self, severity: str, line: int, message: str, at_line: int, at_col: int) -> None:
        self.severity = severity
        self.line = line
        self.message = message
        self.at_line = at_line
        self.at_col = at_col
        self.matched = False


def parse_expectations(text: str, source_name: str = "<input>") -> tuple[list[Expectation], list[str]]:
    """The expectations of `text` and the problems with malformed annotations."""
    out: list[Expectation] = []
    problems: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if "expected-" not in line:
            continue
        good_starts = set()
        for m in EXPECT_RE.finditer(line):
            sev, where, msg = m.groups()
            good_starts.add(m.start())
            target = lineno
            if where == "above":
                target = lineno - 1
            elif where == "below":
                target = lineno + 1
            elif where:
                target = lineno + int(where)
            out.append(Expectation(sev, target, msg, lineno, m.start() + 1))
        for m in _LOOSE_RE.finditer(line):
            if m.start() not in good_starts:
                problems.append(
                    f"{source_name}:{lineno}:{m.start() + 1}: error: malformed expected-* annotation "
                    f"'{line[m.start():].strip()}'"
                )
    return out, problems


def verify_diagnostics(chunk: bytes, source_name: str, diagnostics, *, only_expected: bool = False) -> list[str]:
    """Problems (one line each) between the `expected-*` comments of `chunk` and the
    diagnostics produced for it; an empty list means the check passed."""
    text = chunk.decode("utf-8", errors="replace")
    expected, problems = parse_expectations(text, source_name)
    flat = []
    for d in diagnostics:
        flat.append(d)
        flat.extend(d.notes)
    for d in flat:
        hit = None
        if d.file == source_name:
            for e in expected:
                if not e.matched and e.severity == d.severity and e.line == d.line and e.message in d.message:
                    hit = e
                    break
        if hit is not None:
            hit.matched = True
        elif d.severity != "note" and not only_expected:
            problems.append(f"{d.where()}error: unexpected {d.severity}: {d.text()}")
    for e in expected:
        if not e.matched:
            problems.append(
                f"{source_name}:{e.at_line}:{e.at_col}: error: expected {e.severity} \"{e.message}\" was not produced"
            )
    return problems
