#!/bin/bash
# One seed of a knowledge recipe: pretrain + finetune + dev evaluation on one thread (run two
# side by side, one per core; report their counts, not their speed; docs/guides/knowledge.md).
#   bash benchmarks/knowledge_seed.sh PRESET SEED      -> runs/seeds/PRESET-seedSEED(.log)
set -e
preset=$1; seed=$2; out=runs/seeds/$preset-seed$seed
cd "$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)" && mkdir -p runs/seeds
export OMP_NUM_THREADS=1
.venv/bin/attnlab pretrain --preset "$preset" --seed "$seed" --out-dir "$out/pretrain" > "$out.log" 2>&1
.venv/bin/attnlab finetune --preset "$preset" --seed "$seed" --init "$out/pretrain" --out-dir "$out/finetune" --eval-file '' >> "$out.log" 2>&1
.venv/bin/attnlab evaluate "$out/finetune" --eval-file data/birth_dev.tsv --stored >> "$out.log" 2>&1
