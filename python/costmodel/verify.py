"""`--verify-diagnostics`: check `expected-*` comments against emitted diagnostics.

Syntax as in mlir-opt:

    // expected-error {{message substring}}        on this line
    // expected-warning@+1 {{...}}                  on the next line (@-N: N lines above)
    // expected-remark@above {{...}} / @below

Every expected diagnostic must be produced (same severity, same line of the input file,
message containing the text) and every produced error/warning/remark must be expected.
"""

from __future__ import annotations

import re

EXPECT_RE = re.compile(
    r"expected-(error|warning|remark|note)\s*(@(above|below|[+-]\d+))?\s*\{\{(.*?)\}\}"
)


def parse_expectations(text: str) -> list[dict]:
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for m in EXPECT_RE.finditer(line):
            sev, _, where, msg = m.groups()
            target = lineno
            if where == "above":
                target = lineno - 1
            elif where == "below":
                target = lineno + 1
            elif where:
                target = lineno + int(where)
            out.append({"severity": sev, "line": target, "message": msg, "at": lineno, "matched": False})
    return out


def verify_diagnostics(chunk: bytes, source_name: str, diagnostics) -> list[str]:
    text = chunk.decode("utf-8", errors="replace")
    expected = parse_expectations(text)
    problems: list[str] = []
    flat = []
    for d in diagnostics:
        flat.append(d)
        flat.extend(d.notes)
    for d in flat:
        hit = None
        if d.file == source_name:
            for e in expected:
                if not e["matched"] and e["severity"] == d.severity and e["line"] == d.line and e["message"] in d.message:
                    hit = e
                    break
        if hit is not None:
            hit["matched"] = True
        elif d.severity != "note":
            where = f"{d.file}:{d.line}:{d.col}: " if d.file else ""
            problems.append(f"{where}error: unexpected {d.severity}: {d.message}")
    for e in expected:
        if not e["matched"]:
            problems.append(
                f"{source_name}:{e['at']}: error: expected {e['severity']} \"{e['message']}\" was not produced"
            )
    return problems
