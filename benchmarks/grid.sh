#!/bin/bash
# Comparison cells in parallel: one `attnlab compare` process per group of arguments, each in its
# own output directory, all recording their finished (variant, seed) cells in one records
# directory (cells already recorded with the same settings are reused, not trained again), all
# stopped at a deadline so that a lent accelerator's time is never overrun; finished cells stay
# recorded, and the same command continues the interrupted ones (docs/guides/variants.md).
#   bash benchmarks/grid.sh OUT RECORDS SECONDS 'COMMON ARGS' 'GROUP 1 ARGS' ['GROUP 2 ARGS' ...]
# e.g. bash benchmarks/grid.sh runs/grid benchmarks/records/compare 3000 \
#        '--preset cpu5 --seeds 3 --no-scratch --device cpu' '--variants vanilla' '--variants rotary'
# A variant's seeds can be split between groups: '--variants argmax --only-seeds 1' '--variants argmax --only-seeds 2'.
# Logs: OUT/gK.log; prints each group's exit code (124: stopped at the deadline).
set -u
out=$1; records=$2; seconds=$3; common=$4; shift 4
python=${PYTHON:-python3}
mkdir -p "$out"
groups=("$@")
pids=()
k=0
for group in "${groups[@]}"; do
    # shellcheck disable=SC2086 # the argument strings are split into words on purpose
    timeout --signal=INT --kill-after=30 "$seconds" "$python" -m attnlab compare $common $group \
        --records "$records" --out-dir "$out/g$k" --resume > "$out/g$k.log" 2>&1 &
    pids+=($!)
    k=$((k + 1))
done
k=0
status=0
for pid in "${pids[@]}"; do
    wait "$pid"; rc=$?
    echo "group $k (${groups[$k]}): exit $rc"
    [ "$rc" -eq 0 ] || status=1
    k=$((k + 1))
done
exit $status
