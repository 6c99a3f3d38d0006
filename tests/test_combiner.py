"""costmodel.combiner: XLA GPU's all-reduce combiner on StableHLO."""

from __future__ import annotations

import pytest

from costmodel.combiner import COMBINED_ATTR, XLA_GPU_THRESHOLD_BYTES, combine_all_reduces
from costmodel.ir import load_module, make_context


def ar(name: str, x: str, t: str = "tensor<256xf32>", groups: str = "[[0, 1, 2, 3]]", body: str = "add") -> str:
    et = t[t.rindex("x") + 1 : -1] if "x" in t else t[len("tensor<") : -1]
    n = groups.count("[") - 1
    m = groups.count(",") // max(1, n) + 1
    return (
        f'  %{name} = "stablehlo.all_reduce"(%{x}) <{{replica_groups = dense<{groups}> : tensor<{n}x{m}xi64>}}> ({{\n'
        f"  ^bb0(%p: tensor<{et}>, %q: tensor<{et}>):\n"
        f"    %s = stablehlo.{body} %p, %q : tensor<{et}>\n"
        f"    stablehlo.return %s : tensor<{et}>\n"
        f"  }}) : ({t}) -> {t}\n"
    )


def module(body: str, args: str, results: str, ret: str) -> str:
    return f"func.func @main({args}) -> ({results}) {{\n{body}  return {ret} : {results}\n}}\n"


def load(text: str):
    ctx = make_context()
    return ctx, load_module(ctx, text, "<test>")


def all_reduces(m):
    from costmodel.ir import walk_ops

    return [op for op in walk_ops(m.operation) if op.name == "stablehlo.all_reduce"]


def names_in_order(m) -> list[str]:
    fn = m.regions[0].blocks[0].operations[0]
    return [o.operation.name for o in fn.regions[0].blocks[0].operations]


T = "tensor<256xf32>"


def test_independent_all_reduces_become_one_placed_after_the_last_with_readers_moved():
    body = ar("ra", "a") + f"  %u = stablehlo.multiply %ra, %ra : {T}\n" + ar("rb", "b")
    ctx, m = load(module(body, f"%a: {T}, %b: {T}", f"{T}, {T}", "%u, %rb"))
    stats = combine_all_reduces(m)
    assert (stats.all_reduces, stats.combined, stats.groups, stats.after) == (2, 2, 1, 1)
    assert stats.bytes_combined == 2 * 256 * 4  # two f32[256]
    (op,) = all_reduces(m)
    assert len(op.operands) == 2 and len(op.results) == 2
    with ctx:
        assert int(str(op.attributes[COMBINED_ATTR]).split(":")[0]) == 2
    # the multiply that read the first all-reduce now follows the combined one
    assert names_in_order(m) == ["stablehlo.all_reduce", "stablehlo.multiply", "func.return"]
    m.operation.verify()


def test_an_all_reduce_that_depends_on_another_is_not_combined_with_it():
    body = ar("ra", "a") + f"  %x = stablehlo.add %ra, %a : {T}\n" + ar("rx", "x")
    _, m = load(module(body, f"%a: {T}", T, "%rx"))
    stats = combine_all_reduces(m)
    assert (stats.all_reduces, stats.combined, stats.after) == (2, 0, 2)
    assert len(all_reduces(m)) == 2


@pytest.mark.parametrize(
    "second",
    [
        ar("rb", "b", t="tensor<256xbf16>"),  # another element type
        ar("rb", "b", groups="[[0, 1], [2, 3]]"),  # other replica groups
        ar("rb", "b", body="maximum"),  # another reduction
    ],
)
def test_all_reduces_of_different_keys_stay_apart(second):
    t2 = "tensor<256xbf16>" if "bf16" in second else T
    _, m = load(module(ar("ra", "a") + second, f"%a: {T}, %b: {t2}", f"{T}, {t2}", "%ra, %rb"))
    stats = combine_all_reduces(m)
    assert stats.combined == 0 and len(all_reduces(m)) == 2


def test_byte_and_count_thresholds():
    body = "".join(ar(f"r{i}", f"a{i}") for i in range(3))
    args = ", ".join(f"%a{i}: {T}" for i in range(3))
    text = module(body, args, ", ".join([T] * 3), ", ".join(f"%r{i}" for i in range(3)))
    one = 256 * 4  # bytes of one f32[256]
    # room for two: the third starts a walk of its own and stays alone
    _, m = load(text)
    stats = combine_all_reduces(m, threshold_bytes=2 * one)
    assert (stats.combined, stats.groups, stats.after) == (2, 1, 2)
    # at most two per combined op
    _, m = load(text)
    stats = combine_all_reduces(m, threshold_count=2)
    assert (stats.combined, stats.groups, stats.after) == (2, 1, 2)
    # an all-reduce above the threshold is never combined
    _, m = load(text)
    stats = combine_all_reduces(m, threshold_bytes=one - 1)
    assert (stats.combined, stats.after) == (0, 3)
    # XLA GPU's default: all three
    _, m = load(text)
    assert combine_all_reduces(m).after == 1 and XLA_GPU_THRESHOLD_BYTES == 30 * 1024 * 1024


def test_post_order_groups_gradients_after_the_backward_pass():
    """As in XLA's module of the ResNet-18 step: statistics all-reduces s1 -> s2 form a
    chain, the gradients g1 (from s1) and g2 (from s2) feed only the update. XLA's post
    order walks from the results: the update of g2 first (its operand reaches through
    the whole chain), so s1, s2, g2, g1: each statistic alone, the two gradients in one."""
    body = (
        ar("s1", "a")
        + f"  %h1 = stablehlo.multiply %s1, %a : {T}\n"
        + ar("g1", "h1")
        + ar("s2", "h1")
        + f"  %h2 = stablehlo.multiply %s2, %a : {T}\n"
        + ar("g2", "h2")
        + f"  %u1 = stablehlo.subtract %a, %g1 : {T}\n"
        + f"  %u2 = stablehlo.subtract %a, %g2 : {T}\n"
    )
    _, m = load(module(body, f"%a: {T}", f"{T}, {T}", "%u2, %u1"))
    stats = combine_all_reduces(m)
    assert (stats.all_reduces, stats.combined, stats.groups, stats.after) == (4, 2, 1, 3)
    combined = [op for op in all_reduces(m) if len(op.operands) == 2]
    assert len(combined) == 1
    # its operands: h2 (g2's) then h1 (g1's), the order the walk took them; each is a
    # multiply of a statistic: s2 reads h1, s1 reads the argument
    stat = [v.owner.operands[0].owner for v in combined[0].operands]
    assert [v.owner.name for v in combined[0].operands] == ["stablehlo.multiply", "stablehlo.multiply"]
    assert stat[0].operands[0].owner.name == "stablehlo.multiply"  # s2 = all_reduce(h1)
    assert not hasattr(stat[1].operands[0].owner, "name")  # s1 = all_reduce(%a): a block argument
    m.operation.verify()


def test_loop_bodies_are_combined_on_their_own():
    t = "tensor<64xf32>"
    loop = f"""
  %c0 = stablehlo.constant dense<0> : tensor<i64>
  %w:3 = stablehlo.while(%i = %c0, %x = %a, %y = %b) : tensor<i64>, {t}, {t}
    cond {{
      %c3 = stablehlo.constant dense<3> : tensor<i64>
      %lt = stablehlo.compare LT, %i, %c3 : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %lt : tensor<i1>
    }} do {{
      %one = stablehlo.constant dense<1> : tensor<i64>
      %n = stablehlo.add %i, %one : tensor<i64>
{ar("lx", "x", t=t)}{ar("ly", "y", t=t)}      stablehlo.return %n, %lx, %ly : tensor<i64>, {t}, {t}
    }}
"""
    body = ar("ra", "a", t=t) + loop
    _, m = load(module(body, f"%a: {t}, %b: {t}", f"{t}, {t}, {t}", "%ra, %w#1, %w#2"))
    stats = combine_all_reduces(m)
    # the two in the body combine; the one outside stays alone (another computation)
    assert (stats.all_reduces, stats.combined, stats.groups, stats.after) == (3, 2, 1, 2)
    m.operation.verify()


def test_costs_of_the_members_add_up_on_the_combined_op():
    """After annotate-cost (XLA combines after fusion) the combined op carries its
    members' summed costmodel.cost, so the module's totals do not move."""
    from conftest import run_annotate

    from costmodel.ir import attr_number, ir

    body = ar("ra", "a") + ar("rb", "b", t="tensor<512xf32>")
    t2 = "tensor<512xf32>"
    text = "module attributes {mhlo.num_replicas = 4 : i32} {\n" + module(body, f"%a: {T}, %b: {t2}", f"{T}, {t2}", "%ra, %rb") + "}\n"
    a = run_annotate(text, hardware="a100-40gb", fusion="xla-gpu", backend="calibrated")
    before = {}
    with a.module.context:
        for op in all_reduces(a.module):
            d = ir.DictAttr(op.attributes["costmodel.cost"])
            for k in ("flops", "bytes_read", "bytes_written", "time_ns"):
                before[k] = before.get(k, 0) + attr_number(d[k])
        combine_all_reduces(a.module)
        (op,) = all_reduces(a.module)
        d = ir.DictAttr(op.attributes["costmodel.cost"])
        assert {k: attr_number(d[k]) for k in before} == pytest.approx(before)
        assert before["flops"] == 256 + 512  # one add per element


def test_predict_combines_by_default_with_xla_gpu_fusion():
    from costmodel.pipeline import predict_step

    body = "".join(ar(f"r{i}", f"a{i}", t="tensor<1048576xf32>") for i in range(4))
    t = "tensor<1048576xf32>"
    args = ", ".join(f"%a{i}: {t}" for i in range(4))
    text = (
        "module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {\n"
        + module(body, args, ", ".join([t] * 4), ", ".join(f"%r{i}" for i in range(4)))
        + "}\n"
    )
    on = predict_step(text, system="a100-40gb-x4", backend="calibrated")
    off = predict_step(text, system="a100-40gb-x4", backend="calibrated", combine=False)
    assert on.fusion == "xla-gpu"
    # one collective of the four buffers instead of four: what the system's model prices
    from costmodel.commmodel import collective_time_ns
    from costmodel.systems import load_system

    system = load_system("a100-40gb-x4")
    one, _ = collective_time_ns(system, "all_reduce", 1048576 * 4, [0, 1, 2, 3])
    four, _ = collective_time_ns(system, "all_reduce", 4 * 1048576 * 4, [0, 1, 2, 3])
    assert off.comm_ms == pytest.approx(4 * one / 1e6)
    assert on.comm_ms == pytest.approx(four / 1e6)
    assert on.comm_ms < off.comm_ms


def test_costmodel_predict_says_what_the_combiner_did(tmp_path, capsys):
    from costmodel.cli import main

    t = "tensor<1024xf32>"
    body = "".join(ar(f"r{i}", f"a{i}", t=t) for i in range(3))
    text = (
        "module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {\n"
        + module(body, ", ".join(f"%a{i}: {t}" for i in range(3)), ", ".join([t] * 3), ", ".join(f"%r{i}" for i in range(3)))
        + "}\n"
    )
    path = tmp_path / "three.mlir"
    path.write_text(text)
    assert main(["predict", str(path), "--system", "a100-40gb-x4", "--top", "0"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("; all-reduces 3 -> 1 (XLA GPU's combiner)")
    assert main(["predict", str(path), "--system", "a100-40gb-x4", "--top", "0", "--no-combine", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert "combined" not in doc["program"]
    # XLA TPU's kernels: its combiner is not modelled, every all-reduce stays
    assert main(["predict", str(path), "--system", "a100-40gb-x4", "--top", "0", "--fusion", "xla-tpu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0]["fusion"] == "xla-tpu" and "combined" not in doc["program"]


# -- random programs: the combined module verifies and computes the same thing --------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_T8 = "tensor<8xf32>"
_GROUPS = ("[[0, 1, 2, 3]]", "[[0, 1], [2, 3]]")


@st.composite
def _programs(draw):
    """A random DAG of all-reduces (two kinds of replica groups) and adds over two
    arguments; returns (text, returned values)."""
    n = draw(st.integers(2, 24))
    vals = ["a0", "a1"]
    body = ""
    for i in range(n):
        if draw(st.booleans()):
            x = draw(st.sampled_from(vals))
            body += ar(f"v{i}", x, t=_T8, groups=draw(st.sampled_from(_GROUPS)))
        else:
            x, y = draw(st.sampled_from(vals)), draw(st.sampled_from(vals))
            body += f"  %v{i} = stablehlo.add %{x}, %{y} : {_T8}\n"
        vals.append(f"v{i}")
    outs = draw(st.lists(st.sampled_from(vals[2:]), min_size=1, max_size=4, unique=True))
    return module(body, f"%a0: {_T8}, %a1: {_T8}", ", ".join([_T8] * len(outs)), ", ".join(f"%{o}" for o in outs))


def _expressions(m) -> list[str]:
    """Each result of @main as an expression over the arguments, an all-reduce applied to
    each operand on its own (what a combined all-reduce computes per operand)."""
    fn = m.regions[0].blocks[0].operations[0]
    block = fn.regions[0].blocks[0]
    memo: dict = {}
    args = {str(a.get_name()): f"arg{i}" for i, a in enumerate(block.arguments)}

    def expr(v) -> str:
        key = v.get_name()
        if key in memo:
            return memo[key]
        if key in args:
            out = args[key]
        else:
            op = v.owner
            if op.name == "stablehlo.all_reduce":
                k = v.result_number
                groups = str(op.attributes["replica_groups"])
                out = f"ar[{groups}]({expr(op.operands[k])})"
            else:
                out = f"{op.name}({', '.join(expr(x) for x in op.operands)})"
        memo[key] = out
        return out

    ret = list(block.operations)[-1]
    return [expr(v) for v in ret.operands]


def _ar_bytes(m) -> int:
    from costmodel.shapes import type_info

    return sum(type_info(v.type).nbytes for op in all_reduces(m) for v in op.operands)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_programs(), st.sampled_from([32, 64, 96, XLA_GPU_THRESHOLD_BYTES]), st.sampled_from([2, 3, 256]))
def test_random_programs_combine_to_an_equivalent_valid_module(text, threshold_bytes, threshold_count):
    ctx, m = load(text)
    with ctx:
        before, nbytes = _expressions(m), _ar_bytes(m)
        stats = combine_all_reduces(m, threshold_bytes=threshold_bytes, threshold_count=threshold_count)
        m.operation.verify()
        assert _expressions(m) == before  # the same values, each all-reduced on its own
        assert _ar_bytes(m) == nbytes
        ops = all_reduces(m)
        assert len(ops) == stats.after
        for op in ops:  # thresholds held
            assert len(op.operands) <= threshold_count
            if len(op.operands) > 1:
                assert 4 * 8 * len(op.operands) <= threshold_bytes
    # a clone replaying the recorded plan (costmodel predict's other clones) ends the same
    plans: dict = {}
    ctx2, first = load(text)
    ctx3, second = load(text)
    with ctx2:
        s1 = combine_all_reduces(first, threshold_bytes=threshold_bytes, threshold_count=threshold_count, plans=plans)
    with ctx3:
        s2 = combine_all_reduces(second, threshold_bytes=threshold_bytes, threshold_count=threshold_count, plans=plans)
    assert s1 == s2 == stats
    assert str(first) == str(second) == str(m)


def test_a_plan_of_another_module_is_not_replayed():
    """The plans dict holds the first module's merges; a module whose blocks differ (other
    ops, other all-reduce keys) is combined afresh, never merged by another's plan."""
    plans: dict = {}
    a = module(ar("ra", "a") + ar("rb", "b"), f"%a: {T}, %b: {T}", f"{T}, {T}", "%ra, %rb")
    _, m1 = load(a)
    assert combine_all_reduces(m1, plans=plans).groups == 1
    # same op count, but the second all-reduce has other groups: not combinable with the first
    b = module(ar("ra", "a") + ar("rb", "b", groups="[[0, 1], [2, 3]]"), f"%a: {T}, %b: {T}", f"{T}, {T}", "%ra, %rb")
    _, m2 = load(b)
    stats = combine_all_reduces(m2, plans=plans)
    assert (stats.combined, stats.after) == (0, 2)
    m2.operation.verify()
    # another op count: afresh too
    c = module(ar("ra", "a") + f"  %u = stablehlo.add %a, %b : {T}\n" + ar("rb", "b"), f"%a: {T}, %b: {T}", f"{T}, {T}, {T}",
               "%ra, %rb, %u")
    _, m3 = load(c)
    assert combine_all_reduces(m3, plans=plans).groups == 1
