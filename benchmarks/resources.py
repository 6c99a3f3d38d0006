#!/usr/bin/env python3
"""Time and peak memory of large inputs (issue 12, "Resources"; a benchmark, not a test).

    python benchmarks/resources.py                    # every case
    python benchmarks/resources.py --case pipeline-100k --profile   # cProfile of one case

Every case runs in a fresh process (`stablehlo-opt` / `costmodel`), and the wall time and
peak RSS of that process are reported (os.wait4). Modules are generated here:

  annotate-1m     ~1,000,000 ops (benchmarks/annotate.py's mixed MLP functions):
                  stablehlo-opt M --annotate-cost=hardware=a100-40gb -o OUT
                  target: < 20 s, < 2 GB
  pipeline-100k   100,000 ops with 20,000 all_reduces on 8 replicas (two groups of 4 and
                  all 8 alternate): annotate-cost + extract-collectives + Chakra trace +
                  built-in simulator (simulate=true). target: < 10 s, < 1 GB
  predict-100k    the same module through `costmodel predict` (the all-reduce combiner
                  walks its 20,000 dependent all-reduces)
  loop-600k       a while loop of 600,000 trips with one all_reduce (issue 12 item 13):
                  `costmodel predict` (simulated in memory from the compact loop) and
                  `costmodel simulate` on the written trace (--write-loop: also writing
                  the 7.2M-node trace, ~1 min)
  npus-65k        ResNet-50 (4 devices) on a 65,536-NPU Switch system: the trace has
                  65,536 ranks (idle ones empty); extract-collectives + simulate=true
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

AR = """({{
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }})"""


def pipeline_module(collectives: int = 20_000) -> tuple[str, int]:
    """A per-device program on 8 replicas: per step multiply, add, all_reduce (with its
    2-op body) = 5 ops; groups alternate between [[0..3],[4..7]] and [[0..7]]."""
    lines = ["module attributes {mhlo.num_replicas = 8 : i32, mhlo.num_partitions = 1 : i32} {",
             "  func.func @main(%x: tensor<1024x256xf32>, %y: tensor<1024x256xf32>) -> tensor<1024x256xf32> {"]
    t = "tensor<1024x256xf32>"
    cur, ops = "%x", 2
    body = AR.replace("{{", "{").replace("}}", "}")
    for i in range(collectives):
        groups = "dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>" if i % 2 else "dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>"
        lines.append(f"    %m{i} = stablehlo.multiply {cur}, %y : {t}")
        lines.append(f"    %s{i} = stablehlo.add %m{i}, {cur} : {t}")
        lines.append(f'    %a{i} = "stablehlo.all_reduce"(%s{i}) <{{replica_groups = {groups}}}> {body} : ({t}) -> {t}')
        cur = f"%a{i}"
        ops += 5
    lines.append(f"    return {cur} : {t}")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n", ops + 1


def run(cmd: list[str], env=None) -> tuple[float, float, int, str]:
    """(wall s, peak RSS MB, exit status, stderr tail) of one process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = proc.stderr.read().decode(errors="replace")
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, proc.returncode, err.strip().splitlines()[-1:] and err.strip().splitlines()[-1] or ""


def opt() -> list[str]:
    exe = shutil.which("stablehlo-opt")
    return [exe] if exe else [sys.executable, "-m", "costmodel.driver"]


def costmodel() -> list[str]:
    exe = shutil.which("costmodel")
    return [exe] if exe else [sys.executable, "-m", "costmodel.cli"]


def case_annotate_1m(tmp: str):
    from annotate import generate_module

    text, n = generate_module(1_000_000)
    path = os.path.join(tmp, "m1.mlir")
    open(path, "w").write(text)
    yield f"annotate-1m ({n:,} ops, {len(text) / 1e6:.0f} MB)", opt() + [path, "--annotate-cost=hardware=a100-40gb", "-o", os.path.join(tmp, "o.mlir")], (20, 2048)


def case_pipeline_100k(tmp: str):
    text, n = pipeline_module()
    path = os.path.join(tmp, "p100k.mlir")
    open(path, "w").write(text)
    yield (
        f"pipeline-100k ({n:,} ops, 20,000 collectives)",
        opt() + [path, "--annotate-cost=hardware=h100-sxm",
                 f"--extract-collectives=system=dgx-h100 chakra-dir={os.path.join(tmp, 'p.chakra')} simulate=true",
                 "-o", os.path.join(tmp, "o.mlir")],
        (10, 1024),
    )


def case_predict_100k(tmp: str):
    """The pipeline-100k module through `costmodel predict` (annotate, XLA GPU's
    all-reduce combiner over its 20,000 dependent all-reduces, extract, simulate)."""
    text, n = pipeline_module()
    path = os.path.join(tmp, "p100k.mlir")
    open(path, "w").write(text)
    yield f"predict-100k ({n:,} ops, 20,000 all-reduces)", costmodel() + ["predict", path, "--system", "dgx-h100", "--top", "0"], None


def case_loop_600k(tmp: str, write: bool = False):
    src = os.path.join(REPO, "tests", "data", "collectives", "loop_1e9_all_reduce.mlir")
    path = os.path.join(tmp, "loop600k.mlir")
    open(path, "w").write(open(src).read().replace("1000000000", "600000"))
    yield "loop-600k predict (in memory)", costmodel() + ["predict", path, "--system", "a100-40gb-x4"], (10, 1024)
    if write:
        d = os.path.join(tmp, "loop.chakra")
        yield (
            "loop-600k write the full trace",
            opt() + [path, "--annotate-cost=hardware=a100-40gb", f"--extract-collectives=system=a100-40gb-x4 chakra-dir={d}",
                     "-o", os.path.join(tmp, "o.mlir")],
            None,
        )
        yield "loop-600k costmodel simulate DIR", costmodel() + ["simulate", d], (10, 1024)


def case_npus_65k(tmp: str):
    from costmodel.systems import load_system

    doc = load_system("dgx-h100").to_json()
    doc["name"] = "switch-65536"
    doc["network"][0]["npus_count"] = 65536
    sys_path = os.path.join(tmp, "switch-65536.json")
    open(sys_path, "w").write(json.dumps(doc))
    yield (
        "npus-65k (ResNet-50 on 65,536 NPUs)",
        opt() + [os.path.join(REPO, "examples", "resnet50_train_4dev.mlir"), "--annotate-cost=hardware=h100-sxm",
                 f"--extract-collectives=system={sys_path} chakra-dir={os.path.join(tmp, 'n.chakra')} simulate=true",
                 "-o", os.path.join(tmp, "o.mlir")],
        None,
    )


CASES = {
    "annotate-1m": case_annotate_1m,
    "pipeline-100k": case_pipeline_100k,
    "predict-100k": case_predict_100k,
    "loop-600k": case_loop_600k,
    "npus-65k": case_npus_65k,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="run only these (repeatable)")
    ap.add_argument("--write-loop", action="store_true", help="loop-600k: also write and re-read the full trace")
    ap.add_argument("--profile", action="store_true", help="cProfile the (single) case's command in process, top 25")
    args = ap.parse_args(argv)
    names = args.case or list(CASES)
    tmp = tempfile.mkdtemp(prefix="costmodel-resources-")
    try:
        print(f"{'case':<48} {'wall':>8} {'peak RSS':>10}  target")
        for name in names:
            gen = CASES[name](tmp, args.write_loop) if name == "loop-600k" else CASES[name](tmp)
            for label, cmd, target in gen:
                if args.profile:
                    prof = os.path.join(tmp, "prof.out")
                    cmd = [sys.executable, "-m", "cProfile", "-o", prof, *(["-m", "costmodel.driver"] if "stablehlo-opt" in cmd[0] else ["-m", "costmodel.cli"]), *cmd[1:]]
                wall, rss, rc, tail = run(cmd)
                verdict = ""
                if target:
                    ok = wall < target[0] and rss < target[1]
                    verdict = f"< {target[0]} s, < {target[1] / 1024:g} GB: {'met' if ok else 'NOT met'}"
                status = "" if rc == 0 else f"  (exit {rc}: {tail})"
                print(f"{label:<48} {wall:>7.2f}s {rss:>8.0f}MB  {verdict}{status}", flush=True)
                if args.profile:
                    import pstats

                    pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"({os.cpu_count()} CPUs; one fresh process per row; peak RSS of that process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
