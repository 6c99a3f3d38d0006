#!/usr/bin/env python3
"""Our all-reduce time against NCCL's own tuner model (a benchmark, not a test).

    python benchmarks/comm_vs_nccl.py [--system dgx-h100] [--system a100-40gb-x4]

For a ring all-reduce over every GPU of a single-node NVLink preset, it prints by message
size our time (`commmodel.collective_time_ns`, the preset's calibration) and the time NCCL's
tuner predicts for itself (NVIDIA/nccl src/graph/tuning.cc, NCCL 2.30.7), written out here
from NCCL's source, independently of the preset: for each protocol p of LL, LL128 and Simple,

    t_p = baseLat[Ring][p] + 2 (n-1) hwLat[NVLink][Ring][p] + bytes x 2 (n-1) / n / busBw_p

with baseLat Ring {6.6, 14.0, 8.4} us, hwLat NVLink Ring {0.6, 1.9, 3.4} us, busBw_p the
preset's calibrated bus bandwidth (bandwidth_GBps x bus_efficiency x the links a rank's
ring drives: n - 1 on a FullyConnected board, one through a switch; what nccl-tests
measured) times NCCL's protocol factor {0.5, 0.92, 1.0}, LL capped at llMaxBw of the GPU's
architecture (Ampere 87.7, Hopper 141, Blackwell 282 GB/s; LL128's per-channel cap left
out), NCCL running the fastest, plus XLA's 5 us kernel launch overhead
(kNcclKernelLaunchOverhead) as in our collective_latency_ns. Both are models: NCCL's is
what NCCL believes when it picks a protocol, not a measurement. Since the presets carry
NCCL's protocols (`calibration.protocols`), the two agree but for ASTRA-sim's chunking and
endpoint delays, which ours keeps.
"""

from __future__ import annotations

import argparse

BASE_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
HW_NVLINK_US = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
BW_FACTOR = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
XLA_LAUNCH_US = 5.0
LL_MAX_GBps = {"a100-40gb": 87.7, "a100-80gb": 87.7, "h100-sxm": 141.0, "h200": 141.0, "b200": 282.0}  # llMaxBws, N1


def nccl_tuner_us(nbytes: int, n: int, busbw_GBps: float, ll_max_GBps: float | None = None) -> tuple[float, str]:
    best = None
    for p in BASE_US:
        t = BASE_US[p] + 2 * (n - 1) * HW_NVLINK_US[p]
        bw = busbw_GBps * BW_FACTOR[p]
        if p == "LL" and ll_max_GBps is not None:
            bw = min(bw, ll_max_GBps)
        t += nbytes * 2 * (n - 1) / n / bw / 1e3  # bytes / (GB/s) = us
        if best is None or t < best[0]:
            best = (t, p)
    return best[0] + XLA_LAUNCH_US, best[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", action="append", help="a single-dimension preset (default: dgx-h100, a100-40gb-x4)")
    args = ap.parse_args(argv)
    from costmodel.commmodel import _ring_links, collective_time_ns
    from costmodel.systems import load_system

    for name in args.system or ["dgx-h100", "a100-40gb-x4"]:
        s = load_system(name)
        if len(s.dims) != 1 or s.dims[0].bus_efficiency is None:
            print(f"{name}: not a calibrated single-dimension system; skipped")
            continue
        d = s.dims[0]
        n = d.npus_count
        # the measured busbw the preset's bus_efficiency comes from (docs/communication-model.md)
        busbw = d.bandwidth_GBps * d.bus_efficiency * _ring_links(s, "all_reduce", d, n)
        protos = ", ".join(p.name for p in s.calibration.protocols) or "none"
        print(f"\n{name}: ring all-reduce over {n} GPUs, calibrated busbw {busbw:.0f} GB/s, protocols {protos}")
        print(f"{'bytes':>12} {'ours':>11} {'protocol':>8} {'NCCL tuner':>11} {'protocol':>8} {'ours/NCCL':>9}")
        for size in [8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 30 << 20, 64 << 20, 256 << 20, 1 << 30]:
            ours_ns, algo = collective_time_ns(s, "all_reduce", size, range(n))
            ours_us = ours_ns / 1e3
            theirs_us, proto = nccl_tuner_us(size, n, busbw, LL_MAX_GBps.get(s.hardware))
            ours_proto = algo.rsplit("/", 1)[1] if "/" in algo else "-"
            print(f"{size:>12,} {ours_us:>9.1f}us {ours_proto:>8} {theirs_us:>9.1f}us {proto:>8} {ours_us / theirs_us:>9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
