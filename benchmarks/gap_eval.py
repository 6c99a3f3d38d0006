#!/usr/bin/env python3
"""Where the calibrated backend's error on a measured step comes from: kernel formation
or rates (a benchmark run by hand; it needs no GPU: it reads the measured files that
benchmarks/gpu_measure.py wrote).

    python benchmarks/gap_eval.py [--data benchmarks/data/gpu/h100-sxm] [--models resnet18,resnet50] [--mode inference]
    python benchmarks/gap_eval.py --scatters --models llama3-100m,resnet18   # XLA's scatter kernels
    python benchmarks/gap_eval.py --run train-repeat --models llama3-1b --kernels 5   # the kernel types furthest off

For each measured step (training, or inference with --mode) it lines the profile up with XLA's optimized HLO of the
same step (both in the data folder): XLA launches the top-level instructions of its
scheduled ENTRY computation in order, one kernel per fusion or copy and, per cuDNN
custom-call, the kernels the profile names with that custom-call (memsets included), so
walking both in order gives each HLO instruction its measured time (a kernel whose name
does not match its instruction's kind is counted as a mismatch; a clean alignment has
none). Then, for the kernels outside the convolutions:

  measured           what the GPU took (per step);
  XLA @ calibrated   XLA's own kernels (its fusions, bytes = operands + results) costed
                     by the calibrated backend as memory-bound kernels of those bytes
                     (a scatter also with its atomic updates, scatter_element_ns);
  ours               the calibrated backend on our own kernel formation of the export.

ours - (XLA @ calibrated) is the error of our kernel formation (what we fuse and
materialise differently), (XLA @ calibrated) - measured the error of the rates (what a
kernel of those bytes takes on the GPU), by kind of kernel. The library calls (cuDNN
convolutions, cuBLAS GEMMs and XLA's Triton GEMM fusions, with their memsets and helper kernels; our convolution
and GEMM kernels) are compared as a whole. A program whose ENTRY has a loop (its body's
kernels launch once per trip) or whose profile does not line up is reported, not
compared.

Nothing here feeds a parameter; the measured steps are for validation.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from gpu_eval import (  # noqa: E402
    RESNETS,
    gpu_events,
    predicted_kernels,
    tar_members,
    workload,
)

KINDS = ("loop", "reduce", "transpose", "scatter", "copy", "memset")


def align(hlo_text: str, events: list, steps: int):
    """({HLO instruction name: measured us per step}, kernels, mismatches, memset us per
    step outside custom-calls): the profile's GPU events (in time order) walked against
    the ENTRY schedule of XLA's optimized HLO, `steps` times."""
    from costmodel.kernels.xla_hlo import read_hlo_kernels

    parsed = read_hlo_kernels(hlo_text)
    kernels = parsed.kernels
    if parsed.control_flow:  # a loop's kernels launch once per trip: no one-to-one walk
        return {}, kernels, len(events), 0.0
    per: dict = collections.defaultdict(float)
    i, n, bad, memset = 0, len(events), 0, 0.0
    for _ in range(steps):
        for pos, k in enumerate(kernels):
            if k.opcode == "custom-call":
                if i < n and events[i]["args"].get("hlo_op") == k.name:
                    while i < n and events[i]["args"].get("hlo_op") == k.name:
                        per[k.name] += float(events[i].get("dur", 0))
                        i += 1
                    continue
                # inside a command buffer the profile names the buffer, not the call: its
                # memsets, its library kernel, and the library's other kernels up to the
                # next XLA kernel (when the next instruction is no library call too)
                while i < n and events[i]["name"].startswith("Memset"):
                    per[k.name] += float(events[i].get("dur", 0))
                    i += 1
                if i >= n or _xla_kernel_name(events[i]["name"]):
                    bad += 1
                    continue
                per[k.name] += float(events[i].get("dur", 0))
                i += 1
                last = pos + 1 == len(kernels) or kernels[pos + 1].opcode != "custom-call"
                while last and i < n and not events[i]["name"].startswith("Memset") and not _xla_kernel_name(events[i]["name"]):
                    per[k.name] += float(events[i].get("dur", 0))
                    i += 1
                continue
            while i < n and events[i]["name"].startswith("Memset"):
                memset += float(events[i].get("dur", 0))
                i += 1
            if i >= n:
                bad += 1
                continue
            name = events[i]["name"]
            if k.opcode == "copy":
                ok = name.startswith(("memcpy", "copy"))
            else:
                ok = re.sub(r"_\d+$", "", name) == re.sub(r"[._]\d+$", "", k.name).replace(".", "_")
            bad += not ok
            per[k.name] += float(events[i].get("dur", 0))
            i += 1
    bad += n - i  # events left over
    return {k: v / steps for k, v in per.items()}, kernels, bad, memset / steps


def _xla_kernel_name(name: str) -> bool:
    """Is a profiled kernel one of XLA's own (a fusion or a copy), not a library's?"""
    return bool(re.match(r"(loop|input|wrapped|triton|gemm_fusion|fusion|copy|memcpy)[_a-z0-9]*", name))


def xla_kind(k) -> str | None:
    """The kind of an XLA kernel (None: a convolution or other library call)."""
    if k.opcode == "copy":
        return "copy"
    if k.opcode != "fusion" or "gemm" in k.name:  # library calls and Triton GEMM fusions
        return None
    if "scatter" in k.name:
        return "scatter"
    if "transpose" in k.name:
        return "transpose"
    if k.kind == "kInput" or (k.kind == "kCustom" and "reduce" in k.name):
        return "reduce"
    return "loop"


def our_kind(row) -> str | None:
    ops = [o.split(".")[-1] for o in row.ops]
    if row.kind in ("conv", "gemm"):
        return None
    if "select_and_scatter" in ops or "scatter" in ops:
        return "scatter"
    if row.kind == "input":
        return "reduce"
    if ops and ops[-1] == "transpose":
        return "transpose"
    return "loop"


def load_step(data: str, model: str, mode: str = "train", run: str | None = None):
    """(HLO text, GPU events in time order, steps) of a measured step's profile and XLA's
    optimized HLO, from the run folder (default: the mode's) under `data`; None when the
    folder has not both."""
    traces = tar_members(os.path.join(data, run or mode, "traces.tar"))
    hlos = tar_members(os.path.join(data, run or mode, "hlo.tar"))
    tname = next((t for t in traces if t.startswith(f"{model}_{mode}_1_device_")), None)
    hname = f"{model}_{mode}_1_device.hlo.txt.gz"
    if tname is None or hname not in hlos:
        return None
    steps = int(re.search(r"_(\d+)_steps", tname).group(1))
    events = sorted(gpu_events(traces[tname]), key=lambda e: float(e["ts"]))
    return gzip.decompress(hlos[hname]).decode(), events, steps


def evaluate(data: str, hardware: str, model: str, workloads: str, backend, mode: str = "train",
             run: str | None = None) -> dict | None:
    from costmodel.rules import OpCost

    loaded = load_step(data, model, mode, run)
    if loaded is None:
        return None
    text, events, steps = loaded
    per, kernels, bad, memset = align(text, events, steps)
    if bad:
        return {"model": model, "mode": mode, "mismatches": bad}
    out = {"model": model, "mode": mode, "mismatches": bad, "measured_us": {}, "xla_us": {}, "xla_GB": {}, "ours_us": {}, "ours_GB": {},
           "measured_library_us": 0.0, "ours_library_us": 0.0, "xla_launches": {}, "ours_launches": {}}
    zero = lambda: {k: 0.0 for k in KINDS}  # noqa: E731
    for key in ("measured_us", "xla_us", "xla_GB", "ours_us", "ours_GB", "xla_launches", "ours_launches"):
        out[key] = zero()
    out["measured_us"]["memset"] = memset
    # the GPU's idle time: the time between the first kernel's start and the last one's
    # end when no kernel runs (kernels of two streams may overlap); split into the gaps
    # at the boundary of a library call launched on its own (a cuDNN call: the profile
    # names its op; XLA's fusions and cuBLAS calls run in command buffers), the gaps
    # between the events of one such call, and the rest
    library_ops = {k.name for k in kernels if k.opcode == "custom-call"}
    gaps = {"boundary": [0.0, 0], "within": [0.0, 0], "other": [0.0, 0]}
    idle, end, prev = 0.0, None, None
    for e in events:
        t0, t1 = float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))
        if end is not None and t0 > end:
            idle += t0 - end
            a, b = prev["args"].get("hlo_op"), e["args"].get("hlo_op")
            where = ("within" if a == b and a in library_ops else
                     "boundary" if a in library_ops or b in library_ops else "other")
            gaps[where][0] += t0 - end
            gaps[where][1] += 1
        end = t1 if end is None else max(end, t1)
        prev = e
    out["idle_us"] = idle / steps
    out["idle_gaps"] = {k: (v[0] / steps, v[1] / steps) for k, v in gaps.items()}
    out["library_calls"] = len(library_ops)  # cuDNN calls per step (each ENTRY instruction runs once)
    # the library calls' helper kernels and memsets: every event of a call but its longest
    calls: dict = {}
    for e in events:
        op = e["args"].get("hlo_op")
        if op in library_ops:
            calls.setdefault(op, []).append(float(e.get("dur", 0)))
    per_call: dict = {}
    for op, ds in calls.items():
        n = max(1, len(ds) // steps)  # events per call
        for i in range(steps):
            one = ds[i * n:(i + 1) * n]
            if len(one) > 1:
                per_call.setdefault(op, []).extend(sorted(one)[:-1])
    helpers = [d for ds in per_call.values() for d in ds]
    out["library_helpers"] = (sum(helpers) / steps, len(helpers) / steps)
    # XLA's scatter kernels pay the calibrated atomic update per element too
    atomic = {sc["name"]: 0 if sc["unique"] else sc["elements"] for sc in scatter_kernels(text, per, kernels)}
    for k in kernels:
        kind = xla_kind(k)
        if kind is None:
            if k.opcode in ("custom-call", "fusion"):
                out["measured_library_us"] += per.get(k.name, 0.0)
            continue
        out["measured_us"][kind] += per.get(k.name, 0.0)
        t_ns, _bound = backend.estimate(OpCost(bytes_read=k.bytes_read, bytes_written=k.bytes_written))
        t_ns += atomic.get(k.name, 0) * getattr(backend, "scatter_element_ns", 0.0)
        out["xla_us"][kind] += t_ns / 1e3
        out["xla_GB"][kind] += (k.bytes_read + k.bytes_written) / 1e9
        out["xla_launches"][kind] += 1
        # per result type, for --kernels: where the rates miss
        line = re.search(r"\n\s*(?:ROOT )?%" + re.escape(k.name) + r" = (\(?[\w]+\[[\d,]*\])", text)
        key = (kind, line.group(1).lstrip("(") if line else "?")
        row = out.setdefault("by_type", {}).setdefault(key, [0, 0.0, 0.0, 0])
        row[0] += 1
        row[1] += per.get(k.name, 0.0)
        row[2] += t_ns / 1e3
        row[3] += k.bytes_read + k.bytes_written
    for r in predicted_kernels(workload(workloads, model, mode), hardware):
        kind = our_kind(r)
        if kind is None:
            # the GPU's idle time around a cuDNN call that calibrated adds to it
            # (library_call_idle_ns) is compared with the measured idle, not the calls
            idle_us = float(r.detail.get("library_idle_ns", 0.0)) * r.executions / 1e3
            out["ours_idle_us"] = out.get("ours_idle_us", 0.0) + idle_us
            out["ours_library_us"] += r.total_time_ns / 1e3 - idle_us
            continue
        out["ours_us"][kind] += r.total_time_ns / 1e3
        out["ours_GB"][kind] += (r.bytes_read + r.bytes_written) * r.executions / 1e9
        out["ours_launches"][kind] += r.launches * r.executions
    return out


def report_types(rec: dict, n: int) -> None:
    """XLA's kernels grouped by kind and result type, the n whose measured time is
    furthest from their bytes at the calibrated rates."""
    rows = sorted(rec.get("by_type", {}).items(), key=lambda kv: -abs(kv[1][1] - kv[1][2]))[:n]
    print("  XLA's kernels furthest from the calibrated rates (by kind and result type):")
    for (kind, rtype), (count, meas, cal, nbytes) in rows:
        print(f"    {count:4d} x {kind:9s} {rtype:34s} {nbytes / 1e9:7.2f} GB {meas / 1e3:8.2f}ms measured "
              f"({nbytes / max(meas, 1e-9) / 1e3:5.0f} GB/s), {cal / 1e3:8.2f}ms calibrated")


def report(rec: dict) -> None:
    if rec["mismatches"]:
        print(f"{rec['model']} {rec['mode']}: the profile does not line up with XLA's schedule ({rec['mismatches']} "
              "mismatches; a program with loops launches its body's kernels once per trip): not compared\n")
        return
    m, x, o = rec["measured_us"], rec["xla_us"], rec["ours_us"]
    print(f"{rec['model']} {rec['mode']}: profile aligned with XLA's schedule, {rec['mismatches']} mismatches")
    print(f"  {'kernels':10s} {'launches xla/ours':>17s} {'GB xla/ours':>14s} {'measured':>9s} {'XLA@cal':>9s} {'ours':>9s}"
          f" {'rates':>8s} {'formation':>9s}")
    tot = [0.0] * 5
    for k in KINDS:
        if not (m[k] or x[k] or o[k]):
            continue
        rate, form = x[k] - m[k], o[k] - x[k]
        print(f"  {k:10s} {rec['xla_launches'][k]:8.0f} / {rec['ours_launches'][k]:<6.0f} "
              f"{rec['xla_GB'][k]:6.2f} / {rec['ours_GB'][k]:<5.2f} {m[k] / 1e3:8.2f}ms {x[k] / 1e3:8.2f}ms {o[k] / 1e3:8.2f}ms"
              f" {rate / 1e3:+7.2f}ms {form / 1e3:+8.2f}ms")
        for j, v in enumerate((m[k], x[k], o[k], rate, form)):
            tot[j] += v
    print(f"  {'total':10s} {'':17s} {'':14s} {tot[0] / 1e3:8.2f}ms {tot[1] / 1e3:8.2f}ms {tot[2] / 1e3:8.2f}ms"
          f" {tot[3] / 1e3:+7.2f}ms {tot[4] / 1e3:+8.2f}ms")
    mc, oc = rec["measured_library_us"], rec["ours_library_us"]
    print(f"  library calls (cuDNN convolutions, cuBLAS and Triton GEMMs; their helper kernels and memsets included): "
          f"measured {mc / 1e3:.2f}ms, ours {oc / 1e3:.2f}ms ({(oc - mc) / 1e3:+.2f}ms)")
    g = rec["idle_gaps"]
    at_calls = g["boundary"][0] + g["within"][0]
    ours_idle = rec.get("ours_idle_us", 0.0)
    print(f"  GPU idle between kernels (no kernel running, first kernel to last, per step): {rec['idle_us'] / 1e3:.2f}ms "
          f"measured; at and within cuDNN calls {at_calls / 1e3:.2f}ms, modeled {ours_idle / 1e3:.2f}ms (library_call_idle_ns)")
    parts = [f"{what} {g[key][0] / 1e3:.2f}ms in {g[key][1]:.0f} gaps ({g[key][0] / max(g[key][1], 1):.2f} us each)"
             for key, what in (("boundary", "at library-call boundaries"), ("within", "within library calls"),
                               ("other", "elsewhere")) if g[key][1]]
    if parts:
        print("    " + "; ".join(parts))
    if rec["library_calls"]:
        print(f"    per cuDNN call: {at_calls / rec['library_calls']:.2f} us of idle at and within it "
              f"({rec['library_calls']} calls per step)")
    h_us, h_n = rec["library_helpers"]
    if h_n:
        print(f"  library calls' helper kernels and memsets (every event of a call but its longest): "
              f"{h_n:.0f} per step, {h_us / 1e3:.2f}ms ({h_us / h_n:.1f} us each)")
    idle_err = ours_idle - at_calls
    print(f"  step error from these parts: {(tot[2] - tot[0] + oc - mc + idle_err) / 1e3:+.2f}ms"
          f" = rates {tot[3] / 1e3:+.2f} + formation {tot[4] / 1e3:+.2f} + library calls {(oc - mc) / 1e3:+.2f}"
          f" + idle at cuDNN calls {idle_err / 1e3:+.2f}")
    print()


def scatter_kernels(hlo_text: str, per: dict, kernels) -> list[dict]:
    """XLA's scatter fusions of an aligned profile: measured time, the elements the
    scatter updates (its updates operand, in the fused computation), whether XLA knows
    the indices unique, and the bytes it moves besides its in-place operand (the other
    operands read, the updated elements read and written)."""
    from costmodel.kernels.xla_hlo import ELEMENT_BYTES, type_bytes

    out = []
    for k in kernels:
        if k.opcode != "fusion" or "scatter" not in k.name:
            continue
        line = re.search(r"\n\s*%" + re.escape(k.name) + r" = [^\n]*", hlo_text)
        callee = re.search(r"calls=(%[\w.\-]+)", line.group(0)) if line else None
        if not callee:
            continue
        start = hlo_text.find("\n" + callee.group(1) + " ")
        body = hlo_text[start:hlo_text.find("\n}", start)]
        root = re.search(r"ROOT %[\w.\-]+ = (\w+)\[[\d,]*\][^ ]* scatter\(%([\w.\-]+), %([\w.\-]+), %([\w.\-]+)\)([^\n]*)", body)
        if not root:
            continue
        dtype, operand, _indices, updates, attrs = root.groups()
        upd = re.search(r"%" + re.escape(updates) + r" = (\w+)\[([\d,]*)\]", body)
        if not upd:
            continue
        elements = 1
        for d in filter(None, upd.group(2).split(",")):
            elements *= int(d)
        params = re.search(r"%" + re.escape(operand) + r" = (\w+\[[\d,]*\])", body)
        inplace = type_bytes(params.group(1)) if params else 0
        moved = k.bytes_read - inplace + 2 * elements * ELEMENT_BYTES[dtype]
        out.append({"name": k.name, "us": per.get(k.name, 0.0), "elements": elements, "dtype": dtype,
                    "unique": "unique_indices=true" in attrs, "moved_bytes": moved})
    return out


def report_scatters(data: str, model: str, backend, mode: str = "train", run: str | None = None) -> None:
    """The time per updated element of XLA's scatter kernels beyond their bytes and
    launch at the calibrated rates: (measured - launch - moved bytes / bandwidth) /
    elements."""
    loaded = load_step(data, model, mode, run)
    if loaded is None:
        print(f"{model}: no profile with XLA's HLO in {data}/{run or mode}")
        return
    text, events, steps = loaded
    per, kernels, bad, _ = align(text, events, steps)
    if bad:
        print(f"{model}: the profile does not line up with XLA's schedule ({bad} mismatches)")
        return
    bw = backend.hardware.memory_bandwidth_GBps * backend.memory_efficiency  # bytes per ns
    for sc in scatter_kernels(text, per, kernels):
        beyond = sc["us"] * 1e3 - backend.launch_ns - sc["moved_bytes"] / bw
        print(f"{model}: {sc['name']}: {sc['us']:.1f} us measured, {sc['elements']:,} {sc['dtype']} elements "
              f"updated{' (unique indices)' if sc['unique'] else ''}, {sc['moved_bytes'] / 1e6:.1f} MB moved "
              f"({sc['moved_bytes'] / bw / 1e3:.1f} us at {bw:.0f} GB/s, launch {backend.launch_ns / 1e3:.2f} us): "
              f"{beyond / max(sc['elements'], 1) * 1e3:.1f} ps per element beyond them")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data", "gpu", "h100-sxm"),
                    help="a folder of gpu_measure.py results with train/hlo.tar and train/traces.tar")
    ap.add_argument("--hardware", default=None, help="hardware spec (default: the data folder's name)")
    ap.add_argument("--models", default=",".join(RESNETS))
    ap.add_argument("--workloads", default=os.path.join(HERE, "data", "workloads"),
                    help="where the 1-device exports are (exported on first use)")
    ap.add_argument("--mode", choices=("train", "inference"), default="train", help="which measured steps (default train)")
    ap.add_argument("--run", help="the run folder under --data (default: the mode's; e.g. train-repeat)")
    ap.add_argument("--kernels", type=int, default=0, metavar="N",
                    help="also list XLA's N kernel types (kind, result type) furthest from the calibrated rates")
    ap.add_argument("--scatters", action="store_true",
                    help="instead: the time per updated element of XLA's scatter kernels beyond their bytes "
                         "(the calibration's scatter_element_ns)")
    args = ap.parse_args(argv)
    from costmodel.backends import make_backend
    from costmodel.hardware import load_hardware

    from costmodel.hardware import SpecError

    if not os.path.isdir(args.data):
        ap.error(f"--data {args.data}: no such folder")
    hardware = args.hardware or os.path.basename(os.path.normpath(args.data))
    try:
        backend = make_backend("calibrated", load_hardware(hardware), {})
    except SpecError as err:
        ap.error(f"{err} (the data folder's name is taken as the hardware; give --hardware)")
    print(f"calibrated backend, {hardware}; measured: {args.data}\n")
    if args.scatters:
        for model in filter(None, args.models.split(",")):
            report_scatters(args.data, model, backend, args.mode, args.run)
        return 0
    for model in filter(None, args.models.split(",")):
        rec = evaluate(args.data, hardware, model, args.workloads, backend, args.mode, args.run)
        if rec is None:
            print(f"{model}: no profile with XLA's HLO in {args.data}/{args.run or args.mode}\n")
            continue
        report(rec)
        if args.kernels and not rec["mismatches"]:
            report_types(rec, args.kernels)
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
