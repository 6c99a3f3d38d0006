"""Time the whole pipeline on ResNet-50 train (4 ranks): annotate-cost, extract-collectives,
Chakra export and the built-in simulator, in process; print the trace directory size.

    python benchmarks/pipeline.py [MODULE.mlir] [--system a100-40gb-x4] [--hardware a100-40gb]
                                  [--granularity region] [--repeat 3]

Each stage is timed on a freshly parsed module; the best of --repeat runs is reported.
Target (issue 4): annotate + extract + Chakra + simulate under 1 s on 2 cores.

    python benchmarks/pipeline.py --llama [MODEL ...] [--mesh fsdp=4] [--seq-len 2048]
                                  [--global-batch 8] [--keep DIR]

LLaMA-3 training steps (issue 10): exports each model (`costmodel workloads export`, not
timed against the target) and runs the tool on it as a user does, each command in its
own process: `stablehlo-opt FILE --propagate-shardings --annotate-cost --extract-collectives`
and `costmodel predict FILE` on the 4 x A100-40GB system. Prints each command's wall time
and peak RSS (the child's ru_maxrss). Target: llama3-1b FSDP on 4 devices under 10 s and
2 GB for each command. Default models: llama3-1b, then the larger 2b, 3b and 8b. Default
global batch 8 at sequence length 2048: the paper's 4096 tokens per device (MaxText
per_device_batch_size=1 at max_target_length=4096).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "..", "shared", "workloads", "resnet_50_train_step_4_devices_1024_batch.mlir")


def _dir_size(path: str) -> tuple[int, int]:
    total = files = 0
    for name in os.listdir(path):
        total += os.path.getsize(os.path.join(path, name))
        files += 1
    return total, files


def run_once(text: str, args, out_dir: str) -> dict:
    from costmodel.chakra.export import run_from_pass
    from costmodel.ir import DiagnosticEngine, load_module, make_context
    from costmodel.passes import PassSession, get_pass, parse_options
    from costmodel.simulate import simulate_dir
    from costmodel.systems import load_system

    times = {}
    t0 = time.perf_counter()
    ctx = make_context()
    module = load_module(ctx, text, "bench")
    times["parse"] = time.perf_counter() - t0
    session = PassSession(diagnostics=DiagnosticEngine("bench"))

    annotate = get_pass("annotate-cost")
    t = time.perf_counter()
    annotate.run(module, parse_options(annotate, f"hardware={args.hardware}"), session)
    times["annotate-cost"] = time.perf_counter() - t

    extract = get_pass("extract-collectives")
    t = time.perf_counter()
    extract.run(module, parse_options(extract, f"system={args.system} chakra=false"), session)
    times["extract-collectives"] = time.perf_counter() - t

    system = load_system(args.system)
    t = time.perf_counter()
    result = run_from_pass(
        module, system, {"chakra": True, "chakra-dir": out_dir, "granularity": args.granularity}, session
    )
    times["chakra export"] = time.perf_counter() - t

    t = time.perf_counter()
    report = simulate_dir(result.directory, system=system)
    times["simulate"] = time.perf_counter() - t
    times["_report"] = report
    times["_result"] = result
    return times


LLAMA_DEFAULT = ("llama3-1b", "llama3-2b", "llama3-3b", "llama3-8b")
TARGET_S, TARGET_RSS_GB = 10.0, 2.0


def _run_measured(cmd: list[str], stdout_path: str | None = None) -> tuple[float, float, int, str]:
    """(wall s, peak RSS GB, exit status, last stderr line) of `cmd` in its own process:
    os.wait4 gives that child's own resource usage (ru_maxrss, KiB on Linux)."""
    import subprocess

    out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    try:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        err = proc.stderr.read().decode(errors="replace")
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
    finally:
        if stdout_path:
            out.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return wall, usage.ru_maxrss / 1024**2, proc.returncode, lines[-1] if lines else ""


def _predicted_step(path: str) -> str:
    """What `costmodel predict --json` predicted (for orientation, not a target)."""
    import json

    try:
        with open(path) as fh:
            row = json.load(fh)["rows"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return ""
    return (
        f"{row['step_time_ms']:.0f} ms (comm {row['comm_ms']:.0f}, exposed {row['exposed_comm_ms']:.0f}), "
        f"peak {row['peak_memory_GiB']:.1f} GiB"
    )


def run_llama(args) -> int:
    bindir = os.path.dirname(sys.executable)
    opt = shutil.which("stablehlo-opt", path=bindir) or "stablehlo-opt"
    cm = shutil.which("costmodel", path=bindir) or "costmodel"
    work = args.keep or tempfile.mkdtemp(prefix="costmodel-llama-")
    os.makedirs(work, exist_ok=True)
    models = args.models or list(LLAMA_DEFAULT)
    print(
        f"system {args.system} (hardware {args.hardware}); mesh {args.mesh}, seq {args.seq_len}, "
        f"global batch {args.global_batch}, bf16"
    )
    print("stablehlo-opt: --propagate-shardings --annotate-cost --extract-collectives; predict: costmodel predict --json")
    header = (
        f"{'model':<12} {'MB':>6} {'export s':>8} | {'stablehlo-opt s':>15} {'GB':>5} | "
        f"{'predict s':>9} {'GB':>5} | predicted step"
    )
    print(header)
    print("-" * len(header))
    failed = False
    for model in models:
        src = os.path.join(work, f"{model}.mlir")
        export = [cm, "workloads", "export", model, "--mesh", args.mesh, "--seq-len", str(args.seq_len),
                  "--global-batch", str(args.global_batch), "--dtype", "bf16", "-o", src]
        ex_s, _, rc, err = _run_measured(export)
        if rc != 0:
            print(f"{model:<12} export failed: {err}")
            failed = True
            continue
        size_mb = os.path.getsize(src) / 1e6
        opt_cmd = [opt, src, "--propagate-shardings", f"--annotate-cost=hardware={args.hardware}",
                   f"--extract-collectives=system={args.system} chakra=false",
                   "-o", os.path.join(work, f"{model}.cost.mlir")]
        o_s, o_gb, rc1, err1 = _run_measured(opt_cmd)
        pred_json = os.path.join(work, f"{model}.predict.json")
        p_s, p_gb, rc2, err2 = _run_measured([cm, "predict", src, "--system", args.system, "--json"], pred_json)
        status = ""
        if rc1 or rc2:
            status = f"  FAILED: {err1 if rc1 else err2}"
            failed = True
        mark = ""
        if model == "llama3-1b":
            ok = max(o_s, p_s) < TARGET_S and max(o_gb, p_gb) < TARGET_RSS_GB
            mark = f"  (target < {TARGET_S:g} s and < {TARGET_RSS_GB:g} GB each: {'met' if ok else 'MISSED'})"
        print(
            f"{model:<12} {size_mb:>6.1f} {ex_s:>8.1f} | {o_s:>15.1f} {o_gb:>5.2f} | {p_s:>9.1f} {p_gb:>5.2f} | "
            f"{_predicted_step(pred_json)}{mark}{status}"
        )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("module", nargs="?", default=DEFAULT)
    p.add_argument("--system", default="a100-40gb-x4")
    p.add_argument("--hardware", default="a100-40gb")
    p.add_argument("--granularity", default="region", choices=("op", "region"))
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--llama", nargs="*", metavar="MODEL", dest="models", default=None,
                   help="LLaMA-3 mode (module doc): these models (default llama3-1b, 2b, 3b, 8b)")
    p.add_argument("--mesh", default="fsdp=4", help="LLaMA mode: the export's mesh (default fsdp=4)")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--keep", metavar="DIR", help="LLaMA mode: keep the exports and outputs in DIR")
    args = p.parse_args(argv)
    if args.models is not None:
        return run_llama(args)
    if not os.path.exists(args.module):
        sys.stderr.write(f"pipeline.py: {args.module} not found\n")
        return 1
    with open(args.module) as fh:
        text = fh.read()
    tmp = tempfile.mkdtemp(prefix="costmodel-bench-")
    try:
        best = None
        for _ in range(max(1, args.repeat)):
            times = run_once(text, args, os.path.join(tmp, "trace"))
            stages = sum(v for k, v in times.items() if not k.startswith("_") and k != "parse")
            if best is None or stages < best[0]:
                best = (stages, times)
        stages, times = best
        report, result = times["_report"], times["_result"]
        size, files = _dir_size(result.directory)
        print(f"module:      {os.path.basename(args.module)}")
        print(f"system:      {args.system} ({result.num_ranks} ranks), hardware {args.hardware}, granularity {args.granularity}")
        for k, v in times.items():
            if not k.startswith("_"):
                print(f"  {k:<22} {v * 1000:8.1f} ms")
        print(f"annotate + extract + Chakra + simulate: {stages * 1000:.1f} ms (target < 1000 ms; parse not included)")
        counts = result.manifest["node_counts"]
        print(f"trace:       {files} files, {size / 1024:.1f} KiB; nodes {sum(counts.values())} {counts}")
        print(f"simulated:   {report.one_line()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
