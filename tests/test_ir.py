"""costmodel.ir: reading every input form, printing, diagnostics, atomic writes, and
the import-time budget of the command-line path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from costmodel import ir as cir
from costmodel.ir import InputError, ir

JAX_EXPORT = os.path.join(os.path.dirname(__file__), "data", "jax_export")

MODULE = """\
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def read(name: str) -> bytes:
    with open(os.path.join(JAX_EXPORT, name), "rb") as fh:
        return fh.read()


def names(op) -> list[str]:
    return [o.operation.name for o in op.regions[0].blocks[0].operations]


@pytest.fixture(scope="module")
def ctx():
    return cir.make_context()


def test_text_single_op_is_wrapped_in_a_module(ctx):
    op = cir.load_module(ctx, MODULE, "m.mlir")
    assert op.name == "builtin.module" and names(op) == ["func.func"]


def test_text_several_top_level_ops_keep_line_numbers(ctx):
    text = MODULE + MODULE.replace("@main", "@two").replace("%a, %a", "%a")
    op = cir.load_module(ctx, text, "m.mlir")
    assert names(op) == ["func.func", "func.func"]
    second = op.regions[0].blocks[0].operations[1]
    assert cir.location_parts(second.operation.location) == ("m.mlir", 5, 1)


def test_parse_error_raises_mlir_error_with_location(ctx):
    with pytest.raises(ir.MLIRError) as info:
        cir.load_module(ctx, MODULE.replace("%0 = stablehlo.exponential %a", "%0 = stablehlo.exponential %b"), "m.mlir")
    diags = cir.DiagnosticEngine("m.mlir")
    diags.add_mlir(info.value.error_diagnostics)
    assert diags.diagnostics[0].render() == "m.mlir:2:30: error: use of undeclared SSA value name"


def test_empty_input_is_an_empty_module(ctx):
    op = cir.load_module(ctx, b"", "e.mlir")
    assert op.name == "builtin.module" and names(op) == []


@pytest.mark.parametrize("name", ["artifact.mlirbc", "exported.bin", "vhlo.mlir"])
def test_jax_export_forms_become_stablehlo(ctx, name):
    op = cir.load_module(ctx, read(name), name)
    text = cir.print_module(op).decode()
    assert "vhlo." not in text
    assert "stablehlo.dot_general" in text and "stablehlo.tanh" in text


def test_embedded_artifact_is_found_in_the_flatbuffer():
    assert cir._embedded_artifact(read("exported.bin")) == read("artifact.mlirbc")
    assert cir._embedded_artifact(b"no magic here") is None


def test_bytecode_round_trip(ctx):
    op = cir.load_module(ctx, MODULE, "m.mlir")
    data = cir.print_module(op, bytecode=True)
    assert data.startswith(cir.MLIR_BYTECODE_MAGIC)
    back = cir.load_module(ctx, data, "m.mlirbc")
    assert cir.print_module(back) == cir.print_module(op)


def test_bad_bytes_are_one_line_input_errors(ctx, capfd):
    with pytest.raises(InputError, match=r"x.bin: not MLIR text \(invalid UTF-8 at byte 0\) nor MLIR bytecode"):
        cir.load_module(ctx, b"\xff\x00garbage", "x.bin")
    with pytest.raises(InputError, match="cannot read MLIR bytecode"):
        cir.load_module(ctx, read("artifact.mlirbc")[:100], "t.mlirbc")
    # the deserializer's own complaints on fd 2 were captured, not leaked
    assert capfd.readouterr().err == ""


def test_print_options(ctx):
    op = cir.load_module(ctx, MODULE, "m.mlir")
    assert b'loc("m.mlir":2:8)' in cir.print_module(op, debug_info=True)
    assert b'"stablehlo.exponential"' in cir.print_module(op, generic=True)
    assert cir.print_module(op).endswith(b"\n")


def test_print_elides_large_constants(ctx):
    text = "func.func @c() -> tensor<64xf32> {\n  %0 = stablehlo.constant dense<[" + ", ".join(
        f"{i}.0" for i in range(64)
    ) + "]> : tensor<64xf32>\n  return %0 : tensor<64xf32>\n}\n"
    op = cir.load_module(ctx, text, "c.mlir")
    assert b"63.0" in cir.print_module(op) or b"6.300000e+01" in cir.print_module(op)
    assert b"6.300000e+01" not in cir.print_module(op, large_elements_limit=16)


def test_captured_stderr_catches_native_writes():
    with cir.captured_stderr() as cap:
        os.write(2, b"from native code\n")
    assert cap.text == "from native code\n"


def test_write_atomically(tmp_path):
    target = tmp_path / "out.mlir"
    target.write_text("old")
    cir.write_atomically(str(target), b"new")
    assert target.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["out.mlir"]
    with pytest.raises(OSError):
        cir.write_atomically(str(tmp_path / "missing" / "out.mlir"), b"x")
    assert os.listdir(tmp_path) == ["out.mlir"]


def test_diagnostic_engine_locations(ctx):
    op = cir.load_module(ctx, MODULE, "m.mlir")
    inner = op.regions[0].blocks[0].operations[0].operation.regions[0].blocks[0].operations[0]
    diags = cir.DiagnosticEngine("m.mlir")
    d = diags.warning(inner.operation.location, "look")
    assert d.render() == "m.mlir:2:8: warning: look"
    with ctx:
        named = ir.Location.name("x", childLoc=inner.operation.location)
        assert cir.format_location(named) == "m.mlir:2:8"
        assert cir.format_location(ir.Location.unknown()) == "<unknown>"
    assert diags.error(None, "no place").render() == "error: no place"
    assert diags.has_errors


def test_costmodel_ir_does_not_import_numpy():
    """The CLI path stays lean: jaxlib's optional numpy import is skipped (~50 ms),
    and the ElementsAttr builders it would register still work (numpy on demand)."""
    code = (
        "import sys, costmodel.ir as c\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
        "from costmodel.ir import ir\n"
        "ctx = c.make_context()\n"
        "with ctx, ir.Location.unknown():\n"
        "    a = ir.AttrBuilder.get('I64ElementsAttr')([[0, 1]], context=ctx)\n"
        "print(a)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "dense<[[0, 1]]> : tensor<1x2xi64>"


@pytest.mark.parametrize("value", [10215264.0, 1e6, 123456789.0, 0.25, 3.0, 857579.6757554583])
def test_f64_attr_prints_decimal_and_keeps_value(value):
    from costmodel.ir import f64_attr, ir, make_context

    with make_context():
        attr = f64_attr(value)
        text = str(attr)
        assert not text.startswith("0x"), text
        assert abs(ir.FloatAttr(attr).value - value) <= abs(value) * 1e-15


def test_inline_calls_inlines_nested_calls_and_stops_on_recursion(ctx):
    text = """
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @f(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @f(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @g(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.exponential %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
func.func private @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.negate %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func public @rec(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @rec(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""
    module = cir.load_module(ctx, text, "<inline>")
    with ctx:
        assert cir.inline_calls(module, max_rounds=3) > 3
        main = [op for op in cir.walk_ops(module) if op.name == "func.func"][0]
        names = [op.name for op in cir.walk_ops(main)]
        assert "func.call" not in names
        assert names.count("stablehlo.negate") == 2 and names.count("stablehlo.exponential") == 2
        assert module.verify()


def test_nested_ops_is_walk_ops_as_a_list(ctx):
    """MLIR's own walk (nested_ops) visits what walk_ops yields, in the same pre-order,
    without the op itself; on a module with regions inside regions."""
    path = os.path.join(os.path.dirname(__file__), "data", "collectives", "loop_1e9_all_reduce.mlir")
    module = cir.load_module(ctx, open(path).read(), "loop")
    ops = list(cir.walk_ops(module))
    assert cir.nested_ops(module) == ops
    assert len(ops) > 10 and any(op.name == "stablehlo.while" for op in ops)
    loop = next(op for op in ops if op.name == "stablehlo.while")
    assert cir.nested_ops(loop) == list(cir.walk_ops(loop))
    leaf = next(op for op in ops if not len(op.regions))
    assert cir.nested_ops(leaf) == []


def test_locations_without_a_file_position_are_never_file_0_0(ctx):
    """Serialized exports carry unknown or name-only locations: the diagnostic names the
    file alone (no made-up `:0:0`) plus the location's name (JAX's op path) when it has one."""
    diags = cir.DiagnosticEngine("model.mlirbc")
    with ctx:
        unknown = ir.Location.unknown()
        named = ir.Location.name("jit(f)/jit(main)/dot_general", childLoc=unknown)
        in_call = ir.Location.callsite(named, [ir.Location.file("caller.py", 3, 1)])
        zero = ir.Location.file("m.mlir", 0, 0)
        assert diags.warning(unknown, "look").render() == "model.mlirbc: warning: look"
        assert diags.warning(named, "look").render() == 'model.mlirbc: warning: look (at "jit(f)/jit(main)/dot_general")'
        assert diags.warning(zero, "look").render() == "model.mlirbc: warning: look"
        assert cir.format_location(named, "") == "jit(f)/jit(main)/dot_general"
        assert cir.format_location(in_call, "") == "jit(f)/jit(main)/dot_general"
        assert cir.format_location(zero, "?") == "?"


def test_stdin_positions_of_an_earlier_run_are_not_passed_off_as_this_input(ctx):
    with ctx:
        old = ir.Location.file("<stdin>", 11, 20)
    # Read from a file: `<stdin>:11:20` belongs to the stream an earlier run read.
    d = cir.DiagnosticEngine("saved.mlirbc").warning(old, "look")
    assert d.render() == 'saved.mlirbc: warning: look (at "<stdin>:11:20 of the input it was made from")'
    # Text read from stdin now: the position is this input's own.
    assert cir.DiagnosticEngine("<stdin>").warning(old, "look").render() == "<stdin>:11:20: warning: look"
    # Bytecode read from stdin: its positions are an earlier run's.
    diags = cir.DiagnosticEngine("<stdin>")
    diags.input_is_bytecode = True
    assert diags.warning(old, "look").render() == '<stdin>: warning: look (at "<stdin>:11:20 of the input it was made from")'
