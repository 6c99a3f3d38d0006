import json
from importlib.resources import files

import pytest

from costmodel.hardware import SpecError
from costmodel.systems import (
    GIB_PER_GB,
    list_systems,
    load_system,
    parse_system,
    to_network_yml,
    to_remote_memory_json,
    to_system_json,
)

PRESETS = ["a100-40gb-x4", "a100-80gb-x4", "h100-sxm-x4", "h200-x4", "b200-x4", "dgx-a100", "dgx-h100",
           "dgx-b200", "dgx-h100-x4nodes", "mi300x-x8", "tpu-v3-8", "tpu-v4-32", "tpu-v5p-64"]


def test_presets_exactly():
    assert list_systems() == sorted(PRESETS)
    sizes = {"dgx-h100": 8, "dgx-h100-x4nodes": 32, "tpu-v4-32": 16, "tpu-v5p-64": 32, "h200-x4": 4}
    for name in PRESETS:
        s = load_system(name)
        assert s.hardware_spec.name == s.hardware
        if name in sizes:
            assert s.num_npus == sizes[name]
    assert len(load_system("dgx-h100-x4nodes").dims) == 2
    assert load_system("dgx-h100-x4nodes").dims[1].bandwidth_GBps == 400 / 8
    assert all(d.topology == "Ring" for d in load_system("tpu-v5p-64").dims)


@pytest.mark.parametrize("name", PRESETS)
def test_every_network_value_has_a_source(name):
    s = load_system(name)
    for i in range(len(s.dims)):
        assert s.sources[f"network[{i}].bandwidth_GBps"]
        assert s.sources[f"network[{i}].latency_ns"]


def test_coords_dim0_fastest():
    s = load_system("dgx-h100-x4nodes")
    assert s.coords(0) == (0, 0) and s.coords(9) == (1, 1) and s.coords(31) == (7, 3)
    assert all(s.rank_of(s.coords(r)) == r for r in range(32))


def _base():
    return {"name": "t", "description": "t", "hardware": "h100-sxm",
            "network": [{"topology": "Ring", "npus_count": 4, "bandwidth_GBps": 100, "latency_ns": 500}]}


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d.update(extra=1), "unknown key 'extra'"),
    (lambda d: d["network"][0].update(bandwidth_GiBps=d["network"][0].pop("bandwidth_GBps")),
     r"unknown key 'network\[0\].bandwidth_GiBps'.*bandwidth_GBps"),
    (lambda d: d["network"][0].pop("latency_ns"), r"missing key 'network\[0\].latency_ns'"),
    (lambda d: d["network"][0].update(topology="Torus"), "topology' must be one of Ring, FullyConnected, Switch"),
    (lambda d: d["network"][0].update(npus_count=1), "npus_count' must be >= 2"),
    (lambda d: d["network"][0].update(bandwidth_GBps=0), "bandwidth_GBps' must be positive"),
    (lambda d: d.update(collectives={"all_reduce": ["ring", "ring"]}), "one implementation per network dimension"),
    (lambda d: d.update(collectives={"all_reduce": ["tree"]}), "must be one of ring"),
    (lambda d: d.update(collectives={"broadcast": ["ring"]}), "unknown key 'collectives.broadcast'"),
    (lambda d: d.update(astra_sim={"endpoint_delay_us": 1}), "unknown key 'astra_sim.endpoint_delay_us'.*endpoint_delay_ns"),
    (lambda d: d.update(astra_sim={"scheduling_policy": "RANDOM"}), "scheduling_policy' must be one of LIFO, FIFO"),
    (lambda d: d.update(hardware="h900"), "unknown hardware 'h900'"),
])
def test_validation(mutate, msg):
    d = _base()
    mutate(d)
    with pytest.raises(SpecError, match=msg):
        parse_system(d, "my.json")


def test_defaults_and_user_file(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(_base()))
    s = load_system(str(p))
    assert s.collectives["all_reduce"] == ("ring",)
    a = s.astra_sim
    assert (a.endpoint_delay_ns, a.preferred_dataset_splits, a.active_chunks_per_dimension) == (10, 4, 1)
    assert a.local_mem_bw_GBps == 3350 and a.peak_perf_TFLOPS == 989


def test_astra_sim_files():
    s = load_system("dgx-h100-x4nodes")
    yml = to_network_yml(s)
    assert "topology: [ Switch, Switch ]" in yml
    assert "npus_count: [ 8, 4 ]" in yml
    # calibrated: the NVLink dimension's achievable bandwidth (x 0.82); InfiniBand at its datasheet figure
    assert f"bandwidth: [ {round(450 * 0.82 * GIB_PER_GB, 9)!r}, {round(50 * GIB_PER_GB, 9)!r} ]" in yml
    assert "latency: [ 936.25, 1000.0 ]" in yml
    assert "# calibrated: bandwidth also x bus_efficiency [ 0.82, - ]" in yml
    assert "collective_latency_ns = 5000 once per communication op" in yml
    assert "protocols LL (+6600 ns, bandwidth x 0.5), LL128 (+14000 ns, bandwidth x 0.92), Simple (+8400 ns" in yml
    assert "dimension 1: step_latency_ns LL 2700, LL128 4000, Simple 14000; at most LL 20.4 GB/s" in yml
    # without the calibration blocks, exactly the datasheet figures and no calibration comment
    d = s.to_json()
    d.pop("calibration")
    for dim in d["network"]:
        dim.pop("calibration")
    plain = to_network_yml(parse_system(d, "plain.json"))
    assert f"bandwidth: [ {round(450 * GIB_PER_GB, 9)!r}, {round(50 * GIB_PER_GB, 9)!r} ]" in plain
    assert "calibrat" not in plain
    sj = to_system_json(s)
    for key in ("scheduling-policy", "collective-optimization", "endpoint-delay", "active-chunks-per-dimension",
                "preferred-dataset-splits", "local-mem-bw", "peak-perf", "roofline-enabled",
                "all-reduce-implementation", "all-gather-implementation", "reduce-scatter-implementation",
                "all-to-all-implementation"):
        assert key in sj
    assert sj["all-reduce-implementation"] == ["ring", "ring"]
    rm = to_remote_memory_json(s)
    assert rm["memory-type"] == "NO_MEMORY_EXPANSION" and rm["num-nodes"] * rm["num-npus-per-node"] == 32


# -- hostile numbers: finite, plausible, bounded machine size (message: file, key, value)


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["network"][0].update(bandwidth_GBps=float("inf")),
     "my.json: 'network[0].bandwidth_GBps' must be a finite number, got Infinity"),
    (lambda d: d["network"][0].update(bandwidth_GBps=float("nan")),
     "my.json: 'network[0].bandwidth_GBps' must be a finite number, got NaN"),
    (lambda d: d["network"][0].update(bandwidth_GBps=1e-300),
     "my.json: 'network[0].bandwidth_GBps' = 1e-300 is outside the plausible range 0.001 .. 1e+07 GB/s"),
    (lambda d: d["network"][0].update(latency_ns={"value": float("nan"), "source": "x"}),
     "my.json: 'network[0].latency_ns' must be a finite number, got NaN"),
    (lambda d: d["network"][0].update(latency_ns=-1),
     "my.json: 'network[0].latency_ns' must be >= 0, got -1"),
    (lambda d: d["network"][0].update(latency_ns=1e12),
     "my.json: 'network[0].latency_ns' = 1000000000000.0 is outside the plausible range 0 .. 1e+10 ns"),
    (lambda d: d["network"][0].update(npus_count=float("inf")),
     "my.json: 'network[0].npus_count' must be a finite number, got Infinity"),
    (lambda d: d["network"][0].update(npus_count=10**400),
     "my.json: 'network[0].npus_count' must be a finite number, got 10000000000000000000... (401 characters)"),
    (lambda d: d["network"][0].update(npus_count=2_000_000),
     "my.json: 'network[0].npus_count' must be <= 1,048,576, got 2,000,000"),
    (lambda d: d["network"].extend([dict(d["network"][0], npus_count=1024), dict(d["network"][0], npus_count=1024)]),
     "my.json: the network has 4 x 1024 x 1024 = 4,194,304 NPUs; at most 1,048,576 are supported"),
    (lambda d: d.update(astra_sim={"endpoint_delay_ns": float("inf")}),
     "my.json: 'astra_sim.endpoint_delay_ns' must be a finite number, got Infinity"),
    (lambda d: d.update(astra_sim={"local_mem_bw_GBps": 1e-300}),
     "my.json: 'astra_sim.local_mem_bw_GBps' = 1e-300 is outside the plausible range 0.001 .. 1e+07 GB/s"),
    (lambda d: d.update(astra_sim={"peak_perf_TFLOPS": float("nan")}),
     "my.json: 'astra_sim.peak_perf_TFLOPS' must be a finite number, got NaN"),
    (lambda d: d.update(astra_sim={"preferred_dataset_splits": 10**9}),
     "my.json: 'astra_sim.preferred_dataset_splits' must be <= 1,024, got 1,000,000,000"),
    (lambda d: d.update(astra_sim={"active_chunks_per_dimension": 0}),
     "my.json: 'astra_sim.active_chunks_per_dimension' must be positive, got 0"),
])
def test_non_finite_and_implausible_numbers(mutate, expected):
    d = _base()
    mutate(d)
    with pytest.raises(SpecError) as err:
        parse_system(d, "my.json")
    assert str(err.value).startswith(expected), str(err.value)


def test_zero_latency_and_largest_machine_are_accepted():
    d = _base()
    d["network"] = [dict(d["network"][0], npus_count=1024, latency_ns=0),
                    dict(d["network"][0], npus_count=1024, latency_ns={"value": 0, "source": "ideal"})]
    s = parse_system(d, "my.json")
    assert s.num_npus == 1 << 20 and s.dims[0].latency_ns == 0 and s.dims[1].latency_ns == 0


def test_json_nan_in_a_system_file(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(_base()).replace('"latency_ns": 500', '"latency_ns": NaN'))
    with pytest.raises(SpecError) as err:
        load_system(str(p))
    assert str(err.value) == f"{p}: 'network[0].latency_ns' must be a finite number, got NaN"


# -- calibration: achievable bus bandwidth and per-op latency (docs/communication-model.md)

GPU_PRESETS = ["a100-40gb-x4", "a100-80gb-x4", "dgx-a100", "h100-sxm-x4", "dgx-h100", "dgx-h100-x4nodes",
               "h200-x4", "b200-x4", "dgx-b200", "mi300x-x8"]
EFFICIENCY = {"a100-40gb-x4": 0.78, "a100-80gb-x4": 0.78, "dgx-a100": 0.78, "h100-sxm-x4": 0.82, "dgx-h100": 0.82,
              "dgx-h100-x4nodes": 0.82, "h200-x4": 0.81, "b200-x4": 0.75, "dgx-b200": 0.76, "mi300x-x8": 0.70}


@pytest.mark.parametrize("name", PRESETS)
def test_calibration_of_the_presets(name):
    s = load_system(name)
    if name.startswith("tpu"):  # no measured ICI efficiency for these TPU generations: uncalibrated
        assert s.calibration is None and all(d.bus_efficiency is None for d in s.dims)
        assert "calibration" not in s.to_json()
        return
    assert s.calibration is not None
    assert s.dims[0].bus_efficiency == EFFICIENCY[name]
    # every calibration value carries its source, which quotes the measurement
    eff_key = "network[0].calibration.bus_efficiency" if name == "dgx-h100-x4nodes" else "calibration.bus_efficiency"
    assert f"{EFFICIENCY[name]:.2f} = " in s.sources[eff_key]
    assert "GB/s" in s.sources[eff_key]
    lat = s.sources["calibration.collective_latency_ns"]
    if name == "mi300x-x8":  # RCCL's constants are its own: one latency, no protocols
        assert s.collective_latency_ns == 17000 and not s.calibration.protocols
        return
    # NVIDIA: XLA's launch overhead once per op, NCCL's protocols with its own constants
    assert s.collective_latency_ns == 5000 and "kNcclKernelLaunchOverhead = 5 us" in lat
    assert [(p.name, p.base_latency_ns, p.bandwidth_factor) for p in s.calibration.protocols] == [
        ("LL", 6600, 0.5), ("LL128", 14000, 0.92), ("Simple", 8400, 1.0)]
    assert "tuning.cc" in s.sources["calibration.protocols"] and "NCCL 2.30.7" in s.sources["calibration.protocols"]
    nvlink = dict(s.dims[0].protocol_step_latency_ns)
    assert nvlink == {"LL": 600, "LL128": 1900, "Simple": 3400}
    assert all(d.step_latency_ns is None for d in s.dims)  # per protocol instead
    ll_cap = {"a100-40gb": 87.7, "a100-80gb": 87.7, "h100-sxm": 141.0, "h200": 141.0, "b200": 282.0}[s.hardware]
    assert dict(s.dims[0].protocol_max_bandwidth_GBps) == {"LL": ll_cap}
    if name == "dgx-h100-x4nodes":  # InfiniBand: NCCL's network step latencies, its multi-node LL cap
        assert dict(s.dims[1].protocol_step_latency_ns) == {"LL": 2700, "LL128": 4000, "Simple": 14000}
        assert dict(s.dims[1].protocol_max_bandwidth_GBps) == {"LL": 20.4}
    if name == "dgx-h100-x4nodes":
        assert s.dims[1].bus_efficiency is None  # InfiniBand: no measured busbw source, datasheet bandwidth


def test_calibration_round_trips_through_to_json():
    for name in GPU_PRESETS:
        s = load_system(name)
        again = parse_system(json.loads(json.dumps(s.to_json())), "again.json")
        assert again == s and again.calibration == s.calibration
        assert again.sources == s.sources


def test_system_show_prints_the_calibration_sources(capsys):
    from costmodel.cli import main

    assert main(["systems", "show", "dgx-a100"]) == 0
    data = json.loads(capsys.readouterr().out)
    cal = data["calibration"]
    assert cal["bus_efficiency"]["value"] == 0.78
    assert "234.89 GB/s" in cal["bus_efficiency"]["source"] and "ml-engineering" in cal["bus_efficiency"]["source"]
    assert cal["collective_latency_ns"]["value"] == 5000
    assert "6.6, LL128 14.0, Simple 8.4} us" in cal["protocols"]["source"]
    assert cal["protocols"]["LL"] == {"base_latency_ns": 6600, "bandwidth_factor": 0.5}
    assert main(["systems", "show", "dgx-h100-x4nodes"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "scaling-book" in data["network"][0]["calibration"]["bus_efficiency"]["source"]
    assert "bus_efficiency" not in data["calibration"]
    # InfiniBand: its datasheet bandwidth (no bus_efficiency), NCCL's network step latency
    net = data["network"][1]["calibration"]
    assert list(net) == ["protocol_step_latency_ns", "protocol_max_bandwidth_GBps"]
    assert {k: v for k, v in net["protocol_step_latency_ns"].items() if k != "source"} == {
        "LL": 2700, "LL128": 4000, "Simple": 14000}
    assert "hwLatencies[NCCL_HW_NET]" in net["protocol_step_latency_ns"]["source"]


def _calibrated(**cal):
    d = _base()
    d["calibration"] = cal
    return d


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d.update(calibration={"bus_efficiency": 78}),
     "my.json: 'calibration.bus_efficiency' is a fraction (<= 1) of the link bandwidth, got 78 (e.g. 0.78 for 78%)"),
    (lambda d: d.update(calibration={"bus_efficiency": 1.5}),
     "my.json: 'calibration.bus_efficiency' is a fraction (<= 1) of the link bandwidth, got 1.5"),
    (lambda d: d.update(calibration={"bus_efficiency": 0}),
     "my.json: 'calibration.bus_efficiency' must be positive, got 0"),
    (lambda d: d.update(calibration={"bus_efficiency": 1e-300}),
     "my.json: 'calibration.bus_efficiency' = 1e-300 is outside the plausible range 0.01 .. 1"),
    (lambda d: d.update(calibration={"bus_efficiency": float("nan")}),
     "my.json: 'calibration.bus_efficiency' must be a finite number, got NaN"),
    (lambda d: d.update(calibration={"bus_efficiency": {"value": float("inf"), "source": "x"}}),
     "my.json: 'calibration.bus_efficiency' must be a finite number, got Infinity"),
    (lambda d: d.update(calibration={"bus_efficiency": "0.8"}),
     "my.json: 'calibration.bus_efficiency' must be a number, got \"0.8\""),
    (lambda d: d.update(calibration={"bus_efficiency": {"value": 0.8, "source": ""}}),
     "my.json: 'calibration.bus_efficiency.source' must be a non-empty string"),
    (lambda d: d.update(calibration={"bus_efficiency": {"value": 0.8, "src": "x"}}),
     "my.json: unknown key 'calibration.bus_efficiency.src'"),
    (lambda d: d.update(calibration={"collective_latency_ns": -1}),
     "my.json: 'calibration.collective_latency_ns' must be >= 0, got -1"),
    (lambda d: d.update(calibration={"step_latency_ns": -600}),
     "my.json: 'calibration.step_latency_ns' must be >= 0, got -600"),
    (lambda d: d["network"][0].update(calibration={"step_latency_ns": float("nan")}),
     "my.json: 'network[0].calibration.step_latency_ns' must be a finite number, got NaN"),
    (lambda d: d.update(calibration={"collective_latency_ns": float("inf")}),
     "my.json: 'calibration.collective_latency_ns' must be a finite number, got Infinity"),
    (lambda d: d.update(calibration={"collective_latency_ns": 1e12}),
     "my.json: 'calibration.collective_latency_ns' = 1000000000000.0 is outside the plausible range 0 .. 1e+10 ns"),
    (lambda d: d.update(calibration={"collective_latency_us": 11.6}),
     "my.json: unknown key 'calibration.collective_latency_us' (did you mean 'collective_latency_ns'? "
     "the unit is part of the key: ns)"),
    (lambda d: d.update(calibration={"efficiency": 0.8}),
     "my.json: unknown key 'calibration.efficiency' (known: bus_efficiency, collective_latency_ns, "
     "protocol_max_bandwidth_GBps, protocol_step_latency_ns, protocols, step_latency_ns)"),
    (lambda d: d.update(calibration=[0.8]),
     "my.json: 'calibration' must be an object"),
    (lambda d: d["network"][0].update(calibration={"collective_latency_ns": 100}),
     "my.json: unknown key 'network[0].calibration.collective_latency_ns' (collective_latency_ns is per system: "
     "put it in the top-level 'calibration')"),
    (lambda d: d["network"][0].update(calibration={"bus_efficiency": 2}),
     "my.json: 'network[0].calibration.bus_efficiency' is a fraction (<= 1) of the link bandwidth, got 2"),
    (lambda d: d["network"][0].update(calibration={"busbw": 2}),
     "my.json: unknown key 'network[0].calibration.busbw' (known: bus_efficiency, protocol_max_bandwidth_GBps, "
     "protocol_step_latency_ns, step_latency_ns)"),
    # protocols (NCCL's LL / LL128 / Simple)
    (lambda d: d.update(calibration={"protocols": {"LL": {"base_latency_ns": 6600}}}),
     "my.json: missing key 'calibration.protocols.LL.bandwidth_factor'"),
    (lambda d: d.update(calibration={"protocols": {"LL": {"base_latency_ns": 6600, "bandwidth_factor": 2}}}),
     "my.json: 'calibration.protocols.LL.bandwidth_factor' is a fraction (0.01 .. 1) of the bandwidth, got 2"),
    (lambda d: d.update(calibration={"protocols": {"LL": {"base_latency_us": 6.6, "bandwidth_factor": 0.5}}}),
     "my.json: unknown key 'calibration.protocols.LL.base_latency_us' (did you mean 'base_latency_ns'?"),
    (lambda d: d.update(calibration={"protocols": {"source": "x"}}),
     "my.json: 'calibration.protocols' names no protocol"),
    (lambda d: d.update(calibration={"protocols": [6600]}),
     "my.json: 'calibration.protocols' must be an object of protocols"),
    (lambda d: d.update(calibration={"protocols": {"L L": {"base_latency_ns": 1, "bandwidth_factor": 1}}}),
     "my.json: 'calibration.protocols': a protocol name is letters, digits and '_', got 'L L'"),
    (lambda d: d.update(calibration={"protocol_step_latency_ns": {"LL": 600}}),
     "my.json: 'calibration.protocol_step_latency_ns' needs the protocols it names in the top-level "
     "'calibration.protocols'"),
    (lambda d: d.update(calibration={
        "protocols": {"LL": {"base_latency_ns": 6600, "bandwidth_factor": 0.5},
                      "Simple": {"base_latency_ns": 8400, "bandwidth_factor": 1}},
        "protocol_step_latency_ns": {"LL": 600}}),
     "my.json: 'calibration.protocol_step_latency_ns' lacks protocol 'Simple' (one value per protocol)"),
    (lambda d: d.update(calibration={
        "protocols": {"LL": {"base_latency_ns": 6600, "bandwidth_factor": 0.5}},
        "protocol_max_bandwidth_GBps": {"LL128": 80}}),
     "my.json: 'calibration.protocol_max_bandwidth_GBps.LL128': no such protocol in 'calibration.protocols' "
     "(protocols: LL)"),
    (lambda d: d.update(calibration={
        "protocols": {"LL": {"base_latency_ns": 6600, "bandwidth_factor": 0.5}},
        "step_latency_ns": 600, "protocol_step_latency_ns": {"LL": 600}}),
     "my.json: 'calibration' gives both step_latency_ns and protocol_step_latency_ns"),
    (lambda d: d.update(calibration={
        "protocols": {"LL": {"base_latency_ns": 6600, "bandwidth_factor": 0.5}},
        "protocol_step_latency_ns": {"LL": -1}}),
     "my.json: 'calibration.protocol_step_latency_ns.LL' must be >= 0, got -1"),
    (lambda d: d["network"][0].update(calibration={"protocols": {}}),
     "my.json: unknown key 'network[0].calibration.protocols' (protocols is per system: put it in the top-level"),
    (lambda d: d["network"][0].update(calibration=0.8),
     "my.json: 'network[0].calibration' must be an object"),
])
def test_calibration_validation(mutate, expected):
    d = _base()
    mutate(d)
    with pytest.raises(SpecError) as err:
        parse_system(d, "my.json")
    assert str(err.value).startswith(expected), str(err.value)


def test_calibration_values_accepted():
    s = parse_system(_calibrated(bus_efficiency=1, collective_latency_ns=0), "my.json")
    assert s.dims[0].bus_efficiency == 1.0 and s.collective_latency_ns == 0 and s.calibrated
    s = parse_system(_calibrated(bus_efficiency={"value": 0.01, "source": "lowest"}), "my.json")
    assert s.dims[0].bus_efficiency == 0.01 and s.sources["calibration.bus_efficiency"] == "lowest"
    # empty blocks calibrate nothing: the system is the uncalibrated one
    d = _calibrated()
    d["network"][0]["calibration"] = {}
    s = parse_system(d, "my.json")
    assert not s.calibrated and s == parse_system(_base(), "my.json") and "calibration" not in s.to_json()


def test_a_key_twice_in_a_spec_file_is_an_error(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text('{"name": "x", "name": "y", "description": "d", "hardware": "h100-sxm", "network": '
                 '[{"topology": "Switch", "npus_count": 4, "bandwidth_GBps": 100, "latency_ns": 1}]}')
    with pytest.raises(SpecError, match=r"dup.json: key 'name' appears twice in one object"):
        load_system(str(p))


def test_a_dimensions_protocol_caps_merge_with_the_systems():
    d = _base()
    d["calibration"] = {
        "protocols": {"LL": {"base_latency_ns": 6600, "bandwidth_factor": 0.5},
                      "LL128": {"base_latency_ns": 14000, "bandwidth_factor": 0.92}},
        "protocol_max_bandwidth_GBps": {"LL": 80, "LL128": 300},
    }
    d["network"][0]["calibration"] = {"protocol_max_bandwidth_GBps": {"LL128": 200}}
    s = parse_system(d, "my.json")
    assert dict(s.dims[0].protocol_max_bandwidth_GBps) == {"LL": 80, "LL128": 200}


def test_a_relative_hardware_path_is_relative_to_the_system_file(tmp_path, monkeypatch):
    """A user system file naming its hardware by a relative path finds it beside itself,
    from any working directory (it was resolved against the working directory)."""
    spec = json.loads(files("costmodel").joinpath("data/systems/h100-sxm-x4.json").read_text())
    hw = json.loads(files("costmodel").joinpath("data/hardware/h100-sxm.json").read_text())
    hw["name"] = "my-h100"
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "myhw.json").write_text(json.dumps(hw))
    spec["hardware"] = "myhw.json"
    (tmp_path / "specs" / "sys.json").write_text(json.dumps(spec))
    for cwd in (tmp_path, tmp_path / "specs"):
        monkeypatch.chdir(cwd)
        s = load_system(str(tmp_path / "specs" / "sys.json"))
        assert s.hardware == str(tmp_path / "specs" / "myhw.json")
