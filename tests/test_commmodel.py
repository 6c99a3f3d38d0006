"""Communication model: ASTRA-sim's measured example and hand-derived formulas."""

import json
import math
import os
from importlib.resources import files

import pytest

from costmodel.commmodel import CommModelError, collective_time_ns, plan_collective
from costmodel.systems import GIB_PER_GB, list_systems, load_system, parse_system

GIB = 2**30 / 1e9  # 1 GiB/s in GB/s: ASTRA-sim's network.yml unit
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def system(dims, splits=4, chunks=1, delay=10, lmbw=1600, opt="localBWAware", impl="ring", calibration=None,
           dim_calibration=None):
    data = {
        "name": "t", "description": "t", "hardware": "h100-sxm",
        "network": [{"topology": t, "npus_count": n, "bandwidth_GBps": bw * GIB, "latency_ns": lat}
                    for t, n, bw, lat in dims],
        "collectives": {k: [impl] * len(dims) for k in ("all_reduce", "all_gather", "reduce_scatter")}
        | {"all_to_all": ["ring"] * len(dims)},
        "astra_sim": {"preferred_dataset_splits": splits, "active_chunks_per_dimension": chunks,
                      "endpoint_delay_ns": delay, "local_mem_bw_GBps": lmbw, "collective_optimization": opt},
    }
    if calibration is not None:
        data["calibration"] = calibration
    for i, c in (dim_calibration or {}).items():
        data["network"][i]["calibration"] = c
    return parse_system(data, "test")


def uncalibrated(name):
    """A preset with its calibration blocks removed: ASTRA-sim's semantics, as before calibration."""
    d = json.loads(files("costmodel").joinpath(f"data/systems/{name}.json").read_text())
    d.pop("calibration", None)
    for dim in d["network"]:
        dim.pop("calibration", None)
    return parse_system(d, name)


def net(lat, nbytes, bw_gib, hops=1):
    return math.floor(hops * lat + nbytes / (bw_gib * 2**30 / 1e9))


def red(nbytes, lmbw):
    return 3 * math.floor(nbytes / (lmbw * 1e9) * 1e9)


def test_astra_sim_worked_example_exact():
    # ../shared/specs: 2 ranks, Ring, 50 GB/s, 500 ns, 1 MiB all-reduce -> 24,620 ns
    # (system.json as ASTRA-sim's Ring_4chunks.json: 4 splits, 1 active chunk, endpoint 10 ns, local-mem-bw 1600)
    s = system([("Ring", 2, 50, 500)])
    t, algo = collective_time_ns(s, "all_reduce", 1 << 20, [0, 1])
    assert t == 24620 and algo == "ring"
    # per chunk: 3 injections + 2 messages of 128 KiB + one reduction
    assert t == 4 * (3 * 10 + 2 * net(500, 131072, 50) + red(131072, 1600))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_formulas_one_dim(n):
    s = system([("Ring", n, 100, 700)], splits=1, delay=20, lmbw=2000)
    D = 3 << 20
    ar, _ = collective_time_ns(s, "all_reduce", D, range(n))
    assert ar == 2 * (n - 1) * net(700, D // n, 100) + (2 * n - 1) * 20 + (n - 1) * red(D // n, 2000)
    rs, _ = collective_time_ns(s, "reduce_scatter", D, range(n))
    assert rs == (n - 1) * net(700, D // n, 100) + n * 20 + (n - 1) * red(D // n, 2000)
    ag, _ = collective_time_ns(s, "all_gather", D, range(n))  # comm_bytes = the input shard
    assert ag == (n - 1) * net(700, D, 100) + n * 20
    a2a, _ = collective_time_ns(s, "all_to_all", D, range(n))
    steps = n * (n - 1) // 2
    assert a2a == steps * net(700, D // n, 100) + (steps + 1) * 20


def test_switch_counts_two_hops_and_chunks_in_parallel():
    s1 = system([("Switch", 4, 100, 700)], splits=4, chunks=1)
    s2 = system([("Switch", 4, 100, 700)], splits=4, chunks=2)
    D = 8 << 20
    one_chunk = 3 * net(700, D // 4 // 4, 100, hops=2) + 4 * 10 + 3 * red(D // 16, 1600)
    assert collective_time_ns(s1, "reduce_scatter", D, range(4))[0] == 4 * one_chunk
    assert collective_time_ns(s2, "reduce_scatter", D, range(4))[0] == 2 * one_chunk


def test_min_chunk_is_num_npus():
    s = system([("Ring", 4, 100, 100)], splits=4)
    # 8 bytes / 4 splits < 4 NPUs: chunk = 4 bytes, 4 chunks
    t, _ = collective_time_ns(s, "all_reduce", 8, range(4))
    assert t == 4 * (6 * net(100, 1, 100) + 7 * 10 + 3 * red(1, 1600))


def test_two_dims_local_bw_aware_pipeline():
    # AR over 2 dims, 2 chunks: RS(dim0) -> AR(dim1) -> AG(dim0); queue of dim 0 runs RS c0, RS c1, AG c0, AG c1
    s = system([("Ring", 2, 100, 500), ("Ring", 2, 10, 500)], splits=2)
    D = 1 << 22
    c = D // 2
    rs = 1 * net(500, c // 2, 100) + 2 * 10 + red(c // 2, 1600)
    ar = 2 * net(500, (c // 2) // 2, 10) + 3 * 10 + red(c // 4, 1600)
    ag = 1 * net(500, c // 2, 100) + 2 * 10
    # hand schedule
    rs0, rs1 = rs, 2 * rs
    ar0 = rs0 + ar
    ar1 = max(rs1, ar0) + ar
    ag0 = max(rs1, ar0) + ag
    ag1 = max(ag0, ar1) + ag
    t, algo = collective_time_ns(s, "all_reduce", D, range(4))
    assert t == ag1
    assert algo.startswith("hierarchical:reduce_scatter@dim0")
    # baseline: all-reduce on each dimension with the full chunk
    b = system([("Ring", 2, 100, 500), ("Ring", 2, 10, 500)], splits=2, opt="baseline")
    ar_d0 = 2 * net(500, c // 2, 100) + 3 * 10 + red(c // 2, 1600)
    ar_d1 = 2 * net(500, c // 2, 10) + 3 * 10 + red(c // 2, 1600)
    # chunk 1 waits for dimension 0, then for dimension 1
    assert collective_time_ns(b, "all_reduce", D, range(4))[0] == ar_d0 + ar_d1 + max(ar_d0, ar_d1)


def test_all_gather_goes_down_the_dims():
    s = system([("Ring", 2, 100, 500), ("Ring", 4, 10, 500)], splits=1)
    D = 1 << 20
    # dim 1 first with the shard, then dim 0 with 4x the data
    expect = 3 * net(500, D, 10) + 4 * 10 + 1 * net(500, 4 * D, 100) + 2 * 10
    assert collective_time_ns(s, "all_gather", D, range(8))[0] == expect


def test_group_placement():
    s = load_system("dgx-h100-x4nodes")
    assert plan_collective(s, range(32)).involved_dims == (True, True)
    assert plan_collective(s, range(8, 16)).involved_dims == (True, False)
    assert plan_collective(s, [3, 11, 19, 27]).involved_dims == (False, True)
    p = plan_collective(s, [0, 1])
    assert p.flat and p.involved_dims is None
    with pytest.raises(CommModelError, match="outside"):
        plan_collective(s, [0, 32])


def test_flat_ring_group():
    # dgx-h100: group of 4 of the 8 GPUs runs as a communicator-group ring: 10 ns local injections
    s = uncalibrated("dgx-h100")
    D = 4 << 20
    c = D // 4
    bw = 450 / GIB
    t, algo = collective_time_ns(s, "all_reduce", D, [0, 1, 2, 3])
    one = 6 * net(936.25, c // 4, bw, hops=2) + 7 * 10 + 3 * red(c // 4, 3350)
    assert algo == "flat-ring" and t == pytest.approx(4 * one, abs=1)


def test_p2p_and_errors():
    s = uncalibrated("dgx-h100-x4nodes")
    t, algo = collective_time_ns(s, "send", 1 << 20, [0, 8])  # across nodes: dim 1, 2 hops
    assert algo == "p2p" and t == net(1000, 1 << 20, 50 / GIB, hops=2)
    t, _ = collective_time_ns(s, "collective_permute", 1 << 20, [0, 1])
    assert t == net(936.25, 1 << 20, 450 / GIB, hops=2)
    assert collective_time_ns(s, "all_reduce", 0, range(32)) == (0.0, "none")
    assert collective_time_ns(s, "all_reduce", 100, [5]) == (0.0, "none")
    with pytest.raises(CommModelError, match="unknown collective kind"):
        collective_time_ns(s, "reduce", 1, [0, 1])
    with pytest.raises(CommModelError, match="unknown collective implementation"):
        collective_time_ns(s, "all_reduce", 1, range(32), algorithm="magic")


def test_other_algorithms_are_positive_and_ordered():
    s = load_system("dgx-h100")
    D = 64 << 20
    ring, _ = collective_time_ns(s, "all_reduce", D, range(8))
    for algo in ("direct", "halvingDoubling", "doubleBinaryTree"):
        t, name = collective_time_ns(s, "all_reduce", D, range(8), algorithm=algo)
        assert t > 0 and algo in name
    # bandwidth term: the ring moves 2(n-1)/n of the buffer per rank
    assert ring > 2 * 7 / 8 * D / (450 * 1e9 / 1e9)
    t, _ = collective_time_ns(s, "collective_broadcast", D, range(8))
    assert t > D / 450


def test_algorithm_names_of_the_pass_map_to_implementations():
    from costmodel.commmodel import ALGORITHM_NAMES, resolve_algorithm

    assert ALGORITHM_NAMES[:4] == ("ring", "tree", "direct", "halving_doubling")
    assert resolve_algorithm("tree") == "doubleBinaryTree"
    assert resolve_algorithm("halving_doubling") == "halvingDoubling"
    assert resolve_algorithm("oneRing") == "oneRing" and resolve_algorithm("direct4") == "direct4"
    for bad in ("magic", "direct0", "directx", "Tree", ""):
        with pytest.raises(CommModelError, match=f"unknown collective implementation '{bad}' .*halving_doubling"):
            resolve_algorithm(bad)
    s = load_system("dgx-h100")
    D = 64 << 20
    assert collective_time_ns(s, "all_reduce", D, range(8), algorithm="tree") == collective_time_ns(
        s, "all_reduce", D, range(8), algorithm="doubleBinaryTree"
    )
    t, name = collective_time_ns(s, "reduce_scatter", D, range(8), algorithm="halving_doubling")
    assert t > 0 and name == "halvingDoubling/Simple"  # the implementation, then the protocol NCCL runs


def test_algorithm_not_implementing_a_kind_keeps_the_systems():
    from costmodel.commmodel import implements

    assert implements("doubleBinaryTree", "all_reduce") and not implements("doubleBinaryTree", "all_gather")
    assert not implements("halvingDoubling", "all_to_all") and implements("direct4", "all_to_all")
    s = load_system("dgx-h100")
    own = collective_time_ns(s, "all_gather", 1 << 20, range(8))
    assert collective_time_ns(s, "all_gather", 1 << 20, range(8), algorithm="tree") == own
    assert collective_time_ns(s, "all_to_all", 1 << 20, range(8), algorithm="halving_doubling") == (
        collective_time_ns(s, "all_to_all", 1 << 20, range(8))
    )


# -- calibration (docs/communication-model.md, "Calibration")

L = 11600  # ns: NCCL base latency Ring/LL 6.6 us + XLA kNcclKernelLaunchOverhead 5 us
STEP = 600  # ns: NCCL's hardware latency of a ring step over NVLink, LL protocol


def test_presets_without_calibration_are_bit_for_bit_unchanged():
    # tests/data/uncalibrated_preset_times.json: every preset's times computed by the code
    # before calibration existed; the presets minus their calibration blocks reproduce them exactly
    pinned = json.load(open(os.path.join(DATA, "uncalibrated_preset_times.json")))
    got = {}
    for name in list_systems():
        s = uncalibrated(name)
        assert s.calibration is None and all(d.bus_efficiency is None for d in s.dims)
        n = s.num_npus
        half = list(range(0, n, 2))
        for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            for b in (1 << 20, 64 << 20):
                got[f"{name} {kind} {b} all"] = collective_time_ns(s, kind, b, range(n))[0]
            got[f"{name} {kind} {1 << 20} half"] = collective_time_ns(s, kind, 1 << 20, half)[0]
        got[f"{name} collective_permute {1 << 20}"] = collective_time_ns(s, "collective_permute", 1 << 20, [0, n - 1])[0]
        got[f"{name} collective_broadcast {1 << 20}"] = collective_time_ns(s, "collective_broadcast", 1 << 20, range(n))[0]
    assert got == pinned
    # the TPU presets have no calibration block: they are these same numbers
    for name in ("tpu-v3-8", "tpu-v4-32", "tpu-v5p-64"):
        assert load_system(name).calibration is None
        assert collective_time_ns(load_system(name), "all_reduce", 1 << 20, range(load_system(name).num_npus))[0] == \
            pinned[f"{name} all_reduce {1 << 20} all"]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_calibrated_ring_formula(n):
    bw, eff, lat = 100, 0.78, 700
    s = system([("Ring", n, bw, lat)], splits=1, delay=20, lmbw=2000,
               calibration={"bus_efficiency": eff, "collective_latency_ns": L})
    D = 3 << 20
    ar, algo = collective_time_ns(s, "all_reduce", D, range(n))
    # per message at bw * eff; the reduction is not charged (the measured busbw includes it); + L once
    assert algo == "ring"
    assert ar == 2 * (n - 1) * net(lat, D // n, bw * eff) + (2 * n - 1) * 20 + L
    rs, _ = collective_time_ns(s, "reduce_scatter", D, range(n))
    assert rs == (n - 1) * net(lat, D // n, bw * eff) + n * 20 + L
    ag, _ = collective_time_ns(s, "all_gather", D, range(n))
    assert ag == (n - 1) * net(lat, D, bw * eff) + n * 20 + L


def test_calibrated_all_reduce_is_the_busbw_formula():
    # without per-hop latency and injection delays, the ring all-reduce is exactly the
    # NCCL-style formula 2 (n-1)/n * bytes / (bw * eff) + latency (up to the floor per message)
    n, bw_GBps, eff = 8, 450, 0.82
    s = parse_system({
        "name": "t", "description": "t", "hardware": "h100-sxm",
        "network": [{"topology": "Switch", "npus_count": n, "bandwidth_GBps": bw_GBps, "latency_ns": 0}],
        "astra_sim": {"endpoint_delay_ns": 0},
        "calibration": {"bus_efficiency": eff, "collective_latency_ns": L},
    }, "t")
    bw_astra = round(bw_GBps * eff * GIB_PER_GB, 9) * 2**30 / 1e9  # bytes/ns, as network.yml holds it
    for nbytes in (1 << 20, 64 << 20, 1 << 30):
        t, _ = collective_time_ns(s, "all_reduce", nbytes, range(n))
        formula = 2 * (n - 1) / n * nbytes / bw_astra + L
        assert formula - 2 * (n - 1) * 4 <= t <= formula  # 4 chunks x 2(n-1) messages, each floored
        # bw * eff in 1e9 B/s, the figure the preset's source quotes
        assert t == pytest.approx(2 * (n - 1) / n * nbytes / (bw_GBps * eff) + L, rel=1e-6, abs=2 * (n - 1) * 4)


def test_calibration_versus_what_astra_sim_computes():
    # ASTRA-sim given our network.yml (bandwidth x eff) and system.json computes the
    # uncalibrated model on that bandwidth; ours = that - local reductions + L, per op
    cal = system([("Switch", 8, 450, 936.25)], lmbw=3350, calibration={"bus_efficiency": 0.82, "collective_latency_ns": L})
    astra = system([("Switch", 8, 450 * 0.82, 936.25)], lmbw=3350)
    D = 64 << 20
    for kind in ("all_gather", "all_to_all", "collective_permute", "collective_broadcast"):
        group = [0, 5] if kind == "collective_permute" else range(8)
        assert collective_time_ns(cal, kind, D, group)[0] == collective_time_ns(astra, kind, D, group)[0] + L
    chunk = D // 4
    reductions = 4 * 7 * red(chunk // 8, 3350)  # 4 chunks, n-1 reduced messages each
    assert collective_time_ns(cal, "all_reduce", D, range(8))[0] == \
        collective_time_ns(astra, "all_reduce", D, range(8))[0] - reductions + L
    # with a step latency: ASTRA-sim's messages without their latency, + steps x s + L
    stepped = system([("Switch", 8, 450, 936.25)], lmbw=3350,
                     calibration={"bus_efficiency": 0.82, "collective_latency_ns": L, "step_latency_ns": 600})
    astra0 = system([("Switch", 8, 450 * 0.82, 0)], lmbw=3350)
    assert collective_time_ns(stepped, "all_gather", D, range(8))[0] == \
        collective_time_ns(astra0, "all_gather", D, range(8))[0] + 7 * 600 + L
    # nothing is added to an op that moves nothing
    assert collective_time_ns(cal, "all_reduce", 0, range(8)) == (0.0, "none")
    assert collective_time_ns(cal, "all_reduce", 1 << 20, [3]) == (0.0, "none")


def test_calibrated_presets_reach_their_measured_busbw():
    # the calibration reproduces the measurement it comes from: a large all-reduce's busbw
    # (2 (n-1)/n * bytes / time) is within a few % below bus_efficiency x link bandwidth
    for name, measured in (("dgx-a100", 234.89), ("dgx-h100", 370), ("dgx-b200", 682.2)):
        s = load_system(name)
        n, nbytes = s.num_npus, 4 << 30
        t, _ = collective_time_ns(s, "all_reduce", nbytes, range(n))
        busbw = 2 * (n - 1) / n * nbytes / t  # bytes/ns = GB/s
        target = s.dims[0].bandwidth_GBps * s.dims[0].bus_efficiency
        assert 0.95 * target < busbw < target
        assert abs(busbw / measured - 1) < 0.06


def test_fully_connected_presets_reach_their_measured_busbw():
    # on a calibrated FullyConnected dimension NCCL / RCCL run rings over every link of a GPU
    # at once: busbw = (n - 1) x per-pair bandwidth x bus_efficiency, the measurement the
    # efficiency was derived from (ASTRA-sim's one-link ring gave a third / a seventh of it)
    for name, measured in (("mi300x-x8", 312.912), ("h200-x4", 363.3), ("a100-40gb-x4", 234.89)):
        s = load_system(name)
        dim = s.dims[0]
        assert dim.topology == "FullyConnected"
        n, nbytes = s.num_npus, 4 << 30
        t, algo = collective_time_ns(s, "all_reduce", nbytes, range(n))
        busbw = 2 * (n - 1) / n * nbytes / t  # bytes/ns = GB/s
        target = (n - 1) * dim.bandwidth_GBps * dim.bus_efficiency
        assert 0.95 * target < busbw < target, (name, busbw, target)
        assert abs(busbw / measured - 1) < 0.06
    # two ranks of the board have one link between them
    s = load_system("a100-40gb-x4")
    t2, _ = collective_time_ns(s, "all_reduce", 1 << 30, [0, 1])
    assert 0.95 * 100 * 0.78 < (1 << 30) / t2 < 100 * 0.78  # busbw of 2 ranks: (2-1)/2 x 2 x bytes / t


def test_uncalibrated_fully_connected_ring_uses_one_link():
    # ASTRA-sim's ring sends to one neighbour: an uncalibrated system keeps it
    s = uncalibrated("a100-40gb-x4")
    n, nbytes = s.num_npus, 1 << 30
    t, algo = collective_time_ns(s, "all_gather", nbytes, range(n))
    assert algo == "ring"
    busbw = (n - 1) * nbytes / t  # an all-gather receives n - 1 shards: bytes/ns = GB/s
    assert 0.95 * 100 < busbw < 100  # one 100 GB/s link, not 3


# NCCL 2.30.7's Ring constants (src/graph/tuning.cc), as the NVIDIA presets carry them
LAUNCH = 5000  # ns: XLA's kNcclKernelLaunchOverhead, once per op
BASE = {"LL": 6600, "LL128": 14000, "Simple": 8400}  # ns: baseLatencies[Ring], once per collective
NVLINK_STEP = {"LL": 600, "LL128": 1900, "Simple": 3400}  # ns: hwLatencies[NVLink][Ring], per ring step
NET_STEP = {"LL": 2700, "LL128": 4000, "Simple": 14000}  # ns: hwLatencies[NET][Ring]


def test_calibrated_presets_add_the_latency_once_per_op():
    s, u = load_system("dgx-h100"), uncalibrated("dgx-h100")
    assert s.collective_latency_ns == LAUNCH and s.dims[0].bus_efficiency == 0.82
    mi = load_system("mi300x-x8")
    assert mi.collective_latency_ns == 17000  # RCCL base latency 12 us + XLA's 5 us
    assert mi.dims[0].step_latency_ns is None and not mi.calibration.protocols  # RCCL: none cited
    assert collective_time_ns(mi, "all_reduce", 1 << 20, range(8))[1] == "ring"  # no protocol named
    # a tiny all-gather over the 8 GPUs: bandwidth negligible; NCCL's latency with LL (its
    # lowest), the launch once and a step latency per ring step (7), where ASTRA-sim's semantics
    # pay 2 hops x 936.25 ns per message of each of the 4 chunks (7 x 4 x 1872.5 = 52.4 us)
    tc, algo = collective_time_ns(s, "all_gather", 8, range(8))
    tu, _ = collective_time_ns(u, "all_gather", 8, range(8))
    injections = 4 * (7 + 1) * 10  # 4 chunks, one phase of 7 sends, 10 ns each (endpoint delay)
    assert algo == "ring/LL" and tc == LAUNCH + BASE["LL"] + 7 * NVLINK_STEP["LL"] + injections and tu > 50_000
    # a 4 MiB send: one message, one step; Simple at the full calibrated bandwidth beats LL
    # (half of it, capped at llMaxBw = 141 GB/s) and LL128 (x 0.92, 14 us base)
    t, algo = collective_time_ns(s, "send", 4 << 20, [0, 1])
    assert algo == "p2p/Simple"
    assert t == net(0, 4 << 20, 450 * 0.82 / GIB, hops=2) + NVLINK_STEP["Simple"] + BASE["Simple"] + LAUNCH
    # a 64 KiB all-reduce (a tensor-parallel decode layer's): about NCCL's own estimate,
    # 6.6 + 14 x 0.6 + 5 = 20 us (docs/communication-model.md), not 117 us
    t, algo = collective_time_ns(s, "all_reduce", 64 << 10, range(8))
    assert algo == "ring/LL" and 20_000 <= t < 22_000


def test_protocols_run_the_fastest_with_their_latency_and_bandwidth():
    """`calibration.protocols` (NCCL's tuner): each protocol prices the collective with its
    base latency once, its step latency per ring step and its share of the bandwidth
    (capped by protocol_max_bandwidth_GBps); the collective runs with the fastest."""
    protocols = {
        "LL": {"base_latency_ns": 6600, "bandwidth_factor": 0.5},
        "LL128": {"base_latency_ns": 14000, "bandwidth_factor": 0.92},
        "Simple": {"base_latency_ns": 8400, "bandwidth_factor": 1.0},
    }
    s = system([("Ring", 4, 100, 500)], splits=1, delay=0,
               calibration={"bus_efficiency": 1.0, "collective_latency_ns": LAUNCH, "protocols": protocols},
               dim_calibration={0: {"protocol_step_latency_ns": NVLINK_STEP, "protocol_max_bandwidth_GBps": {"LL": 40}}})
    n, steps = 4, 2 * (4 - 1)  # a ring all-reduce: 2 (n-1) messages of D/n, one chunk
    bw_gib = {"LL": 40 / GIB, "LL128": 100 * 0.92, "Simple": 100.0}  # LL: half of 100 GiB/s, capped at 40 GB/s

    def expected(p, D):
        return steps * net(0, D // n, bw_gib[p]) + steps * NVLINK_STEP[p] + BASE[p] + LAUNCH

    for D, winner in ((64 << 10, "LL"), (1 << 20, "LL128"), (256 << 20, "Simple")):
        t, algo = collective_time_ns(s, "all_reduce", D, range(n))
        assert algo == f"ring/{winner}"
        assert t == expected(winner, D)
        assert t == min(expected(p, D) for p in protocols)
    # without the tables a dimension keeps the system's single step latency for every protocol
    plain = system([("Ring", 4, 100, 500)], splits=1, delay=0,
                   calibration={"bus_efficiency": 1.0, "protocols": protocols, "step_latency_ns": 700})
    t, algo = collective_time_ns(plain, "all_reduce", 64 << 10, range(n))
    assert algo == "ring/LL" and t == steps * net(0, (64 << 10) // n, 50.0) + steps * 700 + BASE["LL"]


def test_all_to_all_over_a_switch_shares_the_ports_bandwidth():
    """A direct all-to-all over NVSwitch sends n-1 messages of D/n at once through the
    GPU's one port: (n-1)/n of the buffer at the calibrated bandwidth (nccl-tests' alltoall
    busbw is the port's), where ASTRA-sim's congestion-unaware network (uncalibrated
    systems) runs them side by side at full bandwidth each."""
    s, u = load_system("dgx-h100"), uncalibrated("dgx-h100")
    D, n = 1 << 30, 8
    t, algo = collective_time_ns(s, "all_to_all", D, range(n))
    busbw = (n - 1) / n * D / t  # bytes/ns = GB/s
    assert algo == "direct/Simple" and 0.97 * 450 * 0.82 < busbw < 450 * 0.82
    assert collective_time_ns(u, "all_to_all", D, range(n))[0] < t / 5
    # a fully connected board has a link per pair: its messages do run side by side
    fc = load_system("h100-sxm-x4")
    t4, _ = collective_time_ns(fc, "all_to_all", D, range(4))
    assert (4 - 1) / 4 * D / t4 > 2.5 * 150 * 0.82


def test_communicator_groups_run_as_nccl_runs_them_on_a_calibrated_system():
    """A group that is every combination of per-dimension coordinate sets (two whole nodes
    of four, GPUs 0 and 4 of every node) runs hierarchically over those sets, each rank on
    its own links; an all-to-all over any other group sends to every peer at once, the
    messages through one dimension's port sharing it."""
    s = load_system("dgx-h100-x4nodes")
    D = 128 << 20
    t32, _ = collective_time_ns(s, "all_reduce", D, range(32))
    t16, algo = collective_time_ns(s, "all_reduce", D, range(16))  # nodes 0 and 1
    assert algo.startswith("hierarchical:reduce_scatter@dim0") and t16 < 1.2 * t32
    # GPUs 0 and 4 of each node: reduce-scatter over the pair, an all-reduce of D/2 over
    # the 4 nodes on InfiniBand (50 GB/s per GPU), all-gather over the pair
    t, algo = collective_time_ns(s, "all_reduce", D, range(0, 32, 4))
    ib = 2 * (4 - 1) / 4 * (D / 2) / 50  # ns
    assert algo.startswith("hierarchical:") and ib < t < 1.3 * ib
    # all-to-all over two nodes: half of each rank's buffer crosses its own NIC
    A = 8 << 20
    a16, algo = collective_time_ns(s, "all_to_all", A, range(16))
    assert algo.startswith("hierarchical:all_to_all@dim0:direct") and a16 < 2 * (8 * A / 16 / 50)
    # not a product (a ring over 4 nodes and back): every peer at once, per port; GPU 1's
    # three InfiniBand messages of each of the 4 chunks share its NIC
    g = [0, 8, 16, 24, 1]
    t, algo = collective_time_ns(s, "all_to_all", A, g)
    assert algo == "flat-direct/Simple" and t >= 4 * net(0, 3 * (A // 4 // 5), 50 / GIB, hops=2)


def test_per_dimension_calibration_on_the_multi_node_system():
    s = load_system("dgx-h100-x4nodes")
    assert s.dims[0].bus_efficiency == 0.82 and s.dims[1].bus_efficiency is None  # InfiniBand: datasheet
    assert s.collective_latency_ns == LAUNCH
    assert dict(s.dims[0].protocol_step_latency_ns) == NVLINK_STEP
    assert dict(s.dims[1].protocol_step_latency_ns) == NET_STEP
    # across nodes: InfiniBand at its datasheet 50 GB/s; a 1 MiB message runs LL128 (x 0.92):
    # LL is capped at NCCL's multi-node llMaxBw 20.4 GB/s, Simple pays 14 us a step
    t, algo = collective_time_ns(s, "send", 1 << 20, [0, 8])
    assert algo == "p2p/LL128" and t == net(0, 1 << 20, 50 * 0.92 / GIB, hops=2) + NET_STEP["LL128"] + BASE["LL128"] + LAUNCH
    # inside a node: NVLink at 450 x 0.82, Simple
    t, algo = collective_time_ns(s, "collective_permute", 4 << 20, [0, 1])
    assert algo == "p2p/Simple"
    assert t == net(0, 4 << 20, 450 * 0.82 / GIB, hops=2) + NVLINK_STEP["Simple"] + BASE["Simple"] + LAUNCH
    # a flat ring crossing the uncalibrated dimension keeps ASTRA-sim's local reduction
    D = 4 << 20
    group = [0, 8, 16, 24, 1]  # not a fibre: a flat ring over both dimensions
    t, algo = collective_time_ns(s, "all_reduce", D, group)
    # 8 ring steps at the network's step latency (the slowest link's) once; every link
    # carries all 8 messages of each of the 4 chunks, so the InfiniBand links bound the
    # ring (24 -> 1 differs in both dimensions: InfiniBand, the slower, where ASTRA-sim
    # would take the first differing dimension, NVLink); the local reduction is still
    # charged (the ring crosses the uncalibrated dimension)
    msg = D // 4 // 5
    assert algo == "flat-ring/LL128" and t > LAUNCH + 8 * NET_STEP["LL128"] + 4 * 8 * net(0, msg, 50 * 0.92 / GIB)
    # a tiny one: latency only; 8 steps shared by the ring's links at their own step
    # latencies (4 InfiniBand, 1 NVLink), as NCCL's tuner splits intra- and inter-node steps
    tiny, algo = collective_time_ns(s, "all_reduce", 64, group)
    latency = LAUNCH + BASE["LL"] + 8 * (4 * NET_STEP["LL"] + NVLINK_STEP["LL"]) / 5
    assert algo == "flat-ring/LL" and latency <= tiny < latency + 1000
    inside, _ = collective_time_ns(s, "all_reduce", D, [0, 1, 2, 3, 4])  # the same ring inside one node
    assert t > 3 * inside
    # one message between GPU 7 of node 0 and GPU 0 of node 1 is an InfiniBand message
    assert collective_time_ns(s, "send", 1 << 30, [7, 8]) == collective_time_ns(s, "send", 1 << 30, [0, 8])
    # uncalibrated: ASTRA-sim's routing, the first differing dimension (NVLink)
    u = uncalibrated("dgx-h100-x4nodes")
    assert collective_time_ns(u, "send", 1 << 30, [7, 8])[0] < collective_time_ns(u, "send", 1 << 30, [0, 8])[0] / 5


def test_step_latency_once_per_step_with_dimension_override():
    """A calibrated step latency replaces each message's hops x latency_ns: paid once per
    ring step of the collective, on the dimension it runs on (a dimension's own value
    wins over the system's), not once per message of every chunk."""
    dims = [("Ring", 2, 100, 500), ("Ring", 4, 10, 500)]
    s = system(dims, splits=4, calibration={"step_latency_ns": 300}, dim_calibration={1: {"step_latency_ns": 2000}})
    assert [d.step_latency_ns for d in s.dims] == [300, 2000]
    assert s.dims[0].bus_efficiency is None  # a latency-only calibration keeps the datasheet bandwidth
    D = 1 << 20
    # all-gather over dimension 1 alone (ranks 0, 2, 4, 6): a ring of 4, 3 steps
    t, _ = collective_time_ns(s, "all_gather", D, [0, 2, 4, 6])
    chunk = D // 4
    per_chunk = 3 * net(0, chunk, 10) + 4 * 10  # messages without latency, 4 injections
    assert t == 4 * per_chunk + 3 * 2000


def test_system_level_efficiency_and_dimension_override():
    dims = [("Ring", 2, 100, 500), ("Ring", 4, 10, 500)]
    s = system(dims, splits=1, calibration={"bus_efficiency": 0.5}, dim_calibration={1: {"bus_efficiency": 0.9}})
    assert [d.bus_efficiency for d in s.dims] == [0.5, 0.9] and s.collective_latency_ns == 0
    D = 1 << 20
    expect = 3 * net(500, D, 10 * 0.9) + 4 * 10 + 1 * net(500, 4 * D, 100 * 0.5) + 2 * 10
    assert collective_time_ns(s, "all_gather", D, range(8))[0] == expect
    # a latency-only block changes nothing but the latency
    only = system(dims, splits=1, calibration={"collective_latency_ns": 250})
    plain = system(dims, splits=1)
    for kind in ("all_reduce", "all_gather"):
        assert collective_time_ns(only, kind, D, range(8))[0] == collective_time_ns(plain, kind, D, range(8))[0] + 250
