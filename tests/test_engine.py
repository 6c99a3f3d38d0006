"""Engine: region recursion, trip counts, calls, case/if, composite."""

from __future__ import annotations

import pytest

from conftest import run_annotate

from costmodel.ir import ir

import jax  # noqa: E402  (the [test] extra installs it)
import jax.numpy as jnp  # noqa: E402


def test_fori_loop_trip_count():
    text = jax.jit(lambda x: jax.lax.fori_loop(0, 7, lambda i, c: jnp.tanh(c @ c), x)).lower(jnp.ones((8, 8))).as_text()
    a = run_annotate(text)
    w = a.cost(a.ops("stablehlo.while")[0])
    assert w["trip_count"] == 7
    per_iter = 2 * 8 * 8 * 8 + 1 + 1  # dot + counter add + compare
    assert w["flops"] == 7 * per_iter
    assert w["transcendentals"] == 7 * 8 * 8


def test_scan_trip_count():
    text = jax.jit(lambda x: jax.lax.scan(lambda c, y: (c + jnp.sin(y), c), x[0], x)[0]).lower(jnp.ones((5, 6))).as_text()
    a = run_annotate(text)
    assert a.cost(a.ops("stablehlo.while")[0])["trip_count"] == 5
    assert a.totals.transcendentals == 5 * 6


def test_unknown_trip_count_warns_and_counts_once():
    text = jax.jit(lambda x, n: jax.lax.while_loop(lambda c: c[0].sum() < n, lambda c: (c[0] * 2, c[1]), (x, n))[0]).lower(
        jnp.ones((4,)), 3.0).as_text()
    a = run_annotate(text)
    w = a.ops("stablehlo.while")[0]
    assert "trip_count" not in a.cost(w)
    assert any("trip count" in d.message for d in a.diagnostics)


def test_a_data_dependent_loop_takes_the_trip_count_it_is_given():
    """A loop the IR does not count runs what the user says: its own costmodel.trip_count
    (the op's hint wins over the option), else annotate-cost's unknown-trip-count; no
    warning then. A counted loop keeps its own count whatever the hint."""
    from conftest import DATA_DEPENDENT_WHILE

    n = 64 * 64  # the body's multiply: one flop per element
    a = run_annotate(DATA_DEPENDENT_WHILE, unknown_trip_count=10)
    w = a.ops("stablehlo.while")[0]
    assert a.cost(w)["trip_count"] == 10 and not a.diagnostics
    body = a.cost(a.ops("stablehlo.multiply")[0])["flops"]
    assert body == n and a.cost(w)["flops"] == 10 * (body + a.cost(a.ops("stablehlo.reduce")[0])["flops"] + 1)
    hinted = DATA_DEPENDENT_WHILE.replace(
        "stablehlo.while(%it = %x) : tensor<64x64xf32>",
        "stablehlo.while(%it = %x) : tensor<64x64xf32> attributes {costmodel.trip_count = 7 : i64}")
    h = run_annotate(hinted, unknown_trip_count=10)
    assert h.cost(h.ops("stablehlo.while")[0])["trip_count"] == 7 and not h.diagnostics
    # the warning names both ways
    a = run_annotate(DATA_DEPENDENT_WHILE)
    (d,) = a.diagnostics
    assert "unknown-trip-count=N" in d.message and "costmodel.trip_count = N : i64" in d.message
    counted = jax.jit(lambda x: jax.lax.fori_loop(0, 5, lambda i, c: jnp.sin(c), x)).lower(jnp.ones((4,))).as_text()
    c = run_annotate(counted, unknown_trip_count=99)
    assert c.cost(c.ops("stablehlo.while")[0])["trip_count"] == 5


def _cond_text(n: int = 256) -> str:
    # branch 0: -y (elementwise, reads and writes n*n); branch 1: y @ y (reads 2 n*n, writes
    # n*n, and 2 n^3 flops): the costliest on any hardware
    return jax.jit(lambda p, x: jax.lax.cond(p, lambda y: y @ y, lambda y: -y, x)).lower(
        jnp.array(True), jnp.ones((n, n))).as_text()


def test_cond_takes_costliest_branch_by_default():
    n = 256
    a = run_annotate(_cond_text(n))
    case = a.ops("stablehlo.case")[0]
    assert a.cost(case)["flops"] == 2 * n * n * n  # the matmul branch, one FMA = 2 flops
    assert [float(x) for x in ir.DenseF64ArrayAttr(case.attributes["costmodel.branch_weights"])] == [0.0, 1.0]
    assert ir.StringAttr(ir.DictAttr(a.module.attributes["costmodel.summary"])["branch"]).value == "max"


def test_cond_branch_policies():
    n = 256
    add_flops, mm_flops = n * n, 2 * n * n * n  # -y (one flop per element); y @ y
    text = _cond_text(n)
    by = {}
    for policy in ("max", "mean", 0, 1, 7, "xla"):
        a = run_annotate(text, branch=policy)
        case = a.ops("stablehlo.case")[0]
        weights = [float(x) for x in ir.DenseF64ArrayAttr(case.attributes["costmodel.branch_weights"])]
        by[policy] = (a.cost(case), weights, case.attributes["costmodel.cost"])
    assert by[0][0]["flops"] == add_flops and by[0][1] == [1.0, 0.0]
    assert by[1][0]["flops"] == mm_flops and by[1][1] == [0.0, 1.0]
    assert by[7][1] == [0.0, 1.0]  # out of range: the last branch, as stablehlo.case runs it
    assert by["mean"][1] == [0.5, 0.5] and by["mean"][0]["flops"] == (add_flops + mm_flops) // 2
    times = {k: ir.FloatAttr(ir.DictAttr(v[2])["time_ns"]).value for k, v in by.items()}
    assert times["mean"] == pytest.approx((times[0] + times[1]) / 2)
    # xla: each count its own maximum (the negation reads no more than the matmul here)
    assert by["xla"][0]["flops"] == mm_flops and by["xla"][1] == [0.0, 1.0]


def test_cond_xla_counts_per_property():
    """branch=xla: flops from one branch, transcendentals from the other (XLA's HandleConditional)."""
    text = jax.jit(lambda p, x: jax.lax.cond(p, lambda y: y @ y, lambda y: jnp.exp(y), x)).lower(
        jnp.array(True), jnp.ones((8, 8))).as_text()
    a = run_annotate(text, branch="xla")
    c = a.cost(a.ops("stablehlo.case")[0])
    assert (c["flops"], c["transcendentals"]) == (2 * 8 * 8 * 8, 8 * 8)


def test_bad_branch_policy_is_one_line():
    from costmodel.ir import InputError

    with pytest.raises(InputError, match="branch must be max, mean, xla or a branch index"):
        run_annotate(_cond_text(4), branch="largest")


def test_call_adds_callee_at_each_call_site():
    text = """
func.func private @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}"""
    a = run_annotate(text)
    assert a.totals.flops == 2 * 4


def test_composite_costs_decomposition():
    text = """
func.func private @dec(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.composite "my.exp" %a {decomposition = @dec} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}"""
    a = run_annotate(text)
    assert a.totals.transcendentals == 4
    assert a.cost(a.ops("stablehlo.composite")[0])["transcendentals"] == 4


def test_async_start_with_inline_region_costs_its_body():
    a = run_annotate(
        """module attributes {mhlo.num_replicas = 4 : i32} {
  func.func public @main(%x: tensor<4xf32>) -> tensor<16xf32> {
    %0 = "stablehlo.async_start"(%x) ({
    ^bb0(%y: tensor<4xf32>):
      %2 = "stablehlo.all_gather"(%y) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> : (tensor<4xf32>) -> tensor<16xf32>
      stablehlo.return %2 : tensor<16xf32>
    }) : (tensor<4xf32>) -> !stablehlo.future<tensor<16xf32>>
    %3 = "stablehlo.async_done"(%0) : (!stablehlo.future<tensor<16xf32>>) -> tensor<16xf32>
    return %3 : tensor<16xf32>
  }
}"""
    )
    assert a.totals.unsupported == 0
    (start,) = a.ops("stablehlo.async_start")
    (gather,) = a.ops("stablehlo.all_gather")
    assert a.cost(start) == a.cost(gather)  # the region's one op, counted once
    assert a.cost(start)["bytes_written"] == 16 * 4


def test_unsupported_op_has_a_reason_and_no_cost_dict(annotate):
    # issue 12 item 18: unknown = key absent + costmodel.unsupported with the reason
    text = """
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.custom_call @my_kernel(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""
    a = annotate(text)
    (op,) = a.ops("stablehlo.custom_call")
    assert "costmodel.cost" not in op.attributes
    assert "no cost rule" in str(op.attributes["costmodel.unsupported"])
    assert a.engine.unsupported_ops == {"stablehlo.custom_call": 1}


def test_empty_module_warns(annotate):
    a = annotate("module {\n}\n")
    assert any("holds no function" in d.message for d in a.diagnostics)


@pytest.mark.parametrize(
    "source", ["examples/resnet50_train_4dev.mlir", "tests/data/collectives/loop_1e9_all_reduce.mlir"]
)
def test_formation_cache_gives_the_ir_a_fresh_run_gives(source):
    """Clones sharing a formation cache (costmodel predict: one formation per policy, one
    leaf cost per op for every system) come out exactly as if each were costed alone:
    the same printed IR, attributes and summary included."""
    import os

    from costmodel.ir import DiagnosticEngine, inline_calls, load_module, make_context, print_module
    from costmodel.passes.annotate_cost import annotate_module

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with make_context() as ctx:
        module = load_module(ctx, open(os.path.join(root, source)).read(), source)
        inline_calls(module)
        cache: dict = {}
        for hw, backend in [("h100-sxm", "roofline"), ("a100-40gb", "calibrated"), ("b200", "roofline")]:
            cached, fresh = module.clone(), module.clone()
            annotate_module(cached, DiagnosticEngine(source), hardware=hw, backend=backend, formation_cache=cache)
            annotate_module(fresh, DiagnosticEngine(source), hardware=hw, backend=backend)
            assert print_module(cached) == print_module(fresh), (hw, backend)
            cached.erase()
            fresh.erase()
        assert any(k[0] == "leaf" for k in cache if isinstance(k, tuple))


def test_formation_cache_without_nested_costs_keeps_totals_and_kernels():
    """nested_costs=False (costmodel predict's clones): ops inside a cached op's regions
    (the all_reduce reducers here) get no costmodel.cost of their own; every other
    attribute, the kernels and the module summary are those of a fresh run."""
    import os

    from costmodel.ir import DiagnosticEngine, inline_calls, load_module, make_context, nested_ops
    from costmodel.passes.annotate_cost import annotate_module

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = "examples/resnet50_train_4dev.mlir"

    def attrs(module):
        out = []
        for op in nested_ops(module):
            names = [getattr(a, "name", a) for a in op.attributes]
            out.append((op.name, {n: str(op.attributes[n]) for n in names}))
        return out

    with make_context() as ctx:
        module = load_module(ctx, open(os.path.join(root, source)).read(), source)
        inline_calls(module)
        cache: dict = {}
        first = module.clone()
        annotate_module(first, DiagnosticEngine(source), hardware="h100-sxm", formation_cache=cache)
        lean, fresh = module.clone(), module.clone()
        annotate_module(lean, DiagnosticEngine(source), hardware="a100-40gb", backend="calibrated",
                        formation_cache=cache, nested_costs=False)
        annotate_module(fresh, DiagnosticEngine(source), hardware="a100-40gb", backend="calibrated")
        assert str(lean.attributes["costmodel.summary"]) == str(fresh.attributes["costmodel.summary"])
        inside = {i for i, op in enumerate(nested_ops(fresh))
                  if op.parent.name in ("stablehlo.all_reduce", "stablehlo.reduce", "stablehlo.reduce_window",
                                        "stablehlo.select_and_scatter", "stablehlo.scatter", "stablehlo.sort")}
        a, b = attrs(lean), attrs(fresh)
        assert inside and len(a) == len(b)
        for i, ((na, da), (nb, db)) in enumerate(zip(a, b)):
            if i in inside:
                assert "costmodel.cost" not in da and "costmodel.cost" in db, nb
            else:
                assert da == db, (i, nb)


_EXTERN = """
func.func private @{name}(%x: tensor<64xf32>) -> tensor<64xf32>
func.func @main(%x: tensor<64xf32>) -> tensor<64xf32> {{
  %0 = "mhlo.fusion"(%x) <{{fusion_kind = #mhlo<fusion_kind kLoop>}}> ({{
  ^bb0(%a: tensor<64xf32>):
    %1 = stablehlo.exponential %a : tensor<64xf32>
    mhlo.return %1 : tensor<64xf32>
  }}) : (tensor<64xf32>) -> tensor<64xf32>
  %2 = func.call @{name}(%0) : (tensor<64xf32>) -> tensor<64xf32>
  %3 = stablehlo.composite "my.op" %2 {{decomposition = @{name}}} : (tensor<64xf32>) -> tensor<64xf32>
  return %3 : tensor<64xf32>
}}"""


@pytest.mark.parametrize("name", ["ext_fn", "fused_x"])
@pytest.mark.parametrize("fusion", ["none", "xla-gpu"])
def test_call_of_a_declaration_is_unsupported_not_zero(name, fusion):
    """audit F5: a func.call (or composite) of a function without a body (a declaration)
    cost 0 flops and 0 time with no warning; in a compiled module a call of a bodiless
    @fused_x became a 0-flop kernel. It is unsupported, counted and warned about."""
    from costmodel.kernels.report import collect_kernels

    a = run_annotate(_EXTERN.format(name=name), fusion=fusion)
    for op in a.ops("func.call") + a.ops("stablehlo.composite"):
        why = ir.StringAttr(op.attributes["costmodel.unsupported"]).value
        assert why.startswith(f"calls @{name}, which has no body")
        assert "costmodel.cost" not in op.attributes and "costmodel.kernel" not in op.attributes
    assert a.engine.unsupported_ops == {"func.call": 1, "stablehlo.composite": 1}
    summary = ir.DictAttr(a.module.attributes["costmodel.summary"])
    assert ir.IntegerAttr(summary["unsupported_count"]).value == 2
    assert sum(f"calls @{name}, which has no body" in d.message for d in a.diagnostics) == 2
    assert a.totals.transcendentals == 64  # the fusion's exponential, nothing from the calls
    if fusion != "none":
        assert [r.ops[-1] for r in collect_kernels(a.module)] == ["mhlo.fusion"]


def test_call_of_a_declaration_through_the_driver(tmp_path, capfd):
    from costmodel import driver

    src = tmp_path / "extern.mlir"
    src.write_text(_EXTERN.format(name="ext_fn"))
    out = tmp_path / "out.mlir"
    assert driver.main([str(src), "--annotate-cost", "-o", str(out)]) == 0
    err = capfd.readouterr().err
    assert "calls @ext_fn, which has no body" in err and "Traceback" not in err
    assert out.read_text().count("costmodel.unsupported = ") == 2
