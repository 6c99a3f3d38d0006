"""costmodel.kernels.report: JAX op names split into scopes, and the kernels' time summed
by scope (`costmodel kernels --by scope`)."""

import pytest

from costmodel.kernels.report import TOP_SCOPE, UNNAMED_SCOPE, KernelRow, by_scope, name_parts, scope_of


@pytest.mark.parametrize(
    "name, parts",
    [
        ("jit(f)/transpose(jvp(M))/head/dot_general", ["jit(f)", "transpose(jvp(M))", "head", "dot_general"]),
        # a '/' inside parentheses is part of a name
        ("jit(a/b)/mul", ["jit(a/b)", "mul"]),
        ("", []),
        ("dot_general", ["dot_general"]),
    ],
)
def test_name_parts(name, parts):
    assert name_parts(name) == parts


def test_scope_drops_the_primitive_and_cuts_to_depth():
    name = "jit(f)/transpose(jvp(M))/head/dot_general"
    assert scope_of(name) == "jit(f)/transpose(jvp(M))/head"
    assert scope_of(name, 2) == "jit(f)/transpose(jvp(M))"
    assert scope_of(name, 9) == "jit(f)/transpose(jvp(M))/head"
    assert scope_of("div") == TOP_SCOPE  # a primitive outside every scope
    assert scope_of("") == UNNAMED_SCOPE


def _row(id, name, time_ns, executions=1, launches=1, flops=10, bytes_read=3, bytes_written=4):
    return KernelRow(id=id, kind="loop", time_ns=time_ns, bound="memory", flops=flops, bytes_read=bytes_read,
                     bytes_written=bytes_written, launches=launches, executions=executions, name=name)


def test_by_scope_sums_per_program_run():
    rows = [
        _row(0, "jit(f)/jvp(M)/a/add", 100.0, executions=3),
        _row(1, "jit(f)/jvp(M)/a/mul", 50.0, launches=2),
        _row(2, "jit(f)/jvp(M)/b/exp", 400.0),
        _row(3, "", 1.0),
    ]
    scopes = {s.scope: s for s in by_scope(rows)}
    a = scopes["jit(f)/jvp(M)/a"]
    assert a.kernels == 2
    assert a.time_ns == 100.0 * 3 + 50.0  # time per run x runs
    assert a.launches == 1 * 3 + 2 * 1
    assert a.flops == 10 * 3 + 10
    assert a.bytes == (3 + 4) * 3 + (3 + 4)
    assert scopes[UNNAMED_SCOPE].kernels == 1
    # costliest first
    assert [s.scope for s in by_scope(rows)][:2] == ["jit(f)/jvp(M)/b", "jit(f)/jvp(M)/a"]
    # depth 2: one scope for the three named kernels
    top = by_scope(rows, 2)[0]
    assert top.scope == "jit(f)/jvp(M)" and top.kernels == 3 and top.time_ns == 300.0 + 50.0 + 400.0
