#!/usr/bin/env python3
"""Our predictions against what benchmarks/gpu_measure.py measured on a real GPU (a
benchmark run by hand; it needs no GPU: it reads the measured files).

    python benchmarks/gpu_eval.py [--data benchmarks/data/gpu/h100-sxm] [--json FILE]
    python benchmarks/gpu_eval.py --data benchmarks/data/gpu/h200 --system h200-x4 \
        --compare benchmarks/data/gpu/h100-sxm:h100-sxm-x4

The measured programs are the per-device steps of the paper's workloads on ONE device
(per-device batch 256, bf16; LLaMA-3: one sequence of 2048 tokens): what each of the 4
devices computes, without the collectives. So the prediction compared is the compute
time of the same program, exported with `devices=1` by the same code
(costmodel.workloads.export; written to --workloads if missing), on the spec of the
measured GPU (--system's hardware). Beside it: the paper tool's (hespas) H100 prediction
of the same per-device compute (../shared/refs/peer_predictions.csv), which also times
no collective.

Sections:
1. step times, measured (10 steps back to back, mean) against each backend and hespas;
   with --compare, the speedup over another measured GPU against the predicted one;
2. kernel launches per step, measured (profiler: GPU kernels, memsets left out) against
   our kernel formation, and where the time goes (measured kernel time by category
   against the calibrated backend's kernels by category, and the convolutions by what
   cuDNN runs: forward, input gradient, filter gradient), per ResNet step; then XLA's
   own fusion kernels by size (HLO bytes against measured time);
3. the microbenchmarks against the calibration of the hardware spec: the time of an
   empty kernel, a fit t = a + bytes / B of the streaming kernels, matmul rates, and
   each ResNet convolution and batch-norm statistics reduction measured against the
   calibrated backend's prediction of it.

Nothing here feeds a parameter; the references are for validation.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import re
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(ROOT, "..", "shared")
RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet200")
PEER_SYSTEM = {"h100-sxm": "H100_80GB_4GPU", "h200": "H200_4GPU", "a100-40gb": "A100_40GB_4GPU", "b200": "B200_4GPU"}
CATEGORIES = ("conv", "gemm", "reduce", "elementwise", "transpose", "scatter", "other")


# ---------------------------------------------------------------------------
# measured side
# ---------------------------------------------------------------------------


def load_runs(data_dir: str) -> dict:
    """{run name: results.json} for each run folder under data_dir."""
    runs = {}
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name, "results.json")
        if os.path.exists(path):
            with open(path) as f:
                runs[name] = json.load(f)
    return runs


def tar_members(path: str) -> dict[str, bytes]:
    if not os.path.exists(path):
        return {}
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def measured_category(name: str) -> str:
    n = name.lower()
    if n.startswith("memset") or n.startswith("memcpy"):
        return "memory-op"
    if any(k in n for k in ("implicit_gemm", "cudnn", "convolution", "nhwc", "fprop", "dgrad", "wgrad")):
        return "conv"
    if any(k in n for k in ("nvjet", "gemm", "cublas", "triton")):
        return "gemm"
    if "scatter" in n:
        return "scatter"
    if "transpose" in n:
        return "transpose"
    if n.startswith("input_") and "reduce" in n:
        return "reduce"
    if n.startswith(("loop_", "wrapped_", "input_")):
        return "elementwise"
    return "other"


CONV_ROLES = ("forward", "backward_input", "backward_filter", "padding", "other")


def measured_conv_role(name: str) -> str:
    """What a cuDNN kernel of the profile computes, from its name: cuDNN's kernels say
    fprop / dgrad / wgrad (xmma and CUTLASS ones alike, the wgrad's workspace
    initialisation included); nhwcAddPaddingKernel is its channel padding; the rest (a
    split-K reduction) is not attributed."""
    n = name.lower()
    for key, role in (("wgrad", "backward_filter"), ("dgrad", "backward_input"), ("fprop", "forward"),
                      ("nhwcaddpadding", "padding")):
        if key in n:
            return role
    return "other"


def gpu_events(trace_gz: bytes) -> list[dict]:
    """The GPU events (kernels, memsets, copies) of a Perfetto trace."""
    data = json.load(gzip.open(io.BytesIO(trace_gz)))
    events = data["traceEvents"] if isinstance(data, dict) else data
    gpu = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
           and "gpu" in e["args"]["name"].lower()}
    return [e for e in events if e.get("ph") == "X" and e["pid"] in gpu]


def trace_kernels(trace_gz: bytes) -> list[tuple[str, float]]:
    """(kernel name, duration in us) of every GPU event of a Perfetto trace."""
    return [(e["name"], float(e.get("dur", 0))) for e in gpu_events(trace_gz)]


def trace_span_us(trace_gz: bytes) -> float:
    """First GPU event's start to the last one's end (us) of a Perfetto trace."""
    spans = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in gpu_events(trace_gz)]
    return max(b for _a, b in spans) - min(a for a, _b in spans) if spans else 0.0


# ---------------------------------------------------------------------------
# predicted side
# ---------------------------------------------------------------------------


def workload(directory: str, model: str, mode: str) -> str:
    """The 1-device export of `model` (exported on first use)."""
    path = os.path.join(directory, f"{model}_{mode}_1_devices.mlir")
    if not os.path.exists(path):
        from costmodel.workloads.export import ExportOptions, LlamaExportOptions, export_text

        if model.startswith("llama"):
            opts = LlamaExportOptions(model=model, mesh={"dp": 1, "fsdp": 1, "tp": 1}, global_batch=1)
        else:
            opts = ExportOptions(model=model, mode=mode, devices=1, global_batch=256)
        os.makedirs(directory, exist_ok=True)
        text = export_text(opts)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return path


def backend_spec(spec: str) -> tuple[str, dict]:
    """'learned:beyond=extrapolate' -> ('learned', {'beyond': 'extrapolate'}): a backend
    with its own options (--backend)."""
    name, _, opts = spec.partition(":")
    return name, dict(kv.split("=", 1) for kv in opts.split(",") if kv)


def predict(path: str, system: str, backend: str):
    from costmodel.pipeline import predict_step

    name, opts = backend_spec(backend)
    with open(path, "rb") as f:
        return predict_step(f.read(), system=system, backend=name, source=os.path.basename(path), backend_options=opts)


def predicted_kernels(path: str, hardware: str, backend: str = "calibrated"):
    """The kernels (costmodel.kernels.report.KernelRow) of the program as predict_step
    forms them (partitioned first when sharded: the LLaMA exports carry a one-device
    mesh; calls inlined)."""
    from costmodel.pipeline import step_kernels

    name, opts = backend_spec(backend)
    with open(path, "rb") as f:
        return step_kernels(f.read(), hardware=hardware, backend=name, source=os.path.basename(path), backend_options=opts)


def predicted_category(row) -> str:
    ops = [o.split(".")[-1] for o in row.ops]
    if row.kind == "conv":
        return "conv"
    if row.kind == "gemm":
        return "gemm"
    if "select_and_scatter" in ops or "scatter" in ops:
        return "scatter"
    if row.kind == "input":
        return "reduce"
    if row.kind == "loop" and ops and ops[-1] == "transpose":
        return "transpose"
    if row.kind == "loop":
        return "elementwise"
    return "other"


def peer_predictions(hardware: str) -> dict:
    out = {}
    path = os.path.join(SHARED, "refs", "peer_predictions.csv")
    if not os.path.exists(path) or hardware not in PEER_SYSTEM:
        return out
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["system"] == PEER_SYSTEM[hardware]:
                out[(row["workload"], row["mode"])] = float(row["predicted_compute_s"]) * 1e3
    return out


# ---------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------


def measured_steps(runs: dict, data_dir: str | None = None) -> dict:
    """{(model, mode): {"ms": step time, "runs": {run: ms}, "how": {run: how}}}: the mean of
    steps run back to back (wall time); where a run has none (the LLaMA steps of the
    2026-11-27 runs), the device time per step of its profile, whose steps also run back
    to back (first kernel to last, over the steps; within 0.7% of the back-to-back wall
    time on every ResNet step of our H100 and H200 runs), else the median of steps timed
    alone (host dispatch included: 9-15% more)."""
    out: dict = {}
    for run_name, res in runs.items():
        traces = None
        for key, rec in res.get("steps", {}).items():
            if "step_s" not in rec:
                continue
            mode = rec["options"].get("mode", "train")
            model = rec["options"]["model"]
            s = rec["step_s"]
            if "back_to_back_mean" in s:
                ms, how = 1e3 * s["back_to_back_mean"], "back to back"
            else:
                ms, how = 1e3 * s["each_median"], "each alone"
                if data_dir is not None:
                    if traces is None:
                        traces = tar_members(os.path.join(data_dir, run_name, "traces.tar"))
                    for fname, blob in traces.items():
                        m = re.match(rf"{re.escape(model)}_{mode}_1_device_(\d+)_steps", fname)
                        if m:
                            ms, how = trace_span_us(blob) / int(m.group(1)) / 1e3, "profile"
                            break
            entry = out.setdefault((model, mode), {"runs": {}, "how": {}})
            entry["runs"][run_name] = ms
            entry["how"][run_name] = how
    for entry in out.values():
        vals = list(entry["runs"].values())
        entry["ms"] = vals[0]
        entry["spread"] = (max(vals) - min(vals)) / min(vals) if len(vals) > 1 else None
    return out


def section_steps(args, runs, doc) -> None:
    from costmodel.systems import load_system

    hardware = load_system(args.system).hardware
    steps = measured_steps(runs, args.data)
    peer = peer_predictions(hardware)
    print(f"== 1. Per-device step time on one {hardware}: measured vs predicted (compute; no collective) ==")
    print(f"{'model':<12} {'mode':<9} {'measured':>9} {'hespas':>14} " + " ".join(f"{b:>17}" for b in args.backend))
    errs = {b: [] for b in [*args.backend, "hespas"]}
    closer = {b: 0 for b in args.backend}
    rows = 0
    keys = [(m, mode) for mode in ("train", "inference") for m in (*RESNETS, "llama3-100m", "llama3-1b")]
    for model, mode in keys:
        if (model, mode) not in steps:
            continue
        meas = steps[(model, mode)]["ms"]
        hes = peer.get((model, mode))
        cells = []
        he = None
        if hes is not None:
            he = (hes - meas) / meas
            errs["hespas"].append(abs(he))
            cells.append(f"{hes:>7.1f} {100 * he:>+5.0f}%")
        else:
            cells.append(f"{'-':>14}")
        path = workload(args.workloads, model, mode)
        rec = {"model": model, "mode": mode, "measured_ms": meas, "measured_runs_ms": steps[(model, mode)]["runs"],
               "hespas_ms": hes, "predicted_ms": {}}
        rows += 1
        for b in args.backend:
            t0 = time.perf_counter()
            p = predict(path, args.system, b)
            e = (p.compute_ms - meas) / meas
            errs[b].append(abs(e))
            if he is not None and abs(e) < abs(he):
                closer[b] += 1
            rec["predicted_ms"][b] = p.compute_ms
            rec.setdefault("kernel_count", {})[b] = p.kernel_count
            rec.setdefault("tool_seconds", {})[b] = time.perf_counter() - t0
            cells.append(f"{p.compute_ms:>9.1f}ms {100 * e:>+5.0f}%")
        doc["steps"].append(rec)
        how = next(iter(steps[(model, mode)]["how"].values()))
        rec["measured_how"] = how
        mark = {"back to back": " ", "profile": "*", "each alone": "+"}[how]
        print(f"{model:<12} {mode:<9} {meas:>7.2f}ms{mark}" + " ".join(cells))
    hows = {r["measured_how"] for r in doc["steps"]}
    if "profile" in hows:
        print("* measured: the device time per step of the run's profile (no back-to-back timing in that run)")
    if "each alone" in hows:
        print("+ measured: the median of steps timed alone, host dispatch included (no back-to-back timing, no profile)")
    print()
    for b in ["hespas", *args.backend]:
        if errs[b]:
            line = f"MAPE {b:<11} {100 * sum(errs[b]) / len(errs[b]):5.1f}% over {len(errs[b])} rows"
            if b in closer:
                with_peer = sum(1 for r in doc["steps"] if r["hespas_ms"] is not None)
                line += f"; closer than hespas on {closer[b]} of {with_peer} rows"
            print(line)
    for mode in ("train", "inference"):
        for b in args.backend:
            pred = [r["predicted_ms"][b] for r in doc["steps"] if r["mode"] == mode and r["model"] in RESNETS]
            if len(pred) == len(RESNETS):
                print(f"ordering resnet18 < ... < resnet200 ({mode}, {b}): {'holds' if pred == sorted(pred) else 'BROKEN'}")
    for b in [b for b in args.backend if backend_spec(b)[0] == "learned"]:  # how much of each step the model itself answers
        shares = []
        for r in doc["steps"]:
            rows = predicted_kernels(workload(args.workloads, r["model"], r["mode"]), hardware, b)
            total = sum(k.total_time_ns for k in rows) or 1.0
            fb = sum(k.total_time_ns for k in rows if k.profile == "fallback")
            r.setdefault("fallback_time_share", {})[b] = fb / total
            shares.append(f"{r['model']} {100 * fb / total:.0f}%")
        print(f"{b}: share of the step's kernel time from its fallback (beyond its training data, or not standalone): "
              + ", ".join(shares))
    spreads = [(k, v["spread"]) for k, v in steps.items() if v["spread"] is not None]
    for (model, mode), spread in spreads:
        print(f"run-to-run spread of the measurement, {model} {mode}: {100 * spread:.1f}% ({steps[(model, mode)]['runs']})")
    print()


def section_compiled(args, runs, doc) -> None:
    """XLA's own optimized modules of the measured steps, costed as given (one kernel per
    XLA launch): our kernel time model alone, without our formation."""
    from costmodel.kernels.xla_hlo import hlo_to_mlir_text, read_hlo_kernels
    from costmodel.pipeline import predict_step

    steps = measured_steps(runs, args.data)
    print("== 1c. XLA's optimized module of each step, costed as it is (its kernels; no formation of ours) ==")
    print(f"{'model':<12} {'mode':<9} {'measured':>9} {'launches XLA / ours':>20} " + " ".join(f"{b:>17}" for b in args.backend))
    errs = {b: [] for b in args.backend}
    seen = set()
    for run_name in runs:
        path = os.path.join(args.data, run_name, "hlo.tar")
        hlos = tar_members(path) if os.path.exists(path) else {}
        for fname in sorted(hlos):
            m = re.match(r"(.+)_(train|inference)_1_device\.hlo\.txt\.gz$", fname)
            if not m or (m.group(1), m.group(2)) not in steps or (m.group(1), m.group(2)) in seen:
                continue
            model, mode = m.group(1), m.group(2)
            seen.add((model, mode))
            meas = steps[(model, mode)]["ms"]
            text = gzip.decompress(hlos[fname]).decode()
            xla = read_hlo_kernels(text)
            module = hlo_to_mlir_text(text)
            cells, launches = [], None
            rec = {"model": model, "mode": mode, "measured_ms": meas, "xla_launches": xla.launches, "predicted_ms": {}}
            for b in args.backend:
                name, opts = backend_spec(b)
                p = predict_step(module, system=args.system, backend=name, source=fname, backend_options=opts)
                launches = p.kernel_count
                e = (p.compute_ms - meas) / meas
                errs[b].append(abs(e))
                rec["predicted_ms"][b] = p.compute_ms
                cells.append(f"{p.compute_ms:>9.1f}ms {100 * e:>+5.0f}%")
            rec["launches"] = launches
            doc.setdefault("compiled", []).append(rec)
            print(f"{model:<12} {mode:<9} {meas:>7.2f}ms  {xla.launches:>9} / {launches:<8}" + " ".join(cells))
    for b in args.backend:
        if errs[b]:
            print(f"MAPE {b:<11} {100 * sum(errs[b]) / len(errs[b]):5.1f}% over {len(errs[b])} compiled modules")
    print()


def section_speedup(args, runs, doc) -> None:
    """This GPU against another measured one (--compare DIR:SYSTEM): the measured speedup
    of each step against each backend's predicted speedup, and whether the prediction
    names the faster GPU."""
    from costmodel.systems import load_system

    other_dir, _, other_system = args.compare.partition(":")
    other = measured_steps(load_runs(other_dir), other_dir)
    here_hw, there_hw = load_system(args.system).hardware, load_system(other_system).hardware
    print(f"== 1b. Speedup of {here_hw} over {there_hw}: measured vs predicted (per-device step) ==")
    peer_here, peer_there = peer_predictions(here_hw), peer_predictions(there_hw)
    print(f"{'model':<12} {'mode':<9} {'measured':>9} {'hespas':>17} " + " ".join(f"{b:>17}" for b in args.backend))
    errs: dict = {b: [] for b in ["hespas", *args.backend]}
    right = {b: 0 for b in errs}
    for rec in doc["steps"]:
        key = (rec["model"], rec["mode"])
        if key not in other:
            continue
        meas = other[key]["ms"] / rec["measured_ms"]
        path = workload(args.workloads, *key)
        cells = []
        out = {"model": key[0], "mode": key[1], "measured": meas, "predicted": {}}
        if key in peer_here and key in peer_there:
            pred = peer_there[key] / peer_here[key]
            e = (pred - meas) / meas
            errs["hespas"].append(abs(e))
            right["hespas"] += (pred > 1) == (meas > 1)
            out["hespas"] = pred
            cells.append(f"{pred:>10.3f}x {100 * e:>+5.0f}%")
        else:
            cells.append(f"{'-':>17}")
        for b in args.backend:
            pred = predict(path, other_system, b).compute_ms / rec["predicted_ms"][b]
            e = (pred - meas) / meas
            errs[b].append(abs(e))
            right[b] += (pred > 1) == (meas > 1)
            out["predicted"][b] = pred
            cells.append(f"{pred:>10.3f}x {100 * e:>+5.0f}%")
        doc.setdefault("speedup", {"over": other_system, "rows": []})["rows"].append(out)
        print(f"{key[0]:<12} {key[1]:<9} {meas:>8.3f}x " + " ".join(cells))
    for b in errs:
        if errs[b]:
            print(f"speedup error {b:<11} mean {100 * sum(errs[b]) / len(errs[b]):4.1f}% over {len(errs[b])} rows; "
                  f"faster GPU named right on {right[b]} of {len(errs[b])}")
    print()


def section_kernels(args, runs, doc) -> None:
    from costmodel.systems import load_system

    hardware = load_system(args.system).hardware
    print("== 2. Kernels per step: measured (profiler) vs our formation; time by category, calibrated (and --backend's others) ==")
    for run_name, res in runs.items():
        traces = tar_members(os.path.join(args.data, run_name, "traces.tar"))
        for fname, blob in sorted(traces.items()):
            m = re.match(r"(.+?)_(train|inference)_1_device_(\d+)_steps", fname)
            if not m or m.group(1) not in (*RESNETS, "llama3-100m") or any(d["model"] == m.group(1) and d["mode"] == m.group(2)
                                                         for d in doc["kernels"]):
                continue
            model, mode, steps = m.group(1), m.group(2), int(m.group(3))
            meas = {c: 0.0 for c in (*CATEGORIES, "memory-op")}
            meas_roles = {c: [0, 0.0] for c in CONV_ROLES}
            count = 0
            for name, dur in trace_kernels(blob):
                c = measured_category(name)
                meas[c] += dur / steps / 1e3
                count += c != "memory-op"
                if c == "conv":
                    role = meas_roles[measured_conv_role(name)]
                    role[0] += 1 / steps
                    role[1] += dur / steps / 1e3
            rows = predicted_kernels(workload(args.workloads, model, mode), hardware)
            pred = {c: 0.0 for c in CATEGORIES}
            pred_roles = {c: [0, 0.0] for c in CONV_ROLES}
            launches = 0
            for r in rows:
                pred[predicted_category(r)] += r.total_time_ns / 1e6
                launches += r.launches * r.executions
                if r.kind == "conv":
                    role = pred_roles[r.conv or "other"]
                    role[0] += r.executions
                    role[1] += r.total_time_ns / 1e6
            kbytes = sum((r.bytes_read + r.bytes_written) * r.executions for r in rows)
            rec = {"model": model, "mode": mode, "measured_kernels_per_step": count / steps,
                   "predicted_launches": launches, "predicted_bytes": kbytes, "measured_ms": meas, "predicted_ms": pred}
            hlos = tar_members(os.path.join(args.data, run_name, "hlo.tar"))
            hname = f"{model}_{mode}_1_device.hlo.txt.gz"
            xla_note = ""
            if hname in hlos:
                from costmodel.kernels.xla_hlo import read_hlo_kernels

                xk = read_hlo_kernels(gzip.decompress(hlos[hname]).decode())
                rec["xla_hlo_launches"], rec["xla_hlo_bytes"] = xk.launches, xk.bytes
                xla_note = (f"; XLA's optimized HLO: {xk.launches} launches ({100 * (launches - xk.launches) / xk.launches:+.0f}%"
                            f" ours), {xk.bytes / 1e9:.2f} GB ({100 * (kbytes - xk.bytes) / xk.bytes:+.0f}% ours: "
                            f"{kbytes / 1e9:.2f} GB)")
            doc["kernels"].append(rec)
            print(f"{model} {mode}: {count / steps:.0f} kernels measured (+{meas['memory-op']:.2f} ms memsets/copies), "
                  f"{launches:.0f} predicted{xla_note}")
            print("   " + " ".join(f"{c:>12}" for c in CATEGORIES) + f" {'total':>9}")
            print("   " + " ".join(f"{meas[c]:>10.2f}ms" for c in CATEGORIES) + f" {sum(meas.values()):>7.2f}ms measured")
            print("   " + " ".join(f"{pred[c]:>10.2f}ms" for c in CATEGORIES) + f" {sum(pred.values()):>7.2f}ms calibrated")
            if meas["conv"]:
                rec["conv_roles"] = {"measured": meas_roles, "calibrated": pred_roles}
                print("   convolutions by what cuDNN runs (kernels, ms; calibrated's forward and filter gradients include their channel padding;"
                      " XLA runs most 1x1 convolutions as GEMMs, measured in the gemm column above):")
                print("   " + "".join(f"{c:>22}" for c in CONV_ROLES))
                print("   " + "".join(f"{n:>9.0f} {t:>9.2f}ms" for n, t in meas_roles.values()) + "  measured")
                print("   " + "".join(f"{n:>9.0f} {t:>9.2f}ms" for n, t in pred_roles.values()) + "  calibrated")
            for b in [b for b in args.backend if b not in ("roofline", "calibrated")]:  # e.g. learned
                other = {c: 0.0 for c in CATEGORIES}
                for r in predicted_kernels(workload(args.workloads, model, mode), hardware, b):
                    other[predicted_category(r)] += r.total_time_ns / 1e6
                rec.setdefault("predicted_ms_by_backend", {})[b] = other
                print("   " + " ".join(f"{other[c]:>10.2f}ms" for c in CATEGORIES) + f" {sum(other.values()):>7.2f}ms {b}")
    print()


def hlo_fusion_bytes(hlo: str) -> dict[str, int]:
    """{kernel name: bytes of its operands + results} of the fusions of XLA's optimized
    HLO (costmodel.kernels.xla_hlo); the profile names a fusion's kernel by the fusion's
    name with '.' -> '_'."""
    from costmodel.kernels.xla_hlo import read_hlo_kernels

    return {k.name.replace(".", "_"): k.bytes_read + k.bytes_written
            for k in read_hlo_kernels(hlo).kernels if k.opcode == "fusion"}


def section_fusion_bandwidth(args, runs, doc) -> None:
    """XLA's own fusion kernels (loop and input fusions), measured time against their
    HLO bytes, by size: the per-kernel floor of small kernels and the bandwidth of big ones."""
    print("== 2b. XLA's fusion kernels: measured time against their HLO bytes (operands + results) ==")
    buckets = ((0, 1e6), (1e6, 1e7), (1e7, 1e8), (1e8, 1e9), (1e9, 1e12))
    for run_name in runs:
        traces = tar_members(os.path.join(args.data, run_name, "traces.tar"))
        hlos = tar_members(os.path.join(args.data, run_name, "hlo.tar"))
        for fname, blob in sorted(traces.items()):
            m = re.match(r"(.+?)_(train|inference)_1_device_(\d+)_steps", fname)
            hname = f"{m.group(1)}_{m.group(2)}_1_device.hlo.txt.gz" if m else None
            if (not m or m.group(1) not in RESNETS or hname not in hlos or m.group(2) != "train"
                    or any(r["model"] == m.group(1) for r in doc["fusion_bandwidth"])):
                continue
            steps = int(m.group(3))
            nbytes = hlo_fusion_bytes(gzip.decompress(hlos[hname]).decode())
            rows = [(nbytes[n], d) for n, d in trace_kernels(blob) if n in nbytes]
            rec = {"model": m.group(1), "buckets": []}
            cells = []
            for lo, hi in buckets:
                sel = sorted(d for b, d in rows if lo <= b < hi)
                if not sel:
                    continue
                moved = sum(b for b, _d in rows if lo <= b < hi)
                t_us = sum(sel)
                rec["buckets"].append({"bytes_from": lo, "bytes_to": hi, "kernels_per_step": len(sel) / steps,
                                       "ms_per_step": t_us / steps / 1e3, "median_us": sel[len(sel) // 2],
                                       "GBps": moved / t_us / 1e3})
                cells.append(f"{lo:.0e}-{hi:.0e} B: {len(sel) / steps:.0f} kernels, median {sel[len(sel) // 2]:.1f} us, "
                             f"{moved / t_us / 1e3:.0f} GB/s")
            doc["fusion_bandwidth"].append(rec)
            print(f"{m.group(1)}: " + "; ".join(cells))
    print()


def section_micro(args, runs, doc) -> None:
    import numpy as np

    from costmodel.hardware import load_hardware
    from costmodel.systems import load_system

    hw = load_hardware(load_system(args.system).hardware)
    cal = hw.calibration
    micro: dict = {}
    for res in runs.values():  # each microbenchmark from the run that has it; convolutions
        for key, value in res.get("micro", {}).items():  # timed by the profiler win
            kernel_timed = key == "conv" and value and "fwd_kernels" in value[0]
            if key not in micro or kernel_timed:
                micro[key] = value
    if not micro:
        return
    print(f"== 3. Microbenchmarks against the calibration of {hw.name} ==")
    out = doc["micro"]
    launches = {name: r["micro"]["launch"]["per_kernel_ns"] for name, r in runs.items() if "launch" in r.get("micro", {})}
    if launches:
        out["launch_ns"] = launches
        cells = ", ".join(f"{ns:.0f} ns ({name})" for name, ns in launches.items())
        print(f"empty kernel (1000 in a chain, XLA): {cells}; spec kernel_launch_ns {cal['kernel_launch_ns']:.0f}")
    if "bandwidth" in micro:
        rows = micro["bandwidth"]
        x = np.array([2 * r["bytes"] for r in rows], float)  # read + written
        t = np.array([r["per_kernel_s"] for r in rows], float)
        a, inv_b = np.linalg.lstsq(np.stack([np.ones_like(x), x], 1), t, rcond=None)[0]
        out["stream_fit"] = {"a_us": a * 1e6, "B_GBps": 1 / inv_b / 1e9}
        big = rows[-1]
        print(f"streaming kernels y = y * a + b, 1 MiB..{big['bytes'] >> 20} MiB: t = {a * 1e6:.2f} us + bytes / "
              f"{1 / inv_b / 1e9:.0f} GB/s (fit); largest {big['GBps_read_plus_written']:.0f} GB/s; spec "
              f"{hw.memory_bandwidth_GBps:.0f} x {cal['memory_efficiency']} = "
              f"{hw.memory_bandwidth_GBps * cal['memory_efficiency']:.0f} GB/s")
    if "matmul" in micro:
        peak = hw.matrix_peak_TFLOPS.get("bf16")
        cells = ", ".join(f"{r['m']}: {r['TFLOPS']:.0f}" for r in micro["matmul"])
        print(f"bf16 matmul TFLOP/s {cells}; spec {peak} x {cal['matrix_efficiency']} = {peak * cal['matrix_efficiency']:.0f}")
    if "conv" in micro:
        print(f"{'convolution':<22} " + " ".join(f"{w + ' ms':>21}" for w in ("fwd", "bwd_input", "bwd_filter")))
        errs = []
        out["conv"] = []
        for row in micro["conv"]:
            preds = conv_predictions(row, args.system)
            cells = []
            for what in ("fwd", "bwd_input", "bwd_filter"):
                m_ms = row[f"{what}_s"] * 1e3
                p_ms = preds[what]
                errs.append(abs(p_ms - m_ms) / m_ms)
                cells.append(f"{m_ms:>6.3f} vs {p_ms:>6.3f} {100 * (p_ms - m_ms) / m_ms:>+4.0f}%")
            out["conv"].append({"name": row["name"], "measured_ms": {w: row[f"{w}_s"] * 1e3 for w in preds},
                                "predicted_ms": preds})
            print(f"{row['name']:<22} " + " ".join(cells))
        timed = "GPU kernel time per call, profiled" if "fwd_kernels" in micro["conv"][0] else "wall time per call"
        print(f"convolutions: calibrated MAPE {100 * sum(errs) / len(errs):.1f}% over {len(errs)} kernels "
              f"(measured: {timed}; each convolution alone)")
    if "reduce" in micro:
        errs = []
        out["reduce"] = []
        print(f"{'batch-norm statistics of':<24} {'measured':>9} {'predicted':>9}  launches (XLA / ours)")
        for row in micro["reduce"]:
            p = reduce_prediction(row, args.system)
            m_ms = (row["kernel_s"] or row["wall_s"]) * 1e3
            errs.append(abs(p.compute_ms - m_ms) / m_ms)
            out["reduce"].append({"shape": row["shape"], "measured_ms": m_ms, "predicted_ms": p.compute_ms,
                                  "measured_kernels": row["kernels_per_call"], "predicted_launches": p.kernel_count})
            shape = "x".join(map(str, row["shape"]))
            print(f"{shape:<24} {m_ms:>7.4f}ms {p.compute_ms:>7.4f}ms {100 * (p.compute_ms - m_ms) / m_ms:>+4.0f}%  "
                  f"{row['kernels_per_call']:.0f} / {p.kernel_count}")
        print(f"batch-norm statistics: calibrated MAPE {100 * sum(errs) / len(errs):.1f}% over {len(errs)} shapes")
    print()


def reduce_prediction(row: dict, system: str):
    """The calibrated backend on the measured batch-norm statistics (sum and sum of
    squares over N, H, W in f32 of a bf16 activation), lowered by jax as
    gpu_measure.py ran it."""
    import jax
    import jax.numpy as jnp

    from costmodel.pipeline import predict_step

    def stats(x):
        xf = x.astype(jnp.float32)
        return jnp.sum(xf, axis=(0, 1, 2)), jnp.sum(xf * xf, axis=(0, 1, 2))

    text = jax.jit(stats).lower(jax.ShapeDtypeStruct(tuple(row["shape"]), jnp.bfloat16)).as_text()
    return predict_step(text, system=system, backend="calibrated")


def conv_predictions(row: dict, system: str) -> dict:
    """The calibrated backend's time of the measured convolution, its input gradient and
    its filter gradient, each lowered by jax as gpu_measure.py ran it."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    b, h, w, cin, cout, k, s = (row[x] for x in ("batch", "h", "w", "c_in", "c_out", "kernel", "stride"))

    def conv(x, wt):
        return lax.conv_general_dilated(x, wt, (s, s), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    x = jax.ShapeDtypeStruct((b, h, w, cin), jnp.bfloat16)
    wt = jax.ShapeDtypeStruct((k, k, cin, cout), jnp.bfloat16)
    y = jax.eval_shape(conv, x, wt)
    g = jax.ShapeDtypeStruct(y.shape, jnp.bfloat16)
    fns = {
        "fwd": (jax.jit(conv), (x, wt)),
        "bwd_input": (jax.jit(lambda x, wt, g: jax.vjp(lambda x: conv(x, wt), x)[1](g)[0]), (x, wt, g)),
        "bwd_filter": (jax.jit(lambda x, wt, g: jax.vjp(lambda wt: conv(x, wt), wt)[1](g)[0]), (x, wt, g)),
    }
    from costmodel.pipeline import predict_step

    return {what: predict_step(fn.lower(*a).as_text(), system=system, backend="calibrated").compute_ms
            for what, (fn, a) in fns.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data", "gpu", "h100-sxm"))
    ap.add_argument("--system", default="h100-sxm-x4", help="system whose hardware was measured (default h100-sxm-x4)")
    ap.add_argument("--workloads", metavar="DIR", default=os.path.join(HERE, "data", "workloads"),
                    help="directory of the one-device exports, written there on first use (default: benchmarks/data/workloads)")
    ap.add_argument("--backend", action="append",
                    help="default: roofline and calibrated; NAME:KEY=VALUE,... gives a backend its options (learned:beyond=extrapolate)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--skip", action="append", default=[], choices=("steps", "compiled", "kernels", "micro"))
    ap.add_argument("--compare", metavar="DIR:SYSTEM", help="another GPU's measurements (e.g. benchmarks/data/gpu/h100-sxm:h100-sxm-x4): measured vs predicted speedup")
    args = ap.parse_args(argv)
    args.backend = args.backend or ["roofline", "calibrated"]
    runs = load_runs(args.data)
    if not runs:
        print(f"no measurements under {args.data}", file=sys.stderr)
        return 1
    env = next(iter(runs.values()))["env"]
    print(f"measured on {', '.join(env.get('devices', []))} with jax {env.get('jax')} "
          f"({', '.join(runs)}); predicted for {args.system}\n")
    doc = {"system": args.system, "env": env, "steps": [], "kernels": [], "fusion_bandwidth": [], "micro": {}}
    if "steps" not in args.skip:
        section_steps(args, runs, doc)
        if args.compare:
            section_speedup(args, runs, doc)
    if "compiled" not in args.skip:
        section_compiled(args, runs, doc)
    if "kernels" not in args.skip:
        section_kernels(args, runs, doc)
    if "kernels" not in args.skip:
        section_fusion_bandwidth(args, runs, doc)
    if "micro" not in args.skip:
        section_micro(args, runs, doc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
