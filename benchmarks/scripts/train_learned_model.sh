#!/usr/bin/env bash
# Collect the learned model's data on this machine, train it, ship it, evaluate it on
# programs it never saw: the exact sequence that made the shipped model
# (docs/learned-model.md). Hours on a 2-core machine; every measurement is cached in
# $WORK/cache, so an interrupted run resumes where it stopped (and a rerun with the
# cache re-derives every dataset in a minute).
#
#   benchmarks/scripts/train_learned_model.sh [WORKDIR]     # INSTALL=1: also replace the shipped model
#
# Needs the [iree], [jax] and [learn] extras (all in [test]).
set -euo pipefail
WORK="${1:-learned-work}"
mkdir -p "$WORK"
export COSTMODEL_CACHE_DIR="$WORK/cache"
M=(--repeats 5 --min-time-ms 10)

# 1. training corpus: the held-in workloads + 200 generated programs (seed 0), the
#    kernels of two formations (none, xla-tpu), each kernel measured once
costmodel learn collect --out "$WORK/train.jsonl" --programs 200 --seed 0 --held-in --fusion none,xla-tpu "${M[@]}"
# 2. the evaluation programs (seed 1, never a name of the training set), xla-tpu kernels
costmodel learn collect --out "$WORK/eval.jsonl" --programs 60 --seed 1 --exclude "$WORK/train.jsonl" --fusion xla-tpu "${M[@]}"
# 3. more training programs: the families with the widest spread first (seeds 2, 3),
#    then the natural mix (seed 4); never an evaluation program
costmodel learn collect --out "$WORK/train2.jsonl" --programs 250 --seed 2 \
    --families conv,gemm,fft,sort,pool,attention,gather,loop,block,reduce \
    --exclude "$WORK/train.jsonl" --exclude "$WORK/eval.jsonl" --fusion none,xla-tpu "${M[@]}"
costmodel learn collect --out "$WORK/train3.jsonl" --programs 200 --seed 3 --families conv,conv,sort,gemm,fft,pool \
    --exclude "$WORK/train.jsonl" --exclude "$WORK/train2.jsonl" --exclude "$WORK/eval.jsonl" --fusion none,xla-tpu "${M[@]}"
costmodel learn collect --out "$WORK/train4.jsonl" --programs 300 --seed 4 \
    --exclude "$WORK/train.jsonl" --exclude "$WORK/train2.jsonl" --exclude "$WORK/train3.jsonl" --exclude "$WORK/eval.jsonl" \
    --fusion none,xla-tpu "${M[@]}"
TRAIN=("$WORK/train.jsonl" "$WORK/train2.jsonl" "$WORK/train3.jsonl" "$WORK/train4.jsonl")

# 4. model selection on the training data only (5-fold, split by program)
python benchmarks/scripts/learned_cv.py "${TRAIN[@]}"
# 5. the model (DEFAULT_PARAMS, the CV's choice): held-out report on a 20% program split,
#    then refit on every training program; shipped gzipped
costmodel learn train "${TRAIN[@]}" --out "$WORK/host-cpu.json.gz" --test-fraction 0.2 --fusion xla-tpu
# the shipped model is replaced only on request (INSTALL=1)
if [ "${INSTALL:-0}" = 1 ]; then
    cp "$WORK/host-cpu.json.gz" python/costmodel/data/models/host-cpu.json.gz
else
    echo "model in $WORK/host-cpu.json.gz (INSTALL=1 to copy it over python/costmodel/data/models/host-cpu.json.gz)"
fi
python benchmarks/scripts/model_card.py "$WORK/host-cpu.json.gz"

# 6. programs never seen in training: learned vs profiled, calibrated, roofline
costmodel learn eval "$WORK/eval.jsonl" --fusion xla-tpu
python benchmarks/learned_eval.py --programs 60 --seed 1 --cache-dir "$WORK/cache" --json "$WORK/learned_eval.json"
