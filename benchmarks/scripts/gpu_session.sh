#!/usr/bin/env bash
# One call on a lent GPU machine (about 9 minutes): the learned model's GPU kernels
# (benchmarks/gpu_kernels.py measure, the plans under benchmarks/data/gpu/<gpu>/kernels,
# the evaluation programs first so that a run out of time keeps them),
# then the training steps and microbenchmarks (benchmarks/gpu_measure.py). Each part is
# time-limited and writes its files as it goes, so one that runs out keeps what it did.
#
#   OUT=/tmp/out benchmarks/scripts/gpu_session.sh h200
set -u
GPU="${1:-h200}"
O="${OUT:-/tmp/gpu_session}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.9
mkdir -p "$O/kernels" "$O/train"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
timeout 210 python3 benchmarks/gpu_kernels.py measure benchmarks/data/gpu/"$GPU"/kernels/{eval,train_wl,train_corpus}.jsonl.gz \
    -o "$O/kernels/measured.json" --deadline-s 180 --jobs 8 > "$O/kernels/log.txt" 2>&1
echo "kernels: exit $?"; tail -3 "$O/kernels/log.txt"
OUT="$O/train" timeout 320 python3 benchmarks/gpu_measure.py --models resnet18,resnet50,resnet34,resnet101 \
    --llama llama3-100m > "$O/train/log.txt" 2>&1
echo "steps: exit $?"; grep -v '^[IWE][0-9]' "$O/train/log.txt" | tail -30
