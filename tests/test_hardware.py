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
