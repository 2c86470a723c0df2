#!/bin/bash
# Finetune a pretrained model again with a preset's finetuning (e.g. after a change that touches
# only finetuning), then score dev with stored facts.
#   bash benchmarks/knowledge_refinetune.sh PRESET SEED PRETRAINED_RUN OUT_RUN [THREADS]
set -e
preset=$1; seed=$2; pre=$3; out=$4; export OMP_NUM_THREADS=${5:-1}
cd "$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
.venv/bin/attnlab finetune --preset "$preset" --seed "$seed" --init "$pre" --out-dir "$out" --eval-file '' > "$out.log" 2>&1
.venv/bin/attnlab evaluate "$out" --eval-file data/birth_dev.tsv --stored --json > "$out.eval.json" 2>> "$out.log"
