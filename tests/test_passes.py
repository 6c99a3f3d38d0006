"""Pass options (passes/__init__.py, installed as costmodel.passes): typed values are
validated (finite numbers, ranges, choices), misspelt keys get a suggestion, and
annotate-cost warns before re-costing a module whose collectives were timed elsewhere."""

from __future__ import annotations

import pytest

from costmodel.ir import DiagnosticEngine, InputError, load_module, make_context
from costmodel.passes import (
    PassInfo,
    PassOption,
    PassSession,
    closest_option,
    get_pass,
    parse_options,
    warn_recosting,
)


def _noop(module, options, session):
    pass


# A pass of every option type, not registered (parse_options only needs the PassInfo).
TOY = PassInfo(
    argument="toy-pass",
    summary="test pass",
    options=(
        PassOption("rate", float, 1.0, "a rate", minimum=0.0),
        PassOption("fraction", float, 0.5, "a fraction", minimum=0.0, maximum=1.0),
        PassOption("scale", float, 1.0, "any finite number"),
        PassOption("count", int, 1, "a count", minimum=1),
        PassOption("offset", int, 0, "any integer"),
        PassOption("mode", str, "fast", "a mode", choices=("fast", "exact")),
        PassOption("label", str, "", "free text"),
    ),
    run=_noop,
)


@pytest.mark.parametrize("raw", ["inf", "-inf", "Infinity", "nan", "NaN", "1e400", "-1e400"])
def test_float_options_must_be_finite(raw):
    with pytest.raises(InputError) as err:
        parse_options(TOY, f"scale={raw}")
    assert str(err.value) == f"pass 'toy-pass': option 'scale' expects a finite number, got '{raw}'"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("rate=-0.5", "pass 'toy-pass': option 'rate' expects a number >= 0, got '-0.5'"),
        ("fraction=1.5", "pass 'toy-pass': option 'fraction' expects a number from 0 to 1, got '1.5'"),
        ("count=0", "pass 'toy-pass': option 'count' expects an integer >= 1, got '0'"),
        ("count=2.5", "pass 'toy-pass': option 'count' expects an integer, got '2.5'"),
        ("offset=" + "9" * 30, "pass 'toy-pass': option 'offset' expects an integer that fits in 64 bits, got '" + "9" * 30 + "'"),
        ("rate=fast", "pass 'toy-pass': option 'rate' expects a number, got 'fast'"),
        ("mode=slow", "pass 'toy-pass': option 'mode' expects one of fast, exact, got 'slow'"),
    ],
)
def test_out_of_range_values_name_pass_and_option(text, expected):
    with pytest.raises(InputError) as err:
        parse_options(TOY, text)
    assert str(err.value) == expected


def test_valid_values_are_converted():
    opts = parse_options(TOY, "rate=0 fraction=1 scale=-3e5 count=7 offset=-9223372036854775808 mode=exact label=inf")
    assert opts["rate"] == 0.0 and opts["fraction"] == 1.0 and opts["scale"] == -3e5
    assert opts["count"] == 7 and opts["offset"] == -(1 << 63)
    assert opts["mode"] == "exact"
    assert opts["label"] == "inf"  # a str option is text, not a number


def test_describe_shows_choices_and_ranges():
    text = TOY.describe()
    assert "mode=<str>  a mode [fast|exact] (default: fast)" in text
    assert "fraction=<float>  a fraction [0 <= fraction <= 1]" in text
    assert "count=<int>  a count [1 <= count]" in text


# -- backend (pass-through) options of annotate-cost ---------------------------------


@pytest.mark.parametrize("raw", ["inf", "nan", "1e400", "-Infinity"])
def test_pass_through_numbers_must_be_finite(raw):
    with pytest.raises(InputError) as err:
        parse_options(get_pass("annotate-cost"), f"overhead_ns={raw}")
    assert str(err.value) == f"pass 'annotate-cost': option 'overhead_ns' expects a finite number, got '{raw}'"


@pytest.mark.parametrize("raw", ["-1", "-1e-9", "abc"])
def test_pass_through_quantities_are_numbers_at_least_zero(raw):
    with pytest.raises(InputError) as err:
        parse_options(get_pass("annotate-cost"), f"overhead_ns={raw}")
    assert str(err.value) == f"pass 'annotate-cost': option 'overhead_ns' expects a number >= 0, got '{raw}'"


def test_pass_through_values_are_kept_as_text():
    opts = parse_options(get_pass("annotate-cost"), "overhead_ns=250 flavour=mild")
    assert opts["extra"] == {"overhead_ns": "250", "flavour": "mild"}


# -- misspelt option names -------------------------------------------------------------


def test_typo_of_annotate_cost_option_suggests_it():
    with pytest.raises(InputError) as err:
        parse_options(get_pass("annotate-cost"), "hardwre=a100-40gb")
    assert str(err.value) == (
        "pass 'annotate-cost' has no option 'hardwre'; did you mean 'hardware'? (options: backend, hardware, fusion, branch, unknown-trip-count, inline)"
    )


@pytest.mark.parametrize(
    "key, suggestion",
    [("algoritm", "algorithm"), ("chakra_dri", "chakra-dir"), ("simulat", "simulate"), ("sytem", "system")],
)
def test_typo_of_extract_collectives_option_suggests_it(key, suggestion):
    with pytest.raises(InputError) as err:
        parse_options(get_pass("extract-collectives"), f"{key}=x")
    msg = str(err.value)
    assert msg.startswith(f"pass 'extract-collectives' has no option '{key}'; did you mean '{suggestion}'? (options: ")
    assert "granularity" in msg


def test_unknown_option_far_from_any_gets_no_suggestion():
    with pytest.raises(InputError) as err:
        parse_options(get_pass("extract-collectives"), "zzz=1")
    assert str(err.value).startswith("pass 'extract-collectives' has no option 'zzz' (options: system, ")
    assert closest_option("zzz", ["system", "algorithm"]) is None


# -- annotate-cost after extract-collectives -------------------------------------------

COLLECTED = """\
module attributes {costmodel.summary = {hardware = "h100-sxm", system = "dgx-h100", system_hardware = "h100-sxm", total_time_ns = 1.0 : f64}} {
  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    return %a : tensor<4xf32>
  }
}
"""


def _warnings(text: str, hardware: str) -> list[str]:
    module = load_module(make_context(), text, "m.mlir")
    session = PassSession(diagnostics=DiagnosticEngine("m.mlir"))
    warn_recosting(module, hardware, session)
    return [d.message for d in session.diagnostics.diagnostics if d.severity == "warning"]


def test_recosting_for_other_hardware_warns():
    (msg,) = _warnings(COLLECTED, "a100-40gb")
    assert "costing for hardware 'a100-40gb'" in msg
    assert "timed for system 'dgx-h100' ('h100-sxm' devices)" in msg
    assert "run --annotate-cost before --extract-collectives" in msg


def test_recosting_for_the_systems_hardware_is_quiet():
    assert _warnings(COLLECTED, "h100-sxm") == []


def test_costing_a_fresh_module_is_quiet():
    assert _warnings("func.func @f() {\n  return\n}\n", "a100-40gb") == []


def test_annotate_cost_warns_on_a_sharded_program_not_partitioned():
    """Costing the global program of a sharded export on one device is what was asked for,
    rarely what is meant: a warning says so (and how to get the per-device program); after
    propagate-shardings, or on a replicated (pmap) program, there is none."""
    import os

    from costmodel.ir import DiagnosticEngine, load_module, make_context
    from costmodel.passes import PassSession, get_pass, parse_options

    path = os.path.join(os.path.dirname(__file__), "data", "sharded", "tp_mlp.mlir")
    text = open(path).read()
    ctx = make_context()

    def warnings_of(passes):
        module = load_module(ctx, text, path)
        session = PassSession(DiagnosticEngine(path))
        with ctx:
            for name in passes:
                info = get_pass(name)
                info.run(module, parse_options(info, ""), session)
        return [d.message for d in session.diagnostics.diagnostics if "sharded but not partitioned" in d.message]

    (warned,) = warnings_of(["annotate-cost"])
    assert warned.startswith("annotate-cost: the module is sharded but not partitioned (%arg1 of @main")
    assert "run --propagate-shardings first" in warned
    assert warnings_of(["propagate-shardings", "annotate-cost"]) == []


def test_an_option_given_twice_is_an_error():
    """`--annotate-cost='hardware=h100-sxm hardware=a100-40gb'` silently took the last one;
    as mlir-opt, an option may occur once (also spelled with an underscore)."""
    info = get_pass("annotate-cost")
    with pytest.raises(InputError, match="pass 'annotate-cost': option 'hardware' given more than once"):
        parse_options(info, "hardware=h100-sxm hardware=a100-40gb")
    with pytest.raises(InputError, match="option 'unknown-trip-count' given more than once"):
        parse_options(info, "unknown-trip-count=3 unknown_trip_count=4")
