import json

import pytest

from costmodel.hardware import SpecError, list_hardware, load_hardware, parse_hardware

PRESETS = ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x",
           "tpu-v3", "tpu-v4", "tpu-v5e", "tpu-v5p", "cpu"]


def _raw(name):
    from importlib import resources
    return json.loads(resources.files("costmodel").joinpath("data", "hardware", name + ".json").read_text())


def test_all_presets_listed_and_load():
    assert sorted(PRESETS) == list_hardware()
    for name in PRESETS:
        spec = load_hardware(name)
        assert spec.name == name


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_value_has_a_source(name):
    raw = _raw(name)

    def walk(key, v):
        if isinstance(v, dict) and "value" in v:
            assert v["source"].strip(), key
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(f"{key}.{k}", x)
        elif isinstance(v, (int, float)):
            raise AssertionError(f"{name}: {key} has no source")

    for k, v in raw.items():
        if k not in ("name", "description"):
            walk(k, v)


def test_datasheet_peaks():
    # ../shared/refs/README.md: dense bf16 TFLOP/s and HBM GB/s
    expect = {"a100-40gb": (312, 1555), "a100-80gb": (312, 2039), "h100-sxm": (989, 3350),
              "h200": (989, 4800), "b200": (2250, 8000), "mi300x": (1307.4, 5300),
              "tpu-v3": (123, 900), "tpu-v4": (275, 1200), "tpu-v5e": (197, 819), "tpu-v5p": (459, 2765)}
    for name, (bf16, bw) in expect.items():
        spec = load_hardware(name)
        assert spec.peak_TFLOPS("matrix", "bf16") == bf16, name
        assert spec.memory_bandwidth_GBps == bw, name


def test_peak_fallbacks():
    spec = load_hardware("a100-40gb")
    assert spec.peak_TFLOPS("matrix", "f8E4M3FN") == 312  # f8 -> bf16
    assert spec.peak_TFLOPS("vector", "i32") == 19.5  # i32 -> f32
    assert spec.peak_TFLOPS("matrix", "complex<f32>") == 156


def _h100():
    return _raw("h100-sxm")


def test_wrong_unit_names_key_and_hints():
    d = _h100()
    d["memory_bandwidth_TBps"] = d.pop("memory_bandwidth_GBps")
    with pytest.raises(SpecError, match=r"unknown key 'memory_bandwidth_TBps'.*'memory_bandwidth_GBps'"):
        parse_hardware(d, "my.json")


def test_missing_key():
    d = _h100()
    del d["memory_capacity_GiB"]
    with pytest.raises(SpecError, match="missing key 'memory_capacity_GiB'"):
        parse_hardware(d, "my.json")


def test_unknown_dtype_and_nonpositive():
    d = _h100()
    d["matrix_peak_TFLOPS"]["bf17"] = 3
    with pytest.raises(SpecError, match="unknown key 'matrix_peak_TFLOPS.bf17'"):
        parse_hardware(d, "my.json")
    d = _h100()
    d["vector_peak_TFLOPS"]["f32"] = {"value": 0, "source": "x"}
    with pytest.raises(SpecError, match="'vector_peak_TFLOPS.f32' must be positive"):
        parse_hardware(d, "my.json")
    d = _h100()
    d["memory_bandwidth_GBps"] = "fast"
    with pytest.raises(SpecError, match="'memory_bandwidth_GBps' must be a number"):
        parse_hardware(d, "my.json")


def test_user_file(tmp_path):
    p = tmp_path / "mine.json"
    d = _h100()
    d["name"] = "mine"
    p.write_text(json.dumps(d))
    assert load_hardware(str(p)).name == "mine"
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SpecError, match="invalid JSON"):
        load_hardware(str(bad))
    with pytest.raises(SpecError, match="cannot read"):
        load_hardware(str(tmp_path / "none.json"))


# -- hostile numbers: finite, positive, plausible; the message names file, key and value


@pytest.mark.parametrize(
    "key, raw, expected",
    [
        ("memory_bandwidth_GBps", float("inf"), "'memory_bandwidth_GBps' must be a finite number, got Infinity"),
        ("memory_bandwidth_GBps", float("nan"), "'memory_bandwidth_GBps' must be a finite number, got NaN"),
        ("memory_bandwidth_GBps", 1e-300,
         "'memory_bandwidth_GBps' = 1e-300 is outside the plausible range 0.001 .. 1e+07 GB/s (check the unit)"),
        ("memory_bandwidth_GBps", 3.35e12,
         "'memory_bandwidth_GBps' = 3350000000000.0 is outside the plausible range 0.001 .. 1e+07 GB/s"),
        ("memory_bandwidth_GBps", 10**400, "'memory_bandwidth_GBps' = 10000000000000000000... (401 characters) is outside"),
        ("memory_capacity_GiB", 1e9, "'memory_capacity_GiB' = 1000000000.0 is outside the plausible range 1e-06 .. 1e+07 GiB"),
        ("matrix_peak_TFLOPS.bf16", 1e-300,
         "'matrix_peak_TFLOPS.bf16' = 1e-300 is outside the plausible range 1e-06 .. 1e+06 TFLOP/s"),
        ("vector_peak_TFLOPS.f32", {"value": float("inf"), "source": "x"},
         "'vector_peak_TFLOPS.f32' must be a finite number, got Infinity"),
        ("vector_peak_TFLOPS.f32", float("-inf"), "'vector_peak_TFLOPS.f32' must be a finite number, got -Infinity"),
    ],
)
def test_non_finite_and_implausible_numbers(key, raw, expected):
    d = _h100()
    table, _, dt = key.partition(".")
    if dt:
        d[table][dt] = raw
    else:
        d[key] = raw
    with pytest.raises(SpecError) as err:
        parse_hardware(d, "my.json")
    assert str(err.value).startswith(f"my.json: {expected}"), str(err.value)


def test_json_infinity_and_nan_in_a_user_file(tmp_path):
    """Python's json reads Infinity/NaN: the spec must still refuse them (they zeroed total_time_ns)."""
    for word in ("Infinity", "NaN", "1e400"):
        text = json.dumps(_h100()).replace('"value": 3350,', f'"value": {word},', 1)
        assert word in text
        p = tmp_path / "hw.json"
        p.write_text(text)
        with pytest.raises(SpecError) as err:
            load_hardware(str(p))
        shown = "Infinity" if word == "1e400" else word
        assert str(err.value) == f"{p}: 'memory_bandwidth_GBps' must be a finite number, got {shown}"


@pytest.mark.parametrize(
    "content, expected",
    [
        (b'{"name": "\xff"}', "invalid JSON: not UTF-8 text"),
        (b"[" * 100000 + b"]" * 100000, "invalid JSON: nested more than 2,000 levels deep"),
        (b"hello\n", "1:1: invalid JSON: Expecting value"),
    ],
    ids=["not-utf8", "deep", "text"],
)
def test_unreadable_json_is_one_line(tmp_path, content, expected):
    p = tmp_path / "hw.json"
    p.write_bytes(content)
    with pytest.raises(SpecError) as err:
        load_hardware(str(p))
    assert str(err.value).startswith(str(p)) and expected in str(err.value)


def test_huge_file_is_not_read_whole(tmp_path, monkeypatch):
    import costmodel.hardware as hardware

    monkeypatch.setattr(hardware, "MAX_SPEC_BYTES", 64)
    p = tmp_path / "big.json"
    p.write_text(json.dumps(_h100()))
    with pytest.raises(SpecError, match="big.json: larger than 64 bytes: not a JSON spec file"):
        load_hardware(str(p))


def test_existing_non_json_file_says_why_it_is_refused(tmp_path, monkeypatch):
    """`hardware=notes.txt` (no preset of that name, but the file exists): read it and say
    what is wrong with it, instead of 'unknown hardware'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not json\n")
    with pytest.raises(SpecError) as err:
        load_hardware("notes.txt")
    assert str(err.value) == (
        "notes.txt:1:1: invalid JSON: Expecting value "
        "(read as a hardware spec file: 'notes.txt' is not a hardware preset)"
    )
    d = _h100()
    d["name"] = "from-txt"
    (tmp_path / "spec.txt").write_text(json.dumps(d))
    assert load_hardware("spec.txt").name == "from-txt"
    with pytest.raises(SpecError, match="unknown hardware 'missing.txt'"):
        load_hardware("missing.txt")


@pytest.mark.parametrize(
    "key", ["matrix_efficiency", "memory_efficiency", "compute_memory_overlap", "gemm_narrow_tile_efficiency"]
)
def test_calibration_fractions_above_one_are_rejected(key):
    d = _h100()
    d["calibration"][key] = {"value": 1.5, "source": "a typo"}
    with pytest.raises(SpecError, match=rf"my.json: 'calibration.{key}' is a fraction \(<= 1\), got 1.5"):
        parse_hardware(d, "my.json")
