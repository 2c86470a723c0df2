#!/bin/bash
# A read-out probe on held-out people (docs/notebook.md, 2026-11-25, change 5): finetune cpu15's
# pretrained model with the last 20% of the training file held out and N read-out people, then
# score reading the place out of the held-out people's own lines (--open-book).
#   bash benchmarks/read_out_probe.sh NAME EPOCHS LR READ_OUT_PEOPLE   -> runs/ro/NAME
set -e
cd "$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)" && mkdir -p runs/ro
tail -n 400 data/birth_places_train.tsv > runs/ro/holdout.tsv
OMP_NUM_THREADS=1 .venv/bin/attnlab finetune --init runs/knowledge-cpu15/pretrain --out-dir "runs/ro/$1" \
  --holdout-fraction 0.2 --read-out-people "$4" --epochs "$2" --learning-rate "$3" --eval-file runs/ro/holdout.tsv > "runs/ro/$1.log" 2>&1
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/knowledge.py --open-book "runs/ro/$1:$1" --eval-file runs/ro/holdout.tsv
