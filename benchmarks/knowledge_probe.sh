#!/bin/bash
# A knowledge probe on held-out people (docs/notebook.md, 2026-11-25, the ablation table): pretrain
# PRESET with the last 20% of the training file held out (their corpus lines are pretrained as
# plain lines, like dev people's) and the given pretraining flags, scoring the held-out people
# every EVAL_EVERY steps; finetune with the preset's own finetuning (the read-out people drawn
# from the other 1,600); then score the held-out people with --stored. One thread: run two
# side by side, one per core, and report their counts, not their speed. FINETUNE_FLAGS (an
# environment variable) adds finetuning flags, e.g. the same --mix-people.
#   bash benchmarks/knowledge_probe.sh NAME PRESET EVAL_EVERY [PRETRAIN FLAGS...]   -> runs/p/NAME(.log)
set -e
name=$1; preset=$2; every=$3; shift 3
cd "$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)" && mkdir -p runs/p
tail -n 400 data/birth_places_train.tsv > runs/p/holdout.tsv
export OMP_NUM_THREADS=1
out=runs/p/$name
.venv/bin/attnlab pretrain --preset "$preset" --holdout-fraction 0.2 --eval-file runs/p/holdout.tsv \
  --eval-every "$every" --out-dir "$out/pretrain" "$@" > "$out.log" 2>&1
.venv/bin/attnlab finetune --preset "$preset" --holdout-fraction 0.2 --read-out-people 1100 \
  --init "$out/pretrain" --out-dir "$out/finetune" --eval-file '' $FINETUNE_FLAGS >> "$out.log" 2>&1
.venv/bin/attnlab evaluate "$out/finetune" --eval-file runs/p/holdout.tsv --stored >> "$out.log" 2>&1
