#!/usr/bin/env bash
# Collect the learned model's data on this machine, train it, ship it, evaluate it on
# programs it never saw (docs/learned-model.md). Hours on a 2-core machine; every
# measurement is cached in $CACHE, so an interrupted run resumes where it stopped.
#
#   benchmarks/scripts/train_learned_model.sh [WORKDIR]
#
# Needs the [iree], [jax] and [learn] extras (all in [test]).
set -euo pipefail
WORK="${1:-learned-work}"
CACHE="$WORK/cache"
mkdir -p "$WORK"
export COSTMODEL_CACHE_DIR="$CACHE"
PROGRAMS="${PROGRAMS:-300}"
EVAL_PROGRAMS="${EVAL_PROGRAMS:-60}"

# 1. training data: the held-in workloads + a generated corpus (seed 0), their kernels
#    under three formations, each kernel measured once (IREE llvm-cpu, 1 worker, median)
costmodel learn collect --out "$WORK/train.jsonl" --programs "$PROGRAMS" --seed 0 --held-in \
    --repeats 5 --min-time-ms 10

# 2. the model: held-out report on a 20% program split, then refit on every program
costmodel learn train "$WORK/train.jsonl" --out "$WORK/host-cpu.json" --test-fraction 0.2 --fusion xla-tpu
cp "$WORK/host-cpu.json" python/costmodel/data/models/host-cpu.json

# 3. programs never seen in training (seed 1, minus every name of the training set):
#    whole programs and kernels measured into the same cache, then the comparison
costmodel learn collect --out "$WORK/eval.jsonl" --programs "$EVAL_PROGRAMS" --seed 1 \
    --exclude "$WORK/train.jsonl" --fusion xla-tpu --repeats 5 --min-time-ms 10
costmodel learn eval "$WORK/eval.jsonl" --model python/costmodel/data/models/host-cpu.json --fusion xla-tpu
python benchmarks/learned_eval.py --programs "$EVAL_PROGRAMS" --seed 1 --cache-dir "$CACHE" --json "$WORK/learned_eval.json"
