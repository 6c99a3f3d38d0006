#!/usr/bin/env bash
# The measurements the calibrated backend's open questions need (docs/backends.md), for a
# next session with a lent GPU (about 6 minutes of device time; the steps and kernels of
# gpu_session.sh are already in benchmarks/data/gpu/<gpu>):
#   - bandwidth_kinds: which streaming kernel reaches the bandwidth of the steps' large
#     kernels (the H200's 3.24 TB/s calibration against 3.5 TB/s in its steps);
#   - conv_tiles: the tile cuDNN picks per channel count of a 3x3 convolution and its
#     time (the 64-channel ones at 485 TFLOP/s on the H200), and the stride-2 input
#     gradient with and without a consumer that its slice fuses into;
#   - conv: the ResNet convolutions again, now with their kernels' names;
#   - pool: the ResNet stem's max pool and its gradient, and a bf16 scatter-add with
#     overlapping and with unique indices: each kernel's time (the source that should
#     replace scatter_element_ns's, taken from the llama3-100m step's profile);
#   - reduce: the batch-norm statistics again, now each kernel's name and time;
#   - library_gaps: the GPU's idle time at the boundaries of cuDNN calls (a chain of
#     convolutions against a chain of elementwise kernels; 0.4-2.7 ms per H100 ResNet
#     step, not modeled);
#   - the llama3-100m step timed back to back (the 2026-11-27 runs timed it only step by
#     step; gpu_eval.py reads its device time from the profile instead, docs/backends.md):
#     checks that reading.
#
#   OUT=/tmp/out benchmarks/scripts/gpu_followup.sh h200
set -u
GPU="${1:-h200}"
O="${OUT:-/tmp/gpu_followup}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.9
mkdir -p "$O/micro"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
OUT="$O/micro" timeout 300 python3 benchmarks/gpu_measure.py --models "" --llama "" \
    --micro bandwidth_kinds,conv_tiles,conv,pool,reduce,library_gaps > "$O/micro/log.txt" 2>&1
echo "micro ($GPU): exit $?"; grep -v '^[IWE][0-9]' "$O/micro/log.txt" | tail -30
mkdir -p "$O/llama"
OUT="$O/llama" timeout 150 python3 benchmarks/gpu_measure.py --models "" --llama llama3-100m --no-micro \
    > "$O/llama/log.txt" 2>&1
echo "llama ($GPU): exit $?"; grep -v '^[IWE][0-9]' "$O/llama/log.txt" | tail -5
