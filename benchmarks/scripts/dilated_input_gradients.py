"""Strided convolutions' input gradients on a real GPU against the calibrated backend
(a benchmark run by hand; it needs no GPU: it reads measured files).

An input gradient of a stride-s convolution is a convolution over the output gradient
dilated by s (lhs_dilate = s): most of its filter taps meet the holes. XLA counts the
flops of the taps on data only; cuDNN's time is that of the dense problem, holes
included (the source of `conv_dilated_input_holes` in the NVIDIA hardware specs).
This prints, for every input-dilated convolution kernel that benchmarks/gpu_kernels.py
measured (the ResNet-18 step at batch 32, kernel by kernel), the measured time and the
calibrated prediction with and without the holes.

    python benchmarks/scripts/dilated_input_gradients.py [--data benchmarks/data/gpu/h200/kernels] [--hardware h200]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measured_kernels(data: str):
    """(plan row, measurement) of every measured kernel program with an input-dilated
    convolution, each distinct program once."""
    results = {}
    for path in sorted(glob.glob(os.path.join(data, "measured-*.json"))):
        with open(path) as fh:
            results.update(json.load(fh)["results"])
    seen = set()
    for path in sorted(glob.glob(os.path.join(data, "*.jsonl.gz"))):
        with gzip.open(path) as fh:
            for line in fh:
                row = json.loads(line)
                if row.get("type") != "kernel" or row["signature"] in seen:
                    continue
                if not re.search(r"lhs_dilate = \[[^\]]*[2-9]", row["text"]):
                    continue
                seen.add(row["signature"])
                res = results.get(row["signature"])
                if res and res.get("status") == "measured":
                    yield row, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "data", "gpu", "h200", "kernels"))
    ap.add_argument("--hardware", default="h200")
    args = ap.parse_args(argv)

    import tempfile

    from costmodel.hardware import read_preset_or_file
    from costmodel.pipeline import step_kernels

    # the same spec without the holes: the taps on data only, as XLA counts flops
    raw, _where = read_preset_or_file("hardware", args.hardware)
    raw["calibration"].pop("conv_dilated_input_holes", None)
    tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(raw, tmp)
    tmp.close()
    spec, no_holes = args.hardware, tmp.name

    rows = list(measured_kernels(args.data))
    if not rows:
        print(f"no measured input-dilated convolution under {args.data}", file=sys.stderr)
        return 1
    print(f"{'convolution (output gradient, filter -> input gradient)':80s} {'measured':>9s} {'holes':>14s} {'data taps':>14s}")
    err_holes, err_data = [], []
    for row, res in rows:
        conv = next(line for line in row["text"].splitlines() if "stablehlo.convolution" in line)
        types = conv.split(" : ")[-1]
        meas = res["kernel_ns"] / 1e3
        t_holes = sum(k.total_time_ns for k in step_kernels(row["text"].encode(), hardware=spec, backend="calibrated")) / 1e3
        t_data = sum(k.total_time_ns for k in step_kernels(row["text"].encode(), hardware=no_holes, backend="calibrated")) / 1e3
        err_holes.append(abs(t_holes - meas) / meas)
        err_data.append(abs(t_data - meas) / meas)
        print(f"{types[:80]:80s} {meas:7.1f}us {t_holes:7.1f}us {100 * (t_holes - meas) / meas:+4.0f}% "
              f"{t_data:7.1f}us {100 * (t_data - meas) / meas:+4.0f}%")
    os.unlink(no_holes)
    print(f"MAPE over {len(rows)} kernels: with the holes {100 * sum(err_holes) / len(rows):.1f}%, "
          f"taps on data only {100 * sum(err_data) / len(rows):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
