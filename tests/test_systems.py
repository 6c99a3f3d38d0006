import json

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
    assert f"bandwidth: [ {round(450 * GIB_PER_GB, 9)!r}, {round(50 * GIB_PER_GB, 9)!r} ]" in yml
    assert "latency: [ 936.25, 1000.0 ]" in yml
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
