"""Print the data card of a learned model (its JSON `meta`): where and how its data was
measured, what it was trained on, its held-out metrics. docs/learned-model.md shows the
output for the shipped model.

    python benchmarks/scripts/model_card.py [MODEL.json]   (default: the shipped host-cpu model)
"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from costmodel.backends.learned import shipped_model_path
    from costmodel.learn.model import TreeModel
    from costmodel.learn.train import fmt_metrics

    path = argv[0] if argv else shipped_model_path()
    m = TreeModel.load(path)
    meta = m.meta
    rep = meta.get("training_report", {})
    spec = meta.get("spec", {})
    print(f"model            {path.split('/')[-1]}: {len(m.trees)} trees, target log(time / (roofline + {m.baseline_floor_ns:g} ns))"
          if m.baseline == "roofline" else f"model            {len(m.trees)} trees, target log(time)")
    print(f"parameters       {meta.get('params')}")
    print(f"machine          {meta.get('device')} ({spec.get('name')}: {spec.get('matrix_f32_TFLOPS')} TFLOP/s f32, {spec.get('memory_bandwidth_GBps')} GB/s for the worker count)")
    if meta.get("clock") == "gpu-kernels":  # a GPU model (costmodel.learn.gpu)
        runs = meta.get("measurement", {}).get("runs", [])
        print(f"measured with    {meta.get('runtime')}: GPU kernel time per call from the profiler, median of {runs[0].get('calls') if runs else '?'} calls, "
              f"{len(runs)} run(s); hardware spec {meta.get('hardware')}")
        print("invocation       none: a GPU program's time is its kernels' (no host dispatch)")
    else:
        print(f"measured with    {meta.get('runtime')}, local-task, {meta.get('threads')} worker(s), clock={meta.get('clock')}, pinned={meta.get('pinned')}")
        print(f"invocation       {meta.get('invocation_ns', 0) / 1e3:.1f} us per program (added once, and per loop iteration)")
    print(f"training data    {meta.get('rows')} distinct kernels of {rep.get('all_programs')} programs")
    print(f"programs         {meta.get('programs_by_family')}")
    print(f"kernels by kind  {meta.get('kernels_by_kind')}")
    support = meta.get("support_log_roofline_ns")
    if support:  # beyond it (per kind, the largest roofline time trained on) the fallback answers
        import math

        print("support          " + ", ".join(f"{k} <= {math.expm1(v) / 1e3:.1f} us" for k, v in support.items()) + " of roofline time")
    else:
        print("support          none recorded: the model extrapolates to every kernel")
    if "split" in rep:
        s = rep["split"]
        print(f"held-out split   {s['train_programs']} train / {s['test_programs']} test programs (seed {rep.get('seed')}), {s['test_kernels_unseen']} unseen test kernels")
        print(f"  kernels        {fmt_metrics(rep['held_out_kernel'])}")
        print(f"  programs       {fmt_metrics(rep['held_out_program'])} (fusion={rep.get('fusion')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
