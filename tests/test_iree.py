"""IREE compile flows (costmodel.iree.compiler): our annotated output is valid IREE
input and compiles to the same program as the plain module; what IREE rejects comes
back as one line / one diagnostic naming our op and its location; the exchange formats
IREE 3.13 reads (text, MLIR bytecode, StableHLO portable artifacts)."""

from __future__ import annotations

import functools
import os

import pytest

import iree.compiler as ireec
from costmodel import driver
from costmodel.iree import IreeError, compile_module, prepare
from costmodel.iree import compiler as iree_compiler
from costmodel.ir import DiagnosticEngine, load_module, make_context, print_module, walk_ops
from costmodel.passes.annotate_cost import annotate_module

# One of most kinds of op: a GEMM with an epilogue, a convolution, a reduction, a
# gather, a concatenate and a counted loop (fori) whose body computes.
PROGRAM = """\
func.func @main(%x: tensor<8x32xf32>, %w: tensor<32x64xf32>, %img: tensor<1x8x8x4xf32>, %k: tensor<3x3x4x8xf32>, %idx: tensor<4x1xi32>) -> (tensor<8x64xf32>, tensor<1x6x6x8xf32>, tensor<8xf32>, tensor<4x32xf32>, tensor<16x32xf32>, tensor<8x32xf32>) {
  %d = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<8x32xf32>, tensor<32x64xf32>) -> tensor<8x64xf32>
  %t = stablehlo.tanh %d : tensor<8x64xf32>
  %c = stablehlo.convolution(%img, %k) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {stride = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x8x8x4xf32>, tensor<3x3x4x8xf32>) -> tensor<1x6x6x8xf32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  %r = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<8x32xf32>, tensor<f32>) -> tensor<8xf32>
  %g = "stablehlo.gather"(%x, %idx) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 32>} : (tensor<8x32xf32>, tensor<4x1xi32>) -> tensor<4x32xf32>
  %cat = stablehlo.concatenate %x, %x, dim = 0 : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  %i0 = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1> : tensor<i32>
  %n = stablehlo.constant dense<5> : tensor<i32>
  %l:2 = stablehlo.while(%i = %i0, %acc = %x) : tensor<i32>, tensor<8x32xf32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %e = stablehlo.exponential %acc : tensor<8x32xf32>
      %a = stablehlo.add %e, %x : tensor<8x32xf32>
      %i1 = stablehlo.add %i, %one : tensor<i32>
      stablehlo.return %i1, %a : tensor<i32>, tensor<8x32xf32>
    }
  return %t, %c, %r, %g, %cat, %l#1 : tensor<8x64xf32>, tensor<1x6x6x8xf32>, tensor<8xf32>, tensor<4x32xf32>, tensor<16x32xf32>, tensor<8x32xf32>
}
"""

# select_and_scatter with overlapping windows (max-pool 3x3 stride 2 backward, as in the
# ResNet training steps): IREE 3.13 cannot legalize it.
SELECT_AND_SCATTER = """\
func.func @main(%x: tensor<1x9x9x1xf32>, %s: tensor<1x4x4x1xf32>) -> tensor<1x9x9x1xf32> {
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = "stablehlo.select_and_scatter"(%x, %s, %init) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
  }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %c : tensor<f32>
  }) {window_dimensions = array<i64: 1, 3, 3, 1>, window_strides = array<i64: 1, 2, 2, 1>} : (tensor<1x9x9x1xf32>, tensor<1x4x4x1xf32>, tensor<f32>) -> tensor<1x9x9x1xf32>
  return %0 : tensor<1x9x9x1xf32>
}
"""

DATA = os.path.join(os.path.dirname(__file__), "data")

# Flags that make the flatbuffer depend on the program only: no source map, no DWARF
# (both carry the text positions of the input, which attributes shift), a generic CPU.
REPRODUCIBLE = [
    "--iree-llvmcpu-target-cpu=generic",
    "--iree-vm-bytecode-module-strip-source-map=true",
    "--iree-llvmcpu-debug-symbols=false",
]


@functools.lru_cache(maxsize=None)
def _iree_compile(text: bytes) -> bytes:
    """`iree-compile` of a text module (iree.compiler.compile_str runs the tool, reading
    the module from stdin, so the input name is the same for every module)."""
    return ireec.compile_str(text, target_backends=["llvm-cpu"], extra_args=REPRODUCIBLE)


def _annotated(text: str, fusion: str) -> bytes:
    ctx = make_context()
    module = load_module(ctx, text, "program.mlir")
    annotate_module(module, DiagnosticEngine("program.mlir"), hardware="a100-40gb", fusion=fusion)
    return print_module(module)


@pytest.mark.parametrize("fusion", ["xla-gpu", "iree"])
def test_annotated_module_compiles_to_the_same_program(fusion):
    plain = print_module(load_module(make_context(), PROGRAM, "program.mlir"))
    annotated = _annotated(PROGRAM, fusion)
    # the annotated text really carries our attributes on ops, kernels and the module
    for attr in (b"costmodel.cost", b"costmodel.kernel =", b"costmodel.kernel_cost", b"costmodel.summary"):
        assert attr in annotated
    assert _iree_compile(annotated) == _iree_compile(plain)


def test_attributes_survive_or_are_dropped_cleanly_at_flow_level():
    """At the flow level IREE keeps a discardable attribute where its op survives (the
    reduction's linalg op, the module) and drops the rest: no error, no warning."""
    annotated = _annotated(PROGRAM, "xla-gpu")
    flow = ireec.compile_str(
        annotated, target_backends=["llvm-cpu"], extra_args=REPRODUCIBLE + ["--compile-to=flow"], output_format="mlir-text"
    )
    text = flow.decode() if isinstance(flow, bytes) else flow
    assert "costmodel.summary" in text  # on the module
    assert "flow.executable" in text


def test_in_process_compile_of_annotated_module():
    ctx = make_context()
    module = load_module(ctx, PROGRAM, "program.mlir")
    annotate_module(module, DiagnosticEngine("program.mlir"), hardware="a100-40gb", fusion="iree")
    compiled = compile_module(module)
    import iree.runtime as ireert

    config = ireert.Config("local-task")
    vm_module = ireert.VmModule.copy_buffer(config.vm_instance, compiled.vmfb)  # verifies the flatbuffer
    assert "main" in vm_module.function_names


def test_rejected_op_is_one_line_naming_op_and_location():
    module = load_module(make_context(), SELECT_AND_SCATTER, "pool.mlir")
    with pytest.raises(IreeError) as err:
        compile_module(module, compile_to="dispatch-creation")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("pool.mlir:3:8: IREE cannot compile 'stablehlo.select_and_scatter': failed to legalize")
    assert "%" not in message  # not IREE's dump of the op
    (d,) = err.value.diagnostics
    assert d.op.name == "stablehlo.select_and_scatter"


def test_rejected_op_in_the_pass_is_a_diagnostic(tmp_path, capsys):
    path = tmp_path / "pool.mlir"
    path.write_text(SELECT_AND_SCATTER)
    rc = driver.main([str(path), "--annotate-cost=fusion=iree", "-o", str(tmp_path / "out.mlir")])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.strip() == (
        f"{path}:3:8: error: IREE cannot compile 'stablehlo.select_and_scatter': failed to legalize operation "
        "'stablehlo.select_and_scatter' that was explicitly marked illegal"
    )
    assert not (tmp_path / "out.mlir").exists()


def test_ops_of_dialects_iree_lacks_are_named():
    text = """\
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = mhlo.copy %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""
    module = load_module(make_context(allow_unregistered_dialects=True), text, "m.mlir")
    with pytest.raises(IreeError) as err:
        compile_module(module)
    assert str(err.value) == "m.mlir:2:8: IREE cannot compile 'mhlo.copy': IREE has no such op (it takes StableHLO, CHLO and func)"


def test_sharded_module_must_be_partitioned_first():
    path = f"{DATA}/sharded/tp_mlp.mlir"
    module = load_module(make_context(), open(path).read(), path)
    with pytest.raises(IreeError) as err:
        compile_module(module)
    assert str(err.value).startswith(f"{path}:3:3: IREE cannot compile a sharded module that is not partitioned")
    assert "run --propagate-shardings first" in str(err.value)


def test_a_constraint_that_shards_nothing_is_dropped():
    """A one-device program with a sharding constraint on an empty mesh (jax.random's keys
    under jit) is per-device as it is: the constraint is the identity, and IREE compiles
    the program without it."""
    text = """
module {
  sdy.mesh @empty_mesh = <[]>
  func.func public @main(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
    %c = sdy.sharding_constraint %x <@empty_mesh, [{}, {}]> : tensor<8x8xf32>
    %y = stablehlo.add %c, %x : tensor<8x8xf32>
    return %y : tensor<8x8xf32>
  }
}
"""
    module = load_module(make_context(), text, "m.mlir")
    prepared = prepare(module)
    assert b"sdy." not in prepared.text and b"stablehlo.add" in prepared.text
    compile_module(module)  # no IreeError


def test_partitioned_module_compiles_without_shardy(tmp_path, capsys):
    """After --propagate-shardings the per-device program still carries the mesh and
    `sdy.sharding` attributes; they are dropped for IREE, its collectives compile."""
    rc = driver.main(
        [
            f"{DATA}/sharded/tp_mlp.mlir",
            "--propagate-shardings",
            "--annotate-cost=hardware=a100-40gb fusion=iree",
            "-o",
            str(tmp_path / "out.mlir"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    out = (tmp_path / "out.mlir").read_text()
    assert "collective = 1 : i64" in out  # the all_reduce: not a kernel, counted


def test_every_op_gets_a_unique_location_on_a_clone():
    from costmodel.ir import ir

    module = load_module(make_context(), PROGRAM, "program.mlir")
    before = print_module(module, debug_info=True)
    prepared = prepare(module)
    assert print_module(module, debug_info=True) == before  # ours is untouched
    assert len(prepared.ops) == len(list(walk_ops(module)))
    # what IREE parses: every op carries the marker of the op it is, but the body of the
    # reduce (printed compactly: `applies stablehlo.add`), which carries the reduce's
    seen = set()
    for op in walk_ops(load_module(make_context(), prepared.text, "handed-over")):
        loc = ir.FileLineColLoc(op.location)
        assert loc.filename == "costmodel-op"
        ours = prepared.ops[loc.start_line - 1]
        assert ours.name == op.name or ours.name == "stablehlo.reduce"
        seen.add(loc.start_line)
    assert len(seen) == len(prepared.ops) - 2  # the reduce body's add and return


def test_parse_error_position_maps_to_our_op():
    module = load_module(make_context(), PROGRAM, "program.mlir")
    prepared = prepare(module)
    lines = prepared.text.decode().splitlines()
    line = next(i for i, t in enumerate(lines, 1) if "stablehlo.tanh" in t)
    assert iree_compiler._op_of_text_line(prepared, line).name == "stablehlo.tanh"


def test_missing_iree_is_one_line(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "iree.compiler", None)
    with pytest.raises(IreeError) as err:
        iree_compiler._api()
    assert str(err.value) == "IREE's compiler is not installed (pip install 'stablehlo-costmodel[iree]')"


@pytest.mark.parametrize("form", ["bytecode", "portable-1.0.0", "portable-current"])
def test_exchange_formats_iree_reads(form):
    """IREE 3.13 reads jaxlib 0.10's text, its MLIR bytecode and StableHLO portable
    artifacts from 1.0.0 to jaxlib's current version, to the same program (docs/iree.md;
    IREE names executables after the first location's file, so all carry the same)."""
    from jaxlib.mlir.dialects import stablehlo

    from costmodel.ir import ir

    ctx = make_context()
    module = load_module(ctx, PROGRAM, "program.mlir")
    text = print_module(module, debug_info=True)
    if form == "bytecode":
        data = print_module(module, bytecode=True)
    else:
        version = "1.0.0" if form == "portable-1.0.0" else stablehlo.get_current_version()
        with ctx:
            data = bytes(stablehlo.serialize_portable_artifact(ir.Module.parse(text), version))
    assert _iree_compile(data) == _iree_compile(text)


def test_collectives_compile_and_stay_collectives():
    """IREE turns every StableHLO collective into flow.collective.* (its channels): they
    compile, and fusion=iree keeps them out of kernels, as fusion=xla-gpu does."""
    from costmodel.ir import attr_number, ir

    chunks = open(f"{DATA}/iree_collectives.mlir").read().split("// -----")
    names = []
    for chunk in chunks:
        ctx = make_context()
        module = load_module(ctx, chunk, "collectives.mlir")
        annotate_module(module, DiagnosticEngine("collectives.mlir"), hardware="a100-40gb", fusion="iree")
        placement = ir.DictAttr(ir.DictAttr(module.attributes["costmodel.summary"])["iree_placement"])
        assert attr_number(placement["collective"]) == 1
        names += [op.name for op in walk_ops(module) if op.name.startswith("stablehlo.") and op.name != "stablehlo.return"]
    assert sorted(set(names) - {"stablehlo.add"}) == [
        "stablehlo.all_gather",
        "stablehlo.all_to_all",
        "stablehlo.collective_permute",
        "stablehlo.reduce_scatter",
    ]


def test_one_iree_session_answers_which_ops_are_known():
    """Reading an IREE session's `context` keeps that session alive for good (a fuzz run's
    3,000 compilations grew to 11 GB): the registered ops are asked of one session kept
    for the process, not of each compilation's."""
    module = load_module(make_context(), PROGRAM, "program.mlir")
    compile_module(module, compile_to="input")
    kept = list(iree_compiler._REGISTRY)
    assert len(kept) == 2
    for _ in range(3):
        compile_module(module, compile_to="input")
    assert len(iree_compiler._REGISTRY) == 2 and all(a is b for a, b in zip(iree_compiler._REGISTRY, kept))
